//! How often a process's cached copies of shared items turn out stale when it writes them, and so
//! whether it should read an item before writing it.
//!
//! Tally writes items other processes write too under a condition on what it last saw: a
//! session's `VisitorSession` item (its next slot), an aggregate item (its `version`). When
//! another process wrote the item since this one cached it, the write is refused, and a refused
//! write still costs write units on DynamoDB (the larger of the stored and the new item); the
//! item is then read and written again. Read first, a write costs a read and its write units
//! whatever the cache held. So once more than a sixth of recent writes from the cache found it
//! stale, the writer reads first: at DynamoDB's prices (a read unit a fifth of a write unit)
//! that is where reading first becomes the cheaper way for an item of 1 KB, and sooner for a
//! larger one (a strongly consistent read unit covers 4 KB, a write unit 1 KB); it always
//! spends fewer write units. Staleness is measured either way (a read-first write sees whether the cache was
//! current), so the choice follows the traffic both ways. Correctness never depends on it: the
//! conditional write still decides every write.
//!
//! The same measure decides whether an aggregate item missing from the cache is read before it
//! is written. Mostly such an item is new, and is created under the condition that it does not
//! exist; when it does, the refused create costs what a refused write does, and the item is read
//! and written again. So past a sixth of uncached items found to exist (either way: a read shows
//! it, and so does a refused create), the flush reads them first.

use std::sync::atomic::{AtomicU64, Ordering};

/// Recent writes from a cache, and how many of them found it stale.
#[derive(Debug, Default)]
pub(crate) struct StaleRate {
    /// Both halved whenever `recent` reaches [`StaleRate::WINDOW`], so they weigh the last few
    /// thousand writes.
    recent: AtomicU64,
    stale: AtomicU64,
}

impl StaleRate {
    const WINDOW: u64 = 4096;
    /// Writes seen before staleness is trusted.
    const MIN_SEEN: u64 = 64;

    /// Whether the next write of a cached item should read the item first.
    pub(crate) fn read_first(&self) -> bool {
        let (recent, stale) = (self.recent.load(Ordering::Relaxed), self.stale.load(Ordering::Relaxed));
        recent >= Self::MIN_SEEN && stale * 6 > recent
    }

    /// Counts a write of a cached item, stale or not.
    pub(crate) fn record(&self, stale: bool) {
        let recent = self.recent.fetch_add(1, Ordering::Relaxed) + 1;
        if stale {
            self.stale.fetch_add(1, Ordering::Relaxed);
        }
        if recent >= Self::WINDOW {
            // Racing halvings only make the window a little shorter.
            self.recent.store(recent / 2, Ordering::Relaxed);
            self.stale.store(self.stale.load(Ordering::Relaxed) / 2, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_first_past_a_sixth_stale_and_stops_when_the_cache_is_current_again() {
        let rate = StaleRate::default();
        for _ in 0..63 {
            rate.record(true);
        }
        assert!(!rate.read_first(), "not before 64 writes are seen");
        rate.record(true);
        assert!(rate.read_first());
        // A sixth is the line: 1 stale in 6 is not past it.
        let rate = StaleRate::default();
        for i in 0..600 {
            rate.record(i % 6 == 0);
        }
        assert!(!rate.read_first());
        rate.record(true);
        assert!(rate.read_first());
        // Current caches for a few windows bring it back to writing from the cache.
        for _ in 0..3 * StaleRate::WINDOW {
            rate.record(false);
        }
        assert!(!rate.read_first());
    }
}
