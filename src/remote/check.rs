//! `fsck --remote`: whether every checkpoint a remote's head lists can be
//! read back from the bucket alone. Each manifest is fetched, checked
//! against its blake3 name and decoded, its paths checked as `clone`
//! checks them, and every chunk it names fetched once and checked against
//! its name and the length its list gives. Damage is a problem named by
//! object, checkpoints and a path; a server that cannot be asked stops the
//! check (an error, not a problem).
//!
//! Checked for a workspace ([`Local`]: `fsck --remote` without an address),
//! the head is also held against the workspace's own history: written by
//! this store, listing every checkpoint the workspace counts as pushed, and
//! saying of each the same as the workspace does.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::manifest::EntryKind;
use super::{Bucket, RemoteError, RemoteResult, RemoteUrl};
use crate::store::ChunkId;

/// What is wrong with one object of the bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// `head.json` cannot be decoded (or is of a newer format).
    HeadDamaged,
    ManifestMissing,
    /// Its bytes do not hash to its name, or they do not decode.
    ManifestDamaged,
    ChunkMissing,
    /// Its bytes do not hash to its name, or are not the length its
    /// manifest lists.
    ChunkDamaged,
    /// The head names another store as its writer than the workspace's.
    OtherWriter,
    /// A checkpoint the workspace counts as pushed that the head does not
    /// list.
    NotOnRemote,
    /// A checkpoint the head lists with another parent, message or time
    /// than the workspace's.
    Differs,
}

/// A workspace's own history, for holding its remote against it.
#[derive(Clone, Debug)]
pub struct Local {
    /// The store's id (`chunks/store-id`).
    pub store_id: String,
    pub checkpoints: Vec<crate::meta::Checkpoint>,
    /// The checkpoints the workspace counts as pushed: known to a running
    /// daemon once it has read the head; None for a store no daemon serves.
    pub pushed: Option<std::collections::BTreeSet<i64>>,
}

/// A checkpoint and a path of it that a damaged object costs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Affected {
    pub checkpoint: i64,
    pub message_id: Option<String>,
    /// None for the whole checkpoint (its head or manifest).
    #[serde(with = "crate::name_json::option")]
    pub path: Option<std::ffi::OsString>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Problem {
    pub kind: Kind,
    /// The object's key in the bucket.
    pub key: String,
    pub detail: String,
    /// Every checkpoint it costs, with the first path that names it there.
    pub affected: Vec<Affected>,
}

/// What `fsck --remote` found.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RemoteReport {
    pub remote: String,
    /// Checkpoints the head lists.
    pub checkpoints: u64,
    pub manifests_checked: u64,
    pub chunks_checked: u64,
    pub bytes_checked: u64,
    pub problems: Vec<Problem>,
    pub notes: Vec<String>,
}

fn workspace_history(local: &dyn Fn() -> Result<Local, String>, report: &mut RemoteReport) -> Option<Local> {
    local().map_err(|e| report.notes.push(format!("the head was not held against the workspace's history: {e}"))).ok()
}

/// Holds the checkpoints a head lists against the workspace's.
fn compare(head_key: &str, listed: &[super::RemoteCheckpoint], local: &Local, report: &mut RemoteReport) {
    let on_remote: HashMap<i64, &super::RemoteCheckpoint> = listed.iter().map(|r| (r.checkpoint, r)).collect();
    let mut not_yet = Vec::new();
    for c in &local.checkpoints {
        let affected = || vec![Affected { checkpoint: c.checkpoint, message_id: c.message_id.clone(), path: None }];
        match on_remote.get(&c.checkpoint) {
            None if local.pushed.as_ref().is_some_and(|p| p.contains(&c.checkpoint)) => report.problems.push(Problem {
                kind: Kind::NotOnRemote,
                key: head_key.to_string(),
                detail: format!("checkpoint {} was pushed, and the head no longer lists it", c.checkpoint),
                affected: affected(),
            }),
            None => not_yet.push(c.checkpoint),
            Some(r) => {
                let mut differs = Vec::new();
                if r.parent != c.parent {
                    differs.push(format!("parent {:?} here, {:?} there", c.parent, r.parent));
                }
                if r.message_id != c.message_id {
                    differs.push(format!("message {:?} here, {:?} there", c.message_id, r.message_id));
                }
                if r.created_at != c.created_at {
                    differs.push(format!("sealed at {} ms here, {} ms there", c.created_at, r.created_at));
                }
                if !differs.is_empty() {
                    report.problems.push(Problem {
                        kind: Kind::Differs,
                        key: head_key.to_string(),
                        detail: format!("checkpoint {} is not the workspace's: {}", c.checkpoint, differs.join("; ")),
                        affected: affected(),
                    });
                }
            }
        }
    }
    if !not_yet.is_empty() {
        let shown: Vec<String> = not_yet.iter().take(10).map(|n| n.to_string()).collect();
        let more = if not_yet.len() > 10 { " ..." } else { "" };
        report.notes.push(format!(
            "{} checkpoints of the workspace are not on the remote yet ({}{more}): the next push sends them",
            not_yet.len(),
            shown.join(", ")
        ));
    }
    let here: std::collections::BTreeSet<i64> = local.checkpoints.iter().map(|c| c.checkpoint).collect();
    let gone: Vec<String> =
        listed.iter().filter(|r| !here.contains(&r.checkpoint)).map(|r| r.checkpoint.to_string()).collect();
    if !gone.is_empty() {
        report.notes.push(format!(
            "the head still lists {} checkpoints forgotten here ({}): the next push drops them",
            gone.len(),
            gone.join(", ")
        ));
    }
}

/// A chunk and where it is first named, per checkpoint.
struct Use {
    len: u32,
    affected: Vec<Affected>,
}

/// Reads back everything the head of `bucket` lists, and holds the head
/// against the workspace's history when `local` is given. `local` is asked
/// after the head is read: a checkpoint forgotten meanwhile is not taken
/// for one the remote lost (and the set of pushed checkpoints it gives
/// must have been taken before the call). `progress` is told each chunk
/// read (done, total).
pub fn check(
    bucket: &Bucket,
    local: Option<&dyn Fn() -> Result<Local, String>>,
    mut progress: impl FnMut(u64, u64),
) -> RemoteResult<RemoteReport> {
    let url = bucket.url();
    let mut report = RemoteReport { remote: url.to_string(), ..RemoteReport::default() };
    let head = match bucket.head() {
        Ok(Some(h)) => h,
        Ok(None) => {
            report.notes.push(format!("nothing was pushed there ({} is absent)", url.head_key()));
            if let Some(local) = local.and_then(|f| workspace_history(f, &mut report)) {
                compare(&url.head_key(), &[], &local, &mut report);
            }
            return Ok(report);
        }
        Err(RemoteError::Malformed { what, .. }) => {
            report.problems.push(Problem {
                kind: Kind::HeadDamaged,
                key: url.head_key(),
                detail: what,
                affected: Vec::new(),
            });
            return Ok(report);
        }
        Err(e) => return Err(e),
    };
    report.checkpoints = head.checkpoints.len() as u64;
    if let Some(local) = local.and_then(|f| workspace_history(f, &mut report)) {
        if head.store_id != local.store_id {
            report.problems.push(Problem {
                kind: Kind::OtherWriter,
                key: url.head_key(),
                detail: format!(
                    "it is the history of another store ({}), not of this workspace's ({})",
                    head.store_id, local.store_id
                ),
                affected: Vec::new(),
            });
        } else {
            compare(&url.head_key(), &head.checkpoints, &local, &mut report);
        }
    }
    // Chunks by name (ordered, so the check reads them in a stable order).
    let mut chunks: BTreeMap<ChunkId, Use> = BTreeMap::new();
    let mut manifest_problems: HashMap<String, usize> = HashMap::new();
    for c in &head.checkpoints {
        let whole = || Affected { checkpoint: c.checkpoint, message_id: c.message_id.clone(), path: None };
        let key = ChunkId::parse_hex(&c.manifest)
            .map(|id| url.manifest_key(&id))
            .unwrap_or_else(|| format!("{}/manifests/{}", url.prefix, c.manifest));
        if let Some(&i) = manifest_problems.get(&key) {
            report.problems[i].affected.push(whole());
            continue;
        }
        let manifest = match bucket.manifest(&c.manifest) {
            Ok(m) => m,
            Err(e @ (RemoteError::Store { .. } | RemoteError::Io { .. })) => return Err(e),
            Err(e) => {
                let kind = if matches!(e, RemoteError::Missing { .. }) {
                    Kind::ManifestMissing
                } else {
                    Kind::ManifestDamaged
                };
                manifest_problems.insert(key.clone(), report.problems.len());
                report.problems.push(Problem { kind, key, detail: e.to_string(), affected: vec![whole()] });
                continue;
            }
        };
        report.manifests_checked += 1;
        if let Err(e) = super::clone::check_paths(bucket, &manifest) {
            manifest_problems.insert(key.clone(), report.problems.len());
            report.problems.push(Problem {
                kind: Kind::ManifestDamaged,
                key,
                detail: e.to_string(),
                affected: vec![whole()],
            });
            continue;
        }
        for entry in manifest.entries.iter().filter(|e| e.kind == EntryKind::File && e.link.is_none()) {
            for span in &entry.chunks {
                let Some(id) = ChunkId::parse_hex(&span.id) else {
                    report.problems.push(Problem {
                        kind: Kind::ManifestDamaged,
                        key: key.clone(),
                        detail: format!("it names a chunk {:?} that is no blake3 name", span.id),
                        affected: vec![whole()],
                    });
                    continue;
                };
                let at = Affected {
                    checkpoint: c.checkpoint,
                    message_id: c.message_id.clone(),
                    path: Some(entry.path.clone().into_os_string()),
                };
                let used = chunks.entry(id).or_insert_with(|| Use { len: span.len, affected: Vec::new() });
                if used.affected.last().is_none_or(|a| a.checkpoint != c.checkpoint) {
                    used.affected.push(at);
                }
            }
        }
    }
    let total = chunks.len() as u64;
    for (done, (id, used)) in chunks.into_iter().enumerate() {
        progress(done as u64, total);
        let key = RemoteUrl::chunk_key(&id);
        let problem = match bucket.get_verified(&key, &id) {
            Ok(data) if data.len() == used.len as usize => {
                report.chunks_checked += 1;
                report.bytes_checked += data.len() as u64;
                None
            }
            Ok(data) => {
                report.chunks_checked += 1;
                Some((
                    Kind::ChunkDamaged,
                    format!("it holds {} bytes where its manifest lists {}", data.len(), used.len),
                ))
            }
            Err(e @ RemoteError::Missing { .. }) => Some((Kind::ChunkMissing, e.to_string())),
            Err(e @ RemoteError::Corrupt { .. }) => {
                report.chunks_checked += 1;
                Some((Kind::ChunkDamaged, e.to_string()))
            }
            Err(e) => return Err(e),
        };
        if let Some((kind, detail)) = problem {
            report.problems.push(Problem { kind, key, detail, affected: used.affected });
        }
    }
    progress(total, total);
    Ok(report)
}
