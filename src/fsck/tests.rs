//! The checks on an in-memory store and database, without a live tree.

use std::ffi::OsStr;
use std::sync::{Arc, Mutex};

use super::*;
use crate::meta::{Checkpoint, Checkpoints, Intents, ObjectState, Objects, PreImages, Reason};
use crate::store::{ChunkStore, MemoryStore, store_content};

fn state(content: Option<(Vec<u8>, Vec<u8>)>) -> ObjectState {
    ObjectState { content, ..crate::meta::test_file_state(0) }
}

fn checkpoint(n: i64, parent: Option<i64>, message: Option<&str>) -> Checkpoint {
    Checkpoint {
        checkpoint: n,
        parent,
        message_id: message.map(str::to_string),
        session: None,
        label: None,
        reason: Reason::Turn,
        created_at: 0,
        store_bytes_at_start: 0,
        name: None,
        snapshot_message: None,
        sealed_by: None,
    }
}

/// A history of checkpoints 0..=4 where object `file` (named `app.py` in
/// directory `dir`) has content records in turns 1 and 3.
struct Fixture {
    store: Arc<MemoryStore>,
    journal: Journal,
    dir: ObjectId,
    file: ObjectId,
    /// The chunk of the turn-3 content.
    chunk3: ChunkId,
}

fn fixture() -> Fixture {
    let store = Arc::new(MemoryStore::new());
    let meta = Meta::open_in_memory().expect("meta");
    let dir = meta.intern_object(b"dir-handle", 2).expect("dir");
    let file = meta.intern_object(b"file-handle", 1).expect("file");
    for n in 0..=4 {
        meta.seal(&checkpoint(n, (n > 0).then(|| n - 1), (n == 3).then_some("m2"))).expect("checkpoint");
    }
    let mut chunk3 = None;
    for (turn, bytes) in [(1, &b"version one"[..]), (3, &b"version three"[..])] {
        let c = store_content(&*store, bytes).expect("store");
        if turn == 3 {
            chunk3 = Some(c.chunks[0].id);
        }
        let content = Some((c.hash.as_bytes().to_vec(), c.encode_chunks()));
        meta.record_object(turn, file, &state(content), None).expect("record");
    }
    // The file got its name in turn 2: before that, no such name.
    meta.record_entry(2, dir, b"app.py", Some(file), None).expect("entry");
    let journal = Journal::read_only(meta, store.clone()).expect("journal");
    Fixture { store, journal, dir, file, chunk3: chunk3.expect("turn 3 stored") }
}

/// Content of one chunk that was never put in the store.
fn unstored(bytes: &[u8]) -> ContentRef {
    let id = ChunkId::of(bytes);
    ContentRef {
        hash: id,
        size: bytes.len() as u64,
        chunks: vec![crate::store::ChunkSpan { id, len: bytes.len() as u32 }],
    }
}

fn run(journal: &Journal, attic: Option<&Path>) -> Report {
    let target = Target { journal, tree: None, lock: None, attic, store_dir: None, unserved_since_ns: None };
    let mut calls = 0;
    let report = check(&target, &mut |_| calls += 1).expect("check");
    assert!(calls > 0, "progress is reported");
    report
}

#[test]
fn a_clean_store_has_no_problems() {
    let f = fixture();
    let report = run(&f.journal, None);
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.chunks_checked, 2);
    assert_eq!(report.records_checked, 2);
    assert_eq!(report.checkpoints, 5);
    assert!(report.bytes_checked > 0);
}

#[test]
fn a_corrupt_chunk_is_named_by_the_checkpoints_and_path_that_show_it() {
    let f = fixture();
    f.store.tamper(&f.chunk3, b"rotten".to_vec());
    let report = run(&f.journal, None);
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    let p = &report.problems[0];
    assert!(matches!(&p.kind, ProblemKind::ChunkCorrupt { chunk, .. } if *chunk == f.chunk3.to_string()));
    assert_eq!((p.object, p.record_turn), (Some(f.file.0), Some(3)));
    // Checkpoints 2 and 3 take the content from the turn-3 record; 1 and 0
    // from the turn-1 record, 4 from the live file.
    let ks: Vec<Option<i64>> = p.affected.iter().map(|a| a.checkpoint).collect();
    assert_eq!(ks, vec![Some(2), Some(3)]);
    // Without the live tree the root is unknown; the name comes from the
    // entry record of turn 2, which the view at 2 uses.
    assert_eq!(p.affected[0].path.as_deref(), Some(std::path::Path::new(&format!("<object {}>/app.py", f.dir.0))));
    assert_eq!(p.affected[1].message_id.as_deref(), Some("m2"));
}

#[test]
fn missing_chunks_and_unreadable_lists_are_found() {
    let f = fixture();
    let ghost = unstored(b"never stored");
    f.journal
        .with_meta(|m| {
            m.record_object(4, f.file, &state(Some((ghost.hash.as_bytes().to_vec(), ghost.encode_chunks()))), None)?;
            m.record_object(4, f.dir, &state(Some((vec![0; 32], vec![9, 9, 9]))), None)
        })
        .expect("records");
    let report = run(&f.journal, None);
    let kinds: Vec<&ProblemKind> = report.problems.iter().map(|p| &p.kind).collect();
    assert!(kinds.iter().any(|k| matches!(k, ProblemKind::ChunkMissing { .. })), "{kinds:?}");
    assert!(kinds.iter().any(|k| matches!(k, ProblemKind::ChunkListUndecodable { .. })), "{kinds:?}");
    let missing = report.problems.iter().find(|p| matches!(p.kind, ProblemKind::ChunkMissing { .. })).expect("one");
    assert_eq!(missing.record_turn, Some(4));
    assert_eq!(missing.affected.iter().map(|a| a.checkpoint).collect::<Vec<_>>(), vec![Some(4)]);
}

#[test]
fn dangling_references_are_found() {
    let f = fixture();
    f.journal
        .with_meta(|m| {
            m.seal(&checkpoint(7, Some(6), None))?;
            m.record_entry(9, ObjectId(500), b"x", Some(ObjectId(501)), None)?;
            Ok::<(), MetaError>(())
        })
        .expect("rows");
    let report = run(&f.journal, None);
    let has = |pred: &dyn Fn(&ProblemKind) -> bool| report.problems.iter().any(|p| pred(&p.kind));
    assert!(has(&|k| matches!(k, ProblemKind::ParentMissing { checkpoint: 7, parent: 6 })), "{:?}", report.problems);
    assert!(has(&|k| matches!(k, ProblemKind::RecordsOfUnknownTurn { turn: 9, records: 1 })));
    assert!(has(&|k| matches!(k, ProblemKind::EntryDirUnknown { dir: 500, .. })));
    assert!(report.problems.iter().any(|p| p.kind == ProblemKind::ObjectRowMissing && p.object == Some(501)));
}

#[test]
fn attic_entries_and_lost_inodes_are_found() {
    let f = fixture();
    let attic = tempfile::tempdir().expect("attic");
    std::fs::write(attic.path().join("kept"), b"bytes").expect("write");
    // An object views read by handle (no record holds its content), whose
    // inode is then deleted from the attic.
    let dirfd = std::fs::File::open(attic.path()).expect("open attic");
    let handle = backing::handle_at(dirfd.as_fd(), OsStr::new("kept")).expect("handle").to_bytes();
    let gone = f.journal.with_objects(|m| m.intern_object(&handle, 1)).expect("object");
    f.journal.with_meta(|m| m.record_entry(3, f.dir, b"old.txt", Some(gone), None)).expect("entry");
    std::fs::rename(attic.path().join("kept"), attic.path().join(gone.0.to_string())).expect("rename");
    let report = run(&f.journal, Some(attic.path()));
    assert!(report.is_clean(), "the attic holds the inode: {:?}", report.problems);

    std::fs::remove_file(attic.path().join(gone.0.to_string())).expect("remove");
    std::fs::write(attic.path().join("999"), b"no row").expect("write");
    let report = run(&f.journal, Some(attic.path()));
    let unknown = report.problems.iter().filter(|p| matches!(p.kind, ProblemKind::AtticEntryUnknown { .. }));
    assert_eq!(unknown.count(), 1, "{:?}", report.problems);
    let lost = report
        .problems
        .iter()
        .find(|p| matches!(p.kind, ProblemKind::InodeGone { .. }))
        .expect("the deleted inode is found");
    assert_eq!(lost.object, Some(gone.0));
    // Views at 0..=3 read it by handle (named in turn 3, no content record).
    let ks: Vec<Option<i64>> = lost.affected.iter().map(|a| a.checkpoint).collect();
    assert_eq!(ks, vec![Some(0), Some(1), Some(2), Some(3)]);
    assert_eq!(lost.affected[3].path.as_deref(), Some(std::path::Path::new(&format!("<object {}>/old.txt", f.dir.0))));
}

struct Forgetful(Mutex<Vec<ChunkId>>);

impl RepairStore for Forgetful {
    fn forget_chunks(&self, ids: &[ChunkId]) -> Result<usize, StoreError> {
        self.0.lock().expect("lock").extend_from_slice(ids);
        Ok(ids.len())
    }
}

#[test]
fn repair_drops_lost_records_and_marks_them_unknown() {
    let f = fixture();
    f.store.tamper(&f.chunk3, b"rotten".to_vec());
    // A cached chunk list pointing at the damaged chunk.
    let list = ContentRef { hash: f.chunk3, size: 13, chunks: vec![crate::store::ChunkSpan { id: f.chunk3, len: 13 }] };
    f.journal
        .with_meta(|m| m.set_known_content(f.file, 1, 13, f.chunk3.as_bytes(), &list.encode_chunks()))
        .expect("known");
    let mut report = run(&f.journal, None);
    assert_eq!(report.problems.len(), 2, "{:?}", report.problems);
    let forgotten = Forgetful(Mutex::new(Vec::new()));
    f.journal.with_meta(|m| repair(m, &forgotten, &mut report)).expect("repair");
    assert!(report.problems.iter().all(|p| p.repaired.is_some()), "{:?}", report.problems);
    assert_eq!(*forgotten.0.lock().expect("lock"), vec![f.chunk3]);
    f.journal
        .with_meta(|m| {
            assert!(m.content_at(f.file, 2).expect("content").is_none(), "the lost record is gone");
            assert_eq!(m.taint_after(f.file, 2).expect("taint"), Some(4), "checkpoints 2 and 3 now say unknown");
            assert_eq!(m.taint_after(f.file, 1).expect("taint"), Some(4));
            assert!(m.content_at(f.file, 1).expect("content").is_some(), "the turn-1 record stays");
            assert!(m.known_content(f.file, 1, 13).expect("known").is_none(), "the cache is forgotten");
            crate::meta::MetaResult::Ok(())
        })
        .expect("query");
    // What is left still reads as the damaged chunk (the memory store
    // cannot forget it), used by nothing any more.
    let again = run(&f.journal, None);
    assert!(again.problems.iter().all(|p| p.affected.is_empty() && p.object.is_none()), "{:?}", again.problems);
    assert!(f.store.contains(&f.chunk3).expect("contains"));
}

#[test]
fn pending_files_whose_content_is_gone_are_named_in_the_workspace_and_never_repaired() {
    let f = fixture();
    let ghost = unstored(b"lost");
    f.journal
        .with_meta(|m| {
            // Points at a record that does not exist.
            m.add_pending(b"h1", &[0; 32], crate::meta::PendingList::Record(9, f.file), 0)?;
            // Carries a list whose chunk is not stored.
            m.add_pending(b"h2", &[0; 32], crate::meta::PendingList::Inline(&ghost.encode_chunks()), 0)?;
            // Points at a sound record: fine.
            m.add_pending(b"h3", &[0; 32], crate::meta::PendingList::Record(1, f.file), 0)
        })
        .expect("pending rows");
    let mut report = run(&f.journal, None);
    let pending: Vec<&Problem> =
        report.problems.iter().filter(|p| p.affected.iter().any(|a| a.checkpoint.is_none())).collect();
    assert_eq!(pending.len(), 2, "{:?}", report.problems);
    assert!(
        pending.iter().any(|p| p.kind == ProblemKind::PendingSourceMissing { turn: Some(9), object: Some(f.file.0) })
    );
    assert!(pending.iter().any(|p| matches!(p.kind, ProblemKind::ChunkMissing { .. })));
    assert!(pending.iter().all(|p| !p.repairable), "the workspace is never repaired");
    let forgotten = Forgetful(Mutex::new(Vec::new()));
    f.journal.with_meta(|m| repair(m, &forgotten, &mut report)).expect("repair");
    assert!(report.problems.iter().all(|p| p.repaired.is_none()), "{:?}", report.problems);
    assert_eq!(f.journal.with_intents(|m| m.all_pending()).expect("pending").len(), 3, "pending rows stay");
}

#[test]
fn wrong_chunk_counts_are_reported_and_recounted() {
    let f = fixture();
    assert!(run(&f.journal, None).is_clean(), "the counts kept by recording are right");
    // Too low: a collection would free the turn-3 content a record needs.
    f.journal.with_meta(|m| m.set_chunk_count_for_test(&f.chunk3, 0)).expect("set");
    let mut report = run(&f.journal, None);
    let wrong: Vec<&Problem> =
        report.problems.iter().filter(|p| matches!(p.kind, ProblemKind::ChunkCountWrong { .. })).collect();
    assert_eq!(wrong.len(), 1, "{:?}", report.problems);
    assert_eq!(wrong[0].kind, ProblemKind::ChunkCountWrong { chunk: f.chunk3.to_string(), stored: Some(0), actual: 1 });
    assert!(wrong[0].repairable);
    let forgotten = Forgetful(Mutex::new(Vec::new()));
    f.journal.with_meta(|m| repair(m, &forgotten, &mut report)).expect("repair");
    assert!(report.problems.iter().all(|p| p.repaired.is_some()), "{:?}", report.problems);
    assert_eq!(f.journal.with_meta(|m| m.chunk_count(&f.chunk3)).expect("count"), Some(1));
    assert!(run(&f.journal, None).is_clean(), "recounted");
}
