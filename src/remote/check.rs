//! `fsck --remote`: whether every checkpoint a remote's head lists can be
//! read back from the bucket alone. Each manifest is fetched, checked
//! against its blake3 name and decoded, its paths checked as `clone`
//! checks them, and every chunk it names fetched once and checked against
//! its name and the length its list gives. Damage is a problem named by
//! object, checkpoints and a path; a server that cannot be asked stops the
//! check (an error, not a problem).

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::manifest::EntryKind;
use super::{Bucket, RemoteError, RemoteResult, RemoteUrl};
use crate::store::ChunkId;

/// What is wrong with one object of the bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
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
}

/// A checkpoint and a path of it that a damaged object costs.
#[derive(Clone, Debug, Serialize)]
pub struct Affected {
    pub checkpoint: i64,
    pub message_id: Option<String>,
    /// None for the whole checkpoint (its head or manifest).
    #[serde(with = "crate::name_json::option")]
    pub path: Option<std::ffi::OsString>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Problem {
    pub kind: Kind,
    /// The object's key in the bucket.
    pub key: String,
    pub detail: String,
    /// Every checkpoint it costs, with the first path that names it there.
    pub affected: Vec<Affected>,
}

/// What `fsck --remote` found.
#[derive(Clone, Debug, Default, Serialize)]
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

/// A chunk and where it is first named, per checkpoint.
struct Use {
    len: u32,
    affected: Vec<Affected>,
}

/// Reads back everything the head of `bucket` lists. `progress` is told
/// each chunk read (done, total).
pub fn check(bucket: &Bucket, mut progress: impl FnMut(u64, u64)) -> RemoteResult<RemoteReport> {
    let url = bucket.url();
    let mut report = RemoteReport { remote: url.to_string(), ..RemoteReport::default() };
    let head = match bucket.head() {
        Ok(Some(h)) => h,
        Ok(None) => {
            report.notes.push(format!("nothing was pushed there ({} is absent)", url.head_key()));
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
