//! Model-based test: random sequences of operations run against the engine and against a
//! plain `BTreeMap` reference written here; every result must agree.
//!
//! The reference is deliberately naive (sorting whole collections for each query) so that it
//! is obviously right; the engine's key encoding, index maintenance, paging and transactions
//! must reproduce it exactly.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use store::{
    AttributeValue, BatchWriteItem, CancellationCode, ConditionCheck, DeleteItem, GetItem, Item, KeySchema, Projection,
    PutItem, Query, ReturnValues, ScalarType, Scan, Store, StoreError, TableDefinition, TransactWrite,
    TransactWriteItems, UpdateItem, WriteRequest, item,
};
use store_embedded::{EmbeddedStore, Options};

const TABLE: &str = "model";
const INDEX: &str = "by-g";

/// A reference key: partition `p{pk}` and numeric sort key.
type Key = (u8, i8);

#[derive(Clone, Debug)]
enum PutCond {
    None,
    NotExists,
    VEquals(i8),
}

#[derive(Clone, Debug)]
enum TxOp {
    PutIfAbsent(i8),
    Add(i8),
    Delete,
    CheckExists,
}

#[derive(Clone, Debug)]
enum Op {
    Put { key: Key, v: i8, cond: PutCond },
    Add { key: Key, d: i8 },
    Delete { key: Key },
    Get { key: Key },
    Query { pk: u8, forward: bool, limit: Option<u32>, range: Option<(i8, i8)> },
    QueryIndex { g: u8, forward: bool, limit: Option<u32> },
    Batch { writes: Vec<(Key, Option<i8>)> },
    Scan { segments: u32, limit: Option<u32> },
    Reopen,
    Transact { ops: Vec<(Key, TxOp)> },
}

fn key_strategy() -> impl Strategy<Value = Key> {
    (0u8..3, -3i8..6)
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let cond = prop_oneof![Just(PutCond::None), Just(PutCond::NotExists), (-3i8..4).prop_map(PutCond::VEquals),];
    let tx_op = prop_oneof![
        (-3i8..4).prop_map(TxOp::PutIfAbsent),
        (-3i8..4).prop_map(TxOp::Add),
        Just(TxOp::Delete),
        Just(TxOp::CheckExists),
    ];
    let limit = prop_oneof![Just(None), (1u32..5).prop_map(Some)];
    prop_oneof![
        3 => (key_strategy(), -3i8..4, cond).prop_map(|(key, v, cond)| Op::Put { key, v, cond }),
        2 => (key_strategy(), -3i8..4).prop_map(|(key, d)| Op::Add { key, d }),
        1 => key_strategy().prop_map(|key| Op::Delete { key }),
        1 => key_strategy().prop_map(|key| Op::Get { key }),
        2 => (0u8..3, any::<bool>(), limit.clone(), proptest::option::of((-4i8..7, -4i8..7)))
            .prop_map(|(pk, forward, limit, range)| Op::Query {
                pk,
                forward,
                limit,
                range: range.map(|(a, b)| (a.min(b), a.max(b))),
            }),
        1 => (0u8..2, any::<bool>(), limit).prop_map(|(g, forward, limit)| Op::QueryIndex { g, forward, limit }),
        1 => proptest::collection::vec((key_strategy(), proptest::option::of(-3i8..4)), 1..6)
            .prop_map(|writes| Op::Batch { writes }),
        1 => (1u32..4, proptest::option::of(1u32..5)).prop_map(|(segments, limit)| Op::Scan { segments, limit }),
        1 => Just(Op::Reopen),
        1 => proptest::collection::vec((key_strategy(), tx_op), 1..5)
            .prop_map(|ops| Op::Transact { ops }),
    ]
}

fn key_item((pk, sk): Key) -> Item {
    item! { "pk" => format!("p{pk}"), "sk" => i64::from(sk) }
}

/// The item a put writes: sparse in the index (no `g`) when `v` is a multiple of three.
fn put_item(key: Key, v: i8) -> Item {
    let mut it = key_item(key);
    it.insert("v".into(), i64::from(v).into());
    if v % 3 != 0 {
        it.insert("g".into(), format!("g{}", v.rem_euclid(2)).into());
    }
    it
}

fn v_of(item: &Item) -> i64 {
    item["v"].as_n().and_then(|n| n.to_i64()).unwrap_or(i64::MIN)
}

fn has_duplicates(keys: impl Iterator<Item = Key>) -> bool {
    let mut seen = BTreeSet::new();
    keys.into_iter().any(|k| !seen.insert(k))
}

/// The reference implementation.
#[derive(Default)]
struct Model {
    items: BTreeMap<Key, Item>,
}

impl Model {
    fn add(&mut self, key: Key, d: i8) -> Item {
        let item = self.items.entry(key).or_insert_with(|| key_item(key));
        let v = item.get("v").map_or(0, |_| v_of(item)) + i64::from(d);
        item.insert("v".into(), v.into());
        item.clone()
    }

    /// Query results in order, before `Limit`.
    fn query(&self, pk: u8, forward: bool, range: Option<(i8, i8)>) -> Vec<Item> {
        let mut out: Vec<Item> = self
            .items
            .iter()
            .filter(|((p, s), _)| *p == pk && range.is_none_or(|(lo, hi)| lo <= *s && *s <= hi))
            .map(|(_, i)| i.clone())
            .collect();
        if !forward {
            out.reverse();
        }
        out
    }

    /// Index query results in order: by `v`, then by the table key.
    fn query_index(&self, g: u8, forward: bool) -> Vec<Item> {
        let want = AttributeValue::from(format!("g{g}"));
        let mut out: Vec<(i64, String, i8, Item)> = self
            .items
            .iter()
            .filter(|(_, i)| i.get("g") == Some(&want))
            .map(|((p, s), i)| (v_of(i), format!("p{p}"), *s, i.clone()))
            .collect();
        out.sort_by(|a, b| (a.0, &a.1, a.2).cmp(&(b.0, &b.1, b.2)));
        let mut out: Vec<Item> = out.into_iter().map(|t| t.3).collect();
        if !forward {
            out.reverse();
        }
        out
    }
}

fn definition() -> TableDefinition {
    TableDefinition::new(TABLE, KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::N)).gsi(
        INDEX,
        KeySchema::composite("g", ScalarType::S, "v", ScalarType::N),
        Projection::All,
    )
}

/// Reads every page of a query with `limit`, checking each page's size and `LastEvaluatedKey`.
async fn all_pages(store: &EmbeddedStore, query: Query, limit: Option<u32>) -> Vec<Item> {
    let mut items = Vec::new();
    let mut start = None;
    for _ in 0..100 {
        let mut q = query.clone().start_after(start);
        if let Some(l) = limit {
            q = q.limit(l);
        }
        let page = store.query(q).await.expect("query");
        if let Some(l) = limit {
            assert!(page.items.len() <= l as usize);
            // A page that stops short of the limit is the last one.
            assert_eq!(page.last_evaluated_key.is_some(), page.scanned_count == l as usize);
        } else {
            assert!(page.last_evaluated_key.is_none());
        }
        assert_eq!(page.count, page.items.len());
        items.extend(page.items);
        start = page.last_evaluated_key;
        if start.is_none() {
            return items;
        }
    }
    panic!("paging did not end");
}

async fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let open = || EmbeddedStore::open_with(dir.path(), Options::default().ttl_sweep_interval(None)).unwrap();
    let mut store = open();
    store.create_table(definition()).await.unwrap();
    let mut model = Model::default();
    for (step, op) in ops.into_iter().enumerate() {
        let ctx = format!("step {step}: {op:?}");
        match op {
            Op::Put { key, v, cond } => {
                let mut req = PutItem::new(TABLE, put_item(key, v)).return_values(ReturnValues::AllOld);
                let old = model.items.get(&key).cloned();
                let pass = match &cond {
                    PutCond::None => true,
                    PutCond::NotExists => {
                        req = req.condition("attribute_not_exists(pk)");
                        old.is_none()
                    }
                    PutCond::VEquals(x) => {
                        req = req.condition("#v = :x").name("#v", "v").value(":x", i64::from(*x));
                        old.as_ref().is_some_and(|o| o.contains_key("v") && v_of(o) == i64::from(*x))
                    }
                };
                let got = store.put_item(req).await;
                if pass {
                    assert_eq!(got.expect(&ctx).attributes, old, "{ctx}");
                    model.items.insert(key, put_item(key, v));
                } else {
                    assert!(matches!(got, Err(StoreError::ConditionalCheckFailed { .. })), "{ctx}: {got:?}");
                }
            }
            Op::Add { key, d } => {
                let req = UpdateItem::new(TABLE, key_item(key), "ADD #v :d")
                    .name("#v", "v")
                    .value(":d", i64::from(d))
                    .return_values(ReturnValues::AllNew);
                let got = store.update_item(req).await.expect(&ctx);
                let want = model.add(key, d);
                assert_eq!(got.attributes, Some(want), "{ctx}");
            }
            Op::Delete { key } => {
                let req = DeleteItem::new(TABLE, key_item(key)).return_values(ReturnValues::AllOld);
                let got = store.delete_item(req).await.expect(&ctx);
                assert_eq!(got.attributes, model.items.remove(&key), "{ctx}");
            }
            Op::Get { key } => {
                let got = store.get_item(GetItem::new(TABLE, key_item(key))).await.expect(&ctx);
                assert_eq!(got.item.as_ref(), model.items.get(&key), "{ctx}");
            }
            Op::Query { pk, forward, limit, range } => {
                let mut q = match range {
                    None => Query::new(TABLE, "pk = :pk"),
                    Some((lo, hi)) => Query::new(TABLE, "pk = :pk AND sk BETWEEN :lo AND :hi")
                        .value(":lo", i64::from(lo))
                        .value(":hi", i64::from(hi)),
                }
                .value(":pk", format!("p{pk}"));
                if !forward {
                    q = q.descending();
                }
                let got = all_pages(&store, q, limit).await;
                assert_eq!(got, model.query(pk, forward, range), "{ctx}");
            }
            Op::QueryIndex { g, forward, limit } => {
                let mut q = Query::new(TABLE, "g = :g").index(INDEX).value(":g", format!("g{g}"));
                if !forward {
                    q = q.descending();
                }
                let got = all_pages(&store, q, limit).await;
                assert_eq!(got, model.query_index(g, forward), "{ctx}");
            }
            Op::Scan { segments, limit } => {
                // Every segment, every page: each item exactly once.
                let mut got = Vec::new();
                for segment in 0..segments {
                    let mut start = None;
                    loop {
                        let mut scan = Scan::new(TABLE).segment(segment, segments).start_after(start);
                        if let Some(l) = limit {
                            scan = scan.limit(l);
                        }
                        let page = store.scan(scan).await.expect(&ctx);
                        if let Some(l) = limit {
                            assert!(page.scanned_count <= l as usize, "{ctx}");
                        }
                        got.extend(page.items);
                        start = page.last_evaluated_key;
                        if start.is_none() {
                            break;
                        }
                    }
                }
                got.sort_by_key(|i| (i["pk"].clone(), i["sk"].as_n().and_then(|n| n.to_i64())));
                let want: Vec<Item> = model.items.values().cloned().collect();
                assert_eq!(got, want, "{ctx}");
            }
            Op::Reopen => {
                // Closing waits for the writer; the new store must see every acknowledged write.
                drop(store);
                store = open();
            }
            Op::Batch { writes } => {
                let requests = writes
                    .iter()
                    .map(|(key, v)| match v {
                        Some(v) => WriteRequest::Put(put_item(*key, *v)),
                        None => WriteRequest::Delete(key_item(*key)),
                    })
                    .collect();
                let mut batch = BatchWriteItem::default();
                batch.requests.insert(TABLE.into(), requests);
                let got = store.batch_write_item(batch).await;
                if has_duplicates(writes.iter().map(|(k, _)| *k)) {
                    assert!(matches!(got, Err(StoreError::Validation(_))), "{ctx}: {got:?}");
                } else {
                    got.expect(&ctx);
                    for (key, v) in writes {
                        match v {
                            Some(v) => model.items.insert(key, put_item(key, v)),
                            None => model.items.remove(&key),
                        };
                    }
                }
            }
            Op::Transact { ops } => {
                let items = ops
                    .iter()
                    .map(|(key, op)| match op {
                        TxOp::PutIfAbsent(v) => TransactWrite::Put(
                            PutItem::new(TABLE, put_item(*key, *v)).condition("attribute_not_exists(pk)"),
                        ),
                        TxOp::Add(d) => TransactWrite::Update(
                            UpdateItem::new(TABLE, key_item(*key), "ADD #v :d")
                                .name("#v", "v")
                                .value(":d", i64::from(*d)),
                        ),
                        TxOp::Delete => TransactWrite::Delete(DeleteItem::new(TABLE, key_item(*key))),
                        TxOp::CheckExists => TransactWrite::ConditionCheck(ConditionCheck::new(
                            TABLE,
                            key_item(*key),
                            "attribute_exists(pk)",
                        )),
                    })
                    .collect();
                let got = store.transact_write_items(TransactWriteItems { items, client_request_token: None }).await;
                if has_duplicates(ops.iter().map(|(k, _)| *k)) {
                    assert!(matches!(got, Err(StoreError::Validation(_))), "{ctx}: {got:?}");
                    continue;
                }
                let codes: Vec<CancellationCode> = ops
                    .iter()
                    .map(|(key, op)| {
                        let exists = model.items.contains_key(key);
                        match op {
                            TxOp::PutIfAbsent(_) if exists => CancellationCode::ConditionalCheckFailed,
                            TxOp::CheckExists if !exists => CancellationCode::ConditionalCheckFailed,
                            _ => CancellationCode::None,
                        }
                    })
                    .collect();
                if codes.iter().all(|c| *c == CancellationCode::None) {
                    got.expect(&ctx);
                    for (key, op) in ops {
                        match op {
                            TxOp::PutIfAbsent(v) => {
                                model.items.insert(key, put_item(key, v));
                            }
                            TxOp::Add(d) => {
                                model.add(key, d);
                            }
                            TxOp::Delete => {
                                model.items.remove(&key);
                            }
                            TxOp::CheckExists => {}
                        }
                    }
                } else {
                    let err = got.expect_err(&ctx);
                    let reasons = err.cancellation_reasons().unwrap_or_else(|| panic!("{ctx}: {err:?}"));
                    let got_codes: Vec<CancellationCode> = reasons.iter().map(|r| r.code).collect();
                    assert_eq!(got_codes, codes, "{ctx}");
                }
            }
        }
    }
    // Finally the whole table and the whole index agree with the reference.
    for pk in 0..3 {
        let q = Query::new(TABLE, "pk = :pk").value(":pk", format!("p{pk}"));
        assert_eq!(all_pages(&store, q, None).await, model.query(pk, true, None));
    }
    for g in 0..2 {
        let q = Query::new(TABLE, "g = :g").index(INDEX).value(":g", format!("g{g}"));
        assert_eq!(all_pages(&store, q, None).await, model.query_index(g, true));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_the_btreemap_reference(ops in proptest::collection::vec(op_strategy(), 1..40)) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(run(ops));
    }
}
