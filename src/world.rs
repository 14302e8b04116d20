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

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use crate::workspace::Ino;

/// How long invalidation may make no progress while an operation waits
/// for the frozen tree before the tree is released (a notification takes
/// microseconds; a stalled one waits for a lock only a waiting request
/// can give back).
pub const STALL: Duration = Duration::from_millis(10);

/// Kernel cache entries a restore or a rewind made stale, told to the
/// kernel ([`KernelCache`]) when the tree is thawed.
#[derive(Default, Debug)]
pub struct Touched {
    pub entries: BTreeSet<(Ino, OsString)>,
    pub inodes: BTreeSet<Ino>,
}

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
    /// History operations waiting to freeze the tree (see
    /// [`Ordinary::freeze_wanted`]).
    freezing: AtomicUsize,
}

/// An ordinary operation: the tree does not change under it.
#[must_use]
pub struct Ordinary<'a> {
    world: &'a World,
    _shared: RwLockReadGuard<'a, ()>,
}

/// Proof that the tree lock is held for `'g`, shared by an [`Ordinary`]
/// operation or exclusively by a [`Frozen`] one: what a view of the past
/// (`TreeView`, `Browser`), `restore` and `rewind` require, so that code
/// without the lock does not compile. Only the guards make one.
#[derive(Clone, Copy)]
pub struct Held<'g> {
    _lock: PhantomData<&'g ()>,
}

impl Ordinary<'_> {
    /// The tree lock this operation holds.
    pub fn held(&self) -> Held<'_> {
        Held { _lock: PhantomData }
    }

    /// Whether a rewind or restore waits to freeze the tree, for this
    /// operation to end: a long one that can be done again later (the
    /// statistics of a sealed turn) gives way rather than hold the rewind
    /// for its whole length.
    pub fn freeze_wanted(&self) -> bool {
        self.world.freezing.load(Ordering::SeqCst) > 0
    }
}

/// An operation that changes history; others wait for it to end.
#[must_use]
pub struct HistoryOp<'a> {
    world: &'a World,
    _serial: MutexGuard<'a, ()>,
}

/// What the tree lock and the history lock are called when a panic left
/// one held ([`crate::poison`]): a frozen-tree operation or a history
/// operation that stopped half-way.
const TREE: &str = "the tree (a rewind or restore stopped half-way)";
const HISTORY: &str = "the history lock";

impl World {
    pub fn new() -> World {
        World::default()
    }

    /// Enters an ordinary operation; waits while the tree is frozen.
    pub fn op(&self) -> Ordinary<'_> {
        let shared = match crate::poison::try_read(&self.tree, TREE) {
            Some(g) => g,
            None => {
                let _waiting = Counted::enter(&self.waiting);
                crate::poison::read(&self.tree, TREE)
            }
        };
        Ordinary { world: self, _shared: shared }
    }

    /// Starts an operation that changes history, after the one in progress.
    pub fn history(&self) -> HistoryOp<'_> {
        HistoryOp { world: self, _serial: crate::poison::lock(&self.history, HISTORY) }
    }

    /// As `history`, or None when one is in progress.
    pub fn try_history(&self) -> Option<HistoryOp<'_>> {
        let serial = crate::poison::try_lock(&self.history, HISTORY)?;
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
        let exclusive = {
            let _wanting = Counted::enter(&self.world.freezing);
            crate::poison::write(&self.world.tree, TREE)
        };
        Frozen { world: self.world, exclusive: Some(exclusive), cache, touched: Touched::default() }
    }
}

/// One more in a count while it lives (also when unwinding).
struct Counted<'a>(&'a AtomicUsize);

impl<'a> Counted<'a> {
    fn enter(count: &'a AtomicUsize) -> Counted<'a> {
        count.fetch_add(1, Ordering::SeqCst);
        Counted(count)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
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

    /// The tree lock this operation holds (exclusively).
    pub fn held(&self) -> Held<'_> {
        Held { _lock: PhantomData }
    }

    /// The lock and where the stale entries go, at once: a change reads
    /// the past while it notes what it touched.
    pub fn parts(&mut self) -> (Held<'_>, &mut Touched) {
        (Held { _lock: PhantomData }, &mut self.touched)
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
