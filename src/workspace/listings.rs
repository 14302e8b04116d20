//! Directory listings served by offset, with no open directory behind
//! them: the kernel does not send `OPENDIR` or `RELEASEDIR` (the daemon
//! answers the first `OPENDIR` with ENOSYS), and caches each listing
//! itself (`FOPEN_CACHE_DIR` is its default then), so a listing reaches
//! the daemon only the first time and after a change.
//!
//! A listing read from offset 0 is a snapshot of the directory, kept under
//! a number that the offsets handed out carry (`number << 32 | index`):
//! a reader that goes on from an offset gets the rest of the same snapshot,
//! whatever was added or removed since, as with an open directory. The
//! snapshot is dropped once it has been read to its end, or when
//! `SNAPSHOTS_KEPT` newer ones exist (a reader that stopped half-way); a
//! reader coming back after that gets the rest of a fresh listing from the
//! same index.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use crate::workspace::attr::Ino;
use crate::workspace::open_files::DirEntry;

type Res<T> = std::result::Result<T, crate::error::Errno>;

/// Listings kept for readers part-way through them.
const SNAPSHOTS_KEPT: usize = 256;

/// The part of a listing to serve from an offset.
#[derive(Debug)]
pub struct DirPage {
    /// The whole snapshot; serve it from `start`.
    pub entries: Arc<Vec<DirEntry>>,
    pub start: usize,
    number: u32,
}

impl DirPage {
    /// The offset to give with `entries[index]`: where the next read goes on.
    pub fn offset_after(&self, index: usize) -> u64 {
        (u64::from(self.number) << 32) | (index as u64 + 1)
    }
}

#[derive(Debug, Default)]
pub struct Listings {
    inner: Mutex<Snapshots>,
}

#[derive(Debug, Default)]
struct Snapshots {
    by_number: HashMap<u32, (Ino, Arc<Vec<DirEntry>>)>,
    /// Oldest first.
    order: VecDeque<u32>,
    next: u32,
}

impl Listings {
    /// The listing of directory `dir` from `offset` (0, or one handed out by
    /// `DirPage::offset_after`); `list` reads the directory (outside the
    /// lock) when no snapshot serves the offset.
    pub fn page(&self, dir: Ino, offset: u64, list: impl FnOnce() -> Res<Vec<DirEntry>>) -> Res<DirPage> {
        let (number, index) = ((offset >> 32) as u32, (offset & 0xffff_ffff) as usize);
        if offset != 0 {
            let mut s = crate::poison::lock(&self.inner, "the directory listings");
            let kept = s.by_number.get(&number).filter(|(d, _)| *d == dir).map(|(_, e)| e.clone());
            if let Some(entries) = kept {
                if index >= entries.len() {
                    // Read to its end: the reader's last request.
                    s.by_number.remove(&number);
                    s.order.retain(|n| *n != number);
                }
                return Ok(DirPage { entries, start: index, number });
            }
        }
        let entries = Arc::new(list()?);
        let mut s = crate::poison::lock(&self.inner, "the directory listings");
        // Below 2^31: an offset stays positive as the kernel's signed one.
        let number = s.next & 0x7fff_ffff;
        s.next = s.next.wrapping_add(1);
        if s.order.len() >= SNAPSHOTS_KEPT
            && let Some(oldest) = s.order.pop_front()
        {
            s.by_number.remove(&oldest);
        }
        s.by_number.insert(number, (dir, entries.clone()));
        s.order.push_back(number);
        if offset != 0 {
            log::debug!("listing of {dir:?} read again to go on from index {index} (its snapshot was dropped)");
        }
        Ok(DirPage { entries, start: index, number })
    }

    /// How many snapshots are kept.
    #[cfg(test)]
    fn kept(&self) -> usize {
        crate::poison::lock(&self.inner, "the directory listings").by_number.len()
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use super::*;
    use crate::workspace::attr::Kind;

    fn entries(names: &[&str]) -> Vec<DirEntry> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| DirEntry { name: OsString::from(n), ino: Ino(i as u64 + 10), kind: Kind::File })
            .collect()
    }

    /// Reads the whole listing of `dir` two entries per request, as the
    /// kernel does page by page, with `between` run after every request.
    fn read_all(l: &Listings, dir: Ino, now: &dyn Fn() -> Vec<DirEntry>, between: &mut dyn FnMut()) -> Vec<OsString> {
        let (mut out, mut offset) = (Vec::new(), 0);
        loop {
            let page = l.page(dir, offset, || Ok(now())).expect("page");
            let sent: Vec<usize> = (page.start..page.entries.len()).take(2).collect();
            if sent.is_empty() {
                return out;
            }
            for &i in &sent {
                out.push(page.entries[i].name.clone());
                offset = page.offset_after(i);
            }
            between();
        }
    }

    #[test]
    fn a_reader_going_on_gets_the_rest_of_its_own_snapshot() {
        let l = Listings::default();
        let names = std::cell::RefCell::new(vec!["a", "b", "c", "d", "e"]);
        let now = || entries(&names.borrow());
        // Every request in between, the directory changes and a second
        // reader lists it from the start.
        let mut changes = 0;
        let got = read_all(&l, Ino(1), &now, &mut || {
            changes += 1;
            names.borrow_mut().insert(0, if changes == 1 { "x" } else { "y" });
            let _ = l.page(Ino(1), 0, || Ok(now())).expect("second reader");
        });
        assert_eq!(got, ["a", "b", "c", "d", "e"].map(OsString::from));
        // The finished reader's snapshot is gone; the second reader's are
        // bounded.
        assert!(l.kept() <= SNAPSHOTS_KEPT);
        let again = read_all(&l, Ino(1), &now, &mut || {});
        assert_eq!(again.len(), names.borrow().len());
    }

    #[test]
    fn offsets_are_positive_and_never_zero() {
        let l = Listings::default();
        for _ in 0..3 {
            let page = l.page(Ino(2), 0, || Ok(entries(&["a"]))).expect("page");
            let off = page.offset_after(0);
            assert!(off > 0 && off < (1 << 63), "{off}");
        }
    }

    #[test]
    fn a_dropped_snapshot_is_read_again_from_the_same_index() {
        let l = Listings::default();
        let first = l.page(Ino(3), 0, || Ok(entries(&["a", "b", "c"]))).expect("page");
        let offset = first.offset_after(0);
        for _ in 0..SNAPSHOTS_KEPT {
            l.page(Ino(4), 0, || Ok(entries(&["z"]))).expect("other");
        }
        let rest = l.page(Ino(3), offset, || Ok(entries(&["a", "b", "c"]))).expect("again");
        assert_eq!(rest.start, 1);
        assert_eq!(rest.entries[rest.start].name, "b");
    }

    #[test]
    fn an_offset_of_another_directory_is_not_served_from_its_snapshot() {
        let l = Listings::default();
        let a = l.page(Ino(5), 0, || Ok(entries(&["a1", "a2"]))).expect("a");
        let b = l.page(Ino(6), a.offset_after(0), || Ok(entries(&["b1", "b2"]))).expect("b");
        assert_eq!(b.entries[b.start].name, "b2");
    }
}
