//! The world lock: what makes a rewind or a restore atomic for everyone
//! else, and what keeps operations that change history one at a time.
//!
//! Two locks, because they guard different things:
//! - the **tree lock** is held shared by every ordinary operation (each
//!   FUSE request, each settler step, each read-only control request) and
//!   exclusively while a rewind or restore changes the tree ([`Frozen`]):
//!   nobody sees a mix of the old tree and the new;
//! - the **history lock** ([`HistoryOp`]) is held by every control
//!   operation that changes history (turn, restore, rewind, unmount) for
//!   its whole length, and auto-turn skips its tick while it is held: a
//!   checkpoint is never sealed inside another operation's turn.
//!
//! A frozen section ends by telling the kernel to forget what it changed
//! ([`Frozen::thaw`], also run on drop, so a failure part-way invalidates
//! too). That is done on a helper thread while the tree stays frozen: the
//! kernel takes the parent directory's lock to expire an entry, and a
//! process whose request waits for the tree lock may hold it. If the
//! helper makes no progress for [`STALL`] while some operation waits, the
//! tree is released early and the helper finishes after; the history lock
//! is kept until it has, so no command answers before the kernel's caches
//! are right.

use std::ffi::OsStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};
use std::time::{Duration, Instant};

use crate::restore::Touched;
use crate::workspace::Ino;

/// How long invalidation may make no progress while an operation waits
/// for the frozen tree before the tree is released (a notification takes
/// microseconds; a stalled one waits for a lock only a waiting request
/// can give back).
pub const STALL: Duration = Duration::from_millis(10);

/// Where the kernel's caches of the live mount are told what changed.
pub trait KernelCache: Sync {
    /// The cached entry `name` in `parent` must be looked up again.
    fn expire_entry(&self, parent: Ino, name: &OsStr);
    /// The cached attributes and pages of `ino` are stale.
    fn forget_inode(&self, ino: Ino);
}

/// The locks of one mounted workspace (see the module documentation).
#[derive(Default, Debug)]
pub struct World {
    tree: RwLock<()>,
    history: Mutex<()>,
    /// Ordinary operations waiting for a frozen tree.
    waiting: AtomicUsize,
}

/// An ordinary operation: the tree does not change under it.
#[must_use]
pub struct Ordinary<'a> {
    _shared: RwLockReadGuard<'a, ()>,
}

/// An operation that changes history; others wait for it to end.
#[must_use]
pub struct HistoryOp<'a> {
    world: &'a World,
    _serial: MutexGuard<'a, ()>,
}

impl World {
    pub fn new() -> World {
        World::default()
    }

    /// Enters an ordinary operation; waits while the tree is frozen.
    pub fn op(&self) -> Ordinary<'_> {
        let shared = match self.tree.try_read() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                self.waiting.fetch_add(1, Ordering::SeqCst);
                let g = self.tree.read().unwrap_or_else(|p| p.into_inner());
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                g
            }
        };
        Ordinary { _shared: shared }
    }

    /// Starts an operation that changes history, after the one in progress.
    pub fn history(&self) -> HistoryOp<'_> {
        HistoryOp { world: self, _serial: self.history.lock().unwrap_or_else(|p| p.into_inner()) }
    }

    /// As `history`, or None when one is in progress.
    pub fn try_history(&self) -> Option<HistoryOp<'_>> {
        let serial = match self.history.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        Some(HistoryOp { world: self, _serial: serial })
    }

    fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }
}

impl HistoryOp<'_> {
    /// Freezes the tree: no ordinary operation runs until the result is
    /// dropped or thawed, and then the kernel forgets what was touched.
    pub fn freeze<'h>(&'h self, cache: &'h dyn KernelCache) -> Frozen<'h> {
        let exclusive = self.world.tree.write().unwrap_or_else(|p| p.into_inner());
        Frozen { world: self.world, exclusive: Some(exclusive), cache, touched: Touched::default() }
    }
}

/// The tree, frozen by a history operation.
#[must_use]
pub struct Frozen<'h> {
    world: &'h World,
    exclusive: Option<RwLockWriteGuard<'h, ()>>,
    cache: &'h dyn KernelCache,
    touched: Touched,
}

/// How a frozen section ended.
#[derive(Clone, Copy, Debug, Default)]
pub struct Thawed {
    pub entries: usize,
    pub inodes: usize,
    /// Time spent telling the kernel.
    pub invalidation: Duration,
    /// The tree was released before every notification was written
    /// (invalidation stalled while a request waited).
    pub released_early: bool,
}

impl Frozen<'_> {
    /// Where the operation records the kernel cache entries it makes stale.
    pub fn touched(&mut self) -> &mut Touched {
        &mut self.touched
    }

    /// Tells the kernel what changed, then lets ordinary operations run.
    pub fn thaw(mut self) -> Thawed {
        self.invalidate()
    }

    fn invalidate(&mut self) -> Thawed {
        let started = Instant::now();
        let touched = std::mem::take(&mut self.touched);
        let mut thawed = Thawed { entries: touched.entries.len(), inodes: touched.inodes.len(), ..Thawed::default() };
        if thawed.entries + thawed.inodes > 0 {
            let (cache, touched) = (self.cache, &touched);
            // Counted, not signalled per notification: this thread wakes
            // only when the helper is done or every STALL to check on it.
            let sent = AtomicUsize::new(0);
            let (finished, done) = mpsc::channel::<()>();
            std::thread::scope(|s| {
                let sent = &sent;
                let helper = std::thread::Builder::new().name("invalidate".into()).spawn_scoped(s, move || {
                    notify(cache, touched, sent);
                    drop(finished);
                });
                let helper = match helper {
                    Ok(h) => h,
                    Err(e) => {
                        log::warn!("cannot start the invalidation thread ({e}); invalidating after the release");
                        self.exclusive = None;
                        thawed.released_early = true;
                        notify(cache, touched, sent);
                        return;
                    }
                };
                let mut seen = 0;
                while let Err(RecvTimeoutError::Timeout) = done.recv_timeout(STALL) {
                    let now = sent.load(Ordering::SeqCst);
                    if now == seen && self.exclusive.is_some() && self.world.waiting() > 0 {
                        log::info!(
                            "invalidation stalled for {STALL:?} while {} operations wait; \
                             releasing the tree before it ends",
                            self.world.waiting()
                        );
                        self.exclusive = None;
                        thawed.released_early = true;
                    }
                    seen = now;
                }
                if helper.join().is_err() {
                    log::error!("the invalidation thread panicked; some kernel cache entries may be stale");
                }
            });
        }
        thawed.invalidation = started.elapsed();
        self.exclusive = None;
        thawed
    }
}

/// Tells the kernel about every touched entry and inode, counting them.
fn notify(cache: &dyn KernelCache, touched: &Touched, sent: &AtomicUsize) {
    for (dir, name) in &touched.entries {
        cache.expire_entry(*dir, name);
        sent.fetch_add(1, Ordering::SeqCst);
    }
    for ino in &touched.inodes {
        cache.forget_inode(*ino);
        sent.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        if self.exclusive.is_some() {
            self.invalidate();
        }
    }
}

/// Hooks the tests arm through the environment of the daemon; compiled
/// only with the `test-hooks` feature (on in `cargo test` builds, off in
/// every build that is shipped).
#[cfg(feature = "test-hooks")]
pub mod test_hooks {
    /// Name whose lookup panics in the live mount's FUSE handler.
    pub const PANIC_NAME: &str = "rewindfs-test-panic";

    use std::sync::Mutex;

    /// What the daemon is doing, for `record` (`rewind`, `restore`).
    static PHASE: Mutex<Option<&'static str>> = Mutex::new(None);
    static REACHED: Mutex<Vec<(String, u64)>> = Mutex::new(Vec::new());

    /// How many times `key` was reached, this one included.
    fn reach(key: &str) -> u64 {
        let mut reached = REACHED.lock().unwrap_or_else(|p| p.into_inner());
        match reached.iter_mut().find(|(p, _)| p == key) {
            Some((_, c)) => {
                *c += 1;
                *c
            }
            None => {
                reached.push((key.to_string(), 1));
                1
            }
        }
    }

    /// `REWINDFS_TEST_KILL_AT=POINT:N` kills the daemon with SIGKILL the
    /// N-th time (from 1) it reaches `POINT`: a crash at a chosen place,
    /// with nothing cleaned up, exactly as `kill -9` would leave it.
    pub fn kill_point(point: &str) {
        let Ok(spec) = std::env::var("REWINDFS_TEST_KILL_AT") else { return };
        let Some((name, n)) = spec.rsplit_once(':') else { return };
        if name != point {
            return;
        }
        let Ok(n) = n.parse::<u64>() else { return };
        if reach(point) == n {
            log::warn!("test hook: killing the daemon at {point} #{n}");
            let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        }
    }

    /// `REWINDFS_TEST_FAIL_AT=POINT:N`: whether this reach of `POINT` must
    /// fail (the N-th, from 1), so a test can make one step of a
    /// multi-step change fail and check that the earlier steps are undone.
    pub fn fail_point(point: &str) -> bool {
        let Ok(spec) = std::env::var("REWINDFS_TEST_FAIL_AT") else { return false };
        let Some((name, n)) = spec.rsplit_once(':') else { return false };
        if name != point {
            return false;
        }
        let Ok(n) = n.parse::<u64>() else { return false };
        let count = reach(&format!("fail:{point}"));
        if count == n {
            log::warn!("test hook: failing at {point} #{n}");
        }
        count == n
    }

    /// `REWINDFS_TEST_PANIC_IN=NAME` makes the daemon's background thread
    /// NAME panic at its next step, so a test can see what a failed
    /// background thread leaves (a read-only mount that says why).
    pub fn panic_point(name: &str) {
        if std::env::var("REWINDFS_TEST_PANIC_IN").is_ok_and(|v| v == name) {
            panic!("test hook: the {name} thread panics");
        }
    }

    /// Sets what the daemon is doing (None: nothing the hooks watch).
    pub fn phase(what: Option<&'static str>) {
        *PHASE.lock().unwrap_or_else(|p| p.into_inner()) = what;
    }

    /// A journal record was appended: `<phase>-record` is a kill point.
    pub fn record() {
        let phase = *PHASE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = phase {
            kill_point(&format!("{p}-record"));
        }
    }

    /// Keeps a frozen rewind or restore frozen this long after it changed
    /// the tree and before it seals its result
    /// (`REWINDFS_TEST_HOLD_FROZEN_MS`), so a test can race it.
    pub fn hold_frozen() {
        if let Some(ms) = std::env::var("REWINDFS_TEST_HOLD_FROZEN_MS").ok().and_then(|v| v.parse::<u64>().ok()) {
            log::warn!("test hook: holding the frozen tree {ms} ms");
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
    }

    /// Whether the journal must fail to become durable, as on a full or
    /// failing store: while the file named by `REWINDFS_TEST_FAIL_SYNC_WHILE`
    /// exists.
    pub fn sync_fails() -> bool {
        std::env::var_os("REWINDFS_TEST_FAIL_SYNC_WHILE").is_some_and(|p| std::path::Path::new(&p).exists())
    }

    /// Pauses the background turn-statistics thread in a view lookup,
    /// between the records and the live tree, while the file named by
    /// `REWINDFS_TEST_STATS_PAUSE` exists (it writes `<that>.reached` when
    /// it first waits), so a test can run a rewind in that window.
    pub fn view_lookup() {
        if std::thread::current().name() == Some(crate::report::TURN_STATS_THREAD) {
            wait_while("REWINDFS_TEST_STATS_PAUSE", "the turn statistics wait in a view lookup");
        }
    }

    /// Waits while the file named by `$var` exists, writing `<that>.reached`
    /// when it first waits.
    fn wait_while(var: &str, what: &str) {
        let Some(pause) = std::env::var_os(var) else { return };
        let pause = std::path::PathBuf::from(pause);
        if pause.exists() {
            let mut reached = pause.clone().into_os_string();
            reached.push(".reached");
            let _ = std::fs::write(reached, b"");
            log::warn!("test hook: {what}");
        }
        while pause.exists() {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// The time a collection goes by, when `REWINDFS_TEST_NOW_MS` is set
    /// (Unix milliseconds): "older than D days" without waiting D days.
    pub fn now_ms() -> Option<i64> {
        std::env::var("REWINDFS_TEST_NOW_MS").ok().and_then(|v| v.parse().ok())
    }

    /// How many records a collection merges per transaction
    /// (`REWINDFS_TEST_GC_BATCH_ROWS`), so a small turn takes several.
    pub fn gc_batch_rows() -> Option<usize> {
        std::env::var("REWINDFS_TEST_GC_BATCH_ROWS").ok().and_then(|v| v.parse().ok()).filter(|&n| n > 0)
    }

    /// Holds a collection between two of its batches (the locks free)
    /// while the file named by `REWINDFS_TEST_GC_PAUSE` exists (it writes
    /// `<that>.reached` when it first waits), so a test can write and read
    /// views in that window.
    pub fn gc_batch_pause() {
        wait_while("REWINDFS_TEST_GC_PAUSE", "the collection waits between two batches");
    }

    /// The control socket's request deadline (`REWINDFS_TEST_REQUEST_DEADLINE_MS`),
    /// so a test sees an idle connection closed without waiting 30 s.
    pub fn request_deadline() -> Option<std::time::Duration> {
        std::env::var("REWINDFS_TEST_REQUEST_DEADLINE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(std::time::Duration::from_millis)
    }

    /// Whether the background settler waits: while the file named by
    /// `REWINDFS_TEST_SETTLER_PAUSE` exists (opens still settle), so a test
    /// can damage the store while rewound files are pending.
    pub fn settler_paused() -> bool {
        std::env::var_os("REWINDFS_TEST_SETTLER_PAUSE").is_some_and(|p| std::path::Path::new(&p).exists())
    }
}

/// What the tests' hooks become in a shipped build: nothing.
#[cfg(not(feature = "test-hooks"))]
pub mod test_hooks {
    pub fn hold_frozen() {}
    pub fn view_lookup() {}
    pub fn sync_fails() -> bool {
        false
    }
    pub fn settler_paused() -> bool {
        false
    }
    pub fn gc_batch_rows() -> Option<usize> {
        None
    }
    pub fn gc_batch_pause() {}
    pub fn request_deadline() -> Option<std::time::Duration> {
        None
    }
    pub fn kill_point(_point: &str) {}
    pub fn fail_point(_point: &str) -> bool {
        false
    }
    pub fn now_ms() -> Option<i64> {
        None
    }
    pub fn phase(_what: Option<&'static str>) {}
    pub fn panic_point(_name: &str) {}
    pub fn record() {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    /// Records notifications; `block` makes the first one wait until an
    /// ordinary operation has run (as the kernel waits for a directory lock
    /// a waiting request holds).
    struct Recorder {
        log: Mutex<Vec<String>>,
        block_until_op: AtomicBool,
        op_ran: AtomicBool,
    }

    impl KernelCache for Recorder {
        fn expire_entry(&self, parent: Ino, name: &OsStr) {
            while self.block_until_op.load(Ordering::SeqCst) && !self.op_ran.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            self.log.lock().unwrap().push(format!("entry {} {}", parent.0, name.to_string_lossy()));
        }
        fn forget_inode(&self, ino: Ino) {
            self.log.lock().unwrap().push(format!("inode {}", ino.0));
        }
    }

    fn recorder(block: bool) -> Recorder {
        Recorder { log: Mutex::new(Vec::new()), block_until_op: AtomicBool::new(block), op_ran: AtomicBool::new(false) }
    }

    #[test]
    fn invalidation_ends_before_the_tree_thaws() {
        let world = Arc::new(World::new());
        let cache = recorder(false);
        let history = world.history();
        let mut frozen = history.freeze(&cache);
        frozen.touched().entries.insert((Ino(1), OsString::from("a")));
        frozen.touched().inodes.insert(Ino(1));
        let w = world.clone();
        let c = &cache;
        std::thread::scope(|s| {
            let op = s.spawn(move || {
                let _op = w.op();
                // The operation runs after every notification was sent.
                c.log.lock().unwrap().len()
            });
            std::thread::sleep(Duration::from_millis(30));
            let thawed = frozen.thaw();
            assert!(!thawed.released_early);
            assert_eq!(op.join().unwrap(), 2, "an operation ran before the kernel was told");
        });
        assert_eq!(*cache.log.lock().unwrap(), vec!["entry 1 a".to_string(), "inode 1".to_string()]);
    }

    #[test]
    fn a_stalled_invalidation_releases_the_tree_instead_of_deadlocking() {
        let world = Arc::new(World::new());
        let cache = recorder(true);
        let history = world.history();
        let mut frozen = history.freeze(&cache);
        frozen.touched().entries.insert((Ino(1), OsString::from("a")));
        let (w, c) = (world.clone(), &cache);
        std::thread::scope(|s| {
            s.spawn(move || {
                let _op = w.op();
                c.op_ran.store(true, Ordering::SeqCst);
            });
            // Let the operation start waiting.
            while world.waiting() == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            let thawed = frozen.thaw();
            assert!(thawed.released_early);
        });
        assert_eq!(*cache.log.lock().unwrap(), vec!["entry 1 a".to_string()]);
    }

    #[test]
    fn dropping_a_frozen_tree_still_invalidates() {
        let world = Arc::new(World::new());
        let cache = recorder(false);
        {
            let history = world.history();
            let mut frozen = history.freeze(&cache);
            frozen.touched().entries.insert((Ino(7), OsString::from("b")));
            // An error return: no thaw.
        }
        assert_eq!(*cache.log.lock().unwrap(), vec!["entry 7 b".to_string()]);
        assert!(world.try_history().is_some(), "the history lock is free again");
    }

    #[test]
    fn history_operations_are_one_at_a_time() {
        let world = World::new();
        let first = world.history();
        assert!(world.try_history().is_none());
        drop(first);
        assert!(world.try_history().is_some());
    }
}
