//! Tally's one policy for a poisoned lock: recover the data and carry on.
//!
//! A `std::sync::Mutex` is poisoned when a thread panics while holding it. Every lock in Tally
//! guards a cache, a counter or a map whose critical sections leave it valid between statements,
//! so a panic can at worst lose the one update it interrupted (and the panic itself is reported:
//! a task's panic reaches its `JoinHandle`, a request's is answered 500 and logged). Skipping the
//! work instead, as `if let Ok(guard) = m.lock()` does, would silently drop every later update
//! too — an event's deltas, a flush's bookkeeping — for the life of the process. So every
//! `std::sync::Mutex` in Tally is taken through [`lock`] (and every `RwLock` through [`read`] and
//! [`write`]), never `.lock()` directly.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks `mutex`, recovering its data if an earlier holder panicked (see the module doc).
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Read-locks `lock`, recovering its data if an earlier writer panicked.
pub fn read<T: ?Sized>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

/// Write-locks `lock`, recovering its data if an earlier writer panicked.
pub fn write<T: ?Sized>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_gives_its_data_back() {
        let m = std::sync::Arc::new(Mutex::new(vec![1]));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let mut v = m2.lock().unwrap();
            v.push(2);
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        lock(&m).push(3);
        assert_eq!(*lock(&m), vec![1, 2, 3]);
    }
}
