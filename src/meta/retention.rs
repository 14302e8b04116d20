//! The tables of a bounded history (schema 9): named snapshots, forgotten
//! checkpoints, and the collection that merges a checkpoint's turn into the
//! kept one before it and frees what no kept checkpoint needs.
//!
//! Why merging keeps every kept view exact: the tree at checkpoint K is the
//! live tree patched with the earliest record at or after turn K for each
//! key. Forgetting F, whose previous kept checkpoint is P, moves F's
//! records into turn P where P has none for the same key (the key did not
//! change during turn P, so its state at F was its state at P) and drops
//! the others (P's earlier record wins for every view at or before P, and
//! views at or after the next kept checkpoint never read turn P or F). An
//! object record of P without content borrows F's content: nothing
//! rewrote the file during turn P, or P's record would carry content.

use std::collections::HashSet;

use rusqlite::{OptionalExtension, params};

use super::{Ctx, Meta, MetaError, MetaResult, ObjectId};
use crate::store::ChunkId;

/// A checkpoint that was forgotten: what references to it are told.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Forgotten {
    pub checkpoint: i64,
    pub message_id: Option<String>,
    pub label: Option<String>,
    /// The kept checkpoint whose turn took its changes (None: it was the
    /// oldest, its records were dropped).
    pub merged_into: Option<i64>,
    /// `forget` or `retention`.
    pub by: String,
    /// Unix milliseconds.
    pub at: i64,
}

/// What forgetting checkpoints released, for the caller to free.
#[derive(Clone, Debug, Default)]
pub struct Merged {
    /// Chunk lists of the records dropped (their chunks may still be used
    /// by other records: see [`Meta::unreferenced`]).
    pub dropped_lists: Vec<Vec<u8>>,
    /// Records dropped (entry and object records).
    pub dropped_records: u64,
    /// Records moved into the previous kept turn.
    pub moved_records: u64,
    /// Objects a dropped record named (entry targets, recorded objects):
    /// the ones no record names any more may be removable from the attic.
    pub dropped_objects: Vec<ObjectId>,
}

impl Meta {
    /// Names checkpoint `checkpoint` (the caller has checked the name).
    pub fn add_snapshot(&self, name: &str, checkpoint: i64, message: Option<&str>, at: i64) -> MetaResult<()> {
        self.conn
            .execute(
                "INSERT INTO snapshots(name, checkpoint, message, created_at) VALUES (?1, ?2, ?3, ?4)",
                params![name, checkpoint, message, at],
            )
            .ctx("name a checkpoint")?;
        Ok(())
    }

    /// The checkpoint a snapshot name names.
    pub fn snapshot(&self, name: &str) -> MetaResult<Option<i64>> {
        self.conn
            .query_row("SELECT checkpoint FROM snapshots WHERE name = ?1", [name], |r| r.get(0))
            .optional()
            .ctx("read snapshot")
    }

    /// A forgotten checkpoint by number or message id.
    pub fn forgotten(&self, reference: &str) -> MetaResult<Option<Forgotten>> {
        let number = reference.parse::<i64>().ok();
        self.conn
            .query_row(
                "SELECT checkpoint, message_id, label, merged_into, by, at FROM forgotten \
                 WHERE checkpoint = ?1 OR message_id = ?2 ORDER BY checkpoint DESC LIMIT 1",
                params![number, reference],
                |r| {
                    Ok(Forgotten {
                        checkpoint: r.get(0)?,
                        message_id: r.get(1)?,
                        label: r.get(2)?,
                        merged_into: r.get(3)?,
                        by: r.get(4)?,
                        at: r.get(5)?,
                    })
                },
            )
            .optional()
            .ctx("read forgotten checkpoints")
    }

    /// The newest checkpoint `by` forgot and when (`reset`: everything
    /// up to it went, names included).
    pub fn last_forgotten_by(&self, by: &str) -> MetaResult<Option<(i64, i64)>> {
        self.conn
            .query_row(
                "SELECT checkpoint, at FROM forgotten WHERE by = ?1 ORDER BY checkpoint DESC LIMIT 1",
                [by],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .ctx("read forgotten checkpoints")
    }

    /// Turns holding a mark of objects changed outside the mount.
    pub fn tainted_turns(&self) -> MetaResult<HashSet<i64>> {
        let mut stmt = self.conn.prepare("SELECT DISTINCT turn FROM tainted").ctx("prepare")?;
        let rows = stmt.query_map([], |r| r.get(0)).ctx("list marks")?;
        rows.collect::<rusqlite::Result<HashSet<i64>>>().ctx("list marks")
    }

    /// Forgets checkpoint `f`: its turn merges into the previous kept
    /// checkpoint's (see the module comment), its children hang from its
    /// parent, and references to it are told it was forgotten `by`. The
    /// caller runs it inside a transaction and refuses the newest
    /// checkpoint (the open turn records into it).
    pub fn forget_checkpoint(&self, f: i64, by: &str, at: i64) -> MetaResult<Merged> {
        let c = &self.conn;
        let row: Option<(Option<i64>, Option<String>, Option<String>)> = c
            .query_row("SELECT parent, message_id, label FROM checkpoints WHERE id = ?1", [f], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()
            .ctx("read checkpoint")?;
        let Some((parent, message_id, label)) = row else {
            return Err(MetaError::Malformed { what: "checkpoint to forget (it does not exist)" });
        };
        let newer: Option<i64> =
            c.query_row("SELECT MIN(id) FROM checkpoints WHERE id > ?1", [f], |r| r.get(0)).ctx("read checkpoints")?;
        if newer.is_none() {
            return Err(MetaError::Malformed { what: "checkpoint to forget (it is the newest)" });
        }
        let p: Option<i64> =
            c.query_row("SELECT MAX(id) FROM checkpoints WHERE id < ?1", [f], |r| r.get(0)).ctx("read checkpoints")?;
        // -1 is no turn: with no previous checkpoint, every record of F goes.
        let p_or = p.unwrap_or(-1);
        let obj_shadowed = "EXISTS (SELECT 1 FROM object_pre pp WHERE pp.turn = ?2 AND pp.object = ff.object)";
        let entry_shadowed =
            "EXISTS (SELECT 1 FROM entry_pre pp WHERE pp.turn = ?2 AND pp.dir = ff.dir AND pp.name = ff.name)";
        let mut merged = Merged::default();
        // Pending files whose list is a record about to go get a copy.
        self.count_lists(
            &format!(
                "UPDATE pending SET chunks = (SELECT ff.chunks FROM object_pre ff \
                     WHERE ff.turn = ?1 AND ff.object = pending.source_object), \
                     source_turn = NULL, source_object = NULL \
                 WHERE source_turn = ?1 AND chunks IS NULL AND EXISTS (SELECT 1 FROM object_pre ff \
                     WHERE ff.turn = ?1 AND ff.object = pending.source_object AND (?2 < 0 OR {obj_shadowed})) \
                 RETURNING chunks"
            ),
            params![f, p_or],
            1,
        )?;
        for sql in [
            format!(
                "SELECT ff.target FROM entry_pre ff WHERE ff.turn = ?1 AND ff.target IS NOT NULL AND (?2 < 0 OR {entry_shadowed})"
            ),
            format!("SELECT ff.object FROM object_pre ff WHERE ff.turn = ?1 AND (?2 < 0 OR {obj_shadowed})"),
        ] {
            let mut stmt = c.prepare(&sql).ctx("prepare")?;
            let rows = stmt.query_map(params![f, p_or], |r| r.get::<_, i64>(0)).ctx("list dropped objects")?;
            for id in rows {
                merged.dropped_objects.push(ObjectId(id.ctx("list dropped objects")?));
            }
        }
        // P's records without content borrow F's.
        self.count_lists(
            "UPDATE object_pre SET \
                 content_hash = (SELECT ff.content_hash FROM object_pre ff WHERE ff.turn = ?1 AND ff.object = object_pre.object), \
                 chunks = (SELECT ff.chunks FROM object_pre ff WHERE ff.turn = ?1 AND ff.object = object_pre.object) \
             WHERE turn = ?2 AND chunks IS NULL AND EXISTS (SELECT 1 FROM object_pre ff \
                 WHERE ff.turn = ?1 AND ff.object = object_pre.object AND ff.chunks IS NOT NULL) \
             RETURNING chunks",
            params![f, p_or],
            1,
        )?;
        let dropped = self.count_lists(
            &format!("DELETE FROM object_pre AS ff WHERE ff.turn = ?1 AND (?2 < 0 OR {obj_shadowed}) RETURNING chunks"),
            params![f, p_or],
            -1,
        )?;
        let dropped_objects = dropped.len();
        merged.dropped_lists = dropped.into_iter().flatten().collect();
        let dropped_entries = c
            .execute(
                &format!("DELETE FROM entry_pre AS ff WHERE ff.turn = ?1 AND (?2 < 0 OR {entry_shadowed})"),
                params![f, p_or],
            )
            .ctx("drop entry records")?;
        merged.dropped_records = (dropped_objects + dropped_entries) as u64;
        if let Some(p) = p {
            let moved = c
                .execute("UPDATE object_pre SET turn = ?2 WHERE turn = ?1", params![f, p])
                .ctx("move object records")?
                + c.execute("UPDATE entry_pre SET turn = ?2 WHERE turn = ?1", params![f, p])
                    .ctx("move entry records")?;
            merged.moved_records = moved as u64;
            c.execute("UPDATE pending SET source_turn = ?2 WHERE source_turn = ?1", params![f, p])
                .ctx("move pending sources")?;
            c.execute(
                "INSERT INTO turn_programs(turn, program, records) \
                 SELECT ?2, program, records FROM turn_programs WHERE turn = ?1 AND true \
                 ON CONFLICT(turn, program) DO UPDATE SET records = records + excluded.records",
                params![f, p],
            )
            .ctx("merge program counts")?;
            c.execute("UPDATE objects SET born_turn = ?2 WHERE born_turn = ?1", params![f, p])
                .ctx("move birth turns")?;
        }
        c.execute("DELETE FROM turn_programs WHERE turn = ?1", [f]).ctx("drop program counts")?;
        // P's statistics now span P to the next kept checkpoint: `log`
        // computes them again, over whole trees (the paths noted at P's
        // seal do not place F's changes).
        c.execute("DELETE FROM turn_summaries WHERE turn = ?1 OR turn = ?2", params![f, p_or])
            .ctx("drop turn statistics")?;
        c.execute("UPDATE checkpoints SET parent = ?2 WHERE parent = ?1", params![f, parent])
            .ctx("re-parent checkpoints")?;
        c.execute(
            "INSERT OR REPLACE INTO forgotten(checkpoint, message_id, label, merged_into, by, at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![f, message_id, label, p, by, at],
        )
        .ctx("note a forgotten checkpoint")?;
        c.execute("DELETE FROM snapshots WHERE checkpoint = ?1", [f]).ctx("drop snapshot name")?;
        c.execute("DELETE FROM checkpoints WHERE id = ?1", [f]).ctx("drop checkpoint")?;
        Ok(merged)
    }

    /// Forgets the cached content of those of `objects` whose newest
    /// content record no longer holds the cached list (it went with a
    /// dropped record): the cache is only trusted while a record keeps its
    /// chunks counted (see `refs.rs`), and `fsck` would find a stale row
    /// naming a freed chunk.
    pub fn forget_stale_known(&self, objects: &[ObjectId]) -> MetaResult<()> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "DELETE FROM known_content AS k WHERE k.object = ?1 AND k.chunks IS NOT (SELECT o.chunks FROM object_pre o \
                 WHERE o.object = ?1 AND o.chunks IS NOT NULL ORDER BY o.turn DESC LIMIT 1)",
            )
            .ctx("prepare")?;
        let mut seen = HashSet::new();
        for id in objects {
            if seen.insert(*id) {
                stmt.execute([id.0]).ctx("forget stale cached content")?;
            }
        }
        Ok(())
    }

    /// Of `candidates`, the objects no entry record names (no view can
    /// reach them through a name) and that are not pending, with their
    /// handles: if one sits alone in the attic, nothing needs it.
    pub fn unnamed_objects(&self, candidates: &[ObjectId]) -> MetaResult<Vec<(ObjectId, Vec<u8>)>> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT o.handle FROM objects o WHERE o.id = ?1 AND o.handle IS NOT NULL \
                 AND NOT EXISTS (SELECT 1 FROM entry_pre e WHERE e.target = o.id) \
                 AND NOT EXISTS (SELECT 1 FROM pending p WHERE p.handle = o.handle)",
            )
            .ctx("prepare")?;
        for id in candidates {
            if !seen.insert(*id) {
                continue;
            }
            if let Some(handle) = stmt.query_row([id.0], |r| r.get::<_, Vec<u8>>(0)).optional().ctx("read object")? {
                out.push((*id, handle));
            }
        }
        Ok(out)
    }

    /// Drops every record of an object no view can reach (its attic entry
    /// is being removed), noting the removal (`gc_attic`); the chunk lists
    /// of the records dropped.
    pub fn drop_unreachable(&self, id: ObjectId) -> MetaResult<Vec<Vec<u8>>> {
        // A pending file whose list is one of these records keeps a copy.
        self.count_lists(
            "UPDATE pending SET chunks = (SELECT ff.chunks FROM object_pre ff \
                 WHERE ff.turn = pending.source_turn AND ff.object = pending.source_object), \
                 source_turn = NULL, source_object = NULL \
             WHERE source_object = ?1 AND chunks IS NULL RETURNING chunks",
            [id.0],
            1,
        )?;
        let lists: Vec<Vec<u8>> = self
            .count_lists("DELETE FROM object_pre WHERE object = ?1 RETURNING chunks", [id.0], -1)?
            .into_iter()
            .flatten()
            .collect();
        self.forget_known_content(id)?;
        self.conn.execute("INSERT OR IGNORE INTO gc_attic(object) VALUES (?1)", [id.0]).ctx("note attic removal")?;
        // Its slot goes after the commit; a rewind must no longer count on it.
        self.attic_take(id)?;
        Ok(lists)
    }

    /// For `reset`, once every checkpoint before `keep` is forgotten: drops
    /// the marks of outside changes before it (no view before it is left)
    /// and lists the objects in their attic slot that nothing reaches any
    /// more (not pending, named by no entry record: the records left are
    /// those of turn `keep`, whose removals stay in the attic).
    pub fn reset_attic(&self, keep: i64) -> MetaResult<Vec<ObjectId>> {
        self.conn.execute("DELETE FROM tainted WHERE turn < ?1", [keep]).ctx("drop outside-change marks")?;
        let mut stmt = self
            .conn
            .prepare(
                "SELECT a.object FROM attic a LEFT JOIN objects o ON o.id = a.object \
                 WHERE NOT EXISTS (SELECT 1 FROM entry_pre e WHERE e.target = a.object) \
                 AND (o.handle IS NULL OR NOT EXISTS (SELECT 1 FROM pending p WHERE p.handle = o.handle))",
            )
            .ctx("prepare")?;
        let rows = stmt.query_map([], |r| r.get(0).map(ObjectId)).ctx("list the attic")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("list the attic")
    }

    /// Whether an entry record names object `id` (a view can reach it).
    pub fn is_named(&self, id: ObjectId) -> MetaResult<bool> {
        self.conn
            .prepare_cached("SELECT 1 FROM entry_pre WHERE target = ?1 LIMIT 1")
            .ctx("prepare")?
            .query_row([id.0], |_| Ok(()))
            .optional()
            .map(|r| r.is_some())
            .ctx("read entry records")
    }

    /// Attic entries a committed collection has still to remove.
    pub fn gc_attic(&self) -> MetaResult<Vec<ObjectId>> {
        let mut stmt = self.conn.prepare("SELECT object FROM gc_attic").ctx("prepare")?;
        let rows = stmt.query_map([], |r| r.get(0).map(ObjectId)).ctx("list attic removals")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("list attic removals")
    }

    /// Notes chunks a committed collection must free (its intent).
    pub fn add_gc_chunks(&self, ids: &HashSet<ChunkId>) -> MetaResult<()> {
        let mut stmt = self.conn.prepare_cached("INSERT OR IGNORE INTO gc_chunks(chunk) VALUES (?1)").ctx("prepare")?;
        for id in ids {
            stmt.execute([id.as_bytes().as_slice()]).ctx("note a chunk to free")?;
        }
        Ok(())
    }

    /// Chunks a committed collection has still to free.
    pub fn gc_chunks(&self) -> MetaResult<Vec<ChunkId>> {
        self.chunk_ids("SELECT chunk FROM gc_chunks", "chunk id in gc_chunks")
    }

    /// The chunks were freed and the attic entries removed.
    pub fn clear_gc_chunks(&self) -> MetaResult<()> {
        self.conn.execute("DELETE FROM gc_chunks", []).ctx("clear chunks to free")?;
        self.conn.execute("DELETE FROM gc_attic", []).ctx("clear attic removals")?;
        Ok(())
    }

    /// Lowers the store size the newest checkpoint recorded to `bytes` if
    /// it is more: compaction is about to make the packs smaller, and the
    /// mount-time check takes packs smaller than that size for lost ones.
    pub fn lower_store_bytes(&self, bytes: i64) -> MetaResult<()> {
        self.conn
            .execute(
                "UPDATE checkpoints SET store_bytes_at_start = MIN(store_bytes_at_start, ?1) \
                 WHERE id = (SELECT MAX(id) FROM checkpoints)",
                [bytes],
            )
            .ctx("lower the recorded store size")?;
        Ok(())
    }

    /// Lowers the record bytes the packs held at the last seal (the mount's
    /// check for lost packs) to `bytes`, when a compaction leaves less.
    pub fn lower_sealed_record_bytes(&self, bytes: i64) -> MetaResult<()> {
        self.conn
            .execute(
                "UPDATE state SET value = CAST(MIN(CAST(value AS INTEGER), ?1) AS TEXT) WHERE key = ?2",
                rusqlite::params![bytes, super::SEALED_RECORD_BYTES],
            )
            .ctx("lower the sealed record bytes")?;
        Ok(())
    }

    /// Per turn: (turn, records, bytes of content captured), and the
    /// total bytes of content every record refers to (for `du`).
    pub fn turn_usage(&self) -> MetaResult<Vec<(i64, u64, u64)>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT turn, SUM(n), SUM(bytes) FROM ( \
                   SELECT turn, COUNT(*) AS n, SUM(CASE WHEN chunks IS NOT NULL THEN size ELSE 0 END) AS bytes \
                   FROM object_pre GROUP BY turn \
                   UNION ALL SELECT turn, COUNT(*), 0 FROM entry_pre GROUP BY turn) \
                 GROUP BY turn ORDER BY turn",
            )
            .ctx("prepare")?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)? as u64, r.get::<_, i64>(2)? as u64)))
            .ctx("measure turns")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("measure turns")
    }

    /// Runs `f` in a transaction that is always rolled back: what a
    /// collection would do, for `--dry-run`.
    pub fn rolled_back<T>(&self, f: impl FnOnce(&Meta) -> MetaResult<T>) -> MetaResult<T> {
        self.conn.execute_batch("BEGIN IMMEDIATE").ctx("begin")?;
        let out = f(self);
        self.conn.execute_batch("ROLLBACK").ctx("roll back")?;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::{Checkpoint, ObjectId, ObjectState, Reason, test_file_state};
    use crate::store::ContentRef;

    fn checkpoint(m: &Meta, n: i64) {
        m.insert_checkpoint(&Checkpoint {
            checkpoint: n,
            parent: (n > 0).then_some(n - 1),
            message_id: Some(format!("m{n}")),
            session: None,
            label: None,
            reason: Reason::Turn,
            created_at: n,
            store_bytes_at_start: 0,
            name: None,
            snapshot_message: None,
        })
        .unwrap();
    }

    fn list(data: &[u8]) -> (Vec<u8>, Vec<u8>, ChunkId) {
        let id = ChunkId::of(data);
        let r = ContentRef {
            hash: id,
            size: data.len() as u64,
            chunks: vec![crate::store::ChunkSpan { id, len: data.len() as u32 }],
        };
        (id.as_bytes().to_vec(), r.encode_chunks(), id)
    }

    #[test]
    fn forgetting_merges_into_the_previous_kept_turn_and_views_stay() {
        let m = Meta::open_in_memory().unwrap();
        for n in 0..4 {
            checkpoint(&m, n);
        }
        let (d, o, q) = (ObjectId(1), ObjectId(2), ObjectId(3));
        let (h1, l1, c1) = list(b"one");
        let (h2, l2, c2) = list(b"two");
        // Turn 1: o's mode changed (no content); turn 2: o rewritten (content
        // "two"), q rewritten (content "one"); names x (turn 1 and 2), y (turn 2).
        m.record_object(1, o, &test_file_state(3), None).unwrap();
        let mut with = test_file_state(3);
        with.content = Some((h2.clone(), l2.clone()));
        m.record_object(2, o, &with, None).unwrap();
        with.content = Some((h1.clone(), l1.clone()));
        m.record_object(2, q, &with, None).unwrap();
        m.record_entry(1, d, b"x", None, None).unwrap();
        m.record_entry(2, d, b"x", Some(o), None).unwrap();
        m.record_entry(2, d, b"y", Some(q), None).unwrap();
        // What views of kept checkpoints 1 and 3 read.
        let views = |m: &Meta| -> Vec<_> {
            [1, 3]
                .iter()
                .map(|&k| {
                    (
                        m.object_at(o, k).unwrap().map(|s| ObjectState { content: None, ..s }),
                        m.content_at(o, k).unwrap().map(|c| c.2),
                        m.entry_at(d, b"x", k).unwrap(),
                        m.entry_at(d, b"y", k).unwrap(),
                        m.content_at(q, k).unwrap().map(|c| c.2),
                    )
                })
                .collect()
        };
        // Rewound files whose lists are the records of turn 2: o's record
        // goes (shadowed), q's moves.
        m.add_pending(b"ho", &h2, crate::meta::PendingList::Record(2, o), 0).unwrap();
        m.add_pending(b"hq", &h1, crate::meta::PendingList::Record(2, q), 0).unwrap();
        let before = views(&m);
        let merged = m.transaction(|m| m.forget_checkpoint(2, "forget", 99)).unwrap();
        assert_eq!(merged.dropped_records, 2, "o's record and x's record of turn 2 are shadowed by turn 1's");
        assert_eq!(merged.moved_records, 2, "q's record and y's entry move to turn 1");
        let after = views(&m);
        assert_eq!(before, after, "views of kept checkpoints 1 and 3 are unchanged");
        assert_eq!(m.content_at(o, 1).unwrap().unwrap().0, 1, "turn 1's record took turn 2's content");
        let pending: Vec<_> =
            m.pending_sources().unwrap().into_iter().map(|p| (p.handle, p.inline, p.source)).collect();
        assert!(pending.contains(&(b"ho".to_vec(), Some(l2.clone()), None)), "a copy of the dropped list: {pending:?}");
        assert!(pending.contains(&(b"hq".to_vec(), None, Some((1, q)))), "follows the moved record: {pending:?}");
        let ids: Vec<i64> = m.checkpoints().unwrap().iter().map(|c| c.checkpoint).collect();
        assert_eq!(ids, vec![0, 1, 3]);
        assert_eq!(m.checkpoints().unwrap()[2].parent, Some(1), "3 hangs from 2's parent");
        let f = m.forgotten("m2").unwrap().unwrap();
        assert_eq!((f.checkpoint, f.merged_into, f.by.as_str()), (2, Some(1), "forget"));
        // Both contents are still referenced (o's by turn 1, q's moved).
        let candidates: HashSet<ChunkId> = [c1, c2].into_iter().collect();
        assert!(m.unreferenced_chunks().unwrap().is_empty());
        assert_eq!(m.wrong_chunk_counts().unwrap(), vec![], "the counts follow the merge");
        assert_eq!(m.chunk_count(&c2).unwrap(), Some(2), "o's record in turn 1 (borrowed) and the pending copy");
        // Once the rewound files are settled, forgetting 1 and 0 (the
        // oldest: its records are dropped) frees both.
        m.remove_pending(b"ho").unwrap();
        m.remove_pending(b"hq").unwrap();
        let mut lists = Vec::new();
        for f in [0, 1] {
            lists.extend(m.transaction(|m| m.forget_checkpoint(f, "retention", 100)).unwrap().dropped_lists);
        }
        assert_eq!(lists.len(), 2);
        assert_eq!(m.unreferenced_chunks().unwrap(), candidates, "both counts fell to zero");
        assert_eq!(m.wrong_chunk_counts().unwrap(), vec![]);
        assert!(m.transaction(|m| m.forget_checkpoint(3, "forget", 1)).is_err(), "the newest is never forgotten");
    }

    #[test]
    fn forgetting_the_oldest_or_an_unreachable_object_leaves_pending_files_a_copy_of_their_list() {
        let m = Meta::open_in_memory().unwrap();
        for n in 0..3 {
            checkpoint(&m, n);
        }
        let (o, q) = (ObjectId(2), ObjectId(3));
        let (h1, l1, c1) = list(b"one");
        let (h2, l2, c2) = list(b"two");
        let mut with = test_file_state(3);
        with.content = Some((h1.clone(), l1.clone()));
        m.record_object(0, o, &with, None).unwrap();
        with.content = Some((h2.clone(), l2.clone()));
        m.record_object(1, q, &with, None).unwrap();
        // Rewound files whose lists are those records.
        m.add_pending(b"ho", &h1, crate::meta::PendingList::Record(0, o), 0).unwrap();
        m.add_pending(b"hq", &h2, crate::meta::PendingList::Record(1, q), 0).unwrap();
        // 0 is the oldest: its records are dropped, not moved.
        let merged = m.transaction(|m| m.forget_checkpoint(0, "reset", 9)).unwrap();
        assert_eq!(merged.dropped_records, 1);
        m.transaction(|m| m.drop_unreachable(q)).unwrap();
        let pending: Vec<_> =
            m.pending_sources().unwrap().into_iter().map(|p| (p.handle, p.inline, p.source)).collect();
        assert!(pending.contains(&(b"ho".to_vec(), Some(l1.clone()), None)), "{pending:?}");
        assert!(pending.contains(&(b"hq".to_vec(), Some(l2.clone()), None)), "{pending:?}");
        let candidates: HashSet<ChunkId> = [c1, c2].into_iter().collect();
        assert!(m.unreferenced_chunks().unwrap().is_empty(), "the pending files still need both chunks");
        assert_eq!(m.wrong_chunk_counts().unwrap(), vec![]);
        assert!(candidates.iter().all(|c| m.chunk_count(c).unwrap() == Some(1)), "each pending copy counts once");
    }
}
