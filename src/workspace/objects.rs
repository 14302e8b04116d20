//! The object table: which backing inode each inode number shown to the
//! kernel stands for. Objects are named by kernel file handles, not by
//! descriptors (a process may hold at most 20,000 descriptors, a tree may
//! hold millions of files) and not by paths (paths change under rename).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::sys::FileHandle;
use crate::workspace::attr::{Ino, Kind};

/// First inode number handed out when the backing inode number is already
/// taken by another object (an inode number reused while the kernel still
/// remembers the old file). Far above any ext4 inode number.
const PRIVATE_INO_BASE: u64 = 1 << 56;

#[derive(Debug)]
struct Node {
    handle: FileHandle,
    kind: Kind,
    /// How many lookups the kernel holds on this inode (FUSE's nlookup).
    lookups: u64,
    /// The last name of the object was removed: once the kernel forgets it,
    /// nobody can reach it again and the entry can go.
    unlinked: bool,
}

#[derive(Default, Debug)]
struct Inner {
    by_ino: HashMap<Ino, Node>,
    by_handle: HashMap<FileHandle, Ino>,
    next_private: u64,
}

/// Maps inode numbers to backing objects. Entries live as long as the
/// object exists, so an inode number stays the same for the life of a
/// mount even after the kernel forgets it.
#[derive(Debug, Default)]
pub struct ObjectTable {
    inner: Mutex<Inner>,
}

impl ObjectTable {
    /// A table holding only the root.
    pub fn new(root: FileHandle) -> ObjectTable {
        let table = ObjectTable::default();
        {
            let mut inner = table.lock();
            inner.by_handle.insert(root.clone(), Ino::ROOT);
            inner.by_ino.insert(Ino::ROOT, Node { handle: root, kind: Kind::Dir, lookups: 1, unlinked: false });
            inner.next_private = PRIVATE_INO_BASE;
        }
        table
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the maps consistent (every
        // mutation is a single insert/remove), so a poisoned lock is usable.
        crate::poison::lock(&self.inner, "the object table")
    }

    /// The inode number of the object with this handle, registering it if
    /// new. `backing_ino` is preferred as the number. When `count_lookup`,
    /// the kernel now holds one more reference.
    pub fn intern(&self, handle: FileHandle, backing_ino: u64, kind: Kind, count_lookup: bool) -> Ino {
        let mut inner = self.lock();
        if let Some(&ino) = inner.by_handle.get(&handle) {
            if let Some(node) = inner.by_ino.get_mut(&ino) {
                if count_lookup {
                    node.lookups += 1;
                }
                node.kind = kind;
                node.unlinked = false;
            }
            return ino;
        }
        let preferred = Ino(backing_ino);
        let ino = if backing_ino > 1 && backing_ino < PRIVATE_INO_BASE && !inner.by_ino.contains_key(&preferred) {
            preferred
        } else {
            let ino = Ino(inner.next_private);
            inner.next_private += 1;
            ino
        };
        inner.by_handle.insert(handle.clone(), ino);
        inner.by_ino.insert(ino, Node { handle, kind, lookups: u64::from(count_lookup), unlinked: false });
        ino
    }

    /// The handle and kind of an inode number the kernel gave us.
    pub fn get(&self, ino: Ino) -> Option<(FileHandle, Kind)> {
        self.lock().by_ino.get(&ino).map(|n| (n.handle.clone(), n.kind))
    }

    /// The inode number already given to a handle, if any.
    pub fn ino_of(&self, handle: &FileHandle) -> Option<Ino> {
        self.lock().by_handle.get(handle).copied()
    }

    /// Whether the object lost its last name in the tree.
    pub fn is_unlinked(&self, ino: Ino) -> bool {
        self.lock().by_ino.get(&ino).is_some_and(|n| n.unlinked)
    }

    /// The kernel dropped `n` references; true when it holds none any more.
    pub fn forget(&self, ino: Ino, n: u64) -> bool {
        if ino == Ino::ROOT {
            return false;
        }
        let mut inner = self.lock();
        let (forgotten, remove) = match inner.by_ino.get_mut(&ino) {
            Some(node) => {
                node.lookups = node.lookups.saturating_sub(n);
                (node.lookups == 0, node.lookups == 0 && node.unlinked)
            }
            None => (true, false),
        };
        if remove {
            Self::remove_locked(&mut inner, ino);
        }
        forgotten
    }

    /// The object lost its last name.
    pub fn mark_unlinked(&self, ino: Ino) {
        let mut inner = self.lock();
        let remove = match inner.by_ino.get_mut(&ino) {
            Some(node) => {
                node.unlinked = true;
                node.lookups == 0
            }
            None => false,
        };
        if remove && ino != Ino::ROOT {
            Self::remove_locked(&mut inner, ino);
        }
    }

    fn remove_locked(inner: &mut Inner, ino: Ino) {
        if let Some(node) = inner.by_ino.remove(&ino) {
            inner.by_handle.remove(&node.handle);
        }
    }

    /// Number of objects known (for status and tests).
    pub fn len(&self) -> usize {
        self.lock().by_ino.len()
    }

    /// Whether only... nothing is known (never true: the root is always there).
    pub fn is_empty(&self) -> bool {
        self.lock().by_ino.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(n: u8) -> FileHandle {
        FileHandle::from_bytes(&[1, 0, 0, 0, n, n, n, n]).unwrap()
    }

    #[test]
    fn backing_inode_number_is_preferred_and_stable() {
        let t = ObjectTable::new(handle(0));
        let a = t.intern(handle(1), 100, Kind::File, true);
        assert_eq!(a, Ino(100));
        assert_eq!(t.intern(handle(1), 100, Kind::File, true), Ino(100));
        t.forget(a, 2);
        // Forgotten but not unlinked: the number stays.
        assert_eq!(t.ino_of(&handle(1)), Some(Ino(100)));
    }

    #[test]
    fn reused_inode_number_gets_a_private_number() {
        let t = ObjectTable::new(handle(0));
        let a = t.intern(handle(1), 100, Kind::File, true);
        t.mark_unlinked(a);
        // The kernel still holds the old file; a new file reuses inode 100.
        let b = t.intern(handle(2), 100, Kind::File, true);
        assert_ne!(a, b);
        assert!(b.0 >= PRIVATE_INO_BASE);
        t.forget(a, 1);
        assert_eq!(t.get(a), None, "unlinked and forgotten objects are dropped");
        assert!(t.get(b).is_some());
    }

    #[test]
    fn root_is_never_forgotten() {
        let t = ObjectTable::new(handle(0));
        t.forget(Ino::ROOT, 10);
        t.mark_unlinked(Ino::ROOT);
        assert!(t.get(Ino::ROOT).is_some());
    }
}
