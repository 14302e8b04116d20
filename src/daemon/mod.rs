//! The daemon of one mount: takes the locks, opens the workspace, mounts,
//! publishes itself, serves FUSE and control requests, and cleans up.

pub mod control;
pub mod registry;

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use log::{info, warn};

use crate::error::{Error, Result};
use crate::fs::{FsOptions, LiveFs, MountedSession, Passthrough};
use crate::sys;
use crate::journal::{Journal, TurnInfo};
use crate::meta::Reason;
use crate::view::TreeView;
use crate::workspace::LiveTree;
use std::sync::atomic::{AtomicBool, Ordering};
use control::{Request, Response};
use registry::MountInfo;

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
    /// Seal a checkpoint after this long without writes (until a harness
    /// calls `turn`, which turns this off for the rest of the mount).
    pub auto_turn: Option<Duration>,
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
            report(Ok(&info));
            info!("serving {} on {} (store {})", spec.workspace.display(), spec.mountpoint.display(), spec.store.display());
            let result = session.run();
            for view in ctx.views.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
                // Views read the live tree: they end with it.
                let _ = sys::umount(&view, true);
            }
            match journal.sync().and_then(|_| journal.mark_clean_unmount()) {
                Ok(()) => {}
                Err(e) => warn!("could not make the journal durable at unmount: {e}"),
            }
            registry::withdraw(&spec.mountpoint);
            info!("unmounted {}; daemon exits", spec.mountpoint.display());
            result.map_err(|e| Error::io("the FUSE session failed", e))
        }
        Err(e) => {
            report(Err(&e));
            Err(e)
        }
    }
}

type Started = (MountedSession, MountInfo, Vec<registry::Lock>, Arc<Journal>, Arc<Ctx>);

fn start(spec: &MountSpec) -> Result<Started> {
    sys::clear_umask();
    let store_lock = registry::lock(&spec.store.join("lock"), &format!("store {}", spec.store.display()))?;
    let ws_lock = registry::lock(
        &registry::workspace_lock_path(&spec.workspace),
        &format!("workspace {}", spec.workspace.display()),
    )?;
    // Open the workspace before mounting: an in-place mount hides it.
    let journal = Arc::new(Journal::open_dir(&spec.store)?);
    let tree = Arc::new(LiveTree::new(&spec.workspace, Some(journal.clone()))?);
    if let Some(since) = journal.outside_since_ns() {
        // Before mounting, nothing else changes the tree under us.
        let changed = tree.scan_changed_since(since).map_err(|e| Error::Daemon(format!("cannot scan the workspace for outside changes: {e}")))?;
        journal.record_outside_changes(&changed).map_err(|e| Error::Daemon(e.to_string()))?;
    }
    let fs = LiveFs::new(tree.clone(), FsOptions { cache_timeout: spec.cache_timeout, passthrough: spec.passthrough });
    let fsname = format!("rewindfs:{}", spec.workspace.display());
    let session = MountedSession::mount(fs, &spec.mountpoint, &fsname, spec.threads)
        .map_err(|e| Error::io(format!("cannot mount on {}", spec.mountpoint.display()), e))?;

    let entry = registry::entry_for(&spec.mountpoint);
    let _ = std::fs::remove_file(&entry.socket);
    let listener = UnixListener::bind(&entry.socket)
        .map_err(|e| Error::io(format!("cannot create control socket {}", entry.socket.display()), e))?;
    let info = MountInfo {
        mountpoint: spec.mountpoint.clone(),
        workspace: spec.workspace.clone(),
        store: spec.store.clone(),
        in_place: spec.in_place(),
        pid: std::process::id() as i32,
        started_at: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        socket: entry.socket.clone(),
        passthrough: spec.passthrough == Passthrough::All,
    };
    registry::publish(&info)?;

    let ctx = Arc::new(Ctx { info: info.clone(), tree: tree.clone(), journal: journal.clone(), harness_seen: AtomicBool::new(false), views: std::sync::Mutex::new(Vec::new()) });
    let handler_ctx = ctx.clone();
    std::thread::Builder::new()
        .name("control".into())
        .spawn(move || control::serve(listener, move |req| handle(req, &handler_ctx)))
        .map_err(|e| Error::io("cannot start the control thread", e))?;
    spawn_signal_watcher(spec.mountpoint.clone());
    if let Some(quiet) = spec.auto_turn {
        spawn_auto_turn(ctx.clone(), quiet);
    }
    Ok((session, info, vec![store_lock, ws_lock], journal, ctx))
}

/// What the control handlers work with.
struct Ctx {
    info: MountInfo,
    tree: Arc<LiveTree>,
    journal: Arc<Journal>,
    /// Set by the first explicit `turn`: a harness announces turns, so
    /// quiet-period checkpoints stop.
    harness_seen: AtomicBool,
    /// Mountpoints of views served by this daemon.
    views: std::sync::Mutex<Vec<PathBuf>>,
}

/// The fsname prefix of view mounts (`rewindfs show`).
pub const VIEW_FSNAME_PREFIX: &str = "rewindfs-view:";

fn seal(ctx: &Ctx, info: &TurnInfo, reason: Reason) -> std::result::Result<i64, String> {
    let tree = ctx.tree.clone();
    let journal = ctx.journal.clone();
    ctx.journal
        .seal(info, reason, || tree.recapture_writers(&journal))
        .map(|c| c.0)
        .map_err(|e| format!("cannot seal the checkpoint: {e}"))
}

fn spawn_auto_turn(ctx: Arc<Ctx>, quiet: Duration) {
    let _ = std::thread::Builder::new().name("auto-turn".into()).spawn(move || {
        let tick = quiet.min(Duration::from_secs(1)).max(Duration::from_millis(50));
        loop {
            std::thread::sleep(tick);
            if ctx.harness_seen.load(Ordering::Relaxed) {
                info!("a harness announces turns; quiet-period checkpoints stop");
                return;
            }
            let (changes, idle) = ctx.journal.activity();
            if changes > 0 && idle.is_some_and(|s| s >= quiet.as_secs_f64()) {
                match seal(&ctx, &TurnInfo::default(), Reason::Auto) {
                    Ok(n) => info!("quiet for {:?}: sealed checkpoint {n}", quiet),
                    Err(e) => warn!("{e}"),
                }
            }
        }
    });
}

fn json<T: serde::Serialize>(v: &T) -> Response {
    match serde_json::to_value(v) {
        Ok(v) => Response::ok(v),
        Err(e) => Response::err(e.to_string()),
    }
}

fn handle(req: Request, ctx: &Ctx) -> Response {
    let (info, tree, journal) = (&ctx.info, &*ctx.tree, &*ctx.journal);
    match req {
        Request::Turn { info: turn } => {
            ctx.harness_seen.store(true, Ordering::Relaxed);
            match seal(ctx, &turn, Reason::Turn) {
                Ok(n) => json(&serde_json::json!({
                    "checkpoint": n, "message_id": turn.message_id, "session": turn.session, "label": turn.label
                })),
                Err(e) => Response::err(e),
            }
        }
        Request::Log => match crate::report::log(tree, journal) {
            Ok(turns) => json(&turns),
            Err(e) => Response::err(format!("cannot read the history: {e}")),
        },
        Request::Diff { from, to, paths, patch } => {
            let a = match journal.resolve(&from) {
                Ok(c) => c.0,
                Err(e) => return Response::err(e.to_string()),
            };
            let b = match to.as_deref().map(|t| journal.resolve(t)) {
                None => None,
                Some(Ok(c)) => Some(c.0),
                Some(Err(e)) => return Response::err(e.to_string()),
            };
            let va = TreeView::at(tree, journal, a);
            let vb = match b {
                Some(b) => TreeView::at(tree, journal, b),
                None => TreeView::live(tree, journal),
            };
            match crate::report::diff(&va, &vb, &paths, patch) {
                Ok(changes) => json(&serde_json::json!({ "from": a, "to": b, "changes": changes })),
                Err(e) => Response::err(format!("cannot compute the diff: {e}")),
            }
        }
        Request::Show { checkpoint, mountpoint } => {
            let n = match journal.resolve(&checkpoint) {
                Ok(c) => c.0,
                Err(e) => return Response::err(e.to_string()),
            };
            let browser = match crate::view::browse::Browser::single(ctx.tree.clone(), ctx.journal.clone(), n) {
                Ok(b) => Arc::new(b),
                Err(e) => return Response::err(format!("cannot open checkpoint {n}: {e}")),
            };
            let fsname = format!("{VIEW_FSNAME_PREFIX}{}@{n}", info.workspace.display());
            match crate::fs::view::ViewSession::mount(browser, &mountpoint, &fsname) {
                Ok(session) => {
                    let mp = mountpoint.clone();
                    let _ = std::thread::Builder::new().name("view".into()).spawn(move || {
                        if let Err(e) = session.run() {
                            warn!("view of checkpoint {n} on {} ended: {e}", mp.display());
                        }
                    });
                    info!("showing checkpoint {n} on {}", mountpoint.display());
                    ctx.views.lock().unwrap_or_else(|p| p.into_inner()).push(mountpoint.clone());
                    json(&serde_json::json!({ "checkpoint": n, "mountpoint": mountpoint }))
                }
                Err(e) => Response::err(format!("cannot mount the view on {}: {e}", mountpoint.display())),
            }
        }
        Request::History { path } => match crate::report::history(tree, journal, &path) {
            Ok(events) => json(&events),
            Err(e) => Response::err(format!("cannot read the history of {}: {e}", path.display())),
        },
        Request::Status => {
            let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
            let mut data = serde_json::to_value(info).unwrap_or_default();
            data["uptime_secs"] = now.saturating_sub(info.started_at).into();
            data["objects_known"] = tree.object_count().into();
            let turn = journal.current_turn();
            let (changes, idle) = journal.activity();
            let message = journal
                .with_meta(|m| m.checkpoints())
                .ok()
                .and_then(|cs| cs.into_iter().find(|c| c.checkpoint == turn))
                .and_then(|c| c.message_id);
            data["turn"] = turn.into();
            data["message_id"] = message.into();
            data["turn_changes"] = changes.into();
            data["idle_secs"] = idle.into();
            Response::ok(data)
        }
        Request::Unmount { lazy } => {
            if let Err(e) = tree.syncfs() {
                warn!("syncfs of {} before unmount failed: {e}", info.workspace.display());
            }
            match sys::umount(&info.mountpoint, lazy) {
                Ok(()) => Response::ok(serde_json::Value::Null),
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Response::err(format!(
                    "{} is busy: processes still use it (see `fuser -vm {}`); close them or use --lazy",
                    info.mountpoint.display(),
                    info.mountpoint.display()
                )),
                Err(e) => Response::err(format!("cannot unmount {}: {e}", info.mountpoint.display())),
            }
        }
    }
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
            if mounted { MountState::Live(info) } else { MountState::Starting(info) }
        }
        Some(info) => {
            if mounted { MountState::Dead(Some(info)) } else { MountState::NotMounted }
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
        if b[i] == b'\\' && i + 3 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
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
}
