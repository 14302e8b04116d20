//! What the core's operations answer: the replies the control protocol
//! sends as they are (`daemon::protocol` re-exports them), so their
//! fields are where the data is made.

use serde::{Deserialize, Serialize};

use crate::journal::TurnInfo;
use crate::report::FileChange;
use crate::restore::Planned;

/// How far a long request (`gc`, `forget`, `reset`) is. Sent as a line
/// `{"progress": {...}}` before the answer, to a client whose request line
/// asked with `"progress": true` (the CLI on a terminal draws a bar).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Checkpoints forgotten so far, of `total`.
    pub done: u64,
    pub total: u64,
    /// Bytes of chunks released so far.
    pub bytes_freed: u64,
}

/// `snapshot`: the checkpoint named.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SnapshotReply {
    pub checkpoint: i64,
    pub name: String,
    pub message: Option<String>,
    /// A new checkpoint was sealed for it (no `--at`).
    pub sealed: bool,
}

/// `gc`: the policy applied and what was (or would be) collected.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GcReply {
    pub policy: crate::journal::retention::Policy,
    #[serde(flatten)]
    pub collected: crate::journal::retention::Collected,
    /// Packs rewritten afterwards (none with `dry_run`).
    #[serde(default)]
    pub compacted: crate::store::Compacted,
}

/// `reset`: the one checkpoint left and what went.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ResetReply {
    /// The fresh checkpoint of the tree at the reset.
    pub checkpoint: i64,
    #[serde(flatten)]
    pub collected: crate::journal::retention::Collected,
    #[serde(default)]
    pub compacted: crate::store::Compacted,
}

/// `turn`: the checkpoint sealed and the labels it got.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TurnReply {
    pub checkpoint: i64,
    #[serde(flatten)]
    pub info: TurnInfo,
}

/// `diff`: checkpoint numbers (`to` None = live tree) and the changes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DiffReply {
    pub from: i64,
    pub to: Option<i64>,
    pub changes: Vec<FileChange>,
}

/// `restore`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RestoreReply {
    pub checkpoint: i64,
    pub dry_run: bool,
    /// Sealed before the restore: restoring it undoes the restore.
    pub undo_checkpoint: Option<i64>,
    /// Sealed after the restore.
    pub result_checkpoint: Option<i64>,
    pub changes: Vec<Planned>,
}

/// `rewind`: what was done, or with `--dry-run` what would change.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RewindReply {
    Done(RewindDone),
    Preview(RewindPreview),
}

/// A rewind that happened.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RewindDone {
    pub checkpoint: i64,
    /// Always false (kept so both forms carry it).
    pub dry_run: bool,
    /// Sealed before the rewind: rewinding to it undoes the rewind.
    pub safety_checkpoint: i64,
    pub result_checkpoint: i64,
    /// The daemon's own time for the whole rewind.
    pub elapsed_ms: f64,
    pub phases_ms: RewindPhases,
    /// Names moved aside and put back.
    pub changes: Vec<Planned>,
}

/// Where a rewind's time went, in milliseconds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RewindPhases {
    /// The check that every content to put back is readable, before the
    /// tree froze (not in `elapsed_ms`).
    #[serde(default)]
    pub check: f64,
    pub safety_seal: f64,
    pub switch: f64,
    pub result_seal: f64,
    pub invalidate: f64,
}

/// `rewind --dry-run`: the diff from the live tree to the checkpoint.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RewindPreview {
    pub checkpoint: i64,
    /// Always true.
    pub dry_run: bool,
    pub changes: Vec<FileChange>,
}
