//! The local chunk store: chunks appended to a few large pack files, with a
//! SQLite index from chunk id to location.
//!
//! Why packs rather than one file per chunk: a workspace of GBs makes
//! hundreds of thousands of 16 KiB chunks, and a file each would cost an
//! inode, a directory entry and a descriptor churn per chunk. Why every
//! record carries its own header: the index can always be rebuilt from the
//! packs, so losing or damaging `chunks.sqlite` loses no content.
//!
//! The layout is documented in `FORMAT.md` beside this file.

use std::borrow::Cow;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::ErrorKind;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rusqlite::{Connection, OptionalExtension, params};

use super::{ChunkId, ChunkStore, CorruptChunk, Reclaiming, StoreError, StoreStats, VerifyReport, verified};

/// Magic at the start of every pack file.
const PACK_MAGIC: &[u8; 8] = b"RWFSPACK";
/// Version of the pack file layout, stored after [`PACK_MAGIC`].
const PACK_VERSION: u32 = 1;
/// Length of the pack file header: magic, version, four reserved bytes.
pub const PACK_HEADER_LEN: u64 = 16;

/// Magic at the start of every chunk record.
const RECORD_MAGIC: &[u8; 4] = b"RWCK";
/// Length of a chunk record header; the stored bytes follow it.
pub const RECORD_HEADER_LEN: u64 = 64;

/// Largest chunk accepted. The chunker makes chunks of at most 64 KiB; the
/// limit only stops a damaged header or index row from making us allocate
/// absurd buffers.
pub const MAX_CHUNK_LEN: u64 = 1 << 30;

/// zstd level: level 3 is zstd's default, fast enough to keep up with
/// writes while still halving typical source text.
const ZSTD_LEVEL: i32 = 3;

/// Version of the SQLite index schema, kept in `PRAGMA user_version`.
const SCHEMA_VERSION: i64 = 3;

/// How the stored bytes of a record encode the chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Codec {
    Raw = 0,
    Zstd = 1,
}

impl Codec {
    fn from_u8(byte: u8) -> Option<Codec> {
        match byte {
            0 => Some(Codec::Raw),
            1 => Some(Codec::Zstd),
            _ => None,
        }
    }
}

/// Tunables, mostly so tests can roll packs without writing 256 MiB.
#[derive(Debug, Clone)]
pub struct PackStoreOptions {
    /// A pack that would grow past this size is closed and a new one begun
    /// (a single larger chunk still gets a pack of its own).
    pub pack_size_limit: u64,
    /// At most this many pack files are held open for reading; the daemon
    /// shares a hard limit of open files with everything else it does.
    pub max_open_packs: usize,
}

impl Default for PackStoreOptions {
    fn default() -> Self {
        PackStoreOptions { pack_size_limit: 256 << 20, max_open_packs: 8 }
    }
}

/// The self-describing header in front of every chunk in a pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RecordHeader {
    id: ChunkId,
    codec: Codec,
    raw_len: u64,
    stored_len: u64,
}

impl RecordHeader {
    fn encode(&self) -> [u8; RECORD_HEADER_LEN as usize] {
        let mut out = [0u8; RECORD_HEADER_LEN as usize];
        out[0..4].copy_from_slice(RECORD_MAGIC);
        out[4] = self.codec as u8;
        out[8..16].copy_from_slice(&self.raw_len.to_le_bytes());
        out[16..24].copy_from_slice(&self.stored_len.to_le_bytes());
        out[24..56].copy_from_slice(self.id.as_bytes());
        let check = header_checksum(&out[..56]);
        out[56..64].copy_from_slice(&check);
        out
    }

    /// Parses and checks a header; the error says what is wrong with it.
    fn decode(bytes: &[u8]) -> Result<RecordHeader, String> {
        if bytes.len() < RECORD_HEADER_LEN as usize {
            return Err(format!("header is {} bytes, expected {RECORD_HEADER_LEN}", bytes.len()));
        }
        if &bytes[0..4] != RECORD_MAGIC {
            return Err("bad record magic".to_string());
        }
        if bytes[56..64] != header_checksum(&bytes[..56]) {
            return Err("record header checksum mismatch".to_string());
        }
        let codec = Codec::from_u8(bytes[4]).ok_or_else(|| format!("unknown codec {}", bytes[4]))?;
        let raw_len = le_u64(&bytes[8..16]);
        let stored_len = le_u64(&bytes[16..24]);
        let id = ChunkId::from_slice(&bytes[24..56]).map_err(|e| e.to_string())?;
        let header = RecordHeader { id, codec, raw_len, stored_len };
        header.check_lengths()?;
        Ok(header)
    }

    /// Lengths that no writer produces mean damage, and must be refused
    /// before they size an allocation.
    fn check_lengths(&self) -> Result<(), String> {
        let consistent = match self.codec {
            Codec::Raw => self.stored_len == self.raw_len,
            Codec::Zstd => self.stored_len < self.raw_len,
        };
        if !consistent || self.raw_len > MAX_CHUNK_LEN {
            return Err(format!(
                "impossible lengths for codec {:?}: raw {} stored {}",
                self.codec, self.raw_len, self.stored_len
            ));
        }
        Ok(())
    }

    fn record_len(&self) -> u64 {
        RECORD_HEADER_LEN + self.stored_len
    }

    /// Decodes the stored bytes that follow this header and checks them
    /// against the id.
    fn decode_payload(&self, payload: &[u8]) -> Result<Vec<u8>, StoreError> {
        let data = match self.codec {
            Codec::Raw => payload.to_vec(),
            Codec::Zstd => with_zstd(|z| z.decompressor.decompress(payload, self.raw_len as usize))
                .map_err(|e| StoreError::corrupt(self.id, format!("zstd decompression failed: {e}")))?,
        };
        if data.len() as u64 != self.raw_len {
            return Err(StoreError::corrupt(
                self.id,
                format!("decoded {} bytes, header says {}", data.len(), self.raw_len),
            ));
        }
        verified(&self.id, data)
    }
}

fn header_checksum(bytes: &[u8]) -> [u8; 8] {
    let hash = blake3::hash(bytes);
    let mut out = [0u8; 8];
    out.copy_from_slice(&hash.as_bytes()[..8]);
    out
}

fn le_u64(bytes: &[u8]) -> u64 {
    let mut array = [0u8; 8];
    array.copy_from_slice(&bytes[..8]);
    u64::from_le_bytes(array)
}

fn pack_header() -> [u8; PACK_HEADER_LEN as usize] {
    let mut out = [0u8; PACK_HEADER_LEN as usize];
    out[0..8].copy_from_slice(PACK_MAGIC);
    out[8..12].copy_from_slice(&PACK_VERSION.to_le_bytes());
    out
}

/// A thread's zstd contexts, made once: making one per chunk cost a tenth
/// of a rewind's check of 2,000 small files.
struct Zstd {
    compressor: zstd::bulk::Compressor<'static>,
    decompressor: zstd::bulk::Decompressor<'static>,
}

thread_local! {
    static ZSTD: std::cell::RefCell<Option<Zstd>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with this thread's zstd contexts (made at the first call).
fn with_zstd<T>(f: impl FnOnce(&mut Zstd) -> std::io::Result<T>) -> std::io::Result<T> {
    ZSTD.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(Zstd {
                compressor: zstd::bulk::Compressor::new(ZSTD_LEVEL)?,
                decompressor: zstd::bulk::Decompressor::new()?,
            });
        }
        f(slot.as_mut().expect("made above"))
    })
}

/// Compresses when it saves at least an eighth: below that the CPU spent
/// decompressing on every read buys too little disk.
fn encode_chunk(data: &[u8]) -> (Codec, Cow<'_, [u8]>) {
    if data.len() >= 64 {
        match with_zstd(|z| z.compressor.compress(data)) {
            Ok(compressed) if compressed.len() <= data.len() - data.len() / 8 => {
                return (Codec::Zstd, Cow::Owned(compressed));
            }
            Ok(_) => {}
            Err(e) => log::debug!("zstd failed to compress a chunk of {} bytes, storing it raw: {e}", data.len()),
        }
    }
    (Codec::Raw, Cow::Borrowed(data))
}

/// Where the index says a chunk's record is.
#[derive(Debug, Clone, Copy)]
struct Location {
    pack: u32,
    offset: u64,
    stored_len: u64,
    raw_len: u64,
    codec: u8,
}

fn i64_of(value: u64) -> i64 {
    // Offsets and lengths are bounded by file sizes, far below i64::MAX.
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn u64_of(value: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(value)
        .map_err(|_| StoreError::Decode { what: "chunk index row", detail: format!("negative {what} {value}") })
}

type RawLocation = (i64, i64, i64, i64, i64);

impl Location {
    fn from_raw(raw: RawLocation) -> Result<Location, StoreError> {
        let (pack, offset, stored_len, raw_len, codec) = raw;
        Ok(Location {
            pack: u32::try_from(pack).map_err(|_| StoreError::Decode {
                what: "chunk index row",
                detail: format!("pack number {pack} out of range"),
            })?,
            offset: u64_of(offset, "offset")?,
            stored_len: u64_of(stored_len, "stored length")?,
            raw_len: u64_of(raw_len, "raw length")?,
            codec: u8::try_from(codec).unwrap_or(u8::MAX),
        })
    }
}

/// Opens the index for reading only: no schema change, no recovery, so a
/// check can run beside the daemon that owns the store, or on a store it
/// must not alter.
fn open_index_read_only(path: &Path) -> Result<Connection, StoreError> {
    use rusqlite::OpenFlags;
    let context = || format!("opening chunk index {} read-only", path.display());
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| StoreError::sqlite(context(), e))?;
    conn.busy_timeout(std::time::Duration::from_secs(10)).map_err(|e| StoreError::sqlite(context(), e))?;
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(|e| StoreError::sqlite(context(), e))?;
    // Earlier versions differ only by tables the read-only paths never read.
    if !(1..=SCHEMA_VERSION).contains(&version) {
        return Err(StoreError::Decode {
            what: "chunk index",
            detail: format!("schema version {version}, this build reads 1 to {SCHEMA_VERSION}"),
        });
    }
    Ok(conn)
}

fn open_index(path: &Path) -> Result<Connection, StoreError> {
    let context = || format!("opening chunk index {}", path.display());
    let conn = Connection::open(path).map_err(|e| StoreError::sqlite(context(), e))?;
    conn.busy_timeout(std::time::Duration::from_secs(10)).map_err(|e| StoreError::sqlite(context(), e))?;
    // WAL lets gets read while a put commits; NORMAL syncs only at
    // checkpoints, which `sync` forces: a put survives a crash of the process
    // at once and power loss after `sync`.
    conn.pragma_update(None, "journal_mode", "WAL").map_err(|e| StoreError::sqlite(context(), e))?;
    conn.pragma_update(None, "synchronous", "NORMAL").map_err(|e| StoreError::sqlite(context(), e))?;
    Ok(conn)
}

/// Brings the index schema from whatever version is on disk to
/// [`SCHEMA_VERSION`], one step at a time.
fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let sql_err = |e| StoreError::sqlite("migrating the chunk index schema", e);
    let tx = conn.transaction().map_err(sql_err)?;
    let version: i64 = tx.pragma_query_value(None, "user_version", |row| row.get(0)).map_err(sql_err)?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::Decode {
            what: "chunk index",
            detail: format!("schema version {version} is newer than this build ({SCHEMA_VERSION})"),
        });
    }
    if version < 1 {
        log::info!("Creating chunk index schema version 1.");
        tx.execute_batch(
            "CREATE TABLE chunks (
                 id BLOB PRIMARY KEY NOT NULL,
                 pack INTEGER NOT NULL,
                 offset INTEGER NOT NULL,
                 stored_len INTEGER NOT NULL,
                 raw_len INTEGER NOT NULL,
                 codec INTEGER NOT NULL
             ) WITHOUT ROWID;
             CREATE INDEX chunks_by_pack ON chunks (pack, offset);",
        )
        .map_err(sql_err)?;
    }
    if version < 2 {
        // How far each pack's records were released by a collection: the
        // recovery at open indexes records past the indexed end of a pack
        // (appended, not yet indexed, before a crash), and must not bring
        // back released chunks that happened to be the last ones.
        tx.execute_batch("CREATE TABLE IF NOT EXISTS released_ends (pack INTEGER PRIMARY KEY, end INTEGER NOT NULL);")
            .map_err(sql_err)?;
    }
    if version < 3 {
        // The packs that had chunks released since compaction last measured
        // them: it measures those, not every pack. Every pack holding a
        // chunk or released to some end is measured once more.
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS released_packs (pack INTEGER PRIMARY KEY, releases INTEGER NOT NULL);
             INSERT OR IGNORE INTO released_packs SELECT DISTINCT pack, 1 FROM chunks;
             INSERT OR IGNORE INTO released_packs SELECT pack, 1 FROM released_ends;",
        )
        .map_err(sql_err)?;
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION).map_err(sql_err)?;
    tx.commit().map_err(sql_err)
}

fn pack_file_name(number: u32) -> String {
    format!("{number:06}.pack")
}

fn parse_pack_file_name(name: &str) -> Option<u32> {
    let stem = name.strip_suffix(".pack")?;
    if stem.len() < 6 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// A bounded set of read-only pack descriptors, least recently used evicted.
#[derive(Debug)]
struct PackFiles {
    dir: PathBuf,
    limit: usize,
    open: Mutex<Vec<(u32, Arc<File>)>>,
}

impl PackFiles {
    fn get(&self, number: u32) -> std::io::Result<Arc<File>> {
        let mut open = crate::poison::lock(&self.open, "the open pack files");
        if let Some(pos) = open.iter().position(|(n, _)| *n == number) {
            let entry = open.remove(pos);
            let file = Arc::clone(&entry.1);
            open.push(entry);
            return Ok(file);
        }
        let file = Arc::new(File::open(self.dir.join(pack_file_name(number)))?);
        if open.len() >= self.limit.max(1) {
            open.remove(0);
        }
        open.push((number, Arc::clone(&file)));
        Ok(file)
    }
}

/// The pack being appended to.
#[derive(Debug)]
struct OpenPack {
    number: u32,
    path: PathBuf,
    file: File,
    end: u64,
}

/// Everything an append touches, behind one mutex so appends are ordered.
#[derive(Debug)]
struct Writer {
    conn: Connection,
    current: Option<OpenPack>,
    next_number: u32,
    poisoned: bool,
    /// The current pack has data not yet fsynced.
    pack_unsynced: bool,
    /// A pack file was created since the directory was last fsynced.
    dir_unsynced: bool,
    /// Running totals of the index, counted once on first use and kept up
    /// to date by every append: every seal asks for them, and counting a
    /// store of millions of chunks each time would make sealing grow with
    /// the store.
    totals: Option<StoreStats>,
}

/// Chunks appended to pack files under `dir/packs`, indexed in
/// `dir/chunks.sqlite`. Safe to share between threads.
///
/// Open descriptors stay bounded whatever the store's size, because the
/// daemon shares a hard limit of open files: the lock file, the pack being
/// appended to, at most `max_open_packs` packs for reading, and two SQLite
/// connections (database, WAL and shared-memory file each).
#[derive(Debug)]
pub struct PackStore {
    dir: PathBuf,
    options: PackStoreOptions,
    writer: Mutex<Writer>,
    /// A second connection so lookups do not wait behind appends.
    reader: Mutex<Connection>,
    packs: PackFiles,
    /// Opened by [`PackStore::open_read_only`]: puts are refused.
    read_only: bool,
    /// Whether the space kept for collection and unmount is there.
    reserve: Mutex<Reserve>,
    /// Held for the store's lifetime: two processes appending to one pack
    /// would interleave records. A read-only store takes no lock.
    _lock: Option<File>,
}

/// A file of allocated space beside the packs, for what must work on a
/// full filesystem and nothing else: taking back the chunks of a refused
/// content (the index's deletions go through SQLite's log), the owner's
/// collection, and the last sync of an unmount. Content is stored only
/// while the reserve is whole, so the space that comes back refills it
/// first.
const RESERVE_FILE: &str = "reserve";
const RESERVE_LEN: u64 = 1 << 20;

/// Below this much free space on the store's filesystem a collection gives
/// up the reserve before it starts: its first steps write to the
/// databases' logs before anything is freed.
const RESERVE_LOW_WATER: u64 = 2 * RESERVE_LEN;

/// Whether the reserve is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reserve {
    Kept,
    /// No room to make it: content waits until there is.
    Missing,
    /// Given up to a collection or an unmount, which makes it again.
    Lent,
    /// The filesystem cannot allocate ahead (no `fallocate`): no reserve.
    Unsupported,
}

/// Makes the reserve if it is missing, when there is room (best effort).
fn keep_reserve(dir: &Path) -> Reserve {
    let path = dir.join(RESERVE_FILE);
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == RESERVE_LEN) {
        return Reserve::Kept;
    }
    let made = OpenOptions::new().write(true).create(true).truncate(true).mode(0o644).open(&path).and_then(|f| {
        rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::empty(), 0, RESERVE_LEN).map_err(std::io::Error::from)
    });
    match made {
        Ok(()) => Reserve::Kept,
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            log::debug!("There is no room for the store's reserve {} yet: {e}.", path.display());
            match e.raw_os_error() {
                Some(libc::EOPNOTSUPP) => Reserve::Unsupported,
                _ => Reserve::Missing,
            }
        }
    }
}

/// Free bytes on the filesystem of `dir` (None: it cannot be asked).
fn free_bytes(dir: &Path) -> Option<u64> {
    rustix::fs::statvfs(dir).ok().map(|s| s.f_bavail.saturating_mul(s.f_frsize))
}

impl PackStore {
    /// Opens (creating if needed) the store in `dir` with default options.
    pub fn open(dir: &Path) -> Result<PackStore, StoreError> {
        PackStore::open_with(dir, PackStoreOptions::default())
    }

    /// Opens the store, recovering from a crash: records appended but not
    /// indexed are indexed, a torn record at the end of the newest pack is
    /// cut off, and index rows pointing past the end of a pack (lost to power
    /// loss before `sync`) are dropped.
    pub fn open_with(dir: &Path, options: PackStoreOptions) -> Result<PackStore, StoreError> {
        let packs_dir = dir.join("packs");
        crate::store_dir::create_private_dir(&packs_dir)
            .map_err(|e| StoreError::io(format!("creating chunk store directory {}", packs_dir.display()), e))?;
        let lock = lock_store(dir)?;
        let index_path = dir.join("chunks.sqlite");
        let mut conn = open_index(&index_path)?;
        migrate(&mut conn)?;
        let (current, next_number) = recover(&mut conn, &packs_dir)?;
        let reader = open_index(&index_path)?;
        log::info!(
            "Opened chunk store {} (appending to {}).",
            dir.display(),
            current.as_ref().map_or_else(|| "a new pack".to_string(), |p| p.path.display().to_string())
        );
        let reserve = keep_reserve(dir);
        Ok(PackStore {
            dir: dir.to_path_buf(),
            packs: PackFiles { dir: packs_dir, limit: options.max_open_packs, open: Mutex::new(Vec::new()) },
            options,
            writer: Mutex::new(Writer {
                conn,
                current,
                next_number,
                poisoned: false,
                pack_unsynced: true,
                dir_unsynced: true,
                totals: None,
            }),
            reader: Mutex::new(reader),
            read_only: false,
            reserve: Mutex::new(reserve),
            _lock: Some(lock),
        })
    }

    fn reserve_path(&self) -> PathBuf {
        self.dir.join(RESERVE_FILE)
    }

    fn reserve(&self) -> MutexGuard<'_, Reserve> {
        crate::poison::lock(&self.reserve, "the store's reserve")
    }

    /// Refuses content while the reserve is not whole: the space that comes
    /// back on a full filesystem goes to the reserve first.
    fn check_reserve(&self) -> Result<(), StoreError> {
        let mut reserve = self.reserve();
        if *reserve == Reserve::Missing {
            *reserve = keep_reserve(&self.dir);
        }
        match *reserve {
            Reserve::Kept | Reserve::Unsupported => Ok(()),
            Reserve::Missing | Reserve::Lent => Err(StoreError::ReserveKept { dir: self.dir.display().to_string() }),
        }
    }

    /// Gives back to the filesystem the blocks of records no index row
    /// points at any more (released: their pack ends are in
    /// `released_ends`, so recovery never scans them), so that a collection
    /// frees space without first needing room to compact. The pack keeps
    /// its length; compaction rewrites it later. Best effort: a filesystem
    /// without hole punching keeps the bytes until compaction.
    fn punch(&self, released: &[(ChunkId, Location)]) {
        use rustix::fs::FallocateFlags;
        let mut open: Option<(u32, Option<File>)> = None;
        for (_, loc) in released {
            if open.as_ref().is_none_or(|(n, _)| *n != loc.pack) {
                let path = self.packs.dir.join(pack_file_name(loc.pack));
                open = Some((loc.pack, OpenOptions::new().write(true).open(&path).ok()));
            }
            let Some((_, Some(file))) = &open else { continue };
            let flags = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
            if let Err(e) = rustix::fs::fallocate(file, flags, loc.offset, RECORD_HEADER_LEN + loc.stored_len) {
                log::debug!("Cannot punch the released records out of pack {} ({e}); compaction frees them.", loc.pack);
                return;
            }
        }
    }

    /// Opens an existing store for reading only: no lock, no recovery, no
    /// write of any kind, so `fsck` can check a store as it is on disk (the
    /// recovery of [`PackStore::open`] would drop index rows past the end
    /// of a truncated pack, hiding the damage it is asked to find).
    pub fn open_read_only(dir: &Path) -> Result<PackStore, StoreError> {
        let index_path = dir.join("chunks.sqlite");
        if !index_path.exists() {
            return Err(StoreError::io(
                format!("no chunk index at {} (the next mount rebuilds it from the packs)", index_path.display()),
                std::io::Error::from(ErrorKind::NotFound),
            ));
        }
        let conn = open_index_read_only(&index_path)?;
        let reader = open_index_read_only(&index_path)?;
        let options = PackStoreOptions::default();
        Ok(PackStore {
            dir: dir.to_path_buf(),
            packs: PackFiles { dir: dir.join("packs"), limit: options.max_open_packs, open: Mutex::new(Vec::new()) },
            options,
            writer: Mutex::new(Writer {
                conn,
                current: None,
                next_number: 0,
                poisoned: true,
                pack_unsynced: false,
                dir_unsynced: false,
                totals: None,
            }),
            reader: Mutex::new(reader),
            read_only: true,
            reserve: Mutex::new(Reserve::Unsupported),
            _lock: None,
        })
    }

    /// Removes the index rows of `ids` (chunks found damaged), so the next
    /// put of the same bytes stores a good copy instead of deduplicating
    /// against the damaged one. The damaged records stay in their packs;
    /// the recovery at open never indexes them again (it checks every
    /// record it indexes). Returns how many rows went.
    pub fn forget(&self, ids: &[ChunkId]) -> Result<usize, StoreError> {
        if self.read_only {
            return Err(StoreError::ReadOnly { dir: self.dir.display().to_string() });
        }
        let mut writer = self.writer()?;
        let sql_err = |e| StoreError::sqlite("removing damaged chunks from the index", e);
        let tx = writer.conn.transaction().map_err(sql_err)?;
        let mut removed = 0;
        for id in ids {
            removed += tx.execute("DELETE FROM chunks WHERE id = ?1", [id.as_bytes().as_slice()]).map_err(sql_err)?;
        }
        tx.commit().map_err(sql_err)?;
        writer.totals = None;
        Ok(removed)
    }

    /// Unindexes each chunk; with `cut`, cuts the pack back while its last
    /// record is one of them (newest first): the space comes back whenever
    /// the chunks were the last appended, which they are unless another
    /// writer appended in between (then their bytes stay, unreferenced).
    fn unindex(&self, ids: &[ChunkId], cut: bool) -> Result<(), StoreError> {
        if self.read_only || ids.is_empty() {
            return Ok(());
        }
        let mut writer = self.writer()?;
        // The index rows go in one transaction, before any pack byte: a
        // store that just ran out of space has room for one transaction's
        // few pages, not for a commit per chunk; and an index row must never
        // point past the end of a pack.
        let mut found = Vec::new();
        for id in ids.iter().rev() {
            if let Some(loc) = lookup(&writer.conn, id)? {
                found.push((*id, loc));
            }
        }
        let unindex = |conn: &Connection| {
            let tx = conn.unchecked_transaction()?;
            for (id, loc) in &found {
                tx.execute("DELETE FROM chunks WHERE id = ?1", params![id.as_bytes().as_slice()])?;
                // Its pack holds dead bytes now (unless cut back): compaction measures it.
                tx.execute(
                    "INSERT INTO released_packs(pack, releases) VALUES (?1, 1) \
                     ON CONFLICT(pack) DO UPDATE SET releases = releases + 1",
                    [loc.pack],
                )?;
                if !cut {
                    tx.execute(
                        "INSERT INTO released_ends(pack, end) VALUES (?1, ?2) \
                         ON CONFLICT(pack) DO UPDATE SET end = MAX(end, excluded.end)",
                        params![loc.pack, i64_of(loc.offset + RECORD_HEADER_LEN + loc.stored_len)],
                    )?;
                }
            }
            tx.commit()
        };
        if let Err(e) = unindex(&writer.conn) {
            // Out of space even for that: the reserve kept for this moment
            // makes the room.
            log::warn!("Cannot unindex {} chunks ({e}); using the store's reserve.", found.len());
            let mut reserve = self.reserve();
            if *reserve == Reserve::Kept {
                *reserve = Reserve::Missing;
            }
            let _ = std::fs::remove_file(self.reserve_path());
            drop(reserve);
            unindex(&writer.conn).map_err(|e| StoreError::sqlite(format!("unindexing {} chunks", found.len()), e))?;
        }
        if !cut {
            self.punch(&found);
        }
        let mut freed = 0u64;
        for (_, loc) in found {
            if let Some(t) = writer.totals.as_mut() {
                t.chunks = t.chunks.saturating_sub(1);
                t.raw_bytes = t.raw_bytes.saturating_sub(loc.raw_len);
                t.stored_bytes = t.stored_bytes.saturating_sub(loc.stored_len);
            }
            if cut
                && let Some(pack) = writer.current.as_mut()
                && pack.number == loc.pack
                && loc.offset + RECORD_HEADER_LEN + loc.stored_len == pack.end
            {
                pack.file.set_len(loc.offset).map_err(|e| {
                    StoreError::io(format!("cutting pack {} back to {}", pack.path.display(), loc.offset), e)
                })?;
                pack.end = loc.offset;
                freed += RECORD_HEADER_LEN + loc.stored_len;
            }
        }
        if cut {
            log::info!("Took back {} chunks of a content stored part-way ({freed} bytes of pack freed).", ids.len());
        } else {
            log::info!("Released {} chunks no kept checkpoint needs.", ids.len());
        }
        let mut reserve = self.reserve();
        if *reserve == Reserve::Missing {
            *reserve = keep_reserve(&self.dir);
        }
        Ok(())
    }

    /// The directory the store lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Paths of the pack files, oldest first (for tests and `fsck`).
    pub fn pack_paths(&self) -> Result<Vec<PathBuf>, StoreError> {
        Ok(list_packs(&self.packs.dir)?.into_iter().map(|n| self.packs.dir.join(pack_file_name(n))).collect())
    }

    /// A panic while holding the writer may have left an append half done;
    /// treat it like an I/O failure.
    fn writer(&self) -> Result<MutexGuard<'_, Writer>, StoreError> {
        self.writer.lock().map_err(|_| StoreError::Poisoned)
    }

    fn reader(&self) -> MutexGuard<'_, Connection> {
        crate::poison::lock(&self.reader, "the chunk index reader")
    }

    fn lookup(&self, id: &ChunkId) -> Result<Option<Location>, StoreError> {
        lookup(&self.reader(), id)
    }

    /// Reads and checks the record at `loc`, which the index says holds `id`.
    fn read_record(&self, id: &ChunkId, loc: &Location) -> Result<Vec<u8>, StoreError> {
        if loc.stored_len > MAX_CHUNK_LEN {
            return Err(StoreError::corrupt(*id, format!("index gives stored length {}", loc.stored_len)));
        }
        let path = || self.packs.dir.join(pack_file_name(loc.pack));
        let file = self.packs.get(loc.pack).map_err(|e| match e.kind() {
            ErrorKind::NotFound => StoreError::corrupt(*id, format!("pack {} is missing", path().display())),
            _ => StoreError::io(format!("opening pack {} to read chunk {id}", path().display()), e),
        })?;
        let mut buf = vec![0u8; (RECORD_HEADER_LEN + loc.stored_len) as usize];
        file.read_exact_at(&mut buf, loc.offset).map_err(|e| match e.kind() {
            ErrorKind::UnexpectedEof => StoreError::corrupt(
                *id,
                format!("record at {}:{} runs past the end of the pack", path().display(), loc.offset),
            ),
            _ => StoreError::io(format!("reading chunk {id} from {}:{}", path().display(), loc.offset), e),
        })?;
        let header = RecordHeader::decode(&buf[..RECORD_HEADER_LEN as usize])
            .map_err(|detail| StoreError::corrupt(*id, format!("{detail} at {}:{}", path().display(), loc.offset)))?;
        if header.id != *id
            || header.stored_len != loc.stored_len
            || header.raw_len != loc.raw_len
            || header.codec as u8 != loc.codec
        {
            return Err(StoreError::corrupt(
                *id,
                format!("record at {}:{} does not match the index", path().display(), loc.offset),
            ));
        }
        header.decode_payload(&buf[RECORD_HEADER_LEN as usize..])
    }
}

fn lock_store(dir: &Path) -> Result<File, StoreError> {
    let path = dir.join("lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o644)
        .open(&path)
        .map_err(|e| StoreError::io(format!("opening lock file {}", path.display()), e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(StoreError::io(
            format!("chunk store {} is in use by another process", dir.display()),
            std::io::Error::from(ErrorKind::WouldBlock),
        )),
        Err(TryLockError::Error(e)) => Err(StoreError::io(format!("locking {}", path.display()), e)),
    }
}

fn lookup(conn: &Connection, id: &ChunkId) -> Result<Option<Location>, StoreError> {
    let raw: Option<RawLocation> = conn
        .prepare_cached("SELECT pack, offset, stored_len, raw_len, codec FROM chunks WHERE id = ?1")
        .and_then(|mut stmt| {
            stmt.query_row([id.as_bytes().as_slice()], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
                .optional()
        })
        .map_err(|e| StoreError::sqlite(format!("looking up chunk {id}"), e))?;
    raw.map(Location::from_raw).transpose()
}

/// How an append failed: cut back cleanly, or leaving a torn pack.
enum AppendError {
    RolledBack(StoreError),
    Torn(StoreError),
}

impl AppendError {
    fn into_error(self) -> StoreError {
        match self {
            AppendError::RolledBack(e) | AppendError::Torn(e) => e,
        }
    }
}

fn insert_location(conn: &Connection, id: &ChunkId, loc: &Location) -> Result<(), rusqlite::Error> {
    write_location(conn, "INSERT OR IGNORE", id, loc)
}

/// Indexes `id` at `loc` (`verb`: `INSERT OR IGNORE` keeps a row already
/// there, `INSERT OR REPLACE` moves it).
fn write_location(conn: &Connection, verb: &str, id: &ChunkId, loc: &Location) -> Result<(), rusqlite::Error> {
    conn.prepare_cached(&format!(
        "{verb} INTO chunks (id, pack, offset, stored_len, raw_len, codec) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
    ))?
    .execute(params![
        id.as_bytes().as_slice(),
        loc.pack,
        i64_of(loc.offset),
        i64_of(loc.stored_len),
        i64_of(loc.raw_len),
        loc.codec
    ])?;
    Ok(())
}

fn list_packs(packs_dir: &Path) -> Result<Vec<u32>, StoreError> {
    let context = || format!("listing packs in {}", packs_dir.display());
    let mut numbers = Vec::new();
    for entry in std::fs::read_dir(packs_dir).map_err(|e| StoreError::io(context(), e))? {
        let entry = entry.map_err(|e| StoreError::io(context(), e))?;
        if let Some(number) = entry.file_name().to_str().and_then(parse_pack_file_name) {
            numbers.push(number);
        }
    }
    numbers.sort_unstable();
    Ok(numbers)
}

/// What scanning part of a pack found.
#[derive(Debug, Default)]
struct Scan {
    records: Vec<(u64, RecordHeader)>,
    /// Where the last complete, valid record ends.
    valid_end: u64,
    /// Start of trailing bytes that hold no valid record (a torn append).
    torn_from: Option<u64>,
    /// Damaged regions in the middle, skipped over.
    skipped: Vec<(u64, u64)>,
}

/// Reads the record at `offset` and checks it completely (header, length,
/// hash of the decoded bytes). `None` if it is torn or damaged.
fn read_valid_record(file: &File, offset: u64, len: u64) -> Result<Option<RecordHeader>, std::io::Error> {
    if offset + RECORD_HEADER_LEN > len {
        return Ok(None);
    }
    let mut head = [0u8; RECORD_HEADER_LEN as usize];
    file.read_exact_at(&mut head, offset)?;
    let Ok(header) = RecordHeader::decode(&head) else {
        return Ok(None);
    };
    if offset + header.record_len() > len {
        return Ok(None);
    }
    let mut payload = vec![0u8; header.stored_len as usize];
    file.read_exact_at(&mut payload, offset + RECORD_HEADER_LEN)?;
    Ok(header.decode_payload(&payload).ok().map(|_| header))
}

/// Looks for the next valid record after damage at `from`, so one bad
/// record in the middle of a pack does not hide the ones after it.
fn resync(file: &File, from: u64, len: u64) -> Result<Option<u64>, std::io::Error> {
    let mut rest = vec![0u8; (len - from) as usize];
    file.read_exact_at(&mut rest, from)?;
    let mut pos = 1;
    while let Some(found) = rest[pos..].windows(RECORD_MAGIC.len()).position(|w| w == RECORD_MAGIC) {
        let candidate = from + (pos + found) as u64;
        if read_valid_record(file, candidate, len)?.is_some() {
            return Ok(Some(candidate));
        }
        pos += found + 1;
    }
    Ok(None)
}

fn scan_pack(file: &File, start: u64, len: u64) -> Result<Scan, std::io::Error> {
    let mut scan = Scan { valid_end: start, ..Scan::default() };
    let mut offset = start;
    while offset < len {
        if let Some(header) = read_valid_record(file, offset, len)? {
            scan.records.push((offset, header));
            offset += header.record_len();
            scan.valid_end = offset;
            continue;
        }
        match resync(file, offset, len)? {
            Some(next) => {
                scan.skipped.push((offset, next));
                offset = next;
            }
            None => {
                scan.torn_from = Some(offset);
                break;
            }
        }
    }
    Ok(scan)
}

/// Reconciles the index with the packs; returns the pack to append to (if
/// any is usable) and the number for the next new pack.
fn recover(conn: &mut Connection, packs_dir: &Path) -> Result<(Option<OpenPack>, u32), StoreError> {
    let numbers = list_packs(packs_dir)?;
    let sql_err = |e| StoreError::sqlite("recovering the chunk index from the packs", e);
    // A compacted pack's number is never used again: its `released_ends`
    // row would hide the new pack's first records from recovery.
    let released_max: Option<u32> =
        conn.query_row("SELECT MAX(pack) FROM released_ends", [], |r| r.get(0)).map_err(sql_err)?;
    let next_number = numbers.last().copied().max(released_max).map_or(1, |n| n + 1);
    let tx = conn.transaction().map_err(sql_err)?;
    let mut current = None;
    for (i, &number) in numbers.iter().enumerate() {
        let newest = i + 1 == numbers.len();
        let path = packs_dir.join(pack_file_name(number));
        if let Some(open) = recover_pack(&tx, number, &path, newest)? {
            current = Some(open);
        }
    }
    tx.commit().map_err(sql_err)?;
    Ok((current, next_number))
}

/// Recovers one pack; returns it open for appending if it is the newest
/// and healthy enough to append to.
fn recover_pack(
    tx: &rusqlite::Transaction<'_>,
    number: u32,
    path: &Path,
    newest: bool,
) -> Result<Option<OpenPack>, StoreError> {
    let io_err = |what: &str, e| StoreError::io(format!("{what} pack {}", path.display()), e);
    let sql_err = |e| StoreError::sqlite(format!("recovering pack {}", path.display()), e);
    let file = OpenOptions::new().read(true).write(newest).open(path).map_err(|e| io_err("opening", e))?;
    let mut len = file.metadata().map_err(|e| io_err("reading the size of", e))?.len();

    let mut header = [0u8; PACK_HEADER_LEN as usize];
    let header_ok = len >= PACK_HEADER_LEN && file.read_exact_at(&mut header, 0).is_ok() && header == pack_header();
    if !header_ok {
        if newest && len < PACK_HEADER_LEN {
            // Crash while the pack was being created: nothing else was in it.
            log::warn!("Pack {} has a torn header; rewriting it.", path.display());
            file.set_len(0).map_err(|e| io_err("truncating", e))?;
            file.write_all_at(&pack_header(), 0).map_err(|e| io_err("writing the header of", e))?;
            len = PACK_HEADER_LEN;
        } else {
            log::error!("Pack {} has no valid header; its chunks are not indexed.", path.display());
            return Ok(None);
        }
    }

    let indexed_end = |tx: &rusqlite::Transaction<'_>| -> Result<u64, StoreError> {
        let end: Option<i64> = tx
            .query_row(
                "SELECT MAX(offset + ?2 + stored_len) FROM chunks WHERE pack = ?1",
                params![number, i64_of(RECORD_HEADER_LEN)],
                |r| r.get(0),
            )
            .map_err(sql_err)?;
        let released: Option<i64> = tx
            .query_row("SELECT end FROM released_ends WHERE pack = ?1", [number], |r| r.get(0))
            .optional()
            .map_err(sql_err)?;
        let end = end.max(released);
        Ok(end.map_or(Ok(PACK_HEADER_LEN), |e| u64_of(e, "record end"))?.max(PACK_HEADER_LEN))
    };
    let mut start = indexed_end(tx)?;
    if start > len {
        let dropped = tx
            .execute(
                "DELETE FROM chunks WHERE pack = ?1 AND offset + ?2 + stored_len > ?3",
                params![number, i64_of(RECORD_HEADER_LEN), i64_of(len)],
            )
            .map_err(sql_err)?;
        log::warn!(
            "Pack {} is shorter than its index ({} < {}): dropped {} index rows lost before a sync.",
            path.display(),
            len,
            start,
            dropped
        );
        start = indexed_end(tx)?;
    }
    if len > start {
        let scan = scan_pack(&file, start, len).map_err(|e| io_err("scanning", e))?;
        for (offset, h) in &scan.records {
            let loc = Location {
                pack: number,
                offset: *offset,
                stored_len: h.stored_len,
                raw_len: h.raw_len,
                codec: h.codec as u8,
            };
            insert_location(tx, &h.id, &loc).map_err(sql_err)?;
        }
        if !scan.records.is_empty() {
            log::info!("Indexed {} chunks found unindexed in pack {}.", scan.records.len(), path.display());
        }
        for (from, to) in &scan.skipped {
            log::error!("Pack {} has damaged bytes {from}..{to}; skipped them.", path.display());
        }
        if let Some(torn) = scan.torn_from {
            if newest {
                log::warn!("Pack {} ends in a torn record at {torn}; truncating it.", path.display());
                file.set_len(torn).map_err(|e| io_err("truncating", e))?;
                len = torn;
            } else {
                log::error!("Pack {} has unreadable bytes from {torn} to its end; left as is.", path.display());
            }
        }
    }
    Ok(newest.then(|| OpenPack { number, path: path.to_path_buf(), file, end: len }))
}

impl Writer {
    /// Makes sure there is a pack with room for `record_len` more bytes.
    fn pack_for(&mut self, dir: &Path, record_len: u64, limit: u64) -> Result<&mut OpenPack, AppendError> {
        let full = self.current.as_ref().is_none_or(|p| p.end > PACK_HEADER_LEN && p.end + record_len > limit);
        if full {
            if let Some(old) = self.current.take() {
                // Sealed packs are never written again; syncing now keeps
                // `sync` to one file.
                old.file.sync_data().map_err(|e| {
                    AppendError::Torn(StoreError::io(format!("syncing full pack {}", old.path.display()), e))
                })?;
                log::info!("Pack {} is full at {} bytes; starting a new one.", old.path.display(), old.end);
            }
            let number = self.next_number;
            let path = dir.join(pack_file_name(number));
            // Explicit: the daemon's umask is 0.
            let file =
                OpenOptions::new().read(true).write(true).create_new(true).mode(0o644).open(&path).map_err(|e| {
                    AppendError::RolledBack(StoreError::io(format!("creating pack {}", path.display()), e))
                })?;
            if let Err(e) = file.write_all_at(&pack_header(), 0) {
                // A full disk: the new pack goes again, so the store takes
                // the next chunk once there is room (it starts this pack
                // again) rather than refusing every write until reopened.
                let error = StoreError::io(format!("writing the header of pack {}", path.display()), e);
                return Err(match std::fs::remove_file(&path) {
                    Ok(()) => AppendError::RolledBack(error),
                    Err(_) => AppendError::Torn(error),
                });
            }
            self.next_number += 1;
            self.dir_unsynced = true;
            self.current = Some(OpenPack { number, path, file, end: PACK_HEADER_LEN });
        }
        self.current.as_mut().ok_or(AppendError::Torn(StoreError::Poisoned))
    }

    /// Marks the writer unusable after a failed append: the pack may now
    /// end in a torn record that only reopening removes.
    fn poison(&mut self, id: &ChunkId, error: &StoreError) {
        log::error!("Appending chunk {id} failed, refusing further writes until reopened: {error}");
        self.poisoned = true;
    }

    /// Appends one record and indexes it; the caller poisons on failure.
    fn append(&mut self, dir: &Path, limit: u64, header: &RecordHeader, payload: &[u8]) -> Result<(), AppendError> {
        let mut record = Vec::with_capacity(header.record_len() as usize);
        record.extend_from_slice(&header.encode());
        record.extend_from_slice(payload);
        self.pack_for(dir, record.len() as u64, limit)?;
        let conn = &self.conn;
        let pack = self.current.as_mut().ok_or(AppendError::Torn(StoreError::Poisoned))?;
        let start = pack.end;
        let result = Self::append_at(conn, pack, header, &record);
        if result.is_err() {
            // A failed append (ENOSPC, EIO) may have left part of the
            // record: cut the pack back to where it ended, so the store
            // stays usable (and takes the next chunk once there is room).
            // Only if that fails too is the writer poisoned.
            match pack.file.set_len(start) {
                Ok(()) => {
                    pack.end = start;
                    let _ = conn.execute("DELETE FROM chunks WHERE id = ?1", params![header.id.as_bytes().as_slice()]);
                }
                Err(e) => {
                    log::error!("cannot cut pack {} back to {start} after a failed append: {e}", pack.path.display());
                    return Err(AppendError::Torn(result.expect_err("checked above")));
                }
            }
        } else {
            self.pack_unsynced = true;
        }
        result.map_err(AppendError::RolledBack)
    }

    fn append_at(
        conn: &Connection,
        pack: &mut OpenPack,
        header: &RecordHeader,
        record: &[u8],
    ) -> Result<(), StoreError> {
        let loc = Location {
            pack: pack.number,
            offset: pack.end,
            stored_len: header.stored_len,
            raw_len: header.raw_len,
            codec: header.codec as u8,
        };
        pack.file
            .write_all_at(record, loc.offset)
            .map_err(|e| StoreError::io(format!("appending chunk {} to pack {}", header.id, pack.path.display()), e))?;
        pack.end += record.len() as u64;
        insert_location(conn, &header.id, &loc)
            .map_err(|e| StoreError::sqlite(format!("indexing chunk {}", header.id), e))
    }
}

impl ChunkStore for PackStore {
    fn put(&self, data: &[u8]) -> Result<ChunkId, StoreError> {
        self.put_new(data).map(|(id, _)| id)
    }

    fn put_new(&self, data: &[u8]) -> Result<(ChunkId, bool), StoreError> {
        if data.len() as u64 > MAX_CHUNK_LEN {
            return Err(StoreError::TooLarge { len: data.len() as u64, limit: MAX_CHUNK_LEN });
        }
        let id = ChunkId::of(data);
        if self.lookup(&id)?.is_some() {
            return Ok((id, false));
        }
        if self.read_only {
            return Err(StoreError::ReadOnly { dir: self.dir.display().to_string() });
        }
        self.check_reserve()?;
        // Compress before taking the lock so threads compress in parallel.
        let (codec, payload) = encode_chunk(data);
        let header = RecordHeader { id, codec, raw_len: data.len() as u64, stored_len: payload.len() as u64 };
        let mut writer = self.writer()?;
        if writer.poisoned {
            return Err(StoreError::Poisoned);
        }
        // Another thread may have stored the same chunk while we compressed.
        if lookup(&writer.conn, &id)?.is_some() {
            return Ok((id, false));
        }
        let limit = self.options.pack_size_limit;
        match writer.append(&self.packs.dir, limit, &header, &payload) {
            Ok(()) => {
                if let Some(t) = writer.totals.as_mut() {
                    t.chunks += 1;
                    t.raw_bytes += header.raw_len;
                    t.stored_bytes += header.stored_len;
                }
            }
            Err(AppendError::RolledBack(e)) => return Err(e),
            Err(AppendError::Torn(e)) => {
                writer.poison(&id, &e);
                return Err(e);
            }
        }
        Ok((id, true))
    }

    /// Takes back the chunks of a content stored part-way (see `unindex`).
    fn discard(&self, ids: &[ChunkId]) -> Result<(), StoreError> {
        self.unindex(ids, true)
    }

    /// Unindexes without cutting the pack back: the mount-time check
    /// compares the packs' size with the store size the newest checkpoint
    /// recorded, so a collection never shrinks a pack (compaction does,
    /// and says so).
    fn release(&self, ids: &[ChunkId]) -> Result<(), StoreError> {
        self.unindex(ids, false)
    }

    fn stored_len(&self, id: &ChunkId) -> Result<Option<u64>, StoreError> {
        Ok(self.lookup(id)?.map(|loc| RECORD_HEADER_LEN + loc.stored_len))
    }

    fn get(&self, id: &ChunkId) -> Result<Vec<u8>, StoreError> {
        let loc = self.lookup(id)?.ok_or(StoreError::Missing { chunk: *id })?;
        match self.read_record(id, &loc) {
            // Compacted between the lookup and the read: the copy is elsewhere.
            Err(e @ StoreError::Corrupt { .. }) => match self.lookup(id)? {
                Some(moved) if (moved.pack, moved.offset) != (loc.pack, loc.offset) => self.read_record(id, &moved),
                _ => Err(e),
            },
            r => r,
        }
    }

    fn contains(&self, id: &ChunkId) -> Result<bool, StoreError> {
        Ok(self.lookup(id)?.is_some())
    }

    fn sync(&self) -> Result<(), StoreError> {
        if self.read_only {
            return Ok(());
        }
        let mut writer = self.writer()?;
        if writer.pack_unsynced {
            if let Some(pack) = &writer.current {
                pack.file
                    .sync_data()
                    .map_err(|e| StoreError::io(format!("syncing pack {}", pack.path.display()), e))?;
            }
            writer.pack_unsynced = false;
        }
        if writer.dir_unsynced {
            for d in [&self.packs.dir, &self.dir] {
                File::open(d)
                    .and_then(|f| f.sync_all())
                    .map_err(|e| StoreError::io(format!("syncing directory {}", d.display()), e))?;
            }
            writer.dir_unsynced = false;
        }
        // With synchronous=NORMAL the WAL is fsynced before a checkpoint, so
        // the index becomes durable here, after the packs it points into.
        let (busy, _, _): (i64, i64, i64) = writer
            .conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .map_err(|e| StoreError::sqlite("checkpointing the chunk index", e))?;
        if busy != 0 {
            log::warn!("Chunk index checkpoint in {} was blocked by a reader.", self.dir.display());
        }
        Ok(())
    }

    fn reclaiming(&self) -> Option<&dyn Reclaiming> {
        Some(self)
    }

    fn stats(&self) -> Result<StoreStats, StoreError> {
        let mut writer = self.writer()?;
        if let Some(t) = writer.totals {
            return Ok(t);
        }
        let (chunks, raw, stored): (i64, i64, i64) = writer
            .conn
            .query_row(
                "SELECT COUNT(*), COALESCE(SUM(raw_len), 0), COALESCE(SUM(stored_len), 0) FROM chunks",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .map_err(|e| StoreError::sqlite("counting chunks", e))?;
        let totals = StoreStats {
            chunks: u64_of(chunks, "chunk count")?,
            raw_bytes: u64_of(raw, "raw bytes")?,
            stored_bytes: u64_of(stored, "stored bytes")?,
        };
        writer.totals = Some(totals);
        Ok(totals)
    }

    fn verify_with_progress(&self, progress: &mut dyn FnMut(u64)) -> Result<VerifyReport, StoreError> {
        // Collected first so reads go in pack order and the index is not
        // locked while the packs are read.
        let rows: Vec<(Vec<u8>, RawLocation)> = {
            let conn = self.reader();
            let mut stmt = conn
                .prepare("SELECT id, pack, offset, stored_len, raw_len, codec FROM chunks ORDER BY pack, offset")
                .map_err(|e| StoreError::sqlite("listing chunks to verify", e))?;
            stmt.query_map([], |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))))
                .and_then(|rows| rows.collect())
                .map_err(|e| StoreError::sqlite("listing chunks to verify", e))?
        };
        let mut report = VerifyReport::default();
        for (raw_id, raw_loc) in rows {
            report.checked += 1;
            let id = ChunkId::from_slice(&raw_id)?;
            let location = u32::try_from(raw_loc.0).ok().zip(u64::try_from(raw_loc.1).ok());
            let len = RECORD_HEADER_LEN + u64::try_from(raw_loc.2).unwrap_or(0);
            let result = Location::from_raw(raw_loc).and_then(|loc| self.read_record(&id, &loc));
            report.bytes += len;
            progress(len);
            match result {
                Ok(_) => {}
                Err(StoreError::Corrupt { detail, .. }) => report.corrupt.push(CorruptChunk { id, detail, location }),
                Err(e @ (StoreError::Io { .. } | StoreError::Decode { .. })) => {
                    report.corrupt.push(CorruptChunk { id, detail: e.to_string(), location })
                }
                Err(other) => return Err(other),
            }
        }
        // The caller (fsck) reports each one by path; a missing pack would
        // otherwise log a line per chunk on the terminal as well.
        for bad in &report.corrupt {
            log::debug!("Chunk {} failed verification: {}", bad.id, bad.detail);
        }
        Ok(report)
    }

    fn list(&self) -> Result<Vec<ChunkId>, StoreError> {
        let conn = self.reader();
        let mut stmt =
            conn.prepare("SELECT id FROM chunks ORDER BY id").map_err(|e| StoreError::sqlite("listing chunks", e))?;
        let raw: Vec<Vec<u8>> = stmt
            .query_map([], |r| r.get(0))
            .and_then(|rows| rows.collect())
            .map_err(|e| StoreError::sqlite("listing chunks", e))?;
        raw.iter().map(|b| ChunkId::from_slice(b)).collect()
    }
}

impl Reclaiming for PackStore {
    fn compact(
        &self,
        threshold: f64,
        min_reclaim: u64,
        before_delete: &mut dyn FnMut(StoreStats) -> Result<(), StoreError>,
    ) -> Result<Compacted, StoreError> {
        self.compact_packs(threshold, min_reclaim, before_delete)
    }

    fn pack_use(&self) -> Result<Vec<PackUse>, StoreError> {
        PackStore::pack_use(self)
    }

    fn lend_reserve(&self, now: bool) -> bool {
        let mut reserve = self.reserve();
        if self.read_only || *reserve != Reserve::Kept {
            return false;
        }
        if !now && free_bytes(&self.dir).is_none_or(|free| free >= RESERVE_LOW_WATER) {
            return false;
        }
        if let Err(e) = std::fs::remove_file(self.reserve_path()) {
            log::warn!("Cannot give up the store's reserve {}: {e}.", self.reserve_path().display());
            return false;
        }
        *reserve = Reserve::Lent;
        log::warn!("The store's filesystem is full: its reserve is given to this collection or unmount.");
        true
    }

    fn restore_reserve(&self) {
        let mut reserve = self.reserve();
        if matches!(*reserve, Reserve::Lent | Reserve::Missing) {
            *reserve = keep_reserve(&self.dir);
            if *reserve == Reserve::Missing {
                log::warn!("There is no room to make the store's reserve again: content is refused until there is.");
            }
        }
    }

    fn shrink(&self) -> Result<(), StoreError> {
        if self.read_only {
            return Ok(());
        }
        let writer = self.writer()?;
        crate::sqlite::shrink(&writer.conn, &self.dir.join("chunks.sqlite"))
            .map_err(|e| StoreError::sqlite("giving the chunk index's free pages back", e))
    }
}

mod compact;
pub use compact::{Compacted, PackUse};

#[cfg(test)]
mod tests;
