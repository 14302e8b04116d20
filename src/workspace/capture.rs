//! The recording policy: what the live tree records before it changes
//! anything. `Recorder` holds the journal and the files open for writing
//! (recorded again at each turn); `Recording` holds the turn gate for one
//! mutation and says what a creation or removal records; `Capture` gathers
//! the current state from the backing files and hands it to the journal,
//! which stores it durably. Only then does the caller apply its change.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex};

use rustix::fs::OFlags;

use crate::error::{AsErrno, Errno};
use crate::journal::{Journal, JournalError, ns};
use crate::meta::{ObjectId, ObjectState, encode_xattrs};
use crate::sys::FileHandle;
use crate::workspace::attr::{Caller, Ino, Kind};
use crate::workspace::backing::{self, handle_of_fd, open_named, read_xattrs};
use crate::workspace::live::Dir;
use crate::workspace::pending::PendingSet;

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

/// The recording policy of a tree: the journal pre-images go to, and the
/// files open for writing (which each new turn records again).
#[derive(Debug, Default)]
pub struct Recorder {
    /// Where pre-images go; `None` serves the tree without recording.
    journal: Option<Arc<Journal>>,
    /// Open-for-write counts: these files may be written (by passthrough
    /// or mmap) without the daemon seeing it, so each new turn records
    /// them again.
    writers: Mutex<HashMap<Ino, u32>>,
}

/// Holds the journal's turn gate for the length of one mutation.
pub(crate) struct Recording<'a> {
    pub journal: &'a Journal,
    pending: &'a PendingSet,
    _gate: crate::journal::Gate<'a>,
}

/// What a caller already knows of a name whose entry it records.
#[derive(Clone, Copy)]
pub(crate) enum Named<'h> {
    /// Nothing: the name is looked up.
    Unknown,
    /// The name does not exist.
    Absent,
    /// The name refers to the object with this handle, of this kind.
    Object(&'h FileHandle, Kind),
}

/// Records pre-images into one journal. Files whose bytes are still in the
/// store (`pending`) are recorded with the content they will receive.
#[derive(Clone, Copy)]
pub(crate) struct Capture<'a> {
    journal: &'a Journal,
    pending: &'a PendingSet,
}

impl Recorder {
    pub(crate) fn new(journal: Option<Arc<Journal>>) -> Recorder {
        Recorder { journal, writers: Mutex::new(HashMap::new()) }
    }

    pub fn journal(&self) -> Option<&Arc<Journal>> {
        self.journal.as_ref()
    }

    /// Starts recording one mutation: holds the turn gate until dropped.
    /// Refused (EROFS) once the journal has stopped taking changes (a
    /// background thread of the daemon failed, `Journal::fail`): a change
    /// it could not vouch for must not be made.
    pub(crate) fn recording<'a>(&'a self, pending: &'a PendingSet) -> Result<Option<Recording<'a>>, Errno> {
        let Some(journal) = self.journal.as_deref() else { return Ok(None) };
        if journal.failure().is_some() {
            return Err(Errno::EROFS);
        }
        Ok(Some(Recording { journal, pending, _gate: journal.gate() }))
    }

    fn writers(&self) -> std::sync::MutexGuard<'_, HashMap<Ino, u32>> {
        crate::poison::lock(&self.writers, "the open writers")
    }

    /// A client opened `ino` for writing.
    pub(crate) fn add_writer(&self, ino: Ino) {
        *self.writers().entry(ino).or_insert(0) += 1;
    }

    /// A client closed a file it had open for writing.
    pub(crate) fn remove_writer(&self, ino: Ino) {
        let mut writers = self.writers();
        if let Some(n) = writers.get_mut(&ino) {
            *n -= 1;
            if *n == 0 {
                writers.remove(&ino);
            }
        }
    }

    /// Whether a client holds the file open for writing (or mapped).
    pub(crate) fn is_open_for_write(&self, ino: Ino) -> bool {
        self.writers().contains_key(&ino)
    }

    /// The files open for writing.
    pub(crate) fn writer_inos(&self) -> Vec<Ino> {
        self.writers().keys().copied().collect()
    }
}

/// Notes a just-created object's birth turn (see `Recording::note_born_at`).
pub(crate) fn note_born(journal: &Journal, handle: &FileHandle, kind: Kind) {
    if let Err(e) = journal.note_born(handle, kind_code(kind)) {
        log::warn!("cannot note the creation turn of a new object: {e}");
    }
}

impl<'a> Recording<'a> {
    pub(crate) fn capture(&self) -> Capture<'a> {
        Capture { journal: self.journal, pending: self.pending }
    }

    /// Before creating `name`: records that it did not exist (and the
    /// directory's attributes); `named` what the caller knows of it.
    pub(crate) fn new_name(&self, dir: &Dir, name: &OsStr, named: Named<'_>, caller: Caller) -> Res<()> {
        self.capture().entry_known(dir, name, named, caller)
    }

    /// Before removing `name`: records what it was, and the object itself.
    pub(crate) fn removal(&self, dir: &Dir, name: &OsStr, caller: Caller) -> Res<()> {
        let capture = self.capture();
        capture.entry_in(dir, name, caller)?;
        let dir = dir.as_fd();
        capture.named(dir, name, backing::is_last_link(dir, name), caller)?;
        Ok(())
    }

    /// Notes the object just created at `name` as born in the current turn
    /// (under the recording's gate): a rewind to an earlier checkpoint
    /// leaves it out of the objects it visits, since no such checkpoint
    /// has it.
    /// The object exists already, so a note that cannot be written does
    /// not fail the creation: the rewind then visits the object and finds
    /// it out of the tree (the way it did before births were noted).
    pub(crate) fn note_born_at(&self, dir: BorrowedFd<'_>, name: &OsStr, kind: Kind) -> Res<()> {
        let handle = backing::handle_at(dir, name)?;
        note_born(self.journal, &handle, kind);
        Ok(())
    }

    /// Whether the object `handle` names, about to be removed, was created
    /// in the current turn (see `Journal::take_born`).
    pub(crate) fn take_born(&self, handle: Option<&FileHandle>) -> bool {
        handle.is_some_and(|h| self.journal.take_born(h))
    }
}

impl<'a> Capture<'a> {
    pub(crate) fn new(journal: &'a Journal, pending: &'a PendingSet) -> Capture<'a> {
        Capture { journal, pending }
    }

    /// The persistent object id of a live object reached by an `O_PATH`
    /// descriptor.
    pub(crate) fn object_id_of_fd(&self, fd: BorrowedFd<'_>, kind: Kind) -> Res<ObjectId> {
        let handle = handle_of_fd(fd)?;
        self.journal.object_id(&handle, kind_code(kind)).map_err(refused)
    }

    /// Records what `name` in directory `dir` refers to now (or that it
    /// does not exist), plus the directory's own attributes, before the
    /// first change to that name in this turn.
    pub(crate) fn entry(&self, dir: BorrowedFd<'_>, name: &OsStr, caller: Caller) -> Res<()> {
        self.entry_with(dir, &handle_of_fd(dir)?, name, Named::Unknown, caller)
    }

    /// As `entry`, for a directory of the live tree, whose handle is known
    /// from the lookup that numbered it: one `name_to_handle_at` fewer.
    pub(crate) fn entry_in(&self, dir: &Dir, name: &OsStr, caller: Caller) -> Res<()> {
        self.entry_with(dir.as_fd(), &dir.handle, name, Named::Unknown, caller)
    }

    /// As `entry_in`, with what `name` refers to already known to the
    /// caller from a `stat` of it in the same request (the kernel holds
    /// the directory locked for the whole request, so it still holds):
    /// nothing more is asked of the backing filesystem.
    pub(crate) fn entry_known(&self, dir: &Dir, name: &OsStr, named: Named<'_>, caller: Caller) -> Res<()> {
        self.entry_with(dir.as_fd(), &dir.handle, name, named, caller)
    }

    fn entry_with(
        &self,
        dir: BorrowedFd<'_>,
        dir_handle: &FileHandle,
        name: &OsStr,
        named: Named<'_>,
        caller: Caller,
    ) -> Res<()> {
        let journal = self.journal;
        let dir_id = journal.object_id(dir_handle, kind_code(Kind::Dir)).map_err(refused)?;
        let program = journal.program(caller.pid);
        if journal.needs_entry(dir_id, name.as_bytes()) {
            let target = match named {
                Named::Unknown => self.object_id_named(dir, name)?,
                Named::Absent => None,
                Named::Object(handle, kind) => Some(self.object_id_of(handle, kind)?),
            };
            journal.record_entry(dir_id, name.as_bytes(), target, program.as_deref()).map_err(refused)?;
        }
        self.fd(dir, dir_id, false, program.as_deref())
    }

    /// The persistent object id of a live object by its handle (`kind`
    /// only matters the first time the object is seen).
    pub(crate) fn object_id_of(&self, handle: &FileHandle, kind: Kind) -> Res<ObjectId> {
        self.journal.object_id(handle, kind_code(kind)).map_err(refused)
    }

    /// The object id of `name` in `dir`, if it exists (nothing recorded
    /// but the id). An object the journal knows costs one
    /// `name_to_handle_at`; one it does not is opened, so that its handle
    /// and its kind are those of one inode.
    pub(crate) fn object_id_named(&self, dir: BorrowedFd<'_>, name: &OsStr) -> Res<Option<ObjectId>> {
        let handle = match backing::handle_at(dir, name) {
            Ok(h) => h,
            Err(e) if e == Errno::ENOENT => return Ok(None),
            Err(e) => return Err(e),
        };
        if let Some(id) = self.journal.known_object_id(&handle).map_err(refused)? {
            return Ok(Some(id));
        }
        let Some(fd) = open_named(dir, name)? else { return Ok(None) };
        let st = rustix::fs::fstat(&fd)?;
        Ok(Some(self.object_id_of_fd(fd.as_fd(), Kind::from_mode(st.st_mode))?))
    }

    /// Records the state of the object `name` in `dir` (with its content
    /// when `content`), if it exists; returns its id.
    pub(crate) fn named(
        &self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        content: bool,
        caller: Caller,
    ) -> Res<Option<ObjectId>> {
        let Some(fd) = open_named(dir, name)? else { return Ok(None) };
        let st = rustix::fs::fstat(&fd)?;
        let id = self.object_id_of_fd(fd.as_fd(), Kind::from_mode(st.st_mode))?;
        self.fd(fd.as_fd(), id, content, self.journal.program(caller.pid).as_deref())?;
        Ok(Some(id))
    }

    /// Records the state of the object `fd` refers to before its first
    /// change in this turn; `open_for_write` when a client holds it open
    /// for writing.
    pub(crate) fn object(&self, fd: BorrowedFd<'_>, content: bool, open_for_write: bool, caller: Caller) -> Res<()> {
        let st = rustix::fs::fstat(fd)?;
        let id = self.object_id_of_fd(fd, Kind::from_mode(st.st_mode))?;
        // A file open for writing may have been changed through a shared
        // mmap, which leaves ctime alone until the page is written back:
        // (ctime, size) says nothing about its content, so read it.
        let trust_known = !open_for_write;
        self.fd_with(fd, id, content, self.journal.program(caller.pid).as_deref(), trust_known, 0)
    }

    /// Records an object's attributes, xattrs, symlink target and (for
    /// regular files, when asked) content.
    pub(crate) fn fd(&self, fd: BorrowedFd<'_>, id: ObjectId, content: bool, program: Option<&str>) -> Res<()> {
        self.fd_with(fd, id, content, program, true, 0)
    }

    /// As `fd` (no content), for a file of which `outside` names are in
    /// directories an interrupted rewind moved to the attic (see
    /// `Journal::record_object_names_outside`).
    pub(crate) fn fd_names_outside(&self, fd: BorrowedFd<'_>, id: ObjectId, outside: u32) -> Res<()> {
        self.fd_with(fd, id, false, None, true, outside)
    }

    /// As `fd`; `trust_known` allows reusing content known for the
    /// same (ctime, size) instead of reading the file; `outside`: names
    /// of it not in the tree.
    fn fd_with(
        &self,
        fd: BorrowedFd<'_>,
        id: ObjectId,
        content: bool,
        program: Option<&str>,
        trust_known: bool,
        outside: u32,
    ) -> Res<()> {
        let journal = self.journal;
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
            handle_of_fd(fd).ok().and_then(|h| self.pending.content(&h))
        } else {
            None
        };
        // Content stored for this record, taken back if the record cannot
        // be written.
        let mut unrecorded = None;
        let recorded_pending = pending.is_some();
        let content = if let Some(p) = pending {
            Some(p.to_columns())
        } else if content && kind == Kind::File {
            let size = st.st_size as u64;
            let known = if trust_known { journal.known_content(id, ctime_ns, size).map_err(refused)? } else { None };
            match known {
                Some(known) => Some(known),
                None => {
                    let file = backing::reopen(fd, OFlags::RDONLY)?;
                    let stored = journal.store_content_until_recorded(std::fs::File::from(file)).map_err(refused)?;
                    let content = stored.content.to_columns();
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
        // A file open for writing is changed unseen (passthrough, mmap);
        // a pending one is recorded with the content it will receive.
        if kind != Kind::Dir && trust_known && !recorded_pending {
            let is_pending = || handle_of_fd(fd).ok().is_some_and(|h| self.pending.content(&h).is_some());
            journal.note_if_bypassed(id, ctime_ns, state.mtime_ns, is_pending).map_err(refused)?;
        }
        // Like git's "racy clean" rule: a file changed in the last moments
        // before it was read may change again within the same ctime tick,
        // so its (ctime, size) cannot vouch for this content later.
        let cacheable = trust_known && ctime_ns < started - RACY_NS;
        if outside > 0 {
            journal.record_object_names_outside(id, &state, outside, program).map_err(refused)?;
        } else {
            journal.record_object(id, &state, program, cacheable).map_err(refused)?;
        }
        if let Some(stored) = unrecorded {
            stored.keep();
        }
        Ok(())
    }
}
