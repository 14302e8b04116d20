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

/// The turns of an object's newest records, and of its birth.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Records {
    pub last_turn: Option<i64>,
    /// The newest record that holds content (a view before it takes the
    /// bytes from a record, after it from the inode).
    pub last_content_turn: Option<i64>,
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

    /// Every range of unknown states noted, as (object, first, last).
    pub fn all_bypassed(&self) -> MetaResult<Vec<(ObjectId, i64, i64)>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT object, first, last FROM bypassed ORDER BY object, first")
            .ctx("prepare")?;
        let rows =
            stmt.query_map([], |r| Ok((ObjectId(r.get(0)?), r.get(1)?, r.get(2)?))).ctx("list bypassed ranges")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("list bypassed ranges")
    }

    /// What the records of `object` hold: the views of checkpoints after
    /// the newest of them read its live state.
    pub fn records_of(&self, object: ObjectId) -> MetaResult<Records> {
        self.conn
            .prepare_cached(
                "SELECT (SELECT MAX(turn) FROM object_pre WHERE object = ?1), \
                        (SELECT MAX(turn) FROM object_pre WHERE object = ?1 AND chunks IS NOT NULL), \
                        (SELECT born_turn FROM objects WHERE id = ?1)",
            )
            .ctx("prepare")?
            .query_row([object.0], |r| {
                Ok(Records { last_turn: r.get(0)?, last_content_turn: r.get(1)?, born_turn: r.get(2)? })
            })
            .ctx("read the records of an object")
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
}

impl Meta {
    /// The newest turn whose entry records name `object`, as the directory
    /// of a name or as the target one held: a change through the mount that
    /// moved its ctime without a record of the object itself (a rename, a
    /// removal into the attic; for a directory, a name created or removed
    /// in it).
    pub fn last_entry_turn(&self, object: ObjectId) -> MetaResult<Option<i64>> {
        self.conn
            .prepare_cached(
                "SELECT MAX(t) FROM (SELECT MAX(turn) AS t FROM entry_pre WHERE target = ?1 \
                 UNION ALL SELECT MAX(turn) FROM entry_pre WHERE dir = ?1)",
            )
            .ctx("prepare")?
            .query_row([object.0], |r| r.get(0))
            .ctx("read entry records")
    }

    /// The ctime `object` had right after the daemon's own last change of
    /// it that no record holds (the settler filling a rewound file).
    pub fn own_ctime(&self, object: ObjectId) -> MetaResult<Option<i64>> {
        self.conn
            .prepare_cached("SELECT ctime_ns FROM own_ctime WHERE object = ?1")
            .ctx("prepare")?
            .query_row([object.0], |r| r.get(0))
            .optional()
            .ctx("read the daemon's own changes")
    }

    pub fn set_own_ctime(&self, object: ObjectId, ctime_ns: i64) -> MetaResult<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO own_ctime(object, ctime_ns) VALUES (?1, ?2) \
                 ON CONFLICT(object) DO UPDATE SET ctime_ns = excluded.ctime_ns",
            )
            .ctx("prepare")?
            .execute(params![object.0, ctime_ns])
            .ctx("note the daemon's own change")?;
        Ok(())
    }
}

/// How far the kernel's file timestamps may lag the clock the daemon
/// reads: they come from the coarse clock, updated once a tick (1-10 ms),
/// so a change made just after a seal can carry a time a few ms before it
/// (seen: 1.7 ms on this machine).
const COARSE_CLOCK_NS: i64 = 10_000_000;

impl Meta {
    /// Notes that a rewind or restore changes the tree in `turn` from
    /// `started_ns` on: every change made in that turn from then on is the
    /// daemon's (the tree is frozen). The first start of a turn is kept.
    pub fn mark_daemon_turn(&self, turn: i64, started_ns: i64) -> MetaResult<()> {
        self.conn
            .prepare_cached("INSERT OR IGNORE INTO daemon_turns(turn, started_ns) VALUES (?1, ?2)")
            .ctx("prepare")?
            .execute([turn, started_ns])
            .ctx("note a rewind's turn")?;
        Ok(())
    }

    /// Whether `ns` falls in a turn in which a rewind or restore changed
    /// the tree: after it started (less `COARSE_CLOCK_NS`) and before the
    /// next seal (to the end of its millisecond; a later one if that
    /// checkpoint was forgotten), or the turn is still open.
    pub fn in_daemon_turn(&self, ns: i64, open_turn: i64) -> MetaResult<bool> {
        self.conn
            .prepare_cached(
                "SELECT EXISTS(SELECT 1 FROM daemon_turns d WHERE d.started_ns - ?3 <= ?1 \
                   AND (d.turn = ?2 OR (SELECT (created_at + 1) * 1000000 FROM checkpoints WHERE id > d.turn \
                                        ORDER BY id LIMIT 1) >= ?1))",
            )
            .ctx("prepare")?
            .query_row(params![ns, open_turn, COARSE_CLOCK_NS], |r| r.get(0))
            .ctx("read the turns of rewinds")
    }
}
