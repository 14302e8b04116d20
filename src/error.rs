//! Errors: the crate error enum with context, the errno a filesystem
//! operation answers with, and the kind of failure a command reports (which
//! decides its exit status). [`AsErrno`] is the one way an internal error
//! becomes an errno: every error type implements it here or next to its
//! definition (SQLite codes are mapped once, in `sqlite::sqlite_errno`), and
//! every FUSE reply goes through it. `ErrorKind::exit_status` is the one
//! place failures become exit statuses.

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

/// What went wrong, as far as the user of a command is concerned. Carried
/// over the control socket in every refusal, and mapped to the exit status
/// documented in docs/cli.md ("Exit status").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The request itself is wrong: bad arguments, an unknown or ambiguous
    /// checkpoint, a path that does not exist or is not where it must be.
    Usage,
    /// No rewindfs mount there, or its daemon does not answer.
    NoMount,
    /// The mount, workspace or store is in use (busy unmount, already
    /// mounted, locked by another daemon).
    Busy,
    /// The caller is not allowed to do this (permission).
    Refused,
    /// A valid request that could not be carried out: an I/O or storage
    /// error (ENOSPC, EIO, damaged content), a restore or rewind that
    /// failed part-way, a daemon that failed to start.
    Failed,
    /// A bug: a malformed message, a broken invariant.
    Internal,
}

impl ErrorKind {
    /// Every kind, for tests and documentation.
    pub const ALL: [ErrorKind; 6] = [
        ErrorKind::Usage,
        ErrorKind::NoMount,
        ErrorKind::Busy,
        ErrorKind::Refused,
        ErrorKind::Failed,
        ErrorKind::Internal,
    ];

    /// The process exit status of a command that failed this way.
    pub fn exit_status(self) -> i32 {
        match self {
            ErrorKind::Failed | ErrorKind::Internal => 1,
            ErrorKind::Usage => 2,
            ErrorKind::NoMount => 3,
            ErrorKind::Busy => 4,
            ErrorKind::Refused => 5,
        }
    }

    /// The name used on the wire and in docs/cli.md.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Usage => "usage",
            ErrorKind::NoMount => "no_mount",
            ErrorKind::Busy => "busy",
            ErrorKind::Refused => "refused",
            ErrorKind::Failed => "failed",
            ErrorKind::Internal => "internal",
        }
    }
}

/// A structured error: what a daemon answers when it refuses or fails a
/// request, and what the CLI turns into a message and an exit status.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    pub kind: ErrorKind,
    /// The errno behind it, when there is one (ENOSPC for a full disk).
    #[serde(default)]
    pub errno: Option<i32>,
    /// One line for a person.
    pub message: String,
}

impl AsErrno for Failure {
    fn errno(&self) -> Errno {
        Errno(self.errno.unwrap_or(libc::EIO))
    }
}

impl Failure {
    pub fn new(kind: ErrorKind, errno: Option<i32>, message: impl Into<String>) -> Failure {
        Failure { kind, errno, message: message.into() }
    }

    pub fn usage(message: impl Into<String>) -> Failure {
        Failure::new(ErrorKind::Usage, Some(libc::EINVAL), message)
    }

    /// An operation that could not be done because of `errno`.
    pub fn failed(errno: i32, message: impl Into<String>) -> Failure {
        Failure::new(ErrorKind::Failed, Some(errno), message)
    }

    pub fn internal(message: impl Into<String>) -> Failure {
        Failure::new(ErrorKind::Internal, None, message)
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
    /// A failure whose kind is known (from the daemon, or decided here).
    #[error(transparent)]
    Failure(#[from] Failure),
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

    /// A failure of `kind` with no errno.
    pub fn kind_of(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error::Failure(Failure::new(kind, None, message))
    }

    /// What kind of failure this is for the user of a command.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Usage(_) | Error::Path { .. } => ErrorKind::Usage,
            Error::Io { .. } | Error::Errno(_) | Error::Daemon(_) => ErrorKind::Failed,
            Error::Failure(f) => f.kind,
        }
    }

    /// The process exit status for a command that failed with this error.
    pub fn exit_code(&self) -> i32 {
        self.kind().exit_status()
    }

    /// This error as a structured failure (what a daemon answers).
    pub fn to_failure(&self) -> Failure {
        match self {
            Error::Failure(f) => f.clone(),
            other => Failure::new(other.kind(), Some(other.errno().0), other.to_string()),
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
            Error::Failure(f) => f.errno.map(Errno).unwrap_or(Errno::EIO),
        }
    }
}

impl From<Errno> for Error {
    fn from(e: Errno) -> Error {
        Error::Errno(e)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a caught panic said, for a log line or a status message.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The crate's own error types; every other module's error type has
    /// its table beside it.
    #[test]
    fn errno_mapping_table() {
        let io = |n| io::Error::from_raw_os_error(n);
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
        assert_eq!(Error::io("x", io::Error::from_raw_os_error(libc::ENOSPC)).exit_code(), 1);
        assert_eq!(Error::kind_of(ErrorKind::NoMount, "x").exit_code(), 3);
        assert_eq!(Error::from(Failure::failed(libc::ENOSPC, "full")).exit_code(), 1);
    }

    /// The rows `| status | kind | ... |` of the "Exit status" table in
    /// docs/cli.md.
    fn documented_statuses() -> Vec<(i32, String)> {
        let doc = include_str!("../docs/cli.md");
        let section = doc.split("## Exit status").nth(1).expect("docs/cli.md has an \"Exit status\" section");
        let section = section.split("\n## ").next().unwrap_or(section);
        section
            .lines()
            .filter_map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                let status = cells.get(1)?.parse::<i32>().ok()?;
                let kind = cells.get(2)?.trim_matches('`');
                // Success has no kind.
                (!kind.is_empty()).then(|| (status, kind.to_string()))
            })
            .collect()
    }

    #[test]
    fn every_error_kind_maps_to_its_documented_status() {
        let documented = documented_statuses();
        assert!(!documented.is_empty(), "no exit status rows found in docs/cli.md");
        for kind in ErrorKind::ALL {
            let rows: Vec<i32> = documented.iter().filter(|(_, k)| k == kind.name()).map(|(s, _)| *s).collect();
            assert_eq!(rows, vec![kind.exit_status()], "docs/cli.md's exit status for kind {}", kind.name());
            // The wire name is the documented name.
            assert_eq!(serde_json::to_value(kind).ok(), Some(serde_json::Value::from(kind.name())));
        }
        for (status, name) in &documented {
            assert!(
                ErrorKind::ALL.iter().any(|k| k.name() == name && k.exit_status() == *status),
                "docs/cli.md documents exit status {status} for unknown kind {name:?}"
            );
        }
    }

    #[test]
    fn failures_round_trip_over_the_wire() {
        let f = Failure::failed(libc::ENOSPC, "rewind failed part-way");
        let text = serde_json::to_string(&f).expect("encode");
        assert_eq!(text, r#"{"kind":"failed","errno":28,"message":"rewind failed part-way"}"#);
        let back: Failure = serde_json::from_str(&text).expect("decode");
        assert_eq!(back, f);
        assert_eq!(Error::from(back).exit_code(), 1);
    }
}
