//! Live sessions that left the session cache while this process ingests alone, packed into
//! event blocks held in memory (DESIGN.md, "Sessions across processes", alone).
//!
//! A cached session costs about 850 bytes (its latest event, its visit's texts, its slot), so the
//! cache holds 20,000; traffic with more sessions live at once than that evicts them while live,
//! and each used to cost a `VisitorSession` item write: a random key in the table's B-tree on the
//! embedded engine, a write unit on DynamoDB, and about a sixth of a request's CPU over HTTP
//! (BENCHMARKS.md, "twenty-sixth session"). Here a chunk of such sessions is encoded as blocks of
//! their latest events (one row each, the columns' dictionaries shared by the chunk's visitors),
//! a few hundred bytes less per session than a one-event block each, and no write at all.
//!
//! Invariants:
//! - **A visitor's newest place wins.** The index names the place of each visitor's latest
//!   packing; a place another packing replaced is dead, and never read or written again.
//! - **A place read stays readable.** [`ColdSessions::get`] marks the place taken rather than
//!   removing it, so two events of one visitor looking at once both continue the same session,
//!   as two reads of its item would. A taken place is never written to the table: its session
//!   is back in the cache, which writes it in its turn.
//! - **Bounded.** Past `max_bytes` the oldest chunk is written to the table first
//!   ([`ColdSessions::oldest_over`], then [`ColdSessions::drop_chunk`] once written), its dead
//!   and taken places dropped unwritten; a write that fails keeps the chunk, and the cache keeps
//!   the sessions it was evicting.
//! - **Only while alone.** Packing is refused once closed ([`ColdSessions::close`], when another
//!   process starts ingesting): everything packed is then written by [`ColdSessions::drain`].

use std::collections::VecDeque;
use std::sync::Arc;

use crate::block;
use crate::sites::SiteId;
use crate::stored::StoredEvent;
use crate::visitor::{UtcDay, VisitorId};

/// A session to pack: its site and visitor, its latest event, and the version of the visitor's
/// `VisitorSession` item last written (`None`: none).
pub(crate) type Packed = ((SiteId, VisitorId), Arc<StoredEvent>, Option<i64>);

/// A session as packed, out again: its key, its latest event, its item's version.
pub(crate) type Unpacked = ((SiteId, VisitorId), StoredEvent, Option<i64>);

/// Rows per block: a lookup reads one block's columns (and makes one row's event), so a block
/// stays small.
const ROWS_PER_BLOCK: usize = 64;

/// About what a packed session costs beyond its block bytes: its row (32 bytes) and its index
/// entry (16 and a control byte, in a table between seven sixteenths and seven eighths full
/// as it doubles: 37 bytes on average).
const ROW_OVERHEAD: usize = 32 + 37;

/// See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct ColdSessions {
    /// Oldest first; `chunks[0]` is chunk number `first`.
    chunks: VecDeque<Chunk>,
    first: u64,
    /// Each visitor's newest place, by [`super::visitor_hash`].
    index: hashbrown::HashMap<u64, Place>,
    bytes: usize,
    open: bool,
}

/// Sessions packed together: blocks of their latest events, one after another in one buffer
/// (`ends[b]` is where block `b` ends; two allocations a chunk, held for minutes, rather than one
/// a block), and where each session is.
#[derive(Debug)]
pub(crate) struct Chunk {
    bytes_of_blocks: Vec<u8>,
    ends: Vec<u32>,
    /// The chunk's sites, which rows name by position.
    sites: Vec<SiteId>,
    rows: Vec<Row>,
    bytes: usize,
}

impl Chunk {
    fn key(&self, row: &Row) -> Option<(SiteId, VisitorId)> {
        Some((self.sites.get(usize::from(row.site))?.clone(), row.visitor))
    }

    fn is(&self, row: &Row, site_id: &str, visitor: VisitorId) -> bool {
        row.visitor == visitor && self.sites.get(usize::from(row.site)).is_some_and(|s| s.as_str() == site_id)
    }

    fn block(&self, b: u32) -> Option<&[u8]> {
        let b = b as usize;
        let start = if b == 0 { 0 } else { *self.ends.get(b - 1)? as usize };
        self.bytes_of_blocks.get(start..*self.ends.get(b)? as usize)
    }

    fn blocks(&self) -> usize {
        self.ends.len()
    }
}

/// A packed session: 32 bytes.
#[derive(Debug)]
struct Row {
    visitor: VisitorId,
    /// The item's version last written, [`NO_VERSION`] for none.
    version: i64,
    last_ts: i64,
    /// Its site, by position in the chunk's.
    site: u16,
    block: u16,
    at: u16,
}

const NO_VERSION: i64 = i64::MIN;

impl Row {
    fn version(&self) -> Option<i64> {
        (self.version != NO_VERSION).then_some(self.version)
    }
}

/// Where a visitor's newest packing is, in one word: the chunk's number, the row in it, and
/// whether it was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place(u64);

impl Place {
    fn new(chunk: u64, row: usize) -> Place {
        Place(chunk << 17 | (row as u64) << 1)
    }

    fn chunk(self) -> u64 {
        self.0 >> 17
    }

    fn row(self) -> usize {
        (self.0 >> 1 & 0xffff) as usize
    }

    fn take(&mut self) {
        self.0 |= 1;
    }
}

impl ColdSessions {
    /// Lets sessions be packed (alone).
    pub fn open(&mut self) {
        self.open = true;
    }

    /// Refuses packing from now on; what is packed stays until [`ColdSessions::drain`]ed.
    pub fn close(&mut self) {
        self.open = false;
    }

    /// About how many bytes the packed sessions hold.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// How many visitors have a place (taken ones included).
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Packs `chunk` ([`ColdSessions::encode`]). `false`, and nothing packed, when closed.
    pub fn pack(&mut self, chunk: Chunk) -> bool {
        if !self.open || chunk.rows.is_empty() {
            return self.open;
        }
        let number = self.first + self.chunks.len() as u64;
        for (row, r) in chunk.rows.iter().enumerate() {
            let Some((site, visitor)) = chunk.key(r) else { continue };
            self.index.insert(super::visitor_hash(&site, visitor), Place::new(number, row));
        }
        self.bytes += chunk.bytes;
        self.chunks.push_back(chunk);
        true
    }

    /// `sessions` encoded as a chunk to pack (without holding the packed sessions' lock); `last_ts`
    /// of each is its latest event time. `None` when a block cannot be encoded.
    pub fn encode(sessions: &[(Packed, i64)]) -> Option<Chunk> {
        // One block per site and day (a block's header names them), of at most ROWS_PER_BLOCK.
        let mut order: Vec<usize> = (0..sessions.len()).collect();
        order.sort_by(|&a, &b| {
            let (ea, eb) = (&sessions[a].0.1, &sessions[b].0.1);
            (ea.site_id.as_str(), ea.day).cmp(&(eb.site_id.as_str(), eb.day))
        });
        let mut blocks: Vec<u8> = Vec::new();
        let mut ends: Vec<u32> = Vec::new();
        let mut sites: Vec<SiteId> = Vec::new();
        // A chunk is an eviction's chunk (hundreds of sessions): its rows and blocks are numbered
        // in 16 bits.
        if sessions.len() > usize::from(u16::MAX) {
            return None;
        }
        let mut rows = Vec::with_capacity(sessions.len());
        let mut start = 0;
        while start < order.len() {
            let first = &sessions[order[start]].0.1;
            let (site, day): (&str, UtcDay) = (first.site_id.as_str(), first.day);
            let mut end = start;
            while end < order.len() && end - start < ROWS_PER_BLOCK && {
                let e = &sessions[order[end]].0.1;
                e.site_id.as_str() == site && e.day == day
            } {
                end += 1;
            }
            let events: Vec<&StoredEvent> = order[start..end].iter().map(|&i| &*sessions[i].0.1).collect();
            let bytes = block::encode(site, day, &events).ok()?;
            let b = ends.len() as u16;
            if sites.last().is_none_or(|s| s.as_str() != site) {
                sites.push(sessions[order[start]].0.0.0.clone());
            }
            let site_at = (sites.len() - 1) as u16;
            for (at, &i) in order[start..end].iter().enumerate() {
                let (((_, visitor), _, version), last_ts) = &sessions[i];
                let version = version.unwrap_or(NO_VERSION);
                rows.push(Row {
                    visitor: *visitor,
                    version,
                    last_ts: *last_ts,
                    site: site_at,
                    block: b,
                    at: at as u16,
                });
            }
            blocks.extend_from_slice(&bytes);
            ends.push(u32::try_from(blocks.len()).ok()?);
            start = end;
        }
        // Held for minutes: without the room to grow.
        blocks.shrink_to_fit();
        let bytes = blocks.capacity() + ends.capacity() * 4 + rows.capacity() * ROW_OVERHEAD;
        Some(Chunk { bytes_of_blocks: blocks, ends, sites, rows, bytes })
    }

    /// The session of `visitor` of `site`, if packed and not replaced since, with its item's
    /// version; its place is marked taken (see the module documentation).
    pub fn get(&mut self, site_id: &str, visitor: VisitorId) -> Option<(StoredEvent, Option<i64>)> {
        let hash = super::visitor_hash(site_id, visitor);
        let place = self.index.get_mut(&hash)?;
        let chunk = self.chunks.get(usize::try_from(place.chunk().checked_sub(self.first)?).ok()?)?;
        let row = chunk.rows.get(place.row())?;
        // Two visitors sharing a hash: the other one's place.
        if !chunk.is(row, site_id, visitor) {
            return None;
        }
        let event = block::decode_event_at(chunk.block(u32::from(row.block))?, usize::from(row.at)).ok()??;
        place.take();
        Some((event, row.version()))
    }

    /// Marks the place of `visitor` of `site` taken, if it has one: their session stayed in the
    /// cache after all.
    pub fn mark_taken(&mut self, site_id: &str, visitor: VisitorId) {
        if let Some(place) = self.own_place(site_id, visitor) {
            place.take();
        }
    }

    /// Forgets the place of `visitor` of `site`, if it has one: their session left the cache
    /// another way (written, or over), so whatever is packed of it is older.
    pub fn forget(&mut self, site_id: &str, visitor: VisitorId) {
        if self.own_place(site_id, visitor).is_some() {
            self.index.remove(&super::visitor_hash(site_id, visitor));
        }
    }

    /// The place of `visitor` of `site`, not another visitor's sharing its hash.
    fn own_place(&mut self, site_id: &str, visitor: VisitorId) -> Option<&mut Place> {
        let place = self.index.get_mut(&super::visitor_hash(site_id, visitor))?;
        let chunk = self.chunks.get(usize::try_from(place.chunk().checked_sub(self.first)?).ok()?)?;
        let row = chunk.rows.get(place.row())?;
        chunk.is(row, site_id, visitor).then_some(place)
    }

    /// While over `max_bytes`: the oldest chunk's number and the sessions of it to write to the
    /// table (their places the newest, not taken, live at `horizon`), decoded. The chunk stays
    /// until [`ColdSessions::drop_chunk`].
    pub fn oldest_over(&self, max_bytes: usize, horizon: i64) -> Option<(u64, Vec<Unpacked>)> {
        if self.bytes <= max_bytes {
            return None;
        }
        let chunk = self.chunks.front()?;
        Some((self.first, self.sessions_of(self.first, chunk, horizon)))
    }

    /// Drops chunk `number` if it is the oldest, with the places still its own; returns whether
    /// it did.
    pub fn drop_chunk(&mut self, number: u64) -> bool {
        if number != self.first || self.chunks.is_empty() {
            return false;
        }
        let Some(chunk) = self.chunks.pop_front() else { return false };
        for (row, r) in chunk.rows.iter().enumerate() {
            let Some((site, visitor)) = chunk.key(r) else { continue };
            let hash = super::visitor_hash(&site, visitor);
            if self.index.get(&hash).is_some_and(|p| p.chunk() == number && p.row() == row) {
                self.index.remove(&hash);
            }
        }
        self.bytes -= chunk.bytes;
        self.first += 1;
        true
    }

    /// Every packed session to write to the table (as [`ColdSessions::oldest_over`] chooses
    /// them) whose latest event is at or after `since_ts`; they stay packed until
    /// [`ColdSessions::clear`]ed (once written).
    pub fn to_write(&self, since_ts: i64) -> Vec<Unpacked> {
        let mut out = Vec::new();
        for (i, chunk) in self.chunks.iter().enumerate() {
            out.extend(self.sessions_of(self.first + i as u64, chunk, since_ts));
        }
        out
    }

    /// Drops every packed session.
    pub fn clear(&mut self) {
        self.first += self.chunks.len() as u64;
        self.chunks.clear();
        self.index.clear();
        self.bytes = 0;
    }

    /// [`ColdSessions::to_write`], then [`ColdSessions::clear`].
    #[cfg(test)]
    fn drain(&mut self, since_ts: i64) -> Vec<Unpacked> {
        let out = self.to_write(since_ts);
        self.clear();
        out
    }

    fn sessions_of(&self, number: u64, chunk: &Chunk, horizon: i64) -> Vec<Unpacked> {
        let mut decoded: Vec<Option<Vec<StoredEvent>>> = vec![None; chunk.blocks()];
        let mut out = Vec::new();
        for (row, r) in chunk.rows.iter().enumerate() {
            let Some(key) = chunk.key(r) else { continue };
            let own = self.index.get(&super::visitor_hash(&key.0, key.1)) == Some(&Place::new(number, row));
            if !own || r.last_ts < horizon {
                continue;
            }
            let block = usize::from(r.block);
            if decoded[block].is_none() {
                // Blocks this process encoded decode; one that did not would be a bug, and its
                // sessions then start new visits rather than stop ingestion.
                let events = chunk.block(u32::from(r.block)).and_then(|b| block::decode_events(b).ok());
                decoded[block] = Some(events.unwrap_or_default());
            }
            if let Some(event) = decoded[block].as_ref().and_then(|events| events.get(usize::from(r.at))) {
                out.push((key, event.clone(), r.version()));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::stored::{PrevState, Visit, VisitAttrs};

    const SITES: [&str; 2] = ["site-a", "site-b"];

    /// A visitor of one of [`SITES`] (`v` below 2 × 16).
    fn key(v: u8) -> (SiteId, VisitorId) {
        (SiteId::new(SITES[usize::from(v % 2)]), VisitorId::from_u64(u64::from(v / 2)))
    }

    /// A session's latest event, told apart by `ts`, of `day` (two days in play).
    fn event(v: u8, ts: i64, day: bool) -> Arc<StoredEvent> {
        let (site, visitor_id) = key(v);
        let day = UtcDay::parse(if day { "2026-12-07" } else { "2026-12-06" }).expect("a day");
        Arc::new(StoredEvent {
            site_id: site.as_str().into(),
            day,
            visitor_id,
            session_id: ulid::Ulid::from_parts(u64::from(v), u128::from(v)),
            seq: 3,
            name: "pageview".into(),
            ts,
            hostname: "example.com".into(),
            path: format!("/{v}/{ts}"),
            props: BTreeMap::new(),
            revenue: None,
            interactive: true,
            goals: vec![],
            visit: Arc::new(VisitAttrs::new(ts - 5, &Visit { entry_page: "/", source: "Google", ..Visit::default() })),
            prev: PrevState::default(),
            run: "01JDB3Y5C8M9V7T2X4K6P0QWER".into(),
            epoch: 1,
            ttl: 1_900_000_000,
        })
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Visitors (distinct), each with its latest time and whether of the later day.
        Pack(Vec<(u8, i64, bool)>),
        Get(u8),
        Mark(u8),
        Forget(u8),
        /// The oldest chunk written at this horizon, then dropped.
        Spill(i64),
        Drain(i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => prop::collection::btree_map(0u8..32, (0i64..100, any::<bool>()), 0..12)
                .prop_map(|m| Op::Pack(m.into_iter().map(|(v, (ts, d))| (v, ts, d)).collect())),
            3 => (0u8..32).prop_map(Op::Get),
            1 => (0u8..32).prop_map(Op::Mark),
            1 => (0u8..32).prop_map(Op::Forget),
            1 => (0i64..100).prop_map(Op::Spill),
            1 => (0i64..100).prop_map(Op::Drain),
        ]
    }

    /// What is written: visitor, time, version.
    fn written(out: Vec<Unpacked>) -> Vec<(u8, i64, Option<i64>)> {
        let mut w: Vec<_> = out
            .into_iter()
            .map(|((site, visitor), e, version)| {
                let s = SITES.iter().position(|x| *x == site.as_str()).expect("a site") as u8;
                (visitor.as_u64() as u8 * 2 + s, e.ts, version)
            })
            .collect();
        w.sort_unstable();
        w
    }

    proptest! {
        /// Packed sessions against a naive model: each visitor's newest packing, taken or not, in
        /// which chunk; gets, spills and drains read and write exactly what it says.
        #[test]
        fn packed_sessions_follow_the_newest_packing_of_each_visitor(ops in prop::collection::vec(op(), 1..40)) {
            let mut cold = ColdSessions::default();
            cold.open();
            // visitor → (chunk, ts, version, taken); chunk numbers from 0; the oldest chunk kept.
            let mut model: BTreeMap<u8, (u64, i64, Option<i64>, bool)> = BTreeMap::new();
            let (mut next_chunk, mut oldest) = (0u64, 0u64);
            for (step, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Pack(sessions) => {
                        let version = Some(step as i64);
                        let packed: Vec<(Packed, i64)> =
                            sessions.iter().map(|&(v, ts, d)| ((key(v), event(v, ts, d), version), ts)).collect();
                        let chunk = ColdSessions::encode(&packed).expect("encodes");
                        prop_assert!(cold.pack(chunk));
                        for &(v, ts, _) in &sessions {
                            model.insert(v, (next_chunk, ts, version, false));
                        }
                        next_chunk += u64::from(!sessions.is_empty());
                    }
                    Op::Get(v) => {
                        let (site, visitor) = key(v);
                        let got = cold.get(site.as_str(), visitor).map(|(e, version)| (e.ts, version, e.path));
                        let want = model.get_mut(&v).map(|m| {
                            m.3 = true;
                            (m.1, m.2, format!("/{v}/{}", m.1))
                        });
                        prop_assert_eq!(got, want);
                    }
                    Op::Mark(v) => {
                        let (site, visitor) = key(v);
                        cold.mark_taken(site.as_str(), visitor);
                        if let Some(m) = model.get_mut(&v) {
                            m.3 = true;
                        }
                    }
                    Op::Forget(v) => {
                        let (site, visitor) = key(v);
                        cold.forget(site.as_str(), visitor);
                        model.remove(&v);
                    }
                    Op::Spill(horizon) => {
                        let got = cold.oldest_over(0, horizon);
                        if oldest == next_chunk {
                            prop_assert!(got.is_none());
                            continue;
                        }
                        let (number, out) = got.expect("a chunk is over a bound of nothing");
                        prop_assert_eq!(number, oldest);
                        let want: Vec<_> = model
                            .iter()
                            .filter(|(_, m)| m.0 == oldest && !m.3 && m.1 >= horizon)
                            .map(|(&v, m)| (v, m.1, m.2))
                            .collect();
                        prop_assert_eq!(written(out), want);
                        prop_assert!(cold.drop_chunk(number));
                        model.retain(|_, m| m.0 != oldest);
                        oldest += 1;
                    }
                    Op::Drain(since) => {
                        let want: Vec<_> =
                            model.iter().filter(|(_, m)| !m.3 && m.1 >= since).map(|(&v, m)| (v, m.1, m.2)).collect();
                        prop_assert_eq!(written(cold.drain(since)), want);
                        model.clear();
                        oldest = next_chunk;
                    }
                }
                prop_assert_eq!(cold.len(), model.len());
                prop_assert_eq!(cold.bytes() == 0, oldest == next_chunk);
            }
        }
    }

    #[test]
    fn a_closed_store_packs_nothing_and_a_chunk_is_dropped_only_when_oldest() {
        let mut cold = ColdSessions::default();
        let chunk = |v: u8| ColdSessions::encode(&[((key(v), event(v, 10, true), None), 10)]).expect("encodes");
        assert!(!cold.pack(chunk(1)), "closed until opened");
        cold.open();
        assert!(cold.pack(chunk(1)) && cold.pack(chunk(2)));
        assert!(!cold.drop_chunk(1), "not the oldest");
        assert!(cold.drop_chunk(0));
        cold.close();
        assert!(!cold.pack(chunk(3)));
        assert_eq!(cold.len(), 1);
    }
}
