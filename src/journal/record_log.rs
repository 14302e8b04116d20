//! The journal's append-only record log: every pre-image is appended to
//! this file before the change it protects is applied, which is what
//! makes it survive a SIGKILL of the daemon. Records are folded into
//! SQLite in large transactions (a SQLite commit per file operation would
//! dominate the cost of small-file workloads) and the log is then emptied.
//! Replaying it at open folds whatever a crash left behind; folding is
//! idempotent, so a crash between the fold and the truncation is harmless.
//!
//! The file is preallocated and mapped shared: an append is a copy into
//! the mapping, which is in the page cache (as a `write()` is) when the
//! copy ends, without a system call or an update of the file's inode per
//! record. Emptying zeroes what was written, keeping the blocks. Where
//! the filesystem cannot preallocate, each append is one `write()`.
//!
//! Frame: u32 LE payload length, u32 LE checksum (the first 4 bytes of the
//! payload's blake3), payload (JSON of a `LogRecord`). A torn or corrupt
//! frame ends the replay; everything after it is discarded. The log ends
//! at the first frame of zeros (a zero-length frame never checks: the
//! checksum of no bytes is not zero).

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::meta::{Intents, Objects, PreImages};
use crate::meta::{Meta, MetaResult, ObjectId, ObjectState, PendingList};

/// One logged fact.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum LogRecord {
    /// A new object id for a handle.
    Object { id: i64, handle: Vec<u8>, kind: u8 },
    /// An entry pre-image.
    Entry { turn: i64, dir: i64, name: Vec<u8>, target: Option<i64>, program: Option<String> },
    /// An object pre-image.
    ObjectPre { turn: i64, object: i64, state: ObjectState, program: Option<String> },
    /// Content known for an object at a ctime and size.
    Known { object: i64, ctime_ns: i64, size: u64, hash: Vec<u8>, chunks: Vec<u8> },
    /// An object was created in `turn` (written by older versions, which
    /// gave a created object the id its handle already had).
    Born { id: i64, turn: i64 },
    /// A new object id for a handle created in `turn`: `Object` and `Born`
    /// in one record (one `write()` per created file).
    NewObject { id: i64, handle: Vec<u8>, kind: u8, born: i64 },
    /// Object `id` moved into its attic slot in `turn` (`None`: found
    /// there when the attic table was first filled).
    Attic { id: i64, turn: Option<i64> },
    /// Object `id` left its attic slot.
    AtticOut { id: i64 },
    /// A rewound file waits for its bytes (`pending`): the chunk list
    /// inline, or that of the pre-image record (turn, object).
    Pending { handle: Vec<u8>, hash: Vec<u8>, chunks: Option<Vec<u8>>, record: Option<(i64, i64)>, mtime_ns: i64 },
    /// A pending file has its bytes.
    Settled { handle: Vec<u8> },
}

impl LogRecord {
    /// The objects whose state in some checkpoint this record can change:
    /// what a view of them must read again once it is appended
    /// (`Journal::moved_since`).
    pub fn objects(&self) -> impl Iterator<Item = ObjectId> {
        let (a, b) = match self {
            LogRecord::Object { id, .. } | LogRecord::NewObject { id, .. } | LogRecord::Born { id, .. } => {
                (Some(*id), None)
            }
            LogRecord::Attic { id, .. } | LogRecord::AtticOut { id } => (Some(*id), None),
            LogRecord::Entry { dir, target, .. } => (Some(*dir), *target),
            LogRecord::ObjectPre { object, .. } | LogRecord::Known { object, .. } => (Some(*object), None),
            LogRecord::Pending { .. } | LogRecord::Settled { .. } => (None, None),
        };
        a.into_iter().chain(b).map(ObjectId)
    }
}

/// Applies records to the database (inside the caller's transaction).
pub fn fold(meta: &Meta, records: &[LogRecord]) -> MetaResult<()> {
    for r in records {
        match r {
            LogRecord::Object { id, handle, kind } => meta.insert_object(ObjectId(*id), handle, *kind)?,
            LogRecord::Entry { turn, dir, name, target, program } => {
                meta.record_entry(*turn, ObjectId(*dir), name, target.map(ObjectId), program.as_deref())?;
            }
            LogRecord::ObjectPre { turn, object, state, program } => {
                meta.record_object(*turn, ObjectId(*object), state, program.as_deref())?
            }
            LogRecord::Known { object, ctime_ns, size, hash, chunks } => {
                meta.set_known_content(ObjectId(*object), *ctime_ns, *size, hash, chunks)?
            }
            LogRecord::Born { id, turn } => meta.set_born(ObjectId(*id), *turn)?,
            LogRecord::NewObject { id, handle, kind, born } => {
                meta.insert_new_object(ObjectId(*id), handle, *kind)?;
                meta.set_born(ObjectId(*id), *born)?;
            }
            LogRecord::Attic { id, turn } => meta.attic_put(ObjectId(*id), *turn)?,
            LogRecord::AtticOut { id } => meta.attic_take(ObjectId(*id))?,
            LogRecord::Pending { handle, hash, chunks, record, mtime_ns } => {
                let list = match (record, chunks) {
                    (Some((turn, object)), _) => PendingList::Record(*turn, ObjectId(*object)),
                    (None, chunks) => PendingList::Inline(chunks.as_deref().unwrap_or_default()),
                };
                meta.add_pending(handle, hash, list, *mtime_ns)?
            }
            LogRecord::Settled { handle } => meta.remove_pending(handle)?,
        }
    }
    Ok(())
}

/// The log file.
pub struct RecordLog {
    file: File,
    /// Bytes of whole frames in the file.
    len: u64,
    /// Frames of records that protect no change (see `append_deferred`),
    /// written in front of the next `append`.
    deferred: Vec<u8>,
    /// The file, preallocated, mapped whole (`None` where the filesystem
    /// cannot preallocate: appends are `write()`s). Every byte past `len`
    /// is zero.
    map: Option<crate::sys::SharedMap>,
}

/// What a mapped log is preallocated to at open, and the least it grows
/// by: a fold empties it every `FOLD_BATCH` records (about 1.5 MiB of
/// small records), so it grows only for records that carry long chunk
/// lists.
const MAPPED_BYTES: u64 = 4 << 20;

fn checksum(payload: &[u8]) -> u32 {
    let h = blake3::hash(payload);
    let b = h.as_bytes();
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

impl RecordLog {
    /// Opens (creating) the log and returns the records it holds.
    pub fn open(path: &Path) -> std::io::Result<(RecordLog, Vec<LogRecord>)> {
        // The daemon runs with umask 0 (FUSE creates take the caller's
        // mode exactly): every file of its own gets an explicit mode. A
        // log others could write would let them forge history.
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = OpenOptions::new().create(true).read(true).write(true).truncate(false).mode(0o600).open(path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let (records, len) = parse(path, &bytes);
        let mut log = RecordLog { file, len: len as u64, deferred: Vec::new(), map: None };
        let size = (bytes.len() as u64).max(MAPPED_BYTES);
        match crate::sys::preallocate(log.file.as_fd(), size) {
            Ok(()) => {
                log.map = Some(crate::sys::SharedMap::new(log.file.as_fd(), size as usize)?);
                // A torn frame a crash left: zeroed, so that every byte
                // past the records is zero.
                if bytes[len..].iter().any(|&b| b != 0) {
                    log.zero(len as u64, bytes.len() as u64 - len as u64)?;
                }
            }
            Err(e) => {
                log::info!("journal log {}: appended with write() (cannot preallocate it: {e})", path.display());
                log.file.set_len(len as u64)?;
            }
        }
        Ok((log, records))
    }

    /// Whether the log at `path` holds records a daemon did not fold into
    /// the database (a killed one). Frames, not bytes: the log is
    /// preallocated, and a daemon that exits leaves it at its size, zeroed
    /// past its last record. An unreadable log counts as holding records.
    pub fn holds_records(path: &Path) -> bool {
        !Self::read(path).is_ok_and(|records| records.is_empty())
    }

    /// The records a log holds, read without opening it for writing (for
    /// checks beside the daemon that appends to it). A missing log holds none.
    pub fn read(path: &Path) -> std::io::Result<Vec<LogRecord>> {
        match std::fs::read(path) {
            Ok(bytes) => Ok(parse(path, &bytes).0),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }
}

/// The valid frames at the start of `bytes`, and the bytes they take; a
/// torn or corrupt frame ends them, as does a frame of zeros (the end of a
/// preallocated log).
fn parse(path: &Path, bytes: &[u8]) -> (Vec<LogRecord>, usize) {
    let mut records = Vec::new();
    let mut at = 0usize;
    while at + 8 <= bytes.len() {
        let len = u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]) as usize;
        let sum = u32::from_le_bytes([bytes[at + 4], bytes[at + 5], bytes[at + 6], bytes[at + 7]]);
        let Some(payload) = bytes.get(at + 8..at + 8 + len) else { break };
        if checksum(payload) != sum {
            break;
        }
        match serde_json::from_slice(payload) {
            Ok(r) => records.push(r),
            Err(_) => break,
        }
        at += 8 + len;
    }
    if bytes[at..].iter().any(|&b| b != 0) {
        log::warn!("journal log {}: discarding a torn tail of {} bytes", path.display(), bytes.len() - at);
    }
    (records, at)
}

impl RecordLog {
    /// Appends one record, and the deferred ones before it, with a single
    /// `write()`: durable against a crash of the daemon when it returns.
    pub fn append(&mut self, record: &LogRecord) -> std::io::Result<()> {
        let deferred = self.deferred.len();
        append_frame(&mut self.deferred, record)?;
        let written = self.write_deferred();
        if written.is_err() {
            // Kept for the next append; this record was refused.
            self.deferred.truncate(deferred);
        }
        written
    }

    /// Appends a record that protects no change (the note that an object
    /// was just created: lost in a crash, a rewind visits the object
    /// instead of skipping it). It is written in front of the next
    /// `append`, so every record written after it still follows it in the
    /// log, and a record naming its object id can never be durable without
    /// it. A creation then costs one `write()` instead of two.
    pub fn append_deferred(&mut self, record: &LogRecord) -> std::io::Result<()> {
        append_frame(&mut self.deferred, record)
    }

    /// Writes the deferred records.
    pub fn flush(&mut self) -> std::io::Result<()> {
        if self.deferred.is_empty() { Ok(()) } else { self.write_deferred() }
    }

    fn write_deferred(&mut self) -> std::io::Result<()> {
        let n = self.deferred.len() as u64;
        match &mut self.map {
            Some(map) => {
                if !map.write_at(self.len as usize, &self.deferred) {
                    let map = grow(&self.file, &mut self.map, self.len + n)?;
                    if !map.write_at(self.len as usize, &self.deferred) {
                        return Err(std::io::Error::other("the journal log's mapping did not grow"));
                    }
                }
            }
            None => {
                if let Err(e) = self.file.write_all_at(&self.deferred, self.len) {
                    // A write cut short (a full disk) must not leave half a
                    // frame: the records appended after it would be
                    // unreadable after a crash, since reading stops at the
                    // first torn frame.
                    if let Err(t) = self.file.set_len(self.len) {
                        log::error!("cannot cut the journal log back to {} bytes after a failed append: {t}", self.len);
                    }
                    return Err(e);
                }
            }
        }
        self.len += n;
        self.deferred.clear();
        Ok(())
    }

    /// Zeroes `[at, at + n)` of a mapped log: all of it from 0 through
    /// `FALLOC_FL_ZERO_RANGE` (one call, the blocks kept), else by copying
    /// zeros into the mapping.
    fn zero(&mut self, at: u64, n: u64) -> std::io::Result<()> {
        if at == 0 && crate::sys::zero_range(self.file.as_fd(), n).is_ok() {
            return Ok(());
        }
        let Some(map) = self.map.as_mut() else {
            return Err(std::io::Error::other("zeroing a journal log that is not mapped"));
        };
        let zeros = vec![0u8; 64 << 10];
        let mut done = 0;
        while done < n {
            let k = (n - done).min(zeros.len() as u64);
            if !map.write_at((at + done) as usize, &zeros[..k as usize]) {
                return Err(std::io::Error::other("zeroing past the journal log's mapping"));
            }
            done += k;
        }
        Ok(())
    }

    /// Empties the log once its records (the deferred ones too) are folded
    /// into the database.
    pub fn clear(&mut self) -> std::io::Result<()> {
        match self.map {
            Some(_) if self.len == 0 => {}
            Some(_) => self.zero(0, self.len)?,
            None => self.file.set_len(0)?,
        }
        self.len = 0;
        self.deferred.clear();
        Ok(())
    }

    /// An empty log is left empty, not preallocated: a store at rest holds
    /// no reserved blocks. Called at an orderly close (the daemon exits
    /// without dropping its journal) and at drop; appends after it are
    /// `write()`s.
    pub fn give_back_blocks(&mut self) {
        if self.len == 0
            && self.deferred.is_empty()
            && self.map.take().is_some()
            && let Err(e) = self.file.set_len(0)
        {
            log::warn!("cannot give back the journal log's preallocated blocks: {e}");
        }
    }
}

impl Drop for RecordLog {
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            log::warn!("cannot write {} bytes of creation notes to the journal log: {e}", self.deferred.len());
        }
        self.give_back_blocks();
    }
}

/// Preallocates and maps at least `need` bytes: twice the mapping, or
/// more. A full disk fails here, before any byte of the frame is
/// copied, and the append is refused.
fn grow<'m>(
    file: &File,
    map: &'m mut Option<crate::sys::SharedMap>,
    need: u64,
) -> std::io::Result<&'m mut crate::sys::SharedMap> {
    let have = map.as_ref().map_or(0, |m| m.len() as u64);
    let size = need.max(have * 2).max(MAPPED_BYTES).next_multiple_of(MAPPED_BYTES);
    crate::sys::preallocate(file.as_fd(), size)?;
    Ok(map.insert(crate::sys::SharedMap::new(file.as_fd(), size as usize)?))
}

/// Adds the frame of `record` to `out`.
fn append_frame(out: &mut Vec<u8>, record: &LogRecord) -> std::io::Result<()> {
    let payload = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&checksum(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn records_survive_reopen_and_a_torn_tail_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.log");
        let a = LogRecord::Entry { turn: 1, dir: 2, name: b"x".to_vec(), target: None, program: Some("sh".into()) };
        let b = LogRecord::Born { id: 3, turn: 1 };
        {
            let (mut log, old) = RecordLog::open(&path).unwrap();
            assert!(old.is_empty());
            log.append(&a).unwrap();
            log.append(&b).unwrap();
        }
        // A crash in the middle of a write leaves half a frame.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[200, 0, 0, 0, 1, 2]).unwrap();
        let (_, got) = RecordLog::open(&path).unwrap();
        assert_eq!(got, vec![a, b]);
    }

    #[test]
    fn deferred_records_are_written_before_the_next_append_and_at_drop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.log");
        let born = LogRecord::NewObject { id: 4, handle: b"n".to_vec(), kind: 1, born: 2 };
        let entry = LogRecord::Entry { turn: 2, dir: 4, name: b"x".to_vec(), target: None, program: None };
        let later = LogRecord::Born { id: 5, turn: 2 };
        let (mut log, _) = RecordLog::open(&path).unwrap();
        log.append_deferred(&born).unwrap();
        assert!(RecordLog::read(&path).unwrap().is_empty(), "a deferred record waits for the next append");
        log.append(&entry).unwrap();
        assert_eq!(RecordLog::read(&path).unwrap(), vec![born.clone(), entry.clone()], "in order, in one write");
        log.append_deferred(&later).unwrap();
        drop(log);
        assert_eq!(RecordLog::read(&path).unwrap(), vec![born.clone(), entry, later.clone()], "flushed at drop");
        let (mut log, _) = RecordLog::open(&path).unwrap();
        log.append_deferred(&later).unwrap();
        log.clear().unwrap();
        drop(log);
        assert!(RecordLog::read(&path).unwrap().is_empty(), "a fold takes the deferred records too");
    }

    /// Appends land in the file's page cache with no `write()`: a daemon
    /// killed right after an append (nothing dropped, nothing flushed)
    /// leaves them readable; emptying zeroes them and keeps the blocks;
    /// a log that outgrows its mapping grows it.
    #[test]
    fn a_mapped_log_holds_its_records_without_a_write_and_grows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.log");
        let a = LogRecord::Entry { turn: 1, dir: 2, name: b"x".to_vec(), target: None, program: None };
        let (mut log, _) = RecordLog::open(&path).unwrap();
        assert!(log.map.is_some(), "the log is mapped on this filesystem");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), MAPPED_BYTES, "preallocated");
        log.append(&a).unwrap();
        std::mem::forget(log);
        assert_eq!(RecordLog::read(&path).unwrap(), vec![a.clone()], "in the file as soon as appended");

        let (mut log, old) = RecordLog::open(&path).unwrap();
        assert_eq!(old, vec![a.clone()]);
        log.clear().unwrap();
        assert!(RecordLog::read(&path).unwrap().is_empty(), "emptied");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), MAPPED_BYTES, "the blocks are kept");
        // Records of long chunk lists, past the preallocated size.
        let big = LogRecord::Known { object: 3, ctime_ns: 1, size: 2, hash: vec![7; 32], chunks: vec![9; 1 << 20] };
        let mut want = vec![a.clone()];
        log.append(&a).unwrap();
        for _ in 0..3 {
            log.append(&big).unwrap();
            want.push(big.clone());
        }
        assert!(std::fs::metadata(&path).unwrap().len() > MAPPED_BYTES, "grown");
        assert_eq!(RecordLog::read(&path).unwrap(), want);
        log.clear().unwrap();
        log.append(&a).unwrap();
        assert_eq!(RecordLog::read(&path).unwrap(), vec![a.clone()], "nothing of the longer log is left after it");
        drop(log);
        let (log, old) = RecordLog::open(&path).unwrap();
        assert_eq!(old, vec![a]);
        drop(log);
        assert!(std::fs::metadata(&path).unwrap().len() > 0, "a log with records keeps them at drop");
    }

    /// A torn frame a crash left in a preallocated log is zeroed at open,
    /// so records appended after it are read; an empty log is left with
    /// no preallocated blocks.
    #[test]
    fn a_torn_frame_in_a_mapped_log_is_zeroed_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.log");
        let a = LogRecord::Born { id: 1, turn: 1 };
        let b = LogRecord::Born { id: 2, turn: 1 };
        let (mut log, _) = RecordLog::open(&path).unwrap();
        log.append(&a).unwrap();
        let end = log.len;
        std::mem::forget(log);
        // Half a frame after the record, as a kill in the middle of a copy leaves.
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&[40, 0, 0, 0, 1, 2, 3, 4, b'{'], end).unwrap();
        let (mut log, old) = RecordLog::open(&path).unwrap();
        assert_eq!(old, vec![a.clone()]);
        log.append(&b).unwrap();
        assert_eq!(RecordLog::read(&path).unwrap(), vec![a, b]);
        log.clear().unwrap();
        drop(log);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "an empty log keeps no blocks");
    }

    /// A new object takes its handle from a dead object's row; folding the
    /// same record again after a rewind moved the handle on changes nothing.
    #[test]
    fn a_new_object_takes_a_dead_objects_handle_once() {
        let meta = Meta::open_in_memory().unwrap();
        let born = [LogRecord::NewObject { id: 9, handle: b"h".to_vec(), kind: 1, born: 2 }];
        fold(&meta, &[LogRecord::Object { id: 4, handle: b"h".to_vec(), kind: 1 }]).unwrap();
        fold(&meta, &born).unwrap();
        assert_eq!(meta.object_by_handle(b"h").unwrap(), Some(ObjectId(9)));
        assert_eq!(meta.object_handle(ObjectId(4)).unwrap(), None);
        meta.set_object_handle(ObjectId(4), b"h").unwrap();
        fold(&meta, &born).unwrap();
        assert_eq!(meta.object_by_handle(b"h").unwrap(), Some(ObjectId(4)), "a replay steals nothing back");
        assert_eq!(meta.born_turn(ObjectId(9)).unwrap(), Some(2));
    }

    #[test]
    fn folding_twice_is_harmless() {
        let meta = Meta::open_in_memory().unwrap();
        let recs = vec![
            LogRecord::Object { id: 7, handle: b"h".to_vec(), kind: 2 },
            LogRecord::Entry { turn: 0, dir: 7, name: b"n".to_vec(), target: None, program: None },
            LogRecord::Born { id: 7, turn: 0 },
            LogRecord::NewObject { id: 8, handle: b"i".to_vec(), kind: 1, born: 3 },
            LogRecord::Attic { id: 8, turn: Some(4) },
            LogRecord::Attic { id: 7, turn: Some(4) },
            LogRecord::AtticOut { id: 7 },
        ];
        fold(&meta, &recs).unwrap();
        fold(&meta, &recs).unwrap();
        assert_eq!(meta.object_by_handle(b"h").unwrap(), Some(ObjectId(7)));
        assert_eq!(meta.entry_at(ObjectId(7), b"n", 0).unwrap(), Some(None));
        assert_eq!(meta.born_turn(ObjectId(7)).unwrap(), Some(0));
        assert_eq!(meta.object_by_handle(b"i").unwrap(), Some(ObjectId(8)));
        assert_eq!(meta.born_turn(ObjectId(8)).unwrap(), Some(3));
        assert_eq!(meta.attic_objects().unwrap(), vec![ObjectId(8)]);
    }
}
