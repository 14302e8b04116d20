//! How the live tree opens an object it knows by file handle: the one
//! place that decides it, behind [`ObjectOpener`].
//!
//! The daemon opens by handle (`open_by_handle_at`, [`Opener::ByHandle`]):
//! no descriptor is kept per object, which the 20,000-descriptor limit
//! requires, but it needs CAP_DAC_READ_SEARCH in the initial user
//! namespace. [`Opener::HeldDescriptors`] needs no privilege: it keeps an
//! `O_PATH` descriptor for every object it has met and reopens through
//! `/proc/self/fd`. A descriptor per object is what the limit forbids on a
//! real tree, so it is chosen explicitly (the in-process model tier run
//! without root), never by the daemon.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Mutex;

use rustix::fs::{Mode, OFlags};

use crate::sys::{self, FileHandle};

/// Which opener a live tree uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Opener {
    /// `open_by_handle_at` (needs CAP_DAC_READ_SEARCH): the daemon's.
    #[default]
    ByHandle,
    /// A kept `O_PATH` descriptor per object, reopened through
    /// `/proc/self/fd`: no privilege, one descriptor per object.
    HeldDescriptors,
}

impl Opener {
    pub(crate) fn build(self) -> Box<dyn ObjectOpener> {
        match self {
            Opener::ByHandle => Box::new(ByHandle),
            Opener::HeldDescriptors => Box::new(HeldDescriptors::default()),
        }
    }
}

/// Opens objects by handle on the backing filesystem. An object that no
/// longer exists answers ESTALE, as `open_by_handle_at` does.
pub(crate) trait ObjectOpener: Send + Sync + std::fmt::Debug {
    /// Checks, when the tree is opened, that its objects can be opened;
    /// `root` is the workspace directory (not `O_PATH`).
    fn start(&self, root: BorrowedFd<'_>, root_handle: &FileHandle) -> std::io::Result<()>;
    /// Objects are also looked for under `dir` (the attic), besides the tree.
    fn also_under(&self, dir: BorrowedFd<'_>) -> std::io::Result<()>;
    /// Opens the object `handle` names, with `flags`.
    fn open(&self, root: BorrowedFd<'_>, handle: &FileHandle, flags: i32) -> std::io::Result<OwnedFd>;
}

#[derive(Debug)]
struct ByHandle;

impl ObjectOpener for ByHandle {
    fn start(&self, root: BorrowedFd<'_>, root_handle: &FileHandle) -> std::io::Result<()> {
        // Checked now, not at the first lookup.
        sys::open_by_handle_at(root, root_handle, libc::O_PATH).map(drop)
    }

    fn also_under(&self, _dir: BorrowedFd<'_>) -> std::io::Result<()> {
        Ok(())
    }

    fn open(&self, root: BorrowedFd<'_>, handle: &FileHandle, flags: i32) -> std::io::Result<OwnedFd> {
        sys::open_by_handle_at(root, handle, flags)
    }
}

/// An `O_PATH` descriptor per object met, by handle. An object is met by a
/// walk of the tree and the attic when a handle is not known yet (the
/// handles a reopened store names, and every object made since the last
/// walk), so no caller has to announce the handles it makes.
///
/// A kept descriptor keeps its inode alive after its last name goes, where
/// the kernel would free it and `open_by_handle_at` answer ESTALE: an
/// object with no name left answers ESTALE here too, and its descriptor is
/// let go. (An object with no name that a client still holds open opens
/// by handle in the daemon, and answers ESTALE here.)
#[derive(Debug, Default)]
struct HeldDescriptors {
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    by_handle: HashMap<FileHandle, OwnedFd>,
    /// Where objects are looked for: the tree's root, the attic.
    roots: Vec<OwnedFd>,
}

const PATH_FLAGS: OFlags = OFlags::PATH.union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

impl Held {
    /// Keeps a descriptor for every object under each root.
    fn walk(&mut self) -> std::io::Result<()> {
        let mut stack = Vec::new();
        for root in &self.roots {
            stack.push(rustix::fs::openat(root, ".", PATH_FLAGS | OFlags::DIRECTORY, Mode::empty())?);
        }
        while let Some(dir) = stack.pop() {
            let listing = match rustix::fs::openat(
                &dir,
                ".",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => fd,
                // Removed while walked (a concurrent rmdir): nothing under it.
                Err(_) => continue,
            };
            let mut listing = rustix::fs::Dir::new(listing)?;
            while let Some(entry) = listing.read() {
                let entry = entry?;
                let name = OsStr::from_bytes(entry.file_name().to_bytes());
                if name == "." || name == ".." {
                    continue;
                }
                // Opened first, then its handle taken from the descriptor:
                // a name changed in between cannot pair one object's
                // handle with another's descriptor.
                let Ok(fd) = rustix::fs::openat(&dir, name, PATH_FLAGS, Mode::empty()) else { continue };
                let Ok(handle) = sys::name_to_handle_at(fd.as_fd(), OsStr::new("")) else { continue };
                let is_dir = rustix::fs::fstat(&fd).is_ok_and(|s| s.st_mode & libc::S_IFMT == libc::S_IFDIR);
                if is_dir {
                    stack.push(reopen(fd.as_fd(), PATH_FLAGS.bits() as i32)?);
                }
                self.by_handle.entry(handle).or_insert(fd);
            }
        }
        Ok(())
    }
}

/// Opens the object behind `fd` again, through `/proc/self/fd` (which an
/// `O_PATH` descriptor allows; the magic link leads to a symlink itself,
/// not its target).
fn reopen(fd: BorrowedFd<'_>, flags: i32) -> std::io::Result<OwnedFd> {
    let flags = OFlags::from_bits_retain(flags as u32 & !OFlags::NOFOLLOW.bits()) | OFlags::CLOEXEC;
    Ok(rustix::fs::open(sys::proc_fd_path(fd).as_c_str(), flags, Mode::empty())?)
}

impl ObjectOpener for HeldDescriptors {
    fn start(&self, root: BorrowedFd<'_>, root_handle: &FileHandle) -> std::io::Result<()> {
        let mut held = crate::poison::lock(&self.held, "the held descriptors");
        held.by_handle.insert(root_handle.clone(), reopen(root, PATH_FLAGS.bits() as i32)?);
        held.roots.push(reopen(root, PATH_FLAGS.bits() as i32)?);
        Ok(())
    }

    fn also_under(&self, dir: BorrowedFd<'_>) -> std::io::Result<()> {
        let mut held = crate::poison::lock(&self.held, "the held descriptors");
        held.roots.push(reopen(dir, PATH_FLAGS.bits() as i32)?);
        Ok(())
    }

    fn open(&self, _root: BorrowedFd<'_>, handle: &FileHandle, flags: i32) -> std::io::Result<OwnedFd> {
        let mut held = crate::poison::lock(&self.held, "the held descriptors");
        if !held.by_handle.contains_key(handle) {
            held.walk()?;
        }
        let Some(fd) = held.by_handle.get(handle) else {
            return Err(std::io::Error::from_raw_os_error(libc::ESTALE));
        };
        // No name left: the kernel would have freed it.
        if rustix::fs::fstat(fd)?.st_nlink == 0 {
            held.by_handle.remove(handle);
            return Err(std::io::Error::from_raw_os_error(libc::ESTALE));
        }
        reopen(fd.as_fd(), flags)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(dir: BorrowedFd<'_>, name: &str) -> FileHandle {
        sys::name_to_handle_at(dir, OsStr::new(name)).expect("handle")
    }

    /// What the held opener answers where the daemon's would: an object
    /// made after it started and moved since, a symlink (itself, not its
    /// target), one in the attic, one removed (ESTALE).
    #[test]
    fn held_descriptors_open_what_open_by_handle_at_opens() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let (ws, attic) = (tmp.path().join("ws"), tmp.path().join("attic"));
        std::fs::create_dir_all(ws.join("d")).expect("mkdir");
        std::fs::create_dir(&attic).expect("mkdir");
        let root = rustix::fs::open(&ws, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).expect("open");
        let attic_fd = rustix::fs::open(&attic, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).expect("open");
        let opener = Opener::HeldDescriptors.build();
        opener.start(root.as_fd(), &handle(root.as_fd(), "")).expect("start");
        opener.also_under(attic_fd.as_fd()).expect("attic");

        // Made after the start: found by a walk, then followed across a rename.
        std::fs::write(ws.join("d/f"), b"bytes").expect("write");
        let f = handle(root.as_fd(), "d/f");
        std::fs::rename(ws.join("d/f"), ws.join("g")).expect("rename");
        let fd = opener.open(root.as_fd(), &f, libc::O_RDONLY).expect("open the moved file");
        let mut buf = [0u8; 5];
        assert_eq!(rustix::io::read(&fd, &mut buf).expect("read"), 5);
        assert_eq!(&buf, b"bytes");

        std::os::unix::fs::symlink("nowhere", ws.join("s")).expect("symlink");
        let s = handle(root.as_fd(), "s");
        let fd = opener.open(root.as_fd(), &s, libc::O_PATH | libc::O_NOFOLLOW).expect("open the symlink");
        let st = rustix::fs::fstat(&fd).expect("fstat");
        assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFLNK, "the link itself");

        std::fs::write(attic.join("1"), b"").expect("write");
        let a = handle(attic_fd.as_fd(), "1");
        assert!(opener.open(root.as_fd(), &a, libc::O_PATH).is_ok(), "an object in the attic");

        std::fs::remove_file(ws.join("g")).expect("unlink");
        let gone = opener.open(root.as_fd(), &f, libc::O_PATH).expect_err("a removed object");
        assert_eq!(gone.raw_os_error(), Some(libc::ESTALE));
        let d = handle(root.as_fd(), "d");
        assert!(opener.open(root.as_fd(), &d, libc::O_PATH | libc::O_DIRECTORY).is_ok(), "a directory");
        std::fs::remove_dir(ws.join("d")).expect("rmdir");
        let gone = opener.open(root.as_fd(), &d, libc::O_PATH).expect_err("a removed directory");
        assert_eq!(gone.raw_os_error(), Some(libc::ESTALE));
    }
}
