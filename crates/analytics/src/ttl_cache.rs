//! The short-lived lookup caches of sites, keys, logins and shared links: answers (found or not)
//! kept for a few seconds, so a burst of requests costs one read and a change made elsewhere is
//! seen within that time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Answers by key, each with the time it was read.
pub(crate) type Cached<T> = Mutex<HashMap<String, (Instant, Option<T>)>>;

/// The answer for `key`, if it was read less than `ttl` ago.
pub(crate) fn cached<T: Clone>(cache: &Cached<T>, key: &str, ttl: Duration) -> Option<Option<T>> {
    let guard = cache.lock().ok()?;
    let (at, value) = guard.get(key)?;
    (at.elapsed() < ttl).then(|| value.clone())
}

/// Keeps the answer for `key`; past `cap` entries, the expired ones are dropped first.
pub(crate) fn remember<T>(cache: &Cached<T>, key: &str, value: Option<T>, ttl: Duration, cap: usize) {
    if let Ok(mut guard) = cache.lock() {
        if guard.len() > cap {
            guard.retain(|_, (at, _)| at.elapsed() < ttl);
        }
        guard.insert(key.to_owned(), (Instant::now(), value));
    }
}

/// Forgets every answer.
pub(crate) fn forget<T>(cache: &Cached<T>) {
    if let Ok(mut guard) = cache.lock() {
        guard.clear();
    }
}
