//! Whole-tree rewind at the cost of the metadata that changed.
//!
//! Only what the journal recorded since the checkpoint is visited: every
//! (directory, name) with an entry record and every object with an object
//! record. No file content is copied on the critical path:
//! 1. every name whose live object is not the one it had then is moved,
//!    object and subtree whole, into the attic (a rename);
//! 2. every name that must refer to an object gets it back: from the attic
//!    (a rename, keeping the inode and its hard links), or recreated from
//!    its recorded state; a file whose bytes must come from the chunk
//!    store is created at its size and left pending for the settler;
//! 3. objects whose own state changed get their attributes back, and a file
//!    whose content changed in place is replaced by a pending copy of its
//!    old content (the current inode moves to the attic, kept for history).
//!
//! Each step goes through the same recording as any writer, so the rewind
//! is itself a turn and is undone by rewinding to the safety checkpoint.

mod places;
pub mod preflight;

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};

use crate::error::Errno;
use crate::journal::Journal;
use crate::meta::ObjectId;
use crate::restore::{Action, Planned, RestoreError};
use crate::store::ContentRef;
use crate::sys::FileHandle;
use crate::view::{Content, Node, NodeState, TreeView};
use crate::workspace::backing;
use crate::workspace::capture::kind_code;
use crate::workspace::rewind_ops::{Aside, NewFile, RewindOps};
use crate::workspace::{Caller, Kind, LiveTree, SetTime};
use crate::world::{Frozen, Touched};

pub mod recovery;

fn err(what: String, errno: Errno) -> RestoreError {
    RestoreError::Live { path: what, errno }
}

fn from_rustix(what: &str) -> impl FnOnce(rustix::io::Errno) -> RestoreError + '_ {
    move |e| err(what.to_string(), Errno::from(e))
}

struct Rewinder<'a> {
    tree: &'a LiveTree,
    journal: &'a Journal,
    view: TreeView<'a>,
    /// The turn this rewind began in (its safety checkpoint): earlier than
    /// the current one when it completes an interrupted attempt.
    began: i64,
    caller: Caller,
    /// The only way this rewind changes the backing tree.
    ops: RewindOps<'a>,
    /// The names each object had at the checkpoint among the entries this
    /// rewind visits (where to look first for every name of a file).
    names_then: std::collections::HashMap<ObjectId, Vec<(ObjectId, Vec<u8>)>>,
    /// Objects this rewind moved into the attic (and not yet back).
    in_attic: HashSet<ObjectId>,
    /// The checkpoint rewound to.
    checkpoint: i64,
    /// Directories whose names changed since the checkpoint.
    changed_dirs: BTreeSet<ObjectId>,
    /// Where to look for a file the kernel cannot name (see `places`):
    /// the tree's places and the attic's, each listed when first needed.
    tree_places: RefCell<Option<places::Index>>,
    attic_places: RefCell<Option<places::Index>>,
    /// The files step 3 restores, by inode, and the names a walk of the
    /// whole tree found for them (one walk per rewind, for all of them).
    to_restore: HashSet<places::Key>,
    walked: RefCell<Option<places::Index>>,
    /// Directory entries stat-ed in step 3 to find the names of files
    /// with several links (logged: a file with one link needs none).
    entries_scanned: std::cell::Cell<u64>,
    /// Directories changed by replacing a file's inode, whose own times
    /// must be put back at the end.
    dirs_touched: BTreeSet<ObjectId>,
    /// The kernel's paths of the tree's root and of the attic, read once:
    /// neither moves during a rewind.
    root_path: Option<PathBuf>,
    attic_path: Option<PathBuf>,
    /// Their (device, inode), read once too.
    root_key: Option<(u64, u64)>,
    attic_key: Option<(u64, u64)>,
    /// The directories reached by walking a kernel path, by that path,
    /// once step 3 begins (it moves no directory, so a path keeps naming
    /// the same one): the files of one directory share one walk.
    walked_dirs: RefCell<Option<HashMap<PathBuf, OwnedFd>>>,
    /// Object handles asked of the journal, by id (forgotten when an
    /// object gets a new inode).
    handles: RefCell<HashMap<ObjectId, FileHandle>>,
    /// States at the checkpoint read by the check before the rewind.
    known: preflight::KnownStates,
    out: Vec<Planned>,
    touched: &'a mut Touched,
}

/// Files rewritten in place looked at (state, names) before their swaps
/// are made, a group at a time: each holds descriptors until its swap.
const SWAP_GROUP: usize = 128;

/// A file whose content changed in place, to swap (`replace_content`):
/// its object, a descriptor of it, its names in the tree, its recorded
/// state.
struct Swap {
    id: ObjectId,
    fd: OwnedFd,
    names: Vec<(OwnedFd, OsString)>,
    node: Node,
    state: NodeState,
}

/// At most this many directories kept open by `Rewinder::walked_dirs`:
/// the daemon's descriptors are bounded.
const WALKED_DIRS_KEPT: usize = 1024;

/// The kernel's path of a descriptor.
fn fd_path(fd: BorrowedFd<'_>) -> std::io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd)))
}

/// Whether this tree can rewind without copying (it has an attic).
pub fn instant_available(tree: &LiveTree) -> bool {
    tree.attic().fd().is_some()
}

/// Makes the live tree the tree at `checkpoint`. The caller has sealed a
/// safety checkpoint, `began` (the current turn, or an earlier one when
/// this completes an interrupted rewind that began there), and froze the
/// tree (`frozen`); what the kernel must forget goes into its set, also
/// when the rewind fails part-way.
///
/// Its records fold in one batch (`Journal::batched`): a file rewritten in
/// place costs no SQLite commit of its own.
///
/// `known`: states at the checkpoint a check read just before (see
/// [`preflight::KnownStates`]); empty, every state is read here.
pub fn rewind(
    frozen: &mut Frozen<'_>,
    tree: &LiveTree,
    journal: &Journal,
    checkpoint: i64,
    began: i64,
    known: preflight::KnownStates,
) -> Result<Vec<Planned>, RestoreError> {
    journal.batched(|| rewind_batched(frozen, tree, journal, checkpoint, began, known))?
}

fn rewind_batched(
    frozen: &mut Frozen<'_>,
    tree: &LiveTree,
    journal: &Journal,
    checkpoint: i64,
    began: i64,
    known: preflight::KnownStates,
) -> Result<Vec<Planned>, RestoreError> {
    let (lock, touched) = frozen.parts();
    let caller = Caller { uid: 0, gid: 0, pid: std::process::id() };
    let mut r = Rewinder {
        tree,
        journal,
        view: TreeView::at(lock, tree, journal, checkpoint),
        began,
        caller,
        ops: RewindOps::new(tree, journal, caller),
        names_then: std::collections::HashMap::new(),
        in_attic: HashSet::new(),
        checkpoint,
        changed_dirs: BTreeSet::new(),
        tree_places: RefCell::new(None),
        attic_places: RefCell::new(None),
        to_restore: HashSet::new(),
        walked: RefCell::new(None),
        entries_scanned: std::cell::Cell::new(0),
        dirs_touched: BTreeSet::new(),
        root_path: fd_path(tree.root_fd()).ok(),
        attic_path: tree.attic().fd().and_then(|a| fd_path(a).ok()),
        root_key: dir_key(tree.root_fd()),
        attic_key: tree.attic().fd().and_then(dir_key),
        walked_dirs: RefCell::new(None),
        // The handles the check read with its states (valid as they are).
        handles: RefCell::new(known.iter().filter_map(|(id, (h, _))| Some((*id, h.clone()?))).collect()),
        known,
        out: Vec::new(),
        touched,
    };
    // Directories created since the checkpoint leave whole with their
    // parent's entry: their own entries need no visit.
    let started = std::time::Instant::now();
    let keys = journal.with_meta(|m| m.entry_keys_since_in_older_dirs(checkpoint))?;
    let objects = journal.with_meta(|m| m.objects_since_born_before(checkpoint))?;
    log::debug!(
        "rewind to {checkpoint}: {} entries and {} objects to visit, listed in {:?}",
        keys.len(),
        objects.len(),
        started.elapsed()
    );
    r.changed_dirs = keys.iter().map(|(d, _)| *d).collect();

    // 1. Move aside whatever is not where it was.
    let mut placements: Vec<(ObjectId, Vec<u8>, ObjectId)> = Vec::new();
    for (dir, name) in &keys {
        let target = journal.with_pre_images(|r| r.entry_at(*dir, name, checkpoint))?.flatten();
        if let Some(t) = target {
            r.names_then.entry(t).or_default().push((*dir, name.clone()));
        }
        let live = match r.dir_fd(*dir) {
            Some(dfd) => r.live_binding(dfd.as_fd(), name)?,
            None => None,
        };
        if live == target {
            continue;
        }
        if let (Some(l), Some(dfd)) = (live, r.dir_fd(*dir)) {
            r.move_aside(dfd.as_fd(), *dir, name, l)?;
        }
        if let Some(t) = target {
            placements.push((*dir, name.clone(), t));
        }
    }

    log::debug!("rewind to {checkpoint}: step 1 (moved aside) done at {:?}", started.elapsed());
    // 2. Put back what was there, parents before children, and every
    // directory before any file: a file found inside a directory in the
    // attic is taken out of it (a hard link of a file there would be
    // moved), which is right only once the directories coming back are
    // back.
    let dir_code = kind_code(Kind::Dir);
    let mut dir_placements = Vec::new();
    let mut file_placements = Vec::new();
    for p in placements {
        match journal.with_objects(|m| m.object_kind(p.2))? {
            Some(k) if k == dir_code => dir_placements.push(p),
            _ => file_placements.push(p),
        }
    }
    let mut placed: Vec<ObjectId> = Vec::new();
    r.place_all(dir_placements, &mut placed)?;
    r.place_all(file_placements, &mut placed)?;

    log::debug!("rewind to {checkpoint}: step 2 (put back) done at {:?}", started.elapsed());
    // 3. Attributes and in-place content changes; directories last, since
    // putting names back changes their times.
    let mut dirs: BTreeSet<ObjectId> = r.changed_dirs.clone();
    let (mut linked, mut files): (Vec<ObjectId>, Vec<ObjectId>) = (Vec::new(), Vec::new());
    // Each object once: an object both changed and put back is in both
    // lists, and a second visit would find the inode that the first one
    // swapped out into the attic and rewrite it in place (under the
    // descriptors still holding it).
    let mut seen: HashSet<ObjectId> = HashSet::new();
    *r.walked_dirs.borrow_mut() = Some(HashMap::new());
    for id in objects.iter().chain(placed.iter()) {
        if r.in_attic.contains(id) || !seen.insert(*id) {
            continue;
        }
        let Some(fd) = r.object_fd(*id) else { continue };
        let st = rustix::fs::fstat(&fd).map_err(from_rustix("stat"))?;
        let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
        // In the attic (in its own slot, or inside a directory moved aside
        // whole): not part of the tree rewound to. A file with several names
        // may be there under one name and in the tree under another (the
        // kernel reports any one of them): `restore_object` looks for its
        // names in the tree.
        if (is_dir || st.st_nlink == 1) && r.is_in_attic(*id, fd.as_fd())? {
            continue;
        }
        if is_dir {
            dirs.insert(*id);
            continue;
        }
        if st.st_nlink > 1 {
            linked.push(*id);
        }
        files.push(*id);
        r.to_restore.insert((st.st_dev, st.st_ino));
    }
    // Before the contents: a file left with one name can swap in a new
    // inode instead of being rewritten in place.
    r.drop_stray_links(&linked)?;
    // `files` holds each object once and none in the attic; restoring one
    // file moves no other into the attic, and dropping stray links removes
    // names in the attic only, so the filter above still holds here.
    // In groups: first every file's recorded state and names (queries),
    // then the group's swaps (records): the records are folded once a
    // group, not between one file's swap and the next file's queries.
    for group in files.chunks(SWAP_GROUP) {
        let mut swaps = Vec::new();
        for id in group {
            let Some(fd) = r.object_fd(*id) else { continue };
            if let Some(swap) = r.restore_object(*id, fd)? {
                swaps.push(swap);
            }
        }
        for swap in swaps {
            r.replace_content(swap)?;
        }
    }
    log::debug!("rewind to {checkpoint}: step 3 (objects) done at {:?}", started.elapsed());
    log::info!(
        "rewind to {checkpoint}: {} directory entries looked at for the names of files restored",
        r.entries_scanned.get()
    );
    dirs.extend(std::mem::take(&mut r.dirs_touched));
    for id in dirs {
        if r.in_attic.contains(&id) {
            continue;
        }
        if let Some(fd) = r.object_fd(id)
            && r.locate_in_attic(id, fd.as_fd())?.is_none()
        {
            r.restore_attrs(id, fd.as_fd())?;
        }
    }
    Ok(r.out)
}

impl Rewinder<'_> {
    /// Puts back `waiting` (directory, name, object), each once its
    /// directory is in the tree.
    fn place_all(
        &mut self,
        mut waiting: Vec<(ObjectId, Vec<u8>, ObjectId)>,
        placed: &mut Vec<ObjectId>,
    ) -> Result<(), RestoreError> {
        while !waiting.is_empty() {
            let before = waiting.len();
            let mut later = Vec::new();
            for (dir, name, target) in waiting {
                // A directory in the attic (moved aside by this rewind or an
                // earlier one, alone or inside another) is not in the tree:
                // a name put back there would be a link nobody sees, kept in
                // the file's link count.
                let dfd = match self.dir_fd(dir) {
                    Some(dfd) if !self.is_in_attic(dir, dfd.as_fd())? => Some(dfd),
                    _ => None,
                };
                match dfd {
                    Some(dfd) => {
                        self.place(dfd.as_fd(), dir, &name, target)?;
                        placed.push(target);
                    }
                    None => later.push((dir, name, target)),
                }
            }
            if later.len() == before {
                // What is left waits for directories that were not in the
                // tree at the checkpoint: one that stays in the attic (an
                // earlier rewind had moved it aside, an undo brought it back
                // and it changed since) or one removed since. A directory
                // that was in the tree there has a name there, so it was put
                // back (recreated if gone) before its names are needed; these
                // names are not in the tree rewound to either, and the
                // directories are left as they are.
                log::info!(
                    "rewind: {} names not put back, their directories are not in the tree rewound to: {}",
                    later.len(),
                    later.iter().map(|(_, n, _)| self.display(n)).collect::<Vec<_>>().join(", ")
                );
                return Ok(());
            }
            waiting = later;
        }
        Ok(())
    }

    /// The state of object `id` at the checkpoint (from the check before
    /// the rewind when it read it for the handle the object has now), and
    /// the node it is of.
    fn state_at(&self, id: ObjectId) -> Result<(Node, NodeState), RestoreError> {
        let node = Node { id: Some(id), handle: self.handle_of(id) };
        if let Some((handle, state)) = self.known.get(&id)
            && *handle == node.handle
        {
            return Ok((node, state.clone()));
        }
        let state = self.view.state(&node)?;
        Ok((node, state))
    }

    fn handle_of(&self, id: ObjectId) -> Option<FileHandle> {
        if let Some(h) = self.handles.borrow().get(&id) {
            return Some(h.clone());
        }
        let h = self
            .journal
            .with_objects(|m| m.object_handle(id))
            .ok()
            .flatten()
            .and_then(|h| FileHandle::from_bytes(&h))?;
        self.handles.borrow_mut().insert(id, h.clone());
        Some(h)
    }

    /// An `O_PATH` descriptor of a live object.
    fn object_fd(&self, id: ObjectId) -> Option<OwnedFd> {
        let h = self.handle_of(id)?;
        let fd = self.tree.backing().open_handle(&h, libc::O_PATH).ok()?;
        // A removed object that is still open somewhere has no links.
        let st = rustix::fs::fstat(&fd).ok()?;
        (st.st_nlink > 0).then_some(fd)
    }

    fn dir_fd(&self, id: ObjectId) -> Option<OwnedFd> {
        let fd = self.object_fd(id)?;
        let st = rustix::fs::fstat(&fd).ok()?;
        (st.st_mode & libc::S_IFMT == libc::S_IFDIR).then_some(fd)
    }

    fn live_binding(&self, dir: BorrowedFd<'_>, name: &[u8]) -> Result<Option<ObjectId>, RestoreError> {
        let name = OsStr::from_bytes(name);
        match rustix::fs::openat(dir, name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) {
            Ok(fd) => {
                let st = rustix::fs::fstat(&fd).map_err(from_rustix("stat"))?;
                let h = backing::handle_of_fd(fd.as_fd()).map_err(|e| err("handle".into(), e))?;
                let kind = kind_code(Kind::from_mode(st.st_mode));
                Ok(Some(self.journal.object_id(&h, kind)?))
            }
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(err(String::from_utf8_lossy(name.as_bytes()).into_owned(), e.into())),
        }
    }

    fn display(&self, name: &[u8]) -> String {
        String::from_utf8_lossy(name).into_owned()
    }

    fn touch(&mut self, dir: BorrowedFd<'_>, name: &OsStr) {
        if let Ok(h) = backing::handle_of_fd(dir)
            && let Some(ino) = self.tree.objects().ino_of(&h)
        {
            self.touched.entries.insert((ino, name.to_os_string()));
            self.touched.inodes.insert(ino);
        }
    }

    /// Step 1: the object at `name` leaves for the attic, whole (or, for
    /// one of several names of a file, the name is removed).
    fn move_aside(
        &mut self,
        dir: BorrowedFd<'_>,
        _dir_id: ObjectId,
        name: &[u8],
        obj: ObjectId,
    ) -> Result<(), RestoreError> {
        let os = OsStr::from_bytes(name);
        if let Ok(h) = backing::handle_at(dir, os)
            && let Some(ino) = self.tree.objects().ino_of(&h)
        {
            self.touched.inodes.insert(ino);
        }
        match self.ops.move_aside(dir, os, obj) {
            Ok(Aside::InAttic) => {
                self.in_attic.insert(obj);
            }
            Ok(Aside::Unlinked) => {}
            Err(e) if e.0 == libc::EEXIST => {
                return Err(err(format!("{}: the attic already holds object {}", self.display(name), obj.0), e));
            }
            Err(e) => return Err(err(self.display(name), e)),
        }
        self.touch(dir, os);
        self.out.push(Planned { path: OsStr::from_bytes(name).into(), action: Action::Delete });
        Ok(())
    }

    /// Step 2: `target` goes back to `name` in `dir`: from its attic slot
    /// (as the attic table says), out of a directory in the attic, by a
    /// hard link from its other name in the tree, or recreated.
    fn place(
        &mut self,
        dir: BorrowedFd<'_>,
        _dir_id: ObjectId,
        name: &[u8],
        target: ObjectId,
    ) -> Result<(), RestoreError> {
        let os = OsStr::from_bytes(name);
        let fail = |e: Errno| err(String::from_utf8_lossy(name).into_owned(), e);
        let from_slot = self.journal.in_attic(target)? && self.ops.bring_back(target, dir, os).map_err(fail)?;
        if from_slot {
            self.in_attic.remove(&target);
        } else if let Some(fd) = self.object_fd(target) {
            match self.locate_in_attic(target, fd.as_fd())? {
                // In its own slot with no row in the attic table (a crash
                // between the two): the attic itself is no object of history.
                Some((from, from_name)) if self.is_attic_root(from.as_fd()) && from_name == *target.0.to_string() => {
                    self.ops.bring_back(target, dir, os).map_err(fail)?;
                    self.in_attic.remove(&target);
                }
                // Inside a directory that was moved aside whole.
                Some((from, from_name)) => self.ops.take_out(from.as_fd(), &from_name, dir, os).map_err(fail)?,
                // Alive under another name in the tree: a hard link it had then.
                None => {
                    self.ops.link_back(fd.as_fd(), target, dir, os).map_err(fail)?;
                    if let Ok(h) = backing::handle_of_fd(fd.as_fd())
                        && let Some(ino) = self.tree.objects().ino_of(&h)
                    {
                        self.touched.inodes.insert(ino);
                    }
                }
            }
        } else {
            self.recreate(dir, name, target)?;
            self.touch(dir, os);
            return Ok(());
        }
        self.out.push(Planned { path: OsStr::from_bytes(name).into(), action: Action::Recreate });
        self.touch(dir, os);
        Ok(())
    }

    /// Recreates an object that no longer exists from its recorded state.
    fn recreate(&mut self, dir: BorrowedFd<'_>, name: &[u8], target: ObjectId) -> Result<(), RestoreError> {
        let os = OsStr::from_bytes(name);
        let node = Node { id: Some(target), handle: self.handle_of(target) };
        let state = self.view.state(&node)?;
        let kind = Kind::from_code(state.kind);
        let target_bytes = state.target.clone().unwrap_or_default();
        let fd = self
            .ops
            .recreate(dir, os, kind, state.perm, state.size, &target_bytes)
            .map_err(|e| err(self.display(name), e))?;
        let handle = backing::handle_of_fd(fd.as_fd()).map_err(|e| err("handle".into(), e))?;
        self.handles.borrow_mut().remove(&target);
        self.journal.rebind_object(target, &handle)?;
        if kind == Kind::File {
            let (content, record) = self.stored_content(&node, &state)?;
            self.tree
                .settler()
                .add(&handle, content, record, state.mtime_ns)
                .map_err(|e| err(self.display(name), e))?;
        }
        self.set_owner_and_times(fd.as_fd(), &state)?;
        self.out.push(Planned { path: OsStr::from_bytes(name).into(), action: Action::Recreate });
        Ok(())
    }

    /// The recorded bytes of a file at the checkpoint.
    /// The content to put back, and the pre-image record that already holds
    /// its chunk list (if any; then the pending row points at it).
    fn stored_content(
        &self,
        node: &Node,
        state: &NodeState,
    ) -> Result<(ContentRef, Option<(i64, ObjectId)>), RestoreError> {
        match &state.content {
            Content::Stored(c) => Ok((c.clone(), state.content_record)),
            Content::Live(h) => {
                // Still readable live (e.g. pending): store it so the new
                // inode can be filled from the store.
                if let Some(c) = self.tree.pending().content(h) {
                    return Ok((c, None));
                }
                let fd = self.tree.backing().open_handle(h, libc::O_RDONLY).map_err(|e| err("read".into(), e))?;
                Ok((self.journal.store_content(std::fs::File::from(fd))?, None))
            }
            Content::None => Err(err(format!("object {:?} has no recorded content", node.id), Errno::EIO)),
        }
    }

    fn set_owner_and_times(&self, fd: BorrowedFd<'_>, state: &NodeState) -> Result<(), RestoreError> {
        let _ = rustix::fs::chownat(
            fd,
            "",
            Some(rustix::fs::Uid::from_raw(state.uid)),
            Some(rustix::fs::Gid::from_raw(state.gid)),
            AtFlags::EMPTY_PATH,
        );
        if state.kind != kind_code(Kind::Symlink) {
            let _ = backing::set_perm(fd, state.perm);
            let t = rustix::fs::Timespec {
                tv_sec: state.mtime_ns.div_euclid(1_000_000_000),
                tv_nsec: state.mtime_ns.rem_euclid(1_000_000_000) as _,
            };
            let _ = backing::set_times(fd, t, t);
        }
        Ok(())
    }

    /// Step 3 for a non-directory: content and attributes back. A file
    /// whose content changed in place gets a new inode with the old
    /// content at every name it has in the tree, and the current inode
    /// moves to the attic (kept for history, and for every descriptor that
    /// holds it). A file with no name in the tree (only in directories in
    /// the attic) is not part of the tree rewound to and is left alone.
    /// The swap is returned, for `replace_content`; attributes are put
    /// back at once.
    fn restore_object(&mut self, id: ObjectId, fd: OwnedFd) -> Result<Option<Swap>, RestoreError> {
        let (node, state) = self.state_at(id)?;
        let content_changed = state.is_file() && matches!(state.content, Content::Stored(_));
        if content_changed {
            let names = self.names_in_tree(id, fd.as_fd(), u64::from(state.nlink))?;
            if names.is_empty() {
                log::info!("rewind: object {} has no name in the tree; left as it is", id.0);
                return Ok(None);
            }
            return Ok(Some(Swap { id, fd, names, node, state }));
        }
        self.restore_attrs(id, fd.as_fd())?;
        Ok(None)
    }

    /// Every name the file behind `fd` has in the tree (stopping once it has
    /// `want`, its link count at the checkpoint), as (directory, name). It
    /// looks where the names are likely first (the kernel's name for the
    /// inode, the names this rewind gave it back, and their directories),
    /// then, if names are still missing, walks the whole tree, once per
    /// rewind for all the files step 3 restores: that is rare (a file
    /// with several names in different directories, or at none of the
    /// places `locate_under` looks), and a name missed would be left
    /// pointing at the inode the rewind moves away.
    fn names_in_tree(
        &self,
        id: ObjectId,
        fd: BorrowedFd<'_>,
        want: u64,
    ) -> Result<Vec<(OwnedFd, OsString)>, RestoreError> {
        let st = rustix::fs::fstat(fd).map_err(from_rustix("stat"))?;
        let key = (st.st_dev, st.st_ino);
        let want = want.max(1);
        let mut found: Vec<(OwnedFd, OsString)> = Vec::new();
        let mut seen: HashSet<(u64, OsString)> = HashSet::new();
        let mut dirs: Vec<OwnedFd> = Vec::new();
        if let Some((dir, name)) = self.location(id, fd)? {
            // The inode's only link, and `location` checked that it names
            // the inode below the root: nothing else to look for. Without
            // this, each file of a directory rewound listed and stat-ed the
            // whole directory (2,000 files rewritten in one directory: 3 ms
            // a file).
            if st.st_nlink == 1 {
                return Ok(vec![(dir, name)]);
            }
            dirs.push(dir);
        }
        for (dir, _) in self.names_then.get(&id).into_iter().flatten() {
            if let Some(d) = self.dir_fd(*dir) {
                dirs.push(d);
            }
        }
        let mut scanned: HashSet<u64> = HashSet::new();
        for dir in dirs {
            if self.scan_dir_for(dir, key, &mut scanned, &mut seen, &mut found)? && found.len() as u64 >= want {
                return Ok(found);
            }
        }
        if (found.len() as u64) < want {
            // One walk for every file step 3 restores: a rewind over many
            // files whose names are where the journal does not point
            // walks the tree once, not once per file.
            if self.walked.borrow().is_none() {
                log::info!("rewind: looking for the names of object {} in the whole tree", id.0);
                let attic =
                    self.tree.attic().fd().and_then(|a| rustix::fs::fstat(a).ok()).map(|a| (a.st_dev, a.st_ino));
                let mut wanted = self.to_restore.clone();
                wanted.insert(key);
                let mut walked = places::Index::default();
                walked.add_tree(self.tree.root_fd(), attic, &wanted).map_err(from_rustix("walk the tree"))?;
                *self.walked.borrow_mut() = Some(walked);
            }
            let walked = self.walked.borrow();
            for (h, name) in walked.iter().flat_map(|w| w.names_of(key)) {
                let Ok(dir) = self.tree.backing().open_handle(h, libc::O_PATH | libc::O_DIRECTORY) else { continue };
                let (Ok(d), Ok(s)) =
                    (rustix::fs::fstat(&dir), rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW))
                else {
                    continue;
                };
                if (s.st_dev, s.st_ino) == key && seen.insert((d.st_ino, name.clone())) {
                    found.push((dir, name.clone()));
                }
            }
        }
        Ok(found)
    }

    /// Adds the names in `dir` of the inode `key` to `found` (`false` if
    /// it was scanned already).
    fn scan_dir_for(
        &self,
        dir: OwnedFd,
        key: (u64, u64),
        scanned: &mut HashSet<u64>,
        seen: &mut HashSet<(u64, OsString)>,
        found: &mut Vec<(OwnedFd, OsString)>,
    ) -> Result<bool, RestoreError> {
        let dst = rustix::fs::fstat(&dir).map_err(from_rustix("stat"))?;
        if !scanned.insert(dst.st_ino) {
            return Ok(false);
        }
        let listing =
            rustix::fs::openat(&dir, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
                .map_err(from_rustix("open a directory"))?;
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::read_from(&listing).map_err(from_rustix("list a directory"))? {
            let entry = entry.map_err(from_rustix("list a directory"))?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(OsString::from(OsStr::from_bytes(name)));
            }
        }
        let mut mine = Vec::new();
        self.entries_scanned.set(self.entries_scanned.get() + names.len() as u64);
        for name in names {
            let Ok(st) = rustix::fs::statat(&dir, &name, AtFlags::SYMLINK_NOFOLLOW) else { continue };
            if (st.st_dev, st.st_ino) == key && seen.insert((dst.st_ino, name.clone())) {
                mine.push(name);
            }
        }
        for name in mine {
            let d = rustix::fs::openat(&dir, ".", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
                .map_err(from_rustix("open a directory"))?;
            found.push((d, name));
        }
        Ok(true)
    }

    /// A directory moved aside whole may hold a hard link of a file that is
    /// in the tree rewound to: that name is not in the tree, but it counts
    /// in the file's link count. Such names are removed (recorded, like any
    /// change) until each file has the link count it had at the checkpoint.
    /// The directories searched are those this rewind moved aside, when
    /// it completes an attempt that was interrupted those the earlier
    /// attempts moved aside (a name they left there is as stray), and the
    /// directories in the attic's own slots.
    fn drop_stray_links(&mut self, linked: &[ObjectId]) -> Result<(), RestoreError> {
        let mut excess: std::collections::HashMap<(u64, u64), (ObjectId, u64)> = std::collections::HashMap::new();
        for id in linked {
            let Some(fd) = self.object_fd(*id) else { continue };
            let st = rustix::fs::fstat(&fd).map_err(from_rustix("stat"))?;
            let want = u64::from(self.state_at(*id)?.1.nlink);
            if st.st_nlink > want {
                excess.insert((st.st_dev, st.st_ino), (*id, st.st_nlink - want));
            }
        }
        if excess.is_empty() {
            return Ok(());
        }
        let Some(attic) = self.tree.attic().fd() else { return Ok(()) };
        let mut moved: Vec<ObjectId> = self.in_attic.iter().copied().collect();
        if self.began < self.journal.current_turn() {
            for id in left_since(self.journal, self.began)? {
                if !self.in_attic.contains(&id) {
                    moved.push(id);
                }
            }
        }
        // And those an earlier operation moved aside (a name linked into a
        // directory that an undo then moved aside, taken out of it again
        // here, leaves its other names there). Only files with too many
        // links come this far, so the attic's slots are listed rarely.
        let listed: HashSet<ObjectId> = moved.iter().copied().collect();
        moved.extend(self.journal.with_objects(|m| m.attic_objects())?.into_iter().filter(|id| !listed.contains(id)));
        each_file_in_attic_dirs(attic, &moved, |dir, name, st| {
            let key = (st.st_dev, st.st_ino);
            let Some((id, left)) = excess.get_mut(&key) else { return Ok(true) };
            log::info!("rewind: removing a stray hard link of object {} from a directory moved aside", id.0);
            if let Ok(h) = backing::handle_at(dir, name)
                && let Some(ino) = self.tree.objects().ino_of(&h)
            {
                self.touched.inodes.insert(ino);
            }
            self.ops.unlink_link(dir, name).map_err(|e| err(self.display(name.as_bytes()), e))?;
            *left -= 1;
            if *left == 0 {
                excess.remove(&key);
            }
            Ok(!excess.is_empty())
        })?;
        for (id, left) in excess.values() {
            log::warn!("rewind: object {} keeps {left} more links than it had at the checkpoint", id.0);
        }
        Ok(())
    }

    /// Whether a live object is in the attic: in its own slot (the attic
    /// table says so), or inside a directory there.
    fn is_in_attic(&self, id: ObjectId, fd: BorrowedFd<'_>) -> Result<bool, RestoreError> {
        if self.tree.attic().fd().is_none() {
            return Ok(false);
        }
        if self.in_attic.contains(&id) || self.journal.in_attic(id)? {
            return Ok(true);
        }
        Ok(self.locate_in_attic(id, fd)?.is_some())
    }

    /// Whether `dir` is the attic directory itself.
    fn is_attic_root(&self, dir: BorrowedFd<'_>) -> bool {
        self.tree.attic().fd().is_some_and(|a| self.same_dir(a, dir))
    }

    /// The (device, inode) of a directory: the tree's root and the attic
    /// by what was read once per rewind, any other by `fstat`.
    fn key_of_dir(&self, fd: BorrowedFd<'_>) -> Option<(u64, u64)> {
        use std::os::fd::AsRawFd;
        if fd.as_raw_fd() == self.tree.root_fd().as_raw_fd() {
            return self.root_key;
        }
        if self.tree.attic().fd().is_some_and(|a| a.as_raw_fd() == fd.as_raw_fd()) {
            return self.attic_key;
        }
        dir_key(fd)
    }

    /// Whether two descriptors are of one directory (the same descriptor,
    /// or the same inode).
    fn same_dir(&self, a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> bool {
        use std::os::fd::AsRawFd;
        if a.as_raw_fd() == b.as_raw_fd() {
            return true;
        }
        let a = self.key_of_dir(a);
        a.is_some() && a == self.key_of_dir(b)
    }

    /// Where a live object is inside the attic, if it is there.
    fn locate_in_attic(&self, id: ObjectId, fd: BorrowedFd<'_>) -> Result<Option<(OwnedFd, OsString)>, RestoreError> {
        match self.tree.attic().fd() {
            Some(attic) => self.locate_under(id, fd, attic),
            None => Ok(None),
        }
    }

    /// Where a live file is in the tree, as (directory, name).
    fn location(&self, id: ObjectId, fd: BorrowedFd<'_>) -> Result<Option<(OwnedFd, OsString)>, RestoreError> {
        self.locate_under(id, fd, self.tree.root_fd())
    }

    /// Where object `id`, behind `fd`, is below directory `base`: from the
    /// kernel's path of the descriptor when that path names the object,
    /// else (a file whose dentry left the kernel's cache) from the places
    /// the journal points at, nearest first: the names it had at the
    /// checkpoint, the tree's places, the attic's (see `places`).
    fn locate_under(
        &self,
        id: ObjectId,
        fd: BorrowedFd<'_>,
        base: BorrowedFd<'_>,
    ) -> Result<Option<(OwnedFd, OsString)>, RestoreError> {
        let want = backing::handle_of_fd(fd).map_err(|e| err("handle".into(), e))?;
        if let Some(found) = self.kernel_place(fd, &want, base) {
            return Ok(found);
        }
        let st = rustix::fs::fstat(fd).map_err(from_rustix("stat"))?;
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR || st.st_nlink == 0 {
            return Ok(None);
        }
        let root = match self.known_path(base) {
            Some(p) => p.to_path_buf(),
            None => fd_path(base).map_err(|e| err("base path".into(), e.into()))?,
        };
        let then = self.names_then.get(&id).into_iter().flatten();
        let then = then.filter_map(|(d, n)| Some((self.dir_fd(*d)?, OsString::from(OsStr::from_bytes(n)))));
        match self.first_place(then.collect(), &want, &root, st.st_nlink) {
            Place::Below(p) => return Ok(Some(p)),
            Place::Elsewhere => return Ok(None),
            Place::Unseen => {}
        }
        type Build<'r, 'a> = fn(&'r Rewinder<'a>) -> Result<places::Index, RestoreError>;
        let tiers: [(&RefCell<Option<places::Index>>, Build<'_, '_>); 2] =
            [(&self.tree_places, Self::tree_index), (&self.attic_places, Self::attic_index)];
        for (index, build) in tiers {
            if index.borrow().is_none() {
                *index.borrow_mut() = Some(build(self)?);
            }
            let candidates: Vec<(OwnedFd, OsString)> = index
                .borrow()
                .iter()
                .flat_map(|i| i.names_of((st.st_dev, st.st_ino)))
                .filter_map(|(h, n)| {
                    let dir = self.tree.backing().open_handle(h, libc::O_PATH | libc::O_DIRECTORY).ok()?;
                    Some((dir, n.clone()))
                })
                .collect();
            match self.first_place(candidates, &want, &root, st.st_nlink) {
                Place::Below(p) => return Ok(Some(p)),
                Place::Elsewhere => return Ok(None),
                Place::Unseen => {}
            }
        }
        log::debug!("rewind: object {} is in none of the places the journal points at", id.0);
        Ok(None)
    }

    /// The first of `candidates` (directory, name) that still names the
    /// object with handle `want` and `nlink` links, judged against the
    /// base directory whose kernel path is `root`.
    fn first_place(
        &self,
        candidates: Vec<(OwnedFd, OsString)>,
        want: &FileHandle,
        root: &std::path::Path,
        nlink: u64,
    ) -> Place {
        for (dir, name) in candidates {
            if backing::handle_at(dir.as_fd(), &name).ok().as_ref() != Some(want) {
                continue;
            }
            // A directory's kernel path is right: the kernel reconnects
            // the directories it opens by handle.
            let below = fd_path(dir.as_fd()).is_ok_and(|p| p.starts_with(root));
            if below {
                return Place::Below((dir, name));
            }
            // The only name of a file, elsewhere; one of several says
            // nothing of the others.
            if nlink == 1 {
                return Place::Elsewhere;
            }
        }
        Place::Unseen
    }

    /// What the kernel's path of `fd` says, checked without resolving it:
    /// under an in-place mount that path leads into the mount this daemon
    /// serves, whose tree a rewind holds frozen, so a lookup there would
    /// wait for the rewind itself. The path is walked with `openat` from
    /// the known base it starts with (the tree's root, the attic), and the
    /// name it reaches must hold the object's handle. `Some(place)` below
    /// `base`; `Some(None)` at the other base; `None` when the path names
    /// nothing that checks (a disconnected dentry's "/", a stale path).
    #[allow(clippy::option_option)]
    fn kernel_place(
        &self,
        fd: BorrowedFd<'_>,
        want: &FileHandle,
        base: BorrowedFd<'_>,
    ) -> Option<Option<(OwnedFd, OsString)>> {
        let path = fd_path(fd).ok()?;
        let known = [(Some(self.tree.root_fd()), &self.root_path), (self.tree.attic().fd(), &self.attic_path)];
        for (known, known_path) in known {
            let (Some(known), Some(known_path)) = (known, known_path) else { continue };
            let Ok(rel) = path.strip_prefix(known_path) else { continue };
            let comps: Vec<&OsStr> = rel.iter().collect();
            let (last, parents) = comps.split_last()?;
            let dir = self.walk(known, parents, path.parent()?)?;
            if backing::handle_at(dir.as_fd(), last).ok().as_ref() != Some(want) {
                return None;
            }
            return Some(self.same_dir(known, base).then(|| (dir, last.to_os_string())));
        }
        None
    }

    /// The kernel's path of `base` when it is the tree's root or the
    /// attic (read once per rewind).
    fn known_path(&self, base: BorrowedFd<'_>) -> Option<&Path> {
        if self.same_dir(self.tree.root_fd(), base) {
            return self.root_path.as_deref();
        }
        match self.tree.attic().fd() {
            Some(a) if self.same_dir(a, base) => self.attic_path.as_deref(),
            _ => None,
        }
    }

    /// The directory `parents` below `known` (whose kernel path makes
    /// `path`), walked with `openat` without following symlinks, or
    /// reused from an earlier walk in step 3.
    fn walk(&self, known: BorrowedFd<'_>, parents: &[&OsStr], path: &Path) -> Option<OwnedFd> {
        if let Some(dirs) = self.walked_dirs.borrow().as_ref()
            && let Some(dir) = dirs.get(path)
        {
            return rustix::io::fcntl_dupfd_cloexec(dir, 0).ok();
        }
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut dir = rustix::fs::openat(known, ".", flags, Mode::empty()).ok()?;
        for c in parents {
            dir = rustix::fs::openat(&dir, *c, flags, Mode::empty()).ok()?;
        }
        if let Some(dirs) = self.walked_dirs.borrow_mut().as_mut() {
            if dirs.len() >= WALKED_DIRS_KEPT {
                dirs.clear();
            }
            if let Ok(kept) = rustix::io::fcntl_dupfd_cloexec(&dir, 0) {
                dirs.insert(path.to_path_buf(), kept);
            }
        }
        Some(dir)
    }

    /// The tree's places (see `places`): the directories whose names
    /// changed since the checkpoint, and the paths the sealed turns since
    /// then changed.
    fn tree_index(&self) -> Result<places::Index, RestoreError> {
        let started = std::time::Instant::now();
        let mut index = places::Index::default();
        for id in &self.changed_dirs {
            if let Some(dir) = self.dir_fd(*id) {
                index.add_dir(dir.as_fd());
            }
        }
        for turn in self.checkpoint..self.journal.current_turn() {
            if let Some(paths) = self.journal.with_turn_stats(|m| m.turn_paths(turn))? {
                for path in crate::report::decode_paths(&paths) {
                    index.add_path(self.tree.root_fd(), &path);
                }
            }
        }
        log::debug!("rewind: listed the tree's places of changes in {:?}", started.elapsed());
        Ok(index)
    }

    /// The attic's places (see `places`): the directories moved aside
    /// whole since the checkpoint (by this rewind, the attempts it
    /// completes, and earlier rewinds since the checkpoint).
    fn attic_index(&self) -> Result<places::Index, RestoreError> {
        let mut index = places::Index::default();
        let Some(attic) = self.tree.attic().fd() else { return Ok(index) };
        let started = std::time::Instant::now();
        let mut dirs: BTreeSet<ObjectId> = self.in_attic.iter().copied().collect();
        dirs.extend(left_since(self.journal, self.checkpoint)?);
        let dirs: Vec<ObjectId> = dirs.into_iter().collect();
        each_file_in_attic_dirs(attic, &dirs, |dir, name, st| {
            index.add(dir, name, st);
            Ok(true)
        })?;
        log::debug!("rewind: listed the directories moved aside since the checkpoint in {:?}", started.elapsed());
        Ok(index)
    }

    /// A file whose bytes changed in place: a new inode with the old
    /// bytes, pending, takes each of its names (`names`: all of them in the
    /// tree) as a new object; the current inode (and its bytes) goes to the
    /// attic, still as object `id`, for history and for the descriptors
    /// that hold it.
    fn replace_content(&mut self, swap: Swap) -> Result<(), RestoreError> {
        let Swap { id, fd: old, names, node, state } = swap;
        let old = old.as_fd();
        let (node, state) = (&node, &state);
        let (content, record) = self.stored_content(node, state)?;
        let shown = names.iter().map(|(_, n)| self.display(n.as_bytes())).collect::<Vec<_>>().join(", ");
        let old_handle = self.handle_of(id);
        for (dir, _) in &names {
            let dir_handle = backing::handle_of_fd(dir.as_fd()).map_err(|e| err("handle".into(), e))?;
            let dir_id = self.journal.object_id(&dir_handle, kind_code(Kind::Dir))?;
            self.dirs_touched.insert(dir_id);
        }
        let new = NewFile {
            perm: state.perm,
            uid: state.uid,
            gid: state.gid,
            size: state.size,
            mtime_ns: state.mtime_ns,
            xattrs: &state.xattrs,
        };
        let handle = self.ops.swap_in_new_inode(id, old, &names, &new).map_err(|e| err(shown.clone(), e))?;
        self.tree.settler().add(&handle, content, record, state.mtime_ns).map_err(|e| err(shown.clone(), e))?;
        if let Some(ino) = old_handle.and_then(|h| self.tree.objects().ino_of(&h)) {
            self.touched.inodes.insert(ino);
        }
        for (dir, name) in &names {
            self.touch(dir.as_fd(), name);
            self.out.push(Planned { path: name.clone().into(), action: Action::Restore });
        }
        Ok(())
    }

    /// Mode, owner, times and xattrs back to their recorded values.
    fn restore_attrs(&mut self, id: ObjectId, fd: BorrowedFd<'_>) -> Result<(), RestoreError> {
        let state = match self.state_at(id) {
            Ok((_, s)) => s,
            Err(e) => {
                log::warn!("cannot read the recorded state of object {}: {e}", id.0);
                return Ok(());
            }
        };
        let ino = self.tree.ino_for(fd).map_err(|e| err("inode".into(), e))?;
        let live = self.tree.getattr(ino, None).map_err(|e| err("stat".into(), e))?;
        let mut set = crate::restore::owner_and_mode_changes(&live, &state);
        let mtime = crate::workspace::attr::time_of_ns(state.mtime_ns);
        if live.kind != Kind::Symlink && live.mtime != mtime {
            set.mtime = Some(SetTime::At(mtime));
        }
        let live_x = self.tree.xattrs_of(ino);
        if live_x != state.xattrs {
            self.touched.inodes.insert(ino);
            crate::restore::replace_xattrs(self.tree, ino, &live_x, &state.xattrs, self.caller);
        }
        if set.mode.is_some() || set.uid.is_some() || set.gid.is_some() || set.mtime.is_some() {
            // Before the call: a failed setattr still changed the ctime.
            self.touched.inodes.insert(ino);
            self.tree.setattr(ino, set, None, self.caller).map_err(|e| err("setattr".into(), e))?;
        }
        Ok(())
    }
}

/// The (device, inode) of a directory, by descriptor.
fn dir_key(fd: BorrowedFd<'_>) -> Option<(u64, u64)> {
    rustix::fs::fstat(fd).ok().map(|s| (s.st_dev, s.st_ino))
}

/// Where `Rewinder::first_place` found an object.
enum Place {
    /// Below the base directory, as (directory, name).
    Below((OwnedFd, OsString)),
    /// Its only name is elsewhere.
    Elsewhere,
    /// At none of the candidates.
    Unseen,
}

/// The objects that left a name in turn `began` or later (the turns of
/// a rewind and of the attempts to complete it): among them, every
/// directory it moved aside whole. Its attic slot tells where it is now,
/// not the attic table, whose row a kill may have updated before the
/// rename it describes.
pub(crate) fn left_since(journal: &Journal, began: i64) -> Result<Vec<ObjectId>, RestoreError> {
    let mut left = BTreeSet::new();
    for turn in began..=journal.current_turn() {
        left.extend(journal.with_pre_images(|p| p.entry_targets_in_turn(turn))?);
    }
    Ok(left.into_iter().collect())
}

/// Opens directory `name` in `at` for listing (not a symlink to one).
pub(crate) fn open_dir(at: BorrowedFd<'_>, name: &OsStr) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(at, name, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
}

/// Calls `visit` (directory, name, stat) for every name that is not a
/// directory inside the directories `dirs` of the attic (their attic slots;
/// any that is not a directory is passed over) and below them, until it
/// returns `Ok(false)`. Opens one descriptor per directory still to list.
pub(crate) fn each_file_in_attic_dirs(
    attic: BorrowedFd<'_>,
    dirs: &[ObjectId],
    mut visit: impl FnMut(BorrowedFd<'_>, &OsStr, &rustix::fs::Stat) -> Result<bool, RestoreError>,
) -> Result<(), RestoreError> {
    let mut stack: Vec<OwnedFd> = Vec::new();
    for id in dirs {
        if let Ok(d) = open_dir(attic, OsStr::new(&id.0.to_string())) {
            stack.push(d);
        }
    }
    while let Some(dir) = stack.pop() {
        let mut names = Vec::new();
        let listing = rustix::fs::Dir::read_from(&dir).map_err(from_rustix("list the attic"))?;
        for entry in listing {
            let entry = entry.map_err(from_rustix("list the attic"))?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(OsString::from(OsStr::from_bytes(name)));
            }
        }
        for name in names {
            let st = rustix::fs::statat(&dir, &name, AtFlags::SYMLINK_NOFOLLOW).map_err(from_rustix("stat"))?;
            if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
                stack.push(open_dir(dir.as_fd(), &name).map_err(from_rustix("open"))?);
            } else if !visit(dir.as_fd(), &name, &st)? {
                return Ok(());
            }
        }
    }
    Ok(())
}
