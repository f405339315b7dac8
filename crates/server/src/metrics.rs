//! Tally's operational figures in the Prometheus text exposition format, for `GET /metrics`
//! (served by [`crate::probes`]).
//!
//! The server knows nothing of where the figures come from: the `tally` binary hands it a
//! [`MetricsSource`] (any `Fn() -> MetricsSnapshot` is one) that reads the pipeline's counters,
//! the aggregator's state and the table's capacity meter, and this module only renders them.
//!
//! ```
//! use server::metrics::{MetricsSnapshot, render};
//!
//! let mut snapshot = MetricsSnapshot::default();
//! snapshot.events_accepted = 3;
//! snapshot.events_dropped.push(("bot".into(), 1));
//! let text = render(&snapshot);
//! assert!(text.contains("tally_events_accepted_total 3\n"));
//! assert!(text.contains("tally_events_dropped_total{reason=\"bot\"} 1\n"));
//! ```

use std::fmt::Write;

/// The figures `/metrics` reports, read at the moment of the request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsSnapshot {
    /// Events stored since the process started.
    pub events_accepted: u64,
    /// Events dropped on purpose (bots, excluded addresses, unknown sites), by reason.
    pub events_dropped: Vec<(String, u64)>,
    /// Events refused by validation.
    pub events_invalid: u64,
    /// Seconds since the oldest unflushed aggregate delta was taken in; 0 when none waits.
    pub flush_lag_seconds: f64,
    /// Stored events whose aggregate deltas are not flushed yet.
    pub pending_events: u64,
    /// Flushes of an epoch that failed and will be retried (a transient storage failure).
    pub flush_errors: u64,
    /// Aggregate items a flush could not write and will not retry (refused by validation);
    /// each is logged with its key. Any of these is a bug to report.
    pub flush_item_errors: u64,
    /// Write request units the table has consumed through this process.
    pub store_write_units: f64,
    /// Read request units the table has consumed through this process.
    pub store_read_units: f64,
    /// Events this process handed to the process holding their visitor's session.
    pub events_handed_over: u64,
    /// Events other processes handed to this one.
    pub events_taken_over: u64,
    /// Runs of stopped processes (killed, crashed, or caught mid-flight by a backup) whose
    /// unflushed events this process aggregated.
    pub runs_recovered: u64,
    /// Sessions held in memory now.
    pub cached_sessions: u64,
    /// Visitors' session items read because the visitor was not in memory.
    pub session_lookups: u64,
    /// Events that waited for sessions leaving memory to be written, the cache being full.
    pub events_waited_for_room: u64,
    /// Visitors' session items written for live sessions leaving a full cache.
    pub sessions_evicted_written: u64,
    /// Live sessions leaving a full cache packed in memory instead (ingesting alone).
    pub sessions_evicted_packed: u64,
    /// Sessions packed in memory now.
    pub packed_sessions: u64,
}

/// Where the figures come from: the `tally` binary implements it over the analytics crate.
pub trait MetricsSource: Send + Sync + 'static {
    /// The figures as they are now.
    fn snapshot(&self) -> MetricsSnapshot;
}

impl<F> MetricsSource for F
where
    F: Fn() -> MetricsSnapshot + Send + Sync + 'static,
{
    fn snapshot(&self) -> MetricsSnapshot {
        self()
    }
}

/// The content type of the Prometheus text format, version 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Renders `snapshot` in the Prometheus text format, one `# HELP` and `# TYPE` per family.
pub fn render(snapshot: &MetricsSnapshot) -> String {
    let mut out = String::new();
    family(&mut out, "tally_events_accepted_total", "counter", "Events stored.");
    sample(&mut out, "tally_events_accepted_total", "", snapshot.events_accepted as f64);
    family(&mut out, "tally_events_dropped_total", "counter", "Events dropped on purpose, by reason.");
    for (reason, count) in &snapshot.events_dropped {
        let labels = format!("{{reason=\"{}\"}}", escape_label(reason));
        sample(&mut out, "tally_events_dropped_total", &labels, *count as f64);
    }
    family(&mut out, "tally_events_invalid_total", "counter", "Events refused by validation.");
    sample(&mut out, "tally_events_invalid_total", "", snapshot.events_invalid as f64);
    family(&mut out, "tally_flush_lag_seconds", "gauge", "Age of the oldest aggregate delta not yet flushed.");
    sample(&mut out, "tally_flush_lag_seconds", "", snapshot.flush_lag_seconds);
    family(&mut out, "tally_pending_events", "gauge", "Stored events whose aggregate deltas are not yet flushed.");
    sample(&mut out, "tally_pending_events", "", snapshot.pending_events as f64);
    family(&mut out, "tally_flush_errors_total", "counter", "Epoch flushes that failed and will be retried.");
    sample(&mut out, "tally_flush_errors_total", "", snapshot.flush_errors as f64);
    family(
        &mut out,
        "tally_flush_item_errors_total",
        "counter",
        "Aggregate items a flush could not write and left out (logged with their keys).",
    );
    sample(&mut out, "tally_flush_item_errors_total", "", snapshot.flush_item_errors as f64);
    family(&mut out, "tally_store_write_units_total", "counter", "Write request units consumed by the table.");
    sample(&mut out, "tally_store_write_units_total", "", snapshot.store_write_units);
    family(&mut out, "tally_store_read_units_total", "counter", "Read request units consumed by the table.");
    sample(&mut out, "tally_store_read_units_total", "", snapshot.store_read_units);
    family(
        &mut out,
        "tally_events_handed_over_total",
        "counter",
        "Events handed to the process holding their visitor's session.",
    );
    sample(&mut out, "tally_events_handed_over_total", "", snapshot.events_handed_over as f64);
    family(&mut out, "tally_events_taken_over_total", "counter", "Events other processes handed to this one.");
    sample(&mut out, "tally_events_taken_over_total", "", snapshot.events_taken_over as f64);
    family(
        &mut out,
        "tally_runs_recovered_total",
        "counter",
        "Runs of stopped processes whose unflushed events this process aggregated.",
    );
    sample(&mut out, "tally_runs_recovered_total", "", snapshot.runs_recovered as f64);
    family(&mut out, "tally_cached_sessions", "gauge", "Visitors' sessions held in memory.");
    sample(&mut out, "tally_cached_sessions", "", snapshot.cached_sessions as f64);
    family(
        &mut out,
        "tally_session_lookups_total",
        "counter",
        "Visitors' session items read because the visitor was not in memory.",
    );
    sample(&mut out, "tally_session_lookups_total", "", snapshot.session_lookups as f64);
    family(
        &mut out,
        "tally_events_waited_for_room_total",
        "counter",
        "Events that waited for sessions leaving a full cache to be written.",
    );
    sample(&mut out, "tally_events_waited_for_room_total", "", snapshot.events_waited_for_room as f64);
    family(
        &mut out,
        "tally_sessions_evicted_written_total",
        "counter",
        "Visitors' session items written for live sessions leaving a full cache.",
    );
    sample(&mut out, "tally_sessions_evicted_written_total", "", snapshot.sessions_evicted_written as f64);
    family(
        &mut out,
        "tally_sessions_evicted_packed_total",
        "counter",
        "Live sessions leaving a full cache packed in memory instead of written.",
    );
    sample(&mut out, "tally_sessions_evicted_packed_total", "", snapshot.sessions_evicted_packed as f64);
    family(&mut out, "tally_packed_sessions", "gauge", "Sessions packed in memory now.");
    sample(&mut out, "tally_packed_sessions", "", snapshot.packed_sessions as f64);
    out
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    // Writing to a String cannot fail.
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &str, value: f64) {
    let _ = if value.is_finite() {
        writeln!(out, "{name}{labels} {value}")
    } else if value.is_nan() {
        writeln!(out, "{name}{labels} NaN")
    } else if value > 0.0 {
        writeln!(out, "{name}{labels} +Inf")
    } else {
        writeln!(out, "{name}{labels} -Inf")
    };
}

/// Escapes a label value as the text format requires: backslash, double quote and newline.
fn escape_label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_rendered_with_its_values() {
        let snapshot = MetricsSnapshot {
            events_accepted: 10,
            events_dropped: vec![("bot".into(), 2), ("excluded_ip".into(), 1)],
            events_invalid: 4,
            flush_lag_seconds: 1.5,
            pending_events: 7,
            flush_errors: 2,
            flush_item_errors: 3,
            store_write_units: 12.0,
            store_read_units: 0.5,
            events_handed_over: 6,
            events_taken_over: 8,
            runs_recovered: 1,
            cached_sessions: 20_000,
            session_lookups: 9,
            events_waited_for_room: 11,
            sessions_evicted_written: 13,
            sessions_evicted_packed: 14,
            packed_sessions: 15,
        };
        let text = render(&snapshot);
        for line in [
            "tally_events_accepted_total 10",
            "tally_events_dropped_total{reason=\"bot\"} 2",
            "tally_events_dropped_total{reason=\"excluded_ip\"} 1",
            "tally_events_invalid_total 4",
            "tally_flush_lag_seconds 1.5",
            "tally_pending_events 7",
            "tally_flush_errors_total 2",
            "tally_flush_item_errors_total 3",
            "tally_store_write_units_total 12",
            "tally_store_read_units_total 0.5",
            "tally_events_handed_over_total 6",
            "tally_events_taken_over_total 8",
            "tally_runs_recovered_total 1",
            "tally_cached_sessions 20000",
            "tally_session_lookups_total 9",
            "tally_events_waited_for_room_total 11",
            "tally_sessions_evicted_written_total 13",
            "tally_sessions_evicted_packed_total 14",
            "tally_packed_sessions 15",
            "# TYPE tally_packed_sessions gauge",
            "# TYPE tally_cached_sessions gauge",
            "# TYPE tally_pending_events gauge",
            "# TYPE tally_events_accepted_total counter",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} missing from:\n{text}");
        }
    }

    #[test]
    fn label_values_are_escaped_and_odd_numbers_rendered() {
        let snapshot = MetricsSnapshot {
            events_dropped: vec![("a\"b\\c\nd".into(), 1)],
            flush_lag_seconds: f64::NAN,
            store_read_units: f64::INFINITY,
            ..MetricsSnapshot::default()
        };
        let text = render(&snapshot);
        assert!(text.contains("tally_events_dropped_total{reason=\"a\\\"b\\\\c\\nd\"} 1\n"), "{text}");
        assert!(text.contains("tally_flush_lag_seconds NaN\n"));
        assert!(text.contains("tally_store_read_units_total +Inf\n"));
    }

    #[test]
    fn a_closure_is_a_source() {
        let source: Box<dyn MetricsSource> =
            Box::new(|| MetricsSnapshot { pending_events: 3, ..MetricsSnapshot::default() });
        assert_eq!(source.snapshot().pending_events, 3);
    }
}
