//! The local cache of a remote's chunks that `show s3://...` reads
//! through: one file per chunk, named by its blake3 name, in a directory
//! of the user's cache (`$XDG_CACHE_HOME/rewindfs/chunks`, else
//! `~/.cache/rewindfs/chunks`), never in a store. Bounded: after each
//! chunk it adds, the least recently used are removed until the files
//! together are within the bound. A chunk is checked against its name
//! when it is fetched and again when it is read back from the disk, so a
//! damaged object or cache file is never served.
//!
//! Chunks are immutable and named by content, so one cache serves every
//! bucket and every `show` of the user. Several `show`s at once each keep
//! their own count of it (each stays within its bound for what it adds;
//! a file another removed is fetched again).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::{Bucket, RemoteError, RemoteResult, RemoteUrl};
use crate::store::ChunkId;

/// Chunks kept in memory too, for the many small reads of one chunk.
const HOT: usize = 32;

/// The default bound of the cache.
pub const DEFAULT_BOUND: u64 = 1 << 30;

/// What a cache did, for the tests and `--json`.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct CacheStats {
    pub fetched: u64,
    pub bytes_fetched: u64,
    pub hits: u64,
    pub evicted: u64,
    /// Bytes of the files it counts now.
    pub bytes: u64,
}

#[derive(Default)]
struct State {
    /// Files on disk: size and last use.
    files: HashMap<ChunkId, (u64, u64)>,
    /// Last use -> chunk, oldest first.
    by_use: BTreeMap<u64, ChunkId>,
    tick: u64,
    total: u64,
    hot: VecDeque<(ChunkId, Arc<Vec<u8>>)>,
    stats: CacheStats,
    /// A write to the cache failed: said once.
    write_failed: bool,
    /// Chunks another thread is writing now.
    writing: std::collections::HashSet<ChunkId>,
}

impl State {
    fn touch(&mut self, id: &ChunkId) {
        self.tick += 1;
        if let Some((_, used)) = self.files.get_mut(id) {
            self.by_use.remove(used);
            *used = self.tick;
            self.by_use.insert(self.tick, *id);
        }
    }

    fn forget(&mut self, id: &ChunkId) {
        if let Some((size, used)) = self.files.remove(id) {
            self.by_use.remove(&used);
            self.total -= size;
        }
    }

    fn remember_hot(&mut self, id: ChunkId, data: Arc<Vec<u8>>) {
        if self.hot.len() >= HOT {
            self.hot.pop_front();
        }
        self.hot.push_back((id, data));
    }
}

pub struct ChunkCache {
    dir: PathBuf,
    bound: u64,
    state: Mutex<State>,
}

/// `$XDG_CACHE_HOME/rewindfs/chunks`, else `~/.cache/rewindfs/chunks`.
pub fn default_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("rewindfs").join("chunks"))
}

impl ChunkCache {
    /// The cache in `dir` (made if missing), holding at most `bound` bytes
    /// of chunk files: what it holds already counts, oldest use first.
    pub fn open(dir: &Path, bound: u64) -> RemoteResult<ChunkCache> {
        let io = |what: String| move |source| RemoteError::Io { what, source };
        crate::store_dir::create_private_dir(dir).map_err(io(format!("cannot create the cache {}", dir.display())))?;
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io(format!("cannot read the cache {}", dir.display())))? {
            let Ok(entry) = entry else { continue };
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(ChunkId::parse_hex) else {
                // A temporary left by a process that was killed.
                if name.to_string_lossy().starts_with(".tmp-") {
                    let _ = std::fs::remove_file(entry.path());
                }
                continue;
            };
            let Ok(meta) = entry.metadata() else { continue };
            found.push((meta.modified().ok(), id, meta.len()));
        }
        found.sort();
        let mut state = State::default();
        for (_, id, size) in found {
            state.tick += 1;
            state.files.insert(id, (size, state.tick));
            state.by_use.insert(state.tick, id);
            state.total += size;
        }
        let cache = ChunkCache { dir: dir.to_path_buf(), bound, state: Mutex::new(state) };
        let mut state = cache.lock();
        cache.evict(&mut state, 0);
        drop(state);
        Ok(cache)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::poison::lock(&self.state, "the chunk cache")
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn bound(&self) -> u64 {
        self.bound
    }

    pub fn stats(&self) -> CacheStats {
        let state = self.lock();
        CacheStats { bytes: state.total, ..state.stats }
    }

    fn path(&self, id: &ChunkId) -> PathBuf {
        self.dir.join(id.to_string())
    }

    /// Chunk `id`: from memory, from the cache's disk, else fetched from
    /// `bucket`; every copy checked against `id` before it is returned.
    pub fn get(&self, bucket: &Bucket, id: &ChunkId) -> RemoteResult<Arc<Vec<u8>>> {
        {
            let mut state = self.lock();
            if let Some(data) = state.hot.iter().find(|(h, _)| h == id).map(|(_, d)| d.clone()) {
                state.stats.hits += 1;
                state.touch(id);
                return Ok(data);
            }
        }
        if let Some(data) = self.read_file(id) {
            let data = Arc::new(data);
            let mut state = self.lock();
            state.stats.hits += 1;
            state.touch(id);
            state.remember_hot(*id, data.clone());
            return Ok(data);
        }
        let data = Arc::new(bucket.get_verified(&RemoteUrl::chunk_key(id), id)?);
        let size = data.len() as u64;
        // Room is made, and the file counted, before it is written: the
        // files on disk are within the bound at every moment.
        let (new, write) = {
            let mut state = self.lock();
            state.stats.fetched += 1;
            state.stats.bytes_fetched += size;
            state.remember_hot(*id, data.clone());
            let new = !state.files.contains_key(id);
            if new {
                self.evict(&mut state, size);
                state.tick += 1;
                let tick = state.tick;
                state.files.insert(*id, (size, tick));
                state.by_use.insert(tick, *id);
                state.total += size;
            }
            state.touch(id);
            // One writer per chunk, and none over a file that is there
            // (written by another thread since this one looked): a second
            // copy being written beside the first would be bytes on disk the
            // count does not know.
            let write = !state.writing.contains(id) && (new || !self.path(id).exists());
            if write {
                state.writing.insert(*id);
            }
            (new, write)
        };
        if !write {
            return Ok(data);
        }
        let written = self.write_file(id, &data);
        let mut state = self.lock();
        state.writing.remove(id);
        if let Err(e) = written {
            if new {
                state.forget(id);
            }
            if !state.write_failed {
                state.write_failed = true;
                log::warn!(
                    "Cannot write to the chunk cache {}: {e}; reading from the remote alone.",
                    self.dir.display()
                );
            }
        }
        Ok(data)
    }

    /// A cached chunk, None when it is not there or is not what its name
    /// says (then removed, to be fetched again).
    fn read_file(&self, id: &ChunkId) -> Option<Vec<u8>> {
        let path = self.path(id);
        // Not there (not fetched yet, or removed by another `show` sharing
        // the cache): still counted, as it will be once fetched again.
        let data = std::fs::read(&path).ok()?;
        if ChunkId::of(&data) == *id {
            return Some(data);
        }
        log::warn!("The cached chunk {} does not match its name: removed, fetching it again.", path.display());
        let _ = std::fs::remove_file(&path);
        self.lock().forget(id);
        None
    }

    /// Writes a chunk beside its name and renames it into place, so a
    /// reader never sees a part of one.
    fn write_file(&self, id: &ChunkId, data: &[u8]) -> std::io::Result<()> {
        let tmp = self.dir.join(format!(".tmp-{}-{id}", std::process::id()));
        std::fs::write(&tmp, data)?;
        std::fs::rename(&tmp, self.path(id)).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }

    /// Removes the least recently used files until `room` more bytes fit
    /// within the bound.
    fn evict(&self, state: &mut State, room: u64) {
        while state.total + room > self.bound {
            // Not one being written: its file would appear after it was let go.
            let writing = &state.writing;
            let Some((&used, &id)) = state.by_use.iter().find(|(_, id)| !writing.contains(id)) else { break };
            state.by_use.remove(&used);
            if let Some((size, _)) = state.files.remove(&id) {
                state.total -= size;
            }
            state.stats.evicted += 1;
            if let Err(e) = std::fs::remove_file(self.path(&id))
                && e.kind() != std::io::ErrorKind::NotFound
            {
                log::warn!("Cannot remove {} from the chunk cache: {e}.", self.path(&id).display());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Filled past its bound, the cache removes the least recently used
    /// files and counts what is left; a damaged file is not served.
    #[test]
    fn the_cache_stays_within_its_bound_and_serves_only_what_matches_a_name() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cache = ChunkCache::open(dir.path(), 3000).expect("cache");
        let chunks: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 1000]).collect();
        for c in &chunks {
            let id = ChunkId::of(c);
            let mut state = cache.lock();
            cache.evict(&mut state, 1000);
            cache.write_file(&id, c).expect("write");
            state.tick += 1;
            let tick = state.tick;
            state.files.insert(id, (1000, tick));
            state.by_use.insert(tick, id);
            state.total += 1000;
            assert!(state.total <= 3000, "{} bytes counted, bound 3000", state.total);
        }
        let on_disk: u64 = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
        assert_eq!(on_disk, 3000, "the newest three are kept");
        let newest = ChunkId::of(&chunks[9]);
        assert_eq!(cache.read_file(&newest).as_deref(), Some(&chunks[9][..]));
        assert!(cache.read_file(&ChunkId::of(&chunks[0])).is_none(), "the oldest was removed");
        // Damaged on disk: not served, removed.
        std::fs::write(dir.path().join(newest.to_string()), vec![0u8; 1000]).unwrap();
        assert!(cache.read_file(&newest).is_none());
        assert!(!dir.path().join(newest.to_string()).exists());
        // Opened again with a smaller bound: trimmed at once, oldest first.
        drop(cache);
        let again = ChunkCache::open(dir.path(), 1000).expect("cache");
        assert_eq!(again.stats().bytes, 1000);
    }
}
