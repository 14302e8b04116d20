//! The daemon of one mount: takes the locks, opens the workspace, mounts,
//! publishes itself, serves FUSE and control requests, and cleans up.

pub mod access;
mod auto_gc;
pub mod control;
pub mod protocol;
pub mod registry;
mod transaction;

use std::ffi::OsString;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use log::{info, warn};

use crate::error::{AsErrno, Error, Failure, Result};
use crate::fs::{FsOptions, LiveFs, MountedSession, Passthrough};
use crate::journal::{Journal, JournalError, TurnInfo};
use crate::meta::{IntentOp, Reason};
use crate::sys;
use crate::view::TreeView;
use crate::workspace::LiveTree;
use crate::world::{HistoryOp, World};
use control::{Op, Request, Response};
use registry::MountInfo;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};

/// Everything a daemon needs to serve one mount.
#[derive(Clone, Debug)]
pub struct MountSpec {
    /// Canonical path of the workspace directory.
    pub workspace: PathBuf,
    /// Canonical path of the mountpoint (equal to `workspace` in place).
    pub mountpoint: PathBuf,
    /// Canonical path of the store directory.
    pub store: PathBuf,
    pub passthrough: Passthrough,
    pub cache_timeout: Duration,
    pub threads: usize,
    /// How FUSE requests travel (`mount --transport`).
    pub transport: crate::fs::transport::Transport,
    /// Seal a checkpoint after this long without writes (until a harness
    /// calls `turn`, which turns this off for the rest of the mount).
    pub auto_turn: Option<Duration>,
    /// Record pre-images (off only to measure what recording costs).
    pub record: bool,
    /// The agent's user: may mark turns, read history and preview.
    pub agent_uid: Option<u32>,
    /// Give up the rewinds and restores the previous daemon died in rather
    /// than complete them (`mount --abandon-interrupted`).
    pub abandon_interrupted: bool,
    /// Push sealed checkpoints there (`mount --remote`); stored in the
    /// store, so later mounts without it push there too.
    pub remote: Option<crate::remote::RemoteUrl>,
}

impl MountSpec {
    pub fn in_place(&self) -> bool {
        self.workspace == self.mountpoint
    }
}

/// Mounts and serves until unmounted. `ready` is called once: with the
/// published info when the mount is usable, or with the error that stopped
/// it.
pub fn serve(spec: MountSpec, ready: impl FnOnce(std::result::Result<&MountInfo, &Error>)) -> Result<()> {
    let mut ready = Some(ready);
    let mut report = |r: std::result::Result<&MountInfo, &Error>| {
        if let Some(f) = ready.take() {
            f(r)
        }
    };
    match start(&spec) {
        Ok((session, info, _locks, journal, ctx)) => {
            // The rings register once the session runs: the mount is ready
            // (or, on `--transport uring`, failed) only after that.
            let serving = std::thread::Builder::new()
                .name("fuse-session".into())
                .spawn(move || session.run())
                .map_err(|e| Error::io("cannot start the FUSE session", e))?;
            let mut failed = None;
            match ctx.transport.wait_started(Duration::from_secs(10)) {
                Ok(()) => report(Ok(&info)),
                Err(e) if spec.transport == crate::fs::transport::Transport::Uring => {
                    let err = Error::Daemon(format!("--transport uring: {e}"));
                    report(Err(&err));
                    failed = Some(err);
                    let _ = sys::umount(&spec.mountpoint, true);
                }
                Err(e) => {
                    warn!("{e}; serving through /dev/fuse");
                    report(Ok(&info));
                }
            }
            info!(
                "serving {} on {} (store {})",
                spec.workspace.display(),
                spec.mountpoint.display(),
                spec.store.display()
            );
            let result = serving.join().unwrap_or_else(|_| Err(std::io::Error::other("the FUSE session panicked")));
            for view in ctx.views.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
                // Views read the live tree: they end with it.
                if !view.ended.load(Ordering::Acquire) {
                    let _ = sys::umount(&view.mountpoint, true);
                }
            }
            // The workspace on disk must be the rewound tree once unmounted.
            loop {
                let _op = ctx.world.op();
                match ctx.tree.settler().settle_one() {
                    Ok(true) => continue,
                    Ok(false) => break,
                    Err(e) => {
                        warn!("cannot finish writing rewound files ({e}); the next mount resumes");
                        break;
                    }
                }
            }
            for u in ctx.tree.pending().unsettled() {
                warn!(
                    "{} could not be settled and stays pending for the next mount: {}",
                    crate::workspace::pending::shown_path(u.path.as_deref()),
                    u.reason
                );
            }
            match journal.sync().and_then(|_| journal.mark_clean_unmount()) {
                Ok(()) => {}
                Err(e) => warn!("could not make the journal durable at unmount: {e}"),
            }
            // Answer the unmount request before exiting.
            control::drain(Duration::from_secs(5));
            registry::withdraw(&spec.mountpoint);
            info!("unmounted {}; daemon exits", spec.mountpoint.display());
            if let Some(err) = failed {
                return Err(err);
            }
            result.map_err(|e| Error::io("the FUSE session failed", e))
        }
        Err(e) => {
            report(Err(&e));
            Err(e)
        }
    }
}

type Started = (MountedSession, MountInfo, Vec<registry::Lock>, Arc<Journal>, Arc<Ctx>);

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| Error::io(format!("cannot set permissions of {}", path.display()), e))
}

fn start(spec: &MountSpec) -> Result<Started> {
    // The store was created private (or checked to be) by `prepare`; an
    // existing directory's mode is the user's and is left alone.
    sys::clear_umask();
    let store_lock = registry::lock(&spec.store.join("lock"), &format!("store {}", spec.store.display()))?;
    let workspace_id = {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(&spec.workspace)
            .map_err(|e| Error::io(format!("cannot stat workspace {}", spec.workspace.display()), e))?;
        (meta.dev(), meta.ino())
    };
    let ws_lock = registry::lock(
        &registry::workspace_lock_path(workspace_id)?,
        &format!("workspace {}", spec.workspace.display()),
    )?;
    // Open the workspace before mounting: an in-place mount hides it.
    let journal = Arc::new(Journal::open_dir(&spec.store)?);
    // So `fsck --store` can find the workspace whose inodes views read.
    if let Err(e) = journal.with_meta(|m| m.set_state_bytes("workspace", spec.workspace.as_os_str().as_bytes())) {
        warn!("cannot record the workspace path in the store: {e}");
    }
    let recording = if spec.record { Some(journal.clone()) } else { None };
    if !spec.record {
        warn!("recording is off for {}: nothing will be undoable", spec.workspace.display());
    }
    let tree = Arc::new(LiveTree::new(&spec.workspace, recording)?.with_attic(&spec.store.join("attic"))?);
    match tree.settler().load() {
        Ok(0) => {}
        Ok(n) => info!("{n} rewound files still need their content; the settler resumes"),
        Err(e) => return Err(Error::Daemon(format!("cannot read pending files: {e}"))),
    }
    let world = Arc::new(World::new());
    if let Some(since) = journal.outside_since_ns() {
        // Before mounting, nothing else changes the tree under us.
        let changed = tree
            .backing()
            .scan_changed_since(since)
            .map_err(|e| Error::Daemon(format!("cannot scan the workspace for outside changes: {e}")))?
            .into_iter()
            .map(|c| (c.handle, c.kind.code(), c.born_ns))
            .collect::<Vec<_>>();
        journal.record_outside_changes(&changed).map_err(|e| Error::Daemon(e.to_string()))?;
    }
    // After the scan (what recovery changes is recorded) and before the
    // settler starts and the tree is served: nobody sees a half state.
    let recovered = recover(&tree, &journal, &spec.store, spec.abandon_interrupted)?;
    spawn_settler(tree.clone(), journal.clone(), world.clone());
    let fs = LiveFs::new(
        tree.clone(),
        FsOptions { cache_timeout: spec.cache_timeout, passthrough: spec.passthrough },
        world.clone(),
    );
    let hidden_views = fs.browser();
    let fsname = format!("rewindfs:{}", spec.workspace.display());
    let uring = crate::fs::transport::want_uring(spec.transport).map_err(Error::Daemon)?;
    let session = MountedSession::mount(fs, &spec.mountpoint, &fsname, spec.threads, uring)
        .map_err(|e| Error::io(format!("cannot mount on {}", spec.mountpoint.display()), e))?;
    let transport = session.transport();
    if uring && !transport.negotiated() {
        let message = "the kernel did not offer FUSE over io_uring at FUSE_INIT";
        if spec.transport == crate::fs::transport::Transport::Uring {
            return Err(Error::Daemon(format!("--transport uring: {message}")));
        }
        warn!("{message}; serving through /dev/fuse");
    }
    info!("FUSE transport: {}", if transport.negotiated() { "io_uring (per-CPU rings)" } else { "classic /dev/fuse" });

    let entry = registry::entry_for(&spec.mountpoint);
    let _ = std::fs::remove_file(&entry.socket);
    let listener = UnixListener::bind(&entry.socket)
        .map_err(|e| Error::io(format!("cannot create control socket {}", entry.socket.display()), e))?;
    // Only the owner may change history or rewind. Without an agent user
    // nobody else can reach the socket; with one, the socket is open to all
    // and the access policy decides by the caller's uid.
    set_mode(&entry.socket, if spec.agent_uid.is_some() { 0o666 } else { 0o600 })?;
    let info = MountInfo {
        mountpoint: spec.mountpoint.clone(),
        workspace: spec.workspace.clone(),
        store: spec.store.clone(),
        in_place: spec.in_place(),
        pid: std::process::id() as i32,
        started_at: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        socket: entry.socket.clone(),
        passthrough: spec.passthrough == Passthrough::All,
        workspace_id: Some(workspace_id),
        recovered,
    };
    registry::publish(&info)?;

    let ctx = Arc::new(Ctx {
        access: access::Policy { owner: sys::geteuid(), agent: spec.agent_uid },
        info: info.clone(),
        tree: tree.clone(),
        journal: journal.clone(),
        harness_seen: AtomicBool::new(false),
        views: std::sync::Mutex::new(Vec::new()),
        hidden_views,
        invalidator: session
            .invalidator()
            .map_err(|e| Error::io("cannot duplicate the FUSE device descriptor".to_string(), e))?,
        turn_stats: spawn_turn_stats(tree.clone(), journal.clone(), world.clone()),
        uploader: start_uploader(spec, &tree, &journal, &world)?,
        transport,
        world,
    });
    let handler_ctx = ctx.clone();
    std::thread::Builder::new()
        .name("control".into())
        .spawn(move || {
            let access = handler_ctx.access;
            control::serve(
                listener,
                move |uid| access.peer(uid),
                move |req, uid, progress| match handler_ctx.access.check(uid, &req) {
                    Ok(()) => handle(req, uid, &handler_ctx, progress),
                    Err(refusal) => {
                        warn!("refused `{}` from uid {uid}: {}", req.name(), refusal.message);
                        Response::failure(refusal)
                    }
                },
            )
        })
        .map_err(|e| Error::io("cannot start the control thread", e))?;
    spawn_signal_watcher(spec.mountpoint.clone());
    if let Some(quiet) = spec.auto_turn {
        spawn_auto_turn(ctx.clone(), quiet);
    }
    auto_gc::spawn(ctx.clone());
    Ok((session, info, vec![store_lock, ws_lock], journal, ctx))
}

/// What the control handlers work with.
struct Ctx {
    info: MountInfo,
    /// Who may ask what on the control socket.
    access: access::Policy,
    tree: Arc<LiveTree>,
    journal: Arc<Journal>,
    /// Set by the first explicit `turn`: a harness announces turns, so
    /// quiet-period checkpoints stop.
    harness_seen: AtomicBool,
    /// Views (`show`) served by this daemon.
    views: std::sync::Mutex<Vec<ServedView>>,
    /// What serves `.rewindfs/` in the live mount (for `status`).
    hidden_views: Option<Arc<crate::view::browse::Browser>>,
    invalidator: crate::fs::Invalidator,
    /// Pushes sealed checkpoints to the store's remote, if it has one.
    uploader: Option<crate::remote::push::Uploader>,
    /// How FUSE requests travel (for `status`).
    transport: crate::fs::TransportState,
    /// Shared by every FUSE request; history operations go one at a time
    /// and freeze the tree while they change it.
    world: Arc<World>,
    /// Sealed turns whose `log` statistics are to be computed.
    turn_stats: std::sync::mpsc::Sender<i64>,
}

/// A `show` mount served by this daemon.
struct ServedView {
    checkpoint: i64,
    mountpoint: PathBuf,
    transport: crate::fs::TransportState,
    /// Set when its session ends (it was unmounted).
    ended: Arc<AtomicBool>,
}

/// Mounts a view of checkpoint `n` on `mountpoint` and serves it on a thread
/// of its own, on io_uring when the live mount negotiated it.
fn serve_view(ctx: &Ctx, n: i64, mountpoint: PathBuf) -> std::result::Result<protocol::ShowReply, Failure> {
    let browser = crate::view::browse::Browser::single(ctx.tree.clone(), ctx.journal.clone(), n)
        .map_err(|e| view_failure(&format!("cannot open checkpoint {n}"), e))?;
    let fsname = format!("{VIEW_FSNAME_PREFIX}{}@{n}", ctx.info.workspace.display());
    let session = crate::fs::view::ViewSession::mount(
        Arc::new(browser),
        ctx.world.clone(),
        &mountpoint,
        &fsname,
        ctx.transport.negotiated(),
    )
    .map_err(|e| {
        Failure::failed(
            e.raw_os_error().unwrap_or(libc::EIO),
            format!("cannot mount the view on {}: {e}", mountpoint.display()),
        )
    })?;
    let transport = session.transport();
    let ended = Arc::new(AtomicBool::new(false));
    let (mp, done) = (mountpoint.clone(), ended.clone());
    let spawned = std::thread::Builder::new().name("view".into()).spawn(move || {
        if let Err(e) = session.run() {
            warn!("view of checkpoint {n} on {} ended: {e}", mp.display());
        }
        done.store(true, Ordering::Release);
    });
    if let Err(e) = spawned {
        let _ = sys::umount(&mountpoint, true);
        return Err(Failure::failed(libc::EAGAIN, format!("cannot start serving the view: {e}")));
    }
    // Like the live mount: ready once its rings are registered; a view
    // whose rings fail stays on /dev/fuse.
    if let Err(e) = transport.wait_started(Duration::from_secs(10)) {
        warn!("view of checkpoint {n}: {e}; serving it through /dev/fuse");
    }
    let shown = transport.report().transport;
    info!("showing checkpoint {n} on {} ({shown})", mountpoint.display());
    let mut views = ctx.views.lock().unwrap_or_else(|p| p.into_inner());
    views.retain(|v| !v.ended.load(Ordering::Acquire));
    views.push(ServedView { checkpoint: n, mountpoint: mountpoint.clone(), transport, ended });
    Ok(protocol::ShowReply { checkpoint: n, mountpoint, transport: shown })
}

/// The fsname prefix of view mounts (`rewindfs show`).
pub const VIEW_FSNAME_PREFIX: &str = "rewindfs-view:";

fn seal(ctx: &Ctx, info: &TurnInfo, reason: Reason) -> std::result::Result<i64, Failure> {
    seal_on(ctx, info, reason, None)
}

fn seal_on(ctx: &Ctx, info: &TurnInfo, reason: Reason, parent: Option<i64>) -> std::result::Result<i64, Failure> {
    let sealed = seal_with(&ctx.tree, &ctx.journal, info, reason, parent)?;
    // The turn's `log` statistics, off the turn gate and the caller's
    // path: reading contents for line counts must not delay the next turn.
    // (`log` computes any it finds missing, so a lost request costs time only.)
    let _ = ctx.turn_stats.send(sealed - 1);
    Ok(sealed)
}

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

/// The uploader of the store's remote: the one `--remote` names (then
/// stored), else the one stored by an earlier mount, else none.
fn start_uploader(
    spec: &MountSpec,
    tree: &Arc<LiveTree>,
    journal: &Arc<Journal>,
    world: &Arc<World>,
) -> Result<Option<crate::remote::push::Uploader>> {
    let dir = crate::store_dir::StoreDir::new(&spec.store);
    let url = match &spec.remote {
        Some(url) => {
            std::fs::write(dir.remote(), format!("{url}\n"))
                .map_err(|e| Error::io(format!("cannot store the remote in {}", dir.remote().display()), e))?;
            url.clone()
        }
        None => match std::fs::read_to_string(dir.remote()) {
            Ok(text) => crate::remote::RemoteUrl::parse(text.trim()).map_err(|e| Error::Daemon(e.to_string()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(format!("cannot read {}", dir.remote().display()), e)),
        },
    };
    let store_id = std::fs::read_to_string(dir.id_file())
        .map_err(|e| Error::io(format!("cannot read {}", dir.id_file().display()), e))?
        .trim()
        .to_string();
    info!("Pushing sealed checkpoints to {url} in the background.");
    crate::remote::push::Uploader::start(url, store_id, tree.clone(), journal.clone(), world.clone())
        .map(Some)
        .map_err(|e| Error::io("cannot start the uploader", e))
}

/// One thread computes sealed turns' statistics in the order they were
/// sealed: a burst of seals (a hook per prompt) queues, rather than
/// starting as many threads reading the same contents.
fn spawn_turn_stats(tree: Arc<LiveTree>, journal: Arc<Journal>, world: Arc<World>) -> std::sync::mpsc::Sender<i64> {
    let (tx, rx) = std::sync::mpsc::channel::<i64>();
    let spawned = spawn_guarded(crate::report::TURN_STATS_THREAD, journal.clone(), move || {
        for turn in rx {
            crate::faults::panic_point(crate::report::TURN_STATS_THREAD);
            // A view is the live tree plus the records since its checkpoint:
            // read while a rewind or restore changes both (a name looked up
            // in the records before it recorded it, then in the tree after
            // it put it back), it is neither the old tree nor the new, and
            // the statistics stored from it would stay wrong (F14). As `log`
            // does, the worker reads a tree that does not change under it.
            let _op = world.op();
            if let Err(e) = crate::report::summarize_sealed_turn(&tree, &journal, turn) {
                warn!("cannot compute the statistics of turn {turn}: {e}");
            }
        }
    });
    if let Err(e) = spawned {
        warn!("cannot start the turn statistics thread ({e}); `log` computes them when asked");
    }
    tx
}

fn spawn_auto_turn(ctx: Arc<Ctx>, quiet: Duration) {
    let _ = spawn_guarded("auto-turn", ctx.journal.clone(), move || {
        let tick = quiet.min(Duration::from_secs(1)).max(Duration::from_millis(50));
        loop {
            std::thread::sleep(tick);
            if ctx.harness_seen.load(Ordering::Relaxed) {
                info!("a harness announces turns; quiet-period checkpoints stop");
                return;
            }
            // A restore or rewind in progress seals its own checkpoints.
            let Some(_history) = ctx.world.try_history() else { continue };
            let (changes, idle) = ctx.journal.activity();
            if changes > 0 && idle.is_some_and(|s| s >= quiet.as_secs_f64()) && !ctx.tree.writers_active_within(quiet) {
                match seal(&ctx, &TurnInfo::default(), Reason::Auto) {
                    Ok(n) => info!("quiet for {:?}: sealed checkpoint {n}", quiet),
                    Err(e) => warn!("{e}"),
                }
            }
        }
    });
}

/// Runs one request's handler and encodes its typed reply.
fn answer<O: Op>(op: O, handler: impl FnOnce(O) -> std::result::Result<O::Reply, Failure>) -> Response {
    Response::from_result(handler(op))
}

/// A checkpoint reference, resolved; an unknown or ambiguous one is the
/// caller's mistake.
fn resolve(journal: &Journal, reference: &str) -> std::result::Result<i64, Failure> {
    journal.resolve(reference).map(|c| c.0).map_err(|e| match e {
        JournalError::UnknownCheckpoint { .. } | JournalError::Ambiguous { .. } | JournalError::Forgotten { .. } => {
            Failure::usage(e.to_string())
        }
        e => Failure::failed(e.errno().0, format!("cannot read the checkpoints: {e}")),
    })
}

/// A journal refusal (the caller's mistake) or failure.
fn journal_failure(e: JournalError) -> Failure {
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

/// Names a checkpoint: an existing one (`--at`), or one sealed now.
fn snapshot(ctx: &Ctx, op: protocol::Snapshot) -> std::result::Result<protocol::SnapshotReply, Failure> {
    let journal = &*ctx.journal;
    let _history = ctx.world.history();
    let (checkpoint, sealed) = match &op.at {
        Some(at) => (resolve(journal, at)?, false),
        None => {
            // Refused before sealing: a bad name leaves no checkpoint behind.
            journal.check_snapshot_name(&op.name, None).map_err(journal_failure)?;
            let label = op.message.clone().unwrap_or_else(|| format!("snapshot {}", op.name));
            (seal(ctx, &TurnInfo { label: Some(label), ..Default::default() }, Reason::Turn)?, true)
        }
    };
    journal.name_checkpoint(&op.name, checkpoint, op.message.as_deref()).map_err(journal_failure)?;
    info!("checkpoint {checkpoint} is named {:?}", op.name);
    Ok(protocol::SnapshotReply { checkpoint, name: op.name, message: op.message, sealed })
}

/// Deletes all history, never the workspace: the tree is sealed as a fresh
/// checkpoint, then every other one is forgotten in one transaction (a
/// daemon killed before it committed leaves the history whole; after, the
/// next mount finishes freeing), and the store's packs are compacted.
fn reset(
    ctx: &Ctx,
    confirm: bool,
    progress: &dyn Fn(protocol::Progress),
) -> std::result::Result<protocol::ResetReply, Failure> {
    if !confirm {
        return Err(Failure::usage(RESET_UNCONFIRMED));
    }
    let journal = &*ctx.journal;
    let _history = ctx.world.history();
    let label = TurnInfo { label: Some("the tree when the history was reset".into()), ..Default::default() };
    let checkpoint = seal(ctx, &label, Reason::Turn)?;
    crate::faults::kill_point("reset-sealed");
    let attic = |id, handle: &[u8], dry| ctx.tree.attic().remove_unreachable_stored(id, handle, dry);
    let step = |done, total| progress(protocol::Progress { done, total, bytes_freed: 0 });
    let (checkpoints, messages) = ctx.hidden_views.as_ref().map(|b| b.listing_dirs()).unwrap_or_default();
    let views = match (checkpoints, messages) {
        (None, None) => Vec::new(),
        _ => journal.with_meta(|m| m.checkpoints()).map_err(|e| journal_failure(e.into()))?,
    };
    let collected = journal.reset(&attic, &ctx.info.store.join("attic"), &step).map_err(journal_failure)?;
    // The kernel forgets the views of what went. Not frozen (the reset's
    // one transaction is long): a lookup answered across its commit can
    // still leave one entry cached.
    for c in views.iter().filter(|c| c.checkpoint < checkpoint) {
        if let Some(dir) = checkpoints {
            ctx.invalidator.entry(dir, std::ffi::OsStr::new(&c.checkpoint.to_string()));
        }
        if let (Some(dir), Some(m)) = (messages, &c.message_id) {
            ctx.invalidator.entry(dir, std::ffi::OsStr::new(m));
        }
    }
    let total = collected.forgotten.len() as u64;
    progress(protocol::Progress { done: total, total, bytes_freed: collected.bytes_freed });
    // Every pack mostly released goes, however small: nothing is left to
    // share it with.
    let compacted = journal.compact_below(crate::journal::retention::COMPACT_BELOW, 1).map_err(journal_failure)?;
    journal.shrink();
    warn!(
        "history reset: {} checkpoints deleted, {} chunks and {} attic entries freed; checkpoint {checkpoint} is the tree now",
        collected.forgotten.len(),
        collected.chunks_freed,
        collected.attic_files_freed
    );
    Ok(protocol::ResetReply { checkpoint, collected, compacted })
}

/// Forgets `victims` (oldest first) one per collection, each holding the
/// turn gate for its own short transactions only, so writes go on between
/// them (as in the background), telling `progress` after each. With no
/// victim, one collection still frees what fell to zero references since
/// the last. A dry run is one collection, rolled back.
fn collect_sliced(
    ctx: &Ctx,
    history: &HistoryOp<'_>,
    victims: &[i64],
    by: &str,
    dry_run: bool,
    progress: &dyn Fn(protocol::Progress),
) -> std::result::Result<crate::journal::retention::Collected, Failure> {
    let attic = |id, handle: &[u8], dry| ctx.tree.attic().remove_unreachable_stored(id, handle, dry);
    let dir = ctx.info.store.join("attic");
    let hide = |n, message: Option<&str>, begin: &mut dyn FnMut()| hide_checkpoint(ctx, history, n, message, begin);
    if dry_run {
        return ctx.journal.collect(victims, by, true, &attic, Some(&dir), &hide).map_err(journal_failure);
    }
    let mut victims = victims.to_vec();
    victims.sort_unstable();
    victims.dedup();
    let total = victims.len() as u64;
    let slices: Vec<&[i64]> = if victims.is_empty() { vec![&[]] } else { victims.chunks(1).collect() };
    let mut out = crate::journal::retention::Collected::default();
    for slice in slices {
        let c = ctx.journal.collect(slice, by, false, &attic, Some(&dir), &hide).map_err(journal_failure)?;
        out.absorb(c);
        progress(protocol::Progress { done: out.forgotten.len() as u64, total, bytes_freed: out.bytes_freed });
        // Writers waiting on the gate go first.
        std::thread::yield_now();
    }
    Ok(out)
}

/// Runs `begin`, the transaction that takes checkpoint `n` out of the
/// history, so that the kernel keeps no entry of it under `.rewindfs/`
/// (looked up, one stays an hour, `fs/view.rs`): with the tree frozen (no
/// lookup in flight can answer after the expiry), its entries
/// `checkpoints/N` and `messages/ID` are expired before the tree thaws.
/// Nothing is frozen while the kernel holds neither directory.
fn hide_checkpoint(ctx: &Ctx, history: &HistoryOp<'_>, n: i64, message: Option<&str>, begin: &mut dyn FnMut()) {
    let (checkpoints, messages) = ctx.hidden_views.as_ref().map(|b| b.listing_dirs()).unwrap_or_default();
    if checkpoints.is_none() && messages.is_none() {
        return begin();
    }
    let mut frozen = history.freeze(&ctx.invalidator);
    begin();
    let entries = &mut frozen.touched().entries;
    if let Some(dir) = checkpoints {
        entries.insert((dir, OsString::from(n.to_string())));
    }
    if let (Some(dir), Some(m)) = (messages, message) {
        entries.insert((dir, OsString::from(m)));
    }
}

/// What `reset` without `--confirm` is told (the CLI says it first).
pub const RESET_UNCONFIRMED: &str = "reset deletes every checkpoint and all the history of this workspace for good \
     (the workspace itself is kept; a reset cannot be undone): run it again with --confirm";

/// How many paths a restore's labels name; the others are counted.
const LABEL_PATHS: usize = 3;
/// The longest path a restore's label shows whole, in characters.
const LABEL_PATH_CHARS: usize = 100;

/// What a restore's labels say it restored: its paths, a few of them
/// named and the rest counted, so that a restore of 1,200 paths does not
/// make one `log` line of 10 KB (the paths are in its intent and diff).
fn restore_subject(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "everything".to_string();
    }
    let shown: Vec<String> = paths
        .iter()
        .take(LABEL_PATHS)
        .map(|p| {
            let p = p.display().to_string();
            if p.chars().count() <= LABEL_PATH_CHARS {
                p
            } else {
                format!("{}...", p.chars().take(LABEL_PATH_CHARS).collect::<String>())
            }
        })
        .collect();
    match paths.len() - shown.len() {
        0 => shown.join(", "),
        1 => format!("{} and 1 more path", shown.join(", ")),
        n => format!("{} and {n} more paths", shown.join(", ")),
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

/// Answers one request of user `uid` (already allowed by the policy).
fn handle(req: Request, uid: u32, ctx: &Ctx, progress: &dyn Fn(protocol::Progress)) -> Response {
    let (info, tree, journal) = (&ctx.info, &*ctx.tree, &*ctx.journal);
    match req {
        Request::Turn(op) => answer(op, |protocol::Turn { info: mut turn }| {
            ctx.harness_seen.store(true, Ordering::Relaxed);
            let _history = ctx.world.history();
            // Who asked, from the socket: `log` tells the agent's seals.
            turn.sealed_by = Some(uid);
            let n = seal(ctx, &turn, Reason::Turn)?;
            Ok(protocol::TurnReply { checkpoint: n, info: turn })
        }),
        Request::Checkpoints(op) => answer(op, |_| {
            journal.with_meta(|m| m.checkpoints()).map_err(|e| {
                let e = JournalError::from(e);
                Failure::failed(e.errno().0, format!("cannot read the checkpoints: {e}"))
            })
        }),
        Request::Log(op) => answer(op, |_| {
            let _op = ctx.world.op();
            let mut turns =
                crate::report::log(tree, journal).map_err(|e| view_failure("cannot read the history", e))?;
            for t in &mut turns {
                t.by_agent = t.sealed_by.is_some() && t.sealed_by == ctx.access.agent;
            }
            Ok(turns)
        }),
        Request::Diff(op) => answer(op, |protocol::Diff { from, to, paths, patch }| {
            let _op = ctx.world.op();
            let a = resolve(journal, &from)?;
            let b = to.as_deref().map(|t| resolve(journal, t)).transpose()?;
            let va = TreeView::at(tree, journal, a);
            let vb = match b {
                Some(b) => TreeView::at(tree, journal, b),
                None => TreeView::live(tree, journal),
            };
            let changes =
                crate::report::diff(&va, &vb, &paths, patch).map_err(|e| view_failure("cannot compute the diff", e))?;
            Ok(protocol::DiffReply { from: a, to: b, changes })
        }),
        Request::Restore(op) => answer(op, |protocol::Restore { checkpoint, paths, dry_run }| {
            let k = resolve(journal, &checkpoint)?;
            let what = restore_subject(&paths);
            if dry_run {
                let _op = ctx.world.op();
                check_readable(ctx, k, Some(&paths), &mut Default::default())?;
                let changes = crate::restore::restore(tree, journal, k, &paths, true, &mut Default::default())
                    .map_err(|e| restore_failure(format!("cannot preview the restore: {e}"), &e))?;
                return Ok(protocol::RestoreReply {
                    checkpoint: k,
                    dry_run,
                    undo_checkpoint: None,
                    result_checkpoint: None,
                    changes,
                });
            }
            // A restore is a turn of its own, and atomic for everyone else.
            let history = ctx.world.history();
            // Every content readable, before anything changes (not frozen).
            let mut checked = Default::default();
            let recorded = {
                let _check = ctx.world.op();
                check_readable(ctx, k, Some(&paths), &mut checked)?;
                journal.activity().0
            };
            let recheck = || match journal.activity().0 != recorded {
                true => check_readable(ctx, k, Some(&paths), &mut checked),
                false => Ok(()),
            };
            let mut tx = transaction::Transaction::begin(
                ctx,
                &history,
                recheck,
                format!("before restoring {what} from checkpoint {k}"),
            )?;
            let before = tx.before;
            let bytes: Vec<Vec<u8>> = paths.iter().map(|p| p.as_os_str().as_bytes().to_vec()).collect();
            tx.intend(IntentOp::Restore, k, &bytes)?;
            let changes = tx
                .change("restore", |touched| crate::restore::restore(tree, journal, k, &paths, false, touched))
                .map_err(|e| {
                    restore_failure(format!("restore failed part-way (undo with `rewindfs restore {before}`): {e}"), &e)
                })?;
            let label = TurnInfo { label: Some(format!("restored {what} from checkpoint {k}")), ..Default::default() };
            let (after, _) = tx.commit(|| seal(ctx, &label, Reason::Turn))?;
            Ok(protocol::RestoreReply {
                checkpoint: k,
                dry_run,
                undo_checkpoint: Some(before),
                result_checkpoint: Some(after),
                changes,
            })
        }),
        Request::Rewind(op) => answer(op, |op| rewind(ctx, &op.checkpoint, op.dry_run)),
        Request::Snapshot(op) => answer(op, |op| snapshot(ctx, op)),
        Request::Du(op) => answer(op, |_| {
            let _history = ctx.world.history();
            let attic = |id, handle: &[u8], _| tree.attic().remove_unreachable_stored(id, handle, true);
            crate::journal::retention::du(journal, &attic, &info.store).map_err(journal_failure)
        }),
        Request::Forget(op) => answer(op, |protocol::Forget { checkpoints, dry_run }| {
            let _history = ctx.world.history();
            let victims =
                checkpoints.iter().map(|c| resolve(journal, c)).collect::<std::result::Result<Vec<_>, _>>()?;
            let kept = journal.protected_among(&victims).map_err(journal_failure)?;
            if let Some((n, why)) = victims.iter().find_map(|v| kept.get(v).map(|why| (*v, why))) {
                return Err(Failure::usage(format!("checkpoint {n} is kept, so it cannot be forgotten: {why}")));
            }
            if dry_run {
                return collect_sliced(ctx, &_history, &victims, "forget", true, progress);
            }
            // Run again after a failure for want of space: what went already is not a victim.
            let collected = journal.with_reserve(|| {
                let left: Vec<i64> = victims
                    .iter()
                    .copied()
                    .filter(|&v| journal.with_meta(|m| m.checkpoint(v)).is_ok_and(|c| c.is_some()))
                    .collect();
                collect_sliced(ctx, &_history, &left, "forget", false, progress)
            })?;
            journal.shrink();
            Ok(collected)
        }),
        Request::Gc(op) => answer(op, |protocol::Gc { dry_run, keep_count, keep_days, auto }| {
            let _history = ctx.world.history();
            let mut policy = journal.policy().map_err(journal_failure)?;
            policy.keep_count = keep_count.unwrap_or(policy.keep_count);
            policy.keep_days = keep_days.unwrap_or(policy.keep_days);
            policy.auto = auto.unwrap_or(policy.auto);
            if !dry_run {
                journal.set_policy(&policy).map_err(journal_failure)?;
            }
            if dry_run {
                let victims = journal.plan_retention(&policy).map_err(journal_failure)?;
                let collected = collect_sliced(ctx, &_history, &victims, "retention", true, progress)?;
                return Ok(protocol::GcReply { policy, collected, compacted: Default::default() });
            }
            // Planned in the closure: run again after a failure for want of
            // space, it leaves out what went.
            let (collected, compacted) = journal.with_reserve(|| {
                let victims = journal.plan_retention(&policy).map_err(journal_failure)?;
                let collected = collect_sliced(ctx, &_history, &victims, "retention", false, progress)?;
                // Packs only become worth rewriting when chunks are released.
                let compacted = match collected.chunks_freed {
                    0 => Default::default(),
                    _ => journal.compact().map_err(journal_failure)?,
                };
                Ok::<_, Failure>((collected, compacted))
            })?;
            journal.shrink();
            Ok(protocol::GcReply { policy, collected, compacted })
        }),
        Request::Reset(op) => answer(op, |protocol::Reset { confirm }| reset(ctx, confirm, progress)),
        Request::Show(op) => answer(op, |protocol::Show { checkpoint, mountpoint }| {
            let n = resolve(journal, &checkpoint)?;
            serve_view(ctx, n, mountpoint)
        }),
        Request::Fsck(op) => answer(op, |_| {
            let _op = ctx.world.op();
            let attic = info.store.join("attic");
            let target = crate::fsck::Target {
                journal,
                tree: Some(tree),
                attic: Some(&attic),
                store_dir: Some(&info.store),
                unserved_since_ns: None,
            };
            crate::fsck::check(&target, &mut |_| {})
                .map_err(|e| Failure::failed(libc::EIO, format!("fsck could not finish: {e}")))
        }),
        Request::History(op) => answer(op, |protocol::History { path }| {
            let _op = ctx.world.op();
            crate::report::history(tree, journal, &path)
                .map_err(|e| view_failure(&format!("cannot read the history of {}", path.display()), e))
        }),
        Request::Status(op) => answer(op, |_| {
            let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
            let turn = journal.current_turn();
            let (changes, idle) = journal.activity();
            let message = journal.with_meta(|m| m.checkpoint(turn)).ok().flatten().and_then(|c| c.message_id);
            Ok(protocol::StatusReply {
                failure: journal.failure(),
                mount: info.clone(),
                uptime_secs: now.saturating_sub(info.started_at),
                objects_known: tree.objects().len() as u64,
                turn,
                message_id: message,
                turn_changes: changes,
                idle_secs: idle,
                pending_files: tree.pending().count() as u64,
                unsettled: tree
                    .pending()
                    .unsettled()
                    .into_iter()
                    .map(|u| protocol::UnsettledFile {
                        path: crate::workspace::pending::shown_path(u.path.as_deref()),
                        reason: u.reason,
                    })
                    .collect(),
                view_inodes: ctx.hidden_views.as_ref().map(|b| b.inode_count() as u64).unwrap_or(0),
                retention: journal.policy().ok(),
                auto_gc: journal.last_auto().ok().flatten(),
                snapshots: journal
                    .with_meta(|m| m.snapshot_names())
                    .map(|names| {
                        names.into_iter().map(|(name, checkpoint)| protocol::SnapshotRow { name, checkpoint }).collect()
                    })
                    .unwrap_or_default(),
                transport: ctx.transport.report(),
                remote: ctx.uploader.as_ref().map(|u| u.status(journal)),
                views: ctx
                    .views
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .iter()
                    .filter(|v| !v.ended.load(Ordering::Acquire))
                    .map(|v| protocol::ViewStatus {
                        checkpoint: v.checkpoint,
                        mountpoint: v.mountpoint.clone(),
                        transport: v.transport.report(),
                    })
                    .collect(),
            })
        }),
        Request::Push(op) => answer(op, |protocol::Push { wait_secs }| {
            let Some(uploader) = &ctx.uploader else {
                return Err(Failure::usage("this store has no remote: mount with --remote s3://bucket/prefix"));
            };
            Ok(uploader.push_now(journal, Duration::from_secs(wait_secs)))
        }),
        Request::Unmount(op) => answer(op, |protocol::Unmount { lazy }| {
            // After the history operation in progress, if any.
            let history = ctx.world.history();
            if let Err(e) = tree.syncfs() {
                warn!("syncfs of {} before unmount failed: {e}", info.workspace.display());
            }
            // The unmounted workspace must never hold bytes that were not
            // read back: files that cannot be settled are put back first.
            let put_back = put_back_unsettled(ctx, &history)?;
            // The history must be durable before the mount goes: once it is
            // gone, nothing could be recorded again, and the daemon could
            // only log the failure. The mount stays, the command fails.
            journal.with_reserve(|| journal.sync()).map_err(|e| {
                Failure::failed(
                    e.errno().0,
                    format!(
                        "cannot make the history durable ({e}); {} stays mounted: free space in the store and unmount again",
                        info.mountpoint.display()
                    ),
                )
            })?;
            sys::umount_within(&info.mountpoint, lazy, sys::UNMOUNT_GRACE).map_err(|e| match e.raw_os_error() {
                Some(libc::EBUSY) => Failure::new(
                    crate::error::ErrorKind::Busy,
                    Some(libc::EBUSY),
                    format!(
                        "{} is busy: processes still use it (see `fuser -vm {}`); close them or use --lazy",
                        info.mountpoint.display(),
                        info.mountpoint.display()
                    ),
                ),
                errno => Failure::failed(
                    errno.unwrap_or(libc::EIO),
                    format!("cannot unmount {}: {e}", info.mountpoint.display()),
                ),
            })?;
            match put_back {
                Some(message) => Err(Failure::failed(
                    libc::EIO,
                    format!("{} is unmounted, but {message}", info.mountpoint.display()),
                )),
                None => Ok(()),
            }
        }),
    }
}

/// Rewinds the whole tree. The frozen tree keeps every other request out
/// while it changes, so no process sees a mix of old and new.
fn rewind(ctx: &Ctx, checkpoint: &str, dry_run: bool) -> std::result::Result<protocol::RewindReply, Failure> {
    let (tree, journal) = (&*ctx.tree, &*ctx.journal);
    let k = resolve(journal, checkpoint)?;
    if dry_run {
        let _op = ctx.world.op();
        // Every unreadable file named at once, as the rewind would refuse.
        check_readable(ctx, k, None, &mut Default::default())?;
        // The impact, as a diff from the live tree to the checkpoint.
        let live = TreeView::live(tree, journal);
        let past = TreeView::at(tree, journal, k);
        let changes =
            crate::report::diff(&live, &past, &[], false).map_err(|e| view_failure("cannot compute the rewind", e))?;
        return Ok(protocol::RewindReply::Preview(protocol::RewindPreview { checkpoint: k, dry_run: true, changes }));
    }
    let history = ctx.world.history();
    // Before the tree freezes, so reading the chunks does not stall the
    // agent; only what was recorded meanwhile is checked again, frozen.
    let mut checked = Default::default();
    let checking = std::time::Instant::now();
    let recorded = {
        let _op = ctx.world.op();
        check_readable(ctx, k, None, &mut checked)?;
        journal.activity().0
    };
    let checked_in = checking.elapsed();
    let started = std::time::Instant::now();
    let recheck = || match journal.activity().0 != recorded {
        true => check_readable(ctx, k, None, &mut checked),
        false => Ok(()),
    };
    let mut tx =
        transaction::Transaction::begin(ctx, &history, recheck, format!("safety checkpoint before rewind to {k}"))?;
    let safety = tx.before;
    tx.intend(IntentOp::Rewind, k, &[])?;
    let sealed_safety = started.elapsed();
    let changes = tx
        .change("rewind", |touched| {
            if crate::rewind::instant_available(tree) {
                crate::rewind::rewind(tree, journal, k, safety, touched)
            } else {
                crate::restore::restore(tree, journal, k, &[], false, touched)
            }
        })
        .map_err(|e| {
            restore_failure(
                format!("rewind failed part-way; `rewindfs rewind {safety}` puts back the tree as it was: {e}"),
                &e,
            )
        })?;
    let swapped = started.elapsed();
    let mut sealed_result = swapped;
    let done_label = TurnInfo { label: Some(format!("rewound to {k}")), ..Default::default() };
    let (result, thawed) = tx.commit(|| {
        let result = seal_on(ctx, &done_label, Reason::Rewind, Some(k));
        crate::faults::kill_point("rewind-sealed");
        sealed_result = started.elapsed();
        result
    })?;
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    info!(
        "rewound to checkpoint {k} in {elapsed_ms:.1} ms ({} changes; safety checkpoint {safety}): safety seal {:.1} ms, \
         tree switched {:.1} ms, result sealed {:.1} ms, {} entries and {} inodes invalidated {:.1} ms{}",
        changes.len(),
        ms(sealed_safety),
        ms(swapped - sealed_safety),
        ms(sealed_result - swapped),
        thawed.entries,
        thawed.inodes,
        ms(thawed.invalidation),
        if thawed.released_early { " (tree released before the end: invalidation stalled)" } else { "" },
    );
    info!("rewind to checkpoint {k}: contents checked readable in {:.1} ms before the tree froze", ms(checked_in));
    Ok(protocol::RewindReply::Done(protocol::RewindDone {
        checkpoint: k,
        dry_run: false,
        safety_checkpoint: safety,
        result_checkpoint: result,
        elapsed_ms,
        phases_ms: protocol::RewindPhases {
            safety_seal: ms(sealed_safety),
            switch: ms(swapped - sealed_safety),
            result_seal: ms(sealed_result - swapped),
            invalidate: elapsed_ms - ms(sealed_result),
        },
        changes,
    }))
}

/// Settles every pending file it can; the files in the tree that still
/// cannot be settled (their bytes cannot be read back) are restored as they
/// were before the rewind that left them pending, from its safety
/// checkpoint, as a restore of their own between two checkpoints. Returns
/// what to tell the user, None when every file was settled. A put-back that
/// fails keeps the mount (the error says so): unmounting then would leave
/// placeholders in the workspace.
fn put_back_unsettled(
    ctx: &Ctx,
    history: &crate::world::HistoryOp<'_>,
) -> std::result::Result<Option<String>, Failure> {
    let stuck = {
        let _op = ctx.world.op();
        ctx.tree.settler().settle_all_now()
    };
    // Files moved out of the tree since (in the attic, history only) do not
    // hold up the unmount; `status` and the log name them.
    let stuck: Vec<_> = stuck.into_iter().filter(|u| u.path.is_some()).collect();
    if stuck.is_empty() {
        return Ok(None);
    }
    let mp = ctx.info.mountpoint.display();
    // Files loaded from an earlier daemon do not know their rewind: the
    // newest one's safety checkpoint (sealed just before its result).
    let newest_rewind = ctx
        .journal
        .with_meta(|m| m.checkpoints())
        .ok()
        .and_then(|cs| cs.iter().filter(|c| c.reason == Reason::Rewind).map(|c| c.checkpoint - 1).max());
    let mut by_checkpoint: std::collections::BTreeMap<i64, Vec<PathBuf>> = Default::default();
    for u in &stuck {
        let Some(k) = u.before.or(newest_rewind) else {
            return Err(Failure::failed(
                libc::EIO,
                format!(
                    "{} cannot be settled and its state before the rewind is unknown; {mp} stays mounted",
                    u.reason
                ),
            ));
        };
        by_checkpoint.entry(k).or_default().extend(u.path.clone());
    }
    let names: Vec<String> = stuck
        .iter()
        .map(|u| format!("{} ({})", crate::workspace::pending::shown_path(u.path.as_deref()), u.reason))
        .collect();
    let what =
        format!("{} rewound file{} that could not be settled", stuck.len(), if stuck.len() == 1 { "" } else { "s" });
    let mut tx = transaction::Transaction::begin(ctx, history, || Ok(()), format!("before putting back {what}"))?;
    let before = tx.before;
    // Each restore is an intent, as a restore asked for is: a daemon
    // killed in the middle leaves it for the next mount to complete. They
    // stay until the result is sealed (completing one again is harmless).
    for (k, paths) in &by_checkpoint {
        let bytes: Vec<Vec<u8>> = paths.iter().map(|p| p.as_os_str().as_bytes().to_vec()).collect();
        tx.intend(IntentOp::Restore, *k, &bytes)?;
        tx.change("putback", |touched| crate::restore::restore(&ctx.tree, &ctx.journal, *k, paths, false, touched))
            .map_err(|e| {
                restore_failure(
                    format!(
                        "putting back {what} ({}) as they were at checkpoint {k} failed part-way (undo with \
                     `rewindfs restore {before}`): {e}; {mp} stays mounted",
                        names.join(", ")
                    ),
                    &e,
                )
            })?;
    }
    let ks: Vec<String> = by_checkpoint.keys().map(|k| k.to_string()).collect();
    let label = TurnInfo { label: Some(format!("put back {what}, as before the rewind")), ..Default::default() };
    let (after, _) = tx.commit(|| seal(ctx, &label, Reason::Turn))?;
    warn!("put back {what}: {}; as they were at checkpoint {} (checkpoint {after})", names.join(", "), ks.join(", "));
    Ok(Some(format!(
        "{what} {} put back as before the rewind (checkpoint {}), since the bytes cannot be read from the \
         store: {}; the workspace holds no invented bytes, checkpoint {before} keeps the rewound state, \
         and `rewindfs fsck` names the damage",
        if stuck.len() == 1 { "was" } else { "were" },
        ks.join(", "),
        names.join(", ")
    )))
}

/// Refuses a rewind to `k` (or with `paths`, a restore of them) when a
/// content it would put back cannot be read from the store (every chunk
/// read and verified), naming each file.
fn check_readable(
    ctx: &Ctx,
    k: i64,
    paths: Option<&[PathBuf]>,
    checked: &mut crate::rewind::preflight::Checked,
) -> std::result::Result<(), Failure> {
    use crate::rewind::preflight;
    let (tree, journal) = (&*ctx.tree, &*ctx.journal);
    let files = match paths {
        None => preflight::unreadable(tree, journal, k, checked),
        Some(paths) => preflight::unreadable_under(tree, journal, k, paths, checked),
    }
    .map_err(|e| restore_failure(format!("cannot check the contents of checkpoint {k}: {e}"), &e))?;
    if files.is_empty() {
        // An instant rewind answers before the settler writes the contents
        // back: without room for them, it would report success over files
        // that cannot be read (ENOSPC). A restore writes them at once and
        // fails by itself.
        if paths.is_none() && crate::rewind::instant_available(tree) {
            check_room(tree, k, checked.to_write)?;
        }
        return Ok(());
    }
    let what = if paths.is_some() { format!("restore from checkpoint {k}") } else { format!("rewind to {k}") };
    let message = preflight::refusal(&what, k, &files);
    warn!("{message}");
    Err(Failure::failed(libc::EIO, message))
}

/// Refuses a rewind to `k` that writes `bytes` of contents back into a
/// workspace whose filesystem has less room (a margin kept for the
/// journal and the database when the store shares the disk).
fn check_room(tree: &LiveTree, k: i64, bytes: u64) -> std::result::Result<(), Failure> {
    const MARGIN: u64 = 1 << 20;
    let Ok(st) = rustix::fs::fstatvfs(tree.root_fd()) else { return Ok(()) };
    let free = st.f_bfree.saturating_mul(st.f_frsize);
    if bytes.saturating_add(MARGIN) <= free {
        return Ok(());
    }
    let message = format!(
        "rewind to {k} refused, nothing was changed: it writes {} of file contents back into the workspace, and its \
         filesystem has {} free (the disk is full); free some space and rewind again",
        crate::text::human_bytes(bytes),
        crate::text::human_bytes(free)
    );
    warn!("{message}");
    Err(Failure::failed(libc::ENOSPC, message))
}

/// Completes the rewinds and restores the previous daemon died in, before
/// anything is served. A failure stops the mount: a half-changed tree is
/// never served as if it were whole. With `abandon`, they are given up
/// instead: the tree stays as it is, the mount checkpoint (sealed when the
/// journal was opened) is that tree, labelled so.
fn recover(
    tree: &Arc<LiveTree>,
    journal: &Arc<Journal>,
    store: &Path,
    abandon: bool,
) -> Result<Vec<crate::rewind::recovery::Recovered>> {
    use crate::rewind::recovery;
    let refuse = |what: String| {
        Error::kind_of(
            crate::error::ErrorKind::Failed,
            format!(
                "{what}; the workspace was not mounted. `rewindfs fsck --store {}` checks what the store can still \
                 read back",
                store.display()
            ),
        )
    };
    let intents = journal.open_intents().map_err(|e| refuse(format!("cannot read the interrupted operations: {e}")))?;
    let mut out = Vec::new();
    for intent in intents {
        let what = recovery::describe(&intent);
        let checkpoints = journal.with_meta(|m| m.checkpoints()).map_err(|e| refuse(e.to_string()))?;
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
            journal.with_meta(|m| m.set_label(interrupted, &label)).map_err(|e| refuse(e.to_string()))?;
            journal.end_intent(intent.id).map_err(|e| refuse(e.to_string()))?;
            let report = recovery::abandoned(&intent, interrupted, &left);
            warn!("{}", report.message);
            out.push(report);
            continue;
        }
        warn!("{what} was interrupted; completing it before mounting");
        let label = format!("state at mount: {what} was interrupted, half applied");
        journal.with_meta(|m| m.set_label(interrupted, &label)).map_err(|e| refuse(e.to_string()))?;
        let stuck = |why: String, unchanged: bool| {
            refuse(format!(
                "{what} was interrupted (the daemon died) and could not be completed at mount: {why}. {}; \
                 checkpoint {} is the tree before it. `rewindfs mount --abandon-interrupted` gives the operation \
                 up and mounts the tree as it is (sealed as a checkpoint)",
                if unchanged {
                    "The tree is as the interruption left it"
                } else {
                    "The tree is as the interruption and this attempt left it (every change recorded)"
                },
                intent.undo_checkpoint
            ))
        };
        // Before anything changes: a completion that cannot read what it
        // needs would stop part-way.
        let unreadable = recovery::unreadable(tree, journal, &intent).map_err(|e| stuck(e.to_string(), true))?;
        if !unreadable.is_empty() {
            let files = crate::rewind::preflight::refusal("completing it", intent.checkpoint, &unreadable);
            return Err(stuck(files, true));
        }
        let changes = recovery::complete(tree, journal, &intent).map_err(|e| stuck(e.to_string(), false))?;
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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Spawns a background thread of the daemon whose failure must not pass
/// unseen: a panic in `body` (the thread's whole loop) stops the journal
/// from taking changes, so the mount turns read-only and `status` says
/// why, instead of the thread ending in silence with the work it does
/// (settling rewound files, statistics, collection, quiet-period turns)
/// never done again.
pub(crate) fn spawn_guarded(
    name: &'static str,
    journal: Arc<Journal>,
    body: impl FnOnce() + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name(name.into()).spawn(move || {
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
            journal.fail(format!("the daemon's {name} thread failed ({})", crate::error::panic_message(&*panic)));
        }
    })
}

/// Writes the bytes of rewound files in the background, one file per
/// ordinary operation (never while a rewind or restore changes the tree).
fn spawn_settler(tree: Arc<LiveTree>, journal: Arc<Journal>, world: Arc<World>) {
    let _ = spawn_guarded("settler", journal, move || {
        loop {
            if crate::faults::settler_paused() {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            let settled = {
                let _op = world.op();
                tree.settler().settle_one()
            };
            match settled {
                Ok(true) => {}
                Ok(false) => std::thread::sleep(Duration::from_millis(100)),
                Err(e) => {
                    warn!("settler: {e}");
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        }
    });
}

/// SIGTERM, SIGINT or SIGHUP unmount the filesystem (lazily if it is in
/// use, so the daemon keeps serving open files until they close).
fn spawn_signal_watcher(mountpoint: PathBuf) {
    sys::signals::install();
    let _ = std::thread::Builder::new().name("signals".into()).spawn(move || {
        loop {
            std::thread::sleep(Duration::from_millis(100));
            if let Some(sig) = sys::signals::take() {
                info!("signal {sig} received: unmounting {}", mountpoint.display());
                if sys::umount(&mountpoint, false).is_err() {
                    let _ = sys::umount(&mountpoint, true);
                }
            }
        }
    });
}

/// Whether `path` is the root of a FUSE mount of ours, and whether its
/// daemon answers.
pub fn mount_state(mountpoint: &Path) -> MountState {
    let mounted = is_fuse_mountpoint(mountpoint);
    match registry::read(mountpoint) {
        Some(info) if sys::process_alive(info.pid) => {
            if mounted {
                MountState::Live(info)
            } else {
                MountState::Starting(info)
            }
        }
        Some(info) => {
            if mounted {
                MountState::Dead(Some(info))
            } else {
                MountState::NotMounted
            }
        }
        None if mounted => MountState::Dead(None),
        None => MountState::NotMounted,
    }
}

/// What is at a mountpoint.
#[derive(Debug)]
pub enum MountState {
    NotMounted,
    /// The daemon published itself but the mount is not in the mount table.
    Starting(MountInfo),
    Live(MountInfo),
    /// Mounted but the daemon is gone ("Transport endpoint is not connected").
    Dead(Option<MountInfo>),
}

/// Mountpoints in /proc/self/mountinfo of FUSE mounts whose source is
/// `rewindfs:<workspace>` (the fsname every daemon mounts with).
pub fn rewindfs_mountpoints() -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else { return Vec::new() };
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mut fields = right.split_whitespace();
            let fstype = fields.next()?;
            let source = fields.next()?;
            if !fstype.starts_with("fuse") || !source.starts_with("rewindfs:") {
                return None;
            }
            let mp = left.split_whitespace().nth(4)?;
            Some(PathBuf::from(unescape_mountinfo(mp)))
        })
        .collect()
}

fn unescape_mountinfo(s: &str) -> String {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Mountpoints of view mounts (`rewindfs show`).
pub fn view_mountpoints() -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else { return Vec::new() };
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let source = right.split_whitespace().nth(1)?;
            let mp = left.split_whitespace().nth(4)?;
            source.starts_with(VIEW_FSNAME_PREFIX).then(|| PathBuf::from(unescape_mountinfo(mp)))
        })
        .collect()
}

/// Whether `path` is currently a rewindfs mountpoint.
pub fn is_fuse_mountpoint(path: &Path) -> bool {
    rewindfs_mountpoints().iter().any(|p| p == path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape_mountinfo("/tmp/a\\040b"), "/tmp/a b");
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
    }

    /// A restore of many paths names a few in its labels and
    /// counts the rest.
    #[test]
    fn a_restore_of_many_paths_is_summarized() {
        let paths = |n: usize| (0..n).map(|i| PathBuf::from(format!("/w/dir/file-{i}.txt"))).collect::<Vec<_>>();
        assert_eq!(restore_subject(&[]), "everything");
        assert_eq!(restore_subject(&paths(2)), "/w/dir/file-0.txt, /w/dir/file-1.txt");
        assert_eq!(
            restore_subject(&paths(4)),
            "/w/dir/file-0.txt, /w/dir/file-1.txt, /w/dir/file-2.txt and 1 more path"
        );
        let many = restore_subject(&paths(1200));
        assert!(many.ends_with("/w/dir/file-2.txt and 1197 more paths"), "{many}");
        let long = restore_subject(&[PathBuf::from("x".repeat(5000))]);
        assert_eq!(long.chars().count(), LABEL_PATH_CHARS + 3, "{long}");
    }
}
