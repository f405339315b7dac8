//! Integration tests of the model layer: typed operations on the sample shop schema,
//! run against the embedded engine in a temporary directory.

mod batch;
mod crud;
mod generate;
mod query;
mod retry;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use model::{Table, sample};
use store::Store;
use store_embedded::EmbeddedStore;

/// 2024-12-01T14:30:00Z, the tests' starting time.
pub const T0: i64 = 1_733_063_400_000;

/// A fresh shop table on a fresh embedded store, with a clock the test controls.
pub struct Fixture {
    /// The table under test.
    pub table: Table,
    /// The clock it reads, epoch milliseconds.
    pub clock: Arc<AtomicI64>,
    _dir: tempfile::TempDir,
}

impl Fixture {
    /// Opens the store and creates the table.
    pub async fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("temporary directory");
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).expect("open the embedded store"));
        let clock = Arc::new(AtomicI64::new(T0));
        let c = clock.clone();
        let table = Table::new(store, sample::shop("shop")).with_clock(move || c.load(Ordering::SeqCst));
        table.create_table().await.expect("create the table");
        Fixture { table, clock, _dir: dir }
    }

    /// Moves the clock forward.
    pub fn advance(&self, ms: i64) {
        self.clock.fetch_add(ms, Ordering::SeqCst);
    }
}
