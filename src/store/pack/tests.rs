//! PackStore: conformance, crash recovery, damage detection.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

use super::*;
use crate::store::FaultyStore;
use crate::store::conformance::{self, pseudo_random};

fn small_packs() -> PackStoreOptions {
    PackStoreOptions { pack_size_limit: 64 * 1024, max_open_packs: 2 }
}

/// Puts `n` incompressible chunks of 10 KB and returns their ids and bytes.
fn put_chunks(store: &PackStore, seed: u64, n: u64) -> Vec<(ChunkId, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let data = pseudo_random(seed * 1000 + i, 10_000);
            (store.put(&data).expect("put"), data)
        })
        .collect()
}

fn assert_all_readable(store: &PackStore, chunks: &[(ChunkId, Vec<u8>)]) {
    for (id, data) in chunks {
        assert_eq!(&store.get(id).expect("get"), data, "chunk {id}");
    }
}

fn location(store: &PackStore, id: &ChunkId) -> Location {
    store.lookup(id).expect("lookup").expect("chunk is indexed")
}

/// A store in a temp dir holding ten 10 KB chunks in a single pack.
fn ten_chunks() -> (tempfile::TempDir, PackStore, Vec<(ChunkId, Vec<u8>)>, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = PackStore::open(dir.path()).expect("open");
    let chunks = put_chunks(&store, 1, 10);
    let pack = store.pack_paths().expect("packs").remove(0);
    (dir, store, chunks, pack)
}

/// Removes the index as if it had been lost, so open must rebuild it.
fn delete_index(dir: &Path) {
    for name in ["chunks.sqlite", "chunks.sqlite-wal", "chunks.sqlite-shm"] {
        let _ = std::fs::remove_file(dir.join(name));
    }
}

/// Removes index rows, as a crash between pack write and index commit would.
fn unindex(dir: &Path, ids: &[ChunkId]) {
    let conn = Connection::open(dir.join("chunks.sqlite")).expect("index");
    for id in ids {
        conn.execute("DELETE FROM chunks WHERE id = ?1", [id.as_bytes().as_slice()]).expect("delete row");
    }
}

#[test]
fn pack_store_conformance() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = PackStore::open(dir.path()).expect("open");
    conformance::run_all(&store);
    conformance::run_reclaiming(&store);
}

#[test]
fn pack_store_conformance_with_small_packs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = PackStore::open_with(dir.path(), small_packs()).expect("open");
    conformance::run_all(&store);
    conformance::run_reclaiming(&store);
    assert!(store.pack_paths().expect("packs").len() > 10);
}

#[test]
fn reopen_keeps_everything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = PackStore::open(dir.path()).expect("open");
    let chunks = put_chunks(&store, 1, 20);
    let stats = store.stats().expect("stats");
    drop(store);
    let store = PackStore::open(dir.path()).expect("reopen");
    assert_all_readable(&store, &chunks);
    assert_eq!(store.stats().expect("stats"), stats);
    // Appending after reopen continues the same pack.
    let more = put_chunks(&store, 2, 5);
    assert_eq!(store.pack_paths().expect("packs").len(), 1);
    assert_all_readable(&store, &more);
}

#[test]
fn second_open_of_same_dir_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _store = PackStore::open(dir.path()).expect("open");
    let err = PackStore::open(dir.path()).expect_err("second open must fail");
    assert!(err.to_string().contains("in use"), "{err}");
}

#[test]
fn deleted_index_is_rebuilt_from_packs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = PackStore::open_with(dir.path(), small_packs()).expect("open");
    let mut chunks = put_chunks(&store, 1, 30);
    chunks.push((store.put(&[b'z'; 50_000]).expect("put compressible"), vec![b'z'; 50_000]));
    let stats = store.stats().expect("stats");
    drop(store);
    delete_index(dir.path());
    let store = PackStore::open_with(dir.path(), small_packs()).expect("reopen");
    assert_eq!(store.stats().expect("stats"), stats);
    assert_all_readable(&store, &chunks);
}

#[test]
fn torn_tail_is_truncated_and_earlier_chunks_survive() {
    let (dir, store, chunks, pack) = ten_chunks();
    let last = put_chunks(&store, 2, 1).remove(0);
    let loc = location(&store, &last.0);
    drop(store);
    // Simulate a crash mid-append: the record is half written and, as the
    // index commit follows the write, not indexed.
    let file = OpenOptions::new().write(true).open(&pack).expect("open pack");
    file.set_len(loc.offset + RECORD_HEADER_LEN + 100).expect("truncate");
    unindex(dir.path(), &[last.0]);
    let store = PackStore::open(dir.path()).expect("reopen");
    assert_eq!(std::fs::metadata(&pack).expect("stat").len(), loc.offset, "torn record not cut off");
    assert_all_readable(&store, &chunks);
    assert!(!store.contains(&last.0).expect("contains"));
    // The store appends cleanly after the cut.
    let again = store.put(&last.1).expect("put again");
    assert_eq!(location(&store, &again).offset, loc.offset);
    assert_eq!(store.get(&again).expect("get"), last.1);
}

#[test]
fn unindexed_complete_records_are_indexed_on_open() {
    let (dir, store, chunks, _) = ten_chunks();
    drop(store);
    // Crash after the pack write but before the index commit.
    unindex(dir.path(), &chunks[7..].iter().map(|c| c.0).collect::<Vec<_>>());
    let store = PackStore::open(dir.path()).expect("reopen");
    assert_eq!(store.stats().expect("stats").chunks, 10);
    assert_all_readable(&store, &chunks);
}

#[test]
fn index_rows_past_end_of_pack_are_dropped() {
    let (dir, store, chunks, pack) = ten_chunks();
    let loc = location(&store, &chunks[8].0);
    drop(store);
    // Power loss before sync: the index survived, the pack's tail did not.
    OpenOptions::new().write(true).open(&pack).expect("open pack").set_len(loc.offset).expect("truncate");
    let store = PackStore::open(dir.path()).expect("reopen");
    assert_eq!(store.stats().expect("stats").chunks, 8);
    assert_all_readable(&store, &chunks[..8]);
    assert!(matches!(store.get(&chunks[9].0), Err(StoreError::Missing { .. })));
}

#[test]
fn rolls_to_several_packs_and_bounds_open_descriptors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = PackStore::open_with(dir.path(), small_packs()).expect("open");
    let chunks = put_chunks(&store, 1, 40);
    let packs = store.pack_paths().expect("packs");
    assert!(packs.len() >= 6, "only {} packs", packs.len());
    for pack in &packs {
        let len = std::fs::metadata(pack).expect("stat").len();
        assert!(len <= small_packs().pack_size_limit, "{} is {len} bytes", pack.display());
    }
    assert_all_readable(&store, &chunks);
    assert!(store.packs.open.lock().expect("lock").len() <= 2);
    drop(store);
    let store = PackStore::open_with(dir.path(), small_packs()).expect("reopen");
    assert_all_readable(&store, &chunks);
    // A chunk larger than the limit still goes in, alone in a new pack.
    let big = pseudo_random(99, 100_000);
    let id = store.put(&big).expect("put big");
    assert_eq!(store.get(&id).expect("get big"), big);
}

#[test]
fn flipped_byte_is_reported_as_corrupt_for_that_chunk_only() {
    let (_dir, store, chunks, pack) = ten_chunks();
    let victim = chunks[4].0;
    let loc = location(&store, &victim);
    let file = OpenOptions::new().read(true).write(true).open(&pack).expect("open pack");
    let at = loc.offset + RECORD_HEADER_LEN + 1234;
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, at).expect("read byte");
    file.write_all_at(&[byte[0] ^ 0x40], at).expect("flip byte");

    match store.get(&victim) {
        Err(StoreError::Corrupt { chunk, .. }) => assert_eq!(chunk, victim),
        other => panic!("expected Corrupt for {victim}, got {other:?}"),
    }
    let others: Vec<_> = chunks.iter().filter(|(id, _)| *id != victim).cloned().collect();
    assert_all_readable(&store, &others);
    let report = store.verify().expect("verify");
    assert_eq!(report.checked, 10);
    assert_eq!(report.corrupt.iter().map(|c| c.id).collect::<Vec<_>>(), vec![victim]);

    // A damaged header is caught as well, and names the chunk.
    let header_victim = chunks[6].0;
    let hloc = location(&store, &header_victim);
    file.write_all_at(&[0xff], hloc.offset + 9).expect("damage header");
    assert!(matches!(store.get(&header_victim), Err(StoreError::Corrupt { chunk, .. }) if chunk == header_victim));
    assert_eq!(store.verify().expect("verify").corrupt.len(), 2);
}

#[test]
fn rebuild_skips_damaged_record_in_the_middle() {
    let (dir, store, chunks, pack) = ten_chunks();
    let loc = location(&store, &chunks[3].0);
    let len_before = std::fs::metadata(&pack).expect("stat").len();
    drop(store);
    let file = OpenOptions::new().write(true).open(&pack).expect("open pack");
    file.write_all_at(b"XXXX", loc.offset).expect("damage magic");
    delete_index(dir.path());
    let store = PackStore::open(dir.path()).expect("reopen");
    assert_eq!(std::fs::metadata(&pack).expect("stat").len(), len_before, "pack was truncated");
    assert_eq!(store.stats().expect("stats").chunks, 9);
    let survivors: Vec<_> = chunks.iter().enumerate().filter(|(i, _)| *i != 3).map(|(_, c)| c.clone()).collect();
    assert_all_readable(&store, &survivors);
}

#[test]
fn compressible_chunk_is_stored_smaller() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = PackStore::open(dir.path()).expect("open");
    let text = b"fn main() { println!(\"hello\"); }\n".repeat(500);
    let id = store.put(&text).expect("put text");
    let loc = location(&store, &id);
    assert_eq!(loc.codec, Codec::Zstd as u8);
    assert!(loc.stored_len < text.len() as u64 / 4, "stored {} of {}", loc.stored_len, text.len());
    let noise = pseudo_random(5, 10_000);
    let noise_id = store.put(&noise).expect("put noise");
    let noise_loc = location(&store, &noise_id);
    assert_eq!(noise_loc.codec, Codec::Raw as u8, "incompressible data should be stored raw");
    assert_eq!(noise_loc.stored_len, 10_000);
    let stats = store.stats().expect("stats");
    assert_eq!(stats.raw_bytes, text.len() as u64 + 10_000);
    assert_eq!(stats.stored_bytes, loc.stored_len + 10_000);
    assert_eq!(store.get(&id).expect("get text"), text);
}

#[test]
fn enospc_surfaces_with_errno() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FaultyStore::new(PackStore::open(dir.path()).expect("open"));
    store.fail_puts_after(3, libc::ENOSPC);
    for i in 0..3u64 {
        store.put(&pseudo_random(i, 100)).expect("put before fault");
    }
    let err = store.put(b"one too many").expect_err("put must fail");
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
    assert_eq!(store.inner().stats().expect("stats").chunks, 3);
}

#[test]
fn io_failure_during_append_poisons_until_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = PackStore::open(dir.path()).expect("open");
    let first = put_chunks(&store, 1, 2);
    // Make the next append fail: swap the writer's pack for a read-only
    // descriptor, as a device error would.
    {
        let mut writer = store.writer().expect("writer");
        let pack = writer.current.as_mut().expect("current pack");
        pack.file = File::open(&pack.path).expect("open read-only");
    }
    let err = store.put(b"fails").expect_err("append must fail");
    assert!(err.raw_os_error().is_some(), "io error lost: {err:?}");
    assert!(matches!(store.put(b"refused"), Err(StoreError::Poisoned)));
    assert_all_readable(&store, &first);
    drop(store);
    let store = PackStore::open(dir.path()).expect("reopen");
    let id = store.put(b"after reopen").expect("put after reopen");
    assert_eq!(store.get(&id).expect("get"), b"after reopen");
    assert_all_readable(&store, &first);
}

#[test]
fn sync_succeeds_and_data_survives_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = PackStore::open_with(dir.path(), small_packs()).expect("open");
    let chunks = put_chunks(&store, 1, 12);
    store.sync().expect("sync");
    store.sync().expect("second sync");
    drop(store);
    let store = PackStore::open_with(dir.path(), small_packs()).expect("reopen");
    assert_all_readable(&store, &chunks);
}

#[test]
fn header_roundtrip_and_damage() {
    let header = RecordHeader { id: ChunkId::of(b"x"), codec: Codec::Zstd, raw_len: 100, stored_len: 50 };
    let bytes = header.encode();
    assert_eq!(RecordHeader::decode(&bytes).expect("decode"), header);
    for i in 0..bytes.len() {
        let mut damaged = bytes;
        damaged[i] ^= 0x10;
        assert!(RecordHeader::decode(&damaged).is_err(), "flip at byte {i} went unnoticed");
    }
    let absurd = RecordHeader { id: ChunkId::of(b"x"), codec: Codec::Raw, raw_len: 10, stored_len: 11 };
    assert!(RecordHeader::decode(&absurd.encode()).is_err());
}

#[test]
fn newer_schema_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    drop(PackStore::open(dir.path()).expect("open"));
    {
        let conn = Connection::open(dir.path().join("chunks.sqlite")).expect("index");
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1).expect("bump version");
    }
    let err = PackStore::open(dir.path()).expect_err("newer schema must be refused");
    assert!(err.to_string().contains("newer"), "{err}");
}

#[test]
fn empty_newest_pack_from_a_crash_is_reused() {
    let (dir, store, chunks, _) = ten_chunks();
    drop(store);
    // Crash right after creating the next pack, before its header.
    let empty = dir.path().join("packs").join(pack_file_name(2));
    File::create(&empty).expect("create empty pack");
    let store = PackStore::open(dir.path()).expect("reopen");
    let id = store.put(b"goes into pack 2").expect("put");
    assert_eq!(location(&store, &id).pack, 2);
    assert_eq!(std::fs::metadata(&empty).expect("stat").len(), PACK_HEADER_LEN + RECORD_HEADER_LEN + 16);
    assert_all_readable(&store, &chunks);
}

/// Environment variable naming the store directory for the child of
/// `puts_survive_kill_9`.
const CRASH_DIR_VAR: &str = "REWINDFS_STORE_CRASH_DIR";
const CRASH_CHUNKS: u64 = 50;

/// The child side of `puts_survive_kill_9` (the same test, run again by
/// it with the store directory in the environment): stores chunks, says so,
/// and waits to be killed.
fn crash_child(dir: &std::ffi::OsStr) -> ! {
    let store = PackStore::open_with(Path::new(dir), small_packs()).expect("open");
    put_chunks(&store, 7, CRASH_CHUNKS);
    println!("CHUNKS STORED");
    std::thread::sleep(std::time::Duration::from_secs(60));
    panic!("the parent test did not kill this child");
}

#[test]
fn puts_survive_kill_9() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    if let Some(dir) = std::env::var_os(CRASH_DIR_VAR) {
        crash_child(&dir);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "store::pack::tests::puts_survive_kill_9", "--nocapture"])
        .env(CRASH_DIR_VAR, dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("child stdout");
    let stored = BufReader::new(stdout).lines().map_while(Result::ok).any(|l| l.contains("CHUNKS STORED"));
    child.kill().expect("SIGKILL child");
    child.wait().expect("reap child");
    assert!(stored, "child did not report storing its chunks");
    let store = PackStore::open_with(dir.path(), small_packs()).expect("open after kill -9");
    let expected: Vec<Vec<u8>> = (0..CRASH_CHUNKS).map(|i| pseudo_random(7000 + i, 10_000)).collect();
    for data in &expected {
        assert_eq!(&store.get(&ChunkId::of(data)).expect("get after kill -9"), data);
    }
    assert_eq!(store.stats().expect("stats").chunks, CRASH_CHUNKS);
}

#[test]
fn discarded_chunks_give_their_pack_space_back() {
    let (_dir, store, before, pack) = ten_chunks();
    let len_before = std::fs::metadata(&pack).expect("pack").len();
    let stats_before = store.stats().expect("stats");
    let mut added = Vec::new();
    for i in 0..5u64 {
        let data = conformance::pseudo_random(777_000 + i, 10_000);
        let (id, new) = store.put_new(&data).expect("put_new");
        assert!(new, "a new chunk must say so");
        added.push(id);
    }
    let (_, again) = store.put_new(&before[0].1).expect("put_new of a known chunk");
    assert!(!again, "a known chunk is not new");
    store.discard(&added).expect("discard");
    assert_eq!(std::fs::metadata(&pack).expect("pack").len(), len_before, "the pack was not cut back");
    assert_eq!(store.stats().expect("stats"), stats_before);
    for id in &added {
        assert!(!store.contains(id).expect("contains"), "discarded chunk {id} still indexed");
    }
    for (id, data) in &before {
        assert_eq!(&store.get(id).expect("an earlier chunk"), data);
    }
}

#[test]
fn compaction_rewrites_mostly_released_packs_and_survives_reopening() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = PackStore::open_with(dir.path(), small_packs()).expect("open");
    // 30 chunks of 10 KB: five packs of six. Release all but every fifth.
    let chunks = put_chunks(&store, 7, 30);
    let packs_before = store.pack_paths().expect("packs").len();
    assert!(packs_before >= 5, "{packs_before} packs");
    let (kept, gone): (Vec<_>, Vec<_>) = chunks.iter().cloned().enumerate().partition(|(i, _)| i % 5 == 0);
    let kept: Vec<(ChunkId, Vec<u8>)> = kept.into_iter().map(|(_, c)| c).collect();
    let gone: Vec<ChunkId> = gone.into_iter().map(|(_, (id, _))| id).collect();
    store.release(&gone).expect("release");
    let disk = |s: &PackStore| s.pack_paths().unwrap().iter().map(|p| std::fs::metadata(p).unwrap().len()).sum::<u64>();
    let before = disk(&store);
    let stored_after = store.stats().expect("stats").stored_bytes;
    let mut told = None;
    let done = store.compact_packs(0.5, 0, &mut |b| {
        told = Some(b);
        Ok(())
    });
    let done = done.expect("compact");
    assert_eq!(told.map(|s: StoreStats| s.stored_bytes), Some(stored_after), "before_delete is told the stored bytes");
    assert!(done.packs >= 5 && done.records == kept.len() as u64, "{done:?}");
    assert!(disk(&store) < before / 3, "{} of {before} bytes left", disk(&store));
    assert_eq!(before - disk(&store), done.bytes_reclaimed);
    assert_all_readable(&store, &kept);
    for id in &gone {
        assert!(!store.contains(id).expect("contains"), "released chunk {id} came back");
    }
    drop(store);
    // Reopened: the copies are found, nothing released is indexed again,
    // and new chunks go to a pack with a new number.
    let store = PackStore::open_with(dir.path(), small_packs()).expect("reopen");
    assert_all_readable(&store, &kept);
    assert_eq!(store.stats().expect("stats").chunks, kept.len() as u64);
    let more = put_chunks(&store, 8, 3);
    assert_all_readable(&store, &more);
    assert_all_readable(&store, &kept);
}

#[test]
fn compaction_stopped_before_deleting_leaves_old_packs_that_the_next_one_deletes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = PackStore::open_with(dir.path(), small_packs()).expect("open");
    let chunks = put_chunks(&store, 9, 12);
    let (kept, gone) = chunks.split_at(2);
    store.release(&gone.iter().map(|c| c.0).collect::<Vec<_>>()).expect("release");
    let packs = store.pack_paths().expect("packs");
    let failed = store.compact_packs(0.5, 0, &mut |_| {
        Err(StoreError::Decode { what: "test", detail: "stop before deleting".into() })
    });
    assert!(failed.is_err());
    for p in &packs {
        assert!(p.exists(), "{} went although compaction stopped", p.display());
    }
    assert_all_readable(&store, kept);
    drop(store);
    // As after a crash at that point: the old packs are not indexed again.
    let store = PackStore::open_with(dir.path(), small_packs()).expect("reopen");
    assert_eq!(store.stats().expect("stats").chunks, kept.len() as u64, "nothing released came back");
    assert_all_readable(&store, kept);
    let done = store.compact_packs(0.5, 0, &mut |_| Ok(())).expect("compact");
    assert!(done.packs >= packs.len() as u64 - 1, "{done:?}");
    for p in &packs {
        assert!(!p.exists(), "{} is still there", p.display());
    }
    assert_all_readable(&store, kept);
}

#[test]
fn compaction_lets_puts_in_between_its_copies_and_loses_none() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = PackStore::open(dir.path()).expect("open");
    // One pack of 1,200 chunks, three in four released: it is retired and
    // its 300 live records copied into a new one (long enough for the
    // writer thread to be scheduled in between on a loaded machine).
    let chunks = put_chunks(&store, 11, 1200);
    let (kept, gone): (Vec<_>, Vec<_>) = chunks.into_iter().enumerate().partition(|(i, _)| i % 4 == 0);
    let kept: Vec<(ChunkId, Vec<u8>)> = kept.into_iter().map(|(_, c)| c).collect();
    store.release(&gone.iter().map(|(_, (id, _))| *id).collect::<Vec<_>>()).expect("release");
    let done = std::sync::atomic::AtomicBool::new(false);
    let started = std::sync::Barrier::new(2);
    let added = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut added = Vec::new();
            started.wait();
            let mut i = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) && i < 20_000 {
                let data = pseudo_random(900_000 + i, 2_000);
                added.push((store.put(&data).expect("put during compaction"), data));
                i += 1;
            }
            added
        });
        started.wait();
        let c = store.compact_packs(0.5, 0, &mut |_| Ok(())).expect("compact");
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        // Puts made before the pack was retired are copied too.
        assert!(c.records >= kept.len() as u64, "{c:?}");
        writer.join().expect("writer thread")
    });
    // The copies and the puts share the new pack: some put landed between
    // two copies, so the writer was not held for the whole copy.
    let copies: Vec<Location> = kept.iter().map(|(id, _)| location(&store, id)).collect();
    let pack = copies[0].pack;
    assert!(copies.iter().all(|l| l.pack == pack), "{copies:?}");
    let (first, last) = (copies.iter().map(|l| l.offset).min(), copies.iter().map(|l| l.offset).max());
    let between = added
        .iter()
        .map(|(id, _)| location(&store, id))
        .filter(|l| l.pack == pack && Some(l.offset) > first && Some(l.offset) < last);
    assert!(between.count() > 0, "no put got in between the {} copies ({} puts)", kept.len(), added.len());
    assert_all_readable(&store, &kept);
    assert_all_readable(&store, &added);
    drop(store);
    let store = PackStore::open(dir.path()).expect("reopen");
    assert_all_readable(&store, &kept);
    assert_all_readable(&store, &added);
    assert_eq!(store.stats().expect("stats").chunks, (kept.len() + added.len()) as u64);
}

/// Compaction's cost is what was released, not the store. It
/// measures the packs that had chunks released since they were last
/// measured, not every pack; the ones it finds still mostly live are left
/// alone until another release in them.
#[test]
fn compaction_measures_only_the_packs_that_had_chunks_released() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = PackStore::open_with(dir.path(), small_packs()).expect("open");
    // 120 chunks of 10 KB: 20 packs of six.
    let chunks = put_chunks(&store, 11, 120);
    assert!(store.pack_paths().expect("packs").len() >= 20);
    // A fresh store: every pack written is new, none released.
    let none = store.compact_packs(0.5, 0, &mut |_| Ok(())).expect("compact");
    assert_eq!((none.packs_measured, none.packs), (0, 0), "{none:?}");
    // One chunk of the first pack: measured, still mostly live, left.
    store.release(&[chunks[0].0]).expect("release");
    let one = store.compact_packs(0.5, 0, &mut |_| Ok(())).expect("compact");
    assert_eq!((one.packs_measured, one.packs), (1, 0), "{one:?}");
    let again = store.compact_packs(0.5, 0, &mut |_| Ok(())).expect("compact");
    assert_eq!(again.packs_measured, 0, "measured and found mostly live: not again {again:?}");
    // Most of the second pack: measured and rewritten, then gone.
    let second: Vec<ChunkId> = chunks[6..11].iter().map(|c| c.0).collect();
    store.release(&second).expect("release");
    let done = store.compact_packs(0.5, 0, &mut |_| Ok(())).expect("compact");
    assert_eq!((done.packs_measured, done.packs, done.records), (1, 1, 1), "{done:?}");
    assert_eq!(store.compact_packs(0.5, 0, &mut |_| Ok(())).expect("compact").packs_measured, 0);
    let kept: Vec<(ChunkId, Vec<u8>)> = chunks.into_iter().skip(1).filter(|c| !second.contains(&c.0)).collect();
    assert_all_readable(&store, &kept);
}

/// An index of version 2 (before `released_packs`) is migrated with every
/// pack marked: the first compaction measures them all once, as every
/// compaction did before, and finds what earlier collections released.
#[test]
fn an_index_without_released_packs_has_every_pack_measured_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let chunks = {
        let store = PackStore::open_with(dir.path(), small_packs()).expect("open");
        let chunks = put_chunks(&store, 12, 30);
        store.release(&chunks[..5].iter().map(|c| c.0).collect::<Vec<_>>()).expect("release");
        chunks
    };
    {
        let conn = rusqlite::Connection::open(dir.path().join("chunks.sqlite")).expect("open the index");
        conn.execute_batch("DROP TABLE released_packs; PRAGMA user_version = 2;").expect("make it version 2");
    }
    let store = PackStore::open_with(dir.path(), small_packs()).expect("reopen");
    let packs = store.pack_paths().expect("packs").len() as u64;
    let done = store.compact_packs(0.5, 0, &mut |_| Ok(())).expect("compact");
    assert_eq!((done.packs_measured, done.packs), (packs, 1), "{done:?}");
    assert_eq!(store.compact_packs(0.5, 0, &mut |_| Ok(())).expect("compact").packs_measured, 0);
    assert_all_readable(&store, &chunks[5..]);
}
