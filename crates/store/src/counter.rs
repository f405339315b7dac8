//! Exactly-once counter updates on any engine: a flush of counter deltas to one item is applied
//! at most once, even when the call is retried after its answer was lost.
//!
//! An `UpdateItem` with `ADD views :n` is not idempotent: if the write is applied but the answer
//! is lost (a dropped connection, a timeout), the SDK's retry — or the caller's — adds `n`
//! again. A [`CounterFlush`] instead carries a flush number, stored in a marker attribute of
//! the item with the same write that adds the deltas, under the condition that the marker is
//! absent or lower. A repeat of an applied flush fails that condition and changes nothing,
//! and [`CounterFlush::apply`] reports it as [`FlushOutcome::AlreadyApplied`].
//!
//! It needs only conditional `UpdateItem`, so it works where transactions with a
//! `ClientRequestToken` do not (dynalite has no transactions; moto ignores the token), costs one
//! write instead of a transaction's two, and does not depend on a ten-minute idempotency window:
//! a flush re-sent a day later, after a crash, is still recognised.
//!
//! ```
//! use store::counter::CounterFlush;
//! use store::item;
//!
//! let flush = CounterFlush::new("tally", item! { "pk" => "SITE#1", "sk" => "DAY#2026-11-22" }, 7)
//!     .add("pageviews", 12)
//!     .add("visits", 3);
//! let update = flush.to_update().unwrap();
//! assert!(update.update.starts_with("SET "));
//! assert_eq!(update.condition.as_deref(), Some("attribute_not_exists(#flush) OR #flush < :flush"));
//! ```
//!
//! # The contract
//!
//! - Flush numbers of one item strictly increase, and one writer at a time flushes an item
//!   (the aggregation owns its partitions).
//! - A flush is *settled* once `apply` returns `Ok`. Until then, on any error, the caller sends
//!   the **same** flush again (same number, same deltas): never a merged or renumbered one,
//!   which could count the unsettled deltas twice. Only then does it send the item's next flush.
//! - Settling may wait: a flush re-sent after a restart (from a durable checkpoint that
//!   recorded its number and deltas before the first send) is recognised whenever it arrives.
//!
//! Given that, `ConditionalCheckFailed` can only mean "this flush, or a later one, was applied",
//! so it is reported as [`FlushOutcome::AlreadyApplied`], not as an error.

use std::collections::BTreeMap;

use crate::{Item, Number, Result, ReturnValues, Store, StoreError, UpdateItem};

/// The marker attribute's default name.
pub const DEFAULT_MARKER: &str = "flush";

/// Counter deltas for one item, applied at most once (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq)]
pub struct CounterFlush {
    /// Table name.
    pub table: String,
    /// The item's full primary key.
    pub key: Item,
    /// The attribute that records the last applied flush number.
    pub marker: String,
    /// This flush's number; strictly greater than the item's previous flush.
    pub flush: u64,
    /// Counter attribute → delta (negative deltas subtract). Absent counters start at zero.
    pub deltas: BTreeMap<String, Number>,
}

/// What [`CounterFlush::apply`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushOutcome {
    /// This call applied the deltas.
    Applied,
    /// The flush (or a later one) was applied before: by an earlier attempt whose answer was
    /// lost, or an earlier run. Nothing was changed.
    AlreadyApplied,
}

impl CounterFlush {
    /// Flush number `flush` of the item with `key`, with no deltas yet and the default marker.
    pub fn new(table: impl Into<String>, key: Item, flush: u64) -> Self {
        CounterFlush { table: table.into(), key, marker: DEFAULT_MARKER.to_string(), flush, deltas: BTreeMap::new() }
    }

    /// Adds `delta` to the counter `attribute` (summed with an earlier delta of the same counter).
    pub fn add(mut self, attribute: impl Into<String>, delta: impl Into<Number>) -> Self {
        let delta = delta.into();
        let entry = self.deltas.entry(attribute.into()).or_insert_with(Number::zero);
        // Overflow past 38 digits is left for the engine to refuse: keep the larger operand.
        *entry = entry.checked_add(&delta).unwrap_or(delta);
        self
    }

    /// Names the marker attribute (default [`DEFAULT_MARKER`]).
    pub fn marker(mut self, attribute: impl Into<String>) -> Self {
        self.marker = attribute.into();
        self
    }

    /// The conditional `UpdateItem` that applies the flush:
    /// `SET #c0 = if_not_exists(#c0, :zero) + :d0, …, #flush = :flush` on condition
    /// `attribute_not_exists(#flush) OR #flush < :flush`.
    ///
    /// Fails with [`StoreError::Validation`] when there are no deltas, or when a counter is the
    /// marker or a key attribute.
    pub fn to_update(&self) -> Result<UpdateItem> {
        if self.deltas.is_empty() {
            return Err(StoreError::validation("a counter flush needs at least one delta"));
        }
        if let Some(bad) = self.deltas.keys().find(|c| **c == self.marker || self.key.contains_key(*c)) {
            return Err(StoreError::validation(format!("counter {bad:?} is the flush marker or a key attribute")));
        }
        if self.key.contains_key(&self.marker) {
            return Err(StoreError::validation(format!("the flush marker {:?} is a key attribute", self.marker)));
        }
        let mut actions = Vec::with_capacity(self.deltas.len() + 1);
        let mut update = UpdateItem::new(&self.table, self.key.clone(), "")
            .name("#flush", &self.marker)
            .value(":flush", self.flush)
            .value(":zero", 0);
        for (i, (counter, delta)) in self.deltas.iter().enumerate() {
            actions.push(format!("#c{i} = if_not_exists(#c{i}, :zero) + :d{i}"));
            update = update.name(format!("#c{i}"), counter).value(format!(":d{i}"), delta.clone());
        }
        actions.push("#flush = :flush".to_string());
        update.update = format!("SET {}", actions.join(", "));
        update.return_values = ReturnValues::None;
        Ok(update.condition("attribute_not_exists(#flush) OR #flush < :flush"))
    }

    /// Applies the flush once. On an error the flush is not settled: send the same flush
    /// again (see the [module docs](self)); a retry is always safe.
    pub async fn apply(&self, store: &dyn Store) -> Result<FlushOutcome> {
        match store.update_item(self.to_update()?).await {
            Ok(_) => Ok(FlushOutcome::Applied),
            Err(e) if e.is_condition_failed() => Ok(FlushOutcome::AlreadyApplied),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item;

    #[test]
    fn deltas_of_one_counter_are_summed() {
        let flush = CounterFlush::new("t", item! { "pk" => "a" }, 1).add("v", 2).add("v", -5).add("w", 1);
        assert_eq!(flush.deltas["v"], Number::from(-3));
        let update = flush.to_update().unwrap();
        assert_eq!(
            update.update,
            "SET #c0 = if_not_exists(#c0, :zero) + :d0, #c1 = if_not_exists(#c1, :zero) + :d1, #flush = :flush"
        );
        assert_eq!(update.attrs.names["#c0"], "v");
        assert_eq!(update.attrs.values[":flush"], crate::AttributeValue::from(1));
    }

    #[test]
    fn empty_flushes_and_clashing_names_are_refused() {
        let key = item! { "pk" => "a", "sk" => "b" };
        assert!(CounterFlush::new("t", key.clone(), 1).to_update().unwrap_err().is_validation());
        assert!(CounterFlush::new("t", key.clone(), 1).add("sk", 1).to_update().unwrap_err().is_validation());
        assert!(CounterFlush::new("t", key.clone(), 1).add("flush", 1).to_update().unwrap_err().is_validation());
        let keyed_marker = CounterFlush::new("t", key, 1).add("v", 1).marker("pk");
        assert!(keyed_marker.to_update().unwrap_err().is_validation());
    }
}
