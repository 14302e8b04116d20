//! What a crash can leave to finish, as one area of the metadata: the
//! intents (a rewind or restore noted before it changes the tree, ended
//! when done; one still open at the next start is finished or reported,
//! `rewind/recovery.rs`) and the pending files (rewound files waiting for
//! their bytes, which the settler writes, `workspace/pending.rs`).
//! [`Intents`] is that area's interface: [`Meta`] implements it over
//! SQLite (`intents`, `pending`; docs/format.md), [`MemoryIntents`] is
//! the in-memory model, and [`kit`] is the one suite both pass. The
//! journal hands it out through `Journal::with_intents`. A pending file's
//! chunk list may be that of a pre-image record, so both take the records
//! of the same store ([`PreImages`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rusqlite::{OptionalExtension, params};

use super::{Ctx, Intent, IntentOp, Meta, MetaError, MetaResult, ObjectId, PendingList, PendingRow, PreImages};

/// The intents and the pending files (see the module's comment).
pub trait Intents {
    /// Notes an intent (its `id` is ignored); returns its id, greater
    /// than that of every open intent.
    fn begin_intent(&self, i: &Intent) -> MetaResult<i64>;

    /// Ends intent `id` (nothing if it is not open).
    fn end_intent(&self, id: i64) -> MetaResult<()>;

    /// Intents not ended, oldest first.
    fn open_intents(&self) -> MetaResult<Vec<Intent>>;

    /// Records a pending file, replacing an earlier row of `handle`: its
    /// chunk list is either inline or that of the pre-image record
    /// (turn, object). Counts the chunk references an inline list holds
    /// (and drops those of the row it replaces).
    fn add_pending(&self, handle: &[u8], hash: &[u8], list: PendingList<'_>, mtime_ns: i64) -> MetaResult<()>;

    /// The file `handle` has its content (nothing if it was not pending).
    fn remove_pending(&self, handle: &[u8]) -> MetaResult<()>;

    /// Whether the file `handle` waits for its content.
    fn is_pending(&self, handle: &[u8]) -> MetaResult<bool>;

    /// Every file still waiting for its content, in no particular order,
    /// with its chunk list (None: the pre-image record it points at is
    /// gone or holds no content).
    fn all_pending(&self) -> MetaResult<Vec<PendingRow>>;
}

impl Intents for Meta {
    fn begin_intent(&self, i: &Intent) -> MetaResult<i64> {
        let mut paths = Vec::new();
        for p in &i.paths {
            // NUL cannot be in a path: a safe separator.
            paths.extend_from_slice(p);
            paths.push(0);
        }
        self.exec(
            "INSERT INTO intents(op, checkpoint, undo_checkpoint, paths, started_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![i.op.as_str(), i.checkpoint, i.undo_checkpoint, paths, i.started_at],
        )
        .ctx("record an intent")?;
        Ok(self.conn.last_insert_rowid())
    }

    fn end_intent(&self, id: i64) -> MetaResult<()> {
        self.exec("DELETE FROM intents WHERE id = ?1", [id]).ctx("clear an intent")?;
        Ok(())
    }

    fn open_intents(&self) -> MetaResult<Vec<Intent>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT id, op, checkpoint, undo_checkpoint, paths, started_at FROM intents ORDER BY id")
            .ctx("prepare")?;
        let rows = stmt
            .query_map([], |r| {
                let op: String = r.get(1)?;
                let paths: Option<Vec<u8>> = r.get(4)?;
                Ok((r.get(0)?, op, r.get(2)?, r.get(3)?, paths.unwrap_or_default(), r.get(5)?))
            })
            .ctx("list intents")?;
        let mut out = Vec::new();
        for row in rows {
            let (id, op, checkpoint, undo_checkpoint, paths, started_at): (i64, String, i64, i64, Vec<u8>, i64) =
                row.ctx("list intents")?;
            let op = match op.as_str() {
                "rewind" => IntentOp::Rewind,
                "restore" => IntentOp::Restore,
                _ => return Err(MetaError::Malformed { what: "intent (unknown operation)" }),
            };
            let paths = paths.split(|b| *b == 0).filter(|p| !p.is_empty()).map(<[u8]>::to_vec).collect();
            out.push(Intent { id, op, checkpoint, undo_checkpoint, paths, started_at });
        }
        Ok(out)
    }

    fn add_pending(&self, handle: &[u8], hash: &[u8], list: PendingList<'_>, mtime_ns: i64) -> MetaResult<()> {
        let (chunks, turn, object) = match list {
            PendingList::Inline(c) => (Some(c), None, None),
            PendingList::Record(turn, object) => (None, Some(turn), Some(object.0)),
        };
        self.atomic(|m| {
            m.count_lists("SELECT chunks FROM pending WHERE handle = ?1", [handle], -1)?;
            m.conn
                .prepare_cached(
                    "INSERT OR REPLACE INTO pending(handle, content_hash, chunks, source_turn, source_object, mtime_ns) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .and_then(|mut s| s.execute(params![handle, hash, chunks, turn, object, mtime_ns]))
                .ctx("record pending content")?;
            if let Some(list) = chunks {
                m.count_list(list, 1)?;
            }
            Ok(())
        })
    }

    fn remove_pending(&self, handle: &[u8]) -> MetaResult<()> {
        self.atomic(|m| {
            m.count_lists("DELETE FROM pending WHERE handle = ?1 RETURNING chunks", [handle], -1).map(|_| ())
        })
    }

    fn is_pending(&self, handle: &[u8]) -> MetaResult<bool> {
        self.row("SELECT 1 FROM pending WHERE handle = ?1", [handle], |_| Ok(()))
            .optional()
            .map(|r| r.is_some())
            .ctx("read pending content")
    }

    fn all_pending(&self) -> MetaResult<Vec<PendingRow>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT p.handle, p.content_hash, COALESCE(p.chunks, o.chunks), p.mtime_ns FROM pending p \
                 LEFT JOIN object_pre o ON o.turn = p.source_turn AND o.object = p.source_object",
            )
            .ctx("prepare")?;
        let rows = stmt
            .query_map([], |r| {
                Ok(PendingRow { handle: r.get(0)?, hash: r.get(1)?, chunks: r.get(2)?, mtime_ns: r.get(3)? })
            })
            .ctx("list pending content")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("list pending content")
    }
}

/// The model of the intents and pending files: ordered maps, each query
/// the plain reading of its contract (what the SQLite implementation must
/// agree with, [`kit::agrees`]). Chunk references are not counted (that
/// is the chunk index's bookkeeping, `refs.rs`).
pub struct MemoryIntents {
    records: Arc<dyn PreImages + Send + Sync>,
    inner: Mutex<Model>,
}

/// Where a pending row's chunk list is.
#[derive(Clone)]
enum List {
    Inline(Vec<u8>),
    Record(i64, ObjectId),
}

#[derive(Default)]
struct Model {
    intents: BTreeMap<i64, Intent>,
    /// handle -> (hash, list, mtime_ns).
    pending: BTreeMap<Vec<u8>, (Vec<u8>, List, i64)>,
}

impl MemoryIntents {
    /// A model whose pending files point into `records`.
    pub fn new(records: Arc<dyn PreImages + Send + Sync>) -> MemoryIntents {
        MemoryIntents { records, inner: Mutex::default() }
    }

    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        crate::poison::lock(&self.inner, "the intent model")
    }
}

impl Intents for MemoryIntents {
    fn begin_intent(&self, i: &Intent) -> MetaResult<i64> {
        let mut m = self.model();
        let id = m.intents.keys().next_back().map_or(1, |last| last + 1);
        let paths = i.paths.iter().filter(|p| !p.is_empty()).cloned().collect();
        m.intents.insert(id, Intent { id, paths, ..i.clone() });
        Ok(id)
    }

    fn end_intent(&self, id: i64) -> MetaResult<()> {
        self.model().intents.remove(&id);
        Ok(())
    }

    fn open_intents(&self) -> MetaResult<Vec<Intent>> {
        Ok(self.model().intents.values().cloned().collect())
    }

    fn add_pending(&self, handle: &[u8], hash: &[u8], list: PendingList<'_>, mtime_ns: i64) -> MetaResult<()> {
        let list = match list {
            PendingList::Inline(c) => List::Inline(c.to_vec()),
            PendingList::Record(turn, object) => List::Record(turn, object),
        };
        self.model().pending.insert(handle.to_vec(), (hash.to_vec(), list, mtime_ns));
        Ok(())
    }

    fn remove_pending(&self, handle: &[u8]) -> MetaResult<()> {
        self.model().pending.remove(handle);
        Ok(())
    }

    fn is_pending(&self, handle: &[u8]) -> MetaResult<bool> {
        Ok(self.model().pending.contains_key(handle))
    }

    fn all_pending(&self) -> MetaResult<Vec<PendingRow>> {
        let rows: Vec<_> = self.model().pending.iter().map(|(h, row)| (h.clone(), row.clone())).collect();
        let mut out = Vec::new();
        for (handle, (hash, list, mtime_ns)) in rows {
            let chunks = match list {
                List::Inline(c) => Some(c),
                // The record of exactly that turn, if it holds content.
                List::Record(turn, object) => {
                    self.records.content_at(object, turn)?.filter(|c| c.0 == turn).map(|(_, _, chunks)| chunks)
                }
            };
            out.push(PendingRow { handle, hash, chunks, mtime_ns });
        }
        Ok(out)
    }
}

/// The suite every implementation of [`Intents`] passes: [`kit::run_all`]
/// with fixed answers, and [`kit::agrees`], which applies one seeded
/// random sequence to two implementations and compares every query. Each
/// takes the pre-image records of the same store (for a database, the
/// database itself).
#[cfg(any(test, feature = "test-kit"))]
pub mod kit {
    use super::*;
    use crate::meta::ObjectState;

    fn intent(op: IntentOp, checkpoint: i64, paths: &[&[u8]]) -> Intent {
        Intent {
            id: 99,
            op,
            checkpoint,
            undo_checkpoint: checkpoint + 1,
            paths: paths.iter().map(|p| p.to_vec()).collect(),
            started_at: 1000 + checkpoint,
        }
    }

    /// A pre-image record's state, with content when `chunks` is given.
    fn state(chunks: Option<&[u8]>) -> ObjectState {
        ObjectState { content: chunks.map(|c| (vec![1; 32], c.to_vec())), ..crate::meta::test_file_state(3) }
    }

    /// A pending row as compared: (handle, hash, chunks, mtime_ns).
    type Row = (Vec<u8>, Vec<u8>, Option<Vec<u8>>, i64);

    fn sorted(mut rows: Vec<PendingRow>) -> Vec<Row> {
        rows.sort_by(|a, b| a.handle.cmp(&b.handle));
        rows.into_iter().map(|r| (r.handle, r.hash, r.chunks, r.mtime_ns)).collect()
    }

    /// Fixed intents and pending files, and the answers every
    /// implementation must give, on an empty store (`records` its
    /// pre-image records).
    pub fn run_all(r: &dyn Intents, records: &dyn PreImages) {
        assert!(r.open_intents().expect("list").is_empty());
        let rewind = intent(IntentOp::Rewind, 3, &[]);
        let restore = intent(IntentOp::Restore, 5, &[b"a/b", b"\xffc", b""]);
        let first = r.begin_intent(&rewind).expect("begin");
        let second = r.begin_intent(&restore).expect("begin");
        assert!(second > first, "ids grow");
        let open = r.open_intents().expect("list");
        assert_eq!(open.len(), 2);
        assert_eq!(open[0], Intent { id: first, ..rewind });
        assert_eq!(open[1].paths, vec![b"a/b".to_vec(), b"\xffc".to_vec()], "an empty path is no path");
        assert_eq!((open[1].op, open[1].undo_checkpoint, open[1].started_at), (IntentOp::Restore, 6, 1005));
        r.end_intent(first).expect("end");
        r.end_intent(first).expect("end again");
        assert_eq!(r.open_intents().expect("list").iter().map(|i| i.id).collect::<Vec<_>>(), vec![second]);
        // Pending files: inline lists, and lists of pre-image records.
        let (object, other) = (ObjectId(7), ObjectId(8));
        records.record_object(2, object, &state(Some(b"list-2")), None).expect("record");
        records.record_object(3, object, &state(None), None).expect("record");
        records.record_object(4, object, &state(Some(b"list-4")), None).expect("record");
        assert!(!r.is_pending(b"h1").expect("is_pending"));
        r.add_pending(b"h1", b"hash1", PendingList::Inline(b"inline"), 10).expect("add");
        r.add_pending(b"h2", b"hash2", PendingList::Record(2, object), 11).expect("add");
        r.add_pending(b"h3", b"hash3", PendingList::Record(3, object), 12).expect("add");
        r.add_pending(b"h4", b"hash4", PendingList::Record(2, other), 13).expect("add");
        assert!(r.is_pending(b"h1").expect("is_pending"));
        assert_eq!(
            sorted(r.all_pending().expect("list")),
            vec![
                (b"h1".to_vec(), b"hash1".to_vec(), Some(b"inline".to_vec()), 10),
                (b"h2".to_vec(), b"hash2".to_vec(), Some(b"list-2".to_vec()), 11),
                (b"h3".to_vec(), b"hash3".to_vec(), None, 12),
                (b"h4".to_vec(), b"hash4".to_vec(), None, 13),
            ],
            "a record without content, or no record, gives no list"
        );
        r.add_pending(b"h1", b"hash5", PendingList::Record(4, object), 14).expect("replace");
        r.remove_pending(b"h2").expect("remove");
        r.remove_pending(b"h9").expect("remove what is not pending");
        assert!(!r.is_pending(b"h2").expect("is_pending"));
        let rows = sorted(r.all_pending().expect("list"));
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0], (b"h1".to_vec(), b"hash5".to_vec(), Some(b"list-4".to_vec()), 14));
    }

    /// One seeded random sequence of intents begun and ended and files
    /// made pending, replaced and settled (a few handles, so they
    /// collide), applied to `a` and `b` (both empty, with their records),
    /// then every query compared.
    pub fn agrees(a: (&dyn Intents, &dyn PreImages), b: (&dyn Intents, &dyn PreImages), seed: u64) {
        let mut next = crate::meta::kit_random(seed);
        for turn in 0..4 {
            for object in 1..4 {
                let s = state((next(2) == 0).then_some(&[turn as u8, object as u8][..]));
                a.1.record_object(turn, ObjectId(object), &s, None).expect("record");
                b.1.record_object(turn, ObjectId(object), &s, None).expect("record");
            }
        }
        let handles: [&[u8]; 4] = [b"a", b"b", b"\x00c", b"dd"];
        let mut begun = Vec::new();
        for step in 0..80 {
            match next(5) {
                0 => {
                    let op = if next(2) == 0 { IntentOp::Rewind } else { IntentOp::Restore };
                    let paths: [&[u8]; 2] = [b"p", b"q/r"];
                    let i = intent(op, next(9) as i64, &paths[..next(3) as usize]);
                    let ids = (a.0.begin_intent(&i).expect("begin"), b.0.begin_intent(&i).expect("begin"));
                    assert_eq!(ids.0, ids.1, "seed {seed}: step {step}: intent id");
                    begun.push(ids.0);
                }
                1 => {
                    let id = begun.get(next(begun.len() as u64 + 1) as usize).copied().unwrap_or(0);
                    a.0.end_intent(id).expect("end");
                    b.0.end_intent(id).expect("end");
                }
                2 | 3 => {
                    let handle = handles[next(4) as usize];
                    let inline = [next(256) as u8; 3];
                    let list = if next(2) == 0 {
                        PendingList::Inline(&inline)
                    } else {
                        PendingList::Record(next(5) as i64, ObjectId(next(4) as i64))
                    };
                    let mtime = next(100) as i64;
                    a.0.add_pending(handle, b"h", list, mtime).expect("add");
                    b.0.add_pending(handle, b"h", list, mtime).expect("add");
                }
                _ => {
                    let handle = handles[next(4) as usize];
                    a.0.remove_pending(handle).expect("remove");
                    b.0.remove_pending(handle).expect("remove");
                }
            }
            assert_eq!(a.0.open_intents().expect("q"), b.0.open_intents().expect("q"), "seed {seed}: step {step}");
            assert_eq!(
                sorted(a.0.all_pending().expect("q")),
                sorted(b.0.all_pending().expect("q")),
                "seed {seed}: step {step}"
            );
            for h in handles {
                assert_eq!(a.0.is_pending(h).expect("q"), b.0.is_pending(h).expect("q"), "seed {seed}: {h:?}");
            }
        }
    }
}
