//! What `tally import` reads besides Tally's own NDJSON and CSV: Plausible's CSV export (a zip of
//! `imported_*` tables, a directory of them, or one of them) as imported daily history, and
//! Umami's CSV of `website_event` rows as events. The format is found from the file itself;
//! `--format` overrides it.
//!
//! Plausible's tables are read by `analytics::imported` and stored as imported days before the
//! site's cut-over. Umami's rows (from its CSV here, or from its database in `umami_pg`) become
//! the records `server::wire::import` reads (one NDJSON line per row, on the same line number), each
//! with the import id of its `event_id`, so they are validated and ingested exactly as Tally's own
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
    Events(server::wire::import::Format),
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
            other => server::wire::import::Format::parse(other)
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
    Ok(Kind::Events(server::wire::import::Format::detect(&name)))
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

/// Umami's rows as Tally's NDJSON import, with each row's import id (by line number).
pub struct UmamiRows {
    /// NDJSON, each row on the line number it had (earlier lines left empty), so refusals name
    /// the source's lines.
    pub ndjson: Vec<u8>,
    /// The import id of each line holding a row with an `event_id`.
    pub ids: std::collections::HashMap<usize, crate::import_lines::LineId>,
    line: usize,
}

impl Default for UmamiRows {
    fn default() -> Self {
        UmamiRows::new()
    }
}

impl UmamiRows {
    /// No rows yet.
    pub fn new() -> Self {
        // Line 1, a CSV's header, is an empty line here.
        UmamiRows { ndjson: b"\n".to_vec(), ids: Default::default(), line: 1 }
    }

    /// Adds the row on line `at` whose column `name` holds `cell(name)` (empty when missing).
    pub fn push(&mut self, at: usize, site: &Site, cell: &dyn Fn(&str) -> String) {
        while self.line + 1 < at {
            self.ndjson.push(b'\n');
            self.line += 1;
        }
        let mut fields = Map::new();
        // A time that does not read is passed on as it is, for the import to refuse with its line.
        let when = cell("created_at");
        fields.insert("timestamp".into(), umami_time(&when).map(|ms| json!(ms)).unwrap_or_else(|| json!(when)));
        let host = match cell("hostname") {
            h if h.is_empty() => site.domain.clone(),
            h => h,
        };
        let mut url = format!("https://{host}{}", cell("url_path"));
        let query = cell("url_query");
        if !query.is_empty() {
            url.push('?');
            url.push_str(query.trim_start_matches('?'));
        }
        fields.insert("url".into(), json!(url));
        let ref_host = cell("referrer_domain");
        if !ref_host.is_empty() {
            let mut referrer = format!("https://{ref_host}{}", cell("referrer_path"));
            let q = cell("referrer_query");
            if !q.is_empty() {
                referrer.push('?');
                referrer.push_str(q.trim_start_matches('?'));
            }
            fields.insert("referrer".into(), json!(referrer));
        }
        // Umami's event types: 1 a page view, 2 a custom event.
        let name = match cell("event_type").as_str() {
            "" | "1" => "pageview".to_owned(),
            "2" => cell("event_name"),
            other => other.to_owned(),
        };
        if name != "pageview" {
            fields.insert("name".into(), json!(name));
        }
        fields.insert("visitor".into(), json!(format!("umami:{}", cell("session_id"))));
        let c = cell("country");
        if c.len() == 2 {
            fields.insert("country".into(), json!(c));
        }
        // What Umami's session recorded of the client (a direct read of its database has them).
        for (column, value) in
            [("browser", umami_browser(&cell("browser"))), ("os", umami_os(&cell("os"))), ("device", cell("device"))]
        {
            if !value.is_empty() {
                fields.insert(column.into(), json!(value));
            }
        }
        // A custom event's properties, as a JSON object (a database read gathers them from `event_data`).
        if let Ok(Json::Object(props)) = serde_json::from_str::<Json>(&cell("props")) {
            fields.insert("props".into(), Json::Object(props));
        }
        let event_id = cell("event_id");
        if !event_id.is_empty() {
            self.ids.insert(at, crate::import_lines::umami_id(&event_id));
        }
        self.ndjson.extend_from_slice(Json::Object(fields).to_string().as_bytes());
        self.ndjson.push(b'\n');
        self.line += 1;
    }
}

/// Tally's name of a browser Umami recorded (its detector's names: `chrome`, `ios`,
/// `edge-chromium`…); a name Tally has no other word for is kept.
fn umami_browser(name: &str) -> String {
    match name.trim().to_ascii_lowercase().as_str() {
        "chrome" | "crios" | "chromium-webview" => "Chrome",
        "firefox" | "fxios" => "Firefox",
        "safari" | "ios" | "ios-webview" => "Safari",
        "edge" | "edge-chromium" | "edge-ios" => "Edge",
        "opera" | "opera-mini" => "Opera",
        "samsung" => "Samsung Internet",
        "yandexbrowser" => "Yandex Browser",
        _ => return name.trim().to_owned(),
    }
    .to_owned()
}

/// Tally's name of an operating system Umami recorded (`Mac OS`, `Windows 10`, `Android OS`…).
fn umami_os(name: &str) -> String {
    let name = name.trim();
    match name {
        "Mac OS" => "macOS".to_owned(),
        "Android OS" => "Android".to_owned(),
        w if w.starts_with("Windows") => "Windows".to_owned(),
        other => other.to_owned(),
    }
}

/// Umami's CSV of `website_event` rows as Tally's NDJSON import.
pub fn umami_to_ndjson(body: &[u8], site: &Site) -> Result<UmamiRows> {
    let mut reader = csv::ReaderBuilder::new().flexible(false).from_reader(body);
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| anyhow!("the header row cannot be read: {e}"))?
        .iter()
        .map(|h| h.trim().trim_start_matches('\u{feff}').to_owned())
        .collect();
    let col = |name: &str| header.iter().position(|h| h == name);
    for required in ["created_at", "url_path", "session_id"] {
        col(required).ok_or_else(|| anyhow!("an Umami website_event export needs a `{required}` column"))?;
    }
    let mut rows = UmamiRows::new();
    let mut record = csv::StringRecord::new();
    loop {
        match reader.read_record(&mut record) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => bail!("line {}: not a CSV row: {e}", reader.position().line()),
        }
        let at = record.position().map(|p| p.line() as usize).unwrap_or(rows.line + 1);
        let cell = |name: &str| col(name).and_then(|i| record.get(i)).map(str::trim).unwrap_or("").to_owned();
        rows.push(at, site, &cell);
    }
    Ok(rows)
}

/// The import id of a file: the SHA-256 of its bytes, in hex.
pub fn file_id(body: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(body).iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether the events file `id` was imported into `site` whole before (and `force` does not ask
/// to read it again): then nothing is to be done. Otherwise records that this run starts; a
/// file an earlier run stopped partway through is read again, and its lines already stored are
/// skipped by their import ids (`import_lines`).
pub async fn begin_events_file(table: &Table, site: &Site, id: &str, name: &str, force: bool) -> Result<bool> {
    let key = item! { "site_id" => site.site_id.as_str(), "file_hash" => id };
    if let Some(r) = table.get("ImportFile", key.clone()).await? {
        match r.string("state")? {
            "done" if !force => return Ok(true),
            "done" => eprintln!("… this file was imported whole before: reading it again, its lines are all skipped"),
            _ => eprintln!(
                "… an earlier import of this file stopped before it finished: its lines already stored are skipped"
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
