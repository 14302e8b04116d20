//! Changes that bypassed the mount, found when the object is next
//! recorded (see `meta/bypass.rs` and docs/design.md, "Processes already
//! inside the workspace").

use crate::meta::{Checkpoints, Meta, MetaResult, ObjectId, end_of_ms};

use super::{Journal, JournalResult, SEALED_NS};

/// Since when (ns since the epoch) no daemon has served the tree of the
/// store `meta`, if it ever did: its last clean unmount, else (a daemon
/// that did not stop cleanly) its newest seal. A change made later was
/// made between mounts, and the next mount marks it (`tainted`).
pub(super) fn unserved_since_ns(meta: &Meta) -> MetaResult<Option<i64>> {
    let clean = meta.get_state("clean_unmount_ns")?.and_then(|v| v.parse::<i64>().ok());
    let sealed_ns = meta.get_state(SEALED_NS)?.and_then(|v| v.parse::<i64>().ok());
    // A store from before `sealed_ns` was kept: the newest checkpoint's
    // time, a millisecond late so as not to take its own changes for
    // outside ones (see SEALED_NS).
    let last_created_ns = meta.checkpoint_back(0)?.map(|c| c.created_at.saturating_add(1).saturating_mul(1_000_000));
    Ok(clean.or(sealed_ns).or(last_created_ns))
}

/// Checkpoints whose state of an object is unknown, as `first..=last`.
pub type Unknown = (i64, i64);

/// When the newest write to a file's content may have happened, as far
/// as its times tell: a write sets mtime and ctime to the same moment, and
/// a later rename, link or attribute change moves ctime alone, so the
/// write was at mtime when mtime is not after ctime. An mtime after ctime
/// was set explicitly (`touch -d` into the future): it dates no write, and
/// the times then say nothing (`None`), as for any attribute-only change.
pub fn written_at(ctime_ns: i64, mtime_ns: i64) -> Option<i64> {
    (mtime_ns <= ctime_ns).then_some(mtime_ns)
}

impl Journal {
    /// Before the first record of `object` in this turn, with its ctime and
    /// mtime now: when both are later than a checkpoint that would read
    /// this record (no record of the object lies between), the object was
    /// changed after that checkpoint was sealed without passing through
    /// the mount, so the record about to be written does not hold its
    /// state there. Those checkpoints are noted (`bypassed`) before the
    /// record is written: after a crash between the two, the note stands
    /// alone and says the truth (their state is unknown either way).
    ///
    /// Every change made through the mount records the object first in its
    /// turn, except those that change ctime alone (a rename), a creation
    /// (the object's birth turn bounds it) and the settler's filling of a
    /// rewound file (which puts the recorded mtime back); the caller leaves
    /// out files open for writing (written by passthrough or mmap, unseen)
    /// and files still pending (`is_pending`, asked only when needed).
    ///
    /// When only ctime is later (a chmod, chown or xattr change, or a write
    /// whose mtime was then set back), the change is the daemon's own
    /// unless `own_ctime_change` says otherwise.
    pub fn note_if_bypassed(
        &self,
        object: ObjectId,
        ctime_ns: i64,
        mtime_ns: i64,
        is_pending: impl FnOnce() -> bool,
    ) -> JournalResult<Option<Unknown>> {
        let (turn, opened_ns, skip) = {
            let inner = self.lock();
            let skip = inner.meta_done.contains(&object) || inner.born_ids.contains(&object);
            (inner.turn, inner.opened_ns, skip)
        };
        // Before this daemon: the scan at mount marks it (`tainted`).
        if skip || ctime_ns <= opened_ns || is_pending() {
            return Ok(None);
        }
        let range = |changed: i64| -> JournalResult<Option<Unknown>> {
            let inner = self.lock();
            let Some(last) = inner.meta.newest_sealed_before(changed)? else { return Ok(None) };
            let vouched = inner.meta.vouched(object, turn)?;
            let first = vouched.last_record_turn.max(vouched.born_turn).map_or(0, |t| t + 1);
            let last = last.min(turn);
            Ok((first <= last).then_some((first, last)))
        };
        // Both later, the mtime dating a write: content written.
        let mut found = match written_at(ctime_ns, mtime_ns) {
            Some(written) if written > opened_ns => range(written)?,
            _ => None,
        };
        if found.is_none() && mtime_ns != ctime_ns {
            found = range(ctime_ns)?;
            if found.is_some() && self.own_ctime_change(object, ctime_ns)? {
                found = None;
            }
        }
        let Some((first, last)) = found else { return Ok(None) };
        let mut inner = self.lock();
        inner.moves.object(object);
        inner.meta.mark_bypassed(object, first, last)?;
        drop(inner);
        log::warn!(
            "object {} was changed under the mount, bypassing it, after checkpoint {last} was sealed; \
             its state at checkpoints {first} to {last} is unknown",
            object.0
        );
        Ok(Some((first, last)))
    }
}

impl Journal {
    /// Notes that the open turn's changes are the daemon's: a rewind or
    /// restore completed at mount (the one begun by `begin_intent` is
    /// noted there).
    pub fn note_daemon_turn(&self) -> JournalResult<()> {
        let inner = self.lock();
        inner.meta.mark_daemon_turn(inner.turn, super::now_ns())?;
        Ok(())
    }

    /// Whether `ctime_ns`, the ctime of `object` now, may come from a
    /// change the daemon made itself without a record of the object: an
    /// entry record names it (a rename, a removal into the attic, a name
    /// created or removed in a directory) in the open turn, or in a turn
    /// sealed after that ctime (to the end of the seal's millisecond); or
    /// it is the ctime the settler left (`own_ctime`); or it falls in a
    /// turn in which a rewind or restore changed the tree (`daemon_turns`:
    /// the rewind's own moves, links and fills name the object in no
    /// record, and the tree is frozen meanwhile). Asked only for an
    /// object whose ctime alone is later than what the journal vouches
    /// for, so an unchanged file costs nothing here.
    pub fn own_ctime_change(&self, object: ObjectId, ctime_ns: i64) -> JournalResult<bool> {
        let (named, turn) = {
            let inner = self.lock();
            if inner.named_done.contains(&object) {
                return Ok(true);
            }
            if inner.meta.own_ctime(object)? == Some(ctime_ns) || inner.meta.in_daemon_turn(ctime_ns, inner.turn)? {
                return Ok(true);
            }
            // Records of sealed turns are all in the database (a seal
            // folds the log); the open turn's are in `named_done`.
            (inner.meta.last_entry_turn(object)?, inner.turn)
        };
        let Some(named) = named else { return Ok(false) };
        if named >= turn {
            return Ok(true);
        }
        Ok(self.sealed_after(named)?.is_some_and(|ms| ctime_ns <= end_of_ms(ms)))
    }

    /// Drops the seal time kept for checkpoint `f`, which is being
    /// forgotten: its turn's records merge into the turn before, for which
    /// the next kept checkpoint's seal answers from then on.
    pub(super) fn forget_seal_time(&self, f: i64) {
        crate::poison::lock(&self.seal_times, "the seal times").remove(&f);
    }

    /// When (ms) the first checkpoint after turn `turn` was sealed, if one
    /// was. Asked by views for every live file they show (the bypass
    /// check), so the answer is kept: a checkpoint's seal time never
    /// changes and its number is never reused, so a kept answer for the
    /// checkpoint right after `turn` stays exact whatever is sealed later;
    /// a forget drops the answer kept for the checkpoint it forgets
    /// (`forget_seal_time`), and then the next one answers, not kept.
    /// Checkpoints are written only by seals, which fold the log first: no
    /// fold is needed.
    pub fn sealed_after(&self, turn: i64) -> JournalResult<Option<i64>> {
        let cached = |j: &Journal| crate::poison::lock(&j.seal_times, "the seal times").get(&(turn + 1)).copied();
        if let Some(ms) = cached(self) {
            return Ok(Some(ms));
        }
        let found = self.lock().meta.first_sealed_after(turn)?;
        let Some((checkpoint, ms)) = found else { return Ok(None) };
        if checkpoint == turn + 1 {
            crate::poison::lock(&self.seal_times, "the seal times").insert(checkpoint, ms);
        }
        Ok(Some(ms))
    }
}
