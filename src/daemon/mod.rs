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
use crate::journal::{Journal, TurnInfo};
use crate::meta::Reason;
use crate::sys;
use crate::view::TreeView;
use crate::workspace::LiveTree;
use control::{Request, Response};
use registry::MountInfo;
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
    /// Seal a checkpoint after this long without writes (until a harness
    /// calls `turn`, which turns this off for the rest of the mount).
    pub auto_turn: Option<Duration>,
    /// Record pre-images (off only to measure what recording costs).
    pub record: bool,
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
            info!(
                "serving {} on {} (store {})",
                spec.workspace.display(),
                spec.mountpoint.display(),
                spec.store.display()
            );
            let result = session.run();
            for view in ctx.views.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
                // Views read the live tree: they end with it.
                let _ = sys::umount(&view, true);
            }
            // The workspace on disk must be the rewound tree once unmounted.
            loop {
                match ctx.tree.settle_one() {
                    Ok(true) => continue,
                    Ok(false) => break,
                    Err(e) => {
                        warn!("cannot finish writing rewound files ({e}); the next mount resumes");
                        break;
                    }
                }
            }
            match journal.sync().and_then(|_| journal.mark_clean_unmount()) {
                Ok(()) => {}
                Err(e) => warn!("could not make the journal durable at unmount: {e}"),
            }
            // Answer the unmount request before exiting.
            control::drain(Duration::from_secs(5));
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

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| Error::io(format!("cannot set permissions of {}", path.display()), e))
}

fn start(spec: &MountSpec) -> Result<Started> {
    // The store is private to the daemon's owner, whatever its creator's umask.
    set_mode(&spec.store, 0o700)?;
    sys::clear_umask();
    let store_lock = registry::lock(&spec.store.join("lock"), &format!("store {}", spec.store.display()))?;
    let ws_lock = registry::lock(
        &registry::workspace_lock_path(&spec.workspace),
        &format!("workspace {}", spec.workspace.display()),
    )?;
    // Open the workspace before mounting: an in-place mount hides it.
    let journal = Arc::new(Journal::open_dir(&spec.store)?);
    let recording = if spec.record { Some(journal.clone()) } else { None };
    if !spec.record {
        warn!("recording is off for {}: nothing will be undoable", spec.workspace.display());
    }
    let tree = Arc::new(LiveTree::new(&spec.workspace, recording)?.with_attic(&spec.store.join("attic"))?);
    match tree.load_pending() {
        Ok(0) => {}
        Ok(n) => info!("{n} rewound files still need their content; the settler resumes"),
        Err(e) => return Err(Error::Daemon(format!("cannot read pending files: {e}"))),
    }
    spawn_settler(tree.clone());
    if let Some(since) = journal.outside_since_ns() {
        // Before mounting, nothing else changes the tree under us.
        let changed = tree
            .scan_changed_since(since)
            .map_err(|e| Error::Daemon(format!("cannot scan the workspace for outside changes: {e}")))?;
        journal.record_outside_changes(&changed).map_err(|e| Error::Daemon(e.to_string()))?;
    }
    let world = Arc::new(std::sync::RwLock::new(()));
    let fs = LiveFs::new(
        tree.clone(),
        FsOptions { cache_timeout: spec.cache_timeout, passthrough: spec.passthrough },
        world.clone(),
    );
    let fsname = format!("rewindfs:{}", spec.workspace.display());
    let session = MountedSession::mount(fs, &spec.mountpoint, &fsname, spec.threads)
        .map_err(|e| Error::io(format!("cannot mount on {}", spec.mountpoint.display()), e))?;

    let entry = registry::entry_for(&spec.mountpoint);
    let _ = std::fs::remove_file(&entry.socket);
    let listener = UnixListener::bind(&entry.socket)
        .map_err(|e| Error::io(format!("cannot create control socket {}", entry.socket.display()), e))?;
    // Only the owner may change history or rewind: an agent running as
    // another user cannot reach the socket.
    set_mode(&entry.socket, 0o600)?;
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

    let ctx = Arc::new(Ctx {
        info: info.clone(),
        tree: tree.clone(),
        journal: journal.clone(),
        harness_seen: AtomicBool::new(false),
        views: std::sync::Mutex::new(Vec::new()),
        invalidator: session
            .invalidator()
            .map_err(|e| Error::io("cannot duplicate the FUSE device descriptor".to_string(), e))?,
        world,
    });
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
    invalidator: crate::fs::Invalidator,
    /// Taken exclusively by a rewind (see `LiveFs`).
    world: Arc<std::sync::RwLock<()>>,
}

/// The fsname prefix of view mounts (`rewindfs show`).
pub const VIEW_FSNAME_PREFIX: &str = "rewindfs-view:";

fn seal(ctx: &Ctx, info: &TurnInfo, reason: Reason) -> std::result::Result<i64, String> {
    seal_on(ctx, info, reason, None)
}

fn seal_on(ctx: &Ctx, info: &TurnInfo, reason: Reason, parent: Option<i64>) -> std::result::Result<i64, String> {
    let tree = ctx.tree.clone();
    let journal = ctx.journal.clone();
    let sealed = ctx
        .journal
        .seal_on(info, reason, parent, || {
            // Before the writers are recorded again: the live tree is still
            // the tree at the end of the sealed turn.
            crate::report::note_sealed_turn(&tree, &journal);
            tree.recapture_writers(&journal)
        })
        .map(|c| c.0)
        .map_err(|e| format!("cannot seal the checkpoint: {e}"))?;
    // The turn's `log` statistics, off the turn gate and the caller's
    // path: reading contents for line counts must not delay the next turn.
    let _ = std::thread::Builder::new().name("turn-stats".into()).spawn(move || {
        if let Err(e) = crate::report::summarize_sealed_turn(&tree, &journal, sealed - 1) {
            warn!("cannot compute the statistics of turn {}: {e}", sealed - 1);
        }
    });
    Ok(sealed)
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
            if changes > 0 && idle.is_some_and(|s| s >= quiet.as_secs_f64()) && !ctx.tree.writers_active_within(quiet) {
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
        Request::Restore { checkpoint, paths, dry_run } => {
            let k = match journal.resolve(&checkpoint) {
                Ok(c) => c.0,
                Err(e) => return Response::err(e.to_string()),
            };
            let what = if paths.is_empty() {
                "everything".to_string()
            } else {
                paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
            };
            let before = if dry_run {
                None
            } else {
                let label = TurnInfo {
                    label: Some(format!("before restoring {what} from checkpoint {k}")),
                    ..Default::default()
                };
                match seal(ctx, &label, Reason::Turn) {
                    Ok(n) => Some(n),
                    Err(e) => return Response::err(e),
                }
            };
            let result = crate::restore::restore(tree, journal, k, &paths, dry_run);
            let (changes, touched) = match result {
                Ok(x) => x,
                Err(e) => {
                    return Response::err(format!(
                        "restore failed part-way (undo with `rewindfs restore {}`): {e}",
                        before.unwrap_or(k)
                    ));
                }
            };
            for (dir, name) in &touched.entries {
                ctx.invalidator.entry(*dir, name);
            }
            for ino in &touched.inodes {
                ctx.invalidator.inode(*ino);
            }
            let after = match before {
                Some(_) => {
                    let label =
                        TurnInfo { label: Some(format!("restored {what} from checkpoint {k}")), ..Default::default() };
                    match seal(ctx, &label, Reason::Turn) {
                        Ok(n) => Some(n),
                        Err(e) => return Response::err(e),
                    }
                }
                None => None,
            };
            json(
                &serde_json::json!({ "checkpoint": k, "dry_run": dry_run, "undo_checkpoint": before, "result_checkpoint": after, "changes": changes }),
            )
        }
        Request::Rewind { checkpoint, dry_run } => rewind(ctx, &checkpoint, dry_run),
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
            data["pending_files"] = tree.pending_count().into();
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

/// Rewinds the whole tree. The world lock keeps every other request out
/// while the tree changes, so no process sees a mix of old and new.
fn rewind(ctx: &Ctx, checkpoint: &str, dry_run: bool) -> Response {
    let (tree, journal) = (&*ctx.tree, &*ctx.journal);
    let k = match journal.resolve(checkpoint) {
        Ok(c) => c.0,
        Err(e) => return Response::err(e.to_string()),
    };
    if dry_run {
        // The impact, as a diff from the live tree to the checkpoint.
        let live = TreeView::live(tree, journal);
        let past = TreeView::at(tree, journal, k);
        return match crate::report::diff(&live, &past, &[], false) {
            Ok(changes) => json(&serde_json::json!({ "checkpoint": k, "dry_run": true, "changes": changes })),
            Err(e) => Response::err(format!("cannot compute the rewind: {e}")),
        };
    }
    let started = std::time::Instant::now();
    let world = ctx.world.write().unwrap_or_else(|p| p.into_inner());
    let safety_label =
        TurnInfo { label: Some(format!("safety checkpoint before rewind to {k}")), ..Default::default() };
    let safety = match seal(ctx, &safety_label, Reason::Turn) {
        Ok(n) => n,
        Err(e) => return Response::err(e),
    };
    let sealed_safety = started.elapsed();
    let result = if crate::rewind::instant_available(tree) {
        crate::rewind::rewind(tree, journal, k)
    } else {
        crate::restore::restore(tree, journal, k, &[], false)
    };
    let (changes, touched) = match result {
        Ok(x) => x,
        Err(e) => {
            drop(world);
            return Response::err(format!(
                "rewind failed part-way; `rewindfs rewind {safety}` puts back the tree as it was: {e}"
            ));
        }
    };
    let swapped = started.elapsed();
    let done_label = TurnInfo { label: Some(format!("rewound to {k}")), ..Default::default() };
    let result = seal_on(ctx, &done_label, Reason::Rewind, Some(k));
    drop(world);
    let sealed_result = started.elapsed();
    // After the lock: the kernel may need locks held by requests that were
    // waiting for it.
    for (dir, name) in &touched.entries {
        ctx.invalidator.entry(*dir, name);
    }
    let entries_done = started.elapsed();
    for ino in &touched.inodes {
        ctx.invalidator.inode(*ino);
    }
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    info!(
        "rewound to checkpoint {k} in {elapsed_ms:.1} ms ({} changes; safety checkpoint {safety}): safety seal {:.1} ms, \
         tree switched {:.1} ms, result sealed {:.1} ms, {} entries invalidated {:.1} ms, {} inodes {:.1} ms",
        changes.len(),
        ms(sealed_safety),
        ms(swapped - sealed_safety),
        ms(sealed_result - swapped),
        touched.entries.len(),
        ms(entries_done - sealed_result),
        touched.inodes.len(),
        elapsed_ms - ms(entries_done),
    );
    match result {
        Ok(n) => json(&serde_json::json!({
            "checkpoint": k, "dry_run": false, "safety_checkpoint": safety, "result_checkpoint": n,
            "elapsed_ms": elapsed_ms,
            "phases_ms": {
                "safety_seal": ms(sealed_safety),
                "switch": ms(swapped - sealed_safety),
                "result_seal": ms(sealed_result - swapped),
                "invalidate": elapsed_ms - ms(sealed_result),
            },
            "changes": changes
        })),
        Err(e) => Response::err(e),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Writes the bytes of rewound files in the background.
fn spawn_settler(tree: Arc<LiveTree>) {
    let _ = std::thread::Builder::new().name("settler".into()).spawn(move || {
        loop {
            match tree.settle_one() {
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
}
