//! Pushing sealed checkpoints: the uploader thread a mount with a remote
//! runs, and one pass of it (what `rewindfs push` waits for).
//!
//! A pass reads the bucket's head, then for each local checkpoint it does
//! not list, oldest first: the checkpoint's tree walked through its view
//! (under an ordinary operation of the world lock, so no rewind changes
//! the tree and the records while it is walked; the walk gives way to a
//! rewind or restore that waits, and starts again after), then with the lock
//! released the content it names that the bucket lacks, the manifest, and
//! last the head listing it. A daemon
//! killed anywhere in between leaves a head that lists only checkpoints
//! whose objects are all in the bucket; the next mount's pass sends the
//! rest again (every object is named by its content, so sending one twice
//! changes nothing).

use std::collections::BTreeSet;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use log::{debug, info, warn};
use serde::{Deserialize, Serialize};

use super::check::{Local, RemoteReport};
use super::manifest::{self, Memory, Sent};
use super::shared::LockKind;
use super::{Bucket, Head, RemoteCheckpoint, RemoteError, RemoteResult, RemoteUrl};
use crate::journal::Journal;
use crate::view::{TreeView, ViewError};
use crate::workspace::LiveTree;
use crate::world::World;

pub use crate::faults::UPLOADER_THREAD;

/// What `status` and `push` say about a remote.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RemoteStatus {
    pub remote: String,
    /// The newest checkpoint the remote holds (None: none yet, or not
    /// reached yet).
    pub remote_checkpoint: Option<i64>,
    /// Local checkpoints the remote does not hold yet, oldest first.
    pub backlog: Vec<i64>,
    /// Why the last pass failed; absent after one that succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// False when the last pass could not reach the server at all (no
    /// connection, no answer in time); absent before a pass ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reachable: Option<bool>,
    /// Checkpoints forgotten here were dropped from the head, and the
    /// content only they named is not deleted yet: another workspace held
    /// a lock of the bucket (retried at each pass).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub collection_pending: bool,
}

#[derive(Default)]
struct State {
    /// Checkpoints the bucket's head lists (known once a pass read it).
    pushed: Option<BTreeSet<i64>>,
    last_error: Option<String>,
    /// `last_error` without the object it met ([`RemoteError::failure`]).
    last_failure: Option<String>,
    reachable: Option<bool>,
    /// Passes started, and finished (successful or not).
    started: u64,
    passes: u64,
    /// A pass was asked for (`push`, a seal).
    wanted: bool,
    /// A collection of the bucket is owed (see `RemoteStatus`).
    collect_pending: bool,
}

struct Shared {
    url: RemoteUrl,
    store_id: String,
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    /// A pass got through (a checkpoint pushed, or nothing left to push).
    fn reached(&self, state: &mut State) {
        state.last_failure = None;
        if state.last_error.take().is_some() {
            info!("{} answers again; pushing resumed.", self.url);
        }
        state.reachable = Some(true);
    }
}

/// The background uploader of one mount.
pub struct Uploader {
    shared: Arc<Shared>,
}

/// How often the uploader looks for newly sealed checkpoints on its own.
const TICK: Duration = Duration::from_secs(2);
/// Walks of one checkpoint before its live files are read under the lock
/// (each further walk follows a file that changed while it was read).
const ATTEMPTS: u32 = 3;
/// The longest wait between retries while the remote fails.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

impl Uploader {
    /// Starts the thread that pushes `journal`'s sealed checkpoints to `url`.
    pub fn start(
        url: RemoteUrl,
        store_id: String,
        tree: Arc<LiveTree>,
        journal: Arc<Journal>,
        world: Arc<World>,
    ) -> std::io::Result<Uploader> {
        let shared = Arc::new(Shared {
            url: url.clone(),
            store_id: store_id.clone(),
            state: Mutex::default(),
            changed: Condvar::new(),
        });
        let worker = shared.clone();
        std::thread::Builder::new().name(UPLOADER_THREAD.into()).spawn(move || {
            let mut pusher = Pusher {
                url,
                store_id,
                bucket: None,
                head: None,
                memory: Memory::default(),
                collect_wanted: false,
                collections_seen: None,
            };
            let mut backoff = TICK;
            loop {
                crate::poison::lock(&worker.state, "the uploader's state").started += 1;
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    pusher.pass(&tree, &journal, &world, &worker)
                }))
                .unwrap_or_else(|p| {
                    Err(RemoteError::Refused {
                        remote: worker.url.to_string(),
                        what: format!("the uploader failed ({})", crate::error::panic_message(&*p)),
                    })
                });
                let failed = result.is_err();
                {
                    let mut state = crate::poison::lock(&worker.state, "the uploader's state");
                    match result {
                        Ok(()) => worker.reached(&mut state),
                        Err(e) => {
                            // Said once; the same failure again (a server
                            // down for minutes, bad credentials) is not a
                            // line per retry.
                            if state.last_failure.as_deref() != Some(&e.failure()) {
                                warn!("Cannot push to {}: {e}; retrying until it works.", worker.url);
                            } else {
                                debug!("Still cannot push to {}: {e}.", worker.url);
                            }
                            state.last_error = Some(e.to_string());
                            state.last_failure = Some(e.failure());
                            state.reachable = Some(!e.unreachable());
                            // Read the head again: the bucket may have been
                            // restored or changed by hand meanwhile.
                            pusher.head = None;
                            state.pushed = None;
                        }
                    }
                    state.passes += 1;
                    worker.changed.notify_all();
                    backoff = if failed { (backoff * 2).min(MAX_BACKOFF) } else { TICK };
                    let deadline = Instant::now() + backoff;
                    while !state.wanted {
                        let left = deadline.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            break;
                        }
                        state = crate::poison::wait_timeout(&worker.changed, state, left, "the uploader's state");
                    }
                    state.wanted = false;
                }
            }
        })?;
        Ok(Uploader { shared })
    }

    /// What the remote holds and what it lacks of `journal`'s checkpoints.
    pub fn status(&self, journal: &Journal) -> RemoteStatus {
        let state = crate::poison::lock(&self.shared.state, "the uploader's state");
        status_of(&self.shared.url, &state, journal)
    }

    /// Asks for a pass now and waits (at most `timeout`) until every
    /// checkpoint sealed before the call is in the bucket or a pass failed.
    pub fn push_now(&self, journal: &Journal, timeout: Duration) -> RemoteStatus {
        let target: BTreeSet<i64> = local_checkpoints(journal).into_iter().collect();
        let deadline = Instant::now() + timeout;
        let mut state = crate::poison::lock(&self.shared.state, "the uploader's state");
        state.wanted = true;
        self.shared.changed.notify_all();
        // A pass already under way may have read the head or failed before
        // this call: only one that starts after it answers it.
        let answering = state.started + 1;
        loop {
            // Every checkpoint sealed before the call is there, none forgotten
            // here is listed any more, and the collection that follows a
            // forget was tried by a pass that started after the call.
            let local: BTreeSet<i64> = local_checkpoints(journal).into_iter().collect();
            let done = state.pushed.as_ref().is_some_and(|p| target.is_subset(p) && p.is_subset(&local))
                && (!state.collect_pending || state.passes >= answering);
            let failed = state.passes >= answering && state.last_error.is_some();
            let left = deadline.saturating_duration_since(Instant::now());
            if done || failed || left.is_zero() {
                return status_of(&self.shared.url, &state, journal);
            }
            state = crate::poison::wait_timeout(&self.shared.changed, state, left, "the uploader's state");
        }
    }
}

impl Uploader {
    /// `fsck --remote` of the mounted workspace: the bucket read back, and
    /// its head held against the workspace's history and what the
    /// uploader has pushed.
    pub fn check(&self, journal: &Journal, progress: impl FnMut(u64, u64)) -> RemoteResult<RemoteReport> {
        let bucket = Bucket::open(&self.shared.url)?;
        // Taken before the head is read: what was pushed by then is in it.
        let pushed = crate::poison::lock(&self.shared.state, "the uploader's state").pushed.clone();
        let local = || {
            Ok(Local {
                store_id: self.shared.store_id.clone(),
                checkpoints: journal
                    .with_checkpoints(|m| m.checkpoints())
                    .map_err(|e| format!("cannot read the checkpoints: {e}"))?,
                pushed: pushed.clone(),
            })
        };
        super::check::check(&bucket, Some(&local), progress)
    }
}

fn local_checkpoints(journal: &Journal) -> Vec<i64> {
    journal
        .with_checkpoints(|m| m.checkpoints())
        .map(|cs| cs.iter().map(|c| c.checkpoint).collect())
        .unwrap_or_default()
}

fn status_of(url: &RemoteUrl, state: &State, journal: &Journal) -> RemoteStatus {
    let empty = BTreeSet::new();
    let pushed = state.pushed.as_ref().unwrap_or(&empty);
    RemoteStatus {
        remote: url.to_string(),
        remote_checkpoint: pushed.last().copied(),
        backlog: local_checkpoints(journal).into_iter().filter(|c| !pushed.contains(c)).collect(),
        last_error: state.last_error.clone(),
        reachable: state.reachable,
        collection_pending: state.collect_pending,
    }
}

/// The uploader's side of the bucket.
struct Pusher {
    url: RemoteUrl,
    store_id: String,
    bucket: Option<Arc<Bucket>>,
    head: Option<Head>,
    memory: Memory,
    /// Checkpoints were dropped from the head: collect the bucket.
    collect_wanted: bool,
    /// The collections' marks as last seen: chunks known present stay
    /// known while they do not change.
    collections_seen: Option<Vec<(String, i64)>>,
}

impl Pusher {
    fn pass(&mut self, tree: &LiveTree, journal: &Journal, world: &World, shared: &Shared) -> RemoteResult<()> {
        if self.bucket.is_none() {
            self.bucket = Some(Arc::new(Bucket::open(&self.url)?));
        }
        let Some(bucket) = self.bucket.clone() else { return Ok(()) };
        let bucket = &*bucket;
        if self.head.is_none() {
            let head = bucket.head()?.unwrap_or(Head {
                format: super::FORMAT,
                store_id: self.store_id.clone(),
                checkpoints: Vec::new(),
            });
            if head.store_id != self.store_id {
                return Err(RemoteError::Refused {
                    remote: self.url.to_string(),
                    what: format!(
                        "it holds the history of another store ({}); give this workspace a prefix of its own",
                        head.store_id
                    ),
                });
            }
            // No other process pushes for this store: a lock of its own
            // was left by a daemon killed while it held it.
            super::shared::remove_own_locks(bucket, &self.store_id)?;
            let pushed = head.checkpoints.iter().map(|c| c.checkpoint).collect();
            crate::poison::lock(&shared.state, "the uploader's state").pushed = Some(pushed);
            self.head = Some(head);
        }
        let checkpoints = journal.with_checkpoints(|m| m.checkpoints()).map_err(|e| RemoteError::Refused {
            remote: self.url.to_string(),
            what: format!("cannot read the checkpoints: {e}"),
        })?;
        // The workspace's retention reaches its remote: checkpoints
        // forgotten here (forget, gc, reset) leave the head, and the content
        // no workspace of the bucket names any more is collected.
        let local: BTreeSet<i64> = checkpoints.iter().map(|c| c.checkpoint).collect();
        if let Some(head) = &mut self.head {
            let before = head.checkpoints.len();
            head.checkpoints.retain(|r| local.contains(&r.checkpoint));
            if head.checkpoints.len() != before {
                bucket.put_head(head)?;
                info!("Dropped {} checkpoints forgotten here from {}.", before - head.checkpoints.len(), self.url);
                self.collect_wanted = true;
                self.memory.forget_present();
                let mut state = crate::poison::lock(&shared.state, "the uploader's state");
                state.pushed = Some(head.checkpoints.iter().map(|c| c.checkpoint).collect());
                state.collect_pending = true;
                shared.changed.notify_all();
            }
        }
        let listed: BTreeSet<i64> =
            self.head.as_ref().map(|h| h.checkpoints.iter().map(|c| c.checkpoint).collect()).unwrap_or_default();
        let checkpoints: Vec<_> = checkpoints.into_iter().filter(|c| !listed.contains(&c.checkpoint)).collect();
        if !checkpoints.is_empty() {
            let lock = match super::shared::lock(bucket, LockKind::Push, &self.store_id)? {
                Ok(lock) => lock,
                Err(holder) => {
                    return Err(RemoteError::Refused {
                        remote: self.url.to_string(),
                        what: format!(
                            "another workspace is collecting the bucket ({holder}); pushing resumes after it"
                        ),
                    });
                }
            };
            let marks = super::shared::collections(bucket)?;
            if self.collections_seen.as_ref() != Some(&marks) {
                // Chunks known present may have been collected since.
                self.memory.forget_present();
                self.collections_seen = Some(marks);
            }
            self.push_all(bucket, checkpoints, &lock, tree, journal, world, shared)?;
        }
        if self.collect_wanted {
            match super::shared::collect(bucket, &self.store_id)? {
                Ok(done) => {
                    info!(
                        "Collected {}: {} chunks ({}) no workspace names any more, {} manifests.",
                        self.url,
                        done.chunks_deleted,
                        crate::text::human_bytes(done.bytes_deleted),
                        done.manifests_deleted
                    );
                    self.collect_wanted = false;
                    self.memory.forget_present();
                }
                Err(holder) => debug!("Collecting {} postponed: {holder} is held.", self.url),
            }
            crate::poison::lock(&shared.state, "the uploader's state").collect_pending = self.collect_wanted;
        }
        Ok(())
    }

    /// Pushes `checkpoints` (none of them in the head), oldest first,
    /// holding the push `lock`.
    #[allow(clippy::too_many_arguments)]
    fn push_all(
        &mut self,
        bucket: &Bucket,
        checkpoints: Vec<crate::meta::Checkpoint>,
        lock: &super::shared::Lock<'_>,
        tree: &LiveTree,
        journal: &Journal,
        world: &World,
        shared: &Shared,
    ) -> RemoteResult<()> {
        for (i, c) in checkpoints.into_iter().enumerate() {
            if i > 0 {
                lock.refresh()?;
            }
            let Some(head) = &mut self.head else { return Ok(()) };
            if head.checkpoints.iter().any(|r| r.checkpoint == c.checkpoint) {
                continue;
            }
            let began = Instant::now();
            let mut sent = Sent::default();
            let gone = || !local_checkpoints(journal).contains(&c.checkpoint);
            let mut attempt = 1;
            let tree_manifest = loop {
                // The walk holds the tree lock; sending, the network part,
                // does not, so a rewind never waits for the remote. The walk
                // gives way to a rewind or restore that waits to freeze the
                // tree, and is done again once it has ended (it holds the
                // history lock to its end; views do not move).
                let walked = {
                    let op = world.op();
                    let give_way = || op.freeze_wanted();
                    let view = TreeView::at(op.held(), tree, journal, c.checkpoint).giving_way(&give_way);
                    manifest::walk(&view, &self.memory, attempt == ATTEMPTS)
                };
                if let Err(RemoteError::View(ViewError::GaveWay)) = walked {
                    debug!("The walk of checkpoint {} gave way to a rewind or restore.", c.checkpoint);
                    drop(world.history());
                    continue;
                }
                let sent_all = walked.and_then(|mut w| {
                    manifest::send(&mut w, tree, journal, bucket, &mut self.memory, &mut sent).map(|done| (done, w))
                });
                match sent_all {
                    Ok((true, w)) => break Some(w.into_manifest()),
                    Ok((false, _)) => {
                        debug!("A file of checkpoint {} changed while it was sent; walking it again.", c.checkpoint);
                        attempt += 1;
                    }
                    // Collected while it was read: nothing left to push.
                    Err(_) if gone() => break None,
                    Err(e) => return Err(e),
                }
            };
            let Some(tree_manifest) = tree_manifest else { continue };
            let name = manifest::send_manifest(bucket, &tree_manifest)?;
            head.checkpoints.push(RemoteCheckpoint {
                checkpoint: c.checkpoint,
                parent: c.parent,
                message_id: c.message_id.clone(),
                label: c.label.clone(),
                reason: c.reason,
                created_at: c.created_at,
                name: c.name.clone(),
                manifest: name.to_string(),
                entries: tree_manifest.entries.len() as u64,
                bytes: tree_manifest.entries.iter().filter(|e| e.link.is_none()).map(|e| e.size).sum(),
            });
            head.checkpoints.sort_by_key(|r| r.checkpoint);
            crate::faults::kill_point("remote-before-head");
            bucket.put_head(head)?;
            info!(
                "Pushed checkpoint {} to {} in {:.1} s: {} chunks sent ({}), {} already there.",
                c.checkpoint,
                self.url,
                began.elapsed().as_secs_f64(),
                sent.chunks_sent,
                crate::text::human_bytes(sent.bytes_sent),
                sent.chunks_present
            );
            let mut state = crate::poison::lock(&shared.state, "the uploader's state");
            shared.reached(&mut state);
            state.pushed.get_or_insert_with(BTreeSet::new).insert(c.checkpoint);
            shared.changed.notify_all();
        }
        Ok(())
    }
}
