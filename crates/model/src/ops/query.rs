//! Queries and scans: builders that render key conditions, filters and projections, and end in a page stream, an item stream or a collected `Vec`, following `LastEvaluatedKey`.

use std::collections::BTreeMap;

use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};
use store::{AttributeValue, ConsumedCapacity, Item, Query, ScalarType, Scan};

use super::table::*;
use crate::error::{Error, Result};
use crate::expr::{self, Condition, KeyCondition, Projection, Renderer, SortCondition, attr};
use crate::record::{EntityItem, Record};
use crate::schema::{Entity, EntityKey, Index};

/// One page of query or scan results.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Page {
    /// The records of the page.
    pub records: Vec<Record>,
    /// Where the next page starts, if there may be one.
    pub last_evaluated_key: Option<Item>,
    /// Items read before filtering.
    pub scanned_count: usize,
    /// Capacity this page consumed.
    pub consumed_capacity: ConsumedCapacity,
}

/// The records of a collection query, by entity name (every requested entity is present).
pub type Collection = BTreeMap<String, Vec<Record>>;

/// A range over the sort key, expressed with field values.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Range {
    Between(Item, Item),
    Gt(Item),
    Ge(Item),
    Lt(Item),
    Le(Item),
}

/// Builds a query; see [`Table::query`] and [`Table::collection`].
#[derive(Clone, Debug)]
pub struct QueryBuilder {
    pub(super) table: Table,
    pub(super) entities: Vec<String>,
    pub(super) index: Option<String>,
    pub(super) fields: Item,
    pub(super) range: Option<Range>,
    pub(super) filter: Option<Condition>,
    pub(super) descending: bool,
    pub(super) page_size: Option<u32>,
    pub(super) limit: Option<usize>,
    pub(super) start: Option<Item>,
    pub(super) consistent: bool,
    pub(super) projection: Option<Projection>,
}

/// A sort key bound, with padding that sorts after any key with a prefix: the largest
/// Unicode scalar value repeated to DynamoDB's sort key size limit.
fn upper_bound_of_prefix(prefix: &str) -> String {
    let room = store::limits::MAX_SORT_KEY_BYTES.saturating_sub(prefix.len()) / 4;
    let mut out = prefix.to_string();
    out.extend(std::iter::repeat_n('\u{10FFFF}', room.max(1)));
    out
}

/// What [`QueryBuilder::build`] makes: the first request and what reading its pages needs.
struct Built {
    /// The first request (later pages add `ExclusiveStartKey`).
    query: Query,
    /// The index the request reads, which names the keys of its pages.
    index: Index,
    /// The entities whose records are kept, by name.
    names: Vec<String>,
}

impl QueryBuilder {
    pub(super) fn new(table: Table, entities: Vec<String>) -> Self {
        QueryBuilder {
            table,
            entities,
            index: None,
            fields: Item::new(),
            range: None,
            filter: None,
            descending: false,
            page_size: None,
            limit: None,
            start: None,
            consistent: false,
            projection: None,
        }
    }

    /// Queries a secondary index.
    pub fn index(mut self, index: &str) -> Self {
        self.index = Some(index.to_string());
        self
    }

    /// Field values: all the partition key's fields, and optionally leading fields of the
    /// sort key (selecting the keys that begin with them).
    pub fn key(mut self, fields: Item) -> Self {
        self.fields.extend(fields);
        self
    }

    /// Sort keys from the one made of `lo` (plus the key fields) to the one made of `hi`,
    /// inclusive; partial field lists cover every key that begins with them.
    pub fn between(mut self, lo: Item, hi: Item) -> Self {
        self.range = Some(Range::Between(lo, hi));
        self
    }

    /// Sort keys after every key made of these fields.
    pub fn after(mut self, fields: Item) -> Self {
        self.range = Some(Range::Gt(fields));
        self
    }

    /// Sort keys from the first key made of these fields on.
    pub fn from(mut self, fields: Item) -> Self {
        self.range = Some(Range::Ge(fields));
        self
    }

    /// Sort keys before every key made of these fields.
    pub fn before(mut self, fields: Item) -> Self {
        self.range = Some(Range::Lt(fields));
        self
    }

    /// Sort keys up to the last key made of these fields.
    pub fn until(mut self, fields: Item) -> Self {
        self.range = Some(Range::Le(fields));
        self
    }

    /// Adds a filter (applied after reading; it does not reduce the read cost).
    pub fn filter(mut self, condition: Condition) -> Self {
        self.filter = Some(match self.filter.take() {
            Some(f) => f.and(condition),
            None => condition,
        });
        self
    }

    /// Reads in descending sort key order.
    pub fn descending(mut self) -> Self {
        self.descending = true;
        self
    }

    /// Items read per request (DynamoDB's `Limit`, counted before filtering).
    pub fn page_size(mut self, n: u32) -> Self {
        self.page_size = Some(n);
        self
    }

    /// Stops after this many records in all; the last page's key then resumes after the
    /// last record returned.
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        self
    }

    /// Resumes after this key (a page's `last_evaluated_key`).
    pub fn start_after(mut self, key: Option<Item>) -> Self {
        self.start = key;
        self
    }

    /// Asks for strongly consistent reads (table and local indexes only).
    pub fn consistent(mut self) -> Self {
        self.consistent = true;
        self
    }

    /// Returns only these attributes (plus the keys and the entity type, always).
    pub fn projection(mut self, projection: Projection) -> Self {
        self.projection = Some(projection);
        self
    }

    fn resolve(&self) -> Result<(Index, Vec<&Entity>)> {
        let schema = self.table.schema();
        let index = schema.index(self.index.as_deref()).ok_or_else(|| Error::UnknownIndex {
            entity: self.entities.join(", "),
            index: self.index.clone().unwrap_or_default(),
        })?;
        if self.entities.is_empty() {
            return Err(Error::InvalidQuery("no entity to query".into()));
        }
        let mut entities = Vec::new();
        for name in &self.entities {
            let e = self.table.entity(name)?;
            if e.key(&index).is_none() {
                return Err(Error::UnknownIndex { entity: name.clone(), index: index.label().to_string() });
            }
            entities.push(e);
        }
        Ok((index, entities))
    }

    /// Whether the index stores the entity-type attribute, so it can be filtered on.
    fn projects_entity_type(&self, index: &Index) -> bool {
        let table = self.table.schema().table();
        let et = self.table.schema().entity_type_attribute();
        let projection = match index {
            Index::Table => return true,
            Index::Global(n) => table.global_indexes.iter().find(|g| &g.name == n).map(|g| &g.projection),
            Index::Local(n) => table.local_indexes.iter().find(|l| &l.name == n).map(|l| &l.projection),
        };
        match projection {
            Some(store::Projection::All) => true,
            Some(store::Projection::Include(names)) => names.iter().any(|n| n == et),
            _ => false,
        }
    }

    /// The sort bound for `fields` merged over the key fields: the exact key when complete,
    /// else the prefix (lower) or the prefix padded to sort after all its keys (upper).
    fn bound(&self, entity: &Entity, key: &EntityKey, extra: &Item, upper: bool) -> Result<Option<AttributeValue>> {
        let Some(part) = key.sort_part() else {
            return Ok(None);
        };
        let mut fields = self.fields.clone();
        fields.extend(extra.clone());
        if part.ty != ScalarType::S {
            let field = part.template.single_field().unwrap_or_default();
            return Ok(fields.get(field).cloned());
        }
        let (prefix, complete) =
            part.template.render_prefix(|f| fields.get(f)).map_err(|source| key_error(entity, source))?;
        Ok(match (complete, prefix.is_empty(), upper) {
            (true, _, _) => Some(prefix.into()),
            (false, true, _) => None,
            (false, false, false) => Some(prefix.into()),
            (false, false, true) => Some(upper_bound_of_prefix(&prefix).into()),
        })
    }

    /// The first request this query sends (later pages add `ExclusiveStartKey`). No I/O.
    pub fn request(&self) -> Result<Query> {
        Ok(self.build()?.query)
    }

    /// Builds the first request, with the index it reads and the entity names to keep.
    fn build(&self) -> Result<Built> {
        let (index, entities) = self.resolve()?;
        let kc = self.key_condition(&index, &entities)?;
        let names: Vec<String> = entities.iter().map(|e| e.name().to_string()).collect();
        let query = self.render(&index, &kc, &names);
        Ok(Built { query, index, names })
    }

    /// The key condition: the partition key every entity shares, and the sort key condition
    /// ([`QueryBuilder::sort_condition`]).
    fn key_condition(&self, index: &Index, entities: &[&Entity]) -> Result<KeyCondition> {
        let first = entities[0];
        let first_key = first.key(index).ok_or_else(|| Error::InvalidQuery("no key".into()))?;
        let pk_part = first_key.partition_part();
        let pk = pk_part
            .render(&self.fields)
            .map_err(|source| key_error(first, source))?
            .ok_or_else(|| missing_key_field(first, index, &self.fields))?;
        for e in &entities[1..] {
            let k = e.key(index).ok_or_else(|| Error::InvalidQuery("no key".into()))?;
            let other = k.partition_part().render(&self.fields).map_err(|source| key_error(e, source))?;
            if other.as_ref() != Some(&pk) {
                return Err(Error::InvalidQuery(format!(
                    "`{}` and `{}` do not share a partition on `{index}` for these fields",
                    first.name(),
                    e.name()
                )));
            }
        }
        let mut kc = KeyCondition::partition(pk_part.attribute, pk);
        let sort_attribute = first_key.sort_attribute.clone();
        let sort = self.sort_condition(index, entities, first_key)?;
        if let (Some(sk), Some(cond)) = (sort_attribute, sort) {
            kc = kc.sort(sk, cond);
        }
        Ok(kc)
    }

    /// The sort key condition: the range asked for (single-entity queries only); else the key
    /// fields given, as an equality when they make the whole sort key and a prefix otherwise; for
    /// a collection, the span of its entities' sort keys when each one is bounded.
    fn sort_condition(
        &self,
        index: &Index,
        entities: &[&Entity],
        first_key: &EntityKey,
    ) -> Result<Option<SortCondition>> {
        let first = entities[0];
        Ok(match (&self.range, entities.len()) {
            (Some(_), n) if n > 1 => {
                return Err(Error::InvalidQuery("ranges apply to single-entity queries".into()));
            }
            (Some(range), _) => {
                let b = |extra: &Item, upper: bool| self.bound(first, first_key, extra, upper);
                match range {
                    Range::Between(lo, hi) => match (b(lo, false)?, b(hi, true)?) {
                        (Some(lo), Some(hi)) => Some(SortCondition::Between(lo, hi)),
                        (None, Some(hi)) => Some(SortCondition::Le(hi)),
                        (Some(lo), None) => Some(SortCondition::Ge(lo)),
                        (None, None) => None,
                    },
                    Range::Gt(f) => b(f, true)?.map(SortCondition::Gt),
                    Range::Ge(f) => b(f, false)?.map(SortCondition::Ge),
                    Range::Lt(f) => b(f, false)?.map(SortCondition::Lt),
                    Range::Le(f) => b(f, true)?.map(SortCondition::Le),
                }
            }
            (None, 1) => {
                let empty = Item::new();
                match (self.bound(first, first_key, &empty, false)?, first_key.sort_part()) {
                    (None, _) | (_, None) => None,
                    (Some(lo), Some(part)) => {
                        let complete = part.ty != ScalarType::S
                            || part.template.render_prefix(|f| self.fields.get(f)).map(|(_, c)| c).unwrap_or(false);
                        if complete { Some(SortCondition::Eq(lo)) } else { Some(SortCondition::BeginsWith(lo)) }
                    }
                }
            }
            (None, _) => {
                let empty = Item::new();
                let mut lo: Option<AttributeValue> = None;
                let mut hi: Option<AttributeValue> = None;
                let mut bounded = true;
                for e in entities {
                    let k = e.key(index).ok_or_else(|| Error::InvalidQuery("no key".into()))?;
                    match (self.bound(e, k, &empty, false)?, self.bound(e, k, &empty, true)?) {
                        (Some(l), Some(h)) => {
                            lo = Some(lo.map_or(l.clone(), |x| x.min(l)));
                            hi = Some(hi.map_or(h.clone(), |x| x.max(h)));
                        }
                        _ => bounded = false,
                    }
                }
                match (bounded, lo, hi) {
                    (true, Some(lo), Some(hi)) if lo == hi => Some(SortCondition::Eq(lo)),
                    (true, Some(lo), Some(hi)) => Some(SortCondition::Between(lo, hi)),
                    _ => None,
                }
            }
        })
    }

    /// The request for `kc` on `index`: the entity type filter (where the index projects the
    /// type) and the caller's filter, the projection with every key attribute it must keep, and
    /// the paging options.
    fn render(&self, index: &Index, kc: &KeyCondition, names: &[String]) -> Query {
        let server_filter = self.projects_entity_type(index);
        let et = self.table.schema().entity_type_attribute();
        let type_filter = server_filter.then(|| {
            if names.len() == 1 {
                attr(et).eq(names[0].as_str())
            } else {
                attr(et).is_in(names.iter().map(|n| n.as_str()))
            }
        });
        let filter = Condition::all(type_filter.into_iter().chain(self.filter.clone()));

        let mut r = Renderer::new();
        let mut query = Query::new(self.table.schema().table_name(), r.key_condition(kc));
        query.index = index.name().map(str::to_string);
        if let Some(f) = &filter {
            query.filter = Some(r.condition(f));
        }
        if let Some(p) = &self.projection {
            let mut paths = p.0.clone();
            let always = self
                .table
                .schema()
                .table()
                .index_key_schema(index.name())
                .into_iter()
                .flat_map(|k| k.attributes().map(|a| a.name.clone()).collect::<Vec<_>>())
                .chain(self.table.schema().table().key_schema.attributes().map(|a| a.name.clone()))
                // Asking a global index for an attribute it does not project is an error, so
                // the entity type is only added where the index stores it.
                .chain(server_filter.then(|| et.to_string()));
            for name in always {
                let path = expr::Path::new(name);
                if !paths.contains(&path) {
                    paths.push(path);
                }
            }
            query.projection = Some(r.projection(&Projection(paths)));
        }
        query.attrs = r.finish();
        query.scan_forward = !self.descending;
        query.limit = self.page_size;
        query.exclusive_start_key = self.start.clone();
        query.consistent_read = self.consistent;
        query
    }

    /// The pages, following `LastEvaluatedKey` to the end (or to the limit).
    pub fn pages(self) -> BoxStream<'static, Result<Page>> {
        let built = self.build();
        let table = self.table.clone();
        let limit = self.limit;
        let Built { query, index, names } = match built {
            Ok(b) => b,
            Err(e) => return stream::once(async move { Err(e) }).boxed(),
        };
        let state = PageState { next: Some(query), remaining: limit };
        stream::unfold(state, move |mut state| {
            let table = table.clone();
            let index = index.clone();
            let names = names.clone();
            async move {
                let query = state.next.take()?;
                if state.remaining == Some(0) {
                    return None;
                }
                let start = query.clone();
                let out = match table.store.query(query).await {
                    Ok(out) => out,
                    Err(e) => return Some((Err(e.into()), state)),
                };
                table.record(&out.consumed_capacity);
                let mut records = Vec::with_capacity(out.items.len());
                for item in out.items {
                    match table.record_from(&index, item) {
                        Some(r) if names.iter().any(|n| n == r.entity()) => records.push(r),
                        _ => {}
                    }
                }
                let mut last = out.last_evaluated_key;
                if let Some(rem) = state.remaining.as_mut() {
                    if records.len() >= *rem {
                        records.truncate(*rem);
                        // Resume after the last record returned, not after the page.
                        let resume = records.last().and_then(|r| continuation_key(&table, &index, r.item()));
                        last = if resume.is_some() { resume } else { last };
                        *rem = 0;
                    } else {
                        *rem -= records.len();
                    }
                }
                if let (Some(key), false) = (&last, state.remaining == Some(0)) {
                    state.next = Some(start.start_after(Some(key.clone())));
                }
                let page = Page {
                    records,
                    last_evaluated_key: last,
                    scanned_count: out.scanned_count,
                    consumed_capacity: out.consumed_capacity,
                };
                Some((Ok(page), state))
            }
        })
        .boxed()
    }

    /// The records, one at a time, across pages.
    pub fn items(self) -> BoxStream<'static, Result<Record>> {
        self.pages().map_ok(|p| stream::iter(p.records.into_iter().map(Ok))).try_flatten().boxed()
    }

    /// Every record.
    pub async fn all(self) -> Result<Vec<Record>> {
        self.items().try_collect().await
    }

    /// The first record, if any.
    pub async fn first(self) -> Result<Option<Record>> {
        Ok(self.limit(1).all().await?.into_iter().next())
    }

    /// Every record decoded as `T`.
    pub async fn all_typed<T: EntityItem>(self) -> Result<Vec<T>> {
        self.all().await?.iter().map(Record::decode).collect()
    }

    /// Every record, grouped by entity.
    pub async fn collect(self) -> Result<Collection> {
        let mut out: Collection = self.entities.iter().map(|e| (e.clone(), Vec::new())).collect();
        for r in self.all().await? {
            out.entry(r.entity().to_string()).or_default().push(r);
        }
        Ok(out)
    }
}

pub(super) struct PageState {
    next: Option<Query>,
    remaining: Option<usize>,
}

/// The key to resume a query after `item`: the table key plus the index key.
fn continuation_key(table: &Table, index: &Index, item: &Item) -> Option<Item> {
    let t = table.schema().table();
    let mut key = t.key_schema.key_of(item)?;
    if let Some(ks) = t.index_key_schema(index.name()) {
        key.extend(ks.key_of(item)?);
    }
    Some(key)
}

/// Builds a scan; see [`Table::scan`].
#[derive(Clone, Debug)]
pub struct ScanBuilder {
    pub(super) table: Table,
    pub(super) index: Option<String>,
    pub(super) entities: Vec<String>,
    pub(super) filter: Option<Condition>,
    pub(super) segments: u32,
    pub(super) page_size: Option<u32>,
    pub(super) consistent: bool,
}

impl ScanBuilder {
    /// Scans a secondary index.
    pub fn index(mut self, index: &str) -> Self {
        self.index = Some(index.to_string());
        self
    }

    /// Keeps only records of this entity (may be called several times).
    pub fn entity(mut self, entity: &str) -> Self {
        self.entities.push(entity.to_string());
        self
    }

    /// Adds a filter.
    pub fn filter(mut self, condition: Condition) -> Self {
        self.filter = Some(match self.filter.take() {
            Some(f) => f.and(condition),
            None => condition,
        });
        self
    }

    /// Scans in `n` parallel segments (at least 1), merged into one stream.
    pub fn segments(mut self, n: u32) -> Self {
        self.segments = n.max(1);
        self
    }

    /// Items read per request.
    pub fn page_size(mut self, n: u32) -> Self {
        self.page_size = Some(n);
        self
    }

    /// Asks for strongly consistent reads.
    pub fn consistent(mut self) -> Self {
        self.consistent = true;
        self
    }

    fn build(&self) -> Result<(Scan, Index)> {
        let schema = self.table.schema();
        let index = schema.index(self.index.as_deref()).ok_or_else(|| Error::UnknownIndex {
            entity: self.entities.join(", "),
            index: self.index.clone().unwrap_or_default(),
        })?;
        for e in &self.entities {
            self.table.entity(e)?;
        }
        let mut scan = Scan::new(schema.table_name());
        scan.index = index.name().map(str::to_string);
        if let Some(f) = &self.filter {
            let mut r = Renderer::new();
            scan.filter = Some(r.condition(f));
            scan.attrs = r.finish();
        }
        scan.limit = self.page_size;
        scan.consistent_read = self.consistent;
        Ok((scan, index))
    }

    /// The pages of every segment, merged as they arrive. Items of no known entity are
    /// skipped, as are items of other entities when [`ScanBuilder::entity`] was given.
    pub fn pages(self) -> BoxStream<'static, Result<Page>> {
        let (scan, index) = match self.build() {
            Ok(b) => b,
            Err(e) => return stream::once(async move { Err(e) }).boxed(),
        };
        let total = self.segments;
        let segments = (0..total).map(|segment| {
            let table = self.table.clone();
            let index = index.clone();
            let entities = self.entities.clone();
            let mut first = scan.clone();
            if total > 1 {
                first.segment = Some((segment, total));
            }
            stream::unfold(Some(first), move |next| {
                let table = table.clone();
                let index = index.clone();
                let entities = entities.clone();
                async move {
                    let request = next?;
                    let resume = request.clone();
                    let out = match table.store.scan(request).await {
                        Ok(out) => out,
                        Err(e) => return Some((Err(Error::from(e)), None)),
                    };
                    table.record(&out.consumed_capacity);
                    let records = out
                        .items
                        .into_iter()
                        .filter_map(|item| {
                            let record = table.record_from(&index, item)?;
                            (entities.is_empty() || entities.iter().any(|e| e == record.entity())).then_some(record)
                        })
                        .collect();
                    let next = out.last_evaluated_key.clone().map(|k| resume.start_after(Some(k)));
                    let page = Page {
                        records,
                        last_evaluated_key: out.last_evaluated_key,
                        scanned_count: out.scanned_count,
                        consumed_capacity: out.consumed_capacity,
                    };
                    Some((Ok(page), next))
                }
            })
            .boxed()
        });
        stream::select_all(segments).boxed()
    }

    /// Every record, across segments (in no particular order when parallel).
    pub async fn all(self) -> Result<Vec<Record>> {
        self.pages().map_ok(|p| stream::iter(p.records.into_iter().map(Ok))).try_flatten().try_collect().await
    }
}
