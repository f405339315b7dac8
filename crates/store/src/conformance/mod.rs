//! The conformance suite: one set of cases that every engine must pass, written against
//! DynamoDB's documented behaviour (the DynamoDB developer guide is the reference).
//!
//! CONTRACT (keep this signature): each engine's integration tests call [`run_suite`].
//!
//! Every case is an `async fn(Ctx) -> Outcome` registered in `CASES`. A case creates its own
//! tables (named `{prefix}-{case}`), checks one behaviour family, and returns `Err` with a
//! reason as soon as the engine differs from DynamoDB. Cases run one after another (a few use
//! four concurrent tasks), so the suite also works against slow emulators over HTTP; each has a
//! time limit, and a case that panics (an unfinished engine, say) fails on its own without
//! stopping the others.
//!
//! Where the guide leaves a detail open (the order of items sharing a GSI key, whether the
//! item crossing a 16 MB batch-get limit is returned, how a result of 39 significant digits is
//! rounded), the cases accept every reading. Cases read their own writes with eventually
//! consistent queries, as DynamoDB emulators and the embedded engine allow; GSI reads are
//! retried for a few seconds because GSIs are eventually consistent in DynamoDB itself.
//!
//! The suite is itself tested: the embedded engine's runner checks that it fails engines that
//! break DynamoDB's rules on purpose (dropped `LastEvaluatedKey`, ignored `Limit`, conditions or
//! direction, doubled capacity, non-atomic transactions).

/// Registers a case: `case!("name", module::function)`.
macro_rules! case {
    ($name:literal, $f:path) => {
        support::Case { name: $name, run: |ctx| Box::pin($f(ctx)) }
    };
}

/// Fails the case with a formatted reason unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

/// Fails the case unless `got == want`, printing both (shortened).
macro_rules! ensure_eq {
    ($got:expr, $want:expr, $($arg:tt)+) => {{
        let (got, want) = (&$got, &$want);
        if got != want {
            return Err(format!(
                "{}: got {}, want {}",
                format!($($arg)+),
                $crate::conformance::support::short(got),
                $crate::conformance::support::short(want)
            ));
        }
    }};
}

mod capacity;
mod concurrency;
mod indexes;
mod items;
mod multi;
mod order;
mod query;
mod support;
mod tables;
mod updates;
mod validation;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;

use crate::Store;
use support::{Case, Ctx};

/// A case an engine is known not to support, with the reason; printed, never silently skipped.
#[derive(Clone, Copy, Debug)]
pub struct Unsupported {
    /// The case's name, as the suite prints it.
    pub case: &'static str,
    /// Why the engine does not support it.
    pub reason: &'static str,
}

/// How long one case may take; generous because emulators over HTTP are slow.
const CASE_TIMEOUT: Duration = Duration::from_secs(600);

/// Every case, in the order the suite runs them.
const CASES: &[Case] = &[
    case!("table-lifecycle", tables::lifecycle),
    case!("table-with-indexes", tables::with_indexes),
    case!("table-ttl-described", tables::ttl_described),
    case!("missing-table", tables::missing_table),
    case!("missing-table-transactions", tables::missing_table_transactions),
    case!("put-get-delete", items::put_get_delete),
    case!("all-value-types-round-trip", items::all_value_types),
    case!("get-projection", items::get_projection),
    case!("put-create-only", items::create_only),
    case!("put-replace-only", items::replace_only),
    case!("conditional-update-delete", items::conditional_update_delete),
    case!("condition-expressions", items::condition_expressions),
    case!("condition-failure-returns-old-item", items::condition_failure_returns_old),
    case!("return-values", items::return_values),
    case!("update-actions", updates::actions),
    case!("update-creates-absent-item", updates::creates_absent_item),
    case!("update-invalid", updates::invalid),
    case!("key-conditions-s", query::key_conditions_s),
    case!("key-conditions-n", query::key_conditions_n),
    case!("key-conditions-b", query::key_conditions_b),
    case!("query-limit-filter", query::limit_filter),
    case!("scan-limit-filter", query::scan_limit_filter),
    case!("query-select-count", query::select_count),
    case!("filter-expressions", query::filter_expressions),
    case!("query-1mb-pages", query::query_pages),
    case!("scan-1mb-pages", query::scan_pages),
    case!("scan-segments", query::scan_segments),
    case!("index-pagination", query::index_pagination),
    case!("query-projection", query::query_projection),
    case!("numbers-normalised", order::numbers_normalised),
    case!("numbers-order", order::numbers_order),
    case!("numbers-exact-arithmetic", order::numbers_exact),
    case!("string-byte-order", order::string_order),
    case!("binary-byte-order", order::binary_order),
    case!("validation-keys", validation::keys),
    case!("validation-item-size", validation::item_size_limit),
    case!("validation-expressions", validation::expressions),
    case!("validation-key-conditions", validation::key_conditions),
    case!("validation-batch-limits", validation::batch_limits),
    case!("validation-transaction-limits", validation::transaction_limits),
    case!("validation-values", validation::values),
    case!("batch-write", multi::batch_write),
    case!("batch-get", multi::batch_get),
    case!("batch-get-16mb", multi::batch_get_16mb),
    case!("transact-get", multi::transact_get),
    case!("transact-write", multi::transact_write),
    case!("transact-write-cancellation", multi::transact_cancellation),
    case!("transact-write-idempotency", multi::transact_idempotency),
    case!("concurrent-atomic-counter", concurrency::counter),
    case!("concurrent-create-only", concurrency::create_only_race),
    case!("concurrent-transactions", concurrency::transfers),
    case!("capacity-writes", capacity::writes),
    case!("capacity-reads", capacity::reads),
    case!("capacity-query", capacity::query),
    case!("capacity-transactions", capacity::transactions),
    case!("gsi-sparse", indexes::sparse),
    case!("gsi-maintained-with-base-item", indexes::maintained),
    case!("gsi-maintained-by-transactions", indexes::maintained_by_transactions),
    case!("index-projections", indexes::projections),
];

/// Runs every case against `store`, prints a line per case (and the unsupported table),
/// and panics listing every failed case. Each case uses tables of its own, named with `prefix`.
pub async fn run_suite(store: Arc<dyn Store>, engine: &str, prefix: &str, unsupported: &[Unsupported]) {
    let mut failed: Vec<String> = Vec::new();
    for u in unsupported {
        if !CASES.iter().any(|c| c.name == u.case) {
            println!("conformance[{engine}] {} ... FAILED: listed as unsupported but no such case", u.case);
            failed.push(u.case.to_string());
        }
    }
    let started = Instant::now();
    for case in CASES {
        if let Some(u) = unsupported.iter().find(|u| u.case == case.name) {
            println!("conformance[{engine}] {} ... UNSUPPORTED: {}", case.name, u.reason);
            continue;
        }
        let ctx = Ctx::new(store.clone(), prefix, case.name);
        let run = AssertUnwindSafe((case.run)(ctx.clone())).catch_unwind();
        let outcome = match tokio::time::timeout(CASE_TIMEOUT, run).await {
            Err(_) => Err(format!("timed out after {CASE_TIMEOUT:?}")),
            Ok(Err(panic)) => Err(format!("panicked: {}", support::panic_message(&*panic))),
            Ok(Ok(outcome)) => outcome,
        };
        ctx.cleanup().await;
        match outcome {
            Ok(()) => println!("conformance[{engine}] {} ... ok", case.name),
            Err(reason) => {
                println!("conformance[{engine}] {} ... FAILED: {reason}", case.name);
                failed.push(case.name.to_string());
            }
        }
    }
    println!(
        "conformance[{engine}] {} cases in {:.1?}: {} failed, {} unsupported",
        CASES.len(),
        started.elapsed(),
        failed.len(),
        unsupported.len()
    );
    if !unsupported.is_empty() {
        println!("conformance[{engine}] unsupported cases:");
        let width = unsupported.iter().map(|u| u.case.len()).max().unwrap_or(0);
        for u in unsupported {
            println!("  {:width$}  {}", u.case, u.reason);
        }
    }
    if !failed.is_empty() {
        panic!("conformance[{engine}]: {} case(s) failed: {}", failed.len(), failed.join(", "));
    }
}

/// The names of every case, in run order; engines use them to list unsupported cases.
pub fn case_names() -> impl Iterator<Item = &'static str> {
    CASES.iter().map(|c| c.name)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn case_names_are_unique_and_valid_table_name_parts() {
        let mut seen = BTreeSet::new();
        for name in case_names() {
            assert!(seen.insert(name), "case {name} is listed twice");
            // Tables are named `{prefix}-{case}[-suffix]`: DynamoDB allows [A-Za-z0-9_.-], 3–255 long.
            assert!(
                name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "case {name} is not lowercase kebab-case"
            );
            assert!(name.len() < 200, "case {name} is too long for a table name");
        }
        assert!(seen.len() >= 40, "the suite lost cases: {}", seen.len());
    }
}
