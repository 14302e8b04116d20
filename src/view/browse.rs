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
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::journal::Journal;
use crate::view::{Node, NodeState, TreeView, ViewError, ViewResult};
use crate::workspace::capture::kind_code;
use crate::workspace::{Attr, Ino, Kind, LiveTree};

/// The name of the hidden directory in the root of a live mount.
pub const HIDDEN_DIR: &str = ".rewindfs";

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
        node: Node,
    },
}

#[derive(Default)]
struct Table {
    by_ino: HashMap<u64, Slot>,
    by_slot: HashMap<Slot, u64>,
    next: u64,
}

/// An entry of a browse directory.
#[derive(Clone, Debug)]
pub struct BrowseEntry {
    pub name: OsString,
    pub ino: Ino,
    pub kind: Kind,
}

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

fn kind_of(code: u8) -> Kind {
    match code {
        2 => Kind::Dir,
        3 => Kind::Symlink,
        4 => Kind::Fifo,
        5 => Kind::Socket,
        6 => Kind::CharDevice,
        7 => Kind::BlockDevice,
        _ => Kind::File,
    }
}

/// A time in nanoseconds since the epoch.
pub fn time_of_ns(ns: i64) -> SystemTime {
    time_of(ns)
}

fn time_of(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

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
            table: Mutex::new(Table { next: base, ..Default::default() }),
            base,
            single: None,
            stored_states: Mutex::new(HashMap::new()),
        };
        b.intern(Slot::Top);
        b
    }

    /// A browser of one checkpoint whose root is inode 1.
    pub fn single(tree: Arc<LiveTree>, journal: Arc<Journal>, checkpoint: i64) -> ViewResult<Browser> {
        let b = Browser {
            tree,
            journal,
            table: Mutex::new(Table { next: 1, ..Default::default() }),
            base: 1,
            single: Some(checkpoint),
            stored_states: Mutex::new(HashMap::new()),
        };
        let root = b.view(checkpoint).root()?;
        b.intern(Slot::Object { checkpoint, node: root });
        Ok(b)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn intern(&self, slot: Slot) -> Ino {
        let mut t = self.lock();
        if let Some(i) = t.by_slot.get(&slot) {
            return Ino(*i);
        }
        let ino = t.next;
        t.next += 1;
        t.by_ino.insert(ino, slot.clone());
        t.by_slot.insert(slot, ino);
        Ino(ino)
    }

    fn slot(&self, ino: Ino) -> ViewResult<Slot> {
        let slot = self
            .lock()
            .by_ino
            .get(&ino.0)
            .cloned()
            .ok_or_else(|| ViewError::Io(std::io::Error::from_raw_os_error(libc::ESTALE)))?;
        // An object first seen before anything was recorded of it had no id
        // then; records written since (a rename out of this directory) are
        // found by id, so look it up again.
        if let Slot::Object { checkpoint, node: Node { id: None, handle: Some(h) } } = &slot
            && let Some(id) = self.journal.known_object_id(&h.to_bytes())?
        {
            return Ok(Slot::Object { checkpoint: *checkpoint, node: Node { id: Some(id), handle: Some(h.clone()) } });
        }
        Ok(slot)
    }

    /// Whether an inode number belongs to this browser.
    pub fn owns(&self, ino: Ino) -> bool {
        ino.0 >= self.base && self.lock().by_ino.contains_key(&ino.0)
    }

    /// The inode of the hidden directory (or the single view's root).
    pub fn top(&self) -> Ino {
        Ino(self.base)
    }

    fn view(&self, checkpoint: i64) -> TreeView<'_> {
        TreeView::at(&self.tree, &self.journal, checkpoint)
    }

    fn checkpoint_root(&self, checkpoint: i64) -> ViewResult<Ino> {
        let node = self.view(checkpoint).root()?;
        Ok(self.intern(Slot::Object { checkpoint, node }))
    }

    fn synthetic_dir(&self, ino: Ino) -> Attr {
        Attr::synthetic(ino, Kind::Dir, 0o555, 2, SystemTime::now())
    }

    fn object_attr(&self, ino: Ino, s: &NodeState) -> Attr {
        let t = time_of(s.mtime_ns);
        let kind = kind_of(s.kind);
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
    pub fn getattr(&self, ino: Ino) -> ViewResult<Attr> {
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
            Slot::Object { checkpoint, node } => {
                let s = self.view(checkpoint).state(&node)?;
                Ok(self.object_attr(ino, &s))
            }
        }
    }

    fn checkpoint_named(&self, name: &OsStr, by_message: bool) -> ViewResult<i64> {
        let name = name.to_str().ok_or_else(enoent)?;
        let all = self.journal.with_meta(|m| m.checkpoints())?;
        all.iter()
            .find(|c| if by_message { c.message_id.as_deref() == Some(name) } else { c.checkpoint.to_string() == name })
            .map(|c| c.checkpoint)
            .ok_or_else(enoent)
    }

    /// Looks `name` up in directory `dir`.
    pub fn lookup(&self, dir: Ino, name: &OsStr) -> ViewResult<Attr> {
        let ino = match self.slot(dir)? {
            Slot::Top => match name.to_str() {
                Some("README") => self.intern(Slot::Readme),
                Some("checkpoints") => self.intern(Slot::CheckpointsDir),
                Some("messages") => self.intern(Slot::MessagesDir),
                _ => return Err(enoent()),
            },
            Slot::CheckpointsDir => self.checkpoint_root(self.checkpoint_named(name, false)?)?,
            Slot::MessagesDir => self.checkpoint_root(self.checkpoint_named(name, true)?)?,
            Slot::Readme => return Err(ViewError::Io(std::io::Error::from_raw_os_error(libc::ENOTDIR))),
            Slot::Object { checkpoint, node } => {
                let child = self.view(checkpoint).lookup(&node, name)?.ok_or_else(enoent)?;
                self.intern(Slot::Object { checkpoint, node: child })
            }
        };
        self.getattr(ino)
    }

    /// The entries of a directory, "." and ".." first.
    pub fn readdir(&self, dir: Ino) -> ViewResult<Vec<BrowseEntry>> {
        let mut out = vec![
            BrowseEntry { name: ".".into(), ino: dir, kind: Kind::Dir },
            BrowseEntry { name: "..".into(), ino: dir, kind: Kind::Dir },
        ];
        let dir_entry = |name: String, ino: Ino| BrowseEntry { name: name.into(), ino, kind: Kind::Dir };
        match self.slot(dir)? {
            Slot::Top => {
                out.push(BrowseEntry { name: "README".into(), ino: self.intern(Slot::Readme), kind: Kind::File });
                out.push(dir_entry("checkpoints".into(), self.intern(Slot::CheckpointsDir)));
                out.push(dir_entry("messages".into(), self.intern(Slot::MessagesDir)));
            }
            Slot::CheckpointsDir => {
                for c in self.journal.with_meta(|m| m.checkpoints())? {
                    out.push(dir_entry(c.checkpoint.to_string(), self.checkpoint_root(c.checkpoint)?));
                }
            }
            Slot::MessagesDir => {
                for c in self.journal.with_meta(|m| m.checkpoints())? {
                    if let Some(m) = c.message_id.filter(|m| !m.is_empty() && !m.contains('/') && m != "." && m != "..")
                    {
                        out.push(dir_entry(m, self.checkpoint_root(c.checkpoint)?));
                    }
                }
            }
            Slot::Readme => return Err(ViewError::Io(std::io::Error::from_raw_os_error(libc::ENOTDIR))),
            Slot::Object { checkpoint, node } => {
                let view = self.view(checkpoint);
                for (name, child) in view.list(&node)? {
                    let kind = match view.state(&child) {
                        Ok(s) => kind_of(s.kind),
                        Err(_) => Kind::File,
                    };
                    let ino = self.intern(Slot::Object { checkpoint, node: child });
                    out.push(BrowseEntry { name, ino, kind });
                }
            }
        }
        Ok(out)
    }

    /// Reads file bytes.
    pub fn read(&self, ino: Ino, offset: u64, size: u32) -> ViewResult<Vec<u8>> {
        match self.slot(ino)? {
            Slot::Readme => {
                let b = README.as_bytes();
                let start = (offset as usize).min(b.len());
                let end = (start + size as usize).min(b.len());
                Ok(b[start..end].to_vec())
            }
            Slot::Object { checkpoint, node } => {
                let view = self.view(checkpoint);
                let cached = self.stored_states.lock().unwrap_or_else(|p| p.into_inner()).get(&ino.0).cloned();
                let s = match cached {
                    Some(s) => s,
                    None => {
                        let s = view.state(&node)?;
                        if matches!(s.content, crate::view::Content::Stored(_)) {
                            let mut cache = self.stored_states.lock().unwrap_or_else(|p| p.into_inner());
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

    pub fn readlink(&self, ino: Ino) -> ViewResult<Vec<u8>> {
        match self.slot(ino)? {
            Slot::Object { checkpoint, node } => self
                .view(checkpoint)
                .state(&node)?
                .target
                .ok_or_else(|| ViewError::Io(std::io::Error::from_raw_os_error(libc::EINVAL))),
            _ => Err(ViewError::Io(std::io::Error::from_raw_os_error(libc::EINVAL))),
        }
    }

    /// The xattrs of an object (none for synthetic entries).
    pub fn xattrs(&self, ino: Ino) -> ViewResult<Vec<(Vec<u8>, Vec<u8>)>> {
        match self.slot(ino)? {
            Slot::Object { checkpoint, node } => Ok(self.view(checkpoint).state(&node)?.xattrs),
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
