//! Browsing checkpoints by inode number: the state behind a read-only
//! view mount (`rewindfs show`) and behind the hidden `.rewindfs/`
//! directory of a live mount. No FUSE types: the adapters in `crate::fs`
//! call these methods and convert the answers.
//!
//! Layout of the `.rewindfs/` tree:
//!   README                  what this is
//!   checkpoints/<N>/        the tree at checkpoint N
//!   messages/<message-id>/  the tree at the checkpoint with that message id

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::journal::Journal;
use crate::meta::ObjectId;
use crate::sys::FileHandle;
use crate::view::source::ViewSource;
use crate::view::{Node, NodeState, TreeView, ViewError, ViewResult};
use crate::workspace::attr::time_of_ns;
use crate::workspace::capture::kind_code;
use crate::workspace::{Attr, Ino, Kind, LiveTree};
use crate::world::Held;

const README: &str = "This directory is provided by rewindfs; it is not part of your workspace.\n\
\n\
checkpoints/<N>/        the whole tree as it was at checkpoint N (read-only)\n\
messages/<message-id>/  the tree just before that message was acted on\n\
\n\
Nothing here is copied: each file is read from the live tree where it has\n\
not changed since, and from the chunk store where it has. `ls -a` of the\n\
mount root does not list this directory and `find`/`grep -r` do not walk\n\
into it, but it is reachable by name. See `rewindfs log` for checkpoints.\n";

/// What a browse inode stands for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Slot {
    /// `.rewindfs/` itself.
    Top,
    Readme,
    CheckpointsDir,
    MessagesDir,
    /// An object inside the tree at a checkpoint.
    Object {
        checkpoint: i64,
        key: ObjectKey,
    },
}

/// How a view object is numbered: by its object id, so that every name of
/// it (hard links, a name resolved from a record and one from the live
/// tree) has one number; by handle only while it has no id yet.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum ObjectKey {
    Id(ObjectId),
    Handle(FileHandle),
}

/// A slot to number, and the slot its object may already be numbered
/// under: by handle, when it was met before it had an id.
struct Wanted {
    slot: Slot,
    alias: Option<Slot>,
}

impl From<Slot> for Wanted {
    fn from(slot: Slot) -> Wanted {
        Wanted { slot, alias: None }
    }
}

/// Inode numbers handed out, with the kernel's lookup count of each: a
/// number lives while the kernel remembers it (counted as FUSE counts:
/// +1 per lookup reply and per readdirplus entry, -n per forget), so the
/// table is as large as the kernel's cache of views, not as the set of
/// every path ever visited. A dropped number is kept for its slot in
/// `retired` and given to it again when it is met again.
#[derive(Default)]
struct Table {
    by_ino: HashMap<u64, Interned>,
    by_slot: HashMap<Slot, u64>,
    next: u64,
    /// Entries the kernel holds no reference to (numbers shown by a plain
    /// readdir); dropped in bulk when there are more than `limit`.
    unreferenced: usize,
    limit: usize,
    /// Numbers dropped (forgotten by the kernel, or unreferenced), by slot:
    /// the kernel forgets a view inode whenever memory is short, and a
    /// walker (`find -samefile`, `tar`, `rsync -H`) compares the numbers
    /// it saw before with those after, so one object must keep one number
    /// for as long as the browser lives, not only while the kernel holds
    /// it (F15). A number is in `by_ino` or here, never both. Bounded:
    /// only the oldest numbers are given up.
    retired: Retired,
}

/// Dropped numbers by slot, at most `cap`, in two generations: when the
/// young one is full it becomes the old one and the previous old one is
/// given up, so a number retired recently survives reaching the bound
/// (clearing the whole map then brought F15's symptom back at once for
/// every object met before).
struct Retired {
    young: HashMap<Slot, u64>,
    old: HashMap<Slot, u64>,
    cap: usize,
}

impl Default for Retired {
    fn default() -> Retired {
        Retired::with_capacity(RETIRED_LIMIT)
    }
}

impl Retired {
    fn with_capacity(cap: usize) -> Retired {
        Retired { young: HashMap::new(), old: HashMap::new(), cap }
    }

    fn insert(&mut self, slot: Slot, ino: u64) {
        if self.young.len() >= self.cap.div_ceil(2) {
            self.old = std::mem::take(&mut self.young);
        }
        self.young.insert(slot, ino);
    }

    /// The number `slot` had, taken out (it is live again).
    fn remove(&mut self, slot: &Slot) -> Option<u64> {
        self.young.remove(slot).or_else(|| self.old.remove(slot))
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }
}

struct Interned {
    slot: Slot,
    lookups: u64,
}

impl Table {
    /// Drops number `ino` from the live table, keeping it for its slot.
    fn retire(&mut self, ino: u64) {
        let Some(e) = self.by_ino.remove(&ino) else { return };
        self.by_slot.remove(&e.slot);
        self.retired.insert(e.slot, ino);
    }
}

/// How many unreferenced entries a browser keeps before dropping them.
const UNREFERENCED_LIMIT: usize = 4096;

/// How many dropped numbers a browser remembers (about 60 bytes each).
const RETIRED_LIMIT: usize = 1 << 18;

pub use super::source::BrowseEntry;

/// Inode-numbered access to checkpoint views.
pub struct Browser {
    tree: Arc<LiveTree>,
    journal: Arc<Journal>,
    table: Mutex<Table>,
    /// First inode number handed out.
    base: u64,
    /// For a `show` mount: the one checkpoint shown at the root.
    single: Option<i64>,
    /// States of files whose bytes come from the chunk store: immutable, and
    /// worth keeping between the many reads of one file (decoding a large
    /// file's chunk list on every 128 KiB read made views slow).
    stored_states: Mutex<HashMap<u64, NodeState>>,
}

/// How many stored-file states a browser keeps.
const STATE_CACHE: usize = 1024;

fn enoent() -> ViewError {
    ViewError::Io(std::io::Error::from_raw_os_error(libc::ENOENT))
}

impl Browser {
    /// A browser of every checkpoint, with inode numbers from `base` up
    /// (the hidden directory is `base` itself).
    pub fn hidden(tree: Arc<LiveTree>, journal: Arc<Journal>, base: u64) -> Browser {
        let b = Browser {
            tree,
            journal,
            table: Mutex::new(Table { next: base, limit: UNREFERENCED_LIMIT, ..Default::default() }),
            base,
            single: None,
            stored_states: Mutex::new(HashMap::new()),
        };
        b.intern(Slot::Top);
        b
    }

    /// A browser of one checkpoint whose root is inode 1.
    pub fn single(held: Held<'_>, tree: Arc<LiveTree>, journal: Arc<Journal>, checkpoint: i64) -> ViewResult<Browser> {
        let b = Browser {
            tree,
            journal,
            table: Mutex::new(Table { next: 1, limit: UNREFERENCED_LIMIT, ..Default::default() }),
            base: 1,
            single: Some(checkpoint),
            stored_states: Mutex::new(HashMap::new()),
        };
        let root = b.view(held, checkpoint).root()?;
        b.intern(b.object_slot(checkpoint, OsStr::new(""), root)?);
        Ok(b)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        crate::poison::lock(&self.table, "the view inode table")
    }

    /// The number of `slot`, taking `lookups` kernel references to it.
    fn intern_counted(&self, wanted: Wanted, lookups: u64) -> Ino {
        let Wanted { slot, alias } = wanted;
        let mut guard = self.lock();
        let t = &mut *guard;
        // Numbered by handle before it had an id: the same object, so the
        // same number, from now on under its id.
        if !t.by_slot.contains_key(&slot)
            && let Some(ino) = alias.as_ref().and_then(|a| t.by_slot.remove(a))
        {
            if let Some(e) = t.by_ino.get_mut(&ino) {
                e.slot = slot.clone();
            }
            t.by_slot.insert(slot.clone(), ino);
            log::trace!("browse: {ino} moved from {alias:?} to {slot:?}");
        }
        if let Some(&ino) = t.by_slot.get(&slot) {
            if let Some(e) = t.by_ino.get_mut(&ino) {
                if e.lookups == 0 && lookups > 0 {
                    t.unreferenced = t.unreferenced.saturating_sub(1);
                }
                e.lookups += lookups;
            }
            return Ino(ino);
        }
        if lookups == 0 {
            if t.unreferenced >= t.limit {
                let base = self.base;
                log::trace!("browse: dropping {} unreferenced numbers", t.unreferenced);
                let dropped: Vec<u64> =
                    t.by_ino.iter().filter(|&(&ino, e)| e.lookups == 0 && ino != base).map(|(&ino, _)| ino).collect();
                for ino in dropped {
                    t.retire(ino);
                }
                t.unreferenced = t.by_ino.values().filter(|e| e.lookups == 0).count();
                self.forget_states(&t.by_ino);
            }
            t.unreferenced += 1;
        }
        // Met before and dropped since: its old number, also when it was
        // numbered by handle then.
        let again = t.retired.remove(&slot).or_else(|| alias.as_ref().and_then(|a| t.retired.remove(a)));
        let ino = match again {
            Some(ino) => ino,
            None => {
                t.next += 1;
                t.next - 1
            }
        };
        if matches!(slot, Slot::Object { .. }) {
            log::trace!(
                "browse: number {ino} for {slot:?} (alias {alias:?} not held; met before: {})",
                again.is_some()
            );
        }
        t.by_ino.insert(ino, Interned { slot: slot.clone(), lookups });
        t.by_slot.insert(slot, ino);
        Ino(ino)
    }

    /// The number of `slot`, without a kernel reference (a number shown
    /// in a plain directory listing, or one the browser itself keeps).
    fn intern(&self, wanted: impl Into<Wanted>) -> Ino {
        self.intern_counted(wanted.into(), 0)
    }

    /// The kernel forgot `nlookup` references to `ino`; at zero its number
    /// is dropped. The top directory (a `show` mount's root) stays.
    pub fn forget(&self, ino: Ino, nlookup: u64) {
        let mut guard = self.lock();
        let t = &mut *guard;
        let Some(e) = t.by_ino.get_mut(&ino.0) else { return };
        e.lookups = e.lookups.saturating_sub(nlookup);
        if e.lookups > 0 || ino.0 == self.base {
            return;
        }
        log::trace!("browse: forgot {} ({:?})", ino.0, e.slot);
        t.retire(ino.0);
        crate::poison::lock(&self.stored_states, "the view state cache").remove(&ino.0);
    }

    /// Drops cached states of numbers no longer in `live`.
    fn forget_states(&self, live: &HashMap<u64, Interned>) {
        crate::poison::lock(&self.stored_states, "the view state cache").retain(|ino, _| live.contains_key(ino));
    }

    /// How many inode numbers this browser holds (for `status`).
    pub fn inode_count(&self) -> usize {
        self.lock().by_ino.len()
    }

    fn slot(&self, ino: Ino) -> ViewResult<Slot> {
        self.lock()
            .by_ino
            .get(&ino.0)
            .map(|e| e.slot.clone())
            .ok_or_else(|| ViewError::Io(std::io::Error::from_raw_os_error(libc::ESTALE)))
    }

    /// The slot of a view object met at `name`, numbered by id when it has one.
    fn object_slot(&self, checkpoint: i64, name: &OsStr, node: Node) -> ViewResult<Wanted> {
        // Which key each name of an object gets is what decides whether
        // its names share one number (F15 in docs/history-model-failures.md).
        log::debug!("browse: checkpoint {checkpoint} name {name:?}: {node:?}");
        let (key, alias) = match node {
            Node { id: Some(id), handle } => (ObjectKey::Id(id), handle.map(ObjectKey::Handle)),
            Node { id: None, handle: Some(h) } => (ObjectKey::Handle(h), None),
            Node { id: None, handle: None } => return Err(enoent()),
        };
        Ok(Wanted { slot: Slot::Object { checkpoint, key }, alias: alias.map(|key| Slot::Object { checkpoint, key }) })
    }

    /// The node behind a numbered view object. By id, the object's current
    /// handle (a rewind may have given it a new inode since it was
    /// numbered); by handle, the same once the object has an id, also when
    /// a rewind gave it a new inode since (the kernel keeps a number it
    /// looked up for an hour, so it may ask by this one after the rewind:
    /// `Journal::object_id_ever`).
    fn node(&self, held: Held<'_>, checkpoint: i64, key: &ObjectKey) -> ViewResult<Node> {
        match key {
            ObjectKey::Id(id) => self.view(held, checkpoint).node_of_id(*id),
            ObjectKey::Handle(h) => match self.journal.object_id_ever(h)? {
                Some(id) => self.view(held, checkpoint).node_of_id(id),
                None => Ok(Node { id: None, handle: Some(h.clone()) }),
            },
        }
    }

    /// Whether an inode number belongs to this browser.
    pub fn owns(&self, ino: Ino) -> bool {
        ino.0 >= self.base && self.lock().by_ino.contains_key(&ino.0)
    }

    /// The numbers of `checkpoints/` and `messages/` while the kernel may
    /// hold entries in them (it looked them up): a forgotten checkpoint's
    /// must be expired there.
    pub fn listing_dirs(&self) -> (Option<Ino>, Option<Ino>) {
        let t = self.lock();
        let held = |slot: Slot| t.by_slot.get(&slot).filter(|ino| t.by_ino.get(ino).is_some_and(|e| e.lookups > 0));
        (held(Slot::CheckpointsDir).map(|&i| Ino(i)), held(Slot::MessagesDir).map(|&i| Ino(i)))
    }

    /// The inode of the hidden directory (or the single view's root).
    pub fn top(&self) -> Ino {
        Ino(self.base)
    }

    fn view<'a>(&'a self, held: Held<'a>, checkpoint: i64) -> TreeView<'a> {
        TreeView::at(held, &self.tree, &self.journal, checkpoint)
    }

    fn checkpoint_root(&self, held: Held<'_>, checkpoint: i64) -> ViewResult<Wanted> {
        let node = self.view(held, checkpoint).root()?;
        self.object_slot(checkpoint, OsStr::new(""), node)
    }

    fn synthetic_dir(&self, ino: Ino) -> Attr {
        Attr::synthetic(ino, Kind::Dir, 0o555, 2, SystemTime::now())
    }

    fn object_attr(&self, ino: Ino, s: &NodeState) -> Attr {
        let t = time_of_ns(s.mtime_ns);
        let kind = Kind::from_code(s.kind);
        Attr {
            ino,
            kind,
            // Views are read-only whatever the recorded mode says; keep the
            // recorded bits so `stat` shows what the file had.
            perm: s.perm as u16,
            nlink: if kind == Kind::Dir { s.nlink.max(2) } else { s.nlink.max(1) },
            uid: s.uid,
            gid: s.gid,
            rdev: 0,
            size: if kind == Kind::Symlink { s.target.as_ref().map(|t| t.len() as u64).unwrap_or(0) } else { s.size },
            blocks: s.size.div_ceil(512),
            blksize: 4096,
            atime: t,
            mtime: t,
            ctime: t,
        }
    }

    /// Attributes of an inode.
    pub fn getattr(&self, held: Held<'_>, ino: Ino) -> ViewResult<Attr> {
        match self.slot(ino)? {
            Slot::Top | Slot::CheckpointsDir | Slot::MessagesDir => Ok(self.synthetic_dir(ino)),
            Slot::Readme => {
                let mut a = self.synthetic_dir(ino);
                a.kind = Kind::File;
                a.perm = 0o444;
                a.nlink = 1;
                a.size = README.len() as u64;
                Ok(a)
            }
            Slot::Object { checkpoint, key } => {
                let s = self.view(held, checkpoint).state(&self.node(held, checkpoint, &key)?)?;
                Ok(self.object_attr(ino, &s))
            }
        }
    }

    fn checkpoint_named(&self, name: &OsStr, by_message: bool) -> ViewResult<i64> {
        let name = name.to_str().ok_or_else(enoent)?;
        // Indexed lookups: a view's first lookup does not read the history.
        let found = if by_message {
            self.journal.with_checkpoints(|m| m.checkpoint_with_message(name, None))?
        } else {
            match name.parse::<i64>() {
                // Only the number as listed (`07` names nothing).
                Ok(n) if n.to_string() == name => {
                    self.journal.with_checkpoints(|m| m.checkpoint(n))?.map(|c| c.checkpoint)
                }
                _ => None,
            }
        };
        found.ok_or_else(enoent)
    }

    /// Looks `name` up in directory `dir`. The answer holds one kernel
    /// reference to the entry's number, given back by `forget`.
    pub fn lookup(&self, held: Held<'_>, dir: Ino, name: &OsStr) -> ViewResult<Attr> {
        let wanted = match self.slot(dir)? {
            Slot::Top => match name.to_str() {
                Some("README") => Slot::Readme.into(),
                Some("checkpoints") => Slot::CheckpointsDir.into(),
                Some("messages") => Slot::MessagesDir.into(),
                _ => return Err(enoent()),
            },
            Slot::CheckpointsDir => self.checkpoint_root(held, self.checkpoint_named(name, false)?)?,
            Slot::MessagesDir => self.checkpoint_root(held, self.checkpoint_named(name, true)?)?,
            Slot::Readme => return Err(ViewError::Io(std::io::Error::from_raw_os_error(libc::ENOTDIR))),
            Slot::Object { checkpoint, key } => {
                let child = self
                    .view(held, checkpoint)
                    .lookup(&self.node(held, checkpoint, &key)?, name)?
                    .ok_or_else(enoent)?;
                self.object_slot(checkpoint, name, child)?
            }
        };
        let attr = self.referenced_attr(held, wanted)?;
        log::debug!("browse: lookup {} {name:?} -> {}", dir.0, attr.ino.0);
        Ok(attr)
    }

    /// The attributes of `slot` under a number the kernel takes one
    /// reference to; none is kept when they cannot be read.
    fn referenced_attr(&self, held: Held<'_>, wanted: Wanted) -> ViewResult<Attr> {
        let ino = self.intern_counted(wanted, 1);
        self.getattr(held, ino).inspect_err(|_| self.forget(ino, 1))
    }

    /// The entries of a directory after "." and "..", by slot.
    fn entries(&self, held: Held<'_>, dir: &Slot) -> ViewResult<Vec<(OsString, Wanted, Kind)>> {
        let mut out = Vec::new();
        let dir_entry = |name: String, wanted: Wanted| (OsString::from(name), wanted, Kind::Dir);
        match dir {
            Slot::Top => {
                out.push((OsString::from("README"), Slot::Readme.into(), Kind::File));
                out.push(dir_entry("checkpoints".into(), Slot::CheckpointsDir.into()));
                out.push(dir_entry("messages".into(), Slot::MessagesDir.into()));
            }
            Slot::CheckpointsDir => {
                for c in self.journal.with_checkpoints(|m| m.checkpoints())? {
                    out.push(dir_entry(c.checkpoint.to_string(), self.checkpoint_root(held, c.checkpoint)?));
                }
            }
            Slot::MessagesDir => {
                for c in self.journal.with_checkpoints(|m| m.checkpoints())? {
                    // Ids sealed before they were checked may not be names.
                    if let Some(m) = c.message_id.filter(|m| crate::journal::check_message_id(m).is_ok()) {
                        out.push(dir_entry(m, self.checkpoint_root(held, c.checkpoint)?));
                    }
                }
            }
            Slot::Readme => return Err(ViewError::Io(std::io::Error::from_raw_os_error(libc::ENOTDIR))),
            Slot::Object { checkpoint, key } => {
                let view = self.view(held, *checkpoint);
                for (name, child) in view.list(&self.node(held, *checkpoint, key)?)? {
                    let kind = match view.state(&child) {
                        Ok(s) => Kind::from_code(s.kind),
                        Err(_) => Kind::File,
                    };
                    let wanted = self.object_slot(*checkpoint, &name, child)?;
                    out.push((name, wanted, kind));
                }
            }
        }
        Ok(out)
    }

    /// The entries of a directory, "." and ".." first. The kernel takes no
    /// reference to the numbers of a plain listing.
    pub fn readdir(&self, held: Held<'_>, dir: Ino) -> ViewResult<Vec<BrowseEntry>> {
        let mut out = vec![
            BrowseEntry { name: ".".into(), ino: dir, kind: Kind::Dir },
            BrowseEntry { name: "..".into(), ino: dir, kind: Kind::Dir },
        ];
        for (name, wanted, kind) in self.entries(held, &self.slot(dir)?)? {
            let ino = self.intern(wanted);
            log::debug!("browse: readdir {} {name:?} -> {}", dir.0, ino.0);
            out.push(BrowseEntry { name, ino, kind });
        }
        Ok(out)
    }

    /// A listing with attributes (readdirplus): calls `add(index, entry,
    /// attr)` for each entry from `offset` ("." and ".." at 0 and 1) until
    /// it returns false (the reply is full). The kernel takes a reference
    /// to every entry added but "." and "..", as after a lookup.
    pub fn readdir_plus(
        &self,
        held: Held<'_>,
        dir: Ino,
        offset: usize,
        mut add: impl FnMut(usize, &BrowseEntry, &Attr) -> bool,
    ) -> ViewResult<()> {
        let entries = self.entries(held, &self.slot(dir)?)?;
        let dir_attr = self.getattr(held, dir)?;
        for (i, name) in [".", ".."].into_iter().enumerate().skip(offset) {
            if !add(i, &BrowseEntry { name: name.into(), ino: dir, kind: Kind::Dir }, &dir_attr) {
                return Ok(());
            }
        }
        for (i, (name, wanted, kind)) in entries.into_iter().enumerate().map(|(i, e)| (i + 2, e)).skip(offset) {
            // Gone or unreadable since the listing: leave it out.
            let Ok(attr) = self.referenced_attr(held, wanted) else { continue };
            log::debug!("browse: readdirplus {} {name:?} -> {}", dir.0, attr.ino.0);
            if !add(i, &BrowseEntry { name, ino: attr.ino, kind }, &attr) {
                // Not sent: give back the reference taken for it.
                self.forget(attr.ino, 1);
                break;
            }
        }
        Ok(())
    }

    /// Reads file bytes.
    pub fn read(&self, held: Held<'_>, ino: Ino, offset: u64, size: u32) -> ViewResult<Vec<u8>> {
        match self.slot(ino)? {
            Slot::Readme => {
                let b = README.as_bytes();
                let start = (offset as usize).min(b.len());
                let end = (start + size as usize).min(b.len());
                Ok(b[start..end].to_vec())
            }
            Slot::Object { checkpoint, key } => {
                let view = self.view(held, checkpoint);
                let cached = crate::poison::lock(&self.stored_states, "the view state cache").get(&ino.0).cloned();
                let s = match cached {
                    Some(s) => s,
                    None => {
                        // Resolving the node costs a query: only when the
                        // state is not cached.
                        let s = view.state(&self.node(held, checkpoint, &key)?)?;
                        if matches!(s.content, crate::view::Content::Stored(_)) {
                            let mut cache = crate::poison::lock(&self.stored_states, "the view state cache");
                            if cache.len() >= STATE_CACHE {
                                cache.clear();
                            }
                            cache.insert(ino.0, s.clone());
                        }
                        s
                    }
                };
                if s.kind != kind_code(Kind::File) {
                    return Err(ViewError::Io(std::io::Error::from_raw_os_error(libc::EISDIR)));
                }
                let mut buf = vec![0u8; size as usize];
                let mut done = 0;
                while done < buf.len() {
                    let n = view.read_at(&s, offset + done as u64, &mut buf[done..])?;
                    if n == 0 {
                        break;
                    }
                    done += n;
                }
                buf.truncate(done);
                Ok(buf)
            }
            _ => Err(ViewError::Io(std::io::Error::from_raw_os_error(libc::EISDIR))),
        }
    }

    pub fn readlink(&self, held: Held<'_>, ino: Ino) -> ViewResult<Vec<u8>> {
        match self.slot(ino)? {
            Slot::Object { checkpoint, key } => self
                .view(held, checkpoint)
                .state(&self.node(held, checkpoint, &key)?)?
                .target
                .ok_or_else(|| ViewError::Io(std::io::Error::from_raw_os_error(libc::EINVAL))),
            _ => Err(ViewError::Io(std::io::Error::from_raw_os_error(libc::EINVAL))),
        }
    }

    /// The xattrs of an object (none for synthetic entries).
    pub fn xattrs(&self, held: Held<'_>, ino: Ino) -> ViewResult<Vec<(Vec<u8>, Vec<u8>)>> {
        match self.slot(ino)? {
            Slot::Object { checkpoint, key } => {
                Ok(self.view(held, checkpoint).state(&self.node(held, checkpoint, &key)?)?.xattrs)
            }
            _ => Ok(Vec::new()),
        }
    }

    /// Filesystem statistics of the backing tree.
    pub fn statfs(&self) -> ViewResult<crate::workspace::FsStats> {
        Ok(self.tree.statfs()?)
    }

    /// Which checkpoint a `show` mount presents.
    pub fn shown_checkpoint(&self) -> Option<i64> {
        self.single
    }
}

/// A browser read under the tree lock: the view source of a `show` mount
/// of a local checkpoint and of the live mount's `.rewindfs/`.
pub struct Locked<'a> {
    pub browser: &'a Browser,
    pub held: Held<'a>,
}

impl Locked<'_> {
    /// The inode of the hidden directory (or the single view's root).
    pub fn top(&self) -> Ino {
        self.browser.top()
    }
}

impl ViewSource for Locked<'_> {
    fn lookup(&self, dir: Ino, name: &OsStr) -> ViewResult<Attr> {
        self.browser.lookup(self.held, dir, name)
    }
    fn forget(&self, ino: Ino, nlookup: u64) {
        self.browser.forget(ino, nlookup)
    }
    fn getattr(&self, ino: Ino) -> ViewResult<Attr> {
        self.browser.getattr(self.held, ino)
    }
    fn readdir(&self, dir: Ino) -> ViewResult<Vec<BrowseEntry>> {
        self.browser.readdir(self.held, dir)
    }
    fn readdir_plus(
        &self,
        dir: Ino,
        offset: usize,
        add: &mut dyn FnMut(usize, &BrowseEntry, &Attr) -> bool,
    ) -> ViewResult<()> {
        self.browser.readdir_plus(self.held, dir, offset, add)
    }
    fn read(&self, ino: Ino, offset: u64, size: u32) -> ViewResult<Vec<u8>> {
        self.browser.read(self.held, ino, offset, size)
    }
    fn readlink(&self, ino: Ino) -> ViewResult<Vec<u8>> {
        self.browser.readlink(self.held, ino)
    }
    fn xattrs(&self, ino: Ino) -> ViewResult<Vec<(Vec<u8>, Vec<u8>)>> {
        self.browser.xattrs(self.held, ino)
    }
    fn statfs(&self) -> ViewResult<crate::workspace::FsStats> {
        self.browser.statfs()
    }
    /// Only the listing of every checkpoint grows (`.rewindfs/` itself).
    fn may_change(&self, ino: Ino) -> bool {
        self.browser.shown_checkpoint().is_none() && ino == self.browser.top()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::meta::Meta;
    use crate::store::memory::MemoryStore;

    /// The tree lock the tests' reads hold: shared, for good (nothing
    /// here freezes the tree).
    fn tree_lock() -> Held<'static> {
        static WORLD: std::sync::LazyLock<crate::world::World> = std::sync::LazyLock::new(crate::world::World::new);
        Box::leak(Box::new(WORLD.op())).held()
    }

    /// A browser over a workspace holding `files` (created with their own
    /// names as content), and the workspace's temp dir.
    fn browser_over(files: &[String]) -> (tempfile::TempDir, Browser) {
        let dir = tempfile::tempdir().expect("temp dir");
        for f in files {
            let p = dir.path().join(f);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(&p, f).expect("write");
        }
        let meta = Meta::open_in_memory().expect("meta");
        let journal = Arc::new(Journal::open(meta, Arc::new(MemoryStore::new())).expect("journal"));
        let tree = Arc::new(
            LiveTree::new(dir.path(), Some(journal.clone()), crate::workspace::Opener::ByHandle).expect("live tree"),
        );
        (dir, Browser::hidden(tree, journal, 1 << 62))
    }

    /// The number retired last comes back after the map of retired
    /// numbers reached its bound (it was cleared whole then, and every
    /// object met before got a new number: F15 again); the oldest go, and
    /// the map stays within its bound.
    #[test]
    fn a_recently_retired_number_survives_reaching_the_bound() {
        let mut t = Table { retired: Retired::with_capacity(8), ..Table::default() };
        let slot = |i: i64| Slot::Object { checkpoint: 1, key: ObjectKey::Id(ObjectId(i)) };
        for i in 0..100 {
            t.by_ino.insert(1000 + i as u64, Interned { slot: slot(i), lookups: 0 });
            t.by_slot.insert(slot(i), 1000 + i as u64);
            t.retire(1000 + i as u64);
            assert!(t.retired.len() <= 8, "{} retired numbers kept, bound 8", t.retired.len());
        }
        assert_eq!(t.retired.remove(&slot(99)), Some(1099), "the last number retired");
        assert_eq!(t.retired.remove(&slot(95)), Some(1095), "one retired four numbers earlier");
        assert_eq!(t.retired.remove(&slot(0)), None, "the oldest are given up");
    }

    /// The references a kernel holds, by inode number.
    #[derive(Default)]
    struct Kernel(HashMap<Ino, u64>);

    impl Kernel {
        fn lookup(&mut self, b: &Browser, dir: Ino, name: &str) -> Ino {
            let a = b.lookup(tree_lock(), dir, OsStr::new(name)).unwrap_or_else(|e| panic!("lookup {name}: {e}"));
            *self.0.entry(a.ino).or_default() += 1;
            a.ino
        }

        /// readdirplus of `dir`, accepting at most `room` entries.
        fn list(&mut self, b: &Browser, dir: Ino, room: usize) -> Vec<(OsString, Ino)> {
            let mut out = Vec::new();
            b.readdir_plus(tree_lock(), dir, 0, |_, e, attr| {
                if out.len() == room {
                    return false;
                }
                if e.name != "." && e.name != ".." {
                    *self.0.entry(attr.ino).or_default() += 1;
                }
                out.push((e.name.clone(), attr.ino));
                true
            })
            .expect("readdirplus");
            out
        }

        fn forget_all(&mut self, b: &Browser) {
            for (ino, n) in self.0.drain() {
                b.forget(ino, n);
            }
        }
    }

    /// Walks `.rewindfs/checkpoints/0/` down to every file; returns the
    /// numbers of the files, by name.
    fn walk(k: &mut Kernel, b: &Browser) -> HashMap<OsString, Ino> {
        let cps = k.lookup(b, b.top(), "checkpoints");
        let root = k.lookup(b, cps, "0");
        let mut files = HashMap::new();
        for (name, ino) in k.list(b, root, usize::MAX) {
            if name == "." || name == ".." {
                continue;
            }
            for (child, ino) in k.list(b, ino, usize::MAX) {
                if child != "." && child != ".." {
                    files.insert(child, ino);
                }
            }
            // Looked up by name too, as `cat a/x` would.
            let _ = k.lookup(b, root, name.to_str().expect("utf-8"));
        }
        files
    }

    /// `checkpoints/N` and `messages/ID` are found by indexed lookups:
    /// only the number as listed names a checkpoint (not `00` or `+1`),
    /// and a message id names the checkpoint sealed with it.
    #[test]
    fn checkpoints_are_looked_up_by_their_number_and_message_as_listed() {
        let (_dir, b) = browser_over(&["a".to_string()]);
        let info = crate::journal::TurnInfo { message_id: Some("m1".into()), ..Default::default() };
        b.journal.seal(&info, crate::meta::Reason::Turn, || {}).expect("seal");
        let mut k = Kernel::default();
        let (cps, msgs) = (k.lookup(&b, b.top(), "checkpoints"), k.lookup(&b, b.top(), "messages"));
        let (zero, one) = (k.lookup(&b, cps, "0"), k.lookup(&b, cps, "1"));
        assert_ne!(zero, one);
        assert_eq!(k.lookup(&b, msgs, "m1"), one, "messages/m1 is checkpoint 1");
        for (dir, name) in [(cps, "00"), (cps, "+1"), (cps, "2"), (cps, "m1"), (msgs, "m2"), (msgs, "1")] {
            let got = b.lookup(tree_lock(), dir, OsStr::new(name));
            assert!(
                got.as_ref().is_err_and(|e| crate::error::AsErrno::errno(e).0 == libc::ENOENT),
                "{name}: {:?}",
                got.map(|a| a.ino)
            );
        }
        k.forget_all(&b);
    }

    #[test]
    fn forgotten_entries_are_freed() {
        let names: Vec<String> = ["a/x", "a/y", "b/z"].iter().map(|s| s.to_string()).collect();
        let (_dir, b) = browser_over(&names);
        assert_eq!(b.inode_count(), 1, "a new browser holds only its top");
        let mut k = Kernel::default();
        let first = walk(&mut k, &b);
        assert_eq!(first.len(), 3, "{first:?}");
        let held = b.inode_count();
        // Walked again while remembered: the same numbers, no new ones.
        let again = walk(&mut k, &b);
        assert_eq!(again, first);
        assert_eq!(b.inode_count(), held);
        assert!(held >= 1 + 2 + 2 + 3, "top, checkpoints, 0, a, b and three files: {held}");

        k.forget_all(&b);
        assert_eq!(b.inode_count(), 1, "the table shrinks back once the kernel forgets everything");
        let x = first[OsStr::new("x")];
        assert!(b.getattr(tree_lock(), x).is_err(), "a forgotten number must not resolve");

        // The view still works, under the same numbers.
        let third = walk(&mut k, &b);
        assert_eq!(third, first, "an object met again after a forget keeps its number");
        let x3 = third[OsStr::new("x")];
        assert_eq!(b.read(tree_lock(), x3, 0, 100).expect("read"), b"a/x");
        k.forget_all(&b);
        assert_eq!(b.inode_count(), 1);
    }

    /// F15: the kernel forgets a view inode whenever memory is short,
    /// and a walker compares numbers seen before with numbers seen after:
    /// the two names of a hard-linked file looked up on either side of a
    /// forget must show one number, with or without an object id, and
    /// across the object getting one.
    #[test]
    fn a_hard_linked_file_keeps_one_number_across_forgets() {
        let (dir, b) = browser_over(&["d/x".to_string()]);
        std::fs::hard_link(dir.path().join("d/x"), dir.path().join("d/y")).expect("link");
        let mut k = Kernel::default();
        let cps = k.lookup(&b, b.top(), "checkpoints");
        let root = k.lookup(&b, cps, "0");
        let d = k.lookup(&b, root, "d");
        let number = |name: &str| {
            // Looked up, then forgotten at once, as under memory pressure.
            let ino = b.lookup(tree_lock(), d, OsStr::new(name)).unwrap_or_else(|e| panic!("lookup {name}: {e}")).ino;
            b.forget(ino, 1);
            ino
        };
        let first = number("x");
        assert_eq!(number("y"), first, "the other name, after x was forgotten (numbered by handle)");
        // The object gets an id (its first record): numbered by id from now on.
        let h = crate::workspace::backing::handle_at(b.tree.root_fd(), OsStr::new("d/x")).expect("handle");
        b.journal.object_id(&h, kind_code(Kind::File)).expect("id");
        assert_eq!(number("y"), first, "after it got an id");
        assert_eq!(number("x"), first, "by id, after a forget");
        // Listed by readdirplus after a forget: the same number again.
        let listed = k.list(&b, d, usize::MAX);
        for name in ["x", "y"] {
            let ino = listed.iter().find(|(n, _)| n == name).map(|(_, i)| *i);
            assert_eq!(ino, Some(first), "{name} in a listing: {listed:?}");
        }
        k.forget_all(&b);
    }

    #[test]
    fn entries_a_full_readdirplus_did_not_send_hold_no_reference() {
        let names: Vec<String> = (0..10).map(|i| format!("d/f{i}")).collect();
        let (_dir, b) = browser_over(&names);
        let mut k = Kernel::default();
        let cps = k.lookup(&b, b.top(), "checkpoints");
        let root = k.lookup(&b, cps, "0");
        let d = k.lookup(&b, root, "d");
        // ".", ".." and three files fit.
        let sent = k.list(&b, d, 5);
        assert_eq!(sent.len(), 5);
        assert_eq!(b.inode_count(), 1 + 3 + 3, "only the entries sent are held");
        k.forget_all(&b);
        assert_eq!(b.inode_count(), 1);
    }

    #[test]
    fn plain_listings_keep_a_bounded_number_of_unreferenced_entries() {
        const LIMIT: usize = 16;
        let names: Vec<String> = (0..LIMIT + 20).map(|i| format!("d/f{i}")).collect();
        let (_dir, b) = browser_over(&names);
        b.lock().limit = LIMIT;
        let mut k = Kernel::default();
        let cps = k.lookup(&b, b.top(), "checkpoints");
        let root = k.lookup(&b, cps, "0");
        let d = k.lookup(&b, root, "d");
        let mut before = None;
        for _ in 0..2 {
            let listed = b.readdir(tree_lock(), d).expect("readdir");
            assert_eq!(listed.len(), 2 + names.len());
            assert!(b.inode_count() <= 1 + k.0.len() + LIMIT, "{} numbers held after a plain listing", b.inode_count());
            let numbers: Vec<Ino> = listed.iter().map(|e| e.ino).collect();
            // Numbers dropped in bulk come back the same.
            assert!(before.as_ref().is_none_or(|b| *b == numbers), "{before:?} then {numbers:?}");
            before = Some(numbers);
        }
        // A number the kernel holds survives the sweeps.
        assert!(b.getattr(tree_lock(), d).is_ok());
        k.forget_all(&b);
        assert!(b.inode_count() <= 1 + LIMIT);
    }
}
