//! Reads: each runs in one redb read transaction (a consistent snapshot) on the caller's task.
//!
//! Every read in this engine is strongly consistent; an eventually consistent read is only
//! billed as one, at half the units, as DynamoDB bills it.

use std::collections::BTreeSet;
use std::ops::Bound;

use redb::{ReadTransaction, ReadableTableMetadata, TableError};
use store::limits::{MAX_BATCH_GET, MAX_BATCH_GET_BYTES, MAX_PAGE_BYTES, MAX_TRANSACT_ITEMS};
use store::{
    AttributeValue, BatchGetItem, BatchGetItemOutput, GetItem, GetItemOutput, Item, KeysAndAttributes, Query,
    QueryOutput, Result, Scan, Select, StoreError, TableDescription, TableStatus, TransactGetItems,
    TransactGetItemsOutput, item_size,
};

use crate::capacity::{Kind, PerTable, Units, read_units};
use crate::codec;
use crate::db::Shared;
use crate::expr::{Condition, ExprContext, KeyCondition, Projection, SortCondition};
use crate::keys::{self, KeyRange};
use crate::layout::{bytes_table, internal};
use crate::schema::{IndexInfo, IndexKind, TableInfo};

fn begin(shared: &Shared) -> Result<ReadTransaction> {
    shared.begin_read().map_err(internal)
}

fn open(txn: &ReadTransaction, name: &str) -> Result<redb::ReadOnlyTable<&'static [u8], &'static [u8]>> {
    txn.open_table(bytes_table(name)).map_err(|e| match e {
        // The table was deleted after the caller looked its definition up.
        TableError::TableDoesNotExist(_) => StoreError::ResourceNotFound("Requested resource not found".into()),
        other => internal(other),
    })
}

fn get_in(txn: &ReadTransaction, info: &TableInfo, key: &Item) -> Result<Option<Item>> {
    let table = open(txn, &info.redb_name)?;
    let found = table.get(info.base_key(key).as_slice()).map_err(internal)?;
    match found {
        Some(v) => codec::decode_item(v.value()).map(Some).map_err(|e| internal(format!("corrupt item: {}", e.0))),
        None => Ok(None),
    }
}

fn parse_projection(text: Option<&str>, ctx: &mut ExprContext<'_>) -> Result<Option<Projection>> {
    text.map(|t| Projection::parse(t, ctx)).transpose()
}

fn project(projection: Option<&Projection>, item: Item) -> Item {
    match projection {
        Some(p) => p.apply_owned(item),
        None => item,
    }
}

/// `GetItem`.
pub fn get_item(shared: &Shared, req: GetItem) -> Result<GetItemOutput> {
    let mut ctx = ExprContext::new(&req.attrs);
    let projection = parse_projection(req.projection.as_deref(), &mut ctx)?;
    ctx.finish()?;
    let info = shared.table(&req.table)?;
    info.check_key(&req.key)?;
    let txn = begin(shared)?;
    let item = get_in(&txn, &info, &req.key)?;
    let size = item.as_ref().map_or(0, item_size);
    Ok(GetItemOutput {
        item: item.map(|i| project(projection.as_ref(), i)),
        consumed_capacity: Units::table(read_units(size, req.consistent_read)).consumed(&req.table, Kind::Read),
    })
}

/// What a query or scan reads: the table or one of its indexes.
struct Source<'a> {
    info: &'a TableInfo,
    index: Option<&'a IndexInfo>,
}

impl Source<'_> {
    fn redb_name(&self) -> &str {
        self.index.map_or(&self.info.redb_name, |i| &i.redb_name)
    }

    fn schema(&self) -> &store::KeySchema {
        self.index.map_or(self.info.schema(), |i| &i.schema)
    }

    fn units(&self, units: f64) -> Units {
        match self.index {
            None => Units::table(units),
            Some(i) => {
                let mut u = Units::default();
                u.add_index(i.kind, &i.name, units);
                u
            }
        }
    }
}

fn source<'a>(info: &'a TableInfo, index: Option<&str>, consistent: bool) -> Result<Source<'a>> {
    let index = index.map(|name| info.index(name)).transpose()?;
    if consistent && index.is_some_and(|i| i.kind == IndexKind::Global) {
        return Err(StoreError::validation("Consistent reads are not supported on global secondary indexes"));
    }
    Ok(Source { info, index })
}

fn check_limit(limit: Option<u32>) -> Result<()> {
    if limit == Some(0) {
        return Err(StoreError::validation(
            "1 validation error detected: Value '0' at 'limit' failed to satisfy constraint: Member must have value greater than or equal to 1",
        ));
    }
    Ok(())
}

/// The range of encoded keys a key condition selects.
fn key_range(cond: &KeyCondition) -> KeyRange {
    let mut p = Vec::new();
    keys::encode_value(&mut p, &cond.partition);
    let with = |v: &AttributeValue| {
        let mut k = p.clone();
        keys::encode_value(&mut k, v);
        k
    };
    let after_prefix = |k: &[u8]| match keys::prefix_successor(k) {
        Some(s) => Bound::Excluded(s),
        None => Bound::Unbounded,
    };
    let partition = KeyRange::prefix(&p);
    match &cond.sort {
        None => partition,
        // Index entries continue past the sort key with the table's key, so bounds that
        // include a sort value include every key that starts with it.
        Some(SortCondition::Eq(v)) => KeyRange::prefix(&with(v)),
        Some(SortCondition::Lt(v)) => KeyRange { start: partition.start, end: Bound::Excluded(with(v)) },
        Some(SortCondition::Le(v)) => KeyRange { start: partition.start, end: after_prefix(&with(v)) },
        Some(SortCondition::Gt(v)) => KeyRange { start: after_prefix(&with(v)), end: partition.end },
        Some(SortCondition::Ge(v)) => KeyRange { start: Bound::Included(with(v)), end: partition.end },
        Some(SortCondition::Between(lo, hi)) => {
            KeyRange { start: Bound::Included(with(lo)), end: after_prefix(&with(hi)) }
        }
        Some(SortCondition::BeginsWith(prefix)) => {
            let mut k = p.clone();
            match prefix {
                AttributeValue::S(s) => keys::encode_prefix(&mut k, s.as_bytes()),
                AttributeValue::B(b) => keys::encode_prefix(&mut k, b),
                _ => {}
            }
            KeyRange::prefix(&k)
        }
    }
}

/// Narrows a range to the keys after an `ExclusiveStartKey` in the reading direction.
fn resume(mut range: KeyRange, start: Option<Vec<u8>>, forward: bool) -> KeyRange {
    let Some(start) = start else { return range };
    if forward {
        let tighter = match &range.start {
            Bound::Included(s) | Bound::Excluded(s) => start >= *s,
            Bound::Unbounded => true,
        };
        if tighter {
            range.start = Bound::Excluded(start);
        }
    } else {
        let tighter = match &range.end {
            Bound::Included(e) | Bound::Excluded(e) => start <= *e,
            Bound::Unbounded => true,
        };
        if tighter {
            range.end = Bound::Excluded(start);
        }
    }
    range
}

/// What a page read needs beyond the range.
struct PageSpec<'a> {
    filter: Option<&'a Condition>,
    projection: Option<&'a Projection>,
    limit: Option<u32>,
    forward: bool,
    consistent: bool,
    select: Select,
    segment: Option<(u32, u32)>,
    /// Read each entry's item from the base table (an LSI lacking requested attributes).
    fetch_base: bool,
}

/// Whether a projection asks an LSI for attributes it does not store, which DynamoDB then
/// reads from the table (GSIs only ever return what they store).
fn needs_base(src: &Source<'_>, projection: Option<&Projection>) -> bool {
    let (Some(index), Some(projection)) = (src.index, projection) else { return false };
    if index.kind != IndexKind::Local {
        return false;
    }
    let included: &[String] = match &index.projection {
        store::Projection::All => return false,
        store::Projection::KeysOnly => &[],
        store::Projection::Include(names) => names,
    };
    projection.top_level_attributes().iter().any(|a| {
        !src.info.schema().attributes().chain(index.schema.attributes()).any(|k| &k.name == a) && !included.contains(a)
    })
}

fn read_page(shared: &Shared, src: &Source<'_>, range: KeyRange, spec: &PageSpec<'_>) -> Result<QueryOutput> {
    let mut out = QueryOutput::default();
    let mut bytes = 0usize;
    let mut base_bytes = 0usize;
    if !range.is_empty() {
        let txn = begin(shared)?;
        let table = open(&txn, src.redb_name())?;
        let iter = table.range::<&[u8]>(range.as_bounds()).map_err(internal)?;
        let iter: Box<dyn Iterator<Item = _>> = if spec.forward { Box::new(iter) } else { Box::new(iter.rev()) };
        let partition_ty = src.schema().partition.ty;
        let base = if spec.fetch_base { Some(open(&txn, &src.info.redb_name)?) } else { None };
        // With a projection, only the attributes something reads are built: the projected ones,
        // those the filter reads, and the keys (the page's last key names them).
        let wanted: Option<BTreeSet<String>> = match (spec.projection, &base) {
            (Some(projection), None) => {
                let mut names = projection.top_level_attributes();
                names.extend(spec.filter.map(Condition::top_level_attributes).unwrap_or_default());
                names.extend(src.info.schema().attributes().map(|a| a.name.clone()));
                if let Some(index) = src.index {
                    names.extend(index.schema.attributes().map(|a| a.name.clone()));
                }
                Some(names)
            }
            _ => None,
        };
        for entry in iter {
            let (k, v) = entry.map_err(internal)?;
            if let Some((segment, total)) = spec.segment {
                let key = k.value();
                let mut rest = key;
                keys::decode_value(&mut rest, partition_ty).map_err(|_| internal("corrupt key"))?;
                let pk = &key[..key.len() - rest.len()];
                if segment_of(pk, total) != segment {
                    continue;
                }
            }
            let decoded = match &wanted {
                Some(names) => codec::decode_item_projected(v.value(), |name| names.contains(name)),
                None => codec::decode_item_sized(v.value()),
            };
            let (mut item, mut size) = decoded.map_err(|e| internal(format!("corrupt item: {}", e.0)))?;
            if let Some(base) = &base {
                // An LSI entry lacks attributes the request wants: read them from the table.
                let found = base.get(src.info.base_key(&item).as_slice()).map_err(internal)?;
                if let Some(found) = found {
                    (item, size) = codec::decode_item_sized(found.value())
                        .map_err(|e| internal(format!("corrupt item: {}", e.0)))?;
                    base_bytes += size;
                }
            }
            out.scanned_count += 1;
            bytes += size;
            let full = spec.limit.is_some_and(|l| out.scanned_count >= l as usize) || bytes >= MAX_PAGE_BYTES;
            // Only the page's last item names the key to resume from; copying every item's key
            // attributes was a measurable share of a page read.
            let last_key = if full { Some(src.info.last_key(src.index, &item)) } else { None };
            let keep = match spec.filter {
                Some(f) => f.evaluate(Some(&item))?,
                None => true,
            };
            if keep {
                out.count += 1;
                if spec.select != Select::Count {
                    out.items.push(project(spec.projection, item));
                }
            }
            if full {
                out.last_evaluated_key = last_key;
                break;
            }
        }
    }
    let mut units = src.units(read_units(bytes, spec.consistent));
    if base_bytes > 0 {
        units.table += read_units(base_bytes, spec.consistent);
    }
    out.consumed_capacity = units.consumed(&src.info.def.name, Kind::Read);
    Ok(out)
}

/// The parallel-scan segment of an encoded partition key.
fn segment_of(pk: &[u8], total: u32) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in pk {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % u64::from(total.max(1))) as u32
}

/// `Query`: one page.
pub fn query(shared: &Shared, req: Query) -> Result<QueryOutput> {
    check_limit(req.limit)?;
    let info = shared.table(&req.table)?;
    let src = source(&info, req.index.as_deref(), req.consistent_read)?;
    let mut ctx = ExprContext::new(&req.attrs);
    let cond = KeyCondition::parse(&req.key_condition, &mut ctx, src.schema())?;
    let filter = req.filter.as_deref().map(|f| Condition::parse_filter(f, &mut ctx)).transpose()?;
    let projection = parse_projection(req.projection.as_deref(), &mut ctx)?;
    ctx.finish()?;
    // A query's filter may not name the queried key attributes: the key condition is their place.
    if let Some(filter) = &filter {
        let named = filter.top_level_attributes();
        if let Some(key) = src.schema().attributes().find(|a| named.contains(&a.name)) {
            return Err(StoreError::validation(format!(
                "Filter Expression can only contain non-primary key attributes: Primary key attribute: {}",
                key.name
            )));
        }
    }
    let start = req.exclusive_start_key.as_ref().map(|k| info.start_key(src.index, k)).transpose()?;
    let range = resume(key_range(&cond), start, req.scan_forward);
    read_page(
        shared,
        &src,
        range,
        &PageSpec {
            filter: filter.as_ref(),
            projection: projection.as_ref(),
            limit: req.limit,
            forward: req.scan_forward,
            consistent: req.consistent_read,
            select: req.select,
            segment: None,
            fetch_base: needs_base(&src, projection.as_ref()),
        },
    )
}

/// `Scan`: one page.
pub fn scan(shared: &Shared, req: Scan) -> Result<QueryOutput> {
    check_limit(req.limit)?;
    if let Some((segment, total)) = req.segment
        && (total == 0 || total > 1_000_000 || segment >= total)
    {
        return Err(StoreError::validation(format!(
            "1 validation error detected: Value '{segment}' at 'segment' failed to satisfy constraint: Member must be less than TotalSegments ({total}), which must be between 1 and 1000000"
        )));
    }
    let info = shared.table(&req.table)?;
    let src = source(&info, req.index.as_deref(), req.consistent_read)?;
    let mut ctx = ExprContext::new(&req.attrs);
    let filter = req.filter.as_deref().map(|f| Condition::parse_filter(f, &mut ctx)).transpose()?;
    let projection = parse_projection(req.projection.as_deref(), &mut ctx)?;
    ctx.finish()?;
    let start = req.exclusive_start_key.as_ref().map(|k| info.start_key(src.index, k)).transpose()?;
    let range = resume(KeyRange::all(), start, true);
    read_page(
        shared,
        &src,
        range,
        &PageSpec {
            filter: filter.as_ref(),
            projection: projection.as_ref(),
            limit: req.limit,
            forward: true,
            consistent: req.consistent_read,
            select: req.select,
            segment: req.segment,
            fetch_base: needs_base(&src, projection.as_ref()),
        },
    )
}

/// `BatchGetItem`.
pub fn batch_get(shared: &Shared, req: BatchGetItem) -> Result<BatchGetItemOutput> {
    let total: usize = req.requests.values().map(|r| r.keys.len()).sum();
    if total > MAX_BATCH_GET {
        return Err(StoreError::validation("Too many items requested for the BatchGetItem call"));
    }
    if total == 0 || req.requests.values().any(|r| r.keys.is_empty()) {
        return Err(StoreError::validation(
            "1 validation error detected: Value at 'requestItems' failed to satisfy constraint: Member must have length greater than or equal to 1",
        ));
    }
    let mut prepared = Vec::new();
    for (table, request) in &req.requests {
        let mut ctx = ExprContext::new(&request.attrs);
        let projection = parse_projection(request.projection.as_deref(), &mut ctx)?;
        ctx.finish()?;
        let info = shared.table(table)?;
        let mut seen = BTreeSet::new();
        for key in &request.keys {
            info.check_key(key)?;
            if !seen.insert(info.base_key(key)) {
                return Err(StoreError::validation("Provided list of item keys contains duplicates"));
            }
        }
        prepared.push((table, request, info, projection));
    }
    let txn = begin(shared)?;
    let mut out = BatchGetItemOutput::default();
    let mut per_table = PerTable::default();
    let mut bytes = 0usize;
    for (table, request, info, projection) in prepared {
        let mut units = 0.0;
        for key in &request.keys {
            if bytes > MAX_BATCH_GET_BYTES {
                out.unprocessed_keys
                    .entry(table.clone())
                    .or_insert_with(|| KeysAndAttributes { keys: Vec::new(), ..request.clone() })
                    .keys
                    .push(key.clone());
                continue;
            }
            let item = get_in(&txn, &info, key)?;
            let size = item.as_ref().map_or(0, item_size);
            bytes += size;
            units += read_units(size, request.consistent_read);
            if let Some(item) = item {
                out.responses.entry(table.clone()).or_default().push(project(projection.as_ref(), item));
            }
        }
        per_table.add(table, &Units::table(units));
    }
    out.consumed_capacity = per_table.consumed(Kind::Read);
    Ok(out)
}

/// `TransactGetItems`: one snapshot.
pub fn transact_get(shared: &Shared, req: TransactGetItems) -> Result<TransactGetItemsOutput> {
    if req.items.is_empty() || req.items.len() > MAX_TRANSACT_ITEMS {
        return Err(StoreError::validation(format!(
            "1 validation error detected: Value at 'transactItems' failed to satisfy constraint: Member must have length less than or equal to {MAX_TRANSACT_ITEMS} and greater than or equal to 1"
        )));
    }
    let mut prepared = Vec::with_capacity(req.items.len());
    let mut seen = BTreeSet::new();
    for get in &req.items {
        let mut ctx = ExprContext::new(&get.attrs);
        let projection = parse_projection(get.projection.as_deref(), &mut ctx)?;
        ctx.finish()?;
        let info = shared.table(&get.table)?;
        info.check_key(&get.key)?;
        if !seen.insert((get.table.clone(), info.base_key(&get.key))) {
            return Err(StoreError::validation("Transaction request cannot include multiple operations on one item"));
        }
        prepared.push((get, info, projection));
    }
    let txn = begin(shared)?;
    let mut items = Vec::with_capacity(prepared.len());
    let mut per_table = PerTable::default();
    for (get, info, projection) in prepared {
        let item = get_in(&txn, &info, &get.key)?;
        let size = item.as_ref().map_or(0, item_size);
        per_table.add(&get.table, &Units::table(2.0 * read_units(size, true)));
        items.push(item.map(|i| project(projection.as_ref(), i)));
    }
    Ok(TransactGetItemsOutput { items, consumed_capacity: per_table.consumed(Kind::Read) })
}

/// `DescribeTable`: the item count is exact and the size is redb's stored bytes, both cheap
/// to read (DynamoDB's are approximate, refreshed about every six hours).
pub fn describe(shared: &Shared, name: &str) -> Result<TableDescription> {
    let info = shared
        .table(name)
        .map_err(|_| StoreError::ResourceNotFound(format!("Requested resource not found: Table: {name} not found")))?;
    let txn = begin(shared)?;
    let table = open(&txn, &info.redb_name)?;
    Ok(TableDescription {
        definition: info.def.clone(),
        status: TableStatus::Active,
        item_count: table.len().map_err(internal)?,
        size_bytes: table.stats().map_err(internal)?.stored_bytes(),
    })
}

/// `ListTables`.
pub fn list(shared: &Shared) -> Vec<String> {
    let tables = store::sync::read(&shared.tables);
    tables.keys().cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::n;

    fn contains(range: &KeyRange, key: &[u8]) -> bool {
        use std::ops::RangeBounds;
        // Spelled out: with `bytes` in the build graph, `contains` on a tuple of bounds is ambiguous.
        let bounds: (Bound<&[u8]>, Bound<&[u8]>) =
            (range.start.as_ref().map(|v| v.as_slice()), range.end.as_ref().map(|v| v.as_slice()));
        RangeBounds::<[u8]>::contains(&bounds, key)
    }

    fn key(pk: &str, sk: AttributeValue) -> Vec<u8> {
        let mut k = keys::encoded(&pk.into());
        keys::encode_value(&mut k, &sk);
        k
    }

    #[test]
    fn sort_conditions_select_the_right_keys() {
        let cond = |sort| KeyCondition { partition: "p".into(), sort: Some(sort) };
        let r = key_range(&cond(SortCondition::Between(n("2"), n("4"))));
        assert!(!contains(&r, &key("p", n("1.9"))));
        assert!(contains(&r, &key("p", n("2"))));
        assert!(contains(&r, &key("p", n("4"))));
        assert!(!contains(&r, &key("p", n("4.1"))));
        assert!(!contains(&r, &key("q", n("3"))));
        let r = key_range(&cond(SortCondition::Gt(n("4"))));
        assert!(!contains(&r, &key("p", n("4"))));
        assert!(contains(&r, &key("p", n("400"))));
        assert!(!contains(&r, &key("pp", n("400"))));
        let r = key_range(&cond(SortCondition::BeginsWith("ab".into())));
        assert!(contains(&r, &key("p", "ab".into())));
        assert!(contains(&r, &key("p", "abc".into())));
        assert!(!contains(&r, &key("p", "a".into())));
        assert!(!contains(&r, &key("p", "ac".into())));
        let r = key_range(&cond(SortCondition::Lt("b".into())));
        assert!(contains(&r, &key("p", "a\u{ff}".into())));
        assert!(!contains(&r, &key("p", "b".into())));
    }

    #[test]
    fn segments_spread_keys() {
        let mut seen = [0; 4];
        for i in 0..400 {
            seen[segment_of(format!("pk{i}").as_bytes(), 4) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| c > 50), "{seen:?}");
    }
}
