//! An in-memory chunk store, for tests of the layers above the store and as
//! the reference the conformance suite holds other backends to.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use super::{ChunkId, ChunkStore, StoreError, StoreStats, VerifyReport, verified, verify_by_get};

/// Chunks in a `HashMap` behind a mutex. Nothing survives the process, so
/// `sync` has nothing to do.
#[derive(Debug, Default)]
pub struct MemoryStore {
    chunks: Mutex<HashMap<ChunkId, Vec<u8>>>,
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// A panic in another thread while holding the lock cannot leave the map
    /// half-updated (every update is a single insert), so the data is still
    /// good and the poison flag is ignored.
    fn chunks(&self) -> MutexGuard<'_, HashMap<ChunkId, Vec<u8>>> {
        crate::poison::lock(&self.chunks, "the memory store")
    }

    /// Replaces the bytes held for `id` without changing the id, so tests can
    /// check that damage is detected.
    #[cfg(test)]
    pub(crate) fn tamper(&self, id: &ChunkId, data: Vec<u8>) {
        self.chunks().insert(*id, data);
    }
}

impl ChunkStore for MemoryStore {
    fn put(&self, data: &[u8]) -> Result<ChunkId, StoreError> {
        let id = ChunkId::of(data);
        self.chunks().entry(id).or_insert_with(|| data.to_vec());
        Ok(id)
    }

    fn put_new(&self, data: &[u8]) -> Result<(ChunkId, bool), StoreError> {
        let id = ChunkId::of(data);
        let mut chunks = self.chunks();
        let new = !chunks.contains_key(&id);
        chunks.entry(id).or_insert_with(|| data.to_vec());
        Ok((id, new))
    }

    fn discard(&self, ids: &[ChunkId]) -> Result<(), StoreError> {
        let mut chunks = self.chunks();
        for id in ids {
            chunks.remove(id);
        }
        Ok(())
    }

    fn get(&self, id: &ChunkId) -> Result<Vec<u8>, StoreError> {
        let data = self.chunks().get(id).cloned().ok_or(StoreError::Missing { chunk: *id })?;
        verified(id, data)
    }

    fn contains(&self, id: &ChunkId) -> Result<bool, StoreError> {
        Ok(self.chunks().contains_key(id))
    }

    fn sync(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn stats(&self) -> Result<StoreStats, StoreError> {
        let chunks = self.chunks();
        let raw_bytes = chunks.values().map(|v| v.len() as u64).sum();
        Ok(StoreStats { chunks: chunks.len() as u64, raw_bytes, stored_bytes: raw_bytes })
    }

    fn verify_with_progress(&self, progress: &mut dyn FnMut(u64)) -> Result<VerifyReport, StoreError> {
        verify_by_get(self, progress)
    }

    fn list(&self) -> Result<Vec<ChunkId>, StoreError> {
        let mut ids: Vec<ChunkId> = self.chunks().keys().copied().collect();
        ids.sort_unstable();
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::conformance;

    #[test]
    fn memory_store_conformance() {
        conformance::run_all(&MemoryStore::new());
    }

    #[test]
    fn memory_store_detects_tampering() {
        let store = MemoryStore::new();
        let good = store.put(b"good").expect("put");
        let bad = store.put(b"bad").expect("put");
        store.tamper(&bad, b"evil".to_vec());
        assert!(matches!(store.get(&bad), Err(StoreError::Corrupt { chunk, .. }) if chunk == bad));
        let report = store.verify().expect("verify");
        assert_eq!(report.checked, 2);
        assert_eq!(report.corrupt.len(), 1);
        assert_eq!(report.corrupt[0].id, bad);
        assert_eq!(store.get(&good).expect("good chunk"), b"good");
    }
}
