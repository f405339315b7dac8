//! The short-lived lookup caches of sites, keys, logins and shared links: answers (found or not)
//! kept for a few seconds, so a burst of requests costs one read and a change made elsewhere is
//! seen within that time.
//!
//! Every operation is O(1) under the lock, and a cache never holds more than its cap:
//! - entries live in two generations; new ones go to the young map, and when it reaches half the
//!   cap it becomes the old one (the previous old one is dropped, outside the lock), so the two
//!   together hold at most the cap and nothing is ever scanned;
//! - "not found" answers are kept apart, in generations of their own with a small cap
//!   ([`NEGATIVE_CAP`]): an anonymous client presenting endless unknown keys, cookies or domains
//!   only ever evicts other such answers, never the sites and keys real traffic uses.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use store::sync::lock;

/// Most "not found" answers one cache keeps.
pub(crate) const NEGATIVE_CAP: usize = 4096;

/// Two generations of entries: at most `cap` in all.
struct Generations<V> {
    young: HashMap<String, (Instant, V)>,
    old: HashMap<String, (Instant, V)>,
    cap: usize,
}

impl<V> Generations<V> {
    fn new(cap: usize) -> Self {
        Generations { young: HashMap::new(), old: HashMap::new(), cap: cap.max(2) }
    }

    fn get(&self, key: &str) -> Option<&(Instant, V)> {
        self.young.get(key).or_else(|| self.old.get(key))
    }

    /// Inserts `key`; returns the generation it retired, for the caller to drop after unlocking.
    fn insert(&mut self, key: &str, value: V) -> Option<HashMap<String, (Instant, V)>> {
        self.old.remove(key);
        let mut retired = None;
        if !self.young.contains_key(key) && self.young.len() >= self.cap / 2 {
            retired = Some(std::mem::replace(&mut self.old, std::mem::take(&mut self.young)));
        }
        self.young.insert(key.to_owned(), (Instant::now(), value));
        retired
    }

    fn remove(&mut self, key: &str) {
        self.young.remove(key);
        self.old.remove(key);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }
}

struct Inner<T> {
    found: Generations<T>,
    missing: Generations<()>,
}

/// Answers by key, each with the time it was read; bounded, O(1) per operation.
pub(crate) struct Cached<T> {
    inner: Mutex<Inner<T>>,
    ttl: Duration,
}

impl<T> std::fmt::Debug for Cached<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cached").field("ttl", &self.ttl).finish_non_exhaustive()
    }
}

impl<T: Clone> Cached<T> {
    /// A cache keeping answers for `ttl`, at most `cap` found ones and [`NEGATIVE_CAP`] (or `cap`,
    /// if smaller) "not found" ones.
    pub(crate) fn new(ttl: Duration, cap: usize) -> Self {
        let inner = Inner { found: Generations::new(cap), missing: Generations::new(NEGATIVE_CAP.min(cap)) };
        Cached { inner: Mutex::new(inner), ttl }
    }

    /// The answer for `key`, if it was read less than the TTL ago.
    pub(crate) fn get(&self, key: &str) -> Option<Option<T>> {
        let guard = lock(&self.inner);
        if let Some((at, value)) = guard.found.get(key) {
            return (at.elapsed() < self.ttl).then(|| Some(value.clone()));
        }
        let (at, ()) = guard.missing.get(key)?;
        (at.elapsed() < self.ttl).then_some(None)
    }

    /// Keeps the answer for `key`.
    pub(crate) fn put(&self, key: &str, value: Option<T>) {
        // A retired generation is dropped after the lock is released: freeing thousands of
        // entries is the only work here that is not O(1).
        let (mut retired_found, mut retired_missing) = (None, None);
        {
            let mut guard = lock(&self.inner);
            match value {
                Some(v) => {
                    guard.missing.remove(key);
                    retired_found = guard.found.insert(key, v);
                }
                None => {
                    guard.found.remove(key);
                    retired_missing = guard.missing.insert(key, ());
                }
            }
        }
        drop((retired_found, retired_missing));
    }

    /// Forgets the answer for `key`.
    pub(crate) fn remove(&self, key: &str) {
        {
            let mut guard = lock(&self.inner);
            guard.found.remove(key);
            guard.missing.remove(key);
        }
    }

    /// Forgets every answer.
    pub(crate) fn clear(&self) {
        let retired = {
            let mut guard = lock(&self.inner);
            let (found_cap, missing_cap) = (guard.found.cap, guard.missing.cap);
            let found = std::mem::replace(&mut guard.found, Generations::new(found_cap));
            let missing = std::mem::replace(&mut guard.missing, Generations::new(missing_cap));
            (found, missing)
        };
        drop(retired);
    }

    /// How many answers are kept: (found, not found).
    #[cfg(test)]
    pub(crate) fn len(&self) -> (usize, usize) {
        {
            let g = lock(&self.inner);
            (g.found.len(), g.missing.len())
        }
    }
}

/// The answer for `key`, if it was read less than the cache's TTL ago.
pub(crate) fn cached<T: Clone>(cache: &Cached<T>, key: &str) -> Option<Option<T>> {
    cache.get(key)
}

/// Keeps the answer for `key`.
pub(crate) fn remember<T: Clone>(cache: &Cached<T>, key: &str, value: Option<T>) {
    cache.put(key, value);
}

/// Forgets every answer.
pub(crate) fn forget<T: Clone>(cache: &Cached<T>) {
    cache.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: past its cap a cache scanned every entry under its lock on each insert, and
    /// kept growing while the entries were fresh.
    #[test]
    fn a_cache_never_holds_more_than_its_cap() {
        let cache: Cached<u32> = Cached::new(Duration::from_secs(3600), 1000);
        for i in 0..10_000u32 {
            cache.put(&format!("k{i}"), Some(i));
            assert!(cache.len().0 <= 1000);
        }
        assert_eq!(cache.get("k9999"), Some(Some(9999)), "the newest answers are kept");
        assert_eq!(cache.get("k0"), None, "the oldest are gone");
    }

    /// Regression: unknown keys and cookies from anonymous clients were cached like real ones
    /// and could push every real answer out.
    #[test]
    fn unknown_answers_are_capped_apart_and_never_evict_found_ones() {
        let cache: Cached<u32> = Cached::new(Duration::from_secs(3600), 100_000);
        for i in 0..50u32 {
            cache.put(&format!("real{i}"), Some(i));
        }
        for i in 0..100_000u32 {
            cache.put(&format!("junk{i}"), None);
        }
        let (found, missing) = cache.len();
        assert_eq!(found, 50);
        assert!(missing <= NEGATIVE_CAP, "{missing}");
        assert!((0..50u32).all(|i| cache.get(&format!("real{i}")) == Some(Some(i))));
        assert_eq!(cache.get("junk99999"), Some(None), "recent misses are still answered");
    }

    #[test]
    fn answers_expire_and_a_new_answer_replaces_the_old() {
        let cache: Cached<u32> = Cached::new(Duration::from_millis(0), 10);
        cache.put("a", Some(1));
        assert_eq!(cache.get("a"), None, "expired");
        let cache: Cached<u32> = Cached::new(Duration::from_secs(60), 10);
        cache.put("a", None);
        assert_eq!(cache.get("a"), Some(None));
        cache.put("a", Some(2));
        assert_eq!(cache.get("a"), Some(Some(2)));
        cache.remove("a");
        assert_eq!(cache.get("a"), None);
        cache.put("b", Some(3));
        cache.clear();
        assert_eq!(cache.len(), (0, 0));
    }
}
