//! A store wrapper that injects failures, so the layers above (journal,
//! checkpoint sealing, restore) can be tested against a full disk, a failing
//! device and bit rot without real hardware faults.

use std::collections::HashSet;
use std::sync::Mutex;

use super::{
    ChunkId, ChunkStore, Compacted, PackUse, Reclaiming, StoreError, StoreStats, VerifyReport, verified, verify_by_get,
};

/// What to inject; changed at any time through the `FaultyStore` methods.
#[derive(Debug, Default, Clone)]
struct Faults {
    /// Puts that may still succeed before `put_errno` starts failing them.
    puts_left: Option<u64>,
    put_errno: i32,
    get_errno: Option<i32>,
    sync_errno: Option<i32>,
    /// Gets see one flipped byte, as if the medium had rotted.
    corrupt_gets: bool,
    /// As `corrupt_gets`, for these chunks only.
    corrupt_ids: HashSet<ChunkId>,
}

/// Wraps any store and makes chosen operations fail. Faults apply to calls
/// made after they are set.
#[derive(Debug)]
pub struct FaultyStore<S> {
    inner: S,
    faults: Mutex<Faults>,
}

fn os_error(context: String, errno: i32) -> StoreError {
    StoreError::io(context, std::io::Error::from_raw_os_error(errno))
}

impl<S: ChunkStore> FaultyStore<S> {
    pub fn new(inner: S) -> FaultyStore<S> {
        FaultyStore { inner, faults: Mutex::new(Faults::default()) }
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn faults(&self) -> std::sync::MutexGuard<'_, Faults> {
        crate::poison::lock(&self.faults, "the armed faults")
    }

    /// Lets `n` more puts succeed, then fails every later put with `errno`
    /// (e.g. `libc::ENOSPC`) without storing anything.
    pub fn fail_puts_after(&self, n: u64, errno: i32) {
        let mut faults = self.faults();
        faults.puts_left = Some(n);
        faults.put_errno = errno;
    }

    /// Fails every `get` with `errno` (e.g. `libc::EIO`), or stops doing so.
    pub fn fail_gets(&self, errno: Option<i32>) {
        self.faults().get_errno = errno;
    }

    /// Fails every `sync` with `errno`, or stops doing so.
    pub fn fail_syncs(&self, errno: Option<i32>) {
        self.faults().sync_errno = errno;
    }

    /// Flips a byte of what every `get` reads before it is verified, so the
    /// caller sees `Corrupt` exactly as it would from real damage.
    pub fn corrupt_gets(&self, on: bool) {
        self.faults().corrupt_gets = on;
    }

    /// Flips a byte of what `get` reads of chunk `id` only, so one damaged
    /// chunk can be told from its healthy neighbours (e.g. by `verify`).
    pub fn corrupt_chunk(&self, id: ChunkId) {
        self.faults().corrupt_ids.insert(id);
    }

    /// Removes every fault.
    pub fn heal(&self) {
        *self.faults() = Faults::default();
    }
}

impl<S: ChunkStore> ChunkStore for FaultyStore<S> {
    fn put(&self, data: &[u8]) -> Result<ChunkId, StoreError> {
        {
            let mut faults = self.faults();
            match faults.puts_left {
                Some(0) => {
                    let id = ChunkId::of(data);
                    return Err(os_error(format!("injected failure storing chunk {id}"), faults.put_errno));
                }
                Some(ref mut left) => *left -= 1,
                None => {}
            }
        }
        self.inner.put(data)
    }

    fn discard(&self, ids: &[ChunkId]) -> Result<(), StoreError> {
        self.inner.discard(ids)
    }

    // What injects no fault goes to the inner store as it is.
    fn release(&self, ids: &[ChunkId]) -> Result<(), StoreError> {
        self.inner.release(ids)
    }

    fn stored_len(&self, id: &ChunkId) -> Result<Option<u64>, StoreError> {
        self.inner.stored_len(id)
    }

    /// The wrapper reclaims exactly when the store inside does.
    fn reclaiming(&self) -> Option<&dyn Reclaiming> {
        self.inner.reclaiming().map(|_| self as &dyn Reclaiming)
    }

    fn get(&self, id: &ChunkId) -> Result<Vec<u8>, StoreError> {
        let (errno, corrupt) = {
            let faults = self.faults();
            (faults.get_errno, faults.corrupt_gets || faults.corrupt_ids.contains(id))
        };
        if let Some(errno) = errno {
            return Err(os_error(format!("injected failure reading chunk {id}"), errno));
        }
        let mut data = self.inner.get(id)?;
        if corrupt {
            match data.first_mut() {
                Some(byte) => *byte ^= 0x01,
                // Nothing to flip in an empty chunk: damage shows as extra bytes.
                None => data.push(0),
            }
        }
        verified(id, data)
    }

    fn contains(&self, id: &ChunkId) -> Result<bool, StoreError> {
        self.inner.contains(id)
    }

    fn sync(&self) -> Result<(), StoreError> {
        if let Some(errno) = self.faults().sync_errno {
            return Err(os_error("injected failure syncing the chunk store".to_string(), errno));
        }
        self.inner.sync()
    }

    fn stats(&self) -> Result<StoreStats, StoreError> {
        self.inner.stats()
    }

    /// Goes through this wrapper's `get`, so injected faults show up.
    fn verify_with_progress(&self, progress: &mut dyn FnMut(u64)) -> Result<VerifyReport, StoreError> {
        verify_by_get(self, progress)
    }

    fn list(&self) -> Result<Vec<ChunkId>, StoreError> {
        self.inner.list()
    }
}

// What injects no fault goes to the inner store as it is, so a wrapped
// store compacts and keeps its reserve as it would unwrapped. Reached only
// through `reclaiming`, which answers None when the inner store has none.
impl<S: ChunkStore> Reclaiming for FaultyStore<S> {
    fn compact(
        &self,
        threshold: f64,
        min_reclaim: u64,
        before_delete: &mut dyn FnMut(StoreStats) -> Result<(), StoreError>,
    ) -> Result<Compacted, StoreError> {
        self.inner.reclaiming().map_or(Ok(Compacted::default()), |r| r.compact(threshold, min_reclaim, before_delete))
    }

    fn pack_use(&self) -> Result<Vec<PackUse>, StoreError> {
        self.inner.reclaiming().map_or(Ok(Vec::new()), |r| r.pack_use())
    }

    fn lend_reserve(&self, now: bool) -> bool {
        self.inner.reclaiming().is_some_and(|r| r.lend_reserve(now))
    }

    fn restore_reserve(&self) {
        if let Some(r) = self.inner.reclaiming() {
            r.restore_reserve()
        }
    }

    fn shrink(&self) -> Result<(), StoreError> {
        self.inner.reclaiming().map_or(Ok(()), |r| r.shrink())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    #[test]
    fn puts_fail_with_errno_after_n() {
        let store = FaultyStore::new(MemoryStore::new());
        store.fail_puts_after(2, libc::ENOSPC);
        store.put(b"one").expect("first put");
        store.put(b"two").expect("second put");
        let err = store.put(b"three").expect_err("third put must fail");
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
        assert!(!store.contains(&ChunkId::of(b"three")).expect("contains"), "failed put stored data");
        assert_eq!(store.stats().expect("stats").chunks, 2);
        store.heal();
        store.put(b"three").expect("put after heal");
    }

    #[test]
    fn corrupt_gets_report_corrupt_and_verify_sees_them() {
        let store = FaultyStore::new(MemoryStore::new());
        let id = store.put(b"data").expect("put");
        let empty = store.put(b"").expect("put empty");
        store.corrupt_gets(true);
        assert!(matches!(store.get(&id), Err(StoreError::Corrupt { chunk, .. }) if chunk == id));
        assert!(matches!(store.get(&empty), Err(StoreError::Corrupt { .. })));
        assert_eq!(store.verify().expect("verify").corrupt.len(), 2);
        store.corrupt_gets(false);
        assert_eq!(store.get(&id).expect("get after healing"), b"data");
    }

    #[test]
    fn gets_and_syncs_fail_with_errno() {
        let store = FaultyStore::new(MemoryStore::new());
        let id = store.put(b"data").expect("put");
        store.fail_gets(Some(libc::EIO));
        store.fail_syncs(Some(libc::EIO));
        assert_eq!(store.get(&id).expect_err("get must fail").raw_os_error(), Some(libc::EIO));
        assert_eq!(store.sync().expect_err("sync must fail").raw_os_error(), Some(libc::EIO));
    }
}
