//! The live tree: every filesystem operation on the workspace, in our own
//! types, without FUSE. The FUSE adapter (`crate::fs`) converts requests
//! into calls here; tests call it directly.
//!
//! The daemon never resolves a path through a symlink: every object is
//! reached by its kernel file handle, and every name is a single component
//! resolved with `*at()` calls relative to its parent directory.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags, Timespec, Timestamps, UTIME_NOW, UTIME_OMIT};

use crate::error::{AsErrno, Errno};
use crate::journal::Journal;
use crate::sys::{self, FileHandle};
use crate::workspace::attr::{Attr, Caller, Ino, Kind, SetAttr, SetTime};
use crate::workspace::objects::ObjectTable;

type Res<T> = std::result::Result<T, Errno>;

/// How many directory descriptors to keep open for fast `*at()` calls.
/// Bounded: the process shares a hard limit of 20,000 descriptors.
const DIR_CACHE_CAPACITY: usize = 512;

/// A file opened by a client.
#[derive(Debug)]
pub struct OpenFile {
    pub ino: Ino,
    pub file: File,
    pub writable: bool,
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
fn privileged_bits(mode: u32) -> u32 {
    if mode & libc::S_IFMT != libc::S_IFREG {
        return 0;
    }
    let mut bits = mode & libc::S_ISUID;
    if mode & libc::S_ISGID != 0 && mode & libc::S_IXGRP != 0 {
        bits |= libc::S_ISGID;
    }
    bits
}

/// One entry of a directory listing.
#[derive(Clone, Debug)]
pub struct DirEntry {
    pub name: OsString,
    pub ino: Ino,
    pub kind: Kind,
}

/// Identifies an open file or directory (FUSE's `fh`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Fh(pub u64);

/// The result of a lookup-like call: attributes of a named object.
pub type Entry = Attr;

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

/// The live workspace tree.
#[derive(Debug)]
pub struct LiveTree {
    /// The backing directory, opened before any mount so that an in-place
    /// mount does not hide it from us.
    root: Arc<OwnedFd>,
    objects: ObjectTable,
    dir_cache: Mutex<HashMap<Ino, Arc<OwnedFd>>>,
    files: Mutex<HashMap<Fh, Arc<OpenFile>>>,
    dirs: Mutex<HashMap<Fh, Arc<Vec<DirEntry>>>>,
    next_fh: AtomicU64,
    /// Where pre-images go; `None` serves the tree without recording.
    journal: Option<Arc<Journal>>,
    /// Open-for-write counts: these files may be written (by passthrough
    /// or mmap) without the daemon seeing it, so each new turn records
    /// them again.
    writers: Mutex<HashMap<Ino, u32>>,
    /// A directory on the workspace's filesystem (in the store) where the
    /// last name of a removed file is moved instead of being deleted: its
    /// content stays readable by handle for history at no copying cost.
    attic: Option<OwnedFd>,
    /// Files put in place by a rewind whose bytes are still in the store.
    pub(crate) pending: crate::workspace::pending::PendingSet,
}

/// Holds the journal's turn gate for the length of one mutation.
pub(crate) struct Recording<'a> {
    pub journal: &'a Journal,
    _gate: std::sync::RwLockReadGuard<'a, ()>,
}

/// Notes a just-created object's birth turn (see `LiveTree::note_born_at`).
fn note_born(journal: &Journal, handle: &FileHandle, kind: Kind) {
    if let Err(e) = journal.note_born(&handle.to_bytes(), crate::workspace::capture::kind_code(kind)) {
        log::warn!("cannot note the creation turn of a new object: {e}");
    }
}

/// The object ids named by the attic's slots.
fn attic_slots(dir: &Path) -> std::io::Result<Vec<crate::meta::ObjectId>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        if let Some(id) = name.to_str().and_then(|n| n.parse::<i64>().ok()) {
            out.push(crate::meta::ObjectId(id));
        }
    }
    Ok(out)
}

fn check_name(name: &OsStr) -> Res<()> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) {
        return Err(Errno::EINVAL);
    }
    if b.len() > 255 {
        return Err(Errno(libc::ENAMETOOLONG));
    }
    Ok(())
}

/// Checks a name about to be created in `parent`. The root's `.rewindfs`
/// is where the mount shows its checkpoints: a real entry made there while
/// mounted would hide them and could stand in for them (an agent renaming
/// a forged `sub/.rewindfs` to the root), so no operation may create it.
fn check_new_name(parent: Ino, name: &OsStr) -> Res<()> {
    check_name(name)?;
    if parent == Ino::ROOT && name == crate::view::browse::HIDDEN_DIR {
        log::warn!("refused to create the reserved name {} at the root of the mount", crate::view::browse::HIDDEN_DIR);
        return Err(Errno(libc::EEXIST));
    }
    Ok(())
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
fn backing_open_flags(flags: i32) -> OFlags {
    let strip = libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY | libc::O_TRUNC | libc::O_DIRECT;
    OFlags::from_bits_retain(((flags & !strip) | libc::O_CLOEXEC) as u32)
}

impl LiveTree {
    /// Opens the workspace at `path` (a directory).
    pub fn new(path: &Path, journal: Option<Arc<Journal>>) -> crate::Result<LiveTree> {
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
        // Opening by handle needs CAP_DAC_READ_SEARCH: check now, not at the first lookup.
        sys::open_by_handle_at(root.as_fd(), &handle, libc::O_PATH).map_err(|e| {
            crate::Error::io("cannot open files by handle (rewindfs must run as root or with CAP_DAC_READ_SEARCH)", e)
        })?;
        Ok(LiveTree {
            root: Arc::new(root),
            objects: ObjectTable::new(handle),
            dir_cache: Mutex::new(HashMap::new()),
            files: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            journal,
            writers: Mutex::new(HashMap::new()),
            attic: None,
            pending: Default::default(),
        })
    }

    /// Uses `dir` as the attic if it is on the workspace's filesystem
    /// (renames cannot cross filesystems); otherwise removed files are
    /// copied into the chunk store before deletion.
    pub fn with_attic(mut self, dir: &Path) -> crate::Result<LiveTree> {
        std::fs::create_dir_all(dir)
            .map_err(|e| crate::Error::io(format!("cannot create attic {}", dir.display()), e))?;
        let fd = rustix::fs::open(dir, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| crate::Error::io(format!("cannot open attic {}", dir.display()), e.into()))?;
        let (a, w) = (rustix::fs::fstat(&fd), rustix::fs::fstat(&self.root));
        match (a, w) {
            (Ok(a), Ok(w)) if a.st_dev == w.st_dev => {
                if let Some(journal) = &self.journal {
                    let slots = attic_slots(dir)
                        .map_err(|e| crate::Error::io(format!("cannot list attic {}", dir.display()), e))?;
                    journal.derive_attic_table(&slots).map_err(|e| {
                        crate::Error::io(
                            format!("cannot fill the attic table: {e}"),
                            io::Error::from_raw_os_error(e.errno().0),
                        )
                    })?;
                }
                self.attic = Some(fd);
                log::info!("removed files are moved to {} (same filesystem as the workspace)", dir.display());
            }
            _ => log::info!(
                "the store is on another filesystem than the workspace: removed files are copied into the chunk store before deletion"
            ),
        }
        Ok(self)
    }

    /// Whether an object is in its attic slot (removed from the tree), as
    /// the attic table says.
    pub fn in_attic(&self, id: crate::meta::ObjectId) -> bool {
        if self.attic.is_none() {
            return false;
        }
        match &self.journal {
            Some(j) => j.in_attic(id).unwrap_or_else(|e| {
                log::warn!("cannot read the attic table: {e}");
                false
            }),
            None => self
                .attic_fd()
                .is_some_and(|a| rustix::fs::statat(a, id.0.to_string(), AtFlags::SYMLINK_NOFOLLOW).is_ok()),
        }
    }

    /// The attic directory, if removed files are moved there.
    pub(crate) fn attic_fd(&self) -> Option<BorrowedFd<'_>> {
        self.attic.as_ref().map(|f| f.as_fd())
    }

    /// Moves `name` in `dir` to the attic as object `oid`. `Ok(false)` when
    /// there is no attic or the slot is taken (the caller then deletes).
    /// The move is noted in the attic table first (with the journal).
    pub(crate) fn to_attic(&self, dir: BorrowedFd<'_>, name: &OsStr, oid: crate::meta::ObjectId) -> Res<bool> {
        let Some(attic) = self.attic_fd() else { return Ok(false) };
        if let Some(j) = &self.journal {
            j.note_attic(oid).map_err(|e| e.errno())?;
        }
        let moved = match rustix::fs::renameat_with(dir, name, attic, oid.0.to_string(), RenameFlags::NOREPLACE) {
            Ok(()) => return Ok(true),
            // The slot is taken (by this object): the table's row stays right.
            Err(rustix::io::Errno::EXIST) => return Ok(false),
            Err(rustix::io::Errno::XDEV) => Ok(false),
            Err(e) => Err(e.into()),
        };
        if let Some(j) = &self.journal {
            j.note_attic_out(oid).map_err(|e| e.errno())?;
        }
        moved
    }

    /// Takes object `oid` out of its attic slot to `name` in `dir` (which
    /// must not exist), noting it in the attic table first: after a crash
    /// between the two, the object is in its slot with no row, where the
    /// rewind still finds it by the kernel's name for it (a row for an
    /// object in the tree would hide it from the rewind instead).
    /// `Ok(false)` when the slot is empty.
    pub(crate) fn from_attic(&self, oid: crate::meta::ObjectId, dir: BorrowedFd<'_>, name: &OsStr) -> Res<bool> {
        let Some(attic) = self.attic_fd() else { return Ok(false) };
        if let Some(j) = &self.journal {
            j.note_attic_out(oid).map_err(|e| e.errno())?;
        }
        match rustix::fs::renameat_with(attic, oid.0.to_string(), dir, name, RenameFlags::NOREPLACE) {
            Ok(()) => Ok(true),
            // Not there (a move into the attic noted, then cut short by a
            // crash): the row was wrong.
            Err(rustix::io::Errno::NOENT) => Ok(false),
            Err(e) => {
                if let Some(j) = &self.journal {
                    j.note_attic(oid).map_err(|e| e.errno())?;
                }
                Err(e.into())
            }
        }
    }

    /// Removes object `id`'s attic slot when it holds the inode `handle`
    /// names, is not a directory and has no other name: a collection found
    /// that no kept checkpoint reaches it (`journal/retention.rs`). With
    /// `dry_run` it only checks. The bytes the slot held; None: left alone.
    pub fn remove_from_attic(&self, id: crate::meta::ObjectId, handle: &[u8], dry_run: bool) -> Option<u64> {
        let attic = self.attic_fd()?;
        let name = id.0.to_string();
        let st = rustix::fs::statat(attic, &name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory || st.st_nlink != 1 {
            return None;
        }
        if sys::name_to_handle_at(attic, OsStr::new(&name)).ok()?.to_bytes() != handle {
            return None;
        }
        if !dry_run && let Err(e) = rustix::fs::unlinkat(attic, &name, AtFlags::empty()) {
            log::warn!("cannot remove attic entry {name}, which no kept checkpoint needs: {e}");
            return None;
        }
        Some(st.st_blocks as u64 * 512)
    }

    /// Starts recording one mutation: holds the turn gate until dropped.
    pub(crate) fn recording(&self) -> Option<Recording<'_>> {
        self.journal.as_deref().map(|journal| Recording { journal, _gate: journal.gate() })
    }

    pub fn journal(&self) -> Option<&Arc<Journal>> {
        self.journal.as_ref()
    }

    /// Records, for the turn that just began, every file open for writing.
    /// Called by the journal while it holds the gate exclusively.
    pub fn recapture_writers(&self, journal: &Journal) {
        let inos: Vec<Ino> = self.writers.lock().unwrap_or_else(|p| p.into_inner()).keys().copied().collect();
        let system = Caller { uid: 0, gid: 0, pid: std::process::id() };
        for ino in inos {
            if let Err(e) = self.capture_ino(journal, ino, true, system) {
                log::warn!("cannot record open file {ino:?} at the turn boundary: {e}");
            }
        }
    }

    /// Whether a client holds the file open for writing (or mapped).
    pub(crate) fn is_open_for_write(&self, ino: Ino) -> bool {
        self.writers.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&ino)
    }

    /// Whether a file open for writing was modified within `window`
    /// (writes through passthrough or mmap never reach the daemon).
    pub fn writers_active_within(&self, window: std::time::Duration) -> bool {
        let inos: Vec<Ino> = self.writers.lock().unwrap_or_else(|p| p.into_inner()).keys().copied().collect();
        let now = std::time::SystemTime::now();
        inos.into_iter().any(|ino| {
            self.open_path_fd(ino)
                .ok()
                .and_then(|fd| rustix::fs::fstat(&fd).ok())
                .map(|st| Attr::from_stat(ino, &st).mtime)
                .is_some_and(|m| now.duration_since(m).map(|d| d < window).unwrap_or(true))
        })
    }

    fn add_writer(&self, ino: Ino) {
        *self.writers.lock().unwrap_or_else(|p| p.into_inner()).entry(ino).or_insert(0) += 1;
    }

    /// A descriptor on the backing filesystem (for statfs, syncfs).
    pub fn root_fd(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    /// Number of objects in the object table.
    pub fn object_count(&self) -> usize {
        self.objects.len()
    }

    fn new_fh(&self) -> Fh {
        Fh(self.next_fh.fetch_add(1, Ordering::Relaxed))
    }

    /// An `O_PATH` descriptor for the object.
    pub(crate) fn open_path_fd(&self, ino: Ino) -> Res<OwnedFd> {
        if ino == Ino::ROOT {
            return self.root.try_clone().map_err(Errno::from);
        }
        self.open_path(ino)
    }

    fn open_path(&self, ino: Ino) -> Res<OwnedFd> {
        let (handle, _) = self.objects.get(ino).ok_or(Errno::ESTALE)?;
        self.open_handle(&handle, libc::O_PATH)
    }

    pub(crate) fn open_handle(&self, handle: &FileHandle, flags: i32) -> Res<OwnedFd> {
        sys::open_by_handle_at(self.root.as_fd(), handle, flags).map_err(|e| {
            // An inode that no longer exists answers ESTALE; to a client it is gone.
            if e.raw_os_error() == Some(libc::ESTALE) { Errno::ENOENT } else { Errno::from(e) }
        })
    }

    /// A (cached) `O_PATH` descriptor for a directory.
    fn dir(&self, ino: Ino) -> Res<Arc<OwnedFd>> {
        if ino == Ino::ROOT {
            // The root descriptor lives as long as the tree.
            return Ok(self.root.clone());
        }
        if let Some(fd) = self.dir_cache.lock().unwrap_or_else(|p| p.into_inner()).get(&ino) {
            return Ok(fd.clone());
        }
        let (handle, kind) = self.objects.get(ino).ok_or(Errno::ESTALE)?;
        if kind != Kind::Dir {
            return Err(Errno::ENOTDIR);
        }
        let fd = Arc::new(self.open_handle(&handle, libc::O_PATH | libc::O_DIRECTORY)?);
        let mut cache = self.dir_cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= DIR_CACHE_CAPACITY {
            cache.clear();
        }
        cache.insert(ino, fd.clone());
        Ok(fd)
    }

    /// Stats `name` in `dir` and registers it. Counts a kernel lookup.
    fn entry_at(&self, dir: BorrowedFd<'_>, name: &OsStr, count_lookup: bool) -> Res<Attr> {
        let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
        let handle = sys::name_to_handle_at(dir, name)?;
        let kind = Kind::from_mode(st.st_mode);
        let mut attr = Attr::from_stat(Ino(0), &st);
        self.with_pending_mtime(&handle, &mut attr);
        attr.ino = self.objects.intern(handle, st.st_ino, kind, count_lookup);
        Ok(attr)
    }

    /// The inode number of an existing name, without counting a lookup.
    fn peek(&self, dir: BorrowedFd<'_>, name: &OsStr) -> Res<(Ino, Attr)> {
        let attr = self.entry_at(dir, name, false)?;
        Ok((attr.ino, attr))
    }

    /// The attributes of `name` in `parent`, if it exists, without the
    /// kernel taking a reference (for the daemon's own walks).
    pub fn child(&self, parent: Ino, name: &OsStr) -> Res<Option<Attr>> {
        let dir = self.dir(parent)?;
        match self.peek(dir.as_fd(), name) {
            Ok((_, a)) => Ok(Some(a)),
            Err(e) if e == Errno::ENOENT => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The names in a directory (without "." and "..").
    pub fn names(&self, dir: Ino) -> Res<Vec<OsString>> {
        let fh = self.opendir(dir)?;
        let entries = self.readdir(fh);
        self.releasedir(fh);
        Ok(entries?.iter().skip(2).map(|e| e.name.clone()).collect())
    }

    /// The persistent identity of a live object, if it was ever recorded.
    pub fn handle_of(&self, ino: Ino) -> Option<FileHandle> {
        self.objects.get(ino).map(|(h, _)| h)
    }

    /// The inode number the kernel knows for a handle, if any.
    pub fn known_ino(&self, handle: &FileHandle) -> Option<Ino> {
        self.objects.ino_of(handle)
    }

    /// An inode number for a handle, registering it without a kernel
    /// reference (for the daemon's own operations).
    pub fn ino_for(&self, fd: BorrowedFd<'_>) -> Res<Ino> {
        let st = rustix::fs::fstat(fd)?;
        let handle = sys::name_to_handle_at(fd, OsStr::new(""))?;
        Ok(self.objects.intern(handle, st.st_ino, Kind::from_mode(st.st_mode), false))
    }

    pub fn lookup(&self, parent: Ino, name: &OsStr) -> Res<Entry> {
        if name.as_bytes().len() > 255 {
            return Err(Errno(libc::ENAMETOOLONG));
        }
        let dir = self.dir(parent)?;
        self.entry_at(dir.as_fd(), name, true)
    }

    pub fn forget(&self, ino: Ino, n: u64) {
        self.objects.forget(ino, n);
    }

    pub fn getattr(&self, ino: Ino, fh: Option<Fh>) -> Res<Attr> {
        let mut attr = self.getattr_backing(ino, fh)?;
        // A removed file kept in the attic has a link there; to its readers
        // it has none, as on ext4.
        if attr.kind != Kind::Dir && self.attic.is_some() && self.objects.is_unlinked(ino) {
            attr.nlink = 0;
        }
        Ok(attr)
    }

    fn getattr_backing(&self, ino: Ino, fh: Option<Fh>) -> Res<Attr> {
        if let Some(file) = fh.and_then(|fh| self.file(fh).ok()) {
            let st = rustix::fs::fstat(&file.file)?;
            return Ok(Attr::from_stat(ino, &st));
        }
        let fd = if ino == Ino::ROOT { self.root.try_clone().map_err(Errno::from)? } else { self.open_path(ino)? };
        let st = rustix::fs::fstat(&fd)?;
        let mut attr = Attr::from_stat(ino, &st);
        if let Some((handle, Kind::File)) = self.objects.get(ino) {
            self.with_pending_mtime(&handle, &mut attr);
        }
        Ok(attr)
    }

    pub fn setattr(&self, ino: Ino, set: SetAttr, fh: Option<Fh>, caller: Caller) -> Res<Attr> {
        // A pending file gets its bytes first: the settler sets the
        // recorded mtime when done, which would undo a `touch` made before.
        if let Some((handle, Kind::File)) = self.objects.get(ino) {
            self.settle(&handle)?;
        }
        let rec = self.recording();
        if let Some(r) = &rec {
            self.capture_ino(r.journal, ino, set.size.is_some(), caller)?;
        }
        let fd = if ino == Ino::ROOT { self.root.try_clone().map_err(Errno::from)? } else { self.open_path(ino)? };
        let proc_path = sys::proc_fd_path(fd.as_fd());
        // Owner first: chown clears setuid/setgid, a mode set in the same
        // call must win.
        if set.uid.is_some() || set.gid.is_some() {
            rustix::fs::chownat(
                &fd,
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
            match fh.and_then(|fh| self.file(fh).ok()).filter(|f| f.writable) {
                Some(file) => file.file.set_len(size).map_err(Errno::from)?,
                None => {
                    let f = rustix::fs::open(proc_path.as_c_str(), OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
                    rustix::fs::ftruncate(&f, size)?;
                }
            }
            // A truncation by a user without CAP_FSETID clears setuid/setgid
            // as on ext4 (the daemon, as root, keeps them; the kernel leaves
            // this to us under FUSE_HANDLE_KILLPRIV_V2).
            let st = rustix::fs::fstat(&fd)?;
            let bits = privileged_bits(st.st_mode);
            if caller.uid != 0 && set.mode.is_none() && bits != 0 {
                chmod_by_path(&proc_path, st.st_mode & !bits)?;
            }
        }
        if set.atime.is_some() || set.mtime.is_some() {
            let times = Timestamps { last_access: ts(set.atime), last_modification: ts(set.mtime) };
            rustix::fs::utimensat(rustix::fs::CWD, proc_path.as_c_str(), &times, AtFlags::empty())?;
        }
        let st = rustix::fs::fstat(&fd)?;
        Ok(Attr::from_stat(ino, &st))
    }

    pub fn readlink(&self, ino: Ino) -> Res<Vec<u8>> {
        let fd = self.open_path(ino)?;
        let target = rustix::fs::readlinkat(&fd, "", Vec::new())?;
        Ok(target.into_bytes())
    }

    /// Gives a newly created object to the caller, as ext4 would have:
    /// owner = caller, group = caller's unless the parent is setgid.
    fn give_to_caller(&self, dir: BorrowedFd<'_>, name: &OsStr, caller: Caller, mode: Option<u32>) -> Res<()> {
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

    pub fn mknod(&self, parent: Ino, name: &OsStr, mode: u32, rdev: u32, caller: Caller) -> Res<Entry> {
        check_new_name(parent, name)?;
        let dir = self.dir(parent)?;
        let _rec = self.record_new_name(dir.as_fd(), name, caller)?;
        let kind = rustix::fs::FileType::from_raw_mode(mode);
        rustix::fs::mknodat(dir.as_fd(), name, kind, Mode::from_raw_mode(mode & 0o7777), rdev as u64)?;
        self.give_to_caller(dir.as_fd(), name, caller, Some(mode))?;
        self.note_born_at(_rec.as_ref(), dir.as_fd(), name, Kind::from_mode(mode))?;
        self.entry_at(dir.as_fd(), name, true)
    }

    pub fn mkdir(&self, parent: Ino, name: &OsStr, mode: u32, caller: Caller) -> Res<Entry> {
        check_new_name(parent, name)?;
        let dir = self.dir(parent)?;
        let rec = self.record_new_name(dir.as_fd(), name, caller)?;
        rustix::fs::mkdirat(dir.as_fd(), name, Mode::from_raw_mode(mode & 0o7777))?;
        self.give_to_caller(dir.as_fd(), name, caller, Some(mode))?;
        // Lets a rewind to an earlier checkpoint move the whole new
        // directory aside in one step.
        self.note_born_at(rec.as_ref(), dir.as_fd(), name, Kind::Dir)?;
        self.entry_at(dir.as_fd(), name, true)
    }

    pub fn symlink(&self, parent: Ino, name: &OsStr, target: &OsStr, caller: Caller) -> Res<Entry> {
        check_new_name(parent, name)?;
        let dir = self.dir(parent)?;
        let _rec = self.record_new_name(dir.as_fd(), name, caller)?;
        rustix::fs::symlinkat(target, dir.as_fd(), name)?;
        self.give_to_caller(dir.as_fd(), name, caller, None)?;
        self.note_born_at(_rec.as_ref(), dir.as_fd(), name, Kind::Symlink)?;
        self.entry_at(dir.as_fd(), name, true)
    }

    /// Notes the object just created at `name` as born in the current turn
    /// (under the recording's gate): a rewind to an earlier checkpoint
    /// leaves it out of the objects it visits, since no such checkpoint
    /// has it.
    /// The object exists already, so a note that cannot be written does
    /// not fail the creation: the rewind then visits the object and finds
    /// it out of the tree (the way it did before births were noted).
    fn note_born_at(&self, rec: Option<&Recording<'_>>, dir: BorrowedFd<'_>, name: &OsStr, kind: Kind) -> Res<()> {
        if let Some(r) = rec {
            let handle = sys::name_to_handle_at(dir, name)?;
            note_born(r.journal, &handle, kind);
        }
        Ok(())
    }

    pub fn link(&self, ino: Ino, new_parent: Ino, new_name: &OsStr, caller: Caller) -> Res<Entry> {
        check_new_name(new_parent, new_name)?;
        let src = self.open_path(ino)?;
        let dir = self.dir(new_parent)?;
        let _rec = self.record_new_name(dir.as_fd(), new_name, caller)?;
        if let Some(r) = &_rec {
            self.capture_ino(r.journal, ino, false, caller)?;
        }
        rustix::fs::linkat(&src, "", dir.as_fd(), new_name, AtFlags::EMPTY_PATH)?;
        self.entry_at(dir.as_fd(), new_name, true)
    }

    /// Whether the file `ino`, about to be removed, was created in the
    /// current turn (see `Journal::take_born`).
    fn take_born(&self, journal: &Journal, ino: Ino) -> bool {
        self.objects.get(ino).is_some_and(|(handle, _)| journal.take_born(&handle.to_bytes()))
    }

    /// Marks `victim` unlinked if removing one name removed its last one.
    fn note_removed(&self, victim: Attr) {
        if victim.kind == Kind::Dir || victim.nlink <= 1 {
            self.objects.mark_unlinked(victim.ino);
            self.dir_cache.lock().unwrap_or_else(|p| p.into_inner()).remove(&victim.ino);
        }
    }

    pub fn unlink(&self, parent: Ino, name: &OsStr, caller: Caller) -> Res<()> {
        let dir = self.dir(parent)?;
        let (_, victim) = self.peek(dir.as_fd(), name)?;
        if victim.kind == Kind::Dir {
            return Err(Errno(libc::EISDIR));
        }
        let rec = self.recording();
        if let Some(r) = &rec {
            self.capture_entry(r.journal, dir.as_fd(), name, caller)?;
            let last = Self::is_last_link(dir.as_fd(), name);
            if last && self.take_born(r.journal, victim.ino) {
                // Created in this turn and now gone: no checkpoint ever had
                // it (build temporaries, editor swap files), nothing to keep.
                rustix::fs::unlinkat(dir.as_fd(), name, AtFlags::empty())?;
                self.note_removed(victim);
                return Ok(());
            }
            // Moved to the attic, the object keeps its attributes, xattrs
            // and bytes: history reads them there, nothing to copy.
            let oid = if last && self.attic.is_some() {
                self.object_id_named(r.journal, dir.as_fd(), name)?
            } else {
                self.capture_named(r.journal, dir.as_fd(), name, last, caller)?
            };
            if let (true, Some(oid)) = (last && self.attic.is_some(), oid) {
                if self.to_attic(dir.as_fd(), name, oid)? {
                    self.note_removed(victim);
                    return Ok(());
                }
                // No room in the attic: keep the content the slow way.
                self.capture_named(r.journal, dir.as_fd(), name, true, caller)?;
            }
        }
        rustix::fs::unlinkat(dir.as_fd(), name, AtFlags::empty())?;
        self.note_removed(victim);
        Ok(())
    }

    pub fn rmdir(&self, parent: Ino, name: &OsStr, caller: Caller) -> Res<()> {
        let dir = self.dir(parent)?;
        let _rec = self.record_removal(dir.as_fd(), name, caller)?;
        let (_, victim) = self.peek(dir.as_fd(), name)?;
        rustix::fs::unlinkat(dir.as_fd(), name, AtFlags::REMOVEDIR)?;
        self.note_removed(victim);
        Ok(())
    }

    pub fn rename(
        &self,
        parent: Ino,
        name: &OsStr,
        new_parent: Ino,
        new_name: &OsStr,
        flags: u32,
        caller: Caller,
    ) -> Res<()> {
        check_new_name(new_parent, new_name)?;
        let from = self.dir(parent)?;
        let to = self.dir(new_parent)?;
        let flags = RenameFlags::from_bits(flags).ok_or(Errno::EINVAL)?;
        let _rec = self.recording();
        if let Some(r) = &_rec {
            // One record per name touched; the moved object (and a whole
            // directory tree under it) keeps its identity.
            self.capture_entry(r.journal, from.as_fd(), name, caller)?;
            self.capture_entry(r.journal, to.as_fd(), new_name, caller)?;
            let plain = flags.is_empty();
            if plain && Self::is_last_link(to.as_fd(), new_name) {
                let source = self.peek(from.as_fd(), name)?.1;
                let victim = self.peek(to.as_fd(), new_name)?.1;
                // A file created in this turn and replaced in it (a temp
                // file renamed over another) was never in a checkpoint: the
                // plain rename below may drop it.
                let unseen =
                    victim.kind != Kind::Dir && source.ino != victim.ino && self.take_born(r.journal, victim.ino);
                let movable = !unseen && self.attic.is_some() && source.kind != Kind::Dir && source.ino != victim.ino;
                let oid = if unseen {
                    None
                } else if movable {
                    self.object_id_named(r.journal, to.as_fd(), new_name)?
                } else {
                    self.capture_named(r.journal, to.as_fd(), new_name, true, caller)?
                };
                if let (true, Some(oid)) = (movable, oid) {
                    // Swap atomically (readers of the new name never see it
                    // missing), then move the replaced file, now under the
                    // old name, to the attic.
                    rustix::fs::renameat_with(from.as_fd(), name, to.as_fd(), new_name, RenameFlags::EXCHANGE)?;
                    let put_away = (|| -> Res<()> {
                        if crate::world::test_hooks::fail_point("rename-over-attic") {
                            return Err(Errno(libc::EIO));
                        }
                        if !self.to_attic(from.as_fd(), name, oid)? {
                            self.capture_named(r.journal, from.as_fd(), name, true, caller)?;
                            rustix::fs::unlinkat(from.as_fd(), name, AtFlags::empty())?;
                        }
                        Ok(())
                    })();
                    if let Err(e) = put_away {
                        // The rename did not happen: both names get their
                        // objects back (the entry records say the same).
                        let back =
                            rustix::fs::renameat_with(from.as_fd(), name, to.as_fd(), new_name, RenameFlags::EXCHANGE);
                        if let Err(b) = back {
                            log::error!(
                                "rename: cannot swap {name:?} and {new_name:?} back after a failure ({e}): {b}"
                            );
                        }
                        return Err(e);
                    }
                    self.note_removed(victim);
                    return Ok(());
                }
            } else if !flags.contains(RenameFlags::EXCHANGE) {
                // A replaced file with other names loses one: its link
                // count is part of its state at the checkpoint.
                self.capture_named(r.journal, to.as_fd(), new_name, false, caller)?;
            }
        }
        let replaced = if flags.contains(RenameFlags::EXCHANGE) || flags.contains(RenameFlags::NOREPLACE) {
            None
        } else {
            self.peek(to.as_fd(), new_name).ok().map(|(_, a)| a)
        };
        rustix::fs::renameat_with(from.as_fd(), name, to.as_fd(), new_name, flags)?;
        if let Some(victim) = replaced {
            // Renaming a name onto a hard link of itself changes nothing.
            if let Ok((ino, _)) = self.peek(to.as_fd(), new_name)
                && ino != victim.ino
            {
                self.note_removed(victim);
            }
        }
        Ok(())
    }

    fn register_open(&self, ino: Ino, file: File, writable: bool) -> (Fh, Arc<OpenFile>) {
        let fh = self.new_fh();
        let open = Arc::new(OpenFile { ino, file, writable });
        self.files.lock().unwrap_or_else(|p| p.into_inner()).insert(fh, open.clone());
        (fh, open)
    }

    pub fn open(&self, ino: Ino, flags: i32, caller: Caller) -> Res<(Fh, Arc<OpenFile>)> {
        let (handle, kind) = self.objects.get(ino).ok_or(Errno::ESTALE)?;
        if kind == Kind::Dir && flags & libc::O_ACCMODE != libc::O_RDONLY {
            return Err(Errno(libc::EISDIR));
        }
        // A rewound file gets its bytes before anyone can see it open.
        self.settle(&handle)?;
        let writable = flags & libc::O_ACCMODE != libc::O_RDONLY;
        // A file opened for writing may be written without the daemon
        // seeing each write (passthrough, mmap): record it now.
        let _rec = if writable { self.recording() } else { None };
        if let Some(r) = &_rec {
            self.capture_ino(r.journal, ino, true, caller)?;
        }
        let fd = self.open_handle(&handle, backing_open_flags(flags).bits() as i32)?;
        if writable {
            self.add_writer(ino);
        }
        Ok(self.register_open(ino, File::from(fd), writable))
    }

    pub fn create(
        &self,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        flags: i32,
        caller: Caller,
    ) -> Res<(Entry, Fh, Arc<OpenFile>)> {
        check_new_name(parent, name)?;
        let dir = self.dir(parent)?;
        let _rec = self.record_new_name(dir.as_fd(), name, caller)?;
        let oflags = backing_open_flags(flags) | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW;
        let fd = rustix::fs::openat(dir.as_fd(), name, oflags, Mode::from_raw_mode(mode & 0o7777))?;
        self.give_to_caller(dir.as_fd(), name, caller, Some(mode))?;
        let st = rustix::fs::fstat(&fd)?;
        let handle = sys::name_to_handle_at(fd.as_fd(), OsStr::new(""))?;
        if let Some(r) = &_rec {
            r.journal.note_file_born(&handle.to_bytes());
            note_born(r.journal, &handle, Kind::File);
        }
        let ino = self.objects.intern(handle, st.st_ino, Kind::from_mode(st.st_mode), true);
        let writable = flags & libc::O_ACCMODE != libc::O_RDONLY;
        if writable {
            self.add_writer(ino);
        }
        let (fh, open) = self.register_open(ino, File::from(fd), writable);
        Ok((Attr::from_stat(ino, &st), fh, open))
    }

    /// Before creating `name`: records that it did not exist (and the
    /// directory's attributes). Returns the gate to hold while creating.
    fn record_new_name(&self, dir: BorrowedFd<'_>, name: &OsStr, caller: Caller) -> Res<Option<Recording<'_>>> {
        let rec = self.recording();
        if let Some(r) = &rec {
            self.capture_entry(r.journal, dir, name, caller)?;
        }
        Ok(rec)
    }

    /// Before removing `name`: records what it was, and the object itself.
    fn record_removal(&self, dir: BorrowedFd<'_>, name: &OsStr, caller: Caller) -> Res<Option<Recording<'_>>> {
        let rec = self.recording();
        if let Some(r) = &rec {
            self.capture_entry(r.journal, dir, name, caller)?;
            self.capture_named(r.journal, dir, name, Self::is_last_link(dir, name), caller)?;
        }
        Ok(rec)
    }

    pub fn file(&self, fh: Fh) -> Res<Arc<OpenFile>> {
        self.files.lock().unwrap_or_else(|p| p.into_inner()).get(&fh).cloned().ok_or(Errno::EBADF)
    }

    pub fn read(&self, fh: Fh, offset: u64, size: u32) -> Res<Vec<u8>> {
        let file = self.file(fh)?;
        let mut buf = vec![0u8; size as usize];
        let mut done = 0;
        while done < buf.len() {
            match file.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        }
        buf.truncate(done);
        Ok(buf)
    }

    pub fn write(&self, fh: Fh, offset: u64, data: &[u8]) -> Res<u32> {
        let file = self.file(fh)?;
        // Recorded when opened for writing (and again at each turn boundary).
        let _rec = self.recording();
        if let Some(r) = &_rec {
            r.journal.touch();
        }
        file.file.write_all_at(data, offset).map_err(Errno::from)?;
        Ok(data.len() as u32)
    }

    /// Whether a write to this open file by a writer without CAP_FSETID
    /// must clear mode bits: setuid, or setgid with group execute.
    pub fn has_privileges_to_drop(&self, file: &OpenFile) -> Res<bool> {
        Ok(privileged_bits(rustix::fs::fstat(&file.file)?.st_mode) != 0)
    }

    /// Before a write by a user without CAP_FSETID (ext4 clears the bits on
    /// write; under FUSE_HANDLE_KILLPRIV_V2 the kernel leaves it to us):
    /// clears setuid, and setgid with group execute, recording the mode
    /// first like any attribute change. Returns whether the mode changed,
    /// so that the caller can tell the kernel.
    pub fn drop_privileges(&self, fh: Fh, caller: Caller) -> Res<bool> {
        let file = self.file(fh)?;
        let st = rustix::fs::fstat(&file.file)?;
        let bits = privileged_bits(st.st_mode);
        if bits == 0 {
            return Ok(false);
        }
        let rec = self.recording();
        if let Some(r) = &rec {
            self.capture_ino(r.journal, file.ino, false, caller)?;
        }
        rustix::fs::fchmod(&file.file, Mode::from_raw_mode(st.st_mode & 0o7777 & !bits))?;
        Ok(true)
    }

    pub fn release(&self, fh: Fh) {
        let Some(file) = self.files.lock().unwrap_or_else(|p| p.into_inner()).remove(&fh) else { return };
        if file.writable {
            let mut writers = self.writers.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(n) = writers.get_mut(&file.ino) {
                *n -= 1;
                if *n == 0 {
                    writers.remove(&file.ino);
                }
            }
        }
    }

    pub fn fsync(&self, fh: Fh, datasync: bool) -> Res<()> {
        let file = self.file(fh)?;
        if datasync { file.file.sync_data() } else { file.file.sync_all() }.map_err(Errno::from)
    }

    pub fn fallocate(&self, fh: Fh, offset: u64, length: u64, mode: i32) -> Res<()> {
        let file = self.file(fh)?;
        let flags = rustix::fs::FallocateFlags::from_bits(mode as u32).ok_or(Errno(libc::EOPNOTSUPP))?;
        rustix::fs::fallocate(&file.file, flags, offset, length)?;
        Ok(())
    }

    pub fn lseek(&self, fh: Fh, offset: i64, whence: i32) -> Res<i64> {
        let file = self.file(fh)?;
        Ok(sys::lseek(file.file.as_fd(), offset, whence)?)
    }

    pub fn copy_file_range(&self, fh_in: Fh, off_in: u64, fh_out: Fh, off_out: u64, len: u64) -> Res<u32> {
        let src = self.file(fh_in)?;
        let dst = self.file(fh_out)?;
        let len = len.min(u32::MAX as u64 & !0xfff) as usize;
        Ok(sys::copy_file_range(src.file.as_fd(), off_in, dst.file.as_fd(), off_out, len)? as u32)
    }

    /// Reads the whole directory now, so that offsets stay valid while
    /// entries are added and removed (POSIX leaves that unspecified; a
    /// snapshot is the simplest correct answer).
    pub fn opendir(&self, ino: Ino) -> Res<Fh> {
        let dir = self.dir(ino)?;
        // Never resolve "..": from a top-level directory of an in-place
        // mount it would land on the mount itself and call the daemon back.
        let parent = ino;
        let fd =
            rustix::fs::openat(dir.as_fd(), ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        let mut listing = rustix::fs::Dir::new(fd)?;
        let mut entries = vec![
            DirEntry { name: ".".into(), ino, kind: Kind::Dir },
            DirEntry { name: "..".into(), ino: parent, kind: Kind::Dir },
        ];
        while let Some(entry) = listing.read() {
            let entry = entry?;
            let name = OsStr::from_bytes(entry.file_name().to_bytes());
            if name == "." || name == ".." {
                continue;
            }
            let kind = Kind::from_dirent(entry.file_type()).unwrap_or(Kind::File);
            entries.push(DirEntry { name: name.to_os_string(), ino: Ino(entry.ino()), kind });
        }
        let fh = self.new_fh();
        self.dirs.lock().unwrap_or_else(|p| p.into_inner()).insert(fh, Arc::new(entries));
        Ok(fh)
    }

    /// Entries from `offset` on (offset = index of the next entry).
    pub fn readdir(&self, fh: Fh) -> Res<Arc<Vec<DirEntry>>> {
        self.dirs.lock().unwrap_or_else(|p| p.into_inner()).get(&fh).cloned().ok_or(Errno::EBADF)
    }

    pub fn releasedir(&self, fh: Fh) {
        self.dirs.lock().unwrap_or_else(|p| p.into_inner()).remove(&fh);
    }

    pub fn fsyncdir(&self, ino: Ino) -> Res<()> {
        let dir = self.dir(ino)?;
        let fd =
            rustix::fs::openat(dir.as_fd(), ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        rustix::fs::fsync(&fd)?;
        Ok(())
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

    fn xattr_fd(&self, ino: Ino) -> Res<OwnedFd> {
        if ino == Ino::ROOT { self.root.try_clone().map_err(Errno::from) } else { self.open_path(ino) }
    }

    /// With `size == 0`, answers the size of the value; otherwise the value
    /// (ERANGE when it does not fit in `size`).
    pub fn getxattr(&self, ino: Ino, name: &OsStr, size: u32) -> Res<XattrReply> {
        let fd = self.xattr_fd(ino)?;
        if size == 0 {
            return Ok(XattrReply::Size(sys::getxattr(fd.as_fd(), name, &mut [])? as u32));
        }
        let mut buf = vec![0u8; size as usize];
        let n = sys::getxattr(fd.as_fd(), name, &mut buf)?;
        buf.truncate(n);
        Ok(XattrReply::Data(buf))
    }

    pub fn listxattr(&self, ino: Ino, size: u32) -> Res<XattrReply> {
        let fd = self.xattr_fd(ino)?;
        if size == 0 {
            return Ok(XattrReply::Size(sys::listxattr(fd.as_fd(), &mut [])? as u32));
        }
        let mut buf = vec![0u8; size as usize];
        let n = sys::listxattr(fd.as_fd(), &mut buf)?;
        buf.truncate(n);
        Ok(XattrReply::Data(buf))
    }

    /// Every xattr of an object, sorted by name (empty when unreadable).
    pub fn xattrs_of(&self, ino: Ino) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        let Ok(XattrReply::Size(n)) = self.listxattr(ino, 0) else { return out };
        if n == 0 {
            return out;
        }
        let Ok(XattrReply::Data(names)) = self.listxattr(ino, n) else { return out };
        for name in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
            let os = OsStr::from_bytes(name);
            if let Ok(XattrReply::Size(len)) = self.getxattr(ino, os, 0)
                && let Ok(XattrReply::Data(v)) = self.getxattr(ino, os, len.max(1))
            {
                out.push((name.to_vec(), v));
            }
        }
        out.sort();
        out
    }

    pub fn setxattr(&self, ino: Ino, name: &OsStr, value: &[u8], flags: i32, caller: Caller) -> Res<()> {
        let _rec = self.recording();
        if let Some(r) = &_rec {
            self.capture_ino(r.journal, ino, false, caller)?;
        }
        let fd = self.xattr_fd(ino)?;
        Ok(sys::setxattr(fd.as_fd(), name, value, flags)?)
    }

    pub fn removexattr(&self, ino: Ino, name: &OsStr, caller: Caller) -> Res<()> {
        let _rec = self.recording();
        if let Some(r) = &_rec {
            self.capture_ino(r.journal, ino, false, caller)?;
        }
        let fd = self.xattr_fd(ino)?;
        Ok(sys::removexattr(fd.as_fd(), name)?)
    }

    /// Flushes everything written to the backing filesystem.
    pub fn syncfs(&self) -> Res<()> {
        rustix::fs::syncfs(&self.root)?;
        Ok(())
    }
}

/// Answer to an xattr query: the size needed, or the bytes.
#[derive(Debug)]
pub enum XattrReply {
    Size(u32),
    Data(Vec<u8>),
}

impl LiveTree {
    /// Handles of every object whose ctime is after `since_ns` (a changed
    /// directory means names were added or removed in it). Walks the whole
    /// tree without following symlinks; used once at mount.
    pub fn scan_changed_since(&self, since_ns: i64) -> Res<Vec<(Vec<u8>, u8)>> {
        let mut out = Vec::new();
        let root = rustix::fs::fstat(&self.root)?;
        if crate::journal::ns(root.st_ctime, root.st_ctime_nsec as i64) > since_ns {
            out.push((
                sys::name_to_handle_at(self.root.as_fd(), OsStr::new(""))?.to_bytes(),
                crate::workspace::capture::kind_code(Kind::Dir),
            ));
        }
        // Directories to visit, by handle: holding a descriptor for each
        // pending directory could exhaust the descriptor limit.
        let mut stack = vec![sys::name_to_handle_at(self.root.as_fd(), OsStr::new(""))?];
        while let Some(handle) = stack.pop() {
            let Ok(dir) = self.open_handle(&handle, libc::O_PATH | libc::O_DIRECTORY) else { continue };
            let listing_fd =
                rustix::fs::openat(&dir, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
            let mut listing = rustix::fs::Dir::new(listing_fd)?;
            while let Some(entry) = listing.read() {
                let entry = entry?;
                let name = OsStr::from_bytes(entry.file_name().to_bytes());
                if name == "." || name == ".." {
                    continue;
                }
                let Ok(st) = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) else { continue };
                if crate::journal::ns(st.st_ctime, st.st_ctime_nsec as i64) > since_ns
                    && let Ok(h) = sys::name_to_handle_at(dir.as_fd(), name)
                {
                    out.push((h.to_bytes(), crate::workspace::capture::kind_code(Kind::from_mode(st.st_mode))));
                }
                if st.st_mode & libc::S_IFMT == libc::S_IFDIR
                    && let Ok(sub) = sys::name_to_handle_at(dir.as_fd(), name)
                {
                    stack.push(sub);
                }
            }
        }
        Ok(out)
    }
}
