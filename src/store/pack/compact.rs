//! Pack compaction: a pack whose live records fill less than a threshold of
//! it is rewritten, its live records appended to the current pack, and the
//! old file deleted, so the space a collection released comes back.
//!
//! Puts go on meanwhile: the pack writer is taken for one copied record at
//! a time (a victim is never the pack being appended to: that one is
//! retired first), and for the final index swap.
//!
//! Crash safety, in this order:
//! 1. the live records are appended to the current pack, between other
//!    puts (unindexed: a crash here leaves duplicates, which recovery
//!    indexes with `INSERT OR IGNORE` when they are past the indexed end,
//!    keeping the old rows, and otherwise leaves as dead bytes);
//! 2. the new pack data is fsynced;
//! 3. one index transaction points every row still at its old record at
//!    the copy and marks the old pack released to its end
//!    (`released_ends`), so recovery never scans it again; the WAL is
//!    checkpointed with fsync (`FULL`);
//! 4. the caller's `before_delete` runs (the journal lowers the store size
//!    the mount-time check compares the packs with);
//! 5. the old pack is deleted and the directory fsynced.
//!
//! A crash after 3 leaves an old pack without rows: the next compaction
//! deletes it. Readers that looked a chunk up before 3 and open the old
//! pack after 5 look it up again (`PackStore::get`).

use std::os::unix::fs::FileExt;
use std::sync::MutexGuard;

use rusqlite::params;

use super::{AppendError, ChunkId, pack_file_name, u64_of};
use super::{Location, PackStore, RECORD_HEADER_LEN, RecordHeader, StoreError, encode_chunk, i64_of, list_packs};
use crate::store::StoreStats;

/// What a compaction did.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Compacted {
    /// Packs rewritten (and deleted).
    pub packs: u64,
    /// Live records copied.
    pub records: u64,
    /// Bytes the packs took less on disk afterwards.
    pub bytes_reclaimed: u64,
    /// The longest time it held the pack writer (which a put waits for) at
    /// once, in milliseconds: one record's copy, or the final index swap.
    #[serde(default)]
    pub longest_writer_hold_ms: f64,
    /// Packs whose live bytes it summed: those that had chunks released
    /// since they were last measured, not every pack.
    #[serde(default)]
    pub packs_measured: u64,
}

/// A pack's live bytes and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PackUse {
    pub pack: u32,
    pub live_bytes: u64,
    pub file_bytes: u64,
}

/// Each of packs `numbers`' live bytes (records the index points at) and size.
fn measure(conn: &rusqlite::Connection, dir: &std::path::Path, numbers: &[u32]) -> Result<Vec<PackUse>, StoreError> {
    let sql_err = |e| StoreError::sqlite("measuring packs", e);
    let mut stmt =
        conn.prepare_cached("SELECT COALESCE(SUM(stored_len + ?2), 0) FROM chunks WHERE pack = ?1").map_err(sql_err)?;
    let mut out = Vec::new();
    for &number in numbers {
        let live: i64 = stmt.query_row(params![number, i64_of(RECORD_HEADER_LEN)], |r| r.get(0)).map_err(sql_err)?;
        out.push(PackUse {
            pack: number,
            live_bytes: u64_of(live, "live bytes")?,
            file_bytes: file_bytes(dir, number)?,
        });
    }
    Ok(out)
}

fn file_bytes(dir: &std::path::Path, number: u32) -> Result<u64, StoreError> {
    let path = dir.join(pack_file_name(number));
    Ok(std::fs::metadata(&path).map_err(|e| StoreError::io(format!("measuring pack {}", path.display()), e))?.len())
}

impl PackStore {
    /// Every pack's live bytes (records the index points at) and size.
    pub fn pack_use(&self) -> Result<Vec<PackUse>, StoreError> {
        measure(&self.reader(), &self.packs.dir, &list_packs(&self.packs.dir)?)
    }

    /// The bytes of every pack file (their sizes, no index row read).
    fn packs_bytes(&self) -> Result<u64, StoreError> {
        list_packs(&self.packs.dir)?.into_iter().map(|n| file_bytes(&self.packs.dir, n)).sum()
    }

    /// The packs compaction may rewrite: those that had chunks released
    /// since they were last measured (`released_packs`) and those still
    /// below `threshold`, measured (on a reader: puts go on). A pack found
    /// at or above it leaves the set (only a release can lower its live
    /// fraction, and that marks it again); one below it stays until it is
    /// rewritten (however little it would give back: `reset` takes those
    /// too). A pack is unmarked only if no release counted in it since it
    /// was measured (`releases` unchanged).
    fn measure_released(&self, threshold: f64) -> Result<Vec<PackUse>, StoreError> {
        let sql_err = |e| StoreError::sqlite("measuring released packs", e);
        let (marked, measured) = {
            let conn = self.reader();
            let marked: Vec<(u32, i64)> = {
                let mut stmt = conn.prepare_cached("SELECT pack, releases FROM released_packs").map_err(sql_err)?;
                let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).map_err(sql_err)?;
                rows.collect::<rusqlite::Result<_>>().map_err(sql_err)?
            };
            let existing: std::collections::HashSet<u32> = list_packs(&self.packs.dir)?.into_iter().collect();
            let present: Vec<u32> = marked.iter().map(|m| m.0).filter(|n| existing.contains(n)).collect();
            let measured = measure(&conn, &self.packs.dir, &present)?;
            (marked, measured)
        };
        let settled: std::collections::HashSet<u32> = measured
            .iter()
            .filter(|u| u.live_bytes as f64 >= threshold * u.file_bytes as f64)
            .map(|u| u.pack)
            .collect();
        let present: std::collections::HashSet<u32> = measured.iter().map(|u| u.pack).collect();
        let writer = self.writer()?;
        let tx = writer.conn.unchecked_transaction().map_err(sql_err)?;
        for (n, releases) in marked.into_iter().filter(|(n, _)| settled.contains(n) || !present.contains(n)) {
            tx.execute("DELETE FROM released_packs WHERE pack = ?1 AND releases = ?2", params![n, releases])
                .map_err(sql_err)?;
        }
        tx.commit().map_err(sql_err)?;
        Ok(measured)
    }

    /// Rewrites every pack whose live bytes are under `threshold` of its
    /// size and that would give back at least `min_reclaim` bytes (see the
    /// module comment); `before_delete` runs once, after the index points
    /// at the copies and before any old pack is deleted, with what the index
    /// then holds.
    pub fn compact_packs(
        &self,
        threshold: f64,
        min_reclaim: u64,
        before_delete: &mut dyn FnMut(StoreStats) -> Result<(), StoreError>,
    ) -> Result<Compacted, StoreError> {
        if self.read_only {
            return Err(StoreError::ReadOnly { dir: self.dir.display().to_string() });
        }
        let packs = self.measure_released(threshold)?;
        let measured = packs.len() as u64;
        let victims: Vec<PackUse> = packs
            .into_iter()
            .filter(|u| (u.live_bytes as f64) < threshold * u.file_bytes as f64)
            .filter(|u| u.file_bytes.saturating_sub(u.live_bytes) >= min_reclaim)
            .collect();
        let mut out = Compacted { packs_measured: measured, ..Default::default() };
        if victims.is_empty() {
            return Ok(out);
        }
        let disk_before = self.packs_bytes()?;
        // The writer is taken for one record at a time, so puts go on
        // between them: only the pack being appended to is written, and a
        // victim is never it (it is retired first).
        let mut held = std::time::Duration::ZERO;
        let lock = || -> Result<(MutexGuard<'_, super::Writer>, std::time::Instant), StoreError> {
            let writer = self.writer()?;
            if writer.poisoned {
                return Err(StoreError::Poisoned);
            }
            Ok((writer, std::time::Instant::now()))
        };
        {
            let (mut writer, since) = lock()?;
            if let Some(current) = writer.current.as_ref()
                && victims.iter().any(|v| v.pack == current.number)
            {
                let old = writer.current.take().ok_or(StoreError::Poisoned)?;
                old.file.sync_data().map_err(|e| StoreError::io(format!("syncing pack {}", old.path.display()), e))?;
            }
            held = held.max(since.elapsed());
        }
        let sql_err = |e| StoreError::sqlite("compacting packs", e);
        let mut moves: Vec<(ChunkId, Location, Location)> = Vec::new();
        for v in &victims {
            let rows: Vec<(Vec<u8>, i64, i64, i64, u8)> = {
                let conn = self.reader();
                let mut stmt = conn
                    .prepare(
                        "SELECT id, offset, stored_len, raw_len, codec FROM chunks WHERE pack = ?1 ORDER BY offset",
                    )
                    .map_err(sql_err)?;
                let rows = stmt
                    .query_map([v.pack], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
                    .map_err(sql_err)?;
                rows.collect::<rusqlite::Result<_>>().map_err(sql_err)?
            };
            for (id, offset, stored_len, raw_len, codec) in rows {
                let id = ChunkId::from_slice(&id)?;
                let old = Location {
                    pack: v.pack,
                    offset: u64_of(offset, "offset")?,
                    stored_len: u64_of(stored_len, "stored length")?,
                    raw_len: u64_of(raw_len, "raw length")?,
                    codec,
                };
                // Verified on the way: a damaged record is not copied (it
                // stays for fsck to report, and the old pack stays).
                let data = self.read_record(&id, &old)?;
                let (codec, payload) = encode_chunk(&data);
                let header = RecordHeader { id, codec, raw_len: data.len() as u64, stored_len: payload.len() as u64 };
                let mut record = Vec::with_capacity(header.record_len() as usize);
                record.extend_from_slice(&header.encode());
                record.extend_from_slice(&payload);
                let limit = self.options.pack_size_limit;
                let (mut writer, since) = lock()?;
                let pack =
                    writer.pack_for(&self.packs.dir, record.len() as u64, limit).map_err(AppendError::into_error)?;
                let new = Location {
                    pack: pack.number,
                    offset: pack.end,
                    stored_len: header.stored_len,
                    raw_len: header.raw_len,
                    codec: codec as u8,
                };
                pack.file
                    .write_all_at(&record, new.offset)
                    .map_err(|e| StoreError::io(format!("copying chunk {id} into pack {}", pack.path.display()), e))?;
                pack.end += record.len() as u64;
                writer.pack_unsynced = true;
                held = held.max(since.elapsed());
                drop(writer);
                moves.push((id, old, new));
            }
        }
        let (mut writer, since) = lock()?;
        if let Some(pack) = writer.current.as_ref() {
            pack.file.sync_data().map_err(|e| StoreError::io(format!("syncing pack {}", pack.path.display()), e))?;
        }
        for d in [&self.packs.dir, &self.dir] {
            std::fs::File::open(d)
                .and_then(|f| f.sync_all())
                .map_err(|e| StoreError::io(format!("syncing directory {}", d.display()), e))?;
        }
        {
            let tx = writer.conn.unchecked_transaction().map_err(sql_err)?;
            for (id, old, new) in &moves {
                // Only a row still at the copied record moves (nothing else
                // changes a victim's rows meanwhile; this keeps it so).
                tx.execute(
                    "UPDATE chunks SET pack = ?2, offset = ?3, stored_len = ?4, raw_len = ?5, codec = ?6 \
                     WHERE id = ?1 AND pack = ?7 AND offset = ?8",
                    params![
                        id.as_bytes().as_slice(),
                        new.pack,
                        i64_of(new.offset),
                        i64_of(new.stored_len),
                        i64_of(new.raw_len),
                        new.codec,
                        old.pack,
                        i64_of(old.offset)
                    ],
                )
                .map_err(sql_err)?;
            }
            for v in &victims {
                tx.execute(
                    "INSERT INTO released_ends(pack, end) VALUES (?1, ?2) \
                     ON CONFLICT(pack) DO UPDATE SET end = MAX(end, excluded.end)",
                    params![v.pack, i64_of(v.file_bytes)],
                )
                .map_err(sql_err)?;
            }
            tx.commit().map_err(sql_err)?;
        }
        writer
            .conn
            .query_row("PRAGMA wal_checkpoint(FULL)", [], |_| Ok(()))
            .map_err(|e| StoreError::sqlite("making the compacted index durable", e))?;
        writer.totals = None;
        held = held.max(since.elapsed());
        drop(writer);
        // Killed here: the index points at the copies, the old packs stay.
        crate::faults::kill_point("compact-indexed");
        let (chunks, raw, stored): (i64, i64, i64) = self
            .reader()
            .query_row(
                "SELECT COUNT(*), COALESCE(SUM(raw_len), 0), COALESCE(SUM(stored_len), 0) FROM chunks",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .map_err(sql_err)?;
        before_delete(StoreStats {
            chunks: u64_of(chunks, "chunk count")?,
            raw_bytes: u64_of(raw, "raw bytes")?,
            stored_bytes: u64_of(stored, "stored bytes")?,
        })?;
        for v in &victims {
            let path = self.packs.dir.join(pack_file_name(v.pack));
            // A reader holding the old pack open keeps reading it; one that
            // looks it up again finds the copy.
            std::fs::remove_file(&path).map_err(|e| StoreError::io(format!("deleting pack {}", path.display()), e))?;
            // Gone: nothing left to measure (killed before this, the next
            // compaction finds the file gone and drops the mark).
            self.writer()?.conn.execute("DELETE FROM released_packs WHERE pack = ?1", [v.pack]).map_err(sql_err)?;
            out.packs += 1;
            log::info!("Compacted pack {}: {} of {} bytes were live.", path.display(), v.live_bytes, v.file_bytes);
        }
        out.records = moves.len() as u64;
        log::debug!("Compaction held the pack writer {:.2} ms at most at a time.", held.as_secs_f64() * 1000.0);
        out.longest_writer_hold_ms = held.as_secs_f64() * 1000.0;
        let disk_after = self.packs_bytes()?;
        out.bytes_reclaimed = disk_before.saturating_sub(disk_after);
        std::fs::File::open(&self.packs.dir)
            .and_then(|f| f.sync_all())
            .map_err(|e| StoreError::io(format!("syncing directory {}", self.packs.dir.display()), e))?;
        Ok(out)
    }
}
