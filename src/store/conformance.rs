//! The behaviour every [`ChunkStore`] backend must show. Each backend's tests
//! call [`run_all`] on a fresh, empty store.

use std::collections::HashSet;

use super::{ChunkId, ChunkStore, StoreError};

/// Runs every check in order on one empty store.
pub(crate) fn run_all(store: &dyn ChunkStore) {
    roundtrip(store);
    idempotent_put(store);
    contains_and_missing(store);
    empty_and_large(store);
    concurrent_puts(store);
    list_and_verify(store);
}

/// Deterministic pseudo-random bytes, so failures are reproducible.
pub(crate) fn pseudo_random(seed: u64, len: usize) -> Vec<u8> {
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
