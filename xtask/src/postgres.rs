//! What the Umami database import test needs: Debian's PostgreSQL server binaries (`initdb`,
//! `pg_ctl`, `postgres`), installed with apt when missing. The test starts its own server from
//! them in a temporary directory on a free loopback port and stops it; it finds them through
//! `TALLY_PG_BIN`, and `TALLY_REQUIRE_POSTGRES=1` makes it fail, rather than skip, without them.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::browser::apt_install;

/// Installs PostgreSQL when it is missing and returns the variables the test reads.
pub fn install() -> Result<Vec<(String, String)>> {
    let bin = match std::env::var("TALLY_PG_BIN") {
        Ok(dir) => PathBuf::from(dir),
        Err(_) => match find() {
            Some(dir) => dir,
            None => {
                eprintln!("xtask: installing Debian's postgresql for the Umami database import test");
                apt_install(&["postgresql"])?;
                find().context("postgresql was installed but no /usr/lib/postgresql/*/bin/initdb is there")?
            }
        },
    };
    Ok(vec![
        ("TALLY_PG_BIN".to_owned(), bin.display().to_string()),
        ("TALLY_REQUIRE_POSTGRES".to_owned(), "1".to_owned()),
    ])
}

/// The newest `/usr/lib/postgresql/VERSION/bin` holding `initdb` and `pg_ctl`.
fn find() -> Option<PathBuf> {
    let mut dirs: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse::<u32>().ok()?, e.path().join("bin"))))
        .filter(|(_, bin)| has(bin, "initdb") && has(bin, "pg_ctl"))
        .collect();
    dirs.sort();
    dirs.pop().map(|(_, bin)| bin)
}

fn has(dir: &Path, name: &str) -> bool {
    dir.join(name).is_file()
}
