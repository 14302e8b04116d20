//! Where a rewind looks for a file the kernel cannot name.
//!
//! A rewind finds where a live file is from the kernel's path of its
//! descriptor (`/proc/self/fd/N`). Once the file's dentry has left the
//! kernel's cache (memory pressure, a `drop_caches`), opening it by handle
//! gives a disconnected dentry whose path is "/" and says nothing. Then the
//! rewind looks where the journal says the changes are: the directories
//! whose names changed since the checkpoint, the paths the sealed turns
//! since then changed, and the directories moved aside whole into the
//! attic since then. Each of these places is listed once per rewind into
//! an [`Index`], the first time a file needs it; every place it gives is
//! checked against the file's handle before use, since the rewind moves
//! names after the listing. (Directories need none of this: the kernel
//! reconnects a directory it opens by handle, so its path is right.)

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags};

use crate::sys::FileHandle;
use crate::workspace::backing;

/// An inode, as (device, inode number).
pub(crate) type Key = (u64, u64);

/// Names of non-directories by inode, each as (handle of its directory,
/// name), from the directories and paths added.
#[derive(Default)]
pub(crate) struct Index {
    names: HashMap<Key, Vec<(FileHandle, OsString)>>,
    /// Directories listed already, by inode.
    listed: HashSet<Key>,
}

impl Index {
    /// The names recorded for `key` (none when it was not met).
    pub fn names_of(&self, key: Key) -> &[(FileHandle, OsString)] {
        self.names.get(&key).map(Vec::as_slice).unwrap_or_default()
    }

    /// Records `name` in `dir`, with its `st`, if it is not a directory.
    pub fn add(&mut self, dir: BorrowedFd<'_>, name: &OsStr, st: &rustix::fs::Stat) {
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            return;
        }
        if let Ok(h) = backing::handle_of_fd(dir) {
            self.names.entry((st.st_dev, st.st_ino)).or_default().push((h, name.to_os_string()));
        }
    }

    /// Records every non-directory in `dir` (once per directory). What
    /// cannot be listed or examined is passed over: the index is where to
    /// look first, not the last word.
    pub fn add_dir(&mut self, dir: BorrowedFd<'_>) {
        let Ok(st) = rustix::fs::fstat(dir) else { return };
        if !self.listed.insert((st.st_dev, st.st_ino)) {
            return;
        }
        let Ok(listing) = crate::rewind::open_dir(dir, OsStr::new(".")) else { return };
        let Ok(entries) = rustix::fs::Dir::read_from(&listing) else { return };
        let mut names = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(OsString::from(OsStr::from_bytes(name)));
            }
        }
        for name in names {
            if let Ok(st) = rustix::fs::statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
                self.add(dir, &name, &st);
            }
        }
    }

    /// Records the names of the non-directories in `wanted` everywhere
    /// below `root` but in the directory `skip` (the attic, when it is in
    /// the tree): one walk of the whole tree for all of them. Opens one
    /// descriptor per directory still to list.
    pub fn add_tree(
        &mut self,
        root: BorrowedFd<'_>,
        skip: Option<Key>,
        wanted: &HashSet<Key>,
    ) -> rustix::io::Result<()> {
        let mut stack = vec![crate::rewind::open_dir(root, OsStr::new("."))?];
        while let Some(dir) = stack.pop() {
            let mut names = Vec::new();
            for entry in rustix::fs::Dir::read_from(&dir)? {
                let name = entry?.file_name().to_bytes().to_vec();
                if name != b"." && name != b".." {
                    names.push(OsString::from(OsStr::from_bytes(&name)));
                }
            }
            for name in names {
                let Ok(st) = rustix::fs::statat(&dir, &name, AtFlags::SYMLINK_NOFOLLOW) else { continue };
                let key = (st.st_dev, st.st_ino);
                if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                    if wanted.contains(&key) {
                        self.add(dir.as_fd(), &name, &st);
                    }
                } else if Some(key) != skip
                    && let Ok(sub) = crate::rewind::open_dir(dir.as_fd(), &name)
                {
                    stack.push(sub);
                }
            }
        }
        Ok(())
    }

    /// Records what is at `path` (relative to `root`, no symlink
    /// followed): a non-directory itself, a directory's non-directories.
    /// A path that no longer leads anywhere is passed over.
    pub fn add_path(&mut self, root: BorrowedFd<'_>, path: &Path) {
        let names: Vec<&OsStr> = path.iter().collect();
        let Some((last, parents)) = names.split_last() else { return self.add_dir(root) };
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut dir: Option<OwnedFd> = None;
        for name in parents {
            let at = dir.as_ref().map(|d| d.as_fd()).unwrap_or(root);
            let Ok(next) = rustix::fs::openat(at, *name, flags, Mode::empty()) else { return };
            dir = Some(next);
        }
        let at = dir.as_ref().map(|d| d.as_fd()).unwrap_or(root);
        let Ok(st) = rustix::fs::statat(at, *last, AtFlags::SYMLINK_NOFOLLOW) else { return };
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            self.add(at, last, &st);
        } else if let Ok(sub) = rustix::fs::openat(at, *last, flags, Mode::empty()) {
            self.add_dir(sub.as_fd());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(path: &Path) -> Key {
        let st = rustix::fs::lstat(path).unwrap();
        (st.st_dev, st.st_ino)
    }

    fn names(index: &Index, path: &Path) -> Vec<String> {
        let mut out: Vec<String> =
            index.names_of(key_of(path)).iter().map(|(_, n)| n.to_string_lossy().into_owned()).collect();
        out.sort();
        out
    }

    #[test]
    fn an_index_holds_the_names_of_files_in_the_directories_and_paths_added() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("a/sub")).unwrap();
        std::fs::create_dir_all(root.join("b")).unwrap();
        std::fs::write(root.join("a/f"), "f").unwrap();
        std::fs::hard_link(root.join("a/f"), root.join("a/g")).unwrap();
        std::fs::write(root.join("a/sub/deep"), "d").unwrap();
        std::fs::write(root.join("b/x"), "x").unwrap();
        std::fs::write(root.join("b/y"), "y").unwrap();
        std::fs::write(root.join("top"), "t").unwrap();
        let root_fd = rustix::fs::open(root, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();

        let mut index = Index::default();
        index.add_path(root_fd.as_fd(), Path::new("a"));
        index.add_path(root_fd.as_fd(), Path::new("b/x"));
        index.add_path(root_fd.as_fd(), Path::new("gone/x"));
        // Listed once, however often it is added.
        index.add_path(root_fd.as_fd(), Path::new("a"));
        assert_eq!(names(&index, &root.join("a/f")), ["f", "g"]);
        assert_eq!(names(&index, &root.join("b/x")), ["x"]);
        // Neither below a directory added nor beside a path added.
        assert!(names(&index, &root.join("a/sub/deep")).is_empty());
        assert!(names(&index, &root.join("b/y")).is_empty());
        assert!(names(&index, &root.join("top")).is_empty());
        assert!(names(&index, &root.join("a/sub")).is_empty(), "directories are not indexed");

        let mut walked = Index::default();
        let wanted = HashSet::from([key_of(&root.join("a/f")), key_of(&root.join("a/sub/deep"))]);
        walked.add_tree(root_fd.as_fd(), Some(key_of(&root.join("b"))), &wanted).unwrap();
        assert_eq!(names(&walked, &root.join("a/f")), ["f", "g"]);
        assert_eq!(names(&walked, &root.join("a/sub/deep")), ["deep"]);
        assert!(names(&walked, &root.join("top")).is_empty(), "only the files wanted");
        walked
            .add_tree(root_fd.as_fd(), Some(key_of(&root.join("b"))), &HashSet::from([key_of(&root.join("b/x"))]))
            .unwrap();
        assert!(names(&walked, &root.join("b/x")).is_empty(), "a skipped directory is not walked");

        index.add_path(root_fd.as_fd(), Path::new(""));
        assert_eq!(names(&index, &root.join("top")), ["top"]);
        let (dir, _) = &index.names_of(key_of(&root.join("b/x")))[0];
        let b = rustix::fs::open(root.join("b"), OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        assert_eq!(Some(dir), backing::handle_of_fd(b.as_fd()).ok().as_ref(), "the directory's handle");
    }
}
