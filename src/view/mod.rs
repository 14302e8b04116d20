//! The tree as it was at a checkpoint: the live tree, with, for every name
//! and object changed since, its earliest pre-image at or after that
//! checkpoint. Nothing is copied: a view resolves each lookup on demand,
//! so opening one costs the same whatever the size of the tree.

pub mod browse;
pub mod source;

use std::ffi::{OsStr, OsString};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{Mode, OFlags};

use crate::error::Errno;
use crate::journal::{Journal, Mark, ns};
use crate::meta::{ObjectId, decode_xattrs, end_of_ms};
use crate::store::{ContentRef, read_content_at};
use crate::sys::FileHandle;
use crate::workspace::Kind;
use crate::workspace::LiveTree;
use crate::workspace::backing;
use crate::workspace::capture::kind_code;
use crate::world::Held;

/// Errors while reading a view.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Meta(#[from] crate::meta::MetaError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Journal(#[from] crate::journal::JournalError),
    #[error("object {0:?} has no recorded content and is gone from the workspace")]
    Lost(ObjectId),
    #[error("object {0:?} was changed outside rewindfs before checkpoint {1}; its state at this checkpoint is unknown")]
    ChangedOutside(ObjectId, i64),
    /// Changed by a write that bypassed the mount (through the directory
    /// under it) after the last moment the journal vouches for it.
    #[error("{} was changed under the mount, bypassing it, after checkpoint {after}; its state at this checkpoint is unknown", what_object(.id))]
    ChangedUnderMount { id: Option<ObjectId>, after: i64 },
    /// The content of one file could not be read (a damaged or missing
    /// chunk, an unreadable backing file): `path` as shown, `at` the side.
    #[error("cannot read {path} at {at}: {source}")]
    Unreadable { path: String, at: String, source: Box<ViewError> },
    /// A view that gives way ([`TreeView::giving_way`]) stopped because a
    /// rewind or restore waits for the tree: nothing is wrong; it can be
    /// read again once that is done.
    #[error("stopped to let a rewind or restore change the tree; read again after it")]
    GaveWay,
}

/// How many times a reader of the past reads an object again, when a
/// change to it was recorded while it read the live tree, before it waits
/// for the changes in flight to end and reads it once more with new ones
/// held back (see [`TreeView::settled`]).
const REREADS: usize = 4;

/// How much of a file `TreeView::read_full` (and `read_all`) reads per query.
const READ_ALL_STEP: usize = 4 << 20;

fn what_object(id: &Option<ObjectId>) -> String {
    id.map_or("an object never recorded".to_string(), |id| format!("object {id:?}"))
}

impl From<crate::error::Errno> for ViewError {
    fn from(e: crate::error::Errno) -> Self {
        ViewError::Io(std::io::Error::from_raw_os_error(e.0))
    }
}

impl From<rustix::io::Errno> for ViewError {
    fn from(e: rustix::io::Errno) -> Self {
        ViewError::Io(e.into())
    }
}

impl crate::error::AsErrno for ViewError {
    fn errno(&self) -> crate::error::Errno {
        match self {
            ViewError::Io(e) => e.errno(),
            ViewError::Meta(e) => e.errno(),
            ViewError::Store(e) => e.errno(),
            ViewError::Journal(e) => e.errno(),
            ViewError::Lost(_) | ViewError::ChangedOutside(..) | ViewError::ChangedUnderMount { .. } => {
                crate::error::Errno::EIO
            }
            ViewError::Unreadable { source, .. } => source.errno(),
            ViewError::GaveWay => crate::error::Errno(libc::EAGAIN),
        }
    }
}

pub type ViewResult<T> = Result<T, ViewError>;

/// An object as a view sees it: its persistent id if it was ever recorded,
/// and its live handle if it may still exist.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    pub id: Option<ObjectId>,
    pub handle: Option<FileHandle>,
}

/// Where a file's bytes come from in a view.
#[derive(Clone, Debug)]
pub enum Content {
    Live(FileHandle),
    Stored(ContentRef),
    None,
}

/// The state of an object in a view.
#[derive(Clone, Debug)]
pub struct NodeState {
    pub kind: u8,
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub mtime_ns: i64,
    pub nlink: u32,
    pub target: Option<Vec<u8>>,
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    pub content: Content,
    /// blake3 of the content when it is known without reading.
    pub content_hash: Option<Vec<u8>>,
    /// For stored content: the pre-image record (turn, object) that holds
    /// its chunk list, so a rewind can point at it instead of copying it.
    pub content_record: Option<(i64, ObjectId)>,
    /// The object's id when the state was read (None: never recorded).
    pub id: Option<ObjectId>,
    /// When the state was read: live content is read again from the
    /// records if the object moved since (see [`TreeView::read_at`]).
    pub mark: Mark,
}

impl NodeState {
    pub fn is_dir(&self) -> bool {
        self.kind == kind_code(Kind::Dir)
    }
    pub fn is_file(&self) -> bool {
        self.kind == kind_code(Kind::File)
    }
}

/// A read-only view of the tree at a checkpoint (or of the live tree).
///
/// It is made with the tree lock held and lives no longer than it: a view
/// is the live tree plus the records since its checkpoint, and read while a
/// rewind or restore changes both, it would be neither the old tree nor
/// the new.
pub struct TreeView<'a> {
    tree: &'a LiveTree,
    journal: &'a Journal,
    /// Records of turns >= `from` apply; `i64::MAX` is the live tree.
    from: i64,
    lock: Held<'a>,
    /// Asked before each query: when it says so, the query fails with
    /// [`ViewError::GaveWay`] (see [`TreeView::giving_way`]).
    give_way: Option<&'a (dyn Fn() -> bool + Sync)>,
}

impl<'a> TreeView<'a> {
    /// The tree at checkpoint `checkpoint`.
    pub fn at(lock: Held<'a>, tree: &'a LiveTree, journal: &'a Journal, checkpoint: i64) -> TreeView<'a> {
        TreeView { tree, journal, from: checkpoint, lock, give_way: None }
    }

    /// The live tree through the same interface.
    pub fn live(lock: Held<'a>, tree: &'a LiveTree, journal: &'a Journal) -> TreeView<'a> {
        TreeView { tree, journal, from: i64::MAX, lock, give_way: None }
    }

    /// The same view, for a reader that gives way: each query first asks
    /// `give_way` and fails with [`ViewError::GaveWay`] when it says so (a
    /// background reader holding the tree lock, when a rewind waits for it).
    pub fn giving_way(self, give_way: &'a (dyn Fn() -> bool + Sync)) -> TreeView<'a> {
        TreeView { give_way: Some(give_way), ..self }
    }

    /// The view at checkpoint `checkpoint` beside this one: the same lock,
    /// and giving way as this one does.
    pub fn beside(&self, checkpoint: i64) -> TreeView<'a> {
        TreeView { from: checkpoint, ..*self }
    }

    /// The tree lock the view is read under (for another view beside it).
    pub fn held(&self) -> Held<'a> {
        self.lock
    }

    /// The live tree behind the view.
    pub fn live_tree(&self) -> &LiveTree {
        self.tree
    }

    pub fn checkpoint(&self) -> Option<i64> {
        (self.from != i64::MAX).then_some(self.from)
    }

    fn node_of_handle(&self, handle: FileHandle) -> ViewResult<Node> {
        let id = self.journal.known_object_id(&handle)?;
        Ok(Node { id, handle: Some(handle) })
    }

    /// The node of an object by id, with its current handle.
    pub fn node_of_id(&self, id: ObjectId) -> ViewResult<Node> {
        let handle = self.journal.with_objects(|m| m.object_handle(id))?.and_then(|h| FileHandle::from_bytes(&h));
        Ok(Node { id: Some(id), handle })
    }

    /// The persistent id of a node. A node first met before its object was
    /// ever recorded has none, but may have been given one since (a
    /// browser keeps the nodes it handed out): without it, the records of
    /// its later changes would not apply to it.
    fn id_of(&self, node: &Node) -> ViewResult<Option<ObjectId>> {
        match (node.id, &node.handle) {
            (Some(id), _) => Ok(Some(id)),
            (None, Some(h)) => Ok(self.journal.known_object_id(h)?),
            (None, None) => Ok(None),
        }
    }

    pub fn root(&self) -> ViewResult<Node> {
        let handle = backing::handle_of_fd(self.tree.root_fd())?;
        self.node_of_handle(handle)
    }

    /// An `O_PATH` descriptor of the live object, if it still exists.
    fn live_fd(&self, node: &Node) -> Option<std::os::fd::OwnedFd> {
        let handle = node.handle.as_ref()?;
        self.tree.backing().open_handle(handle, libc::O_PATH).ok()
    }

    /// The live object behind `node`, if it still exists and is the same
    /// kind of thing (a directory for listings), with its attributes.
    fn live_dir(&self, node: &Node) -> Option<(std::os::fd::OwnedFd, rustix::fs::Stat)> {
        let fd = self.live_fd(node)?;
        let st = rustix::fs::fstat(&fd).ok()?;
        (st.st_mode & libc::S_IFMT == libc::S_IFDIR && st.st_nlink > 0).then_some((fd, st))
    }

    /// Fails when the live directory `id`, whose names this view takes as
    /// those it held at the checkpoint (no record says otherwise), had a
    /// name created or removed, or its attributes changed, after this
    /// checkpoint's seal without passing through the mount: a name removed
    /// under the mount is missing from the live listing, and nothing says
    /// which it was, so the listing of the checkpoint is unknown (as for a
    /// directory changed between mounts). Its ctime says so, unless the
    /// daemon moved it: a record of the directory (after which the bound
    /// is that record's turn's seal), an entry record of a name in it or
    /// of its own name, a rewind (`Journal::own_ctime_change`). An
    /// unchanged directory asks the database nothing (the seal time is
    /// kept by the journal).
    fn check_dir_bypassed(&self, id: Option<ObjectId>, st: &rustix::fs::Stat) -> ViewResult<()> {
        if self.from == i64::MAX {
            return Ok(());
        }
        let ctime = ns(st.st_ctime, st.st_ctime_nsec as i64);
        let Some(sealed_ms) = self.journal.sealed_after(self.from - 1)? else { return Ok(()) };
        if ctime <= end_of_ms(sealed_ms) {
            return Ok(());
        }
        let changed = ViewError::ChangedUnderMount { id, after: self.from };
        let Some(id) = id else { return Err(changed) };
        if let Some(t) = self.journal.with_pre_images(|r| r.last_object_turn(id))?.filter(|t| *t >= self.from) {
            if t >= self.journal.current_turn() {
                return Ok(());
            }
            if self.journal.sealed_after(t)?.is_some_and(|ms| ctime <= end_of_ms(ms)) {
                return Ok(());
            }
        }
        if self.journal.own_ctime_change(id, ctime)? {
            return Ok(());
        }
        Err(changed)
    }

    /// Fails when the live state of `id` cannot stand for its state at
    /// this checkpoint: it was changed outside the mount before checkpoint
    /// t, and no record between here and t says what it was.
    fn check_outside(&self, id: ObjectId, recorded_turn: Option<i64>) -> ViewResult<()> {
        if self.from == i64::MAX {
            return Ok(());
        }
        if let Some(t) = self.journal.with_pre_images(|r| r.taint_after(id, self.from))?
            && recorded_turn.is_none_or(|r| r >= t)
        {
            return Err(ViewError::ChangedOutside(id, t));
        }
        Ok(())
    }

    /// Fails when the record this view would read for `id` holds a state
    /// reached by a change that bypassed the mount after this checkpoint
    /// was sealed (noted when the record was taken, `meta/bypass.rs`).
    fn check_recorded_bypass(&self, id: ObjectId) -> ViewResult<()> {
        if self.from == i64::MAX {
            return Ok(());
        }
        match self.journal.with_meta(|m| m.bypassed_at(id, self.from))? {
            Some(last) => Err(ViewError::ChangedUnderMount { id: Some(id), after: last }),
            None => Ok(()),
        }
    }

    /// Fails when the live object, which this view shows as its state at
    /// the checkpoint (no record says otherwise), was changed after the
    /// last moment the journal vouches for it: the seal that ended its
    /// newest recorded turn, or this checkpoint's seal. Every change made
    /// through the mount is recorded in its turn before it is made, so a
    /// later one bypassed the mount (a process whose working directory is
    /// the directory under an in-place mount, or a write to the source of
    /// a mount elsewhere). A later ctime says so (a user cannot set it
    /// back, whatever mtime says), unless the daemon moved it itself
    /// without a record of the object (`Journal::own_ctime_change`: a
    /// rename, the settler's fill; while it fills a file, the file is
    /// still pending, and skipped); that is asked only when mtime is not
    /// later too. `st` is taken before the journal is asked, so a change
    /// it shows was recorded by then.
    /// `recorded_since`: the object has a record at or after this
    /// checkpoint (else its newest record is older, and this checkpoint's
    /// seal is the bound without asking). Runs for every live file a view
    /// stats or reads, so the common case asks the database nothing: the
    /// seal time comes from the journal's cache.
    fn check_bypassed(
        &self,
        id: Option<ObjectId>,
        recorded_since: bool,
        handle: Option<&FileHandle>,
        st: &rustix::fs::Stat,
    ) -> ViewResult<()> {
        if self.from == i64::MAX
            || st.st_mode & libc::S_IFMT == libc::S_IFDIR
            || handle.is_some_and(|h| self.tree.pending().content(h).is_some())
        {
            return Ok(());
        }
        let ctime = ns(st.st_ctime, st.st_ctime_nsec as i64);
        let mtime = ns(st.st_mtime, st.st_mtime_nsec as i64);
        let last = match id {
            Some(id) if recorded_since => self.journal.with_pre_images(|r| r.last_object_turn(id))?,
            _ => None,
        };
        let vouched = last.map_or(self.from - 1, |t| t.max(self.from - 1));
        if vouched >= self.journal.current_turn() {
            // Recorded in the open turn: changes through the mount go on.
            return Ok(());
        }
        let Some(sealed_ms) = self.journal.sealed_after(vouched)? else { return Ok(()) };
        // `created_at` has ms: the end of that ms, so as to never blame a
        // change made through the mount just before the seal.
        let bound = end_of_ms(sealed_ms);
        if ctime <= bound {
            return Ok(());
        }
        // ctime alone later: attributes, or an mtime set back, unless the
        // daemon moved ctime; so too with an mtime after ctime (set into
        // the future, it dates no write). Both later, the mtime dating a
        // write: content written (a rename leaves mtime alone, the settler
        // puts it back).
        let written_after_seal = crate::journal::written_at(ctime, mtime).is_some_and(|w| w > bound);
        if !written_after_seal
            && let Some(id) = id
            && self.journal.own_ctime_change(id, ctime)?
        {
            return Ok(());
        }
        Err(ViewError::ChangedUnderMount { id, after: vouched + 1 })
    }

    /// Why the live object behind `node`, which no record describes at
    /// this checkpoint, cannot be shown: in a view of a checkpoint, a node
    /// with a handle was met in this view (by name, or kept by the kernel)
    /// and its inode is gone since without its removal being recorded (a
    /// recorded removal keeps the inode in the attic, or its content in the
    /// store): removed under the mount, so its state here is unknown,
    /// rather than ESTALE or ENOENT for a name `stat` just showed.
    fn gone(&self, node: &Node) -> ViewResult<ViewError> {
        if self.from == i64::MAX || node.handle.is_none() {
            return Ok(std::io::Error::from_raw_os_error(libc::ENOENT).into());
        }
        Ok(ViewError::ChangedUnderMount { id: self.id_of(node)?, after: self.from })
    }

    /// Reads the past through `read`, which may take part of its answer
    /// from the live object behind `node`: in a view of a checkpoint, that
    /// answer holds only if no change to the object began meanwhile. Every
    /// change through the mount records the object before it changes it,
    /// so if none was recorded between the start of the read and its end,
    /// whatever the read saw live was the past; otherwise it reads again,
    /// and finds the record (readers hold back no writer). After
    /// [`REREADS`] moves it holds new changes back for one last read.
    fn settled<T>(&self, node: &Node, mut read: impl FnMut(Mark) -> ViewResult<T>) -> ViewResult<T> {
        self.asked_to_give_way()?;
        crate::faults::view_query();
        if self.from == i64::MAX {
            return read(self.journal.mark());
        }
        for _ in 0..REREADS {
            let mark = self.journal.mark();
            let answer = read(mark);
            if !self.journal.moved_since(mark, node.id, node.handle.as_ref()) {
                return answer;
            }
            log::debug!("a view of checkpoint {} read {:?} while it changed; reading it again", self.from, node.id);
        }
        let _held = self.journal.hold_changes();
        read(self.journal.mark())
    }

    /// What `name` refers to in directory `dir`.
    pub fn lookup(&self, dir: &Node, name: &OsStr) -> ViewResult<Option<Node>> {
        self.settled(dir, |_| self.lookup_once(dir, name))
    }

    fn lookup_once(&self, dir: &Node, name: &OsStr) -> ViewResult<Option<Node>> {
        if let Some(id) = self.id_of(dir)? {
            let turn = self.journal.with_pre_images(|r| r.entry_turn_at(id, name.as_bytes(), self.from))?;
            self.check_outside(id, turn)?;
            if let Some(recorded) = self.journal.with_pre_images(|r| r.entry_at(id, name.as_bytes(), self.from))? {
                return match recorded {
                    Some(target) => Ok(Some(self.node_of_id(target)?)),
                    None => Ok(None),
                };
            }
        }
        crate::faults::view_lookup();
        let Some((fd, st)) = self.live_dir(dir) else { return Ok(None) };
        match backing::handle_at(fd.as_fd(), name) {
            Ok(h) => Ok(Some(self.node_of_handle(h)?)),
            // Absent now: absent then too, unless removed under the mount.
            Err(Errno::ENOENT) => {
                self.check_dir_bypassed(self.id_of(dir)?, &st)?;
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The entries of directory `dir`, sorted by name. Needs no second
    /// read (as [`TreeView::settled`] gives the others): the live names
    /// are read first and the records after, and a change to a name is
    /// recorded before it is made, so a change the listing saw has its
    /// record in the records read after it.
    pub fn list(&self, dir: &Node) -> ViewResult<Vec<(OsString, Node)>> {
        let dir_id = self.id_of(dir)?;
        let live = self.live_dir(dir);
        self.check_listing_of(dir_id, live.as_ref().map(|(_, st)| st))?;
        let mut entries: std::collections::BTreeMap<Vec<u8>, Node> = std::collections::BTreeMap::new();
        if let Some((fd, _)) = live {
            let dirfd =
                rustix::fs::openat(&fd, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
            let mut listing = rustix::fs::Dir::new(dirfd)?;
            while let Some(entry) = listing.read() {
                let entry = entry?;
                let name = entry.file_name().to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                match backing::handle_at(fd.as_fd(), OsStr::from_bytes(name)) {
                    Ok(h) => {
                        entries.insert(name.to_vec(), self.node_of_handle(h)?);
                    }
                    Err(Errno::ENOENT) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        // Recorded for the first time while the names were read: its first
        // record gave it an id.
        let dir_id = match dir_id {
            Some(id) => Some(id),
            None => self.id_of(dir)?,
        };
        if let Some(id) = dir_id {
            for (name, target) in self.journal.with_pre_images(|r| r.entries_of_dir(id, self.from))? {
                match target {
                    Some(t) => {
                        entries.insert(name, self.node_of_id(t)?);
                    }
                    None => {
                        entries.remove(&name);
                    }
                }
            }
        }
        Ok(entries.into_iter().map(|(n, node)| (OsString::from(OsStr::from_bytes(&n)), node)).collect())
    }

    /// Fails when this view cannot list directory `dir` as it was at the
    /// checkpoint (changed outside the mount, or a name created or removed
    /// under it): the checks [`TreeView::list`] makes, without reading the
    /// names.
    pub fn check_listing(&self, dir: &Node) -> ViewResult<()> {
        let live = self.live_dir(dir);
        self.check_listing_of(self.id_of(dir)?, live.as_ref().map(|(_, st)| st))
    }

    fn check_listing_of(&self, id: Option<ObjectId>, live: Option<&rustix::fs::Stat>) -> ViewResult<()> {
        if let Some(id) = id {
            self.check_outside(id, None)?;
        }
        match live {
            Some(st) => self.check_dir_bypassed(id, st),
            None => Ok(()),
        }
    }

    /// Resolves a path relative to the root, never following symlinks.
    pub fn resolve(&self, path: &std::path::Path) -> ViewResult<Option<Node>> {
        let mut node = self.root()?;
        for comp in path.components() {
            match comp {
                std::path::Component::Normal(name) => match self.lookup(&node, name)? {
                    Some(n) => node = n,
                    None => return Ok(None),
                },
                std::path::Component::CurDir | std::path::Component::RootDir => {}
                _ => return Ok(None),
            }
        }
        Ok(Some(node))
    }

    /// The object's attributes and where its content comes from.
    pub fn state(&self, node: &Node) -> ViewResult<NodeState> {
        self.settled(node, |mark| self.state_once(node, mark))
    }

    fn state_once(&self, node: &Node, mark: Mark) -> ViewResult<NodeState> {
        let known = self.id_of(node)?;
        if let Some(id) = known {
            let turn = self.journal.with_pre_images(|r| r.object_turn_at(id, self.from))?;
            self.check_outside(id, turn)?;
            // Without a record since this checkpoint (an unchanged file, the
            // common case), the record queries have nothing to find.
            if turn.is_some() {
                self.check_recorded_bypass(id)?;
            }
            if turn.is_some()
                && let Some(rec) = self.journal.with_pre_images(|r| r.object_at(id, self.from))?
            {
                let content = self.journal.with_pre_images(|r| r.content_at(id, self.from))?;
                let record = content.as_ref().map(|(turn, _, _)| (*turn, id));
                let (content, hash) = match content {
                    Some((_, hash, chunks)) => (Content::Stored(ContentRef::from_columns(&hash, &chunks)?), Some(hash)),
                    None if rec.kind == kind_code(Kind::File) => match (&node.handle, self.live_fd(node)) {
                        (Some(h), Some(fd)) => {
                            self.check_bypassed(Some(id), true, Some(h), &rustix::fs::fstat(&fd)?)?;
                            (Content::Live(h.clone()), None)
                        }
                        _ => return Err(ViewError::Lost(id)),
                    },
                    None => (Content::None, None),
                };
                let size = match &content {
                    Content::Stored(c) => c.size,
                    _ => rec.size,
                };
                return Ok(NodeState {
                    kind: rec.kind,
                    perm: rec.perm,
                    uid: rec.uid,
                    gid: rec.gid,
                    size,
                    mtime_ns: rec.mtime_ns,
                    nlink: rec.nlink,
                    target: rec.target,
                    xattrs: decode_xattrs(&rec.xattrs)?,
                    content,
                    content_hash: hash,
                    content_record: record,
                    id: Some(id),
                    mark,
                });
            }
        }
        let Some(fd) = self.live_fd(node) else { return Err(self.gone(node)?) };
        let st = rustix::fs::fstat(&fd)?;
        // No record since this checkpoint (or none at all): the journal
        // vouches for it up to this checkpoint's seal.
        self.check_bypassed(known, false, node.handle.as_ref(), &st)?;
        let kind = Kind::from_mode(st.st_mode);
        let target =
            if kind == Kind::Symlink { Some(rustix::fs::readlinkat(&fd, "", Vec::new())?.into_bytes()) } else { None };
        let content = match (&node.handle, kind) {
            (Some(h), Kind::File) => Content::Live(h.clone()),
            _ => Content::None,
        };
        Ok(NodeState {
            kind: kind_code(kind),
            perm: st.st_mode & 0o7777,
            uid: st.st_uid,
            gid: st.st_gid,
            size: st.st_size as u64,
            mtime_ns: ns(st.st_mtime, st.st_mtime_nsec as i64),
            nlink: st.st_nlink as u32,
            target,
            xattrs: backing::xattrs_sorted(fd.as_fd()),
            content,
            content_hash: None,
            content_record: None,
            id: known,
            mark,
        })
    }

    /// [`ViewError::GaveWay`] when the view gives way and is asked to:
    /// asked before every query (every read of a stored content too).
    fn asked_to_give_way(&self) -> ViewResult<()> {
        match self.give_way.is_some_and(|give_way| give_way()) {
            true => Err(ViewError::GaveWay),
            false => Ok(()),
        }
    }

    /// Reads file content at `offset` into `buf`; returns the bytes read.
    pub fn read_at(&self, state: &NodeState, offset: u64, buf: &mut [u8]) -> ViewResult<usize> {
        self.asked_to_give_way()?;
        crate::faults::view_read();
        match &state.content {
            Content::Stored(c) => Ok(read_content_at(self.journal.store(), c, offset, buf)?),
            Content::Live(_) if self.from == i64::MAX => self.read_content_once(&state.content, offset, buf),
            Content::Live(h) => {
                // The live bytes are the past while no change to the file
                // has been recorded since its state was read; once one has,
                // its record holds them (see `settled`).
                let node = Node { id: state.id, handle: Some(h.clone()) };
                let mut since = state.mark;
                self.settled(&node, |mark| {
                    let content = if self.journal.moved_since(since, state.id, Some(h)) {
                        self.content_now(&node)?
                    } else {
                        Content::Live(h.clone())
                    };
                    since = mark;
                    self.read_content_once(&content, offset, buf)
                })
            }
            Content::None => Ok(0),
        }
    }

    /// Where the content of `node`, a file whose state was read live or
    /// from a record without content, comes from now.
    fn content_now(&self, node: &Node) -> ViewResult<Content> {
        let Some(handle) = &node.handle else { return Ok(Content::None) };
        let Some(id) = self.id_of(node)? else { return Ok(Content::Live(handle.clone())) };
        Ok(match self.journal.with_pre_images(|r| r.content_at(id, self.from))? {
            Some((_, hash, chunks)) => Content::Stored(ContentRef::from_columns(&hash, &chunks)?),
            None => Content::Live(handle.clone()),
        })
    }

    fn read_content_once(&self, content: &Content, offset: u64, buf: &mut [u8]) -> ViewResult<usize> {
        match content {
            Content::Stored(c) => Ok(read_content_at(self.journal.store(), c, offset, buf)?),
            Content::Live(h) => {
                if let Some(c) = self.tree.pending().content(h) {
                    return Ok(read_content_at(self.journal.store(), &c, offset, buf)?);
                }
                use std::os::unix::fs::FileExt;
                let fd = self.tree.backing().open_handle(h, libc::O_RDONLY)?;
                let file = std::fs::File::from(fd);
                Ok(file.read_at(buf, offset)?)
            }
            Content::None => Ok(0),
        }
    }

    /// The whole content (for diffs; capped by the caller).
    pub fn read_all(&self, state: &NodeState) -> ViewResult<Vec<u8>> {
        let mut out = vec![0u8; state.size as usize];
        let n = self.read_full(state, 0, &mut out)?;
        out.truncate(n);
        Ok(out)
    }

    /// `buf` filled from `offset` of the file (less at its end); returns
    /// the bytes read. A step at a time: a reader that gives way asks
    /// before each.
    pub fn read_full(&self, state: &NodeState, offset: u64, buf: &mut [u8]) -> ViewResult<usize> {
        let mut done = 0;
        while done < buf.len() {
            let end = buf.len().min(done + READ_ALL_STEP);
            let n = self.read_at(state, offset + done as u64, &mut buf[done..end])?;
            if n == 0 {
                break;
            }
            done += n;
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::AsErrno;

    /// Each error of this module, through the one boundary ([`AsErrno`]):
    /// the errno of the store or the database behind it, not EIO.
    #[test]
    fn errno_mapping_table() {
        let io = |n| std::io::Error::from_raw_os_error(n);
        let cases: Vec<(ViewError, i32, &str)> = vec![
            (ViewError::Io(io(libc::ENOTDIR)), libc::ENOTDIR, "view io"),
            (
                ViewError::Store(crate::store::StoreError::io("a", io(libc::ENOSPC))),
                libc::ENOSPC,
                "view store (was EIO)",
            ),
            (ViewError::Meta(crate::meta::sqlite_failure(8)), libc::EROFS, "view meta (was EIO)"),
            (ViewError::Lost(ObjectId(1)), libc::EIO, "view lost"),
        ];
        for (err, want, what) in cases {
            assert_eq!(err.errno(), Errno(want), "{what}");
        }
    }
}
