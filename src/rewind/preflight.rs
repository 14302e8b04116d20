//! Before a rewind changes anything: every content it will put back must
//! be readable. A rewind leaves file bytes to the settler, so a damaged or
//! missing chunk found later would leave a file that can never be filled;
//! found here, the rewind is refused with nothing changed.
//!
//! What is checked is a superset of what the rewind reads: the content at
//! the checkpoint of every object recorded since it and of every object a
//! name recorded since referred to then, when that content comes from the
//! store (a content record, or a file still pending from an earlier
//! rewind). Contents that stay on disk (unchanged files, files moved to
//! the attic) need no check.
//!
//! A rewind visits only what the journal recorded since the checkpoint, so
//! an object changed under the mount (bypassing it) with nothing recorded
//! of it since would be left as it is, and the result called the
//! checkpoint: such objects are found by their ctime, in one walk of the
//! tree ([`changed_unrecorded`]), and the rewind is refused naming them.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use crate::journal::Journal;
use crate::meta::ObjectId;
use crate::restore::RestoreError;
use crate::store::{ChunkId, ContentRef};
use crate::sys::FileHandle;
use crate::view::{Content, Node, NodeState, TreeView, ViewError};
use crate::workspace::LiveTree;
use crate::world::Held;

/// A file whose content at the checkpoint cannot be read back.
#[derive(Clone, Debug, PartialEq)]
pub struct Unreadable {
    /// Its path at the checkpoint (`object N` when none is found).
    pub path: PathBuf,
    pub checkpoint: i64,
    /// The first chunk that failed, and how; or why its state is unknown.
    pub problem: String,
    /// Its state at the checkpoint is unknown (changed outside the mount,
    /// or under it), rather than its content unreadable.
    pub unknown: bool,
}

/// The state of `node` at the view's checkpoint, or, when the view says it
/// is unknown there, what to list: a rewind or restore that went ahead
/// would fail part-way on it, or put back a state that was never the past.
fn state_or_unknown(view: &TreeView<'_>, node: &Node) -> Result<Option<NodeState>, String> {
    match view.state(node) {
        Ok(state) => Ok(Some(state)),
        Err(e @ (ViewError::ChangedOutside(..) | ViewError::ChangedUnderMount { .. })) => Err(e.to_string()),
        // A state the view cannot give otherwise fails the operation
        // itself, with its own message; only contents are this check's
        // business.
        Err(_) => Ok(None),
    }
}

/// What the view says of the listing of directory `node` at its
/// checkpoint, as [`state_or_unknown`] says of a state: Some(why) when it
/// is unknown.
fn listing_unknown(view: &TreeView<'_>, node: &Node) -> Option<String> {
    match view.check_listing(node) {
        Err(e @ (ViewError::ChangedOutside(..) | ViewError::ChangedUnderMount { .. })) => Some(e.to_string()),
        _ => None,
    }
}

/// Chunks already read and verified, and those that failed, so a second
/// check (after the tree froze) reads only what is new.
#[derive(Default)]
pub struct Checked {
    good: HashSet<ChunkId>,
    bad: HashMap<ChunkId, String>,
    /// The tree was walked for objects changed without a record
    /// ([`changed_unrecorded`]): once per rewind, before the tree froze.
    walked: bool,
    /// Bytes of the readable contents the last check found taken from the
    /// store: what the rewind will write back into the workspace.
    pub to_write: u64,
    /// The states at the checkpoint the last check read, for the rewind
    /// (see [`KnownStates`]).
    pub states: KnownStates,
}

/// States at a checkpoint read by a check, by object, with the handle they
/// were read for: the rewind that follows reads each again only if its
/// object's handle changed since. Each object a check visits has a record
/// since the checkpoint, so its state there is fixed by records that exist
/// already, as long as nothing was recorded since the check began (the caller
/// checks again, frozen, when something was, which reads them anew).
pub type KnownStates = HashMap<ObjectId, (Option<FileHandle>, NodeState)>;

/// Every file whose content at `checkpoint` a rewind would take from the
/// chunk store and cannot read back (each chunk read and its blake3
/// checked); empty when the rewind can go ahead.
pub fn unreadable(
    lock: Held<'_>,
    tree: &LiveTree,
    journal: &Journal,
    checkpoint: i64,
    checked: &mut Checked,
) -> Result<Vec<Unreadable>, RestoreError> {
    let mut objects: Vec<ObjectId> = journal.with_meta(|m| m.objects_since_born_before(checkpoint))?;
    for (dir, name) in journal.with_meta(|m| m.entry_keys_since_in_older_dirs(checkpoint))? {
        if let Some(Some(target)) = journal.with_pre_images(|r| r.entry_at(dir, &name, checkpoint))? {
            objects.push(target);
        }
    }
    checked.to_write = 0;
    checked.states.clear();
    let view = TreeView::at(lock, tree, journal, checkpoint);
    // The walk for objects changed without a record (a `statx` per name,
    // in the kernel) runs beside the reading of the chunks (in this
    // thread): once per rewind, before the tree froze.
    let walk_since = match checked.walked {
        true => None,
        false => journal.sealed_after(checkpoint - 1)?.map(crate::meta::end_of_ms),
    };
    checked.walked = true;
    let (out, walked) = std::thread::scope(|scope| {
        let walking = walk_since.map(|since| {
            scope.spawn(move || {
                let started = std::time::Instant::now();
                tree.backing().scan_changed_since(since).map(|changed| (changed, started.elapsed()))
            })
        });
        let out = contents_unreadable(tree, journal, &view, checkpoint, objects, checked);
        let walked = walking.map(|w| w.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)));
        (out, walked)
    });
    let (mut out, seen) = out?;
    if let Some(walked) = walked {
        let (changed, took) =
            walked.map_err(|errno| RestoreError::Live { path: "the workspace".to_string(), errno })?;
        out.extend(changed_unrecorded(tree, journal, &view, &seen, &changed, took)?);
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// The files among `objects` (and their checked chunks) whose content at
/// the view's checkpoint cannot be read back, or whose state there is
/// unknown; and the objects looked at.
fn contents_unreadable(
    tree: &LiveTree,
    journal: &Journal,
    view: &TreeView<'_>,
    checkpoint: i64,
    objects: Vec<ObjectId>,
    checked: &mut Checked,
) -> Result<(Vec<Unreadable>, HashSet<ObjectId>), RestoreError> {
    let lock = view.held();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for id in objects {
        if !seen.insert(id) {
            continue;
        }
        let handle = journal.with_objects(|m| m.object_handle(id))?.and_then(|h| FileHandle::from_bytes(&h));
        let node = Node { id: Some(id), handle };
        let (problem, unknown) = match state_or_unknown(view, &node) {
            Ok(None) => continue,
            Ok(Some(state)) => {
                let problem = problem_of(tree, journal, &state, checked);
                checked.states.insert(id, (node.handle, state));
                (problem, false)
            }
            Err(why) => (Some(why), true),
        };
        if let Some(problem) = problem {
            let path = crate::fsck::path_in_view(lock, tree, journal, id, checkpoint)
                .unwrap_or_else(|| format!("object {}", id.0).into());
            out.push(Unreadable { path, checkpoint, problem, unknown });
        }
    }
    Ok((out, seen))
}

/// The objects of the tree at the view's checkpoint whose state there is
/// unknown though nothing was recorded of them since (so a rewind would
/// not visit them): changed under the mount after the checkpoint's seal
/// (a file written or created, a name removed from a directory), or
/// between mounts. Every object changed after the seal says so by its
/// ctime, so the tree is walked once (a `statx` per name) for those, and
/// the view judges each as it would when read: a file's state, a
/// directory's listing. Objects in `visited` (recorded since, and checked
/// as such) and objects born since the checkpoint (not in its tree) are
/// left out, and so is an object whose path now leads elsewhere in the
/// view (in a directory born since, say).
fn changed_unrecorded(
    tree: &LiveTree,
    journal: &Journal,
    view: &TreeView<'_>,
    visited: &HashSet<ObjectId>,
    changed: &[crate::workspace::backing::Changed],
    walked_in: std::time::Duration,
) -> Result<Vec<Unreadable>, RestoreError> {
    let Some(checkpoint) = view.checkpoint() else { return Ok(Vec::new()) };
    let started = std::time::Instant::now();
    let mut out = Vec::new();
    for c in changed {
        let id = journal.known_object_id(&c.handle)?;
        let is_dir = c.kind == crate::workspace::Kind::Dir;
        if let Some(id) = id
            && ((!is_dir && visited.contains(&id))
                || journal.with_meta(|m| m.records_of(id))?.born_turn.is_some_and(|b| b >= checkpoint))
        {
            continue;
        }
        let node = Node { id, handle: Some(c.handle.clone()) };
        let problem = match is_dir {
            true => listing_unknown(view, &node),
            false => state_or_unknown(view, &node).err(),
        };
        let Some(problem) = problem else { continue };
        let path = tree.backing().path_of_handle(&c.handle);
        if let Some(p) = &path
            && let Ok(found) = view.resolve(p)
            && found.is_none_or(|n| n.handle.as_ref() != Some(&c.handle))
        {
            continue;
        }
        let path = match path {
            Some(p) if p.as_os_str().is_empty() => ".".into(),
            Some(p) => p,
            None => id.map_or_else(|| "an object never recorded".into(), |id| format!("object {}", id.0).into()),
        };
        out.push(Unreadable { path, checkpoint, problem, unknown: true });
    }
    log::info!(
        "checkpoint {checkpoint}: {} objects changed since its seal found in {walked_in:?} and looked at in {:?}, \
         {} of them unknown there",
        changed.len(),
        started.elapsed(),
        out.len()
    );
    Ok(out)
}

/// As [`unreadable`], for a restore of `paths` (empty: the whole tree):
/// every file under them at `checkpoint` whose content comes from the store.
pub fn unreadable_under(
    lock: Held<'_>,
    tree: &LiveTree,
    journal: &Journal,
    checkpoint: i64,
    paths: &[PathBuf],
    checked: &mut Checked,
) -> Result<Vec<Unreadable>, RestoreError> {
    checked.to_write = 0;
    let view = TreeView::at(lock, tree, journal, checkpoint);
    let mut stack = Vec::new();
    let whole = [PathBuf::new()];
    for p in if paths.is_empty() { &whole[..] } else { paths } {
        // A path that is not there then is the restore's business.
        if let Ok(Some(node)) = view.resolve(p) {
            stack.push((p.clone(), node));
        }
    }
    let mut out = Vec::new();
    while let Some((path, node)) = stack.pop() {
        let state = match state_or_unknown(&view, &node) {
            Ok(Some(state)) => state,
            Ok(None) => continue,
            Err(problem) => {
                out.push(Unreadable { path, checkpoint, problem, unknown: true });
                continue;
            }
        };
        if state.is_dir() {
            if let Some(problem) = listing_unknown(&view, &node) {
                out.push(Unreadable { path, checkpoint, problem, unknown: true });
                continue;
            }
            // As for states: a listing the view cannot give otherwise
            // fails the restore itself.
            if let Ok(children) = view.list(&node) {
                stack.extend(children.into_iter().map(|(name, child)| (path.join(name), child)));
            }
        } else if let Some(problem) = problem_of(tree, journal, &state, checked) {
            out.push(Unreadable { path, checkpoint, problem, unknown: false });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// What stops the content of a file in a view from being read back from
/// the store (None: readable, or not taken from the store).
fn problem_of(tree: &LiveTree, journal: &Journal, state: &NodeState, checked: &mut Checked) -> Option<String> {
    if !state.is_file() {
        return None;
    }
    let content = match &state.content {
        Content::Stored(c) => c.clone(),
        Content::Live(h) => tree.pending().content(h)?,
        Content::None => return None,
    };
    let problem = first_problem(journal, &content, checked);
    if problem.is_none() {
        checked.to_write += content.chunks.iter().map(|s| u64::from(s.len)).sum::<u64>();
    }
    problem
}

/// The first chunk of `content` that cannot be read back, if any.
fn first_problem(journal: &Journal, content: &ContentRef, checked: &mut Checked) -> Option<String> {
    for span in &content.chunks {
        if checked.good.contains(&span.id) {
            continue;
        }
        if let Some(bad) = checked.bad.get(&span.id) {
            return Some(bad.clone());
        }
        match journal.store().get(&span.id) {
            Ok(data) if data.len() == span.len as usize => {
                checked.good.insert(span.id);
            }
            Ok(data) => {
                let bad = format!("chunk {} has {} bytes, the content list says {}", span.id, data.len(), span.len);
                checked.bad.insert(span.id, bad.clone());
                return Some(bad);
            }
            Err(e) => {
                checked.bad.insert(span.id, e.to_string());
                return Some(e.to_string());
            }
        }
    }
    None
}

/// The refusal of `what` ("rewind to 3"): which files at which
/// checkpoint, and what to do.
pub fn refusal(what: &str, checkpoint: i64, files: &[Unreadable]) -> String {
    let (unknown, unreadable): (Vec<&Unreadable>, Vec<&Unreadable>) = files.iter().partition(|u| u.unknown);
    let list = |files: &[&Unreadable]| -> String {
        let list: Vec<String> =
            files.iter().map(|u| format!("{} ({})", crate::text::quote_name(&u.path), u.problem)).collect();
        list.join(", ")
    };
    let count = |n: usize| if n == 1 { "1 file".to_string() } else { format!("{n} files") };
    let mut parts = Vec::new();
    if !unreadable.is_empty() {
        parts.push(format!(
            "{} of checkpoint {checkpoint} cannot be read back from the store: {}; `rewindfs fsck` names all the damage",
            count(unreadable.len()),
            list(&unreadable)
        ));
    }
    if !unknown.is_empty() {
        parts.push(format!(
            "the state of {} at checkpoint {checkpoint} is unknown (changed without passing through the mount, \
             so what it was then was never recorded): {}; putting back another state in its place would present it \
             as the past. Rewind to a later checkpoint, or restore the other paths (`rewindfs restore {checkpoint} -- PATHS`)",
            count(unknown.len()),
            list(&unknown)
        ));
    }
    format!("{what} refused, nothing was changed: {}", parts.join("; "))
}
