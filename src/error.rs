//! Errors: the crate error enum with context, and the errno a filesystem
//! operation answers with. `Error::errno` is the one place errors become
//! errnos.

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

impl From<io::Error> for Errno {
    fn from(e: io::Error) -> Errno {
        Errno(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

impl From<rustix::io::Errno> for Errno {
    fn from(e: rustix::io::Errno) -> Errno {
        Errno(e.raw_os_error())
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

    /// The errno this error is reported as by a filesystem operation.
    pub fn errno(&self) -> Errno {
        match self {
            Error::Io { source, .. } => source.raw_os_error().map(Errno).unwrap_or(Errno::EIO),
            Error::Errno(e) => *e,
            Error::Usage(_) | Error::Path { .. } => Errno::EINVAL,
            Error::Daemon(_) => Errno::EIO,
        }
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

impl From<Errno> for Error {
    fn from(e: Errno) -> Error {
        Error::Errno(e)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_mapping_table() {
        let cases: Vec<(Error, i32)> = vec![
            (Error::io("x", io::Error::from_raw_os_error(libc::ENOSPC)), libc::ENOSPC),
            (Error::io("x", io::Error::other("no errno")), libc::EIO),
            (Error::Errno(Errno::EROFS), libc::EROFS),
            (Error::Usage("bad".into()), libc::EINVAL),
            (Error::Daemon("gone".into()), libc::EIO),
        ];
        for (err, want) in cases {
            assert_eq!(err.errno(), Errno(want), "{err}");
        }
    }

    #[test]
    fn exit_codes() {
        assert_eq!(Error::Usage("x".into()).exit_code(), 2);
        assert_eq!(Error::path("/x", "missing").exit_code(), 2);
        assert_eq!(Error::Daemon("x".into()).exit_code(), 1);
    }
}
