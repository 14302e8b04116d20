//! Changes that bypassed the mount, found when the object is next
//! recorded (see `meta/bypass.rs` and docs/design.md, "Processes already
//! inside the workspace").

use crate::meta::ObjectId;

use super::{Journal, JournalResult};

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
    pub fn note_if_bypassed(
        &self,
        object: ObjectId,
        ctime_ns: i64,
        mtime_ns: i64,
        is_pending: impl FnOnce() -> bool,
    ) -> JournalResult<Option<Unknown>> {
        let Some(changed) = written_at(ctime_ns, mtime_ns) else { return Ok(None) };
        let (turn, opened_ns, skip) = {
            let inner = self.lock();
            let skip = inner.meta_done.contains(&object) || inner.born_ids.contains(&object);
            (inner.turn, inner.opened_ns, skip)
        };
        // Before this daemon: the scan at mount marks it (`tainted`).
        if skip || changed <= opened_ns || is_pending() {
            return Ok(None);
        }
        let inner = self.lock();
        let Some(last) = inner.meta.newest_sealed_before(changed)? else { return Ok(None) };
        let vouched = inner.meta.vouched(object, turn)?;
        let first = vouched.last_record_turn.max(vouched.born_turn).map_or(0, |t| t + 1);
        let last = last.min(turn);
        if first > last {
            return Ok(None);
        }
        inner.meta.mark_bypassed(object, first, last)?;
        log::warn!(
            "object {} was changed under the mount, bypassing it, after checkpoint {last} was sealed; \
             its state at checkpoints {first} to {last} is unknown",
            object.0
        );
        Ok(Some((first, last)))
    }
}

impl Journal {
    /// When (ms) the first checkpoint after turn `turn` was sealed, if one
    /// was. Asked by views for every live file they show (the bypass
    /// check), so the answer is kept: a checkpoint's seal time never
    /// changes and its number is never reused, so a kept answer for the
    /// checkpoint right after `turn` stays exact whatever is sealed or
    /// forgotten later (when that one was forgotten, the next one answers,
    /// and is not kept). Checkpoints are written only by seals, which fold
    /// the log first: no fold is needed.
    pub fn sealed_after(&self, turn: i64) -> JournalResult<Option<i64>> {
        let cached = |j: &Journal| j.seal_times.lock().unwrap_or_else(|p| p.into_inner()).get(&(turn + 1)).copied();
        if let Some(ms) = cached(self) {
            return Ok(Some(ms));
        }
        let found = self.lock().meta.first_sealed_after(turn)?;
        let Some((checkpoint, ms)) = found else { return Ok(None) };
        if checkpoint == turn + 1 {
            self.seal_times.lock().unwrap_or_else(|p| p.into_inner()).insert(checkpoint, ms);
        }
        Ok(Some(ms))
    }
}
