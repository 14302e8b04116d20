//! Errors: the crate error enum with context, and the errno a filesystem
//! operation answers with. [`AsErrno`] is the one way an internal error
//! becomes an errno: every error type implements it here or next to its
//! definition (SQLite codes are mapped once, in `meta::sqlite_errno`), and
//! every FUSE reply goes through it.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// An errno value as the kernel would return it from a filesystem call.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Errno(pub i32);

impl Errno {
    pub const EIO: Errno = Errno(libc::EIO);
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    pub const EBADF: Errno = Errno(libc::EBADF);
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const EROFS: Errno = Errno(libc::EROFS);
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);
    pub const EPERM: Errno = Errno(libc::EPERM);
    pub const EACCES: Errno = Errno(libc::EACCES);
    pub const EEXIST: Errno = Errno(libc::EEXIST);
    pub const ERANGE: Errno = Errno(libc::ERANGE);
    pub const ESTALE: Errno = Errno(libc::ESTALE);
    pub const ENOTDIR: Errno = Errno(libc::ENOTDIR);
    pub const ENOSPC: Errno = Errno(libc::ENOSPC);
}

/// The errno an error answers a filesystem call with. An error without an
/// OS cause (corrupt data, a malformed record, a bug) is EIO.
pub trait AsErrno {
    fn errno(&self) -> Errno;
}

impl<E: AsErrno + ?Sized> AsErrno for &E {
    fn errno(&self) -> Errno {
        (**self).errno()
    }
}

impl AsErrno for Errno {
    fn errno(&self) -> Errno {
        *self
    }
}

impl AsErrno for io::Error {
    fn errno(&self) -> Errno {
        self.raw_os_error().map(Errno).unwrap_or(Errno::EIO)
    }
}

impl AsErrno for rustix::io::Errno {
    fn errno(&self) -> Errno {
        Errno(self.raw_os_error())
    }
}

impl From<io::Error> for Errno {
    fn from(e: io::Error) -> Errno {
        e.errno()
    }
}

impl From<rustix::io::Errno> for Errno {
    fn from(e: rustix::io::Errno) -> Errno {
        e.errno()
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", io::Error::from_raw_os_error(self.0))
    }
}

/// Errors surfaced by rewindfs commands and the daemon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
    #[error("filesystem operation failed: {0}")]
    Errno(Errno),
    #[error("{0}")]
    Usage(String),
    #[error("{path}: {message}")]
    Path { path: PathBuf, message: String },
    #[error("{0}")]
    Daemon(String),
}

impl Error {
    /// An I/O error with a sentence saying what was being done.
    pub fn io(context: impl Into<String>, source: io::Error) -> Error {
        Error::Io { context: context.into(), source }
    }

    /// A problem with a path given by the user.
    pub fn path(path: impl Into<PathBuf>, message: impl Into<String>) -> Error {
        Error::Path { path: path.into(), message: message.into() }
    }

    /// The process exit status for a command that failed with this error:
    /// 2 for problems with what the user asked (usage, paths, environment),
    /// 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) | Error::Path { .. } => 2,
            _ => 1,
        }
    }
}

impl AsErrno for Error {
    fn errno(&self) -> Errno {
        match self {
            Error::Io { source, .. } => source.errno(),
            Error::Errno(e) => *e,
            Error::Usage(_) | Error::Path { .. } => Errno::EINVAL,
            Error::Daemon(_) => Errno::EIO,
        }
    }
}

impl From<Errno> for Error {
    fn from(e: Errno) -> Error {
        Error::Errno(e)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every internal error type, through the one boundary.
    #[test]
    fn errno_mapping_table() {
        use crate::journal::JournalError;
        use crate::meta::sqlite_failure;
        use crate::restore::RestoreError;
        use crate::store::{ChunkId, StoreError};
        use crate::view::ViewError;
        let io = |n| io::Error::from_raw_os_error(n);
        let chunk = ChunkId::from_slice(&[0u8; 32]).expect("a chunk id");
        let store_sqlite = |code| match sqlite_failure(code) {
            crate::meta::MetaError::Sqlite { source, .. } => StoreError::Sqlite { context: "t".into(), source },
            _ => unreachable!(),
        };
        let cases: Vec<(Box<dyn AsErrno>, i32, &str)> = vec![
            (Box::new(Errno::EROFS), libc::EROFS, "errno"),
            (Box::new(io(libc::ENOSPC)), libc::ENOSPC, "io"),
            (Box::new(io::Error::other("no errno")), libc::EIO, "io without errno"),
            (Box::new(rustix::io::Errno::NAMETOOLONG), libc::ENAMETOOLONG, "rustix"),
            (Box::new(Error::io("x", io(libc::ENOSPC))), libc::ENOSPC, "Error::Io"),
            (Box::new(Error::io("x", io::Error::other("no errno"))), libc::EIO, "Error::Io without errno"),
            (Box::new(Error::Errno(Errno::EROFS)), libc::EROFS, "Error::Errno"),
            (Box::new(Error::Usage("bad".into())), libc::EINVAL, "Error::Usage"),
            (Box::new(Error::path("/x", "bad")), libc::EINVAL, "Error::Path"),
            (Box::new(Error::Daemon("gone".into())), libc::EIO, "Error::Daemon"),
            (Box::new(sqlite_failure(13)), libc::ENOSPC, "SQLITE_FULL"),
            (Box::new(sqlite_failure(10)), libc::EIO, "SQLITE_IOERR"),
            (Box::new(sqlite_failure(8)), libc::EROFS, "SQLITE_READONLY"),
            (Box::new(sqlite_failure(11)), libc::EIO, "SQLITE_CORRUPT"),
            (Box::new(store_sqlite(8)), libc::EROFS, "chunk index SQLITE_READONLY (was EIO)"),
            (Box::new(store_sqlite(13)), libc::ENOSPC, "chunk index SQLITE_FULL"),
            (Box::new(StoreError::io("append", io(libc::ENOSPC))), libc::ENOSPC, "store io"),
            (Box::new(StoreError::Poisoned), libc::EIO, "store poisoned"),
            (Box::new(StoreError::corrupt(chunk, "bad")), libc::EIO, "store corrupt"),
            (Box::new(JournalError::from(sqlite_failure(8))), libc::EROFS, "journal meta"),
            (Box::new(JournalError::from(StoreError::io("a", io(libc::ENOSPC)))), libc::ENOSPC, "journal store"),
            (Box::new(JournalError::Read { what: "log".into(), source: io(libc::EIO) }), libc::EIO, "journal read"),
            (
                Box::new(JournalError::UnknownCheckpoint { reference: "x".into(), known: String::new() }),
                libc::EIO,
                "journal unknown checkpoint",
            ),
            (Box::new(ViewError::Io(io(libc::ENOTDIR))), libc::ENOTDIR, "view io"),
            (Box::new(ViewError::Store(StoreError::io("a", io(libc::ENOSPC)))), libc::ENOSPC, "view store (was EIO)"),
            (Box::new(ViewError::Meta(sqlite_failure(8))), libc::EROFS, "view meta (was EIO)"),
            (Box::new(ViewError::Lost(crate::meta::ObjectId(1))), libc::EIO, "view lost"),
            (Box::new(RestoreError::Live { path: "a".into(), errno: Errno::EEXIST }), libc::EEXIST, "restore live"),
            (Box::new(RestoreError::BadPath("..".into())), libc::EINVAL, "restore bad path"),
        ];
        for (err, want, what) in cases {
            assert_eq!(err.errno(), Errno(want), "{what}");
        }
    }

    #[test]
    fn exit_codes() {
        assert_eq!(Error::Usage("x".into()).exit_code(), 2);
        assert_eq!(Error::path("/x", "missing").exit_code(), 2);
        assert_eq!(Error::Daemon("x".into()).exit_code(), 1);
    }
}
