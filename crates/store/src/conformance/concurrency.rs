//! Concurrent writers: atomic counters, create-only puts racing for one key, and
//! transactions that must stay all-or-nothing while they contend. Small concurrency
//! (a few tasks), so that slow emulators cope.

use std::sync::Arc;

use super::support::{Ctx, OrFail, Outcome, get, key, put};
use crate::{CancellationCode, PutItem, Store, StoreError, TransactWrite, TransactWriteItems, UpdateItem, item};

const TASKS: usize = 4;

/// `ADD n :one` from several tasks at once loses no increment.
pub(crate) async fn counter(ctx: Ctx) -> Outcome {
    let t = ctx.create_composite().await?;
    let per_task = 25;
    let mut handles = Vec::new();
    for _ in 0..TASKS {
        let store: Arc<dyn Store> = ctx.store.clone();
        let t = t.clone();
        handles.push(tokio::spawn(async move {
            for _ in 0..per_task {
                store.update_item(UpdateItem::new(&t, key("p", "counter"), "ADD n :one").value(":one", 1)).await?;
            }
            Ok::<(), StoreError>(())
        }));
    }
    for h in handles {
        h.await.map_err(|e| format!("task: {e}"))?.or_fail("ADD")?;
    }
    ensure_eq!(
        get(&*ctx.store, &t, key("p", "counter")).await?,
        Some(item! { "pk" => "p", "sk" => "counter", "n" => TASKS * per_task }),
        "counter after concurrent ADDs"
    );
    Ok(())
}

/// Of several create-only puts of one key racing, exactly one wins; the others fail their condition.
pub(crate) async fn create_only_race(ctx: Ctx) -> Outcome {
    let t = ctx.create_composite().await?;
    for round in 0..5 {
        let sk = format!("race-{round}");
        let mut handles = Vec::new();
        for writer in 0..TASKS {
            let store: Arc<dyn Store> = ctx.store.clone();
            let request = PutItem::new(&t, item! { "pk" => "p", "sk" => sk.as_str(), "writer" => writer })
                .condition("attribute_not_exists(pk)");
            handles.push(tokio::spawn(async move { store.put_item(request).await }));
        }
        let mut winners = Vec::new();
        for (writer, h) in handles.into_iter().enumerate() {
            match h.await.map_err(|e| format!("task: {e}"))? {
                Ok(_) => winners.push(writer),
                Err(e) if e.is_condition_failed() => {}
                Err(e) => return Err(format!("round {round}, writer {writer}: unexpected error {e:?}")),
            }
        }
        ensure_eq!(winners.len(), 1, "winners of round {round} ({winners:?})");
        ensure_eq!(
            get(&*ctx.store, &t, key("p", sk.as_str())).await?,
            Some(item! { "pk" => "p", "sk" => sk.as_str(), "writer" => winners[0] }),
            "item of round {round}"
        );
    }
    Ok(())
}

/// Transfers between two items by transactions racing each other: every transaction is
/// applied whole or not at all, so the total never changes and the balance never goes negative.
pub(crate) async fn transfers(ctx: Ctx) -> Outcome {
    let t = ctx.create_composite().await?;
    let store = &*ctx.store;
    put(store, &t, item! { "pk" => "acct", "sk" => "a", "balance" => 10 }).await?;
    put(store, &t, item! { "pk" => "acct", "sk" => "b", "balance" => 0 }).await?;
    let mut handles = Vec::new();
    for _ in 0..TASKS {
        let store: Arc<dyn Store> = ctx.store.clone();
        let t = t.clone();
        handles.push(tokio::spawn(async move {
            let mut applied = 0;
            for _ in 0..5 {
                let result = store
                    .transact_write_items(TransactWriteItems {
                        items: vec![
                            TransactWrite::Update(
                                UpdateItem::new(&t, key("acct", "a"), "SET balance = balance - :one")
                                    .condition("balance >= :one")
                                    .value(":one", 1),
                            ),
                            TransactWrite::Update(
                                UpdateItem::new(&t, key("acct", "b"), "SET balance = balance + :one").value(":one", 1),
                            ),
                        ],
                        client_request_token: None,
                    })
                    .await;
                match result {
                    Ok(_) => applied += 1,
                    // Contention is allowed to cancel a transaction (TransactionConflict), never to half-apply it.
                    Err(StoreError::TransactionConflict(_)) => {}
                    Err(StoreError::TransactionCanceled { reasons })
                        if reasons.iter().all(|r| {
                            matches!(
                                r.code,
                                CancellationCode::None
                                    | CancellationCode::TransactionConflict
                                    | CancellationCode::ConditionalCheckFailed
                            )
                        }) => {}
                    Err(e) => return Err(format!("unexpected error {e:?}")),
                }
            }
            Ok(applied)
        }));
    }
    let mut applied = 0;
    for h in handles {
        applied += h.await.map_err(|e| format!("task: {e}"))??;
    }
    let a = get(store, &t, key("acct", "a")).await?.ok_or("account a vanished")?;
    let b = get(store, &t, key("acct", "b")).await?.ok_or("account b vanished")?;
    let balance = |i: &crate::Item| i.get("balance").and_then(|v| v.as_n()).and_then(|n| n.to_i64());
    ensure_eq!(
        (balance(&a), balance(&b)),
        (Some(10 - applied), Some(applied)),
        "balances after {applied} applied transfers"
    );
    ensure!(applied >= 1, "no transfer was applied at all");
    Ok(())
}
