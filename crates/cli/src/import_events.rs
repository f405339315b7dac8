//! How `tally import` reads an events file and ingests its lines: the file read on every core,
//! and its chunks of lines ingested one after another without waiting for each to end.
//!
//! **Reading.** NDJSON is cut into one part per core at line ends; each part is parsed, and its
//! lines' import ids worked out, on a thread of its own, and the parts are put back together in
//! line order (CSV, whose quoted fields may span lines, is read on one thread).
//!
//! **Ingesting.** The events, in time order, are cut into chunks of
//! [`CHUNK_LINES`](crate::import_lines::CHUNK_LINES) lines. Each chunk's ids are stored as
//! `pending` before any of its events is handed on, and as `done` once every one of its events
//! is durable. Up to [`CHUNKS_IN_FLIGHT`] chunks are ingested at once, so the lanes are never
//! left idle while a chunk's last lanes finish (a chunk's lines are spread over the lanes
//! unevenly). The lanes live as long as the import: each is a task holding a queue, and a
//! visitor's events always go to the same lane in time order, so each visitor's events are
//! ingested in the order of their times, as a one-at-a-time import ingests them; different
//! visitors' events may be stored in another order than their times, which nothing depends on
//! but the session cache, told the oldest time still to come ([`Pipeline::hold_sessions_from`]).
//!
//! A crash leaves at most [`CHUNKS_IN_FLIGHT`] chunks pending; the next import settles them from
//! the event blocks (`import_lines::Ledger::resolve_pending`), as it settles one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use analytics::pipeline::{ImportEvent, IngestResult, Pipeline, PipelineError};
use analytics::sites::Site;
use anyhow::{Result, anyhow};
use model::Table;
use server::wire::import::{Format, Parsed};
use tokio::sync::mpsc;

use crate::import_lines::{CHUNK_LINES, LineId, MAX_CHUNK_LINES};

/// How many visitors an import ingests at once. A lane waits for each of its events to be
/// durable before its next, so this bounds the events each block write round holds: 1 M events
/// ingested in 33.3 s with 4,096 against 38.5 s with 1,024 while another process kept a core
/// busy, 19.4–20.4 s against 19.8–24.2 s on a quiet machine (BENCHMARKS.md, "eighth session").
/// Memory is bounded by the chunks in flight, not by the lanes.
pub const LANES: usize = 4096;

/// How many chunks of lines are being ingested at once: the most a crash leaves pending.
pub const CHUNKS_IN_FLIGHT: usize = 3;

/// Below this size a file is read on one thread.
const PARALLEL_FROM_BYTES: usize = 1 << 20;

/// The events of `body` (their line numbers from 1) and each line's import id (index 0 is
/// line 1), read on every core for NDJSON.
pub fn read(body: &[u8], format: Format, site: &Site) -> Result<(Parsed, Vec<LineId>), String> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if format != Format::Ndjson || threads < 2 || body.len() < PARALLEL_FROM_BYTES {
        let parsed = server::wire::import::parse(body, format, site)?;
        return Ok((parsed, crate::import_lines::ids_of_lines(body)));
    }
    // Parts ending at a line's end, each with the number of its first line.
    let mut parts: Vec<(usize, &[u8])> = Vec::with_capacity(threads);
    let (mut start, mut line) = (0usize, 1usize);
    for k in 1..=threads {
        let end = if k == threads {
            body.len()
        } else {
            let target = (body.len() * k / threads).max(start);
            body[target..].iter().position(|b| *b == b'\n').map_or(body.len(), |at| target + at)
        };
        let part = &body[start..end];
        parts.push((line, part));
        line += part.iter().filter(|b| **b == b'\n').count() + 1;
        if end == body.len() {
            break;
        }
        start = end + 1;
    }
    let results: Vec<(Parsed, Vec<LineId>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = parts
            .iter()
            .map(|&(first, part)| {
                scope.spawn(move || {
                    let parsed = server::wire::import::parse_ndjson_from(part, first, site);
                    let ids: Vec<LineId> = part
                        .split(|b| *b == b'\n')
                        .enumerate()
                        .map(|(i, text)| crate::import_lines::line_id(first + i, text))
                        .collect();
                    (parsed, ids)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    let mut out = Parsed::default();
    let mut ids = Vec::with_capacity(line);
    for (parsed, part_ids) in results {
        if out.events.is_empty() {
            out.events = parsed.events;
        } else {
            out.events.extend(parsed.events);
        }
        out.errors.merge(parsed.errors);
        ids.extend(part_ids);
    }
    Ok((out, ids))
}

/// What ingesting the chunks did.
#[derive(Debug, Default)]
pub struct Ingested {
    /// Events stored.
    pub imported: u64,
    /// Events dropped as bots or excluded traffic.
    pub dropped: u64,
    /// Lines refused while ingesting, with the reason.
    pub refused: Vec<(usize, String)>,
}

/// A chunk of lines: its record's name, its lines' ids and its time span.
struct Chunk {
    name: String,
    ids: Vec<LineId>,
    first_ts: i64,
    last_ts: i64,
    events: Vec<(usize, ImportEvent)>,
}

/// What a lane tells the import: an event not stored (refused, or failed), or that it stored
/// the last event of a chunk.
enum Told {
    NotStored(usize, IngestResult),
    ChunkDone(usize),
}

/// What the lanes count together.
#[derive(Default)]
struct Counts {
    imported: AtomicU64,
    dropped: AtomicU64,
    done: AtomicUsize,
}

/// Ingests `events` (line, import id, event; in time order) into `site`, chunk by chunk, each
/// recorded pending before it starts and done once it is durable (see the module's notes), and
/// calls `progress` with the number of events done about every 10,000 events. An event that
/// could not be stored stops the import, with its line: the chunks not finished stay pending.
pub async fn ingest(
    pipeline: &Arc<Pipeline>,
    table: &Table,
    site: &Site,
    run_id: &str,
    events: Vec<(usize, LineId, ImportEvent)>,
    progress: &dyn Fn(usize),
) -> Result<Ingested> {
    let chunks = cut(run_id, events);
    // What each chunk has left to store: a lane that stores a chunk's last event says so.
    let left: Arc<Vec<AtomicUsize>> = Arc::new(chunks.iter().map(|c| AtomicUsize::new(c.events.len())).collect());
    let counts = Arc::new(Counts::default());
    let (told_tx, mut told) = mpsc::unbounded_channel::<Told>();
    let mut lanes = Vec::with_capacity(LANES);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..LANES {
        let (tx, mut rx) = mpsc::unbounded_channel::<(usize, usize, ImportEvent)>();
        lanes.push(tx);
        let (pipeline, site, told, left, counts) =
            (pipeline.clone(), site.clone(), told_tx.clone(), left.clone(), counts.clone());
        tasks.spawn(async move {
            while let Some((chunk, line, event)) = rx.recv().await {
                match pipeline.import(&site, event).await {
                    IngestResult::Accepted => counts.imported.fetch_add(1, Ordering::Relaxed),
                    IngestResult::Dropped(_) => counts.dropped.fetch_add(1, Ordering::Relaxed),
                    other => {
                        // Told before the chunk's end is, so the import sees it first.
                        let _ = told.send(Told::NotStored(line, other));
                        0
                    }
                };
                counts.done.fetch_add(1, Ordering::Relaxed);
                if left[chunk].fetch_sub(1, Ordering::AcqRel) == 1 && told.send(Told::ChunkDone(chunk)).is_err() {
                    return;
                }
            }
        });
    }
    drop(told_tx);
    let result = drive(pipeline, table, site, run_id, chunks, &lanes, &mut told, &counts, progress).await;
    // The lanes end once their queues are closed and empty (at once, after an error).
    drop(lanes);
    drop(told);
    while let Some(finished) = tasks.join_next().await {
        if let Err(e) = finished
            && e.is_panic()
        {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    pipeline.hold_sessions_from(None);
    let mut out = result?;
    out.imported = counts.imported.load(Ordering::SeqCst);
    out.dropped = counts.dropped.load(Ordering::SeqCst);
    Ok(out)
}

/// `events` (in time order) in chunks of [`CHUNK_LINES`] lines, each named after `run_id`.
fn cut(run_id: &str, events: Vec<(usize, LineId, ImportEvent)>) -> Vec<Chunk> {
    let mut chunks = Vec::new();
    let mut rest = events.into_iter().peekable();
    while rest.peek().is_some() {
        let mut chunk: Vec<_> = rest.by_ref().take(CHUNK_LINES).collect();
        // Events of one time stay in one chunk, so that a run's chunks never share a time and a
        // pending one is settled by its own events only.
        if let Some(last) = chunk.last().map(|(_, _, e)| e.raw.timestamp_ms) {
            while chunk.len() < MAX_CHUNK_LINES
                && let Some(next) = rest.next_if(|(_, _, e)| e.raw.timestamp_ms == last)
            {
                chunk.push(next);
            }
        }
        let name = format!("{run_id}-{:06}", chunks.len());
        let ids = chunk.iter().map(|(_, id, _)| *id).collect();
        let first_ts = chunk.iter().map(|(_, _, e)| e.raw.timestamp_ms).min().unwrap_or(0);
        let last_ts = chunk.iter().map(|(_, _, e)| e.raw.timestamp_ms).max().unwrap_or(0);
        let events = chunk.into_iter().map(|(line, _, event)| (line, event)).collect();
        chunks.push(Chunk { name, ids, first_ts, last_ts, events });
    }
    chunks
}

/// The lane of a visitor's events: fixed by its key (its visitor id, or its address and
/// User-Agent), as `Pipeline::import_many` fixes it.
fn lane_of(event: &ImportEvent) -> usize {
    use std::hash::Hasher;
    let mut h = std::hash::DefaultHasher::new();
    match &event.visitor {
        Some(v) => h.write(v.as_bytes()),
        None => {
            h.write(event.raw.peer_ip.to_string().as_bytes());
            h.write(&[0]);
            h.write(event.raw.user_agent.as_bytes());
        }
    }
    (h.finish() % LANES as u64) as usize
}

#[allow(clippy::too_many_arguments)]
async fn drive(
    pipeline: &Arc<Pipeline>,
    table: &Table,
    site: &Site,
    run_id: &str,
    chunks: Vec<Chunk>,
    lanes: &[mpsc::UnboundedSender<(usize, usize, ImportEvent)>],
    told: &mut mpsc::UnboundedReceiver<Told>,
    counts: &Counts,
    progress: &dyn Fn(usize),
) -> Result<Ingested> {
    let mut out = Ingested::default();
    // The chunks in flight, by number: their names, ids and first times.
    let mut in_flight: BTreeMap<usize, (String, Vec<LineId>, i64)> = BTreeMap::new();
    let mut rest = chunks.into_iter().enumerate();
    let mut failed: Option<(usize, PipelineError)> = None;
    let mut ticker = tokio::time::interval(Duration::from_millis(250));
    let mut reported = 0usize;
    loop {
        // Keep the chunks in flight: each recorded pending before its first event is handed on.
        while failed.is_none() && in_flight.len() < CHUNKS_IN_FLIGHT {
            let Some((number, chunk)) = rest.next() else { break };
            let pending = Some((run_id, chunk.first_ts, chunk.last_ts));
            crate::import_lines::write(table, site, &chunk.name, "pending", pending, &chunk.ids).await?;
            in_flight.insert(number, (chunk.name, chunk.ids, chunk.first_ts));
            hold_from(pipeline, &in_flight);
            for (line, event) in chunk.events {
                let lane = lane_of(&event);
                lanes[lane].send((number, line, event)).map_err(|_| anyhow!("an import lane stopped"))?;
            }
        }
        if in_flight.is_empty() {
            break;
        }
        let message = tokio::select! {
            message = told.recv() => message,
            _ = ticker.tick() => {
                let done = counts.done.load(Ordering::Relaxed);
                if done >= reported + 10_000 {
                    reported = done;
                    progress(done);
                }
                continue;
            }
        };
        match message {
            None => return Err(anyhow!("the import lanes stopped before their events were stored")),
            Some(Told::NotStored(line, outcome)) => match outcome {
                IngestResult::Invalid(e) => out.refused.push((line, e.to_string())),
                IngestResult::UnknownSite => out.refused.push((line, "unknown site".to_owned())),
                IngestResult::Failed(e) => {
                    if failed.as_ref().is_none_or(|(first, _)| line < *first) {
                        failed = Some((line, e));
                    }
                }
                other => out.refused.push((line, format!("{other:?}"))),
            },
            Some(Told::ChunkDone(number)) => {
                let (name, ids, _) = in_flight.remove(&number).expect("a chunk done was in flight");
                hold_from(pipeline, &in_flight);
                // Every event of the chunk is durable (acknowledged), or refused or dropped for
                // good: its lines are done, unless one failed (then it stays pending, settled by
                // the next import).
                if failed.is_none() {
                    crate::import_lines::write(table, site, &name, "done", None, &ids).await?;
                }
            }
        }
    }
    match failed {
        Some((line, e)) => Err(anyhow!("line {line}: {e}")),
        None => Ok(out),
    }
}

/// Tells the session cache the oldest time still to be ingested: the first of the oldest chunk
/// in flight (the chunks are in time order, and every earlier one is done).
fn hold_from(pipeline: &Pipeline, in_flight: &BTreeMap<usize, (String, Vec<LineId>, i64)>) {
    if let Some((_, _, first_ts)) = in_flight.values().next() {
        pipeline.hold_sessions_from(Some(*first_ts));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site() -> Site {
        Site {
            site_id: "01SITE".into(),
            domain: "shop.test".into(),
            domains: Vec::new(),
            umami_id: String::new(),
            zone: analytics::period::SiteZone::new("UTC").unwrap(),
            retention_event_days: 30,
            retention_hourly_days: 90,
            retention_daily_days: 730,
            weeks_from_ms: 0,
            excluded_ips: analytics::enrich::IpRanges::new(),
            goals: Vec::new(),
            funnels: Vec::new(),
            segments: Vec::new(),
            import_salt: None,
        }
    }

    #[test]
    fn a_file_read_in_parts_reads_as_it_does_whole() {
        // More than a part per core, with blank, bad and CRLF lines among the good ones.
        let mut body = Vec::new();
        for i in 0..40_000 {
            let line = match i % 1000 {
                7 => String::new(),
                13 => "not json".to_owned(),
                17 => format!("{{\"timestamp\":{i},\"url\":\"https://shop.test/crlf\"}}\r"),
                _ => format!(
                    "{{\"timestamp\":{},\"url\":\"https://shop.test/p{i}\",\"visitor\":\"v{}\"}}",
                    1_000 + i,
                    i % 77
                ),
            };
            body.extend_from_slice(line.as_bytes());
            body.push(b'\n');
        }
        assert!(body.len() > PARALLEL_FROM_BYTES);
        let site = site();
        let (parts, ids) = read(&body, Format::Ndjson, &site).unwrap();
        let whole = server::wire::import::parse(&body, Format::Ndjson, &site).unwrap();
        assert_eq!(ids, crate::import_lines::ids_of_lines(&body));
        let lines = |p: &Parsed| p.events.iter().map(|(n, e)| (*n, e.raw.url.clone())).collect::<Vec<_>>();
        assert_eq!(lines(&parts), lines(&whole));
        assert_eq!(parts.errors, whole.errors);
        assert_eq!(parts.errors.total(), 40);
        // Without a last line end, and tiny parts.
        let short =
            b"{\"timestamp\":1,\"url\":\"https://shop.test/\"}\n\n{\"timestamp\":2,\"url\":\"https://shop.test/\"}";
        assert_eq!(crate::import_lines::ids_of_lines(short).len(), 3);
    }

    #[test]
    fn chunks_keep_the_events_of_one_time_together() {
        let event = |ts: i64| {
            let mut raw = analytics::event::RawEvent::pageview("https://shop.test/", "shop.test");
            raw.timestamp_ms = ts;
            ImportEvent { raw, visitor: None, country: None, client: None }
        };
        // The chunk's last time runs on past its size, and the next chunk starts at a new time.
        let n = CHUNK_LINES + 10;
        let events: Vec<_> =
            (0..n).map(|i| (i + 1, [0u8; 16], event(if i < CHUNK_LINES - 5 { i as i64 } else { 1 << 40 }))).collect();
        let chunks = cut("RUN", events);
        assert_eq!(chunks.iter().map(|c| c.events.len()).collect::<Vec<_>>(), [n]);
        let events: Vec<_> = (0..n).map(|i| (i + 1, [0u8; 16], event(i as i64))).collect();
        let chunks = cut("RUN", events);
        assert_eq!(chunks.iter().map(|c| c.events.len()).collect::<Vec<_>>(), [CHUNK_LINES, 10]);
        assert_eq!((chunks[1].name.as_str(), chunks[1].first_ts, chunks[1].last_ts), ("RUN-000001", 16_384, 16_393));
        // One time across more lines than a chunk may hold: cut at the most.
        let events: Vec<_> = (0..MAX_CHUNK_LINES + 1).map(|i| (i + 1, [0u8; 16], event(5))).collect();
        assert_eq!(cut("RUN", events).iter().map(|c| c.events.len()).collect::<Vec<_>>(), [MAX_CHUNK_LINES, 1]);
    }
}
