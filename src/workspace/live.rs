//! The live tree: every filesystem operation on the workspace, in our own
//! types, without FUSE. The FUSE adapter (`crate::fs`) converts requests
//! into calls here; tests call it directly.
//!
//! `LiveTree` owns the parts and composes them, one operation at a time:
//! the backing directory's system calls (`backing.rs`), which object each
//! inode number stands for (`objects.rs`), the attic (`attic.rs`), what is
//! recorded before a change (`capture.rs`), rewound files awaiting their
//! bytes (`pending.rs`) and the files clients hold open (`open_files.rs`).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};

use crate::error::Errno;
use crate::journal::Journal;
use crate::sys::FileHandle;
use crate::workspace::attic::Attic;
use crate::workspace::attr::{Attr, Caller, Ino, Kind, SetAttr};
use crate::workspace::backing::{self, Backing, FsStats, XattrReply, backing_open_flags, give_to_caller};
use crate::workspace::capture::{Capture, Named, Recorder, Recording, note_born};
use crate::workspace::listings::{DirPage, Listings};
use crate::workspace::objects::ObjectTable;
use crate::workspace::open_files::{DirEntry, Fh, OpenFile, OpenFiles};
use crate::workspace::opener::Opener;
use crate::workspace::pending::{PendingSet, Settler};

type Res<T> = std::result::Result<T, Errno>;

/// The xattr the kernel asks for before writes (`XATTR_NAME_CAPS`).
const SECURITY_CAPABILITY: &[u8] = b"security.capability";

/// The result of a lookup-like call: attributes of a named object.
pub type Entry = Attr;

/// What a create gives: the new file's attributes and its open file.
pub type Created = (Entry, Fh, Arc<OpenFile>);

/// A directory of the tree, reached by its inode number: its cached
/// `O_PATH` descriptor and the handle the inode table knows it by (so
/// recording a change in it needs no `name_to_handle_at`).
pub(crate) struct Dir {
    fd: Arc<OwnedFd>,
    pub(crate) handle: FileHandle,
}

impl AsFd for Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The live workspace tree.
#[derive(Debug)]
pub struct LiveTree {
    backing: Backing,
    objects: ObjectTable,
    attic: Attic,
    recorder: Recorder,
    /// Files put in place by a rewind whose bytes are still in the store.
    pending: PendingSet,
    open: OpenFiles,
    listings: Listings,
    /// Files this daemon created whose creating open is still open, with
    /// the turn they were created in: they have no `security.capability`
    /// (see `getxattr`).
    uncapable: Mutex<HashMap<Ino, (Fh, Option<i64>)>>,
    /// Names a lookup found absent (see `LiveTree::known_absent`).
    absent: Mutex<AbsentNames>,
}

/// How many absent names to remember at most: a compiler looks up many
/// names that do not exist, and few of them are then created.
const ABSENT_NAMES: usize = 4096;

/// The names the kernel looked up and the backing directory did not
/// hold, in turn `turn` (taken before the lookup's `stat`).
#[derive(Debug, Default)]
struct AbsentNames {
    turn: i64,
    names: std::collections::HashSet<(Ino, OsString)>,
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

/// The name of the hidden directory in the root of a live mount, where
/// checkpoints are browsed (`view::browse`).
pub const HIDDEN_DIR: &str = ".rewindfs";

/// Checks a name about to be created in `parent`. The root's `.rewindfs`
/// is where the mount shows its checkpoints: a real entry made there while
/// mounted would hide them and could stand in for them (an agent renaming
/// a forged `sub/.rewindfs` to the root), so no operation may create it.
fn check_new_name(parent: Ino, name: &OsStr) -> Res<()> {
    check_name(name)?;
    if parent == Ino::ROOT && name == HIDDEN_DIR {
        log::warn!("refused to create the reserved name {} at the root of the mount", HIDDEN_DIR);
        return Err(Errno(libc::EEXIST));
    }
    Ok(())
}

/// Runs the steps that follow the creation of `name` in `dir` (giving it
/// to the caller, taking its handle and attributes); when one fails,
/// removes `name` again, so that the call fails with the tree as it was (a
/// retry with `O_EXCL` would otherwise meet EEXIST). The kernel holds the
/// parent directory locked for the whole call, so `name` is still what
/// was just created.
fn undo_creation_on_failure<T>(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    is_dir: bool,
    rest: impl FnOnce() -> Res<T>,
) -> Res<T> {
    let result = if crate::faults::fail_point("create-after-make") { Err(Errno(libc::EIO)) } else { rest() };
    if let Err(e) = &result {
        let flags = if is_dir { AtFlags::REMOVEDIR } else { AtFlags::empty() };
        if let Err(u) = rustix::fs::unlinkat(dir, name, flags) {
            log::error!("cannot remove {name:?} after its creation failed part-way ({e}): {u}");
        }
    }
    result
}

impl LiveTree {
    /// Opens the workspace at `path` (a directory), its objects opened by
    /// `opener` (the daemon's is `Opener::ByHandle`).
    pub fn new(path: &Path, journal: Option<Arc<Journal>>, opener: Opener) -> crate::Result<LiveTree> {
        let backing = Backing::open(path, opener)?;
        Ok(LiveTree {
            objects: ObjectTable::new(backing.root_handle().clone()),
            backing,
            attic: Attic::none(journal.clone()),
            recorder: Recorder::new(journal),
            pending: PendingSet::default(),
            open: OpenFiles::default(),
            listings: Listings::default(),
            uncapable: Mutex::default(),
            absent: Mutex::default(),
        })
    }

    /// Uses `dir` as the attic if it is on the workspace's filesystem
    /// (renames cannot cross filesystems); otherwise removed files are
    /// copied into the chunk store before deletion.
    pub fn with_attic(mut self, dir: &Path) -> crate::Result<LiveTree> {
        self.attic = Attic::open(self.recorder.journal().cloned(), dir, self.backing.root_fd())?;
        if let Some(fd) = self.attic.fd() {
            self.backing.also_under(fd)?;
        }
        Ok(self)
    }

    /// The backing directory's system calls.
    pub fn backing(&self) -> &Backing {
        &self.backing
    }

    /// Where removed objects are kept.
    pub fn attic(&self) -> &Attic {
        &self.attic
    }

    /// The files a rewind put in place whose bytes are still in the store.
    pub fn pending(&self) -> &PendingSet {
        &self.pending
    }

    /// Writes pending files' bytes.
    pub fn settler(&self) -> Settler<'_> {
        Settler::new(&self.pending, &self.backing, self.recorder.journal().map(|j| &**j))
    }

    /// The files and directory listings clients hold open.
    pub fn open_files(&self) -> &OpenFiles {
        &self.open
    }

    /// Object identity: inode numbers <-> file handles.
    pub fn objects(&self) -> &ObjectTable {
        &self.objects
    }

    /// Records pre-images into `journal` (the rewind's own recording).
    pub(crate) fn capture<'a>(&'a self, journal: &'a Journal) -> Capture<'a> {
        Capture::new(journal, &self.pending)
    }

    /// Starts recording one mutation: holds the turn gate until dropped.
    pub(crate) fn recording(&self) -> Res<Option<Recording<'_>>> {
        self.recorder.recording(&self.pending)
    }

    pub fn journal(&self) -> Option<&Arc<Journal>> {
        self.recorder.journal()
    }

    /// A descriptor on the backing filesystem (for statfs, syncfs).
    pub fn root_fd(&self) -> BorrowedFd<'_> {
        self.backing.root_fd()
    }

    /// Records, for the turn that just began, every file open for writing.
    /// Called by the journal while it holds the gate exclusively.
    pub fn recapture_writers(&self, journal: &Journal) {
        let system = Caller { uid: 0, gid: 0, pid: std::process::id() };
        for ino in self.recorder.writer_inos() {
            if let Err(e) = self.capture_ino(journal, ino, true, system) {
                log::warn!("cannot record open file {ino:?} at the turn boundary: {e}");
            }
        }
    }

    /// Whether a file open for writing was modified within `window`
    /// (writes through passthrough or mmap never reach the daemon).
    pub fn writers_active_within(&self, window: std::time::Duration) -> bool {
        let now = std::time::SystemTime::now();
        self.recorder.writer_inos().into_iter().any(|ino| {
            self.open_path_fd(ino)
                .ok()
                .and_then(|fd| rustix::fs::fstat(&fd).ok())
                .map(|st| Attr::from_stat(ino, &st).mtime)
                .is_some_and(|m| now.duration_since(m).map(|d| d < window).unwrap_or(true))
        })
    }

    /// Records the state of the object `ino` before its first change in
    /// this turn.
    fn capture_ino(&self, journal: &Journal, ino: Ino, content: bool, caller: Caller) -> Res<()> {
        let fd = self.open_path_fd(ino)?;
        self.capture(journal).object(fd.as_fd(), content, self.recorder.is_open_for_write(ino), caller)
    }

    /// An `O_PATH` descriptor for the object. A directory's comes from the
    /// descriptor cache: the directory `GETATTR` that follows every create,
    /// rename and unlink (`default_permissions`) then costs no
    /// `open_by_handle_at`. A cached descriptor names the same inode the
    /// handle does, wherever it has moved (as `open_by_handle_at` would).
    pub(crate) fn open_path_fd(&self, ino: Ino) -> Res<Arc<OwnedFd>> {
        let (handle, kind) = self.objects.get(ino).ok_or(Errno::ESTALE)?;
        if kind == Kind::Dir {
            return self.backing.dir(&handle);
        }
        Ok(Arc::new(self.backing.open_handle(&handle, libc::O_PATH)?))
    }

    fn open_path(&self, ino: Ino) -> Res<OwnedFd> {
        let (handle, _) = self.objects.get(ino).ok_or(Errno::ESTALE)?;
        self.backing.open_handle(&handle, libc::O_PATH)
    }

    /// A (cached) `O_PATH` descriptor for a directory.
    fn dir(&self, ino: Ino) -> Res<Dir> {
        let (handle, kind) = self.objects.get(ino).ok_or(Errno::ESTALE)?;
        if kind != Kind::Dir {
            return Err(Errno::ENOTDIR);
        }
        Ok(Dir { fd: self.backing.dir(&handle)?, handle })
    }

    /// Stats `name` in `dir` and registers it. Counts a kernel lookup.
    fn entry_at(&self, dir: BorrowedFd<'_>, name: &OsStr, count_lookup: bool) -> Res<Attr> {
        let (st, handle) = backing::stat_at(dir, name)?;
        Ok(self.register(&st, handle, count_lookup))
    }

    /// The attributes of a stat'ed object, numbered.
    fn register(&self, st: &rustix::fs::Stat, handle: FileHandle, count_lookup: bool) -> Attr {
        let mut attr = Attr::from_stat(Ino(0), st);
        self.pending.with_mtime(&handle, &mut attr);
        attr.ino = self.objects.intern(handle, st.st_ino, Kind::from_mode(st.st_mode), count_lookup);
        attr
    }

    /// The inode number of an existing name, without counting a lookup.
    fn peek(&self, dir: BorrowedFd<'_>, name: &OsStr) -> Res<(Ino, Attr)> {
        let attr = self.entry_at(dir, name, false)?;
        Ok((attr.ino, attr))
    }

    /// The attributes and handle of an existing name, without counting a
    /// lookup: what recording a change to it needs to know.
    fn peek_object(&self, dir: BorrowedFd<'_>, name: &OsStr) -> Res<(Attr, FileHandle)> {
        let (st, handle) = backing::stat_at(dir, name)?;
        Ok((self.register(&st, handle.clone(), false), handle))
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
        let fd = self.dir(dir)?;
        Ok(backing::list_dir(fd.as_fd())?.into_iter().map(|(name, _, _)| name).collect())
    }

    /// An inode number for a handle, registering it without a kernel
    /// reference (for the daemon's own operations).
    pub fn ino_for(&self, fd: BorrowedFd<'_>) -> Res<Ino> {
        let st = rustix::fs::fstat(fd)?;
        let handle = backing::handle_of_fd(fd)?;
        Ok(self.objects.intern(handle, st.st_ino, Kind::from_mode(st.st_mode), false))
    }

    pub fn lookup(&self, parent: Ino, name: &OsStr) -> Res<Entry> {
        if name.as_bytes().len() > 255 {
            return Err(Errno(libc::ENAMETOOLONG));
        }
        let dir = self.dir(parent)?;
        let turn = self.turn();
        let found = self.entry_at(dir.as_fd(), name, true);
        if let (Err(e), Some(turn)) = (&found, turn)
            && *e == Errno::ENOENT
        {
            let mut absent = self.absent();
            if absent.turn != turn || absent.names.len() >= ABSENT_NAMES {
                absent.names.clear();
                absent.turn = turn;
            }
            absent.names.insert((parent, name.to_os_string()));
        }
        found
    }

    fn absent(&self) -> std::sync::MutexGuard<'_, AbsentNames> {
        crate::poison::lock(&self.absent, "the absent names")
    }

    /// Whether a lookup in the current turn found `name` absent from
    /// `parent` (forgotten as it is asked: the request that asks is about
    /// to create the name). The kernel sends a create (or a rename to a
    /// new name) after a lookup that found nothing, holding the directory
    /// locked from the lookup on. Recorded before a creation, such a
    /// lookup says what the name was at the checkpoint as well as a `stat`
    /// now would: it was absent in this turn, and a name no change of this
    /// turn has recorded (the caller asks only then, `Journal::needs_entry`)
    /// was absent at the checkpoint too. What a request does with the name
    /// now still fails if it exists after all (`O_EXCL`, `EEXIST` of
    /// `mkdirat`, `RENAME_NOREPLACE`).
    fn known_absent(&self, parent: Ino, name: &OsStr) -> bool {
        let Some(turn) = self.turn() else { return false };
        let mut absent = self.absent();
        absent.turn == turn && absent.names.remove(&(parent, name.to_os_string()))
    }

    /// The kernel dropped `n` references to `ino`; true when it holds none
    /// any more (it evicted the inode).
    pub fn forget(&self, ino: Ino, n: u64) -> bool {
        self.objects.forget(ino, n)
    }

    pub fn getattr(&self, ino: Ino, fh: Option<Fh>) -> Res<Attr> {
        let mut attr = self.getattr_backing(ino, fh)?;
        // A removed file kept in the attic has a link there; to its readers
        // it has none, as on ext4.
        if attr.kind != Kind::Dir && self.attic.exists() && self.objects.is_unlinked(ino) {
            attr.nlink = 0;
        }
        Ok(attr)
    }

    fn getattr_backing(&self, ino: Ino, fh: Option<Fh>) -> Res<Attr> {
        if let Some(file) = fh.and_then(|fh| self.open.file(fh).ok()) {
            let st = rustix::fs::fstat(&file.file)?;
            return Ok(Attr::from_stat(ino, &st));
        }
        let fd = self.open_path_fd(ino)?;
        let st = rustix::fs::fstat(&fd)?;
        let mut attr = Attr::from_stat(ino, &st);
        if let Some((handle, Kind::File)) = self.objects.get(ino) {
            self.pending.with_mtime(&handle, &mut attr);
        }
        Ok(attr)
    }

    pub fn setattr(&self, ino: Ino, set: SetAttr, fh: Option<Fh>, caller: Caller) -> Res<Attr> {
        // A pending file gets its bytes first: the settler sets the
        // recorded mtime when done, which would undo a `touch` made before.
        if let Some((handle, Kind::File)) = self.objects.get(ino) {
            self.settler().settle(&handle)?;
        }
        let rec = self.recording()?;
        if let Some(r) = &rec {
            self.capture_ino(r.journal, ino, set.size.is_some(), caller)?;
        }
        let fd = self.open_path_fd(ino)?;
        let open = fh.and_then(|fh| self.open.file(fh).ok()).filter(|f| f.writable);
        backing::set_attrs(fd.as_fd(), ino, set, open.as_ref().map(|f| &f.file), caller)
    }

    pub fn readlink(&self, ino: Ino) -> Res<Vec<u8>> {
        let fd = self.open_path(ino)?;
        backing::readlink(fd.as_fd())
    }

    pub fn mknod(&self, parent: Ino, name: &OsStr, mode: u32, rdev: u32, caller: Caller) -> Res<Entry> {
        check_new_name(parent, name)?;
        let dir = self.dir(parent)?;
        let _rec = self.record_new_name(parent, &dir, name, caller)?;
        let kind = rustix::fs::FileType::from_raw_mode(mode);
        rustix::fs::mknodat(dir.as_fd(), name, kind, Mode::from_raw_mode(mode & 0o7777), rdev as u64)?;
        undo_creation_on_failure(dir.as_fd(), name, false, || {
            give_to_caller(dir.as_fd(), name, caller, Some(mode))?;
            if let Some(r) = &_rec {
                r.note_born_at(dir.as_fd(), name, Kind::from_mode(mode))?;
            }
            self.entry_at(dir.as_fd(), name, true)
        })
    }

    pub fn mkdir(&self, parent: Ino, name: &OsStr, mode: u32, caller: Caller) -> Res<Entry> {
        check_new_name(parent, name)?;
        let dir = self.dir(parent)?;
        let rec = self.record_new_name(parent, &dir, name, caller)?;
        rustix::fs::mkdirat(dir.as_fd(), name, Mode::from_raw_mode(mode & 0o7777))?;
        undo_creation_on_failure(dir.as_fd(), name, true, || {
            give_to_caller(dir.as_fd(), name, caller, Some(mode))?;
            // Lets a rewind to an earlier checkpoint move the whole new
            // directory aside in one step.
            if let Some(r) = &rec {
                r.note_born_at(dir.as_fd(), name, Kind::Dir)?;
            }
            self.entry_at(dir.as_fd(), name, true)
        })
    }

    pub fn symlink(&self, parent: Ino, name: &OsStr, target: &OsStr, caller: Caller) -> Res<Entry> {
        check_new_name(parent, name)?;
        let dir = self.dir(parent)?;
        let _rec = self.record_new_name(parent, &dir, name, caller)?;
        rustix::fs::symlinkat(target, dir.as_fd(), name)?;
        undo_creation_on_failure(dir.as_fd(), name, false, || {
            give_to_caller(dir.as_fd(), name, caller, None)?;
            if let Some(r) = &_rec {
                r.note_born_at(dir.as_fd(), name, Kind::Symlink)?;
            }
            self.entry_at(dir.as_fd(), name, true)
        })
    }

    pub fn link(&self, ino: Ino, new_parent: Ino, new_name: &OsStr, caller: Caller) -> Res<Entry> {
        check_new_name(new_parent, new_name)?;
        let src = self.open_path(ino)?;
        let dir = self.dir(new_parent)?;
        let _rec = self.record_new_name(new_parent, &dir, new_name, caller)?;
        if let Some(r) = &_rec {
            self.capture_ino(r.journal, ino, false, caller)?;
        }
        backing::link_fd(src.as_fd(), dir.as_fd(), new_name)?;
        // Removing the new name gives the file back the names it had.
        undo_creation_on_failure(dir.as_fd(), new_name, false, || self.entry_at(dir.as_fd(), new_name, true))
    }

    /// Whether the file `ino`, about to be removed, was created in the
    /// current turn (see `Journal::take_born`).
    fn take_born(&self, rec: &Recording<'_>, ino: Ino) -> bool {
        rec.take_born(self.objects.get(ino).map(|(h, _)| h).as_ref())
    }

    /// Notes `ino` as created in this turn again: `take_born` forgot it,
    /// then the removal failed.
    fn give_born_back(&self, rec: &Recording<'_>, ino: Ino) {
        if let Some((handle, _)) = self.objects.get(ino) {
            rec.journal.note_file_born(&handle);
        }
    }

    /// Marks `victim` unlinked if removing one name removed its last one.
    fn note_removed(&self, victim: Attr) {
        if victim.kind == Kind::Dir || victim.nlink <= 1 {
            if let Some((handle, Kind::Dir)) = self.objects.get(victim.ino) {
                self.backing.forget_dir(&handle);
            }
            self.objects.mark_unlinked(victim.ino);
        }
    }

    pub fn unlink(&self, parent: Ino, name: &OsStr, caller: Caller) -> Res<()> {
        let dir = self.dir(parent)?;
        let (victim, handle) = self.peek_object(dir.as_fd(), name)?;
        if victim.kind == Kind::Dir {
            return Err(Errno(libc::EISDIR));
        }
        let rec = self.recording()?;
        if let Some(r) = &rec {
            // The `stat` above answers for the name: the kernel holds the
            // directory and the file locked for the whole request.
            r.capture().entry_known(&dir, name, Named::Object(&handle, victim.kind), caller)?;
            let last = victim.nlink <= 1;
            if last && self.take_born(r, victim.ino) {
                // Created in this turn and now gone: no checkpoint ever had
                // it (build temporaries, editor swap files), nothing to keep.
                if let Err(e) = rustix::fs::unlinkat(dir.as_fd(), name, AtFlags::empty()) {
                    self.give_born_back(r, victim.ino);
                    return Err(e.into());
                }
                self.note_removed(victim);
                return Ok(());
            }
            // Moved to the attic, the object keeps its attributes, xattrs
            // and bytes: history reads them there, nothing to copy.
            let oid = if last && self.attic.exists() {
                Some(r.capture().object_id_of(&handle, victim.kind)?)
            } else {
                r.capture().named(dir.as_fd(), name, last, caller)?
            };
            if let (true, Some(oid)) = (last && self.attic.exists(), oid) {
                if self.attic.move_in(dir.as_fd(), name, oid)? {
                    self.note_removed(victim);
                    return Ok(());
                }
                // No room in the attic: keep the content the slow way.
                r.capture().named(dir.as_fd(), name, true, caller)?;
            }
        }
        rustix::fs::unlinkat(dir.as_fd(), name, AtFlags::empty())?;
        self.note_removed(victim);
        Ok(())
    }

    pub fn rmdir(&self, parent: Ino, name: &OsStr, caller: Caller) -> Res<()> {
        let dir = self.dir(parent)?;
        let _rec = self.record_removal(&dir, name, caller)?;
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
        let rec = self.recording()?;
        // A plain rename to a name a lookup of this turn found free (the
        // common case) neither looks at the name again nor checks for an
        // object it replaces: `RENAME_NOREPLACE` makes sure, and the rename
        // is done the long way if the name was taken after all.
        let free = flags.is_empty() && rec.is_some() && self.known_absent(new_parent, new_name);
        if free && self.rename_with((&from, name), (&to, new_name), flags, caller, rec.as_ref(), true)? {
            return Ok(());
        }
        self.rename_with((&from, name), (&to, new_name), flags, caller, rec.as_ref(), false)?;
        Ok(())
    }

    /// The rename of `name` in `from` to `new_name` in `to`, recorded with
    /// `rec`. With `assume_free` the new name is taken for free, and
    /// `Ok(false)` says it was not (nothing was renamed).
    fn rename_with(
        &self,
        (from, name): (&Dir, &OsStr),
        (to, new_name): (&Dir, &OsStr),
        flags: RenameFlags,
        caller: Caller,
        rec: Option<&Recording<'_>>,
        assume_free: bool,
    ) -> Res<bool> {
        // The replaced file when `take_born` forgot it (given back if the
        // rename fails).
        let mut born_taken = None;
        // Whether the new name is known to be free (renames to a new name
        // are the common case: then nothing is replaced and the checks for
        // a replaced object are skipped).
        let mut target_free = assume_free;
        if let Some(r) = rec {
            let target = if assume_free { None } else { backing::name_state(to.as_fd(), new_name)? };
            target_free = target.is_none();
            // One record per name touched; the moved object (and a whole
            // directory tree under it) keeps its identity. A new name found
            // free needs no second look.
            r.capture().entry_in(from, name, caller)?;
            let new_named = if target_free { Named::Absent } else { Named::Unknown };
            r.capture().entry_known(to, new_name, new_named, caller)?;
            let plain = flags.is_empty();
            if plain && target == Some(true) {
                let source = self.peek(from.as_fd(), name)?.1;
                let (victim, victim_handle) = self.peek_object(to.as_fd(), new_name)?;
                // A file created in this turn and replaced in it (a temp
                // file renamed over another) was never in a checkpoint: the
                // plain rename below may drop it.
                let unseen = victim.kind != Kind::Dir && source.ino != victim.ino && self.take_born(r, victim.ino);
                if unseen {
                    born_taken = Some(victim.ino);
                }
                let movable = !unseen && self.attic.exists() && source.kind != Kind::Dir && source.ino != victim.ino;
                let oid = if unseen {
                    None
                } else if movable {
                    Some(r.capture().object_id_of(&victim_handle, victim.kind)?)
                } else {
                    r.capture().named(to.as_fd(), new_name, true, caller)?
                };
                if let (true, Some(oid)) = (movable, oid) {
                    // Swap atomically (readers of the new name never see it
                    // missing), then move the replaced file, now under the
                    // old name, to the attic.
                    rustix::fs::renameat_with(from.as_fd(), name, to.as_fd(), new_name, RenameFlags::EXCHANGE)?;
                    let put_away = (|| -> Res<()> {
                        if crate::faults::fail_point("rename-over-attic") {
                            return Err(Errno(libc::EIO));
                        }
                        if !self.attic.move_in(from.as_fd(), name, oid)? {
                            r.capture().named(from.as_fd(), name, true, caller)?;
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
                    return Ok(true);
                }
            } else if !flags.contains(RenameFlags::EXCHANGE) && !target_free {
                // A replaced file with other names loses one: its link
                // count is part of its state at the checkpoint.
                r.capture().named(to.as_fd(), new_name, false, caller)?;
            }
        }
        let replaced = if target_free || flags.contains(RenameFlags::EXCHANGE) || flags.contains(RenameFlags::NOREPLACE)
        {
            None
        } else {
            self.peek(to.as_fd(), new_name).ok().map(|(_, a)| a)
        };
        let flags = if assume_free { flags | RenameFlags::NOREPLACE } else { flags };
        if let Err(e) = rustix::fs::renameat_with(from.as_fd(), name, to.as_fd(), new_name, flags) {
            if assume_free && e == rustix::io::Errno::EXIST {
                return Ok(false);
            }
            if let (Some(r), Some(ino)) = (rec, born_taken) {
                self.give_born_back(r, ino);
            }
            return Err(e.into());
        }
        if let Some(victim) = replaced {
            // Renaming a name onto a hard link of itself changes nothing.
            if let Ok((ino, _)) = self.peek(to.as_fd(), new_name)
                && ino != victim.ino
            {
                self.note_removed(victim);
            }
        }
        Ok(true)
    }

    pub fn open(&self, ino: Ino, flags: i32, caller: Caller) -> Res<(Fh, Arc<OpenFile>)> {
        let (handle, kind) = self.objects.get(ino).ok_or(Errno::ESTALE)?;
        if kind == Kind::Dir && flags & libc::O_ACCMODE != libc::O_RDONLY {
            return Err(Errno(libc::EISDIR));
        }
        // A rewound file gets its bytes before anyone can see it open.
        self.settler().settle(&handle)?;
        let writable = flags & libc::O_ACCMODE != libc::O_RDONLY;
        // A file opened for writing may be written without the daemon
        // seeing each write (passthrough, mmap): record it now.
        let _rec = if writable { self.recording()? } else { None };
        if let Some(r) = &_rec {
            self.capture_ino(r.journal, ino, true, caller)?;
        }
        let fd = self.backing.open_handle(&handle, backing_open_flags(flags).bits() as i32)?;
        if writable {
            self.recorder.add_writer(ino);
        }
        Ok(self.open.register(ino, handle, File::from(fd), writable))
    }

    pub fn create(&self, parent: Ino, name: &OsStr, mode: u32, flags: i32, caller: Caller) -> Res<Created> {
        check_new_name(parent, name)?;
        let dir = self.dir(parent)?;
        let _rec = self.record_new_name(parent, &dir, name, caller)?;
        let oflags = backing_open_flags(flags) | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW;
        let fd = rustix::fs::openat(dir.as_fd(), name, oflags, Mode::from_raw_mode(mode & 0o7777))?;
        let (st, handle) = undo_creation_on_failure(dir.as_fd(), name, false, || {
            give_to_caller(dir.as_fd(), name, caller, Some(mode))?;
            Ok((rustix::fs::fstat(&fd)?, backing::handle_of_fd(fd.as_fd())?))
        })?;
        if let Some(r) = &_rec {
            r.journal.note_file_born(&handle);
            note_born(r.journal, &handle, Kind::File);
        }
        let ino = self.objects.intern(handle.clone(), st.st_ino, Kind::from_mode(st.st_mode), true);
        let writable = flags & libc::O_ACCMODE != libc::O_RDONLY;
        if writable {
            self.recorder.add_writer(ino);
        }
        let (fh, open) = self.open.register(ino, handle, File::from(fd), writable);
        let turn = self.turn();
        self.uncapable().insert(ino, (fh, turn));
        Ok((Attr::from_stat(ino, &st), fh, open))
    }

    /// Before creating `name` in `parent`: records that it did not exist
    /// (and the directory's attributes). Returns the gate to hold while
    /// creating.
    fn record_new_name(&self, parent: Ino, dir: &Dir, name: &OsStr, caller: Caller) -> Res<Option<Recording<'_>>> {
        let rec = self.recording()?;
        if let Some(r) = &rec {
            let named = if self.known_absent(parent, name) { Named::Absent } else { Named::Unknown };
            r.new_name(dir, name, named, caller)?;
        }
        Ok(rec)
    }

    /// Before removing `name`: records what it was, and the object itself.
    fn record_removal(&self, dir: &Dir, name: &OsStr, caller: Caller) -> Res<Option<Recording<'_>>> {
        let rec = self.recording()?;
        if let Some(r) = &rec {
            r.removal(dir, name, caller)?;
        }
        Ok(rec)
    }

    pub fn write(&self, fh: Fh, offset: u64, data: &[u8]) -> Res<u32> {
        let file = self.open.file(fh)?;
        // Recorded when opened for writing (and again at each turn boundary).
        let _rec = self.recording()?;
        if let Some(r) = &_rec {
            r.journal.touch();
        }
        file.file.write_all_at(data, offset).map_err(Errno::from)?;
        Ok(data.len() as u32)
    }

    /// Whether a write to this open file by a writer without CAP_FSETID
    /// must clear mode bits: setuid, or setgid with group execute.
    pub fn has_privileges_to_drop(&self, file: &OpenFile) -> Res<bool> {
        Ok(backing::privileged_bits(rustix::fs::fstat(&file.file)?.st_mode) != 0)
    }

    /// Before a write by a user without CAP_FSETID (ext4 clears the bits on
    /// write; under FUSE_HANDLE_KILLPRIV_V2 the kernel leaves it to us):
    /// clears setuid, and setgid with group execute, recording the mode
    /// first like any attribute change. Returns whether the mode changed,
    /// so that the caller can tell the kernel.
    pub fn drop_privileges(&self, fh: Fh, caller: Caller) -> Res<bool> {
        let file = self.open.file(fh)?;
        let st = rustix::fs::fstat(&file.file)?;
        let bits = backing::privileged_bits(st.st_mode);
        if bits == 0 {
            return Ok(false);
        }
        let rec = self.recording()?;
        if let Some(r) = &rec {
            self.capture_ino(r.journal, file.ino, false, caller)?;
        }
        backing::clear_mode_bits(&file.file, st.st_mode, bits)?;
        Ok(true)
    }

    pub fn release(&self, fh: Fh) {
        let Some(file) = self.open.remove(fh) else { return };
        let mut uncapable = self.uncapable();
        if uncapable.get(&file.ino).is_some_and(|(created_by, _)| *created_by == fh) {
            uncapable.remove(&file.ino);
        }
        drop(uncapable);
        if file.writable {
            self.recorder.remove_writer(file.ino);
        }
    }

    /// The listing of directory `ino` from `offset` (see `listings`): a
    /// snapshot read at offset 0, so that offsets stay valid while entries
    /// are added and removed (POSIX leaves that unspecified; a snapshot is
    /// the simplest correct answer).
    pub fn readdir(&self, ino: Ino, offset: u64) -> Res<DirPage> {
        self.listings.page(ino, offset, || {
            let dir = self.dir(ino)?;
            // Never resolve "..": from a top-level directory of an in-place
            // mount it would land on the mount itself and call the daemon back.
            let parent = ino;
            let mut entries = vec![
                DirEntry { name: ".".into(), ino, kind: Kind::Dir },
                DirEntry { name: "..".into(), ino: parent, kind: Kind::Dir },
            ];
            for (name, backing_ino, kind) in backing::list_dir(dir.as_fd())? {
                entries.push(DirEntry { name, ino: Ino(backing_ino), kind: kind.unwrap_or(Kind::File) });
            }
            Ok(entries)
        })
    }

    /// Whether `ino` is a directory of the tree (what opening it checks).
    pub fn check_dir(&self, ino: Ino) -> Res<()> {
        self.dir(ino).map(drop)
    }

    pub fn fsyncdir(&self, ino: Ino) -> Res<()> {
        let dir = self.dir(ino)?;
        backing::fsync_dir(dir.as_fd())
    }

    pub fn statfs(&self) -> Res<FsStats> {
        self.backing.statfs()
    }

    fn xattr_fd(&self, ino: Ino) -> Res<Arc<OwnedFd>> {
        self.open_path_fd(ino)
    }

    /// With `size == 0`, answers the size of the value; otherwise the value
    /// (ERANGE when it does not fit in `size`).
    pub fn getxattr(&self, ino: Ino, name: &OsStr, size: u32) -> Res<XattrReply> {
        if name.as_bytes() == SECURITY_CAPABILITY && self.surely_uncapable(ino) {
            return Err(Errno(libc::ENODATA));
        }
        backing::getxattr(self.xattr_fd(ino)?.as_fd(), name, size)
    }

    fn uncapable(&self) -> std::sync::MutexGuard<'_, HashMap<Ino, (Fh, Option<i64>)>> {
        crate::poison::lock(&self.uncapable, "the uncapable set")
    }

    fn turn(&self) -> Option<i64> {
        self.journal().map(|j| j.current_turn())
    }

    /// Whether `ino` certainly has no `security.capability`: the kernel
    /// asks before the first write through every open (`file_remove_privs`,
    /// FUSE never marks an inode free of security xattrs), one request and
    /// two lookups on the backing side per created file. A file this daemon
    /// created has none (nothing sets one at creation), and only `setxattr`
    /// can add one: the daemon's own forgets the file here first, and
    /// writes behind the daemon's back (a rewind, a restore) each seal a
    /// turn first, which ends the answer too.
    fn surely_uncapable(&self, ino: Ino) -> bool {
        let created_in = self.uncapable().get(&ino).map(|(_, turn)| *turn);
        created_in.is_some_and(|turn| turn == self.turn())
    }

    pub fn listxattr(&self, ino: Ino, size: u32) -> Res<XattrReply> {
        backing::listxattr(self.xattr_fd(ino)?.as_fd(), size)
    }

    /// Every xattr of an object, sorted by name (empty when unreadable).
    pub fn xattrs_of(&self, ino: Ino) -> Vec<(Vec<u8>, Vec<u8>)> {
        match self.xattr_fd(ino) {
            Ok(fd) => backing::xattrs_sorted(fd.as_fd()),
            Err(_) => Vec::new(),
        }
    }

    pub fn setxattr(&self, ino: Ino, name: &OsStr, value: &[u8], flags: i32, caller: Caller) -> Res<()> {
        self.uncapable().remove(&ino);
        let _rec = self.recording()?;
        if let Some(r) = &_rec {
            self.capture_ino(r.journal, ino, false, caller)?;
        }
        let fd = self.xattr_fd(ino)?;
        backing::set_xattr(fd.as_fd(), name, value, flags)
    }

    pub fn removexattr(&self, ino: Ino, name: &OsStr, caller: Caller) -> Res<()> {
        self.uncapable().remove(&ino);
        let _rec = self.recording()?;
        if let Some(r) = &_rec {
            self.capture_ino(r.journal, ino, false, caller)?;
        }
        let fd = self.xattr_fd(ino)?;
        backing::removexattr(fd.as_fd(), name)
    }

    /// Flushes everything written to the backing filesystem.
    pub fn syncfs(&self) -> Res<()> {
        self.backing.syncfs()
    }
}
