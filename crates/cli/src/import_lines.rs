//! Import ids per line: what makes `tally import` idempotent line by line, not only file by file.
//!
//! Every line (a record of an events file, a row of Umami's export or of its database) has an
//! import id of 16 bytes: for Umami's rows the SHA-256 of their `event_id`, so the CSV export and
//! a direct read of the same database agree; for Tally's own NDJSON and CSV the SHA-256 of the
//! line's number and text, so the same file, a part of it, or a longer copy of it give its lines
//! the same ids. An import reads the site's ids first (`Ledger::load`) and skips every line whose
//! id is there, then ingests the rest in chunks of [`CHUNK_LINES`]: before a chunk it stores the
//! chunk's ids as `pending` with the importing run's id, after it as `done`.
//!
//! A run ingests a few chunks at once (`import_events::CHUNKS_IN_FLIGHT`), in time order, no two
//! of them sharing an event time; one that dies leaves at most those pending. A later import
//! resolves them from the store itself: the event blocks that run wrote hold exactly the events
//! it stored, so each pending line is matched against them by (timestamp, event name), each
//! stored event once; a line matched is done, the others are imported. So neither a rerun of the same file, nor `--force` after a crash, nor a
//! file that repeats part of an earlier one counts a line twice. A chunk whose run is still alive
//! (its heartbeat fresh, its process there) belongs to an import in flight: a second import into
//! the same site then stops rather than guess.

use std::collections::{HashMap, HashSet};

use analytics::event_store;
use analytics::pipeline::ImportEvent;
use analytics::sites::Site;
use analytics::visitor::UtcDay;
use anyhow::{Context, Result, bail};
use model::Table;
use sha2::Digest;
use store::item;

/// A line's import id.
pub type LineId = [u8; 16];

/// Lines to a chunk, recorded pending before they are ingested and done after (256 KB of ids to
/// an item, within DynamoDB's 400 KB); a crash leaves in doubt at most the chunks in flight
/// (`import_events::CHUNKS_IN_FLIGHT`).
pub const CHUNK_LINES: usize = 16_384;

/// The most lines a chunk grows to when the events after its [`CHUNK_LINES`] share its last
/// event's time (320 KB of ids).
pub const MAX_CHUNK_LINES: usize = 20_480;

/// How old a run's heartbeat may be while it still counts as alive (the aggregator's own
/// `dead_after`).
const RUN_DEAD_AFTER_MS: i64 = 30_000;

fn digest(parts: &[&[u8]]) -> LineId {
    let mut h = sha2::Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    let mut id = [0u8; 16];
    id.copy_from_slice(&h.finalize()[..16]);
    id
}

/// The id of line `line` (from 1) of a Tally events file, whose text is `text`.
pub fn line_id(line: usize, text: &[u8]) -> LineId {
    digest(&[b"line", line.to_string().as_bytes(), text.strip_suffix(b"\r").unwrap_or(text)])
}

/// The id of an Umami `website_event` row: its `event_id`, wherever the row was read.
pub fn umami_id(event_id: &str) -> LineId {
    digest(&[b"umami", event_id.trim().to_ascii_lowercase().as_bytes()])
}

/// The id of every line of `body`, by line number (index 0 is line 1).
pub fn ids_of_lines(body: &[u8]) -> Vec<LineId> {
    body.split(|b| *b == b'\n').enumerate().map(|(i, text)| line_id(i + 1, text)).collect()
}

/// A chunk a run was ingesting when it stopped.
struct Pending {
    chunk: String,
    run_id: String,
    first_ts: i64,
    last_ts: i64,
    ids: HashSet<LineId>,
}

/// The import ids of a site: those done, and those of chunks left pending.
pub struct Ledger {
    done: HashSet<LineId>,
    pending: Vec<Pending>,
}

fn split_ids(bytes: &[u8]) -> impl Iterator<Item = LineId> + '_ {
    bytes.chunks_exact(16).map(|c| c.try_into().expect("16 bytes"))
}

impl Ledger {
    /// Every import id stored for `site`.
    pub async fn load(table: &Table, site: &Site) -> Result<Ledger> {
        let records = table
            .query("ImportLines")
            .key(item! { "site_id" => site.site_id.as_str() })
            .consistent()
            .all()
            .await
            .context("reading the site's import ids")?;
        let mut ledger = Ledger { done: HashSet::new(), pending: Vec::new() };
        for r in records {
            let ids = split_ids(r.bytes("ids")?);
            if r.string("state")? == "done" {
                ledger.done.extend(ids);
            } else {
                ledger.pending.push(Pending {
                    chunk: r.string("chunk")?.to_owned(),
                    run_id: r.string("run_id")?.to_owned(),
                    first_ts: r.number("first_ts")?.to_i64().unwrap_or(0),
                    last_ts: r.number("last_ts")?.to_i64().unwrap_or(0),
                    ids: ids.collect(),
                });
            }
        }
        Ok(ledger)
    }

    /// How many ids are known.
    pub fn len(&self) -> usize {
        self.done.len() + self.pending.iter().map(|p| p.ids.len()).sum::<usize>()
    }

    /// Whether line `id` was imported before.
    pub fn is_done(&self, id: &LineId) -> bool {
        self.done.contains(id)
    }

    /// Settles the chunks earlier runs left pending: each line of `lines` in such a chunk is
    /// done when the run's event blocks hold an event of its time and name (as many lines of one
    /// time and name as there are such events), and is imported again otherwise. The chunk is
    /// then stored as done with the lines found. Returns how many lines were found stored.
    pub async fn resolve_pending(
        &mut self,
        table: &Table,
        site: &Site,
        lines: &[(LineId, &ImportEvent)],
    ) -> Result<u64> {
        let mut found = 0u64;
        if self.pending.is_empty() {
            return Ok(0);
        }
        // A chunk whose run is alive is another import in flight, not one in doubt.
        let runs = analytics::aggregate::recovery::list_runs(table).await.context("reading the runs")?;
        let here = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let now = jiff::Timestamp::now().as_millisecond();
        for p in &self.pending {
            let Some(run) = runs.iter().find(|r| r.run_id == p.run_id) else { continue };
            let pid_gone = run.host == here.trim() && !std::path::Path::new(&format!("/proc/{}", run.pid)).exists();
            if run.state == "live" && now - run.heartbeat_ms < RUN_DEAD_AFTER_MS && !pid_gone {
                bail!(
                    "another import (run {}, process {} on {}) is ingesting into this site now; run one import \
                     per site at a time, and try again when it is done",
                    run.run_id,
                    run.pid,
                    run.host
                );
            }
        }
        // A run's chunks are settled together: their lines may share times with each other's
        // (a run ingests a few chunks at once), and each stored event is matched once.
        let mut runs: Vec<(String, Vec<Pending>)> = Vec::new();
        for p in std::mem::take(&mut self.pending) {
            match runs.iter_mut().find(|(run, _)| *run == p.run_id) {
                Some((_, chunks)) => chunks.push(p),
                None => runs.push((p.run_id.clone(), vec![p])),
            }
        }
        for (run_id, chunks) in runs {
            let mut stored: HashMap<(i64, String), usize> = HashMap::new();
            let first = UtcDay::from_unix_ms(chunks.iter().map(|p| p.first_ts).min().unwrap_or(0)).previous();
            let last = UtcDay::from_unix_ms(chunks.iter().map(|p| p.last_ts).max().unwrap_or(0));
            for d in first.days()..=last.days() {
                let blocks = event_store::blocks_of_day(table, &site.site_id, UtcDay::from_days(d)).await?;
                for block in blocks.into_iter().filter(|b| b.run_id == run_id) {
                    for e in block.events()? {
                        *stored.entry((e.ts, e.name)).or_default() += 1;
                    }
                }
            }
            for p in chunks {
                let mut done = Vec::new();
                for (id, event) in lines.iter().filter(|(id, _)| p.ids.contains(id)) {
                    if let Some(n) = stored.get_mut(&(event.raw.timestamp_ms, event.raw.name.clone()))
                        && *n > 0
                    {
                        *n -= 1;
                        done.push(*id);
                    }
                }
                eprintln!(
                    "… an earlier import (run {}) stopped in chunk {}: {} of its lines here were stored, the others are imported now",
                    p.run_id,
                    p.chunk,
                    done.len()
                );
                found += done.len() as u64;
                write(table, site, &p.chunk, "done", None, &done).await?;
                self.done.extend(done);
            }
        }
        Ok(found)
    }
}

/// Stores chunk `chunk`'s ids in `state`, with the run ingesting it and its time span while pending.
pub async fn write(
    table: &Table,
    site: &Site,
    chunk: &str,
    state: &str,
    pending: Option<(&str, i64, i64)>,
    ids: &[LineId],
) -> Result<()> {
    let bytes: Vec<u8> = ids.iter().flatten().copied().collect();
    let mut item = item! { "site_id" => site.site_id.as_str(), "chunk" => chunk, "state" => state, "ids" => bytes };
    if let Some((run, first_ts, last_ts)) = pending {
        item.extend(item! { "run_id" => run, "first_ts" => first_ts, "last_ts" => last_ts });
    }
    table.put("ImportLines", item).await.with_context(|| format!("storing the import ids of chunk {chunk}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_keeps_its_id_in_a_longer_or_shorter_copy_of_its_file() {
        let full = ids_of_lines(b"{\"a\":1}\n{\"b\":2}\r\n{\"c\":3}\n");
        let part = ids_of_lines(b"{\"a\":1}\n{\"b\":2}\n");
        assert_eq!(full[..2], part[..2]);
        assert_ne!(full[0], full[1]);
        // The same text on another line is another event.
        assert_ne!(line_id(1, b"x"), line_id(2, b"x"));
        assert_eq!(umami_id("0B1C9F34-0000"), umami_id(" 0b1c9f34-0000"));
        assert_ne!(umami_id("1"), line_id(1, b"1"));
    }
}
