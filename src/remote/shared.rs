//! A bucket shared by several workspaces: who references which content
//! (`census`, what `du --remote` prints), and deleting what no workspace
//! references any more (`collect`), safely while the others push.
//!
//! The reference rules (docs/design.md, "A bucket shared by several
//! workspaces"):
//! - each workspace prefix has one writer, its store (`head.json` names
//!   it); only that store changes the head, and only it deletes the
//!   prefix's manifests;
//! - a chunk is deleted only when no head in the bucket lists a
//!   checkpoint whose manifest names it, decided under the collect lock
//!   while no push holds its lock;
//! - a push relies on a chunk already in the bucket (does not send it)
//!   only while it holds its push lock, and forgets what it knew present
//!   whenever a collection ran since it last looked.
//!
//! Locks are objects under `chunks/locks/`: `push-<store>.json` and
//! `collect-<store>.json`. Each side writes its own, then lists the
//! others; a push that finds a fresh collect lock, or a collection that
//! finds any other fresh lock, removes its own and gives up for now. As
//! both write before they look, at least one of two that race sees the
//! other. A lock is fresh for an hour after it was last written (the
//! server's clock, from the listing); a push rewrites its lock for each
//! checkpoint. Each collection leaves `chunks/collections/<store>.json`,
//! whose change a push notices.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::{Bucket, CHUNKS, Listed, RemoteError, RemoteResult, RemoteUrl};
use crate::store::ChunkId;

/// Where the locks are.
pub const LOCKS: &str = "chunks/locks";
/// Where each collection leaves its mark.
pub const COLLECTIONS: &str = "chunks/collections";
/// How long a lock holds after it was last written.
const STALE_MS: i64 = 60 * 60 * 1000;
/// A collection that took this long gives up before deleting (its lock
/// may be taken for stale by then).
const COLLECT_MAX_MS: i64 = STALE_MS / 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockKind {
    Push,
    Collect,
}

impl LockKind {
    fn name(self) -> &'static str {
        match self {
            LockKind::Push => "push",
            LockKind::Collect => "collect",
        }
    }
}

/// A lock held in the bucket; removed when dropped.
pub struct Lock<'b> {
    bucket: &'b Bucket,
    key: String,
    /// When the server says it was written (Unix ms).
    pub taken_ms: i64,
}

impl Lock<'_> {
    /// Writes the lock again, so it stays fresh.
    pub fn refresh(&self) -> RemoteResult<()> {
        self.bucket.put(&self.key, lock_body(self.bucket))
    }
}

impl Drop for Lock<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.bucket.delete(&self.key) {
            log::warn!("Cannot remove the lock {}: {e}; it lapses within an hour.", self.key);
        }
    }
}

/// Who holds a lock, as its body says: enough for a process of the same
/// machine (same host, boot and pid namespace) to tell whether the holder
/// is still alive. A lock from elsewhere, or without these fields, is
/// taken for alive until it is stale.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Holder {
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    pid: Option<i32>,
    /// The holder's start time (clock ticks since boot): a pid reused by
    /// another process does not pass for the holder.
    #[serde(default)]
    started: Option<u64>,
    #[serde(default)]
    host: Option<String>,
    #[serde(default)]
    boot_id: Option<String>,
    #[serde(default)]
    pid_namespace: Option<String>,
}

impl Holder {
    fn this_process(prefix: &str) -> Holder {
        let pid = std::process::id() as i32;
        Holder {
            prefix: prefix.to_string(),
            pid: Some(pid),
            started: crate::sys::process_start(pid),
            host: crate::sys::hostname(),
            boot_id: crate::sys::boot_id(),
            pid_namespace: crate::sys::pid_namespace(),
        }
    }

    /// Whether the holder is a process of this machine's boot and pid
    /// namespace that is gone (killed while it held the lock).
    fn dead_here(&self) -> bool {
        let here = Holder::this_process("");
        let same_place = |a: &Option<String>, b: &Option<String>| a.is_some() && a == b;
        let (Some(pid), Some(started)) = (self.pid, self.started) else { return false };
        same_place(&self.host, &here.host)
            && same_place(&self.boot_id, &here.boot_id)
            && same_place(&self.pid_namespace, &here.pid_namespace)
            && (!crate::sys::process_alive(pid) || crate::sys::process_start(pid) != Some(started))
    }
}

fn lock_body(bucket: &Bucket) -> Vec<u8> {
    serde_json::to_vec(&Holder::this_process(&bucket.url().prefix)).unwrap_or_default()
}

/// Whether the lock at `key` was left by a process of this machine that
/// is gone. A lock that cannot be read is not.
fn left_by_the_dead(bucket: &Bucket, key: &str) -> bool {
    let holder = match bucket.get(key) {
        Ok(Some(body)) => serde_json::from_slice::<Holder>(&body).unwrap_or_default(),
        _ => return false,
    };
    let dead = holder.dead_here();
    if dead {
        log::info!(
            "The lock {key} was left by a process of this machine that is gone (pid {:?}): ignored.",
            holder.pid
        );
    }
    dead
}

/// Removes the locks store `store_id` left in the bucket: a store has one
/// writer, its daemon, so a lock of its own that is there when its
/// uploader starts was left by one that was killed, and would hold off
/// other workspaces' collections until it is stale.
pub fn remove_own_locks(bucket: &Bucket, store_id: &str) -> RemoteResult<usize> {
    let (locks, _) = bucket.list_dir(LOCKS)?;
    let mut removed = 0;
    for kind in [LockKind::Push, LockKind::Collect] {
        let key = lock_key(kind, store_id);
        if locks.iter().any(|l| l.key == key) {
            bucket.delete(&key)?;
            log::info!("Removed {key}, left by a daemon of this store that was killed while it held it.");
            removed += 1;
        }
    }
    Ok(removed)
}

fn lock_key(kind: LockKind, store_id: &str) -> String {
    format!("{LOCKS}/{}-{store_id}.json", kind.name())
}

/// The fresh locks other than `own`, and the server's time of `own`.
fn others(bucket: &Bucket, own: &str) -> RemoteResult<(Vec<Listed>, i64)> {
    let (locks, _) = bucket.list_dir(LOCKS)?;
    let now = locks.iter().find(|l| l.key == own).map(|l| l.modified_ms).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
    });
    let fresh = locks.into_iter().filter(|l| l.key != own && now - l.modified_ms < STALE_MS).collect();
    Ok((fresh, now))
}

/// Takes a lock of `kind` for the store `store_id`: Ok(Err(holder)) when
/// a fresh lock that excludes it is there (nothing is left behind then).
pub fn lock<'b>(bucket: &'b Bucket, kind: LockKind, store_id: &str) -> RemoteResult<Result<Lock<'b>, String>> {
    let key = lock_key(kind, store_id);
    bucket.put(&key, lock_body(bucket))?;
    let mut lock = Lock { bucket, key: key.clone(), taken_ms: 0 };
    let (fresh, now) = others(bucket, &key)?;
    // A holder that is gone is no holder: it was killed on this machine
    // (read after ours was written, so one that wrote its lock again since
    // is seen as it is now, and one that writes it later sees ours).
    let excluding = fresh.iter().find(|l| {
        let name = l.key.rsplit('/').next().unwrap_or_default();
        let excludes = match kind {
            LockKind::Push => name.starts_with("collect-"),
            LockKind::Collect => true,
        };
        excludes && !left_by_the_dead(bucket, &l.key)
    });
    if let Some(holder) = excluding {
        // Dropping `lock` removes ours.
        return Ok(Err(holder.key.clone()));
    }
    lock.taken_ms = now;
    Ok(Ok(lock))
}

/// The marks collections left (key and time): a change means chunks may
/// have gone.
pub fn collections(bucket: &Bucket) -> RemoteResult<Vec<(String, i64)>> {
    let (marks, _) = bucket.list_dir(COLLECTIONS)?;
    let mut marks: Vec<(String, i64)> = marks.into_iter().map(|l| (l.key, l.modified_ms)).collect();
    marks.sort();
    Ok(marks)
}

/// One workspace of the bucket and what it references.
#[derive(Clone, Debug, Serialize)]
pub struct WorkspaceUse {
    pub prefix: String,
    pub store_id: String,
    pub checkpoints: u64,
    /// Bytes of the chunks its checkpoints name (each counted once).
    pub referenced_bytes: u64,
    /// Of those, the bytes no other workspace names.
    pub own_bytes: u64,
    /// Of those, the bytes another workspace names too.
    pub shared_bytes: u64,
    /// Its head and the manifests its head lists.
    pub metadata_bytes: u64,
    /// Manifests under its prefix its head does not list (left by a
    /// forget; its next collection deletes them).
    pub unlisted_manifests: u64,
    /// Chunks it names that the bucket does not hold (`fsck --remote`
    /// names them).
    pub missing_chunks: u64,
    #[serde(skip)]
    chunks: HashSet<ChunkId>,
    #[serde(skip)]
    unlisted: Vec<String>,
}

/// Who references what in a bucket.
#[derive(Clone, Debug, Serialize)]
pub struct Census {
    pub remote: String,
    pub chunk_objects: u64,
    pub chunk_bytes: u64,
    /// Bytes of the chunks several workspaces name (stored once).
    pub shared_bytes: u64,
    /// Bytes of the chunks no workspace names (a collection deletes them).
    pub unreferenced_bytes: u64,
    pub unreferenced_chunks: u64,
    pub workspaces: Vec<WorkspaceUse>,
    /// Fresh locks (a push or a collection under way, or one killed
    /// within the hour).
    pub locks: Vec<String>,
    #[serde(skip)]
    unreferenced: Vec<ChunkId>,
}

/// The prefixes of the bucket that hold a `head.json`.
fn workspace_prefixes(bucket: &Bucket) -> RemoteResult<Vec<(String, u64)>> {
    let mut found = Vec::new();
    let mut folders = vec![String::new()];
    while let Some(folder) = folders.pop() {
        let (objects, below) = bucket.list_dir(&folder)?;
        let head = format!("{folder}/head.json");
        let is_workspace = objects.iter().find(|o| o.key == head);
        if let Some(h) = is_workspace {
            found.push((folder.clone(), h.size));
        }
        for b in below {
            let skip =
                (folder.is_empty() && b == CHUNKS) || (is_workspace.is_some() && b == format!("{folder}/manifests"));
            if !skip {
                folders.push(b);
            }
        }
    }
    found.sort();
    Ok(found)
}

/// Reads every head of the bucket and every manifest they list. Fails on
/// any that cannot be read: nothing may be decided on a partial view.
pub fn census(bucket: &Bucket) -> RemoteResult<Census> {
    let (chunk_objects, _) = bucket.list_dir(CHUNKS)?;
    let sizes: HashMap<ChunkId, u64> =
        chunk_objects.iter().filter_map(|o| Some((ChunkId::parse_hex(o.key.rsplit('/').next()?)?, o.size))).collect();
    let mut workspaces = Vec::new();
    for (prefix, head_bytes) in workspace_prefixes(bucket)? {
        let head = bucket.head_at(&prefix)?.ok_or_else(|| RemoteError::Missing {
            remote: bucket.url().to_string(),
            key: format!("{prefix}/head.json"),
        })?;
        let (manifests, _) = bucket.list_dir(&format!("{prefix}/manifests"))?;
        let listed: HashSet<&str> = head.checkpoints.iter().map(|c| c.manifest.as_str()).collect();
        let mut w = WorkspaceUse {
            prefix: prefix.clone(),
            store_id: head.store_id.clone(),
            checkpoints: head.checkpoints.len() as u64,
            referenced_bytes: 0,
            own_bytes: 0,
            shared_bytes: 0,
            metadata_bytes: head_bytes,
            unlisted_manifests: 0,
            missing_chunks: 0,
            chunks: HashSet::new(),
            unlisted: Vec::new(),
        };
        for m in &manifests {
            if listed.contains(m.key.rsplit('/').next().unwrap_or_default()) {
                w.metadata_bytes += m.size;
            } else {
                w.unlisted_manifests += 1;
                w.unlisted.push(m.key.clone());
            }
        }
        let mut read: HashSet<&str> = HashSet::new();
        for c in &head.checkpoints {
            if !read.insert(c.manifest.as_str()) {
                continue;
            }
            let manifest = bucket.manifest_at(&prefix, &c.manifest)?;
            for span in manifest.entries.iter().flat_map(|e| e.chunks.iter()) {
                let id = ChunkId::parse_hex(&span.id).ok_or_else(|| RemoteError::Malformed {
                    remote: bucket.url().to_string(),
                    what: format!("a manifest of {prefix} names a chunk {:?} that is no blake3 name", span.id),
                })?;
                w.chunks.insert(id);
            }
        }
        workspaces.push(w);
    }
    let mut users: HashMap<ChunkId, u32> = HashMap::new();
    for w in &workspaces {
        for id in &w.chunks {
            *users.entry(*id).or_default() += 1;
        }
    }
    for w in &mut workspaces {
        for id in &w.chunks {
            let Some(&size) = sizes.get(id) else {
                w.missing_chunks += 1;
                continue;
            };
            w.referenced_bytes += size;
            if users[id] > 1 {
                w.shared_bytes += size;
            } else {
                w.own_bytes += size;
            }
        }
    }
    let unreferenced: Vec<ChunkId> = sizes.keys().filter(|id| !users.contains_key(*id)).copied().collect();
    let (locks, _) = others(bucket, "")?;
    Ok(Census {
        remote: RemoteUrl { bucket: bucket.url().bucket.clone(), prefix: String::new() }.to_string(),
        chunk_objects: sizes.len() as u64,
        chunk_bytes: sizes.values().sum(),
        shared_bytes: sizes.iter().filter(|(id, _)| users.get(*id).is_some_and(|&n| n > 1)).map(|(_, s)| s).sum(),
        unreferenced_bytes: unreferenced.iter().map(|id| sizes[id]).sum(),
        unreferenced_chunks: unreferenced.len() as u64,
        workspaces,
        locks: locks.into_iter().map(|l| l.key).collect(),
        unreferenced,
    })
}

/// What a collection deleted.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Collected {
    pub chunks_deleted: u64,
    pub bytes_deleted: u64,
    pub manifests_deleted: u64,
}

/// Deletes the chunks no workspace of the bucket references, and the
/// manifests under this store's own prefix its head does not list.
/// Ok(Err(holder)) when another push or collection holds a lock (nothing
/// deleted; try again later).
pub fn collect(bucket: &Bucket, store_id: &str) -> RemoteResult<Result<Collected, String>> {
    let lock = match lock(bucket, LockKind::Collect, store_id)? {
        Ok(l) => l,
        Err(holder) => return Ok(Err(holder)),
    };
    let began = std::time::Instant::now();
    let census = census(bucket)?;
    if began.elapsed().as_millis() as i64 > COLLECT_MAX_MS {
        return Err(RemoteError::Refused {
            remote: bucket.url().to_string(),
            what: "reading the bucket took longer than its collect lock may be trusted; nothing was deleted".into(),
        });
    }
    let mut done = Collected::default();
    for id in &census.unreferenced {
        bucket.delete(&RemoteUrl::chunk_key(id))?;
        done.chunks_deleted += 1;
    }
    done.bytes_deleted = census.unreferenced_bytes;
    let own = &bucket.url().prefix;
    if let Some(w) = census.workspaces.iter().find(|w| &w.prefix == own && w.store_id == store_id) {
        for key in &w.unlisted {
            bucket.delete(key)?;
            done.manifests_deleted += 1;
        }
    }
    bucket.put(&format!("{COLLECTIONS}/{store_id}.json"), lock_body(bucket))?;
    drop(lock);
    Ok(Ok(done))
}
