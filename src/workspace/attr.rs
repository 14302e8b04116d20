//! Attributes of objects in the live tree, in our own types (no `fuser`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::Stat;

/// Inode number shown to the kernel and to `stat`. Stable for the life of
/// a mount: it is the backing inode number unless that is taken by another
/// object the kernel still knows.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct Ino(pub u64);

impl Ino {
    /// The root of the mount (FUSE requires 1).
    pub const ROOT: Ino = Ino(1);
}

/// What kind of object a name refers to.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

impl Kind {
    /// The compact code stored in the database for each kind (the one
    /// encoding; `from_code` is the one decoding).
    pub fn code(self) -> u8 {
        match self {
            Kind::File => 1,
            Kind::Dir => 2,
            Kind::Symlink => 3,
            Kind::Fifo => 4,
            Kind::Socket => 5,
            Kind::CharDevice => 6,
            Kind::BlockDevice => 7,
        }
    }

    /// From a stored code; an unknown code reads as a regular file.
    pub fn from_code(code: u8) -> Kind {
        match code {
            2 => Kind::Dir,
            3 => Kind::Symlink,
            4 => Kind::Fifo,
            5 => Kind::Socket,
            6 => Kind::CharDevice,
            7 => Kind::BlockDevice,
            _ => Kind::File,
        }
    }

    /// From the `S_IFMT` bits of a mode.
    pub fn from_mode(mode: u32) -> Kind {
        match mode & libc::S_IFMT {
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFLNK => Kind::Symlink,
            libc::S_IFIFO => Kind::Fifo,
            libc::S_IFSOCK => Kind::Socket,
            libc::S_IFCHR => Kind::CharDevice,
            libc::S_IFBLK => Kind::BlockDevice,
            _ => Kind::File,
        }
    }

    /// From a `d_type` of a directory entry, if known.
    pub fn from_dirent(file_type: rustix::fs::FileType) -> Option<Kind> {
        use rustix::fs::FileType as T;
        Some(match file_type {
            T::RegularFile => Kind::File,
            T::Directory => Kind::Dir,
            T::Symlink => Kind::Symlink,
            T::Fifo => Kind::Fifo,
            T::Socket => Kind::Socket,
            T::CharacterDevice => Kind::CharDevice,
            T::BlockDevice => Kind::BlockDevice,
            _ => return None,
        })
    }
}

/// The attributes of one object, as `stat` reports them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Attr {
    pub ino: Ino,
    pub kind: Kind,
    /// Permission bits including setuid, setgid and sticky (no type bits).
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub size: u64,
    pub blocks: u64,
    pub blksize: u32,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
}

/// A time in nanoseconds since the epoch.
pub fn time_of_ns(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

fn time(sec: i64, nsec: i64) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs(sec.unsigned_abs()) + Duration::from_nanos(nsec as u64)
    }
}

impl Attr {
    /// Attributes of something that has no backing inode (a synthetic
    /// directory, a negative entry): owned by root, empty, dated `time`.
    pub fn synthetic(ino: Ino, kind: Kind, perm: u16, nlink: u32, time: SystemTime) -> Attr {
        Attr {
            ino,
            kind,
            perm,
            nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            size: 0,
            blocks: 0,
            blksize: 4096,
            atime: time,
            mtime: time,
            ctime: time,
        }
    }

    /// Converts a backing `stat`, giving it our inode number.
    pub fn from_stat(ino: Ino, st: &Stat) -> Attr {
        Attr {
            ino,
            kind: Kind::from_mode(st.st_mode),
            perm: (st.st_mode & 0o7777) as u16,
            nlink: st.st_nlink as u32,
            uid: st.st_uid,
            gid: st.st_gid,
            rdev: st.st_rdev as u32,
            size: st.st_size as u64,
            blocks: st.st_blocks as u64,
            blksize: st.st_blksize as u32,
            atime: time(st.st_atime, st.st_atime_nsec as i64),
            mtime: time(st.st_mtime, st.st_mtime_nsec as i64),
            ctime: time(st.st_ctime, st.st_ctime_nsec as i64),
        }
    }
}

/// A time to set: a given instant, or "now" as the kernel sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetTime {
    At(SystemTime),
    Now,
}

/// The changes a `setattr` asks for; `None` leaves a field alone.
#[derive(Clone, Copy, Debug, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
}

/// Who is asking: the FUSE request's credentials and process.
#[derive(Clone, Copy, Debug)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_from_mode() {
        assert_eq!(Kind::from_mode(libc::S_IFDIR | 0o755), Kind::Dir);
        assert_eq!(Kind::from_mode(libc::S_IFLNK | 0o777), Kind::Symlink);
        assert_eq!(Kind::from_mode(libc::S_IFREG | 0o644), Kind::File);
        assert_eq!(Kind::from_mode(libc::S_IFIFO), Kind::Fifo);
    }

    #[test]
    fn negative_times_convert() {
        let t = time(-1, 500_000_000);
        assert_eq!(UNIX_EPOCH.duration_since(t).unwrap(), Duration::from_millis(500));
    }
}
