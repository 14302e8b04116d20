//! The content-addressed chunk store.
//!
//! Every pre-image the journal records ends up here as chunks addressed by
//! their blake3 hash, so the same bytes are stored once across files,
//! versions and turns. The [`ChunkStore`] trait is the seam: [`PackStore`]
//! keeps chunks in a few large pack files indexed by SQLite, [`MemoryStore`]
//! serves tests, and [`FaultyStore`] wraps either to inject failures;
//! [`open`] builds any of them from an address ([`Address`]). A remote
//! backend (S3-compatible object store) would be one more file here, proved
//! by the same test kit (`conformance`, feature `test-kit`).
//!
//! [`chunker`] splits content into content-defined chunks and reassembles it.
//! The on-disk format is described in `docs/format.md`.

pub mod chunker;
pub mod faulty;
pub mod memory;
pub mod pack;

/// The test kit every backend must pass (public with the `test-kit`
/// feature, so a backend outside this crate can prove itself too).
#[cfg(any(test, feature = "test-kit"))]
pub mod conformance;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

pub use chunker::{ChunkSpan, ContentRef, read_content_at, read_content_to, store_content, store_content_added};
pub use faulty::FaultyStore;
pub use memory::MemoryStore;
pub use pack::{Compacted, PackStore, PackStoreOptions, PackUse};

/// The address of a chunk: the blake3 hash of its uncompressed bytes.
///
/// A newtype rather than a bare `[u8; 32]` so a chunk address cannot be
/// confused with a content hash or any other digest in the journal.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkId([u8; 32]);

impl ChunkId {
    /// Length of a chunk id in bytes.
    pub const LEN: usize = 32;

    /// The id of `data`, i.e. the blake3 hash of it.
    pub fn of(data: &[u8]) -> ChunkId {
        ChunkId(*blake3::hash(data).as_bytes())
    }

    /// Wraps a hash that was computed elsewhere (e.g. by a streaming hasher).
    pub fn from_bytes(bytes: [u8; 32]) -> ChunkId {
        ChunkId(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Converts a slice read from disk or a database, checking its length so a
    /// truncated BLOB is an error rather than a panic.
    pub fn from_slice(bytes: &[u8]) -> Result<ChunkId, StoreError> {
        let array: [u8; 32] = bytes.try_into().map_err(|_| StoreError::InvalidId {
            detail: format!("expected {} bytes, got {}", Self::LEN, bytes.len()),
        })?;
        Ok(ChunkId(array))
    }

    /// The id its `Display` form (64 lowercase hex digits) names; None
    /// for anything else (a remote object's name is read from outside).
    pub fn parse_hex(text: &str) -> Option<ChunkId> {
        let bytes = text.as_bytes();
        if bytes.len() != 2 * Self::LEN {
            return None;
        }
        let digit = |b: u8| match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            _ => None,
        };
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks(2).enumerate() {
            out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
        }
        Some(ChunkId(out))
    }
}

impl fmt::Display for ChunkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for ChunkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChunkId({self})")
    }
}

impl FromStr for ChunkId {
    type Err = StoreError;

    /// Parses 64 hex digits (either case), as printed by `Display`.
    fn from_str(s: &str) -> Result<ChunkId, StoreError> {
        let invalid = |detail: String| StoreError::InvalidId { detail };
        if s.len() != Self::LEN * 2 {
            return Err(invalid(format!("expected {} hex digits, got {} characters", Self::LEN * 2, s.len())));
        }
        let mut out = [0u8; 32];
        for (i, pair) in s.as_bytes().chunks_exact(2).enumerate() {
            let hex = std::str::from_utf8(pair)
                .ok()
                .and_then(|p| u8::from_str_radix(p, 16).ok())
                .ok_or_else(|| invalid(format!("not a hex digit pair at position {}", i * 2)))?;
            out[i] = hex;
        }
        Ok(ChunkId(out))
    }
}

/// Errors from a chunk store, with enough context to name what failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Stored bytes do not decode to the chunk they claim to be. Never
    /// papered over: a caller gets this error, never wrong bytes.
    #[error("chunk {chunk} is corrupt: {detail}")]
    Corrupt { chunk: ChunkId, detail: String },

    /// A record names a chunk the index does not list: the store lost it
    /// (a pack deleted or cut short, a repair that dropped it).
    #[error("chunk {chunk} is missing from the store (lost with a damaged pack; `rewindfs fsck` names what is lost)")]
    Missing { chunk: ChunkId },

    /// The io error is kept so the caller can report ENOSPC or EIO as such
    /// (see [`StoreError::raw_os_error`]).
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },

    #[error("chunk index: {context}: {source}{}", crate::sqlite::disk_full_note(source))]
    Sqlite {
        context: String,
        #[source]
        source: rusqlite::Error,
    },

    /// An earlier append failed part-way; the store refuses writes until it
    /// is reopened, which truncates the torn record.
    #[error("chunk store refuses writes after an earlier I/O failure; reopen it to recover")]
    Poisoned,

    #[error("invalid chunk id: {detail}")]
    InvalidId { detail: String },

    /// A chunk list or other encoded structure could not be decoded.
    #[error("cannot decode {what}: {detail}")]
    Decode { what: &'static str, detail: String },

    #[error("chunk of {len} bytes exceeds the limit of {limit} bytes")]
    TooLarge { len: u64, limit: u64 },

    /// The store was opened read-only (by `fsck` beside nothing else).
    #[error("chunk store {dir} is open read-only")]
    ReadOnly { dir: String },

    /// The store's filesystem has no room left but its reserve, which is
    /// kept for collection and unmount (ENOSPC).
    #[error("the filesystem of chunk store {dir} is full: its last space is kept for `rewindfs gc` and unmount")]
    ReserveKept { dir: String },

    /// A store address [`open`] cannot make a backend from.
    #[error(
        "bad chunk store address {address:?}: {why} \
         (expected memory://, pack:///absolute/dir, pack+ro:///absolute/dir or faulty+<address>)"
    )]
    BadAddress { address: String, why: String },
}

impl StoreError {
    /// The OS error number behind this error, if any, so the filesystem can
    /// answer ENOSPC or EIO instead of a generic failure.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            StoreError::Io { source, .. } => source.raw_os_error(),
            StoreError::Sqlite { source, .. } => crate::sqlite::sqlite_errno(source).map(|e| e.0),
            StoreError::ReserveKept { .. } => Some(libc::ENOSPC),
            _ => None,
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> StoreError {
        StoreError::Io { context: context.into(), source }
    }

    pub(crate) fn sqlite(context: impl Into<String>, source: rusqlite::Error) -> StoreError {
        StoreError::Sqlite { context: context.into(), source }
    }

    pub(crate) fn corrupt(chunk: ChunkId, detail: impl Into<String>) -> StoreError {
        StoreError::Corrupt { chunk, detail: detail.into() }
    }
}

impl crate::error::AsErrno for StoreError {
    /// Corrupt or missing data, and writes refused after a failure, are EIO.
    fn errno(&self) -> crate::error::Errno {
        crate::error::Errno(self.raw_os_error().unwrap_or(libc::EIO))
    }
}

/// Counters for `rewindfs stats` and for tests that check deduplication.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct StoreStats {
    /// Distinct chunks held.
    pub chunks: u64,
    /// Sum of the chunks' uncompressed lengths.
    pub raw_bytes: u64,
    /// Sum of the bytes the chunks occupy after compression (record headers
    /// not included).
    pub stored_bytes: u64,
}

/// One chunk that failed verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorruptChunk {
    pub id: ChunkId,
    pub detail: String,
    /// Where the index says its record is (pack number, offset of the
    /// record header), for backends that have packs: `fsck` names it.
    pub location: Option<(u32, u64)>,
}

/// The outcome of [`ChunkStore::verify`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Chunks read and checked.
    pub checked: u64,
    /// Bytes read to check them (as stored, i.e. compressed).
    pub bytes: u64,
    /// Chunks whose bytes are damaged or unreadable.
    pub corrupt: Vec<CorruptChunk>,
}

/// A content-addressed store of chunks.
///
/// Contract shared by every backend (checked by one conformance suite):
/// `put` is idempotent, `get` verifies the hash of what it returns, a `put`
/// that returned has survived a crash of the process, and one followed by a
/// returned `sync` has survived power loss.
pub trait ChunkStore: Send + Sync {
    /// Stores `data` and returns its id. Storing bytes already present is a
    /// success that writes nothing.
    fn put(&self, data: &[u8]) -> Result<ChunkId, StoreError>;

    /// Stores `data` as `put` does, and says whether this call added it
    /// (false: it was already there).
    fn put_new(&self, data: &[u8]) -> Result<(ChunkId, bool), StoreError> {
        let existed = self.contains(&ChunkId::of(data))?;
        Ok((self.put(data)?, !existed))
    }

    /// Takes back chunks that `put_new` added and that nothing refers to
    /// (a content stored part-way before a failure), so a refused write
    /// leaves the store as it was. The caller guarantees nobody else came
    /// to rely on them meanwhile. A backend that cannot take chunks back
    /// leaves them (unreferenced).
    fn discard(&self, _ids: &[ChunkId]) -> Result<(), StoreError> {
        Ok(())
    }

    /// Frees chunks no record needs any more (a collection): they leave
    /// the index, and a backend with packs gives their bytes back (punched
    /// out at once, the packs rewritten by compaction).
    fn release(&self, ids: &[ChunkId]) -> Result<(), StoreError> {
        self.discard(ids)
    }

    /// The bytes a chunk takes in the store (None: not there).
    fn stored_len(&self, id: &ChunkId) -> Result<Option<u64>, StoreError> {
        match self.get(id) {
            Ok(data) => Ok(Some(data.len() as u64)),
            Err(StoreError::Missing { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Returns the bytes of chunk `id`, checked against the id: damage is
    /// reported as [`StoreError::Corrupt`], never returned as data.
    fn get(&self, id: &ChunkId) -> Result<Vec<u8>, StoreError>;

    fn contains(&self, id: &ChunkId) -> Result<bool, StoreError>;

    /// Durability barrier: when it returns, every earlier `put` survives
    /// power loss.
    fn sync(&self) -> Result<(), StoreError>;

    /// The store's reclaiming side, if it has one (a backend with packs):
    /// what a collection asks for to give space back beyond releasing
    /// chunks. None for a backend that frees a chunk's room on `release`.
    fn reclaiming(&self) -> Option<&dyn Reclaiming> {
        None
    }

    fn stats(&self) -> Result<StoreStats, StoreError>;

    /// Reads every chunk and reports the damaged ones (for `fsck`).
    fn verify(&self) -> Result<VerifyReport, StoreError> {
        self.verify_with_progress(&mut |_| {})
    }

    /// As [`ChunkStore::verify`], calling `progress` with the bytes read
    /// after each chunk, so a long check can show how far it got.
    fn verify_with_progress(&self, progress: &mut dyn FnMut(u64)) -> Result<VerifyReport, StoreError>;

    /// Every chunk id in the store, in ascending order (for GC and `fsck`).
    fn list(&self) -> Result<Vec<ChunkId>, StoreError>;
}

/// What a backend whose released chunks keep taking room (in packs) adds
/// to [`ChunkStore`]: rewriting packs, the space kept for collection and
/// unmount, and giving its index's free pages back. The journal's
/// collection asks for it through [`ChunkStore::reclaiming`] and skips
/// these steps for a store without it. Checked by the extension's kit
/// (`conformance::run_reclaiming`).
pub trait Reclaiming: Send + Sync {
    /// Rewrites packs whose live records fill less than `threshold` of
    /// them, giving back at least `min_reclaim` bytes each
    /// (`pack/compact.rs`); `before_delete` gets the stored bytes before
    /// any old pack goes.
    fn compact(
        &self,
        threshold: f64,
        min_reclaim: u64,
        before_delete: &mut dyn FnMut(StoreStats) -> Result<(), StoreError>,
    ) -> Result<Compacted, StoreError>;

    /// Each pack's live and total bytes.
    fn pack_use(&self) -> Result<Vec<PackUse>, StoreError>;

    /// Gives the space kept on the store's filesystem for collection and
    /// unmount to the caller, which is one of those: at once if `now`,
    /// otherwise only when the filesystem is short of space. Content is
    /// refused until [`Reclaiming::restore_reserve`]. True if it was given.
    fn lend_reserve(&self, now: bool) -> bool;

    /// Makes the reserve again once the caller of `lend_reserve` is done
    /// (best effort: without room, content waits until there is).
    fn restore_reserve(&self);

    /// Gives the pages the index's databases no longer use back to the
    /// filesystem, and empties their logs (after a collection).
    fn shrink(&self) -> Result<(), StoreError>;
}

/// Where a backend keeps its chunks, as [`open`] reads it from an address.
///
/// | address                   | backend                                  |
/// |---------------------------|------------------------------------------|
/// | `memory://`               | a fresh, empty [`MemoryStore`]           |
/// | `pack:///absolute/dir`    | [`PackStore::open`] on `dir`             |
/// | `pack+ro:///absolute/dir` | [`PackStore::open_read_only`] on `dir`   |
/// | `faulty+<address>`        | [`FaultyStore`] (no faults) around that  |
///
/// Callers that hold a path (which need not be UTF-8) build the variant
/// directly instead of formatting an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    Memory,
    Pack { dir: PathBuf, read_only: bool },
    Faulty(Box<Address>),
}

impl Address {
    /// Reads an address; a bad one is [`StoreError::BadAddress`] saying why.
    pub fn parse(address: &str) -> Result<Address, StoreError> {
        let bad = |why: &str| StoreError::BadAddress { address: address.to_string(), why: why.to_string() };
        if let Some(inner) = address.strip_prefix("faulty+") {
            return match Address::parse(inner) {
                Ok(inner) => Ok(Address::Faulty(Box::new(inner))),
                Err(StoreError::BadAddress { why, .. }) => Err(bad(&format!("inside faulty+: {why}"))),
                Err(e) => Err(e),
            };
        }
        let (scheme, rest) = address.split_once("://").ok_or_else(|| bad("no scheme (`<scheme>://`)"))?;
        match scheme {
            "memory" if rest.is_empty() => Ok(Address::Memory),
            "memory" => Err(bad("memory:// takes no path")),
            "pack" | "pack+ro" => {
                if rest.is_empty() {
                    return Err(bad("no directory after pack://"));
                }
                if !rest.starts_with('/') {
                    return Err(bad("the directory must be absolute (pack:///dir has three slashes)"));
                }
                Ok(Address::Pack { dir: PathBuf::from(rest), read_only: scheme == "pack+ro" })
            }
            "" => Err(bad("empty scheme")),
            _ => Err(bad(&format!("unknown scheme {scheme:?}"))),
        }
    }

    /// A read-write pack store in `dir`.
    pub fn pack(dir: &Path) -> Address {
        Address::Pack { dir: dir.to_path_buf(), read_only: false }
    }

    /// A read-only pack store in `dir` (puts refused, no lock taken).
    pub fn pack_read_only(dir: &Path) -> Address {
        Address::Pack { dir: dir.to_path_buf(), read_only: true }
    }

    /// Makes the backend this address names.
    pub fn open(&self) -> Result<Arc<dyn ChunkStore>, StoreError> {
        Ok(match self {
            Address::Memory => Arc::new(MemoryStore::new()),
            Address::Pack { dir, read_only: false } => Arc::new(PackStore::open(dir)?),
            Address::Pack { dir, read_only: true } => Arc::new(PackStore::open_read_only(dir)?),
            Address::Faulty(inner) => Arc::new(FaultyStore::new(inner.open()?)),
        })
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Memory => write!(f, "memory://"),
            Address::Pack { dir, read_only } => {
                write!(f, "{}://{}", if *read_only { "pack+ro" } else { "pack" }, dir.display())
            }
            Address::Faulty(inner) => write!(f, "faulty+{inner}"),
        }
    }
}

/// Makes a backend from its address (see [`Address`] for the forms), so the
/// daemon, fsck and the test kit build every backend the same way.
pub fn open(address: &str) -> Result<Arc<dyn ChunkStore>, StoreError> {
    Address::parse(address)?.open()
}

/// A shared store is a store: every call goes to the one inside, so a
/// wrapper such as [`FaultyStore`] can hold whatever [`open`] made.
impl<T: ChunkStore + ?Sized> ChunkStore for Arc<T> {
    fn put(&self, data: &[u8]) -> Result<ChunkId, StoreError> {
        (**self).put(data)
    }
    fn put_new(&self, data: &[u8]) -> Result<(ChunkId, bool), StoreError> {
        (**self).put_new(data)
    }
    fn discard(&self, ids: &[ChunkId]) -> Result<(), StoreError> {
        (**self).discard(ids)
    }
    fn release(&self, ids: &[ChunkId]) -> Result<(), StoreError> {
        (**self).release(ids)
    }
    fn stored_len(&self, id: &ChunkId) -> Result<Option<u64>, StoreError> {
        (**self).stored_len(id)
    }
    fn get(&self, id: &ChunkId) -> Result<Vec<u8>, StoreError> {
        (**self).get(id)
    }
    fn contains(&self, id: &ChunkId) -> Result<bool, StoreError> {
        (**self).contains(id)
    }
    fn sync(&self) -> Result<(), StoreError> {
        (**self).sync()
    }
    fn reclaiming(&self) -> Option<&dyn Reclaiming> {
        (**self).reclaiming()
    }
    fn stats(&self) -> Result<StoreStats, StoreError> {
        (**self).stats()
    }
    fn verify(&self) -> Result<VerifyReport, StoreError> {
        (**self).verify()
    }
    fn verify_with_progress(&self, progress: &mut dyn FnMut(u64)) -> Result<VerifyReport, StoreError> {
        (**self).verify_with_progress(progress)
    }
    fn list(&self) -> Result<Vec<ChunkId>, StoreError> {
        (**self).list()
    }
}

/// Checks that `data` hashes to `id`; the one place every backend's `get`
/// goes through, so no path can return unverified bytes.
pub(crate) fn verified(id: &ChunkId, data: Vec<u8>) -> Result<Vec<u8>, StoreError> {
    let actual = ChunkId::of(&data);
    if actual == *id { Ok(data) } else { Err(StoreError::corrupt(*id, format!("content hashes to {actual}"))) }
}

/// Verifies every listed chunk through `get`; backends without a cheaper
/// way share this.
pub(crate) fn verify_by_get(store: &dyn ChunkStore, progress: &mut dyn FnMut(u64)) -> Result<VerifyReport, StoreError> {
    let mut report = VerifyReport::default();
    for id in store.list()? {
        report.checked += 1;
        match store.get(&id) {
            Ok(data) => {
                report.bytes += data.len() as u64;
                progress(data.len() as u64);
            }
            Err(StoreError::Corrupt { detail, .. }) => report.corrupt.push(CorruptChunk { id, detail, location: None }),
            Err(StoreError::Missing { .. }) => {
                report.corrupt.push(CorruptChunk { id, detail: "listed but not readable".to_string(), location: None })
            }
            Err(other) => return Err(other),
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each error of this module, through the one boundary ([`AsErrno`]).
    #[test]
    fn errno_mapping_table() {
        use crate::error::{AsErrno, Errno};
        let chunk = ChunkId::from_slice(&[0u8; 32]).expect("a chunk id");
        let sqlite = |code| StoreError::Sqlite {
            context: "t".into(),
            source: rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None),
        };
        let io = |n| std::io::Error::from_raw_os_error(n);
        let cases: Vec<(Box<dyn AsErrno>, i32, &str)> = vec![
            (Box::new(sqlite(8)), libc::EROFS, "chunk index SQLITE_READONLY (was EIO)"),
            (Box::new(sqlite(13)), libc::ENOSPC, "chunk index SQLITE_FULL"),
            (Box::new(StoreError::io("append", io(libc::ENOSPC))), libc::ENOSPC, "store io"),
            (Box::new(StoreError::Poisoned), libc::EIO, "store poisoned"),
            (Box::new(StoreError::corrupt(chunk, "bad")), libc::EIO, "store corrupt"),
        ];
        for (err, want, what) in cases {
            assert_eq!(err.errno(), Errno(want), "{what}");
        }
    }

    #[test]
    fn chunk_id_hex_roundtrip() {
        let id = ChunkId::of(b"hello");
        let hex = id.to_string();
        assert_eq!(hex, blake3::hash(b"hello").to_hex().as_str());
        assert_eq!(hex.parse::<ChunkId>().expect("parse own hex"), id);
        assert_eq!(hex.to_uppercase().parse::<ChunkId>().expect("parse upper hex"), id);
    }

    #[test]
    fn chunk_id_rejects_bad_hex_and_lengths() {
        assert!(matches!("abc".parse::<ChunkId>(), Err(StoreError::InvalidId { .. })));
        let bad = "g".repeat(64);
        assert!(matches!(bad.parse::<ChunkId>(), Err(StoreError::InvalidId { .. })));
        // A multi-byte character must not panic on a char boundary.
        let mut multi = "é".to_string();
        multi.push_str(&"0".repeat(62));
        assert!(multi.parse::<ChunkId>().is_err());
        assert!(ChunkId::from_slice(&[0u8; 31]).is_err());
        let id = ChunkId::of(b"x");
        assert_eq!(ChunkId::from_slice(id.as_bytes()).expect("32 bytes"), id);
    }

    #[test]
    fn raw_os_error_is_kept() {
        let e = StoreError::io("appending", std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(StoreError::Poisoned.raw_os_error(), None);
    }

    #[test]
    fn addresses_parse_or_say_why() {
        let pack = |dir: &str, read_only| Address::Pack { dir: PathBuf::from(dir), read_only };
        let good = [
            ("memory://", Address::Memory),
            ("pack:///var/store/chunks", pack("/var/store/chunks", false)),
            ("pack+ro:///var/store/chunks", pack("/var/store/chunks", true)),
            ("faulty+memory://", Address::Faulty(Box::new(Address::Memory))),
            ("faulty+pack:///s", Address::Faulty(Box::new(pack("/s", false)))),
            ("faulty+faulty+memory://", Address::Faulty(Box::new(Address::Faulty(Box::new(Address::Memory))))),
        ];
        for (text, expected) in good {
            let parsed = Address::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(parsed, expected, "{text}");
            assert_eq!(parsed.to_string(), text, "an address prints as it is written");
        }
        let bad = [
            ("", "no scheme"),
            ("memory", "no scheme"),
            ("/var/store", "no scheme"),
            ("memory://x", "takes no path"),
            ("pack://", "no directory"),
            ("pack://relative/dir", "absolute"),
            ("pack+ro://dir", "absolute"),
            ("s3://bucket", "unknown scheme"),
            ("://x", "empty scheme"),
            ("faulty+", "inside faulty+"),
            ("faulty+ftp://x", "unknown scheme"),
        ];
        for (text, why) in bad {
            match open(text) {
                Err(StoreError::BadAddress { address, why: said }) => {
                    assert_eq!(address, text);
                    assert!(said.contains(why), "{text}: {said:?} does not say {why:?}");
                }
                Err(other) => panic!("{text}: expected BadAddress, got {other}"),
                Ok(_) => panic!("{text}: a bad address opened a store"),
            }
        }
    }

    #[test]
    fn open_makes_each_backend() {
        let store = open("memory://").expect("memory");
        let id = store.put(b"x").expect("put");
        assert!(open("memory://").expect("memory").get(&id).is_err(), "memory:// is a fresh store each time");
        let dir = tempfile::tempdir().expect("tempdir");
        let address = format!("pack://{}", dir.path().display());
        let pack = open(&address).expect("pack");
        pack.put(b"kept").expect("put");
        drop(pack);
        let ro = open(&format!("pack+ro://{}", dir.path().display())).expect("pack+ro");
        assert_eq!(ro.get(&ChunkId::of(b"kept")).expect("get"), b"kept");
        assert!(matches!(ro.put(b"new"), Err(StoreError::ReadOnly { .. })));
        drop(ro);
        let faulty = open(&format!("faulty+{address}")).expect("faulty+pack");
        assert_eq!(faulty.get(&ChunkId::of(b"kept")).expect("get"), b"kept");
    }

    #[test]
    fn verified_rejects_wrong_bytes() {
        let id = ChunkId::of(b"right");
        assert!(verified(&id, b"right".to_vec()).is_ok());
        match verified(&id, b"wrong".to_vec()) {
            Err(StoreError::Corrupt { chunk, .. }) => assert_eq!(chunk, id),
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }
}
