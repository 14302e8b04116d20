//! `fsck`: checks that a store can still give back every checkpoint.
//!
//! It reads every chunk and checks its blake3, follows every reference
//! (pre-image records to chunks, chunks to packs, attic entries to object
//! rows, object rows to the inodes views read, checkpoints to parents,
//! pending rows to records), and names each problem by the checkpoints and
//! paths it costs, not only by chunk hash. Nothing here prints or parses
//! arguments: [`check`] returns a typed [`Report`] and [`repair`] applies
//! the conservative fixes; `cli/fsck.rs` presents them.
//!
//! Which checkpoints a record matters to follows the view rules
//! (`view/mod.rs`): the view at K takes an object's content from its
//! earliest content record at or after K, so the content record of turn T
//! is what checkpoints K in (previous content record, T] show; and an
//! object named by a record of turn T but with no record at or after K
//! holding all a view needs (content for a file) is read from its inode, in
//! the workspace or the attic, by handle.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::journal::Journal;
use crate::meta::{Checkpoint, Meta, MetaError, ObjectId};
use crate::store::{ChunkId, ContentRef, CorruptChunk, StoreError};
use crate::sys::FileHandle;
use crate::text::quote_name;
use crate::view::TreeView;
use crate::workspace::LiveTree;
use crate::workspace::backing;
use crate::world::Held;

pub use crate::journal::store_check::{StoreDamage, store_damage, store_damage_thorough};

/// Errors that stop a check (as opposed to problems it finds).
#[derive(Debug, thiserror::Error)]
pub enum FsckError {
    #[error(transparent)]
    Meta(#[from] MetaError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Journal(#[from] crate::journal::JournalError),
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
}

pub type FsckResult<T> = Result<T, FsckError>;

/// What is checked.
pub struct Target<'a> {
    /// The database and chunk store (opened read-only, or the daemon's own).
    pub journal: &'a Journal,
    /// The live workspace, for the inodes views read and to name paths.
    /// Without it, paths are named from records alone, unverified.
    pub tree: Option<&'a LiveTree>,
    /// The tree lock, held while paths are checked in views of the past
    /// through `tree` (without it they are named from records alone).
    pub lock: Option<Held<'a>>,
    /// The store's attic directory, if it has one.
    pub attic: Option<&'a Path>,
    /// The store directory, for the checks of the store as a whole
    /// ([`store_damage`]); None in tests of the rest.
    pub store_dir: Option<&'a Path>,
    /// None when a daemon serves the tree (the check runs in it); else
    /// since when none has (`Journal::outside_since_ns`): a change made
    /// later was made between mounts, which the next mount marks, and is
    /// no damage.
    pub unserved_since_ns: Option<i64>,
}

/// How far a check got, for a progress bar.
#[derive(Clone, Copy, Debug)]
pub enum Progress {
    /// Reading chunks: bytes read so far of `total`.
    Chunks { done: u64, total: u64 },
    /// Following references (after every chunk was read).
    References,
}

/// A checkpoint (or the live workspace) and the path a problem costs there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Affected {
    /// None: the live workspace (a rewound file whose bytes are still to be
    /// written from the store).
    pub checkpoint: Option<i64>,
    pub message_id: Option<String>,
    /// The path relative to the workspace root, when known (in JSON as
    /// `crate::name_json` writes names).
    #[serde(with = "crate::name_json::option")]
    pub path: Option<PathBuf>,
}

/// What is wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ProblemKind {
    /// A chunk's stored bytes do not decode to it (bit rot, a truncated or
    /// missing pack).
    /// `others`: further chunks of the same content damaged or missing (a
    /// record is one problem, however many of its chunks are lost).
    ChunkCorrupt {
        chunk: String,
        detail: String,
        pack: Option<u32>,
        offset: Option<u64>,
        #[serde(default)]
        others: u64,
    },
    /// A record lists a chunk the store does not have.
    ChunkMissing {
        chunk: String,
        #[serde(default)]
        others: u64,
    },
    /// A record's chunk list cannot be decoded.
    ChunkListUndecodable { detail: String },
    /// Views need the object's inode (in the workspace or the attic) and it
    /// is gone, or the object has no handle to find it by.
    InodeGone { detail: String },
    /// Records name an object that has no row in `objects`.
    ObjectRowMissing,
    /// A file in the attic whose name is no object id with a row.
    AtticEntryUnknown {
        #[serde(with = "crate::name_json")]
        name: PathBuf,
    },
    /// `attic/<N>` is another inode than object N's row points at.
    AtticEntryMismatch {
        #[serde(with = "crate::name_json")]
        name: PathBuf,
    },
    /// Entry records of a directory that has no object row.
    EntryDirUnknown {
        turn: i64,
        dir: i64,
        #[serde(with = "crate::name_json")]
        name: PathBuf,
    },
    /// A checkpoint's parent does not exist (or is not older).
    ParentMissing { checkpoint: i64, parent: i64 },
    /// The store as a whole: the database is damaged, or the packs or the
    /// attic do not belong to it (see [`store_damage`]).
    StoreDamaged { detail: String },
    /// Records of a turn that has no checkpoint.
    RecordsOfUnknownTurn { turn: i64, records: i64 },
    /// A rewound file's bytes cannot be written: the record holding its
    /// chunk list is gone.
    PendingSourceMissing { turn: Option<i64>, object: Option<i64> },
    /// The object was changed under the mount, bypassing it, after
    /// checkpoint `after` was sealed: nothing recorded its state at the
    /// checkpoints named, and their views give EIO for it.
    ChangedUnderMount { after: i64 },
    /// Cached content of an object lists a damaged or missing chunk; the
    /// next capture of an unchanged file would reuse it.
    KnownContentDamaged { chunk: String },
    /// The chunk's reference count (`chunk_refs`) is not the number of
    /// lists naming it: too low, a collection could free it while a record
    /// needs it; too high, it is never freed.
    ChunkCountWrong { chunk: String, stored: Option<i64>, actual: i64 },
}

impl std::fmt::Display for ProblemKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProblemKind::ChunkCorrupt { chunk, detail, pack, offset, others } => {
                write!(f, "chunk {chunk} is corrupt ({detail}")?;
                if let (Some(p), Some(o)) = (pack, offset) {
                    write!(f, "; pack {p} at offset {o}")?;
                }
                write!(f, ")")?;
                write_others(f, *others)
            }
            ProblemKind::ChunkMissing { chunk, others } => {
                write!(f, "chunk {chunk} is missing from the store")?;
                write_others(f, *others)
            }
            ProblemKind::ChunkListUndecodable { detail } => write!(f, "the chunk list is unreadable ({detail})"),
            ProblemKind::InodeGone { detail } => write!(f, "the recorded inode is gone ({detail})"),
            ProblemKind::ObjectRowMissing => write!(f, "records name an object that has no row in the database"),
            ProblemKind::AtticEntryUnknown { name } => {
                write!(f, "attic entry {} belongs to no object", quote_name(name))
            }
            ProblemKind::AtticEntryMismatch { name } => {
                write!(f, "attic entry {} is not the inode its object's row points at", quote_name(name))
            }
            ProblemKind::EntryDirUnknown { turn, dir, name } => write!(
                f,
                "an entry record of turn {turn} names {} in directory object {dir}, which has no row",
                quote_name(name)
            ),
            ProblemKind::ParentMissing { checkpoint, parent } => {
                write!(f, "checkpoint {checkpoint} has parent {parent}, which does not exist before it")
            }
            ProblemKind::StoreDamaged { detail } => write!(f, "{detail}"),
            ProblemKind::RecordsOfUnknownTurn { turn, records } => {
                write!(f, "{records} records belong to turn {turn}, which has no checkpoint")
            }
            ProblemKind::PendingSourceMissing { turn, object } => match (turn, object) {
                (Some(t), Some(o)) => write!(f, "the rewound content (record of object {o} in turn {t}) is gone"),
                _ => write!(f, "the rewound content has no chunk list"),
            },
            ProblemKind::ChangedUnderMount { after } => write!(
                f,
                "changed under the mount, bypassing it, after checkpoint {after} was sealed: its state then was never \
                 recorded, so it cannot be read back"
            ),
            ProblemKind::KnownContentDamaged { chunk } => {
                write!(f, "cached content lists damaged chunk {chunk} (only a cache: repair forgets it)")
            }
            ProblemKind::ChunkCountWrong { chunk, stored, actual } => {
                let stored = stored.map_or_else(|| "no reference count".to_string(), |n| format!("a count of {n}"));
                write!(f, "chunk {chunk} has {stored} but {actual} content lists name it (repair recounts)")
            }
        }
    }
}

fn write_others(f: &mut std::fmt::Formatter<'_>, others: u64) -> std::fmt::Result {
    match others {
        0 => Ok(()),
        1 => write!(f, ", and 1 more chunk of this content is lost"),
        n => write!(f, ", and {n} more chunks of this content are lost"),
    }
}

/// One problem, with where it hurts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    #[serde(flatten)]
    pub kind: ProblemKind,
    /// The object concerned, if any.
    pub object: Option<i64>,
    /// The pre-image record concerned: its turn (with `object`).
    pub record_turn: Option<i64>,
    /// Checkpoints (and paths) that cannot be read back whole because of it.
    pub affected: Vec<Affected>,
    /// `--repair` can deal with it (see [`repair`]).
    pub repairable: bool,
    /// Set by [`repair`]: what was done.
    pub repaired: Option<String>,
}

/// What a check found.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Report {
    pub chunks_checked: u64,
    /// Bytes read from the packs to check them.
    pub bytes_checked: u64,
    /// Pre-image records whose chunk lists were followed.
    pub records_checked: u64,
    pub checkpoints: u64,
    /// Every chunk whose stored bytes are damaged or unreadable.
    #[serde(default)]
    pub damaged_chunks: Vec<String>,
    pub problems: Vec<Problem>,
    /// What could not be checked, and why.
    pub notes: Vec<String>,
}

impl Report {
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }

    /// The report on a store whose database cannot be used: what is wrong
    /// with the store as a whole, and nothing else.
    pub fn unusable(damage: Vec<StoreDamage>) -> Report {
        let mut report = Report::default();
        for d in damage {
            report.problems.push(problem(ProblemKind::StoreDamaged { detail: d.detail }, None, None));
        }
        report.notes.push("nothing else could be checked without a usable database".to_string());
        report
    }
}

fn problem(kind: ProblemKind, object: Option<ObjectId>, record_turn: Option<i64>) -> Problem {
    let repairable = matches!(
        kind,
        ProblemKind::ChunkCorrupt { .. }
            | ProblemKind::ChunkMissing { .. }
            | ProblemKind::ChunkListUndecodable { .. }
            | ProblemKind::KnownContentDamaged { .. }
            | ProblemKind::ChunkCountWrong { .. }
    );
    Problem { kind, object: object.map(|o| o.0), record_turn, affected: Vec::new(), repairable, repaired: None }
}

/// The verdict on one chunk a record lists.
enum ChunkState<'a> {
    Good,
    Corrupt(&'a CorruptChunk),
    Missing,
}

struct Chunks {
    /// Every indexed chunk id, sorted.
    listed: Vec<ChunkId>,
    corrupt: HashMap<ChunkId, CorruptChunk>,
}

impl Chunks {
    fn state(&self, id: &ChunkId) -> ChunkState<'_> {
        if let Some(c) = self.corrupt.get(id) {
            ChunkState::Corrupt(c)
        } else if self.listed.binary_search(id).is_ok() {
            ChunkState::Good
        } else {
            ChunkState::Missing
        }
    }

    /// The problem of a chunk list, if any: undecodable, or chunks damaged
    /// or missing (the first one named, the others counted).
    fn problem_of_list(&self, list: &[u8], used: &mut HashSet<ChunkId>) -> Option<ProblemKind> {
        let spans = match ContentRef::decode_chunks(list) {
            Ok(s) => s,
            Err(e) => return Some(ProblemKind::ChunkListUndecodable { detail: e.to_string() }),
        };
        let mut seen = HashSet::new();
        let mut first = None;
        let mut lost = 0u64;
        for span in spans {
            used.insert(span.id);
            if !seen.insert(span.id) {
                continue;
            }
            let kind = match self.state(&span.id) {
                ChunkState::Good => continue,
                ChunkState::Corrupt(c) => corrupt_kind(c),
                ChunkState::Missing => ProblemKind::ChunkMissing { chunk: span.id.to_string(), others: 0 },
            };
            lost += 1;
            first.get_or_insert(kind);
        }
        let mut kind = first?;
        if let ProblemKind::ChunkCorrupt { others, .. } | ProblemKind::ChunkMissing { others, .. } = &mut kind {
            *others = lost - 1;
        }
        Some(kind)
    }
}

fn corrupt_kind(c: &CorruptChunk) -> ProblemKind {
    ProblemKind::ChunkCorrupt {
        chunk: c.id.to_string(),
        detail: c.detail.clone(),
        pack: c.location.map(|l| l.0),
        offset: c.location.map(|l| l.1),
        others: 0,
    }
}

/// Opens inodes by handle: through the live tree, else with the attic as
/// the filesystem to look in.
struct Inodes<'a> {
    tree: Option<&'a LiveTree>,
    attic: Option<OwnedFd>,
}

impl Inodes<'_> {
    fn available(&self) -> bool {
        self.tree.is_some() || self.attic.is_some()
    }

    fn open(&self, handle: &FileHandle) -> std::io::Result<OwnedFd> {
        match (self.tree, &self.attic) {
            (Some(tree), _) => {
                tree.backing().open_handle(handle, libc::O_PATH).map_err(|e| std::io::Error::from_raw_os_error(e.0))
            }
            (None, Some(attic)) => backing::open_by_handle_at(attic.as_fd(), handle, libc::O_PATH)
                .map_err(|e| std::io::Error::from_raw_os_error(e.0)),
            (None, None) => Err(std::io::Error::from_raw_os_error(libc::ENOTSUP)),
        }
    }
}

/// Runs every check. `progress` is called as chunks are read.
pub fn check(target: &Target<'_>, progress: &mut dyn FnMut(Progress)) -> FsckResult<Report> {
    let journal = target.journal;
    let mut report = Report::default();
    if let Some(dir) = target.store_dir {
        for d in store_damage_thorough(dir) {
            report.problems.push(problem(ProblemKind::StoreDamaged { detail: d.detail }, None, None));
        }
    }
    let checkpoints = journal.with_checkpoints(|m| m.checkpoints())?;
    report.checkpoints = checkpoints.len() as u64;

    // Every chunk, read and hashed.
    let store = journal.store();
    let total = store.stats()?.stored_bytes;
    let mut done = 0u64;
    let verified = store.verify_with_progress(&mut |n| {
        done += n;
        progress(Progress::Chunks { done, total });
    })?;
    progress(Progress::References);
    report.chunks_checked = verified.checked;
    report.bytes_checked = verified.bytes;
    report.damaged_chunks = verified.corrupt.iter().map(|c| c.id.to_string()).collect();
    let chunks = Chunks { listed: store.list()?, corrupt: verified.corrupt.into_iter().map(|c| (c.id, c)).collect() };
    let mut used = HashSet::new();

    // Pre-image records -> chunks.
    let mut damaged: Vec<Problem> = Vec::new();
    let mut records = 0u64;
    journal.with_meta(|m| {
        m.for_each_content_record(|turn, object, _hash, list| {
            records += 1;
            if let Some(kind) = chunks.problem_of_list(list, &mut used) {
                damaged.push(problem(kind, Some(object), Some(turn)));
            }
        })
    })?;
    report.records_checked = records;

    // Pending rows (rewound files still to be written) -> records -> chunks.
    let pending = journal.with_meta(|m| m.pending_sources())?;
    let mut pending_problems = Vec::new();
    for p in pending {
        let list = p.inline.clone().or(p.source_chunks.clone());
        let kind = match list {
            Some(list) => chunks.problem_of_list(&list, &mut used),
            None => {
                Some(ProblemKind::PendingSourceMissing { turn: p.source.map(|s| s.0), object: p.source.map(|s| s.1.0) })
            }
        };
        if let Some(kind) = kind {
            let object = journal.with_objects(|m| m.object_by_handle(&p.handle))?;
            let mut pr = problem(kind, object, None);
            // The workspace itself is affected, whatever a repair of the
            // history does: never repaired here (fsck does not touch it).
            pr.repairable = false;
            pr.affected.push(Affected { checkpoint: None, message_id: None, path: live_path(target, &p.handle) });
            pending_problems.push(pr);
        }
    }

    // The content cache -> chunks (reported last: it costs no history).
    let mut cache_problems = Vec::new();
    for (object, list) in journal.with_meta(|m| m.known_content_lists())? {
        if let Some(kind) = chunks.problem_of_list(&list, &mut used) {
            let chunk = match &kind {
                ProblemKind::ChunkCorrupt { chunk, .. } | ProblemKind::ChunkMissing { chunk, .. } => chunk.clone(),
                ProblemKind::ChunkListUndecodable { detail } => detail.clone(),
                _ => continue,
            };
            cache_problems.push(problem(ProblemKind::KnownContentDamaged { chunk }, Some(object), None));
        }
    }

    // Reference counts -> the lists (a collection trusts them).
    for w in journal.with_meta(|m| m.wrong_chunk_counts())? {
        let kind = ProblemKind::ChunkCountWrong { chunk: w.chunk.to_string(), stored: w.stored, actual: w.actual };
        cache_problems.push(problem(kind, None, None));
    }

    // Damaged chunks no record uses still deserve a line.
    let mut unused: Vec<&CorruptChunk> = chunks.corrupt.values().filter(|c| !used.contains(&c.id)).collect();
    unused.sort_by_key(|c| c.id);
    for c in unused {
        report.problems.push(problem(corrupt_kind(c), None, None));
    }

    // Objects whose inode views read (workspace or attic) -> the inode.
    let attic_fd = target.attic.filter(|a| a.is_dir()).and_then(|a| {
        rustix::fs::open(a, rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY, rustix::fs::Mode::empty()).ok()
    });
    let inodes = Inodes { tree: target.tree, attic: attic_fd };
    let mut gone = Vec::new();
    if !inodes.available() {
        report.notes.push(
            "the inodes views read from the workspace and the attic were not checked (no workspace and no attic)"
                .to_string(),
        );
    }
    for c in journal.with_meta(|m| m.record_coverage())? {
        // Checkpoints after the newest record that says all without the
        // inode, up to the newest that names the object: their views read
        // the inode, found through the object's row. None up to its birth
        // shows it: a file born, changed and removed in one turn has a
        // record of that turn (its chmod's pre-image) that no view reads,
        // and its inode is rightly gone.
        let from = c.newest_cover.unwrap_or(i64::MIN).max(c.born_turn.unwrap_or(i64::MIN));
        let ks: Vec<i64> =
            checkpoints.iter().map(|k| k.checkpoint).filter(|k| *k > from && *k <= c.newest_record).collect();
        if !c.has_row {
            gone.push((problem(ProblemKind::ObjectRowMissing, Some(c.object), None), ks));
            continue;
        }
        // No checkpoint in that range (records of a turn being forgotten,
        // `journal/retention.rs`): no view reads the inode.
        let needs_inode = c.newest_cover.is_none_or(|t| c.newest_record > t) && !ks.is_empty();
        if !needs_inode || !inodes.available() {
            continue;
        }
        let detail = match c.handle.as_deref().map(FileHandle::from_bytes) {
            None => Some("the object has no handle".to_string()),
            Some(None) => Some("the object's handle is malformed".to_string()),
            Some(Some(h)) => match inodes.open(&h) {
                Ok(_) => None,
                Err(e) if matches!(e.raw_os_error(), Some(libc::ESTALE) | Some(libc::ENOENT)) => {
                    Some("it is neither in the workspace nor in the attic".to_string())
                }
                Err(e) => {
                    report.notes.push(format!("object {}: cannot open its inode to check it: {e}", c.object.0));
                    None
                }
            },
        };
        if let Some(detail) = detail {
            gone.push((problem(ProblemKind::InodeGone { detail }, Some(c.object), None), ks));
        }
    }

    // The attic -> object rows.
    if let (Some(attic), Some(fd)) = (target.attic, inodes.attic.as_ref()) {
        check_attic(journal, attic, fd, &mut report)?;
    }

    // Entry records -> directories; checkpoints -> parents; records -> turns.
    for (turn, dir, name) in journal.with_meta(|m| m.entries_in_unknown_dirs())? {
        let name = PathBuf::from(OsString::from_vec(name));
        report.problems.push(problem(ProblemKind::EntryDirUnknown { turn, dir: dir.0, name }, Some(dir), Some(turn)));
    }
    let ids: HashSet<i64> = checkpoints.iter().map(|c| c.checkpoint).collect();
    for c in &checkpoints {
        if let Some(parent) = c.parent
            && (!ids.contains(&parent) || parent >= c.checkpoint)
        {
            report.problems.push(problem(ProblemKind::ParentMissing { checkpoint: c.checkpoint, parent }, None, None));
        }
    }
    for (turn, n) in journal.with_meta(|m| m.records_of_unknown_turns())? {
        report.problems.push(problem(ProblemKind::RecordsOfUnknownTurn { turn, records: n }, None, Some(turn)));
    }

    let under = changed_under_mount(target, &checkpoints, &mut report)?;

    // Name what each damaged record and lost inode costs.
    let mut namer = Namer::new(target, &checkpoints)?;
    for mut p in damaged {
        let (Some(object), Some(turn)) = (p.object, p.record_turn) else { continue };
        let ks = content_checkpoints(journal, &checkpoints, ObjectId(object), turn)?;
        p.affected = namer.name(ObjectId(object), &ks)?;
        report.problems.push(p);
    }
    for (mut p, ks) in gone {
        if let Some(object) = p.object {
            p.affected = namer.name(ObjectId(object), &ks)?;
        }
        report.problems.push(p);
    }
    let changed = |ks: &[i64], object| {
        problem(ProblemKind::ChangedUnderMount { after: ks.last().copied().unwrap_or(0) }, object, None)
    };
    for (object, ks) in under.recorded {
        let mut p = changed(&ks, Some(object));
        p.affected = namer.name(object, &ks)?;
        report.problems.push(p);
    }
    for (path, ks) in under.never_recorded {
        let mut p = changed(&ks, None);
        p.affected = ks
            .iter()
            .map(|k| Affected {
                checkpoint: Some(*k),
                message_id: namer.messages.get(k).cloned().flatten(),
                path: path.clone(),
            })
            .collect();
        report.problems.push(p);
    }
    report.problems.extend(pending_problems);
    report.problems.extend(cache_problems);
    Ok(report)
}

/// Objects changed under the mount, and the checkpoints (ascending) whose
/// state of each is unknown for it.
#[derive(Default)]
struct UnderMount {
    recorded: BTreeMap<ObjectId, Vec<i64>>,
    /// Objects never recorded, by their path in the tree now.
    never_recorded: Vec<(Option<PathBuf>, Vec<i64>)>,
}

/// The objects whose state at some checkpoints is unknown because they
/// were changed under the mount, bypassing it: the ranges noted when such
/// an object was recorded afterwards (`bypassed`), and the objects of the
/// live tree whose ctime is later than the journal vouches for, each
/// confirmed by the view of the checkpoint, which judges it as it does
/// when read (`TreeView::state`, `TreeView::check_listing`). Read-only:
/// nothing is noted. Which checkpoints to ask follows the view rules: after
/// the newest record that holds all a view needs of the object (for a
/// file, its content; a directory's listing is always live) and its
/// birth, up to the newest sealed before its ctime (to the end of the
/// seal's millisecond), skipping an object recorded in the open turn
/// (views read its record). A view's bound grows with the checkpoint, so
/// the views are asked oldest first until one reads the object.
fn changed_under_mount(target: &Target<'_>, checkpoints: &[Checkpoint], report: &mut Report) -> FsckResult<UnderMount> {
    let journal = target.journal;
    let kept: Vec<i64> = checkpoints.iter().map(|c| c.checkpoint).collect();
    let mut found: BTreeMap<ObjectId, BTreeSet<i64>> = BTreeMap::new();
    for (object, first, last) in journal.with_meta(|m| m.all_bypassed())? {
        found.entry(object).or_default().extend(kept.iter().filter(|k| (first..=last).contains(*k)));
    }
    let mut out = UnderMount::default();
    match (target.tree, target.lock) {
        (Some(tree), Some(lock)) => {
            for u in unrecorded_changes(lock, target, tree, &kept)? {
                match u.id {
                    Some(id) => found.entry(id).or_default().extend(u.checkpoints),
                    None => out.never_recorded.push((u.path, u.checkpoints)),
                }
            }
        }
        _ => report.notes.push(
            "the workspace was not looked at for changes under the mount that nothing recorded (no workspace)"
                .to_string(),
        ),
    }
    out.recorded =
        found.into_iter().filter(|(_, ks)| !ks.is_empty()).map(|(o, ks)| (o, ks.into_iter().collect())).collect();
    Ok(out)
}

/// A live object changed under the mount with nothing recorded of it since.
struct Unrecorded {
    id: Option<ObjectId>,
    /// Its path now, for an object never recorded (one recorded is named
    /// in each view by [`Namer`]).
    path: Option<PathBuf>,
    /// The checkpoints whose views cannot read it.
    checkpoints: Vec<i64>,
}

/// The live objects changed under the mount with nothing recorded of them
/// since; see [`changed_under_mount`].
fn unrecorded_changes(
    lock: Held<'_>,
    target: &Target<'_>,
    tree: &LiveTree,
    kept: &[i64],
) -> FsckResult<Vec<Unrecorded>> {
    let journal = target.journal;
    let Some(&oldest) = kept.iter().min() else { return Ok(Vec::new()) };
    let since = journal.sealed_after(oldest - 1)?.map_or(i64::MIN, crate::meta::end_of_ms);
    let changed = tree.backing().scan_changed_since(since).map_err(|e| FsckError::Io {
        context: "cannot walk the workspace".to_string(),
        source: std::io::Error::from_raw_os_error(e.0),
    })?;
    let open = journal.current_turn();
    let mut out = Vec::new();
    for c in changed {
        let Ok(fd) = tree.backing().open_handle(&c.handle, libc::O_PATH) else { continue };
        let Ok(st) = rustix::fs::fstat(&fd) else { continue };
        let ctime = crate::journal::ns(st.st_ctime, st.st_ctime_nsec as i64);
        if target.unserved_since_ns.is_some_and(|t| ctime > t) {
            continue;
        }
        let id = journal.known_object_id(&c.handle)?;
        let records = match id {
            Some(id) => journal.with_meta(|m| m.records_of(id))?,
            None => Default::default(),
        };
        if records.last_turn.is_some_and(|t| t >= open) {
            continue;
        }
        let read_from = match c.kind {
            crate::workspace::Kind::Dir => records.born_turn,
            crate::workspace::Kind::File => records.last_content_turn.max(records.born_turn),
            _ => records.last_turn.max(records.born_turn),
        };
        let Some(newest) = journal.with_checkpoints(|m| m.newest_sealed_before(ctime))? else { continue };
        let node = crate::view::Node { id, handle: Some(c.handle.clone()) };
        let mut unknown = Vec::new();
        let mut tainted_before = i64::MIN;
        for &k in kept.iter().filter(|k| read_from.is_none_or(|t| **k > t) && **k <= newest) {
            if k < tainted_before {
                continue;
            }
            let view = TreeView::at(lock, tree, journal, k);
            let read = match c.kind {
                crate::workspace::Kind::Dir => view.check_listing(&node),
                _ => view.state(&node).map(|_| ()),
            };
            match read {
                Err(crate::view::ViewError::ChangedUnderMount { .. }) => unknown.push(k),
                // Changed between mounts, before checkpoint t: no damage.
                Err(crate::view::ViewError::ChangedOutside(_, t)) => tainted_before = t,
                _ => break,
            }
        }
        if !unknown.is_empty() {
            let path = if id.is_none() { tree.backing().path_of_handle(&c.handle) } else { None };
            out.push(Unrecorded { id, path, checkpoints: unknown });
        }
    }
    Ok(out)
}

/// The checkpoints whose views take the object's content from its content
/// record of `turn`: K <= turn with no earlier content record at or after K.
fn content_checkpoints(
    journal: &Journal,
    checkpoints: &[Checkpoint],
    object: ObjectId,
    turn: i64,
) -> FsckResult<Vec<i64>> {
    let mut out = Vec::new();
    for k in checkpoints.iter().rev().map(|c| c.checkpoint).filter(|k| *k <= turn) {
        match journal.with_pre_images(|r| r.content_at(object, k))? {
            Some((t, _, _)) if t == turn => out.push(k),
            _ => break,
        }
    }
    out.reverse();
    Ok(out)
}

fn check_attic(journal: &Journal, attic: &Path, fd: &OwnedFd, report: &mut Report) -> FsckResult<()> {
    let rows: HashMap<i64, Option<Vec<u8>>> =
        journal.with_objects(|m| m.object_handles())?.into_iter().map(|(id, h)| (id.0, h)).collect();
    let entries = std::fs::read_dir(attic)
        .map_err(|e| FsckError::Io { context: format!("cannot list the attic {}", attic.display()), source: e })?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry
            .map_err(|e| FsckError::Io { context: format!("cannot list the attic {}", attic.display()), source: e })?;
        names.push(entry.file_name());
    }
    names.sort();
    for name in names {
        let shown = PathBuf::from(&name);
        let id = std::str::from_utf8(name.as_bytes()).ok().and_then(|s| s.parse::<i64>().ok());
        let Some(Some(row)) = id.map(|i| rows.get(&i)) else {
            report.problems.push(problem(ProblemKind::AtticEntryUnknown { name: shown }, None, None));
            continue;
        };
        let here = backing::handle_at(fd.as_fd(), &name).ok().map(|h| h.to_bytes());
        if here.is_none() || row.as_deref() != here.as_deref() {
            report.problems.push(problem(ProblemKind::AtticEntryMismatch { name: shown }, id.map(ObjectId), None));
        }
    }
    Ok(())
}

/// The path of a live inode relative to the workspace root, if it is in
/// the workspace.
fn live_path(target: &Target<'_>, handle: &[u8]) -> Option<PathBuf> {
    let handle = FileHandle::from_bytes(handle)?;
    target.tree?.backing().path_of_handle(&handle)
}

/// The path of `object` in the view at checkpoint `k`, found the way
/// `fsck` names damage (for the messages of other commands).
pub fn path_in_view(lock: Held<'_>, tree: &LiveTree, journal: &Journal, object: ObjectId, k: i64) -> Option<PathBuf> {
    let target =
        Target { journal, tree: Some(tree), lock: Some(lock), attic: None, store_dir: None, unserved_since_ns: None };
    let mut namer = Namer::new(&target, &[]).ok()?;
    namer.name(object, &[k]).ok()?.into_iter().find_map(|a| a.path)
}

/// Names the paths an object has in checkpoint views: candidates from its
/// live location and from the entry records that name it, each checked by
/// resolving it in the view when the live tree is at hand.
struct Namer<'a> {
    target: &'a Target<'a>,
    messages: BTreeMap<i64, Option<String>>,
    root: Option<ObjectId>,
    /// Entry records naming each object (a scan of `entry_pre` each): a
    /// missing pack damages every record, and their paths share parents.
    naming: HashMap<ObjectId, Vec<(i64, ObjectId, Vec<u8>)>>,
    /// Candidate paths by (object, checkpoint).
    paths: HashMap<(ObjectId, i64), Vec<Vec<u8>>>,
}

/// How deep a chain of entry records is followed up to the root.
const MAX_DEPTH: usize = 64;

impl<'a> Namer<'a> {
    fn new(target: &'a Target<'a>, checkpoints: &[Checkpoint]) -> FsckResult<Namer<'a>> {
        let root = match target.tree {
            Some(tree) => match backing::handle_of_fd(tree.root_fd()) {
                Ok(h) => target.journal.known_object_id(&h)?,
                Err(_) => None,
            },
            None => None,
        };
        Ok(Namer {
            target,
            messages: checkpoints.iter().map(|c| (c.checkpoint, c.message_id.clone())).collect(),
            root,
            naming: HashMap::new(),
            paths: HashMap::new(),
        })
    }

    /// The checkpoints among `ks` that show `object`, with its path there.
    /// With the live tree, only checkpoints where a path was verified are
    /// kept, unless none was (then every one, without a path: better a
    /// checkpoint named too many than one left out).
    fn name(&mut self, object: ObjectId, ks: &[i64]) -> FsckResult<Vec<Affected>> {
        let mut out = Vec::new();
        for &k in ks {
            let candidates = self.candidates(object, k, 0)?;
            let path = match (self.target.tree, self.target.lock) {
                (Some(tree), Some(lock)) => {
                    let view = TreeView::at(lock, tree, self.target.journal, k);
                    candidates.into_iter().find(|p| {
                        view.resolve(Path::new(OsStr::from_bytes(p)))
                            .ok()
                            .flatten()
                            .is_some_and(|node| node.id == Some(object))
                    })
                }
                _ => candidates.into_iter().next(),
            };
            out.push((k, path));
        }
        if self.target.tree.is_some() && out.iter().any(|(_, p)| p.is_some()) {
            out.retain(|(_, p)| p.is_some());
        }
        Ok(out
            .into_iter()
            .map(|(k, p)| Affected {
                checkpoint: Some(k),
                message_id: self.messages.get(&k).cloned().flatten(),
                path: p.map(|p| PathBuf::from(OsString::from_vec(p))),
            })
            .collect())
    }

    /// Candidate paths (as bytes) of `object` in the view at `k`.
    fn candidates(&mut self, object: ObjectId, k: i64, depth: usize) -> FsckResult<Vec<Vec<u8>>> {
        if Some(object) == self.root {
            return Ok(vec![Vec::new()]);
        }
        if depth >= MAX_DEPTH {
            return Ok(Vec::new());
        }
        if let Some(known) = self.paths.get(&(object, k)) {
            return Ok(known.clone());
        }
        let journal = self.target.journal;
        let naming = match self.naming.get(&object) {
            Some(n) => n.clone(),
            None => {
                let n = journal.with_meta(|m| m.entries_targeting(object))?;
                self.naming.insert(object, n.clone());
                n
            }
        };
        let mut out = Vec::new();
        // Where the view at k finds it by name: entry records at or after k.
        for (turn, dir, name) in naming {
            if turn < k || journal.with_pre_images(|r| r.entry_turn_at(dir, &name, k))? != Some(turn) {
                continue;
            }
            let parents = self.candidates(dir, k, depth + 1)?;
            let parents = if parents.is_empty() && self.target.tree.is_none() {
                vec![format!("<object {}>", dir.0).into_bytes()]
            } else {
                parents
            };
            for parent in parents {
                let mut p = parent;
                if !p.is_empty() {
                    p.push(b'/');
                }
                p.extend_from_slice(&name);
                out.push(p);
            }
        }
        // Where it is now, if its name did not change since.
        if let Some(handle) = journal.with_objects(|m| m.object_handle(object))?
            && let Some(p) = live_path(self.target, &handle)
        {
            out.push(p.into_os_string().into_vec());
        }
        out.dedup();
        self.paths.insert((object, k), out.clone());
        Ok(out)
    }
}

/// What [`repair`] needs to change the store.
pub trait RepairStore {
    /// Removes damaged chunks from the index.
    fn forget_chunks(&self, ids: &[ChunkId]) -> Result<usize, StoreError>;
}

impl RepairStore for crate::store::PackStore {
    fn forget_chunks(&self, ids: &[ChunkId]) -> Result<usize, StoreError> {
        self.forget(ids)
    }
}

/// Applies the conservative repairs to `meta` and `store` (both opened for
/// writing, with nothing else using them), marking each problem dealt with:
///
/// - a damaged chunk leaves the index, so the next write of the same bytes
///   stores a good copy instead of deduplicating against the bad one;
/// - a pre-image record whose content is lost is dropped, and its object is
///   marked unknown for the checkpoints that needed that record (their
///   views then say so, instead of showing another version as that one);
/// - cached content listing a damaged chunk is forgotten.
///
/// Nothing else is changed: attic entries, object rows, pending files and
/// the workspace stay as they are, and are still reported.
pub fn repair(meta: &Meta, store: &dyn RepairStore, report: &mut Report) -> FsckResult<()> {
    let mut forget: Vec<ChunkId> = report.damaged_chunks.iter().filter_map(|c| c.parse().ok()).collect();
    forget.sort_unstable();
    forget.dedup();
    meta.transaction(|m| {
        let mut dropped = HashSet::new();
        let mut recount = false;
        for p in report.problems.iter_mut().filter(|p| p.repairable) {
            let object = p.object.map(ObjectId);
            match (&p.kind, object, p.record_turn) {
                (ProblemKind::KnownContentDamaged { .. }, Some(o), _) => {
                    m.forget_known_content(o)?;
                    p.repaired = Some("forgot the cached content".to_string());
                }
                (ProblemKind::ChunkCountWrong { .. }, _, _) => {
                    recount = true;
                    p.repaired = Some("recounted the references of every chunk".to_string());
                }
                (_, Some(o), Some(turn)) => {
                    if dropped.insert((turn, o)) {
                        m.drop_lost_record(turn, o)?;
                    }
                    p.repaired = Some(format!(
                        "dropped the record of object {} in turn {turn}; these checkpoints now show its state as unknown",
                        o.0
                    ));
                }
                _ => {}
            }
        }
        if recount {
            m.recount_chunks()?;
        }
        Ok(())
    })?;
    if !forget.is_empty() {
        store.forget_chunks(&forget)?;
        for p in report.problems.iter_mut() {
            if let ProblemKind::ChunkCorrupt { .. } = p.kind
                && p.repaired.is_none()
            {
                p.repaired = Some("removed the damaged chunk from the index".to_string());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
