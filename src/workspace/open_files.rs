//! Files opened by clients (FUSE's `fh`), and the calls that only need an
//! open file. Directories are not opened (`workspace::listings`).

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::Errno;
use crate::sys::FileHandle;
use crate::workspace::attr::{Ino, Kind};
use crate::workspace::backing;

type Res<T> = std::result::Result<T, Errno>;

/// A file opened by a client.
#[derive(Debug)]
pub struct OpenFile {
    pub ino: Ino,
    /// The object opened: `ino` names it for the life of the mount, and
    /// the handle says which backing inode that is.
    pub object: FileHandle,
    pub file: File,
    pub writable: bool,
}

/// One entry of a directory listing.
#[derive(Clone, Debug)]
pub struct DirEntry {
    pub name: OsString,
    pub ino: Ino,
    pub kind: Kind,
}

/// Identifies an open file (FUSE's `fh`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Fh(pub u64);

/// The open files of a tree.
#[derive(Debug)]
pub struct OpenFiles {
    files: Mutex<HashMap<Fh, Arc<OpenFile>>>,
    next_fh: AtomicU64,
}

impl Default for OpenFiles {
    fn default() -> OpenFiles {
        OpenFiles { files: Mutex::default(), next_fh: AtomicU64::new(1) }
    }
}

impl OpenFiles {
    fn new_fh(&self) -> Fh {
        Fh(self.next_fh.fetch_add(1, Ordering::Relaxed))
    }

    pub(crate) fn register(&self, ino: Ino, object: FileHandle, file: File, writable: bool) -> (Fh, Arc<OpenFile>) {
        let fh = self.new_fh();
        let open = Arc::new(OpenFile { ino, object, file, writable });
        crate::poison::lock(&self.files, "the open files").insert(fh, open.clone());
        (fh, open)
    }

    pub fn file(&self, fh: Fh) -> Res<Arc<OpenFile>> {
        crate::poison::lock(&self.files, "the open files").get(&fh).cloned().ok_or(Errno::EBADF)
    }

    /// Forgets an open file; the file, if it was open.
    pub(crate) fn remove(&self, fh: Fh) -> Option<Arc<OpenFile>> {
        crate::poison::lock(&self.files, "the open files").remove(&fh)
    }

    pub fn read(&self, fh: Fh, offset: u64, size: u32) -> Res<Vec<u8>> {
        let file = self.file(fh)?;
        let mut buf = vec![0u8; size as usize];
        let mut done = 0;
        while done < buf.len() {
            match file.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        }
        buf.truncate(done);
        Ok(buf)
    }

    pub fn fsync(&self, fh: Fh, datasync: bool) -> Res<()> {
        let file = self.file(fh)?;
        if datasync { file.file.sync_data() } else { file.file.sync_all() }.map_err(Errno::from)
    }

    pub fn fallocate(&self, fh: Fh, offset: u64, length: u64, mode: i32) -> Res<()> {
        let file = self.file(fh)?;
        let flags = rustix::fs::FallocateFlags::from_bits(mode as u32).ok_or(Errno(libc::EOPNOTSUPP))?;
        rustix::fs::fallocate(&file.file, flags, offset, length)?;
        Ok(())
    }

    pub fn lseek(&self, fh: Fh, offset: i64, whence: i32) -> Res<i64> {
        let file = self.file(fh)?;
        backing::lseek(file.file.as_fd(), offset, whence)
    }

    pub fn copy_file_range(&self, fh_in: Fh, off_in: u64, fh_out: Fh, off_out: u64, len: u64) -> Res<u32> {
        let src = self.file(fh_in)?;
        let dst = self.file(fh_out)?;
        let len = len.min(u32::MAX as u64 & !0xfff) as usize;
        backing::copy_file_range(src.file.as_fd(), off_in, dst.file.as_fd(), off_out, len)
    }
}
