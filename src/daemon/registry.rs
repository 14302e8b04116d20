//! Where running mounts are recorded: one JSON file and one control socket
//! per mount in a runtime directory outside every workspace, plus lock
//! files that stop a second daemon from serving the same workspace or
//! store.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What the daemon of one mount publishes about itself.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MountInfo {
    pub mountpoint: PathBuf,
    pub workspace: PathBuf,
    pub store: PathBuf,
    pub in_place: bool,
    pub pid: i32,
    /// Seconds since the Unix epoch.
    pub started_at: u64,
    pub socket: PathBuf,
    pub passthrough: bool,
}

/// The runtime directory: `$REWINDFS_RUNTIME_DIR`, else `/run/rewindfs` for
/// root, else `$XDG_RUNTIME_DIR/rewindfs`, else `/tmp/rewindfs-<uid>`.
pub fn runtime_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("REWINDFS_RUNTIME_DIR") {
        return PathBuf::from(dir);
    }
    if crate::sys::geteuid() == 0 {
        return PathBuf::from("/run/rewindfs");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) => PathBuf::from(dir).join("rewindfs"),
        None => PathBuf::from(format!("/tmp/rewindfs-{}", crate::sys::geteuid())),
    }
}

fn key(path: &Path) -> String {
    let hash = blake3::hash(path.as_os_str().as_encoded_bytes());
    hash.to_hex()[..16].to_string()
}

/// Paths of the files that describe the mount at `mountpoint`.
pub struct Entry {
    pub info: PathBuf,
    pub socket: PathBuf,
}

pub fn entry_for(mountpoint: &Path) -> Entry {
    let dir = runtime_dir();
    let k = key(mountpoint);
    Entry { info: dir.join(format!("mount-{k}.json")), socket: dir.join(format!("mount-{k}.sock")) }
}

fn ensure_runtime_dir() -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let dir = runtime_dir();
    fs::create_dir_all(&dir).map_err(|e| Error::io(format!("cannot create runtime directory {}", dir.display()), e))?;
    // Readable (status works for everyone), writable by the owner only.
    let _ = fs::set_permissions(&dir, fs::Permissions::from_mode(0o755));
    Ok(dir)
}

/// Writes the mount's info file atomically (temp + rename).
pub fn publish(info: &MountInfo) -> Result<()> {
    ensure_runtime_dir()?;
    let entry = entry_for(&info.mountpoint);
    let tmp = entry.info.with_extension("json.tmp");
    let json = serde_json::to_vec_pretty(info).map_err(|e| Error::Daemon(format!("cannot encode mount info: {e}")))?;
    fs::write(&tmp, json).map_err(|e| Error::io(format!("cannot write {}", tmp.display()), e))?;
    fs::rename(&tmp, &entry.info).map_err(|e| Error::io(format!("cannot write {}", entry.info.display()), e))?;
    Ok(())
}

/// Removes the mount's info file and socket.
pub fn withdraw(mountpoint: &Path) {
    let entry = entry_for(mountpoint);
    let _ = fs::remove_file(entry.info);
    let _ = fs::remove_file(entry.socket);
}

/// The info of the mount at `mountpoint`, if a daemon published one.
pub fn read(mountpoint: &Path) -> Option<MountInfo> {
    let bytes = fs::read(entry_for(mountpoint).info).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Every published mount.
pub fn list() -> Vec<MountInfo> {
    let Ok(dir) = fs::read_dir(runtime_dir()) else { return Vec::new() };
    let mut out: Vec<MountInfo> = dir
        .filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with("mount-") && n.ends_with(".json")
        })
        .filter_map(|e| serde_json::from_slice(&fs::read(e.path()).ok()?).ok())
        .collect();
    out.sort_by(|a, b| a.mountpoint.cmp(&b.mountpoint));
    out
}

/// An exclusive lock held for the life of the daemon; released by the
/// kernel when the process dies, even by SIGKILL.
#[derive(Debug)]
pub struct Lock {
    _file: File,
    pub path: PathBuf,
}

/// Takes the lock file at `path`, or says who holds it.
pub fn lock(path: &Path, what: &str) -> Result<Lock> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(|e| Error::io(format!("cannot create {}", parent.display()), e))?;
    }
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = OpenOptions::new()
        .mode(0o644)
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| Error::io(format!("cannot open lock file {}", path.display()), e))?;
    match rustix::fs::flock(file.as_fd(), rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {
            file.set_len(0).ok();
            let _ = writeln!(file, "{}", std::process::id());
            Ok(Lock { _file: file, path: path.to_path_buf() })
        }
        Err(rustix::io::Errno::WOULDBLOCK) => {
            let holder = fs::read_to_string(path).unwrap_or_default();
            Err(Error::kind_of(
                crate::error::ErrorKind::Busy,
                format!("{what} is already in use by rewindfs daemon pid {}", holder.trim()),
            ))
        }
        Err(e) => Err(Error::io(format!("cannot lock {}", path.display()), e.into())),
    }
}

/// The lock that stops two daemons from serving one workspace.
pub fn workspace_lock_path(workspace: &Path) -> PathBuf {
    runtime_dir().join(format!("workspace-{}.lock", key(workspace)))
}
