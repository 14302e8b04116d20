//! Metadata in SQLite: objects, checkpoints, and the pre-images recorded
//! in each turn. Every table is documented in docs/format.md. The schema
//! version lives in `PRAGMA user_version`; `migrate` brings any older
//! database up to date, step by step.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::{AsErrno, Errno};
use crate::sqlite::{disk_full_note, shrink, sqlite_errno};
use serde::Serialize;

mod bypass;
pub mod checkpoints;
pub mod intents;
pub mod objects;
pub mod pre_images;
mod refs;
pub mod retention;
mod semantic;
pub mod turn_stats;
pub use bypass::{Records, Vouched};
pub use checkpoints::{Checkpoints, MemoryCheckpoints};
pub use intents::{Intents, MemoryIntents};
pub use objects::{MemoryObjects, Objects};
pub use pre_images::{ContentRecord, MemoryPreImages, PreImages};
pub use refs::WrongCount;
pub use retention::{Forgetting, Forgotten, MemoryRetention, Merged, PlanRows, Retention};
pub use turn_stats::{MemoryTurnStatistics, TurnStatistics};

/// Current schema version.
pub const SCHEMA_VERSION: i64 = 15;

/// A persistent object id: one file, directory or symlink, the same
/// across renames and remounts.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord, Serialize)]
pub struct ObjectId(pub i64);

/// A checkpoint number. Turn N is the span that starts at checkpoint N.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord, Serialize)]
pub struct CheckpointId(pub i64);

impl std::fmt::Display for CheckpointId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Errors from the metadata database.
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    #[error("metadata database: {context}: {source}{}", disk_full_note(.source))]
    Sqlite { context: String, source: rusqlite::Error },
    #[error(
        "metadata database {path} has schema version {found}, newer than this rewindfs ({supported}); upgrade rewindfs"
    )]
    TooNew { path: String, found: i64, supported: i64 },
    #[error("metadata database: malformed {what}")]
    Malformed { what: &'static str },
}

impl AsErrno for MetaError {
    fn errno(&self) -> Errno {
        match self {
            MetaError::Sqlite { source, .. } => sqlite_errno(source).unwrap_or(Errno::EIO),
            MetaError::TooNew { .. } | MetaError::Malformed { .. } => Errno::EIO,
        }
    }
}

/// A SQLite failure with `code`, for tests of the errno mapping.
#[cfg(test)]
pub(crate) fn sqlite_failure(code: std::ffi::c_int) -> MetaError {
    MetaError::Sqlite {
        context: "test".into(),
        source: rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None),
    }
}

pub type MetaResult<T> = Result<T, MetaError>;

/// What an in-memory model answers where SQLite would refuse a write for
/// a constraint (a key used twice): the same error, so callers and their
/// errno cannot tell the two apart.
fn refused(what: &str, why: &str) -> MetaError {
    MetaError::Sqlite {
        context: what.to_string(),
        source: rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CONSTRAINT),
            Some(why.to_string()),
        ),
    }
}

/// The random numbers of the areas' kits: a xorshift generator from
/// `seed`, giving values below its argument.
#[cfg(any(test, feature = "test-kit"))]
fn kit_random(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    move |n| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    }
}

trait Ctx<T> {
    fn ctx(self, what: &str) -> MetaResult<T>;
}

impl<T> Ctx<T> for rusqlite::Result<T> {
    fn ctx(self, what: &str) -> MetaResult<T> {
        self.map_err(|source| MetaError::Sqlite { context: what.to_string(), source })
    }
}

/// Why a checkpoint was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The state when the workspace was mounted.
    Mount,
    /// An explicit `rewindfs turn`.
    Turn,
    /// A quiet period (`--auto-turn`).
    Auto,
    /// The tree right after a rewind; its parent is the checkpoint rewound to.
    Rewind,
}

impl Reason {
    fn as_str(self) -> &'static str {
        match self {
            Reason::Mount => "mount",
            Reason::Turn => "turn",
            Reason::Auto => "auto",
            Reason::Rewind => "rewind",
        }
    }
    fn parse(s: &str) -> Reason {
        match s {
            "mount" => Reason::Mount,
            "auto" => Reason::Auto,
            "rewind" => Reason::Rewind,
            _ => Reason::Turn,
        }
    }
}

/// The end (ns) of millisecond `ms`: `created_at` has ms, and a change in
/// the same millisecond as a seal may be before or after it.
pub fn end_of_ms(ms: i64) -> i64 {
    ms.saturating_add(1).saturating_mul(1_000_000)
}

/// One checkpoint row.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Checkpoint {
    pub checkpoint: i64,
    pub parent: Option<i64>,
    pub message_id: Option<String>,
    pub session: Option<String>,
    pub label: Option<String>,
    pub reason: Reason,
    /// Unix milliseconds.
    pub created_at: i64,
    /// Store size when the turn that starts here began (for "bytes stored").
    pub store_bytes_at_start: i64,
    /// The snapshot name (`rewindfs snapshot`): a named checkpoint is
    /// never collected.
    #[serde(default)]
    pub name: Option<String>,
    /// The snapshot's `--message`.
    #[serde(default)]
    pub snapshot_message: Option<String>,
    /// The uid of the caller who asked for it (`turn`), as the daemon saw
    /// it on its socket; None for the daemon's own (mount, auto, rewind)
    /// and for checkpoints sealed before schema version 15.
    #[serde(default)]
    pub sealed_by: Option<u32>,
}

/// One turn's `log` statistics: what `diff` between its two checkpoints
/// reports, summed, and how many records each program caused.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TurnStats {
    pub files_added: u64,
    pub files_modified: u64,
    pub files_deleted: u64,
    pub lines_added: u64,
    pub lines_removed: u64,
    pub programs: std::collections::BTreeMap<String, u64>,
}

/// What a turn changed (`PreImages::changed_in_turn`).
pub struct TurnChanges {
    /// Directories whose entries changed.
    pub dirs: Vec<ObjectId>,
    /// Objects whose own state changed, with their kind.
    pub objects: Vec<(ObjectId, u8)>,
}

/// The recorded state of an object before the first change in a turn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ObjectState {
    pub kind: u8,
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u64,
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub nlink: u32,
    /// Symlink target.
    pub target: Option<Vec<u8>>,
    /// Encoded xattrs (see `encode_xattrs`).
    pub xattrs: Vec<u8>,
    /// Whole-content blake3 and encoded chunk list, when content was captured.
    pub content: Option<(Vec<u8>, Vec<u8>)>,
}

/// One entry pre-image: what `name` in directory `dir` referred to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryRecord {
    pub turn: i64,
    pub dir: ObjectId,
    pub name: Vec<u8>,
    pub target: Option<ObjectId>,
    pub program: Option<String>,
}

/// What views may need from an object's live inode (see
/// [`Meta::record_coverage`]).
#[derive(Clone, Debug)]
pub struct Coverage {
    pub object: ObjectId,
    /// `objects.kind`, None without an object row.
    pub kind: Option<u8>,
    pub handle: Option<Vec<u8>>,
    pub newest_record: i64,
    pub newest_cover: Option<i64>,
    /// The object has a row in `objects`.
    pub has_row: bool,
    /// `objects.born_turn`: no checkpoint up to it shows the object.
    pub born_turn: Option<i64>,
}

/// The largest database a mount checks with `PRAGMA integrity_check`:
/// it costs ~6 ms a MB (a 20 MB database of 1,000 turns and 20,000
/// objects: 0.11 s, against 0.06 s for `quick_check`, on a loaded 2-core
/// machine), so up to ~0.4 s here.
pub const FULL_CHECK_MAX_BYTES: u64 = 64 << 20;

/// What [`Meta::probe`] found.
#[derive(Clone, Debug)]
pub struct Probe {
    /// `PRAGMA user_version` (0: an empty or foreign file).
    pub version: i64,
    /// What `PRAGMA integrity_check` (or `quick_check`) reported (empty: sound).
    pub damage: Vec<String>,
    /// The chunk store's size when the newest checkpoint's turn began.
    pub store_bytes: Option<i64>,
    /// The bytes of pack records the chunk index listed at the newest seal
    /// or mount, once they were durable ([`SEALED_RECORD_BYTES`]).
    pub sealed_record_bytes: Option<i64>,
    pub max_object_id: Option<i64>,
    /// Values no index holds that cannot be (a kind out of range, a
    /// negative size, a reference to nothing), named by row; empty when
    /// sound or when the integrity check failed already.
    pub impossible: Vec<String>,
}

/// State key: the bytes of pack records (headers included) the chunk
/// index listed when the newest checkpoint was sealed, after the store was
/// synced. Packs only grow between seals, so packs holding fewer record
/// bytes at mount were cut or lost, not left short by a crash.
pub const SEALED_RECORD_BYTES: &str = "sealed_record_bytes";

/// What an intent is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntentOp {
    /// The whole tree to `checkpoint` (`undo_checkpoint`: the safety checkpoint).
    Rewind,
    /// `paths` to `checkpoint` (`undo_checkpoint`: the one sealed before).
    Restore,
}

impl IntentOp {
    fn as_str(self) -> &'static str {
        match self {
            IntentOp::Rewind => "rewind",
            IntentOp::Restore => "restore",
        }
    }
}

/// A rewind or restore that was about to change the tree (`intents`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Intent {
    pub id: i64,
    pub op: IntentOp,
    pub checkpoint: i64,
    pub undo_checkpoint: i64,
    /// Paths relative to the root, as bytes (restore; empty: the whole tree).
    pub paths: Vec<Vec<u8>>,
    /// Unix milliseconds.
    pub started_at: i64,
}

/// A pending row and the record its chunk list comes from.
#[derive(Clone, Debug)]
pub struct PendingSource {
    pub handle: Vec<u8>,
    pub inline: Option<Vec<u8>>,
    pub source: Option<(i64, ObjectId)>,
    pub source_chunks: Option<Vec<u8>>,
    pub source_exists: bool,
}

/// How many prepared statements a connection keeps: more than the
/// metadata has distinct statements (about 150), so the cache never
/// evicts one to parse it again (rusqlite's default keeps 16).
const STATEMENT_CACHE: usize = 256;

/// The metadata database.
pub struct Meta {
    conn: Connection,
    /// A batch is open (see [`Meta::open_batch`]): transactions are
    /// savepoints inside it, written by its commit.
    batch: std::cell::Cell<bool>,
}

impl std::fmt::Debug for Meta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meta").finish_non_exhaustive()
    }
}

/// Where a pending file's chunk list is kept.
#[derive(Clone, Copy, Debug)]
pub enum PendingList<'a> {
    /// In the pending row itself (encoded).
    Inline(&'a [u8]),
    /// In the pre-image record (turn, object) of `object_pre`.
    Record(i64, ObjectId),
}

/// A pending file as stored.
#[derive(Debug)]
pub struct PendingRow {
    pub handle: Vec<u8>,
    pub hash: Vec<u8>,
    pub chunks: Option<Vec<u8>>,
    pub mtime_ns: i64,
}

fn migrate(conn: &Connection, path: &str) -> MetaResult<()> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).ctx("read schema version")?;
    if version > SCHEMA_VERSION {
        return Err(MetaError::TooNew { path: path.into(), found: version, supported: SCHEMA_VERSION });
    }
    if version < 1 {
        conn.execute_batch(
            "BEGIN;
             CREATE TABLE objects(
                 id INTEGER PRIMARY KEY,
                 handle BLOB UNIQUE,
                 kind INTEGER NOT NULL);
             CREATE TABLE checkpoints(
                 id INTEGER PRIMARY KEY,
                 parent INTEGER,
                 message_id TEXT,
                 session TEXT,
                 label TEXT,
                 reason TEXT NOT NULL,
                 created_at INTEGER NOT NULL,
                 store_bytes_at_start INTEGER NOT NULL DEFAULT 0);
             CREATE INDEX checkpoints_by_message ON checkpoints(message_id);
             CREATE TABLE entry_pre(
                 turn INTEGER NOT NULL,
                 dir INTEGER NOT NULL,
                 name BLOB NOT NULL,
                 target INTEGER,
                 program TEXT,
                 PRIMARY KEY(turn, dir, name)) WITHOUT ROWID;
             CREATE INDEX entry_pre_by_name ON entry_pre(dir, name, turn);
             CREATE TABLE object_pre(
                 turn INTEGER NOT NULL,
                 object INTEGER NOT NULL,
                 kind INTEGER NOT NULL,
                 perm INTEGER NOT NULL,
                 uid INTEGER NOT NULL,
                 gid INTEGER NOT NULL,
                 rdev INTEGER NOT NULL,
                 size INTEGER NOT NULL,
                 mtime_ns INTEGER NOT NULL,
                 ctime_ns INTEGER NOT NULL,
                 nlink INTEGER NOT NULL,
                 target BLOB,
                 xattrs BLOB NOT NULL,
                 content_hash BLOB,
                 chunks BLOB,
                 program TEXT,
                 PRIMARY KEY(turn, object)) WITHOUT ROWID;
             CREATE INDEX object_pre_by_object ON object_pre(object, turn);
             CREATE TABLE known_content(
                 object INTEGER PRIMARY KEY,
                 ctime_ns INTEGER NOT NULL,
                 size INTEGER NOT NULL,
                 content_hash BLOB NOT NULL,
                 chunks BLOB NOT NULL);
             CREATE TABLE state(key TEXT PRIMARY KEY, value);
             PRAGMA user_version = 1;
             COMMIT;",
        )
        .ctx("create schema version 1")?;
    }
    if version < 2 {
        // Objects changed outside the mount between two mounts: before
        // `turn`, their live state is not what earlier checkpoints had.
        conn.execute_batch(
            "BEGIN;
             CREATE TABLE tainted(
                 object INTEGER NOT NULL,
                 turn INTEGER NOT NULL,
                 PRIMARY KEY(object, turn)) WITHOUT ROWID;
             PRAGMA user_version = 2;
             COMMIT;",
        )
        .ctx("migrate to schema version 2")?;
    }
    if version < 3 {
        // Files a rewind put in place whose bytes are still in the chunk
        // store: the settler writes them into the backing file.
        conn.execute_batch(
            "BEGIN;
             CREATE TABLE pending(
                 handle BLOB PRIMARY KEY,
                 content_hash BLOB NOT NULL,
                 chunks BLOB NOT NULL,
                 mtime_ns INTEGER NOT NULL);
             PRAGMA user_version = 3;
             COMMIT;",
        )
        .ctx("migrate to schema version 3")?;
    }
    if version < 4 {
        // The turn a directory was created in: a rewind to an earlier
        // checkpoint moves it aside whole instead of visiting its entries.
        conn.execute_batch(
            "BEGIN;
             ALTER TABLE objects ADD COLUMN born_turn INTEGER;
             PRAGMA user_version = 4;
             COMMIT;",
        )
        .ctx("migrate to schema version 4")?;
    }
    if version < 5 {
        // A pending file may point at the pre-image record that holds its
        // chunk list instead of carrying a copy: a rewound 1 GiB file's list
        // is ~2 MiB, written while the tree is frozen.
        conn.execute_batch(
            "BEGIN;
             CREATE TABLE pending_v5(
                 handle BLOB PRIMARY KEY,
                 content_hash BLOB NOT NULL,
                 chunks BLOB,
                 source_turn INTEGER,
                 source_object INTEGER,
                 mtime_ns INTEGER NOT NULL,
                 CHECK (chunks IS NOT NULL OR (source_turn IS NOT NULL AND source_object IS NOT NULL)));
             INSERT INTO pending_v5(handle, content_hash, chunks, mtime_ns)
                 SELECT handle, content_hash, chunks, mtime_ns FROM pending;
             DROP TABLE pending;
             ALTER TABLE pending_v5 RENAME TO pending;
             PRAGMA user_version = 5;
             COMMIT;",
        )
        .ctx("migrate to schema version 5")?;
    }
    if version < 6 {
        // Each sealed turn's `log` statistics, so that `log` reads one row
        // per turn instead of comparing two views for every turn each time.
        // `paths` says where the turn's changes are (found at the seal,
        // while the live tree is the tree at its end), so that computing
        // the statistics visits only those paths.
        conn.execute_batch(
            "BEGIN;
             CREATE TABLE turn_summaries(
                 turn INTEGER PRIMARY KEY,
                 paths BLOB,
                 files_added INTEGER,
                 files_modified INTEGER,
                 files_deleted INTEGER,
                 lines_added INTEGER,
                 lines_removed INTEGER);
             CREATE TABLE turn_programs(
                 turn INTEGER NOT NULL,
                 program TEXT NOT NULL,
                 records INTEGER NOT NULL,
                 PRIMARY KEY(turn, program)) WITHOUT ROWID;
             PRAGMA user_version = 6;
             COMMIT;",
        )
        .ctx("migrate to schema version 6")?;
    }
    if version < 7 {
        // A rewind or restore in progress: written before it changes the
        // tree, removed once its result is sealed. One left open means the
        // daemon died under it; the next mount completes it.
        conn.execute_batch(
            "BEGIN;
             CREATE TABLE intents(
                 id INTEGER PRIMARY KEY,
                 op TEXT NOT NULL,
                 checkpoint INTEGER NOT NULL,
                 undo_checkpoint INTEGER NOT NULL,
                 paths BLOB,
                 started_at INTEGER NOT NULL);
             PRAGMA user_version = 7;
             COMMIT;",
        )
        .ctx("migrate to schema version 7")?;
    }
    if version < 8 {
        // Which objects sit in their own attic slot (`attic/<id>`), and
        // since which turn: written with the move, read instead of asking
        // the kernel for names. A store older than this is derived from
        // the attic directory at its first mount (`since_turn` NULL).
        conn.execute_batch(
            "BEGIN;
             CREATE TABLE attic(
                 object INTEGER PRIMARY KEY,
                 since_turn INTEGER);
             PRAGMA user_version = 8;
             COMMIT;",
        )
        .ctx("migrate to schema version 8")?;
    }
    if version < 9 {
        // Named snapshots, checkpoints forgotten (by `forget` or retention)
        // so references to them say so, and the chunks a committed
        // collection still has to free (its intent, finished at the next
        // open, as are the attic entries it removes).
        conn.execute_batch(
            "BEGIN;
             CREATE TABLE IF NOT EXISTS snapshots(
                 name TEXT PRIMARY KEY,
                 checkpoint INTEGER NOT NULL UNIQUE,
                 message TEXT,
                 created_at INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS forgotten(
                 checkpoint INTEGER PRIMARY KEY,
                 message_id TEXT,
                 label TEXT,
                 merged_into INTEGER,
                 by TEXT NOT NULL,
                 at INTEGER NOT NULL);
             CREATE INDEX IF NOT EXISTS forgotten_by_message ON forgotten(message_id);
             CREATE TABLE IF NOT EXISTS gc_chunks(chunk BLOB PRIMARY KEY) WITHOUT ROWID;
             CREATE TABLE IF NOT EXISTS gc_attic(object INTEGER PRIMARY KEY);
             PRAGMA user_version = 9;
             COMMIT;",
        )
        .ctx("migrate to schema version 9")?;
    }
    if version < 10 {
        // Chunk reference counts, so a collection finds what it frees
        // without reading every content list (`refs.rs`), computed here
        // from the lists; and the indexes a collection looks things up by
        // (entries naming an object, objects born in a turn, children of
        // a checkpoint) instead of scanning those tables.
        conn.execute_batch(
            "BEGIN;
             CREATE TABLE IF NOT EXISTS chunk_refs(chunk BLOB PRIMARY KEY, refs INTEGER NOT NULL) WITHOUT ROWID;
             CREATE INDEX IF NOT EXISTS chunk_refs_zero ON chunk_refs(chunk) WHERE refs = 0;
             CREATE INDEX IF NOT EXISTS entry_pre_by_target ON entry_pre(target) WHERE target IS NOT NULL;
             CREATE INDEX IF NOT EXISTS objects_by_born ON objects(born_turn) WHERE born_turn IS NOT NULL;
             CREATE INDEX IF NOT EXISTS checkpoints_by_parent ON checkpoints(parent);",
        )
        .ctx("migrate to schema version 10")?;
        let counted = refs::recount(conn)
            .and_then(|()| conn.execute_batch("PRAGMA user_version = 10; COMMIT;").ctx("migrate to schema version 10"));
        if let Err(e) = counted {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(e);
        }
    }
    if version < 11 {
        // Changes that bypassed the mount and were recorded afterwards as a
        // pre-image: the checkpoints before them show the object unknown.
        conn.execute_batch(
            "BEGIN;
             CREATE TABLE IF NOT EXISTS bypassed(
                 object INTEGER NOT NULL,
                 first INTEGER NOT NULL,
                 last INTEGER NOT NULL,
                 PRIMARY KEY(object, first)) WITHOUT ROWID;
             PRAGMA user_version = 11;
             COMMIT;",
        )
        .ctx("migrate to schema version 11")?;
    }
    if version < 12 {
        // Changes of the daemon's own that no record of the object holds:
        // the ctime a rewound file had once the settler filled it, and the
        // turns in which a rewind or restore changed the tree.
        conn.execute_batch(
            "BEGIN;
             CREATE TABLE IF NOT EXISTS own_ctime(
                 object INTEGER PRIMARY KEY,
                 ctime_ns INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS daemon_turns(
                 turn INTEGER PRIMARY KEY,
                 started_ns INTEGER NOT NULL) WITHOUT ROWID;
             PRAGMA user_version = 12;
             COMMIT;",
        )
        .ctx("migrate to schema version 12")?;
    }
    if version < 13 {
        // What retention reads without reading the history: the checkpoints
        // older than the policy's days, the newest rewinds, the marks of a
        // checkpoint, and the daemon's own ctimes older than every view.
        conn.execute_batch(
            "BEGIN;
             CREATE INDEX IF NOT EXISTS checkpoints_by_time ON checkpoints(created_at);
             CREATE INDEX IF NOT EXISTS checkpoints_rewinds ON checkpoints(id) WHERE reason = 'rewind';
             CREATE INDEX IF NOT EXISTS tainted_by_turn ON tainted(turn);
             CREATE INDEX IF NOT EXISTS own_ctime_by_ctime ON own_ctime(ctime_ns);
             PRAGMA user_version = 13;
             COMMIT;",
        )
        .ctx("migrate to schema version 13")?;
    }
    if version < 14 {
        // The bypassed ranges a forget leaves without a kept checkpoint
        // (found by where they start, `Meta::forget_begin`); those earlier
        // collections left go now.
        conn.execute_batch(
            "BEGIN;
             CREATE INDEX IF NOT EXISTS bypassed_by_first ON bypassed(first, last);
             DELETE FROM bypassed WHERE NOT EXISTS
                 (SELECT 1 FROM checkpoints c WHERE c.id BETWEEN bypassed.first AND bypassed.last);
             PRAGMA user_version = 14;
             COMMIT;",
        )
        .ctx("migrate to schema version 14")?;
    }
    if version < 15 {
        // Who asked for each checkpoint, so that `log` can tell the
        // agent's seals from the owner's; unknown for older ones.
        // A database put back to an older version by hand (the tests do)
        // may have the column already.
        let has: bool = conn
            .query_row("SELECT COUNT(*) FROM pragma_table_info('checkpoints') WHERE name = 'sealed_by'", [], |r| {
                r.get::<_, i64>(0)
            })
            .map(|n| n > 0)
            .ctx("migrate to schema version 15")?;
        let add = if has { "" } else { "ALTER TABLE checkpoints ADD COLUMN sealed_by INTEGER;" };
        conn.execute_batch(&format!("BEGIN; {add} PRAGMA user_version = 15; COMMIT;"))
            .ctx("migrate to schema version 15")?;
    }
    Ok(())
}

fn quick_check(conn: &Connection) -> MetaResult<Vec<String>> {
    sqlite_check(conn, "PRAGMA quick_check")
}

/// `PRAGMA quick_check` (`thorough`: `integrity_check`), the lines that are
/// not "ok".
fn sqlite_check(conn: &Connection, pragma: &str) -> MetaResult<Vec<String>> {
    let mut stmt = conn.prepare(pragma).ctx("check the database")?;
    let lines = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .ctx("check the database")?;
    Ok(lines.into_iter().filter(|line| line != "ok").collect())
}

/// The columns [`checkpoint_from_row`] reads, from [`CHECKPOINT_FROM`].
const CHECKPOINT_COLUMNS: &str = "c.id, c.parent, c.message_id, c.session, c.label, c.reason, c.created_at, \
     c.store_bytes_at_start, s.name, s.message, c.sealed_by";
/// How many columns [`CHECKPOINT_COLUMNS`] has: a query may read more after them.
const CHECKPOINT_COLUMN_COUNT: usize = 11;
/// A checkpoint with its name.
const CHECKPOINT_FROM: &str = "FROM checkpoints c LEFT JOIN snapshots s ON s.checkpoint = c.id";

fn checkpoint_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Checkpoint> {
    Ok(Checkpoint {
        checkpoint: r.get(0)?,
        parent: r.get(1)?,
        message_id: r.get(2)?,
        session: r.get(3)?,
        label: r.get(4)?,
        reason: Reason::parse(&r.get::<_, String>(5)?),
        created_at: r.get(6)?,
        store_bytes_at_start: r.get(7)?,
        name: r.get(8)?,
        snapshot_message: r.get(9)?,
        sealed_by: r.get(10)?,
    })
}

fn object_state_from_row(r: &rusqlite::Row<'_>, base: usize) -> rusqlite::Result<ObjectState> {
    let hash: Option<Vec<u8>> = r.get(base + 11)?;
    let chunks: Option<Vec<u8>> = r.get(base + 12)?;
    Ok(ObjectState {
        kind: r.get(base)?,
        perm: r.get(base + 1)?,
        uid: r.get(base + 2)?,
        gid: r.get(base + 3)?,
        rdev: r.get::<_, i64>(base + 4)? as u64,
        size: r.get::<_, i64>(base + 5)? as u64,
        mtime_ns: r.get(base + 6)?,
        ctime_ns: r.get(base + 7)?,
        nlink: r.get(base + 8)?,
        target: r.get(base + 9)?,
        xattrs: r.get(base + 10)?,
        content: hash.zip(chunks),
    })
}

const OBJECT_COLUMNS: &str =
    "kind, perm, uid, gid, rdev, size, mtime_ns, ctime_ns, nlink, target, xattrs, content_hash, chunks";

impl Meta {
    /// Opens (creating and migrating as needed) the database at `path`.
    pub fn open(path: &Path) -> MetaResult<Meta> {
        let conn = Connection::open(path).ctx("open")?;
        Self::setup(conn, &path.display().to_string())
    }

    /// Opens an existing database for reading only: no migration, no
    /// pragma that writes, so `fsck` can read a store beside its daemon or
    /// without altering it. A database at another schema version is refused
    /// (a mount migrates it).
    pub fn open_read_only(path: &Path) -> MetaResult<Meta> {
        use rusqlite::OpenFlags;
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).ctx("open read-only")?;
        conn.busy_timeout(std::time::Duration::from_secs(10)).ctx("set busy timeout")?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).ctx("read schema version")?;
        if version > SCHEMA_VERSION {
            return Err(MetaError::TooNew {
                path: path.display().to_string(),
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        if version < SCHEMA_VERSION {
            return Err(MetaError::Malformed {
                what: "schema version (older than this rewindfs; mount once to migrate)",
            });
        }
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        Ok(Meta { conn, batch: Default::default() })
    }

    /// Checks a database file without changing it: SQLite's `PRAGMA
    /// integrity_check` (the structure of every table and index, and that
    /// every index agrees with its table: a byte flipped inside an indexed
    /// value shows there, not in `quick_check`), and what the store around
    /// it must agree with. For the checks at mount and `fsck`; a database
    /// of any schema version can be probed. Unless `thorough`, a database
    /// larger than [`FULL_CHECK_MAX_BYTES`] gets `quick_check` only, so
    /// that a mount stays quick (`fsck` is thorough).
    pub fn probe(path: &Path, thorough: bool) -> MetaResult<Probe> {
        use rusqlite::OpenFlags;
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).ctx("open read-only")?;
        conn.busy_timeout(std::time::Duration::from_secs(10)).ctx("set busy timeout")?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).ctx("read schema version")?;
        let full = thorough || std::fs::metadata(path).is_ok_and(|m| m.len() <= FULL_CHECK_MAX_BYTES);
        let mut probe = Probe {
            version,
            damage: if full { sqlite_check(&conn, "PRAGMA integrity_check")? } else { quick_check(&conn)? },
            store_bytes: None,
            sealed_record_bytes: None,
            max_object_id: None,
            impossible: Vec::new(),
        };
        if version >= 1 && probe.damage.is_empty() {
            probe.store_bytes = conn
                .query_row("SELECT store_bytes_at_start FROM checkpoints ORDER BY id DESC LIMIT 1", [], |r| r.get(0))
                .optional()
                .ctx("read the newest checkpoint")?;
            probe.max_object_id =
                conn.query_row("SELECT MAX(id) FROM objects", [], |r| r.get(0)).ctx("read objects")?;
            probe.sealed_record_bytes = conn
                .query_row("SELECT value FROM state WHERE key = ?1", [SEALED_RECORD_BYTES], |r| r.get::<_, String>(0))
                .optional()
                .ctx("read state")?
                .and_then(|v| v.parse().ok());
            // With the whole integrity check, whose cost it adds to (a
            // scan of each table, about half as much again).
            if full {
                let started = std::time::Instant::now();
                probe.impossible = semantic::impossible_values(&conn, version)?;
                log::debug!("checked the values of {} in {:?}", path.display(), started.elapsed());
            }
        }
        Ok(probe)
    }

    /// SQLite's `PRAGMA quick_check` of this database: empty when sound.
    pub fn quick_check(&self) -> MetaResult<Vec<String>> {
        quick_check(&self.conn)
    }

    /// An in-memory database (tests).
    pub fn open_in_memory() -> MetaResult<Meta> {
        Self::setup(Connection::open_in_memory().ctx("open in memory")?, ":memory:")
    }

    fn setup(conn: Connection, path: &str) -> MetaResult<Meta> {
        // WAL with synchronous=NORMAL: a commit is written (not fsynced)
        // before it returns, so it survives the daemon being killed; `sync`
        // makes it survive power loss too.
        conn.pragma_update(None, "journal_mode", "WAL").ctx("enable WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL").ctx("set synchronous")?;
        // Savepoint journals in memory: each fold inside a batch (a
        // rewind's, see `Journal::batched`) is a savepoint, and a journal
        // file wrote every page before the savepoint first changed it,
        // one `pwrite` a page (a tenth of a rewind of files rewritten in
        // place). They hold only the pages one fold changes.
        conn.pragma_update(None, "temp_store", "MEMORY").ctx("set temp_store")?;
        conn.busy_timeout(std::time::Duration::from_secs(10)).ctx("set busy timeout")?;
        // Plans that never depend on a bound value. Without this, SQLite
        // compiled some cached statements again at each new value
        // (`sqlite3Reprepare`: the bundled build has STAT4, and the
        // schema has partial indexes): 40% of a rewind's time went to
        // re-parsing them.
        conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
            .ctx("set the query planner stability guarantee")?;
        migrate(&conn, path)?;
        // Every statement is prepared once and kept (`prepare_cached`):
        // parsing them at each call was a tenth of the daemon's time. The
        // cache holds all the distinct statements of the metadata, so
        // none is evicted and parsed again.
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        Ok(Meta { conn, batch: Default::default() })
    }

    /// With `alone`, takes SQLite's lock on the database and keeps it
    /// until this connection closes or this is called without it, rather
    /// than taking and releasing a shared lock around every statement
    /// outside a transaction (two `fcntl` calls each). For a process that
    /// owns the store alone: meanwhile no other connection, in this
    /// process or another, can read the database (`fsck` beside it, a
    /// dry-run collection's copy), so the daemon does not do it; the
    /// in-process model test does, as the only user of its stores, and
    /// gives the lock up around its `fsck`.
    pub fn own_alone(&self, alone: bool) -> MetaResult<()> {
        let want = if alone { "exclusive" } else { "normal" };
        let mode: String = self
            .conn
            .query_row(&format!("PRAGMA locking_mode = {want}"), [], |r| r.get(0))
            .ctx("set the locking mode")?;
        if !mode.eq_ignore_ascii_case(want) {
            return Err(MetaError::Malformed { what: "locking mode (SQLite did not take it)" });
        }
        // A change of mode takes effect at the end of the next write
        // transaction (in WAL mode); an empty one does.
        self.exec("BEGIN IMMEDIATE", []).ctx("change the locking mode")?;
        self.exec("COMMIT", []).ctx("change the locking mode")?;
        Ok(())
    }

    /// Runs one statement, prepared once per connection (see
    /// [`STATEMENT_CACHE`]).
    fn exec(&self, sql: &str, params: impl rusqlite::Params) -> rusqlite::Result<usize> {
        self.conn.prepare_cached(sql)?.execute(params)
    }

    /// The one row of a statement prepared once per connection.
    fn row<T>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        f: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        self.conn.prepare_cached(sql)?.query_row(params, f)
    }

    /// Gives the pages collection freed back to the filesystem and empties
    /// the WAL (see [`shrink`]).
    pub fn shrink(&self) -> MetaResult<()> {
        let path = self.path().unwrap_or_default();
        shrink(&self.conn, &path).ctx("give the free pages back")
    }

    /// Forces everything committed so far to disk.
    pub fn sync(&self) -> MetaResult<()> {
        self.row("PRAGMA wal_checkpoint(FULL)", [], |_| Ok(())).ctx("checkpoint the WAL")?;
        Ok(())
    }

    pub fn get_state(&self, key: &str) -> MetaResult<Option<String>> {
        self.row("SELECT value FROM state WHERE key = ?1", [key], |r| r.get(0)).optional().ctx("read state")
    }

    /// A state value as bytes: a path that need not be UTF-8. Reads a
    /// value written as text by older versions too.
    pub fn get_state_bytes(&self, key: &str) -> MetaResult<Option<Vec<u8>>> {
        self.row("SELECT value FROM state WHERE key = ?1", [key], |r| {
            Ok(match r.get_ref(0)? {
                rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) => t.to_vec(),
                _ => Vec::new(),
            })
        })
        .optional()
        .ctx("read state")
    }

    /// Stores `value` as a blob, byte for byte.
    pub fn set_state_bytes(&self, key: &str, value: &[u8]) -> MetaResult<()> {
        self.put_state(key, value)
    }

    pub fn set_state(&self, key: &str, value: &str) -> MetaResult<()> {
        self.put_state(key, value)
    }

    fn put_state(&self, key: &str, value: impl rusqlite::ToSql) -> MetaResult<()> {
        self.exec(
            "INSERT INTO state(key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![key, value],
        )
        .ctx("write state")?;
        Ok(())
    }

    fn record_object_counted(
        &self,
        turn: i64,
        object: ObjectId,
        s: &ObjectState,
        program: Option<&str>,
    ) -> MetaResult<()> {
        let (hash, chunks) = match &s.content {
            Some((h, c)) => (Some(h.as_slice()), Some(c.as_slice())),
            None => (None, None),
        };
        let changed = self.conn
            .prepare_cached(
                "INSERT INTO object_pre(turn, object, kind, perm, uid, gid, rdev, size, mtime_ns, ctime_ns, nlink, target, xattrs, content_hash, chunks, program)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)
                 ON CONFLICT(turn, object) DO UPDATE SET content_hash = excluded.content_hash, chunks = excluded.chunks
                 WHERE object_pre.chunks IS NULL AND excluded.chunks IS NOT NULL",
            )
            .ctx("prepare")?
            .execute(params![
                turn,
                object.0,
                s.kind,
                s.perm,
                s.uid,
                s.gid,
                s.rdev as i64,
                s.size as i64,
                s.mtime_ns,
                s.ctime_ns,
                s.nlink,
                s.target,
                s.xattrs,
                hash,
                chunks,
                program
            ])
            .ctx("record object pre-image")?;
        // A row written or given content now holds the list (a second
        // record of the turn is ignored and holds nothing new).
        if changed > 0
            && let Some(list) = chunks
        {
            self.count_list(list, 1)?;
        }
        Ok(())
    }

    /// Content known for an object at a given ctime (no re-read needed).
    pub fn known_content(&self, object: ObjectId, ctime_ns: i64, size: u64) -> MetaResult<Option<(Vec<u8>, Vec<u8>)>> {
        self.conn
            .prepare_cached(
                "SELECT k.content_hash, k.chunks FROM known_content k WHERE k.object = ?1 AND k.ctime_ns = ?2 AND k.size = ?3 \
                 AND k.chunks = (SELECT o.chunks FROM object_pre o WHERE o.object = ?1 AND o.chunks IS NOT NULL \
                     ORDER BY o.turn DESC LIMIT 1)",
            )
            .ctx("prepare")?
            .query_row(params![object.0, ctime_ns, size as i64], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .ctx("read known content")
    }

    pub fn set_known_content(
        &self,
        object: ObjectId,
        ctime_ns: i64,
        size: u64,
        hash: &[u8],
        chunks: &[u8],
    ) -> MetaResult<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO known_content(object, ctime_ns, size, content_hash, chunks) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT(object) DO UPDATE SET ctime_ns = excluded.ctime_ns, size = excluded.size,
                 content_hash = excluded.content_hash, chunks = excluded.chunks",
            )
            .ctx("prepare")?
            .execute(params![object.0, ctime_ns, size as i64, hash, chunks])
            .ctx("record known content")?;
        Ok(())
    }

    /// Objects recorded in one turn, with their program.
    pub fn objects_in_turn(&self, turn: i64) -> MetaResult<Vec<(ObjectId, ObjectState, Option<String>)>> {
        let sql = format!("SELECT object, program, {OBJECT_COLUMNS} FROM object_pre WHERE turn = ?1");
        let mut stmt = self.conn.prepare_cached(&sql).ctx("prepare")?;
        let rows = stmt
            .query_map([turn], |r| Ok((ObjectId(r.get(0)?), object_state_from_row(r, 2)?, r.get(1)?)))
            .ctx("list objects of turn")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("list objects of turn")
    }

    /// Turns in which an object has a record.
    pub fn turns_of_object(&self, object: ObjectId) -> MetaResult<Vec<i64>> {
        let mut stmt =
            self.conn.prepare_cached("SELECT turn FROM object_pre WHERE object = ?1 ORDER BY turn").ctx("prepare")?;
        let rows = stmt.query_map([object.0], |r| r.get(0)).ctx("list turns of object")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("list turns of object")
    }

    /// Turns in which (dir, name) has a record.
    pub fn turns_of_entry(&self, dir: ObjectId, name: &[u8]) -> MetaResult<Vec<i64>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT turn FROM entry_pre WHERE dir = ?1 AND name = ?2 ORDER BY turn")
            .ctx("prepare")?;
        let rows = stmt.query_map(params![dir.0, name], |r| r.get(0)).ctx("list turns of entry")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("list turns of entry")
    }

    /// The (dir, name) pairs with a record in a turn >= `from`, leaving out
    /// names in directories born in such a turn: a rewind to `from` removes
    /// those directories whole, so their names need no visit (a build that
    /// created 20,000 files under a new directory is one pair here).
    pub fn entry_keys_since_in_older_dirs(&self, from: i64) -> MetaResult<Vec<(ObjectId, Vec<u8>)>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT DISTINCT e.dir, e.name FROM entry_pre e LEFT JOIN objects o ON o.id = e.dir \
                 WHERE e.turn >= ?1 AND (o.born_turn IS NULL OR o.born_turn < ?1)",
            )
            .ctx("prepare")?;
        let rows = stmt.query_map([from], |r| Ok((ObjectId(r.get(0)?), r.get(1)?))).ctx("list changed entries")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("list changed entries")
    }

    /// Every object with a record in a turn >= `from` that existed before
    /// it: one born in such a turn (a directory a build created, whose
    /// attributes changed as files went in) is not part of the tree at
    /// `from`, and a rewind there moves it aside whole.
    pub fn objects_since_born_before(&self, from: i64) -> MetaResult<Vec<ObjectId>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT DISTINCT p.object FROM object_pre p LEFT JOIN objects o ON o.id = p.object \
                 WHERE p.turn >= ?1 AND (o.born_turn IS NULL OR o.born_turn < ?1)",
            )
            .ctx("prepare")?;
        let rows = stmt.query_map([from], |r| Ok(ObjectId(r.get(0)?))).ctx("list changed objects")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("list changed objects")
    }

    /// Removes every state key starting with `prefix`.
    pub fn remove_states_with_prefix(&self, prefix: &str) -> MetaResult<()> {
        self.exec("DELETE FROM state WHERE substr(key, 1, length(?1)) = ?1", [prefix]).ctx("clear state")?;
        Ok(())
    }

    /// Every turn at which `object` was noted changed outside the mount.
    pub fn taint_turns(&self, object: ObjectId) -> MetaResult<Vec<i64>> {
        let mut stmt =
            self.conn.prepare_cached("SELECT turn FROM tainted WHERE object = ?1 ORDER BY turn").ctx("prepare")?;
        let rows = stmt.query_map([object.0], |r| r.get(0)).ctx("list outside changes")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("list outside changes")
    }

    /// Calls `f` with every pre-image record that holds content: (turn,
    /// object, content hash, chunk list). One pass, in (turn, object)
    /// order, without holding every chunk list in memory.
    pub fn for_each_content_record(&self, mut f: impl FnMut(i64, ObjectId, &[u8], &[u8])) -> MetaResult<()> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT turn, object, content_hash, chunks FROM object_pre WHERE chunks IS NOT NULL ORDER BY turn, object")
            .ctx("prepare")?;
        let mut rows = stmt.query([]).ctx("list content records")?;
        while let Some(r) = rows.next().ctx("list content records")? {
            let hash: Vec<u8> = r.get::<_, Option<Vec<u8>>>(2).ctx("read content record")?.unwrap_or_default();
            let chunks: Vec<u8> = r.get(3).ctx("read content record")?;
            f(r.get(0).ctx("read content record")?, ObjectId(r.get(1).ctx("read content record")?), &hash, &chunks);
        }
        Ok(())
    }

    /// Every `known_content` row: (object, chunk list).
    pub fn known_content_lists(&self) -> MetaResult<Vec<(ObjectId, Vec<u8>)>> {
        let mut stmt = self.conn.prepare_cached("SELECT object, chunks FROM known_content").ctx("prepare")?;
        let rows = stmt.query_map([], |r| Ok((ObjectId(r.get(0)?), r.get(1)?))).ctx("list known content")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("list known content")
    }

    /// For every object some record mentions, what a view may need from
    /// its live inode (see `fsck`): its kind and handle, the newest turn of
    /// a record that names it (as an entry target or with an object record),
    /// and the newest turn of a record that says all a view needs without
    /// the inode (content for a file; any object record for anything else).
    pub fn record_coverage(&self) -> MetaResult<Vec<Coverage>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "WITH named AS (
                     SELECT target AS object, MAX(turn) AS turn FROM entry_pre WHERE target IS NOT NULL GROUP BY target
                     UNION ALL SELECT object, MAX(turn) FROM object_pre GROUP BY object),
                 newest AS (SELECT object, MAX(turn) AS turn FROM named GROUP BY object),
                 covered AS (
                     SELECT object, MAX(turn) AS turn FROM object_pre
                     WHERE chunks IS NOT NULL OR kind != 1 GROUP BY object)
                 SELECT n.object, o.kind, o.handle, n.turn, c.turn, o.id IS NOT NULL, o.born_turn FROM newest n
                 LEFT JOIN objects o ON o.id = n.object LEFT JOIN covered c ON c.object = n.object",
            )
            .ctx("prepare")?;
        let rows = stmt
            .query_map([], |r| {
                Ok(Coverage {
                    object: ObjectId(r.get(0)?),
                    kind: r.get(1)?,
                    handle: r.get(2)?,
                    newest_record: r.get(3)?,
                    newest_cover: r.get(4)?,
                    has_row: r.get(5)?,
                    born_turn: r.get(6)?,
                })
            })
            .ctx("list record coverage")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("list record coverage")
    }

    /// Entry records naming a directory that has no object row: (turn, dir, name).
    pub fn entries_in_unknown_dirs(&self) -> MetaResult<Vec<(i64, ObjectId, Vec<u8>)>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT turn, dir, name FROM entry_pre WHERE dir NOT IN (SELECT id FROM objects) ORDER BY turn",
            )
            .ctx("prepare")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, ObjectId(r.get(1)?), r.get(2)?))).ctx("list entries")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("list entries")
    }

    /// Records (entry or object) of a turn that is no checkpoint: (turn, count).
    pub fn records_of_unknown_turns(&self) -> MetaResult<Vec<(i64, i64)>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT turn, COUNT(*) FROM (SELECT turn FROM entry_pre UNION ALL SELECT turn FROM object_pre) \
                 WHERE turn NOT IN (SELECT id FROM checkpoints) GROUP BY turn ORDER BY turn",
            )
            .ctx("prepare")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).ctx("list record turns")?;
        let rows = rows.collect::<rusqlite::Result<Vec<(i64, i64)>>>().ctx("list record turns")?;
        // The turn of a checkpoint being forgotten keeps records until its
        // last batch merges them (`retention.rs`).
        let forgetting = self.forgetting()?.map(|g| g.checkpoint);
        Ok(rows.into_iter().filter(|(turn, _)| Some(*turn) != forgetting).collect())
    }

    /// Pending rows with how their chunk list resolves: (handle, inline
    /// list, source record (turn, object), the source's list if it exists).
    pub fn pending_sources(&self) -> MetaResult<Vec<PendingSource>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT p.handle, p.chunks, p.source_turn, p.source_object, o.chunks, o.object IS NOT NULL \
                 FROM pending p LEFT JOIN object_pre o ON o.turn = p.source_turn AND o.object = p.source_object",
            )
            .ctx("prepare")?;
        let rows = stmt
            .query_map([], |r| {
                let turn: Option<i64> = r.get(2)?;
                let object: Option<i64> = r.get(3)?;
                Ok(PendingSource {
                    handle: r.get(0)?,
                    inline: r.get(1)?,
                    source: turn.zip(object.map(ObjectId)),
                    source_chunks: r.get(4)?,
                    source_exists: r.get(5)?,
                })
            })
            .ctx("list pending content")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("list pending content")
    }

    /// Entry records whose target is `object`: (turn, dir, name).
    pub fn entries_targeting(&self, object: ObjectId) -> MetaResult<Vec<(i64, ObjectId, Vec<u8>)>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT turn, dir, name FROM entry_pre WHERE target = ?1 ORDER BY turn")
            .ctx("prepare")?;
        let rows =
            stmt.query_map([object.0], |r| Ok((r.get(0)?, ObjectId(r.get(1)?), r.get(2)?))).ctx("list entries")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("list entries")
    }

    /// Drops the object record (turn, object) whose content is lost, and
    /// marks the object's state unknown for the checkpoints that needed
    /// it (a `tainted` row at `turn + 1`): their views then refuse to show
    /// it, rather than show a later version as if it were that one.
    pub fn drop_lost_record(&self, turn: i64, object: ObjectId) -> MetaResult<()> {
        self.atomic(|m| {
            m.count_lists(
                "DELETE FROM object_pre WHERE turn = ?1 AND object = ?2 RETURNING chunks",
                params![turn, object.0],
                -1,
            )?;
            m.taint(object, turn + 1)
        })
    }

    /// Forgets the cached content of an object (its chunk list is damaged):
    /// the next capture reads the file again.
    pub fn forget_known_content(&self, object: ObjectId) -> MetaResult<()> {
        self.exec("DELETE FROM known_content WHERE object = ?1", [object.0]).ctx("forget known content")?;
        Ok(())
    }

    /// Runs `f` in one transaction (inside an open batch: a savepoint of
    /// it, all or nothing, committed with the batch).
    pub fn transaction<T>(&self, f: impl FnOnce(&Meta) -> MetaResult<T>) -> MetaResult<T> {
        if self.batch.get() {
            return self.enclosed(["SAVEPOINT tx", "RELEASE tx", "ROLLBACK TO tx; RELEASE tx"], f);
        }
        self.enclosed(["BEGIN IMMEDIATE", "COMMIT", "ROLLBACK"], f)
    }

    /// Opens a batch: one transaction that the transactions after it join
    /// as savepoints until [`Meta::commit_batch`], so many small changes
    /// cost one commit. Only for changes that are durable elsewhere until
    /// then (records of the journal log): a crash loses the whole batch.
    pub fn open_batch(&self) -> MetaResult<()> {
        if !self.batch.get() {
            self.exec("BEGIN IMMEDIATE", []).ctx("begin a batch")?;
            self.batch.set(true);
        }
        Ok(())
    }

    /// Rolls the open batch (if any) back.
    pub fn rollback_batch(&self) {
        if self.batch.replace(false) {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }

    /// Whether a batch is open.
    pub fn in_batch(&self) -> bool {
        self.batch.get()
    }

    /// Commits the open batch (if any). If the commit fails, the batch is
    /// rolled back: nothing of it is kept.
    pub fn commit_batch(&self) -> MetaResult<()> {
        if !self.batch.replace(false) {
            return Ok(());
        }
        if let Err(e) = self.exec("COMMIT", []).ctx("commit a batch") {
            let _ = self.conn.execute_batch("ROLLBACK");
            return Err(e);
        }
        Ok(())
    }

    /// Runs `f` between `begin` and `commit`, or `rollback` if it fails.
    pub(crate) fn enclosed<T>(
        &self,
        [begin, commit, rollback]: [&str; 3],
        f: impl FnOnce(&Meta) -> MetaResult<T>,
    ) -> MetaResult<T> {
        self.exec(begin, []).ctx("begin")?;
        match f(self) {
            Ok(v) => {
                self.exec(commit, []).ctx("commit")?;
                Ok(v)
            }
            Err(e) => {
                let _ = self.conn.execute_batch(rollback);
                Err(e)
            }
        }
    }
}

/// Encodes xattrs as: count (u32 LE), then for each: name length (u32 LE),
/// name, value length (u32 LE), value. Sorted by name.
pub fn encode_xattrs(mut attrs: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<u8> {
    attrs.sort();
    let mut out = Vec::new();
    out.extend_from_slice(&(attrs.len() as u32).to_le_bytes());
    for (n, v) in attrs {
        out.extend_from_slice(&(n.len() as u32).to_le_bytes());
        out.extend_from_slice(&n);
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(&v);
    }
    out
}

/// Inverse of `encode_xattrs`.
pub fn decode_xattrs(mut b: &[u8]) -> MetaResult<Vec<(Vec<u8>, Vec<u8>)>> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> MetaResult<&'a [u8]> {
        if b.len() < n {
            return Err(MetaError::Malformed { what: "xattr list" });
        }
        let (h, t) = b.split_at(n);
        *b = t;
        Ok(h)
    }
    fn u32_of(b: &mut &[u8]) -> MetaResult<usize> {
        let raw = take(b, 4)?;
        Ok(u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]) as usize)
    }
    if b.is_empty() {
        return Ok(Vec::new());
    }
    let count = u32_of(&mut b)?;
    let mut out = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let nl = u32_of(&mut b)?;
        let n = take(&mut b, nl)?.to_vec();
        let vl = u32_of(&mut b)?;
        let v = take(&mut b, vl)?.to_vec();
        out.push((n, v));
    }
    if !b.is_empty() {
        return Err(MetaError::Malformed { what: "xattr list" });
    }
    Ok(out)
}

/// A plain file's state of `size` bytes without content, for tests and
/// the areas' kits.
#[cfg(any(test, feature = "test-kit"))]
pub(crate) fn test_file_state(size: u64) -> ObjectState {
    ObjectState {
        kind: 1,
        perm: 0o644,
        uid: 0,
        gid: 0,
        rdev: 0,
        size,
        mtime_ns: 1,
        ctime_ns: 2,
        nlink: 1,
        target: None,
        xattrs: Vec::new(),
        content: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each error of this module, through the one boundary ([`AsErrno`]).
    #[test]
    fn errno_mapping_table() {
        let cases: Vec<(Box<dyn AsErrno>, i32, &str)> = vec![
            (Box::new(sqlite_failure(13)), libc::ENOSPC, "SQLITE_FULL"),
            (Box::new(sqlite_failure(10)), libc::EIO, "SQLITE_IOERR"),
            (Box::new(sqlite_failure(8)), libc::EROFS, "SQLITE_READONLY"),
            (Box::new(sqlite_failure(11)), libc::EIO, "SQLITE_CORRUPT"),
        ];
        for (err, want, what) in cases {
            assert_eq!(err.errno(), Errno(want), "{what}");
        }
    }

    fn state(size: u64) -> ObjectState {
        test_file_state(size)
    }

    #[test]
    fn a_full_disk_reads_as_the_kernel_says_it() {
        let full = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            Some("database or disk is full".into()),
        );
        let e = MetaError::Sqlite { context: "seal".into(), source: full };
        assert!(e.to_string().contains("No space left on device"), "{e}");
        assert_eq!(e.errno(), Errno::ENOSPC);
    }

    /// Owned alone, the database is locked at once and stays locked
    /// across writes and reads: another connection cannot read it (it
    /// gives up after its busy timeout) until the lock is given up, and
    /// what was written meanwhile is there.
    #[test]
    fn a_database_owned_alone_is_locked_to_others_until_given_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.sqlite");
        let m = Meta::open(&path).unwrap();
        m.set_state("k", "v").unwrap();
        m.own_alone(true).unwrap();
        let other = || {
            let conn = Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
            conn.busy_timeout(std::time::Duration::from_millis(50)).unwrap();
            conn.query_row("SELECT value FROM state WHERE key = 'k'", [], |r| r.get::<_, String>(0))
        };
        let locked = other().expect_err("another connection reads a database owned alone");
        assert_eq!(locked.sqlite_error_code(), Some(rusqlite::ErrorCode::DatabaseBusy), "{locked}");
        m.set_state("k", "v").unwrap();
        assert_eq!(m.get_state("k").unwrap().as_deref(), Some("v"));
        assert!(other().is_err(), "the lock is kept across a write and a read");
        m.own_alone(false).unwrap();
        assert_eq!(other().unwrap(), "v");
        m.set_state("k", "w").unwrap();
        assert_eq!(other().unwrap(), "w", "given up, the lock is not kept after the next write");
    }

    #[test]
    fn state_bytes_round_trip_and_read_older_text_values() {
        let dir = tempfile::tempdir().unwrap();
        let m = Meta::open(&dir.path().join("m.sqlite")).unwrap();
        m.set_state_bytes("workspace", b"/ws\xff").unwrap();
        assert_eq!(m.get_state_bytes("workspace").unwrap().as_deref(), Some(&b"/ws\xff"[..]));
        m.set_state("workspace", "/older").unwrap();
        assert_eq!(m.get_state_bytes("workspace").unwrap().as_deref(), Some(&b"/older"[..]));
        assert_eq!(m.get_state_bytes("missing").unwrap(), None);
    }

    #[test]
    fn schema_is_versioned_and_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.sqlite");
        {
            let m = Meta::open(&p).unwrap();
            m.set_state("k", "v").unwrap();
        }
        let m = Meta::open(&p).unwrap();
        assert_eq!(m.get_state("k").unwrap().as_deref(), Some("v"));
        let v: i64 = m.conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(v, SCHEMA_VERSION);
    }

    #[test]
    fn version_one_database_is_migrated() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.sqlite");
        {
            let m = Meta::open(&p).unwrap();
            m.conn.execute_batch(&format!("{DROP_V6} DROP TABLE tainted; DROP TABLE pending; ALTER TABLE objects DROP COLUMN born_turn; PRAGMA user_version = 1")).unwrap();
        }
        let m = Meta::open(&p).unwrap();
        let a = m.intern_object(b"a", 1).unwrap();
        m.taint(a, 4).unwrap();
        assert_eq!(m.taint_after(a, 2).unwrap(), Some(4));
        assert_eq!(m.taint_after(a, 4).unwrap(), None);
    }

    #[test]
    fn pending_membership_and_state_prefixes() {
        let dir = tempfile::tempdir().unwrap();
        let m = Meta::open(&dir.path().join("m.sqlite")).unwrap();
        m.add_pending(b"\x01", &[0xaa], PendingList::Inline(b"\xbb"), 7).unwrap();
        assert!(m.is_pending(b"\x01").unwrap());
        assert!(!m.is_pending(b"\x02").unwrap());
        m.remove_pending(b"\x01").unwrap();
        assert!(!m.is_pending(b"\x01").unwrap());

        for k in ["settled:01", "settled:02", "settle", "other"] {
            m.set_state(k, "").unwrap();
        }
        m.remove_states_with_prefix("settled:").unwrap();
        let left: Vec<bool> =
            ["settled:01", "settled:02", "settle", "other"].iter().map(|k| m.get_state(k).unwrap().is_some()).collect();
        assert_eq!(left, [false, false, true, true]);
    }

    #[test]
    fn pending_rows_carry_their_chunk_list_or_point_at_a_record() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.sqlite");
        {
            // A version 4 database with an inline pending row.
            let m = Meta::open(&p).unwrap();
            m.conn
                .execute_batch(&format!(
                    "{DROP_V6} DROP TABLE pending; CREATE TABLE pending(handle BLOB PRIMARY KEY, \
                     content_hash BLOB NOT NULL, chunks BLOB NOT NULL, mtime_ns INTEGER NOT NULL); \
                     INSERT INTO pending VALUES (x'01', x'aa', x'bb', 7); PRAGMA user_version = 4",
                ))
                .unwrap();
        }
        let m = Meta::open(&p).unwrap();
        let a = m.intern_object(b"a", 1).unwrap();
        let mut with = state(3);
        with.content = Some((vec![0xcc], vec![0xdd, 0xee]));
        m.record_object(2, a, &with, None).unwrap();
        m.add_pending(b"\x02", &[0xcc], PendingList::Record(2, a), 8).unwrap();
        m.add_pending(b"\x03", &[0xcc], PendingList::Record(9, a), 9).unwrap();
        let rows = m.all_pending().unwrap();
        let by_handle = |h: u8| rows.iter().find(|r| r.handle == [h]).unwrap();
        assert_eq!(by_handle(1).chunks.as_deref(), Some(&[0xbb][..]), "the migrated inline row");
        assert_eq!(by_handle(1).mtime_ns, 7);
        assert_eq!(by_handle(2).chunks.as_deref(), Some(&[0xdd, 0xee][..]), "resolved from object_pre");
        assert_eq!(by_handle(3).chunks, None, "a record that does not exist resolves to nothing");
        assert!(
            m.conn.execute("INSERT INTO pending(handle, content_hash, mtime_ns) VALUES (x'04', x'aa', 1)", []).is_err()
        );
    }

    /// What a version 5 database lacks.
    const DROP_V6: &str = "DROP TABLE attic; DROP TABLE intents; DROP TABLE turn_summaries; DROP TABLE turn_programs; \
        DROP INDEX objects_by_born; DROP INDEX entry_pre_by_target; DROP INDEX checkpoints_by_parent; DROP TABLE chunk_refs;";

    #[test]
    fn version_nine_database_gets_chunk_counts_from_its_lists() {
        use crate::store::{ChunkId, ChunkSpan, ContentRef};
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.sqlite");
        let (a, b) = (ChunkId::of(b"a"), ChunkId::of(b"b"));
        let list = |ids: &[ChunkId]| {
            let chunks = ids.iter().map(|&id| ChunkSpan { id, len: 1 }).collect();
            ContentRef { hash: ids[0], size: ids.len() as u64, chunks }.encode_chunks()
        };
        {
            let m = Meta::open(&p).unwrap();
            let mut s = test_file_state(2);
            s.content = Some((vec![1], list(&[a, a])));
            m.record_object(0, ObjectId(1), &s, None).unwrap();
            s.content = Some((vec![2], list(&[a, b])));
            m.record_object(1, ObjectId(1), &s, None).unwrap();
            m.add_pending(b"h", &[3], PendingList::Inline(&list(&[b])), 0).unwrap();
            m.conn
                .execute_batch(
                    "DROP INDEX objects_by_born; DROP INDEX entry_pre_by_target; DROP INDEX checkpoints_by_parent; \
                     DROP TABLE chunk_refs; PRAGMA user_version = 9",
                )
                .unwrap();
        }
        let m = Meta::open(&p).unwrap();
        assert_eq!((m.chunk_count(&a).unwrap(), m.chunk_count(&b).unwrap()), (Some(3), Some(2)));
        assert_eq!(m.wrong_chunk_counts().unwrap(), vec![]);
        // A wrong count is found, and recounting puts it right.
        m.conn.execute("UPDATE chunk_refs SET refs = 1 WHERE chunk = ?1", [a.as_bytes().as_slice()]).unwrap();
        let wrong = m.wrong_chunk_counts().unwrap();
        assert_eq!(wrong, vec![WrongCount { chunk: a, stored: Some(1), actual: 3 }]);
        m.recount_chunks().unwrap();
        assert_eq!(m.wrong_chunk_counts().unwrap(), vec![]);
        // The pending file settles: b is still held by the record of turn 1.
        m.remove_pending(b"h").unwrap();
        assert_eq!(m.chunk_count(&b).unwrap(), Some(1));
        assert!(m.unreferenced_chunks(usize::MAX).unwrap().is_empty());
    }

    /// Schema 14: the bypassed ranges that collections before it left
    /// with no kept checkpoint in them go at the migration; the others stay.
    #[test]
    fn version_thirteen_database_drops_bypassed_ranges_no_checkpoint_lies_in() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.sqlite");
        {
            let m = Meta::open(&p).unwrap();
            m.conn
                .execute_batch(
                    "INSERT INTO checkpoints(id, reason, created_at) VALUES (0, 'mount', 1), (4, 'turn', 2), (9, 'turn', 3);
                     INSERT INTO bypassed(object, first, last) VALUES (1, 1, 3), (2, 2, 4), (3, 5, 8), (4, 0, 0), (5, 3, 9);
                     DROP INDEX bypassed_by_first; PRAGMA user_version = 13",
                )
                .unwrap();
        }
        let m = Meta::open(&p).unwrap();
        let v: i64 = m.conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(v, SCHEMA_VERSION);
        let objects: Vec<i64> = {
            let mut stmt =
                m.conn.prepare("SELECT object FROM bypassed INDEXED BY bypassed_by_first ORDER BY object").unwrap();
            stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
        };
        assert_eq!(objects, vec![2, 4, 5]);
    }

    #[test]
    fn version_seven_database_gets_an_attic_table() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.sqlite");
        {
            let m = Meta::open(&p).unwrap();
            m.conn.execute_batch("DROP TABLE attic; PRAGMA user_version = 7").unwrap();
        }
        let m = Meta::open(&p).unwrap();
        let v: i64 = m.conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(v, SCHEMA_VERSION);
        let a = m.intern_object(b"a", 1).unwrap();
        assert_eq!(m.attic_since(a).unwrap(), None);
        m.attic_put(a, Some(3)).unwrap();
        assert_eq!(m.attic_since(a).unwrap(), Some(Some(3)));
        assert_eq!(m.attic_objects().unwrap(), vec![a]);
        m.attic_take(a).unwrap();
        assert_eq!(m.attic_since(a).unwrap(), None);
        assert!(m.attic_objects().unwrap().is_empty());
    }

    #[test]
    fn version_five_database_gets_turn_summaries() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.sqlite");
        {
            let m = Meta::open(&p).unwrap();
            let a = m.intern_object(b"a", 1).unwrap();
            m.record_object(3, a, &state(1), Some("sh")).unwrap();
            m.conn.execute_batch(&format!("{DROP_V6} PRAGMA user_version = 5")).unwrap();
        }
        let m = Meta::open(&p).unwrap();
        let v: i64 = m.conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(v, SCHEMA_VERSION);
        assert!(m.turn_stats().unwrap().is_empty(), "a migrated database has no summaries yet");
        assert_eq!(m.turn_paths(3).unwrap(), None);
        assert_eq!(m.programs_in_turn(3).unwrap().get("sh"), Some(&1), "older records still count");
    }

    #[test]
    fn turn_paths_then_stats_roundtrip() {
        let m = Meta::open_in_memory().unwrap();
        m.set_turn_paths(4, Some(b"a\0b/c\0")).unwrap();
        assert_eq!(m.turn_paths(4).unwrap().as_deref(), Some(&b"a\0b/c\0"[..]));
        m.set_turn_paths(5, None).unwrap();
        assert_eq!(m.turn_paths(5).unwrap(), None, "a whole-tree turn");
        assert!(m.turn_stats().unwrap().is_empty(), "paths alone are not statistics");
        let stats = TurnStats {
            files_added: 1,
            files_modified: 2,
            files_deleted: 3,
            lines_added: 40,
            lines_removed: 50,
            programs: [("cp".to_string(), 7), ("sh".to_string(), 1)].into(),
        };
        m.set_turn_stats(4, &stats).unwrap();
        m.set_turn_stats(4, &stats).unwrap();
        let all = m.turn_stats().unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[&4], stats);
        assert_eq!(m.turn_stats_of(4).unwrap(), Some(stats));
        assert_eq!(m.turn_stats_of(5).unwrap(), None);
        assert_eq!(m.turn_paths(4).unwrap().as_deref(), Some(&b"a\0b/c\0"[..]), "the paths stay");
    }

    #[test]
    fn version_six_database_gets_intents_which_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.sqlite");
        {
            let m = Meta::open(&p).unwrap();
            m.conn.execute_batch("DROP TABLE attic; DROP TABLE intents; PRAGMA user_version = 6").unwrap();
        }
        let m = Meta::open(&p).unwrap();
        assert!(m.open_intents().unwrap().is_empty());
        let mut i = Intent {
            id: 0,
            op: IntentOp::Restore,
            checkpoint: 3,
            undo_checkpoint: 7,
            paths: vec![b"a/b".to_vec(), b"\xff c".to_vec()],
            started_at: 42,
        };
        i.id = m.begin_intent(&i).unwrap();
        let r = Intent { op: IntentOp::Rewind, paths: Vec::new(), ..i.clone() };
        let rid = m.begin_intent(&r).unwrap();
        assert_eq!(m.open_intents().unwrap(), vec![i.clone(), Intent { id: rid, ..r }]);
        m.end_intent(rid).unwrap();
        assert_eq!(m.open_intents().unwrap(), vec![i]);
    }

    #[test]
    fn newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.sqlite");
        Connection::open(&p).unwrap().execute_batch("PRAGMA user_version = 99").unwrap();
        assert!(matches!(Meta::open(&p), Err(MetaError::TooNew { found: 99, .. })));
    }

    #[test]
    fn earliest_record_at_or_after_a_turn_wins() {
        let m = Meta::open_in_memory().unwrap();
        let d = m.intern_object(b"dir", 2).unwrap();
        let a = m.intern_object(b"a", 1).unwrap();
        assert!(m.record_entry(3, d, b"x", None, None).unwrap());
        assert!(!m.record_entry(3, d, b"x", Some(a), None).unwrap(), "first record of a turn wins");
        m.record_entry(5, d, b"x", Some(a), None).unwrap();
        assert_eq!(m.entry_at(d, b"x", 0).unwrap(), Some(None));
        assert_eq!(m.entry_at(d, b"x", 4).unwrap(), Some(Some(a)));
        assert_eq!(m.entry_at(d, b"x", 6).unwrap(), None);
        let listing = m.entries_of_dir(d, 4).unwrap();
        assert_eq!(listing, vec![(b"x".to_vec(), Some(a))]);
    }

    #[test]
    fn content_is_added_to_a_meta_only_record_once() {
        let m = Meta::open_in_memory().unwrap();
        let a = m.intern_object(b"a", 1).unwrap();
        m.record_object(1, a, &state(10), None).unwrap();
        let mut with = state(99);
        with.content = Some((vec![1], vec![2]));
        m.record_object(1, a, &with, None).unwrap();
        let got = m.object_at(a, 1).unwrap().unwrap();
        assert_eq!(got.size, 10, "attributes stay those of the first record");
        assert_eq!(got.content, Some((vec![1], vec![2])));
        let mut other = state(5);
        other.content = Some((vec![3], vec![4]));
        m.record_object(1, a, &other, None).unwrap();
        assert_eq!(m.object_at(a, 1).unwrap().unwrap().content, Some((vec![1], vec![2])), "content is never replaced");
    }

    #[test]
    fn xattrs_roundtrip_and_reject_garbage() {
        let x = vec![(b"user.b".to_vec(), b"2".to_vec()), (b"user.a".to_vec(), vec![])];
        let enc = encode_xattrs(x.clone());
        let mut sorted = x;
        sorted.sort();
        assert_eq!(decode_xattrs(&enc).unwrap(), sorted);
        assert!(decode_xattrs(&enc[..enc.len() - 1]).is_err());
        assert!(decode_xattrs(&[5, 0, 0, 0]).is_err());
    }
}
