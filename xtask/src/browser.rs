//! What the browser tests need: Debian's Chromium (installed with apt when it is missing) and,
//! from npm into the git-ignored `.tools/browser`, playwright-core to drive it and Plausible's
//! official tracker package and Umami's tracker script (taken from Umami's package with `npm
//! pack`, without its dependencies) to check that both work against Tally unchanged. The tests find them
//! through `TALLY_CHROMIUM` and `TALLY_NODE_MODULES`; `TALLY_REQUIRE_BROWSER=1` makes a test
//! fail, rather than skip, when they are missing.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::emulators::run_quietly;

/// The playwright-core release the tests are written against.
const PLAYWRIGHT_VERSION: &str = "1.65.1";
/// Plausible's tracker package, driven by the tests as a site would use it.
const PLAUSIBLE_TRACKER_VERSION: &str = "0.4.6";
/// The Umami release whose tracker (`src/tracker/index.js`, plain browser JavaScript) the tests
/// serve unchanged; only that file is taken from the package, not Umami's dependencies.
const UMAMI_VERSION: &str = "2.10.0";

/// Installs what is missing and returns the variables the tests read.
pub fn install(root: &Path) -> Result<Vec<(String, String)>> {
    let chromium = chromium()?;
    let modules = node_modules(&root.join(".tools/browser"))?;
    Ok(vec![
        ("TALLY_CHROMIUM".to_owned(), chromium.display().to_string()),
        ("TALLY_NODE_MODULES".to_owned(), modules.display().to_string()),
        ("TALLY_REQUIRE_BROWSER".to_owned(), "1".to_owned()),
    ])
}

/// A Chromium binary: `TALLY_CHROMIUM`, one on the machine, or Debian's package installed now.
fn chromium() -> Result<PathBuf> {
    if let Ok(path) = std::env::var("TALLY_CHROMIUM") {
        return Ok(PathBuf::from(path));
    }
    let known = ["/usr/bin/chromium", "/usr/bin/chromium-browser"];
    if let Some(found) = known.iter().map(PathBuf::from).find(|p| p.is_file()) {
        return Ok(found);
    }
    eprintln!("xtask: installing Debian's chromium for the browser tests");
    apt_install(&["chromium", "fonts-dejavu-core"])?;
    known
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .context("chromium was installed but /usr/bin/chromium is missing")
}

/// `apt-get install` of Debian's `packages` (through `sudo -n` when not root), after an
/// `apt-get update` when the first try fails (a machine whose package lists are stale or absent).
pub(crate) fn apt_install(packages: &[&str]) -> Result<()> {
    let root = Command::new("id").arg("-u").output().map(|o| o.stdout.starts_with(b"0")).unwrap_or(false);
    let apt = |args: &[&str]| {
        let mut c = if root { Command::new("apt-get") } else { Command::new("sudo") };
        if !root {
            c.args(["-n", "apt-get"]);
        }
        c.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        c
    };
    let mut install = vec!["install", "-y", "--no-install-recommends"];
    install.extend(packages);
    let what = format!("apt-get install {}", packages.join(" "));
    if run_quietly(apt(&install), &what).is_err() {
        run_quietly(apt(&["update"]), "apt-get update")?;
        run_quietly(apt(&install), &what)?;
    }
    Ok(())
}

/// `npm install` of the pinned packages into `prefix`, unless a stamp says they are there.
fn node_modules(prefix: &Path) -> Result<PathBuf> {
    let modules = prefix.join("node_modules");
    let stamp = prefix.join(format!(".tally-{PLAYWRIGHT_VERSION}-{PLAUSIBLE_TRACKER_VERSION}-{UMAMI_VERSION}"));
    if stamp.is_file() && modules.join("playwright-core").is_dir() && prefix.join("umami-tracker.js").is_file() {
        return Ok(modules);
    }
    fs::create_dir_all(prefix).with_context(|| format!("creating {}", prefix.display()))?;
    eprintln!("xtask: installing playwright-core {PLAYWRIGHT_VERSION} into {}", prefix.display());
    let mut npm = Command::new("npm");
    npm.arg("install").arg("--prefix").arg(prefix);
    npm.arg(format!("playwright-core@{PLAYWRIGHT_VERSION}"));
    npm.arg(format!("@plausible-analytics/tracker@{PLAUSIBLE_TRACKER_VERSION}"));
    npm.args(["--no-audit", "--no-fund", "--loglevel=error"]);
    run_quietly(npm, "npm install playwright-core")?;
    if !modules.join("playwright-core").is_dir() {
        bail!("playwright-core was installed but {} is missing", modules.join("playwright-core").display());
    }
    eprintln!("xtask: taking Umami {UMAMI_VERSION}'s tracker script into {}", prefix.display());
    let mut pack = Command::new("npm");
    pack.args(["pack", &format!("umami@{UMAMI_VERSION}"), "--loglevel=error", "--pack-destination"]).arg(prefix);
    run_quietly(pack, "npm pack umami")?;
    let tarball = prefix.join(format!("umami-{UMAMI_VERSION}.tgz"));
    let mut tar = Command::new("tar");
    tar.arg("xzf").arg(&tarball).arg("-C").arg(prefix).arg("package/src/tracker/index.js");
    run_quietly(tar, "tar xzf umami")?;
    fs::rename(prefix.join("package/src/tracker/index.js"), prefix.join("umami-tracker.js"))
        .context("moving Umami's tracker script")?;
    let _ = fs::remove_dir_all(prefix.join("package"));
    let _ = fs::remove_file(&tarball);
    fs::write(&stamp, PLAYWRIGHT_VERSION).with_context(|| format!("writing {}", stamp.display()))?;
    Ok(modules)
}
