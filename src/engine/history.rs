//! The operations that change history: rewind, restore, the put-back of
//! unsettled files, snapshot, forget, gc and reset. Each takes the history
//! lock; the ones that change the tree run through one [`Transaction`].

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::Duration;

use log::{info, warn};

use super::replies::{self, Progress};
use super::{Workspace, journal_failure, restore_failure, view_failure};
use crate::error::Failure;
use crate::journal::TurnInfo;
use crate::journal::retention::Collected;
use crate::meta::{IntentOp, Reason};
use crate::view::TreeView;
use crate::world::{Held, HistoryOp};

/// What `reset` without `confirm` is told (the CLI says it first).
pub const RESET_UNCONFIRMED: &str = "reset deletes every checkpoint and all the history of this workspace for good \
     (the workspace itself is kept; a reset cannot be undone): run it again with --confirm";

/// How many paths a restore's labels name; the others are counted.
const LABEL_PATHS: usize = 3;
/// The longest path a restore's label shows whole, in characters.
const LABEL_PATH_CHARS: usize = 100;

type Answer<T> = Result<T, Failure>;

impl Workspace {
    /// Rewinds the whole tree to the checkpoint `reference` names (or,
    /// `dry_run`, says what would change). The frozen tree keeps every
    /// other operation out while it changes, so nobody sees a mix of old
    /// and new.
    pub fn rewind(&self, reference: &str, dry_run: bool) -> Answer<replies::RewindReply> {
        let (tree, journal) = (&*self.tree, &*self.journal);
        let k = self.resolve(reference)?;
        if dry_run {
            let op = self.world.op();
            // Every unreadable file named at once, as the rewind would refuse.
            self.check_readable(op.held(), k, None, &mut Default::default())?;
            // The impact, as a diff from the live tree to the checkpoint.
            let live = TreeView::live(op.held(), tree, journal);
            let past = TreeView::at(op.held(), tree, journal, k);
            let changes = crate::report::diff(&live, &past, &[], false)
                .map_err(|e| view_failure("cannot compute the rewind", e))?;
            return Ok(replies::RewindReply::Preview(replies::RewindPreview { checkpoint: k, dry_run: true, changes }));
        }
        let history = self.history();
        // Before the tree freezes, so reading the chunks does not stall the
        // agent; only what was recorded meanwhile is checked again, frozen.
        let mut checked = Default::default();
        let checking = std::time::Instant::now();
        // Read before the check: a change recorded while it ran makes the
        // frozen check run again, and with it the states the rewind uses.
        let recorded = {
            let op = self.world.op();
            let recorded = journal.activity().0;
            self.check_readable(op.held(), k, None, &mut checked)?;
            crate::faults::rewind_checked();
            recorded
        };
        let checked_in = checking.elapsed();
        let started = std::time::Instant::now();
        let recheck = |lock: Held<'_>| match journal.activity().0 != recorded {
            true => self.check_readable(lock, k, None, &mut checked),
            false => Ok(()),
        };
        let mut tx = self.transaction(&history, recheck, format!("safety checkpoint before rewind to {k}"))?;
        let known = std::mem::take(&mut checked.states);
        let safety = tx.before;
        tx.intend(IntentOp::Rewind, k, &[])?;
        let sealed_safety = started.elapsed();
        let changes = tx
            .change("rewind", |frozen| {
                if crate::rewind::instant_available(tree) {
                    crate::rewind::rewind(frozen, tree, journal, k, safety, known)
                } else {
                    crate::restore::restore(frozen, tree, journal, k, &[])
                }
            })
            .map_err(|e| {
                restore_failure(
                    format!("rewind failed part-way; `rewindfs rewind {safety}` puts back the tree as it was: {e}"),
                    &e,
                )
            })?;
        let swapped = started.elapsed();
        let mut sealed_result = swapped;
        let done_label = TurnInfo { label: Some(format!("rewound to {k}")), ..Default::default() };
        let (result, thawed) = tx.commit(|| {
            let result = self.seal_on(&done_label, Reason::Rewind, Some(k));
            crate::faults::kill_point("rewind-sealed");
            sealed_result = started.elapsed();
            result
        })?;
        let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
        info!(
            "rewound to checkpoint {k} in {elapsed_ms:.1} ms ({} changes; safety checkpoint {safety}): safety seal \
             {:.1} ms, tree switched {:.1} ms, result sealed {:.1} ms, {} entries and {} inodes invalidated {:.1} ms{}",
            changes.len(),
            ms(sealed_safety),
            ms(swapped - sealed_safety),
            ms(sealed_result - swapped),
            thawed.entries,
            thawed.inodes,
            ms(thawed.invalidation),
            if thawed.released_early { " (tree released before the end: invalidation stalled)" } else { "" },
        );
        info!("rewind to checkpoint {k}: contents checked readable in {:.1} ms before the tree froze", ms(checked_in));
        Ok(replies::RewindReply::Done(replies::RewindDone {
            checkpoint: k,
            dry_run: false,
            safety_checkpoint: safety,
            result_checkpoint: result,
            elapsed_ms,
            phases_ms: replies::RewindPhases {
                check: ms(checked_in),
                safety_seal: ms(sealed_safety),
                switch: ms(swapped - sealed_safety),
                result_seal: ms(sealed_result - swapped),
                invalidate: elapsed_ms - ms(sealed_result),
            },
            changes,
        }))
    }

    /// Puts `paths` (relative to the root; empty: everything) back as they
    /// were at the checkpoint `reference` names, as a turn of its own,
    /// atomic for everyone else (or, `dry_run`, says what would change).
    pub fn restore(&self, reference: &str, paths: &[PathBuf], dry_run: bool) -> Answer<replies::RestoreReply> {
        let (tree, journal) = (&*self.tree, &*self.journal);
        let k = self.resolve(reference)?;
        let what = restore_subject(paths);
        if dry_run {
            let op = self.world.op();
            self.check_readable(op.held(), k, Some(paths), &mut Default::default())?;
            let changes = crate::restore::preview(op.held(), tree, journal, k, paths)
                .map_err(|e| restore_failure(format!("cannot preview the restore: {e}"), &e))?;
            return Ok(replies::RestoreReply {
                checkpoint: k,
                dry_run,
                undo_checkpoint: None,
                result_checkpoint: None,
                changes,
            });
        }
        let history = self.history();
        // Every content readable, before anything changes (not frozen).
        let mut checked = Default::default();
        let recorded = {
            let op = self.world.op();
            let recorded = journal.activity().0;
            self.check_readable(op.held(), k, Some(paths), &mut checked)?;
            recorded
        };
        let recheck = |lock: Held<'_>| match journal.activity().0 != recorded {
            true => self.check_readable(lock, k, Some(paths), &mut checked),
            false => Ok(()),
        };
        let mut tx = self.transaction(&history, recheck, format!("before restoring {what} from checkpoint {k}"))?;
        let before = tx.before;
        let bytes: Vec<Vec<u8>> = paths.iter().map(|p| p.as_os_str().as_bytes().to_vec()).collect();
        tx.intend(IntentOp::Restore, k, &bytes)?;
        let changes =
            tx.change("restore", |frozen| crate::restore::restore(frozen, tree, journal, k, paths)).map_err(|e| {
                restore_failure(format!("restore failed part-way (undo with `rewindfs restore {before}`): {e}"), &e)
            })?;
        let label = TurnInfo { label: Some(format!("restored {what} from checkpoint {k}")), ..Default::default() };
        let (after, _) = tx.commit(|| self.seal(&label, Reason::Turn))?;
        Ok(replies::RestoreReply {
            checkpoint: k,
            dry_run,
            undo_checkpoint: Some(before),
            result_checkpoint: Some(after),
            changes,
        })
    }

    /// Settles every pending file it can; the files in the tree that still
    /// cannot be settled (their bytes cannot be read back) are restored as
    /// they were before the rewind that left them pending, from its safety
    /// checkpoint, as a restore of their own between two checkpoints.
    /// Returns what to tell the user, None when every file was settled. A
    /// put-back that fails keeps the mount (the error says so): unmounting
    /// then would leave placeholders in the workspace.
    pub fn put_back_unsettled(&self, history: &HistoryOp<'_>) -> Answer<Option<String>> {
        let stuck = {
            let _op = self.world.op();
            self.tree.settler().settle_all_now()
        };
        // Files moved out of the tree since (in the attic, history only) do
        // not hold up the unmount; `status` and the log name them.
        let stuck: Vec<_> = stuck.into_iter().filter(|u| u.path.is_some()).collect();
        if stuck.is_empty() {
            return Ok(None);
        }
        let mp = self.mountpoint.display();
        // Files loaded from an earlier daemon do not know their rewind: the
        // newest one's safety checkpoint (sealed just before its result).
        let newest_rewind = self
            .journal
            .with_checkpoints(|m| m.checkpoints())
            .ok()
            .and_then(|cs| cs.iter().filter(|c| c.reason == Reason::Rewind).map(|c| c.checkpoint - 1).max());
        let mut by_checkpoint: std::collections::BTreeMap<i64, Vec<PathBuf>> = Default::default();
        for u in &stuck {
            let Some(k) = u.before.or(newest_rewind) else {
                return Err(Failure::failed(
                    libc::EIO,
                    format!(
                        "{} cannot be settled and its state before the rewind is unknown; {mp} stays mounted",
                        u.reason
                    ),
                ));
            };
            by_checkpoint.entry(k).or_default().extend(u.path.clone());
        }
        let names: Vec<String> = stuck
            .iter()
            .map(|u| format!("{} ({})", crate::workspace::pending::shown_path(u.path.as_deref()), u.reason))
            .collect();
        let what = format!(
            "{} rewound file{} that could not be settled",
            stuck.len(),
            if stuck.len() == 1 { "" } else { "s" }
        );
        let mut tx = self.transaction(history, |_| Ok(()), format!("before putting back {what}"))?;
        let before = tx.before;
        // Each restore is an intent, as a restore asked for is: a daemon
        // killed in the middle leaves it for the next mount to complete. They
        // stay until the result is sealed (completing one again is harmless).
        for (k, paths) in &by_checkpoint {
            let bytes: Vec<Vec<u8>> = paths.iter().map(|p| p.as_os_str().as_bytes().to_vec()).collect();
            tx.intend(IntentOp::Restore, *k, &bytes)?;
            tx.change("putback", |frozen| crate::restore::restore(frozen, &self.tree, &self.journal, *k, paths))
                .map_err(|e| {
                    restore_failure(
                        format!(
                            "putting back {what} ({}) as they were at checkpoint {k} failed part-way (undo with \
                         `rewindfs restore {before}`): {e}; {mp} stays mounted",
                            names.join(", ")
                        ),
                        &e,
                    )
                })?;
        }
        let ks: Vec<String> = by_checkpoint.keys().map(|k| k.to_string()).collect();
        let label = TurnInfo { label: Some(format!("put back {what}, as before the rewind")), ..Default::default() };
        let (after, _) = tx.commit(|| self.seal(&label, Reason::Turn))?;
        warn!(
            "put back {what}: {}; as they were at checkpoint {} (checkpoint {after})",
            names.join(", "),
            ks.join(", ")
        );
        Ok(Some(format!(
            "{what} {} put back as before the rewind (checkpoint {}), since the bytes cannot be read from the \
             store: {}; the workspace holds no invented bytes, checkpoint {before} keeps the rewound state, \
             and `rewindfs fsck` names the damage",
            if stuck.len() == 1 { "was" } else { "were" },
            ks.join(", "),
            names.join(", ")
        )))
    }

    /// Names a checkpoint: an existing one (`at`), or one sealed now.
    pub fn snapshot(&self, name: &str, message: Option<&str>, at: Option<&str>) -> Answer<replies::SnapshotReply> {
        let journal = &*self.journal;
        let _history = self.history();
        let (checkpoint, sealed) = match at {
            Some(at) => (self.resolve(at)?, false),
            None => {
                // Refused before sealing: a bad name leaves no checkpoint behind.
                journal.check_snapshot_name(name, None).map_err(journal_failure)?;
                let label = message.map(str::to_string).unwrap_or_else(|| format!("snapshot {name}"));
                (self.seal(&TurnInfo { label: Some(label), ..Default::default() }, Reason::Turn)?, true)
            }
        };
        journal.name_checkpoint(name, checkpoint, message).map_err(journal_failure)?;
        info!("checkpoint {checkpoint} is named {name:?}");
        Ok(replies::SnapshotReply { checkpoint, name: name.to_string(), message: message.map(str::to_string), sealed })
    }

    /// Deletes all history, never the workspace: the tree is sealed as a
    /// fresh checkpoint, then every other one is forgotten in one
    /// transaction (a process killed before it committed leaves the history
    /// whole; after, the next open finishes freeing), and the store's packs
    /// are compacted.
    pub fn reset(&self, confirm: bool, progress: &dyn Fn(Progress)) -> Answer<replies::ResetReply> {
        if !confirm {
            return Err(Failure::usage(RESET_UNCONFIRMED));
        }
        let journal = &*self.journal;
        let _history = self.history();
        let label = TurnInfo { label: Some("the tree when the history was reset".into()), ..Default::default() };
        let checkpoint = self.seal(&label, Reason::Turn)?;
        crate::faults::kill_point("reset-sealed");
        let attic = |id, handle: &[u8], dry| self.tree.attic().remove_unreachable_stored(id, handle, dry);
        let step = |done, total| progress(Progress { done, total, bytes_freed: 0 });
        let (checkpoints, messages) = self.hidden.get().map(|b| b.listing_dirs()).unwrap_or_default();
        let views = match (checkpoints, messages) {
            (None, None) => Vec::new(),
            _ => journal.with_checkpoints(|m| m.checkpoints()).map_err(|e| journal_failure(e.into()))?,
        };
        let attic_dir = crate::store_dir::StoreDir::new(&self.store).attic();
        let collected = journal.reset(&attic, &attic_dir, &step).map_err(journal_failure)?;
        // The kernel forgets the views of what went. Not frozen (the reset's
        // one transaction is long): a lookup answered across its commit can
        // still leave one entry cached.
        for c in views.iter().filter(|c| c.checkpoint < checkpoint) {
            if let Some(dir) = checkpoints {
                self.kernel().expire_entry(dir, std::ffi::OsStr::new(&c.checkpoint.to_string()));
            }
            if let (Some(dir), Some(m)) = (messages, &c.message_id) {
                self.kernel().expire_entry(dir, std::ffi::OsStr::new(m));
            }
        }
        self.lists_changed();
        let total = collected.forgotten.len() as u64;
        progress(Progress { done: total, total, bytes_freed: collected.bytes_freed });
        // Every pack mostly released goes, however small: nothing is left to
        // share it with.
        let compacted = journal.compact_below(crate::journal::retention::COMPACT_BELOW, 1).map_err(journal_failure)?;
        journal.shrink();
        warn!(
            "history reset: {} checkpoints deleted, {} chunks and {} attic entries freed; checkpoint {checkpoint} is \
             the tree now",
            collected.forgotten.len(),
            collected.chunks_freed,
            collected.attic_files_freed
        );
        Ok(replies::ResetReply { checkpoint, collected, compacted })
    }

    /// Forgets the checkpoints `references` name now: each one's turn merges
    /// into the kept checkpoint before it; what no kept checkpoint needs is
    /// freed. Refused for a kept (named, protected) checkpoint.
    pub fn forget(&self, references: &[String], dry_run: bool, progress: &dyn Fn(Progress)) -> Answer<Collected> {
        let journal = &*self.journal;
        let history = self.history();
        let victims = references.iter().map(|c| self.resolve(c)).collect::<Result<Vec<_>, _>>()?;
        let kept = journal.protected_among(&victims).map_err(journal_failure)?;
        if let Some((n, why)) = victims.iter().find_map(|v| kept.get(v).map(|why| (*v, why))) {
            return Err(Failure::usage(format!("checkpoint {n} is kept, so it cannot be forgotten: {why}")));
        }
        if dry_run {
            return self.collect_sliced(&history, &victims, "forget", true, progress);
        }
        // Run again after a failure for want of space: what went already is not a victim.
        let collected = journal.with_reserve(|| {
            let left: Vec<i64> = victims
                .iter()
                .copied()
                .filter(|&v| journal.with_checkpoints(|m| m.checkpoint(v)).is_ok_and(|c| c.is_some()))
                .collect();
            self.collect_sliced(&history, &left, "forget", false, progress)
        })?;
        journal.shrink();
        Ok(collected)
    }

    /// Collects what the retention policy lets go; `keep_count`,
    /// `keep_days` and `auto` replace the stored policy's (stored, unless
    /// `dry_run`).
    pub fn gc(
        &self,
        dry_run: bool,
        keep_count: Option<u64>,
        keep_days: Option<u64>,
        auto: Option<bool>,
        progress: &dyn Fn(Progress),
    ) -> Answer<replies::GcReply> {
        let journal = &*self.journal;
        let history = self.history();
        let mut policy = journal.policy().map_err(journal_failure)?;
        policy.keep_count = keep_count.unwrap_or(policy.keep_count);
        policy.keep_days = keep_days.unwrap_or(policy.keep_days);
        policy.auto = auto.unwrap_or(policy.auto);
        if !dry_run {
            journal.set_policy(&policy).map_err(journal_failure)?;
        }
        if dry_run {
            let victims = journal.plan_retention(&policy).map_err(journal_failure)?;
            let collected = self.collect_sliced(&history, &victims, "retention", true, progress)?;
            return Ok(replies::GcReply { policy, collected, compacted: Default::default() });
        }
        // Planned in the closure: run again after a failure for want of
        // space, it leaves out what went.
        let (collected, compacted) = journal.with_reserve(|| {
            let victims = journal.plan_retention(&policy).map_err(journal_failure)?;
            let collected = self.collect_sliced(&history, &victims, "retention", false, progress)?;
            // Packs only become worth rewriting when chunks are released.
            let compacted = match collected.chunks_freed {
                0 => Default::default(),
                _ => journal.compact().map_err(journal_failure)?,
            };
            Ok::<_, Failure>((collected, compacted))
        })?;
        journal.shrink();
        Ok(replies::GcReply { policy, collected, compacted })
    }

    /// Forgets `victims` (oldest first) one per collection, each holding the
    /// turn gate for its own short transactions only, so writes go on
    /// between them (as in the background), telling `progress` after each.
    /// With no victim, one collection still frees what fell to zero
    /// references since the last. A dry run is one collection, rolled back.
    fn collect_sliced(
        &self,
        history: &HistoryOp<'_>,
        victims: &[i64],
        by: &str,
        dry_run: bool,
        progress: &dyn Fn(Progress),
    ) -> Answer<Collected> {
        let attic = |id, handle: &[u8], dry| self.tree.attic().remove_unreachable_stored(id, handle, dry);
        let dir = crate::store_dir::StoreDir::new(&self.store).attic();
        let hide = |n, message: Option<&str>, begin: &mut dyn FnMut()| self.hide_checkpoint(history, n, message, begin);
        if dry_run {
            return self.journal.collect(victims, by, true, &attic, Some(&dir), &hide).map_err(journal_failure);
        }
        let mut victims = victims.to_vec();
        victims.sort_unstable();
        victims.dedup();
        let total = victims.len() as u64;
        let slices: Vec<&[i64]> = if victims.is_empty() { vec![&[]] } else { victims.chunks(1).collect() };
        let mut out = Collected::default();
        for slice in slices {
            let c = self.journal.collect(slice, by, false, &attic, Some(&dir), &hide).map_err(journal_failure)?;
            out.absorb(c);
            progress(Progress { done: out.forgotten.len() as u64, total, bytes_freed: out.bytes_freed });
            // Writers waiting on the gate go first.
            std::thread::yield_now();
        }
        Ok(out)
    }

    /// Runs `begin`, the transaction that takes checkpoint `n` out of the
    /// history, so that the kernel keeps no entry of it under `.rewindfs/`
    /// (looked up, one stays an hour, `fs/view.rs`): with the tree frozen
    /// (no lookup in flight can answer after the expiry), its entries
    /// `checkpoints/N` and `messages/ID` are expired before the tree thaws.
    /// Nothing is frozen while the kernel holds neither directory.
    pub fn hide_checkpoint(&self, history: &HistoryOp<'_>, n: i64, message: Option<&str>, begin: &mut dyn FnMut()) {
        let (checkpoints, messages) = self.hidden.get().map(|b| b.listing_dirs()).unwrap_or_default();
        if checkpoints.is_none() && messages.is_none() {
            return begin();
        }
        let mut frozen = history.freeze(self.kernel());
        begin();
        let touched = frozen.touched();
        if let Some(dir) = checkpoints {
            touched.entries.insert((dir, OsString::from(n.to_string())));
        }
        if let (Some(dir), Some(m)) = (messages, message) {
            touched.entries.insert((dir, OsString::from(m)));
        }
        // And the listings the kernel keeps of them (`lists_changed`).
        touched.inodes.extend([checkpoints, messages].into_iter().flatten());
    }

    /// Refuses a rewind to `k` (or with `paths`, a restore of them) when a
    /// content it would put back cannot be read from the store (every chunk
    /// read and verified), naming each file.
    fn check_readable(
        &self,
        lock: Held<'_>,
        k: i64,
        paths: Option<&[PathBuf]>,
        checked: &mut crate::rewind::preflight::Checked,
    ) -> Answer<()> {
        use crate::rewind::preflight;
        let (tree, journal) = (&*self.tree, &*self.journal);
        let files = match paths {
            None => preflight::unreadable(lock, tree, journal, k, checked),
            Some(paths) => preflight::unreadable_under(lock, tree, journal, k, paths, checked),
        }
        .map_err(|e| restore_failure(format!("cannot check the contents of checkpoint {k}: {e}"), &e))?;
        if files.is_empty() {
            // An instant rewind answers before the settler writes the contents
            // back: without room for them, it would report success over files
            // that cannot be read (ENOSPC). A restore writes them at once and
            // fails by itself.
            if paths.is_none() && crate::rewind::instant_available(tree) {
                check_room(tree, k, checked.to_write)?;
            }
            return Ok(());
        }
        let what = if paths.is_some() { format!("restore from checkpoint {k}") } else { format!("rewind to {k}") };
        let message = preflight::refusal(&what, k, &files);
        warn!("{message}");
        Err(Failure::failed(libc::EIO, message))
    }
}

/// Refuses a rewind to `k` that writes `bytes` of contents back into a
/// workspace whose filesystem has less room (a margin kept for the
/// journal and the database when the store shares the disk).
fn check_room(tree: &crate::workspace::LiveTree, k: i64, bytes: u64) -> Answer<()> {
    const MARGIN: u64 = 1 << 20;
    let Ok(st) = rustix::fs::fstatvfs(tree.root_fd()) else { return Ok(()) };
    let free = st.f_bfree.saturating_mul(st.f_frsize);
    if bytes.saturating_add(MARGIN) <= free {
        return Ok(());
    }
    let message = format!(
        "rewind to {k} refused, nothing was changed: it writes {} of file contents back into the workspace, and its \
         filesystem has {} free (the disk is full); free some space and rewind again",
        crate::text::human_bytes(bytes),
        crate::text::human_bytes(free)
    );
    warn!("{message}");
    Err(Failure::failed(libc::ENOSPC, message))
}

/// What a restore's labels say it restored: its paths, a few of them
/// named and the rest counted, so that a restore of 1,200 paths does not
/// make one `log` line of 10 KB (the paths are in its intent and diff).
fn restore_subject(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "everything".to_string();
    }
    let shown: Vec<String> = paths
        .iter()
        .take(LABEL_PATHS)
        .map(|p| {
            let p = p.display().to_string();
            if p.chars().count() <= LABEL_PATH_CHARS {
                p
            } else {
                format!("{}...", p.chars().take(LABEL_PATH_CHARS).collect::<String>())
            }
        })
        .collect();
    match paths.len() - shown.len() {
        0 => shown.join(", "),
        1 => format!("{} and 1 more path", shown.join(", ")),
        n => format!("{} and {n} more paths", shown.join(", ")),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A restore of many paths names a few in its labels and
    /// counts the rest.
    #[test]
    fn a_restore_of_many_paths_is_summarized() {
        let paths = |n: usize| (0..n).map(|i| PathBuf::from(format!("/w/dir/file-{i}.txt"))).collect::<Vec<_>>();
        assert_eq!(restore_subject(&[]), "everything");
        assert_eq!(restore_subject(&paths(2)), "/w/dir/file-0.txt, /w/dir/file-1.txt");
        assert_eq!(
            restore_subject(&paths(4)),
            "/w/dir/file-0.txt, /w/dir/file-1.txt, /w/dir/file-2.txt and 1 more path"
        );
        let many = restore_subject(&paths(1200));
        assert!(many.ends_with("/w/dir/file-2.txt and 1197 more paths"), "{many}");
        let long = restore_subject(&[PathBuf::from("x".repeat(5000))]);
        assert_eq!(long.chars().count(), LABEL_PATH_CHARS + 3, "{long}");
    }
}
