//! The shared conformance suite, run against the embedded engine.

use std::sync::Arc;

use store_embedded::EmbeddedStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_suite_passes_on_the_embedded_engine() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(dir.path()).expect("open the engine"));
    // The embedded engine aims to support every case: nothing is listed as unsupported.
    store::conformance::run_suite(store, "embedded", "conf", &[]).await;
}
