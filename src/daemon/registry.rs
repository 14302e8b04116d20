//! Where running mounts are recorded: one JSON file and one control socket
//! per mount in a runtime directory outside every workspace, plus lock
//! files that stop a second daemon from serving the same workspace or
//! store.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};

/// What the daemon of one mount publishes about itself.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MountInfo {
    #[serde(with = "crate::name_json")]
    pub mountpoint: PathBuf,
    #[serde(with = "crate::name_json")]
    pub workspace: PathBuf,
    #[serde(with = "crate::name_json")]
    pub store: PathBuf,
    pub in_place: bool,
    pub pid: i32,
    /// Seconds since the Unix epoch.
    pub started_at: u64,
    #[serde(with = "crate::name_json")]
    pub socket: PathBuf,
    pub passthrough: bool,
    /// Device and inode of the workspace's backing directory: another path
    /// to it (a bind mount) is the same workspace.
    #[serde(default)]
    pub workspace_id: Option<(u64, u64)>,
    /// Rewinds and restores the daemon found interrupted when it started,
    /// and completed before mounting.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recovered: Vec<crate::rewind::recovery::Recovered>,
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
    entry_in(&runtime_dir(), mountpoint)
}

/// The same, in the runtime directory `dir`.
fn entry_in(dir: &Path, mountpoint: &Path) -> Entry {
    let k = key(mountpoint);
    Entry { info: dir.join(format!("mount-{k}.json")), socket: dir.join(format!("mount-{k}.sock")) }
}

fn ensure_runtime_dir() -> Result<PathBuf> {
    let dir = runtime_dir();
    match fs::symlink_metadata(&dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent() {
                create_dirs_0755(parent)
                    .map_err(|e| Error::io(format!("cannot create runtime directory {}", parent.display()), e))?;
            }
            // Readable (status works for everyone), writable by the owner only.
            match std::fs::DirBuilder::new().mode(0o755).create(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Error::io(format!("cannot create runtime directory {}", dir.display()), e)),
            }
        }
        Err(e) => return Err(Error::io(format!("cannot read runtime directory {}", dir.display()), e)),
        Ok(_) => {}
    }
    let owner = trusted_dir(&dir)?;
    if owner != crate::sys::geteuid() {
        return Err(Error::kind_of(
            ErrorKind::Refused,
            format!(
                "runtime directory {} belongs to uid {owner}, not to this daemon's uid {}; remove it or set REWINDFS_RUNTIME_DIR",
                dir.display(),
                crate::sys::geteuid()
            ),
        ));
    }
    Ok(dir)
}

/// Checks that the runtime directory can be trusted: a real directory (not
/// a symlink) owned by root or by us, writable by its owner only. Returns
/// its owner, the only user whose runtime files are believed.
fn trusted_dir(dir: &Path) -> Result<u32> {
    let meta = fs::symlink_metadata(dir)
        .map_err(|e| Error::io(format!("cannot read runtime directory {}", dir.display()), e))?;
    let me = crate::sys::geteuid();
    if !meta.file_type().is_dir() {
        return Err(Error::kind_of(
            ErrorKind::Refused,
            format!("runtime directory {} is not a directory (a symlink?)", dir.display()),
        ));
    }
    if meta.uid() != 0 && meta.uid() != me {
        return Err(Error::kind_of(
            ErrorKind::Refused,
            format!(
                "runtime directory {} belongs to uid {}, neither root nor you (uid {me}); refusing to trust it",
                dir.display(),
                meta.uid()
            ),
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(Error::kind_of(
            ErrorKind::Refused,
            format!(
                "runtime directory {} is writable by others (mode {:o}); refusing to trust it",
                dir.display(),
                meta.mode() & 0o7777
            ),
        ));
    }
    Ok(meta.uid())
}

/// Checks one file of the runtime directory: of the expected type, owned
/// by the directory's owner, not writable by anyone else. An agent that
/// could rewrite a mount's info file could point the owner's commands at a
/// socket of its own.
fn trusted_file(path: &Path, owner: u32, socket: bool) -> Result<()> {
    let meta = fs::symlink_metadata(path).map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
    let ty = meta.file_type();
    let kind_ok = if socket { ty.is_socket() } else { ty.is_file() };
    if !kind_ok {
        let want = if socket { "a socket" } else { "a regular file" };
        return Err(Error::kind_of(
            ErrorKind::Refused,
            format!("{} is not {want}; refusing to trust it", path.display()),
        ));
    }
    if meta.uid() != owner {
        return Err(Error::kind_of(
            ErrorKind::Refused,
            format!(
                "{} belongs to uid {}, not to uid {owner} who runs the daemons; refusing to trust it",
                path.display(),
                meta.uid()
            ),
        ));
    }
    // For a socket, write permission is leave to connect (with an agent
    // user, everyone may; the daemon's policy decides), not to replace it:
    // that is the trusted directory's to allow.
    if !socket && meta.mode() & 0o022 != 0 {
        return Err(Error::kind_of(
            ErrorKind::Refused,
            format!("{} is writable by others (mode {:o}); refusing to trust it", path.display(), meta.mode() & 0o7777),
        ));
    }
    Ok(())
}

/// Reads and checks one info file: the file, its socket, and that the
/// socket is the one the mountpoint's key names (never a path from the
/// file itself).
fn read_trusted(path: &Path, owner: u32) -> Result<MountInfo> {
    trusted_file(path, owner, false)?;
    let bytes = fs::read(path).map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
    let info: MountInfo = serde_json::from_slice(&bytes).map_err(|e| {
        Error::kind_of(ErrorKind::Refused, format!("{} is not a rewindfs mount file: {e}", path.display()))
    })?;
    let entry = entry_in(path.parent().unwrap_or(Path::new("/")), &info.mountpoint);
    if entry.info != path || entry.socket != info.socket {
        return Err(Error::kind_of(
            ErrorKind::Refused,
            format!(
                "{} names socket {} for mountpoint {}, not {}; refusing to trust it",
                path.display(),
                info.socket.display(),
                info.mountpoint.display(),
                entry.socket.display()
            ),
        ));
    }
    trusted_file(&info.socket, owner, true)?;
    Ok(info)
}

/// Writes the mount's info file atomically (temp + rename), readable by
/// everyone and writable by the daemon's user only.
pub fn publish(info: &MountInfo) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    ensure_runtime_dir()?;
    let entry = entry_for(&info.mountpoint);
    let tmp = entry.info.with_extension("json.tmp");
    let json = serde_json::to_vec_pretty(info).map_err(|e| Error::Daemon(format!("cannot encode mount info: {e}")))?;
    let _ = fs::remove_file(&tmp);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(|e| Error::io(format!("cannot write {}", tmp.display()), e))?;
    // The daemon runs with umask 0; say the mode outright.
    file.set_permissions(fs::Permissions::from_mode(0o644))
        .and_then(|()| file.write_all(&json))
        .map_err(|e| Error::io(format!("cannot write {}", tmp.display()), e))?;
    fs::rename(&tmp, &entry.info).map_err(|e| Error::io(format!("cannot write {}", entry.info.display()), e))?;
    Ok(())
}

/// Removes the mount's info file and socket.
pub fn withdraw(mountpoint: &Path) {
    let entry = entry_for(mountpoint);
    let _ = fs::remove_file(entry.info);
    let _ = fs::remove_file(entry.socket);
}

/// The info of the mount at `mountpoint`, if a daemon published one that
/// can be trusted (a file that fails the checks is logged and ignored).
pub fn read(mountpoint: &Path) -> Option<MountInfo> {
    // Where `list_checked` finds mounts: an agent told the owner's live
    // mount from a dead one only by its own directory, and tried to
    // detach it ("Operation not permitted") instead of asking the daemon.
    for dir in runtime_dirs() {
        let path = entry_in(&dir, mountpoint).info;
        if fs::symlink_metadata(&path).is_err() {
            continue;
        }
        match trusted_dir(&dir).and_then(|owner| read_trusted(&path, owner)) {
            Ok(info) => return Some(info),
            Err(e) => log::warn!("ignoring the mount file of {}: {e}", mountpoint.display()),
        }
    }
    None
}

/// The runtime directories searched for mounts: this user's, and for an
/// agent running as another user, root's, where it finds the owner's
/// mounts (trusted: root's, not writable by others).
fn runtime_dirs() -> Vec<PathBuf> {
    let own = runtime_dir();
    let root_dir = Path::new("/run/rewindfs");
    let also_root = crate::sys::geteuid() != 0 && std::env::var_os("REWINDFS_RUNTIME_DIR").is_none() && own != root_dir;
    let mut dirs = vec![own];
    if also_root {
        dirs.push(root_dir.to_path_buf());
    }
    dirs
}

/// Every published mount that can be trusted, and a sentence for each
/// runtime file that was refused.
pub fn list_checked() -> (Vec<MountInfo>, Vec<String>) {
    let (mut out, mut refused) = (Vec::new(), Vec::new());
    for dir in runtime_dirs() {
        let (more, more_refused) = list_dir(&dir);
        out.extend(more);
        refused.extend(more_refused);
    }
    (out, refused)
}

fn list_dir(dir: &Path) -> (Vec<MountInfo>, Vec<String>) {
    let dir = dir.to_path_buf();
    let Ok(listing) = fs::read_dir(&dir) else { return (Vec::new(), Vec::new()) };
    let owner = match trusted_dir(&dir) {
        Ok(owner) => owner,
        Err(e) => return (Vec::new(), vec![e.to_string()]),
    };
    let (mut out, mut refused) = (Vec::new(), Vec::new());
    for e in listing.filter_map(|e| e.ok()) {
        let n = e.file_name();
        let n = n.to_string_lossy();
        if !(n.starts_with("mount-") && n.ends_with(".json")) {
            continue;
        }
        match read_trusted(&e.path(), owner) {
            Ok(info) => out.push(info),
            Err(err) => refused.push(err.to_string()),
        }
    }
    out.sort_by(|a, b| a.mountpoint.cmp(&b.mountpoint));
    (out, refused)
}

/// Every published mount that can be trusted; refused files are logged.
pub fn list() -> Vec<MountInfo> {
    let (out, refused) = list_checked();
    for r in refused {
        log::warn!("{r}");
    }
    out
}

/// An exclusive lock held for the life of the daemon; released by the
/// kernel when the process dies, even by SIGKILL.
#[derive(Debug)]
pub struct Lock {
    _file: File,
    pub path: PathBuf,
    /// Removed when released ([`lock_transient`]).
    transient: bool,
}

impl Drop for Lock {
    fn drop(&mut self) {
        // Still held here: whoever opened the file meanwhile finds, once
        // it has the lock, that the path no longer names it, and retries.
        if self.transient {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Takes the lock file at `path`, or says who holds it.
pub fn lock(path: &Path, what: &str) -> Result<Lock> {
    // A lock file removed by its holder between our open and our lock is
    // no lock: take the one at the path again.
    for _ in 0..16 {
        let lock = lock_once(path, what)?;
        let same = |m: &fs::Metadata| lock._file.metadata().is_ok_and(|f| f.dev() == m.dev() && f.ino() == m.ino());
        if fs::metadata(path).is_ok_and(|m| same(&m)) {
            return Ok(lock);
        }
    }
    Err(Error::kind_of(
        crate::error::ErrorKind::Busy,
        format!("{what}: its lock file {} keeps changing", path.display()),
    ))
}

/// [`lock`], removing the file when released: the runtime directory's
/// per-workspace locks, one for every workspace ever mounted otherwise.
/// Also removes the other workspaces' lock files that nobody holds (left
/// by older versions, or by a daemon that was killed).
pub fn lock_transient(path: &Path, what: &str) -> Result<Lock> {
    let mut lock = lock(path, what)?;
    lock.transient = true;
    if let Some(dir) = path.parent()
        && let Ok(entries) = fs::read_dir(dir)
    {
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("workspace-") && name.ends_with(".lock") && e.path() != path {
                // Taken and so removed at once; one in use is left alone.
                if let Ok(mut other) = lock_once(&e.path(), "a leftover lock") {
                    other.transient = true;
                }
            }
        }
    }
    Ok(lock)
}

fn lock_once(path: &Path, what: &str) -> Result<Lock> {
    if let Some(parent) = path.parent() {
        create_dirs_0755(parent).map_err(|e| Error::io(format!("cannot create {}", parent.display()), e))?;
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
            Ok(Lock { _file: file, path: path.to_path_buf(), transient: false })
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

/// The lock that stops two daemons from serving one workspace, named by
/// the directory's device and inode, not by a path to it. In the runtime
/// directory, created (mode 755) or checked to be trusted first: the
/// daemon, whose umask is 0, made it world-writable before, and every
/// later command then refused it.
pub fn workspace_lock_path(workspace_id: (u64, u64)) -> Result<PathBuf> {
    Ok(ensure_runtime_dir()?.join(format!("workspace-{:x}-{:x}.lock", workspace_id.0, workspace_id.1)))
}

/// `mkdir -p` with mode 755 for each directory made (less what the umask
/// takes; the daemon's is 0, which made them 777 with `create_dir_all`).
fn create_dirs_0755(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new().recursive(true).mode(0o755).create(dir)
}
