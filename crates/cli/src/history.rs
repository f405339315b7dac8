//! What `tally import` reads besides Tally's own NDJSON and CSV: Plausible's CSV export (a zip of
//! `imported_*` tables, a directory of them, or one of them) as imported daily history, and
//! Umami's CSV of `website_event` rows as events. The format is found from the file itself;
//! `--format` overrides it.
//!
//! Plausible's tables are read by `analytics::imported` and stored as imported days before the
//! site's cut-over. Umami's rows become the records `server::import` reads (one NDJSON line per
//! CSV row, on the same line number), so they are validated and ingested exactly as Tally's own
//! imports: the session id is the visitor, `url_path` and `url_query` on the site's host the URL,
//! `referrer_domain`, `referrer_path` and `referrer_query` the referrer, `event_type` 2 a custom
//! event named `event_name`.
//!
//! The zip is read with the `zip` crate (zip-rs, the maintained pure-Rust reader), with only its
//! Deflate support, on `flate2` and `miniz_oxide`, which the tree already built: 1 new crate
//! besides `zip` itself (BENCHMARKS.md has its build time).

use std::io::Read;
use std::path::Path;

use analytics::imported::{self, ImportedDays};
use analytics::period::Date;
use analytics::sites::Site;
use anyhow::{Context, Result, anyhow, bail};
use model::Table;
use serde_json::{Map, Value as Json, json};
use store::item;

/// The biggest single CSV read out of a zip: a bound on what a crafted archive can make Tally
/// hold in memory.
const MAX_ENTRY_BYTES: u64 = 1 << 30;

/// What a file to import holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Tally's own NDJSON or CSV events.
    Events(server::import::Format),
    /// Umami's CSV of `website_event` rows.
    Umami,
    /// Plausible's CSV export: a zip, a directory, or one `imported_*` CSV.
    Plausible,
}

/// Finds what `path` holds: `forced` (`--format`) when given, else a zip or a directory is a
/// Plausible export, a CSV is Umami's when its header has Umami's columns, Plausible's when its
/// name or header is an `imported_*` table's, and Tally's own otherwise.
pub fn detect(path: &Path, forced: Option<&str>) -> Result<Kind> {
    if let Some(name) = forced {
        return match name.to_ascii_lowercase().as_str() {
            "umami" => Ok(Kind::Umami),
            "plausible" | "ga" => Ok(Kind::Plausible),
            other => server::import::Format::parse(other)
                .map(Kind::Events)
                .ok_or_else(|| anyhow!("--format must be ndjson, csv, umami or plausible, not {name:?}")),
        };
    }
    if path.is_dir() {
        return Ok(Kind::Plausible);
    }
    let mut head = [0u8; 4096];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .with_context(|| format!("reading {}", path.display()))?;
    let head = &head[..n];
    if head.starts_with(b"PK\x03\x04") {
        return Ok(Kind::Plausible);
    }
    let name = path.to_string_lossy();
    if imported::table_of_file_name(&name).is_some() {
        return Ok(Kind::Plausible);
    }
    let first_line = String::from_utf8_lossy(head.split(|b| *b == b'\n').next().unwrap_or_default()).into_owned();
    let columns: Vec<&str> =
        first_line.trim().trim_start_matches('\u{feff}').split(',').map(|c| c.trim().trim_matches('"')).collect();
    if columns.contains(&"website_id") && columns.contains(&"url_path") && columns.contains(&"created_at") {
        return Ok(Kind::Umami);
    }
    if imported::table_of_header(&columns).is_some() && !columns.contains(&"timestamp") {
        return Ok(Kind::Plausible);
    }
    Ok(Kind::Events(server::import::Format::detect(&name)))
}

/// The CSV files of a Plausible export at `path`, with their names.
fn plausible_files(path: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let mut files = Vec::new();
    if path.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(path)
            .with_context(|| format!("reading {}", path.display()))?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "csv"))
            .collect();
        entries.sort();
        for p in entries {
            files.push((
                p.display().to_string(),
                std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?,
            ));
        }
    } else {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        if bytes.starts_with(b"PK\x03\x04") {
            let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes))
                .map_err(|e| anyhow!("{} is not a readable zip: {e}", path.display()))?;
            for i in 0..archive.len() {
                let mut entry =
                    archive.by_index(i).map_err(|e| anyhow!("{}: entry {i} cannot be read: {e}", path.display()))?;
                let entry_name =
                    entry.name().map_err(|e| anyhow!("{}: entry {i} has no readable name: {e}", path.display()))?;
                if entry.is_dir() || !entry_name.ends_with(".csv") {
                    continue;
                }
                let name = format!("{}:{entry_name}", path.display());
                let mut body = Vec::new();
                entry
                    .by_ref()
                    .take(MAX_ENTRY_BYTES + 1)
                    .read_to_end(&mut body)
                    .map_err(|e| anyhow!("{name} cannot be read: {e}"))?;
                if body.len() as u64 > MAX_ENTRY_BYTES {
                    bail!("{name} is over {MAX_ENTRY_BYTES} bytes once unpacked");
                }
                files.push((name, body));
            }
        } else {
            files.push((path.display().to_string(), bytes));
        }
    }
    if files.is_empty() {
        bail!("{} holds no CSV file of a Plausible export", path.display());
    }
    Ok(files)
}

/// The table a CSV of an export is, from its name or else its header.
fn table_of(name: &str, body: &[u8]) -> Result<&'static str> {
    if let Some(t) = imported::table_of_file_name(name.rsplit(':').next().unwrap_or(name)) {
        return Ok(t);
    }
    let first = String::from_utf8_lossy(body.split(|b| *b == b'\n').next().unwrap_or_default()).into_owned();
    let columns: Vec<&str> =
        first.trim().trim_start_matches('\u{feff}').split(',').map(|c| c.trim().trim_matches('"')).collect();
    imported::table_of_header(&columns).ok_or_else(|| {
        anyhow!(
            "{name} is not one of Plausible's imported tables (imported_visitors, imported_sources, imported_pages, \
             imported_entry_pages, imported_exit_pages, imported_locations, imported_devices, imported_browsers, \
             imported_operating_systems, imported_custom_events)"
        )
    })
}

/// The first day of the site's own data (its first daily aggregate), if any.
async fn first_own_day(table: &Table, site: &Site) -> Result<Option<Date>> {
    let first = table
        .query("Aggregate")
        .key(item! { "site_id" => site.site_id.as_str(), "period" => "day", "dimension" => analytics::stored::TOTAL })
        .limit(1)
        .first()
        .await?;
    match first {
        Some(r) => Ok(Some(analytics::period::parse_date(r.string("bucket")?)?)),
        None => Ok(None),
    }
}

/// `tally import` of a Plausible export into `site`, labelled `source` (`plausible` or `ga`).
pub async fn import_plausible(
    table: &Table,
    site: &Site,
    path: &Path,
    source: &str,
    cutover: Option<&str>,
) -> Result<()> {
    let started = std::time::Instant::now();
    let files = plausible_files(path)?;
    // The cut-over: the site's, once set; else the one asked for; else the first day of the
    // site's own data; else today (nothing of its own yet: every earlier day is history).
    let existing = imported::cutover(table, &site.site_id).await?;
    let proposed = match (existing, cutover) {
        (Some(c), Some(asked)) if c.to_string() != asked => {
            bail!("the site's cut-over is already {c} (set by an earlier import); it cannot move to {asked}")
        }
        (Some(c), _) => c,
        (None, Some(asked)) => analytics::period::parse_date(asked).map_err(|e| anyhow!("--cutover: {e}"))?,
        (None, None) => match first_own_day(table, site).await? {
            Some(day) => day,
            None => site.zone.date_of(jiff::Timestamp::now().as_millisecond())?,
        },
    };
    // Every file is read and checked before anything is written.
    let mut days = ImportedDays::default();
    let mut skipped = 0u64;
    let mut tables = Vec::new();
    for (name, body) in &files {
        let t = table_of(name, body)?;
        let before = days.lines;
        skipped += days.read_csv(t, name, body, Some(proposed))?;
        eprintln!("… {name}: imported_{t}, {} rows", days.lines - before);
        tables.push(t);
    }
    let cut = imported::settle_cutover(table, &site.site_id, proposed).await?;
    let written = imported::store(table, &site.site_id, source, &days).await?;
    let seconds = started.elapsed().as_secs_f64();
    println!("format: plausible export ({source})");
    println!("tables: {}", tables.len());
    println!("rows: {}", days.lines);
    if let Some((first, last)) = days.span() {
        println!("days: {first} to {last}");
    }
    println!("cutover: {cut}");
    println!("skipped on or after the cutover: {skipped}");
    println!("imported days written: {written}");
    println!("seconds: {seconds:.2}");
    eprintln!(
        "(imported history shows in the dashboard and the Stats API with `include: {{\"imports\": true}}`; a rerun \
         of the same export rewrites the same items and changes nothing)"
    );
    Ok(())
}

/// Umami's `created_at` (`2024-05-01 10:00:00`, with or without fractions, `T`, `Z` or `+00`)
/// as epoch milliseconds; a time without an offset is UTC, as Umami stores it.
fn umami_time(text: &str) -> Option<i64> {
    let t = text.trim();
    if let Ok(ts) = t.parse::<jiff::Timestamp>() {
        return Some(ts.as_millisecond());
    }
    let bare = t.trim_end_matches('Z').trim_end_matches("+00:00").trim_end_matches("+00").trim_end_matches(" UTC");
    let civil: jiff::civil::DateTime = bare.replacen(' ', "T", 1).parse().ok()?;
    civil.to_zoned(jiff::tz::TimeZone::UTC).ok().map(|z| z.timestamp().as_millisecond())
}

/// Umami's CSV of `website_event` rows as Tally's NDJSON import, each row on its own line
/// number (earlier lines left empty), so refusals name the CSV's lines.
pub fn umami_to_ndjson(body: &[u8], site: &Site) -> Result<Vec<u8>> {
    let mut reader = csv::ReaderBuilder::new().flexible(false).from_reader(body);
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| anyhow!("the header row cannot be read: {e}"))?
        .iter()
        .map(|h| h.trim().trim_start_matches('\u{feff}').to_owned())
        .collect();
    let col = |name: &str| header.iter().position(|h| h == name);
    let need = |name: &str| col(name).ok_or_else(|| anyhow!("an Umami website_event export needs a `{name}` column"));
    let (created, path) = (need("created_at")?, need("url_path")?);
    let session = need("session_id")?;
    let [query, ref_domain, ref_path, ref_query, event_type, event_name, hostname, country] = [
        "url_query",
        "referrer_domain",
        "referrer_path",
        "referrer_query",
        "event_type",
        "event_name",
        "hostname",
        "country",
    ]
    .map(col);
    // Line 1, the header, is an empty line here; `line` counts the lines written.
    let mut out = Vec::with_capacity(body.len());
    out.push(b'\n');
    let mut line = 1u64;
    let mut record = csv::StringRecord::new();
    loop {
        match reader.read_record(&mut record) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => bail!("line {}: not a CSV row: {e}", reader.position().line()),
        }
        let at = record.position().map(|p| p.line()).unwrap_or(line + 1);
        while line + 1 < at {
            out.push(b'\n');
            line += 1;
        }
        let cell = |c: Option<usize>| c.and_then(|i| record.get(i)).map(str::trim).unwrap_or("");
        let mut fields = Map::new();
        // A time that does not read is passed on as it is, for the import to refuse with its line.
        let when = cell(Some(created));
        fields.insert("timestamp".into(), umami_time(when).map(|ms| json!(ms)).unwrap_or_else(|| json!(when)));
        let host = match cell(hostname) {
            "" => site.domain.as_str(),
            h => h,
        };
        let mut url = format!("https://{host}{}", cell(Some(path)));
        match cell(query) {
            "" => {}
            q => {
                url.push('?');
                url.push_str(q.trim_start_matches('?'));
            }
        }
        fields.insert("url".into(), json!(url));
        let ref_host = cell(ref_domain);
        if !ref_host.is_empty() {
            let mut referrer = format!("https://{ref_host}{}", cell(ref_path));
            let q = cell(ref_query);
            if !q.is_empty() {
                referrer.push('?');
                referrer.push_str(q.trim_start_matches('?'));
            }
            fields.insert("referrer".into(), json!(referrer));
        }
        // Umami's event types: 1 a page view, 2 a custom event.
        let name = match cell(event_type) {
            "" | "1" => "pageview".to_owned(),
            "2" => cell(event_name).to_owned(),
            other => other.to_owned(),
        };
        if name != "pageview" {
            fields.insert("name".into(), json!(name));
        }
        fields.insert("visitor".into(), json!(format!("umami:{}", cell(Some(session)))));
        let c = cell(country);
        if c.len() == 2 {
            fields.insert("country".into(), json!(c));
        }
        out.extend_from_slice(Json::Object(fields).to_string().as_bytes());
        out.push(b'\n');
        line += 1;
    }
    Ok(out)
}

/// The import id of a file: the SHA-256 of its bytes, in hex.
pub fn file_id(body: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(body).iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether the events file `id` was imported into `site` before: `Ok(true)` when it was,
/// whole; an error when an earlier run stopped partway (its events are stored, a rerun would
/// count them twice) unless `force`; `Ok(false)` after recording that this run starts.
pub async fn begin_events_file(table: &Table, site: &Site, id: &str, name: &str, force: bool) -> Result<bool> {
    let key = item! { "site_id" => site.site_id.as_str(), "file_hash" => id };
    if let Some(r) = table.get("ImportFile", key.clone()).await? {
        match r.string("state")? {
            "done" => return Ok(true),
            _ if force => {}
            _ => bail!(
                "an earlier import of this file (import id {id}) stopped before it finished: the events it ingested \
                 are stored, and importing the file again would count them twice. Check the site's numbers, then \
                 import again with --force to import every line anyway"
            ),
        }
    }
    table
        .put(
            "ImportFile",
            item! { "site_id" => site.site_id.as_str(), "file_hash" => id, "name" => name, "state" => "started" },
        )
        .await?;
    Ok(false)
}

/// Records that the events file `id` was imported whole.
pub async fn finish_events_file(
    table: &Table,
    site: &Site,
    id: &str,
    name: &str,
    lines: u64,
    imported: u64,
) -> Result<()> {
    table
        .put(
            "ImportFile",
            item! {
                "site_id" => site.site_id.as_str(),
                "file_hash" => id,
                "name" => name,
                "state" => "done",
                "lines" => lines,
                "imported" => imported,
            },
        )
        .await?;
    Ok(())
}
