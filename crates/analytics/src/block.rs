//! Event blocks: many raw events of one site and UTC day in one compact, column-oriented value.
//!
//! A block is the unit of durability at ingestion (an event is acknowledged once its block is
//! durable), of scanning (a query decodes only the columns it reads) and of erasure (a visitor's
//! events leave by rewriting the blocks that hold them). DESIGN.md ("Event blocks") says why the
//! format is Tally's own over lz4 rather than Arrow IPC or Parquet.
//!
//! **Layout.** `TEB` and a version byte; the site id and the UTC day (the partition's); the number
//! of events and of sessions; then the columns, each `id, flags, length, bytes`, the bytes of a
//! column of 256 bytes or more (`COMPRESS_FROM`) lz4-compressed when that makes them smaller. A reader skips the columns it does not want
//! without decompressing them. Columns are either per event (`n` values) or per session (one per
//! distinct `(visitor, session)` of the block): a visit's attributes are the same on each of its
//! events, so they are stored once per session, and an event points at its session.
//!
//! **Encodings.** Integers are LEB128 varints; signed ones zigzag. Times are deltas from the
//! previous event's (the first from zero); a visit's start is a delta from its first event in the
//! block, a previous state's latest time a delta back from the event's own. Text columns are
//! dictionaries in first-seen order plus one varint index per row, which is also how a filter is
//! evaluated fast: once per distinct value, then by index ([`Dict`]).
//!
//! **Invariant:** `decode_events(encode(events)) == events` for every slice of events of one
//! site and day whose visitor ids are 16 lower-case hex digits and session ids canonical ULIDs
//! (`tests::round_trip`, a property test).

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::sites::SiteId;
use crate::stored::{PrevState, StoredEvent, VisitAttrs};
use crate::visitor::{UtcDay, VisitorId};

/// The format's magic and version.
const MAGIC: &[u8; 3] = b"TEB";
const VERSION: u8 = 2;
/// The versions [`decode`] reads: version 1 lacks the [`SINCE_V2`] columns.
const READABLE: [u8; 2] = [1, 2];

/// A column is compressed when it is at least this long and lz4 makes it smaller. Shorter
/// columns are dictionaries and varints already, and lz4 saved 1–2 % of their bytes (about one
/// byte an event) for an 8 KB hash table zeroed per try, most of a live block's encoding time;
/// merged blocks' columns of 256 bytes and more still shrink by a sixth to a half
/// (BENCHMARKS.md, "fourteenth session").
const COMPRESS_FROM: usize = 256;

/// Why a block cannot be written or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BlockError {
    /// The bytes are not a block of this version, or are damaged.
    #[error("event block is damaged: {0}")]
    Corrupt(&'static str),
    /// An event cannot be stored in a block as it is.
    #[error("event cannot be stored in a block: {0}")]
    Unencodable(String),
}

/// The columns of a block. A reader asks for a set of them ([`Cols`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
#[allow(missing_docs)]
pub enum Col {
    /// Per session: visitor id (u64) and session ULID (u128).
    Sessions = 0,
    /// Per event: index of its session.
    Session = 1,
    Ts = 2,
    Seq = 3,
    Name = 4,
    Hostname = 5,
    Path = 6,
    Props = 7,
    Revenue = 8,
    Interactive = 9,
    Goals = 10,
    /// Per event: previous state's counters and latest time.
    Prev = 11,
    /// Per event: previous state's exit page.
    PrevExit = 12,
    Run = 13,
    Epoch = 14,
    Ttl = 15,
    /// Per session: visit start time.
    VisitStart = 16,
    VisitEntry = 17,
    VisitSource = 18,
    VisitReferrer = 19,
    VisitUtmSource = 20,
    VisitUtmMedium = 21,
    VisitUtmCampaign = 22,
    VisitUtmContent = 23,
    VisitUtmTerm = 24,
    VisitCountry = 25,
    VisitDevice = 26,
    VisitBrowser = 27,
    VisitBrowserVersion = 28,
    VisitOs = 29,
    VisitOsVersion = 30,
    /// Per session, from version 2 on (a version 1 block reads them as empty).
    VisitRegion = 31,
    VisitCity = 32,
    VisitScreen = 33,
    VisitLanguage = 34,
}

/// How many column ids there are.
const COLUMNS: u8 = 35;

/// The visit columns a version 1 block does not have: [`decode`] gives them one empty value per
/// session, as a version 2 block of the same events would hold.
const SINCE_V2: [Col; 4] = [Col::VisitRegion, Col::VisitCity, Col::VisitScreen, Col::VisitLanguage];

/// The visit-attribute text columns, in [`VisitAttrs`] field order after `start_ts`.
pub const VISIT_TEXT: [Col; 18] = [
    Col::VisitEntry,
    Col::VisitSource,
    Col::VisitReferrer,
    Col::VisitUtmSource,
    Col::VisitUtmMedium,
    Col::VisitUtmCampaign,
    Col::VisitUtmContent,
    Col::VisitUtmTerm,
    Col::VisitCountry,
    Col::VisitDevice,
    Col::VisitBrowser,
    Col::VisitBrowserVersion,
    Col::VisitOs,
    Col::VisitOsVersion,
    Col::VisitRegion,
    Col::VisitCity,
    Col::VisitScreen,
    Col::VisitLanguage,
];

impl Col {
    fn from_id(id: u8) -> Option<Col> {
        (id < COLUMNS).then(|| ALL_COLS[usize::from(id)])
    }
}

const ALL_COLS: [Col; COLUMNS as usize] = [
    Col::Sessions,
    Col::Session,
    Col::Ts,
    Col::Seq,
    Col::Name,
    Col::Hostname,
    Col::Path,
    Col::Props,
    Col::Revenue,
    Col::Interactive,
    Col::Goals,
    Col::Prev,
    Col::PrevExit,
    Col::Run,
    Col::Epoch,
    Col::Ttl,
    Col::VisitStart,
    Col::VisitEntry,
    Col::VisitSource,
    Col::VisitReferrer,
    Col::VisitUtmSource,
    Col::VisitUtmMedium,
    Col::VisitUtmCampaign,
    Col::VisitUtmContent,
    Col::VisitUtmTerm,
    Col::VisitCountry,
    Col::VisitDevice,
    Col::VisitBrowser,
    Col::VisitBrowserVersion,
    Col::VisitOs,
    Col::VisitOsVersion,
    Col::VisitRegion,
    Col::VisitCity,
    Col::VisitScreen,
    Col::VisitLanguage,
];

/// A set of columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cols(u64);

impl Cols {
    /// Every column.
    pub const ALL: Cols = Cols((1 << COLUMNS) - 1);
    /// No column (the header only: site, day, counts).
    pub const NONE: Cols = Cols(0);

    /// This set and `col`.
    #[must_use]
    pub const fn with(self, col: Col) -> Cols {
        Cols(self.0 | 1 << col as u8)
    }

    /// This set without `col`.
    pub const fn without(self, col: Col) -> Cols {
        Cols(self.0 & !(1 << col as u8))
    }

    /// Whether `col` is in the set.
    pub const fn has(self, col: Col) -> bool {
        self.0 & (1 << col as u8) != 0
    }

    /// The union of two sets.
    #[must_use]
    pub const fn union(self, other: Cols) -> Cols {
        Cols(self.0 | other.0)
    }
}

/// A dictionary-encoded text column: the distinct values and one index per row.
///
/// The values are kept end to end in one string (one allocation per column, not per value: a
/// scan decodes many dictionaries).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dict {
    /// The distinct values, in first-seen order, end to end.
    text: String,
    /// Where each value ends in `text`.
    ends: Vec<u32>,
    /// Each row's value, as an index into the values.
    pub rows: Vec<u32>,
}

impl Dict {
    /// Row `i`'s value.
    pub fn get(&self, i: usize) -> &str {
        self.value(self.rows[i] as usize)
    }

    /// The `v`-th distinct value.
    pub fn value(&self, v: usize) -> &str {
        let start = if v == 0 { 0 } else { self.ends[v - 1] as usize };
        &self.text[start..self.ends[v] as usize]
    }

    /// The distinct values, in first-seen order.
    pub fn values(&self) -> impl ExactSizeIterator<Item = &str> {
        (0..self.ends.len()).map(|v| self.value(v))
    }

    /// `rows` rows of the empty value (no value when there are no rows, as [`dict`] writes it).
    fn empty_values(rows: usize) -> Dict {
        let ends = if rows == 0 { Vec::new() } else { vec![0] };
        Dict { text: String::new(), ends, rows: vec![0; rows] }
    }

    /// For each distinct value, whether `f` holds: evaluated once per value, then looked up by
    /// row index.
    pub fn matching(&self, f: impl Fn(&str) -> bool) -> Vec<bool> {
        self.values().map(f).collect()
    }
}

/// Properties (or goals): per row, a run of `(key, value)` index pairs into one dictionary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pairs {
    /// The distinct keys and values.
    pub values: Vec<String>,
    /// Row `i`'s pairs are `pairs[offsets[i]..offsets[i + 1]]`.
    pub offsets: Vec<u32>,
    /// `(key, value)` indexes into `values`; for goals, the key is the goal and the value unused.
    pub pairs: Vec<(u32, u32)>,
}

impl Pairs {
    /// Row `i`'s pairs as text.
    pub fn row(&self, i: usize) -> impl ExactSizeIterator<Item = (&str, &str)> {
        let (a, b) = (self.offsets[i] as usize, self.offsets[i + 1] as usize);
        self.pairs[a..b].iter().map(|&(k, v)| (self.values[k as usize].as_str(), self.values[v as usize].as_str()))
    }

    /// Row `i`'s index pairs.
    pub fn row_ids(&self, i: usize) -> &[(u32, u32)] {
        &self.pairs[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }
}

/// A session of a block: its visitor and id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionKey {
    /// The visitor id as a number (its 16 hex digits).
    pub visitor: u64,
    /// The session ULID as a number.
    pub session: u128,
}

impl SessionKey {
    /// The visitor id as stored elsewhere (16 lower-case hex digits).
    pub fn visitor_id(&self) -> VisitorId {
        VisitorId::from_u64(self.visitor)
    }

    /// The session id as stored elsewhere (a ULID string).
    pub fn session_id(&self) -> ulid::Ulid {
        ulid::Ulid(self.session)
    }
}

/// The previous-state counters of an event ([`PrevState`] without its exit page).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrevCounts {
    /// Events before.
    pub events: u32,
    /// Page views before.
    pub pageviews: u32,
    /// Interactive events before.
    pub interactive: u32,
    /// Latest event time before (0 when none).
    pub last_ts: i64,
}

/// The columns of one block that a reader asked for; the others are empty.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Block {
    /// The site whose events the block holds.
    pub site_id: SiteId,
    /// The UTC day its sessions started.
    pub day: UtcDay,
    /// How many events.
    pub len: usize,
    /// The distinct sessions ([`Col::Sessions`]).
    pub sessions: Vec<SessionKey>,
    /// Each event's session index ([`Col::Session`]).
    pub session: Vec<u32>,
    /// Each event's time, epoch ms.
    pub ts: Vec<i64>,
    /// Each event's position in its session.
    pub seq: Vec<u32>,
    /// Event names.
    pub name: Dict,
    /// Host names.
    pub hostname: Dict,
    /// Paths.
    pub path: Dict,
    /// Custom properties.
    pub props: Pairs,
    /// Revenue (amount, currency), if any.
    pub revenue: Vec<Option<(String, String)>>,
    /// Whether each event is interactive.
    pub interactive: Vec<bool>,
    /// Goals each event completed (key = goal).
    pub goals: Pairs,
    /// The previous state's counters.
    pub prev: Vec<PrevCounts>,
    /// The previous state's exit page.
    pub prev_exit: Dict,
    /// The ingesting run.
    pub run: Dict,
    /// The run's flush epoch.
    pub epoch: Vec<u64>,
    /// Expiry, epoch seconds.
    pub ttl: Vec<i64>,
    /// Per session: visit start, epoch ms.
    pub visit_start: Vec<i64>,
    /// Per session: the visit text attributes, in [`VISIT_TEXT`] order.
    pub visit: [Dict; 18],
}

impl Block {
    /// The visit text column `col` (one of [`VISIT_TEXT`]).
    pub fn visit_col(&self, col: Col) -> Option<&Dict> {
        VISIT_TEXT.iter().position(|c| *c == col).map(|i| &self.visit[i])
    }
}

/// Encodes events of one site and UTC day (in the order given) as a block.
pub fn encode<E: Borrow<StoredEvent>>(site_id: &str, day: UtcDay, events: &[E]) -> Result<Vec<u8>, BlockError> {
    // Owned events or shared ones (the block writer's, which their sessions keep too).
    let events: SmallVec<[&StoredEvent; 64]> = events.iter().map(Borrow::borrow).collect();
    encode_rows(site_id, day, &EventRows(&events))
}

/// Encodes the events of `blocks` (read whole, [`Cols::ALL`]), one after another, as one block:
/// byte for byte what [`encode`] makes of their events, without making the events (a string
/// per field per event) first. What a compaction merges.
pub fn merge(site_id: &str, day: UtcDay, blocks: &[Block]) -> Result<Vec<u8>, BlockError> {
    if !blocks.iter().all(is_whole) {
        return Err(BlockError::Corrupt("a column is missing"));
    }
    let at = blocks.iter().enumerate().flat_map(|(b, block)| (0..block.len).map(move |r| (b as u32, r as u32)));
    encode_rows(site_id, day, &BlockRows { blocks, at: at.collect() })
}

/// What [`encode_rows`] reads of each event of a block to be: from whole events ([`EventRows`])
/// or from blocks read whole ([`BlockRows`]). Times are absolute.
trait Rows<'a> {
    fn len(&self) -> usize;
    fn site_day(&self, i: usize) -> (&'a str, UtcDay);
    fn session(&self, i: usize) -> SessionKey;
    /// Whether rows `i` and `j`, of one session, carry the same visit attributes.
    fn same_visit(&self, i: usize, j: usize) -> bool;
    fn ts(&self, i: usize) -> i64;
    fn seq(&self, i: usize) -> u32;
    fn name(&self, i: usize) -> Cell<'a>;
    fn hostname(&self, i: usize) -> Cell<'a>;
    fn path(&self, i: usize) -> Cell<'a>;
    fn props(&self, i: usize) -> impl ExactSizeIterator<Item = (&'a str, &'a str)>;
    fn revenue(&self, i: usize) -> Option<(&'a str, &'a str)>;
    fn interactive(&self, i: usize) -> bool;
    fn goals(&self, i: usize) -> impl ExactSizeIterator<Item = &'a str>;
    fn prev(&self, i: usize) -> PrevCounts;
    fn prev_exit(&self, i: usize) -> Cell<'a>;
    fn run(&self, i: usize) -> Cell<'a>;
    fn epoch(&self, i: usize) -> u64;
    fn ttl(&self, i: usize) -> i64;
    fn visit_start(&self, i: usize) -> i64;
    fn visit_text(&self, i: usize, n: usize) -> Cell<'a>;
}

/// A value of a dictionary column as [`Rows`] hand it over: its text, or where it comes from a
/// block's dictionary, its place there (values at one place are one text, so a merge interns
/// each place once rather than every row's text).
#[derive(Clone, Copy)]
enum Cell<'a> {
    Text(&'a str),
    Coded { block: u32, id: u32, dict: &'a Dict },
}

/// Whole events as [`Rows`].
struct EventRows<'a>(&'a [&'a StoredEvent]);

impl<'a> Rows<'a> for EventRows<'a> {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn site_day(&self, i: usize) -> (&'a str, UtcDay) {
        (self.0[i].site_id.as_str(), self.0[i].day)
    }
    fn session(&self, i: usize) -> SessionKey {
        SessionKey { visitor: self.0[i].visitor_id.as_u64(), session: self.0[i].session_id.0 }
    }
    fn same_visit(&self, i: usize, j: usize) -> bool {
        let (a, b) = (&self.0[i].visit, &self.0[j].visit);
        Arc::ptr_eq(a, b) || a == b
    }
    fn ts(&self, i: usize) -> i64 {
        self.0[i].ts
    }
    fn seq(&self, i: usize) -> u32 {
        self.0[i].seq
    }
    fn name(&self, i: usize) -> Cell<'a> {
        Cell::Text(&self.0[i].name)
    }
    fn hostname(&self, i: usize) -> Cell<'a> {
        Cell::Text(&self.0[i].hostname)
    }
    fn path(&self, i: usize) -> Cell<'a> {
        Cell::Text(&self.0[i].path)
    }
    fn props(&self, i: usize) -> impl ExactSizeIterator<Item = (&'a str, &'a str)> {
        self.0[i].props.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
    fn revenue(&self, i: usize) -> Option<(&'a str, &'a str)> {
        self.0[i].revenue.as_ref().map(|(a, c)| (a.as_str(), c.as_str()))
    }
    fn interactive(&self, i: usize) -> bool {
        self.0[i].interactive
    }
    fn goals(&self, i: usize) -> impl ExactSizeIterator<Item = &'a str> {
        self.0[i].goals.iter().map(String::as_str)
    }
    fn prev(&self, i: usize) -> PrevCounts {
        let p = &self.0[i].prev;
        PrevCounts { events: p.events, pageviews: p.pageviews, interactive: p.interactive, last_ts: p.last_ts }
    }
    fn prev_exit(&self, i: usize) -> Cell<'a> {
        Cell::Text(&self.0[i].prev.exit_page)
    }
    fn run(&self, i: usize) -> Cell<'a> {
        Cell::Text(&self.0[i].run)
    }
    fn epoch(&self, i: usize) -> u64 {
        self.0[i].epoch
    }
    fn ttl(&self, i: usize) -> i64 {
        self.0[i].ttl
    }
    fn visit_start(&self, i: usize) -> i64 {
        self.0[i].visit.start_ts
    }
    fn visit_text(&self, i: usize, n: usize) -> Cell<'a> {
        Cell::Text(self.0[i].visit.text(n))
    }
}

/// The rows of blocks read whole ([`read`] with [`Cols::ALL`]), one block after another, as
/// [`Rows`].
struct BlockRows<'a> {
    blocks: &'a [Block],
    /// Each row's block and row within it.
    at: Vec<(u32, u32)>,
}

impl<'a> BlockRows<'a> {
    fn row(&self, i: usize) -> (&'a Block, usize) {
        let (b, r) = self.at[i];
        (&self.blocks[b as usize], r as usize)
    }

    /// Row `i`'s session within its block.
    fn session_of(&self, i: usize) -> (&'a Block, usize) {
        let (b, r) = self.row(i);
        (b, b.session[r] as usize)
    }

    /// Row `i`'s value of the dictionary column `column` picks.
    fn cell(&self, i: usize, column: impl Fn(&'a Block) -> &'a Dict) -> Cell<'a> {
        let (b, r) = self.at[i];
        let dict = column(&self.blocks[b as usize]);
        Cell::Coded { block: b, id: dict.rows[r as usize], dict }
    }
}

impl<'a> Rows<'a> for BlockRows<'a> {
    fn len(&self) -> usize {
        self.at.len()
    }
    fn site_day(&self, i: usize) -> (&'a str, UtcDay) {
        let (b, _) = self.row(i);
        (b.site_id.as_str(), b.day)
    }
    fn session(&self, i: usize) -> SessionKey {
        let (b, s) = self.session_of(i);
        b.sessions[s]
    }
    fn same_visit(&self, i: usize, j: usize) -> bool {
        let ((a, s), (b, t)) = (self.session_of(i), self.session_of(j));
        if std::ptr::eq(a, b) {
            return s == t;
        }
        a.visit_start[s] == b.visit_start[t] && (0..VISIT_TEXT.len()).all(|n| a.visit[n].get(s) == b.visit[n].get(t))
    }
    fn ts(&self, i: usize) -> i64 {
        let (b, r) = self.row(i);
        b.ts[r]
    }
    fn seq(&self, i: usize) -> u32 {
        let (b, r) = self.row(i);
        b.seq[r]
    }
    fn name(&self, i: usize) -> Cell<'a> {
        self.cell(i, |b| &b.name)
    }
    fn hostname(&self, i: usize) -> Cell<'a> {
        self.cell(i, |b| &b.hostname)
    }
    fn path(&self, i: usize) -> Cell<'a> {
        self.cell(i, |b| &b.path)
    }
    fn props(&self, i: usize) -> impl ExactSizeIterator<Item = (&'a str, &'a str)> {
        let (b, r) = self.row(i);
        b.props.row(r)
    }
    fn revenue(&self, i: usize) -> Option<(&'a str, &'a str)> {
        let (b, r) = self.row(i);
        b.revenue[r].as_ref().map(|(a, c)| (a.as_str(), c.as_str()))
    }
    fn interactive(&self, i: usize) -> bool {
        let (b, r) = self.row(i);
        b.interactive[r]
    }
    fn goals(&self, i: usize) -> impl ExactSizeIterator<Item = &'a str> {
        let (b, r) = self.row(i);
        b.goals.row(r).map(|(g, _)| g)
    }
    fn prev(&self, i: usize) -> PrevCounts {
        let (b, r) = self.row(i);
        b.prev[r]
    }
    fn prev_exit(&self, i: usize) -> Cell<'a> {
        self.cell(i, |b| &b.prev_exit)
    }
    fn run(&self, i: usize) -> Cell<'a> {
        self.cell(i, |b| &b.run)
    }
    fn epoch(&self, i: usize) -> u64 {
        let (b, r) = self.row(i);
        b.epoch[r]
    }
    fn ttl(&self, i: usize) -> i64 {
        let (b, r) = self.row(i);
        b.ttl[r]
    }
    fn visit_start(&self, i: usize) -> i64 {
        let (b, s) = self.session_of(i);
        b.visit_start[s]
    }
    fn visit_text(&self, i: usize, n: usize) -> Cell<'a> {
        let (b, s) = self.session_of(i);
        let dict = &b.visit[n];
        Cell::Coded { block: self.at[i].0, id: dict.rows[s], dict }
    }
}

/// Encodes `rows`, all of one site and UTC day, as a block.
fn encode_rows<'a>(site_id: &str, day: UtcDay, rows: &impl Rows<'a>) -> Result<Vec<u8>, BlockError> {
    let n = rows.len();
    // Sessions in first-seen order, found by a linear search while few (blocks are tens of events).
    let mut sessions: Interner<SessionKey> = Interner::default();
    let mut first_event: Vec<usize> = Vec::new();
    let mut session_col: SmallVec<[u32; 64]> = SmallVec::with_capacity(n);
    for i in 0..n {
        let (site, d) = rows.site_day(i);
        if site != site_id || d != day {
            return Err(BlockError::Unencodable(format!("event of {site}/{d} in a block of {site_id}/{day}")));
        }
        let (index, new) = sessions.id(rows.session(i));
        if new {
            first_event.push(i);
        }
        session_col.push(index);
    }
    // A session's visit attributes are stored once: every event of it must carry the same.
    for (i, &s) in session_col.iter().enumerate() {
        let first = first_event[s as usize];
        if !rows.same_visit(i, first) {
            return Err(BlockError::Unencodable(format!(
                "session {} has differing visit attributes",
                rows.session(i).session_id()
            )));
        }
    }

    let mut out = Vec::with_capacity(64 + n * 128);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    put_str(&mut out, site_id);
    put_str(&mut out, &day.to_string());
    put_uvar(&mut out, n as u64);
    put_uvar(&mut out, sessions.values.len() as u64);
    put_uvar(&mut out, ENCODED_COLUMNS as u64);
    let mut columns = Columns { out, raw: Vec::with_capacity(256), packed: Vec::new(), written: 0 };

    for s in &sessions.values {
        columns.raw.extend_from_slice(&s.visitor.to_le_bytes());
        columns.raw.extend_from_slice(&s.session.to_le_bytes());
    }
    columns.emit(Col::Sessions);
    session_col.iter().for_each(|&s| put_uvar(&mut columns.raw, u64::from(s)));
    columns.emit(Col::Session);
    let mut previous = 0i64;
    for i in 0..n {
        let ts = rows.ts(i);
        put_ivar(&mut columns.raw, ts.wrapping_sub(previous));
        previous = ts;
    }
    columns.emit(Col::Ts);
    (0..n).for_each(|i| put_uvar(&mut columns.raw, u64::from(rows.seq(i))));
    columns.emit(Col::Seq);
    columns.dict(Col::Name, (0..n).map(|i| rows.name(i)));
    columns.dict(Col::Hostname, (0..n).map(|i| rows.hostname(i)));
    columns.dict(Col::Path, (0..n).map(|i| rows.path(i)));
    columns.pairs(Col::Props, (0..n).map(|i| rows.props(i)));
    for i in 0..n {
        match rows.revenue(i) {
            None => columns.raw.push(0),
            Some((amount, currency)) => {
                columns.raw.push(1);
                put_str(&mut columns.raw, amount);
                put_str(&mut columns.raw, currency);
            }
        }
    }
    columns.emit(Col::Revenue);
    for i in 0..n {
        if i % 8 == 0 {
            columns.raw.push(0);
        }
        if rows.interactive(i) {
            *columns.raw.last_mut().expect("pushed above") |= 1 << (i % 8);
        }
    }
    columns.emit(Col::Interactive);
    columns.pairs(Col::Goals, (0..n).map(|i| rows.goals(i).map(|g| (g, ""))));
    for i in 0..n {
        let (ts, prev) = (rows.ts(i), rows.prev(i));
        let buf = &mut columns.raw;
        put_uvar(buf, u64::from(prev.events));
        put_uvar(buf, u64::from(prev.pageviews));
        put_uvar(buf, u64::from(prev.interactive));
        // Zero stays zero (no previous event); otherwise one more than the zigzag of the
        // (small) delta back from the event's own time.
        let code = if prev.last_ts == 0 {
            0
        } else {
            zigzag(ts.wrapping_sub(prev.last_ts))
                .checked_add(1)
                .ok_or_else(|| BlockError::Unencodable("a previous time too far from the event".into()))?
        };
        put_uvar(buf, code);
    }
    columns.emit(Col::Prev);
    columns.dict(Col::PrevExit, (0..n).map(|i| rows.prev_exit(i)));
    columns.dict(Col::Run, (0..n).map(|i| rows.run(i)));
    (0..n).for_each(|i| put_uvar(&mut columns.raw, rows.epoch(i)));
    columns.emit(Col::Epoch);
    let mut previous = 0i64;
    for i in 0..n {
        let ttl = rows.ttl(i);
        put_ivar(&mut columns.raw, ttl.wrapping_sub(previous));
        previous = ttl;
    }
    columns.emit(Col::Ttl);
    first_event.iter().for_each(|&i| put_ivar(&mut columns.raw, rows.visit_start(i).wrapping_sub(rows.ts(i))));
    columns.emit(Col::VisitStart);
    for (v, col) in VISIT_TEXT.iter().enumerate() {
        columns.dict(*col, first_event.iter().map(|&i| rows.visit_text(i, v)));
    }
    debug_assert_eq!(columns.written, ENCODED_COLUMNS);
    Ok(columns.out)
}

/// How many columns [`encode`] writes: every column but none.
const ENCODED_COLUMNS: usize = 17 + VISIT_TEXT.len();

/// [`encode`]'s output and the buffers it reuses from column to column, so a block costs a
/// handful of allocations rather than several per column.
struct Columns {
    /// The block so far.
    out: Vec<u8>,
    /// The column being built.
    raw: Vec<u8>,
    /// Its lz4 form.
    packed: Vec<u8>,
    /// How many columns were written.
    written: usize,
}

impl Columns {
    /// Appends the column in `raw` as `col`, compressed when that makes it smaller, and
    /// empties `raw` for the next.
    fn emit(&mut self, col: Col) {
        let raw = &self.raw;
        self.out.push(col as u8);
        let mut compressed = false;
        if raw.len() >= COMPRESS_FROM {
            // The layout of `lz4_flex::compress_prepend_size`: the raw length (u32, LE), then the block.
            self.packed.clear();
            self.packed.extend_from_slice(&(raw.len() as u32).to_le_bytes());
            self.packed.resize(4 + lz4_flex::block::get_maximum_output_size(raw.len()), 0);
            if let Ok(n) = lz4_flex::block::compress_into(raw, &mut self.packed[4..]) {
                self.packed.truncate(4 + n);
                compressed = self.packed.len() < raw.len();
            }
        }
        let body = if compressed { &self.packed } else { raw };
        self.out.push(u8::from(compressed));
        put_uvar(&mut self.out, body.len() as u64);
        self.out.extend_from_slice(body);
        self.raw.clear();
        self.written += 1;
    }

    /// A dictionary column: the distinct values (count, then each), then one index per row.
    /// A value from a block's dictionary is interned once per place there ([`Cell::Coded`]):
    /// the first row holding it is the first to hold its text, or that text was interned before,
    /// so the numbering is the same as interning every row's text.
    fn dict<'a>(&mut self, col: Col, rows: impl Iterator<Item = Cell<'a>>) {
        let mut values: Interner<&'a str> = Interner::default();
        // Per block, its dictionary's ids as numbered here (`u32::MAX`: not met yet).
        let mut remap: Vec<Vec<u32>> = Vec::new();
        let rows: SmallVec<[u32; 64]> = rows
            .map(|cell| match cell {
                Cell::Text(v) => values.id(v).0,
                Cell::Coded { block, id, dict } => {
                    let block = block as usize;
                    if remap.len() <= block {
                        remap.resize_with(block + 1, Vec::new);
                    }
                    let ids = &mut remap[block];
                    if ids.is_empty() {
                        ids.resize(dict.ends.len(), u32::MAX);
                    }
                    let slot = &mut ids[id as usize];
                    if *slot == u32::MAX {
                        *slot = values.id(dict.value(id as usize)).0;
                    }
                    *slot
                }
            })
            .collect();
        put_uvar(&mut self.raw, values.values.len() as u64);
        values.values.iter().for_each(|v| put_str(&mut self.raw, v));
        rows.iter().for_each(|&r| put_uvar(&mut self.raw, u64::from(r)));
        self.emit(col);
    }

    /// A pairs column: one dictionary of keys and values, then per row a count and index pairs.
    fn pairs<'a, R: ExactSizeIterator<Item = (&'a str, &'a str)>>(&mut self, col: Col, rows: impl Iterator<Item = R>) {
        let mut values: Interner<&'a str> = Interner::default();
        // The rows go to the (idle) lz4 buffer while the dictionary is still growing.
        let mut body = std::mem::take(&mut self.packed);
        body.clear();
        for row in rows {
            put_uvar(&mut body, row.len() as u64);
            for (k, v) in row {
                put_uvar(&mut body, u64::from(values.id(k).0));
                put_uvar(&mut body, u64::from(values.id(v).0));
            }
        }
        put_uvar(&mut self.raw, values.values.len() as u64);
        values.values.iter().for_each(|v| put_str(&mut self.raw, v));
        self.raw.extend_from_slice(&body);
        self.packed = body;
        self.emit(col);
    }
}

/// Distinct values in first-seen order. A block's columns hold a few distinct values each, so
/// a linear search over them beats hashing; past [`LINEAR_UP_TO`] (a merged block) a hash map
/// takes over.
struct Interner<T> {
    values: Vec<T>,
    index: Option<hashbrown::HashMap<T, u32>>,
}

/// How many distinct values [`Interner`] searches one by one.
const LINEAR_UP_TO: usize = 16;

impl<T> Default for Interner<T> {
    fn default() -> Self {
        Interner { values: Vec::new(), index: None }
    }
}

impl<T: Copy + Eq + std::hash::Hash> Interner<T> {
    /// The index of `v`, and whether it is new.
    fn id(&mut self, v: T) -> (u32, bool) {
        let next = self.values.len() as u32;
        if let Some(index) = &mut self.index {
            let id = *index.entry(v).or_insert(next);
            if id == next {
                self.values.push(v);
            }
            return (id, id == next);
        }
        if let Some(i) = self.values.iter().position(|x| *x == v) {
            return (i as u32, false);
        }
        self.values.push(v);
        if self.values.len() > LINEAR_UP_TO {
            self.index = Some(self.values.iter().enumerate().map(|(i, v)| (*v, i as u32)).collect());
        }
        (next, true)
    }
}

/// Reads a block's header and the columns in `want`.
pub fn decode(bytes: &[u8], want: Cols) -> Result<Block, BlockError> {
    let mut r = Reader { bytes, at: 0 };
    if r.take(3)? != MAGIC {
        return Err(BlockError::Corrupt("not an event block"));
    }
    let version = r.byte()?;
    if !READABLE.contains(&version) {
        return Err(BlockError::Corrupt("unknown block version"));
    }
    let site_id = r.string()?;
    let day = UtcDay::parse(&r.string()?).ok_or(BlockError::Corrupt("not a day"))?;
    let len = r.len_bounded()?;
    let n_sessions = r.len_bounded()?;
    if n_sessions > len {
        return Err(BlockError::Corrupt("more sessions than events"));
    }
    let mut block = Block { site_id: SiteId::from(site_id), day, len, ..Block::default() };
    let columns = r.len_bounded()?;
    for _ in 0..columns {
        let id = r.byte()?;
        let flags = r.byte()?;
        let size = r.len_bounded()?;
        let raw = r.take(size)?;
        let Some(col) = Col::from_id(id) else { return Err(BlockError::Corrupt("unknown column")) };
        if !want.has(col) {
            continue;
        }
        let unpacked;
        let data = match flags {
            0 => raw,
            1 => {
                // The prepended size is checked against what any column of this block could be.
                let claimed = raw.get(..4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
                if claimed.is_none_or(|c| c > bytes.len().saturating_mul(255).max(1 << 20)) {
                    return Err(BlockError::Corrupt("column size"));
                }
                unpacked = lz4_flex::decompress_size_prepended(raw).map_err(|_| BlockError::Corrupt("lz4"))?;
                &unpacked[..]
            }
            _ => return Err(BlockError::Corrupt("column flags")),
        };
        let mut c = Reader { bytes: data, at: 0 };
        let rows = if is_session_col(col) { n_sessions } else { len };
        read_column(&mut block, col, &mut c, rows)?;
        if c.at != data.len() {
            return Err(BlockError::Corrupt("trailing bytes in a column"));
        }
    }
    if r.at != bytes.len() {
        return Err(BlockError::Corrupt("trailing bytes"));
    }
    if version == 1 {
        for col in SINCE_V2.into_iter().filter(|c| want.has(*c)) {
            let i = VISIT_TEXT.iter().position(|v| *v == col).ok_or(BlockError::Corrupt("column"))?;
            block.visit[i] = Dict::empty_values(n_sessions);
        }
    }
    check_shapes(&block, want, n_sessions)?;
    Ok(block)
}

fn is_session_col(col: Col) -> bool {
    matches!(col, Col::Sessions | Col::VisitStart) || VISIT_TEXT.contains(&col)
}

fn read_column(block: &mut Block, col: Col, c: &mut Reader<'_>, rows: usize) -> Result<(), BlockError> {
    match col {
        Col::Sessions => {
            block.sessions = c.many(rows, |c| {
                let v = c.take(8)?;
                let s = c.take(16)?;
                Ok(SessionKey {
                    visitor: u64::from_le_bytes(v.try_into().expect("8 bytes")),
                    session: u128::from_le_bytes(s.try_into().expect("16 bytes")),
                })
            })?
        }
        Col::Session => block.session = c.u32s(rows)?,
        Col::Ts => block.ts = c.running(rows)?,
        Col::Seq => block.seq = c.u32s(rows)?,
        Col::Name => block.name = c.dict(rows)?,
        Col::Hostname => block.hostname = c.dict(rows)?,
        Col::Path => block.path = c.dict(rows)?,
        Col::Props => block.props = c.pairs(rows)?,
        Col::Revenue => {
            block.revenue = (0..rows)
                .map(|_| match c.byte()? {
                    0 => Ok(None),
                    1 => Ok(Some((c.string()?, c.string()?))),
                    _ => Err(BlockError::Corrupt("revenue flag")),
                })
                .collect::<Result<_, _>>()?
        }
        Col::Interactive => {
            let bytes = c.take(rows.div_ceil(8))?;
            block.interactive = (0..rows).map(|i| bytes[i / 8] & (1 << (i % 8)) != 0).collect();
        }
        Col::Goals => block.goals = c.pairs(rows)?,
        Col::Prev => {
            block.prev = c.many(rows, |c| {
                Ok(PrevCounts {
                    events: c.u32()?,
                    pageviews: c.u32()?,
                    interactive: c.u32()?,
                    // The raw code, resolved against the event's time in `read`.
                    last_ts: c.uvar()? as i64,
                })
            })?
        }
        Col::PrevExit => block.prev_exit = c.dict(rows)?,
        Col::Run => block.run = c.dict(rows)?,
        Col::Epoch => block.epoch = c.many(rows, Reader::uvar)?,
        Col::Ttl => block.ttl = c.running(rows)?,
        // Resolved against the session's first event's time in `read`.
        Col::VisitStart => block.visit_start = c.many(rows, Reader::ivar)?,
        text => {
            let i = VISIT_TEXT.iter().position(|v| *v == text).ok_or(BlockError::Corrupt("column"))?;
            block.visit[i] = c.dict(rows)?;
        }
    }
    Ok(())
}

/// Checks that the columns read agree with each other.
fn check_shapes(block: &Block, want: Cols, n_sessions: usize) -> Result<(), BlockError> {
    if want.has(Col::Session) && block.session.iter().any(|&s| s as usize >= n_sessions) {
        return Err(BlockError::Corrupt("session index"));
    }
    Ok(())
}

/// The columns [`decode`] must read for `want` to be usable: times stored as deltas need their base.
pub fn closure(want: Cols) -> Cols {
    let mut out = want;
    if want.has(Col::Prev) {
        out = out.with(Col::Ts);
    }
    if want.has(Col::VisitStart) {
        out = out.with(Col::Ts).with(Col::Session);
    }
    out
}

/// Reads the columns in `want` (and what they depend on) and resolves delta-coded times.
pub fn read(bytes: &[u8], want: Cols) -> Result<Block, BlockError> {
    let mut block = decode(bytes, closure(want))?;
    if want.has(Col::Prev) {
        for (p, &ts) in block.prev.iter_mut().zip(&block.ts) {
            let code = p.last_ts as u64;
            if code != 0 {
                p.last_ts = ts.wrapping_sub(unzigzag(code - 1));
            }
        }
    }
    if want.has(Col::VisitStart) {
        let mut first: Vec<Option<i64>> = vec![None; block.visit_start.len()];
        for (&s, &ts) in block.session.iter().zip(&block.ts) {
            let slot = first.get_mut(s as usize).ok_or(BlockError::Corrupt("session index"))?;
            slot.get_or_insert(ts);
        }
        for (v, f) in block.visit_start.iter_mut().zip(first) {
            *v = v.wrapping_add(f.ok_or(BlockError::Corrupt("a session without events"))?);
        }
    }
    Ok(block)
}

/// Whether every column of `b` has a row per event (or per session): a block read whole.
fn is_whole(b: &Block) -> bool {
    let n = b.len;
    [
        b.session.len(),
        b.ts.len(),
        b.seq.len(),
        b.name.rows.len(),
        b.hostname.rows.len(),
        b.path.rows.len(),
        b.props.offsets.len().saturating_sub(1),
        b.revenue.len(),
        b.interactive.len(),
        b.goals.offsets.len().saturating_sub(1),
        b.prev.len(),
        b.prev_exit.rows.len(),
        b.run.rows.len(),
        b.epoch.len(),
        b.ttl.len(),
    ]
    .iter()
    .all(|&l| l == n)
        && b.visit_start.len() == b.sessions.len()
        && b.visit.iter().all(|d| d.rows.len() == b.sessions.len())
}

/// Every event of a block, whole.
pub fn decode_events(bytes: &[u8]) -> Result<Vec<StoredEvent>, BlockError> {
    let b = read_whole(bytes)?;
    let visits: Vec<Arc<VisitAttrs>> = (0..b.sessions.len()).map(|s| visit_of(&b, s)).collect();
    let runs: Vec<Arc<str>> = b.run.values().map(Arc::from).collect();
    Ok((0..b.len)
        .map(|i| {
            let s = b.session[i] as usize;
            event_of(&b, i, visits[s].clone(), runs[b.run.rows[i] as usize].clone())
        })
        .collect())
}

/// The event of row `i` of a block, whole, making no other row's event: a session packed in
/// memory is one row of a block of many (`None` past the last row).
pub fn decode_event_at(bytes: &[u8], i: usize) -> Result<Option<StoredEvent>, BlockError> {
    let b = read_whole(bytes)?;
    if i >= b.len {
        return Ok(None);
    }
    let visit = visit_of(&b, b.session[i] as usize);
    let run = Arc::from(b.run.get(i));
    Ok(Some(event_of(&b, i, visit, run)))
}

fn read_whole(bytes: &[u8]) -> Result<Block, BlockError> {
    let b = read(bytes, Cols::ALL)?;
    if !is_whole(&b) {
        return Err(BlockError::Corrupt("a column is missing"));
    }
    Ok(b)
}

fn visit_of(b: &Block, s: usize) -> Arc<VisitAttrs> {
    Arc::new(VisitAttrs::from_texts(b.visit_start[s], std::array::from_fn(|i| b.visit[i].get(s))))
}

fn event_of(b: &Block, i: usize, visit: Arc<VisitAttrs>, run: Arc<str>) -> StoredEvent {
    let key = b.sessions[b.session[i] as usize];
    StoredEvent {
        site_id: b.site_id.clone(),
        day: b.day,
        visitor_id: key.visitor_id(),
        session_id: key.session_id(),
        seq: b.seq[i],
        name: b.name.get(i).to_owned(),
        ts: b.ts[i],
        hostname: b.hostname.get(i).to_owned(),
        path: b.path.get(i).to_owned(),
        props: b.props.row(i).map(|(k, v)| (k.to_owned(), v.to_owned())).collect::<BTreeMap<_, _>>(),
        revenue: b.revenue[i].clone(),
        interactive: b.interactive[i],
        goals: b.goals.row(i).map(|(g, _)| g.to_owned()).collect(),
        visit,
        prev: PrevState {
            events: b.prev[i].events,
            pageviews: b.prev[i].pageviews,
            interactive: b.prev[i].interactive,
            last_ts: b.prev[i].last_ts,
            exit_page: b.prev_exit.get(i).to_owned(),
        },
        run,
        epoch: b.epoch[i],
        ttl: b.ttl[i],
    }
}

fn put_uvar(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn put_ivar(out: &mut Vec<u8>, v: i64) {
    put_uvar(out, zigzag(v));
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_uvar(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], BlockError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len()).ok_or(BlockError::Corrupt("truncated"))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn byte(&mut self) -> Result<u8, BlockError> {
        Ok(self.take(1)?[0])
    }

    #[inline]
    fn uvar(&mut self) -> Result<u64, BlockError> {
        // Most values (indexes, small deltas) take one byte, and most others two (an index into
        // a merged block's hundreds of sessions, seconds between events in milliseconds).
        match self.bytes.get(self.at..).unwrap_or_default() {
            [b, ..] if *b < 0x80 => {
                self.at += 1;
                Ok(u64::from(*b))
            }
            [lo, hi, ..] if *hi < 0x80 => {
                self.at += 2;
                Ok(u64::from(lo & 0x7f) | (u64::from(*hi) << 7))
            }
            _ => self.uvar_long(),
        }
    }

    fn uvar_long(&mut self) -> Result<u64, BlockError> {
        // Ten bytes at most (shifts 0 to 63), read where they lie.
        let rest = &self.bytes[self.at.min(self.bytes.len())..];
        let mut v = 0u64;
        for (n, &b) in rest.iter().take(10).enumerate() {
            v |= u64::from(b & 0x7f) << (7 * n);
            if b & 0x80 == 0 {
                self.at += n + 1;
                return Ok(v);
            }
        }
        Err(BlockError::Corrupt(if rest.len() < 10 { "truncated" } else { "varint" }))
    }

    #[inline]
    fn ivar(&mut self) -> Result<i64, BlockError> {
        Ok(unzigzag(self.uvar()?))
    }

    #[inline]
    fn u32(&mut self) -> Result<u32, BlockError> {
        u32::try_from(self.uvar()?).map_err(|_| BlockError::Corrupt("u32"))
    }

    /// A count that cannot exceed the bytes left (each counted thing takes at least a byte
    /// somewhere), so a damaged count cannot make a reader allocate without bound.
    fn len_bounded(&mut self) -> Result<usize, BlockError> {
        let v = self.uvar()?;
        usize::try_from(v)
            .ok()
            .filter(|&v| v <= self.bytes.len().saturating_mul(8).max(1 << 16))
            .ok_or(BlockError::Corrupt("count"))
    }

    fn string(&mut self) -> Result<String, BlockError> {
        let n = self.len_bounded()?;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| BlockError::Corrupt("utf-8"))
    }

    /// `rows` values read by `next` (`rows` is a bounded count: [`Reader::len_bounded`]).
    fn many<T>(
        &mut self,
        rows: usize,
        mut next: impl FnMut(&mut Self) -> Result<T, BlockError>,
    ) -> Result<Vec<T>, BlockError> {
        let mut out = Vec::with_capacity(rows);
        for _ in 0..rows {
            out.push(next(self)?);
        }
        Ok(out)
    }

    /// `rows` varints of 32 bits. A column whose values all take one byte (indexes into a small
    /// session table or dictionary, positions in short sessions: most blocks' columns) is copied
    /// as it lies, without a varint step per row.
    fn u32s(&mut self, rows: usize) -> Result<Vec<u32>, BlockError> {
        if let Some(run) = self.bytes.get(self.at..).and_then(|rest| rest.get(..rows))
            && run.iter().fold(0u8, |all, &b| all | b) < 0x80
        {
            self.at += rows;
            return Ok(run.iter().map(|&b| u32::from(b)).collect());
        }
        self.many(rows, Self::u32)
    }

    fn running(&mut self, rows: usize) -> Result<Vec<i64>, BlockError> {
        let mut at = 0i64;
        self.many(rows, |r| {
            at = at.wrapping_add(r.ivar()?);
            Ok(at)
        })
    }

    fn dict(&mut self, rows: usize) -> Result<Dict, BlockError> {
        let n = self.len_bounded()?;
        // The values' text is shorter than what is left of the column (their lengths and the
        // rows' indexes follow it there), so one allocation holds it rather than a string
        // doubled as it fills: a scan decodes a few dictionaries per block, thousands of blocks.
        let mut text = String::with_capacity(if n == 0 { 0 } else { self.bytes.len() - self.at });
        let mut ends = Vec::with_capacity(n);
        for _ in 0..n {
            let len = self.len_bounded()?;
            let value = std::str::from_utf8(self.take(len)?).map_err(|_| BlockError::Corrupt("utf-8"))?;
            text.push_str(value);
            ends.push(u32::try_from(text.len()).map_err(|_| BlockError::Corrupt("dictionary size"))?);
        }
        let rows = self.u32s(rows)?;
        if rows.iter().copied().max().is_some_and(|r| r as usize >= n) {
            return Err(BlockError::Corrupt("index"));
        }
        Ok(Dict { text, ends, rows })
    }

    fn pairs(&mut self, rows: usize) -> Result<Pairs, BlockError> {
        let n = self.len_bounded()?;
        let values = self.many(n, Self::string)?;
        let mut offsets = Vec::with_capacity(rows + 1);
        let mut pairs = Vec::new();
        offsets.push(0);
        for _ in 0..rows {
            let count = self.len_bounded()?;
            for _ in 0..count {
                let (k, v) = (self.u32()?, self.u32()?);
                if k as usize >= n || v as usize >= n {
                    return Err(BlockError::Corrupt("index"));
                }
                pairs.push((k, v));
            }
            offsets.push(u32::try_from(pairs.len()).map_err(|_| BlockError::Corrupt("count"))?);
        }
        Ok(Pairs { values, offsets, pairs })
    }
}

#[cfg(test)]
pub(crate) mod tests;
