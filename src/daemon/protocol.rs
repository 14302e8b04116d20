//! The control protocol's types, shared by the daemon and the CLI: one
//! request per command, tagged by `op` on the wire, and the reply each one
//! gets. A reply is what `--json` prints (docs/cli.md); a refusal is a
//! [`Failure`] `{kind, errno, message}` whose kind decides the exit status.
//! Both ends are the same binary, so there is no version negotiation.

use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::daemon::registry::MountInfo;
use crate::error::Failure;
use crate::journal::TurnInfo;
use crate::report::{PathEvent, TurnSummary};

// The replies whose data the core produces live with it.
pub use crate::engine::replies::{
    DiffReply, GcReply, Progress, ResetReply, RestoreReply, RewindDone, RewindPhases, RewindPreview, RewindReply,
    SnapshotReply, TurnReply,
};
use crate::journal::retention::DuReply;

/// A request and the type of its answer.
pub trait Op: Into<Request> {
    type Reply: Serialize + DeserializeOwned;
}

macro_rules! ops {
    ($($name:ident $op:literal => $reply:ty),* $(,)?) => {
        /// What the CLI asks a daemon: one variant per command.
        #[derive(Clone, Debug, Serialize, Deserialize)]
        #[serde(tag = "op")]
        pub enum Request {
            $(#[serde(rename = $op)] $name($name),)*
        }
        impl Request {
            /// The `op` tag of this request.
            pub fn name(&self) -> &'static str {
                match self {
                    $(Request::$name(_) => $op,)*
                }
            }
        }
        $(
            impl From<$name> for Request {
                fn from(op: $name) -> Request {
                    Request::$name(op)
                }
            }
            impl Op for $name {
                type Reply = $reply;
            }
        )*
    };
}

ops! {
    Status "status" => StatusReply,
    Unmount "unmount" => (),
    Turn "turn" => TurnReply,
    Log "log" => Vec<TurnSummary>,
    Diff "diff" => DiffReply,
    History "history" => Vec<PathEvent>,
    Restore "restore" => RestoreReply,
    Rewind "rewind" => RewindReply,
    Show "show" => ShowReply,
    Fsck "fsck" => crate::fsck::Report,
    FsckRemote "fsck-remote" => crate::remote::check::RemoteReport,
    Checkpoints "checkpoints" => Vec<crate::meta::Checkpoint>,
    Snapshot "snapshot" => SnapshotReply,
    Forget "forget" => crate::journal::retention::Collected,
    Gc "gc" => GcReply,
    Du "du" => DuReply,
    Reset "reset" => ResetReply,
    Resolve "resolve" => ResolveReply,
    Push "push" => crate::remote::push::RemoteStatus,
}

/// Push sealed checkpoints to the remote now, waiting at most `wait_secs`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Push {
    pub wait_secs: u64,
}

/// A progress line on the wire.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProgressLine {
    pub progress: Progress,
}

/// Where the store's bytes are.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Du;

/// Name a checkpoint: `at` (a reference), or a new one sealed now.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Snapshot {
    pub name: String,
    pub message: Option<String>,
    pub at: Option<String>,
}

/// Drop checkpoints now: each one's turn merges into the kept checkpoint
/// before it; what no kept checkpoint needs is freed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Forget {
    pub checkpoints: Vec<String>,
    pub dry_run: bool,
}

/// Collect what the retention policy lets go. `keep_count`/`keep_days`
/// replace the stored policy's (stored, unless `dry_run`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Gc {
    pub dry_run: bool,
    pub keep_count: Option<u64>,
    pub keep_days: Option<u64>,
    /// Turns the background collection on or off (stored).
    #[serde(default)]
    pub auto: Option<bool>,
}

/// Delete all history, never the workspace: seal the tree as a fresh
/// checkpoint, forget every other. Refused unless `confirm`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Reset {
    pub confirm: bool,
}

/// A named checkpoint, as `status` lists it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SnapshotRow {
    pub name: String,
    pub checkpoint: i64,
}

/// Which checkpoint a reference names, as every command taking one
/// would resolve it (the CLI asks first, to tell the user `note`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Resolve {
    pub reference: String,
}

/// `resolve`: the checkpoint, and why that one when the reference matched
/// abandoned checkpoints too.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ResolveReply {
    pub checkpoint: i64,
    pub note: Option<String>,
}

/// Every checkpoint's row (number, parent, message id, session, label),
/// without the statistics `log` computes: cheap enough for a prompt hook.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Checkpoints;

/// Check the store (`rewindfs fsck` on a mounted workspace). Never
/// repairs: that needs the store unused.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Fsck;

/// Check the store's remote (`rewindfs fsck --remote` on a mounted
/// workspace): read back from the bucket with the daemon's address and
/// credentials, and held against the workspace's history.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FsckRemote;

/// What is mounted where, and the state of the current turn.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Status;

/// Flush and unmount; `lazy` detaches even while files are in use.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Unmount {
    pub lazy: bool,
}

/// Seal the current turn as a checkpoint (the CLI has already flushed the
/// mount with syncfs).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Turn {
    pub info: TurnInfo,
}

/// Every checkpoint with its turn's statistics.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Log;

/// Changes between two checkpoint references (`to` None = live tree).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Diff {
    pub from: String,
    pub to: Option<String>,
    #[serde(with = "crate::name_json::vec")]
    pub paths: Vec<PathBuf>,
    pub patch: bool,
}

/// The turns that changed a path (relative to the mount root).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct History {
    #[serde(with = "crate::name_json")]
    pub path: PathBuf,
}

/// Put paths (relative to the root; empty = everything) back as they were
/// at a checkpoint, as a new turn.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Restore {
    pub checkpoint: String,
    #[serde(with = "crate::name_json::vec")]
    pub paths: Vec<PathBuf>,
    pub dry_run: bool,
}

/// Make the whole live tree the tree of a checkpoint, after sealing a
/// safety checkpoint.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Rewind {
    pub checkpoint: String,
    pub dry_run: bool,
}

/// Mount a read-only view of a checkpoint at `mountpoint`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Show {
    pub checkpoint: String,
    #[serde(with = "crate::name_json")]
    pub mountpoint: PathBuf,
}

/// `status`: the published mount info plus the daemon's live state.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StatusReply {
    #[serde(flatten)]
    pub mount: MountInfo,
    pub uptime_secs: u64,
    /// Size of the daemon's inode table.
    pub objects_known: u64,
    /// The current turn (the newest checkpoint); None when the journal's
    /// state is not read any more (a panic left it half-changed: `failure`
    /// says so).
    pub turn: Option<i64>,
    pub message_id: Option<String>,
    /// Records written in the current turn.
    pub turn_changes: u64,
    /// Seconds since the last record (None when none).
    pub idle_secs: Option<f64>,
    /// Rewound files whose bytes the settler has not written yet.
    pub pending_files: u64,
    /// Rewound files settled since the daemon started (written and made
    /// durable), and the most that one step of the settler made durable
    /// together.
    #[serde(default)]
    pub settled_files: u64,
    #[serde(default)]
    pub largest_settle_step: u64,
    /// Pending files the settler cannot fill (their bytes cannot be read
    /// back from the store): reads give EIO, `unmount` puts them back.
    #[serde(default)]
    pub unsettled: Vec<UnsettledFile>,
    /// Inode numbers `.rewindfs/` holds: the entries the kernel remembers
    /// (freed when it forgets them) plus a bounded number listed by a plain
    /// readdir.
    pub view_inodes: u64,
    /// The retention policy stored in the store.
    #[serde(default)]
    pub retention: Option<crate::journal::retention::Policy>,
    /// What the last background collection did (none ran yet: absent).
    #[serde(default)]
    pub auto_gc: Option<crate::journal::retention::AutoRun>,
    /// Whether a background collection is planning or running now: when
    /// false and fewer than a batch of checkpoints can go, none runs until
    /// the next seal.
    #[serde(default)]
    pub auto_gc_running: bool,
    /// Named checkpoints, oldest first.
    #[serde(default)]
    pub snapshots: Vec<SnapshotRow>,
    /// How FUSE requests travel: `transport` ("uring" or "classic") and the
    /// requests the rings served.
    #[serde(flatten, default)]
    pub transport: crate::fs::TransportReport,
    /// The `show` mounts this daemon serves.
    #[serde(default)]
    pub views: Vec<ViewStatus>,
    /// The remote sealed checkpoints are pushed to: the newest it holds
    /// and the backlog; absent without a remote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<crate::remote::push::RemoteStatus>,
    /// Why the mount is read-only, when a part of the daemon the history
    /// depends on failed (`Journal::fail`); absent while it is healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// A `show` mount and how its requests travel.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ViewStatus {
    pub checkpoint: i64,
    #[serde(with = "crate::name_json")]
    pub mountpoint: PathBuf,
    #[serde(flatten)]
    pub transport: crate::fs::TransportReport,
}

/// A rewound file whose bytes cannot be written into the workspace.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct UnsettledFile {
    /// Relative to the workspace root.
    pub path: String,
    /// The chunk that cannot be read, or the write that failed.
    pub reason: String,
}

/// `show`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ShowReply {
    pub checkpoint: i64,
    #[serde(with = "crate::name_json")]
    pub mountpoint: PathBuf,
    /// How the view's requests travel: "uring" or "classic".
    #[serde(default)]
    pub transport: String,
}

/// A daemon's answer on the wire: `{"ok":true,"data":REPLY}` or
/// `{"ok":false,"error":{"kind":..,"errno":..,"message":..}}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Failure>,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub data: serde_json::Value,
}

impl Response {
    /// The answer to a request that produced `result`.
    pub fn from_result<T: Serialize>(result: Result<T, Failure>) -> Response {
        match result.and_then(|v| {
            serde_json::to_value(v).map_err(|e| Failure::internal(format!("cannot encode the answer: {e}")))
        }) {
            Ok(data) => Response { ok: true, error: None, data },
            Err(f) => Response::failure(f),
        }
    }

    pub fn failure(f: Failure) -> Response {
        Response { ok: false, error: Some(f), data: serde_json::Value::Null }
    }

    /// The typed reply, or the daemon's failure.
    pub fn into_result<T: DeserializeOwned>(self) -> Result<T, Failure> {
        if !self.ok {
            return Err(self.error.unwrap_or_else(|| Failure::internal("the daemon refused without saying why")));
        }
        serde_json::from_value(self.data)
            .map_err(|e| Failure::internal(format!("malformed answer from the daemon: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    /// The wire format docs/design.md shows: flat objects tagged by `op`.
    #[test]
    fn requests_are_tagged_by_op() {
        let cases: Vec<(Request, &str)> = vec![
            (Status.into(), r#"{"op":"status"}"#),
            (Unmount { lazy: false }.into(), r#"{"op":"unmount","lazy":false}"#),
            (Log.into(), r#"{"op":"log"}"#),
            (
                Rewind { checkpoint: "~2".into(), dry_run: true }.into(),
                r#"{"op":"rewind","checkpoint":"~2","dry_run":true}"#,
            ),
            (
                Diff { from: "m1".into(), to: None, paths: vec!["src".into()], patch: true }.into(),
                r#"{"op":"diff","from":"m1","to":null,"paths":["src"],"patch":true}"#,
            ),
        ];
        for (req, want) in cases {
            assert!(want.starts_with(&format!(r#"{{"op":"{}""#, req.name())), "{want}");
            assert_eq!(serde_json::to_string(&req).expect("encode"), want);
            let back: Request = serde_json::from_str(want).expect("decode");
            assert_eq!(serde_json::to_string(&back).expect("encode"), want);
        }
    }

    /// A path that is not UTF-8 reaches the daemon as the same bytes (it
    /// used to fail to encode: "path contains invalid UTF-8 characters").
    #[test]
    fn paths_cross_the_wire_as_bytes() {
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt;
        let bad = PathBuf::from(OsStr::from_bytes(b"d\xe9j\xe0/bad\xff.txt"));
        let req: Request =
            Restore { checkpoint: "1".into(), paths: vec![bad.clone(), "ok".into()], dry_run: true }.into();
        let text = serde_json::to_string(&req).expect("encode");
        assert_eq!(
            text,
            r#"{"op":"restore","checkpoint":"1","paths":[{"base64":"ZOlq4C9iYWT/LnR4dA=="},"ok"],"dry_run":true}"#
        );
        let Request::Restore(back) = serde_json::from_str(&text).expect("decode") else {
            panic!("not a restore: {text}")
        };
        assert_eq!(back.paths, vec![bad.clone(), PathBuf::from("ok")]);
        let Request::History(h) = serde_json::from_str(
            &serde_json::to_string(&Request::from(History { path: bad.clone() })).expect("encode"),
        )
        .expect("decode") else {
            panic!("not a history")
        };
        assert_eq!(h.path, bad);
    }

    #[test]
    fn rewind_replies_decode_to_the_right_form() {
        let preview = RewindReply::Preview(RewindPreview { checkpoint: 1, dry_run: true, changes: vec![] });
        let v = serde_json::to_value(&preview).expect("encode");
        assert!(matches!(serde_json::from_value::<RewindReply>(v), Ok(RewindReply::Preview(_))));
        let done = RewindReply::Done(RewindDone {
            checkpoint: 1,
            dry_run: false,
            safety_checkpoint: 6,
            result_checkpoint: 7,
            elapsed_ms: 7.1,
            phases_ms: RewindPhases { check: 0.5, safety_seal: 1.0, switch: 2.0, result_seal: 3.0, invalidate: 1.1 },
            changes: vec![],
        });
        let v = serde_json::to_value(&done).expect("encode");
        assert!(matches!(serde_json::from_value::<RewindReply>(v), Ok(RewindReply::Done(_))));
    }

    #[test]
    fn failures_and_replies_survive_the_wire() {
        let ok = Response::from_result(Ok(ShowReply {
            checkpoint: 2,
            mountpoint: "/tmp/v".into(),
            transport: "uring".into(),
        }));
        let text = serde_json::to_string(&ok).expect("encode");
        let back: Response = serde_json::from_str(&text).expect("decode");
        let reply: ShowReply = back.into_result().expect("ok");
        assert_eq!((reply.checkpoint, reply.mountpoint), (2, PathBuf::from("/tmp/v")));

        let refused = Response::from_result::<()>(Err(Failure::usage("unknown checkpoint \"nope\"")));
        let text = serde_json::to_string(&refused).expect("encode");
        assert_eq!(text, r#"{"ok":false,"error":{"kind":"usage","errno":22,"message":"unknown checkpoint \"nope\""}}"#);
        let back: Response = serde_json::from_str(&text).expect("decode");
        let err = back.into_result::<()>().expect_err("refused");
        assert_eq!(err.kind, ErrorKind::Usage);

        // An answer of the wrong shape is a bug, not a usage error.
        let wrong = Response::from_result(Ok(42));
        assert_eq!(wrong.into_result::<ShowReply>().expect_err("bad shape").kind, ErrorKind::Internal);
    }
}
