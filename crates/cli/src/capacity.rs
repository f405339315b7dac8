//! `tally capacity`: the monthly DynamoDB on-demand bill for a traffic level, from per-event and
//! per-dashboard costs that `tally bench` measured.
//!
//! The arithmetic is deliberately plain, so anyone can check it against AWS's price list:
//! request units per month times the price per million, plus stored gigabytes times the price per
//! gigabyte-month. The prices are those of us-east-1 on-demand tables (Standard table class).

use std::path::Path;

use anyhow::{Context, Result};

/// Dollars per million write request units (on demand, us-east-1, Standard).
pub const WRITE_PRICE_PER_MILLION: f64 = 0.625;
/// Dollars per million read request units (on demand, us-east-1, Standard).
pub const READ_PRICE_PER_MILLION: f64 = 0.125;
/// Dollars per gigabyte-month of table storage (Standard).
pub const STORAGE_PRICE_PER_GB_MONTH: f64 = 0.25;
/// Days in an average month.
pub const DAYS_PER_MONTH: f64 = 30.4375;

/// What one event and one dashboard cost, as `tally bench` measured them.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct Costs {
    /// Where the figures come from: a bench file's path, or the built-in measurement.
    #[serde(skip)]
    pub source: String,
    /// Write request units per ingested event, amortised over flushes.
    pub write_units_per_event: f64,
    /// Read request units per ingested event (session and salt lookups that miss the cache).
    pub read_units_per_event: f64,
    /// Read request units of one dashboard: a 30-day overview plus six breakdowns.
    pub read_units_per_dashboard: f64,
    /// Billed bytes of one raw event item (DynamoDB's 100-byte item overhead included).
    pub raw_bytes_per_event: f64,
    /// Billed bytes of the aggregate items one day of one site's traffic adds.
    pub aggregate_bytes_per_site_day: f64,
    /// Events of one site each flush held in the measured run: its ingestion rate divided by its
    /// sites, times its flush interval (absent from older bench files).
    #[serde(default)]
    pub events_per_site_flush: Option<f64>,
    /// The measured run's flush interval in seconds (absent from older bench files).
    #[serde(default)]
    pub flush_interval_s: Option<f64>,
    /// Write units per aggregate item written in the measured run (absent from older files).
    #[serde(default)]
    pub write_units_per_aggregate_item: Option<f64>,
}

impl Costs {
    /// The figures of the release-build `tally bench --events 1000000` run recorded in
    /// BENCHMARKS.md, used when no `--from-bench` file is given.
    pub fn built_in() -> Costs {
        Costs {
            source: "the release-build `tally bench --events 1000000` run recorded in BENCHMARKS.md".into(),
            write_units_per_event: 1.226,
            read_units_per_event: 0.732,
            read_units_per_dashboard: 317.0,
            raw_bytes_per_event: 700.0,
            aggregate_bytes_per_site_day: 400_000.0,
            // 11,945 events/s over three sites, flushed every 3 s.
            events_per_site_flush: Some(11_945.0),
            flush_interval_s: Some(3.0),
            // 84,107 write units for 68,280 items in the 200 k run of 2026-11-25.
            write_units_per_aggregate_item: Some(1.23),
        }
    }

    /// Reads the JSON file `tally bench --output FILE` wrote.
    pub fn from_file(path: &Path) -> Result<Costs> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut costs: Costs =
            serde_json::from_str(&text).with_context(|| format!("{} is not a tally bench result", path.display()))?;
        costs.source = path.display().to_string();
        Ok(costs)
    }
}

/// The traffic to price.
#[derive(Debug, Clone, PartialEq)]
pub struct Traffic {
    /// Events ingested per day, over all sites.
    pub events_per_day: f64,
    /// Dashboards opened per day.
    pub dashboards_per_day: f64,
    /// How many sites share the table (each adds its own aggregate items).
    pub sites: f64,
    /// Days raw events are kept.
    pub raw_retention_days: f64,
    /// Days of aggregates kept (they are small; a year is assumed).
    pub aggregate_days: f64,
}

/// A month's estimate.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// Write request units per month.
    pub write_units: f64,
    /// Read request units per month.
    pub read_units: f64,
    /// Stored gigabytes at steady state.
    pub storage_gb: f64,
    /// Dollars per month for writes.
    pub write_cost: f64,
    /// Dollars per month for reads.
    pub read_cost: f64,
    /// Dollars per month for storage.
    pub storage_cost: f64,
}

impl Estimate {
    /// Prices `traffic` at `costs`.
    pub fn new(costs: &Costs, traffic: &Traffic) -> Estimate {
        let events = traffic.events_per_day * DAYS_PER_MONTH;
        let write_units = events * costs.write_units_per_event;
        let read_units = events * costs.read_units_per_event
            + traffic.dashboards_per_day * DAYS_PER_MONTH * costs.read_units_per_dashboard;
        // Raw events expire a day after their retention (so a range of the last N days is whole).
        let bytes = traffic.events_per_day * (traffic.raw_retention_days + 1.0) * costs.raw_bytes_per_event
            + traffic.sites * traffic.aggregate_days * costs.aggregate_bytes_per_site_day;
        let storage_gb = bytes / 1e9;
        Estimate {
            write_units,
            read_units,
            storage_gb,
            write_cost: write_units / 1e6 * WRITE_PRICE_PER_MILLION,
            read_cost: read_units / 1e6 * READ_PRICE_PER_MILLION,
            storage_cost: storage_gb * STORAGE_PRICE_PER_GB_MONTH,
        }
    }

    /// Dollars per month in all.
    pub fn total(&self) -> f64 {
        self.write_cost + self.read_cost + self.storage_cost
    }
}

/// Below this share of the measured run's events per flush, the write estimate is called a
/// lower bound.
const FEW_EVENTS_PER_FLUSH: f64 = 0.1;

/// Aggregate items a page view touches when it is flushed alone: every dimension of the event
/// and its visit, per minute, hour, day, week and month (counted by the aggregation test
/// `a_steady_state_flush_reads_nothing` in `analytics`' integration tests).
const AGGREGATE_ITEMS_PER_LONE_EVENT: f64 = 62.0;

/// A warning when `traffic` puts far fewer events of a site into each flush than the measured
/// run did. A flush rewrites every aggregate item its events touch, so its writes are shared by
/// fewer events: aggregate writes per event rise towards what one event touches alone (about
/// sixty items: every dimension of the event and its visit, per hour, day, week and month).
pub fn low_rate_warning(costs: &Costs, traffic: &Traffic) -> Option<String> {
    let measured = costs.events_per_site_flush?;
    let interval = costs.flush_interval_s?;
    let per_flush = traffic.events_per_day / 86_400.0 / traffic.sites.max(1.0) * interval;
    if per_flush >= measured * FEW_EVENTS_PER_FLUSH {
        return None;
    }
    let mut text = format!(
        "warning: the measured run flushed about {measured:.0} events of a site at a time; this traffic\n\
         puts about {per_flush:.2} events of a site into each {interval} s flush. Every flush rewrites each\n\
         aggregate item its events touch, so fewer events share those writes: the write estimate above\n\
         is a lower bound at this rate.\n"
    );
    if let Some(per_item) = costs.write_units_per_aggregate_item {
        // One raw event item, plus every aggregate item the event touches rewritten for it alone.
        let per_event = 1.0 + AGGREGATE_ITEMS_PER_LONE_EVENT * per_item;
        let units = traffic.events_per_day * DAYS_PER_MONTH * per_event;
        text.push_str(&format!(
            "When each flush holds a single event, an event rewrites about {items:.0} aggregate items of\n\
             {per_item:.2} write units each: {per_event:.0} write units per event, {units:.0} WRU and ${cost:.2} a month\n\
             for writes (an upper bound).\n",
            items = AGGREGATE_ITEMS_PER_LONE_EVENT,
            cost = units / 1e6 * WRITE_PRICE_PER_MILLION,
        ));
    }
    Some(text)
}

/// The report `tally capacity` prints.
pub fn report(costs: &Costs, traffic: &Traffic) -> String {
    let e = Estimate::new(costs, traffic);
    let warning = low_rate_warning(costs, traffic).map(|w| format!("\n{w}")).unwrap_or_default();
    format!(
        "Tally on DynamoDB on-demand: {events} events/day, {dash} dashboards/day, {sites} site(s)\n\
         \n\
         measured costs ({source}):\n\
         \x20 {wpe:.3} write units per event, {rpe:.3} read units per event\n\
         \x20 {rpd:.1} read units per dashboard (30-day overview plus six breakdowns)\n\
         \x20 {bpe:.0} bytes per raw event, {bpd:.0} bytes of aggregates per site-day\n\
         \n\
         per month:\n\
         \x20 writes   {wu:>16.0} WRU  ${wc:>10.2}   (at ${wp} per million)\n\
         \x20 reads    {ru:>16.0} RRU  ${rc:>10.2}   (at ${rp} per million)\n\
         \x20 storage  {gb:>16.3} GB   ${sc:>10.2}   (at ${sp} per GB-month)\n\
         \x20 total                          ${total:>10.2}\n\
         \n\
         assumptions: on-demand capacity, Standard table class, us-east-1 prices; {month} days a month;\n\
         raw events kept {raw} days (and one more before they expire), aggregates {agg} days; 100 bytes of DynamoDB overhead per item;\n\
         no global tables, backups, streams or data transfer; free tier not deducted.\n{warning}",
        events = traffic.events_per_day,
        dash = traffic.dashboards_per_day,
        sites = traffic.sites,
        source = costs.source,
        wpe = costs.write_units_per_event,
        rpe = costs.read_units_per_event,
        rpd = costs.read_units_per_dashboard,
        bpe = costs.raw_bytes_per_event,
        bpd = costs.aggregate_bytes_per_site_day,
        wu = e.write_units,
        wc = e.write_cost,
        wp = WRITE_PRICE_PER_MILLION,
        ru = e.read_units,
        rc = e.read_cost,
        rp = READ_PRICE_PER_MILLION,
        gb = e.storage_gb,
        sc = e.storage_cost,
        sp = STORAGE_PRICE_PER_GB_MONTH,
        total = e.total(),
        month = DAYS_PER_MONTH,
        raw = traffic.raw_retention_days,
        agg = traffic.aggregate_days,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn costs() -> Costs {
        Costs {
            source: "test".into(),
            write_units_per_event: 1.0,
            read_units_per_event: 0.0,
            read_units_per_dashboard: 100.0,
            raw_bytes_per_event: 1_000.0,
            aggregate_bytes_per_site_day: 0.0,
            events_per_site_flush: None,
            flush_interval_s: None,
            write_units_per_aggregate_item: None,
        }
    }

    #[test]
    fn traffic_far_below_the_measured_rate_is_called_a_lower_bound() {
        let traffic = |events_per_day: f64, sites: f64| Traffic {
            events_per_day,
            dashboards_per_day: 0.0,
            sites,
            raw_retention_days: 30.0,
            aggregate_days: 365.0,
        };
        let built_in = Costs::built_in();
        // 10,000 events a day is 0.35 events per 3 s flush; the measured run had about 12,000.
        let small = report(&built_in, &traffic(10_000.0, 1.0));
        assert!(small.contains("lower bound") && small.contains("0.35 events"), "{small}");
        // The upper bound: 1 + 62 × 1.23 = 77.26 units an event, 10,000 a day for 30.4375 days.
        assert!(small.contains("77 write units per event") && small.contains("$14.70 a month"), "{small}");
        // 100 M a day on one site is 3,472 per flush: no warning; spread over 10 sites it is 347.
        assert!(!report(&built_in, &traffic(1e8, 1.0)).contains("lower bound"));
        assert!(report(&built_in, &traffic(1e8, 10.0)).contains("lower bound"));
        // A bench file without the rate (older) gives no warning rather than a guess.
        assert_eq!(low_rate_warning(&costs(), &traffic(10.0, 1.0)), None);
    }

    #[test]
    fn a_million_events_a_day_at_one_unit_each_costs_what_the_price_list_says() {
        let traffic = Traffic {
            events_per_day: 1e6,
            dashboards_per_day: 0.0,
            sites: 1.0,
            raw_retention_days: 30.0,
            aggregate_days: 365.0,
        };
        let e = Estimate::new(&costs(), &traffic);
        assert!((e.write_units - 30_437_500.0).abs() < 1e-6);
        assert!((e.write_cost - 19.0234375).abs() < 1e-9);
        assert_eq!(e.read_cost, 0.0);
        // 31 days (30 kept, and the day before they expire) of a million 1 KB events is 31 GB.
        assert!((e.storage_gb - 31.0).abs() < 1e-9);
        assert!((e.total() - (19.0234375 + 7.75)).abs() < 1e-9);
    }

    #[test]
    fn dashboards_are_priced_as_reads() {
        let traffic = Traffic {
            events_per_day: 0.0,
            dashboards_per_day: 1_000.0,
            sites: 1.0,
            raw_retention_days: 30.0,
            aggregate_days: 0.0,
        };
        let e = Estimate::new(&costs(), &traffic);
        assert!((e.read_units - 3_043_750.0).abs() < 1e-6);
        assert!((e.read_cost - 0.38046875).abs() < 1e-9);
    }

    #[test]
    fn a_bench_file_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bench.json");
        std::fs::write(&path, serde_json::to_string(&costs()).unwrap()).unwrap();
        let read = Costs::from_file(&path).unwrap();
        assert_eq!(read.write_units_per_event, 1.0);
        assert_eq!(read.source, path.display().to_string());
        std::fs::write(&path, "{}").unwrap();
        assert!(Costs::from_file(&path).is_err());
    }
}
