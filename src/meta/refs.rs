//! Chunk reference counts (schema 10, `chunk_refs`): for every chunk, how
//! many times the content lists of pre-image records (`object_pre.chunks`)
//! and pending files (`pending.chunks`) name it. Every statement that adds
//! or removes such a list adjusts the counts in the same transaction, so a
//! collection finds the chunks nothing needs any more by reading the rows
//! whose count is zero (an index of them), not every list of the history:
//! its cost follows what it frees.
//!
//! A row at zero stays until a collection frees its chunk (a pending file
//! settled, a record dropped by `fsck --repair` leave one too). Cached
//! content (`known_content`) is not counted: a cached list is only trusted
//! while the object's newest content record holds the same list
//! ([`Meta::known_content`]), which keeps its chunks counted.

use std::collections::{HashMap, HashSet};

use rusqlite::{OptionalExtension, params};

use super::{Ctx, Meta, MetaError, MetaResult};
use crate::store::{ChunkId, ContentRef};

/// Adds `?2` to chunk `?1`'s count, making its row if it has none (the
/// one statement every count goes up by).
const ADD_REFS: &str =
    "INSERT INTO chunk_refs(chunk, refs) VALUES (?1, ?2) ON CONFLICT(chunk) DO UPDATE SET refs = refs + excluded.refs";

/// Occurrences of each chunk in a list (an undecodable list names none:
/// it is counted the same way when added and removed, and `fsck` reports it).
fn occurrences(list: &[u8]) -> HashMap<ChunkId, i64> {
    let mut out = HashMap::new();
    for s in ContentRef::decode_chunks(list).unwrap_or_default() {
        *out.entry(s.id).or_insert(0) += 1;
    }
    out
}

/// A chunk whose stored count differs from what the lists say (`fsck`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrongCount {
    pub chunk: ChunkId,
    /// The stored count (None: no row).
    pub stored: Option<i64>,
    /// What the lists say.
    pub actual: i64,
}

impl Meta {
    /// Runs `f` atomically, inside the caller's transaction or alone (a
    /// savepoint): a list and its counts change together.
    pub(crate) fn atomic<T>(&self, f: impl FnOnce(&Meta) -> MetaResult<T>) -> MetaResult<T> {
        self.enclosed(["SAVEPOINT counted", "RELEASE counted", "ROLLBACK TO counted; RELEASE counted"], f)
    }

    /// A content list was added (`delta` 1) or removed (-1).
    pub(crate) fn count_list(&self, list: &[u8], delta: i64) -> MetaResult<()> {
        let mut add = self.conn.prepare_cached(ADD_REFS).ctx("prepare")?;
        for (id, n) in occurrences(list) {
            let n = n * delta;
            if n < 0 {
                // A count never goes below zero: a missing row means the
                // counts were already wrong (`fsck` says so), and freeing on
                // that ground could lose a chunk something needs.
                let changed = self
                    .conn
                    .prepare_cached("UPDATE chunk_refs SET refs = MAX(refs + ?2, 0) WHERE chunk = ?1")
                    .ctx("prepare")?
                    .execute(params![id.as_bytes().as_slice(), n])
                    .ctx("count chunk references")?;
                if changed == 0 {
                    log::warn!("chunk {id} had no reference count when a list naming it went");
                }
            } else {
                add.execute(params![id.as_bytes().as_slice(), n]).ctx("count chunk references")?;
            }
        }
        Ok(())
    }

    /// Adjusts the counts for every list `sql` returns (a statement with
    /// `RETURNING chunks`, or a query of lists about to go).
    /// The lists, one per row (None: a row without content).
    pub(crate) fn count_lists(
        &self,
        sql: &str,
        args: impl rusqlite::Params,
        delta: i64,
    ) -> MetaResult<Vec<Option<Vec<u8>>>> {
        let lists: Vec<Option<Vec<u8>>> = {
            let mut stmt = self.conn.prepare_cached(sql).ctx("prepare")?;
            let rows = stmt.query_map(args, |r| r.get(0)).ctx("change content lists")?;
            rows.collect::<rusqlite::Result<_>>().ctx("change content lists")?
        };
        for list in lists.iter().flatten() {
            self.count_list(list, delta)?;
        }
        Ok(lists)
    }

    /// Up to `limit` chunks no list names any more (count zero), for a
    /// collection to free.
    pub fn unreferenced_chunks(&self, limit: usize) -> MetaResult<HashSet<ChunkId>> {
        let limit = limit.min(i64::MAX as usize) as i64;
        Ok(self
            .chunk_ids("SELECT chunk FROM chunk_refs WHERE refs = 0 LIMIT ?1", [limit], "chunk id in chunk_refs")?
            .into_iter()
            .collect())
    }

    /// The chunk ids a query returns (`what`: the column, for errors).
    pub(super) fn chunk_ids(
        &self,
        sql: &str,
        args: impl rusqlite::Params,
        what: &'static str,
    ) -> MetaResult<Vec<ChunkId>> {
        let mut stmt = self.conn.prepare_cached(sql).ctx("prepare")?;
        let rows = stmt.query_map(args, |r| r.get::<_, Vec<u8>>(0)).ctx("list chunks")?;
        let mut out = Vec::new();
        for b in rows {
            let b = b.ctx("list chunks")?;
            out.push(ChunkId::from_slice(&b).map_err(|_| MetaError::Malformed { what })?);
        }
        Ok(out)
    }

    /// The chunks a collection frees leave the counts.
    pub fn drop_chunk_counts(&self, ids: &HashSet<ChunkId>) -> MetaResult<()> {
        let mut stmt =
            self.conn.prepare_cached("DELETE FROM chunk_refs WHERE chunk = ?1 AND refs = 0").ctx("prepare")?;
        for id in ids {
            stmt.execute([id.as_bytes().as_slice()]).ctx("drop a chunk count")?;
        }
        Ok(())
    }

    /// The stored count of one chunk (None: no row).
    pub fn chunk_count(&self, id: &ChunkId) -> MetaResult<Option<i64>> {
        self.conn
            .prepare_cached("SELECT refs FROM chunk_refs WHERE chunk = ?1")
            .ctx("prepare")?
            .query_row([id.as_bytes().as_slice()], |r| r.get(0))
            .optional()
            .ctx("read a chunk count")
    }

    /// Chunks whose stored count is not what the lists say (`fsck`; reads
    /// every list). A zero row where nothing names the chunk is right: its
    /// chunk waits for a collection.
    pub fn wrong_chunk_counts(&self) -> MetaResult<Vec<WrongCount>> {
        let mut actual = actual_counts(&self.conn)?;
        let mut out = Vec::new();
        let mut stmt = self.conn.prepare_cached("SELECT chunk, refs FROM chunk_refs").ctx("prepare")?;
        let mut rows = stmt.query([]).ctx("list chunk counts")?;
        while let Some(r) = rows.next().ctx("list chunk counts")? {
            let b: Vec<u8> = r.get(0).ctx("read a chunk count")?;
            let stored: i64 = r.get(1).ctx("read a chunk count")?;
            let Ok(chunk) = ChunkId::from_slice(&b) else { continue };
            let actual = actual.remove(&chunk).unwrap_or(0);
            if stored != actual {
                out.push(WrongCount { chunk, stored: Some(stored), actual });
            }
        }
        out.extend(actual.into_iter().map(|(chunk, actual)| WrongCount { chunk, stored: None, actual }));
        out.sort_by_key(|w| w.chunk);
        Ok(out)
    }

    /// Sets every count from the lists (`fsck --repair`; see [`recount`]).
    pub fn recount_chunks(&self) -> MetaResult<()> {
        self.atomic(|m| recount(&m.conn))
    }
}

/// What the counts should be: every record's and pending file's list.
fn actual_counts(conn: &rusqlite::Connection) -> MetaResult<HashMap<ChunkId, i64>> {
    let mut counts = HashMap::new();
    for sql in [
        "SELECT chunks FROM object_pre WHERE chunks IS NOT NULL",
        "SELECT chunks FROM pending WHERE chunks IS NOT NULL",
    ] {
        let mut stmt = conn.prepare(sql).ctx("prepare")?;
        let mut rows = stmt.query([]).ctx("list content lists")?;
        while let Some(r) = rows.next().ctx("list content lists")? {
            let list: Vec<u8> = r.get(0).ctx("read content list")?;
            for (id, n) in occurrences(&list) {
                *counts.entry(id).or_insert(0) += n;
            }
        }
    }
    Ok(counts)
}

/// Sets every count from the lists (the migration to schema 10, and
/// `fsck --repair`). A chunk that had a row and that nothing names keeps
/// a zero row, so the next collection frees it.
pub(super) fn recount(conn: &rusqlite::Connection) -> MetaResult<()> {
    let counts = actual_counts(conn)?;
    conn.execute("UPDATE chunk_refs SET refs = 0", []).ctx("recount chunk references")?;
    // Every count is zero now: adding sets it.
    let mut stmt = conn.prepare_cached(ADD_REFS).ctx("prepare")?;
    for (id, n) in counts {
        stmt.execute(params![id.as_bytes().as_slice(), n]).ctx("recount chunk references")?;
    }
    Ok(())
}

#[cfg(test)]
impl Meta {
    /// Sets a count by hand, as a bug or a stray write would (tests of `fsck`).
    pub fn set_chunk_count_for_test(&self, id: &ChunkId, refs: i64) -> MetaResult<()> {
        self.conn
            .execute("DELETE FROM chunk_refs WHERE chunk = ?1", [id.as_bytes().as_slice()])
            .ctx("set a chunk count")?;
        self.conn.execute(ADD_REFS, params![id.as_bytes().as_slice(), refs]).ctx("set a chunk count")?;
        Ok(())
    }
}
