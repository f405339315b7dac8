//! The shared conformance suite on dynalite and on moto, with each server's unsupported cases.

use std::io::Write;

use store::conformance::{Unsupported, run_suite};

use crate::emulator::{endpoint, store};
use crate::unsupported::{UNSUPPORTED_DYNALITE, UNSUPPORTED_MOTO};

async fn run(server: &str, var: &str, unsupported: &[Unsupported]) {
    let Some(endpoint) = endpoint(server, var) else { return };
    // The suite prints the table too, but libtest hides a passing test's output; this is not hidden.
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "conformance[{server}] at {endpoint}: {} cases listed as unsupported", unsupported.len());
    for u in unsupported {
        let _ = writeln!(err, "  UNSUPPORTED on {server}: {}: {}", u.case, u.reason);
    }
    drop(err);
    run_suite(store(&endpoint).await, server, "conf", unsupported).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_on_dynalite() {
    run("dynalite", "TALLY_DYNALITE_ENDPOINT", UNSUPPORTED_DYNALITE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_on_moto() {
    run("moto", "TALLY_MOTO_ENDPOINT", UNSUPPORTED_MOTO).await;
}
