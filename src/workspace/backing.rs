//! The backing directory: the system calls that read and change the tree
//! under the mount. This is the only part of the workspace that calls
//! `crate::sys` for the tree (file handles, xattrs by descriptor, paths by
//! descriptor).
//!
//! The daemon never resolves a path through a symlink: every object is
//! reached by its kernel file handle, and every name is a single component
//! resolved with `*at()` calls relative to its parent directory.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rustix::fs::{AtFlags, Mode, OFlags, Stat, StatxFlags, Timespec, Timestamps, UTIME_NOW, UTIME_OMIT};

use crate::error::Errno;
use crate::sys::{self, FileHandle};
use crate::workspace::attr::{Attr, Caller, Ino, Kind, SetAttr, SetTime};
use crate::workspace::opener::{ObjectOpener, Opener};

type Res<T> = std::result::Result<T, Errno>;

/// How many directory descriptors to keep open for fast `*at()` calls.
/// Bounded: the process shares a hard limit of 20,000 descriptors.
const DIR_CACHE_CAPACITY: usize = 512;

/// The backing directory, reached by handle.
#[derive(Debug)]
pub struct Backing {
    /// The backing directory, opened before any mount so that an in-place
    /// mount does not hide it from us.
    root: Arc<OwnedFd>,
    root_handle: FileHandle,
    /// `O_PATH` descriptors of directories, by handle.
    dir_cache: Mutex<HashMap<FileHandle, Arc<OwnedFd>>>,
    /// How objects are opened by handle.
    opener: Box<dyn ObjectOpener>,
}

/// Sets the permission bits of `mode` on the object behind a
/// `/proc/self/fd/N` path (an O_PATH descriptor cannot be fchmod'ed).
fn chmod_by_path(path: &std::ffi::CStr, mode: u32) -> Res<()> {
    rustix::fs::chmodat(rustix::fs::CWD, path, Mode::from_raw_mode(mode & 0o7777), AtFlags::empty())?;
    Ok(())
}

/// The mode bits a write or truncation by a user without CAP_FSETID
/// clears on a regular file: setuid, and setgid when group execute is set
/// (setgid without it marks mandatory locking, which stays).
pub(crate) fn privileged_bits(mode: u32) -> u32 {
    if mode & libc::S_IFMT != libc::S_IFREG {
        return 0;
    }
    let mut bits = mode & libc::S_ISUID;
    if mode & libc::S_ISGID != 0 && mode & libc::S_IXGRP != 0 {
        bits |= libc::S_ISGID;
    }
    bits
}

fn ts(t: Option<SetTime>) -> Timespec {
    match t {
        None => Timespec { tv_sec: 0, tv_nsec: UTIME_OMIT },
        Some(SetTime::Now) => Timespec { tv_sec: 0, tv_nsec: UTIME_NOW },
        Some(SetTime::At(t)) => match t.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => Timespec { tv_sec: d.as_secs() as i64, tv_nsec: d.subsec_nanos() as _ },
            Err(e) => {
                let d = e.duration();
                let (mut s, mut n) = (-(d.as_secs() as i64), -(d.subsec_nanos() as i64));
                if n < 0 {
                    s -= 1;
                    n += 1_000_000_000;
                }
                Timespec { tv_sec: s, tv_nsec: n as _ }
            }
        },
    }
}

/// Open flags a client may pass through to the backing file. Creation and
/// truncation are done by explicit calls; O_DIRECT would need aligned
/// buffers the daemon does not use.
pub(crate) fn backing_open_flags(flags: i32) -> OFlags {
    let strip = libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY | libc::O_TRUNC | libc::O_DIRECT;
    OFlags::from_bits_retain(((flags & !strip) | libc::O_CLOEXEC) as u32)
}

/// The handle of the object a descriptor refers to.
pub(crate) fn handle_of_fd(fd: BorrowedFd<'_>) -> Res<FileHandle> {
    Ok(sys::name_to_handle_at(fd, OsStr::new(""))?)
}

/// Opens the object behind `handle` on the filesystem of `mount`.
pub(crate) fn open_by_handle_at(mount: BorrowedFd<'_>, handle: &FileHandle, flags: i32) -> Res<OwnedFd> {
    Ok(sys::open_by_handle_at(mount, handle, flags)?)
}

/// The kernel's name for the object behind `fd` (`/proc/self/fd/N`): an
/// absolute path, possibly stale or with " (deleted)" appended.
pub(crate) fn kernel_path(fd: BorrowedFd<'_>) -> Res<Vec<u8>> {
    Ok(rustix::fs::readlink(sys::proc_fd_path(fd).as_c_str(), Vec::new())?.into_bytes())
}

/// Sets the permission bits of the object behind `fd` (any descriptor,
/// `O_PATH` included).
pub(crate) fn set_perm(fd: BorrowedFd<'_>, perm: u32) -> Res<()> {
    chmod_by_path(&sys::proc_fd_path(fd), perm)
}

/// The handle of `name` in `dir`, without following a final symlink.
pub(crate) fn handle_at(dir: BorrowedFd<'_>, name: &OsStr) -> Res<FileHandle> {
    Ok(sys::name_to_handle_at(dir, name)?)
}

/// Stats `name` in `dir` without following a final symlink, with its handle.
pub(crate) fn stat_at(dir: BorrowedFd<'_>, name: &OsStr) -> Res<(Stat, FileHandle)> {
    let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
    Ok((st, handle_at(dir, name)?))
}

/// An `O_PATH` descriptor for `name` in `dir` (never a symlink's target);
/// `None` when there is no such name.
pub(crate) fn open_named(dir: BorrowedFd<'_>, name: &OsStr) -> Res<Option<OwnedFd>> {
    match rustix::fs::openat(dir, name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Opens the object an `O_PATH` descriptor refers to again, with `flags`
/// (through `/proc/self/fd`, which an `O_PATH` descriptor allows).
pub(crate) fn reopen(fd: BorrowedFd<'_>, flags: OFlags) -> Res<OwnedFd> {
    let path = sys::proc_fd_path(fd);
    Ok(rustix::fs::open(path.as_c_str(), flags | OFlags::CLOEXEC, Mode::empty())?)
}

/// Gives the object behind `fd` (any descriptor, `O_PATH` and `O_TMPFILE`
/// included) another name, `name` in `dir`. Through `/proc/self/fd`
/// rather than `AT_EMPTY_PATH`, which needs CAP_DAC_READ_SEARCH; the magic
/// link leads to a symlink itself, not its target.
pub(crate) fn link_fd(fd: BorrowedFd<'_>, dir: BorrowedFd<'_>, name: &OsStr) -> Res<()> {
    rustix::fs::linkat(rustix::fs::CWD, sys::proc_fd_path(fd).as_c_str(), dir, name, AtFlags::SYMLINK_FOLLOW)?;
    Ok(())
}

/// Sets the access and modification times of the object behind `fd`
/// (any descriptor, `O_PATH` included).
pub(crate) fn set_times(fd: BorrowedFd<'_>, atime: Timespec, mtime: Timespec) -> Res<()> {
    let path = sys::proc_fd_path(fd);
    let times = Timestamps { last_access: atime, last_modification: mtime };
    rustix::fs::utimensat(rustix::fs::CWD, path.as_c_str(), &times, AtFlags::empty())?;
    Ok(())
}

/// Sets extended attribute `name` on the object behind `fd`.
pub(crate) fn set_xattr(fd: BorrowedFd<'_>, name: &OsStr, value: &[u8], flags: i32) -> Res<()> {
    Ok(sys::setxattr(fd, name, value, flags)?)
}

/// Every extended attribute of an object, as (name, value); none when the
/// filesystem does not support them.
pub(crate) fn read_xattrs(fd: BorrowedFd<'_>) -> Res<Vec<(Vec<u8>, Vec<u8>)>> {
    let size = match sys::listxattr(fd, &mut []) {
        Ok(n) => n,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTSUP) | Some(libc::EPERM)) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    if size == 0 {
        return Ok(Vec::new());
    }
    let mut names = vec![0u8; size];
    let n = sys::listxattr(fd, &mut names)?;
    names.truncate(n);
    let mut out = Vec::new();
    for name in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let name_os = OsStr::from_bytes(name);
        let len = match sys::getxattr(fd, name_os, &mut []) {
            Ok(l) => l,
            Err(e) if e.raw_os_error() == Some(libc::ENODATA) => continue,
            Err(e) => return Err(e.into()),
        };
        let mut value = vec![0u8; len];
        let got = sys::getxattr(fd, name_os, &mut value)?;
        value.truncate(got);
        out.push((name.to_vec(), value));
    }
    Ok(out)
}

/// Answer to an xattr query: the size needed, or the bytes.
#[derive(Debug)]
pub enum XattrReply {
    Size(u32),
    Data(Vec<u8>),
}

/// With `size == 0`, answers the size of the value; otherwise the value
/// (ERANGE when it does not fit in `size`).
pub(crate) fn getxattr(fd: BorrowedFd<'_>, name: &OsStr, size: u32) -> Res<XattrReply> {
    if size == 0 {
        return Ok(XattrReply::Size(sys::getxattr(fd, name, &mut [])? as u32));
    }
    let mut buf = vec![0u8; size as usize];
    let n = sys::getxattr(fd, name, &mut buf)?;
    buf.truncate(n);
    Ok(XattrReply::Data(buf))
}

pub(crate) fn listxattr(fd: BorrowedFd<'_>, size: u32) -> Res<XattrReply> {
    if size == 0 {
        return Ok(XattrReply::Size(sys::listxattr(fd, &mut [])? as u32));
    }
    let mut buf = vec![0u8; size as usize];
    let n = sys::listxattr(fd, &mut buf)?;
    buf.truncate(n);
    Ok(XattrReply::Data(buf))
}

pub(crate) fn removexattr(fd: BorrowedFd<'_>, name: &OsStr) -> Res<()> {
    Ok(sys::removexattr(fd, name)?)
}

/// Every xattr of an object, sorted by name (empty when unreadable).
pub(crate) fn xattrs_sorted(fd: BorrowedFd<'_>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let Ok(XattrReply::Size(n)) = listxattr(fd, 0) else { return out };
    if n == 0 {
        return out;
    }
    let Ok(XattrReply::Data(names)) = listxattr(fd, n) else { return out };
    for name in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let os = OsStr::from_bytes(name);
        if let Ok(XattrReply::Size(len)) = getxattr(fd, os, 0)
            && let Ok(XattrReply::Data(v)) = getxattr(fd, os, len.max(1))
        {
            out.push((name.to_vec(), v));
        }
    }
    out.sort();
    out
}

pub(crate) fn lseek(fd: BorrowedFd<'_>, offset: i64, whence: i32) -> Res<i64> {
    Ok(sys::lseek(fd, offset, whence)?)
}

pub(crate) fn copy_file_range(
    src: BorrowedFd<'_>,
    off_in: u64,
    dst: BorrowedFd<'_>,
    off_out: u64,
    len: usize,
) -> Res<u32> {
    Ok(sys::copy_file_range(src, off_in, dst, off_out, len)? as u32)
}

/// Whether `name` in `dir` is the last name of a non-directory (so
/// removing it destroys the object's content).
pub(crate) fn is_last_link(dir: BorrowedFd<'_>, name: &OsStr) -> bool {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .map(|st| st.st_mode & libc::S_IFMT != libc::S_IFDIR && st.st_nlink <= 1)
        .unwrap_or(false)
}

/// Whether `name` exists in `dir` and, if so, whether it is the last name
/// of a non-directory (see `is_last_link`), in one `stat`.
pub(crate) fn name_state(dir: BorrowedFd<'_>, name: &OsStr) -> Res<Option<bool>> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st.st_mode & libc::S_IFMT != libc::S_IFDIR && st.st_nlink <= 1)),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Gives a newly created object to the caller, as ext4 would have:
/// owner = caller, group = caller's unless the parent is setgid.
pub(crate) fn give_to_caller(dir: BorrowedFd<'_>, name: &OsStr, caller: Caller, mode: Option<u32>) -> Res<()> {
    if caller.uid == 0 && caller.gid == 0 {
        return Ok(());
    }
    let parent = rustix::fs::fstat(dir)?;
    let gid = if parent.st_mode & libc::S_ISGID != 0 { None } else { Some(rustix::fs::Gid::from_raw(caller.gid)) };
    rustix::fs::chownat(dir, name, Some(rustix::fs::Uid::from_raw(caller.uid)), gid, AtFlags::SYMLINK_NOFOLLOW)?;
    // chown cleared setuid/setgid: put back what was asked for.
    if let Some(mode) = mode.filter(|m| m & 0o6000 != 0) {
        let fd = rustix::fs::openat(dir, name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
        chmod_by_path(&sys::proc_fd_path(fd.as_fd()), mode)?;
    }
    Ok(())
}

/// Clears the mode bits `bits` of an open file (see `privileged_bits`).
pub(crate) fn clear_mode_bits(file: &std::fs::File, mode: u32, bits: u32) -> Res<()> {
    rustix::fs::fchmod(file, Mode::from_raw_mode(mode & 0o7777 & !bits))?;
    Ok(())
}

/// Applies a `setattr` to the object behind `fd` (an `O_PATH` descriptor);
/// a truncation goes through `open` when given and writable. Returns the
/// attributes after the change. When a step fails before the truncation,
/// the owner and mode the earlier steps changed are set back (the times
/// are the last step, so a failure never leaves them changed). After a
/// truncation nothing is set back: the bytes are gone, and a setuid bit
/// the truncation cleared must stay cleared.
pub(crate) fn set_attrs(
    fd: BorrowedFd<'_>,
    ino: Ino,
    set: SetAttr,
    open: Option<&std::fs::File>,
    caller: Caller,
) -> Res<Attr> {
    // Only an owner or mode change can need setting back.
    let before =
        if set.uid.is_some() || set.gid.is_some() || set.mode.is_some() { Some(rustix::fs::fstat(fd)?) } else { None };
    let mut truncated = false;
    let applied = apply_attrs(fd, set, open, caller, &mut truncated);
    if let Err(e) = applied {
        if let Some(before) = before.filter(|_| !truncated) {
            let back = (|| -> Res<()> {
                if set.uid.is_some() || set.gid.is_some() {
                    let (uid, gid) =
                        (rustix::fs::Uid::from_raw(before.st_uid), rustix::fs::Gid::from_raw(before.st_gid));
                    rustix::fs::chownat(fd, "", Some(uid), Some(gid), AtFlags::EMPTY_PATH)?;
                }
                // After the owner: chown clears setuid/setgid.
                chmod_by_path(&sys::proc_fd_path(fd), before.st_mode)
            })();
            if let Err(b) = back {
                log::error!("setattr: cannot set the owner and mode back after a failure ({e}): {b}");
            }
        }
        return Err(e);
    }
    let st = rustix::fs::fstat(fd)?;
    Ok(Attr::from_stat(ino, &st))
}

/// The steps of `set_attrs`, in order: owner, mode, size, times.
fn apply_attrs(
    fd: BorrowedFd<'_>,
    set: SetAttr,
    open: Option<&std::fs::File>,
    caller: Caller,
    truncated: &mut bool,
) -> Res<()> {
    let proc_path = sys::proc_fd_path(fd);
    // Owner first: chown clears setuid/setgid, a mode set in the same
    // call must win.
    if set.uid.is_some() || set.gid.is_some() {
        rustix::fs::chownat(
            fd,
            "",
            set.uid.map(rustix::fs::Uid::from_raw),
            set.gid.map(rustix::fs::Gid::from_raw),
            AtFlags::EMPTY_PATH,
        )?;
    }
    if let Some(mode) = set.mode {
        chmod_by_path(&proc_path, mode)?;
    }
    if let Some(size) = set.size {
        match open {
            Some(file) => file.set_len(size).map_err(Errno::from)?,
            None => {
                let f = rustix::fs::open(proc_path.as_c_str(), OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
                rustix::fs::ftruncate(&f, size)?;
            }
        }
        *truncated = true;
        // A truncation by a user without CAP_FSETID clears setuid/setgid
        // as on ext4 (the daemon, as root, keeps them; the kernel leaves
        // this to us under FUSE_HANDLE_KILLPRIV_V2).
        let st = rustix::fs::fstat(fd)?;
        let bits = privileged_bits(st.st_mode);
        if caller.uid != 0 && set.mode.is_none() && bits != 0 {
            chmod_by_path(&proc_path, st.st_mode & !bits)?;
        }
    }
    if set.atime.is_some() || set.mtime.is_some() {
        if crate::faults::fail_point("setattr-times") {
            return Err(Errno(libc::EIO));
        }
        let times = Timestamps { last_access: ts(set.atime), last_modification: ts(set.mtime) };
        rustix::fs::utimensat(rustix::fs::CWD, proc_path.as_c_str(), &times, AtFlags::empty())?;
    }
    Ok(())
}

pub(crate) fn readlink(fd: BorrowedFd<'_>) -> Res<Vec<u8>> {
    Ok(rustix::fs::readlinkat(fd, "", Vec::new())?.into_bytes())
}

/// The entries of directory `dir` (without "." and ".."), as (name, inode
/// number on the backing filesystem, kind when the listing says it).
pub(crate) fn list_dir(dir: BorrowedFd<'_>) -> Res<Vec<(OsString, u64, Option<Kind>)>> {
    let fd = rustix::fs::openat(dir, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    let mut listing = rustix::fs::Dir::new(fd)?;
    let mut out = Vec::new();
    while let Some(entry) = listing.read() {
        let entry = entry?;
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        out.push((name.to_os_string(), entry.ino(), Kind::from_dirent(entry.file_type())));
    }
    Ok(out)
}

/// Flushes a directory (`dir` may be an `O_PATH` descriptor).
pub(crate) fn fsync_dir(dir: BorrowedFd<'_>) -> Res<()> {
    let fd = rustix::fs::openat(dir, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    rustix::fs::fsync(&fd)?;
    Ok(())
}

/// At most this many threads walk the tree for changes made outside the
/// mount (`Backing::scan_changed_since`).
const SCAN_THREADS: usize = 4;

/// Directories to visit, by handle and path relative to the root.
type Dirs = Vec<(FileHandle, std::path::PathBuf)>;

/// The directories of a [`Backing::walk_shared`] found and not visited
/// yet, how many are being visited (each may find more), and the first
/// error.
struct Queue {
    dirs: Dirs,
    busy: usize,
    failed: Option<Errno>,
}

/// A directory being visited by one thread of a walk: what it found goes
/// back to the queue when dropped (an error, if it unwound).
struct Visiting<'q> {
    queue: &'q Mutex<Queue>,
    changed: &'q std::sync::Condvar,
    found: Option<Res<Option<Dirs>>>,
}

impl Drop for Visiting<'_> {
    fn drop(&mut self) {
        let mut q = crate::poison::lock(self.queue, "the walk's queue");
        q.busy -= 1;
        match self.found.take() {
            Some(Ok(subdirs)) => q.dirs.extend(subdirs.unwrap_or_default()),
            Some(Err(e)) => {
                q.failed.get_or_insert(e);
            }
            None => {
                q.failed.get_or_insert(Errno::EIO);
            }
        }
        self.changed.notify_all();
    }
}

/// An object the scan at mount found changed (see `scan_changed_since`).
pub struct Changed {
    pub handle: FileHandle,
    pub kind: Kind,
    /// Its birth time (ns since the epoch), if the filesystem keeps one.
    pub born_ns: Option<i64>,
}

/// Filesystem statistics (as `statfs`).
#[derive(Clone, Copy, Debug)]
pub struct FsStats {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}

impl Backing {
    /// Opens the workspace at `path` (a directory), its objects opened by
    /// `opener`.
    pub fn open(path: &Path, opener: Opener) -> crate::Result<Backing> {
        // Not O_PATH: open_by_handle_at refuses an O_PATH descriptor as its mount_fd.
        let root = rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| crate::Error::io(format!("cannot open workspace {}", path.display()), e.into()))?;
        let handle = sys::name_to_handle_at(root.as_fd(), OsStr::new("")).map_err(|e| {
            crate::Error::io(
                format!(
                    "cannot get a file handle for {} (the filesystem must support NFS-style file handles)",
                    path.display()
                ),
                e,
            )
        })?;
        let opener = opener.build();
        // Opening by handle needs CAP_DAC_READ_SEARCH.
        opener.start(root.as_fd(), &handle).map_err(|e| {
            crate::Error::io("cannot open files by handle (rewindfs must run as root or with CAP_DAC_READ_SEARCH)", e)
        })?;
        Ok(Backing { root: Arc::new(root), root_handle: handle, dir_cache: Mutex::new(HashMap::new()), opener })
    }

    /// A descriptor on the backing filesystem (for statfs, syncfs).
    pub fn root_fd(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    /// The root's handle.
    pub fn root_handle(&self) -> &FileHandle {
        &self.root_handle
    }

    /// Objects are also looked for under `dir` (the attic).
    pub(crate) fn also_under(&self, dir: BorrowedFd<'_>) -> crate::Result<()> {
        self.opener.also_under(dir).map_err(|e| crate::Error::io("cannot open the attic", e))
    }

    /// Opens the object a handle names.
    pub fn open_handle(&self, handle: &FileHandle, flags: i32) -> Res<OwnedFd> {
        self.opener.open(self.root.as_fd(), handle, flags).map_err(|e| {
            // An inode that no longer exists answers ESTALE; to a client it is gone.
            if e.raw_os_error() == Some(libc::ESTALE) { Errno::ENOENT } else { Errno::from(e) }
        })
    }

    /// A (cached) `O_PATH` descriptor for the directory a handle names.
    pub(crate) fn dir(&self, handle: &FileHandle) -> Res<Arc<OwnedFd>> {
        if *handle == self.root_handle {
            // The root descriptor lives as long as the tree.
            return Ok(self.root.clone());
        }
        if let Some(fd) = crate::poison::lock(&self.dir_cache, "the directory cache").get(handle) {
            return Ok(fd.clone());
        }
        let fd = Arc::new(self.open_handle(handle, libc::O_PATH | libc::O_DIRECTORY)?);
        let mut cache = crate::poison::lock(&self.dir_cache, "the directory cache");
        if cache.len() >= DIR_CACHE_CAPACITY {
            cache.clear();
        }
        cache.insert(handle.clone(), fd.clone());
        Ok(fd)
    }

    /// Drops a directory's cached descriptor (it lost its name).
    pub(crate) fn forget_dir(&self, handle: &FileHandle) {
        crate::poison::lock(&self.dir_cache, "the directory cache").remove(handle);
    }

    /// The path of a live object relative to the workspace root (None when
    /// it is not in the tree: in the attic, or gone).
    pub fn path_of_handle(&self, handle: &FileHandle) -> Option<std::path::PathBuf> {
        let fd = self.open_handle(handle, libc::O_PATH).ok()?;
        let link = |fd: BorrowedFd<'_>| std::fs::read_link(OsStr::from_bytes(sys::proc_fd_path(fd).as_bytes())).ok();
        let root = link(self.root_fd())?;
        let st = rustix::fs::fstat(&fd).ok()?;
        let path = link(fd.as_fd())?;
        // Checked by walking it from the root's descriptor, never by
        // resolving it: under an in-place mount it leads into the mount
        // this daemon serves.
        match path.strip_prefix(&root) {
            Ok(rel) if self.names_inode(rel, (st.st_dev, st.st_ino)) => return Some(rel.to_path_buf()),
            Ok(_) => {}
            // Outside the tree (the attic), unless the path is the "/" of a
            // disconnected dentry.
            Err(_) if path != std::path::Path::new("/") => return None,
            Err(_) => {}
        }
        // The kernel's path of a file met again by handle after its dentry
        // left the cache is not a path ("/", a disconnected dentry), and
        // says nothing of where it is. Only a walk can tell whether it has
        // a name in the tree, and which: the unmount took a file it cannot
        // settle for one outside the tree and left its placeholder behind.
        if st.st_nlink == 0 || st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            return None;
        }
        self.find_name_of(st.st_ino)
    }

    /// Whether `rel` (relative to the root, walked with `openat` without
    /// following symlinks) names the inode `key`.
    fn names_inode(&self, rel: &std::path::Path, key: (u64, u64)) -> bool {
        let comps: Vec<&OsStr> = rel.iter().collect();
        let Some((last, parents)) = comps.split_last() else {
            return rustix::fs::fstat(&self.root).is_ok_and(|s| (s.st_dev, s.st_ino) == key);
        };
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let Ok(mut dir) = rustix::fs::openat(&self.root, ".", flags, Mode::empty()) else { return false };
        for c in parents {
            match rustix::fs::openat(&dir, *c, flags, Mode::empty()) {
                Ok(d) => dir = d,
                Err(_) => return false,
            }
        }
        rustix::fs::statat(&dir, *last, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|s| (s.st_dev, s.st_ino) == key)
    }

    pub fn statfs(&self) -> Res<FsStats> {
        let s = rustix::fs::fstatvfs(&self.root)?;
        Ok(FsStats {
            blocks: s.f_blocks,
            bfree: s.f_bfree,
            bavail: s.f_bavail,
            files: s.f_files,
            ffree: s.f_ffree,
            bsize: s.f_bsize as u32,
            namelen: s.f_namemax as u32,
            frsize: s.f_frsize as u32,
        })
    }

    /// Flushes everything written to the backing filesystem.
    pub fn syncfs(&self) -> Res<()> {
        rustix::fs::syncfs(&self.root)?;
        Ok(())
    }

    /// Every object whose ctime is after `since_ns` (a changed directory
    /// means names were added or removed in it), with its birth time where
    /// the filesystem keeps one. Walks the whole tree without following
    /// symlinks, on every CPU (a `statx` per name is most of it: 1.6 µs a
    /// name here, so 160 ms for 100,000 names on one): at mount, and before
    /// each rewind (and its dry run). In no particular order.
    pub fn scan_changed_since(&self, since_ns: i64) -> Res<Vec<Changed>> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(SCAN_THREADS);
        self.scan_changed_since_on(since_ns, threads)
    }

    fn scan_changed_since_on(&self, since_ns: i64, threads: usize) -> Res<Vec<Changed>> {
        let out = Mutex::new(Vec::new());
        let root = rustix::fs::fstat(&self.root)?;
        if crate::journal::ns(root.st_ctime, root.st_ctime_nsec as i64) > since_ns {
            crate::poison::lock(&out, "the scan's findings").push(Changed {
                handle: self.root_handle.clone(),
                kind: Kind::Dir,
                born_ns: None,
            });
        }
        let wanted = StatxFlags::TYPE | StatxFlags::CTIME | StatxFlags::BTIME;
        self.walk_shared(wanted, threads, &|dir, _, name, st| {
            if crate::journal::ns(st.stx_ctime.tv_sec, i64::from(st.stx_ctime.tv_nsec)) > since_ns
                && let Ok(h) = sys::name_to_handle_at(dir, name)
            {
                let born_ns = (StatxFlags::from_bits_retain(st.stx_mask).contains(StatxFlags::BTIME))
                    .then(|| crate::journal::ns(st.stx_btime.tv_sec, i64::from(st.stx_btime.tv_nsec)));
                let found = Changed { handle: h, kind: Kind::from_mode(u32::from(st.stx_mode)), born_ns };
                crate::poison::lock(&out, "the scan's findings").push(found);
            }
        })?;
        Ok(out.into_inner().unwrap_or_else(|p| p.into_inner()))
    }

    /// A name of the non-directory `ino` in the tree, relative to the root,
    /// found by walking the tree (None: it has none).
    fn find_name_of(&self, ino: u64) -> Option<std::path::PathBuf> {
        let mut found = None;
        let walked = self.walk(StatxFlags::TYPE | StatxFlags::INO, |_, path, name, st| {
            if st.stx_ino == ino && u32::from(st.stx_mode) & libc::S_IFMT != libc::S_IFDIR {
                found = Some(path.join(name));
            }
            found.is_none()
        });
        if let Err(e) = walked {
            log::warn!("cannot walk the workspace for the name of inode {ino}: {e}");
        }
        found
    }

    /// Visits every name below the root (the directory holding it, the
    /// directory's path relative to the root, the name, its `statx` with
    /// `wanted`), without following symlinks, until `visit` says stop.
    fn walk(
        &self,
        wanted: StatxFlags,
        mut visit: impl FnMut(BorrowedFd<'_>, &std::path::Path, &OsStr, &rustix::fs::Statx) -> bool,
    ) -> Res<()> {
        // Directories to visit, by handle: holding a descriptor for each
        // pending directory could exhaust the descriptor limit.
        let mut stack = vec![(self.root_handle.clone(), std::path::PathBuf::new())];
        while let Some((handle, path)) = stack.pop() {
            match self.visit_dir(&handle, &path, wanted, &mut visit)? {
                Some(subdirs) => stack.extend(subdirs),
                None => return Ok(()),
            }
        }
        Ok(())
    }

    /// As [`Backing::walk`] to its end, with `threads` threads sharing the
    /// directories out as they are found; `visit` is called from any of
    /// them. The first error ends the walk.
    fn walk_shared(
        &self,
        wanted: StatxFlags,
        threads: usize,
        visit: &(dyn Fn(BorrowedFd<'_>, &std::path::Path, &OsStr, &rustix::fs::Statx) + Sync),
    ) -> Res<()> {
        const WHAT: &str = "the walk's queue";
        let queue = Mutex::new(Queue {
            dirs: vec![(self.root_handle.clone(), std::path::PathBuf::new())],
            busy: 0,
            failed: None,
        });
        let changed = std::sync::Condvar::new();
        let worker = || {
            loop {
                let (handle, path) = {
                    let mut q = crate::poison::lock(&queue, WHAT);
                    loop {
                        if q.failed.is_some() {
                            return;
                        }
                        if let Some(dir) = q.dirs.pop() {
                            q.busy += 1;
                            break dir;
                        }
                        if q.busy == 0 {
                            return;
                        }
                        q = crate::poison::wait(&changed, q, WHAT);
                    }
                };
                // Handed back when dropped, also when `visit` unwinds: the
                // other threads never wait for a directory nobody visits.
                let mut visiting = Visiting { queue: &queue, changed: &changed, found: None };
                visiting.found = Some(self.visit_dir(&handle, &path, wanted, &mut |d, p, n, st| {
                    visit(d, p, n, st);
                    true
                }));
            }
        };
        std::thread::scope(|scope| {
            for _ in 1..threads {
                scope.spawn(worker);
            }
            worker();
        });
        match queue.into_inner().unwrap_or_else(|p| p.into_inner()).failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Visits the names in the directory `handle` (at `path`) as
    /// [`Backing::walk`] does; returns the directories found in it, or None
    /// when `visit` said stop. A directory that cannot be opened by handle
    /// (removed meanwhile) has nothing to visit.
    fn visit_dir(
        &self,
        handle: &FileHandle,
        path: &std::path::Path,
        wanted: StatxFlags,
        visit: &mut dyn FnMut(BorrowedFd<'_>, &std::path::Path, &OsStr, &rustix::fs::Statx) -> bool,
    ) -> Res<Option<Dirs>> {
        let mut subdirs = Vec::new();
        let Ok(dir) = self.open_handle(handle, libc::O_PATH | libc::O_DIRECTORY) else { return Ok(Some(subdirs)) };
        for (name, _, _) in list_dir(dir.as_fd())? {
            let Ok(st) = rustix::fs::statx(&dir, &name, AtFlags::SYMLINK_NOFOLLOW, wanted | StatxFlags::TYPE) else {
                continue;
            };
            if !visit(dir.as_fd(), path, &name, &st) {
                return Ok(None);
            }
            if u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFDIR
                && let Ok(sub) = sys::name_to_handle_at(dir.as_fd(), &name)
            {
                subdirs.push((sub, path.join(&name)));
            }
        }
        Ok(Some(subdirs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn ctime_ns(path: &Path) -> i64 {
        let m = std::fs::symlink_metadata(path).expect("stat");
        crate::journal::ns(m.ctime(), m.ctime_nsec())
    }

    /// The scan walks on several threads: it finds exactly the names whose
    /// ctime is after the mark, at every depth (files changed, a file and
    /// a directory made, the directories they were made in), as one thread
    /// does, and each once.
    #[test]
    fn the_scan_on_several_threads_finds_what_changed_at_every_depth() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        for a in 0..6 {
            for b in 0..6 {
                let d = root.join(format!("a{a}/b{b}"));
                std::fs::create_dir_all(&d).expect("mkdir");
                for f in 0..8 {
                    std::fs::write(d.join(format!("f{f}")), b"x").expect("write");
                }
            }
            std::fs::write(root.join(format!("a{a}/top")), b"x").expect("write");
        }
        // ctimes are as coarse as the kernel's clock tick.
        std::thread::sleep(std::time::Duration::from_millis(30));
        std::fs::write(root.join("mark"), b"").expect("write the mark");
        let since = ctime_ns(&root.join("mark"));
        std::thread::sleep(std::time::Duration::from_millis(30));
        std::fs::write(root.join("a0/b0/f3"), b"changed").expect("write");
        std::fs::set_permissions(root.join("a5/top"), std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .expect("chmod");
        std::fs::write(root.join("a3/b5/new"), b"new").expect("write");
        std::fs::create_dir(root.join("a2/newdir")).expect("mkdir");
        let mut expected: Vec<std::path::PathBuf> = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).expect("list") {
                let p = e.expect("entry").path();
                if ctime_ns(&p) > since {
                    expected.push(p.clone());
                }
                if p.is_dir() {
                    stack.push(p);
                }
            }
        }
        assert_eq!(expected.len(), 6, "the changes and the directories names were made in: {expected:?}");
        let root_fd = rustix::fs::open(root, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).expect("open root");
        let mut expected: Vec<FileHandle> = expected
            .iter()
            .map(|p| {
                sys::name_to_handle_at(root_fd.as_fd(), p.strip_prefix(root).expect("below").as_os_str())
                    .expect("handle")
            })
            .collect();
        if ctime_ns(root) > since {
            expected.push(sys::name_to_handle_at(root_fd.as_fd(), OsStr::new("")).expect("root handle"));
        }
        expected.sort_by_key(|h| h.to_bytes());
        let opener = if rustix::process::geteuid().is_root() { Opener::ByHandle } else { Opener::HeldDescriptors };
        let backing = Backing::open(root, opener).expect("open the tree");
        for threads in [1, 2, 4] {
            let mut found: Vec<FileHandle> =
                backing.scan_changed_since_on(since, threads).expect("scan").into_iter().map(|c| c.handle).collect();
            found.sort_by_key(|h| h.to_bytes());
            assert_eq!(found, expected, "{threads} threads");
        }
    }
}
