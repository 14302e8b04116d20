//! What a read-only view mount serves from, by inode number: the answers
//! the FUSE adapter (`crate::fs::view`) turns into replies. Two sources
//! implement it: a checkpoint of a local workspace (`browse::Locked`, a
//! [`Browser`](super::browse::Browser) read under the tree lock) and a
//! checkpoint of a remote read from its manifest (`crate::remote::show`).

use std::ffi::{OsStr, OsString};

use super::ViewResult;
use crate::workspace::{Attr, FsStats, Ino, Kind};

/// An entry of a view directory.
#[derive(Clone, Debug)]
pub struct BrowseEntry {
    pub name: OsString,
    pub ino: Ino,
    pub kind: Kind,
}

/// A read-only tree numbered by inode. Lookups and readdirplus entries
/// take one kernel reference each, given back by `forget` (as FUSE counts
/// them); a plain `readdir` takes none.
pub trait ViewSource {
    /// Looks `name` up in directory `dir`.
    fn lookup(&self, dir: Ino, name: &OsStr) -> ViewResult<Attr>;
    /// The kernel forgot `nlookup` references to `ino`.
    fn forget(&self, ino: Ino, nlookup: u64);
    fn getattr(&self, ino: Ino) -> ViewResult<Attr>;
    /// The entries of a directory, "." and ".." first.
    fn readdir(&self, dir: Ino) -> ViewResult<Vec<BrowseEntry>>;
    /// A listing with attributes: `add(index, entry, attr)` for each entry
    /// from `offset` ("." and ".." at 0 and 1) until it returns false.
    fn readdir_plus(
        &self,
        dir: Ino,
        offset: usize,
        add: &mut dyn FnMut(usize, &BrowseEntry, &Attr) -> bool,
    ) -> ViewResult<()>;
    /// Up to `size` bytes of a file from `offset`.
    fn read(&self, ino: Ino, offset: u64, size: u32) -> ViewResult<Vec<u8>>;
    fn readlink(&self, ino: Ino) -> ViewResult<Vec<u8>>;
    /// Extended attributes, name and value.
    fn xattrs(&self, ino: Ino) -> ViewResult<Vec<(Vec<u8>, Vec<u8>)>>;
    fn statfs(&self) -> ViewResult<FsStats>;
    /// Whether what `ino` is (or, for a directory, what it lists) may
    /// change while mounted: the kernel caches it briefly then, for long
    /// otherwise (a checkpoint never changes).
    fn may_change(&self, ino: Ino) -> bool;
}
