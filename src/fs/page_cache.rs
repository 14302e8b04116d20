//! Small files opened read-only are read through the kernel's page cache,
//! not by passthrough: after a passthrough read the kernel counts the
//! file's atime stale and asks the daemon for its attributes at the next
//! `stat` (one round trip per file read, for every `grep -r` and the
//! `git status` after it), while a read served from the page cache asks
//! nothing. Their first read goes through the daemon; later opens keep the
//! pages (`FOPEN_KEEP_CACHE`) while nothing wrote the file since.
//!
//! The kernel keeps one I/O mode per inode: while any open of it is
//! passthrough, every other open must be too, and while any open uses the
//! page cache, none can be passthrough. So a read-only open uses the page
//! cache only when no passthrough open of the inode is in use, and a
//! writable open made while page-cache opens are in use goes through the
//! daemon (`FOPEN_DIRECT_IO`), whose writes then drop the pages they
//! change. This table is kept under the same lock as the passthrough
//! backing ids, so that the two decisions never cross.

use std::collections::HashMap;

use crate::sys::FileHandle as ObjectHandle;
use crate::workspace::{Fh, Ino};

/// Files up to this size, opened read-only, are read through the page
/// cache: one or a few reads through the daemon the first time. Larger
/// ones stay passthrough (native read speed).
pub(super) const PAGE_CACHE_MAX: u64 = 256 * 1024;

/// The page-cache opens of each inode, and whether its pages are current.
#[derive(Default)]
pub(super) struct PageCacheOpens {
    by_ino: HashMap<Ino, Cached>,
    by_fh: HashMap<Fh, Ino>,
}

struct Cached {
    /// The object the pages are of (an inode number can come to stand for
    /// another object).
    object: ObjectHandle,
    open: usize,
    /// Nothing wrote the file since its pages were read.
    current: bool,
}

impl PageCacheOpens {
    /// Whether page-cache opens of `ino` are in use.
    pub(super) fn in_use(&self, ino: Ino) -> bool {
        self.by_ino.get(&ino).is_some_and(|c| c.open > 0)
    }

    /// A read-only open `fh` of `object` at `ino` uses the page cache:
    /// whether the pages the kernel may hold are still the file's
    /// (then kept; otherwise the kernel drops them at this open).
    pub(super) fn open(&mut self, ino: Ino, fh: Fh, object: &ObjectHandle) -> bool {
        let c = self.by_ino.entry(ino).or_insert_with(|| Cached { object: object.clone(), open: 0, current: false });
        if c.object != *object {
            *c = Cached { object: object.clone(), open: c.open, current: false };
        }
        let keep = c.current;
        c.current = true;
        c.open += 1;
        self.by_fh.insert(fh, ino);
        keep
    }

    /// `ino`'s content changes (a writable open, a truncation, a write
    /// through the daemon): the pages read before are not kept by the
    /// next open.
    pub(super) fn written(&mut self, ino: Ino) {
        if let Some(c) = self.by_ino.get_mut(&ino) {
            c.current = false;
        }
    }

    /// The open `fh` is closed.
    pub(super) fn release(&mut self, fh: Fh) {
        if let Some(ino) = self.by_fh.remove(&fh)
            && let Some(c) = self.by_ino.get_mut(&ino)
        {
            c.open = c.open.saturating_sub(1);
        }
    }

    /// The kernel forgot `ino`, and its pages with it.
    pub(super) fn forget(&mut self, ino: Ino) {
        if self.by_ino.get(&ino).is_some_and(|c| c.open == 0) {
            self.by_ino.remove(&ino);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(n: u8) -> ObjectHandle {
        ObjectHandle::from_bytes(&[n; 8]).expect("a handle")
    }

    #[test]
    fn pages_are_kept_until_the_file_is_written() {
        let mut t = PageCacheOpens::default();
        assert!(!t.open(Ino(5), Fh(1), &object(1)), "nothing read yet");
        assert!(t.in_use(Ino(5)));
        t.release(Fh(1));
        assert!(!t.in_use(Ino(5)));
        assert!(t.open(Ino(5), Fh(2), &object(1)), "read, not written since");
        t.release(Fh(2));
        t.written(Ino(5));
        assert!(!t.open(Ino(5), Fh(3), &object(1)), "written since");
        t.release(Fh(3));
        assert!(t.open(Ino(5), Fh(4), &object(1)));
    }

    #[test]
    fn another_object_at_the_same_number_does_not_get_the_pages() {
        let mut t = PageCacheOpens::default();
        t.open(Ino(7), Fh(1), &object(1));
        t.release(Fh(1));
        assert!(!t.open(Ino(7), Fh(2), &object(2)));
        t.release(Fh(2));
        assert!(t.open(Ino(7), Fh(3), &object(2)));
    }

    #[test]
    fn a_forgotten_inode_starts_again_and_one_in_use_is_not_forgotten() {
        let mut t = PageCacheOpens::default();
        t.open(Ino(9), Fh(1), &object(1));
        t.forget(Ino(9));
        assert!(t.in_use(Ino(9)), "still open");
        t.release(Fh(1));
        t.forget(Ino(9));
        assert!(!t.open(Ino(9), Fh(2), &object(1)), "forgotten with its pages");
    }
}
