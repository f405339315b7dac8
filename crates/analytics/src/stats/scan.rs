//! The query engine over event blocks: a filtered query's sums computed from the columns it
//! needs, without building an event.
//!
//! It computes exactly what summing [`crate::aggregate::for_each_delta_of_periods`] over the
//! events and then grouping the items by bucket would (the reference, `reference_items`, kept for
//! the property test that compares them), using two facts about those deltas:
//! - an event's event counters and visitor go to the bucket of its time, under the values the
//!   event has; so they are counted per event, for the events that pass every filter;
//! - a session's visit counters telescope: each event adds the session's contribution after it and
//!   takes away the one before, so a whole session adds its final state's contribution (visits,
//!   bounce, duration, page views) to the bucket of its start, under its final exit page. So they
//!   are counted once per session the filters select, from its last event.
//!
//! Raw events need no calendar cover: a scan counts straight into the query's output groups
//! (one for a breakdown, one per hour or day for a series), given as time ranges.
//!
//! What keeps it fast (`tally bench`, BENCHMARKS.md): filters are evaluated once per dictionary
//! value of a block and then looked up by row index, so a regular expression or a substring test
//! costs per distinct value, not per event; the breakdown's values are interned once per block
//! dictionary, so an event adds to a sum found by two integers, not by text; funnel steps are
//! matched once per dictionary value too.

use std::borrow::Cow;

use hashbrown::HashMap;

use crate::block::{Block, Col, Cols, SessionKey, VISIT_TEXT};
use crate::dimension::{Dimension, EventDimension, VisitDimension};
use crate::event_store::StoredBlock;
use crate::stored::{Counters, ENGAGEMENT, PrevState};

use super::{EXIT_PAGE, Filter, StatsError, Sum, display_value};

/// What a scan computes: the sums of `dimension`'s values and of the site totals, per group.
pub(super) struct Spec<'a> {
    pub filters: &'a [Filter],
    pub dimension: &'a Dimension,
    /// Whether visit counters (visits, bounces, duration, the visit's page views) are wanted:
    /// without them a scan reads neither the previous states nor the sessions' order.
    pub visits: bool,
    /// Where events count: disjoint time ranges `start..end`, sorted by start, each with the
    /// group it adds to. An event (or a visit's start) in none of them counts nowhere.
    pub buckets: &'a [(i64, i64, u32)],
}

/// A scan's sums per group: the site totals, and per value of the dimension (as stored,
/// bounded as aggregate values are).
#[derive(Debug, Default)]
pub(super) struct Sums {
    pub totals: HashMap<u32, Sum>,
    pub values: HashMap<(u32, String), Sum>,
}

impl Sums {
    /// The sums of `dimension` ([`crate::stored::TOTAL`] for the totals) by (label of their
    /// group, value), as [`super::Stats::gather`] returns stored ones.
    pub fn labelled(
        &self,
        dimension: &Dimension,
        labels: &[String],
    ) -> std::collections::BTreeMap<(String, String), Sum> {
        let label = |g: &u32| labels.get(*g as usize).cloned().unwrap_or_default();
        if *dimension == Dimension::Total {
            self.totals.iter().map(|(g, s)| ((label(g), String::new()), s.clone())).collect()
        } else {
            self.values.iter().map(|((g, v), s)| ((label(g), v.clone()), s.clone())).collect()
        }
    }

    /// Adds `other` in.
    pub fn merge(&mut self, other: Sums) {
        for (g, s) in other.totals {
            self.totals.entry(g).or_default().add(&s);
        }
        for (k, s) in other.values {
            match self.values.get_mut(&k) {
                Some(entry) => entry.add(&s),
                None => {
                    self.values.insert(k, s);
                }
            }
        }
    }
}

/// Where a dimension's value comes from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source<'a> {
    Total,
    Page,
    Hostname,
    Name,
    Goal,
    Prop(&'a str),
    Visit(usize),
    ExitPage,
    /// A dimension no event has (counts nothing).
    None,
}

fn source(dimension: &Dimension) -> Source<'_> {
    match dimension {
        Dimension::Total => Source::Total,
        Dimension::Event(EventDimension::Page) => Source::Page,
        Dimension::Event(EventDimension::Hostname) => Source::Hostname,
        Dimension::Event(EventDimension::Name) => Source::Name,
        Dimension::Event(EventDimension::Goal) => Source::Goal,
        Dimension::Visit(VisitDimension::ExitPage) => Source::ExitPage,
        Dimension::Visit(d) => visit_col(*d).map_or(Source::None, Source::Visit),
        Dimension::Prop(key) => Source::Prop(key.as_str()),
        Dimension::Time(_) => Source::None,
    }
}

/// The index in [`VISIT_TEXT`] of a visit dimension's column (the exit page has none: it is
/// the session's state, read from the previous states).
fn visit_col(dimension: VisitDimension) -> Option<usize> {
    let col = match dimension {
        VisitDimension::ExitPage => return None,
        VisitDimension::EntryPage => Col::VisitEntry,
        VisitDimension::Source => Col::VisitSource,
        VisitDimension::Referrer => Col::VisitReferrer,
        VisitDimension::UtmSource => Col::VisitUtmSource,
        VisitDimension::UtmMedium => Col::VisitUtmMedium,
        VisitDimension::UtmCampaign => Col::VisitUtmCampaign,
        VisitDimension::UtmContent => Col::VisitUtmContent,
        VisitDimension::UtmTerm => Col::VisitUtmTerm,
        VisitDimension::Country => Col::VisitCountry,
        VisitDimension::Device => Col::VisitDevice,
        VisitDimension::Browser => Col::VisitBrowser,
        VisitDimension::BrowserVersion => Col::VisitBrowserVersion,
        VisitDimension::Os => Col::VisitOs,
        VisitDimension::OsVersion => Col::VisitOsVersion,
        VisitDimension::Region => Col::VisitRegion,
        VisitDimension::City => Col::VisitCity,
        VisitDimension::Screen => Col::VisitScreen,
        VisitDimension::Language => Col::VisitLanguage,
    };
    VISIT_TEXT.iter().position(|c| *c == col)
}

/// Whether a scan needs the visit columns: for visit counters, and for the exit page (which
/// the previous states tell).
fn needs_visits(spec: &Spec<'_>) -> bool {
    spec.visits || spec.filters.iter().map(|f| &f.dimension).chain([spec.dimension]).any(|d| *d == EXIT_PAGE)
}

/// The columns a scan reads.
fn columns(spec: &Spec<'_>) -> Cols {
    let mut cols = Cols::NONE.with(Col::Sessions).with(Col::Session).with(Col::Ts).with(Col::Name).with(Col::Path);
    if needs_visits(spec) {
        cols = cols.with(Col::Seq).with(Col::Interactive).with(Col::Prev).with(Col::PrevExit).with(Col::VisitStart);
    }
    for d in spec.filters.iter().map(|f| &f.dimension).chain([spec.dimension]) {
        cols = match source(d) {
            Source::Hostname => cols.with(Col::Hostname),
            Source::Goal => cols.with(Col::Goals),
            Source::Prop(_) => cols.with(Col::Props),
            Source::Visit(i) => cols.with(VISIT_TEXT[i]),
            _ => cols,
        };
    }
    cols
}

/// Whether `f` accepts `value`, compared bounded as aggregate values are (`key_bound`), as the
/// reference's `event_value` does.
fn accepts(f: &Filter, value: &str) -> bool {
    f.accepts(&crate::key_bound::bound_value(value))
}

/// The filters of a query, each with where its values come from.
struct Filters<'a> {
    filters: &'a [Filter],
    sources: Vec<Source<'a>>,
    /// Whether the filter is on an event dimension (an event of the visit must pass).
    on_event: Vec<bool>,
}

/// One block's filter answers, per dictionary value.
struct BlockFilters {
    /// Per filter: for each value of the column it reads, whether it passes (`None` for
    /// filters on the exit page, props and goals, evaluated per row).
    by_value: Vec<Option<Vec<bool>>>,
}

impl<'a> Filters<'a> {
    fn new(filters: &'a [Filter]) -> Filters<'a> {
        Filters {
            filters,
            sources: filters.iter().map(|f| source(&f.dimension)).collect(),
            on_event: filters.iter().map(|f| f.dimension.is_of_event()).collect(),
        }
    }

    fn prepare(&self, block: &Block) -> BlockFilters {
        let by_value = self
            .filters
            .iter()
            .zip(&self.sources)
            .map(|(f, s)| {
                let dict = match s {
                    Source::Page => &block.path,
                    Source::Hostname => &block.hostname,
                    Source::Name => &block.name,
                    Source::Visit(i) => {
                        return Some(
                            block.visit[*i]
                                .values()
                                .map(|v| accepts(f, &display_value(&f.dimension, v).unwrap_or_default()))
                                .collect(),
                        );
                    }
                    _ => return None,
                };
                Some(dict.matching(|v| accepts(f, v)))
            })
            .collect();
        BlockFilters { by_value }
    }

    /// Whether row `i` (of session row `session_row`) passes filter `n`, as `passes` in the
    /// reference does.
    fn row_passes(&self, block: &Block, bf: &BlockFilters, session_row: usize, n: usize, i: usize) -> bool {
        let source = self.sources[n];
        if let Some(by_value) = &bf.by_value[n] {
            let index = match source {
                Source::Page => block.path.rows[i],
                Source::Hostname => block.hostname.rows[i],
                Source::Name => block.name.rows[i],
                Source::Visit(c) => block.visit[c].rows[session_row],
                _ => unreachable!("only these have answers by value"),
            };
            return by_value[index as usize];
        }
        // Values per row: none, one or several; `is_not` wants every value to pass, the others any.
        let f = &self.filters[n];
        let mut values: smallvec::SmallVec<[&str; 4]> = smallvec::SmallVec::new();
        match source {
            Source::ExitPage => values.push(next_exit(block, i)),
            Source::Prop(key) => values.extend(block.props.row(i).filter(|(k, _)| *k == key).map(|(_, v)| v)),
            Source::Goal => values.extend(block.goals.row(i).map(|(g, _)| g)),
            _ => {}
        }
        if f.op.is_negated() { values.iter().all(|v| accepts(f, v)) } else { values.iter().any(|v| accepts(f, v)) }
    }
}

/// The next state's exit page of row `i` (as [`PrevState::after`] decides it).
fn next_exit(block: &Block, i: usize) -> &str {
    let prev = &block.prev[i];
    let is_pageview = block.name.get(i) == crate::event::EventName::PAGEVIEW;
    let later = prev.events == 0 || block.ts[i] >= prev.last_ts;
    let prev_exit = block.prev_exit.get(i);
    if is_pageview && (later || prev_exit.is_empty()) { block.path.get(i) } else { prev_exit }
}

/// A session of the partition: its first appearance (block, session row) and its last event
/// (block, row, seq). What the event filters said of it is kept beside (`seen`).
struct Session {
    at: (usize, usize),
    last: (usize, usize, u32),
}

/// Finds the group of a time among the spec's buckets, remembering the last one found (events
/// come near in time).
struct Groups<'a> {
    buckets: &'a [(i64, i64, u32)],
    last: usize,
}

impl Groups<'_> {
    fn of(&mut self, ts: i64) -> Option<u32> {
        if let Some(&(s, e, g)) = self.buckets.get(self.last)
            && (s..e).contains(&ts)
        {
            return Some(g);
        }
        let at = self.buckets.partition_point(|&(s, _, _)| s <= ts).checked_sub(1)?;
        let (s, e, g) = self.buckets[at];
        (s..e).contains(&ts).then(|| {
            self.last = at;
            g
        })
    }

    /// The group of a block whose events' times all lie in `lo..=hi` (its stored least and
    /// greatest), when one bucket holds that whole span: each event's time is then not needed.
    fn holding(&mut self, (lo, hi): (i64, i64)) -> Option<u32> {
        let g = self.of(lo)?;
        // `of` leaves `last` at the bucket holding `lo`.
        let (_, end, _) = self.buckets[self.last];
        (lo <= hi && hi < end).then_some(g)
    }
}

/// The dimension's values of a day, each text once, numbered.
#[derive(Default)]
struct Interner<'b> {
    ids: HashMap<Cow<'b, str>, u32>,
    values: Vec<Cow<'b, str>>,
}

impl<'b> Interner<'b> {
    /// The number of `value`, bounded as aggregate values are (`key_bound`).
    fn id(&mut self, value: &'b str) -> u32 {
        self.id_cow(crate::key_bound::bound_value(value))
    }

    fn id_cow(&mut self, value: Cow<'b, str>) -> u32 {
        if let Some(&id) = self.ids.get(value.as_ref()) {
            return id;
        }
        let id = self.values.len() as u32;
        self.values.push(value.clone());
        self.ids.insert(value, id);
        id
    }
}

/// The sums of one UTC day partition's blocks (every block of the day: a session's events are
/// all there).
pub(super) fn scan_day(blocks: &[StoredBlock], spec: &Spec<'_>) -> Result<Sums, StatsError> {
    let cols = columns(spec);
    let mut groups = Groups { buckets: spec.buckets, last: 0 };
    // Without visit counters an event's time only finds its group: a block whose whole time span
    // lies in one group's bucket (every block of a range's inner days, for a breakdown) is read
    // without its time column, and each of its events counts in that group.
    let timeless = !needs_visits(spec);
    let whole: Vec<Option<u32>> =
        blocks.iter().map(|b| if timeless { groups.holding(b.ts_range) } else { None }).collect();
    let decoded: Vec<Block> = blocks
        .iter()
        .zip(&whole)
        .map(|(b, w)| b.read(if w.is_some() { cols.without(Col::Ts) } else { cols }))
        .collect::<Result<_, _>>()?;
    let filters = Filters::new(spec.filters);
    let dim = source(spec.dimension);
    let mut interner = Interner::default();
    let mut totals: HashMap<u32, Sum> = HashMap::new();
    let mut values: HashMap<(u32, u32), Sum> = HashMap::new();

    // Sessions across the day's blocks, when visit counters are wanted (the exit page has only
    // those).
    let visits = spec.visits || dim == Source::ExitPage;
    let n_filters = spec.filters.len();
    let n_sessions: usize = if visits { decoded.iter().map(|b| b.sessions.len()).sum() } else { 0 };
    let mut index: HashMap<SessionKey, usize> = HashMap::with_capacity(n_sessions);
    let mut sessions: Vec<Session> = Vec::with_capacity(n_sessions);
    // Per session and event filter: whether some event passed (for `is_not`: whether every
    // event did).
    let mut seen: Vec<bool> = Vec::with_capacity(n_sessions * n_filters);
    let unseen: Vec<bool> = spec.filters.iter().map(|f| f.op.is_negated()).collect();
    let prepared: Vec<BlockFilters> = decoded.iter().map(|b| filters.prepare(b)).collect();
    let (mut took_total, mut took_value): (Vec<u32>, Vec<(u32, u32)>) = (Vec::new(), Vec::new());
    for (b, block) in decoded.iter().enumerate() {
        let prepared = &prepared[b];
        let pageview = block.name.values().position(|v| v == crate::event::EventName::PAGEVIEW);
        let engagement = block.name.values().position(|v| v == ENGAGEMENT);
        // The dimension's value numbers, per value of the column it reads.
        let dict_ids: Vec<u32> = match dim {
            Source::Page => block.path.values().map(|v| interner.id(v)).collect(),
            Source::Hostname => block.hostname.values().map(|v| interner.id(v)).collect(),
            Source::Name => block.name.values().map(|v| interner.id(v)).collect(),
            Source::Visit(c) => block.visit[c].values().map(|v| interner.id(v)).collect(),
            _ => Vec::new(),
        };
        let local: Vec<usize> = if visits {
            block
                .sessions
                .iter()
                .enumerate()
                .map(|(s, key)| {
                    *index.entry(*key).or_insert_with(|| {
                        sessions.push(Session { at: (b, s), last: (b, usize::MAX, 0) });
                        seen.extend_from_slice(&unseen);
                        sessions.len() - 1
                    })
                })
                .collect()
        } else {
            Vec::new()
        };
        // Per session row: the group whose totals, and the (group, value) whose sum, took its
        // visitor last. A session's events mostly fall in one group, and in a breakdown by a visit
        // dimension under one value, so its visitor goes into each sketch about once per block
        // rather than once per event (an insert hashes the id; inserting it again changes nothing).
        took_total.clear();
        took_total.resize(block.sessions.len(), u32::MAX);
        took_value.clear();
        took_value.resize(block.sessions.len(), (u32::MAX, u32::MAX));
        for i in 0..block.len {
            let row = block.session[i] as usize;
            let sid = local.get(row).copied();
            if let Some(sid) = sid {
                let s = &mut sessions[sid];
                if s.last.1 == usize::MAX || block.seq[i] >= s.last.2 {
                    s.last = (b, i, block.seq[i]);
                }
            }
            let mut all = true;
            for n in 0..n_filters {
                let ok = filters.row_passes(block, prepared, row, n, i);
                all &= ok;
                if let Some(sid) = sid
                    && filters.on_event[n]
                {
                    let seen = &mut seen[sid * n_filters + n];
                    *seen = if unseen[n] { *seen && ok } else { *seen || ok };
                }
            }
            // Event counters and visitors: every event that passes every filter.
            let name = Some(block.name.rows[i] as usize);
            if !all || name == engagement {
                continue;
            }
            let Some(group) = whole[b].or_else(|| groups.of(block.ts[i])) else { continue };
            let visitor = block.sessions[row].visitor;
            let is_pageview = name == pageview;
            let counted = Counters { events: 1, pageviews: i64::from(is_pageview), ..Counters::default() };
            let total = totals.entry(group).or_default();
            total.counters.add(&counted);
            if took_total[row] != group {
                took_total[row] = group;
                total.sketch.insert_u64(visitor);
            }
            let mut put = |id: u32| {
                let sum = values.entry((group, id)).or_default();
                sum.counters.add(&counted);
                if took_value[row] != (group, id) {
                    took_value[row] = (group, id);
                    sum.sketch.insert_u64(visitor);
                }
            };
            match dim {
                Source::Page if is_pageview => put(dict_ids[block.path.rows[i] as usize]),
                Source::Hostname => put(dict_ids[block.hostname.rows[i] as usize]),
                Source::Name => put(dict_ids[block.name.rows[i] as usize]),
                Source::Visit(c) => put(dict_ids[block.visit[c].rows[row] as usize]),
                Source::Goal => block.goals.row(i).for_each(|(g, _)| put(interner.id(g))),
                Source::Prop(key) => {
                    block.props.row(i).filter(|(k, _)| *k == key).for_each(|(_, v)| put(interner.id(v)))
                }
                _ => {}
            }
        }
    }

    // Visit counters: each selected session's final contribution, in the group of its start.
    for (sid, s) in sessions.iter().enumerate() {
        let (b, i, _) = s.last;
        let block = &decoded[b];
        let (sb, srow) = s.at;
        let start = decoded[sb].visit_start[srow];
        let Some(group) = groups.of(start) else { continue };
        let selected = (0..n_filters).all(|n| {
            if filters.on_event[n] {
                seen[sid * n_filters + n]
            } else {
                filters.row_passes(block, &prepared[b], block.session[i] as usize, n, i)
            }
        });
        if !selected {
            continue;
        }
        let prev = &block.prev[i];
        let before = PrevState {
            events: prev.events,
            pageviews: prev.pageviews,
            interactive: prev.interactive,
            last_ts: prev.last_ts,
            exit_page: block.prev_exit.get(i).to_owned(),
        };
        let pageview = block.name.get(i) == crate::event::EventName::PAGEVIEW;
        let after = before.after(pageview, block.interactive[i], block.ts[i], block.path.get(i));
        let Some(contribution) = after.contribution(start) else { continue };
        let mut counters = Counters::default();
        counters.add_contribution(&contribution, 1);
        totals.entry(group).or_default().counters.add(&counters);
        let id = match dim {
            Source::Visit(c) => interner.id(decoded[sb].visit[c].get(srow)),
            Source::ExitPage => {
                interner.id_cow(Cow::Owned(crate::key_bound::bound_value(&after.exit_page).into_owned()))
            }
            _ => continue,
        };
        values.entry((group, id)).or_default().counters.add(&counters);
    }
    let values =
        values.into_iter().map(|((g, id), sum)| ((g, interner.values[id as usize].to_string()), sum)).collect();
    Ok(Sums { totals, values })
}

/// The sessions of one UTC day partition's blocks that a filtered read selects, with their
/// events in order.
struct Selected {
    /// The partition's blocks, decoded.
    decoded: Vec<Block>,
    /// The range's events of every session, as (position in its session, block, row), session
    /// after session, each session's in order.
    events: Vec<(u32, u32, u32)>,
    /// Each selected session's key and the span of `events` holding its events.
    sessions: Vec<(SessionKey, std::ops::Range<usize>)>,
}

impl Selected {
    /// Each selected session's key and its events in order, as (block, row).
    fn iter(&self) -> impl Iterator<Item = (SessionKey, impl Iterator<Item = (usize, usize)> + '_)> + '_ {
        self.sessions
            .iter()
            .map(|(key, span)| (*key, self.events[span.clone()].iter().map(|&(_, b, i)| (b as usize, i as usize))))
    }
}

/// The sessions of one UTC day partition's blocks that `filters` select (as a filtered query
/// selects visits: an event filter by some event of the visit, or every one for a negated
/// operator; a visit filter by the visit), each with its events in `start..end` in order.
///
/// A session is looked up once per block that holds it (through the block's session table), not
/// once per event, and the range's events are put in session order by counting them per session
/// rather than by sorting them all: a day of a busy site holds tens of thousands of events.
fn selected_sessions(
    blocks: &[StoredBlock],
    (start, end): (i64, i64),
    filters: &[Filter],
    extra: Cols,
) -> Result<Selected, StatsError> {
    let spec = Spec { filters, dimension: &Dimension::Total, visits: false, buckets: &[] };
    let cols = columns(&spec).with(Col::Seq).union(extra);
    // A block whose whole time span lies in the range is read without its time column (every
    // event of it counts); `block::read` still reads it where another column needs it.
    let inside: Vec<bool> = blocks.iter().map(|b| start <= b.ts_range.0 && b.ts_range.1 < end).collect();
    let decoded: Vec<Block> = blocks
        .iter()
        .zip(&inside)
        .map(|(b, &inside)| b.read(if inside { cols.without(Col::Ts) } else { cols }))
        .collect::<Result<_, _>>()?;
    let by = Filters::new(filters);
    let prepared: Vec<BlockFilters> = decoded.iter().map(|b| by.prepare(b)).collect();
    let n_filters = filters.len();
    let unseen: Vec<bool> = filters.iter().map(|f| f.op.is_negated()).collect();
    let on_event: Vec<usize> = (0..n_filters).filter(|&n| by.on_event[n]).collect();
    let most_sessions = decoded.iter().map(|b| b.sessions.len()).sum();
    // Per session: its key, what its events told the event filters, and its last event as
    // (position, block, row), the block `u32::MAX` before its first.
    let mut index: HashMap<SessionKey, u32> = HashMap::with_capacity(most_sessions);
    let mut keys: Vec<SessionKey> = Vec::with_capacity(most_sessions);
    let mut seen: Vec<bool> = Vec::new();
    let mut last: Vec<(u32, u32, u32)> = Vec::with_capacity(most_sessions);
    // The range's events in block order, as (session, block, row).
    let mut in_range: Vec<(u32, u32, u32)> = Vec::with_capacity(decoded.iter().map(|b| b.len).sum());
    let mut sids: Vec<u32> = Vec::new();
    for (b, block) in decoded.iter().enumerate() {
        sids.clear();
        sids.extend(block.sessions.iter().map(|key| {
            *index.entry(*key).or_insert_with(|| {
                keys.push(*key);
                seen.extend_from_slice(&unseen);
                last.push((0, u32::MAX, 0));
                (keys.len() - 1) as u32
            })
        }));
        for i in 0..block.len {
            let row = block.session[i] as usize;
            let sid = sids[row] as usize;
            for &n in &on_event {
                let ok = by.row_passes(block, &prepared[b], row, n, i);
                let s = &mut seen[sid * n_filters + n];
                *s = if unseen[n] { *s && ok } else { *s || ok };
            }
            let seq = block.seq[i];
            let l = &mut last[sid];
            if l.1 == u32::MAX || seq >= l.0 {
                *l = (seq, b as u32, i as u32);
            }
            if inside[b] || (start..end).contains(&block.ts[i]) {
                in_range.push((sid as u32, b as u32, i as u32));
            }
        }
    }
    // In session order: counted per session, each session's span then sorted by position (its
    // events mostly come in order already).
    let mut starts = vec![0usize; keys.len() + 1];
    for &(sid, _, _) in &in_range {
        starts[sid as usize + 1] += 1;
    }
    for s in 1..starts.len() {
        starts[s] += starts[s - 1];
    }
    let mut next = starts.clone();
    let mut events = vec![(0u32, 0u32, 0u32); in_range.len()];
    for &(sid, b, i) in &in_range {
        let at = &mut next[sid as usize];
        events[*at] = (decoded[b as usize].seq[i as usize], b, i);
        *at += 1;
    }
    drop(in_range);
    let mut sessions = Vec::with_capacity(keys.len());
    for (sid, span) in starts.windows(2).enumerate() {
        let span = span[0]..span[1];
        if span.is_empty() {
            continue;
        }
        let (_, b, i) = last[sid];
        let (b, i) = (b as usize, i as usize);
        let block = &decoded[b];
        let selected = (0..n_filters).all(|n| {
            if by.on_event[n] {
                seen[sid * n_filters + n]
            } else {
                by.row_passes(block, &prepared[b], block.session[i] as usize, n, i)
            }
        });
        if selected {
            let own = &mut events[span.clone()];
            if !own.is_sorted() {
                own.sort_unstable();
            }
            sessions.push((keys[sid], span));
        }
    }
    Ok(Selected { decoded, events, sessions })
}

/// Of one block, for one funnel step: which names complete it, and which paths (`None`: any).
type StepMatch = (Vec<bool>, Option<Vec<bool>>);

/// For a funnel: per step, the visitors (of one UTC day partition's sessions) who did it and
/// every step before it in order within one visit, counting only events in `start..end` and
/// only the visits `filters` select ([`selected_sessions`]).
pub(super) fn funnel_day(
    blocks: &[StoredBlock],
    steps: &[crate::goal::Goal],
    range: (i64, i64),
    filters: &[Filter],
) -> Result<Vec<hashbrown::HashSet<u64>>, StatsError> {
    let selected = selected_sessions(blocks, range, filters, Cols::NONE)?;
    // Per block, per step: which names and which paths complete it, decided once per dictionary
    // value, as `Goal::matches` decides (split by the column each part reads).
    let matched: Vec<Vec<StepMatch>> = selected
        .decoded
        .iter()
        .map(|block| {
            steps
                .iter()
                .map(|step| match step {
                    crate::goal::Goal::Page(p) => (
                        block.name.matching(|n| n == crate::event::EventName::PAGEVIEW),
                        Some(block.path.matching(|v| p.matches(v))),
                    ),
                    crate::goal::Goal::Event(e) => (block.name.matching(|n| n == e), None),
                })
                .collect()
        })
        .collect();
    let mut reached: Vec<hashbrown::HashSet<u64>> = vec![Default::default(); steps.len()];
    for (key, events) in selected.iter() {
        let mut done = 0;
        for (b, i) in events {
            if done == steps.len() {
                break;
            }
            let block = &selected.decoded[b];
            let (names, paths) = &matched[b][done];
            if names[block.name.rows[i] as usize] && paths.as_ref().is_none_or(|p| p[block.path.rows[i] as usize]) {
                done += 1;
            }
        }
        for set in reached.iter_mut().take(done) {
            set.insert(key.visitor);
        }
    }
    Ok(reached)
}

/// For journeys: each selected session's visitor and the paths of its page views in
/// `start..end`, in order, a page viewed again at once (a reload) kept once.
pub(super) fn page_sequences(
    blocks: &[StoredBlock],
    range: (i64, i64),
    filters: &[Filter],
) -> Result<Vec<(u64, Vec<String>)>, StatsError> {
    let selected = selected_sessions(blocks, range, filters, Cols::NONE)?;
    let decoded = &selected.decoded;
    let mut out = Vec::with_capacity(selected.sessions.len());
    for (key, events) in selected.iter() {
        let mut pages: Vec<String> = Vec::new();
        for (b, i) in events {
            if decoded[b].name.get(i) != crate::event::EventName::PAGEVIEW {
                continue;
            }
            let path = decoded[b].path.get(i);
            if pages.last().map(String::as_str) != Some(path) {
                pages.push(path.to_owned());
            }
        }
        if !pages.is_empty() {
            out.push((key.visitor, pages));
        }
    }
    Ok(out)
}

/// For revenue goals: per goal of `goals` (display name → its index and currency), the revenue
/// summed and the number of events counted, over the events in `start..end` of the sessions
/// `filters` select that completed the goal with revenue in its currency.
pub(super) fn goal_revenue_day(
    blocks: &[StoredBlock],
    range: (i64, i64),
    filters: &[Filter],
    goals: &std::collections::HashMap<String, (usize, String)>,
) -> Result<Vec<(store::Number, u64)>, StatsError> {
    let extra = Cols::NONE.with(Col::Goals).with(Col::Revenue);
    let selected = selected_sessions(blocks, range, filters, extra)?;
    let decoded = &selected.decoded;
    let mut sums = vec![(store::Number::zero(), 0u64); goals.len()];
    for (_, events) in selected.iter() {
        for (b, i) in events {
            let block = &decoded[b];
            let Some((amount, currency)) = &block.revenue[i] else { continue };
            for (goal, _) in block.goals.row(i) {
                let Some((g, want)) = goals.get(goal) else { continue };
                if currency != want {
                    continue;
                }
                // Stored amounts were parsed as exact decimals at ingestion.
                let Ok(amount) = amount.parse::<store::Number>() else { continue };
                let sum = &mut sums[*g];
                sum.0 = sum.0.checked_add(&amount).map_err(|e| StatsError::Corrupt(format!("revenue sum: {e}")))?;
                sum.1 += 1;
            }
        }
    }
    Ok(sums)
}
