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
//!
//! A missing answer is loaded once however many ask at the same moment ([`Cached::get_or_load`]):
//! when a busy site's answer expires, the requests that find it gone wait for the one read under
//! way rather than each reading it. A load that began before the answer was forgotten (the site
//! changed) is not kept, so a change made in this process is seen at once.

use hashbrown::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
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
    /// Moves on whenever an answer is forgotten: a load that began under an older value may
    /// hold what was just changed, and is not kept.
    forgotten: u64,
}

/// Answers by key, each with the time it was read; bounded, O(1) per operation.
pub(crate) struct Cached<T> {
    inner: Mutex<Inner<T>>,
    ttl: Duration,
    /// A turn per key being loaded, taken by every caller that missed it; an entry lives while
    /// someone holds or waits for its turn, so the map is bounded by the callers waiting.
    loading: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Lets go of a key's turn, and drops the key's entry when no one else holds or waits for it
/// (also when the caller is cancelled while waiting or loading).
struct Turn<'a> {
    loading: &'a Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    key: &'a str,
    gate: Arc<tokio::sync::Mutex<()>>,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut map = lock(self.loading);
        // Ours and the map's: no one else holds it, and no one can clone it but under this lock.
        if Arc::strong_count(&self.gate) == 2 {
            map.remove(self.key);
        }
    }
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
        let inner =
            Inner { found: Generations::new(cap), missing: Generations::new(NEGATIVE_CAP.min(cap)), forgotten: 0 };
        Cached { inner: Mutex::new(inner), ttl, loading: Mutex::default() }
    }

    /// The answer for `key`: the kept one if it was read less than the TTL ago, else what
    /// `load` reads, which is kept. Callers missing the same key at once take turns, and a
    /// caller whose turn comes after another's load finds its answer: one read for them all. An
    /// error is not kept; the next caller reads again.
    pub(crate) async fn get_or_load<E, F, Fut>(&self, key: &str, load: F) -> Result<Option<T>, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Option<T>, E>>,
    {
        if let Some(hit) = self.get(key) {
            return Ok(hit);
        }
        let gate = lock(&self.loading).entry(key.to_owned()).or_default().clone();
        let turn = Turn { loading: &self.loading, key, gate };
        let held = turn.gate.lock().await;
        if let Some(hit) = self.get(key) {
            return Ok(hit);
        }
        let forgotten = lock(&self.inner).forgotten;
        let value = load().await?;
        self.put_if(key, value.clone(), Some(forgotten));
        drop(held);
        drop(turn);
        Ok(value)
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
    #[cfg(test)]
    fn put(&self, key: &str, value: Option<T>) {
        self.put_if(key, value, None);
    }

    /// Keeps the answer for `key`, if given `forgotten`, only while it is still the count of
    /// answers forgotten (checked under the same lock as the insert).
    fn put_if(&self, key: &str, value: Option<T>, forgotten: Option<u64>) {
        // A retired generation is dropped after the lock is released: freeing thousands of
        // entries is the only work here that is not O(1).
        let (mut retired_found, mut retired_missing) = (None, None);
        {
            let mut guard = lock(&self.inner);
            if forgotten.is_some_and(|f| f != guard.forgotten) {
                return;
            }
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
            guard.forgotten += 1;
        }
    }

    /// Forgets every answer.
    pub(crate) fn clear(&self) {
        let retired = {
            let mut guard = lock(&self.inner);
            guard.forgotten += 1;
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

    /// Regression: when a busy site's answer expired, every request that found it gone read the
    /// site, so a burst cost as many reads as requests.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn callers_missing_the_same_key_at_once_share_one_load() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let cache: Arc<Cached<u32>> = Arc::new(Cached::new(Duration::from_secs(60), 100));
        let loads = Arc::new(AtomicUsize::new(0));
        let callers = (0..32).map(|_| {
            let (cache, loads) = (cache.clone(), loads.clone());
            tokio::spawn(async move {
                cache
                    .get_or_load("site", || async {
                        loads.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        Ok::<_, ()>(Some(7))
                    })
                    .await
            })
        });
        for answer in futures::future::join_all(callers).await {
            assert_eq!(answer.unwrap(), Ok(Some(7)));
        }
        assert_eq!(loads.load(Ordering::SeqCst), 1, "one load for all the callers");
        assert!(lock(&cache.loading).is_empty(), "no turn is left behind");
        // Another key is loaded on its own, and an answer once kept is not loaded again.
        assert_eq!(cache.get_or_load("other", || async { Ok::<_, ()>(None) }).await, Ok(None));
        assert_eq!(cache.get_or_load("other", || async { Err(()) }).await, Ok(None));
    }

    #[tokio::test]
    async fn a_failed_load_is_not_kept_and_a_load_older_than_a_change_is_not_kept() {
        let cache: Cached<u32> = Cached::new(Duration::from_secs(60), 100);
        assert_eq!(cache.get_or_load("a", || async { Err("down") }).await, Err("down"));
        assert_eq!(cache.get("a"), None, "the error is not kept");
        assert_eq!(cache.get_or_load("a", || async { Ok::<_, &str>(Some(1)) }).await, Ok(Some(1)));
        assert_eq!(cache.get("a"), Some(Some(1)));

        // A load under way when the answer is forgotten (the site changed) answers its caller
        // but is not kept: the next caller reads the change.
        let answer = cache
            .get_or_load("b", || async {
                cache.remove("b");
                Ok::<_, &str>(Some(2))
            })
            .await;
        assert_eq!(answer, Ok(Some(2)));
        assert_eq!(cache.get("b"), None, "read before the change, so not kept");
    }

    /// A caller dropped while it waits or loads gives its turn back.
    #[tokio::test]
    async fn a_cancelled_caller_leaves_no_turn_behind() {
        let cache: Cached<u32> = Cached::new(Duration::from_secs(60), 100);
        let slow = cache.get_or_load("a", || async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, ()>(Some(1))
        });
        assert!(tokio::time::timeout(Duration::from_millis(10), slow).await.is_err());
        assert!(lock(&cache.loading).is_empty());
        assert_eq!(cache.get_or_load("a", || async { Ok::<_, ()>(Some(2)) }).await, Ok(Some(2)));
    }
}
