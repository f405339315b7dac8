//! The query engine over event blocks: a filtered query's aggregate items computed from the
//! columns it needs, without building an event.
//!
//! It computes exactly what summing [`crate::aggregate::for_each_delta_of_periods`] over the
//! events would (the reference, `reference_items`, kept for the property test that compares
//! them), using two facts about those deltas:
//! - an event's event counters and visitor go to the bucket of its time, under the values the
//!   event has; so they are counted per event, for the events that pass every filter;
//! - a session's visit counters telescope: each event adds the session's contribution after it and
//!   takes away the one before, so a whole session adds its final state's contribution (visits,
//!   bounce, duration, page views) to the bucket of its start, under its final exit page. So they
//!   are counted once per session the filters select, from its last event.
//!
//! Filters are evaluated once per dictionary value of a block and then looked up by row index,
//! so a regular expression or a substring test costs per distinct value, not per event.

use std::collections::HashMap;

use crate::block::{Block, Col, Cols, SessionKey, VISIT_TEXT};
use crate::event_store::StoredBlock;
use crate::period::SiteZone;
use crate::stored::{AggKey, Counters, ENGAGEMENT, PROPS_PREFIX, Period, PrevState};

use super::{Filter, StatsError, Sum, display_value};

/// What a scan computes: the items of `dimension` and of the site totals, at `periods`.
pub(super) struct Spec<'a> {
    pub site_id: &'a str,
    pub zone: &'a SiteZone,
    pub filters: &'a [Filter],
    pub dimension: &'a str,
    pub periods: &'a [Period],
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

fn source(dimension: &str) -> Source<'_> {
    match dimension {
        crate::stored::TOTAL => Source::Total,
        "event:page" => Source::Page,
        "event:hostname" => Source::Hostname,
        "event:name" => Source::Name,
        "event:goal" => Source::Goal,
        "visit:exit_page" => Source::ExitPage,
        d if d.starts_with(PROPS_PREFIX) => Source::Prop(&d[PROPS_PREFIX.len()..]),
        d => visit_col(d).map_or(Source::None, Source::Visit),
    }
}

/// The index in [`VISIT_TEXT`] of a visit dimension's column.
fn visit_col(dimension: &str) -> Option<usize> {
    let col = match dimension {
        "visit:entry_page" => Col::VisitEntry,
        "visit:source" => Col::VisitSource,
        "visit:referrer" => Col::VisitReferrer,
        "visit:utm_source" => Col::VisitUtmSource,
        "visit:utm_medium" => Col::VisitUtmMedium,
        "visit:utm_campaign" => Col::VisitUtmCampaign,
        "visit:utm_content" => Col::VisitUtmContent,
        "visit:utm_term" => Col::VisitUtmTerm,
        "visit:country" => Col::VisitCountry,
        "visit:device" => Col::VisitDevice,
        "visit:browser" => Col::VisitBrowser,
        "visit:browser_version" => Col::VisitBrowserVersion,
        "visit:os" => Col::VisitOs,
        "visit:os_version" => Col::VisitOsVersion,
        _ => return None,
    };
    VISIT_TEXT.iter().position(|c| *c == col)
}

/// The columns a scan reads.
fn columns(spec: &Spec<'_>) -> Cols {
    let mut cols = Cols::NONE
        .with(Col::Sessions)
        .with(Col::Session)
        .with(Col::Ts)
        .with(Col::Seq)
        .with(Col::Name)
        .with(Col::Path)
        .with(Col::Interactive)
        .with(Col::Prev)
        .with(Col::PrevExit)
        .with(Col::VisitStart);
    let dimensions = spec.filters.iter().map(|f| f.dimension.as_str()).chain([spec.dimension]);
    for d in dimensions {
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

/// One block's filter answers, per dictionary value.
struct BlockFilters {
    /// Per filter: for each value of the column it reads, whether it passes (`None` for
    /// filters on the exit page, props and goals, evaluated per row).
    by_value: Vec<Option<Vec<bool>>>,
}

/// Whether `f` accepts `value`, compared bounded as aggregate values are (`key_bound`), as the
/// reference's `event_value` does.
fn accepts(f: &Filter, value: &str) -> bool {
    f.accepts(&crate::key_bound::bound_value(value))
}

fn prepare(block: &Block, filters: &[Filter]) -> BlockFilters {
    let by_value = filters
        .iter()
        .map(|f| {
            let dict = match source(&f.dimension) {
                Source::Page => &block.path,
                Source::Hostname => &block.hostname,
                Source::Name => &block.name,
                Source::Visit(i) => {
                    let d = &f.dimension;
                    return Some(
                        block.visit[i]
                            .values
                            .iter()
                            .map(|v| accepts(f, &display_value(d, v).unwrap_or_default()))
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

/// The next state's exit page of row `i` (as [`PrevState::after`] decides it).
fn next_exit(block: &Block, i: usize) -> &str {
    let prev = &block.prev[i];
    let is_pageview = block.name.get(i) == crate::event::EventName::PAGEVIEW;
    let later = prev.events == 0 || block.ts[i] >= prev.last_ts;
    let prev_exit = block.prev_exit.get(i);
    if is_pageview && (later || prev_exit.is_empty()) { block.path.get(i) } else { prev_exit }
}

/// Whether row `i` passes filter `n` (`f`), as `passes` in the reference does.
fn row_passes(block: &Block, bf: &BlockFilters, session_row: usize, n: usize, f: &Filter, i: usize) -> bool {
    if let Some(by_value) = &bf.by_value[n] {
        let index = match source(&f.dimension) {
            Source::Page => block.path.rows[i],
            Source::Hostname => block.hostname.rows[i],
            Source::Name => block.name.rows[i],
            Source::Visit(c) => block.visit[c].rows[session_row],
            _ => unreachable!("only these have answers by value"),
        };
        return by_value[index as usize];
    }
    // Values per row: none, one or several; `is_not` wants every value to pass, the others any.
    let mut values: Vec<&str> = Vec::new();
    match source(&f.dimension) {
        Source::ExitPage => values.push(next_exit(block, i)),
        Source::Prop(key) => values.extend(block.props.row(i).filter(|(k, _)| *k == key).map(|(_, v)| v)),
        Source::Goal => values.extend(block.goals.row(i).map(|(g, _)| g)),
        _ => {}
    }
    if f.op.is_negated() { values.iter().all(|v| accepts(f, v)) } else { values.iter().any(|v| accepts(f, v)) }
}

/// A session of the partition: its first appearance (block, session row), its last event
/// (block, row, seq), and what the filters said of it so far.
struct Session {
    at: (usize, usize),
    last: (usize, usize, u32),
    /// Per event filter: whether some event passed (for `is_not`: whether every event did).
    event_filters: Vec<bool>,
}

/// Bucket labels of a period, remembering the last bucket found (events come near in time).
struct Buckets {
    period: Period,
    last: Option<(i64, i64, String)>,
}

impl Buckets {
    fn label(&mut self, zone: &SiteZone, ts: i64) -> Option<&str> {
        let hit = self.last.as_ref().is_some_and(|(s, e, _)| (*s..*e).contains(&ts));
        if !hit && self.period == Period::Minute {
            // UTC minutes, as stored minute items are labelled (realtime under filters).
            let start = ts.div_euclid(60_000) * 60_000;
            self.last = Some((start, start + 60_000, crate::stored::minute_label(ts)));
        } else if !hit {
            let unit = self.period.unit()?;
            let b = zone.bucket(unit, ts).ok()?;
            self.last = Some((b.start_ms(), b.end_ms(), b.label()));
        }
        self.last.as_ref().map(|(_, _, l)| l.as_str())
    }
}

/// Adds `counters` (and the visitor) to the item of (`period`, `bucket`, `dimension`, `value`).
fn add(
    items: &mut HashMap<AggKey, Sum>,
    spec: &Spec<'_>,
    (period, bucket): (Period, &str),
    dimension: &str,
    value: &str,
    counters: &Counters,
    visitor: Option<u64>,
) {
    let key = AggKey {
        site_id: spec.site_id.to_owned(),
        period,
        dimension: dimension.to_owned(),
        bucket: bucket.to_owned(),
        // Bounded as `for_each_delta_of_periods` bounds it (`key_bound`).
        value: crate::key_bound::bound_value(value).into_owned(),
    };
    let entry = items.entry(key).or_default();
    entry.counters.add(counters);
    if let Some(v) = visitor {
        entry.sketch.insert_u64(v);
    }
}

/// The items of one UTC day partition's blocks (every block of the day: a session's events are
/// all there).
pub(super) fn scan_day(blocks: &[StoredBlock], spec: &Spec<'_>) -> Result<HashMap<AggKey, Sum>, StatsError> {
    let cols = columns(spec);
    let decoded: Vec<Block> = blocks.iter().map(|b| b.read(cols)).collect::<Result<_, _>>()?;
    let prepared: Vec<BlockFilters> = decoded.iter().map(|b| prepare(b, spec.filters)).collect();
    let event_filter: Vec<bool> = spec.filters.iter().map(|f| f.dimension.starts_with("event:")).collect();

    // Sessions across the day's blocks.
    let mut index: HashMap<SessionKey, usize> = HashMap::new();
    let mut sessions: Vec<Session> = Vec::new();
    // Per block, per row: whether the row passes every filter, and its session.
    let mut passing: Vec<Vec<bool>> = Vec::with_capacity(decoded.len());
    let mut session_of: Vec<Vec<usize>> = Vec::with_capacity(decoded.len());
    for (b, block) in decoded.iter().enumerate() {
        let mut pass = Vec::with_capacity(block.len);
        let mut of = Vec::with_capacity(block.len);
        let local: Vec<usize> = block
            .sessions
            .iter()
            .enumerate()
            .map(|(s, key)| {
                *index.entry(*key).or_insert_with(|| {
                    sessions.push(Session {
                        at: (b, s),
                        last: (b, usize::MAX, 0),
                        event_filters: spec.filters.iter().map(|f| f.op.is_negated()).collect(),
                    });
                    sessions.len() - 1
                })
            })
            .collect();
        for i in 0..block.len {
            let row = block.session[i] as usize;
            let sid = local[row];
            let s = &mut sessions[sid];
            if s.last.1 == usize::MAX || block.seq[i] >= s.last.2 {
                s.last = (b, i, block.seq[i]);
            }
            let mut all = true;
            for (n, f) in spec.filters.iter().enumerate() {
                let ok = row_passes(block, &prepared[b], row, n, f, i);
                all &= ok;
                if event_filter[n] {
                    let seen = &mut s.event_filters[n];
                    *seen = if f.op.is_negated() { *seen && ok } else { *seen || ok };
                }
            }
            pass.push(all);
            of.push(row);
        }
        passing.push(pass);
        session_of.push(of);
    }

    let dim = source(spec.dimension);
    let mut items: HashMap<AggKey, Sum> = HashMap::new();
    let mut buckets: Vec<Buckets> = spec.periods.iter().map(|&p| Buckets { period: p, last: None }).collect();

    // Event counters and visitors: every event that passes every filter.
    for (b, block) in decoded.iter().enumerate() {
        for i in 0..block.len {
            if !passing[b][i] || block.name.get(i) == ENGAGEMENT {
                continue;
            }
            let row = session_of[b][i];
            let visitor = block.sessions[row].visitor;
            let pageview = block.name.get(i) == crate::event::EventName::PAGEVIEW;
            let counted = Counters { events: 1, pageviews: i64::from(pageview), ..Counters::default() };
            for bk in buckets.iter_mut() {
                let period = bk.period;
                let Some(bucket) = bk.label(spec.zone, block.ts[i]) else { continue };
                add(&mut items, spec, (period, bucket), crate::stored::TOTAL, "", &counted, Some(visitor));
                let mut put = |value: &str| {
                    add(&mut items, spec, (period, bucket), spec.dimension, value, &counted, Some(visitor))
                };
                match dim {
                    Source::Page if pageview => put(block.path.get(i)),
                    Source::Hostname => put(block.hostname.get(i)),
                    Source::Name => put(block.name.get(i)),
                    Source::Goal => block.goals.row(i).for_each(|(g, _)| put(g)),
                    Source::Prop(key) => block.props.row(i).filter(|(k, _)| *k == key).for_each(|(_, v)| put(v)),
                    Source::Visit(c) => put(block.visit[c].get(row)),
                    _ => {}
                }
            }
        }
    }

    // Visit counters: each selected session's final contribution, in the bucket of its start.
    for s in &sessions {
        let (b, i, _) = s.last;
        let block = &decoded[b];
        let selected = spec.filters.iter().enumerate().all(|(n, f)| {
            if event_filter[n] {
                s.event_filters[n]
            } else {
                row_passes(block, &prepared[b], block.session[i] as usize, n, f, i)
            }
        });
        if !selected {
            continue;
        }
        let (sb, srow) = s.at;
        let start = decoded[sb].visit_start[srow];
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
        for bk in buckets.iter_mut() {
            let period = bk.period;
            let Some(bucket) = bk.label(spec.zone, start) else { continue };
            add(&mut items, spec, (period, bucket), crate::stored::TOTAL, "", &counters, None);
            match dim {
                Source::Visit(c) => add(
                    &mut items,
                    spec,
                    (period, bucket),
                    spec.dimension,
                    decoded[sb].visit[c].get(srow),
                    &counters,
                    None,
                ),
                Source::ExitPage => {
                    add(&mut items, spec, (period, bucket), spec.dimension, &after.exit_page, &counters, None)
                }
                _ => {}
            }
        }
    }
    Ok(items)
}

/// The sessions of one UTC day partition's blocks that `filters` select (as a filtered query
/// selects visits: an event filter by some event of the visit, or every one for a negated
/// operator; a visit filter by the visit), each with its events in `start..end` in order, as
/// (block, row) of the decoded blocks returned with them.
fn selected_sessions(
    blocks: &[StoredBlock],
    (start, end): (i64, i64),
    filters: &[Filter],
) -> Result<(Vec<Block>, Vec<(SessionKey, Vec<(usize, usize)>)>), StatsError> {
    let spec = Spec { site_id: "", zone: &SiteZone::utc(), filters, dimension: crate::stored::TOTAL, periods: &[] };
    let cols = if filters.is_empty() {
        Cols::NONE.with(Col::Sessions).with(Col::Session).with(Col::Ts).with(Col::Seq).with(Col::Name).with(Col::Path)
    } else {
        columns(&spec)
    };
    let decoded: Vec<Block> = blocks.iter().map(|b| b.read(cols)).collect::<Result<_, _>>()?;
    let prepared: Vec<BlockFilters> = decoded.iter().map(|b| prepare(b, filters)).collect();
    // Each session's events in the range, as (seq, block, row), and whether each filter passed.
    let mut sessions: HashMap<SessionKey, Vec<(u32, usize, usize)>> = HashMap::new();
    let mut selected: HashMap<SessionKey, Vec<bool>> = HashMap::new();
    let mut last: HashMap<SessionKey, (u32, usize, usize)> = HashMap::new();
    for (b, block) in decoded.iter().enumerate() {
        for i in 0..block.len {
            let key = block.sessions[block.session[i] as usize];
            if !filters.is_empty() {
                let seen = selected.entry(key).or_insert_with(|| filters.iter().map(|f| f.op.is_negated()).collect());
                for (n, f) in filters.iter().enumerate() {
                    if f.dimension.starts_with("event:") {
                        let ok = row_passes(block, &prepared[b], block.session[i] as usize, n, f, i);
                        seen[n] = if f.op.is_negated() { seen[n] && ok } else { seen[n] || ok };
                    }
                }
                let at = last.entry(key).or_insert((block.seq[i], b, i));
                if block.seq[i] >= at.0 {
                    *at = (block.seq[i], b, i);
                }
            }
            if (start..end).contains(&block.ts[i]) {
                sessions.entry(key).or_default().push((block.seq[i], b, i));
            }
        }
    }
    let mut out = Vec::with_capacity(sessions.len());
    for (key, mut events) in sessions {
        if !filters.is_empty() {
            let (Some(seen), Some(&(_, b, i))) = (selected.get(&key), last.get(&key)) else { continue };
            let block = &decoded[b];
            let pass = filters.iter().enumerate().all(|(n, f)| {
                if f.dimension.starts_with("event:") {
                    seen[n]
                } else {
                    row_passes(block, &prepared[b], block.session[i] as usize, n, f, i)
                }
            });
            if !pass {
                continue;
            }
        }
        events.sort_unstable();
        out.push((key, events.into_iter().map(|(_, b, i)| (b, i)).collect()));
    }
    Ok((decoded, out))
}

/// For a funnel: per step, the visitors (of one UTC day partition's sessions) who did it and
/// every step before it in order within one visit, counting only events in `start..end` and
/// only the visits `filters` select ([`selected_sessions`]).
pub(super) fn funnel_day(
    blocks: &[StoredBlock],
    steps: &[crate::goal::Goal],
    range: (i64, i64),
    filters: &[Filter],
) -> Result<Vec<std::collections::HashSet<u64>>, StatsError> {
    let (decoded, sessions) = selected_sessions(blocks, range, filters)?;
    let mut reached: Vec<std::collections::HashSet<u64>> = vec![Default::default(); steps.len()];
    for (key, events) in sessions {
        let mut done = 0;
        for (b, i) in events {
            if done < steps.len() && steps[done].matches(decoded[b].name.get(i), decoded[b].path.get(i)) {
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
    let (decoded, sessions) = selected_sessions(blocks, range, filters)?;
    let mut out = Vec::with_capacity(sessions.len());
    for (key, events) in sessions {
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
