//! The changes a rewind makes to the backing tree, as a small set of
//! recorded operations. Each one records what it is about to change (entry
//! and object pre-images, the attic table) before changing it, so the
//! rewind cannot forget a record: it has no other way to rename, link or
//! unlink in the tree. A multi-step operation that fails part-way puts
//! back what its earlier steps changed.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};

use crate::error::{AsErrno, Errno};
use crate::journal::Journal;
use crate::meta::ObjectId;
use crate::sys::FileHandle;
use crate::workspace::attr::{Caller, Kind};
use crate::workspace::backing;
use crate::workspace::capture::kind_code;
use crate::workspace::live::LiveTree;

type Res<T> = std::result::Result<T, Errno>;

/// What `move_aside` did with a name.
#[derive(Debug, PartialEq, Eq)]
pub enum Aside {
    /// One of several names of a file: removed, the file lives on.
    Unlinked,
    /// The object (a whole subtree for a directory) is in its attic slot.
    InAttic,
}

/// A new regular file to swap in: its permission bits, owner, size,
/// modification time and xattrs.
pub struct NewFile<'s> {
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub mtime_ns: i64,
    pub xattrs: &'s [(Vec<u8>, Vec<u8>)],
}

/// The recorded operations, for one rewind (one caller, one journal).
pub struct RewindOps<'a> {
    tree: &'a LiveTree,
    journal: &'a Journal,
    caller: Caller,
}

fn open_path(dir: BorrowedFd<'_>, name: &OsStr) -> Res<OwnedFd> {
    Ok(rustix::fs::openat(dir, name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?)
}

impl<'a> RewindOps<'a> {
    pub fn new(tree: &'a LiveTree, journal: &'a Journal, caller: Caller) -> RewindOps<'a> {
        RewindOps { tree, journal, caller }
    }

    /// Records that (dir, name) is about to change (and the directory's
    /// attributes), as every writer does.
    fn entry(&self, dir: BorrowedFd<'_>, name: &OsStr) -> Res<()> {
        self.tree.capture(self.journal).entry(dir, name, self.caller)
    }

    /// The object at `name` leaves the tree: one of several names of a file
    /// is removed; anything else moves, whole, into its attic slot `obj`.
    pub fn move_aside(&self, dir: BorrowedFd<'_>, name: &OsStr, obj: ObjectId) -> Res<Aside> {
        self.entry(dir, name)?;
        self.tree.capture(self.journal).named(dir, name, false, self.caller)?;
        let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR && st.st_nlink > 1 {
            rustix::fs::unlinkat(dir, name, AtFlags::empty())?;
            return Ok(Aside::Unlinked);
        }
        if !self.tree.attic().move_in(dir, name, obj)? {
            log::error!("rewind: attic slot {} is taken", obj.0);
            return Err(Errno(libc::EEXIST));
        }
        Ok(Aside::InAttic)
    }

    /// Object `obj` comes back from its attic slot to `name` in `dir`.
    /// `Ok(false)`: the slot is empty.
    pub fn bring_back(&self, obj: ObjectId, dir: BorrowedFd<'_>, name: &OsStr) -> Res<bool> {
        self.entry(dir, name)?;
        // The move changes the object's ctime, and no entry record names it
        // (its old name is the attic's): its attributes are recorded, as
        // `link_back` does, so that after a crash before the rewind ends
        // the next mount does not take the rewind's own move for a change
        // made outside rewindfs.
        if let Some(attic) = self.tree.attic().fd() {
            let slot = obj.0.to_string();
            self.tree.capture(self.journal).named(attic, OsStr::new(&slot), false, self.caller)?;
        }
        self.tree.attic().take_out(obj, dir, name)
    }

    /// A name inside a directory in the attic moves to `name` in `dir`.
    /// That directory is still an object of history (a checkpoint may hold
    /// it, e.g. the rewind's safety checkpoint): losing the name is a
    /// change to it, recorded.
    pub fn take_out(&self, from: BorrowedFd<'_>, from_name: &OsStr, dir: BorrowedFd<'_>, name: &OsStr) -> Res<()> {
        self.entry(dir, name)?;
        self.entry(from, from_name)?;
        rustix::fs::renameat_with(from, from_name, dir, name, RenameFlags::NOREPLACE)?;
        Ok(())
    }

    /// The live object behind `fd` gets `name` in `dir` as another hard
    /// link; its link count is part of its state, recorded first.
    pub fn link_back(&self, fd: BorrowedFd<'_>, obj: ObjectId, dir: BorrowedFd<'_>, name: &OsStr) -> Res<()> {
        self.entry(dir, name)?;
        let program = self.journal.program(self.caller.pid);
        self.tree.capture(self.journal).fd(fd, obj, false, program.as_deref())?;
        backing::link_fd(fd, dir, name)?;
        Ok(())
    }

    /// Removes a name of a file that has others (a stray link in a
    /// directory in the attic).
    pub fn unlink_link(&self, dir: BorrowedFd<'_>, name: &OsStr) -> Res<()> {
        self.entry(dir, name)?;
        self.tree.capture(self.journal).named(dir, name, false, self.caller)?;
        rustix::fs::unlinkat(dir, name, AtFlags::empty())?;
        Ok(())
    }

    /// Creates an object that no longer exists at `name` (a directory, a
    /// symlink, a device or fifo, or an empty regular file of `size`
    /// bytes); the caller gives it its identity and bytes.
    pub fn recreate(
        &self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        kind: Kind,
        perm: u32,
        size: u64,
        target: &[u8],
    ) -> Res<OwnedFd> {
        self.entry(dir, name)?;
        let mode = Mode::from_raw_mode(perm);
        match kind {
            Kind::Dir => rustix::fs::mkdirat(dir, name, mode)?,
            Kind::Symlink => rustix::fs::symlinkat(OsStr::from_bytes(target), dir, name)?,
            Kind::File => {
                let fd = rustix::fs::openat(
                    dir,
                    name,
                    OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
                    mode,
                )?;
                rustix::fs::ftruncate(&fd, size)?;
            }
            other => {
                let t = match other {
                    Kind::Fifo => rustix::fs::FileType::Fifo,
                    Kind::Socket => rustix::fs::FileType::Socket,
                    Kind::CharDevice => rustix::fs::FileType::CharacterDevice,
                    _ => rustix::fs::FileType::BlockDevice,
                };
                rustix::fs::mknodat(dir, name, t, mode, 0)?
            }
        }
        open_path(dir, name)
    }

    /// Swaps a new inode in at every name of object `id` (`old`, an
    /// `O_PATH` descriptor of it; `names`, all of its names in the tree):
    /// the new file gets its owner, mode and times while unnamed; the old
    /// inode moves from the first name to the attic as `id`, with its
    /// bytes, for history and for every descriptor that holds it; the new
    /// one takes that name, then each other name. Two directory operations
    /// for a file with one name, while the tree is frozen (nobody sees the
    /// name absent in between). Returns the new inode's handle (a new
    /// object, born in this turn). If a step fails, the names already
    /// swapped get the old inode back and the new one is removed.
    pub fn swap_in_new_inode(
        &self,
        id: ObjectId,
        old: BorrowedFd<'_>,
        names: &[(OwnedFd, OsString)],
        new: &NewFile<'_>,
    ) -> Res<FileHandle> {
        let Some(((dir0, name0), others)) = names.split_first() else { return Err(Errno(libc::EINVAL)) };
        for (dir, name) in names {
            self.entry(dir.as_fd(), name)?;
        }
        // Its link count changes (to one, in the attic).
        let program = self.journal.program(self.caller.pid);
        self.tree.capture(self.journal).fd(old, id, false, program.as_deref())?;
        // Made unnamed, and noted (durably: born in this turn) before it
        // gets a name: a crash can leave it in the tree only as an object
        // the journal knows for the daemon's own, never as one changed
        // outside rewindfs (which would make its state at every earlier
        // checkpoint unknown).
        let fd = rustix::fs::openat(
            dir0.as_fd(),
            ".",
            OFlags::WRONLY | OFlags::TMPFILE | OFlags::CLOEXEC,
            Mode::from_raw_mode(new.perm),
        )?;
        rustix::fs::ftruncate(&fd, new.size)?;
        for (n, v) in new.xattrs {
            backing::set_xattr(fd.as_fd(), OsStr::from_bytes(n), v, 0)?;
        }
        // Owner first: a change of owner clears the set-id bits. Best
        // effort, as for any file the rewind gives its attributes back.
        let _ =
            rustix::fs::fchown(&fd, Some(rustix::fs::Uid::from_raw(new.uid)), Some(rustix::fs::Gid::from_raw(new.gid)));
        let _ = rustix::fs::fchmod(&fd, Mode::from_raw_mode(new.perm));
        let t = rustix::fs::Timespec {
            tv_sec: new.mtime_ns.div_euclid(1_000_000_000),
            tv_nsec: new.mtime_ns.rem_euclid(1_000_000_000) as _,
        };
        let _ = rustix::fs::futimens(&fd, &rustix::fs::Timestamps { last_access: t, last_modification: t });
        let handle = backing::handle_of_fd(fd.as_fd())?;
        // Born in this rewind's turn: a later rewind to a checkpoint before
        // it must not take it for a file of that checkpoint (and refill it,
        // under the descriptors that may hold it by then).
        self.journal.note_born_durably(&handle, kind_code(Kind::File)).map_err(|e| e.errno())?;
        let in_attic = self.tree.attic().move_in(dir0.as_fd(), name0, id)?;
        if in_attic {
            // The old inode is in its attic slot, the name is free. A crash
            // here leaves the name absent with the move noted: the rewind
            // completed at the next mount brings the old inode back to the
            // name (the entry record says it was there), then swaps again.
            crate::faults::kill_point("rewind-swap-named");
            if let Err(e) = backing::link_fd(fd.as_fd(), dir0.as_fd(), name0) {
                self.give_back(id, dir0.as_fd(), name0);
                return Err(e);
            }
        } else {
            // No attic slot for it (taken by another of its names, or no
            // attic): the new inode replaces the name through a temporary
            // one, recorded as absent so that a crash leaving it behind
            // cannot show it in this turn's checkpoint (recovery moves it
            // away); the old inode keeps only its other names.
            let temp = free_name(dir0.as_fd(), format!(".rewindfs-rewind-{}", id.0));
            self.entry(dir0.as_fd(), &temp)?;
            backing::link_fd(fd.as_fd(), dir0.as_fd(), &temp)?;
            crate::faults::kill_point("rewind-swap-named");
            if let Err(e) = rustix::fs::renameat(dir0.as_fd(), &temp, dir0.as_fd(), name0) {
                let _ = rustix::fs::unlinkat(dir0.as_fd(), &temp, AtFlags::empty());
                return Err(e.into());
            }
        }
        crate::faults::kill_point("rewind-swapped");
        let mut swapped = 0usize;
        let mut failed = None;
        for (i, (dir, name)) in others.iter().enumerate() {
            let step = (|| -> Res<()> {
                let t = free_name(dir.as_fd(), format!(".rewindfs-rewind-{}-{}", id.0, i + 1));
                self.entry(dir.as_fd(), &t)?;
                if crate::faults::fail_point("rewind-swap-link") {
                    return Err(Errno(libc::EIO));
                }
                backing::link_fd(fd.as_fd(), dir.as_fd(), &t)?;
                if let Err(e) = rustix::fs::renameat(dir.as_fd(), &t, dir.as_fd(), name) {
                    let _ = rustix::fs::unlinkat(dir.as_fd(), &t, AtFlags::empty());
                    return Err(e.into());
                }
                Ok(())
            })();
            match step {
                Ok(()) => swapped += 1,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = failed {
            let back = if in_attic { &others[..swapped] } else { &names[..=swapped] };
            self.undo_swap(id, old, back);
            if in_attic {
                // The new inode leaves the first name, the old comes back.
                match rustix::fs::unlinkat(dir0.as_fd(), name0, AtFlags::empty()) {
                    Ok(()) => self.give_back(id, dir0.as_fd(), name0),
                    Err(e) => {
                        log::error!("rewind: cannot remove the new inode of {:?} to give the old one back: {e}", name0)
                    }
                }
            }
            return Err(e);
        }
        Ok(handle)
    }

    /// The old inode of object `id`, in its attic slot, back at the free
    /// name `name` in `dir`.
    fn give_back(&self, id: ObjectId, dir: BorrowedFd<'_>, name: &OsStr) {
        match self.tree.attic().take_out(id, dir, name) {
            Ok(true) => {}
            Ok(false) => log::error!("rewind: the old inode of {:?} is not in attic slot {}", name, id.0),
            Err(e) => log::error!("rewind: cannot give {:?} its old inode back: {e}", name),
        }
    }

    /// Undoes a swap that failed part-way: the names in `swapped` get the
    /// old inode (`old`) back, through a temporary name each.
    fn undo_swap(&self, id: ObjectId, old: BorrowedFd<'_>, swapped: &[(OwnedFd, OsString)]) {
        for (i, (dir, name)) in swapped.iter().enumerate() {
            let t = free_name(dir.as_fd(), format!(".rewindfs-rewind-{}-{}", id.0, i + 1));
            let back = backing::link_fd(old, dir.as_fd(), &t)
                .and_then(|()| Ok(rustix::fs::renameat(dir.as_fd(), &t, dir.as_fd(), name)?));
            if let Err(e) = back {
                let _ = rustix::fs::unlinkat(dir.as_fd(), &t, AtFlags::empty());
                log::error!("rewind: cannot give {:?} its old inode back: {e}", name);
            }
        }
    }
}

/// `base` if no name `base` is in `dir`, else the first free `base.N`: a
/// temporary name of the rewind must not be one the tree holds (a file a
/// rewind to an interrupted checkpoint brought back, or one the agent
/// made to stop rewinds). The tree is frozen: nobody takes it meanwhile.
fn free_name(dir: BorrowedFd<'_>, base: String) -> OsString {
    let taken = |n: &OsStr| rustix::fs::statat(dir, n, AtFlags::SYMLINK_NOFOLLOW).is_ok();
    let first = OsString::from(&base);
    if !taken(&first) {
        return first;
    }
    (1u64..).map(|k| OsString::from(format!("{base}.{k}"))).find(|n| !taken(n)).expect("some name is free")
}
