//! The behaviour every [`ChunkStore`] backend must show: one test template
//! all backends pass, public with the `test-kit` feature so a backend built
//! elsewhere (an S3-compatible object store, for example) proves itself the
//! same way (`tests/store_kit.rs` runs it on every backend [`super::open`]
//! makes).
//!
//! - [`run_all`] on a fresh, empty store: put/get, idempotence, missing
//!   chunks, empty and large chunks, concurrent puts, list and verify,
//!   release, discard, sync, stats, stored length.
//! - [`run_reclaiming`] on a fresh, empty store that has the
//!   [`Reclaiming`] extension (packs): compaction, the reserve, shrinking
//!   the index; [`compaction_durable_after_crash`] with a reopening
//!   factory.
//! - [`verify_finds_damage`] on a store wrapped in [`FaultyStore`].
//! - [`durable_after_crash`] and [`torn_tail`] for a backend whose storage
//!   outlives it, given a factory that reopens the same storage.
//!
//! Every check panics with what went wrong; none depends on the chunks the
//! others stored, so they run one after another on one store.

use std::collections::HashSet;
use std::sync::Arc;

use super::{ChunkId, ChunkStore, FaultyStore, Reclaiming, StoreError};

/// Runs every check that needs nothing but the store, in order, on one
/// empty store.
pub fn run_all(store: &dyn ChunkStore) {
    roundtrip(store);
    idempotent_put(store);
    contains_and_missing(store);
    empty_and_large(store);
    concurrent_puts(store);
    list_and_verify(store);
    release(store);
    discard(store);
    sync(store);
    stats(store);
    stored_len(store);
    list_and_verify(store);
}

/// Runs every check of the [`Reclaiming`] extension, in order, on one empty
/// store that has it (panics if [`ChunkStore::reclaiming`] says it has not).
pub fn run_reclaiming(store: &dyn ChunkStore) {
    let reclaiming = store.reclaiming().expect("run_reclaiming needs a store with the Reclaiming extension");
    compaction(store, reclaiming);
    reserve(store, reclaiming);
    reclaiming.shrink().expect("shrink");
    list_and_verify(store);
}

/// The reserve lent at once is given, content waits meanwhile or goes on
/// (a backend may refuse content only while it is lent), and once it is
/// restored content is stored again.
fn reserve(store: &dyn ChunkStore, reclaiming: &dyn Reclaiming) {
    let before = put_many(store, 17_000, 3, 3000);
    if reclaiming.lend_reserve(true) {
        assert!(!reclaiming.lend_reserve(true), "a reserve already lent was lent again");
    }
    assert_reads(store, &before, "while the reserve is lent");
    reclaiming.restore_reserve();
    let after = put_many(store, 17_100, 3, 3000);
    assert_reads(store, &[before, after].concat(), "after the reserve is restored");
}

/// Deterministic pseudo-random bytes, so failures are reproducible.
pub fn pseudo_random(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

fn roundtrip(store: &dyn ChunkStore) {
    let data = b"the quick brown fox".to_vec();
    let id = store.put(&data).expect("put");
    assert_eq!(id, ChunkId::of(&data));
    assert_eq!(store.get(&id).expect("get"), data);
}

fn idempotent_put(store: &dyn ChunkStore) {
    let data = pseudo_random(1, 10_000);
    let before = store.stats().expect("stats");
    let first = store.put(&data).expect("first put");
    let after_first = store.stats().expect("stats");
    let second = store.put(&data).expect("second put");
    let after_second = store.stats().expect("stats");
    assert_eq!(first, second);
    assert_eq!(after_first.chunks, before.chunks + 1);
    assert_eq!(after_first.raw_bytes, before.raw_bytes + 10_000);
    assert_eq!(after_second, after_first, "a second put of the same bytes stored something");
}

fn contains_and_missing(store: &dyn ChunkStore) {
    let id = store.put(b"present").expect("put");
    assert!(store.contains(&id).expect("contains"));
    let absent = ChunkId::of(b"never stored");
    assert!(!store.contains(&absent).expect("contains"));
    match store.get(&absent) {
        Err(StoreError::Missing { chunk }) => assert_eq!(chunk, absent),
        other => panic!("expected Missing, got {other:?}"),
    }
}

fn empty_and_large(store: &dyn ChunkStore) {
    let empty = store.put(b"").expect("put empty");
    assert_eq!(empty, ChunkId::of(b""));
    assert_eq!(store.get(&empty).expect("get empty"), Vec::<u8>::new());

    let large = pseudo_random(2, 5 * 1024 * 1024 + 7);
    let id = store.put(&large).expect("put large");
    assert_eq!(store.get(&id).expect("get large"), large);

    let compressible = vec![b'a'; 3 * 1024 * 1024];
    let id = store.put(&compressible).expect("put compressible");
    assert_eq!(store.get(&id).expect("get compressible"), compressible);
}

fn concurrent_puts(store: &dyn ChunkStore) {
    const THREADS: u64 = 8;
    const PER_THREAD: u64 = 40;
    let before = store.stats().expect("stats").chunks;
    // Half of each thread's chunks are shared with every other thread, so
    // the same id is raced for and must still be stored once.
    let chunk_for = |thread: u64, i: u64| {
        let seed = if i.is_multiple_of(2) { 1000 + i } else { 2000 + thread * PER_THREAD + i };
        pseudo_random(seed, 1000 + (seed as usize % 5000))
    };
    let ids: Vec<Vec<ChunkId>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                scope.spawn(move || {
                    (0..PER_THREAD).map(|i| store.put(&chunk_for(t, i)).expect("concurrent put")).collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread panicked")).collect()
    });
    let mut distinct = HashSet::new();
    for (t, thread_ids) in ids.iter().enumerate() {
        for (i, id) in thread_ids.iter().enumerate() {
            let expected = chunk_for(t as u64, i as u64);
            assert_eq!(store.get(id).expect("get after concurrent put"), expected);
            distinct.insert(*id);
        }
    }
    let shared = PER_THREAD / 2;
    assert_eq!(distinct.len() as u64, shared + THREADS * (PER_THREAD - shared));
    assert_eq!(store.stats().expect("stats").chunks, before + distinct.len() as u64);
}

fn list_and_verify(store: &dyn ChunkStore) {
    let listed = store.list().expect("list");
    let stats = store.stats().expect("stats");
    assert_eq!(listed.len() as u64, stats.chunks);
    assert!(listed.windows(2).all(|w| w[0] < w[1]), "list is not sorted and distinct");
    let report = store.verify().expect("verify");
    assert_eq!(report.checked, stats.chunks);
    assert!(report.corrupt.is_empty(), "healthy store reported corrupt: {:?}", report.corrupt);
}

/// Puts `n` incompressible chunks of `len` bytes from seeds `seed..`.
fn put_many(store: &dyn ChunkStore, seed: u64, n: u64, len: usize) -> Vec<(ChunkId, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let data = pseudo_random(seed + i, len);
            (store.put(&data).expect("put"), data)
        })
        .collect()
}

fn assert_gone(store: &dyn ChunkStore, id: &ChunkId, what: &str) {
    assert!(!store.contains(id).expect("contains"), "{what}: chunk {id} is still contained");
    assert!(!store.list().expect("list").contains(id), "{what}: chunk {id} is still listed");
    assert!(matches!(store.get(id), Err(StoreError::Missing { .. })), "{what}: chunk {id} still reads");
    assert_eq!(store.stored_len(id).expect("stored_len"), None, "{what}: chunk {id} still has a length");
}

fn assert_reads(store: &dyn ChunkStore, chunks: &[(ChunkId, Vec<u8>)], what: &str) {
    for (id, data) in chunks {
        assert!(store.contains(id).expect("contains"), "{what}: chunk {id} is not contained");
        assert_eq!(&store.get(id).unwrap_or_else(|e| panic!("{what}: chunk {id}: {e}")), data, "{what}: chunk {id}");
    }
}

/// A released chunk leaves the store (list, contains, get, stats); the
/// others are untouched, and putting it again brings it back.
fn release(store: &dyn ChunkStore) {
    let chunks = put_many(store, 10_000, 6, 3000);
    let before = store.stats().expect("stats");
    let (gone, kept) = chunks.split_at(3);
    let ids: Vec<ChunkId> = gone.iter().map(|(id, _)| *id).collect();
    store.release(&ids).expect("release");
    for id in &ids {
        assert_gone(store, id, "after release");
    }
    assert_reads(store, kept, "beside released chunks");
    let after = store.stats().expect("stats");
    assert_eq!(after.chunks, before.chunks - 3, "released chunks still counted");
    assert_eq!(after.raw_bytes, before.raw_bytes - 3 * 3000, "released bytes still counted");
    // Releasing what is not there is no error.
    store.release(&ids).expect("release twice");
    store.release(&[ChunkId::of(b"never stored either")]).expect("release of an absent chunk");
    let (id, added) = store.put_new(&gone[0].1).expect("put again");
    assert!(added, "a released chunk put again is new");
    assert_eq!(store.get(&id).expect("get after put again"), gone[0].1);
}

/// `discard` takes back chunks `put_new` added, or (a backend that cannot)
/// leaves them whole; either way the others are untouched.
fn discard(store: &dyn ChunkStore) {
    let kept = put_many(store, 11_000, 2, 2000);
    let data = pseudo_random(11_500, 4000);
    let (id, added) = store.put_new(&data).expect("put_new");
    assert!(added, "put_new of new bytes says it added nothing");
    let (again, added_again) = store.put_new(&data).expect("put_new again");
    assert_eq!(again, id);
    assert!(!added_again, "put_new of present bytes says it added them");
    store.discard(&[id]).expect("discard");
    if store.contains(&id).expect("contains") {
        assert_eq!(store.get(&id).expect("a chunk discard left must read"), data);
    } else {
        assert_gone(store, &id, "after discard");
        assert!(store.put_new(&data).expect("put_new after discard").1, "a discarded chunk put again is new");
    }
    assert_reads(store, &kept, "beside a discarded chunk");
}

/// `sync` returns Ok, and what was put before it still reads.
fn sync(store: &dyn ChunkStore) {
    let chunks = put_many(store, 12_000, 4, 1500);
    store.sync().expect("sync");
    store.sync().expect("sync with nothing new");
    assert_reads(store, &chunks, "after sync");
}

/// The counters follow puts: one chunk per distinct content, its raw length,
/// duplicates nothing; and they agree with `list`.
fn stats(store: &dyn ChunkStore) {
    let before = store.stats().expect("stats");
    let lens = [1usize, 100, 4096, 65_537];
    let mut raw = 0u64;
    for (i, len) in lens.iter().enumerate() {
        let data = pseudo_random(13_000 + i as u64, *len);
        store.put(&data).expect("put");
        store.put(&data).expect("put duplicate");
        raw += *len as u64;
    }
    let after = store.stats().expect("stats");
    assert_eq!(after.chunks, before.chunks + lens.len() as u64, "chunks counted wrong");
    assert_eq!(after.raw_bytes, before.raw_bytes + raw, "raw bytes counted wrong");
    assert!(after.stored_bytes > before.stored_bytes, "stored bytes did not grow");
    assert_eq!(after.chunks, store.list().expect("list").len() as u64, "stats and list disagree");
}

/// A present chunk has a stored length (at least something for non-empty
/// incompressible bytes); an absent one has none.
fn stored_len(store: &dyn ChunkStore) {
    let data = pseudo_random(14_000, 5000);
    let id = store.put(&data).expect("put");
    let len = store.stored_len(&id).expect("stored_len").expect("a present chunk has a stored length");
    assert!(len >= 5000, "5000 incompressible bytes stored in {len}");
    let compressible = vec![b'z'; 100_000];
    let cid = store.put(&compressible).expect("put");
    assert!(store.stored_len(&cid).expect("stored_len").is_some_and(|l| l > 0), "a compressible chunk has no length");
    assert_eq!(store.stored_len(&ChunkId::of(b"absent for stored_len")).expect("stored_len"), None);
}

/// Many chunks, most released, then compaction: the survivors read back,
/// the released stay gone, and a backend with packs takes less room.
fn compaction(store: &dyn ChunkStore, reclaiming: &dyn Reclaiming) {
    let chunks = put_many(store, 15_000, 200, 10_000);
    let (released, kept): (Vec<_>, Vec<_>) = chunks.into_iter().enumerate().partition(|(i, _)| i % 10 != 0);
    let released: Vec<(ChunkId, Vec<u8>)> = released.into_iter().map(|(_, c)| c).collect();
    let kept: Vec<(ChunkId, Vec<u8>)> = kept.into_iter().map(|(_, c)| c).collect();
    let ids: Vec<ChunkId> = released.iter().map(|(id, _)| *id).collect();
    store.release(&ids).expect("release");
    let file_bytes = || reclaiming.pack_use().expect("pack_use").iter().map(|p| p.file_bytes).sum::<u64>();
    let before = file_bytes();
    let stats_before = store.stats().expect("stats");
    let mut told = None;
    let done = reclaiming
        .compact(1.0, 0, &mut |stats| {
            told = Some(stats);
            Ok(())
        })
        .expect("compact");
    assert_reads(store, &kept, "after compaction");
    for (id, _) in &released {
        assert_gone(store, id, "released before compaction");
    }
    let stats_after = store.stats().expect("stats");
    assert_eq!(stats_after.chunks, stats_before.chunks, "compaction changed the chunks held");
    assert_eq!(stats_after.raw_bytes, stats_before.raw_bytes, "compaction changed the raw bytes held");
    if done.packs > 0 {
        assert!(told.is_some(), "compaction deleted packs without telling before_delete");
        assert!(file_bytes() < before, "compaction of {} packs took no room back", done.packs);
    } else if before > 0 {
        panic!("a store with packs ({before} bytes, 90% released) compacted nothing: {done:?}");
    }
    store.sync().expect("sync after compaction");
    assert_reads(store, &kept, "after compaction and sync");
}

/// A chunk the [`FaultyStore`] damages is the one `verify` reports, as
/// corrupt, beside healthy ones; `get` says `Corrupt`, never wrong bytes.
/// Run on an empty store with no faults armed; leaves none armed.
pub fn verify_finds_damage<S: ChunkStore>(store: &FaultyStore<S>) {
    let chunks = put_many(store, 16_000, 5, 2500);
    let damaged = chunks[2].0;
    store.corrupt_chunk(damaged);
    match store.get(&damaged) {
        Err(StoreError::Corrupt { chunk, .. }) => assert_eq!(chunk, damaged),
        other => panic!("a damaged chunk read as {other:?}"),
    }
    let report = store.verify().expect("verify");
    assert_eq!(report.checked, store.stats().expect("stats").chunks, "verify did not check every chunk");
    let named: Vec<ChunkId> = report.corrupt.iter().map(|c| c.id).collect();
    assert_eq!(named, vec![damaged], "verify named the wrong chunks: {:?}", report.corrupt);
    assert_reads(store, &[&chunks[..2], &chunks[3..]].concat(), "beside a damaged chunk");
    store.heal();
    assert!(store.verify().expect("verify").corrupt.is_empty(), "healed store still reports damage");
}

/// For a backend whose storage outlives it: every put that returned reads
/// back after the store is dropped without `sync` (a crash of the process)
/// and reopened by `open`, as do chunks put after a sync; released chunks
/// stay released. `open` must make a store on the same, initially empty,
/// storage each call; the kit holds one store at a time.
pub fn durable_after_crash(open: &dyn Fn() -> Arc<dyn ChunkStore>) {
    let store = open();
    assert_eq!(store.stats().expect("stats").chunks, 0, "durable_after_crash needs empty storage");
    let mut chunks = put_many(&*store, 20_000, 20, 7000);
    chunks.push((store.put(b"").expect("put empty"), Vec::new()));
    let compressible = vec![b'c'; 200_000];
    chunks.push((store.put(&compressible).expect("put compressible"), compressible));
    drop(store);

    let store = open();
    assert_reads(&*store, &chunks, "after a crash without sync");
    assert_eq!(store.stats().expect("stats").chunks, chunks.len() as u64, "chunks counted wrong after a crash");
    chunks.extend(put_many(&*store, 21_000, 5, 7000));
    store.sync().expect("sync");
    chunks.extend(put_many(&*store, 22_000, 5, 7000));
    let (released, _) = chunks.pop().expect("chunks");
    store.release(&[released]).expect("release");
    drop(store);

    let store = open();
    assert_reads(&*store, &chunks, "after a second crash");
    assert_gone(&*store, &released, "released before a crash");
    let listed = store.list().expect("list");
    assert_eq!(listed.len(), chunks.len(), "chunks listed wrong after crashes");
    assert!(store.verify().expect("verify").corrupt.is_empty(), "damage after a crash");
    store.put(b"still writable").expect("put after crashes");
}

/// For a backend whose storage outlives it and can be torn: chunks are put,
/// the store dropped without `sync`, `tear` cuts the storage's last write
/// short (e.g. truncates the newest pack by a few bytes), and the store
/// reopens. Every chunk but the last put still reads back, the last
/// either reads back whole or is missing (never wrong bytes), verify finds
/// no damage, and the store takes puts again, the torn chunk included.
pub fn torn_tail(open: &dyn Fn() -> Arc<dyn ChunkStore>, tear: &dyn Fn()) {
    let store = open();
    let before = store.list().expect("list");
    let chunks = put_many(&*store, 30_000, 12, 9000);
    drop(store);
    tear();

    let store = open();
    let (last, intact) = chunks.split_last().expect("chunks");
    assert_reads(&*store, intact, "before a torn tail");
    match store.get(&last.0) {
        Ok(data) => assert_eq!(data, last.1, "a torn chunk read back wrong"),
        Err(StoreError::Missing { .. }) => {
            assert!(!store.contains(&last.0).expect("contains"), "a torn chunk is contained but missing");
        }
        Err(e) => panic!("the torn chunk neither reads nor is missing: {e}"),
    }
    let report = store.verify().expect("verify");
    assert!(report.corrupt.is_empty(), "damage after a torn tail: {:?}", report.corrupt);
    let listed = store.list().expect("list");
    assert!(before.iter().all(|id| listed.contains(id)), "chunks from before the tear were lost");
    let id = store.put(&last.1).expect("put the torn chunk again");
    assert_eq!(store.get(&id).expect("get the torn chunk"), last.1);
    let more = put_many(&*store, 31_000, 3, 9000);
    drop(store);
    let store = open();
    assert_reads(&*store, &[intact, std::slice::from_ref(last), &more].concat(), "after a torn tail and a reopen");
}

/// For a backend with the [`Reclaiming`] extension whose storage outlives
/// it: a compaction, then a drop without `sync` (a crash), then a reopen by
/// `open`: the chunks kept read back and the released ones stay gone, and
/// the store takes puts again. `open` as for [`durable_after_crash`].
pub fn compaction_durable_after_crash(open: &dyn Fn() -> Arc<dyn ChunkStore>) {
    let store = open();
    let reclaiming = store.reclaiming().expect("compaction_durable_after_crash needs the Reclaiming extension");
    let chunks = put_many(&*store, 40_000, 60, 9000);
    let (released, kept): (Vec<_>, Vec<_>) = chunks.into_iter().enumerate().partition(|(i, _)| i % 4 != 0);
    let released: Vec<ChunkId> = released.into_iter().map(|(_, (id, _))| id).collect();
    let kept: Vec<(ChunkId, Vec<u8>)> = kept.into_iter().map(|(_, c)| c).collect();
    store.release(&released).expect("release");
    let done = reclaiming.compact(1.0, 0, &mut |_| Ok(())).expect("compact");
    assert!(done.packs > 0, "nothing compacted from packs 75% released: {done:?}");
    drop(store);

    let store = open();
    assert_reads(&*store, &kept, "after a compaction and a crash");
    for id in &released {
        assert_gone(&*store, id, "released before a compaction and a crash");
    }
    assert_eq!(store.list().expect("list").len(), kept.len(), "chunks listed wrong after a compaction and a crash");
    assert!(store.verify().expect("verify").corrupt.is_empty(), "damage after a compaction and a crash");
    store.put(b"writable after compaction").expect("put after a compaction and a crash");
}
