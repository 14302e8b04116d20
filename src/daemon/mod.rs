//! The daemon of one mount: takes the locks, opens the workspace, mounts,
//! publishes itself, serves FUSE and control requests, and cleans up.

pub mod access;
mod auto_gc;
pub mod control;
pub mod protocol;
pub mod registry;

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use log::{info, warn};

use crate::engine::{Workspace, journal_failure};
use crate::error::{AsErrno, Error, Failure, Result};
use crate::fs::{FsOptions, LiveFs, MountedSession, Passthrough};
use crate::journal::{Journal, JournalError};
use crate::meta::Reason;
use crate::sys;
use crate::workspace::pending::SettleStep;
use control::{Op, Request, Response};
use registry::MountInfo;
use std::sync::atomic::{AtomicBool, Ordering};

pub use crate::engine::RESET_UNCONFIRMED;

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
        Ok((session, info, _locks, ctx)) => {
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
            for view in crate::poison::lock(&ctx.views, "the show mounts").drain(..) {
                // Views read the live tree: they end with it.
                if !view.ended.load(Ordering::Acquire) {
                    let _ = sys::umount(&view.mountpoint, true);
                }
            }
            ctx.ws.close();
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

type Started = (MountedSession, MountInfo, Vec<registry::Lock>, Arc<Ctx>);

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| Error::io(format!("cannot set permissions of {}", path.display()), e))
}

fn start(spec: &MountSpec) -> Result<Started> {
    // The store was created private (or checked to be) by `prepare`; an
    // existing directory's mode is the user's and is left alone.
    sys::clear_umask();
    let store_lock =
        registry::lock(&spec.store.join("lock"), &format!("store {}", spec.store.display())).map_err(|e| {
            // A view of the unmounted workspace keeps the store locked.
            let views = views_of(&spec.workspace);
            if e.kind() != crate::error::ErrorKind::Busy || views.is_empty() {
                return e;
            }
            let list: Vec<String> = views.iter().map(|v| v.display().to_string()).collect();
            Error::kind_of(
                crate::error::ErrorKind::Busy,
                format!(
                    "{e}: it serves a view of the history on {} (`rewindfs show`); `rewindfs unmount` the view first",
                    list.join(", ")
                ),
            )
        })?;
    let workspace_id = {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(&spec.workspace)
            .map_err(|e| Error::io(format!("cannot stat workspace {}", spec.workspace.display()), e))?;
        (meta.dev(), meta.ino())
    };
    let ws_lock = registry::lock_transient(
        &registry::workspace_lock_path(workspace_id)?,
        &format!("workspace {}", spec.workspace.display()),
    )?;
    // Open the workspace before mounting: an in-place mount hides it.
    let ws = Arc::new(Workspace::open(&crate::engine::Options {
        workspace: spec.workspace.clone(),
        mountpoint: spec.mountpoint.clone(),
        store: spec.store.clone(),
        chunks: None,
        record: spec.record,
        abandon_interrupted: spec.abandon_interrupted,
        // No descriptor per object (the descriptor limit).
        opener: crate::workspace::Opener::ByHandle,
    })?);
    let tree = ws.tree().clone();
    let recovered = ws.recovered().to_vec();
    spawn_settler(ws.clone());
    let fs = LiveFs::new(
        tree.clone(),
        FsOptions { cache_timeout: spec.cache_timeout, passthrough: spec.passthrough },
        ws.world().clone(),
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

    ws.attach_kernel(
        Box::new(
            session
                .invalidator()
                .map_err(|e| Error::io("cannot duplicate the FUSE device descriptor".to_string(), e))?,
        ),
        hidden_views,
    );
    ws.send_sealed_turns(spawn_turn_stats(ws.clone()));
    let uploader = start_uploader(spec, &ws)?;
    let ctx = Arc::new(Ctx {
        access: access::Policy { owner: sys::geteuid(), agent: spec.agent_uid },
        info: info.clone(),
        ws,
        harness_seen: AtomicBool::new(false),
        auto_gc_running: AtomicBool::new(false),
        views: std::sync::Mutex::new(Vec::new()),
        uploader,
        transport,
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
    Ok((session, info, vec![store_lock, ws_lock], ctx))
}

/// What the control handlers work with.
struct Ctx {
    info: MountInfo,
    /// Who may ask what on the control socket.
    access: access::Policy,
    /// The tree, its journal and the world lock, with the history operations.
    ws: Arc<Workspace>,
    /// Set by the first explicit `turn`: a harness announces turns, so
    /// quiet-period checkpoints stop.
    harness_seen: AtomicBool,
    /// Set while the background collection plans or runs (for `status`).
    auto_gc_running: AtomicBool,
    /// Views (`show`) served by this daemon.
    views: std::sync::Mutex<Vec<ServedView>>,
    /// Pushes sealed checkpoints to the store's remote, if it has one.
    uploader: Option<crate::remote::push::Uploader>,
    /// How FUSE requests travel (for `status`).
    transport: crate::fs::TransportState,
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
    let browser = ctx.ws.read().browser(n)?;
    let fsname = format!("{VIEW_FSNAME_PREFIX}{}@{n}", ctx.info.workspace.display());
    let source = crate::fs::view::LocalView { browser: Arc::new(browser), ws: ctx.ws.clone() };
    let session = mount_view(source, &mountpoint, &fsname, ctx.transport.negotiated())?;
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
    let mut views = crate::poison::lock(&ctx.views, "the show mounts");
    views.retain(|v| !v.ended.load(Ordering::Acquire));
    views.push(ServedView { checkpoint: n, mountpoint: mountpoint.clone(), transport, ended });
    Ok(protocol::ShowReply { checkpoint: n, mountpoint, transport: shown })
}

/// The fsname prefix of view mounts (`rewindfs show`).
pub const VIEW_FSNAME_PREFIX: &str = "rewindfs-view:";

/// The uploader of the store's remote: the one `--remote` names (then
/// stored), else the one stored by an earlier mount, else none.
fn start_uploader(spec: &MountSpec, ws: &Workspace) -> Result<Option<crate::remote::push::Uploader>> {
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
    crate::remote::push::Uploader::start(url, store_id, ws.tree().clone(), ws.journal().clone(), ws.world().clone())
        .map(Some)
        .map_err(|e| Error::io("cannot start the uploader", e))
}

/// How many times the statistics of one turn give way to rewinds and
/// restores before the thread leaves them to `log` (which computes what
/// it finds missing).
const GIVE_WAY_ATTEMPTS: u32 = 100;

/// One thread computes sealed turns' statistics in the order they were
/// sealed: a burst of seals (a hook per prompt) queues, rather than
/// starting as many threads reading the same contents.
fn spawn_turn_stats(ws: Arc<Workspace>) -> std::sync::mpsc::Sender<i64> {
    let (tx, rx) = std::sync::mpsc::channel::<i64>();
    let spawned = spawn_guarded(crate::report::TURN_STATS_THREAD, ws.journal().clone(), move || {
        for turn in rx {
            crate::faults::panic_point(crate::report::TURN_STATS_THREAD);
            // A view is the live tree plus the records since its checkpoint:
            // read while a rewind or restore changes both (a name looked up
            // in the records before it recorded it, then in the tree after
            // it put it back), it is neither the old tree nor the new, and
            // the statistics stored from it would stay wrong (F14). As `log`
            // does, the worker reads a tree that does not change under it.
            // Given way to a rewind or restore: again once it is done (it
            // holds the history lock to its end). Views never move, so the
            // summary read again is the same.
            for attempt in 1.. {
                // The reader ends with this statement: the tree lock is
                // not held while waiting for the history lock below.
                let summarized = ws.read().summarize_sealed_turn(turn);
                match summarized {
                    Err(crate::view::ViewError::GaveWay) if attempt < GIVE_WAY_ATTEMPTS => {
                        log::debug!("the statistics of turn {turn} gave way to a rewind or restore");
                        drop(ws.history());
                    }
                    Err(e) => {
                        warn!("cannot compute the statistics of turn {turn}: {e}");
                        break;
                    }
                    Ok(_) => break,
                }
            }
        }
    });
    if let Err(e) = spawned {
        warn!("cannot start the turn statistics thread ({e}); `log` computes them when asked");
    }
    tx
}

fn spawn_auto_turn(ctx: Arc<Ctx>, quiet: Duration) {
    let _ = spawn_guarded("auto-turn", ctx.ws.journal().clone(), move || {
        let tick = quiet.min(Duration::from_secs(1)).max(Duration::from_millis(50));
        loop {
            std::thread::sleep(tick);
            if ctx.harness_seen.load(Ordering::Relaxed) {
                info!("a harness announces turns; quiet-period checkpoints stop");
                return;
            }
            // A restore or rewind in progress seals its own checkpoints.
            let Some(_history) = ctx.ws.try_history() else { continue };
            let (changes, idle) = ctx.ws.journal().activity();
            if changes > 0
                && idle.is_some_and(|s| s >= quiet.as_secs_f64())
                && !ctx.ws.tree().writers_active_within(quiet)
            {
                match ctx.ws.seal(&Default::default(), Reason::Auto) {
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

/// Answers one request of user `uid` (already allowed by the policy):
/// dispatch onto the workspace, and the parts only a mount has.
fn handle(req: Request, uid: u32, ctx: &Ctx, progress: &dyn Fn(protocol::Progress)) -> Response {
    let (info, ws) = (&ctx.info, &*ctx.ws);
    match req {
        Request::Turn(op) => answer(op, |protocol::Turn { info: mut turn }| {
            ctx.harness_seen.store(true, Ordering::Relaxed);
            // Who asked, from the socket: `log` tells the agent's seals.
            turn.sealed_by = Some(uid);
            let n = ws.turn(&turn)?;
            Ok(protocol::TurnReply { checkpoint: n, info: turn })
        }),
        Request::Checkpoints(op) => answer(op, |_| {
            ws.journal().with_checkpoints(|m| m.checkpoints()).map_err(|e| {
                let e = JournalError::from(e);
                Failure::failed(e.errno().0, format!("cannot read the checkpoints: {e}"))
            })
        }),
        Request::Resolve(op) => answer(op, |protocol::Resolve { reference }| {
            let (c, note) = ws.journal().resolve_noted(&reference).map_err(journal_failure)?;
            Ok(protocol::ResolveReply { checkpoint: c.0, note })
        }),
        Request::Log(op) => answer(op, |_| {
            let mut turns = ws.read().log()?;
            for t in &mut turns {
                t.by_agent = t.sealed_by.is_some() && t.sealed_by == ctx.access.agent;
            }
            Ok(turns)
        }),
        Request::Diff(op) => {
            answer(op, |protocol::Diff { from, to, paths, patch }| ws.read().diff(&from, to.as_deref(), &paths, patch))
        }
        Request::Restore(op) => {
            answer(op, |protocol::Restore { checkpoint, paths, dry_run }| ws.restore(&checkpoint, &paths, dry_run))
        }
        Request::Rewind(op) => answer(op, |op| ws.rewind(&op.checkpoint, op.dry_run)),
        Request::Snapshot(op) => {
            answer(op, |protocol::Snapshot { name, message, at }| ws.snapshot(&name, message.as_deref(), at.as_deref()))
        }
        Request::Du(op) => answer(op, |_| {
            let _history = ws.history();
            let attic = |id, handle: &[u8], _| ws.tree().attic().remove_unreachable_stored(id, handle, true);
            crate::journal::retention::du(ws.journal(), &attic, &info.store).map_err(journal_failure)
        }),
        Request::Forget(op) => {
            answer(op, |protocol::Forget { checkpoints, dry_run }| ws.forget(&checkpoints, dry_run, progress))
        }
        Request::Gc(op) => answer(op, |protocol::Gc { dry_run, keep_count, keep_days, auto }| {
            ws.gc(dry_run, keep_count, keep_days, auto, progress)
        }),
        Request::Reset(op) => answer(op, |protocol::Reset { confirm }| ws.reset(confirm, progress)),
        Request::Show(op) => answer(op, |protocol::Show { checkpoint, mountpoint }| {
            let n = ws.resolve(&checkpoint)?;
            serve_view(ctx, n, mountpoint)
        }),
        Request::Fsck(op) => answer(op, |_| ws.read().fsck()),
        Request::FsckRemote(op) => answer(op, |_| {
            uploader(ctx)?.check(ws.journal(), |_, _| {}).map_err(|e| Failure::failed(e.errno().0, e.to_string()))
        }),
        Request::History(op) => answer(op, |protocol::History { path }| ws.read().history(&path)),
        Request::Status(op) => answer(op, |_| Ok(status(ctx))),
        Request::Push(op) => answer(op, |protocol::Push { wait_secs }| {
            Ok(uploader(ctx)?.push_now(ws.journal(), Duration::from_secs(wait_secs)))
        }),
        Request::Unmount(op) => answer(op, |protocol::Unmount { lazy }| unmount(ctx, lazy)),
    }
}

/// The mount's uploader, or the refusal a request for the remote gets
/// from a store mounted without one.
fn uploader(ctx: &Ctx) -> Result<&crate::remote::push::Uploader, Failure> {
    ctx.uploader
        .as_ref()
        .ok_or_else(|| Failure::usage("this store has no remote: mount with --remote s3://bucket/prefix"))
}

/// `status`: the published mount info and the live state.
fn status(ctx: &Ctx) -> protocol::StatusReply {
    let (info, tree, journal) = (&ctx.info, ctx.ws.tree(), ctx.ws.journal());
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    // A journal whose state a panic left half-changed is not read again
    // (`crate::poison`): what needs it is left out, and `failure` says why.
    let failure = journal.failure();
    let sound = !journal.poisoned();
    let turn = sound.then(|| journal.current_turn());
    let (changes, idle) = if sound { journal.activity() } else { (0, None) };
    let message = turn
        .and_then(|turn| journal.with_checkpoints(|m| m.checkpoint(turn)).ok())
        .flatten()
        .and_then(|c| c.message_id);
    let settled = tree.pending().settled_counts();
    protocol::StatusReply {
        failure,
        mount: info.clone(),
        uptime_secs: now.saturating_sub(info.started_at),
        objects_known: tree.objects().len() as u64,
        turn,
        message_id: message,
        turn_changes: changes,
        idle_secs: idle,
        pending_files: tree.pending().count() as u64,
        settled_files: settled.files,
        largest_settle_step: settled.largest_step,
        unsettled: tree
            .pending()
            .unsettled()
            .into_iter()
            .map(|u| protocol::UnsettledFile {
                path: crate::workspace::pending::shown_path(u.path.as_deref()),
                reason: u.reason,
            })
            .collect(),
        view_inodes: ctx.ws.hidden_views().map(|b| b.inode_count() as u64).unwrap_or(0),
        retention: sound.then(|| journal.policy().ok()).flatten(),
        auto_gc: sound.then(|| journal.last_auto().ok().flatten()).flatten(),
        auto_gc_running: ctx.auto_gc_running.load(std::sync::atomic::Ordering::SeqCst),
        snapshots: sound
            .then(|| journal.with_checkpoints(|m| m.snapshot_names()).ok())
            .flatten()
            .map(|names| {
                names.into_iter().map(|(name, checkpoint)| protocol::SnapshotRow { name, checkpoint }).collect()
            })
            .unwrap_or_default(),
        transport: ctx.transport.report(),
        remote: ctx.uploader.as_ref().filter(|_| sound).map(|u| u.status(journal)),
        views: crate::poison::lock(&ctx.views, "the show mounts")
            .iter()
            .filter(|v| !v.ended.load(Ordering::Acquire))
            .map(|v| protocol::ViewStatus {
                checkpoint: v.checkpoint,
                mountpoint: v.mountpoint.clone(),
                transport: v.transport.report(),
            })
            .collect(),
    }
}

/// `unmount`: after the history operation in progress, with every rewound
/// file settled or put back and the history durable.
fn unmount(ctx: &Ctx, lazy: bool) -> std::result::Result<(), Failure> {
    let (info, ws) = (&ctx.info, &*ctx.ws);
    if ws.journal().poisoned() {
        // Nothing can be settled, put back or made durable through a
        // journal whose state a panic left half-changed; what is durable
        // is what the next mount recovers from, as after a crash.
        warn!(
            "unmounting {} without settling or syncing: the journal's state was left half-changed by a panic",
            info.mountpoint.display()
        );
        return umount_now(info, lazy);
    }
    let history = ws.history();
    if let Err(e) = ws.tree().syncfs() {
        warn!("syncfs of {} before unmount failed: {e}", info.workspace.display());
    }
    // The unmounted workspace must never hold bytes that were not
    // read back: files that cannot be settled are put back first.
    let put_back = ws.put_back_unsettled(&history)?;
    // The history must be durable before the mount goes: once it is
    // gone, nothing could be recorded again, and the daemon could
    // only log the failure. The mount stays, the command fails.
    let journal = ws.journal();
    journal.with_reserve(|| journal.sync()).map_err(|e| {
        Failure::failed(
            e.errno().0,
            format!(
                "cannot make the history durable ({e}); {} stays mounted: free space in the store and unmount again",
                info.mountpoint.display()
            ),
        )
    })?;
    umount_now(info, lazy)?;
    match put_back {
        Some(message) => {
            Err(Failure::failed(libc::EIO, format!("{} is unmounted, but {message}", info.mountpoint.display())))
        }
        None => Ok(()),
    }
}

/// Takes the FUSE mount down (after a grace period for files being closed).
fn umount_now(info: &MountInfo, lazy: bool) -> std::result::Result<(), Failure> {
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
        errno => {
            Failure::failed(errno.unwrap_or(libc::EIO), format!("cannot unmount {}: {e}", info.mountpoint.display()))
        }
    })
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
/// ordinary operation (never while a rewind or restore changes the tree,
/// and giving way to one that waits to).
fn spawn_settler(ws: Arc<Workspace>) {
    let _ = spawn_guarded(crate::workspace::pending::SETTLER_THREAD, ws.journal().clone(), move || {
        loop {
            if crate::faults::settler_paused() {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            match ws.settle_one() {
                Ok(SettleStep::Settled) => {}
                // Again once the rewind or restore is done (it holds the
                // history lock to its end).
                Ok(SettleStep::GaveWay) => drop(ws.history()),
                Ok(SettleStep::Idle) => std::thread::sleep(Duration::from_millis(100)),
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
pub fn spawn_signal_watcher(mountpoint: PathBuf) {
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
    view_mounts().into_iter().map(|(_, mp)| mp).collect()
}

/// The view mounts (`rewindfs show`) with what each shows: the workspace
/// and checkpoint of its fsname, `WORKSPACE@N`.
fn view_mounts() -> Vec<(String, PathBuf)> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else { return Vec::new() };
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let source = unescape_mountinfo(right.split_whitespace().nth(1)?);
            let mp = left.split_whitespace().nth(4)?;
            let shown = source.strip_prefix(VIEW_FSNAME_PREFIX)?.to_string();
            Some((shown, PathBuf::from(unescape_mountinfo(mp))))
        })
        .collect()
}

/// The views of `workspace`'s checkpoints mounted now.
pub fn views_of(workspace: &Path) -> Vec<PathBuf> {
    let prefix = format!("{}@", workspace.display());
    view_mounts()
        .into_iter()
        .filter(|(shown, _)| shown.strip_prefix(&prefix).is_some_and(|n| n.parse::<i64>().is_ok()))
        .map(|(_, mp)| mp)
        .collect()
}

/// Mounts a read-only view of `source` on `mountpoint` (`uring`: ask for
/// FUSE over io_uring), a failure said as the control socket says it.
pub fn mount_view<S: crate::fs::view::Served>(
    source: S,
    mountpoint: &Path,
    fsname: &str,
    uring: bool,
) -> std::result::Result<crate::fs::view::ViewSession<S>, Failure> {
    crate::fs::view::ViewSession::mount(source, mountpoint, fsname, uring).map_err(|e| {
        Failure::failed(
            e.raw_os_error().unwrap_or(libc::EIO),
            format!("cannot mount the view on {}: {e}", mountpoint.display()),
        )
    })
}

/// Mounts a view of checkpoint `n` of a workspace that no daemon serves,
/// opened read-only from its store (the caller holds the store's lock for
/// as long as the view is served), with what `show` answers about it.
pub fn mount_store_view(
    ws: Workspace,
    workspace: &Path,
    n: i64,
    mountpoint: &Path,
) -> std::result::Result<(crate::fs::view::ViewSession<crate::fs::view::LocalView>, protocol::ShowReply), Failure> {
    let ws = Arc::new(ws);
    let fsname = format!("{VIEW_FSNAME_PREFIX}{}@{n}", workspace.display());
    let browser = ws.read().browser(n)?;
    let session =
        mount_view(crate::fs::view::LocalView { browser: Arc::new(browser), ws }, mountpoint, &fsname, false)?;
    let transport = session.transport().report().transport;
    info!("showing checkpoint {n} of {} on {} from its store", workspace.display(), mountpoint.display());
    Ok((session, protocol::ShowReply { checkpoint: n, mountpoint: mountpoint.to_path_buf(), transport }))
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
}
