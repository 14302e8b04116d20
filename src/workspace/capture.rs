//! Pre-image capture: what the live tree records before it changes
//! anything. Each function gathers the current state from the backing
//! files and hands it to the journal, which stores it durably; only then
//! does the caller apply its change.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, Mode, OFlags};

use crate::error::{AsErrno, Errno};
use crate::journal::{Journal, JournalError, ns};
use crate::meta::{ObjectId, ObjectState, encode_xattrs};
use crate::sys;
use crate::workspace::attr::{Caller, Ino, Kind};
use crate::workspace::live::LiveTree;

type Res<T> = std::result::Result<T, Errno>;

/// How recent a change must be for its (ctime, size) not to identify the
/// content read: well above any filesystem's timestamp granularity.
const RACY_NS: i64 = 2_000_000_000;

fn refused(e: JournalError) -> Errno {
    log::error!("cannot record a pre-image, refusing the change: {e}");
    e.errno()
}

/// A compact code for each kind, stored in the database.
pub fn kind_code(kind: Kind) -> u8 {
    kind.code()
}

fn read_xattrs(fd: BorrowedFd<'_>) -> Res<Vec<(Vec<u8>, Vec<u8>)>> {
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

impl LiveTree {
    /// The persistent object id of a live object reached by an `O_PATH`
    /// descriptor.
    pub(crate) fn object_id_of_fd(&self, journal: &Journal, fd: BorrowedFd<'_>, kind: Kind) -> Res<ObjectId> {
        let handle = sys::name_to_handle_at(fd, OsStr::new(""))?;
        journal.object_id(&handle.to_bytes(), kind_code(kind)).map_err(refused)
    }

    /// Records what `name` in directory `dir` refers to now (or that it
    /// does not exist), plus the directory's own attributes, before the
    /// first change to that name in this turn.
    pub(crate) fn capture_entry(
        &self,
        journal: &Journal,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        caller: Caller,
    ) -> Res<()> {
        let dir_id = self.object_id_of_fd(journal, dir, Kind::Dir)?;
        let program = journal.program(caller.pid);
        if journal.needs_entry(dir_id, name.as_bytes()) {
            let target =
                match rustix::fs::openat(dir, name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) {
                    Ok(fd) => {
                        let st = rustix::fs::fstat(&fd)?;
                        Some(self.object_id_of_fd(journal, fd.as_fd(), Kind::from_mode(st.st_mode))?)
                    }
                    Err(rustix::io::Errno::NOENT) => None,
                    Err(e) => return Err(e.into()),
                };
            journal.record_entry(dir_id, name.as_bytes(), target, program.as_deref()).map_err(refused)?;
        }
        self.capture_fd(journal, dir, dir_id, false, program.as_deref())
    }

    /// The object id of `name` in `dir`, if it exists (nothing recorded
    /// but the id).
    pub(crate) fn object_id_named(
        &self,
        journal: &Journal,
        dir: BorrowedFd<'_>,
        name: &OsStr,
    ) -> Res<Option<ObjectId>> {
        match rustix::fs::openat(dir, name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) {
            Ok(fd) => {
                let st = rustix::fs::fstat(&fd)?;
                Ok(Some(self.object_id_of_fd(journal, fd.as_fd(), Kind::from_mode(st.st_mode))?))
            }
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Records the state of the object `name` in `dir` (with its content
    /// when `content`), if it exists; returns its id.
    pub(crate) fn capture_named(
        &self,
        journal: &Journal,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        content: bool,
        caller: Caller,
    ) -> Res<Option<ObjectId>> {
        match rustix::fs::openat(dir, name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) {
            Ok(fd) => {
                let st = rustix::fs::fstat(&fd)?;
                let id = self.object_id_of_fd(journal, fd.as_fd(), Kind::from_mode(st.st_mode))?;
                self.capture_fd(journal, fd.as_fd(), id, content, journal.program(caller.pid).as_deref())?;
                Ok(Some(id))
            }
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Records the state of the object `ino` before its first change in
    /// this turn.
    pub(crate) fn capture_ino(&self, journal: &Journal, ino: Ino, content: bool, caller: Caller) -> Res<()> {
        let fd = self.open_path_fd(ino)?;
        let st = rustix::fs::fstat(&fd)?;
        let id = self.object_id_of_fd(journal, fd.as_fd(), Kind::from_mode(st.st_mode))?;
        // A file open for writing may have been changed through a shared
        // mmap, which leaves ctime alone until the page is written back:
        // (ctime, size) says nothing about its content, so read it.
        let trust_known = !self.is_open_for_write(ino);
        self.capture_fd_with(journal, fd.as_fd(), id, content, journal.program(caller.pid).as_deref(), trust_known)
    }

    /// Records an object's attributes, xattrs, symlink target and (for
    /// regular files, when asked) content.
    pub(crate) fn capture_fd(
        &self,
        journal: &Journal,
        fd: BorrowedFd<'_>,
        id: ObjectId,
        content: bool,
        program: Option<&str>,
    ) -> Res<()> {
        self.capture_fd_with(journal, fd, id, content, program, true)
    }

    /// As `capture_fd`; `trust_known` allows reusing content known for the
    /// same (ctime, size) instead of reading the file.
    fn capture_fd_with(
        &self,
        journal: &Journal,
        fd: BorrowedFd<'_>,
        id: ObjectId,
        content: bool,
        program: Option<&str>,
        trust_known: bool,
    ) -> Res<()> {
        if !journal.needs_object(id, content) {
            return Ok(());
        }
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as i64)
            .unwrap_or(0);
        let st = rustix::fs::fstat(fd)?;
        let kind = Kind::from_mode(st.st_mode);
        let ctime_ns = ns(st.st_ctime, st.st_ctime_nsec as i64);
        let target =
            if kind == Kind::Symlink { Some(rustix::fs::readlinkat(fd, "", Vec::new())?.into_bytes()) } else { None };
        let pending = if content && kind == Kind::File {
            sys::name_to_handle_at(fd, OsStr::new("")).ok().and_then(|h| self.pending_content(&h))
        } else {
            None
        };
        // Content stored for this record, taken back if the record cannot
        // be written.
        let mut unrecorded = None;
        let content = if let Some(p) = pending {
            Some((p.hash.as_bytes().to_vec(), p.encode_chunks()))
        } else if content && kind == Kind::File {
            let size = st.st_size as u64;
            let known = if trust_known { journal.known_content(id, ctime_ns, size).map_err(refused)? } else { None };
            match known {
                Some(known) => Some(known),
                None => {
                    let path = sys::proc_fd_path(fd);
                    let file = rustix::fs::open(path.as_c_str(), OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
                    let stored = journal.store_content_until_recorded(std::fs::File::from(file)).map_err(refused)?;
                    let content = (stored.content.hash.as_bytes().to_vec(), stored.content.encode_chunks());
                    unrecorded = Some(stored);
                    Some(content)
                }
            }
        } else {
            None
        };
        let state = ObjectState {
            kind: kind_code(kind),
            perm: st.st_mode & 0o7777,
            uid: st.st_uid,
            gid: st.st_gid,
            rdev: st.st_rdev,
            size: st.st_size as u64,
            mtime_ns: ns(st.st_mtime, st.st_mtime_nsec as i64),
            ctime_ns,
            nlink: st.st_nlink as u32,
            target,
            xattrs: encode_xattrs(read_xattrs(fd)?),
            content,
        };
        // Like git's "racy clean" rule: a file changed in the last moments
        // before it was read may change again within the same ctime tick,
        // so its (ctime, size) cannot vouch for this content later.
        let cacheable = trust_known && ctime_ns < started - RACY_NS;
        journal.record_object(id, &state, program, cacheable).map_err(refused)?;
        if let Some(stored) = unrecorded {
            stored.keep();
        }
        Ok(())
    }

    /// Whether `name` in `dir` is the last name of a non-directory (so
    /// removing it destroys the object's content).
    pub(crate) fn is_last_link(dir: BorrowedFd<'_>, name: &OsStr) -> bool {
        rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .map(|st| st.st_mode & libc::S_IFMT != libc::S_IFDIR && st.st_nlink <= 1)
            .unwrap_or(false)
    }
}
