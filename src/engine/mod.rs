//! The core of one workspace: the live tree, its journal and the world
//! lock, composed once, with the operations on history as methods.
//!
//! Reads go through [`Workspace::read`], a guard that holds the tree lock
//! shared; views, diffs, `log` and `history` are reached through it. Every
//! operation that changes history takes the history lock, and the ones that
//! change the tree (restore, rewind, the put-back of unsettled files) run
//! through one [`Transaction`]: frozen tree, "before" seal, intents,
//! change, result seal, thaw. The daemon and the FUSE adapters sit on top
//! (socket, access policy, sessions, threads); the in-process model tier
//! drives it directly.
//!
//! It imports only the layers below it: nothing from `fs`, `daemon` or `cli`.

mod history;
pub mod identity;
pub mod replies;
mod transaction;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::sync::{Arc, OnceLock};

use log::{info, warn};

use crate::error::{AsErrno, Error, Failure, Result};
use crate::journal::{Journal, JournalError, TurnInfo};
use crate::meta::{IntentOp, Reason};
use crate::store::ChunkStore;
use crate::view::TreeView;
use crate::view::browse::Browser;
use crate::workspace::pending::SettleStep;
use crate::workspace::{Ino, LiveTree, Opener};
use crate::world::{Held, HistoryOp, KernelCache, Ordinary, World};

pub use history::RESET_UNCONFIRMED;
pub use transaction::Transaction;

/// What [`Workspace::open`] opens.
#[derive(Clone)]
pub struct Options {
    /// The workspace directory (the backing tree).
    pub workspace: PathBuf,
    /// Where the tree is served, for messages (the workspace in place).
    pub mountpoint: PathBuf,
    /// The store directory: database, journal log, attic and packs.
    pub store: PathBuf,
    /// The chunk store, when not the store directory's packs (an in-memory
    /// or fault-injecting store a test keeps across a reopen).
    pub chunks: Option<Arc<dyn ChunkStore>>,
    /// Record pre-images (off only to measure what recording costs).
    pub record: bool,
    /// Give up the rewinds and restores interrupted before this open rather
    /// than complete them.
    pub abandon_interrupted: bool,
    /// How the live tree opens objects by handle: `Opener::ByHandle`
    /// (needs CAP_DAC_READ_SEARCH) unless a test chooses otherwise.
    pub opener: Opener,
}

impl Options {
    /// A recording workspace over the store directory's packs.
    pub fn new(workspace: &Path, store: &Path) -> Options {
        Options {
            workspace: workspace.to_path_buf(),
            mountpoint: workspace.to_path_buf(),
            store: store.to_path_buf(),
            chunks: None,
            record: true,
            abandon_interrupted: false,
            opener: Opener::ByHandle,
        }
    }
}

/// One open workspace: tree, journal, world (see the module documentation).
pub struct Workspace {
    tree: Arc<LiveTree>,
    journal: Arc<Journal>,
    world: Arc<World>,
    store: PathBuf,
    /// The chunks are the store directory's packs (not a store given in
    /// [`Options::chunks`]), so the directory's checks apply.
    packs: bool,
    mountpoint: PathBuf,
    /// Told what a frozen section changed; nothing until a mount attaches one.
    kernel: OnceLock<Box<dyn KernelCache + Send>>,
    /// What serves `.rewindfs/` in the live mount, whose entries of a
    /// forgotten checkpoint must be expired.
    hidden: OnceLock<Arc<Browser>>,
    /// Sealed turns whose `log` statistics are to be computed.
    turn_stats: OnceLock<Sender<i64>>,
    recovered: Vec<crate::rewind::recovery::Recovered>,
}

/// A kernel that caches nothing: before a mount, and in tests.
struct NoKernel;

impl KernelCache for NoKernel {
    fn expire_entry(&self, _parent: Ino, _name: &OsStr) {}
    fn forget_inode(&self, _ino: Ino) {}
}

impl Workspace {
    /// Opens the journal and the live tree, reloads the rewound files still
    /// waiting for their bytes, records what changed outside since the last
    /// close, and completes (or, with `abandon_interrupted`, gives up) the
    /// rewinds and restores a crash interrupted: after it, the tree is whole
    /// and can be served.
    pub fn open(options: &Options) -> Result<Workspace> {
        let journal = Arc::new(match &options.chunks {
            Some(chunks) => Journal::open_dir_with(&options.store, chunks.clone())?,
            None => Journal::open_dir(&options.store)?,
        });
        // The records name files by handle: a store of another directory
        // that was at this path would read as damage everywhere.
        journal
            .with_meta(|m| Ok::<_, crate::meta::MetaError>(identity::check(m, &options.store, &options.workspace)))
            .map_err(|e| Error::Daemon(format!("cannot read the store: {e}")))??;
        // So `fsck --store` can find the workspace whose inodes views read.
        if let Err(e) = journal.with_meta(|m| m.set_state_bytes("workspace", options.workspace.as_os_str().as_bytes()))
        {
            warn!("cannot record the workspace path in the store: {e}");
        }
        let recording = if options.record { Some(journal.clone()) } else { None };
        if !options.record {
            warn!("recording is off for {}: nothing will be undoable", options.workspace.display());
        }
        let tree = Arc::new(
            LiveTree::new(&options.workspace, recording, options.opener)?
                .with_attic(&crate::store_dir::StoreDir::new(&options.store).attic())?,
        );
        match tree.settler().load() {
            Ok(0) => {}
            Ok(n) => info!("{n} rewound files still need their content; the settler resumes"),
            Err(e) => return Err(Error::Daemon(format!("cannot read pending files: {e}"))),
        }
        if let Some(since) = journal.outside_since_ns() {
            // Before serving, nothing else changes the tree under us.
            let changed = tree
                .backing()
                .scan_changed_since(since)
                .map_err(|e| Error::Daemon(format!("cannot scan the workspace for outside changes: {e}")))?
                .into_iter()
                .map(|c| (c.handle, c.kind.code(), c.born_ns))
                .collect::<Vec<_>>();
            journal.record_outside_changes(&changed).map_err(|e| Error::Daemon(e.to_string()))?;
        }
        let mut ws = Workspace {
            tree,
            journal,
            world: Arc::new(World::new()),
            store: options.store.clone(),
            packs: options.chunks.is_none(),
            mountpoint: options.mountpoint.clone(),
            kernel: OnceLock::new(),
            hidden: OnceLock::new(),
            turn_stats: OnceLock::new(),
            recovered: Vec::new(),
        };
        // After the scan (what recovery changes is recorded) and before the
        // tree is served: nobody sees a half state.
        ws.recovered = ws.recover(options.abandon_interrupted)?;
        Ok(ws)
    }

    /// Opens the history of an unmounted workspace for reading only: its
    /// database and packs read-only, the live tree unrecorded, nothing
    /// completed, scanned or written (`log`, `diff`, `history`, `du` and a
    /// `show` view after the mount ended). The caller holds the store's
    /// lock so no daemon changes it meanwhile. Refused when the journal log
    /// holds records a killed daemon did not fold in: only a mount folds
    /// them, and without them the history is not whole.
    pub fn open_read_only(workspace: &Path, store: &Path) -> Result<Workspace> {
        let dir = crate::store_dir::StoreDir::new(store);
        let log = dir.journal_log();
        if crate::journal::record_log::RecordLog::holds_records(&log) {
            return Err(Error::kind_of(
                crate::error::ErrorKind::Failed,
                format!(
                    "{} holds records its last daemon did not fold into the history (it was killed); \
                     `rewindfs mount {}` folds them in, then the history can be read",
                    log.display(),
                    workspace.display()
                ),
            ));
        }
        let meta = crate::meta::Meta::open_read_only(&dir.meta()).map_err(|e| Error::Daemon(e.to_string()))?;
        let chunks =
            crate::store::Address::pack_read_only(&dir.chunks()).open().map_err(|e| Error::Daemon(e.to_string()))?;
        let journal = Journal::read_only(meta, chunks).map_err(|e| Error::Daemon(e.to_string()))?;
        Ok(Workspace {
            tree: Arc::new(LiveTree::new(workspace, None, Opener::ByHandle)?),
            journal: Arc::new(journal),
            world: Arc::new(World::new()),
            store: store.to_path_buf(),
            packs: true,
            mountpoint: workspace.to_path_buf(),
            kernel: OnceLock::new(),
            hidden: OnceLock::new(),
            turn_stats: OnceLock::new(),
            recovered: Vec::new(),
        })
    }

    /// Where the kernel's caches of the mount are told what a frozen
    /// section changed, and what serves `.rewindfs/` there; set once the
    /// mount exists (before, nothing is cached).
    pub fn attach_kernel(&self, cache: Box<dyn KernelCache + Send>, hidden: Option<Arc<Browser>>) {
        if self.kernel.set(cache).is_err() {
            warn!("the kernel cache of {} was attached twice; the first is kept", self.mountpoint.display());
        }
        if let Some(b) = hidden {
            let _ = self.hidden.set(b);
        }
    }

    /// Where sealed turns are sent to have their `log` statistics computed
    /// off the caller's path (without it, `log` computes them when asked).
    pub fn send_sealed_turns(&self, to: Sender<i64>) {
        let _ = self.turn_stats.set(to);
    }

    pub fn tree(&self) -> &Arc<LiveTree> {
        &self.tree
    }

    pub fn journal(&self) -> &Arc<Journal> {
        &self.journal
    }

    pub fn world(&self) -> &Arc<World> {
        &self.world
    }

    /// The store directory.
    pub fn store_dir(&self) -> &Path {
        &self.store
    }

    /// What serves `.rewindfs/`, once a mount attached it.
    pub fn hidden_views(&self) -> Option<&Arc<Browser>> {
        self.hidden.get()
    }

    /// The interrupted operations this open completed or gave up.
    pub fn recovered(&self) -> &[crate::rewind::recovery::Recovered] {
        &self.recovered
    }

    fn kernel(&self) -> &dyn KernelCache {
        match self.kernel.get() {
            Some(k) => &**k,
            None => &NoKernel,
        }
    }

    /// A read of the tree or its history: the tree does not change while
    /// the guard is held (a rewind or restore waits for it, and it waits
    /// for them).
    pub fn read(&self) -> Reader<'_> {
        Reader { ws: self, op: self.world.op() }
    }

    /// Starts an operation that changes history, after the one in progress.
    pub fn history(&self) -> HistoryOp<'_> {
        self.world.history()
    }

    /// As `history`, or None when one is in progress.
    pub fn try_history(&self) -> Option<HistoryOp<'_>> {
        self.world.try_history()
    }

    /// Freezes the tree and seals the state before a change with the label
    /// `before`, after `check` (run frozen) passes: the one way a history
    /// operation changes the tree.
    pub fn transaction<'h>(
        &'h self,
        history: &'h HistoryOp<'_>,
        check: impl FnOnce(Held<'_>) -> std::result::Result<(), Failure>,
        before: String,
    ) -> std::result::Result<Transaction<'h>, Failure> {
        Transaction::begin(self, history, check, before)
    }

    /// Seals the current turn (the caller holds the history lock).
    pub fn seal(&self, info: &TurnInfo, reason: Reason) -> std::result::Result<i64, Failure> {
        self.seal_on(info, reason, None)
    }

    /// Seals the current turn with `parent` as the new checkpoint's parent.
    pub fn seal_on(&self, info: &TurnInfo, reason: Reason, parent: Option<i64>) -> std::result::Result<i64, Failure> {
        let sealed = seal_with(&self.tree, &self.journal, info, reason, parent)?;
        self.lists_changed();
        // The turn's `log` statistics, off the turn gate and the caller's
        // path: reading contents for line counts must not delay the next turn.
        // (`log` computes any it finds missing, so a lost request costs time only.)
        if let Some(tx) = self.turn_stats.get() {
            let _ = tx.send(sealed - 1);
        }
        Ok(sealed)
    }

    /// The lists of checkpoints under `.rewindfs/` (`checkpoints/`,
    /// `messages/`) changed: the kernel drops the listings it keeps of
    /// them, and their attributes (it keeps every listing when it opens
    /// directories itself, `fs::LiveFs::opendir`). A listing it was reading
    /// across the change is not kept past its next reading from the start:
    /// their mtime is the time they are asked about (`Browser::getattr`),
    /// so it has moved when the kernel asks again. Nothing to do while the
    /// kernel holds neither directory.
    pub(crate) fn lists_changed(&self) {
        let (checkpoints, messages) = self.hidden.get().map(|b| b.listing_dirs()).unwrap_or_default();
        for dir in [checkpoints, messages].into_iter().flatten() {
            self.kernel().forget_inode(dir);
        }
    }

    /// `turn`: seals the current turn as a checkpoint, after the history
    /// operation in progress.
    pub fn turn(&self, info: &TurnInfo) -> std::result::Result<i64, Failure> {
        let _history = self.history();
        self.seal(info, Reason::Turn)
    }

    /// A checkpoint reference, resolved; an unknown or ambiguous one is the
    /// caller's mistake.
    pub fn resolve(&self, reference: &str) -> std::result::Result<i64, Failure> {
        self.journal.resolve(reference).map(|c| c.0).map_err(|e| match e {
            JournalError::UnknownCheckpoint { .. }
            | JournalError::Ambiguous { .. }
            | JournalError::Forgotten { .. } => Failure::usage(e.to_string()),
            e => Failure::failed(e.errno().0, format!("cannot read the checkpoints: {e}")),
        })
    }

    /// Writes one rewound file's bytes, as an ordinary operation (never
    /// while a rewind or restore changes the tree), giving way to one that
    /// waits to freeze the tree: a rewind never waits for a large file to
    /// be written.
    pub fn settle_one(&self) -> std::result::Result<SettleStep, crate::error::Errno> {
        let op = self.world.op();
        let give_way = || op.freeze_wanted();
        self.tree.settler().settle_one(&give_way)
    }

    /// The end of a session over the workspace: the rewound files' bytes
    /// written (the workspace on disk must be the rewound tree once
    /// closed; what cannot be settled stays pending for the next open),
    /// the journal made durable and the close marked clean, so the next
    /// open looks for outside changes only since now. After a panic left
    /// the journal's state held, none of it is done: the next open finds
    /// what was durable and recovers as after a crash.
    pub fn close(&self) {
        if self.journal.poisoned() {
            warn!("the journal's state was left half-changed by a panic: closing without settling or syncing");
            return;
        }
        loop {
            match self.settle_one() {
                // Given way: the next step waits for the frozen tree.
                Ok(SettleStep::Settled | SettleStep::GaveWay) => continue,
                Ok(SettleStep::Idle) => break,
                Err(e) => {
                    warn!("cannot finish writing rewound files ({e}); the next mount resumes");
                    break;
                }
            }
        }
        for u in self.tree.pending().unsettled() {
            warn!(
                "{} could not be settled and stays pending for the next mount: {}",
                crate::workspace::pending::shown_path(u.path.as_deref()),
                u.reason
            );
        }
        if let Err(e) = self.journal.sync().and_then(|_| self.journal.mark_clean_unmount()) {
            warn!("could not make the journal durable at unmount: {e}");
        }
    }

    /// Completes the rewinds and restores the previous daemon died in,
    /// before anything is served. A failure stops the open: a half-changed
    /// tree is never served as if it were whole. With `abandon`, they are
    /// given up instead: the tree stays as it is, the mount checkpoint
    /// (sealed when the journal was opened) is that tree, labelled so.
    fn recover(&self, abandon: bool) -> Result<Vec<crate::rewind::recovery::Recovered>> {
        use crate::rewind::recovery;
        let (tree, journal) = (&self.tree, &self.journal);
        let store = &self.store;
        let refuse = |what: String| {
            Error::kind_of(
                crate::error::ErrorKind::Failed,
                format!(
                    "{what}; the workspace was not mounted. `rewindfs fsck --store {}` checks what the store can \
                     still read back",
                    store.display()
                ),
            )
        };
        let intents =
            journal.open_intents().map_err(|e| refuse(format!("cannot read the interrupted operations: {e}")))?;
        let mut out = Vec::new();
        for intent in intents {
            let what = recovery::describe(&intent);
            let checkpoints = journal.with_checkpoints(|m| m.checkpoints()).map_err(|e| refuse(e.to_string()))?;
            // The result was sealed; only the intent's removal was lost.
            let sealed =
                checkpoints.iter().any(|c| c.checkpoint == intent.undo_checkpoint + 1 && c.reason != Reason::Mount);
            if sealed {
                info!("{what} had finished before the daemon died; nothing to recover");
                journal.end_intent(intent.id).map_err(|e| refuse(e.to_string()))?;
                continue;
            }
            let interrupted = journal.current_turn();
            if abandon {
                let left = recovery::temporaries(tree)
                    .map_err(|e| refuse(format!("{what} was interrupted; cannot look for its temporary files: {e}")))?;
                let label = recovery::abandoned_label(&intent);
                journal.with_checkpoints(|m| m.set_label(interrupted, &label)).map_err(|e| refuse(e.to_string()))?;
                journal.end_intent(intent.id).map_err(|e| refuse(e.to_string()))?;
                let report = recovery::abandoned(&intent, interrupted, &left);
                warn!("{}", report.message);
                out.push(report);
                continue;
            }
            warn!("{what} was interrupted; completing it before mounting");
            let label = format!("state at mount: {what} was interrupted, half applied");
            journal.with_checkpoints(|m| m.set_label(interrupted, &label)).map_err(|e| refuse(e.to_string()))?;
            let stuck = |why: String, unchanged: bool| {
                refuse(format!(
                    "{what} was interrupted (the daemon died) and could not be completed at mount: {why}. {}; \
                     checkpoint {} is the tree before it. `rewindfs mount --abandon-interrupted` gives the \
                     operation up and mounts the tree as it is (sealed as a checkpoint)",
                    if unchanged {
                        "The tree is as the interruption left it"
                    } else {
                        "The tree is as the interruption and this attempt left it (every change recorded)"
                    },
                    intent.undo_checkpoint
                ))
            };
            // Nothing is served yet; the lock is taken all the same, since
            // views and changes of the tree require it.
            let history = self.world.history();
            let mut frozen = history.freeze(&NoKernel);
            // Before anything changes: a completion that cannot read what
            // it needs would stop part-way.
            let unreadable =
                recovery::unreadable(frozen.held(), tree, journal, &intent).map_err(|e| stuck(e.to_string(), true))?;
            if !unreadable.is_empty() {
                let files = crate::rewind::preflight::refusal("completing it", intent.checkpoint, &unreadable);
                return Err(stuck(files, true));
            }
            let changes =
                recovery::complete(&mut frozen, tree, journal, &intent).map_err(|e| stuck(e.to_string(), false))?;
            drop(frozen);
            let (reason, parent) = match intent.op {
                IntentOp::Rewind => (Reason::Rewind, Some(intent.checkpoint)),
                IntentOp::Restore => (Reason::Turn, None),
            };
            let info = TurnInfo { label: Some(recovery::result_label(&intent)), ..Default::default() };
            let result = seal_with(tree, journal, &info, reason, parent).map_err(|f| refuse(f.message))?;
            journal.end_intent(intent.id).map_err(|e| refuse(e.to_string()))?;
            let report = recovery::recovered(&intent, interrupted, result);
            info!("{} ({} changes)", report.message, changes.len());
            out.push(report);
        }
        Ok(out)
    }
}

/// A read of the tree: holds the tree lock shared for its life. Views,
/// diffs, `log`, `history` and `fsck` of a mounted workspace go through it.
#[must_use]
pub struct Reader<'w> {
    ws: &'w Workspace,
    op: Ordinary<'w>,
}

impl<'w> Reader<'w> {
    /// The tree lock this read holds.
    pub fn lock(&self) -> &Ordinary<'w> {
        &self.op
    }

    pub fn tree(&self) -> &'w LiveTree {
        &self.ws.tree
    }

    pub fn journal(&self) -> &'w Journal {
        &self.ws.journal
    }

    /// The tree at checkpoint `checkpoint`.
    pub fn view(&self, checkpoint: i64) -> TreeView<'_> {
        TreeView::at(self.op.held(), &self.ws.tree, &self.ws.journal, checkpoint)
    }

    /// The live tree through the same interface.
    pub fn live(&self) -> TreeView<'_> {
        TreeView::live(self.op.held(), &self.ws.tree, &self.ws.journal)
    }

    /// The tree lock this read holds, for what requires it.
    pub fn held(&self) -> Held<'_> {
        self.op.held()
    }

    /// Every checkpoint with its turn's statistics.
    pub fn log(&self) -> std::result::Result<Vec<crate::report::TurnSummary>, Failure> {
        crate::report::log(self.op.held(), &self.ws.tree, &self.ws.journal)
            .map_err(|e| view_failure("cannot read the history", e))
    }

    /// Computes and stores the `log` statistics of a sealed turn, in the
    /// background: it stops (`ViewError::GaveWay`, nothing stored) when a
    /// rewind or restore waits to freeze the tree, to be done again after.
    pub fn summarize_sealed_turn(&self, turn: i64) -> crate::view::ViewResult<crate::meta::TurnStats> {
        let give_way = || self.op.freeze_wanted();
        crate::report::summarize_sealed_turn(self.op.held(), &self.ws.tree, &self.ws.journal, turn, Some(&give_way))
    }

    /// The changes between checkpoint references `from` and `to` (None:
    /// the live tree), limited to `paths` when some are given.
    pub fn diff(
        &self,
        from: &str,
        to: Option<&str>,
        paths: &[PathBuf],
        patch: bool,
    ) -> std::result::Result<replies::DiffReply, Failure> {
        let a = self.ws.resolve(from)?;
        let b = to.map(|t| self.ws.resolve(t)).transpose()?;
        let va = self.view(a);
        let vb = match b {
            Some(b) => self.view(b),
            None => self.live(),
        };
        let changes =
            crate::report::diff(&va, &vb, paths, patch).map_err(|e| view_failure("cannot compute the diff", e))?;
        Ok(replies::DiffReply { from: a, to: b, changes })
    }

    /// The turns that changed `path`.
    pub fn history(&self, path: &Path) -> std::result::Result<Vec<crate::report::PathEvent>, Failure> {
        crate::report::history(self.op.held(), &self.ws.tree, &self.ws.journal, path)
            .map_err(|e| view_failure(&format!("cannot read the history of {}", path.display()), e))
    }

    /// Checks the store of a mounted workspace (never repairs).
    pub fn fsck(&self) -> std::result::Result<crate::fsck::Report, Failure> {
        let attic = crate::store_dir::StoreDir::new(&self.ws.store).attic();
        let target = crate::fsck::Target {
            journal: &self.ws.journal,
            tree: Some(&self.ws.tree),
            lock: Some(self.op.held()),
            attic: Some(&attic),
            store_dir: self.ws.packs.then_some(self.ws.store.as_path()),
            unserved_since_ns: None,
        };
        crate::fsck::check(&target, &mut |_| {})
            .map_err(|e| Failure::failed(libc::EIO, format!("fsck could not finish: {e}")))
    }

    /// A browser of checkpoint `checkpoint` alone, its root inode 1 (what
    /// a `show` mount serves).
    pub fn browser(&self, checkpoint: i64) -> std::result::Result<Browser, Failure> {
        Browser::single(self.op.held(), self.ws.tree.clone(), self.ws.journal.clone(), checkpoint)
            .map_err(|e| view_failure(&format!("cannot open checkpoint {checkpoint}"), e))
    }
}

/// Seals the current turn; the writers open across it are recorded again.
fn seal_with(
    tree: &Arc<LiveTree>,
    journal: &Arc<Journal>,
    info: &TurnInfo,
    reason: Reason,
    parent: Option<i64>,
) -> std::result::Result<i64, Failure> {
    let (tree, journal) = (tree.clone(), journal.clone());
    let sealed = journal
        .seal_on(info, reason, parent, || {
            // Before the writers are recorded again: the live tree is still
            // the tree at the end of the sealed turn.
            crate::report::note_sealed_turn(&tree, &journal);
            tree.recapture_writers(&journal)
        })
        .map(|c| c.0)
        .map_err(|e| match e {
            // The caller's mistake, not a failure of the store.
            JournalError::BadMessageId { .. }
            | JournalError::DuplicateMessageId { .. }
            | JournalError::MessageIdOverlaps { .. } => Failure::usage(e.to_string()),
            e => Failure::failed(e.errno().0, format!("cannot seal the checkpoint: {e}")),
        })?;
    Ok(sealed)
}

/// A journal refusal (the caller's mistake) or failure.
pub fn journal_failure(e: JournalError) -> Failure {
    match e {
        JournalError::UnknownCheckpoint { .. }
        | JournalError::Ambiguous { .. }
        | JournalError::Forgotten { .. }
        | JournalError::BadSnapshotName { .. }
        | JournalError::DuplicateSnapshotName { .. }
        | JournalError::AlreadyNamed { .. }
        | JournalError::Kept { .. } => Failure::usage(e.to_string()),
        e => Failure::failed(e.errno().0, e.to_string()),
    }
}

fn view_failure(what: &str, e: crate::view::ViewError) -> Failure {
    Failure::failed(e.errno().0, format!("{what}: {e}"))
}

fn restore_failure(message: String, e: &crate::restore::RestoreError) -> Failure {
    let kind = match e {
        crate::restore::RestoreError::BadPath(_) => crate::error::ErrorKind::Usage,
        _ => crate::error::ErrorKind::Failed,
    };
    Failure::new(kind, Some(e.errno().0), message)
}
