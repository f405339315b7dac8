//! `tally export`: a site's events or its daily aggregates, as NDJSON or CSV.
//!
//! Events come out in the shape `tally import` reads (written by `server::wire::import`, next to
//! its reader) (`timestamp`, `url`, `name`, `referrer`,
//! `visitor`, `country`, `interactive`, props), so an export moves a site to another Tally, or
//! back after a reset, and visits, sources and campaigns come out the same: a visit's first event
//! carries its referrer and its `utm_*` parameters in the URL. What Tally never keeps (addresses,
//! User-Agents) is not there, so browsers, systems and devices do not travel with the events;
//! the aggregates export has them, by day.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use analytics::sites::Sites;
use analytics::stats::{DayItem, Stats, StatsError};
use anyhow::{Context, Result, bail};
use serde_json::{Map, Value as Json, json};

use server::wire::import::{EventRecord, write_csv};

use crate::config::Config;

/// What to export and how.
pub struct ExportOptions<'a> {
    /// The site (domain or id).
    pub site: &'a str,
    /// First date, site time [default: the raw-event retention ago].
    pub from: Option<&'a str>,
    /// Last date, site time [default: today].
    pub to: Option<&'a str>,
    /// Daily aggregates instead of events.
    pub aggregates: bool,
    /// `ndjson` or `csv`.
    pub format: &'a str,
    /// Where to write [default: standard output].
    pub output: Option<&'a Path>,
}

/// `tally export`.
pub async fn export(config: &Config, options: &ExportOptions<'_>) -> Result<()> {
    let csv = match options.format {
        "ndjson" => false,
        "csv" => true,
        other => bail!("--format must be ndjson or csv, not {other:?}"),
    };
    let table = crate::store::open(config).await?;
    let sites = Arc::new(Sites::new(table.clone()));
    let site = crate::serve::site_named(&sites, options.site).await?;
    let (first, last) = crate::serve::site_days(&site, options.from, options.to)?;
    let range = analytics::period::DateRange::new(first, last)?;
    let stats = Stats::new(table, sites.clone());
    let mut out: Box<dyn Write> = match options.output {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let count = if options.aggregates {
        let items = stats.export_days(&site.site_id, &range).await?;
        write_days(&mut out, &items, csv)?;
        items.len() as u64
    } else if csv {
        // CSV names every prop key in its header, so the events are gathered first.
        let mut rows = Vec::new();
        let n = stats
            .export_events(&site.site_id, &range, |e| {
                rows.push(EventRecord::from_stored(e));
                Ok(())
            })
            .await?;
        write_csv(&mut out, &rows)?;
        n
    } else {
        let mut failed = None;
        let n = stats
            .export_events(&site.site_id, &range, |e| {
                writeln!(out, "{}", EventRecord::from_stored(e).to_line()).map_err(|err| {
                    failed = Some(err.to_string());
                    StatsError::Invalid("the output cannot be written".into())
                })
            })
            .await;
        if let Some(err) = failed {
            bail!("writing the export: {err}");
        }
        n?
    };
    out.flush().context("writing the export")?;
    let what = if options.aggregates { "daily aggregate items" } else { "events" };
    eprintln!("exported {count} {what} of {} from {first} to {last}", site.domain);
    Ok(())
}

fn write_days(out: &mut dyn Write, items: &[DayItem], csv: bool) -> Result<()> {
    const COLUMNS: [&str; 10] = [
        "date",
        "dimension",
        "value",
        "visitors",
        "visits",
        "pageviews",
        "events",
        "bounces",
        "duration_ms",
        "visit_pageviews",
    ];
    let values = |i: &DayItem| -> [Json; 10] {
        let c = &i.counters;
        [
            json!(i.date),
            json!(i.dimension),
            json!(i.value),
            json!(i.visitors),
            json!(c.visits),
            json!(c.pageviews),
            json!(c.events),
            json!(c.bounces),
            json!(c.duration_ms),
            json!(c.visit_pageviews),
        ]
    };
    if csv {
        let mut w = csv::Writer::from_writer(out);
        w.write_record(COLUMNS)?;
        for item in items {
            w.write_record(values(item).iter().map(|v| match v {
                Json::String(s) => s.clone(),
                other => other.to_string(),
            }))?;
        }
        w.flush()?;
    } else {
        for item in items {
            let object: Map<String, Json> = COLUMNS.iter().map(|c| (*c).to_owned()).zip(values(item)).collect();
            writeln!(out, "{}", Json::Object(object))?;
        }
    }
    Ok(())
}
