//! A bounded history: named snapshots, the retention policy, and the
//! collection that forgets checkpoints (merging each one's turn into the
//! kept checkpoint before it, `meta/retention.rs`) and frees the chunks no
//! kept checkpoint needs.
//!
//! Crash safety and short holds: a collection is a series of short
//! SQLite transactions, each holding the turn gate (what recording waits
//! for) and the content lock for itself only, so writes go on in between.
//! The first takes a checkpoint out of `checkpoints` and notes the forget
//! (`retention.forgetting`); each next one merges a bounded batch of its
//! turn's records ([`FORGET_BATCH_ROWS`]), every key whole, so every view
//! of a kept checkpoint reads the same between two batches; the last batch
//! clears the note. The attic entries its batches leave unreachable are
//! listed in `gc_attic` with them. Then each step of [`FREE_BATCH_CHUNKS`]
//! chunks at zero references lists them in `gc_chunks` (its intent) in one
//! transaction and releases them from the chunk store before letting go of
//! the content lock: no content is stored (and deduplicated against one)
//! in between, and no record, pending file or trusted cached list names
//! one. A daemon killed anywhere leaves a note, a list or both, and the
//! next open of the store ([`Journal::finish_collection`]) frees what is
//! listed and merges the rest before anything records again.

use std::collections::{BTreeMap, HashSet};
use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{AtFlags, Mode, OFlags};
use serde::{Deserialize, Serialize};

use super::{Journal, JournalError, JournalResult, refusal, truncate_for_message};
use crate::meta::{Checkpoint, Intents, Meta, MetaResult, ObjectId, Objects, Reason, Retention};
use crate::store::ChunkId;
use crate::sys::{self, FileHandle};

/// What the policy keeps. Stored in the store (`state` keys `retention.*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// The newest checkpoints on the current branch kept whatever their age.
    pub keep_count: u64,
    /// Every checkpoint younger than this many days is kept (on any branch).
    pub keep_days: u64,
    /// The safety checkpoints of this many newest rewinds are kept.
    pub keep_rewinds: u64,
    /// Collect in the background once enough checkpoints can go
    /// ([`AUTO_BATCH`]; `gc --auto on|off`).
    #[serde(default = "yes")]
    pub auto: bool,
}

fn yes() -> bool {
    true
}

/// The background collection runs once the policy lets this many
/// checkpoints go: each run compacts the packs (and plans once a slice),
/// so it is batched; the store holds at most this many fewer than one more
/// than the policy keeps between runs.
pub const AUTO_BATCH: usize = 8;

/// What the last background collection did (`status`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AutoRun {
    /// When it ended (Unix milliseconds).
    pub at: i64,
    pub forgotten: u64,
    pub chunks_freed: u64,
    pub bytes_freed: u64,
    pub attic_files_freed: u64,
    /// Pack bytes compaction gave back on disk.
    pub bytes_reclaimed: u64,
    /// Collections it ran, one checkpoint each, each in short steps that
    /// hold the turn gate (and so every recording FUSE operation) for their
    /// transaction only.
    pub slices: u64,
    /// The longest time one step held the turn gate or the content lock,
    /// in milliseconds ([`Collected::gate_ms`]).
    pub longest_slice_ms: f64,
}

impl Default for Policy {
    /// 200 checkpoints / 14 days: two weeks of work, and the last 200
    /// prompts of a long session however old; the safety checkpoints of
    /// the last 5 rewinds (each undoes one).
    fn default() -> Policy {
        Policy { keep_count: 200, keep_days: 14, keep_rewinds: 5, auto: true }
    }
}

/// The policy's settings ([`Retention::setting`]: `retention.<name>` in `state`).
const KEEP_COUNT: &str = "keep_count";
const KEEP_DAYS: &str = "keep_days";
const KEEP_REWINDS: &str = "keep_rewinds";
const AUTO: &str = "auto";
const LAST_AUTO: &str = "last_auto";
const DAY_MS: i64 = 86_400_000;

/// A pack is rewritten when less than half of it is live: the copy costs
/// at most the bytes it gives back.
pub const COMPACT_BELOW: f64 = 0.5;
/// ... and when that gives back at least this much (a small pack is not
/// worth the new file).
pub const COMPACT_MIN_RECLAIM: u64 = 64 * 1024;

/// Label prefix of a rewind's safety checkpoint (daemon/mod.rs).
const SAFETY_LABEL: &str = "safety checkpoint before rewind";

/// Why a checkpoint is kept whatever is asked.
pub fn protected(all: &[Checkpoint], tainted: &HashSet<i64>, policy: &Policy) -> BTreeMap<i64, String> {
    let mut out = BTreeMap::new();
    if let Some(newest) = all.last() {
        out.insert(newest.checkpoint, "it is the newest: the current turn records into it".to_string());
    }
    for c in all {
        if let Some(name) = &c.name {
            out.insert(c.checkpoint, format!("it is the named snapshot {name:?}"));
        }
        if tainted.contains(&c.checkpoint) {
            out.insert(
                c.checkpoint,
                "it marks files changed outside rewindfs (earlier views depend on where the mark is)".to_string(),
            );
        }
    }
    let rewinds: Vec<&Checkpoint> = all.iter().rev().filter(|c| c.reason == Reason::Rewind).collect();
    if let Some(k) = rewinds.first().and_then(|r| r.parent) {
        out.insert(k, "the tree was last rewound to it".to_string());
    }
    for r in rewinds.iter().take(policy.keep_rewinds as usize) {
        // The checkpoint just before the result (the safety checkpoint, or
        // the state at mount of a rewind completed after a crash) and the
        // safety checkpoint itself.
        let before: Vec<&Checkpoint> = all.iter().rev().filter(|c| c.checkpoint < r.checkpoint).take(3).collect();
        for (i, c) in before.iter().enumerate() {
            let safety = c.label.as_deref().is_some_and(|l| l.starts_with(SAFETY_LABEL));
            if i == 0 || safety {
                out.entry(c.checkpoint).or_insert_with(|| {
                    format!("it is the safety checkpoint of the rewind that sealed {}", r.checkpoint)
                });
            }
            if safety {
                break;
            }
        }
    }
    out
}

/// The checkpoints the policy lets go at `now_ms`, oldest first: on the
/// current branch (the newest and its ancestors) those older than
/// `keep_days` and not among the `keep_count` newest of the branch; on abandoned branches
/// those older than `keep_days`; never a protected one. Only checkpoints
/// with changes count toward `keep_count` (the newest always does): the
/// `empty` ones, turns that changed nothing, are kept while they lie
/// among the counted ones, so sealing empty turns pushes nothing out.
/// The whole-history form of `Meta::plan_rows`, for the tests.
pub fn plan(
    all: &[Checkpoint],
    empty: &HashSet<i64>,
    protected: &BTreeMap<i64, String>,
    policy: &Policy,
    now_ms: i64,
) -> Vec<i64> {
    let by_id: BTreeMap<i64, &Checkpoint> = all.iter().map(|c| (c.checkpoint, c)).collect();
    let mut current = HashSet::new();
    let mut at = all.last().map(|c| c.checkpoint);
    while let Some(n) = at {
        if !current.insert(n) {
            break;
        }
        at = by_id.get(&n).and_then(|c| c.parent);
    }
    let mut recent_on_branch: Vec<i64> = current.iter().copied().collect();
    recent_on_branch.sort_unstable_by(|a, b| b.cmp(a));
    let mut counted = HashSet::new();
    let mut n = 0;
    for c in recent_on_branch {
        if n >= policy.keep_count {
            break;
        }
        if counted.is_empty() || !empty.contains(&c) {
            n += 1;
        }
        counted.insert(c);
    }
    victims(all.iter(), &counted, protected, horizon(policy, now_ms))
}

/// Checkpoints created before this time go, unless kept otherwise.
fn horizon(policy: &Policy, now_ms: i64) -> i64 {
    now_ms.saturating_sub((policy.keep_days as i64).saturating_mul(DAY_MS))
}

/// Of `candidates`, those older than `horizon`, not `counted` (the newest
/// of the current branch) and not protected, oldest first.
fn victims<'a>(
    candidates: impl Iterator<Item = &'a Checkpoint>,
    counted: &HashSet<i64>,
    protected: &BTreeMap<i64, String>,
    horizon: i64,
) -> Vec<i64> {
    let mut out: Vec<i64> = candidates
        .filter(|c| c.created_at < horizon)
        .filter(|c| !counted.contains(&c.checkpoint))
        .filter(|c| !protected.contains_key(&c.checkpoint))
        .map(|c| c.checkpoint)
        .collect();
    out.sort_unstable();
    out
}

/// What a collection did (or, dry, would do).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Collected {
    pub dry_run: bool,
    /// Checkpoints forgotten, oldest first.
    pub forgotten: Vec<i64>,
    /// Records dropped (states no kept checkpoint has).
    pub records_dropped: u64,
    /// Records moved into the turn of the kept checkpoint before them.
    pub records_moved: u64,
    /// Chunks no kept checkpoint needs, released from the chunk store.
    pub chunks_freed: u64,
    /// Their bytes in the packs (reclaimed on disk by compaction).
    pub bytes_freed: u64,
    /// Removed files in the attic that no kept checkpoint reaches, removed.
    #[serde(default)]
    pub attic_files_freed: u64,
    #[serde(default)]
    pub attic_bytes_freed: u64,
    /// The longest time one of its steps held the turn gate (which every
    /// recording FUSE operation waits for) or the content lock (which a
    /// capture storing content waits for), in milliseconds: each is one
    /// transaction, plus for a step that frees chunks their release; the
    /// attic entries are removed after. `reset` and dry runs are one step.
    #[serde(default)]
    pub gate_ms: f64,
}

impl Collected {
    /// Logs what a collection `by` that began at `started` did.
    fn log(&self, by: &str, started: std::time::Instant) {
        log::info!(
            "forgot checkpoints {:?} ({by}): {} records dropped, {} chunks ({} bytes) and {} attic files freed; \
             writes waited at most {:.1} ms, the whole collection took {:.1} ms",
            self.forgotten,
            self.records_dropped,
            self.chunks_freed,
            self.bytes_freed,
            self.attic_files_freed,
            self.gate_ms,
            started.elapsed().as_secs_f64() * 1000.0
        );
    }

    /// Adds what another collection (the next slice) did.
    pub fn absorb(&mut self, c: Collected) {
        self.forgotten.extend(c.forgotten);
        self.records_dropped += c.records_dropped;
        self.records_moved += c.records_moved;
        self.chunks_freed += c.chunks_freed;
        self.bytes_freed += c.bytes_freed;
        self.attic_files_freed += c.attic_files_freed;
        self.attic_bytes_freed += c.attic_bytes_freed;
        self.gate_ms = self.gate_ms.max(c.gate_ms);
    }
}

/// How a collection removes an attic entry: `(object, handle, dry_run)` ->
/// the bytes freed, or None when the entry is not removable
/// ([`remove_unreachable_slot`]).
pub type AtticRemover<'a> = &'a dyn Fn(ObjectId, &[u8], bool) -> Option<u64>;

/// How a collection takes a checkpoint out of view:
/// `hide(checkpoint, message_id, begin)` runs `begin` (the transaction that
/// deletes the checkpoint's row) so that no reader keeps it cached: the
/// daemon runs it with the tree frozen and expires the kernel's entries of
/// `.rewindfs/checkpoints/N` (and `messages/ID`) before thawing.
pub type Hide<'a> = &'a dyn Fn(i64, Option<&str>, &mut dyn FnMut());

/// [`Hide`] where no kernel caches views (the library's tests, `du`).
pub fn no_cache(_: i64, _: Option<&str>, begin: &mut dyn FnMut()) {
    begin()
}

/// Records a forget merges per transaction. Each batch holds the turn gate
/// (what every recording FUSE operation waits for) for its transaction
/// only: a turn that removed a whole tree is merged in many short steps.
pub const FORGET_BATCH_ROWS: usize = 32;

/// Chunks freed per step (their `gc_chunks` listing, then their release
/// from the chunk store under the content lock).
pub const FREE_BATCH_CHUNKS: usize = 128;

/// The attic entries a collection's transactions left unreachable: removed
/// after its last commit (each is in `gc_attic` from its commit on, so the
/// next open removes it if the daemon dies first).
#[derive(Default)]
struct Freed {
    /// Files: (object, handle, bytes).
    removals: Vec<(ObjectId, Vec<u8>, u64)>,
    /// Directories a rewind moved aside whole (and, for `reset`, every
    /// slot it empties): (object, bytes).
    swept: Vec<(ObjectId, u64)>,
}

impl Freed {
    /// Of the objects dropped records named (`named`), those alone in the
    /// attic that no record names any more: no view reaches them, nor
    /// their own records, which go now.
    fn unreachable(
        &mut self,
        m: &Meta,
        named: &[ObjectId],
        attic: AtticRemover<'_>,
        attic_dir: Option<&std::path::Path>,
    ) -> MetaResult<()> {
        for (id, handle) in m.unnamed_objects(named)? {
            if let Some(bytes) = attic(id, &handle, true) {
                m.drop_unreachable(id)?;
                self.removals.push((id, handle, bytes));
            } else if let Some(dir) = attic_dir
                && let Some((bytes, inner)) = unreachable_attic_dir(m, dir, id, &handle)?
            {
                // A directory a rewind moved aside whole, and nothing in it
                // that a view reaches: it goes with its objects' records.
                for x in inner.into_iter().chain([id]) {
                    m.drop_unreachable(x)?;
                }
                self.swept.push((id, bytes));
            }
        }
        Ok(())
    }

    /// Removes the entries (their transactions committed).
    fn remove(&self, out: &mut Collected, attic: AtticRemover<'_>, attic_dir: Option<&std::path::Path>) {
        for (id, handle, _) in &self.removals {
            if let Some(bytes) = attic(*id, handle, false) {
                out.attic_files_freed += 1;
                out.attic_bytes_freed += bytes;
            }
        }
        if let Some(dir) = attic_dir {
            for (id, _) in &self.swept {
                if let Some(bytes) = remove_attic_slot(dir, *id) {
                    out.attic_files_freed += 1;
                    out.attic_bytes_freed += bytes;
                }
            }
        }
    }
}

/// The time a collection goes by: the clock, or in test builds
/// `REWINDFS_TEST_NOW_MS` (so "older than 14 days" is testable).
pub fn now_ms() -> i64 {
    crate::faults::now_ms().unwrap_or_else(super::now_ms)
}

impl Journal {
    /// The retention policy stored in the store (defaults where unset).
    pub fn policy(&self) -> JournalResult<Policy> {
        let d = Policy::default();
        let get = |m: &dyn Retention, name: &str, default: u64| -> MetaResult<u64> {
            Ok(m.setting(name)?.and_then(|v| v.parse().ok()).unwrap_or(default))
        };
        Ok(self.with_retention(|m| -> MetaResult<Policy> {
            Ok(Policy {
                keep_count: get(m, KEEP_COUNT, d.keep_count)?,
                keep_days: get(m, KEEP_DAYS, d.keep_days)?,
                keep_rewinds: get(m, KEEP_REWINDS, d.keep_rewinds)?,
                auto: m.setting(AUTO)?.map_or(d.auto, |v| v != "off"),
            })
        })?)
    }

    /// Stores the retention policy.
    pub fn set_policy(&self, p: &Policy) -> JournalResult<()> {
        let (count, days, rewinds) = (p.keep_count.to_string(), p.keep_days.to_string(), p.keep_rewinds.to_string());
        Ok(self.with_retention(|m| {
            m.set_settings(&[
                (KEEP_COUNT, &count),
                (KEEP_DAYS, &days),
                (KEEP_REWINDS, &rewinds),
                (AUTO, if p.auto { "on" } else { "off" }),
            ])
        })?)
    }

    /// What the last background collection did, if one ran.
    pub fn last_auto(&self) -> JournalResult<Option<AutoRun>> {
        let v = self.with_retention(|m| m.setting(LAST_AUTO))?;
        Ok(v.and_then(|v| serde_json::from_str(&v).ok()))
    }

    pub fn set_last_auto(&self, run: &AutoRun) -> JournalResult<()> {
        let v = serde_json::to_string(run).unwrap_or_default();
        Ok(self.with_retention(|m| m.set_settings(&[(LAST_AUTO, &v)]))?)
    }

    /// Checks that `name` can name a checkpoint: a word like a message id
    /// (no number, `~N`, control characters, `/`), not naming another.
    pub fn check_snapshot_name(&self, name: &str, checkpoint: Option<i64>) -> JournalResult<()> {
        if let Some(why) = refusal(name) {
            return Err(JournalError::BadSnapshotName { name: format!("{:?}", truncate_for_message(name)), why });
        }
        // Indexed lookups (the name, the message id, the checkpoint), not
        // the history: a snapshot is named in constant time.
        if let Some(n) = self.with_checkpoints(|m| m.snapshot(name))? {
            return Err(JournalError::DuplicateSnapshotName { name: format!("{name:?}"), checkpoint: n });
        }
        if let Some(n) = self.with_checkpoints(|m| m.checkpoint_with_message(name, checkpoint))? {
            return Err(JournalError::DuplicateSnapshotName {
                name: format!("{name:?} (as its message id)"),
                checkpoint: n,
            });
        }
        if let Some(n) = checkpoint
            && let Some(old) = self.with_checkpoints(|m| m.checkpoint(n))?.and_then(|c| c.name)
        {
            return Err(JournalError::AlreadyNamed { checkpoint: n, name: format!("{old:?}") });
        }
        Ok(())
    }

    /// Names checkpoint `checkpoint` (checked again, in the transaction).
    pub fn name_checkpoint(&self, name: &str, checkpoint: i64, message: Option<&str>) -> JournalResult<()> {
        self.check_snapshot_name(name, Some(checkpoint))?;
        let at = super::now_ms();
        Ok(self.with_checkpoints(|m| m.add_snapshot(name, checkpoint, message, at))?)
    }

    /// Why each of `checkpoints` that cannot be forgotten is kept (reads
    /// them, the newest and the rewinds: not the history).
    pub fn protected_among(&self, checkpoints: &[i64]) -> JournalResult<BTreeMap<i64, String>> {
        let policy = self.policy()?;
        let rows = self.with_meta(|m| m.plan_rows(0, 0, policy.keep_rewinds, Some(checkpoints)))?;
        let mut kept = protected(&rows.rows, &rows.tainted, &policy);
        kept.retain(|c, _| checkpoints.contains(c));
        Ok(kept)
    }

    /// What the stored policy lets go now.
    pub fn plan_retention(&self, policy: &Policy) -> JournalResult<Vec<i64>> {
        Ok(self.plan_retention_cost(policy)?.0)
    }

    /// [`Journal::plan_retention`], and the SQLite steps its reads took:
    /// they grow with what the policy lets go and with its counts, not
    /// with the history (`Meta::plan_rows`).
    pub fn plan_retention_cost(&self, policy: &Policy) -> JournalResult<(Vec<i64>, u64)> {
        let horizon = horizon(policy, now_ms());
        let rows = self.with_meta(|m| m.plan_rows(horizon, policy.keep_count, policy.keep_rewinds, None))?;
        let keep = protected(&rows.rows, &rows.tainted, policy);
        let candidates: HashSet<i64> = rows.candidates.iter().copied().collect();
        let candidates = rows.rows.iter().filter(|c| candidates.contains(&c.checkpoint));
        let out = victims(candidates, &HashSet::new(), &keep, horizon);
        log::debug!("retention plan: {} to forget, {} SQLite steps", out.len(), rows.steps);
        Ok((out, rows.steps))
    }

    /// Forgets `victims` (`by`: "forget" or "retention") and frees what no
    /// kept checkpoint needs; with `dry_run`, says what it would do (one
    /// transaction on a copy of the database, rolled back). The caller has checked them against
    /// [`Journal::protected`]; the newest is refused here too. Writes go on
    /// in between the short transactions it runs (see the module comment);
    /// `hide` runs the one that removes each checkpoint from view.
    pub fn collect(
        &self,
        victims: &[i64],
        by: &str,
        dry_run: bool,
        attic: AtticRemover<'_>,
        attic_dir: Option<&std::path::Path>,
        hide: Hide<'_>,
    ) -> JournalResult<Collected> {
        let mut victims = victims.to_vec();
        victims.sort_unstable();
        victims.dedup();
        if dry_run {
            return self.collect_whole(&victims, by, true, attic, attic_dir, false, &|_, _| {});
        }
        let newest = self.current_turn();
        if let Some(&newest) = victims.iter().find(|&&v| v >= newest) {
            return Err(JournalError::Kept {
                checkpoint: newest,
                why: "it is the newest: the current turn records into it".into(),
            });
        }
        let started = std::time::Instant::now();
        let mut out = Collected { forgotten: victims.clone(), ..Default::default() };
        let mut freed = Freed::default();
        // A forget a failed collection left (the next open would end it).
        self.merge_forgetting(&mut out, &mut freed, attic, attic_dir)?;
        let at = now_ms();
        for &f in &victims {
            let message = self.with_meta(|m| m.checkpoint_message(f))?;
            let mut begun = None;
            hide(f, message.as_deref(), &mut || {
                begun =
                    Some(self.exclusive("take out of view", &mut out.gate_ms, |m| m.forget_begin(f, by, at).map(drop)));
            });
            begun.unwrap_or(Err(JournalError::Meta(crate::meta::MetaError::Malformed {
                what: "collection (its checkpoint was never taken out of view)",
            })))?;
            // The seal time kept for `f` would answer for the turn before
            // it, whose records now include `f`'s (`sealed_after`).
            self.forget_seal_time(f);
            self.merge_forgetting(&mut out, &mut freed, attic, attic_dir)?;
        }
        self.free_chunks(&mut out)?;
        freed.remove(&mut out, attic, attic_dir);
        self.with_retention(|m| m.clear_gc_attic())?;
        out.log(by, started);
        Ok(out)
    }

    /// Runs `f` in one transaction holding the turn gate exclusively (what
    /// every recording FUSE operation waits for) and the content lock,
    /// after folding the record log; `held` keeps the longest such hold.
    fn exclusive<T>(&self, what: &str, held: &mut f64, f: impl FnOnce(&Meta) -> MetaResult<T>) -> JournalResult<T> {
        let gate = self.gate_exclusive();
        let taken = std::time::Instant::now();
        let content = crate::poison::lock(&self.content_lock, "the journal's content lock");
        let mut inner = self.lock();
        inner.fold()?;
        inner.moves.everything();
        let folded = taken.elapsed();
        let out = inner.transaction(f);
        drop((inner, content, gate));
        let ms = taken.elapsed().as_secs_f64() * 1000.0;
        log::debug!(
            "collection step ({what}): writes held {ms:.2} ms (the fold {:.2} ms)",
            folded.as_secs_f64() * 1000.0
        );
        *held = held.max(ms);
        out
    }

    /// Merges the forget under way into the kept turn before it, a batch of
    /// [`FORGET_BATCH_ROWS`] records per transaction, writes going on in
    /// between; lists the attic entries that its dropped records leave
    /// unreachable (removed after the collection's commits).
    fn merge_forgetting(
        &self,
        out: &mut Collected,
        freed: &mut Freed,
        attic: AtticRemover<'_>,
        attic_dir: Option<&std::path::Path>,
    ) -> JournalResult<()> {
        let rows = crate::faults::gc_batch_rows().unwrap_or(FORGET_BATCH_ROWS);
        loop {
            let mut held = out.gate_ms;
            let done = self.exclusive("merge a batch", &mut held, |m| {
                let Some(g) = m.forgetting()? else { return Ok(true) };
                let (merged, done) = m.forget_rows(&g, rows)?;
                out.records_dropped += merged.dropped_records;
                out.records_moved += merged.moved_records;
                freed.unreachable(m, &merged.dropped_objects, attic, attic_dir)?;
                m.forget_stale_known(&merged.dropped_objects)?;
                Ok(done)
            })?;
            out.gate_ms = held;
            if done {
                return Ok(());
            }
            crate::faults::kill_point("gc-batch");
            crate::faults::gc_batch_pause();
            // Writers waiting on the gate go first.
            std::thread::yield_now();
        }
    }

    /// Frees the chunks whose count fell to zero, [`FREE_BATCH_CHUNKS`] per
    /// step: each lists them in `gc_chunks` (its intent) and drops their
    /// counts in one transaction, then releases them from the chunk store
    /// still holding the content lock, so that no content stored meanwhile
    /// is deduplicated against one (see the module comment).
    fn free_chunks(&self, out: &mut Collected) -> JournalResult<()> {
        loop {
            let gate = self.gate_exclusive();
            let taken = std::time::Instant::now();
            let content = crate::poison::lock(&self.content_lock, "the journal's content lock");
            let dead = {
                let mut inner = self.lock();
                inner.fold()?;
                inner.transaction(|m| {
                    let dead = m.unreferenced_chunks(FREE_BATCH_CHUNKS)?;
                    m.add_gc_chunks(&dead)?;
                    m.drop_chunk_counts(&dead)?;
                    Ok(dead)
                })?
            };
            drop(gate);
            let gate_ms = taken.elapsed().as_secs_f64() * 1000.0;
            let dead: Vec<ChunkId> = dead.into_iter().collect();
            out.chunks_freed += dead.len() as u64;
            for id in &dead {
                out.bytes_freed += self.store.stored_len(id)?.unwrap_or(0);
            }
            // Committed, nothing freed yet: the next open frees them.
            crate::faults::kill_point("gc-committed");
            let since = |t: std::time::Instant| t.elapsed().as_secs_f64() * 1000.0;
            let releasing = std::time::Instant::now();
            self.store.release(&dead)?;
            let release_ms = since(releasing);
            // Still under the content lock: once it is free, a chunk with
            // the same id may be stored again, and the next open must not
            // release it. Not folding the record log: the rows are no
            // record's business, and waiting writers need not wait for it.
            let clearing = std::time::Instant::now();
            self.lock().meta.remove_gc_chunks(&dead)?;
            let clear_ms = since(clearing);
            drop(content);
            let ms = since(taken);
            // Where the content lock's time goes: a step's rows are bounded,
            // a commit that runs SQLite's WAL checkpoint is not.
            log::debug!(
                "collection step (free {} chunks): gate {gate_ms:.2} ms, content lock {ms:.2} ms \
                 (chunk index release {release_ms:.2} ms, list cleared {clear_ms:.2} ms)",
                dead.len()
            );
            out.gate_ms = out.gate_ms.max(ms);
            if dead.len() < FREE_BATCH_CHUNKS {
                return Ok(());
            }
        }
    }

    /// `reset`: forgets every checkpoint but the newest (the caller has
    /// just sealed it: the tree now) and empties the attic of everything
    /// no record of the newest turn names, directories moved aside whole
    /// included (`attic_dir`). Nothing of the workspace is touched. The
    /// caller holds the history lock, so nothing seals meanwhile.
    /// `step(done, total)` is told after each checkpoint forgotten (all in
    /// one transaction: a reset is whole or not at all).
    pub fn reset(
        &self,
        attic: AtticRemover<'_>,
        attic_dir: &std::path::Path,
        step: &dyn Fn(u64, u64),
    ) -> JournalResult<Collected> {
        let newest = self.current_turn();
        let victims: Vec<i64> = self
            .with_checkpoints(|m| m.checkpoints())?
            .into_iter()
            .map(|c| c.checkpoint)
            .filter(|&c| c < newest)
            .collect();
        self.collect_whole(&victims, RESET, false, attic, Some(attic_dir), true, step)
    }

    /// A collection in one transaction: `reset`, holding the turn gate
    /// throughout, and every dry run (rolled back), which holds it only to
    /// fold the record log when the database is in a file: it works on a
    /// copy of the database (`Meta::copy_of`), so that `du` and
    /// `gc --dry-run` keep no write waiting however much they would free.
    #[allow(clippy::too_many_arguments)]
    fn collect_whole(
        &self,
        victims: &[i64],
        by: &str,
        dry_run: bool,
        attic: AtticRemover<'_>,
        attic_dir: Option<&std::path::Path>,
        reset: bool,
        step: &dyn Fn(u64, u64),
    ) -> JournalResult<Collected> {
        let gate = self.gate_exclusive();
        let gate_taken = std::time::Instant::now();
        let content = crate::poison::lock(&self.content_lock, "the journal's content lock");
        let mut inner = self.lock();
        inner.fold()?;
        if let Some(&newest) = victims.iter().find(|&&v| v >= inner.turn) {
            return Err(JournalError::Kept {
                checkpoint: newest,
                why: "it is the newest: the current turn records into it".into(),
            });
        }
        let at = now_ms();
        let mut out = Collected { dry_run, forgotten: victims.to_vec(), ..Default::default() };
        let mut freed = Freed::default();
        let newest = inner.turn;
        let work = |m: &Meta| -> MetaResult<HashSet<ChunkId>> {
            // A forget a failed collection left goes first.
            if let Some(g) = m.forgetting()? {
                let (merged, _) = m.forget_rows(&g, usize::MAX)?;
                freed.unreachable(m, &merged.dropped_objects, attic, attic_dir)?;
                m.forget_stale_known(&merged.dropped_objects)?;
            }
            for (i, &f) in victims.iter().enumerate() {
                step(i as u64, victims.len() as u64);
                if !dry_run {
                    self.forget_seal_time(f);
                }
                let merged = m.forget_checkpoint(f, by, at)?;
                out.records_dropped += merged.dropped_records;
                out.records_moved += merged.moved_records;
                freed.unreachable(m, &merged.dropped_objects, attic, attic_dir)?;
                m.forget_stale_known(&merged.dropped_objects)?;
            }
            if reset {
                for id in m.reset_attic(newest)? {
                    m.drop_unreachable(id)?;
                    freed.swept.push((id, 0));
                }
            }
            // The lists that went lowered their chunks' counts (`meta/refs.rs`):
            // what is at zero now is what no kept record or pending file
            // needs, found without reading the lists of the kept history.
            let dead = m.unreferenced_chunks(usize::MAX)?;
            if !dry_run {
                m.add_gc_chunks(&dead)?;
                m.drop_chunk_counts(&dead)?;
            }
            Ok(dead)
        };
        let held = || gate_taken.elapsed().as_secs_f64() * 1000.0;
        // Committed: recording may go on. Nothing can use a chunk about to
        // be released (no list names it, and no content is stored until the
        // content lock is free: see the module comment), and no name leads
        // to the attic entries about to go.
        let (dead, gate_ms) = match (dry_run, inner.meta.path()) {
            // A dry run of a database in a file works on a copy of it as
            // folded (`Meta::copy_of`), holding nothing: writes go on.
            (true, Some(path)) => {
                drop((inner, content, gate));
                let gate_ms = held();
                (Meta::copy_of(&path)?.rolled_back(work)?, gate_ms)
            }
            (true, None) => {
                let dead = inner.meta.rolled_back(work)?;
                drop((inner, gate));
                (dead, held())
            }
            (false, _) => {
                inner.moves.everything();
                let dead = inner.transaction(work)?;
                drop((inner, gate));
                (dead, held())
            }
        };
        out.gate_ms = gate_ms;
        if dry_run {
            out.attic_files_freed = (freed.removals.len() + freed.swept.len()) as u64;
            out.attic_bytes_freed = freed.removals.iter().map(|r| r.2).chain(freed.swept.iter().map(|s| s.1)).sum();
        }
        let dead: Vec<ChunkId> = dead.into_iter().collect();
        out.chunks_freed = dead.len() as u64;
        for id in &dead {
            out.bytes_freed += self.store.stored_len(id)?.unwrap_or(0);
        }
        if !dry_run {
            // Committed, nothing freed yet: the next open frees them.
            crate::faults::kill_point("gc-committed");
            self.store.release(&dead)?;
            freed.remove(&mut out, attic, attic_dir);
            self.with_retention(|m| m.clear_gc_chunks())?;
            out.log(by, gate_taken);
        }
        Ok(out)
    }

    /// Runs `f`, the owner's collection or an unmount's last sync, with the
    /// store's reserve (`store/pack.rs`): given up before `f` when the
    /// store's filesystem is short of space, or after `f` failed for want
    /// of it (then `f` runs again: every step of a collection and a sync
    /// can be run again), and made again afterwards. Meanwhile no content
    /// is stored, so the room is theirs alone.
    /// A store without packs keeps no reserve: `f` just runs.
    pub fn with_reserve<T, E: crate::error::AsErrno>(&self, mut f: impl FnMut() -> Result<T, E>) -> Result<T, E> {
        let Some(store) = self.store.reclaiming() else { return f() };
        let lent = store.lend_reserve(false);
        let mut out = f();
        let short = |o: &Result<T, E>| o.as_ref().is_err_and(|e| e.errno().0 == libc::ENOSPC);
        if !lent && short(&out) && store.lend_reserve(true) {
            out = f();
        }
        store.restore_reserve();
        out
    }

    /// After a collection: gives the pages the databases no longer use back
    /// to the filesystem and empties their logs ([`crate::sqlite::shrink`]),
    /// holding the turn gate (a `VACUUM` rewrites the whole file). Best
    /// effort: what failed is logged, the collection stands.
    pub fn shrink(&self) {
        let gate = self.gate_exclusive();
        if let Err(e) = self.lock().meta.shrink() {
            log::warn!("Cannot give the metadata database's free pages back: {e}.");
        }
        drop(gate);
        if let Some(Err(e)) = self.store.reclaiming().map(|s| s.shrink()) {
            log::warn!("Cannot give the chunk index's free pages back: {e}.");
        }
    }

    /// Rewrites packs mostly made of released chunks (live fraction under
    /// [`COMPACT_BELOW`], at least [`COMPACT_MIN_RECLAIM`] bytes back).
    pub fn compact(&self) -> JournalResult<crate::store::Compacted> {
        self.compact_below(COMPACT_BELOW, COMPACT_MIN_RECLAIM)
    }

    /// Rewrites packs whose live fraction is under `threshold` and that give
    /// back at least `min_reclaim` bytes (`reset` takes back every pack
    /// mostly released, however small). A store without packs has nothing
    /// to rewrite.
    pub fn compact_below(&self, threshold: f64, min_reclaim: u64) -> JournalResult<crate::store::Compacted> {
        let Some(store) = self.store.reclaiming() else { return Ok(crate::store::Compacted::default()) };
        // The mount compares the packs with what was sealed: after the old
        // packs go they hold less, and that is not damage.
        let mut lower = |held: crate::store::StoreStats| {
            self.with_meta(|m| {
                m.lower_store_bytes(held.stored_bytes as i64)?;
                m.lower_sealed_record_bytes(super::record_bytes(&held) as i64)
            })
            .map_err(|e| crate::store::StoreError::Decode { what: "metadata", detail: e.to_string() })
        };
        Ok(store.compact(threshold, min_reclaim, &mut lower)?)
    }

    /// Finishes a collection the previous daemon was killed in (run at
    /// open, before anything records): frees the chunks and attic entries
    /// its commits listed, then merges the rest of a forget under way.
    pub fn finish_collection(&self, attic_dir: &std::path::Path) -> JournalResult<usize> {
        let (left, attic, forgetting) =
            self.with_retention(|m| -> MetaResult<_> { Ok((m.gc_chunks()?, m.gc_attic()?, m.forgetting()?)) })?;
        if !left.is_empty() || !attic.is_empty() {
            self.store.release(&left)?;
            for id in attic {
                // Checked before the collection committed; nothing ran since.
                remove_attic_slot(attic_dir, id);
            }
            self.with_retention(|m| m.clear_gc_chunks())?;
            log::warn!("finished a collection the previous daemon was killed in: {} chunks freed", left.len());
        }
        let Some(g) = forgetting else { return Ok(left.len()) };
        // The attic as it is at open, before the tree exists.
        let at_open =
            rustix::fs::open(attic_dir, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).ok();
        let attic = |id, handle: &[u8], dry| remove_unreachable_slot(at_open.as_ref()?.as_fd(), id, handle, dry);
        let mut out = Collected::default();
        let mut freed = Freed::default();
        self.merge_forgetting(&mut out, &mut freed, &attic, Some(attic_dir))?;
        self.free_chunks(&mut out)?;
        freed.remove(&mut out, &attic, Some(attic_dir));
        self.with_retention(|m| m.clear_gc_attic())?;
        log::warn!(
            "finished forgetting checkpoint {}, which the previous daemon was killed in: {} records dropped, \
             {} chunks and {} attic files freed",
            g.checkpoint,
            out.records_dropped,
            out.chunks_freed,
            out.attic_files_freed
        );
        Ok(left.len() + out.chunks_freed as usize)
    }
}

/// `by` of the checkpoints a reset forgot.
pub const RESET: &str = "reset";

/// Removes attic entry `attic/<id>` a committed collection listed: a file,
/// or (only `reset` lists them) a directory moved aside whole, with
/// everything in it (symlinks are removed, never followed). The bytes
/// freed, or None when it was not there or could not be removed.
fn remove_attic_slot(attic_dir: &std::path::Path, id: ObjectId) -> Option<u64> {
    let slot = attic_dir.join(id.0.to_string());
    let meta = std::fs::symlink_metadata(&slot).ok()?;
    let bytes = tree_bytes(&slot).0;
    let removed = if meta.is_dir() { std::fs::remove_dir_all(&slot) } else { std::fs::remove_file(&slot) };
    match removed {
        Ok(()) => Some(bytes),
        Err(e) => {
            log::warn!("cannot remove attic entry {}: {e}", slot.display());
            None
        }
    }
}

/// Removes object `id`'s slot in the attic directory `attic` when it holds
/// the inode `handle` (as the store keeps it) names, is not a directory
/// and has no other name: a collection found that no kept checkpoint
/// reaches it. With `dry_run` it only checks. The bytes the slot held;
/// None: left alone (a handle that does not decode too).
pub fn remove_unreachable_slot(attic: BorrowedFd<'_>, id: ObjectId, handle: &[u8], dry_run: bool) -> Option<u64> {
    let handle = FileHandle::from_bytes(handle)?;
    let name = id.0.to_string();
    let st = rustix::fs::statat(attic, &name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory || st.st_nlink != 1 {
        return None;
    }
    if sys::name_to_handle_at(attic, OsStr::new(&name)).ok()? != handle {
        return None;
    }
    if !dry_run && let Err(e) = rustix::fs::unlinkat(attic, &name, AtFlags::empty()) {
        log::warn!("cannot remove attic entry {name}, which no kept checkpoint needs: {e}");
        return None;
    }
    Some(st.st_blocks as u64 * 512)
}

/// Whether attic entry `attic/<id>` is a directory holding object `id`
/// (`handle`) with nothing inside that a view can reach: every entry in it
/// has one link (no other name), is not pending, and is named by no entry
/// record. Its bytes and the objects inside that the store knows, or None.
fn unreachable_attic_dir(
    m: &Meta,
    attic_dir: &std::path::Path,
    id: ObjectId,
    handle: &[u8],
) -> MetaResult<Option<(u64, Vec<ObjectId>)>> {
    use std::os::unix::fs::MetadataExt;

    let name = std::ffi::OsString::from(id.0.to_string());
    let slot = attic_dir.join(&name);
    if !std::fs::symlink_metadata(&slot).is_ok_and(|md| md.is_dir()) {
        return Ok(None);
    }
    let Ok(parent) = std::fs::File::open(attic_dir) else { return Ok(None) };
    if !sys::name_to_handle_at(parent.as_fd(), &name).is_ok_and(|h| h.to_bytes() == handle) {
        return Ok(None);
    }
    let mut inner = Vec::new();
    let mut dirs = vec![slot.clone()];
    while let Some(d) = dirs.pop() {
        let (Ok(fd), Ok(entries)) = (std::fs::File::open(&d), std::fs::read_dir(&d)) else { return Ok(None) };
        for e in entries {
            let Ok(e) = e else { return Ok(None) };
            let Ok(md) = e.path().symlink_metadata() else { return Ok(None) };
            if !md.is_dir() && md.nlink() != 1 {
                return Ok(None);
            }
            let Ok(h) = sys::name_to_handle_at(fd.as_fd(), &e.file_name()) else { return Ok(None) };
            let h = h.to_bytes();
            if m.is_pending(&h)? {
                return Ok(None);
            }
            if let Some(x) = m.object_by_handle(&h)? {
                if m.is_named(x)? {
                    return Ok(None);
                }
                inner.push(x);
            }
            if md.is_dir() {
                dirs.push(e.path());
            }
        }
    }
    Ok(Some((tree_bytes(&slot).0, inner)))
}

/// Allocated bytes under `path` (not following symlinks), and entries.
fn tree_bytes(path: &std::path::Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else { return (0, 0) };
    let mut bytes = meta.blocks() * 512;
    let mut entries = 0;
    if meta.is_dir()
        && let Ok(dir) = std::fs::read_dir(path)
    {
        for e in dir.flatten() {
            let (b, n) = tree_bytes(&e.path());
            bytes += b;
            entries += n + 1;
        }
    }
    (bytes, entries)
}

/// `du`: bytes on disk by part, logical bytes, ratios, per turn, and what
/// `gc` would free under the stored policy.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct DuReply {
    /// Everything in the store directory.
    pub disk_bytes: u64,
    pub packs_bytes: u64,
    /// Bytes of the packs the index points at (the rest is released or
    /// never indexed: compaction's to take back).
    pub packs_live_bytes: u64,
    pub index_bytes: u64,
    pub metadata_bytes: u64,
    /// Removed files kept in the attic (allocated bytes).
    pub attic_bytes: u64,
    pub attic_entries: u64,
    /// Distinct chunks, their bytes decoded and as stored.
    pub chunks: u64,
    pub unique_bytes: u64,
    pub stored_bytes: u64,
    /// Bytes of content the records refer to (each file version counted
    /// whole, as a copy would take).
    pub logical_bytes: u64,
    /// logical / unique (what content-addressing saves).
    pub dedup_ratio: f64,
    /// unique / stored (what zstd saves).
    pub compression_ratio: f64,
    pub turns: Vec<TurnUsage>,
    /// `gc --dry-run` under the stored policy.
    pub gc_would_free: Collected,
}

/// What one turn's records hold.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct TurnUsage {
    pub checkpoint: i64,
    pub records: u64,
    /// Bytes of content captured (file versions, counted whole).
    pub content_bytes: u64,
}

/// `du`: where the store's bytes are. `attic` answers for the attic
/// entries a collection would remove (called with `dry_run`).
pub fn du(journal: &Journal, attic: AtticRemover<'_>, store_dir: &std::path::Path) -> JournalResult<DuReply> {
    let parts = crate::store_dir::StoreDir::new(store_dir);
    let size = |p: std::path::PathBuf| tree_bytes(&p).0;
    let packs = journal.store().reclaiming().map_or(Ok(Vec::new()), |s| s.pack_use())?;
    let stats = journal.store().stats()?;
    let usage = journal.with_meta(|m| m.turn_usage())?;
    let logical: u64 = usage.iter().map(|u| u.2).sum();
    let policy = journal.policy()?;
    let victims = journal.plan_retention(&policy)?;
    let gc_would_free = journal.collect(&victims, "retention", true, attic, Some(&parts.attic()), &no_cache)?;
    let (attic_bytes, attic_entries) = tree_bytes(&parts.attic());
    let attic_entries = std::fs::read_dir(parts.attic()).map(|d| d.count() as u64).unwrap_or(attic_entries);
    let ratio = |a: u64, b: u64| if b == 0 { 1.0 } else { a as f64 / b as f64 };
    Ok(DuReply {
        disk_bytes: size(store_dir.to_path_buf()),
        packs_bytes: packs.iter().map(|p| p.file_bytes).sum(),
        packs_live_bytes: packs.iter().map(|p| p.live_bytes).sum(),
        index_bytes: ["chunks.sqlite", "chunks.sqlite-wal"].iter().map(|n| size(parts.chunks().join(n))).sum(),
        metadata_bytes: size(parts.meta()) + size(store_dir.join("meta.sqlite-wal")) + size(parts.journal_log()),
        attic_bytes,
        attic_entries,
        chunks: stats.chunks,
        unique_bytes: stats.raw_bytes,
        stored_bytes: stats.stored_bytes,
        logical_bytes: logical,
        dedup_ratio: ratio(logical, stats.raw_bytes),
        compression_ratio: ratio(stats.raw_bytes, stats.stored_bytes),
        turns: usage
            .into_iter()
            .map(|(checkpoint, records, content_bytes)| TurnUsage { checkpoint, records, content_bytes })
            .collect(),
        gc_would_free,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cp(n: i64, parent: Option<i64>, days_ago: i64, reason: Reason) -> Checkpoint {
        Checkpoint {
            checkpoint: n,
            parent,
            message_id: None,
            session: None,
            label: None,
            reason,
            created_at: 100 * DAY_MS - days_ago * DAY_MS,
            store_bytes_at_start: 0,
            name: None,
            snapshot_message: None,
            sealed_by: None,
        }
    }

    const NOW: i64 = 100 * DAY_MS;

    #[test]
    fn policy_keeps_the_newest_the_young_and_the_named() {
        // 0..=9, one a day, 9 is today; 3 is named.
        let mut all: Vec<Checkpoint> = (0..10).map(|n| cp(n, (n > 0).then_some(n - 1), 9 - n, Reason::Turn)).collect();
        all[3].name = Some("release".into());
        let p = Policy { keep_count: 2, keep_days: 4, keep_rewinds: 5, auto: true };
        let keep = protected(&all, &HashSet::new(), &p);
        // Young: 5..9 (at most 4 days old); newest two: 8, 9.
        assert_eq!(plan(&all, &HashSet::new(), &keep, &p, NOW), vec![0, 1, 2, 4]);
        let p = Policy { keep_count: 7, ..p };
        assert_eq!(plan(&all, &HashSet::new(), &keep, &p, NOW), vec![0, 1, 2], "the 7 newest are kept however old");
        let tainted: HashSet<i64> = [1].into_iter().collect();
        assert_eq!(plan(&all, &HashSet::new(), &protected(&all, &tainted, &p), &p, NOW), vec![0, 2]);
    }

    #[test]
    fn empty_turns_do_not_count_toward_the_newest_kept() {
        // 0..=9, one a day, 9 is today; 6, 7 and 8 changed nothing.
        let all: Vec<Checkpoint> = (0..10).map(|n| cp(n, (n > 0).then_some(n - 1), 9 - n, Reason::Turn)).collect();
        let p = Policy { keep_count: 3, keep_days: 0, keep_rewinds: 5, auto: true };
        let keep = protected(&all, &HashSet::new(), &p);
        assert_eq!(plan(&all, &HashSet::new(), &keep, &p, NOW), vec![0, 1, 2, 3, 4, 5, 6]);
        let empty: HashSet<i64> = [6, 7, 8].into_iter().collect();
        assert_eq!(plan(&all, &empty, &keep, &p, NOW), vec![0, 1, 2, 3], "9, then 5 and 4 count; 6-8 lie between");
    }

    #[test]
    fn policy_keeps_abandoned_branches_for_the_days_and_rewinds_safety_checkpoints() {
        // 0-1-2-3 then a rewind to 1: 4 is the safety checkpoint, 5 the
        // result (parent 1), 6 a later turn. Everything is 20 days old but 6.
        let mut all = vec![
            cp(0, None, 20, Reason::Mount),
            cp(1, Some(0), 20, Reason::Turn),
            cp(2, Some(1), 20, Reason::Turn),
            cp(3, Some(2), 20, Reason::Turn),
            cp(4, Some(3), 20, Reason::Turn),
            cp(5, Some(1), 20, Reason::Rewind),
            cp(6, Some(5), 0, Reason::Turn),
        ];
        all[4].label = Some("safety checkpoint before rewind to 1".into());
        let p = Policy { keep_count: 1, keep_days: 14, keep_rewinds: 1, auto: true };
        let keep = protected(&all, &HashSet::new(), &p);
        assert!(keep.contains_key(&1) && keep.contains_key(&4) && keep.contains_key(&6), "{keep:?}");
        assert_eq!(
            plan(&all, &HashSet::new(), &keep, &p, NOW),
            vec![0, 2, 3, 5],
            "the abandoned 2, 3 go after 14 days"
        );
        let young = NOW - 15 * DAY_MS;
        assert_eq!(plan(&all, &HashSet::new(), &keep, &p, young), Vec::<i64>::new(), "at 5 days old everything stays");
        let p = Policy { keep_rewinds: 0, ..p };
        let keep = protected(&all, &HashSet::new(), &p);
        assert_eq!(plan(&all, &HashSet::new(), &keep, &p, NOW), vec![0, 2, 3, 4, 5]);
    }
}

#[cfg(test)]
mod journal_tests {
    use std::sync::Arc;

    use super::*;
    use crate::journal::TurnInfo;
    use crate::meta::{Checkpoints, PreImages};
    use crate::store::{ChunkStore, MemoryStore};

    #[test]
    fn names_resolve_forgotten_checkpoints_say_so_and_their_chunks_go() {
        let store = Arc::new(MemoryStore::new());
        let j = Journal::open(Meta::open_in_memory().unwrap(), store.clone()).unwrap();
        let seal =
            |id: &str| j.seal(&TurnInfo { message_id: Some(id.into()), ..Default::default() }, Reason::Turn, || {});
        let o = j.object_id(&crate::journal::tests::handle(b"f"), 1).unwrap();
        let content = |data: &[u8]| {
            let c = crate::store::store_content(&*store, data).unwrap();
            let mut s = crate::meta::test_file_state(data.len() as u64);
            s.content = Some((c.hash.as_bytes().to_vec(), c.encode_chunks()));
            s
        };
        // Turn 0 and 1 each record f's content ("v0", "v1"); 2 is the newest.
        let (s0, s1) = (content(b"v0"), content(b"v1"));
        j.with_meta(|m| m.record_object(0, o, &s0, None)).unwrap();
        seal("m1").unwrap();
        j.with_meta(|m| m.record_object(1, o, &s1, None)).unwrap();
        seal("m2").unwrap();
        j.name_checkpoint("good", 0, Some("the first")).unwrap();
        assert_eq!(j.resolve("good").unwrap().0, 0);
        assert!(matches!(j.name_checkpoint("good", 1, None), Err(JournalError::DuplicateSnapshotName { .. })));
        assert!(matches!(j.name_checkpoint("other", 0, None), Err(JournalError::AlreadyNamed { .. })));
        assert!(matches!(j.name_checkpoint("12", 1, None), Err(JournalError::BadSnapshotName { .. })));
        assert!(matches!(j.name_checkpoint("m2", 1, None), Err(JournalError::DuplicateSnapshotName { .. })));
        assert!(j.protected_among(&[0]).unwrap().contains_key(&0), "named");
        let chunks = store.stats().unwrap().chunks;
        let no_attic = |_: ObjectId, _: &[u8], _: bool| None;
        let dry = j.collect(&[1], "forget", true, &no_attic, None, &no_cache).unwrap();
        assert_eq!((dry.chunks_freed, dry.records_dropped), (1, 1), "{dry:?}");
        assert_eq!(j.resolve("1").unwrap().0, 1, "a dry run changes nothing");
        let done = j.collect(&[1], "forget", false, &no_attic, None, &no_cache).unwrap();
        assert_eq!(done.chunks_freed, 1);
        assert_eq!(store.stats().unwrap().chunks, chunks - 1, "v1's chunk went, v0's stays");
        for reference in ["1", "m1"] {
            let e = j.resolve(reference).unwrap_err();
            assert!(matches!(e, JournalError::Forgotten { .. }), "{e}");
            let text = e.to_string();
            assert!(text.contains("forgotten") && text.contains("checkpoint 0's turn"), "{text}");
        }
        let view0 = j.with_meta(|m| m.content_at(o, 0)).unwrap().unwrap();
        assert_eq!(view0.1, s0.content.unwrap().0, "checkpoint 0 still reads v0");
        assert!(matches!(j.collect(&[2], "forget", false, &no_attic, None, &no_cache), Err(JournalError::Kept { .. })));
    }

    /// A history of `n` checkpoints a minute apart up to now, every 50th a
    /// rewind (after a safety checkpoint) to the one 10 before, every
    /// 97th named, every 89th marking outside changes.
    fn long_history(n: i64) -> (Journal, Vec<Checkpoint>, HashSet<i64>) {
        let m = Meta::open_in_memory().unwrap();
        let now = super::now_ms();
        let mut tainted = HashSet::new();
        for i in 0..n {
            let rewind = i % 50 == 49;
            let c = Checkpoint {
                checkpoint: i,
                parent: (i > 0).then(|| if rewind { i - 10 } else { i - 1 }),
                message_id: None,
                session: None,
                label: (i % 50 == 48).then(|| format!("{SAFETY_LABEL} to {}", i - 9)),
                reason: if rewind { Reason::Rewind } else { Reason::Turn },
                created_at: now - (n - i) * 60_000,
                store_bytes_at_start: 0,
                name: None,
                snapshot_message: None,
                sealed_by: None,
            };
            m.seal(&c).unwrap();
            if i % 97 == 96 {
                m.add_snapshot(&format!("s{i}"), i, None, now).unwrap();
            }
            if i % 89 == 88 {
                m.taint(ObjectId(1), i).unwrap();
                tainted.insert(i);
            }
            // Most turns change something (a record of the turn that ends
            // at the next checkpoint); runs of empty ones between.
            if i % 11 < 7 {
                m.record_entry(i, ObjectId(1), format!("n{i}").as_bytes(), None, None).unwrap();
            }
        }
        let j = Journal::open(m, Arc::new(MemoryStore::new())).unwrap();
        let all = j.with_checkpoints(|m| m.checkpoints()).unwrap();
        (j, all, tainted)
    }

    #[test]
    fn planning_reads_the_candidates_and_agrees_with_the_whole_history() {
        let (j, all, tainted) = long_history(3_000);
        let ids: Vec<i64> = all.iter().map(|c| c.checkpoint).collect();
        let empty = j.with_meta(|m| m.empty_checkpoints(&ids)).unwrap();
        assert!(empty.len() > 500 && empty.len() < 1_500, "{} of 3,000 turns are empty", empty.len());
        for keep_count in [0, 5, 200, 5_000] {
            for keep_days in [0, 1, 14] {
                for keep_rewinds in [0, 2, 100] {
                    let p = Policy { keep_count, keep_days, keep_rewinds, auto: true };
                    let whole = plan(&all, &empty, &protected(&all, &tainted, &p), &p, now_ms());
                    let mine = j.plan_retention(&p).unwrap();
                    let only_mine: Vec<&i64> = mine.iter().filter(|c| !whole.contains(c)).collect();
                    let only_whole: Vec<&i64> = whole.iter().filter(|c| !mine.contains(c)).collect();
                    assert!(only_mine.is_empty() && only_whole.is_empty(), "{p:?}: {only_mine:?} {only_whole:?}");
                    j.set_policy(&p).unwrap();
                    let victims: Vec<i64> = (0..3_000).step_by(7).collect();
                    let mut kept = protected(&all, &tainted, &p);
                    kept.retain(|c, _| victims.contains(c));
                    assert_eq!(j.protected_among(&victims).unwrap(), kept, "{p:?}");
                }
            }
        }
    }

    #[test]
    fn planning_with_nothing_to_forget_costs_the_same_on_a_long_history() {
        // GC's cost is what it frees, not the history. Default
        // policy (200 / 14 days), everything young: nothing goes.
        let cost = |n| {
            let (j, _, _) = long_history(n);
            let (victims, steps) = j.plan_retention_cost(&Policy::default()).unwrap();
            assert_eq!(victims, Vec::<i64>::new());
            steps
        };
        let (short, long) = (cost(200), cost(2_000));
        assert!(long <= short, "planning read more of a 2,000-checkpoint history ({long} steps) than of 200 ({short})");
        // Two days kept, 30 to go: the steps grow with them, and stay far
        // below what reading the 2,000 checkpoints takes.
        let (j, _, _) = long_history(2_000);
        let p = Policy { keep_count: 20, keep_days: 1, ..Policy::default() };
        let (victims, steps) = j.plan_retention_cost(&p).unwrap();
        assert!(!victims.is_empty());
        let whole = j.with_meta(|m| m.plan_rows(i64::MAX, 0, 0, None)).unwrap().steps;
        assert!(steps < whole / 2, "{} victims cost {steps} steps, the whole table {whole}", victims.len());
    }

    /// A dry run (`du`, `gc --dry-run`) must not hold the turn gate, and so
    /// every recording FUSE operation, for a whole rolled back
    /// transaction. On a database in a file it works on a copy: while
    /// it checks the attic entries it would free, writes can go on; and it
    /// says what the collection then does.
    #[test]
    fn a_dry_run_keeps_no_write_waiting_and_says_what_the_collection_does() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(MemoryStore::new());
        let j = Journal::open(Meta::open(&dir.path().join("meta.sqlite")).unwrap(), store.clone()).unwrap();
        let o = j.object_id(&crate::journal::tests::handle(b"f"), 1).unwrap();
        let c = crate::store::store_content(&*store, &b"only in turn 0"[..]).unwrap();
        let mut s = crate::meta::test_file_state(14);
        s.content = Some((c.hash.as_bytes().to_vec(), c.encode_chunks()));
        j.record_object(o, &s, None, true).unwrap();
        j.seal(&TurnInfo::default(), Reason::Turn, || {}).unwrap();
        j.seal(&TurnInfo::default(), Reason::Turn, || {}).unwrap();
        let asked = std::sync::atomic::AtomicU64::new(0);
        let dry_run = std::sync::atomic::AtomicBool::new(true);
        // Asked `dry` by every collection while its transaction runs.
        let attic = |_: ObjectId, _: &[u8], dry: bool| {
            asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if dry && dry_run.load(std::sync::atomic::Ordering::Relaxed) {
                assert!(j.gate.try_write().is_ok(), "a dry run holds the turn gate");
                j.with_meta(|m| m.set_state("written during the dry run", "yes")).unwrap();
            }
            Some(4096)
        };
        let dry = j.collect(&[0], "forget", true, &attic, None, &no_cache).unwrap();
        assert_eq!(asked.load(std::sync::atomic::Ordering::Relaxed), 1, "the attic entry was checked");
        assert_eq!(j.with_meta(|m| m.get_state("written during the dry run")).unwrap().as_deref(), Some("yes"));
        assert_eq!(j.resolve("0").unwrap().0, 0, "a dry run changes nothing");
        dry_run.store(false, std::sync::atomic::Ordering::Relaxed);
        let done = j.collect(&[0], "forget", false, &attic, None, &no_cache).unwrap();
        assert_eq!(
            (dry.records_dropped, dry.chunks_freed, dry.bytes_freed, dry.attic_files_freed),
            (done.records_dropped, done.chunks_freed, done.bytes_freed, done.attic_files_freed),
            "{dry:?} {done:?}"
        );
        assert_eq!(done.chunks_freed, 1);
    }

    #[test]
    fn a_collection_frees_what_fell_to_zero_references_and_trusts_no_stale_cache() {
        let store = Arc::new(MemoryStore::new());
        let j = Journal::open(Meta::open_in_memory().unwrap(), store.clone()).unwrap();
        let no_attic = |_: ObjectId, _: &[u8], _: bool| None;
        let o = j.object_id(&crate::journal::tests::handle(b"f"), 1).unwrap();
        let stored = |data: &[u8]| crate::store::store_content(&*store, data).unwrap();
        // A rewound file whose bytes were stored for it alone, then settled:
        // its list went, nothing else names the chunk.
        let rewound = stored(b"settled bytes");
        j.with_meta(|m| {
            m.add_pending(b"h", rewound.hash.as_bytes(), crate::meta::PendingList::Inline(&rewound.encode_chunks()), 0)
        })
        .unwrap();
        j.with_intents(|m| m.remove_pending(b"h")).unwrap();
        // Turn 0 records f ("v0", cached for its ctime); turn 1 records it
        // again without content (a chmod).
        let v0 = stored(b"v0");
        let mut s = crate::meta::test_file_state(2);
        s.content = Some((v0.hash.as_bytes().to_vec(), v0.encode_chunks()));
        j.record_object(o, &s, None, true).unwrap();
        j.seal(&TurnInfo::default(), Reason::Turn, || {}).unwrap();
        assert!(j.known_content(o, s.ctime_ns, s.size).unwrap().is_some(), "the record holds the cached list");
        j.record_object(o, &crate::meta::test_file_state(2), None, false).unwrap();
        j.seal(&TurnInfo::default(), Reason::Turn, || {}).unwrap();
        let chunks = store.stats().unwrap().chunks;
        // Forgetting nothing still frees the settled file's chunk.
        let c = j.collect(&[], "retention", false, &no_attic, None, &no_cache).unwrap();
        assert_eq!(c.chunks_freed, 1, "{c:?}");
        assert!(!store.contains(&rewound.chunks[0].id).unwrap());
        assert_eq!(store.stats().unwrap().chunks, chunks - 1);
        // Forgetting 1 keeps v0 (turn 0's record, which turn 1's shadows);
        // forgetting 0, the oldest, drops it: v0 goes, and the cache that
        // listed it is no longer trusted.
        assert_eq!(j.collect(&[1], "forget", false, &no_attic, None, &no_cache).unwrap().chunks_freed, 0);
        assert!(j.known_content(o, s.ctime_ns, s.size).unwrap().is_some());
        let c = j.collect(&[0], "forget", false, &no_attic, None, &no_cache).unwrap();
        assert_eq!(c.chunks_freed, 1, "{c:?}");
        assert!(!store.contains(&v0.chunks[0].id).unwrap());
        assert!(j.known_content(o, s.ctime_ns, s.size).unwrap().is_none(), "a capture reads the file again");
        assert_eq!(j.with_meta(|m| m.wrong_chunk_counts()).unwrap(), vec![]);
    }
}
