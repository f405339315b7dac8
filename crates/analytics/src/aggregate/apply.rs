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

use futures::stream::{self, StreamExt};
use model::expr::attr;
use model::{PutMode, Table};

use super::codec::{StoredAggregate, agg_key_fields};
use super::deltas::{Delta, for_each_fine_delta};
use super::session_log::SessionActivity;
use super::{AggregateError, SiteSettings};
use crate::period::SiteZone;
use crate::sketch::VisitorSketch;
use crate::stale::StaleRate;
use crate::stored::{AggKey, AggKeyRef, Counters, Period, StoredEvent};

/// What an epoch adds to one item: counters and the visitors seen.
#[derive(Debug, Clone, Default)]
pub struct Pending {
    /// The counters to add.
    pub counters: Counters,
    /// The visitors to add to the item's sketch.
    pub visitors: Visitors,
}

/// The distinct visitors an epoch saw on one item. Most items see one or two in an epoch (one
/// page in one minute), so the first few are kept inline and compared one by one; busier items
/// get a set. A set that fills ([`SPILL_AT`] ids) is poured into a sketch of the item's own and
/// emptied, so an item holds at most one such set and one sketch, whatever the rate: an epoch's
/// memory follows its items, not its events times their visitors (which, at 5 k new visitors
/// a second, was tens of megabytes of sets per epoch). Either way the ids end up in the item's
/// stored sketch at the flush, whose bytes depend only on which ids it holds, so spilling
/// changes no stored byte.
#[derive(Debug, Clone)]
pub enum Visitors {
    /// Up to four ids.
    Few {
        /// The ids, the first `len` of them used.
        ids: [u64; FEW_VISITORS],
        /// How many are used.
        len: u8,
    },
    /// More, fewer than [`SPILL_AT`].
    Many(hashbrown::HashSet<u64>),
    /// So many that some are in a sketch.
    Spilled(Box<Spilled>),
}

/// The visitors of a busy item: those poured into its sketch, and a set of the ids seen since
/// (fewer than [`SPILL_AT`]; an id may be in both).
#[derive(Debug, Clone)]
pub struct Spilled {
    recent: hashbrown::HashSet<u64>,
    sketch: VisitorSketch,
}

/// How many visitors an item keeps inline before it needs a set.
const FEW_VISITORS: usize = 4;

/// How many ids an item's set holds before they are poured into its sketch. A set of 896
/// holds 1,024 buckets (hashbrown keeps an eighth free), about 9 KB, and pouring it into the
/// sketch keeps the buckets for the next ids; the sketch is at most about 16 KB.
pub const SPILL_AT: usize = 896;

impl Default for Visitors {
    fn default() -> Self {
        Visitors::Few { ids: [0; FEW_VISITORS], len: 0 }
    }
}

impl Visitors {
    /// Adds `id` unless it is there already.
    pub fn insert(&mut self, id: u64) {
        match self {
            Visitors::Few { ids, len } => {
                let used = usize::from(*len);
                if ids[..used].contains(&id) {
                    return;
                }
                if used < FEW_VISITORS {
                    ids[used] = id;
                    *len += 1;
                } else {
                    let mut set: hashbrown::HashSet<u64> = ids.iter().copied().collect();
                    set.insert(id);
                    *self = Visitors::Many(set);
                }
            }
            Visitors::Many(set) => {
                if set.insert(id) && set.len() >= SPILL_AT {
                    let mut sketch = VisitorSketch::new();
                    set.drain().for_each(|v| sketch.insert_u64(v));
                    let recent = std::mem::take(set);
                    *self = Visitors::Spilled(Box::new(Spilled { recent, sketch }));
                }
            }
            Visitors::Spilled(spilled) => {
                if spilled.recent.insert(id) && spilled.recent.len() >= SPILL_AT {
                    let Spilled { recent, sketch } = &mut **spilled;
                    recent.drain().for_each(|v| sketch.insert_u64(v));
                }
            }
        }
    }

    /// Whether none was seen.
    pub fn is_empty(&self) -> bool {
        match self {
            Visitors::Few { len, .. } => *len == 0,
            Visitors::Many(set) => set.is_empty(),
            // A sketch is made only of a full set.
            Visitors::Spilled(_) => false,
        }
    }

    /// The ids not in a sketch: every id of a few or many, a spilled item's recent ones.
    fn unspilled(&self) -> impl Iterator<Item = u64> + '_ {
        let (few, set) = match self {
            Visitors::Few { ids, len } => (&ids[..usize::from(*len)], None),
            Visitors::Many(set) => (&[][..], Some(set)),
            Visitors::Spilled(spilled) => (&[][..], Some(&spilled.recent)),
        };
        few.iter().copied().chain(set.into_iter().flat_map(|s| s.iter().copied()))
    }

    /// Adds every visitor `other` holds.
    pub fn merge(&mut self, other: &Visitors) {
        if self.is_empty() {
            *self = other.clone();
            return;
        }
        other.unspilled().for_each(|v| self.insert(v));
        if let Visitors::Spilled(theirs) = other {
            if let Visitors::Spilled(mine) = self {
                mine.sketch.merge(&theirs.sketch);
            } else {
                let recent = self.unspilled().collect();
                *self = Visitors::Spilled(Box::new(Spilled { recent, sketch: theirs.sketch.clone() }));
            }
        }
    }

    /// Adds every visitor to `sketch`.
    pub fn add_to(&self, sketch: &mut VisitorSketch) {
        self.unspilled().for_each(|v| sketch.insert_u64(v));
        if let Visitors::Spilled(spilled) = self {
            sketch.merge(&spilled.sketch);
        }
    }

    /// The sketch of every visitor.
    pub fn to_sketch(&self) -> VisitorSketch {
        let mut sketch = VisitorSketch::new();
        self.add_to(&mut sketch);
        sketch
    }

    /// About how many bytes the visitors hold beyond the enum itself.
    pub fn memory_bytes(&self) -> usize {
        let set = |s: &hashbrown::HashSet<u64>| s.capacity().next_power_of_two() * (size_of::<u64>() + 1);
        match self {
            Visitors::Few { .. } => 0,
            Visitors::Many(s) => set(s),
            Visitors::Spilled(spilled) => size_of::<Spilled>() + set(&spilled.recent) + spilled.sketch.memory_bytes(),
        }
    }
}

/// Bytes of a packed key kept inline; a key of a site (26), a dimension (up to 18), a bucket
/// (13) and a value of up to about 30 bytes fits, so most keys never touch the heap.
const PACKED_INLINE: usize = 104;

/// An [`AggKey`] packed into one buffer: the period, the lengths of the site, dimension and
/// bucket (4 bytes each), then the four texts, the value last.
type Packed = smallvec::SmallVec<[u8; PACKED_INLINE]>;

fn pack(key: AggKeyRef<'_>) -> Packed {
    let mut out = Packed::new();
    out.push(key.period as u8);
    for part in [key.site_id, key.dimension, key.bucket] {
        // Tally's sites, dimensions and buckets are short; a length past u32 cannot occur.
        out.extend_from_slice(&u32::try_from(part.len()).unwrap_or(u32::MAX).to_le_bytes());
    }
    for part in [key.site_id, key.dimension, key.bucket, key.value] {
        out.extend_from_slice(part.as_bytes());
    }
    out
}

/// Whether `packed` is `key` packed, compared in place.
fn packed_is(packed: &[u8], key: AggKeyRef<'_>) -> bool {
    let parts = [key.site_id, key.dimension, key.bucket, key.value];
    if packed.len() != 13 + parts.iter().map(|p| p.len()).sum::<usize>() || packed[0] != key.period as u8 {
        return false;
    }
    let mut at = 13;
    for (i, part) in parts.iter().enumerate() {
        if i < 3 && packed[1 + 4 * i..5 + 4 * i] != u32::try_from(part.len()).unwrap_or(u32::MAX).to_le_bytes() {
            return false;
        }
        if packed[at..at + part.len()] != *part.as_bytes() {
            return false;
        }
        at += part.len();
    }
    true
}

/// The key [`pack`] packed, borrowed from its buffer; `None` for bytes `pack` never writes.
fn unpack(packed: &[u8]) -> Option<AggKeyRef<'_>> {
    let period = *Period::ALL.get(usize::from(*packed.first()?))?;
    let len = |i: usize| -> Option<usize> {
        let bytes = packed.get(1 + 4 * i..5 + 4 * i)?;
        usize::try_from(u32::from_le_bytes(bytes.try_into().ok()?)).ok()
    };
    let (site, dimension, bucket) = (len(0)?, len(1)?, len(2)?);
    let text = |from: usize, to: usize| std::str::from_utf8(packed.get(from..to)?).ok();
    let mut at = 13;
    let site_id = text(at, at + site)?;
    at += site;
    let dimension_text = text(at, at + dimension)?;
    at += dimension;
    let bucket_text = text(at, at + bucket)?;
    at += bucket;
    let value = text(at, packed.len())?;
    Some(AggKeyRef { site_id, period, dimension: dimension_text, bucket: bucket_text, value })
}

/// One epoch's deltas, summed per item.
///
/// Every event adds about sixty deltas, so this is the hot path of ingestion. The keys are packed
/// into one inline buffer each (`pack`), so confirming a hit compares one contiguous run of
/// bytes, where four separately allocated strings cost four cache misses once an epoch holds tens
/// of thousands of items; the items live in a vector and the hash table holds only their
/// positions, so growing the table moves four bytes per item rather than the whole item. The hash
/// is `hashbrown`'s default (foldhash, randomly seeded): the keys are Tally's own labels, and
/// std's SipHash would be most of the cost. `cargo bench -p analytics --bench aggregate` measures it
/// against a map of owned keys.
#[derive(Default)]
pub struct Accumulator {
    index: hashbrown::HashTable<u32>,
    entries: Vec<Entry>,
    hasher: hashbrown::DefaultHashBuilder,
    sessions: SessionActivity,
}

struct Entry {
    hash: u64,
    key: Packed,
    pending: Pending,
}

impl std::fmt::Debug for Accumulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Accumulator").field("items", &self.entries.len()).finish_non_exhaustive()
    }
}

impl Accumulator {
    /// Adds `delta` to the item of `key`.
    pub fn add(&mut self, key: AggKeyRef<'_>, delta: Delta) {
        let Some(at) = self.position(key) else { return };
        let p = &mut self.entries[at].pending;
        p.counters.add(&delta.counters);
        if let Some(v) = delta.visitor {
            p.visitors.insert(v);
        }
    }

    /// Adds `event`'s deltas in a site whose zone is `zone`.
    pub fn accumulate(&mut self, event: &StoredEvent, zone: &SiteZone) {
        accumulate_from(self, event, zone, i64::MIN);
    }

    /// Notes that `event`'s session was active, for the epoch's `SessionLog` items (ingestion and
    /// recovery do; a rebuild, which writes no log, does not).
    pub fn note_session(&mut self, event: &StoredEvent) {
        self.sessions.record(event);
    }

    /// Adds everything `other` holds (deltas and session activity).
    pub fn absorb(&mut self, other: Accumulator) {
        if self.entries.is_empty() && self.sessions.is_empty() {
            *self = other;
            return;
        }
        for Entry { key, pending, .. } in other.entries {
            // Keys come from `pack`, so they always unpack.
            let Some(key) = unpack(&key) else { continue };
            if let Some(at) = self.position(key) {
                self.entries[at].pending.absorb(pending);
            }
        }
        self.sessions.absorb(other.sessions);
    }

    /// How many items so far (before [`finish`](Self::finish) adds the weeks and months).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no item has a delta.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The epoch's items, complete: every day item is added to the items of its ISO week and its
    /// month (the accumulated events brought only minute, hour and day deltas), visitors
    /// included, so the result holds exactly what adding every event's [`super::deltas`] would.
    pub fn finish(mut self) -> Accumulated {
        let days = self.entries.len();
        for i in 0..days {
            let key = self.entries[i].key.clone();
            let Some(day) = unpack(&key).filter(|k| k.period == Period::Day) else { continue };
            // Day labels are written by `bucket_label`; one that does not parse cannot occur.
            let Some((week, month)) = crate::period::week_and_month_of_day(day.bucket) else { continue };
            for (period, bucket) in [(Period::Week, week.as_str()), (Period::Month, month.as_str())] {
                let at = self.position(AggKeyRef { period, bucket, ..day });
                let Some([from, into]) = at.and_then(|at| self.entries.get_disjoint_mut([i, at]).ok()) else {
                    continue;
                };
                into.pending.merge(&from.pending);
            }
        }
        Accumulated { acc: self }
    }

    /// The position of `key`'s entry, added empty if missing; `None` past `u32::MAX` items.
    /// A lookup hashes and compares the key's parts where they lie; only a new entry packs them.
    fn position(&mut self, key: AggKeyRef<'_>) -> Option<usize> {
        use std::hash::BuildHasher;
        let hash = self.hasher.hash_one((key.period as u8, key.site_id, key.dimension, key.bucket, key.value));
        let entries = &mut self.entries;
        if let Some(&i) = self.index.find(hash, |&i| packed_is(&entries[i as usize].key, key)) {
            return Some(i as usize);
        }
        // More than u32::MAX items in one epoch would need terabytes; stop adding first.
        let i = u32::try_from(entries.len()).ok()?;
        entries.push(Entry { hash, key: pack(key), pending: Pending::default() });
        self.index.insert_unique(hash, i, |&j| entries[j as usize].hash);
        Some(i as usize)
    }
}

impl Pending {
    /// Adds what `other` adds.
    fn merge(&mut self, other: &Pending) {
        self.counters.add(&other.counters);
        self.visitors.merge(&other.visitors);
    }

    /// [`Pending::merge`] of one no longer needed: an empty entry takes its visitors as they are
    /// rather than a copy (merging an epoch's accumulators, or carried weeks and months, mostly
    /// meets new entries).
    fn absorb(&mut self, other: Pending) {
        if self.visitors.is_empty() {
            self.counters.add(&other.counters);
            self.visitors = other.visitors;
        } else {
            self.merge(&other);
        }
    }
}

/// One epoch's items as [`Accumulator::finish`] completed them, ready to be written.
#[derive(Debug)]
pub struct Accumulated {
    acc: Accumulator,
}

impl Accumulated {
    /// Every item with what the epoch adds to it, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (AggKeyRef<'_>, &Pending)> {
        self.acc.entries.iter().filter_map(|e| Some((unpack(&e.key)?, &e.pending)))
    }

    /// Every item's key.
    pub fn keys(&self) -> impl Iterator<Item = AggKeyRef<'_>> {
        self.iter().map(|(k, _)| k)
    }

    /// Every item with its key unpacked.
    pub fn into_keyed(self) -> impl Iterator<Item = (AggKey, Pending)> {
        self.acc.entries.into_iter().filter_map(|e| Some((unpack(&e.key)?.to_owned_key(), e.pending)))
    }

    /// How many items.
    pub fn len(&self) -> usize {
        self.acc.len()
    }

    /// Its week and month items alone, taken out (the rest is dropped): what a flush that wrote
    /// only the other items carries to the next one. Shared, they are copied.
    pub(crate) fn weeks_and_months(this: std::sync::Arc<Accumulated>) -> Accumulated {
        let mut out = Accumulator::default();
        match std::sync::Arc::try_unwrap(this) {
            Ok(owned) => {
                for Entry { key, pending, .. } in owned.acc.entries {
                    if let Some(k) = unpack(&key).filter(|k| k.period.is_sum_of_days())
                        && let Some(at) = out.position(k)
                    {
                        out.entries[at].pending = pending;
                    }
                }
            }
            Err(shared) => {
                for (k, pending) in shared.iter().filter(|(k, _)| k.period.is_sum_of_days()) {
                    if let Some(at) = out.position(k) {
                        out.entries[at].pending = pending.clone();
                    }
                }
            }
        }
        Accumulated { acc: out }
    }

    /// The accumulator again, to add more epochs' deltas to it.
    pub(crate) fn into_accumulator(self) -> Accumulator {
        self.acc
    }

    /// The sessions the epoch saw (see [`Accumulator::note_session`]).
    pub fn sessions(&self) -> &SessionActivity {
        &self.acc.sessions
    }

    /// Whether no item has a delta.
    pub fn is_empty(&self) -> bool {
        self.acc.is_empty()
    }
}

/// Adds `event`'s deltas to `acc` (weeks and months wait for [`Accumulator::finish`]), leaving
/// out minute buckets before `minutes_from` (ms).
pub(crate) fn accumulate_from(acc: &mut Accumulator, event: &StoredEvent, zone: &SiteZone, minutes_from: i64) {
    for_each_fine_delta(event, zone, minutes_from, |key, delta| acc.add(key, delta));
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
/// retention after the write, month never; rounded up to the next whole 10 minutes (minute
/// items) or hour (the others). The TTL moves with writes, so an item expires its retention after
/// the last event that touched it; the rounding keeps it in place across the many flushes of an
/// hour, where each move is a removal and an insertion in the engine's expiry index.
pub(crate) fn ttl(period: Period, settings: Option<&SiteSettings>, now_s: i64) -> Option<i64> {
    let fallback = SiteSettings::fallback();
    let s = settings.unwrap_or(&fallback);
    let up = |s: i64, step: i64| s.div_euclid(step).saturating_add(1).saturating_mul(step);
    match period {
        Period::Minute => Some(up(now_s + 2 * 3600, 600)),
        Period::Hour => Some(up(now_s + i64::from(s.retention_hourly_days) * 86_400, 3600)),
        Period::Day | Period::Week => Some(up(now_s + i64::from(s.retention_daily_days) * 86_400, 3600)),
        Period::Month => None,
    }
}

/// How an epoch's application went.
pub(crate) struct Outcome {
    pub written: u64,
    pub skipped: u64,
    pub conflicts: u64,
    /// Items created without a read that the table refused: they existed.
    pub wrong_guesses: u64,
    /// Items that failed permanently ([`AggregateError::is_permanent`]): logged, counted and
    /// left without this epoch's deltas, so they cannot hold the epoch back.
    pub item_errors: u64,
    /// The first transient error, if any item failed with one; the epoch is then applied again
    /// later (the items that succeeded stay applied and are skipped then).
    pub result: Result<(), AggregateError>,
}

/// An aggregate item's key as logs show it: `site/period/dimension/bucket/value`.
pub(crate) fn describe(key: &AggKey) -> String {
    format!("{}/{}/{}/{}/{}", key.site_id, key.period.as_str(), key.dimension, key.bucket, key.value)
}

enum Done {
    Written,
    Skipped,
}

/// What one item's write retried: conflicts with other writers, and a guess that it was new.
#[derive(Default)]
struct Retried {
    conflicts: u64,
    wrong_guess: bool,
}

/// One item's write: what happened, the item as now stored, and what it retried.
type WriteResult = Result<(Done, StoredAggregate, Retried), AggregateError>;

/// Everything one epoch's writes need.
pub(crate) struct Writer<'a> {
    pub table: &'a Table,
    pub run_id: &'a str,
    pub epoch: u64,
    pub settings: &'a HashMap<String, SiteSettings>,
    pub finished: &'a BTreeSet<String>,
    pub concurrency: usize,
    pub max_attempts: u32,
    /// Leaves the week and month items unwritten (a later flush writes them; see
    /// `AggregatorConfig::defer_weeks_and_months`).
    pub leave_weeks_and_months: bool,
    /// How often the cached items were stale at their writes (other runs wrote them), and so
    /// whether a cached item is read before it is written ([`crate::stale`]).
    pub stale: Option<&'a StaleRate>,
    /// How often items missing from the cache were in the table all the same, per period, and
    /// so whether such an item is read before it is written; without it, always. Mostly they are
    /// new (a new hour, a new page), and a new item needs no read: it is created under the
    /// condition that it does not exist, which the table refuses if it does ([`crate::stale`]).
    /// Per period; only for minutes and hours, whose items stay under a write unit: a busy
    /// day's, week's or month's costs up to nine to have refused.
    pub absent: Option<&'a [StaleRate; Period::ALL.len()]>,
}

async fn read(table: &Table, key: &AggKey) -> Result<StoredAggregate, AggregateError> {
    Ok(match table.get_with("Aggregate", agg_key_fields(key), true).await? {
        Some(r) => StoredAggregate::from_record(&r)?,
        None => StoredAggregate::default(),
    })
}

impl Writer<'_> {
    /// Applies `acc` with bounded concurrency; items found in `cache` are not read first.
    pub async fn apply(&self, acc: &Accumulated, cache: &mut ItemCache) -> Outcome {
        let now_s = jiff::Timestamp::now().as_second();
        let keys: Vec<(AggKey, &Pending)> = acc
            .iter()
            .filter(|(k, _)| !(self.leave_weeks_and_months && k.period.is_sum_of_days()))
            .map(|(k, p)| (k.to_owned_key(), p))
            .collect();
        // Each write's future is made when it starts, so at most `concurrency` of them (a KB or
        // two each) exist at once, whatever the epoch's size: the flush is when the server's
        // memory peaks. A loop rather than a stream's `map`: the closure would make the flush
        // task's future not `Send` for every lifetime, and the loop needs no boxing.
        let mut running = futures::stream::FuturesUnordered::new();
        let mut waiting = keys.iter();
        let mut results = Vec::with_capacity(keys.len());
        loop {
            while running.len() < self.concurrency.max(1) {
                let Some((key, pending)) = waiting.next() else { break };
                let cached = cache.items.remove(key).map(|(c, _)| c);
                running.push(async move { (key, self.write_one(key, pending, cached, now_s).await) });
            }
            match running.next().await {
                Some(result) => results.push(result),
                None => break,
            }
        }
        let mut outcome =
            Outcome { written: 0, skipped: 0, conflicts: 0, wrong_guesses: 0, item_errors: 0, result: Ok(()) };
        // The session log: plain puts, the same items whenever this epoch is applied again.
        let logs = acc.sessions().items(self.run_id, self.epoch);
        let logged: Vec<Result<(), AggregateError>> = stream::iter(logs)
            .map(|item| async move { Ok(self.table.write("SessionLog", item, PutMode::Put, None).await?) })
            .buffer_unordered(self.concurrency.max(1))
            .collect()
            .await;
        for e in logged.into_iter().filter_map(Result::err) {
            if e.is_permanent() {
                tracing::error!(run = self.run_id, epoch = self.epoch, error = %e, "a session log item cannot be written; skipped");
                outcome.item_errors += 1;
            } else if outcome.result.is_ok() {
                outcome.result = Err(e);
            }
        }
        for (key, r) in results {
            match r {
                Ok((done, item, retried)) => {
                    outcome.conflicts += retried.conflicts;
                    outcome.wrong_guesses += u64::from(retried.wrong_guess);
                    match done {
                        Done::Written => outcome.written += 1,
                        Done::Skipped => outcome.skipped += 1,
                    }
                    cache.items.insert(key.clone(), (item, self.epoch));
                }
                // An item that can never be written (refused by validation, or a stored item
                // that does not read back) must not hold every later epoch back: it is logged,
                // counted and left without this epoch's deltas. A transient failure fails the
                // epoch, which is applied again later (see DESIGN.md, "Exactly once").
                Err(e) if e.is_permanent() => {
                    tracing::error!(
                        run = self.run_id,
                        epoch = self.epoch,
                        key = %describe(key),
                        error = %e,
                        "an aggregate item cannot be written; this epoch's deltas for it are dropped"
                    );
                    outcome.item_errors += 1;
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
        // From the cache unless cached items have often been stale lately.
        let from_cache = cached.is_some() && !self.stale.is_some_and(StaleRate::read_first);
        // Missing from the cache, created without a read unless such items have often existed.
        // Only a minute's or an hour's, whose items stay under a write unit: a refused create
        // costs the stored item's write units, up to nine for a busy day's, week's or month's
        // (dense sketches), against the one read unit of reading it first; and a busy day's item,
        // the cache's largest, is the one most often let go while its day goes on.
        let small = matches!(key.period, Period::Minute | Period::Hour);
        let absent = self.absent.filter(|_| small).map(|rates| &rates[key.period as usize]);
        let blind = cached.is_none() && absent.is_some_and(|rate| !rate.read_first());
        let mut current = match cached {
            Some(c) if from_cache => c,
            Some(c) => {
                let fresh = read(self.table, key).await?;
                if let Some(rate) = self.stale {
                    rate.record(fresh.version != c.version);
                }
                fresh
            }
            None if blind => StoredAggregate::default(),
            None => {
                let found = read(self.table, key).await?;
                if let Some(rate) = absent {
                    rate.record(found.version.is_some());
                }
                found
            }
        };
        let mut first = true;
        let ttl = ttl(key.period, self.settings.get(&key.site_id), now_s);
        let mut retried = Retried::default();
        // A refused guess takes no attempt from those against other writers.
        for _ in 0..self.max_attempts.max(1) + u32::from(blind) {
            if current.flushes.get(self.run_id).is_some_and(|&e| e >= self.epoch) {
                return Ok((Done::Skipped, current, retried));
            }
            // Changed in place: a conflict reads the item again, and any other failure drops it.
            let mut next = current;
            next.counters.add(&pending.counters);
            if !pending.visitors.is_empty() {
                let sketch = next.sketch.get_or_insert_with(VisitorSketch::new);
                pending.visitors.add_to(sketch);
            }
            next.flushes.insert(self.run_id.to_owned(), self.epoch);
            next.flushes.retain(|run, _| !self.finished.contains(run));
            let version = next.version.map_or(1, |v| v + 1);
            let item = next.to_item(key, version, ttl, self.finished);
            let written = match next.version {
                None => self.table.write("Aggregate", item, PutMode::Create, None).await,
                Some(v) => self.table.write("Aggregate", item, PutMode::Put, Some(&attr("version").eq(v))).await,
            };
            // The first write tells whether the cache was current, or the guess that the item
            // was new right; a guess proved wrong is no conflict with another writer.
            let first_write = std::mem::take(&mut first);
            let guessed = first_write && blind;
            let rate = if from_cache { self.stale } else { absent.filter(|_| blind) };
            if first_write && let Some(rate) = rate {
                rate.record(written.as_ref().is_err_and(|e| e.is_condition_failed()));
            }
            match written {
                Ok(_) => {
                    next.version = Some(version);
                    return Ok((Done::Written, next, retried));
                }
                Err(e) if e.is_condition_failed() => {
                    if guessed {
                        retried.wrong_guess = true;
                    } else {
                        retried.conflicts += 1;
                    }
                    current = read(self.table, key).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(AggregateError::Contended { key: describe(key), attempts: self.max_attempts })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn part() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec!["", "a", "ab", "site-1", "event:page"]).prop_map(String::from),
            "\\PC{0,6}"
        ]
    }

    fn key() -> impl Strategy<Value = (usize, [String; 4])> {
        (0..Period::ALL.len(), [part(), part(), part(), part()])
    }

    fn key_ref(k: &(usize, [String; 4])) -> AggKeyRef<'_> {
        let (period, [site_id, dimension, bucket, value]) = k;
        AggKeyRef { site_id, period: Period::ALL[*period], dimension, bucket, value }
    }

    proptest! {
        /// Comparing in place agrees with comparing the keys, whichever parts move text between
        /// them (`"ab" + ""` against `"a" + "b"`), and a packed key unpacks to itself.
        #[test]
        fn a_packed_key_is_compared_in_place_as_the_key_itself(a in key(), b in key()) {
            let (a, b) = (key_ref(&a), key_ref(&b));
            prop_assert_eq!(packed_is(&pack(a), b), a == b);
            prop_assert!(packed_is(&pack(a), a));
            let packed = pack(a);
            prop_assert_eq!(unpack(&packed), Some(a));
        }
    }
}
