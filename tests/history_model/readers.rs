//! Readers of the past racing the sequence's writers. While the
//! runner's steps run (file operations, descriptors, turns, rewinds,
//! undos, restores), a thread reads the view of a random sealed checkpoint
//! through `.rewindfs/checkpoints/N`, runs `diff N-1 N`, or reads `log`'s
//! statistics of the sealed turns, and checks each answer against the
//! model's snapshot of those checkpoints: the
//! past never moves, whatever the live tree does meanwhile. It stands
//! still only while the mount is gone (remount, kill -9).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockWriteGuard};
use std::time::Duration;

use super::super::model::{Rng, SeenTree, tree_diff};
use super::{Change, log_row_mismatch, observe_fs, parse_changes};
use crate::common::{CHILD_TIMEOUT, bin, run_with_timeout, stderr};

/// What a sealed checkpoint reads as: its tree, and its diff from the
/// checkpoint numbered one before (when that one exists).
struct Sealed {
    tree: SeenTree,
    diff: Option<BTreeSet<Change>>,
}

struct Shared {
    sealed: RwLock<BTreeMap<i64, Arc<Sealed>>>,
    /// Held for writing while the mount is gone; a reading holds it shared.
    mounted: RwLock<()>,
    stop: AtomicBool,
    failures: Mutex<Vec<String>>,
    reads: AtomicU64,
    /// The step the runner is in, named in a failure.
    step: Mutex<String>,
}

/// The reading thread; stopped when dropped.
pub struct Readers {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Where the reader finds the mount and how it runs the CLI.
pub struct Mount {
    pub mnt: PathBuf,
    pub run: PathBuf,
    pub home: PathBuf,
    /// The daemon's log, whose end a failure shows (a CI run keeps nothing else).
    pub daemon_log: PathBuf,
}

impl Readers {
    pub fn start(mount: Mount, seed: u64) -> Readers {
        let shared = Arc::new(Shared {
            sealed: RwLock::new(BTreeMap::new()),
            mounted: RwLock::new(()),
            stop: AtomicBool::new(false),
            failures: Mutex::new(Vec::new()),
            reads: AtomicU64::new(0),
            step: Mutex::new(String::new()),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("model-reader".into())
            .spawn(move || read_loop(&s, &mount, Rng(seed)))
            .expect("cannot start the model's reader thread");
        Readers { shared, thread: Some(thread) }
    }

    /// Checkpoint `n` was sealed with this tree (and this diff from `n-1`).
    pub fn sealed(&self, n: i64, tree: SeenTree, diff: Option<BTreeSet<Change>>) {
        self.shared.sealed.write().unwrap_or_else(|p| p.into_inner()).insert(n, Arc::new(Sealed { tree, diff }));
    }

    /// The runner starts `step` (named in a failure the readers meet meanwhile).
    pub fn step(&self, step: String) {
        *self.shared.step.lock().unwrap_or_else(|p| p.into_inner()) = step;
    }

    /// Holds the reader back while the mount is gone.
    pub fn unmounted(&self) -> RwLockWriteGuard<'_, ()> {
        self.shared.mounted.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The first wrong answer a reader got, if any.
    pub fn failure(&self) -> Option<String> {
        self.shared.failures.lock().unwrap_or_else(|p| p.into_inner()).first().cloned()
    }

    pub fn reads(&self) -> u64 {
        self.shared.reads.load(Ordering::Relaxed)
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn read_loop(shared: &Shared, mount: &Mount, mut rng: Rng) {
    while !shared.stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(2));
        let _mounted = shared.mounted.read().unwrap_or_else(|p| p.into_inner());
        let picked = {
            let sealed = shared.sealed.read().unwrap_or_else(|p| p.into_inner());
            let keys: Vec<i64> = sealed.keys().copied().collect();
            rng.pick(&keys).map(|k| (*k, sealed[k].clone()))
        };
        let Some((n, want)) = picked else { continue };
        let wrong = match (&want.diff, rng.below(8)) {
            (Some(diff), 0) => check_diff(mount, n, diff),
            (_, 1) => {
                let sealed = shared.sealed.read().unwrap_or_else(|p| p.into_inner()).clone();
                check_log(mount, &sealed)
            }
            _ => check_view(mount, n, &want.tree),
        };
        shared.reads.fetch_add(1, Ordering::Relaxed);
        if let Some(w) = wrong {
            let step = shared.step.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let log = std::fs::read_to_string(&mount.daemon_log).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(30)..].join("\n    ");
            let w = format!("{w}\n  (during step `{step}`; the daemon log ends:\n    {tail})");
            shared.failures.lock().unwrap_or_else(|p| p.into_inner()).push(w);
        }
    }
}

fn check_view(mount: &Mount, n: i64, want: &SeenTree) -> Option<String> {
    let root = mount.mnt.join(".rewindfs/checkpoints").join(n.to_string());
    match observe_fs(&root) {
        Err(e) => {
            // Whether it lasts: a second read, a moment later, says if the
            // view is wrong or a reader met a writer in passing.
            std::thread::sleep(Duration::from_millis(50));
            let again = match observe_fs(&root) {
                Ok(got) if tree_diff(want, &got, 1).is_empty() => "read again 50 ms later, it was right".to_string(),
                Ok(_) => "read again 50 ms later, it differed".to_string(),
                Err(e) => format!("read again 50 ms later: {e}"),
            };
            Some(format!("checkpoint {n}'s view, read during a step: {e} ({again})"))
        }
        Ok(got) => {
            let d = tree_diff(want, &got, 12);
            (!d.is_empty())
                .then(|| format!("checkpoint {n}'s view, read during a step, differs:\n    {}", d.join("\n    ")))
        }
    }
}

/// `rewindfs ARGS -C MOUNT --json`, run during a step: its JSON, or what
/// went wrong.
fn cli_json(mount: &Mount, args: &[&str]) -> Result<serde_json::Value, String> {
    let mnt = mount.mnt.to_string_lossy().into_owned();
    let mut full = vec![args[0], "-C", &mnt, "--json"];
    full.extend_from_slice(&args[1..]);
    let out = run_with_timeout(
        Command::new(bin()).env("REWINDFS_RUNTIME_DIR", &mount.run).env("REWINDFS_HOME", &mount.home).args(&full),
        CHILD_TIMEOUT,
    );
    if !out.status.success() {
        return Err(format!("{args:?}, run during a step, failed: {}", stderr(&out).trim()));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("{args:?}, run during a step: bad JSON ({e})"))
}

/// `log`'s statistics of every turn whose end is sealed (checkpoint N and
/// N+1 both sealed: the turn is `diff N N+1`) equal the model's diff.
fn check_log(mount: &Mount, sealed: &BTreeMap<i64, Arc<Sealed>>) -> Option<String> {
    // As the end of a sequence: HISTORY_MODEL_LOG=0 leaves the statistics out.
    if std::env::var("HISTORY_MODEL_LOG").is_ok_and(|v| v == "0") {
        return None;
    }
    let v = match cli_json(mount, &["log"]) {
        Ok(v) => v,
        Err(e) => return Some(e),
    };
    for row in v.as_array().into_iter().flatten() {
        let Some(c) = row["checkpoint"].as_i64() else { continue };
        let Some(d) = sealed.get(&(c + 1)).and_then(|s| s.diff.as_ref()) else { continue };
        if !sealed.contains_key(&c) {
            continue;
        }
        if let Some(wrong) = log_row_mismatch(row, d) {
            return Some(format!("log, run during a step: turn {c}: {wrong}"));
        }
    }
    None
}

fn check_diff(mount: &Mount, n: i64, want: &BTreeSet<Change>) -> Option<String> {
    let (a, b) = ((n - 1).to_string(), n.to_string());
    let got = match cli_json(mount, &["diff", &a, &b]) {
        Ok(v) => parse_changes(&v["changes"]),
        Err(e) => return Some(e),
    };
    (got != *want).then(|| {
        let missing: Vec<_> = want.difference(&got).collect();
        let extra: Vec<_> = got.difference(want).collect();
        format!("diff {a} {b}, run during a step: missing {missing:?}; unexpected {extra:?}")
    })
}
