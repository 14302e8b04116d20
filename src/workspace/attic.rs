//! The attic: a directory on the workspace's filesystem (in the store)
//! where the last name of a removed object is moved instead of being
//! deleted, so its content stays readable by handle for history at no
//! copying cost. Slots are named by object id; the journal's attic table
//! says which objects are there.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};

use crate::error::{AsErrno, Errno};
use crate::journal::Journal;
use crate::meta::ObjectId;

type Res<T> = std::result::Result<T, Errno>;

/// The attic of a tree; without a directory (the store is on another
/// filesystem), removed files are copied into the chunk store instead.
#[derive(Debug, Default)]
pub struct Attic {
    dir: Option<OwnedFd>,
    /// The attic table's keeper; `None` serves the tree without recording.
    journal: Option<Arc<Journal>>,
}

/// The object ids named by the attic's slots.
fn attic_slots(dir: &Path) -> std::io::Result<Vec<ObjectId>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        if let Some(id) = name.to_str().and_then(|n| n.parse::<i64>().ok()) {
            out.push(ObjectId(id));
        }
    }
    Ok(out)
}

impl Attic {
    /// No attic (yet).
    pub(crate) fn none(journal: Option<Arc<Journal>>) -> Attic {
        Attic { dir: None, journal }
    }

    /// Uses `dir` as the attic if it is on the filesystem of `root`
    /// (renames cannot cross filesystems); otherwise there is none.
    pub(crate) fn open(journal: Option<Arc<Journal>>, dir: &Path, root: BorrowedFd<'_>) -> crate::Result<Attic> {
        crate::store_dir::create_private_dir(dir)
            .map_err(|e| crate::Error::io(format!("cannot create attic {}", dir.display()), e))?;
        let fd = rustix::fs::open(dir, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| crate::Error::io(format!("cannot open attic {}", dir.display()), e.into()))?;
        let (a, w) = (rustix::fs::fstat(&fd), rustix::fs::fstat(root));
        match (a, w) {
            (Ok(a), Ok(w)) if a.st_dev == w.st_dev => {
                if let Some(journal) = &journal {
                    let slots = attic_slots(dir)
                        .map_err(|e| crate::Error::io(format!("cannot list attic {}", dir.display()), e))?;
                    let (removed, added) = journal.reconcile_attic_table(&slots).map_err(|e| {
                        crate::Error::io(
                            format!("cannot bring the attic table in line with {}: {e}", dir.display()),
                            io::Error::from_raw_os_error(e.errno().0),
                        )
                    })?;
                    if removed + added > 0 {
                        log::warn!(
                            "attic table brought in line with the attic's {} slots: {removed} rows of moves \
                             never made removed, {added} rows of slots added",
                            slots.len()
                        );
                    }
                }
                log::info!("removed files are moved to {} (same filesystem as the workspace)", dir.display());
                Ok(Attic { dir: Some(fd), journal })
            }
            _ => {
                log::info!(
                    "the store is on another filesystem than the workspace: removed files are copied into the chunk store before deletion"
                );
                Ok(Attic { dir: None, journal })
            }
        }
    }

    /// The attic directory, if removed files are moved there.
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.dir.as_ref().map(|f| f.as_fd())
    }

    /// Whether removed files are moved to the attic.
    pub fn exists(&self) -> bool {
        self.dir.is_some()
    }

    /// Whether an object is in its attic slot (removed from the tree), as
    /// the attic table says.
    pub fn holds(&self, id: ObjectId) -> bool {
        if self.dir.is_none() {
            return false;
        }
        match &self.journal {
            Some(j) => j.in_attic(id).unwrap_or_else(|e| {
                log::warn!("cannot read the attic table: {e}");
                false
            }),
            None => {
                self.fd().is_some_and(|a| rustix::fs::statat(a, id.0.to_string(), AtFlags::SYMLINK_NOFOLLOW).is_ok())
            }
        }
    }

    /// Moves `name` in `dir` to the attic as object `oid`. `Ok(false)` when
    /// there is no attic or the slot is taken (the caller then deletes).
    /// The move is noted in the attic table first (with the journal).
    pub(crate) fn move_in(&self, dir: BorrowedFd<'_>, name: &OsStr, oid: ObjectId) -> Res<bool> {
        let Some(attic) = self.fd() else { return Ok(false) };
        if let Some(j) = &self.journal {
            j.note_attic(oid).map_err(|e| e.errno())?;
        }
        // Killed with the move noted and not made.
        crate::faults::kill_point("attic-noted");
        let moved = match rustix::fs::renameat_with(dir, name, attic, oid.0.to_string(), RenameFlags::NOREPLACE) {
            Ok(()) => return Ok(true),
            // The slot is taken (by this object): the table's row stays right.
            Err(rustix::io::Errno::EXIST) => return Ok(false),
            Err(rustix::io::Errno::XDEV) => Ok(false),
            Err(e) => Err(e.into()),
        };
        if let Some(j) = &self.journal {
            j.note_attic_out(oid).map_err(|e| e.errno())?;
        }
        moved
    }

    /// Takes object `oid` out of its attic slot to `name` in `dir` (which
    /// must not exist), noting it in the attic table first: after a crash
    /// between the two, the object is in its slot with no row, where the
    /// rewind still finds it by the kernel's name for it (a row for an
    /// object in the tree would hide it from the rewind instead).
    /// `Ok(false)` when the slot is empty.
    pub(crate) fn take_out(&self, oid: ObjectId, dir: BorrowedFd<'_>, name: &OsStr) -> Res<bool> {
        let Some(attic) = self.fd() else { return Ok(false) };
        if let Some(j) = &self.journal {
            j.note_attic_out(oid).map_err(|e| e.errno())?;
        }
        match rustix::fs::renameat_with(attic, oid.0.to_string(), dir, name, RenameFlags::NOREPLACE) {
            Ok(()) => Ok(true),
            // Not there (a move into the attic noted, then cut short by a
            // crash): the row was wrong.
            Err(rustix::io::Errno::NOENT) => Ok(false),
            Err(e) => {
                if let Some(j) = &self.journal {
                    j.note_attic(oid).map_err(|e| e.errno())?;
                }
                Err(e.into())
            }
        }
    }

    /// Removes object `id`'s attic slot if a collection may
    /// ([`crate::journal::retention::remove_unreachable_slot`], the
    /// retention code's callback, with the handle as the store keeps it).
    pub fn remove_unreachable_stored(&self, id: ObjectId, handle: &[u8], dry_run: bool) -> Option<u64> {
        crate::journal::retention::remove_unreachable_slot(self.fd()?, id, handle, dry_run)
    }
}
