//! Locks a panic left held are never served from.
//!
//! A mutex is poisoned when a thread panicked while holding it: what it
//! guards (the journal's state and its open database transaction, a
//! table of objects, the settler's queue) may be half-changed, and an
//! answer built on it could be wrong with nothing to say so. Every lock
//! of the daemon is taken through [`lock`], [`read`] or [`write`], which
//! give the guard while the lock is sound and otherwise end the request
//! that met it: they unwind with a message naming the lock
//! ([`std::panic::resume_unwind`], so no second panic report is logged).
//! Each place a request or a thread starts already catches unwinding, and
//! that is where the refusal becomes an answer: a FUSE request is
//! answered EIO (`fs::no_lost_worker`), a control request gets an error
//! naming the lock (`daemon::control`), a background thread turns the
//! mount read-only (`daemon::spawn_guarded`). Requests that never take
//! the poisoned lock (reading live files) go on.
//!
//! The one exception is a thread that is already unwinding (a destructor
//! run by a panic): unwinding again would abort the whole daemon, so it
//! gets the guard, to finish the clean-up it was doing.
//!
//! The bottom of the layering: it imports nothing from the crate.

use std::sync::{Condvar, LockResult, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The message a request that met the poisoned lock `what` unwinds with.
pub fn refusal(what: &str) -> String {
    format!(
        "{what} was left half-changed by an earlier failure (a panic; see the daemon log) and is not used again; \
         unmount and mount again"
    )
}

/// The guard of a lock taken, or the refusal if a panic left it held.
pub fn checked<G>(result: LockResult<G>, what: &str) -> G {
    result.unwrap_or_else(|poisoned: PoisonError<G>| {
        if std::thread::panicking() {
            return poisoned.into_inner();
        }
        log::error!("refused: {}", refusal(what));
        std::panic::resume_unwind(Box::new(refusal(what)))
    })
}

/// `m`, locked; `what` names what it guards, for the refusal.
pub fn lock<'a, T>(m: &'a Mutex<T>, what: &str) -> MutexGuard<'a, T> {
    checked(m.lock(), what)
}

/// `l`, shared.
pub fn read<'a, T>(l: &'a RwLock<T>, what: &str) -> RwLockReadGuard<'a, T> {
    checked(l.read(), what)
}

/// `l`, exclusively.
pub fn write<'a, T>(l: &'a RwLock<T>, what: &str) -> RwLockWriteGuard<'a, T> {
    checked(l.write(), what)
}

/// Waits on `c` with `guard` (of the lock `what`).
pub fn wait<'a, T>(c: &Condvar, guard: MutexGuard<'a, T>, what: &str) -> MutexGuard<'a, T> {
    match c.wait(guard) {
        Ok(g) => g,
        Err(p) => checked(Err(PoisonError::new(p.into_inner())), what),
    }
}

/// Waits on `c` with `guard` (of the lock `what`) for at most `timeout`.
pub fn wait_timeout<'a, T>(
    c: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: std::time::Duration,
    what: &str,
) -> MutexGuard<'a, T> {
    match c.wait_timeout(guard, timeout) {
        Ok((g, _)) => g,
        Err(p) => checked(Err(PoisonError::new(p.into_inner().0)), what),
    }
}

/// `m`, locked if free now (None if another thread holds it).
pub fn try_lock<'a, T>(m: &'a Mutex<T>, what: &str) -> Option<MutexGuard<'a, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::WouldBlock) => None,
        Err(std::sync::TryLockError::Poisoned(p)) => Some(checked(Err(p), what)),
    }
}

/// `l`, shared if free now (None if a writer holds it).
pub fn try_read<'a, T>(l: &'a RwLock<T>, what: &str) -> Option<RwLockReadGuard<'a, T>> {
    match l.try_read() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::WouldBlock) => None,
        Err(std::sync::TryLockError::Poisoned(p)) => Some(checked(Err(p), what)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic::{AssertUnwindSafe, catch_unwind};

    fn poisoned() -> Mutex<u32> {
        let m = Mutex::new(1);
        let _ = catch_unwind(AssertUnwindSafe(|| {
            let mut g = m.lock().expect("fresh");
            *g = 2;
            panic!("half-way");
        }));
        assert!(m.is_poisoned());
        m
    }

    #[test]
    fn a_sound_lock_is_given() {
        let m = Mutex::new(7);
        assert_eq!(*lock(&m, "the number"), 7);
        assert_eq!(try_lock(&m, "the number").map(|g| *g), Some(7));
    }

    #[test]
    fn a_poisoned_lock_ends_the_request_with_a_message_naming_it() {
        let m = poisoned();
        for taken in [
            catch_unwind(AssertUnwindSafe(|| drop(lock(&m, "the number")))),
            catch_unwind(AssertUnwindSafe(|| drop(try_lock(&m, "the number")))),
        ] {
            let payload = taken.expect_err("served from a poisoned lock");
            let message = payload.downcast_ref::<String>().expect("a message");
            assert!(message.starts_with("the number was left half-changed"), "{message}");
        }
    }

    #[test]
    fn a_poisoned_rwlock_is_refused_shared_and_exclusively() {
        let l = RwLock::new(());
        let _ = catch_unwind(AssertUnwindSafe(|| {
            let _g = l.write().expect("fresh");
            panic!("half-way");
        }));
        assert!(catch_unwind(AssertUnwindSafe(|| drop(read(&l, "the tree")))).is_err());
        assert!(catch_unwind(AssertUnwindSafe(|| drop(write(&l, "the tree")))).is_err());
        assert!(catch_unwind(AssertUnwindSafe(|| drop(try_read(&l, "the tree")))).is_err());
    }

    #[test]
    fn a_destructor_run_by_a_panic_still_gets_the_guard() {
        struct CleansUp<'a>(&'a Mutex<u32>, &'a std::sync::atomic::AtomicU32);
        impl Drop for CleansUp<'_> {
            fn drop(&mut self) {
                self.1.store(*lock(self.0, "the number"), std::sync::atomic::Ordering::SeqCst);
            }
        }
        let m = poisoned();
        let seen = std::sync::atomic::AtomicU32::new(0);
        let _ = catch_unwind(AssertUnwindSafe(|| {
            let _c = CleansUp(&m, &seen);
            panic!("another failure");
        }));
        assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
