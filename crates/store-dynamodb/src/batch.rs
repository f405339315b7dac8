//! Batch helpers that resend unprocessed items with jittered exponential backoff until done
//! or a deadline, as DynamoDB asks clients to do.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, RandomState};
use std::time::{Duration, Instant};

use store::{BatchGetItem, BatchGetItemOutput, BatchWriteItem, BatchWriteItemOutput, Store, StoreError};

use crate::DynamoDbStore;

/// First pause before resending unprocessed items.
const FIRST_BACKOFF: Duration = Duration::from_millis(25);
/// Longest pause between resends.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// A random delay in `[0, cap]` ("full jitter"), so that many clients do not resend in step.
fn jitter(cap: Duration) -> Duration {
    let random = RandomState::new().hash_one(Instant::now());
    let nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(if nanos == 0 { 0 } else { random % (nanos + 1) })
}

/// The pause before resend number `attempt` (1-based).
fn backoff(attempt: u32) -> Duration {
    jitter(FIRST_BACKOFF.saturating_mul(1 << attempt.min(16)).min(MAX_BACKOFF))
}

impl DynamoDbStore {
    /// `BatchWriteItem`, resending unprocessed items until all are written or `deadline` has
    /// passed. Consumed capacity of every round is returned. Fails with
    /// [`StoreError::Throttled`] (naming how many writes are left) when the deadline passes; the
    /// writes of a batch are plain puts and deletes, so sending the whole batch again is safe.
    pub async fn batch_write_all(
        &self,
        request: BatchWriteItem,
        deadline: Duration,
    ) -> Result<BatchWriteItemOutput, StoreError> {
        let until = Instant::now() + deadline;
        let mut pending = request;
        let mut consumed = Vec::new();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let out = self.batch_write_item(pending).await?;
            consumed.extend(out.consumed_capacity);
            let left: usize = out.unprocessed_items.values().map(Vec::len).sum();
            if left == 0 {
                return Ok(BatchWriteItemOutput { unprocessed_items: BTreeMap::new(), consumed_capacity: consumed });
            }
            let pause = backoff(attempt);
            if Instant::now() + pause >= until {
                return Err(StoreError::Throttled(format!(
                    "{left} batch writes still unprocessed after {deadline:?} ({attempt} rounds)"
                )));
            }
            tokio::time::sleep(pause).await;
            pending = BatchWriteItem { requests: out.unprocessed_items };
        }
    }

    /// `BatchGetItem`, resending unprocessed keys until all are read or `deadline` has passed.
    /// Responses and consumed capacity of every round are merged. Fails with
    /// [`StoreError::Throttled`] when the deadline passes.
    pub async fn batch_get_all(
        &self,
        request: BatchGetItem,
        deadline: Duration,
    ) -> Result<BatchGetItemOutput, StoreError> {
        let until = Instant::now() + deadline;
        let mut pending = request;
        let mut merged = BatchGetItemOutput::default();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let out = self.batch_get_item(pending).await?;
            merged.consumed_capacity.extend(out.consumed_capacity);
            for (table, items) in out.responses {
                merged.responses.entry(table).or_default().extend(items);
            }
            let left: usize = out.unprocessed_keys.values().map(|k| k.keys.len()).sum();
            if left == 0 {
                return Ok(merged);
            }
            let pause = backoff(attempt);
            if Instant::now() + pause >= until {
                return Err(StoreError::Throttled(format!(
                    "{left} batch reads still unprocessed after {deadline:?} ({attempt} rounds)"
                )));
            }
            tokio::time::sleep(pause).await;
            pending = BatchGetItem { requests: out.unprocessed_keys };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_bounded_and_jittered() {
        for attempt in 1..40 {
            assert!(backoff(attempt) <= MAX_BACKOFF);
        }
        let samples: std::collections::BTreeSet<Duration> = (0..20).map(|_| backoff(6)).collect();
        assert!(samples.len() > 1, "no jitter: {samples:?}");
        assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
    }
}
