//! What changed: `log` statistics per turn, `diff` between checkpoints,
//! and `history` of one path. Built on views, so every answer is what the
//! trees at those checkpoints really contain.

use std::collections::{BTreeMap, HashSet};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::journal::Journal;
use crate::meta::{Checkpoint, ObjectId};
use crate::view::{Content, Node, NodeState, TreeView, ViewResult};
use crate::workspace::LiveTree;

/// Files larger than this are compared and counted, never line-diffed.
const MAX_DIFF_BYTES: u64 = 8 << 20;

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
    pub path: String,
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
}

fn is_binary(data: &[u8]) -> bool {
    data.iter().take(8000).any(|b| *b == 0) || std::str::from_utf8(data).is_err()
}

fn same_content(a: &TreeView<'_>, sa: &NodeState, b: &TreeView<'_>, sb: &NodeState) -> ViewResult<bool> {
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
    Ok(a.read_all(sa)? == b.read_all(sb)?)
}

fn same_state(a: &TreeView<'_>, sa: &NodeState, b: &TreeView<'_>, sb: &NodeState) -> ViewResult<bool> {
    if sa.kind != sb.kind || sa.perm != sb.perm || sa.uid != sb.uid || sa.gid != sb.gid || sa.target != sb.target {
        return Ok(false);
    }
    if sa.is_file() { same_content(a, sa, b, sb) } else { Ok(true) }
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
            Some(s) if s.is_file() && s.size <= MAX_DIFF_BYTES => Ok(Some(v.read_all(s)?)),
            Some(s) if s.is_file() => Ok(None),
            Some(s) => Ok(Some(s.target.clone().unwrap_or_default())),
            None => Ok(Some(Vec::new())),
        }
    };
    let old = read(a, sa)?;
    let new = read(b, sb)?;
    let display = path.to_string_lossy().into_owned();
    let mut fc = FileChange {
        path: display.clone(),
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
        let from = if sa.is_some() { format!("a/{display}") } else { "/dev/null".into() };
        let to = if sb.is_some() { format!("b/{display}") } else { "/dev/null".into() };
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
        (Err(e @ crate::view::ViewError::ChangedOutside(..)), _)
        | (_, Err(e @ crate::view::ViewError::ChangedOutside(..))) => {
            log::info!("{}: {e}", path.display());
            out.push(FileChange {
                path: path.to_string_lossy().into_owned(),
                change: ChangeKind::Unknown,
                binary: false,
                lines_added: 0,
                lines_removed: 0,
                patch: String::new(),
            });
            return Ok(());
        }
        (Err(e), _) | (_, Err(e)) => return Err(e),
    };
    let dir_a = sa.as_ref().is_some_and(|s| s.is_dir());
    let dir_b = sb.as_ref().is_some_and(|s| s.is_dir());
    let exact = |p: &Path| only.is_empty() || only.iter().any(|o| p.starts_with(o));
    if !dir_a && !dir_b {
        let kind = match (&sa, &sb) {
            (None, Some(_)) => Some(ChangeKind::Added),
            (Some(_), None) => Some(ChangeKind::Deleted),
            (Some(x), Some(y)) if !same_state(a, x, b, y)? => Some(ChangeKind::Modified),
            _ => None,
        };
        if let (Some(kind), true) = (kind, exact(&path)) {
            out.push(change(&path, kind, a, sa.as_ref(), b, sb.as_ref(), with_patch)?);
        }
        return Ok(());
    }
    // A directory on one side only, or a file replaced by a directory.
    let mut names: BTreeMap<OsString, (Option<Node>, Option<Node>)> = BTreeMap::new();
    if dir_a {
        for (name, n) in a.list(na.as_ref().expect("dir_a implies a node"))? {
            names.entry(name).or_default().0 = Some(n);
        }
    } else if sa.is_some() && exact(&path) {
        out.push(change(&path, ChangeKind::Deleted, a, sa.as_ref(), b, None, with_patch)?);
    }
    if dir_b {
        for (name, n) in b.list(nb.as_ref().expect("dir_b implies a node"))? {
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

fn rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// The statistics of every turn, oldest first.
pub fn log(tree: &LiveTree, journal: &Journal) -> ViewResult<Vec<TurnSummary>> {
    let checkpoints: Vec<Checkpoint> = journal.with_meta(|m| m.checkpoints())?;
    let current = journal.current_turn();
    let store_now = journal.store().stats()?.stored_bytes as i64;
    let mut out = Vec::new();
    for (i, c) in checkpoints.iter().enumerate() {
        let next = checkpoints.get(i + 1);
        let pre = TreeView::at(tree, journal, c.checkpoint);
        let post = match next {
            Some(n) => TreeView::at(tree, journal, n.checkpoint),
            None => TreeView::live(tree, journal),
        };
        let mut s = TurnSummary {
            checkpoint: c.checkpoint,
            parent: c.parent,
            message_id: c.message_id.clone(),
            session: c.session.clone(),
            label: c.label.clone(),
            reason: c.reason,
            created_at: rfc3339(c.created_at),
            current: c.checkpoint == current,
            files_added: 0,
            files_modified: 0,
            files_deleted: 0,
            lines_added: 0,
            lines_removed: 0,
            bytes_stored: next.map(|n| n.store_bytes_at_start).unwrap_or(store_now) - c.store_bytes_at_start,
            programs: BTreeMap::new(),
        };
        summarize_turn(&pre, &post, journal, c.checkpoint, &mut s)?;
        out.push(s);
    }
    Ok(out)
}

fn summarize_turn(
    pre: &TreeView<'_>,
    post: &TreeView<'_>,
    journal: &Journal,
    turn: i64,
    s: &mut TurnSummary,
) -> ViewResult<()> {
    let entries = journal.with_meta(|m| m.entries_in_turn(turn))?;
    let objects = journal.with_meta(|m| m.objects_in_turn(turn))?;
    let mut seen: HashSet<ObjectId> = HashSet::new();
    // Files counted by their own records, also those without an object id
    // (created in this turn).
    // A rename counts as a deletion and an addition, as in `diff`: the two
    // sides are deduplicated separately.
    let mut seen_pre: HashSet<Node> = HashSet::new();
    let mut seen_post: HashSet<Node> = HashSet::new();
    let count = |f: &FileChange, s: &mut TurnSummary| {
        match f.change {
            ChangeKind::Added => s.files_added += 1,
            ChangeKind::Deleted => s.files_deleted += 1,
            ChangeKind::Modified | ChangeKind::Unknown => s.files_modified += 1,
        }
        s.lines_added += f.lines_added;
        s.lines_removed += f.lines_removed;
    };
    let pre_targets: HashSet<ObjectId> = entries.iter().filter_map(|e| e.target).collect();
    // Directories added, removed or replaced: their files are counted after
    // every file-level record, so none is counted twice.
    let mut dir_changes: Vec<(Option<Node>, Option<Node>)> = Vec::new();
    for e in &entries {
        if let Some(p) = &e.program {
            *s.programs.entry(p.clone()).or_default() += 1;
        }
        let dir = Node { id: Some(e.dir), handle: None };
        let name = std::ffi::OsStr::from_bytes(&e.name);
        let before = e.target.map(|t| Node { id: Some(t), handle: None });
        let before = match before {
            Some(n) => Some(Node {
                handle: journal
                    .with_meta(|m| m.object_handle(n.id.expect("set above")))?
                    .and_then(|h| crate::sys::FileHandle::from_bytes(&h)),
                ..n
            }),
            None => None,
        };
        let dir_post = Node {
            handle: journal.with_meta(|m| m.object_handle(e.dir))?.and_then(|h| crate::sys::FileHandle::from_bytes(&h)),
            ..dir
        };
        let after = post.lookup(&dir_post, name)?;
        let sa = before.as_ref().map(|n| pre.state(n)).transpose().ok().flatten();
        let sb = after.as_ref().map(|n| post.state(n)).transpose().ok().flatten();
        let (fa, fb) = (sa.as_ref().filter(|x| !x.is_dir()), sb.as_ref().filter(|x| !x.is_dir()));
        let dir_a = sa.as_ref().is_some_and(|x| x.is_dir());
        let dir_b = sb.as_ref().is_some_and(|x| x.is_dir());
        let same_object = before.as_ref().and_then(|n| n.id).is_some()
            && before.as_ref().map(|n| n.id) == after.as_ref().map(|n| n.id);
        if (dir_a || dir_b) && !same_object {
            dir_changes.push((before.clone().filter(|_| dir_a), after.clone().filter(|_| dir_b)));
        }
        let path = Path::new(name);
        let kind = match (fa, fb) {
            (None, Some(_)) => ChangeKind::Added,
            (Some(_), None) => ChangeKind::Deleted,
            (Some(x), Some(y)) => {
                if same_state(pre, x, post, y)? {
                    continue;
                }
                ChangeKind::Modified
            }
            (None, None) => continue,
        };
        for id in [before.as_ref().and_then(|n| n.id), after.as_ref().and_then(|n| n.id)].into_iter().flatten() {
            seen.insert(id);
        }
        if kind != ChangeKind::Added {
            seen_pre.extend(before.iter().cloned());
        }
        if kind != ChangeKind::Deleted {
            seen_post.extend(after.iter().cloned());
        }
        let fc = change(path, kind, pre, fa, post, fb, false)?;
        count(&fc, s);
    }
    for (id, _, program) in &objects {
        if let Some(p) = program {
            *s.programs.entry(p.clone()).or_default() += 1;
        }
        if seen.contains(id) {
            continue;
        }
        // Created and removed within the turn: neither side has it.
        if !pre_targets.contains(id) && pre.live_tree().in_attic(*id) {
            continue;
        }
        let handle = journal.with_meta(|m| m.object_handle(*id))?.and_then(|h| crate::sys::FileHandle::from_bytes(&h));
        let node = Node { id: Some(*id), handle };
        let (Ok(sa), Ok(sb)) = (pre.state(&node), post.state(&node)) else { continue };
        if sa.is_dir() || sb.is_dir() || same_state(pre, &sa, post, &sb)? {
            continue;
        }
        let fc = change(Path::new(""), ChangeKind::Modified, pre, Some(&sa), post, Some(&sb), false)?;
        count(&fc, s);
    }
    for (gone, new) in dir_changes {
        if let Some(d) = gone {
            count_subtree(pre, &d, &mut seen_pre, ChangeKind::Deleted, s)?;
        }
        if let Some(d) = new {
            count_subtree(post, &d, &mut seen_post, ChangeKind::Added, s)?;
        }
    }
    Ok(())
}

/// Counts the files under a directory that appeared or disappeared whole
/// (a directory rename is one record, but its files moved).
fn count_subtree(
    view: &TreeView<'_>,
    dir: &Node,
    seen_nodes: &mut HashSet<Node>,
    kind: ChangeKind,
    s: &mut TurnSummary,
) -> ViewResult<()> {
    for (name, child) in view.list(dir)? {
        let Ok(state) = view.state(&child) else { continue };
        if state.is_dir() {
            count_subtree(view, &child, seen_nodes, kind.clone(), s)?;
            continue;
        }
        if !seen_nodes.insert(child.clone()) {
            continue;
        }
        let lines = if state.is_file() && state.size <= MAX_DIFF_BYTES {
            let data = view.read_all(&state)?;
            if is_binary(&data) {
                0
            } else {
                data.iter().filter(|b| **b == b'\n').count() as u64
                    + u64::from(!data.is_empty() && data.last() != Some(&b'\n'))
            }
        } else {
            0
        };
        let _ = name;
        match kind {
            ChangeKind::Added => {
                s.files_added += 1;
                s.lines_added += lines;
            }
            _ => {
                s.files_deleted += 1;
                s.lines_removed += lines;
            }
        }
    }
    Ok(())
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
pub fn history(tree: &LiveTree, journal: &Journal, path: &Path) -> ViewResult<Vec<PathEvent>> {
    let checkpoints: Vec<Checkpoint> = journal.with_meta(|m| m.checkpoints())?;
    let mut out = Vec::new();
    for (i, c) in checkpoints.iter().enumerate() {
        let pre = TreeView::at(tree, journal, c.checkpoint);
        let post = match checkpoints.get(i + 1) {
            Some(n) => TreeView::at(tree, journal, n.checkpoint),
            None => TreeView::live(tree, journal),
        };
        let a = pre.resolve(path)?;
        let b = post.resolve(path)?;
        let sa = a.as_ref().and_then(|n| pre.state(n).ok());
        let sb = b.as_ref().and_then(|n| post.state(n).ok());
        let kind = match (&sa, &sb) {
            (None, Some(_)) => Some(ChangeKind::Added),
            (Some(_), None) => Some(ChangeKind::Deleted),
            (Some(x), Some(y)) if !same_state(&pre, x, &post, y)? => Some(ChangeKind::Modified),
            _ => None,
        };
        if let Some(change) = kind {
            out.push(PathEvent {
                checkpoint: c.checkpoint,
                message_id: c.message_id.clone(),
                label: c.label.clone(),
                change,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_796_216_357_970), "2026-12-02T12:59:17Z");
    }

    #[test]
    fn binary_detection() {
        assert!(is_binary(b"a\0b"));
        assert!(is_binary(&[0xff, 0xfe]));
        assert!(!is_binary(b"plain text\n"));
    }
}
