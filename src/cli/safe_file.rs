//! Files the CLI writes, often as root, in directories another user may
//! write: a project's `.claude/`, `.gemini/` or `.codex/` belongs to
//! whoever owns the workspace, the agent included. A name planted there as
//! a symlink must never lead root's write, chmod or rename to a file
//! elsewhere, so every name below a trusted directory is opened from a
//! directory descriptor without following symlinks, new files get an
//! unpredictable name created exclusively, their mode is set on the
//! descriptor, and the final rename stays within that directory.

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::error::{Error, ErrorKind, Failure};

/// How many unpredictable temporary names are tried before giving up: each
/// is taken only by someone who guessed 64 random bits.
const TEMP_TRIES: u64 = 16;

/// Why a file could not be read or written safely.
#[derive(Debug, thiserror::Error)]
pub enum SafeFileError {
    #[error(
        "{}: is a symlink; rewindfs does not follow one where others may have planted it: \
         replace it by the file or directory itself, or edit the settings by hand",
        path.display()
    )]
    Symlink { path: PathBuf },
    #[error("{}: is not {want}", path.display())]
    NotA { path: PathBuf, want: &'static str },
    #[error("cannot {action} {}: {source}", path.display())]
    Io { action: &'static str, path: PathBuf, source: std::io::Error },
}

impl From<SafeFileError> for Error {
    fn from(e: SafeFileError) -> Error {
        match e {
            SafeFileError::Symlink { .. } => {
                Error::Failure(Failure::new(ErrorKind::Refused, Some(libc::ELOOP), e.to_string()))
            }
            SafeFileError::NotA { .. } => Error::Failure(Failure::new(ErrorKind::Usage, None, e.to_string())),
            SafeFileError::Io { action, path, source } => {
                Error::io(format!("cannot {action} {}", path.display()), source)
            }
        }
    }
}

type Result<T> = std::result::Result<T, SafeFileError>;

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(Errno) -> SafeFileError + 'a {
    move |e| SafeFileError::Io { action, path: path.to_path_buf(), source: e.into() }
}

/// A directory held open: names in it are resolved from the descriptor,
/// never through the path again.
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

/// What an existing file held.
pub struct Existing {
    pub text: String,
    /// Its permission bits (no set-id bits), for the file that replaces it.
    pub mode: u32,
}

impl Dir {
    /// Opens `base` as named (a directory the caller chose: the project the
    /// owner gave, the user's own settings directory), then each directory
    /// of `below` in turn without following a symlink, making a missing one
    /// (0777 less the umask) when `create`. None when one is missing and
    /// not to be made.
    pub fn open(base: &Path, below: &[&OsStr], create: bool) -> Result<Option<Dir>> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = match rustix::fs::open(base, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) if !create => return Ok(None),
            Err(e) => return Err(io("open", base)(e)),
        };
        let mut dir = Dir { fd, path: base.to_path_buf() };
        for name in below {
            let path = dir.path.join(name);
            if create {
                match rustix::fs::mkdirat(&dir.fd, *name, Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(io("create", &path)(e)),
                }
            }
            let fd = match rustix::fs::openat(&dir.fd, *name, flags | OFlags::NOFOLLOW, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::NOENT) if !create => return Ok(None),
                Err(Errno::LOOP | Errno::NOTDIR) => return Err(dir.not_followed(name, "a directory")),
                Err(e) => return Err(io("open", &path)(e)),
            };
            dir = Dir { fd, path };
        }
        Ok(Some(dir))
    }

    /// The directory that holds `path`, opened as [`Dir::open`] does with
    /// `path`'s directories below `base`; the file's name with it.
    pub fn of_file(base: &Path, path: &Path, create: bool) -> Result<(Option<Dir>, OsString)> {
        let rel = path.strip_prefix(base).unwrap_or(path);
        let mut parts: Vec<&OsStr> = rel.iter().collect();
        let name = parts.pop().unwrap_or_default().to_os_string();
        if name.is_empty() || parts.iter().any(|p| p.as_bytes() == b".." || p.as_bytes() == b"/") {
            return Err(SafeFileError::NotA { path: path.to_path_buf(), want: "a file below its directory" });
        }
        Ok((Dir::open(base, &parts, create)?, name))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The error for `name`, which an open without following refused: a
    /// symlink, named as such, or something else than `want`.
    fn not_followed(&self, name: &OsStr, want: &'static str) -> SafeFileError {
        let path = self.path.join(name);
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => SafeFileError::Symlink { path },
            _ => SafeFileError::NotA { path, want },
        }
    }

    /// The text of `name`, None when it does not exist. A symlink or
    /// anything but a regular file is refused (a FIFO would block).
    pub fn read(&self, name: &OsStr) -> Result<Option<Existing>> {
        let path = self.path.join(name);
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(&self.fd, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP) => return Err(self.not_followed(name, "a regular file")),
            Err(e) => return Err(io("open", &path)(e)),
        };
        let st = rustix::fs::fstat(&fd).map_err(io("read", &path))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(SafeFileError::NotA { path, want: "a regular file" });
        }
        let mut text = String::new();
        std::fs::File::from(fd).read_to_string(&mut text).map_err(|source| SafeFileError::Io {
            action: "read",
            path: path.clone(),
            source,
        })?;
        Ok(Some(Existing { text, mode: st.st_mode & 0o777 }))
    }

    /// Replaces `name` with `bytes`, mode `mode`: written to a new file of
    /// an unpredictable name (created exclusively, never through a
    /// symlink), its mode set on the descriptor, synced, then renamed over
    /// `name` within this directory (a symlink at `name` is replaced, not
    /// followed).
    pub fn replace(&self, name: &OsStr, bytes: &[u8], mode: u32) -> Result<()> {
        let path = self.path.join(name);
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let (temp, fd) = (0..TEMP_TRIES)
            .find_map(|salt| {
                let mut temp = name.to_os_string();
                temp.push(format!(".rewindfs-tmp-{:016x}", crate::restore::random_u64(salt)));
                match rustix::fs::openat(&self.fd, &temp, flags, Mode::from_raw_mode(0o600)) {
                    Err(Errno::EXIST) => None,
                    other => Some((temp, other)),
                }
            })
            .ok_or_else(|| SafeFileError::Io {
                action: "find a free temporary name beside",
                path: path.clone(),
                source: std::io::Error::from_raw_os_error(libc::EEXIST),
            })?;
        let fd = fd.map_err(io("create a temporary file beside", &path))?;
        let write = || -> std::io::Result<()> {
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode & 0o777))?;
            let mut file = std::fs::File::from(fd);
            file.write_all(bytes)?;
            file.sync_all()?;
            Ok(rustix::fs::renameat(&self.fd, &temp, &self.fd, name)?)
        };
        write().map_err(|source| {
            let _ = rustix::fs::unlinkat(&self.fd, &temp, AtFlags::empty());
            SafeFileError::Io { action: "write", path, source }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_is_neither_read_nor_written_through_nor_walked() {
        let d = tempfile::tempdir().expect("tempdir");
        let outside = d.path().join("outside");
        std::fs::write(&outside, "{}").expect("write");
        let base = d.path().join("p");
        std::fs::create_dir_all(base.join("real")).expect("mkdir");
        std::os::unix::fs::symlink(&outside, base.join("real/f.json")).expect("symlink");
        std::os::unix::fs::symlink(d.path(), base.join("link")).expect("symlink");
        let dir = Dir::open(&base, &[OsStr::new("real")], false).expect("open").expect("exists");
        assert!(matches!(dir.read(OsStr::new("f.json")), Err(SafeFileError::Symlink { .. })));
        assert!(matches!(Dir::open(&base, &[OsStr::new("link")], true), Err(SafeFileError::Symlink { .. })));
        assert!(Dir::open(&base, &[OsStr::new("missing")], false).expect("open").is_none());
        dir.replace(OsStr::new("f.json"), b"new", 0o640).expect("replace");
        assert_eq!(std::fs::read_to_string(&outside).expect("read"), "{}", "written through the symlink");
        let got = dir.read(OsStr::new("f.json")).expect("read").expect("exists");
        assert_eq!((got.text.as_str(), got.mode), ("new", 0o640));
        let names: Vec<_> =
            std::fs::read_dir(base.join("real")).expect("ls").map(|e| e.expect("e").file_name()).collect();
        assert_eq!(names, vec![OsString::from("f.json")], "a temporary file was left");
    }
}
