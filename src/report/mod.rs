//! What changed: `log` statistics per turn, `diff` between checkpoints,
//! and `history` of one path. Built on views, so every answer is what the
//! trees at those checkpoints really contain.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use serde::{Deserialize, Serialize};

use crate::journal::Journal;
use crate::meta::{Checkpoint, ObjectId, TurnStats};
use crate::sys::FileHandle;
use crate::text::quote_name;
use crate::view::{Content, Node, NodeState, TreeView, ViewError, ViewResult};
use crate::workspace::backing;
use crate::workspace::capture::kind_code;
use crate::workspace::{Kind, LiveTree};
use crate::world::Held;

/// Files larger than this are compared and counted, never line-diffed.
const MAX_DIFF_BYTES: u64 = 8 << 20;

/// Two files of the same size are compared this many bytes at a time, up
/// to their first difference.
const COMPARE_STEP: usize = 4 << 20;

/// How one path differs between two trees.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Added,
    Deleted,
    Modified,
    /// Changed outside rewindfs between two mounts: the state at one side
    /// is not known.
    Unknown,
}

/// One changed path.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FileChange {
    /// Relative to the root; in JSON as `crate::name_json` writes names.
    #[serde(with = "crate::name_json")]
    pub path: PathBuf,
    pub change: ChangeKind,
    pub binary: bool,
    pub lines_added: u64,
    pub lines_removed: u64,
    /// Unified diff text (text files only; empty with `--stat`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub patch: String,
}

/// Statistics of one turn, for `log`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TurnSummary {
    pub checkpoint: i64,
    pub parent: Option<i64>,
    pub message_id: Option<String>,
    pub session: Option<String>,
    pub label: Option<String>,
    pub reason: crate::meta::Reason,
    /// RFC 3339 time the checkpoint was made.
    pub created_at: String,
    pub current: bool,
    pub files_added: u64,
    pub files_modified: u64,
    pub files_deleted: u64,
    pub lines_added: u64,
    pub lines_removed: u64,
    pub bytes_stored: i64,
    /// Command name -> number of records it caused.
    pub programs: BTreeMap<String, u64>,
    /// Why the statistics above (zero then) could not be computed: the
    /// content they need cannot be read (a damaged chunk). `log` still
    /// lists every turn, and exits 1.
    #[serde(default)]
    pub stats_unavailable: Option<String>,
    /// The snapshot name (`rewindfs snapshot`), never collected.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub snapshot_message: Option<String>,
    /// The uid that asked for the checkpoint (see `Checkpoint::sealed_by`).
    #[serde(default)]
    pub sealed_by: Option<u32>,
    /// Sealed by the mount's agent user (`--agent-user`), not the owner:
    /// its message id and label are the agent's words.
    #[serde(default)]
    pub by_agent: bool,
}

fn is_binary(data: &[u8]) -> bool {
    data.iter().take(8000).any(|b| *b == 0) || std::str::from_utf8(data).is_err()
}

/// The whole content of a file of view `v`; an error names the file and
/// the checkpoint (the view's, or the live tree).
fn read_file(v: &TreeView<'_>, s: &NodeState, path: &Path) -> ViewResult<Vec<u8>> {
    v.read_all(s).map_err(|e| unreadable(v, path, e))
}

/// `buf` filled from `offset` of a file of view `v` (less at its end);
/// an error as for [`read_file`].
fn read_step(v: &TreeView<'_>, s: &NodeState, offset: u64, buf: &mut [u8], path: &Path) -> ViewResult<usize> {
    v.read_full(s, offset, buf).map_err(|e| unreadable(v, path, e))
}

/// A read of `path` in view `v` that failed, named (a view that gave way
/// says only that).
fn unreadable(v: &TreeView<'_>, path: &Path, e: ViewError) -> ViewError {
    match e {
        ViewError::GaveWay => e,
        e => ViewError::Unreadable {
            path: quote_name(path),
            at: v.checkpoint().map_or("the live tree".to_string(), |c| format!("checkpoint {c}")),
            source: Box::new(e),
        },
    }
}

fn same_content(a: &TreeView<'_>, sa: &NodeState, b: &TreeView<'_>, sb: &NodeState, path: &Path) -> ViewResult<bool> {
    if sa.size != sb.size {
        return Ok(false);
    }
    if let (Some(ha), Some(hb)) = (&sa.content_hash, &sb.content_hash) {
        return Ok(ha == hb);
    }
    if let (Content::Live(ha), Content::Live(hb)) = (&sa.content, &sb.content)
        && ha == hb
    {
        return Ok(true);
    }
    // A step at a time, to the first difference: a 1 GiB file rewritten
    // is told from the first 4 MiB, not read twice whole into memory.
    let step = COMPARE_STEP.min(usize::try_from(sa.size).unwrap_or(COMPARE_STEP));
    let (mut left, mut right) = (vec![0u8; step], vec![0u8; step]);
    let mut offset = 0u64;
    while offset < sa.size {
        let want = step.min(usize::try_from(sa.size - offset).unwrap_or(step));
        let n = read_step(a, sa, offset, &mut left[..want], path)?;
        let m = read_step(b, sb, offset, &mut right[..want], path)?;
        if left[..n] != right[..m] {
            return Ok(false);
        }
        if n < want {
            break;
        }
        offset += n as u64;
    }
    Ok(true)
}

fn same_state(a: &TreeView<'_>, sa: &NodeState, b: &TreeView<'_>, sb: &NodeState, path: &Path) -> ViewResult<bool> {
    if sa.kind != sb.kind || sa.perm != sb.perm || sa.uid != sb.uid || sa.gid != sb.gid || sa.target != sb.target {
        return Ok(false);
    }
    if sa.is_file() { same_content(a, sa, b, sb, path) } else { Ok(true) }
}

/// Builds the change record for a path (content read for line counts).
fn change(
    path: &Path,
    kind: ChangeKind,
    a: &TreeView<'_>,
    sa: Option<&NodeState>,
    b: &TreeView<'_>,
    sb: Option<&NodeState>,
    with_patch: bool,
) -> ViewResult<FileChange> {
    let read = |v: &TreeView<'_>, s: Option<&NodeState>| -> ViewResult<Option<Vec<u8>>> {
        match s {
            Some(s) if s.is_file() && s.size <= MAX_DIFF_BYTES => Ok(Some(read_file(v, s, path)?)),
            Some(s) if s.is_file() => Ok(None),
            Some(s) => Ok(Some(s.target.clone().unwrap_or_default())),
            None => Ok(Some(Vec::new())),
        }
    };
    let old = read(a, sa)?;
    let new = read(b, sb)?;
    let mut fc = FileChange {
        path: path.to_path_buf(),
        change: kind,
        binary: false,
        lines_added: 0,
        lines_removed: 0,
        patch: String::new(),
    };
    let (Some(old), Some(new)) = (old, new) else {
        fc.binary = true;
        return Ok(fc);
    };
    if is_binary(&old) || is_binary(&new) {
        fc.binary = true;
        return Ok(fc);
    }
    let (old, new) = (String::from_utf8_lossy(&old), String::from_utf8_lossy(&new));
    let diff = similar::TextDiff::from_lines(old.as_ref(), new.as_ref());
    for op in diff.ops() {
        for c in diff.iter_changes(op) {
            match c.tag() {
                similar::ChangeTag::Insert => fc.lines_added += 1,
                similar::ChangeTag::Delete => fc.lines_removed += 1,
                similar::ChangeTag::Equal => {}
            }
        }
    }
    if with_patch {
        // Quoted as in human output (git does the same): the patch is
        // printed as it is, and a name holding a newline would fake lines.
        let header = |side: &str| quote_name(Path::new(side).join(path));
        let from = if sa.is_some() { header("a") } else { "/dev/null".into() };
        let to = if sb.is_some() { header("b") } else { "/dev/null".into() };
        fc.patch = diff.unified_diff().context_radius(3).header(&from, &to).to_string();
    }
    Ok(fc)
}

/// Every changed non-directory path between two views.
pub fn diff(a: &TreeView<'_>, b: &TreeView<'_>, only: &[PathBuf], with_patch: bool) -> ViewResult<Vec<FileChange>> {
    let mut out = Vec::new();
    let (ra, rb) = (a.root()?, b.root()?);
    walk(a, b, Some(ra), Some(rb), PathBuf::new(), only, with_patch, &mut out)?;
    Ok(out)
}

fn wanted(path: &Path, only: &[PathBuf]) -> bool {
    only.is_empty() || only.iter().any(|o| path.starts_with(o) || o.starts_with(path))
}

#[allow(clippy::too_many_arguments)]
fn walk(
    a: &TreeView<'_>,
    b: &TreeView<'_>,
    na: Option<Node>,
    nb: Option<Node>,
    path: PathBuf,
    only: &[PathBuf],
    with_patch: bool,
    out: &mut Vec<FileChange>,
) -> ViewResult<()> {
    if !wanted(&path, only) {
        return Ok(());
    }
    let states = (na.as_ref().map(|n| a.state(n)).transpose(), nb.as_ref().map(|n| b.state(n)).transpose());
    let (sa, sb) = match states {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) if is_unknown(&e) => return unknown(&path, &e, out),
        (Err(e), _) | (_, Err(e)) => return Err(e),
    };
    let dir_a = sa.as_ref().is_some_and(|s| s.is_dir());
    let dir_b = sb.as_ref().is_some_and(|s| s.is_dir());
    let exact = |p: &Path| only.is_empty() || only.iter().any(|o| p.starts_with(o));
    if !dir_a && !dir_b {
        let kind = match (&sa, &sb) {
            (None, Some(_)) => Some(ChangeKind::Added),
            (Some(_), None) => Some(ChangeKind::Deleted),
            (Some(x), Some(y)) if !same_state(a, x, b, y, &path)? => Some(ChangeKind::Modified),
            _ => None,
        };
        if let (Some(kind), true) = (kind, exact(&path)) {
            out.push(change(&path, kind, a, sa.as_ref(), b, sb.as_ref(), with_patch)?);
        }
        return Ok(());
    }
    // A directory on one side only, or a file replaced by a directory.
    let mut names: BTreeMap<OsString, (Option<Node>, Option<Node>)> = BTreeMap::new();
    // A listing that is unknown (a name removed under the mount, or
    // outside it): the directory is listed as unknown, not walked.
    let listing = |v: &TreeView<'_>, n: &Option<Node>, dir: bool| match n.as_ref().filter(|_| dir) {
        Some(n) => v.list(n).map(Some),
        None => Ok(None),
    };
    let (la, lb) = match (listing(a, &na, dir_a), listing(b, &nb, dir_b)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) if is_unknown(&e) => return unknown(&path, &e, out),
        (Err(e), _) | (_, Err(e)) => return Err(e),
    };
    if let Some(la) = la {
        for (name, n) in la {
            names.entry(name).or_default().0 = Some(n);
        }
    } else if sa.is_some() && exact(&path) {
        out.push(change(&path, ChangeKind::Deleted, a, sa.as_ref(), b, None, with_patch)?);
    }
    if let Some(lb) = lb {
        for (name, n) in lb {
            names.entry(name).or_default().1 = Some(n);
        }
    } else if sb.is_some() && exact(&path) {
        out.push(change(&path, ChangeKind::Added, a, None, b, sb.as_ref(), with_patch)?);
    }
    for (name, (ca, cb)) in names {
        walk(a, b, ca, cb, path.join(name), only, with_patch, out)?;
    }
    Ok(())
}

/// A state the view cannot give: changed outside the mount or under it.
fn is_unknown(e: &crate::view::ViewError) -> bool {
    matches!(e, crate::view::ViewError::ChangedOutside(..) | crate::view::ViewError::ChangedUnderMount { .. })
}

/// Lists `path` as unknown.
fn unknown(path: &Path, e: &crate::view::ViewError, out: &mut Vec<FileChange>) -> ViewResult<()> {
    log::info!("{}: {e}", path.display());
    out.push(FileChange {
        path: path.to_path_buf(),
        change: ChangeKind::Unknown,
        binary: false,
        lines_added: 0,
        lines_removed: 0,
        patch: String::new(),
    });
    Ok(())
}

/// How many times `log` reads the history again when seals keep ending
/// the open turn while it reads.
const LOG_ATTEMPTS: usize = 20;

/// The statistics of every turn, oldest first. A sealed turn's statistics
/// are computed once and stored (by the daemon right after the seal, or
/// here when missing); the open turn's are computed each time.
///
/// A `turn` does not stop readers: a seal that ends the open turn while
/// its statistics are computed (against the live tree, from a list of
/// checkpoints read before the seal) leaves them of no turn at all, and
/// their computation met objects in a state that belongs to neither side
/// (a reader got ENOENT). So the whole list is read again until no seal
/// overlapped it ([`Journal::seal_sequence`]).
pub fn log(lock: Held<'_>, tree: &LiveTree, journal: &Journal) -> ViewResult<Vec<TurnSummary>> {
    for _ in 1..LOG_ATTEMPTS {
        let before = journal.seal_sequence();
        if before.is_multiple_of(2) {
            let listed = log_once(lock, tree, journal);
            if journal.seal_sequence() == before {
                return listed;
            }
        }
        log::debug!("log: a seal overlapped the reading of the history; reading it again");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    log_once(lock, tree, journal)
}

fn log_once(lock: Held<'_>, tree: &LiveTree, journal: &Journal) -> ViewResult<Vec<TurnSummary>> {
    let checkpoints: Vec<Checkpoint> = journal.with_checkpoints(|m| m.checkpoints())?;
    let current = journal.current_turn();
    let store_now = journal.store().stats()?.stored_bytes as i64;
    let mut stored = journal.with_turn_stats(|m| m.turn_stats())?;
    crate::faults::log_listed();
    let mut out = Vec::new();
    for (i, c) in checkpoints.iter().enumerate() {
        let next = checkpoints.get(i + 1);
        let computed = match (next, stored.remove(&c.checkpoint)) {
            (Some(_), Some(stats)) => Ok(stats),
            (Some(_), None) => summarize_sealed_turn(lock, tree, journal, c.checkpoint, None),
            (None, _) => locate_changes(tree, journal, c.checkpoint)
                .and_then(|paths| turn_stats(journal, c.checkpoint, paths, &TreeView::live(lock, tree, journal))),
        };
        // One turn whose content cannot be read does not hide the others;
        // the history database failing does.
        let (stats, stats_unavailable) = match computed {
            Ok(stats) => (stats, None),
            Err(e @ (ViewError::Unreadable { .. } | ViewError::Store(_) | ViewError::Lost(_) | ViewError::Io(_))) => {
                log::warn!("the statistics of turn {} are unavailable: {e}", c.checkpoint);
                let programs = journal.with_pre_images(|p| p.programs_in_turn(c.checkpoint))?;
                (TurnStats { programs, ..TurnStats::default() }, Some(e.to_string()))
            }
            Err(e) => return Err(e),
        };
        out.push(TurnSummary {
            checkpoint: c.checkpoint,
            parent: c.parent,
            message_id: c.message_id.clone(),
            session: c.session.clone(),
            label: c.label.clone(),
            reason: c.reason,
            created_at: crate::text::rfc3339(c.created_at),
            current: c.checkpoint == current,
            files_added: stats.files_added,
            files_modified: stats.files_modified,
            files_deleted: stats.files_deleted,
            lines_added: stats.lines_added,
            lines_removed: stats.lines_removed,
            bytes_stored: next.map(|n| n.store_bytes_at_start).unwrap_or(store_now) - c.store_bytes_at_start,
            programs: stats.programs,
            stats_unavailable,
            name: c.name.clone(),
            snapshot_message: c.snapshot_message.clone(),
            sealed_by: c.sealed_by,
            // The daemon knows the agent's uid (`daemon/access.rs`).
            by_agent: false,
        });
    }
    Ok(out)
}

/// The name of the daemon's thread that computes sealed turns' statistics
/// (defined in `faults`, whose view-lookup pause point recognises it).
pub use crate::faults::TURN_STATS_THREAD;

/// Serializes the computing of sealed turns' statistics (the daemon's
/// background summaries and `log`), so that none is computed twice.
static SUMMARIZING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The statistics of sealed turn `turn`, computed and stored unless they
/// already are. The daemon calls it in the background after each seal, so
/// that `log` finds them stored.
///
/// With `give_way` (the background statistics), every query of the views
/// asks it first and the summary stops with `ViewError::GaveWay` when it
/// says so, storing nothing: a rewind waiting for the tree does not wait
/// for the whole summary (the statistics of a turn that rewrote a large
/// file read both versions of it).
pub fn summarize_sealed_turn(
    lock: Held<'_>,
    tree: &LiveTree,
    journal: &Journal,
    turn: i64,
    give_way: Option<&(dyn Fn() -> bool + Sync)>,
) -> ViewResult<TurnStats> {
    let _one_at_a_time = crate::poison::lock(&SUMMARIZING, "the statistics lock");
    if let Some(stats) = journal.with_turn_stats(|m| m.turn_stats_of(turn))? {
        return Ok(stats);
    }
    let paths = journal.with_turn_stats(|m| m.turn_paths(turn))?.map(|p| decode_paths(&p));
    // The next kept checkpoint: forgotten ones merged their turns into
    // the one before them (`journal/retention.rs`).
    let next = journal.with_checkpoints(|m| m.first_sealed_after(turn))?.map_or(turn + 1, |(c, _)| c);
    // Each query of the view folds the journal log first. Right after a
    // seal the next turn's changes arrive meanwhile, one or two records per
    // fold: alone, each fold would be a commit of its own (a WAL write and
    // the log emptied, for every change the agent makes while the summary
    // runs). In one batch they are savepoints of one transaction, as
    // durable (`Journal::batched`).
    let post = TreeView::at(lock, tree, journal, next);
    let post = match give_way {
        Some(give_way) => post.giving_way(give_way),
        None => post,
    };
    let stats = journal.batched(|| turn_stats(journal, turn, paths, &post))??;
    if let Err(e) = journal.with_turn_stats(|m| m.set_turn_stats(turn, &stats)) {
        log::warn!("cannot store the statistics of turn {turn}: {e}");
    }
    Ok(stats)
}

/// The statistics of `turn`: the changes `diff` reports between checkpoint
/// `turn` and `post` (the next checkpoint, or the live tree), summed. With
/// `paths` (where the turn's changes are in `post`, from
/// `locate_changes`), only those paths are visited.
fn turn_stats(journal: &Journal, turn: i64, paths: Option<Vec<PathBuf>>, post: &TreeView<'_>) -> ViewResult<TurnStats> {
    let pre = post.beside(turn);
    let changes = match paths {
        None => diff(&pre, post, &[], false)?,
        Some(paths) => match Trie::of(&paths) {
            Some(paths) => {
                let changed = journal.with_pre_images(|p| p.changed_in_turn(turn))?;
                let mut names: HashMap<ObjectId, BTreeSet<OsString>> = HashMap::new();
                for e in journal.with_pre_images(|p| p.entries_in_turn(turn))? {
                    names.entry(e.dir).or_default().insert(std::ffi::OsStr::from_bytes(&e.name).to_owned());
                }
                diff_scoped(&pre, post, &Scope { paths, files: changed_files(&changed).collect(), names })?
            }
            None => Vec::new(),
        },
    };
    let mut s = TurnStats { programs: journal.with_pre_images(|p| p.programs_in_turn(turn))?, ..TurnStats::default() };
    for c in &changes {
        match c.change {
            ChangeKind::Added => s.files_added += 1,
            ChangeKind::Deleted => s.files_deleted += 1,
            ChangeKind::Modified | ChangeKind::Unknown => s.files_modified += 1,
        }
        s.lines_added += c.lines_added;
        s.lines_removed += c.lines_removed;
    }
    Ok(s)
}

/// The non-directories whose own state a turn changed. A directory counts
/// for its entries only: `diff` does not compare a directory's attributes.
fn changed_files(changed: &crate::meta::TurnChanges) -> impl Iterator<Item = ObjectId> + '_ {
    changed.objects.iter().filter(|(_, kind)| *kind != kind_code(Kind::Dir)).map(|(id, _)| *id)
}

/// Where one turn's changes can be: the paths, in the tree at the end of
/// the turn, of every directory whose entries it changed and every file it
/// changed, and the files (by object) it changed.
struct Scope {
    paths: Trie,
    files: HashSet<ObjectId>,
    /// The names each directory's entry records in the turn are about.
    names: HashMap<ObjectId, BTreeSet<OsString>>,
}

/// A set of paths, as a tree of names.
#[derive(Default)]
struct Trie {
    children: BTreeMap<OsString, Trie>,
}

impl Trie {
    fn of(paths: &[PathBuf]) -> Option<Trie> {
        if paths.is_empty() {
            return None;
        }
        let mut root = Trie::default();
        for p in paths {
            let mut node = &mut root;
            for c in p.components() {
                node = node.children.entry(c.as_os_str().to_owned()).or_default();
            }
        }
        Some(root)
    }
}

/// Whether two view nodes are the same object.
fn same_object(x: &Node, y: &Node) -> bool {
    match (x.id, y.id) {
        (Some(i), Some(j)) => i == j,
        (None, None) => x.handle.is_some() && x.handle == y.handle,
        _ => false,
    }
}

/// `diff` between two checkpoints one turn apart, visiting only the turn's
/// scope. Sound because a view differs from the next one only by the
/// records of that turn: a name in a directory that is the same object on
/// both sides refers to the same object unless the turn recorded that
/// name, and an object has the same state unless the turn recorded it. So
/// below a same-object directory, only the names the turn recorded and the
/// names on a path to something the turn changed can differ; where the two
/// sides hold different objects (a rename, a replacement), both subtrees
/// are compared whole, as `diff` does. Costs a few lookups per recorded
/// name and per path component, whatever the size of the directories.
fn diff_scoped(a: &TreeView<'_>, b: &TreeView<'_>, scope: &Scope) -> ViewResult<Vec<FileChange>> {
    let mut out = Vec::new();
    let (ra, rb) = (a.root()?, b.root()?);
    if same_object(&ra, &rb) {
        walk_scoped(a, b, ra, rb, PathBuf::new(), &scope.paths, scope, &mut out)?;
    } else {
        walk(a, b, Some(ra), Some(rb), PathBuf::new(), &[], false, &mut out)?;
    }
    Ok(out)
}

/// `walk` for a pair that is the same object on both sides, at a path in
/// the turn's scope.
#[allow(clippy::too_many_arguments)]
fn walk_scoped(
    a: &TreeView<'_>,
    b: &TreeView<'_>,
    na: Node,
    nb: Node,
    path: PathBuf,
    paths: &Trie,
    scope: &Scope,
    out: &mut Vec<FileChange>,
) -> ViewResult<()> {
    let dirs = matches!((a.state(&na), b.state(&nb)), (Ok(x), Ok(y)) if x.is_dir() && y.is_dir());
    if !dirs {
        return walk(a, b, Some(na), Some(nb), path, &[], false, out);
    }
    let mut names: BTreeSet<OsString> = paths.children.keys().cloned().collect();
    if let Some(recorded) = na.id.and_then(|id| scope.names.get(&id)) {
        names.extend(recorded.iter().cloned());
    }
    for name in names {
        let child = path.join(&name);
        match (a.lookup(&na, &name)?, b.lookup(&nb, &name)?) {
            (Some(x), Some(y)) if same_object(&x, &y) => {
                if let Some(below) = paths.children.get(&name) {
                    walk_scoped(a, b, x, y, child, below, scope, out)?;
                } else if x.id.is_some_and(|id| scope.files.contains(&id)) {
                    walk(a, b, Some(x), Some(y), child, &[], false, out)?;
                }
            }
            (x, y) => walk(a, b, x, y, child, &[], false, out)?,
        }
    }
    Ok(())
}

/// Where the changes recorded in `turn` are in the live tree, which must be
/// the tree at the end of that turn (the next checkpoint is being sealed,
/// or `turn` is the open one): the path of every directory whose entries
/// the turn changed and of every non-directory it changed, when it is
/// still in the tree. `None` when some cannot be placed exactly (a file
/// with several names, a path the kernel cannot name): the statistics then
/// compare the whole tree. Costs a few system calls per changed directory
/// and file, nothing per unchanged one.
pub fn locate_changes(tree: &LiveTree, journal: &Journal, turn: i64) -> ViewResult<Option<Vec<PathBuf>>> {
    let changed = journal.with_pre_images(|p| p.changed_in_turn(turn))?;
    let root_fd = tree.root_fd();
    let root = backing::kernel_path(root_fd)?;
    let mut out: Vec<PathBuf> = Vec::new();
    let mut seen = HashSet::new();
    for id in changed.dirs.iter().copied().chain(changed_files(&changed)) {
        if !seen.insert(id) {
            continue;
        }
        match locate(tree, journal, &root, id)? {
            Placed::Gone => {}
            Placed::At(p) => out.push(p),
            Placed::Unknown(why) => {
                log::debug!("turn {turn}: object {id:?} {why}; its statistics compare the whole tree");
                return Ok(None);
            }
        }
    }
    Ok(Some(out))
}

/// Where an object is in the live tree.
enum Placed {
    /// Not in the tree (removed, in the attic).
    Gone,
    At(PathBuf),
    Unknown(&'static str),
}

/// The path of an object in the live tree, from the kernel's name for its
/// backing inode (`/proc/self/fd`), checked by resolving that path again
/// without following symlinks: the kernel's name may be stale or missing.
fn locate(tree: &LiveTree, journal: &Journal, root: &[u8], id: ObjectId) -> ViewResult<Placed> {
    if tree.attic().holds(id) {
        return Ok(Placed::Gone);
    }
    let handle = journal.with_objects(|m| m.object_handle(id))?.and_then(|h| FileHandle::from_bytes(&h));
    let Some(handle) = handle else { return Ok(Placed::Gone) };
    let fd = match tree.backing().open_handle(&handle, libc::O_PATH) {
        Ok(fd) => fd,
        Err(e) if e.0 == libc::ENOENT => return Ok(Placed::Gone),
        Err(_) => return Ok(Placed::Unknown("cannot be opened by handle")),
    };
    let Ok(st) = rustix::fs::fstat(&fd) else { return Ok(Placed::Unknown("cannot be examined")) };
    if st.st_nlink == 0 {
        return Ok(Placed::Gone);
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR && st.st_nlink > 1 {
        return Ok(Placed::Unknown("has several names"));
    }
    let Ok(name) = backing::kernel_path(fd.as_fd()) else {
        return Ok(Placed::Unknown("has no name the kernel can give"));
    };
    let rel = match name.strip_prefix(root) {
        Some([]) => &[][..],
        Some([b'/', rest @ ..]) => rest,
        _ => return Ok(Placed::Unknown("has no name under the workspace that the kernel knows")),
    };
    let path = PathBuf::from(std::ffi::OsStr::from_bytes(rel));
    if handle_at(tree, &path).as_ref() == Some(&handle) {
        Ok(Placed::At(path))
    } else {
        Ok(Placed::Unknown("is not where the kernel names it"))
    }
}

/// The handle of the object at `path` in the live tree (no symlink followed).
fn handle_at(tree: &LiveTree, path: &Path) -> Option<FileHandle> {
    let names: Vec<&std::ffi::OsStr> = path.components().map(|c| c.as_os_str()).collect();
    let Some((last, dirs)) = names.split_last() else {
        return backing::handle_of_fd(tree.root_fd()).ok();
    };
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir: Option<OwnedFd> = None;
    for name in dirs {
        let parent = dir.as_ref().map(|d| d.as_fd()).unwrap_or(tree.root_fd());
        dir = Some(rustix::fs::openat(parent, *name, flags, Mode::empty()).ok()?);
    }
    backing::handle_at(dir.as_ref().map(|d| d.as_fd()).unwrap_or(tree.root_fd()), last).ok()
}

/// Encodes paths for `turn_summaries.paths`: each path's bytes (names
/// joined by `/`), then a NUL.
pub fn encode_paths(paths: &[PathBuf]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in paths {
        out.extend_from_slice(p.as_os_str().as_bytes());
        out.push(0);
    }
    out
}

pub(crate) fn decode_paths(raw: &[u8]) -> Vec<PathBuf> {
    let body = raw.strip_suffix(&[0]).unwrap_or(raw);
    if body.is_empty() && raw.is_empty() {
        return Vec::new();
    }
    body.split(|b| *b == 0).map(|p| PathBuf::from(std::ffi::OsStr::from_bytes(p))).collect()
}

/// Notes where the turn just sealed changed the tree; runs under the
/// exclusive turn gate at the seal, while the live tree is the tree at the
/// end of that turn.
pub fn note_sealed_turn(tree: &LiveTree, journal: &Journal) {
    let turn = journal.current_turn() - 1;
    let paths = match locate_changes(tree, journal, turn) {
        Ok(p) => p,
        Err(e) => {
            log::warn!(
                "cannot tell where turn {turn} changed the tree ({e}); its statistics will compare the whole tree"
            );
            None
        }
    };
    let encoded = paths.as_deref().map(encode_paths);
    if let Err(e) = journal.with_turn_stats(|m| m.set_turn_paths(turn, encoded.as_deref())) {
        log::warn!("cannot record where turn {turn} changed the tree: {e}");
    }
}

/// One turn that changed a path.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PathEvent {
    pub checkpoint: i64,
    pub message_id: Option<String>,
    pub label: Option<String>,
    pub change: ChangeKind,
}

/// The turns whose changes touched `path` (relative to the root).
///
/// Costs in proportion to the turns that recorded something on the way to
/// `path`, not to the length of the history: where a path leads in a view
/// depends only on the entries (directory, name) looked up on the way and
/// on the state of the object reached, and a view differs from the next
/// checkpoint's only by the records of the turns between them (and the
/// outside changes noted at them). So, walking back from the live tree,
/// only the checkpoints whose turns recorded one of those entries or that
/// object are compared, as before; the way to `path` is taken again in
/// each one compared (it changes only there).
pub fn history(lock: Held<'_>, tree: &LiveTree, journal: &Journal, path: &Path) -> ViewResult<Vec<PathEvent>> {
    let checkpoints: Vec<Checkpoint> = journal.with_checkpoints(|m| m.checkpoints())?;
    let mut out = Vec::new();
    let mut way = Way::to(&TreeView::live(lock, tree, journal), path)?;
    // Checkpoints from `upto` on are done (their turns are compared).
    let mut upto = checkpoints.len();
    loop {
        let turns = way.turns(journal)?;
        // The newest checkpoint before `upto` whose turns (up to the next
        // checkpoint) recorded something on the way.
        let next = turns
            .iter()
            .rev()
            .filter_map(|t| checkpoints.partition_point(|c| c.checkpoint <= *t).checked_sub(1))
            .find(|i| *i < upto);
        let Some(i) = next else { break };
        let c = &checkpoints[i];
        let pre = TreeView::at(lock, tree, journal, c.checkpoint);
        let post = match checkpoints.get(i + 1) {
            Some(n) => TreeView::at(lock, tree, journal, n.checkpoint),
            None => TreeView::live(lock, tree, journal),
        };
        if let Some(change) = path_change(&pre, &post, path)? {
            out.push(PathEvent {
                checkpoint: c.checkpoint,
                message_id: c.message_id.clone(),
                label: c.label.clone(),
                change,
            });
        }
        way = Way::to(&pre, path)?;
        upto = i;
    }
    out.reverse();
    Ok(out)
}

/// How `path` differs between two views (None: not at all).
fn path_change(pre: &TreeView<'_>, post: &TreeView<'_>, path: &Path) -> ViewResult<Option<ChangeKind>> {
    let a = pre.resolve(path)?;
    let b = post.resolve(path)?;
    let sa = a.as_ref().and_then(|n| pre.state(n).ok());
    let sb = b.as_ref().and_then(|n| post.state(n).ok());
    Ok(match (&sa, &sb) {
        (None, Some(_)) => Some(ChangeKind::Added),
        (Some(_), None) => Some(ChangeKind::Deleted),
        (Some(x), Some(y)) if !same_state(pre, x, post, y, path)? => Some(ChangeKind::Modified),
        _ => None,
    })
}

/// What decides where a path leads in one view: the entries looked up on
/// the way (directory, name), the directories passed and the object
/// reached.
struct Way {
    entries: Vec<(ObjectId, OsString)>,
    dirs: Vec<ObjectId>,
    end: Option<ObjectId>,
}

impl Way {
    fn to(view: &TreeView<'_>, path: &Path) -> ViewResult<Way> {
        let mut way = Way { entries: Vec::new(), dirs: Vec::new(), end: None };
        let mut node = view.root()?;
        for comp in path.components() {
            let std::path::Component::Normal(name) = comp else { continue };
            // A directory never recorded has no records that could change
            // its entries.
            if let Some(id) = node.id {
                way.entries.push((id, name.to_owned()));
                way.dirs.push(id);
            }
            match view.lookup(&node, name)? {
                Some(n) => node = n,
                None => return Ok(way),
            }
        }
        way.end = node.id;
        Ok(way)
    }

    /// The turns whose records (or outside changes noted) can make the way
    /// differ between the checkpoints around them.
    fn turns(&self, journal: &Journal) -> ViewResult<BTreeSet<i64>> {
        journal.with_meta(|m| -> ViewResult<BTreeSet<i64>> {
            let mut turns = BTreeSet::new();
            for (dir, name) in &self.entries {
                turns.extend(m.turns_of_entry(*dir, name.as_bytes())?);
            }
            if let Some(end) = self.end {
                turns.extend(m.turns_of_object(end)?);
            }
            // A view fails an object changed outside before a later
            // checkpoint t (`taint_after` is strict): the views at t - 1
            // and t differ there.
            for id in self.dirs.iter().chain(&self.end) {
                for t in m.taint_turns(*id)? {
                    turns.extend([t - 1, t]);
                }
                // Unknown at checkpoints first..=last (a change that
                // bypassed the mount): the views differ at both ends.
                for (first, last) in m.bypassed_ranges(*id)? {
                    turns.extend([first - 1, last]);
                }
            }
            Ok(turns)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_detection() {
        assert!(is_binary(b"a\0b"));
        assert!(is_binary(&[0xff, 0xfe]));
        assert!(!is_binary(b"plain text\n"));
    }
}
