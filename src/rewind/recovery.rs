//! Completing, at mount, a rewind or restore that the daemon died in.
//!
//! Before a rewind or restore changes the tree, it writes an intent (the
//! operation, the checkpoint it goes to, the checkpoint sealed just before
//! it, and a restore's paths) and makes it durable; it removes the intent
//! once its result checkpoint is sealed. Every change it makes in between
//! is recorded first, like any writer's, so a tree left half changed is
//! simply a tree whose history is complete: running the same operation
//! again from there makes it what the checkpoint was, which is what the
//! user asked for. (Rolling back would be the same operation towards the
//! checkpoint before, and would throw away what was asked.)
//!
//! What a crash can leave that no record describes is a temporary name of
//! the operation itself: `.rewindfs-rewind-<object>` (a file whose content
//! a rewind was replacing) or `.rewindfs-restore-<random>` (a file a restore
//! was filling). Those are moved to the attic first, recorded, so the tree
//! holds only the user's names again and every checkpoint still reads back.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::rc::Rc;

use rustix::fs::{AtFlags, Mode, OFlags};
use serde::{Deserialize, Serialize};

use crate::error::Errno;
use crate::journal::Journal;
use crate::meta::{Intent, IntentOp};
use crate::restore::{Planned, RestoreError};
use crate::rewind::preflight::{self, Checked, Unreadable};
use crate::workspace::backing;
use crate::workspace::capture::kind_code;
use crate::workspace::{Caller, Kind, LiveTree};
use crate::world::{Frozen, Held};

/// Name prefixes of the temporary files of rewind and restore.
const TEMP_PREFIXES: [&[u8]; 2] = [b".rewindfs-rewind-", b".rewindfs-restore-"];

/// What a mount found interrupted and did about it (mount message,
/// `status`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Recovered {
    pub op: IntentOp,
    /// The checkpoint rewound or restored to.
    pub checkpoint: i64,
    /// The checkpoint sealed before the operation: going back to it undoes it.
    pub undo_checkpoint: i64,
    /// The mount checkpoint: the tree as the interruption left it.
    pub interrupted_checkpoint: i64,
    /// Sealed once the operation was completed.
    pub result_checkpoint: i64,
    /// When the operation began (Unix milliseconds).
    pub started_at: i64,
    /// A restore's paths (empty: the whole tree).
    pub paths: Vec<String>,
    /// The sentence the mount prints and `status` shows.
    pub message: String,
    /// Given up at the user's request (`mount --abandon-interrupted`), not
    /// completed: the tree stays as the interruption left it, which is
    /// `interrupted_checkpoint` (and `result_checkpoint`).
    #[serde(default)]
    pub abandoned: bool,
}

/// "the rewind to checkpoint 7" / "the restore of a, b from checkpoint 7".
pub fn describe(intent: &Intent) -> String {
    match intent.op {
        IntentOp::Rewind => format!("the rewind to checkpoint {}", intent.checkpoint),
        IntentOp::Restore => format!("the restore of {} from checkpoint {}", paths_text(intent), intent.checkpoint),
    }
}

/// A restore's paths as arguments of a command to type (from the root).
fn paths_args(intent: &Intent) -> String {
    if intent.paths.is_empty() {
        return ".".to_string();
    }
    intent.paths.iter().map(|p| crate::text::quote_name(OsStr::from_bytes(p))).collect::<Vec<_>>().join(" ")
}

fn paths_text(intent: &Intent) -> String {
    if intent.paths.is_empty() {
        return "everything".to_string();
    }
    intent.paths.iter().map(|p| String::from_utf8_lossy(p).into_owned()).collect::<Vec<_>>().join(", ")
}

/// The label of the result checkpoint of a completed intent (what the
/// uninterrupted operation would have sealed, and where it was finished).
pub fn result_label(intent: &Intent) -> String {
    match intent.op {
        IntentOp::Rewind => format!("rewound to {} (completed at mount after an interruption)", intent.checkpoint),
        IntentOp::Restore => format!(
            "restored {} from checkpoint {} (completed at mount after an interruption)",
            paths_text(intent),
            intent.checkpoint
        ),
    }
}

/// The report of a completed intent.
pub fn recovered(intent: &Intent, interrupted_checkpoint: i64, result_checkpoint: i64) -> Recovered {
    let message = format!(
        "recovered: {} started at {} was interrupted (the daemon died); it was completed at this mount: \
         result checkpoint {result_checkpoint} (checkpoint {interrupted_checkpoint} is the tree as the interruption \
         left it; `rewindfs {} {}` undoes it)",
        describe(intent),
        crate::text::rfc3339(intent.started_at),
        match intent.op {
            IntentOp::Rewind => "rewind",
            IntentOp::Restore => "restore",
        },
        match intent.op {
            IntentOp::Rewind => intent.undo_checkpoint.to_string(),
            IntentOp::Restore => format!("{} -- {}", intent.undo_checkpoint, paths_args(intent)),
        },
    );
    Recovered {
        op: intent.op,
        checkpoint: intent.checkpoint,
        undo_checkpoint: intent.undo_checkpoint,
        interrupted_checkpoint,
        result_checkpoint,
        started_at: intent.started_at,
        paths: intent.paths.iter().map(|p| String::from_utf8_lossy(p).into_owned()).collect(),
        message,
        abandoned: false,
    }
}

/// The label of the mount checkpoint of an intent given up: the tree as
/// the interruption left it, kept as it is.
pub fn abandoned_label(intent: &Intent) -> String {
    format!("state at mount: {} was interrupted, half applied; given up (--abandon-interrupted)", describe(intent))
}

/// The report of an intent given up at the mount checkpoint `interrupted`;
/// `temporaries` are the temporary names of the operation left in the tree.
pub fn abandoned(intent: &Intent, interrupted: i64, temporaries: &[String]) -> Recovered {
    let again = match intent.op {
        IntentOp::Rewind => format!("rewindfs rewind {}", intent.checkpoint),
        IntentOp::Restore => format!("rewindfs restore {} -- {}", intent.checkpoint, paths_args(intent)),
    };
    let undo = match intent.op {
        IntentOp::Rewind => format!("rewindfs rewind {}", intent.undo_checkpoint),
        IntentOp::Restore => format!("rewindfs restore {} -- {}", intent.undo_checkpoint, paths_args(intent)),
    };
    let left = if temporaries.is_empty() {
        String::new()
    } else {
        format!("; its temporary files were left in the tree too: {}", temporaries.join(", "))
    };
    let message = format!(
        "abandoned: {} started at {} was interrupted (the daemon died) and was given up at this mount, as asked \
         (--abandon-interrupted), not completed: the workspace was left as the interruption left it, sealed as \
         checkpoint {interrupted}{left}. Checkpoint {} is the tree before it (`{undo}` goes back to it); `{again}` \
         tries it again",
        describe(intent),
        crate::text::rfc3339(intent.started_at),
        intent.undo_checkpoint,
    );
    Recovered {
        abandoned: true,
        result_checkpoint: interrupted,
        message,
        ..recovered(intent, interrupted, interrupted)
    }
}

/// The files whose content completing `intent` would take from the store
/// and that cannot be read back: checked before anything changes, so a
/// completion that cannot succeed leaves the tree as the interruption left
/// it (and giving the operation up keeps exactly that tree).
pub fn unreadable(
    lock: Held<'_>,
    tree: &LiveTree,
    journal: &Journal,
    intent: &Intent,
) -> Result<Vec<Unreadable>, RestoreError> {
    let mut checked = Checked::default();
    match intent.op {
        IntentOp::Rewind => preflight::unreadable(lock, tree, journal, intent.checkpoint, &mut checked),
        IntentOp::Restore => {
            preflight::unreadable_under(lock, tree, journal, intent.checkpoint, &restore_paths(intent), &mut checked)
        }
    }
}

fn restore_paths(intent: &Intent) -> Vec<PathBuf> {
    intent.paths.iter().map(|p| PathBuf::from(OsStr::from_bytes(p).to_os_string())).collect()
}

/// Runs the interrupted operation again from the tree it left, frozen.
/// The caller (the workspace's open, before anything is served) seals the
/// result and ends the intent.
pub fn complete(
    frozen: &mut Frozen<'_>,
    tree: &LiveTree,
    journal: &Journal,
    intent: &Intent,
) -> Result<Vec<Planned>, RestoreError> {
    journal.note_daemon_turn()?;
    // First, before anything records these files in this turn.
    record_names_outside(tree, journal, intent.undo_checkpoint)?;
    let moved = put_away_temporaries(tree, journal)?;
    if moved > 0 {
        log::info!("recovery: {moved} temporary files of the interrupted operation moved to the attic");
    }
    match intent.op {
        IntentOp::Rewind if crate::rewind::instant_available(tree) => {
            crate::rewind::rewind(frozen, tree, journal, intent.checkpoint, intent.undo_checkpoint, Default::default())
        }
        IntentOp::Rewind => crate::restore::restore(frozen, tree, journal, intent.checkpoint, &[]),
        IntentOp::Restore => crate::restore::restore(frozen, tree, journal, intent.checkpoint, &restore_paths(intent)),
    }
}

/// A directory the interrupted attempt moved aside whole (in turn `began`
/// or later: `began` is its safety checkpoint) may hold names of a file
/// that is in the tree under other names (its way back, or a stray link
/// it had not removed yet); so may a file's own slot, moved into since
/// (a rewind swapping a new inode in at every name of a file of several
/// names moves the old inode from its first name into its slot, then
/// swaps the others one by one). The mount checkpoint sealed that tree
/// with those names outside it, yet counted in the file's links; each such
/// file is recorded now, in the turn after it, with the links it has in
/// that tree (see `Journal::record_object_names_outside`).
fn record_names_outside(tree: &LiveTree, journal: &Journal, began: i64) -> Result<(), RestoreError> {
    let Some(attic) = tree.attic().fd() else { return Ok(()) };
    let left = crate::rewind::left_since(journal, began)?;
    let mut found: std::collections::HashMap<(u64, u64), (OwnedFd, u32)> = std::collections::HashMap::new();
    let mut count = |dir: BorrowedFd<'_>, name: &OsStr, st: &rustix::fs::Stat| -> Result<(), RestoreError> {
        if st.st_nlink > 1 {
            match found.entry((st.st_dev, st.st_ino)) {
                std::collections::hash_map::Entry::Occupied(mut e) => e.get_mut().1 += 1,
                std::collections::hash_map::Entry::Vacant(e) => {
                    let fd =
                        rustix::fs::openat(dir, name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
                            .map_err(live("open"))?;
                    e.insert((fd, 1));
                }
            }
        }
        Ok(())
    };
    // A file's own slot: the objects that left a name since, and those
    // that moved into their slot since (a name the same rewind had put
    // back, earlier in that turn, has its entry record from then, naming
    // no object).
    let mut moved = journal.with_objects(|m| m.attic_objects_since(began))?;
    moved.extend(left.iter().copied());
    moved.sort();
    moved.dedup();
    for id in &moved {
        let slot = OsString::from(id.0.to_string());
        if let Ok(st) = rustix::fs::statat(attic, &slot, AtFlags::SYMLINK_NOFOLLOW)
            && st.st_mode & libc::S_IFMT != libc::S_IFDIR
        {
            count(attic, &slot, &st)?;
        }
    }
    crate::rewind::each_file_in_attic_dirs(attic, &left, |dir, name, st| count(dir, name, st).map(|()| true))?;
    for (fd, outside) in found.into_values() {
        let st = rustix::fs::fstat(&fd).map_err(live("stat"))?;
        // All its names are in the attic: not in the tree at all.
        if st.st_nlink <= u64::from(outside) {
            continue;
        }
        let fail = |e: Errno| RestoreError::Live { path: "a file in the attic".into(), errno: e };
        let capture = tree.capture(journal);
        let id = capture.object_id_of_fd(fd.as_fd(), Kind::from_mode(st.st_mode)).map_err(fail)?;
        log::info!("recovery: object {} has {outside} of its {} names in the attic", id.0, st.st_nlink);
        capture.fd_names_outside(fd.as_fd(), id, outside).map_err(fail)?;
    }
    Ok(())
}

fn live(what: &str) -> impl FnOnce(rustix::io::Errno) -> RestoreError + '_ {
    move |e| RestoreError::Live { path: what.to_string(), errno: Errno::from(e) }
}

/// Moves every temporary name of a rewind or restore out of the tree, into
/// the attic, recorded. A whole walk of the tree: only after a crash. A
/// file with other names (the agent's link to a name it saw, or a new
/// inode a rewind had linked at a name too) only loses this one, as by
/// an `unlink`: in the attic, the name would stay counted among the links
/// of the file in the tree.
fn put_away_temporaries(tree: &LiveTree, journal: &Journal) -> Result<usize, RestoreError> {
    let caller = Caller { uid: 0, gid: 0, pid: std::process::id() };
    let found = each_temporary(tree, |dir, name, _, st| {
        let shown = String::from_utf8_lossy(name.as_bytes()).into_owned();
        let fail = |e: Errno| RestoreError::Live { path: shown.clone(), errno: e };
        tree.capture(journal).entry(dir, name, caller).map_err(fail)?;
        let id = tree.capture(journal).named(dir, name, false, caller).map_err(fail)?;
        let id = match id {
            Some(id) => id,
            None => {
                let h = backing::handle_at(dir, name).map_err(fail)?;
                journal.object_id(&h, kind_code(Kind::from_mode(st.st_mode)))?
            }
        };
        if st.st_nlink > 1 {
            log::warn!("recovery: removing the leftover temporary name {shown} (object {}, linked elsewhere)", id.0);
            rustix::fs::unlinkat(dir, name, AtFlags::empty()).map_err(live("unlink"))?;
            return Ok(());
        }
        log::warn!("recovery: moving the leftover temporary file {shown} (object {}) to the attic", id.0);
        if !tree.attic().move_in(dir, name, id).map_err(fail)? {
            rustix::fs::unlinkat(dir, name, AtFlags::empty()).map_err(live("unlink"))?;
        }
        Ok(())
    })?;
    Ok(found.len())
}

/// The paths (from the root) of the temporary names of a rewind or restore
/// in the tree. A whole walk of the tree.
pub fn temporaries(tree: &LiveTree) -> Result<Vec<String>, RestoreError> {
    each_temporary(tree, |_, _, _, _| Ok(()))
}

/// Calls `visit` (directory, name, path from the root, stat) for every
/// file with a temporary name of rewind or restore; returns their paths.
fn each_temporary(
    tree: &LiveTree,
    mut visit: impl FnMut(BorrowedFd<'_>, &OsStr, &str, &rustix::fs::Stat) -> Result<(), RestoreError>,
) -> Result<Vec<String>, RestoreError> {
    let open_dir =
        |at: BorrowedFd<'_>, name: &OsStr| crate::rewind::open_dir(at, name).map_err(live("open a directory"));
    // Depth first, each directory opened from its parent when its turn
    // comes: descriptors open are those along one path, not one per
    // directory of the tree.
    let mut stack: Vec<(Option<Rc<OwnedFd>>, OsString, Vec<u8>)> = vec![(None, OsString::from("."), Vec::new())];
    let mut found = Vec::new();
    while let Some((parent, dir_name, prefix)) = stack.pop() {
        let dir = Rc::new(match &parent {
            Some(p) => open_dir(p.as_fd(), &dir_name)?,
            None => open_dir(tree.root_fd(), &dir_name)?,
        });
        let mut names: Vec<OsString> = Vec::new();
        for entry in rustix::fs::Dir::read_from(&*dir).map_err(live("list a directory"))? {
            let entry = entry.map_err(live("list a directory"))?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(OsStr::from_bytes(name).to_os_string());
            }
        }
        for name in names {
            let st = match rustix::fs::statat(&*dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(live("stat")(e)),
            };
            let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
            let path = [&prefix[..], name.as_bytes()].concat();
            if TEMP_PREFIXES.iter().any(|p| name.as_bytes().starts_with(p)) && !is_dir {
                let shown = String::from_utf8_lossy(&path).into_owned();
                visit(dir.as_fd(), &name, &shown, &st)?;
                found.push(shown);
            } else if is_dir {
                stack.push((Some(dir.clone()), name, [&path[..], b"/"].concat()));
            }
        }
    }
    Ok(found)
}
