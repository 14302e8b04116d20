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
use crate::workspace::LiveTree;
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
        Ok((session, info, _locks)) => {
            report(Ok(&info));
            info!("serving {} on {} (store {})", spec.workspace.display(), spec.mountpoint.display(), spec.store.display());
            let result = session.run();
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

type Started = (MountedSession, MountInfo, Vec<registry::Lock>);

fn start(spec: &MountSpec) -> Result<Started> {
    sys::clear_umask();
    let store_lock = registry::lock(&spec.store.join("lock"), &format!("store {}", spec.store.display()))?;
    let ws_lock = registry::lock(
        &registry::workspace_lock_path(&spec.workspace),
        &format!("workspace {}", spec.workspace.display()),
    )?;
    // Open the workspace before mounting: an in-place mount hides it.
    let tree = Arc::new(LiveTree::new(&spec.workspace)?);
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

    let handler_info = info.clone();
    let handler_tree = tree.clone();
    std::thread::Builder::new()
        .name("control".into())
        .spawn(move || control::serve(listener, move |req| handle(req, &handler_info, &handler_tree)))
        .map_err(|e| Error::io("cannot start the control thread", e))?;
    spawn_signal_watcher(spec.mountpoint.clone());
    Ok((session, info, vec![store_lock, ws_lock]))
}

fn handle(req: Request, info: &MountInfo, tree: &LiveTree) -> Response {
    match req {
        Request::Status => {
            let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
            let mut data = serde_json::to_value(info).unwrap_or_default();
            data["uptime_secs"] = now.saturating_sub(info.started_at).into();
            data["objects_known"] = tree.object_count().into();
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
