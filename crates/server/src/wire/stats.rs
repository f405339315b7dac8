//! The Stats API's bodies and answers ([`crate::stats`]), declared. The answers: realtime,
//! funnels, journeys, property keys and imports, and the query a `POST /api/v2/query` answer
//! echoes (the rest of that answer is [`crate::wire::query`]'s). The bodies: the query ([`QueryBody`]), the funnel, journeys and export bodies, and the
//! filters and funnel steps the sites API saves too; each is read into `analytics` values by its
//! own methods, which check its fields in a fixed order and say what is wrong in Tally's words.

use analytics::goal::Goal;
use analytics::period::{DateRange, RangeSpec, SiteZone, parse_date};
use analytics::sites::Site;
use analytics::stats::{
    ComparisonMode, Filter, FilterOp, FunnelStep, MAX_PAGE_ROWS, MAX_QUERY_ROWS, Metric, Query, Realtime,
};
use serde::{Deserialize, Serialize};

use crate::error::ServerError;
use crate::wire::import::Refusals;
use crate::wire::sent::{Object, Sent};

/// The answer of `GET /api/realtime`: the last 30 minutes.
#[derive(Debug, Serialize)]
pub struct RealtimeView<'a> {
    /// Visitors seen in the last minutes.
    pub current_visitors: u64,
    /// Page views per minute.
    pub pageviews_per_minute: Vec<MinuteView>,
    /// The most viewed pages.
    pub top_pages: Vec<TopPage<'a>>,
}

/// Page views in one minute.
#[derive(Debug, Serialize)]
pub struct MinuteView {
    /// The minute, RFC 3339.
    pub minute: String,
    /// Page views in it.
    pub pageviews: i64,
}

/// A page of the realtime panel.
#[derive(Debug, Serialize)]
pub struct TopPage<'a> {
    /// The page's path.
    pub page: &'a str,
    /// Unique visitors who viewed the page in the range.
    pub visitors: u64,
    /// Its page views.
    pub pageviews: i64,
}

impl<'a> RealtimeView<'a> {
    /// `rt` as answered.
    pub fn new(rt: &'a Realtime) -> Self {
        RealtimeView {
            current_visitors: rt.current_visitors,
            pageviews_per_minute: rt
                .pageviews_per_minute
                .iter()
                .map(|(ms, n)| MinuteView {
                    minute: jiff::Timestamp::from_millisecond(*ms).map(|t| t.to_string()).unwrap_or_default(),
                    pageviews: *n,
                })
                .collect(),
            top_pages: rt.top_pages.iter().map(|(p, v, n)| TopPage { page: p, visitors: *v, pageviews: *n }).collect(),
        }
    }
}

/// One step of a funnel, as Plausible's funnels report it.
#[derive(Debug, Serialize)]
pub struct FunnelStepView<'a> {
    /// The step's name.
    pub step: &'a str,
    /// The visitors who did it and every step before it.
    pub visitors: u64,
    /// Their share of the first step's visitors.
    pub conversion_rate: f64,
    /// Their share of the step before's.
    pub conversion_rate_step: f64,
    /// The visitors of the step before who did not do this one.
    pub dropoff: u64,
    /// Their share of the step before's visitors.
    pub dropoff_percentage: f64,
}

impl<'a> FunnelStepView<'a> {
    /// The steps of a funnel: each step's rates against the step before (the first step's
    /// against itself).
    pub fn steps(result: &'a [FunnelStep]) -> Vec<Self> {
        let mut previous = result.first().map_or(0, |s| s.visitors);
        result
            .iter()
            .map(|s| {
                let step = analytics::goal::conversion_rate(s.visitors, previous).percent(2);
                let lost = analytics::goal::conversion_rate(s.dropoff, previous).percent(2);
                previous = s.visitors;
                FunnelStepView {
                    step: &s.name,
                    visitors: s.visitors,
                    conversion_rate: s.conversion_rate,
                    conversion_rate_step: step,
                    dropoff: s.dropoff,
                    dropoff_percentage: lost,
                }
            })
            .collect()
    }
}

/// A page and its visitors.
#[derive(Debug, Serialize)]
pub struct PageVisitors<'a> {
    /// The page's path.
    pub page: &'a str,
    /// Unique visitors who went that way.
    pub visitors: u64,
}

/// A path of pages and its visitors.
#[derive(Debug, Serialize)]
pub struct PathVisitors<'a> {
    /// The pages, in order.
    pub pages: &'a [String],
    /// The visitors who took it.
    pub visitors: u64,
}

/// The answer of `POST /api/journeys`.
#[derive(Debug, Serialize)]
pub struct JourneysView<'a> {
    /// The page asked about.
    pub page: &'a str,
    /// The pages viewed just before it.
    pub before: Vec<PageVisitors<'a>>,
    /// The pages viewed just after it.
    pub after: Vec<PageVisitors<'a>>,
    /// The most common paths from it.
    pub paths: Vec<PathVisitors<'a>>,
}

impl<'a> JourneysView<'a> {
    /// The journeys `j` through `page`.
    pub fn new(page: &'a str, j: &'a analytics::stats::Journeys) -> Self {
        let list =
            |rows: &'a [(String, u64)]| rows.iter().map(|(p, v)| PageVisitors { page: p, visitors: *v }).collect();
        JourneysView {
            page,
            before: list(&j.before),
            after: list(&j.after),
            paths: j.paths.iter().map(|(p, v)| PathVisitors { pages: p, visitors: *v }).collect(),
        }
    }
}

/// A custom property key and how many events carry it.
#[derive(Debug, Serialize)]
pub struct KeyEvents<'a> {
    /// The custom property's key, as events carry it.
    pub key: &'a str,
    /// Events with it.
    pub events: u64,
}

/// The answer of `POST /api/properties`: the custom property keys, most used first.
#[derive(Debug, Serialize)]
pub struct PropertyKeys<'a> {
    /// Each key and its events.
    pub keys: Vec<KeyEvents<'a>>,
}

impl<'a> PropertyKeys<'a> {
    /// The keys `keys` with their events, in their order.
    pub fn new(keys: &'a [(String, u64)]) -> Self {
        PropertyKeys { keys: keys.iter().map(|(key, events)| KeyEvents { key, events: *events }).collect() }
    }
}

/// A refused import line.
#[derive(Debug, Serialize)]
pub struct LineError<'a> {
    /// Its line number.
    pub line: usize,
    /// Why it was refused.
    pub error: &'a str,
}

/// The answer of `POST /api/import`.
#[derive(Debug, Serialize)]
pub struct ImportReport<'a> {
    /// Events stored.
    pub imported: u64,
    /// Events dropped on purpose (bots, excluded addresses).
    pub dropped: u64,
    /// The first refused lines.
    pub errors: Vec<LineError<'a>>,
    /// How many lines were refused.
    pub errors_total: u64,
    /// How many refused lines are counted but not listed.
    pub errors_omitted: u64,
}

impl<'a> ImportReport<'a> {
    /// The report of an import that stored `imported`, dropped `dropped` and refused `errors`.
    pub fn new(imported: u64, dropped: u64, errors: &'a Refusals) -> Self {
        ImportReport {
            imported,
            dropped,
            errors: errors.reported().iter().map(|(line, error)| LineError { line: *line, error }).collect(),
            errors_total: errors.total(),
            errors_omitted: errors.omitted(),
        }
    }
}

/// A date range as a body names it: a name (`7d`, `month`, `30m`) or two dates.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum RangeSent {
    /// A named range.
    Name(String),
    /// `[from, to]`, each a date or a date and time (whose time is not read).
    Dates(Vec<Sent<String>>),
}

/// What every Stats API body names: the site and the dates it asks about.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct Dated {
    /// The site's id or domain, required.
    pub site_id: Sent<String>,
    /// The day a named range ends on, `YYYY-MM-DD`; today in the site's zone when absent.
    pub date: Sent<String>,
    /// The range, required.
    pub date_range: Sent<RangeSent>,
}

impl AsRef<Dated> for Dated {
    fn as_ref(&self) -> &Dated {
        self
    }
}

impl Dated {
    /// The range asked about, in the site's zone `zone`.
    pub fn range(&self, zone: &SiteZone) -> Result<DateRange, ServerError> {
        let date = match self.date.value() {
            Some(d) => parse_date(d).map_err(|e| ServerError::bad_request(format!("`date`: {e}")))?,
            None => today(zone)?,
        };
        let spec = match &self.date_range {
            Sent::Value(RangeSent::Name(name)) => {
                RangeSpec::parse(name).map_err(|e| ServerError::bad_request(format!("`date_range`: {e}")))?
            }
            Sent::Value(RangeSent::Dates(pair)) if pair.len() == 2 => {
                let (Some(from), Some(to)) = (pair[0].value(), pair[1].value()) else {
                    return Err(ServerError::bad_request("`date_range` must be a name or two dates"));
                };
                let day = |s: &str| s.get(..10).unwrap_or(s).to_owned();
                RangeSpec::custom(&day(from), &day(to))
                    .map_err(|e| ServerError::bad_request(format!("`date_range`: {e}")))?
            }
            Sent::Absent => return Err(ServerError::bad_request("`date_range` is required")),
            _ => return Err(ServerError::bad_request("`date_range` must be a name (such as \"7d\") or two dates")),
        };
        spec.resolve(date, None).map_err(|e| ServerError::bad_request(format!("`date_range`: {e}")))
    }

    /// Whether the range is the last 30 minutes (`30m`, or `realtime`).
    pub fn is_realtime(&self) -> bool {
        matches!(&self.date_range, Sent::Value(RangeSent::Name(n)) if n == "30m" || n == "realtime")
    }
}

/// Today in `zone`.
fn today(zone: &SiteZone) -> Result<jiff::civil::Date, ServerError> {
    zone.date_of(jiff::Timestamp::now().as_millisecond()).map_err(ServerError::backend)
}

/// A list of strings that may be absent or `null` (then empty), or the 400 naming `field`.
pub(crate) fn strings(sent: &Sent<Vec<String>>, field: &str) -> Result<Vec<String>, ServerError> {
    let list = sent.checked(|_| ServerError::bad_request(format!("`{field}` must be a list of strings")))?;
    Ok(list.cloned().unwrap_or_default())
}

/// A body's `filters`: a list of `[operator, dimension, [values]]` as Plausible's Stats API v2
/// takes them, where `["is", "segment", [id]]` stands for the filters of the site's saved
/// segment `id`. Written back as it was sent (an empty list when absent).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(transparent)]
pub struct Filters(Sent<Vec<Sent<FilterSent>>>);

/// One filter as sent: operator, dimension, values.
type FilterSent = (Sent<String>, Sent<String>, Sent<Vec<String>>);

impl Serialize for Filters {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Sent::Absent => [(); 0].serialize(serializer),
            sent => sent.serialize(serializer),
        }
    }
}

impl Filters {
    /// The filters, segment filters replaced by their segment's, checked as a query checks them.
    pub fn resolve(&self, site: &Site) -> Result<Vec<Filter>, ServerError> {
        let filters = self.plain()?;
        let mut out = Vec::with_capacity(filters.len());
        for f in filters {
            let (op, ids) = match f {
                BodyFilter::Filter(f) => {
                    out.push(f);
                    continue;
                }
                BodyFilter::Segment { op, ids } => (op, ids),
            };
            let [id] = ids.as_slice() else {
                return Err(ServerError::bad_request(
                    "a segment filter names one segment: [\"is\", \"segment\", [id]]",
                ));
            };
            if op != FilterOp::Is {
                return Err(ServerError::bad_request("a segment filter takes the operator `is`"));
            }
            let segment = site
                .segments
                .iter()
                .find(|s| &s.segment_id == id)
                .ok_or_else(|| ServerError::bad_request(format!("the site has no segment {id:?}")))?;
            out.extend(segment.filters.iter().cloned());
        }
        analytics::stats::check_filters(&out).map_err(|e| ServerError::bad_request(e.to_string()))?;
        Ok(out)
    }

    /// The filters as sent, a segment filter left as it is (for saving a segment): every
    /// [`Filter`] a body names is made here.
    pub fn plain(&self) -> Result<Vec<BodyFilter>, ServerError> {
        let Some(list) = self.0.checked(|_| ServerError::bad_request("`filters` must be a list"))? else {
            return Ok(Vec::new());
        };
        let mut filters = Vec::with_capacity(list.len());
        for f in list {
            let Sent::Value((op, dimension, values)) = f else {
                return Err(ServerError::bad_request("each filter is [operator, dimension, [values]]"));
            };
            let op = op.value().and_then(|o| FilterOp::parse(o)).ok_or_else(|| {
                let sent = match op {
                    Sent::Value(o) => serde_json::to_string(o).unwrap_or_default(),
                    Sent::Wrong(w) => w.json.clone(),
                    Sent::Absent | Sent::Null => "null".to_owned(),
                };
                ServerError::bad_request(format!(
                    "unknown filter operator {sent}; expected is, is_not, contains, contains_not, matches or matches_not"
                ))
            })?;
            let dimension =
                dimension.value().ok_or_else(|| ServerError::bad_request("a filter's dimension must be a string"))?;
            let values = strings(values, "filter values")?;
            if matches!(op, FilterOp::Matches | FilterOp::MatchesNot) {
                for v in &values {
                    analytics::stats::compile_pattern(v).map_err(|e| ServerError::bad_request(e.to_string()))?;
                }
            }
            filters.push(if dimension == "segment" {
                BodyFilter::Segment { op, ids: values }
            } else {
                BodyFilter::Filter(
                    Filter::new(op, dimension, values).map_err(|e| ServerError::bad_request(e.to_string()))?,
                )
            });
        }
        Ok(filters)
    }
}

/// A filter as a body writes it: a filter on a dimension, or `[op, "segment", ids]`, which
/// stands for the filters of a saved segment (kept as written until the site's segments expand it).
pub enum BodyFilter {
    /// A filter on a dimension.
    Filter(Filter),
    /// A segment filter: its operator and the segment ids it names.
    Segment {
        /// The operator (a segment filter takes `is` only).
        op: FilterOp,
        /// The segment ids (a segment filter names one).
        ids: Vec<String>,
    },
}

/// A funnel's `steps`: a list of `{"page": pattern}` or `{"event": name}`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(transparent)]
pub struct Steps(Sent<Vec<Sent<Object<Step>>>>);

/// One funnel step as sent.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct Step {
    /// The page pattern the step counts.
    page: Sent<String>,
    /// Or the custom event it counts.
    event: Sent<String>,
}

impl Steps {
    /// The steps' goals, or a 400 saying which step is wrong (how many is the funnel's own check).
    pub fn goals(&self) -> Result<Vec<Goal>, ServerError> {
        let Sent::Value(list) = &self.0 else {
            return Err(ServerError::bad_request("`steps` must be a list of {\"page\": pattern} or {\"event\": name}"));
        };
        list.iter()
            .enumerate()
            .map(|(i, step)| {
                let step = step.value().map(|Object(s)| s);
                let goal = match (step.and_then(|s| s.page.value()), step.and_then(|s| s.event.value())) {
                    (Some(page), None) => Goal::page(page),
                    (None, Some(event)) => Goal::event(event),
                    _ => {
                        return Err(ServerError::bad_request(format!("step {}: give one of `page` or `event`", i + 1)));
                    }
                };
                goal.map_err(|e| ServerError::bad_request(format!("step {}: {e}", i + 1)))
            })
            .collect()
    }
}

/// One `order_by` entry as sent: `[name, "asc" | "desc"]`.
type OrderSent = Sent<Vec<Sent<String>>>;

/// `POST /api/v2/query`, Plausible's Stats API v2 query.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct QueryBody {
    /// The site and the range.
    #[serde(flatten)]
    pub dated: Dated,
    /// The metrics' names, at least one.
    pub metrics: Sent<Vec<String>>,
    /// Up to two dimensions to break the metrics down by.
    pub dimensions: Sent<Vec<String>>,
    /// The filters and segments sent, each checked when the query is built.
    pub filters: Filters,
    /// How rows are ordered: `[name, direction]` entries.
    pub order_by: Sent<Vec<OrderSent>>,
    /// `{limit, offset}`; anything but an object is not read.
    pub pagination: Sent<Object<Pagination>>,
    /// `{comparisons, imports}`.
    pub include: Included,
}

impl AsRef<Dated> for QueryBody {
    fn as_ref(&self) -> &Dated {
        &self.dated
    }
}

/// A query's `pagination`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct Pagination {
    /// Most rows answered.
    limit: Sent<u64>,
    /// Rows skipped.
    offset: Sent<u64>,
}

/// A query's `include`: read, and as it was sent, which the answer echoes whole (its keys in the
/// order they came, and whatever `comparisons` holds besides what Tally reads).
#[derive(Debug, Default, Clone)]
pub struct Included {
    /// What Tally reads of it.
    pub read: Sent<Include>,
    /// The JSON sent, when the body has an `include`.
    pub sent: Option<serde_json::Value>,
}

impl<'de> Deserialize<'de> for Included {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let sent = serde_json::Value::deserialize(deserializer)?;
        let read = Sent::deserialize(&sent).map_err(serde::de::Error::custom)?;
        Ok(Included { read, sent: Some(sent) })
    }
}

/// What Tally reads of `include`: `comparisons` and `imports`; `time_labels` and `total_rows`
/// are accepted when `false`, and any other key is refused.
#[derive(Debug, Default, Clone)]
pub struct Include {
    /// `{mode, date_range, match_day_of_week}`.
    comparisons: Sent<Object<Comparisons>>,
    /// Whether imported history is merged in.
    imports: Sent<bool>,
    /// The first key Tally does not support, in the order sent.
    unsupported: Option<String>,
}

impl<'de> Deserialize<'de> for Include {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = Include;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Include, A::Error> {
                let mut include = Include::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "comparisons" => include.comparisons = map.next_value()?,
                        "imports" => include.imports = map.next_value()?,
                        "time_labels" | "total_rows" => {
                            if map.next_value::<Sent<bool>>()? != Sent::Value(false) {
                                include.unsupported.get_or_insert(key);
                            }
                        }
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                            include.unsupported.get_or_insert(key);
                        }
                    }
                }
                Ok(include)
            }
        }
        deserializer.deserialize_map(Keys)
    }
}

/// A query's `include.comparisons`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct Comparisons {
    /// `previous_period`, `year_over_year` or `custom`.
    mode: Sent<String>,
    /// A custom comparison's two dates.
    date_range: Sent<Vec<Sent<String>>>,
    /// Whether the compared range is shifted to start on the same weekday.
    match_day_of_week: Sent<bool>,
}

impl QueryBody {
    /// The query, for `site`: every [`Query`] a body asks for is made here.
    pub fn query(&self, site: &Site) -> Result<Query, ServerError> {
        let metric_names = strings(&self.metrics, "metrics")?;
        let mut metrics = Vec::new();
        for m in &metric_names {
            metrics.push(Metric::parse(m).ok_or_else(|| ServerError::bad_request(format!("unknown metric `{m}`")))?);
        }
        let range = self.dated.range(&site.zone)?;
        let dimensions = strings(&self.dimensions, "dimensions")?;
        let filters = self.filters.resolve(site)?;
        let mut order_by = Vec::new();
        match &self.order_by {
            Sent::Absent | Sent::Null => {}
            Sent::Value(list) => {
                for o in list {
                    let [name, direction] = o.value().map(Vec::as_slice).unwrap_or_default() else {
                        return Err(ServerError::bad_request("each order_by entry is [name, \"asc\"|\"desc\"]"));
                    };
                    let name =
                        name.value().ok_or_else(|| ServerError::bad_request("order_by names a metric or dimension"))?;
                    let desc = match direction.value().map(String::as_str) {
                        Some("desc") => true,
                        Some("asc") => false,
                        _ => return Err(ServerError::bad_request("order_by direction is \"asc\" or \"desc\"")),
                    };
                    order_by.push((name.clone(), desc));
                }
            }
            Sent::Wrong(_) => return Err(ServerError::bad_request("`order_by` must be a list")),
        }
        let pagination = self.pagination.value().map(|Object(p)| p);
        let number = |sent: Option<&Sent<u64>>, name: &str, default: usize, max: usize| -> Result<usize, ServerError> {
            match sent.unwrap_or(&Sent::Absent) {
                Sent::Absent | Sent::Null => Ok(default),
                sent => sent.value().and_then(|n| usize::try_from(*n).ok()).filter(|n| *n <= max).ok_or_else(|| {
                    ServerError::bad_request(format!("pagination.{name} must be a whole number up to {max}"))
                }),
            }
        };
        let limit = number(pagination.map(|p| &p.limit), "limit", MAX_PAGE_ROWS, MAX_PAGE_ROWS)?;
        let offset = number(pagination.map(|p| &p.offset), "offset", 0, MAX_QUERY_ROWS)?;
        let mut query = Query::new(site.site_id.clone(), metrics, range, dimensions, filters, order_by, limit, offset)
            .map_err(|e| ServerError::bad_request(e.to_string()))?;
        // `include: {imports: true}`, as Plausible's API: imported history merged in where it applies.
        let imports = self.include.read.value().map_or(&Sent::Absent, |i| &i.imports);
        query.include_imports = imports.flag("`include.imports` must be true or false")?.unwrap_or(false);
        Ok(query)
    }

    /// The comparison `include.comparisons` asks for: `{"mode": "previous_period" |
    /// "year_over_year" | "custom", "date_range": [from, to]}` as Plausible's Stats API v2 takes
    /// it (`imports` is read by [`QueryBody::query`]). Any other key of `include` is refused.
    pub fn comparison(&self, site: &Site) -> Result<Option<ComparisonMode>, ServerError> {
        let Some(include) = self.include.read.checked(|_| ServerError::bad_request("`include` must be an object"))?
        else {
            return Ok(None);
        };
        if let Some(other) = &include.unsupported {
            return Err(ServerError::bad_request(format!(
                "`include.{other}` is not supported; `include` takes `comparisons`"
            )));
        }
        let wrong = |_: &_| {
            ServerError::bad_request("`include.comparisons` must be an object such as {\"mode\": \"previous_period\"}")
        };
        let Some(Object(c)) = include.comparisons.checked(wrong)? else {
            return Ok(None);
        };
        let match_day_of_week =
            c.match_day_of_week.flag("`include.comparisons.match_day_of_week` must be true or false")?;
        let match_day_of_week = match_day_of_week.unwrap_or(false);
        let mode = match c.mode.value().map(String::as_str) {
            Some("previous_period") => ComparisonMode::PreviousPeriod { match_day_of_week },
            Some("year_over_year") => ComparisonMode::YearOverYear { match_day_of_week },
            Some("custom") => {
                let Sent::Value(pair) = &c.date_range else {
                    return Err(ServerError::bad_request(
                        "`include.comparisons` with mode `custom` needs `date_range`: two dates",
                    ));
                };
                let dated = Dated { date_range: Sent::Value(RangeSent::Dates(pair.clone())), ..Dated::default() };
                let range = dated.range(&site.zone).map_err(|_| {
                    ServerError::bad_request("`include.comparisons.date_range` must be two dates, YYYY-MM-DD")
                })?;
                ComparisonMode::Custom(range)
            }
            _ => {
                return Err(ServerError::bad_request(
                    "`include.comparisons.mode` is one of previous_period, year_over_year or custom",
                ));
            }
        };
        Ok(Some(mode))
    }

    /// The first name `order_by` entries give, whatever their shape.
    pub fn ordered_by(&self) -> impl Iterator<Item = &str> {
        self.order_by.value().into_iter().flatten().filter_map(|o| o.value()?.first()?.value().map(String::as_str))
    }
}

/// `POST /api/funnel {site_id, date_range, steps, filters}`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct FunnelBody {
    /// The site and the range.
    #[serde(flatten)]
    pub dated: Dated,
    /// The funnel's steps.
    pub steps: Steps,
    /// The visits counted.
    pub filters: Filters,
}

/// `POST /api/journeys {site_id, date_range, page, filters}`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct JourneysBody {
    /// The site and the range.
    #[serde(flatten)]
    pub dated: Dated,
    /// The page the journeys pass through.
    pub page: Sent<String>,
    /// The visits counted.
    pub filters: Filters,
}

/// `POST /api/export {site_id, date_range, filters, panel}`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct ExportBody {
    /// The site and the range.
    #[serde(flatten)]
    pub dated: Dated,
    /// The visits counted.
    pub filters: Filters,
    /// One panel's CSV; every panel's, zipped, when absent.
    pub panel: Sent<String>,
}

macro_rules! dated {
    ($($body:ty),*) => {$(
        impl AsRef<Dated> for $body {
            fn as_ref(&self) -> &Dated {
                &self.dated
            }
        }
    )*};
}
dated!(FunnelBody, JourneysBody, ExportBody);

/// The `query` of a `POST /api/v2/query` answer: the query as it was read, its range as days.
#[derive(Debug, Serialize)]
pub struct QueryEcho<'a> {
    /// The site as the body named it.
    pub site_id: &'a str,
    /// The metrics, in the asked order.
    pub metrics: Vec<&'a str>,
    /// The range: `[first, last]`, or the name sent for the last 30 minutes.
    pub date_range: RangeEcho<'a>,
    /// The dimensions, by name.
    pub dimensions: Vec<String>,
    /// The filters as sent.
    pub filters: &'a Filters,
    /// The order as sent (`null` when absent).
    pub order_by: &'a Sent<Vec<OrderSent>>,
    /// The page of rows.
    pub pagination: PageEcho,
    /// The include and the compared range, in the order the answer gives them.
    #[serde(flatten)]
    pub tail: EchoTail<'a>,
}

/// A query's range in its answer.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum RangeEcho<'a> {
    /// The first and last day.
    Days([String; 2]),
    /// As sent (`30m`).
    Sent(&'a Sent<RangeSent>),
}

/// A query's page in its answer.
#[derive(Debug, Serialize)]
pub struct PageEcho {
    /// Most rows answered.
    pub limit: usize,
    /// Rows skipped.
    pub offset: usize,
}

/// The end of a query's echo: the query engine's answers give `include` before the compared
/// range, the engagement and revenue answers after it; an answer about the last 30 minutes gives
/// neither.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum EchoTail<'a> {
    /// `include`, then `comparison_date_range`.
    IncludeFirst {
        /// `include` as sent.
        #[serde(skip_serializing_if = "Option::is_none")]
        include: Option<&'a serde_json::Value>,
        /// The compared range's first and last day.
        #[serde(skip_serializing_if = "Option::is_none")]
        comparison_date_range: Option<[String; 2]>,
    },
    /// `comparison_date_range`, then `include`.
    RangeFirst {
        /// The compared range's first and last day.
        #[serde(skip_serializing_if = "Option::is_none")]
        comparison_date_range: Option<[String; 2]>,
        /// `include` as sent.
        #[serde(skip_serializing_if = "Option::is_none")]
        include: Option<&'a serde_json::Value>,
    },
}

/// The answer of `POST /api/funnel`.
#[derive(Debug, Serialize)]
pub struct FunnelAnswer<'a> {
    /// Each step's visitors and conversion.
    pub steps: Vec<FunnelStepView<'a>>,
    /// What was asked.
    pub query: FunnelQuery<'a>,
}

/// The `query` of a funnel answer.
#[derive(Debug, Serialize)]
pub struct FunnelQuery<'a> {
    /// The site as the body named it.
    pub site_id: &'a str,
    /// The range's first and last day.
    pub date_range: [String; 2],
}

/// A range's first and last day, as answers write them.
pub fn days(range: &DateRange) -> [String; 2] {
    [range.first().to_string(), range.last().to_string()]
}

impl<'a> QueryEcho<'a> {
    /// The echo of `body` read as `q`, asked for `metrics`, its range as days.
    pub fn new(body: &'a QueryBody, q: &'a Query, metrics: Vec<&'a str>) -> Self {
        QueryEcho {
            site_id: body.dated.site_id.value().map_or("", String::as_str),
            metrics,
            date_range: RangeEcho::Days(days(&q.range)),
            dimensions: q.dimension_names(),
            filters: &body.filters,
            order_by: &body.order_by,
            pagination: PageEcho { limit: q.limit, offset: q.offset },
            tail: EchoTail::IncludeFirst { include: None, comparison_date_range: None },
        }
    }
}
