//! Imported history: daily aggregates per dimension brought from another analytics tool, kept
//! beside Tally's own and merged into answers when a query asks for them.
//!
//! The source is the shape of Plausible's CSV export — one CSV per `imported_*` table
//! (`imported_visitors`, `imported_sources`, `imported_pages`, `imported_entry_pages`,
//! `imported_exit_pages`, `imported_locations`, `imported_devices`, `imported_browsers`,
//! `imported_operating_systems`, `imported_custom_events`), one row per day and value with
//! counts — which is also the shape Google Analytics data takes once exported that way. Columns
//! are found by their header names, so the older exports (fewer columns) read too; a table or a
//! column that makes no sense is refused with its file and line before anything is written.
//!
//! Each row is stored as an `ImportedDay` item keyed by (site, dimension, date, value): a row
//! imported again overwrites itself, so importing a file twice, or two exports that overlap,
//! never counts a day twice. Visitors cannot be merged as sketches (the source kept only a
//! count), so a range's imported visitors are the sum of its days' counts, as Plausible does with
//! its own imports; Tally's visitors stay a union of sketches and the two are added.
//!
//! **Cut-over.** Imported days and Tally's own days never overlap: a site has one cut-over date
//! (the `ImportSettings` item), the first day of Tally's own data when history is first
//! imported (or a date given then). Rows on or after it are skipped at import, and answers read
//! imported days before it only.

use std::collections::BTreeMap;

use model::Table;
use model::ops::BatchWrite;
use store::item;

use crate::period::{Date, DateRange};
use crate::stored::{Counters, TOTAL};

/// What is wrong with an imported table.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportedError {
    /// The file is not one this module reads, or a row is wrong; nothing was written.
    #[error("{0}")]
    Invalid(String),
    /// The table failed.
    #[error(transparent)]
    Model(#[from] model::Error),
}

/// Counts of one (dimension, day, value).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImportedCounts {
    /// Visitors that day, as the source counted them.
    pub visitors: i64,
    /// The counters Tally keeps too (durations in ms).
    pub counters: Counters,
}

impl ImportedCounts {
    fn add(&mut self, other: &ImportedCounts) {
        self.visitors += other.visitors;
        self.counters.add(&other.counters);
    }
}

/// The rows of imported tables, summed per (dimension, date, value).
#[derive(Debug, Default, Clone)]
pub struct ImportedDays {
    /// (dimension, date, value) → counts.
    pub rows: BTreeMap<(String, String, String), ImportedCounts>,
    /// CSV rows read.
    pub lines: u64,
}

/// The Plausible table a file name names: `imported_pages_20240101_20241231.csv` or
/// `pages_20240101_20241231.csv` (both as Plausible writes them), or a bare `imported_pages.csv`.
pub fn table_of_file_name(name: &str) -> Option<&'static str> {
    let base = name.rsplit(['/', '\\']).next()?.strip_suffix(".csv")?;
    let base = base.strip_prefix("imported_").unwrap_or(base);
    // Strip `_YYYYMMDD_YYYYMMDD` when present.
    let stem = match base.len().checked_sub(18) {
        Some(cut)
            if base.as_bytes()[cut] == b'_'
                && base[cut + 1..]
                    .chars()
                    .enumerate()
                    .all(|(i, c)| if i == 8 { c == '_' } else { c.is_ascii_digit() }) =>
        {
            &base[..cut]
        }
        _ => base,
    };
    TABLES.iter().find(|t| **t == stem).copied()
}

/// The tables read, without their `imported_` prefix.
pub const TABLES: [&str; 10] = [
    "visitors",
    "sources",
    "pages",
    "entry_pages",
    "exit_pages",
    "locations",
    "devices",
    "browsers",
    "operating_systems",
    "custom_events",
];

/// The headers that make a CSV one of Plausible's tables, whatever its name.
pub fn table_of_header(header: &[&str]) -> Option<&'static str> {
    let has = |c: &str| header.contains(&c);
    if !has("date") || !has("visitors") {
        return None;
    }
    let table = if has("entry_page") {
        "entry_pages"
    } else if has("exit_page") {
        "exit_pages"
    } else if has("page") {
        "pages"
    } else if has("source") {
        "sources"
    } else if has("country") {
        "locations"
    } else if has("device") {
        "devices"
    } else if has("browser") {
        "browsers"
    } else if has("operating_system") {
        "operating_systems"
    } else if has("name") && has("events") {
        "custom_events"
    } else if has("visits") && has("pageviews") {
        "visitors"
    } else {
        return None;
    };
    Some(table)
}

impl ImportedDays {
    /// Reads one CSV of Plausible's `table` (without its `imported_` prefix), `file` naming it
    /// in errors. Rows on or after `cutover` are skipped and counted in the answer.
    pub fn read_csv(
        &mut self,
        table: &str,
        file: &str,
        body: &[u8],
        cutover: Option<Date>,
    ) -> Result<u64, ImportedError> {
        let bad = |line: u64, msg: String| ImportedError::Invalid(format!("{file}, line {line}: {msg}"));
        let mut reader = csv::ReaderBuilder::new().flexible(false).from_reader(body);
        let header: Vec<String> = reader
            .headers()
            .map_err(|e| bad(1, format!("not a CSV header: {e}")))?
            .iter()
            .map(|h| h.trim().to_owned())
            .collect();
        let column = |name: &str| header.iter().position(|h| h == name);
        let required = |name: &str| {
            column(name)
                .ok_or_else(|| bad(1, format!("the {table} table needs a `{name}` column; the header has {header:?}")))
        };
        let date_col = required("date")?;
        let visitors_col = required("visitors")?;
        // Value columns per table, and the dimension each feeds.
        let values: Vec<(&str, usize)> = match table {
            "visitors" => vec![],
            "sources" => {
                let mut v = vec![("visit:source", required("source")?)];
                for (dim, col) in [
                    ("visit:referrer", "referrer"),
                    ("visit:utm_source", "utm_source"),
                    ("visit:utm_medium", "utm_medium"),
                    ("visit:utm_campaign", "utm_campaign"),
                    ("visit:utm_content", "utm_content"),
                    ("visit:utm_term", "utm_term"),
                ] {
                    if let Some(c) = column(col) {
                        v.push((dim, c));
                    }
                }
                v
            }
            "pages" => {
                let mut v = vec![("event:page", required("page")?)];
                if let Some(c) = column("hostname") {
                    v.push(("event:hostname", c));
                }
                v
            }
            "entry_pages" => vec![("visit:entry_page", required("entry_page")?)],
            "exit_pages" => vec![("visit:exit_page", required("exit_page")?)],
            "locations" => vec![("visit:country", required("country")?)],
            "devices" => vec![("visit:device", required("device")?)],
            "browsers" => vec![("visit:browser", required("browser")?)],
            "operating_systems" => vec![("visit:os", required("operating_system")?)],
            "custom_events" => vec![("event:name", required("name")?)],
            other => return Err(bad(1, format!("`imported_{other}` is not a table Tally imports"))),
        };
        let number_col = |name: &str| column(name);
        let (visits_col, pageviews_col, bounces_col, duration_col, events_col) = (
            match table {
                "entry_pages" => number_col("entrances"),
                "exit_pages" => number_col("exits"),
                _ => number_col("visits"),
            },
            number_col("pageviews"),
            number_col("bounces"),
            number_col("visit_duration"),
            number_col("events"),
        );
        let mut skipped = 0u64;
        let mut record = csv::StringRecord::new();
        loop {
            let line = reader.position().line();
            match reader.read_record(&mut record) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => return Err(bad(line, format!("not a CSV row: {e}"))),
            }
            let line = record.position().map(|p| p.line()).unwrap_or(line);
            self.lines += 1;
            let cell = |i: usize| record.get(i).unwrap_or("").trim();
            let date_text = cell(date_col);
            let date = crate::period::parse_date(date_text)
                .map_err(|e| bad(line, format!("`date` {date_text:?} is not a date (YYYY-MM-DD): {e}")))?;
            let number = |col: Option<usize>, name: &str| -> Result<i64, ImportedError> {
                match col.map(cell) {
                    None | Some("") => Ok(0),
                    Some(text) => text
                        .parse::<u64>()
                        .ok()
                        .and_then(|n| i64::try_from(n).ok())
                        .filter(|n| *n < 1 << 48)
                        .ok_or_else(|| bad(line, format!("`{name}` {text:?} is not a count"))),
                }
            };
            let visitors = number(Some(visitors_col), "visitors")?;
            let visits = number(visits_col, "visits")?;
            let pageviews = number(pageviews_col, "pageviews")?;
            let bounces = number(bounces_col, "bounces")?;
            let duration_s = number(duration_col, "visit_duration")?;
            let events = number(events_col, "events")?;
            if cutover.is_some_and(|c| date >= c) {
                skipped += 1;
                continue;
            }
            let event_table = matches!(table, "pages" | "custom_events");
            let counts = ImportedCounts {
                visitors,
                counters: Counters {
                    pageviews,
                    // Plausible counts page views among events; a custom event table has its own.
                    events: if table == "custom_events" { events } else { pageviews },
                    visits: if event_table { 0 } else { visits },
                    bounces: if event_table { 0 } else { bounces },
                    duration_ms: if event_table { 0 } else { duration_s.saturating_mul(1000) },
                    visit_pageviews: if event_table { 0 } else { pageviews },
                },
            };
            let date = date.to_string();
            if values.is_empty() {
                self.rows.entry((TOTAL.to_owned(), date, String::new())).or_default().add(&counts);
                continue;
            }
            for (dimension, col) in &values {
                let value = cell(*col);
                if value.chars().count() > 2000 || value.chars().any(char::is_control) {
                    return Err(bad(line, format!("the {dimension} value is too long or has control characters")));
                }
                // Plausible writes no source as an empty cell; Tally shows it as "Direct / None".
                let value = match (*dimension, value) {
                    ("visit:source" | "visit:referrer", "") => "Direct / None",
                    (_, "") => continue,
                    (_, v) => v,
                };
                self.rows.entry(((*dimension).to_owned(), date.clone(), value.to_owned())).or_default().add(&counts);
            }
        }
        Ok(skipped)
    }

    /// The dates the rows cover, first and last.
    pub fn span(&self) -> Option<(String, String)> {
        let mut dates = self.rows.keys().map(|(_, d, _)| d);
        let first = dates.next()?.clone();
        let (mut lo, mut hi) = (first.clone(), first);
        for d in dates {
            if *d < lo {
                lo = d.clone();
            }
            if *d > hi {
                hi = d.clone();
            }
        }
        Some((lo, hi))
    }
}

/// The site's cut-over date, if history was ever imported.
pub async fn cutover(table: &Table, site_id: &str) -> Result<Option<Date>, ImportedError> {
    let Some(record) = table.get("ImportSettings", item! { "site_id" => site_id }).await? else { return Ok(None) };
    let text = record.string("cutover").map_err(ImportedError::Model)?;
    crate::period::parse_date(text).map(Some).map_err(|e| ImportedError::Invalid(format!("stored cut-over: {e}")))
}

/// Sets the site's cut-over once: an existing one is kept (it is what earlier imports were cut
/// at). Returns the cut-over in force.
pub async fn settle_cutover(table: &Table, site_id: &str, proposed: Date) -> Result<Date, ImportedError> {
    if let Some(existing) = cutover(table, site_id).await? {
        return Ok(existing);
    }
    let put = table.create("ImportSettings", item! { "site_id" => site_id, "cutover" => proposed.to_string() }).await;
    match put {
        Ok(_) => Ok(proposed),
        // Another import settled it first: theirs holds.
        Err(e) if e.is_condition_failed() => cutover(table, site_id).await?.ok_or(ImportedError::Model(e)),
        Err(e) => Err(e.into()),
    }
}

/// Writes `days` for `site_id`, labelled with the tool they came from (`source`); each row
/// replaces what an earlier import stored for its (dimension, date, value). Returns the items
/// written.
pub async fn store(table: &Table, site_id: &str, source: &str, days: &ImportedDays) -> Result<u64, ImportedError> {
    let mut written = 0u64;
    let rows: Vec<_> = days.rows.iter().collect();
    for chunk in rows.chunks(25) {
        let writes = chunk
            .iter()
            .map(|((dimension, date, value), c)| {
                BatchWrite::put(
                    "ImportedDay",
                    item! {
                        "site_id" => site_id,
                        "dimension" => dimension.as_str(),
                        "date" => date.as_str(),
                        "value" => value.as_str(),
                        "source" => source,
                        "visitors" => c.visitors,
                        "visits" => c.counters.visits,
                        "pageviews" => c.counters.pageviews,
                        "events" => c.counters.events,
                        "bounces" => c.counters.bounces,
                        "duration_ms" => c.counters.duration_ms,
                        "visit_pageviews" => c.counters.visit_pageviews,
                    },
                )
            })
            .collect();
        table.batch_write(writes).await?;
        written += chunk.len() as u64;
    }
    Ok(written)
}

/// The imported days of `dimension` in `range`, before the site's cut-over: (date, value, counts).
pub async fn read(
    table: &Table,
    site_id: &str,
    dimension: &str,
    range: &DateRange,
) -> Result<Vec<(Date, String, ImportedCounts)>, ImportedError> {
    let Some(cut) = cutover(table, site_id).await? else { return Ok(Vec::new()) };
    if range.first() >= cut {
        return Ok(Vec::new());
    }
    let last = if range.last() >= cut {
        cut.yesterday().map_err(|e| ImportedError::Invalid(e.to_string()))?
    } else {
        range.last()
    };
    let records = table
        .query("ImportedDay")
        .key(item! { "site_id" => site_id, "dimension" => dimension })
        .between(item! { "date" => range.first().to_string() }, item! { "date" => last.to_string() })
        .all()
        .await?;
    let mut out = Vec::with_capacity(records.len());
    for r in &records {
        let n = |name: &str| r.opt_i64(name).map(|v| v.unwrap_or(0));
        let date_text = r.string("date")?;
        let date = crate::period::parse_date(date_text).map_err(|e| ImportedError::Invalid(e.to_string()))?;
        if date < range.first() || date > last {
            continue;
        }
        out.push((
            date,
            r.opt_string("value")?.unwrap_or_default().to_owned(),
            ImportedCounts {
                visitors: n("visitors")?,
                counters: Counters {
                    pageviews: n("pageviews")?,
                    events: n("events")?,
                    visits: n("visits")?,
                    bounces: n("bounces")?,
                    duration_ms: n("duration_ms")?,
                    visit_pageviews: n("visit_pageviews")?,
                },
            },
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_name_their_tables_as_plausible_writes_them() {
        assert_eq!(table_of_file_name("imported_pages_20240101_20241231.csv"), Some("pages"));
        assert_eq!(table_of_file_name("export/devices_20190101_20210101.csv"), Some("devices"));
        assert_eq!(table_of_file_name("imported_custom_events.csv"), Some("custom_events"));
        assert_eq!(table_of_file_name("imported_goals_20240101_20241231.csv"), None);
        assert_eq!(table_of_file_name("pages_2024_2025.csv"), None);
        assert_eq!(table_of_file_name("my_data.csv"), None);
    }

    #[test]
    fn an_older_export_with_fewer_columns_reads_and_rows_sum_per_value() {
        // The first published `imported_sources` had no referrer, utm_source or pageviews.
        let csv = "date,source,utm_medium,utm_campaign,utm_content,utm_term,visitors,visits,visit_duration,bounces\n\
                   2024-01-02,Google,,,,,3,4,40,1\n\
                   2024-01-02,Google,cpc,,,,2,2,10,0\n\
                   2024-01-05,Bing,,,,,1,1,0,1\n";
        let mut days = ImportedDays::default();
        let skipped = days.read_csv("sources", "s.csv", csv.as_bytes(), Some(parse_date("2024-01-04"))).unwrap();
        assert_eq!(skipped, 1);
        let google = &days.rows[&("visit:source".to_owned(), "2024-01-02".to_owned(), "Google".to_owned())];
        assert_eq!((google.visitors, google.counters.visits, google.counters.duration_ms), (5, 6, 50_000));
        assert!(days.rows.contains_key(&("visit:utm_medium".to_owned(), "2024-01-02".to_owned(), "cpc".to_owned())));
        assert_eq!(days.rows.len(), 2, "no empty UTM values, nothing past the cut-over");
    }

    #[test]
    fn bad_rows_are_refused_with_their_file_and_line() {
        let mut days = ImportedDays::default();
        let e = days.read_csv("visitors", "v.csv", b"date,visitors\n2024-01-01,1\n2024-13-01,2\n", None).unwrap_err();
        assert!(e.to_string().starts_with("v.csv, line 3: `date`"), "{e}");
        let e = days.read_csv("pages", "p.csv", b"date,visitors,pageviews\n", None).unwrap_err();
        assert!(e.to_string().contains("needs a `page` column"), "{e}");
        let e = days.read_csv("visitors", "v.csv", b"date,visitors\n2024-01-01,-4\n", None).unwrap_err();
        assert!(e.to_string().contains("is not a count"), "{e}");
    }

    fn parse_date(text: &str) -> Date {
        crate::period::parse_date(text).unwrap()
    }
}
