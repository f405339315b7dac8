//! Consumed capacity, by DynamoDB's billing rules.
//!
//! Writes cost one unit per started KB of the larger of the old and new item (at least one);
//! each index entry written costs one unit per started KB of the projected entry, and an index
//! key change costs a delete plus a put. Reads cost one unit per started 4 KB (query and scan
//! sum the page before rounding), half when eventually consistent. Transactions double both.

use std::collections::BTreeMap;

use store::ConsumedCapacity;
use store::limits::{READ_UNIT_BYTES, WRITE_UNIT_BYTES};

use crate::schema::IndexKind;

/// Write units for writing `bytes` (at least one).
pub fn write_units(bytes: usize) -> f64 {
    bytes.div_ceil(WRITE_UNIT_BYTES).max(1) as f64
}

/// Read units for reading `bytes` (at least one unit before halving).
pub fn read_units(bytes: usize, consistent: bool) -> f64 {
    let units = bytes.div_ceil(READ_UNIT_BYTES).max(1) as f64;
    if consistent { units } else { units / 2.0 }
}

/// Units spent on one table and its indexes by one call or part of one.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Units {
    /// Units spent on the base table.
    pub table: f64,
    /// Units per global secondary index.
    pub global: BTreeMap<String, f64>,
    /// Units per local secondary index.
    pub local: BTreeMap<String, f64>,
}

impl Units {
    /// Units spent on the base table only.
    pub fn table(units: f64) -> Self {
        Units { table: units, ..Default::default() }
    }

    /// Adds units spent on an index.
    pub fn add_index(&mut self, kind: IndexKind, name: &str, units: f64) {
        let map = match kind {
            IndexKind::Global => &mut self.global,
            IndexKind::Local => &mut self.local,
        };
        *map.entry(name.to_string()).or_insert(0.0) += units;
    }

    /// Adds another call's units.
    pub fn add(&mut self, other: &Units) {
        self.table += other.table;
        for (k, v) in &other.global {
            *self.global.entry(k.clone()).or_insert(0.0) += v;
        }
        for (k, v) in &other.local {
            *self.local.entry(k.clone()).or_insert(0.0) += v;
        }
    }

    /// Multiplies every figure (transactions cost double).
    pub fn scaled(mut self, factor: f64) -> Self {
        self.table *= factor;
        self.global.values_mut().for_each(|v| *v *= factor);
        self.local.values_mut().for_each(|v| *v *= factor);
        self
    }

    /// The units of the table and every index together.
    pub fn total(&self) -> f64 {
        self.table + self.global.values().sum::<f64>() + self.local.values().sum::<f64>()
    }

    /// The response figure for `table`, as read or write units.
    pub fn consumed(&self, table: &str, kind: Kind) -> ConsumedCapacity {
        let total = self.total();
        ConsumedCapacity {
            table: table.to_string(),
            capacity_units: total,
            read_capacity_units: if kind == Kind::Read { total } else { 0.0 },
            write_capacity_units: if kind == Kind::Write { total } else { 0.0 },
            table_units: self.table,
            global_indexes: self.global.clone(),
            local_indexes: self.local.clone(),
        }
    }
}

/// Whether units were spent reading or writing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Read units.
    Read,
    /// Write units.
    Write,
}

/// Units per table for a call spanning tables (batches and transactions), in table order.
#[derive(Default)]
pub struct PerTable(BTreeMap<String, Units>);

impl PerTable {
    /// Adds units spent on `table`.
    pub fn add(&mut self, table: &str, units: &Units) {
        self.0.entry(table.to_string()).or_default().add(units);
    }

    /// The response figures.
    pub fn consumed(self, kind: Kind) -> Vec<ConsumedCapacity> {
        self.0.iter().map(|(table, u)| u.consumed(table, kind)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_follows_dynamodb() {
        assert_eq!(write_units(0), 1.0);
        assert_eq!(write_units(1024), 1.0);
        assert_eq!(write_units(1025), 2.0);
        assert_eq!(read_units(0, false), 0.5);
        assert_eq!(read_units(4096, true), 1.0);
        assert_eq!(read_units(4097, false), 1.0);
        assert_eq!(read_units(4097, true), 2.0);
    }

    #[test]
    fn totals_include_indexes() {
        let mut u = Units::table(2.0);
        u.add_index(IndexKind::Global, "g", 1.0);
        u.add_index(IndexKind::Local, "l", 3.0);
        let c = u.scaled(2.0).consumed("t", Kind::Write);
        assert_eq!(c.capacity_units, 12.0);
        assert_eq!(c.write_capacity_units, 12.0);
        assert_eq!(c.read_capacity_units, 0.0);
        assert_eq!(c.table_units, 4.0);
        assert_eq!(c.global_indexes["g"], 2.0);
    }
}
