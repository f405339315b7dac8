//! Applying one epoch's accumulated deltas to the aggregate items, exactly once.
//!
//! Each touched item is written whole, with its counters added, its sketch merged,
//! `flushes[run] = epoch` and `version + 1`, under the condition that the version is the one read
//! (or that the item does not exist). An item whose `flushes[run]` already reaches the epoch is
//! skipped: the flushes of one run are sequential, so that test is exactly "already applied". A
//! condition failure means another run wrote the item in between: it is read again and retried.
//! Versions, counters and sketches are cached after the first read, so a steady-state flush reads
//! nothing.

use std::collections::{BTreeSet, HashMap};

use futures::future::BoxFuture;
use futures::stream::{self, StreamExt};
use model::expr::attr;
use model::{PutMode, Table};

use super::codec::{StoredAggregate, agg_key_fields};
use super::deltas::for_each_delta;
use super::{AggregateError, SiteSettings};
use crate::period::SiteZone;
use crate::sketch::VisitorSketch;
use crate::stored::{AggKey, Counters, Period, StoredEvent};

/// What an epoch adds to one item: counters and the visitors seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Pending {
    pub counters: Counters,
    pub visitors: hashbrown::HashSet<u64>,
}

/// One epoch's deltas, summed per item. A `hashbrown` map with its default hasher (foldhash):
/// every event adds about fifty deltas, looked up by [`AggKeyRef`] without allocating, and
/// std's SipHash would be most of the cost. The keys are Tally's own labels, not attacker-chosen
/// lengths, so a fast non-cryptographic hash with a random seed is enough.
pub(crate) type Accumulator = hashbrown::HashMap<AggKey, Pending>;

/// Adds `event`'s deltas to `acc`, leaving out minute buckets before `minutes_from` (ms).
pub(crate) fn accumulate_from(acc: &mut Accumulator, event: &StoredEvent, zone: &SiteZone, minutes_from: i64) {
    for_each_delta(event, zone, minutes_from, |key, delta| {
        let p = match acc.get_mut(&key) {
            Some(p) => p,
            None => acc.entry(key.to_owned_key()).or_default(),
        };
        p.counters.add(&delta.counters);
        p.visitors.extend(delta.visitor);
    });
}

/// Aggregate items as last read or written by this run, with the epoch that last touched them.
#[derive(Default)]
pub(crate) struct ItemCache {
    items: hashbrown::HashMap<AggKey, (StoredAggregate, u64)>,
}

/// What a cached item costs besides its sketch: its key's strings, counters and map slot.
const ITEM_OVERHEAD_BYTES: usize = 256;

impl ItemCache {
    /// Forgets items untouched for many epochs (minute buckets pass quickly), and everything when
    /// the cache is over `max_items` items or about `max_bytes` bytes (a busy item's dense
    /// sketch holds 8–16 KB, so a count alone does not bound memory).
    pub fn trim(&mut self, epoch: u64, max_items: usize, max_bytes: usize) {
        self.items.retain(|_, (_, last)| last.saturating_add(256) >= epoch);
        if self.items.len() > max_items || self.memory_bytes() > max_bytes {
            self.items.clear();
        }
    }

    /// About how many bytes the cached items hold.
    pub fn memory_bytes(&self) -> usize {
        self.items
            .values()
            .map(|(item, _)| ITEM_OVERHEAD_BYTES + item.sketch.as_ref().map_or(0, VisitorSketch::memory_bytes))
            .sum()
    }

    /// How many items are cached.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Caches `item` as touched at `epoch`.
    #[cfg(test)]
    pub fn insert(&mut self, key: AggKey, item: StoredAggregate, epoch: u64) {
        self.items.insert(key, (item, epoch));
    }
}

/// The TTL of an aggregate item of `period` written now: minute 2 hours, hour, day and week the site's
/// retention after the write, month never. The TTL moves with every write, so an item expires
/// its retention after the last event that touched it.
fn ttl(period: Period, settings: Option<&SiteSettings>, now_s: i64) -> Option<i64> {
    let fallback = SiteSettings::fallback();
    let s = settings.unwrap_or(&fallback);
    match period {
        Period::Minute => Some(now_s + 2 * 3600),
        Period::Hour => Some(now_s + i64::from(s.retention_hourly_days) * 86_400),
        Period::Day | Period::Week => Some(now_s + i64::from(s.retention_daily_days) * 86_400),
        Period::Month => None,
    }
}

/// How an epoch's application went.
pub(crate) struct Outcome {
    pub written: u64,
    pub skipped: u64,
    pub conflicts: u64,
    /// The first error, if any item failed; the items that succeeded stay applied.
    pub result: Result<(), AggregateError>,
}

enum Done {
    Written,
    Skipped,
}

/// One item's write: what happened, the item as now stored, and the conflicts retried.
type WriteResult = Result<(Done, StoredAggregate, u64), AggregateError>;

/// Everything one epoch's writes need.
pub(crate) struct Writer<'a> {
    pub table: &'a Table,
    pub run_id: &'a str,
    pub epoch: u64,
    pub settings: &'a HashMap<String, SiteSettings>,
    pub finished: &'a BTreeSet<String>,
    pub concurrency: usize,
    pub max_attempts: u32,
}

async fn read(table: &Table, key: &AggKey) -> Result<StoredAggregate, AggregateError> {
    Ok(match table.get_with("Aggregate", agg_key_fields(key), true).await? {
        Some(r) => StoredAggregate::from_record(&r)?,
        None => StoredAggregate::default(),
    })
}

impl Writer<'_> {
    /// Applies `acc` with bounded concurrency; items found in `cache` are not read first.
    pub async fn apply(&self, acc: &Accumulator, cache: &mut ItemCache) -> Outcome {
        let now_s = jiff::Timestamp::now().as_second();
        // Boxed futures keep the caller's future `Send` without higher-ranked lifetime trouble.
        let jobs: Vec<BoxFuture<'_, (&AggKey, WriteResult)>> = acc
            .iter()
            .map(|(key, pending)| {
                let cached = cache.items.remove(key).map(|(c, _)| c);
                let job: BoxFuture<'_, _> =
                    Box::pin(async move { (key, self.write_one(key, pending, cached, now_s).await) });
                job
            })
            .collect();
        let results: Vec<_> = stream::iter(jobs).buffer_unordered(self.concurrency.max(1)).collect().await;
        let mut outcome = Outcome { written: 0, skipped: 0, conflicts: 0, result: Ok(()) };
        for (key, r) in results {
            match r {
                Ok((done, item, conflicts)) => {
                    outcome.conflicts += conflicts;
                    match done {
                        Done::Written => outcome.written += 1,
                        Done::Skipped => outcome.skipped += 1,
                    }
                    cache.items.insert(key.clone(), (item, self.epoch));
                }
                Err(e) => {
                    if outcome.result.is_ok() {
                        outcome.result = Err(e);
                    }
                }
            }
        }
        outcome
    }

    async fn write_one(
        &self,
        key: &AggKey,
        pending: &Pending,
        cached: Option<StoredAggregate>,
        now_s: i64,
    ) -> WriteResult {
        let mut current = match cached {
            Some(c) => c,
            None => read(self.table, key).await?,
        };
        let ttl = ttl(key.period, self.settings.get(&key.site_id), now_s);
        let mut conflicts = 0;
        for _ in 0..self.max_attempts.max(1) {
            if current.flushes.get(self.run_id).is_some_and(|&e| e >= self.epoch) {
                return Ok((Done::Skipped, current, conflicts));
            }
            let mut next = current.clone();
            next.counters.add(&pending.counters);
            if !pending.visitors.is_empty() {
                let sketch = next.sketch.get_or_insert_with(VisitorSketch::new);
                pending.visitors.iter().for_each(|&v| sketch.insert_u64(v));
            }
            next.flushes.insert(self.run_id.to_owned(), self.epoch);
            next.flushes.retain(|run, _| !self.finished.contains(run));
            let version = current.version.map_or(1, |v| v + 1);
            let item = next.to_item(key, version, ttl, self.finished);
            let written = match current.version {
                None => self.table.put_with("Aggregate", item, PutMode::Create, None).await,
                Some(v) => self.table.put_with("Aggregate", item, PutMode::Put, Some(&attr("version").eq(v))).await,
            };
            match written {
                Ok(_) => {
                    next.version = Some(version);
                    return Ok((Done::Written, next, conflicts));
                }
                Err(e) if e.is_condition_failed() => {
                    conflicts += 1;
                    current = read(self.table, key).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(AggregateError::Contended {
            key: format!("{}/{}/{}/{}/{}", key.site_id, key.period.as_str(), key.dimension, key.bucket, key.value),
            attempts: self.max_attempts,
        })
    }
}
