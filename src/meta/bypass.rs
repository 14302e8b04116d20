//! Changes that bypassed the mount and were then recorded (schema 11,
//! table `bypassed`): a change made under a running mount (through the
//! directory under an in-place mount, or to the source of a mount made
//! elsewhere) is not recorded; when the same object is later changed
//! through the mount, the pre-image recorded then holds the bypassed
//! state. The checkpoints that would read that record, and were sealed
//! before the bypassing change, never had that state: a row here says
//! their state of the object is unknown.

use rusqlite::{OptionalExtension, params};

use super::{Ctx, Meta, MetaResult, ObjectId};

/// What the journal vouches for an object before its first record in a
/// turn: the newest earlier record, and the turn it was created in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Vouched {
    pub last_record_turn: Option<i64>,
    pub born_turn: Option<i64>,
}

impl Meta {
    /// Notes that the state of `object` at checkpoints `first..=last` is
    /// unknown: the record that those checkpoints' views would read holds a
    /// state reached by a change that bypassed the mount after they were
    /// sealed.
    pub fn mark_bypassed(&self, object: ObjectId, first: i64, last: i64) -> MetaResult<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO bypassed(object, first, last) VALUES (?1, ?2, ?3) \
                 ON CONFLICT(object, first) DO UPDATE SET last = MAX(last, excluded.last)",
            )
            .ctx("prepare")?
            .execute(params![object.0, first, last])
            .ctx("note a change that bypassed the mount")?;
        Ok(())
    }

    /// The last checkpoint of a range of unknown states of `object` that
    /// holds checkpoint `at`, if one does (the change came after its seal).
    pub fn bypassed_at(&self, object: ObjectId, at: i64) -> MetaResult<Option<i64>> {
        self.conn
            .prepare_cached("SELECT MAX(last) FROM bypassed WHERE object = ?1 AND first <= ?2 AND last >= ?2")
            .ctx("prepare")?
            .query_row(params![object.0, at], |r| r.get(0))
            .ctx("read changes that bypassed the mount")
    }

    /// The ranges of unknown states of `object`, as (first, last).
    pub fn bypassed_ranges(&self, object: ObjectId) -> MetaResult<Vec<(i64, i64)>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT first, last FROM bypassed WHERE object = ?1 ORDER BY first")
            .ctx("prepare")?;
        let rows = stmt.query_map([object.0], |r| Ok((r.get(0)?, r.get(1)?))).ctx("list bypassed ranges")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("list bypassed ranges")
    }

    /// The newest record of `object` in a turn before `turn`, and its birth
    /// turn. Records of turns before the open one are all in the database
    /// (a seal folds the log first), so this needs no fold.
    pub fn vouched(&self, object: ObjectId, turn: i64) -> MetaResult<Vouched> {
        self.conn
            .prepare_cached(
                "SELECT (SELECT MAX(turn) FROM object_pre WHERE object = ?1 AND turn < ?2), \
                        (SELECT born_turn FROM objects WHERE id = ?1)",
            )
            .ctx("prepare")?
            .query_row(params![object.0, turn], |r| Ok(Vouched { last_record_turn: r.get(0)?, born_turn: r.get(1)? }))
            .ctx("read what the journal vouches for")
    }

    /// The newest checkpoint sealed before `ns` (ns since the epoch), to
    /// the end of its millisecond: `created_at` has ms, and a change in the
    /// same millisecond as a seal may be before or after it.
    pub fn newest_sealed_before(&self, ns: i64) -> MetaResult<Option<i64>> {
        self.conn
            .prepare_cached("SELECT MAX(id) FROM checkpoints WHERE (created_at + 1) * 1000000 < ?1")
            .ctx("prepare")?
            .query_row(params![ns], |r| r.get(0))
            .ctx("read checkpoints")
    }

    /// The first checkpoint after turn `turn` and when it was sealed (ms).
    pub fn first_sealed_after(&self, turn: i64) -> MetaResult<Option<(i64, i64)>> {
        self.conn
            .prepare_cached("SELECT id, created_at FROM checkpoints WHERE id > ?1 ORDER BY id LIMIT 1")
            .ctx("prepare")?
            .query_row(params![turn], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .ctx("read checkpoint")
    }
}
