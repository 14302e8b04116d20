//! The journal: turns, checkpoints, and the pre-images recorded before
//! every change. It knows nothing of FUSE or of how the live tree reads
//! the backing files: the live tree gathers an object's state and hands it
//! over; the journal decides whether it is needed, stores it, and makes it
//! durable before the change goes ahead.
//!
//! Concurrency: every mutation holds the turn gate shared while it records
//! and applies its change; sealing a checkpoint holds it exclusively, so a
//! change is entirely in one turn.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use log::info;
use serde::Serialize;

mod bypass;
pub use bypass::written_at;
pub mod record_log;
pub mod reference;
pub mod retention;
pub mod store_check;
pub mod store_identity;

use crate::error::{AsErrno, Errno};
use crate::meta::{
    Checkpoint, CheckpointId, Intent, IntentOp, Meta, MetaError, MetaResult, ObjectId, ObjectState, Reason,
};
use crate::meta::{Checkpoints, Intents, Objects, PreImages};
use crate::store::{ChunkStore, ContentRef, StoreError};
use crate::sys::FileHandle;
use crate::text::{quote, quoted};
use record_log::{LogRecord, RecordLog};

/// Errors while recording.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error(transparent)]
    Meta(#[from] MetaError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot read {what}: {source}")]
    Read { what: String, source: std::io::Error },
    /// `reference` is shown quoted ([`quoted`]): it may be an agent's id.
    #[error("unknown checkpoint {}; {known}", quoted(reference))]
    UnknownCheckpoint { reference: String, known: String },
    #[error("checkpoint reference {} is ambiguous: it matches checkpoints {matches}", quoted(reference))]
    Ambiguous { reference: String, matches: String },
    #[error("message id {id} is refused: {why}")]
    BadMessageId { id: String, why: String },
    #[error("message id {id} already names checkpoint {checkpoint}; each message id names one checkpoint")]
    DuplicateMessageId { id: String, checkpoint: i64 },
    /// `id` and `other` are shown quoted ([`quoted`]).
    #[error(
        "message id {} is refused: {} message id {} (checkpoint {checkpoint}), so a short reference could mean \
         either; a message id may not be a prefix of another",
        quoted(id),
        if other.starts_with(id.as_str()) { "it begins" } else { "it begins with" },
        quoted(other)
    )]
    MessageIdOverlaps { id: String, other: String, checkpoint: i64 },
    #[error("snapshot name {name} is refused: {why}")]
    BadSnapshotName { name: String, why: String },
    #[error("{name} already names checkpoint {checkpoint}; a name names one checkpoint")]
    DuplicateSnapshotName { name: String, checkpoint: i64 },
    #[error("checkpoint {checkpoint} is already named {name}; a checkpoint has one name")]
    AlreadyNamed { checkpoint: i64, name: String },
    #[error("{}", forgotten_message(reference, forgotten))]
    Forgotten { reference: String, forgotten: Box<crate::meta::Forgotten> },
    #[error("checkpoint {checkpoint} is kept: {why}")]
    Kept { checkpoint: i64, why: String },
    #[error(
        "checkpoint {checkpoint} was sealed, but the metadata could not be made durable ({source}); \
         it is lost if the machine loses power before the next seal succeeds"
    )]
    NotDurable { checkpoint: i64, source: MetaError },
    #[error("the mount is read-only: {0}; unmount it and mount it again")]
    Failed(String),
}

/// The longest message id, in bytes: it is a directory name under
/// `.rewindfs/messages/`, with room to spare under NAME_MAX.
pub const MESSAGE_ID_MAX: usize = 128;

/// Checks a message id: it names a directory under `.rewindfs/messages/`
/// and is a checkpoint reference on the command line, and it comes from the
/// agent's side, so it is printed on the owner's terminal. Refused: empty,
/// longer than [`MESSAGE_ID_MAX`] bytes, control characters, `/`, `.` and
/// `..`, a leading `-` (read as an option), and the forms of the other
/// references (all digits: a checkpoint number; `~N`).
pub fn check_message_id(id: &str) -> Result<(), JournalError> {
    match refusal(id) {
        None => Ok(()),
        Some(why) => Err(JournalError::BadMessageId { id: quoted(&truncate_for_message(id)), why }),
    }
}

/// Why `id` cannot be a word that names a checkpoint (a message id or a
/// snapshot name): see [`check_message_id`].
fn refusal(id: &str) -> Option<String> {
    if id.is_empty() {
        Some("it is empty".to_string())
    } else if id.len() > MESSAGE_ID_MAX {
        Some(format!("it is {} bytes long; at most {MESSAGE_ID_MAX}", id.len()))
    } else if id.chars().any(char::is_control) {
        Some("it holds control characters (newlines, escapes)".to_string())
    } else if id.contains('/') || id == "." || id == ".." {
        Some("it is not a file name (a '/', or '.' or '..')".to_string())
    } else if id.starts_with('-') {
        Some("it starts with '-' (it would read as an option)".to_string())
    } else if id.bytes().all(|b| b.is_ascii_digit()) {
        Some("it is all digits, the form of a checkpoint number".to_string())
    } else if id.starts_with('~') {
        Some("it starts with '~', the form of a ~N reference".to_string())
    } else if id.starts_with(reference::EXACT) {
        Some("it starts with '=', the form of an exact label reference".to_string())
    } else {
        None
    }
}

/// What a reference to a forgotten checkpoint is told.
fn forgotten_message(reference: &str, f: &crate::meta::Forgotten) -> String {
    if f.by == retention::RESET {
        return format!(
            "checkpoint {} was deleted at {} by `rewindfs reset`, with all the history before it (a reset cannot be undone)",
            f.checkpoint,
            crate::text::rfc3339(f.at)
        );
    }
    let how = if f.by == "retention" {
        "collected by retention (`rewindfs gc`)".to_string()
    } else {
        "forgotten (`rewindfs forget`)".to_string()
    };
    let named = match &f.message_id {
        Some(m) if m == reference => format!("message {} (checkpoint {})", quoted(reference), f.checkpoint),
        _ => format!("checkpoint {}", f.checkpoint),
    };
    let into = match f.merged_into {
        Some(p) => format!("; its changes are now part of checkpoint {p}'s turn"),
        None => String::new(),
    };
    format!("{named} was {how} at {}{into}", crate::text::rfc3339(f.at))
}

/// At most 64 characters of `s`, for an error message.
fn truncate_for_message(s: &str) -> String {
    let mut out: String = s.chars().take(64).collect();
    if out.len() < s.len() {
        out.push_str("...");
    }
    out
}

impl AsErrno for JournalError {
    /// The errno a refused change answers with.
    fn errno(&self) -> Errno {
        match self {
            JournalError::Meta(e) | JournalError::NotDurable { source: e, .. } => e.errno(),
            JournalError::Store(e) => e.errno(),
            JournalError::Read { source, .. } => source.errno(),
            JournalError::Failed(_) => Errno::EROFS,
            JournalError::UnknownCheckpoint { .. } | JournalError::Ambiguous { .. } => Errno::EIO,
            JournalError::Forgotten { .. } => Errno::EIO,
            JournalError::BadMessageId { .. }
            | JournalError::DuplicateMessageId { .. }
            | JournalError::MessageIdOverlaps { .. }
            | JournalError::BadSnapshotName { .. }
            | JournalError::DuplicateSnapshotName { .. }
            | JournalError::AlreadyNamed { .. }
            | JournalError::Kept { .. } => Errno::EINVAL,
        }
    }
}

pub type JournalResult<T> = Result<T, JournalError>;

/// The answer of a query through [`Journal::with_meta`], which can be
/// refused when the journal's records cannot be folded first.
/// How long a process's command name is taken as read ([`Journal::program`]):
/// a burst of requests reads `/proc` once, and a program a process `exec`s
/// is named from then on.
const PROGRAM_NAME_FRESH: Duration = Duration::from_millis(20);

/// What the journal's lock is called in a refusal ([`crate::poison`]).
const JOURNAL_STATE: &str = "the journal's state";

pub trait Queried {
    fn unfolded(e: MetaError) -> Self;
}

impl<X, E: From<MetaError>> Queried for Result<X, E> {
    fn unfolded(e: MetaError) -> Self {
        Err(e.into())
    }
}

/// Labels given to a checkpoint by whoever seals it.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct TurnInfo {
    pub message_id: Option<String>,
    pub session: Option<String>,
    pub label: Option<String>,
    /// The uid that asked for the seal, set by the daemon from its socket:
    /// never taken from what a client sends (skipped by serde).
    #[serde(skip)]
    pub sealed_by: Option<u32>,
}

struct Inner {
    meta: Meta,
    /// The current turn (= the newest checkpoint's number).
    turn: i64,
    entries_done: HashSet<(ObjectId, Vec<u8>)>,
    /// Objects named by this turn's entry records (as a directory or a
    /// target): their ctime moved through the mount without a record of
    /// their own (`bypass.rs`).
    named_done: HashSet<ObjectId>,
    meta_done: HashSet<ObjectId>,
    content_done: HashSet<ObjectId>,
    /// Files created in the current turn (by file handle): no checkpoint
    /// has seen them, so removing one needs no pre-image.
    born: HashSet<Vec<u8>>,
    /// Objects created in the current turn (any kind, by id): their
    /// births are in the log, not yet in the database.
    born_ids: HashSet<ObjectId>,
    /// When this journal was opened (ns): changes before it are found by
    /// the scan at mount, not by the bypass check (`bypass.rs`).
    opened_ns: i64,
    ids: HashMap<Vec<u8>, ObjectId>,
    /// The handles objects had before a rewind gave them a new inode
    /// (`rebind_object`), for the life of the mount: the numbers the
    /// kernel holds for views may name an object by such a handle
    /// (`object_id_ever`).
    former_handles: HashMap<Vec<u8>, ObjectId>,
    /// Records written in the current turn.
    changes: u64,
    last_change: Option<Instant>,
    turn_started: Instant,
    /// Changes made outside the mount after this time (ns) are not in the
    /// journal; `None` on the first mount.
    outside_since_ns: Option<i64>,
    /// The daemon of the previous mount did not unmount cleanly.
    unclean: bool,
    /// Where records go first (None: straight into SQLite, for tests).
    log: Option<RecordLog>,
    /// Logged records not yet folded into SQLite.
    unfolded: Vec<LogRecord>,
    /// A batch is wanted ([`Journal::batched`]): folds go into one SQLite
    /// transaction, committed at its end or every `FOLD_BATCH` records.
    batching: bool,
    /// Records folded into the open batch, still in the log until it
    /// commits (put back into `unfolded` if the commit fails).
    batched: Vec<LogRecord>,
    next_object_id: i64,
    /// Command names by pid, for this turn, with when each was read.
    programs: HashMap<u32, (Option<String>, Instant)>,
    /// Readers of the past against writers: see [`Mark`].
    moves: Moves,
}

thread_local! {
    /// How many [`Gate`]s and [`ExclusiveGate`]s this thread holds.
    static HOLDS_GATE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The turn gate, held shared by one mutation while it records and applies
/// its change ([`Journal::gate`]).
pub struct Gate<'a> {
    _shared: RwLockReadGuard<'a, ()>,
}

/// The turn gate held exclusively (a seal, a collection step, a reader
/// holding changes back): counted as held by this thread, like [`Gate`].
pub struct ExclusiveGate<'a> {
    _exclusive: std::sync::RwLockWriteGuard<'a, ()>,
}

impl Drop for ExclusiveGate<'_> {
    fn drop(&mut self) {
        HOLDS_GATE.with(|n| n.set(n.get().saturating_sub(1)));
    }
}

impl Drop for Gate<'_> {
    fn drop(&mut self) {
        HOLDS_GATE.with(|n| n.set(n.get().saturating_sub(1)));
    }
}

/// A point in the sequence of the journal's records, taken by a reader of
/// a checkpoint before it reads the live tree. Every change made through
/// the mount appends the record that preserves what it changes before it
/// changes it, so an answer read from the live object after `mark` is the
/// past unless a record about that object was appended since
/// ([`Journal::moved_since`]); then the reader reads again, and finds the
/// record. Readers take no lock a writer waits for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mark(u64);

/// The journal's side of [`Mark`]: a sequence number per record, and the
/// newest of each object recorded in the open turn. Bounded by the turn:
/// a seal forgets them and moves the floor, so a mark taken before the
/// seal reads again once (a reader cannot tell what the forgotten turn
/// touched).
#[derive(Default)]
struct Moves {
    seq: u64,
    newest: HashMap<ObjectId, u64>,
    /// Marks at or before this may have been moved by anything.
    floor: u64,
}

impl Moves {
    fn recorded(&mut self, record: &LogRecord) {
        self.seq += 1;
        for id in record.objects() {
            self.newest.insert(id, self.seq);
        }
    }

    /// A change to the history that names no object one by one (a seal,
    /// a rewind's own moves, a collection): every mark before it is stale.
    fn everything(&mut self) {
        self.seq += 1;
        self.newest.clear();
        self.floor = self.seq;
    }

    fn object(&mut self, id: ObjectId) {
        self.seq += 1;
        self.newest.insert(id, self.seq);
    }
}

/// Records folded into SQLite in one transaction at most this many at a time.
const FOLD_BATCH: usize = 8192;

impl Inner {
    /// Makes a record durable against a crash of the daemon, before the
    /// change it describes is applied.
    fn append(&mut self, record: LogRecord) -> JournalResult<()> {
        let appended = self.append_now(record);
        // Killed with the record durable and its change not yet applied.
        crate::faults::record();
        appended
    }

    /// Logs a record that protects no change: written with the next
    /// `append` (see `RecordLog::append_deferred`).
    fn append_deferred(&mut self, record: LogRecord) -> JournalResult<()> {
        self.log_record(record, true)
    }

    fn append_now(&mut self, record: LogRecord) -> JournalResult<()> {
        self.log_record(record, false)
    }

    fn log_record(&mut self, record: LogRecord, deferred: bool) -> JournalResult<()> {
        // Before the record can be read, as the change it protects comes
        // after it: a reader that sees the change sees the move.
        self.moves.recorded(&record);
        match &mut self.log {
            Some(log) => {
                let logged = if deferred { log.append_deferred(&record) } else { log.append(&record) };
                logged.map_err(|e| JournalError::Read { what: "the journal log".into(), source: e })?;
                self.unfolded.push(record);
                if self.unfolded.len() >= FOLD_BATCH {
                    self.fold()?;
                }
                Ok(())
            }
            None => Ok(self.meta.transaction(|m| record_log::fold(m, std::slice::from_ref(&record)))?),
        }
    }

    /// An object id never handed out before.
    fn new_object_id(&mut self) -> JournalResult<ObjectId> {
        if self.next_object_id == 0 {
            self.fold()?;
            self.next_object_id = self.meta.max_object_id()? + 1;
        }
        let id = ObjectId(self.next_object_id);
        self.next_object_id += 1;
        Ok(id)
    }

    /// Folds logged records into SQLite and empties the log.
    fn fold(&mut self) -> JournalResult<()> {
        if self.unfolded.is_empty() {
            return Ok(());
        }
        let ((), emptied) = self.fold_then(|_| Ok(()))?;
        emptied.map_err(|e| JournalError::Read { what: "the journal log".into(), source: e })
    }

    /// Folds logged records into SQLite and runs `f`, in one transaction,
    /// then empties the log; also `f`'s value, and whether emptying the
    /// log worked (everything is committed either way: folding again is
    /// harmless). If the transaction fails (a full disk), nothing of it is
    /// kept and the records wait for the next fold, or that fold would
    /// empty the log and lose them.
    ///
    /// In a batch, the transaction is a savepoint of the batch's and the
    /// log keeps the records until the batch commits.
    fn fold_then<T>(&mut self, f: impl FnOnce(&Meta) -> MetaResult<T>) -> JournalResult<(T, std::io::Result<()>)> {
        if self.batching {
            self.meta.open_batch()?;
        }
        let records = std::mem::take(&mut self.unfolded);
        let done = self.meta.transaction(|m| {
            if !records.is_empty() {
                record_log::fold(m, &records)?;
            }
            f(m)
        });
        let value = match done {
            Ok(v) => v,
            Err(e) => {
                self.unfolded = records;
                return Err(e.into());
            }
        };
        if self.meta.in_batch() {
            self.batched.extend(records);
            if self.batched.len() < FOLD_BATCH {
                return Ok((value, Ok(())));
            }
            return Ok((value, self.commit_batch()?));
        }
        let emptied = match &mut self.log {
            Some(log) if !records.is_empty() => log.clear(),
            _ => Ok(()),
        };
        Ok((value, emptied))
    }

    /// Commits the open batch, with the records logged since it last
    /// folded, then empties the log (the second value: whether that
    /// worked). If the commit fails, nothing of the batch is kept and its
    /// records wait in the log for the next fold.
    fn commit_batch(&mut self) -> JournalResult<std::io::Result<()>> {
        if !self.meta.in_batch() {
            return Ok(Ok(()));
        }
        let folded = std::mem::take(&mut self.unfolded);
        let folded = match self.meta.transaction(|m| record_log::fold(m, &folded)) {
            Ok(()) => folded,
            Err(e) => {
                self.unfolded = folded;
                self.abandon_batch();
                return Err(e.into());
            }
        };
        self.batched.extend(folded);
        if let Err(e) = self.meta.commit_batch() {
            self.abandon_batch();
            return Err(e.into());
        }
        let records = std::mem::take(&mut self.batched);
        Ok(match &mut self.log {
            Some(log) if !records.is_empty() => log.clear(),
            _ => Ok(()),
        })
    }

    /// After a batch failed: rolled back, its records fold again later.
    fn abandon_batch(&mut self) {
        self.meta.rollback_batch();
        let mut records = std::mem::take(&mut self.batched);
        records.append(&mut self.unfolded);
        self.unfolded = records;
    }

    /// Checkpoints the database's WAL into its file, after committing an
    /// open batch (another thread's: SQLite cannot checkpoint inside a
    /// transaction, and answers "database table is locked"). The batch
    /// goes on in a transaction of its own at its next fold.
    fn checkpoint_wal(&mut self) -> JournalResult<()> {
        self.durable()?;
        Ok(self.meta.sync()?)
    }

    /// Commits the open batch before a change that must be durable when
    /// it returns (a transaction of its own, not a fold).
    fn durable(&mut self) -> JournalResult<()> {
        if let Err(e) = self.commit_batch()? {
            log::error!("cannot empty the journal log after folding it: {e}");
        }
        Ok(())
    }

    /// Runs `f` in a transaction of its own, committed when it returns
    /// (after the open batch, if any).
    fn transaction<T>(&mut self, f: impl FnOnce(&Meta) -> MetaResult<T>) -> JournalResult<T> {
        self.durable()?;
        Ok(self.meta.transaction(f)?)
    }
}

/// A content stored in the chunk store and not yet recorded; dropped
/// without [`keep`](UnrecordedContent::keep), its new chunks are taken back.
pub struct UnrecordedContent<'a> {
    pub content: ContentRef,
    added: Vec<crate::store::ChunkId>,
    store: &'a dyn ChunkStore,
    _one_at_a_time: MutexGuard<'a, ()>,
}

impl UnrecordedContent<'_> {
    /// The content was recorded: its chunks stay.
    pub fn keep(mut self) -> ContentRef {
        self.added.clear();
        self.content.clone()
    }
}

impl Drop for UnrecordedContent<'_> {
    fn drop(&mut self) {
        if self.added.is_empty() {
            return;
        }
        if let Err(e) = self.store.discard(&self.added) {
            log::warn!("cannot take back the {} chunks of a content that was not recorded: {e}", self.added.len());
        }
    }
}

/// The journal of one store.
pub struct Journal {
    inner: Mutex<Inner>,
    store: Arc<dyn ChunkStore>,
    gate: RwLock<()>,
    /// Held while one content is stored (see `store_content`).
    content_lock: Mutex<()>,
    /// When each checkpoint was sealed (ms), as views ask it (`bypass.rs`).
    seal_times: Mutex<HashMap<i64, i64>>,
    /// Why the journal takes no more changes (`fail`), if it stopped.
    failure: Mutex<Option<String>>,
    /// `Inner::turn`, readable without the journal's lock (a lookup asks
    /// it; set under the lock and the exclusive gate, as `Inner::turn`).
    turn_now: AtomicI64,
    /// Seals begun plus seals ended: odd while one is in progress (see
    /// [`Journal::seal_sequence`]).
    seal_seq: AtomicU64,
}

/// A seal counted as begun; counted as ended when dropped (on its error
/// paths too).
struct SealInProgress<'j>(&'j AtomicU64);

impl SealInProgress<'_> {
    fn begin(seq: &AtomicU64) -> SealInProgress<'_> {
        seq.fetch_add(1, Ordering::AcqRel);
        SealInProgress(seq)
    }
}

impl Drop for SealInProgress<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal").finish_non_exhaustive()
    }
}

fn now_ms() -> i64 {
    now_ns() / 1_000_000
}

fn now_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

/// State key: when the newest checkpoint was sealed, in ns. After a crash,
/// changes are looked for from there; a checkpoint's `created_at` has only
/// ms, and the changes a rewind makes just before sealing its result share
/// that millisecond: they looked made after it, hence outside the mount.
const SEALED_NS: &str = "sealed_ns";

/// The bytes of pack records (header and stored bytes) the store lists.
fn record_bytes(stats: &crate::store::StoreStats) -> u64 {
    stats.chunks * crate::store::pack::RECORD_HEADER_LEN + stats.stored_bytes
}

/// State key prefix: an object the daemon itself changed since the newest
/// seal with no record naming it (followed by its handle in hex): a
/// rewound file the settler filled (its ctime changed, not its state in
/// history: views showed those bytes already), or an object a rewind
/// recreated under its old identity (a new inode, whose absence at the
/// seal is the entry record). After a crash neither is taken for a change
/// made outside the mount. The stored prefix is that of its first use.
const OWN_CHANGE: &str = "settled:";

/// At most this many former handles are kept (`Inner::former_handles`):
/// one per object a rewind gave a new inode while mounted.
const FORMER_HANDLES_MAX: usize = 1 << 16;

fn own_change_key(handle: &[u8]) -> String {
    let mut key = String::from(OWN_CHANGE);
    for b in handle {
        key.push_str(&format!("{b:02x}"));
    }
    key
}

impl Journal {
    /// Opens the journal over `meta` and `store`, and records a "mount"
    /// checkpoint: the state now. The first ever is checkpoint 0.
    pub fn open(meta: Meta, store: Arc<dyn ChunkStore>) -> JournalResult<Journal> {
        Self::open_with_log(meta, store, None)
    }

    /// Opens with a record log at `log_path`, folding what it holds.
    pub fn open_with_log(meta: Meta, store: Arc<dyn ChunkStore>, log_path: Option<&Path>) -> JournalResult<Journal> {
        let log = match log_path {
            Some(p) => {
                let (log, left) =
                    RecordLog::open(p).map_err(|e| JournalError::Read { what: p.display().to_string(), source: e })?;
                if !left.is_empty() {
                    info!("folding {} records the previous daemon logged", left.len());
                    meta.transaction(|m| record_log::fold(m, &left))?;
                }
                Some(log)
            }
            None => None,
        };
        let newest = meta.checkpoint_back(0)?;
        let last = newest.as_ref().map(|c| c.checkpoint);
        let stats = store.stats()?;
        let store_bytes = stats.stored_bytes as i64;
        let turn = match last {
            None => 0,
            Some(n) => n + 1,
        };
        let clean = meta.get_state("clean_unmount_ns")?.and_then(|v| v.parse::<i64>().ok());
        let outside_since_ns = bypass::unserved_since_ns(&meta)?;
        let unclean = last.is_some() && clean.is_none();
        if unclean {
            log::warn!(
                "the previous daemon did not unmount cleanly; checking for changes made since checkpoint {}",
                last.unwrap_or(0)
            );
        }
        meta.transaction(|m| {
            m.seal(&Checkpoint {
                checkpoint: turn,
                parent: last,
                message_id: None,
                session: None,
                label: None,
                reason: Reason::Mount,
                created_at: now_ms(),
                store_bytes_at_start: store_bytes,
                name: None,
                snapshot_message: None,
                sealed_by: None,
            })?;
            m.set_state(SEALED_NS, &now_ns().to_string())?;
            // The packs were reconciled with the index when the store was
            // opened: what it lists now is on disk.
            m.set_state(crate::meta::SEALED_RECORD_BYTES, &record_bytes(&stats).to_string())?;
            m.set_state("current_turn", &turn.to_string())?;
            m.set_state("clean_unmount_ns", "")
        })?;
        info!("journal opened: checkpoint {turn} records the state at mount");
        Ok(Journal::assemble(meta, store, turn, outside_since_ns, unclean, log))
    }

    fn assemble(
        meta: Meta,
        store: Arc<dyn ChunkStore>,
        turn: i64,
        outside_since_ns: Option<i64>,
        unclean: bool,
        log: Option<RecordLog>,
    ) -> Journal {
        Journal {
            inner: Mutex::new(Inner {
                meta,
                turn,
                entries_done: HashSet::new(),
                named_done: HashSet::new(),
                meta_done: HashSet::new(),
                content_done: HashSet::new(),
                born: HashSet::new(),
                born_ids: HashSet::new(),
                opened_ns: now_ns(),
                ids: HashMap::new(),
                former_handles: HashMap::new(),
                changes: 0,
                last_change: None,
                turn_started: Instant::now(),
                outside_since_ns,
                unclean,
                next_object_id: 0,
                log,
                unfolded: Vec::new(),
                batching: false,
                batched: Vec::new(),
                programs: HashMap::new(),
                moves: Moves::default(),
            }),
            store,
            gate: RwLock::new(()),
            content_lock: Mutex::new(()),
            seal_times: Mutex::new(HashMap::new()),
            failure: Mutex::new(None),
            turn_now: AtomicI64::new(turn),
            seal_seq: AtomicU64::new(0),
        }
    }

    /// A journal over a database and store opened read-only, for `fsck`:
    /// it records no checkpoint and folds no log, so views can be read
    /// without changing anything. Any recording through it fails.
    pub fn read_only(meta: Meta, store: Arc<dyn ChunkStore>) -> JournalResult<Journal> {
        let turn = meta.checkpoint_back(0)?.map_or(0, |c| c.checkpoint);
        let outside_since_ns = bypass::unserved_since_ns(&meta)?;
        Ok(Journal::assemble(meta, store, turn, outside_since_ns, false, None))
    }

    /// Opens the store directory layout: `meta.sqlite` and `chunks/`,
    /// after checking that they are sound and belong together
    /// ([`store_check`], [`store_identity`]).
    pub fn open_dir(dir: &Path) -> crate::Result<Journal> {
        Journal::refuse_damaged(dir)?;
        Journal::open_checked_dir(dir, || {
            crate::store::Address::pack(&crate::store_dir::StoreDir::new(dir).chunks())
                .open()
                .map_err(|e| crate::Error::Daemon(e.to_string()))
        })
    }

    /// As [`Journal::open_dir`], over `chunks` instead of the directory's
    /// packs: an in-memory or fault-injecting store that a test keeps
    /// across a simulated crash and reopen. The directory's own checks
    /// (packs against the database) do not apply to it.
    pub fn open_dir_with(dir: &Path, chunks: Arc<dyn ChunkStore>) -> crate::Result<Journal> {
        Journal::open_checked_dir(dir, || Ok(chunks))
    }

    fn refuse_damaged(dir: &Path) -> crate::Result<()> {
        // Before anything writes: an empty or damaged database would
        // otherwise be recreated or used as if it were the history.
        let damage = store_check::store_damage(dir);
        if !damage.is_empty() {
            let what: Vec<String> = damage.into_iter().map(|d| d.detail).collect();
            return Err(crate::Error::kind_of(
                crate::error::ErrorKind::Failed,
                format!(
                    "store {} is damaged, so it was not mounted: {}. `rewindfs fsck --store {}` says what is lost",
                    dir.display(),
                    what.join("; "),
                    dir.display()
                ),
            ));
        }
        Ok(())
    }

    fn open_checked_dir(
        dir: &Path,
        chunks: impl FnOnce() -> crate::Result<Arc<dyn ChunkStore>>,
    ) -> crate::Result<Journal> {
        let meta = store_identity::open_checked(dir)?;
        let chunks = chunks()?;
        let journal = Journal::open_with_log(meta, chunks, Some(&crate::store_dir::StoreDir::new(dir).journal_log()))
            .map_err(|e| crate::Error::Daemon(e.to_string()))?;
        if let Some(log) = &mut journal.lock().log {
            log.clear().map_err(|e| crate::Error::io("cannot empty the journal log", e))?;
        }
        // A collection the previous daemon was killed in.
        journal
            .finish_collection(&crate::store_dir::StoreDir::new(dir).attic())
            .map_err(|e| crate::Error::Daemon(e.to_string()))?;
        Ok(journal)
    }

    /// The journal's state. Once a panic left it held, the mount takes no
    /// more changes (as `fail` says) and every request that needs the
    /// state is refused ([`crate::poison`]): a seal, a record or a query
    /// could otherwise build on a half-made change.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        let taken = self.inner.lock();
        if taken.is_err() {
            self.fail(crate::poison::refusal(JOURNAL_STATE));
        }
        crate::poison::checked(taken, JOURNAL_STATE)
    }

    /// Whether a panic left the journal's state held: nothing that needs
    /// it is done any more (see `lock`), and what is durable is what the
    /// next mount finds, as after a crash.
    pub fn poisoned(&self) -> bool {
        self.inner.is_poisoned()
    }

    /// Held shared by a mutation while it records and applies its change.
    pub fn gate(&self) -> Gate<'_> {
        let guard = crate::poison::read(&self.gate, "the turn gate");
        HOLDS_GATE.with(|n| n.set(n.get() + 1));
        Gate { _shared: guard }
    }

    /// Waits until no change through the mount is in flight, and keeps new
    /// ones from starting until the result is dropped: what a reader of the
    /// past falls back to when the object it reads keeps moving under it
    /// (see [`Mark`]). None on a thread that holds the gate already,
    /// shared (recording a change: a rewind reading the checkpoint it
    /// restores, with the tree frozen) or exclusively (a seal, a
    /// collection step): waiting for its own gate would never end.
    pub fn hold_changes(&self) -> Option<ExclusiveGate<'_>> {
        if HOLDS_GATE.with(|n| n.get()) > 0 {
            return None;
        }
        Some(self.gate_exclusive())
    }

    /// The turn gate, exclusively: no change through the mount is in
    /// flight until the result is dropped.
    pub(crate) fn gate_exclusive(&self) -> ExclusiveGate<'_> {
        let guard = crate::poison::write(&self.gate, "the turn gate");
        HOLDS_GATE.with(|n| n.set(n.get() + 1));
        ExclusiveGate { _exclusive: guard }
    }

    pub fn store(&self) -> &dyn ChunkStore {
        &*self.store
    }

    /// Runs `f` with the metadata database (for queries), after folding
    /// every logged record into it.
    /// If the records cannot be folded (a full disk), the query is not run
    /// and answers that error: run on the database alone it would miss
    /// them, and a view would show a later state as the past.
    pub fn with_meta<T: Queried>(&self, f: impl FnOnce(&Meta) -> T) -> T {
        let mut inner = self.lock();
        match inner.fold() {
            Ok(()) => {}
            Err(JournalError::Meta(e)) => {
                log::error!("cannot fold the journal log into the database: {e}");
                return T::unfolded(e);
            }
            // Folded; only emptying the log failed (folding is idempotent).
            Err(e) => log::error!("cannot empty the journal log after folding it: {e}"),
        }
        f(&inner.meta)
    }

    /// As `with_meta`, with only the pre-image records
    /// ([`crate::meta::PreImages`]): what views and rewinds read.
    pub fn with_pre_images<T: Queried>(&self, f: impl FnOnce(&dyn crate::meta::PreImages) -> T) -> T {
        self.with_meta(|m| f(m))
    }

    /// As `with_meta`, with only the checkpoints and their names
    /// ([`crate::meta::Checkpoints`]).
    pub fn with_checkpoints<T: Queried>(&self, f: impl FnOnce(&dyn crate::meta::Checkpoints) -> T) -> T {
        self.with_meta(|m| f(m))
    }

    /// As `with_meta`, with only the intents and pending files
    /// ([`crate::meta::Intents`]).
    pub fn with_intents<T: Queried>(&self, f: impl FnOnce(&dyn crate::meta::Intents) -> T) -> T {
        self.with_meta(|m| f(m))
    }

    /// As `with_meta`, with only the turns' statistics and paths
    /// ([`crate::meta::TurnStatistics`]).
    pub fn with_turn_stats<T: Queried>(&self, f: impl FnOnce(&dyn crate::meta::TurnStatistics) -> T) -> T {
        self.with_meta(|m| f(m))
    }

    /// As `with_meta`, with only the objects and their handles
    /// ([`crate::meta::Objects`]).
    pub fn with_objects<T: Queried>(&self, f: impl FnOnce(&dyn crate::meta::Objects) -> T) -> T {
        self.with_meta(|m| f(m))
    }

    /// As `with_meta`, with only what a collection keeps about itself
    /// ([`crate::meta::Retention`]: settings, forgotten checkpoints,
    /// intents).
    pub fn with_retention<T: Queried>(&self, f: impl FnOnce(&dyn crate::meta::Retention) -> T) -> T {
        self.with_meta(|m| f(m))
    }

    /// Runs `f` with the folds of the journal log going into one SQLite
    /// transaction, committed every `FOLD_BATCH` records and when `f`
    /// returns (or unwinds), instead of one commit per fold: for an
    /// operation that makes many small recorded changes and queries
    /// between them (a rewind: one commit per file otherwise). Nothing is
    /// less durable for it: every record folded stays in the log until the
    /// commit, so a crash folds it again at the next start; a change not
    /// in the log (`rebind_object`, an intent, a seal) commits the batch
    /// before its own transaction. Fails if the last commit fails (its
    /// records then wait in the log for the next fold).
    pub fn batched<T>(&self, f: impl FnOnce() -> T) -> JournalResult<T> {
        struct Batch<'j>(&'j Journal, bool);
        impl Batch<'_> {
            fn end(&mut self) -> JournalResult<()> {
                if !std::mem::take(&mut self.1) {
                    return Ok(());
                }
                let mut inner = self.0.lock();
                inner.batching = false;
                if let Err(e) = inner.commit_batch()? {
                    log::error!("cannot empty the journal log after folding it: {e}");
                }
                Ok(())
            }
        }
        impl Drop for Batch<'_> {
            fn drop(&mut self) {
                // Unwinding from a panic that left the journal's lock
                // poisoned: the journal refuses everything from now on (its
                // records wait in the log for the next start), and taking
                // the lock here would panic again, which aborts.
                if std::thread::panicking() && self.0.inner.is_poisoned() {
                    return;
                }
                if let Err(e) = self.end() {
                    log::error!("cannot commit the folds of the journal log: {e}");
                }
            }
        }
        let outer = std::mem::replace(&mut self.lock().batching, true);
        let mut batch = Batch(self, !outer);
        let out = f();
        batch.end()?;
        Ok(out)
    }

    /// As `with_meta` for a change `f` makes: the records not folded yet
    /// and `f`'s writes commit together, one commit where `with_meta`
    /// then `f` take two (a rewind makes one such change per file). If
    /// `f` fails, the fold is rolled back with it and the records wait
    /// for the next fold.
    pub fn change_meta<T>(&self, f: impl FnOnce(&Meta) -> MetaResult<T>) -> JournalResult<T> {
        let mut inner = self.lock();
        inner.moves.everything();
        let (value, emptied) = inner.fold_then(f)?;
        drop(inner);
        if let Err(e) = emptied {
            log::error!("cannot empty the journal log after folding it: {e}");
        }
        Ok(value)
    }

    /// The command name of the process a request came from. FUSE gives
    /// the id of the calling thread, whose own name is often a worker's
    /// (`Bun Pool 0` for Claude Code's file tools); the thread group's
    /// leader carries the program's name. A name is read again after
    /// [`PROGRAM_NAME_FRESH`]: a process that `exec`s another program keeps
    /// its pid (`sh -c 'cd x && make'` execs make), and that program's
    /// changes are its own. `/proc` is read without the journal's lock
    /// held.
    pub fn program(&self, pid: u32) -> Option<String> {
        if let Some((p, read_at)) = self.lock().programs.get(&pid)
            && read_at.elapsed() < PROGRAM_NAME_FRESH
        {
            return p.clone();
        }
        let tgid = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Tgid:").and_then(|v| v.trim().parse::<u32>().ok())))
            .unwrap_or(pid);
        let p = std::fs::read_to_string(format!("/proc/{tgid}/comm")).ok().map(|s| s.trim_end().to_string());
        self.lock().programs.insert(pid, (p.clone(), Instant::now()));
        p
    }

    pub fn current_turn(&self) -> i64 {
        self.turn_now.load(Ordering::Acquire)
    }

    /// Seals begun plus seals ended, for a reader that must see the
    /// checkpoints and the open turn of one moment (`log`): a seal does not
    /// hold the tree, so readers run beside it, and one that read the list,
    /// the turn and the records while a seal moved them from one turn to
    /// the next read a state that never existed. Odd while a seal is in
    /// progress; the same even value before and after a read means no seal
    /// overlapped it.
    pub fn seal_sequence(&self) -> u64 {
        self.seal_seq.load(Ordering::Acquire)
    }

    /// Stops taking changes: a part of the daemon the history depends on
    /// failed (a background thread panicked), so nothing it would have done
    /// can be vouched for. Every later change through the mount is refused
    /// (EROFS) and every seal fails saying `why`; reads, views and unmount
    /// go on. The first reason is kept.
    pub fn fail(&self, why: String) {
        // Never poisoned in a way that matters: one assignment of an
        // Option, which a panic cannot leave half-made; it must stay
        // readable to say why the mount stopped.
        let mut failure = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        if failure.is_none() {
            log::error!("the mount is now read-only: {why}");
            *failure = Some(why);
        }
    }

    /// Why the journal takes no more changes, if it stopped (`fail`).
    pub fn failure(&self) -> Option<String> {
        if self.inner.is_poisoned() {
            self.fail(crate::poison::refusal(JOURNAL_STATE));
        }
        self.failure.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Where the records stand now, for [`Journal::moved_since`].
    pub fn mark(&self) -> Mark {
        Mark(self.lock().moves.seq)
    }

    /// Whether an answer about the object read since `mark` may be stale:
    /// a record naming it was appended since (the object by id, or by
    /// handle while it has none: its first record gives it one), or the
    /// history changed in a way that names no object.
    pub fn moved_since(&self, mark: Mark, id: Option<ObjectId>, handle: Option<&FileHandle>) -> bool {
        let inner = self.lock();
        let moves = &inner.moves;
        if mark.0 == moves.seq {
            return false;
        }
        if mark.0 < moves.floor {
            return true;
        }
        let id = id.or_else(|| handle.and_then(|h| inner.ids.get(&h.to_bytes()).copied()));
        id.is_some_and(|id| moves.newest.get(&id).is_some_and(|&seq| seq > mark.0))
    }

    /// (records in the current turn, seconds since the last one).
    pub fn activity(&self) -> (u64, Option<f64>) {
        let inner = self.lock();
        (inner.changes, inner.last_change.map(|t| t.elapsed().as_secs_f64()))
    }

    /// The persistent id of an object by its handle, recording it if new.
    pub fn object_id(&self, handle: &FileHandle, kind: u8) -> JournalResult<ObjectId> {
        let handle = handle.to_bytes();
        let mut inner = self.lock();
        let known = match inner.ids.get(&handle) {
            Some(id) => Some(*id),
            None => inner.meta.object_by_handle(&handle)?,
        };
        if let Some(id) = known {
            inner.ids.insert(handle, id);
            return Ok(id);
        }
        let id = inner.new_object_id()?;
        inner.append(LogRecord::Object { id: id.0, handle: handle.clone(), kind })?;
        inner.ids.insert(handle, id);
        Ok(id)
    }

    /// Points `id` at a new backing inode.    /// Points `id` at a new backing inode.
    pub fn rebind_object(&self, id: ObjectId, handle: &FileHandle) -> JournalResult<()> {
        let handle = handle.to_bytes();
        let mut inner = self.lock();
        inner.fold()?;
        // The new inode's ctime is after the seal; if the daemon dies before
        // the next seal, the scan at mount must not take it for an outside
        // change (see OWN_CHANGE).
        let before = inner.meta.object_handle(id)?;
        inner.transaction(|m| {
            m.set_object_handle(id, &handle)?;
            m.set_state(&own_change_key(&handle), "")
        })?;
        let Inner { ids, former_handles, .. } = &mut *inner;
        if let Some(before) = before.filter(|_| former_handles.len() < FORMER_HANDLES_MAX) {
            former_handles.insert(before, id);
        }
        ids.retain(|h, v| {
            let keep = *v != id;
            if !keep && former_handles.len() < FORMER_HANDLES_MAX {
                former_handles.insert(h.clone(), id);
            }
            keep
        });
        former_handles.remove(&handle);
        ids.insert(handle, id);
        inner.moves.object(id);
        Ok(())
    }

    /// The id of a handle, as `known_object_id`, or of the object that had
    /// it before a rewind gave it a new inode: a view that numbered an
    /// object by its handle before it was ever recorded (then it had no
    /// id) still finds it after the rewind, while the kernel keeps that
    /// number (an entry it looked up is kept for an hour).
    pub fn object_id_ever(&self, handle: &FileHandle) -> JournalResult<Option<ObjectId>> {
        if let Some(id) = self.known_object_id(handle)? {
            return Ok(Some(id));
        }
        Ok(self.lock().former_handles.get(&handle.to_bytes()).copied())
    }

    /// Records that an object was just created (in the current turn): a
    /// rewind to an earlier checkpoint leaves it out (it moves aside whole
    /// with its name). One record, and no lookup: the handle of an inode
    /// just created names no other living object, so it is a new object
    /// even when the handle was recorded before. Such a row names a dead
    /// inode whose number and generation the filesystem reused; it gives
    /// the handle up when the new row is folded in (`Meta::insert_new_object`).
    /// Taking its id instead would give the new file the dead one's history.
    pub fn note_born(&self, handle: &FileHandle, kind: u8) -> JournalResult<ObjectId> {
        let handle = handle.to_bytes();
        let mut inner = self.lock();
        let turn = inner.turn;
        let id = inner.new_object_id()?;
        inner.append_deferred(LogRecord::NewObject { id: id.0, handle: handle.clone(), kind, born: turn })?;
        inner.ids.insert(handle, id);
        inner.born_ids.insert(id);
        Ok(id)
    }

    /// As `note_born`, durable before it returns: for an inode the daemon
    /// is about to give a name, so that after a crash the scan at mount
    /// knows it for the daemon's own.
    pub fn note_born_durably(&self, handle: &FileHandle, kind: u8) -> JournalResult<ObjectId> {
        let id = self.note_born(handle, kind)?;
        let mut inner = self.lock();
        if let Some(log) = &mut inner.log {
            log.flush().map_err(|e| JournalError::Read { what: "the journal log".into(), source: e })?;
        }
        Ok(id)
    }

    /// Records that object `id` is about to move into its attic slot. The
    /// record comes first, like every pre-image: after a crash the table
    /// may name an object whose move never happened, which the next open
    /// corrects ([`Journal::reconcile_attic_table`]).
    pub fn note_attic(&self, id: ObjectId) -> JournalResult<()> {
        let mut inner = self.lock();
        let turn = inner.turn;
        inner.append(LogRecord::Attic { id: id.0, turn: Some(turn) })
    }

    /// Records that object `id` left (or, after a failed move, never
    /// reached) its attic slot.
    pub fn note_attic_out(&self, id: ObjectId) -> JournalResult<()> {
        self.lock().append(LogRecord::AtticOut { id: id.0 })
    }

    /// Whether object `id` is in its attic slot, from the attic table.
    pub fn in_attic(&self, id: ObjectId) -> JournalResult<bool> {
        Ok(self.with_objects(|m| m.attic_since(id))?.is_some())
    }

    /// Makes the attic table say what the attic directory holds (`slots`,
    /// the ids its slots are named by), at every open. A store older than
    /// the table gets its rows here (without a turn). After a crash the
    /// table can hold a row for a move into the attic that was noted and
    /// never made (the row comes first, like every pre-image), and the
    /// file is still at its name in the tree, where a rewind must find it;
    /// or miss the row of a slot whose move out was noted and cut short.
    /// Returns the rows removed and added.
    pub fn reconcile_attic_table(&self, slots: &[ObjectId]) -> JournalResult<(usize, usize)> {
        let mut inner = self.lock();
        inner.fold()?;
        let rows: HashSet<ObjectId> = inner.meta.attic_objects()?.into_iter().collect();
        let held: HashSet<ObjectId> = slots.iter().copied().collect();
        let mut stale: Vec<ObjectId> = rows.difference(&held).copied().collect();
        let mut missing: Vec<ObjectId> = held.difference(&rows).copied().collect();
        if stale.is_empty() && missing.is_empty() {
            return Ok((0, 0));
        }
        stale.sort();
        missing.sort();
        inner.transaction(|m| {
            for id in &stale {
                m.attic_take(*id)?;
            }
            for id in &missing {
                m.attic_put(*id, None)?;
            }
            Ok(())
        })?;
        Ok((stale.len(), missing.len()))
    }

    /// The id of a handle if it was ever recorded (no insert): the object
    /// that has it now.
    pub fn known_object_id(&self, handle: &FileHandle) -> JournalResult<Option<ObjectId>> {
        let handle = handle.to_bytes();
        let mut inner = self.lock();
        if let Some(id) = inner.ids.get(&handle) {
            return Ok(Some(*id));
        }
        let id = inner.meta.object_by_handle(&handle)?;
        if let Some(id) = id {
            inner.ids.insert(handle, id);
        }
        Ok(id)
    }

    /// Notes that the file with this handle was created in the current
    /// turn. The caller holds the turn gate, so the note and the creation
    /// fall in the same turn.
    pub fn note_file_born(&self, handle: &FileHandle) {
        self.lock().born.insert(handle.to_bytes());
    }

    /// Whether the file with this handle was created in the current turn
    /// (then no checkpoint has it, and its removal keeps nothing); the
    /// caller is removing it, so it is forgotten.
    pub fn take_born(&self, handle: &FileHandle) -> bool {
        self.lock().born.remove(&handle.to_bytes())
    }

    /// Whether (dir, name) still needs its pre-image in this turn.
    pub fn needs_entry(&self, dir: ObjectId, name: &[u8]) -> bool {
        !self.lock().entries_done.contains(&(dir, name.to_vec()))
    }

    /// Records what (dir, name) referred to before this turn's first change.
    pub fn record_entry(
        &self,
        dir: ObjectId,
        name: &[u8],
        target: Option<ObjectId>,
        program: Option<&str>,
    ) -> JournalResult<()> {
        let mut inner = self.lock();
        let key = (dir, name.to_vec());
        if inner.entries_done.contains(&key) {
            return Ok(());
        }
        let turn = inner.turn;
        inner.append(LogRecord::Entry {
            turn,
            dir: dir.0,
            name: name.to_vec(),
            target: target.map(|t| t.0),
            program: program.map(str::to_string),
        })?;
        inner.entries_done.insert(key);
        inner.named_done.insert(dir);
        if let Some(t) = target {
            inner.named_done.insert(t);
        }
        inner.changes += 1;
        inner.last_change = Some(Instant::now());
        Ok(())
    }

    /// Whether the object still needs its pre-image in this turn (and its
    /// content, when `content`). An object born in this turn never does:
    /// no checkpoint holds it, so nothing would ever read its pre-image
    /// (a file created, closed and opened again for writing is not read
    /// back into the store).
    pub fn needs_object(&self, object: ObjectId, content: bool) -> bool {
        let inner = self.lock();
        if inner.born_ids.contains(&object) {
            return false;
        }
        !inner.meta_done.contains(&object) || (content && !inner.content_done.contains(&object))
    }

    /// Content already known for the object at this ctime and size.
    pub fn known_content(
        &self,
        object: ObjectId,
        ctime_ns: i64,
        size: u64,
    ) -> JournalResult<Option<(Vec<u8>, Vec<u8>)>> {
        let mut inner = self.lock();
        inner.fold()?;
        Ok(inner.meta.known_content(object, ctime_ns, size)?)
    }

    /// Stores file content in the chunk store (outside the journal lock).
    pub fn store_content(&self, reader: impl std::io::Read) -> JournalResult<ContentRef> {
        Ok(self.store_content_until_recorded(reader)?.keep())
    }

    /// Stores file content for a record still to be written: if the
    /// returned content is dropped without [`UnrecordedContent::keep`] (the
    /// record could not be written, e.g. for want of space), the chunks it
    /// added are taken back, so a refused change leaves the store as it was.
    pub fn store_content_until_recorded(&self, reader: impl std::io::Read) -> JournalResult<UnrecordedContent<'_>> {
        // One content at a time, until it is recorded or taken back: the
        // chunks it added must not be found meanwhile by another content
        // with the same bytes.
        let lock = crate::poison::lock(&self.content_lock, "the journal's content lock");
        let (content, added) = crate::store::store_content_added(&*self.store, reader)?;
        Ok(UnrecordedContent { content, added, store: &*self.store, _one_at_a_time: lock })
    }

    /// Records the object's state before this turn's first change. With
    /// `cacheable`, its content is remembered for its (ctime, size), so a
    /// later capture at the same (ctime, size) need not read the file.
    pub fn record_object(
        &self,
        object: ObjectId,
        state: &ObjectState,
        program: Option<&str>,
        cacheable: bool,
    ) -> JournalResult<()> {
        let mut inner = self.lock();
        let turn = inner.turn;
        inner.append(LogRecord::ObjectPre {
            turn,
            object: object.0,
            state: state.clone(),
            program: program.map(str::to_string),
        })?;
        if let Some((hash, chunks)) = &state.content {
            if cacheable {
                inner.append(LogRecord::Known {
                    object: object.0,
                    ctime_ns: state.ctime_ns,
                    size: state.size,
                    hash: hash.clone(),
                    chunks: chunks.clone(),
                })?;
            }
            inner.content_done.insert(object);
        }
        inner.meta_done.insert(object);
        inner.changes += 1;
        inner.last_change = Some(Instant::now());
        Ok(())
    }

    /// Records the state of a file of which `outside` names are outside the
    /// tree (in directories an interrupted rewind had moved to the attic),
    /// before this turn's first change to it: the mount checkpoint that
    /// sealed that half-rewound tree shows the file with the links it has
    /// in that tree, as every other checkpoint does. The turn before, the
    /// interrupted one, gets the state as it was, links included, unless
    /// it recorded the file already: the checkpoints before it had every
    /// one of those names in their tree.
    pub fn record_object_names_outside(
        &self,
        object: ObjectId,
        state: &ObjectState,
        outside: u32,
        program: Option<&str>,
    ) -> JournalResult<()> {
        let mut inner = self.lock();
        let turn = inner.turn;
        // A second record of a turn is ignored when folded: the earlier
        // turn keeps the pre-image it has.
        inner.append(LogRecord::ObjectPre {
            turn: turn - 1,
            object: object.0,
            state: state.clone(),
            program: program.map(str::to_string),
        })?;
        let in_tree = ObjectState { nlink: state.nlink.saturating_sub(outside), ..state.clone() };
        inner.append(LogRecord::ObjectPre {
            turn,
            object: object.0,
            state: in_tree,
            program: program.map(str::to_string),
        })?;
        inner.meta_done.insert(object);
        inner.changes += 1;
        inner.last_change = Some(Instant::now());
        Ok(())
    }

    /// Notes a change that needs no new record (it still counts as
    /// activity for `--auto-turn`).
    pub fn touch(&self) {
        self.lock().last_change = Some(Instant::now());
    }

    /// Seals the current turn as a checkpoint and starts the next one.
    /// `recapture` runs with the gate held exclusively, after the new turn
    /// has begun: it records the files open for writing, whose next writes
    /// the daemon may not see.
    pub fn seal(&self, info: &TurnInfo, reason: Reason, recapture: impl FnOnce()) -> JournalResult<CheckpointId> {
        self.seal_on(info, reason, None, recapture)
    }

    /// Like `seal`, but the new checkpoint's parent in the history graph is
    /// `parent` (a rewind starts a branch from the checkpoint rewound to).
    pub fn seal_on(
        &self,
        info: &TurnInfo,
        reason: Reason,
        parent: Option<i64>,
        recapture: impl FnOnce(),
    ) -> JournalResult<CheckpointId> {
        if let Some(id) = &info.message_id {
            check_message_id(id)?;
        }
        if let Some(why) = self.failure() {
            return Err(JournalError::Failed(why));
        }
        let _exclusive = self.gate_exclusive();
        let _in_progress = SealInProgress::begin(&self.seal_seq);
        if let Some(id) = &info.message_id {
            let inner = self.lock();
            if let Some(n) = inner.meta.checkpoint_with_message(id, None)? {
                // A hook that fires twice for one prompt, with nothing
                // changed in between, gets the same checkpoint again.
                if n == inner.turn && inner.changes == 0 && parent.is_none() {
                    info!("message {id:?} repeated with nothing changed: checkpoint {n} again");
                    return Ok(CheckpointId(n));
                }
                return Err(JournalError::DuplicateMessageId { id: quoted(id), checkpoint: n });
            }
            // A prefix reference that named one checkpoint must not come
            // to name two (or another): an agent sealing the short form of
            // the owner's prompt id would capture `rewind 3f2a`.
            if let Some((n, other)) = inner.meta.checkpoint_with_overlapping_message(id, reference::MIN_PREFIX)? {
                return Err(JournalError::MessageIdOverlaps { id: id.clone(), other, checkpoint: n });
            }
        }
        let stats = self.store.stats()?;
        let store_bytes = stats.stored_bytes as i64;
        self.store.sync()?;
        let (next, durable) = {
            let mut inner = self.lock();
            inner.fold()?;
            let next = inner.turn + 1;
            let parent = parent.unwrap_or(inner.turn);
            inner.transaction(|m| {
                m.seal(&Checkpoint {
                    checkpoint: next,
                    parent: Some(parent),
                    message_id: info.message_id.clone(),
                    session: info.session.clone(),
                    label: info.label.clone(),
                    reason,
                    created_at: now_ms(),
                    store_bytes_at_start: store_bytes,
                    name: None,
                    snapshot_message: None,
                    sealed_by: info.sealed_by,
                })?;
                // Under the exclusive gate: every change of the turn sealed
                // was applied before this time.
                m.set_state(SEALED_NS, &now_ns().to_string())?;
                m.set_state(crate::meta::SEALED_RECORD_BYTES, &record_bytes(&stats).to_string())?;
                m.remove_states_with_prefix(OWN_CHANGE)?;
                m.set_state("current_turn", &next.to_string())
            })?;
            // The checkpoint exists from the commit on, whether or not the
            // WAL can be checkpointed (a full disk): the turn moves on, or
            // the next seal would reuse its number and changes made from
            // now on would be recorded in the sealed turn.
            let durable = inner.checkpoint_wal();
            inner.turn = next;
            self.turn_now.store(next, Ordering::Release);
            inner.entries_done.clear();
            inner.named_done.clear();
            inner.meta_done.clear();
            inner.content_done.clear();
            inner.born.clear();
            inner.born_ids.clear();
            inner.changes = 0;
            inner.last_change = None;
            inner.turn_started = Instant::now();
            inner.programs.clear();
            inner.moves.everything();
            (next, durable)
        };
        crate::faults::kill_point("seal-committed");
        recapture();
        match durable {
            Ok(()) => {}
            Err(JournalError::Meta(source)) => return Err(JournalError::NotDurable { checkpoint: next, source }),
            Err(e) => return Err(e),
        }
        info!("sealed checkpoint {next} ({:?}, message {:?})", reason, info.message_id);
        Ok(CheckpointId(next))
    }

    /// Since when (ns since the epoch) changes to the backing tree were not
    /// seen by a daemon, if this is not the first mount (opened read-only:
    /// since the last daemon stopped).
    pub fn outside_since_ns(&self) -> Option<i64> {
        self.lock().outside_since_ns
    }

    /// Records objects changed outside the mount (found by a scan at
    /// mount, each as its handle, kind and birth time if known): views of
    /// earlier checkpoints must not show their live state. Returns how
    /// many objects were affected.
    pub fn record_outside_changes(&self, handles: &[(FileHandle, u8, Option<i64>)]) -> JournalResult<usize> {
        let mut inner = self.lock();
        inner.fold()?;
        inner.moves.everything();
        let turn = inner.turn;
        let unclean = inner.unclean;
        let since = inner.outside_since_ns;
        let mut n = 0;
        inner.transaction(|m| {
            // Renamed objects have entry records (their old name) but no
            // object record of their own: they changed through the mount too.
            let renamed = if unclean { m.entry_targets_in_turn(turn - 1)? } else { Default::default() };
            for (h, kind, born_ns) in handles {
                let h = &h.to_bytes();
                // Objects never recorded are shown live by every view, so
                // they need an id to carry the mark too.
                // Rewound files: the settler fills them (now, or it did
                // since the newest seal), whatever happened outside; and
                // objects a rewind recreated since the newest seal.
                if m.is_pending(h)? || m.get_state(&own_change_key(h))?.is_some() {
                    continue;
                }
                let known = m.object_by_handle(h)?.is_some();
                let id = m.intern_object(h, *kind)?;
                // After a crash, an object no daemon knew and born after
                // the newest seal is in no checkpoint: it was born in the
                // last turn. The daemon dies between creating an inode and
                // noting it (a file created through the mount, whose birth
                // note waits for the next log write; a rewind's new inode
                // before it is noted or rebound), and such an object,
                // marked unknown with no birth turn, would read as one that
                // every earlier checkpoint held in a state never recorded.
                if unclean && !known && born_ns.zip(since).is_some_and(|(b, s)| b > s) {
                    log::debug!("object {} (kind {kind}) was born in turn {} after the newest seal", id.0, turn - 1);
                    m.set_born(id, turn - 1)?;
                    continue;
                }
                // After a crash, objects recorded in the last turn changed
                // through the mount; their pre-images are in the journal.
                // So did objects born in it: no checkpoint holds them.
                if unclean
                    && (renamed.contains(&id)
                        || m.object_turn_at(id, turn - 1)?.is_some()
                        || m.born_turn(id)?.is_some_and(|b| b >= turn - 1))
                {
                    continue;
                }
                log::debug!("object {} (kind {kind}) changed outside the mount", id.0);
                m.taint(id, turn)?;
                n += 1;
            }
            if n > 0 {
                m.set_label(turn, &format!("{n} objects changed outside rewindfs"))?;
            }
            Ok(())
        })?;
        if n > 0 {
            log::warn!(
                "{n} objects were changed outside the mount; checkpoints before {turn} will report them as unknown"
            );
        }
        Ok(n)
    }

    /// The rewound files `files` (handle, ctime once filled) have their
    /// bytes, durably: they are no longer pending, in one commit, and
    /// their fills are not outside changes (see OWN_CHANGE), nor ones that
    /// bypassed the mount: each ctime is the daemon's own (`own_ctime`,
    /// see `bypass.rs`).
    pub fn settled(&self, files: &[(FileHandle, Option<i64>)]) -> JournalResult<()> {
        if files.is_empty() {
            return Ok(());
        }
        let mut inner = self.lock();
        inner.moves.everything();
        let mut done = Vec::with_capacity(files.len());
        for (handle, ctime_ns) in files {
            let handle = handle.to_bytes();
            // After its `Pending` in the log: a log folded again (one that
            // could not be emptied) must not make the file pending again.
            inner.append(LogRecord::Settled { handle: handle.clone() })?;
            let known = inner.ids.get(&handle).copied();
            done.push((handle, *ctime_ns, known));
        }
        inner.transaction(|m| {
            for (handle, ctime_ns, known) in &done {
                m.remove_pending(handle)?;
                let id = match known {
                    Some(id) => Some(*id),
                    None => m.object_by_handle(handle)?,
                };
                if let (Some(ctime_ns), Some(id)) = (ctime_ns, id) {
                    m.set_own_ctime(id, *ctime_ns)?;
                }
                m.set_state(&own_change_key(handle), "")?;
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Records that the file `handle` waits for `content` (its chunk list
    /// inline, or that of a pre-image record): appended to the log, like a
    /// pre-image, so it costs no commit of its own.
    pub fn note_pending(
        &self,
        handle: &FileHandle,
        content: &crate::store::ContentRef,
        list: crate::meta::PendingList<'_>,
        mtime_ns: i64,
    ) -> JournalResult<()> {
        let (chunks, record) = match list {
            crate::meta::PendingList::Inline(c) => (Some(c.to_vec()), None),
            crate::meta::PendingList::Record(turn, object) => (None, Some((turn, object.0))),
        };
        let mut inner = self.lock();
        inner.moves.everything();
        let hash = content.hash.as_bytes().to_vec();
        inner.append(LogRecord::Pending { handle: handle.to_bytes(), hash, chunks, record, mtime_ns })
    }

    /// Notes, durably, that a rewind or restore is about to change the tree
    /// (see [`crate::rewind::recovery`]); returns the intent's id.
    pub fn begin_intent(
        &self,
        op: IntentOp,
        checkpoint: i64,
        undo_checkpoint: i64,
        paths: &[Vec<u8>],
    ) -> JournalResult<i64> {
        let mut inner = self.lock();
        let intent = Intent { id: 0, op, checkpoint, undo_checkpoint, paths: paths.to_vec(), started_at: now_ms() };
        // A commit survives the daemon's death, as the records appended
        // after it do (neither is fsynced; a seal makes both survive power
        // loss).
        let turn = inner.turn;
        inner.transaction(|m| {
            // What it changes is the daemon's own (see `bypass.rs`).
            m.mark_daemon_turn(turn, now_ns())?;
            m.begin_intent(&intent)
        })
    }

    /// The rewind or restore `id` is done (or failed and said so).
    pub fn end_intent(&self, id: i64) -> JournalResult<()> {
        let mut inner = self.lock();
        inner.fold()?;
        inner.transaction(|m| m.end_intent(id))
    }

    /// Intents a daemon began and never ended.
    pub fn open_intents(&self) -> JournalResult<Vec<Intent>> {
        Ok(self.lock().meta.open_intents()?)
    }

    /// Notes a clean unmount: the next mount only looks for changes made
    /// after now.
    pub fn mark_clean_unmount(&self) -> JournalResult<()> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0);
        let mut inner = self.lock();
        inner.fold()?;
        inner.transaction(|m| {
            m.remove_states_with_prefix(OWN_CHANGE)?;
            m.set_state("clean_unmount_ns", &now.to_string())
        })?;
        if let Some(log) = inner.log.as_mut() {
            log.give_back_blocks();
        }
        Ok(())
    }

    /// Makes everything recorded so far durable (used at unmount).
    pub fn sync(&self) -> JournalResult<()> {
        if crate::faults::sync_fails() {
            return Err(JournalError::Read {
                what: "the store (test hook)".into(),
                source: std::io::Error::from_raw_os_error(libc::ENOSPC),
            });
        }
        self.store.sync()?;
        let mut inner = self.lock();
        inner.fold()?;
        inner.checkpoint_wal()
    }

    /// Resolves a checkpoint reference: a number or `~N` (N before the
    /// newest); otherwise a message id, a snapshot name, a prefix of a
    /// message id or words of a label (`reference.rs`), all at once: it must
    /// name one checkpoint by all of them together, or it is ambiguous. A
    /// forgotten checkpoint's number or message id is refused saying so.
    pub fn resolve(&self, reference: &str) -> JournalResult<CheckpointId> {
        self.resolve_noted(reference).map(|(c, _)| c)
    }

    /// [`Journal::resolve`], with the sentence to tell the user when the
    /// reference matched checkpoints of abandoned branches too and the
    /// one on the current branch was taken (`reference::prefer_current_branch`).
    pub fn resolve_noted(&self, reference: &str) -> JournalResult<(CheckpointId, Option<String>)> {
        // Numbers and `~N` are indexed lookups; any other reference reads
        // every checkpoint, since it may mean one by several readings.
        if let Some(back) = reference.strip_prefix('~') {
            let found = match back.parse::<usize>() {
                Ok(n) => self.with_checkpoints(|m| m.checkpoint_back(n as u64))?,
                Err(_) => None,
            };
            return match found {
                Some(c) => Ok((CheckpointId(c.checkpoint), None)),
                None => Err(self.unknown_checkpoint(reference, &self.with_checkpoints(|m| m.checkpoints())?)?),
            };
        }
        // A number is no word anyone can choose (message ids and names
        // are never all digits): with the names it equals, it is final.
        let by_num: Vec<i64> = match reference.parse::<i64>() {
            Ok(n) if self.with_checkpoints(|m| m.checkpoint(n))?.is_some() => vec![n],
            _ => Vec::new(),
        };
        let by_name = self.with_checkpoints(|m| m.checkpoints_named(reference))?;
        if !by_num.is_empty() {
            let mut matches: Vec<i64> = by_num.into_iter().chain(by_name).collect();
            matches.sort_unstable();
            matches.dedup();
            return match matches.as_slice() {
                [one] => Ok((CheckpointId(*one), None)),
                many => {
                    let all = self.with_checkpoints(|m| m.checkpoints())?;
                    Err(JournalError::Ambiguous {
                        reference: reference.to_string(),
                        matches: reference::describe(&all, many),
                    })
                }
            };
        }
        // Otherwise every reading counts alike: an exact message id or name
        // beats no prefix and no label words, since the agent chooses ids
        // and labels; a reference that could mean two checkpoints is
        // refused with both listed, never taken as the agent's.
        let all = self.with_checkpoints(|m| m.checkpoints())?;
        let mut matches: Vec<i64> = by_name.into_iter().chain(reference::loose_matches(&all, reference)).collect();
        matches.sort_unstable();
        matches.dedup();
        if matches.is_empty()
            && let Some(forgotten) = self.with_retention(|m| m.forgotten(reference))?
        {
            return Err(JournalError::Forgotten { reference: reference.to_string(), forgotten: Box::new(forgotten) });
        }
        match matches.as_slice() {
            [one] => Ok((CheckpointId(*one), None)),
            [] => Err(self.unknown_checkpoint(reference, &all)?),
            many => match reference::prefer_current_branch(&all, many, self.current_turn()) {
                Some((n, note)) => Ok((CheckpointId(n), Some(note))),
                None => Err(JournalError::Ambiguous {
                    reference: reference.to_string(),
                    matches: reference::describe(&all, many),
                }),
            },
        }
    }

    /// What a reference that names no checkpoint is told: the checkpoints
    /// there are (`all`), and that a reset deleted the older ones if one did.
    fn unknown_checkpoint(&self, reference: &str, all: &[Checkpoint]) -> JournalResult<JournalError> {
        let nums: Vec<String> = all.iter().map(|c| c.checkpoint.to_string()).collect();
        let msgs: Vec<String> = all.iter().filter_map(|c| c.message_id.as_deref().map(quote)).collect();
        let known = format!(
            "checkpoints are {} and message ids {}",
            if nums.is_empty() { "none".into() } else { nums.join(", ") },
            if msgs.is_empty() { "none".into() } else { msgs.join(", ") }
        );
        // A name (or anything) from before a reset is told the reset took it.
        let reset = self.with_retention(|m| m.last_forgotten_by(retention::RESET))?;
        Ok(JournalError::UnknownCheckpoint {
            reference: reference.to_string(),
            known: match reset {
                Some((n, at)) => format!(
                    "{known}; checkpoints up to {n} and their names were deleted at {} by `rewindfs reset` \
                     (a reset cannot be undone)",
                    crate::text::rfc3339(at)
                ),
                None => known,
            },
        })
    }
}

/// Converts a Unix time in (seconds, nanoseconds) to nanoseconds.
pub fn ns(sec: i64, nsec: i64) -> i64 {
    sec.saturating_mul(1_000_000_000).saturating_add(nsec)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each error of this module, through the one boundary ([`AsErrno`]).
    #[test]
    fn errno_mapping_table() {
        use crate::error::{AsErrno, Errno};
        use crate::meta::sqlite_failure;
        use crate::store::StoreError;
        let io = |n| std::io::Error::from_raw_os_error(n);
        let cases: Vec<(Box<dyn AsErrno>, i32, &str)> = vec![
            (Box::new(JournalError::from(sqlite_failure(8))), libc::EROFS, "journal meta"),
            (Box::new(JournalError::from(StoreError::io("a", io(libc::ENOSPC)))), libc::ENOSPC, "journal store"),
            (
                Box::new(JournalError::NotDurable { checkpoint: 3, source: sqlite_failure(13) }),
                libc::ENOSPC,
                "journal sealed, not durable",
            ),
            (Box::new(JournalError::Read { what: "log".into(), source: io(libc::EIO) }), libc::EIO, "journal read"),
            (
                Box::new(JournalError::UnknownCheckpoint { reference: "x".into(), known: String::new() }),
                libc::EIO,
                "journal unknown checkpoint",
            ),
        ];
        for (err, want, what) in cases {
            assert_eq!(err.errno(), Errno(want), "{what}");
        }
    }
    use crate::meta::MetaResult;
    use crate::store::MemoryStore;

    /// A handle for the tests: `name` after a zero handle type.
    pub(crate) fn handle(name: &[u8]) -> FileHandle {
        FileHandle::from_bytes(&[&[0u8; 4][..], name].concat()).expect("a test handle")
    }

    fn journal() -> Journal {
        Journal::open(Meta::open_in_memory().unwrap(), Arc::new(MemoryStore::new())).unwrap()
    }

    /// The attic table is brought in line with the attic's slots at every
    /// open: a store from before the table (schema 7) gets its rows, a row
    /// of a move noted and never made (a crash) goes, the row of a slot
    /// whose move out was cut short comes back; moves are recorded.
    #[test]
    fn attic_table_follows_the_slots_at_open_then_the_moves() {
        let j = journal();
        assert_eq!(j.reconcile_attic_table(&[ObjectId(3), ObjectId(5)]).unwrap(), (0, 2));
        assert!(j.in_attic(ObjectId(3)).unwrap() && j.in_attic(ObjectId(5)).unwrap());
        assert_eq!(j.with_objects(|m| m.attic_since(ObjectId(3))).unwrap(), Some(None), "found there: no turn");
        assert_eq!(j.reconcile_attic_table(&[ObjectId(3), ObjectId(5)]).unwrap(), (0, 0), "in line: nothing written");
        j.note_attic_out(ObjectId(3)).unwrap();
        j.note_attic(ObjectId(9)).unwrap();
        assert_eq!(j.with_objects(|m| m.attic_since(ObjectId(9))).unwrap(), Some(Some(0)));
        // 3's move out was cut short (still in its slot), 9's move in never
        // happened, 5 is where the table says.
        assert_eq!(j.reconcile_attic_table(&[ObjectId(3), ObjectId(5)]).unwrap(), (1, 1));
        assert!(j.in_attic(ObjectId(3)).unwrap() && j.in_attic(ObjectId(5)).unwrap());
        assert!(!j.in_attic(ObjectId(9)).unwrap(), "a move never made");
    }

    /// After a crash, the scan's finds: an object no daemon knew and born
    /// after the newest seal was born in the last turn (the daemon died
    /// before noting it); one born before it, or of unknown birth, changed
    /// outside rewindfs; one noted born in the last turn is the mount's.
    #[test]
    fn after_a_crash_an_unknown_object_born_after_the_newest_seal_is_born_in_the_last_turn() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.sqlite");
        let store: Arc<dyn ChunkStore> = Arc::new(MemoryStore::new());
        let j = Journal::open(Meta::open(&path).unwrap(), store.clone()).unwrap();
        j.seal(&TurnInfo::default(), Reason::Turn, || {}).unwrap();
        let noted = j.note_born(&handle(b"noted"), 1).unwrap();
        let old = j.object_id(&handle(b"old"), 1).unwrap();
        drop(j);
        // No clean unmount: the next open is after a crash.
        let j = Journal::open(Meta::open(&path).unwrap(), store).unwrap();
        let since = j.outside_since_ns().expect("a seal time");
        let found = [
            (handle(b"new"), 1, Some(since + 1)),
            (handle(b"older"), 1, Some(since - 1)),
            (handle(b"no-btime"), 1, None),
            (handle(b"noted"), 1, Some(since + 1)),
            (handle(b"old"), 1, Some(since - 5)),
        ];
        assert_eq!(j.record_outside_changes(&found).unwrap(), 3, "older, no-btime and old changed outside");
        let id = |n: &[u8]| j.with_objects(|m| m.object_by_handle(&handle(n).to_bytes())).unwrap().unwrap();
        let last = j.current_turn() - 1;
        let new = id(b"new");
        assert_eq!(j.with_objects(|m| m.born_turn(new)).unwrap(), Some(last));
        assert_eq!(j.with_objects(|m| m.born_turn(noted)).unwrap(), Some(last));
        for (o, what) in [(new, "new"), (noted, "noted")] {
            assert!(j.with_meta(|m| m.taint_after(o, 0)).unwrap().is_none(), "{what} marked changed outside");
        }
        for (o, what) in [(id(b"older"), "older"), (id(b"no-btime"), "no-btime"), (old, "old")] {
            assert!(j.with_meta(|m| m.taint_after(o, 0)).unwrap().is_some(), "{what} not marked changed outside");
        }
    }

    /// A journal over the database `db` with its record log at `log`.
    fn logged(db: &Path, log: &Path, store: &Arc<dyn ChunkStore>) -> Journal {
        Journal::open_with_log(Meta::open(db).unwrap(), store.clone(), Some(log)).unwrap()
    }

    /// The WAL cannot be checkpointed while the connection is inside a
    /// transaction (SQLite answers "database table is locked"): a sync
    /// during a batch another thread has open (the turn statistics the
    /// daemon computes after a seal, while an unmount syncs) commits the
    /// batch first, and the batch goes on in a transaction of its own.
    #[test]
    fn a_sync_during_a_batch_commits_it_and_checkpoints() {
        let (dir, store) = (tempfile::tempdir().unwrap(), Arc::new(MemoryStore::new()) as Arc<dyn ChunkStore>);
        let (db, log) = (dir.path().join("meta.sqlite"), dir.path().join("journal.log"));
        let j = logged(&db, &log, &store);
        let committed = |name: &[u8]| Meta::open(&db).unwrap().object_by_handle(&handle(name).to_bytes()).unwrap();
        let (a, b) = j
            .batched(|| {
                let a = j.object_id(&handle(b"a"), 1).unwrap();
                j.with_objects(|m| m.object_by_handle(&handle(b"a").to_bytes())).unwrap();
                assert_eq!(committed(b"a"), None, "committed before the sync");
                std::thread::scope(|s| s.spawn(|| j.sync()).join().unwrap()).expect("a sync during a batch");
                assert_eq!(committed(b"a"), Some(a), "the sync did not commit the batch");
                let b = j.object_id(&handle(b"b"), 1).unwrap();
                j.with_objects(|m| m.object_by_handle(&handle(b"b").to_bytes())).unwrap();
                (a, b)
            })
            .unwrap();
        assert_eq!((committed(b"a"), committed(b"b")), (Some(a), Some(b)));
        assert!(RecordLog::read(&log).unwrap().is_empty(), "the log was not emptied at the end of the batch");
    }

    /// In a batch, folds join one transaction: what is folded is seen by
    /// the queries inside it and stays in the log until the batch commits
    /// at its end, so a crash inside it loses nothing (the next open folds
    /// the log again); a change that is not a record (a rebind) commits the
    /// batch before its own transaction.
    #[test]
    fn a_batch_commits_its_folds_at_its_end_and_a_crash_inside_it_loses_nothing() {
        let (dir, store) = (tempfile::tempdir().unwrap(), Arc::new(MemoryStore::new()) as Arc<dyn ChunkStore>);
        let (db, log) = (dir.path().join("meta.sqlite"), dir.path().join("journal.log"));
        let j = logged(&db, &log, &store);
        let committed = |name: &[u8]| Meta::open(&db).unwrap().object_by_handle(&handle(name).to_bytes()).unwrap();
        let crashed = dir.path().join("crashed");
        let ids = j
            .batched(|| {
                let a = j.object_id(&handle(b"a"), 1).unwrap();
                assert_eq!(j.with_objects(|m| m.object_by_handle(&handle(b"a").to_bytes())).unwrap(), Some(a));
                assert_eq!(committed(b"a"), None, "committed before the batch ended");
                assert!(!RecordLog::read(&log).unwrap().is_empty(), "the log was emptied before the commit");
                // The files as a kill -9 here would leave them.
                std::fs::create_dir(&crashed).unwrap();
                for f in ["meta.sqlite", "meta.sqlite-wal", "journal.log"] {
                    if dir.path().join(f).exists() {
                        std::fs::copy(dir.path().join(f), crashed.join(f)).unwrap();
                    }
                }
                let b = j.object_id(&handle(b"b"), 1).unwrap();
                j.rebind_object(b, &handle(b"b2")).unwrap();
                assert_eq!(committed(b"a"), Some(a), "a rebind inside a batch did not commit it first");
                (a, b)
            })
            .unwrap();
        assert_eq!(committed(b"b2"), Some(ids.1));
        assert!(RecordLog::read(&log).unwrap().is_empty(), "the log was not emptied at the end of the batch");
        let j2 = logged(&crashed.join("meta.sqlite"), &crashed.join("journal.log"), &store);
        assert_eq!(j2.with_objects(|m| m.object_by_handle(&handle(b"a").to_bytes())).unwrap(), Some(ids.0));
    }

    /// A pending file is a record of the log, and so is its settling: a
    /// log folded again after the file was settled (one that could not be
    /// emptied) leaves it settled.
    #[test]
    fn a_log_folded_again_does_not_make_a_settled_file_pending() {
        let (dir, store) = (tempfile::tempdir().unwrap(), Arc::new(MemoryStore::new()) as Arc<dyn ChunkStore>);
        let j = logged(&dir.path().join("meta.sqlite"), &dir.path().join("journal.log"), &store);
        let log = dir.path().join("journal.log");
        let id = |b| crate::store::ChunkId::from_slice(&[b; 32]).unwrap();
        let chunks = vec![crate::store::ChunkSpan { id: id(8), len: 3 }];
        let content = crate::store::ContentRef { hash: id(7), size: 3, chunks };
        let list = content.encode_chunks();
        j.note_pending(&handle(b"p"), &content, crate::meta::PendingList::Inline(&list), 5).unwrap();
        let logged = RecordLog::read(&log).unwrap();
        assert!(j.with_intents(|m| m.is_pending(&handle(b"p").to_bytes())).unwrap());
        j.settled(&[(handle(b"p"), None)]).unwrap();
        let mut logged_again = logged.clone();
        logged_again.extend(RecordLog::read(&log).unwrap());
        assert!(logged_again.iter().any(|r| matches!(r, LogRecord::Settled { .. })), "{logged_again:?}");
        j.with_meta(|m| record_log::fold(m, &logged_again)).unwrap();
        assert!(!j.with_intents(|m| m.is_pending(&handle(b"p").to_bytes())).unwrap(), "settled, then pending again");
    }

    /// Every created object gets a birth turn, with one record for a new
    /// handle.
    #[test]
    fn a_new_object_is_born_in_the_current_turn() {
        let j = journal();
        j.seal(&TurnInfo::default(), Reason::Turn, || {}).unwrap();
        let id = j.note_born(&handle(b"new"), 1).unwrap();
        assert_eq!(j.object_id(&handle(b"new"), 1).unwrap(), id);
        assert_eq!(j.with_objects(|m| m.born_turn(id)).unwrap(), Some(1));
    }

    /// A created inode whose handle is already recorded (the filesystem
    /// reused a dead inode's number and generation) is a new object: the
    /// dead one keeps its history and birth, and gives up the handle.
    #[test]
    fn a_created_object_with_a_dead_objects_handle_is_a_new_object() {
        let j = journal();
        let dead = j.note_born(&handle(b"h"), 1).unwrap();
        j.seal(&TurnInfo::default(), Reason::Turn, || {}).unwrap();
        let new = j.note_born(&handle(b"h"), 1).unwrap();
        assert_ne!(new, dead);
        assert_eq!(j.object_id(&handle(b"h"), 1).unwrap(), new, "the handle names the new object");
        assert_eq!(j.known_object_id(&handle(b"h")).unwrap(), Some(new));
        j.with_meta(|m| -> MetaResult<()> {
            assert_eq!(m.object_by_handle(&handle(b"h").to_bytes())?, Some(new));
            assert_eq!(m.object_handle(dead)?, None, "the dead object gave its handle up");
            assert_eq!(m.born_turn(dead)?, Some(0));
            assert_eq!(m.born_turn(new)?, Some(1));
            Ok(())
        })
        .unwrap();
    }

    /// The same through the log, folded in one batch: the new row is
    /// written, not ignored under the unique handle index.
    #[test]
    fn a_dead_objects_handle_is_given_up_when_the_log_is_folded() {
        let dir = tempfile::tempdir().unwrap();
        let meta = Meta::open(&dir.path().join("meta.db")).unwrap();
        let j = Journal::open_with_log(meta, Arc::new(MemoryStore::new()), Some(&dir.path().join("log"))).unwrap();
        let dead = j.object_id(&handle(b"h"), 1).unwrap();
        assert_eq!(j.with_objects(|m| m.object_by_handle(&handle(b"h").to_bytes())).unwrap(), Some(dead));
        let new = j.note_born(&handle(b"h"), 1).unwrap();
        let other = j.note_born(&handle(b"k"), 1).unwrap();
        j.with_meta(|m| -> MetaResult<()> {
            assert_eq!(m.object_by_handle(&handle(b"h").to_bytes())?, Some(new));
            assert_eq!(m.object_by_handle(&handle(b"k").to_bytes())?, Some(other));
            assert_eq!(m.object_handle(dead)?, None);
            Ok(())
        })
        .unwrap();
        assert!(other.0 > new.0 && new.0 > dead.0);
    }

    #[test]
    fn mount_is_checkpoint_zero_and_turns_count_up() {
        let j = journal();
        assert_eq!(j.current_turn(), 0);
        let c = j.seal(&TurnInfo { message_id: Some("m1".into()), ..Default::default() }, Reason::Turn, || {}).unwrap();
        assert_eq!(c, CheckpointId(1));
        assert_eq!(j.resolve("m1").unwrap(), CheckpointId(1));
        assert_eq!(j.resolve("1").unwrap(), CheckpointId(1));
        assert_eq!(j.resolve("~1").unwrap(), CheckpointId(0));
        let e = j.resolve("nope").unwrap_err().to_string();
        assert!(e.contains("m1") && e.contains("0, 1"), "{e}");
    }

    /// Exact references (a number, `~N`, a message id, a snapshot name)
    /// and snapshot names are checked by indexed lookups, not by reading
    /// every checkpoint: they answer as the whole history says, with
    /// checkpoints forgotten in between, and past the oldest `~N` is unknown.
    #[test]
    fn exact_references_and_names_agree_with_the_whole_history() {
        let j = journal();
        for i in 1..=40 {
            let info = TurnInfo { message_id: (i % 3 != 0).then(|| format!("m{i}")), ..Default::default() };
            j.seal(&info, Reason::Turn, || {}).unwrap();
            if i % 7 == 0 {
                j.name_checkpoint(&format!("n{i}"), i, None).unwrap();
            }
        }
        let no_attic = |_: ObjectId, _: &[u8], _: bool| None;
        j.collect(&[2, 10, 11, 33], "forget", false, &no_attic, None, &retention::no_cache).unwrap();
        let all = j.with_checkpoints(|m| m.checkpoints()).unwrap();
        assert_eq!(all.len(), 37);
        for (back, c) in all.iter().rev().enumerate() {
            let n = c.checkpoint;
            assert_eq!(j.resolve(&format!("~{back}")).unwrap().0, n);
            assert_eq!(j.resolve(&n.to_string()).unwrap().0, n);
            for word in c.message_id.iter().chain(&c.name) {
                assert_eq!(j.resolve(word).unwrap().0, n, "{word}");
            }
            // A checkpoint may take its own message id as its name.
            let taken = c.name.is_some();
            assert_eq!(j.check_snapshot_name(&format!("m{n}"), Some(n)).is_ok(), !taken, "m{n} for {n}");
        }
        let e = j.resolve(&format!("~{}", all.len())).unwrap_err().to_string();
        assert!(e.contains("checkpoints are 0, 1, 3,") && e.contains("message ids m1, m4,"), "{e}");
        assert!(matches!(j.resolve("m10"), Err(JournalError::Forgotten { .. })));
        assert!(matches!(j.resolve("~x"), Err(JournalError::UnknownCheckpoint { .. })));
        for (name, checkpoint) in [("n14", None), ("m5", Some(4)), ("n21", Some(22)), ("other", Some(14))] {
            assert!(j.check_snapshot_name(name, checkpoint).is_err(), "{name} at {checkpoint:?}");
        }
        assert!(j.check_snapshot_name("m10", None).is_ok(), "a forgotten checkpoint's message id is free");
    }

    #[test]
    fn prompt_ids_resolve_by_unique_prefix_and_labels_by_words() {
        let j = journal();
        for (id, label) in [
            ("3f2a9c10-aaaa", "Create the app and build it"),
            ("3f2b0000-bbbb", "Fix the failing test"),
            ("77aa0000-cccc", "fix the README"),
        ] {
            let info = TurnInfo { message_id: Some(id.into()), label: Some(label.into()), ..Default::default() };
            j.seal(&info, Reason::Turn, || {}).unwrap();
        }
        assert_eq!(j.resolve("3f2a9c10-aaaa").unwrap(), CheckpointId(1), "exact");
        assert_eq!(j.resolve("3f2a").unwrap(), CheckpointId(1), "unique prefix");
        assert_eq!(j.resolve("77aa").unwrap(), CheckpointId(3));
        let e = j.resolve("3f2").unwrap_err().to_string();
        assert!(e.contains("unknown"), "a prefix shorter than 4 is no reference: {e}");
        let e = j.resolve("3f2a9c10-aaaa-more").unwrap_err().to_string();
        assert!(e.contains("unknown"), "{e}");
        assert!(matches!(j.resolve("3f2b").unwrap(), CheckpointId(2)));
        let e = j.resolve("3f2").unwrap_err().to_string();
        assert!(e.contains("unknown"), "{e}");
        assert_eq!(j.resolve("build it").unwrap(), CheckpointId(1), "label words");
        assert_eq!(j.resolve("FAILING").unwrap(), CheckpointId(2), "case is ignored");
        let e = j.resolve("fix the").unwrap_err().to_string();
        assert!(
            e.contains("ambiguous") && e.contains("2 (message \"3f2b0000-bbbb\")") && e.contains("fix the README"),
            "{e}"
        );
        assert_eq!(j.resolve("2").unwrap(), CheckpointId(2), "numbers come first");
    }

    /// A message id that is a prefix of another (at
    /// least `MIN_PREFIX` characters) or begins with one is refused at
    /// seal, so a prefix reference never comes to mean another checkpoint.
    #[test]
    fn a_message_id_that_a_prefix_reference_could_confuse_is_refused() {
        let j = journal();
        let owner = turn(&j, "3f2a9c10-aaaa-bbbb").unwrap();
        for bad in ["3f2a9c10", "3f2a", "3f2a9c10-aaaa-bbbb-more", "3f2a9c10-aaaa-bbbb0"] {
            let e = turn(&j, bad).expect_err(bad);
            assert!(matches!(e, JournalError::MessageIdOverlaps { checkpoint: 1, .. }), "{bad}: {e}");
            assert!(e.to_string().contains("\"3f2a9c10-aaaa-bbbb\""), "{e}");
        }
        assert_eq!(j.current_turn(), 1, "a refused id sealed a checkpoint");
        // Shorter than a prefix reference: it can only name itself.
        let short = turn(&j, "3f2").unwrap();
        // A later id that begins with a short one's prefix is refused too.
        turn(&j, "77aa").unwrap();
        assert!(matches!(turn(&j, "77aa-0000"), Err(JournalError::MessageIdOverlaps { .. })));
        assert_eq!(j.resolve("3f2a").unwrap(), owner);
        assert_eq!(j.resolve("3f2a9c10").unwrap(), owner);
        assert_eq!(j.resolve("3f2").unwrap(), short);
        // Characters, not bytes, count.
        turn(&j, "été-1234").unwrap();
        assert!(matches!(turn(&j, "été-"), Err(JournalError::MessageIdOverlaps { .. })));
        assert!(matches!(turn(&j, "été-1234\u{10ffff}"), Err(JournalError::MessageIdOverlaps { .. })));
        turn(&j, "été").unwrap();
    }

    /// An exact message id no longer beats label words
    /// or a prefix: an id equal to another checkpoint's label words makes
    /// the reference ambiguous (both listed, quoted), never the agent's.
    #[test]
    fn an_id_equal_to_label_words_is_ambiguous_not_captured() {
        let j = journal();
        let info = TurnInfo {
            message_id: Some("owner-1".into()),
            label: Some("Fix the tests in src".into()),
            ..Default::default()
        };
        let owner = j.seal(&info, Reason::Turn, || {}).unwrap();
        assert_eq!(j.resolve("fix the tests").unwrap(), owner);
        turn(&j, "fix the tests").unwrap();
        let e = j.resolve("fix the tests").unwrap_err();
        assert!(matches!(e, JournalError::Ambiguous { .. }), "{e}");
        let e = e.to_string();
        assert!(
            e.contains("1 (message \"owner-1\") \"Fix the tests in src\"")
                && e.contains("2 (message \"fix the tests\")"),
            "{e}"
        );
        // Numbers stay final.
        assert_eq!(j.resolve("1").unwrap(), owner);
    }

    /// Ids with bidi overrides or zero-width
    /// characters are printed escaped in "unknown" and "ambiguous" errors.
    #[test]
    fn invisible_characters_are_escaped_in_reference_errors() {
        let j = journal();
        turn(&j, "\u{202e}evil").unwrap();
        turn(&j, "zero\u{200b}width").unwrap();
        for e in [j.resolve("nope").unwrap_err(), j.resolve("\u{202e}").unwrap_err()] {
            let e = e.to_string();
            assert!(!e.contains('\u{202e}') && !e.contains('\u{200b}'), "printed raw: {e:?}");
            assert!(e.contains("\\u{202e}"), "{e}");
        }
        let e = j.resolve("\u{202e}").unwrap_err().to_string();
        assert!(e.starts_with("unknown checkpoint \"\\u{202e}\""), "{e}");
        let label =
            |id: &str, l: &str| TurnInfo { message_id: Some(id.into()), label: Some(l.into()), ..Default::default() };
        j.seal(&label("a\u{200b}1", "deploy \u{202e}now"), Reason::Turn, || {}).unwrap();
        j.seal(&label("a\u{200b}2", "deploy \u{202e}later"), Reason::Turn, || {}).unwrap();
        let e = j.resolve("deploy").unwrap_err();
        assert!(matches!(e, JournalError::Ambiguous { .. }), "{e}");
        let e = e.to_string();
        assert!(!e.contains('\u{202e}') && !e.contains('\u{200b}'), "printed raw: {e:?}");
        assert!(e.contains("(message \"a\\u{200b}1\") \"deploy \\u{202e}now\""), "{e}");
    }

    #[test]
    fn programs_are_named_by_process_not_by_thread() {
        let j = journal();
        let process = std::fs::read_to_string("/proc/self/comm").unwrap().trim_end().to_string();
        let tid = std::thread::scope(|s| {
            std::thread::Builder::new()
                .name("Pool 7".into())
                .spawn_scoped(s, || {
                    let tid = rustix::thread::gettid().as_raw_nonzero().get() as u32;
                    let own = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap();
                    assert_eq!(own.trim_end(), "Pool 7", "the thread has its own name");
                    (tid, j.program(tid))
                })
                .unwrap()
                .join()
                .unwrap()
        });
        assert_eq!(tid.1.as_deref(), Some(process.as_str()), "thread {}", tid.0);
    }

    #[test]
    fn a_record_is_taken_once_per_turn() {
        let j = journal();
        let d = j.object_id(&handle(b"d"), 2).unwrap();
        assert!(j.needs_entry(d, b"x"));
        j.record_entry(d, b"x", None, Some("sh")).unwrap();
        assert!(!j.needs_entry(d, b"x"));
        j.seal(&TurnInfo::default(), Reason::Turn, || {}).unwrap();
        assert!(j.needs_entry(d, b"x"), "a new turn records again");
    }

    fn turn(j: &Journal, id: &str) -> JournalResult<CheckpointId> {
        j.seal(&TurnInfo { message_id: Some(id.into()), ..Default::default() }, Reason::Turn, || {})
    }

    #[test]
    fn message_ids_that_cannot_name_one_checkpoint_are_refused() {
        let j = journal();
        for bad in ["", "2", "~1", "-m", "a/b", ".", "..", "a\nb", "\u{1b}[31mred", &"x".repeat(MESSAGE_ID_MAX + 1)] {
            assert!(matches!(turn(&j, bad), Err(JournalError::BadMessageId { .. })), "{bad:?} was accepted");
        }
        assert_eq!(j.current_turn(), 0, "a refused id sealed a checkpoint");
        for good in ["m1", "prompt 7", "2x", "été", &"y".repeat(MESSAGE_ID_MAX)] {
            turn(&j, good).unwrap_or_else(|e| panic!("{good:?} refused: {e}"));
        }
    }

    #[test]
    fn a_repeated_message_id_is_the_same_checkpoint_or_refused() {
        let j = journal();
        let first = turn(&j, "m1").unwrap();
        assert_eq!(turn(&j, "m1").unwrap(), first, "a repeat with nothing changed is the same checkpoint");
        let d = j.object_id(&handle(b"d"), 2).unwrap();
        j.record_entry(d, b"x", None, Some("sh")).unwrap();
        assert!(matches!(turn(&j, "m1"), Err(JournalError::DuplicateMessageId { checkpoint: 1, .. })));
        turn(&j, "m2").unwrap();
        assert!(matches!(turn(&j, "m1"), Err(JournalError::DuplicateMessageId { .. })));
        assert_eq!(j.resolve("m1").unwrap(), first);
    }
}
