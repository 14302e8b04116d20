//! Randomized fault injection for a full store, through
//! the real binary. The store lives on a small loop-mounted ext4 (so there
//! is no attic: removed and overwritten files are copied into the chunk
//! store, and a rewind copies contents back); a filler file beside the
//! store is grown and shrunk at random steps, so the store runs out of
//! space at random moments and gets it back. One seed drives a random mix
//! of writes (new and existing files up to a few MiB of incompressible
//! bytes), appends, truncations, renames, removals, turns, restores,
//! rewinds, undos and remounts, against the model of
//! `tests/history_model/model.rs`.
//!
//! After every step:
//! - a file operation either succeeded (the live tree shows it) or failed
//!   with ENOSPC and changed nothing; a command either succeeded or exited
//!   1 with a message that says the store is full (a rewind or restore that
//!   changed the tree part-way says how to undo it, and that undo, once
//!   space is back, puts the tree back exactly);
//! - the live tree equals the model (names, bytes, modes, link counts);
//! - the packs hold exactly the records the chunk index lists (a refused
//!   write left nothing behind: the pack was cut back);
//! - after a history step and whenever space comes back: every checkpoint's
//!   view equals the copy taken when it was sealed; when space comes back
//!   also `fsck` is clean (exit 0), and now and then the mount is unmounted
//!   and mounted again.
//!
//! Environment: FAULTS_SEED=N runs that seed only; FAULTS_SEQUENCES=N runs N
//! random sequences after the fixed seeds (FAULTS_FIXED=0 leaves those out);
//! FAULTS_STEPS=N steps per sequence (default 60); FAULTS_REPLAY='step;
//! step; ...' replays a printed sequence.

mod common;
#[allow(dead_code)]
#[path = "history_model/harness.rs"]
mod harness;
#[allow(dead_code)]
#[path = "history_model/model.rs"]
mod model;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::sequences::{self, guarded, listing};
use common::{MountFixture, describe_status, io_timeout, is_mounted, run_timeout, stderr, stdout};
use harness::observe_fs;
use model::{Flag, Kind, Model, Node, Rng, SeenTree, Step as M, tree_diff};

/// Size of the store's filesystem.
const STORE_FS_MIB: u64 = 48;
/// File names: few, so that writes hit existing files and renames replace.
const PATHS: [&str; 6] = ["a", "b", "c", "sub/a", "sub/b", "sub/c"];
/// With the workspace and the store on one disk, below this much free
/// space the history alone may fill it (no filler needed).
const SHARED_LOW_WATER: u64 = 12 << 20;
/// No file operation may take longer than this.
const IO_LIMIT: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct Failure(String);

type Res<T> = Result<T, Failure>;

fn fail<T>(msg: impl Into<String>) -> Res<T> {
    Err(Failure(msg.into()))
}

/// Incompressible bytes, a function of the seed alone.
fn bytes_of(seed: u64, len: usize) -> Vec<u8> {
    let mut h = blake3::Hasher::new();
    h.update(&seed.to_le_bytes());
    let mut out = vec![0u8; len];
    h.finalize_xof().fill(&mut out);
    out
}

/// The model test's steps (their text and parsing are its own: `create`,
/// `write`, `append`, `trunc`, `mv`, `rm`, `turn`, `restore`, `rewind`,
/// `undo`, `remount`), and the store's: `fill KIB` leaves KIB KiB free on
/// the store's filesystem, `free` removes the filler.
#[derive(Clone, Debug, PartialEq)]
enum Step {
    Fs(M),
    Fill(u64),
    Free,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Fs(s) => s.fmt(f),
            Step::Fill(k) => write!(f, "fill {k}"),
            Step::Free => write!(f, "free"),
        }
    }
}

impl Step {
    fn parse(line: &str) -> Result<Step, String> {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["fill", k] => k.parse().map(Step::Fill).map_err(|_| format!("cannot parse step {line:?}")),
            ["free"] => Ok(Step::Free),
            _ => M::parse(line).map(Step::Fs),
        }
    }
}

/// The store's filesystem: a loop-mounted ext4 image, lazily unmounted on drop.
struct LoopFs {
    dir: PathBuf,
    // Its own temp dir, removed after the unmount (not the fixture's, which
    // goes first and would be emptied through the mount).
    _tmp: tempfile::TempDir,
}

impl LoopFs {
    fn new() -> Res<LoopFs> {
        let tmp = tempfile::Builder::new().prefix("rewindfs-storefs-").tempdir().map_err(|e| Failure(e.to_string()))?;
        let under = tmp.path();
        let img = under.join("store.img");
        let dir = under.join("storefs");
        std::fs::create_dir(&dir).map_err(|e| Failure(format!("mkdir {}: {e}", dir.display())))?;
        let size = format!("{STORE_FS_MIB}M");
        let steps: [(&str, Vec<&OsStr>); 3] = [
            ("truncate", vec![OsStr::new("-s"), OsStr::new(&size), img.as_os_str()]),
            // No blocks reserved for root: the daemon runs as root.
            ("mkfs.ext4", vec![OsStr::new("-q"), OsStr::new("-m"), OsStr::new("0"), img.as_os_str()]),
            ("mount", vec![OsStr::new("-o"), OsStr::new("loop"), img.as_os_str(), dir.as_os_str()]),
        ];
        for (prog, args) in steps {
            let out = run_timeout(60, prog, &args, None, &[]);
            if !out.status.success() {
                return fail(format!("{prog} (loop devices needed): {}", stderr(&out)));
            }
        }
        Ok(LoopFs { dir, _tmp: tmp })
    }

    fn filler(&self) -> PathBuf {
        self.dir.join("filler")
    }

    fn free_bytes(&self) -> u64 {
        rustix::fs::statvfs(&self.dir).map(|s| s.f_bfree * s.f_frsize).unwrap_or(0)
    }

    /// Grows or shrinks the filler so that about `free` bytes stay free.
    fn leave_free(&self, free: u64) -> Res<()> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.filler())
            .map_err(|e| Failure(format!("filler: {e}")))?;
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let now = self.free_bytes();
        if now > free {
            let want = len + (now - free);
            // May stop short when the filesystem's metadata needs blocks too.
            let _ = rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::empty(), 0, want);
        } else {
            f.set_len(len.saturating_sub(free - now)).map_err(|e| Failure(format!("shrinking the filler: {e}")))?;
        }
        Ok(())
    }

    fn remove_filler(&self) -> Res<()> {
        match std::fs::remove_file(self.filler()) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => fail(format!("removing the filler: {e}")),
            _ => Ok(()),
        }
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        let _ = run_timeout(30, "umount", &[OsStr::new("-l"), self.dir.as_os_str()], None, &[]);
    }
}

/// Where the small filesystem is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Layout {
    /// The store alone (no attic: rewinds copy).
    Apart,
    /// The workspace and the store (the attic is used, on the full disk;
    /// the workspace's own writes run out of space too).
    Shared,
}

struct Runner {
    // Dropped first: the workspace mount goes before the store's filesystem.
    fx: MountFixture,
    layout: Layout,
    fs: LoopFs,
    model: Model,
    next_id: u64,
    /// What each checkpoint's view must show (a copy of the tree when sealed).
    snaps: BTreeMap<i64, SeenTree>,
    /// The model of each checkpoint whose state the model knows (a rewind
    /// target); not for a checkpoint sealed over a tree left part-way.
    models: BTreeMap<i64, Model>,
    last_safety: Option<i64>,
    /// The filler is in place.
    tight: bool,
    /// Counters for the report.
    refused: u64,
}

/// The bytes of the regular file at `p`.
fn file<'a>(m: &'a mut Model, p: &str) -> Option<&'a mut Vec<u8>> {
    m.node_mut(p).filter(|n| n.kind == Kind::File).map(|n| &mut n.data)
}

impl Runner {
    fn new(layout: Layout) -> Res<Runner> {
        let mut fx = MountFixture::unmounted();
        let fs = LoopFs::new()?;
        fx.store = fs.dir.join("store");
        if layout == Layout::Shared {
            fx.ws = fs.dir.join("ws");
            std::fs::create_dir(&fx.ws).map_err(|e| Failure(format!("mkdir {}: {e}", fx.ws.display())))?;
        }
        let mut model = Model::default();
        let mut next_id = 0;
        std::fs::create_dir(fx.ws.join("sub")).map_err(|e| Failure(e.to_string()))?;
        model.insert("sub", Node::new(Kind::Dir, Vec::new(), 0o755), &mut next_id);
        for (p, len) in [("a", 3000usize), ("sub/a", 200_000)] {
            let data = bytes_of(len as u64, len);
            std::fs::write(fx.ws.join(p), &data).map_err(|e| Failure(e.to_string()))?;
            model.insert(p, Node::new(Kind::File, data, 0o644), &mut next_id);
        }
        fx.mount(false, &["--auto-turn", "0"]);
        let mut r = Runner {
            fx,
            layout,
            fs,
            model,
            next_id,
            snaps: BTreeMap::new(),
            models: BTreeMap::new(),
            last_safety: None,
            tight: false,
            refused: 0,
        };
        r.sealed(0, r.model.clone())?;
        r.check_live()?;
        Ok(r)
    }

    fn m(&self, p: &str) -> PathBuf {
        self.fx.mnt.join(p)
    }

    fn mp(&self) -> String {
        self.fx.mnt.to_string_lossy().into_owned()
    }

    fn cli(&self, args: &[&str]) -> std::process::Output {
        self.fx.cli_output(args)
    }

    fn cli_json(&self, args: &[&str]) -> Res<serde_json::Value> {
        let out = self.cli(args);
        if !out.status.success() {
            return fail(format!("rewindfs {args:?} failed ({}): {}", describe_status(&out), stderr(&out).trim()));
        }
        serde_json::from_slice(&out.stdout).or_else(|e| fail(format!("rewindfs {args:?}: bad JSON ({e})")))
    }

    /// The checkpoints `log` lists.
    fn listed(&self) -> Res<Vec<i64>> {
        let v = self.cli_json(&["log"])?;
        Ok(v.as_array().map(|a| a.iter().filter_map(|r| r["checkpoint"].as_i64()).collect()).unwrap_or_default())
    }

    fn newest(&self) -> i64 {
        self.snaps.keys().next_back().copied().unwrap_or(-1)
    }

    fn sealed(&mut self, n: i64, model: Model) -> Res<()> {
        if n != self.newest() + 1 {
            return fail(format!("sealed checkpoint {n}, expected {}", self.newest() + 1));
        }
        self.snaps.insert(n, model.observe());
        self.models.insert(n, model);
        Ok(())
    }

    fn num(v: &serde_json::Value, key: &str) -> Res<i64> {
        v[key].as_i64().ok_or_else(|| Failure(format!("no {key} in {v}")))
    }

    /// A command failed: it must exit 1 and say why; with space on the
    /// store it must not fail at all.
    /// Space may run out: the filler is in place, or (workspace and store
    /// on one disk) the history itself filled most of it.
    fn short_of_space(&self) -> bool {
        self.tight || (self.layout == Layout::Shared && self.fs.free_bytes() < SHARED_LOW_WATER)
    }

    fn check_refusal(&self, what: &str, out: &std::process::Output) -> Res<String> {
        let err = stderr(out);
        if !self.short_of_space() {
            return fail(format!("{what} failed with space on the store ({}): {err}", describe_status(out)));
        }
        if out.status.code() != Some(1) {
            return fail(format!("{what} failed with {} (want exit 1): {err}", describe_status(out)));
        }
        let says_full = ["No space left on device", "disk is full", "full"].iter().any(|w| err.contains(w));
        if !says_full {
            return fail(format!("{what} failed without saying the store is full: {err}"));
        }
        Ok(err)
    }

    fn exec(&mut self, step: &Step) -> Res<bool> {
        let ran = match step {
            Step::Fill(kib) => {
                self.fs.leave_free(kib << 10)?;
                self.tight = true;
                true
            }
            Step::Free => {
                if !self.tight {
                    return Ok(false);
                }
                self.fs.remove_filler()?;
                self.tight = false;
                self.space_is_back()?;
                true
            }
            Step::Fs(M::Turn(None)) => {
                self.turn()?;
                true
            }
            Step::Fs(M::Rewind(k)) => {
                if !self.models.contains_key(k) {
                    return Ok(false);
                }
                self.rewind(*k)?;
                true
            }
            Step::Fs(M::Undo) => {
                let Some(s) = self.last_safety.filter(|s| self.models.contains_key(s)) else { return Ok(false) };
                self.rewind(s)?;
                true
            }
            Step::Fs(M::Restore { cp, path }) => {
                if !self.models.contains_key(cp) {
                    return Ok(false);
                }
                self.restore(*cp, path)?;
                true
            }
            Step::Fs(M::Remount) => {
                self.remount()?;
                true
            }
            _ => self.fs_step(step)?,
        };
        if ran {
            self.check_live()?;
            self.check_packs()?;
            if matches!(step, Step::Fs(s) if s.is_history()) {
                self.check_views()?;
            }
        }
        Ok(ran)
    }

    /// The model after a file operation, or None if it does not apply.
    fn apply(&self, step: &Step) -> Option<(Model, u64)> {
        let mut m = self.model.clone();
        let mut next = self.next_id;
        match step {
            Step::Fs(M::Create { path, len, seed }) => {
                let data = bytes_of(*seed, *len);
                match m.kind(path) {
                    None if m.kind(model::parent(path)) == Some(Kind::Dir) => {
                        m.insert(path, Node::new(Kind::File, data, 0o644), &mut next);
                    }
                    Some(Kind::File) => *file(&mut m, path)? = data,
                    _ => return None,
                }
            }
            Step::Fs(M::Write { path, off, len, seed }) => {
                model::write_at(file(&mut m, path)?, *off, &bytes_of(*seed, *len))
            }
            Step::Fs(M::Append { path, len, seed }) => file(&mut m, path)?.extend_from_slice(&bytes_of(*seed, *len)),
            Step::Fs(M::Trunc { path, len }) => file(&mut m, path)?.resize(*len as usize, 0),
            Step::Fs(s @ (M::Rename { .. } | M::Unlink(_))) => {
                if m.apply(s, &mut next) != model::Verdict::Ok {
                    return None;
                }
            }
            _ => return None,
        }
        m.gc();
        Some((m, next))
    }

    fn fs_step(&mut self, step: &Step) -> Res<bool> {
        let Some((after, next)) = self.apply(step) else { return Ok(false) };
        let (mnt, step2) = (self.fx.mnt.clone(), step.clone());
        let got = io_timeout(&format!("`{step}`"), IO_LIMIT, move || do_fs(&mnt, &step2));
        match got {
            Ok(()) => {
                self.model = after;
                self.next_id = next;
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) && self.short_of_space() => {
                self.refused += 1;
                if self.layout == Layout::Shared {
                    self.adopt_partial(step)?;
                }
            }
            Err(e) => {
                return fail(format!("`{step}` failed (store {}): {e}", if self.tight { "full" } else { "not full" }));
            }
        }
        Ok(true)
    }

    /// With the workspace on the full disk, a write refused for want of
    /// space may have changed its file part-way (as on any filesystem): the
    /// model takes the file as it is (the views check it was recorded).
    fn adopt_partial(&mut self, step: &Step) -> Res<()> {
        let path = match step {
            Step::Fs(M::Create { path, .. })
            | Step::Fs(M::Write { path, .. })
            | Step::Fs(M::Append { path, .. })
            | Step::Fs(M::Trunc { path, .. }) => path,
            _ => return Ok(()),
        };
        let (p, shown) = (self.m(path), path.clone());
        let got = io_timeout("reading a file refused part-way", IO_LIMIT, move || match std::fs::read(&p) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("reading {shown}: {e}")),
        })
        .map_err(Failure)?;
        let had = file(&mut self.model, path).is_some();
        match got {
            Some(bytes) if had => {
                if let Some(data) = file(&mut self.model, path) {
                    *data = bytes;
                }
            }
            Some(bytes) => {
                self.model.insert(path, Node::new(Kind::File, bytes, 0o644), &mut self.next_id);
            }
            None if had => return fail(format!("`{step}` refused for want of space removed {path}")),
            None => {}
        }
        self.model.gc();
        Ok(())
    }

    fn turn(&mut self) -> Res<()> {
        let out = self.cli(&["turn"]);
        if out.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| Failure(e.to_string()))?;
            return self.sealed(Self::num(&v, "checkpoint")?, self.model.clone());
        }
        self.check_refusal("turn", &out)?;
        self.refused += 1;
        // A turn that failed sealed nothing, or sealed the tree as it is.
        self.adopt_new_checkpoints(&self.model.clone(), None)
    }

    /// Checkpoints `log` lists that the test did not see sealed: each must
    /// show `first` (the first one) and then `rest` (or `first` if None).
    fn adopt_new_checkpoints(&mut self, first: &Model, rest: Option<&SeenTree>) -> Res<()> {
        let known = self.newest();
        let out = self.cli(&["log"]);
        if !out.status.success() {
            // `log` too may be refused while the journal cannot be folded
            // into the database; once space is back it must answer.
            self.check_refusal("log", &out)?;
            self.fs.remove_filler()?;
            self.tight = false;
        }
        let new: Vec<i64> = self.listed()?.into_iter().filter(|n| *n > known).collect();
        for (i, n) in new.into_iter().enumerate() {
            match (i, rest) {
                (0, _) | (_, None) => self.sealed(n, first.clone())?,
                (_, Some(t)) => {
                    if n != self.newest() + 1 {
                        return fail(format!("sealed checkpoint {n}, expected {}", self.newest() + 1));
                    }
                    self.snaps.insert(n, t.clone());
                }
            }
        }
        Ok(())
    }

    fn rewind(&mut self, k: i64) -> Res<()> {
        let pre = self.model.clone();
        let out = self.cli(&["rewind", &k.to_string()]);
        if out.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| Failure(e.to_string()))?;
            let s = Self::num(&v, "safety_checkpoint")?;
            self.sealed(s, pre)?;
            self.model = self.models[&k].clone();
            self.sealed(Self::num(&v, "result_checkpoint")?, self.model.clone())?;
            self.last_safety = Some(s);
            return Ok(());
        }
        let err = self.check_refusal(&format!("rewind {k}"), &out)?;
        self.refused += 1;
        self.after_failed_history_op(pre, &err, "rewindfs rewind ")
    }

    fn restore(&mut self, cp: i64, path: &str) -> Res<()> {
        let pre = self.model.clone();
        let target = self.m(path).to_string_lossy().into_owned();
        let cps = cp.to_string();
        let out = self.cli(&["restore", &cps, "--", &target]);
        if out.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| Failure(e.to_string()))?;
            self.sealed(Self::num(&v, "undo_checkpoint")?, pre)?;
            let k = self.models[&cp].clone();
            let _ = self.model.restore(&k, path, &mut self.next_id);
            return self.sealed(Self::num(&v, "result_checkpoint")?, self.model.clone());
        }
        let err = self.check_refusal(&format!("restore {cp} {path}"), &out)?;
        self.refused += 1;
        self.after_failed_history_op(pre, &err, "rewindfs restore ")
    }

    /// A rewind or restore failed. Its first checkpoint (if sealed) holds
    /// the tree before it. If the tree is as before, nothing more; else the
    /// message must name the undo, which, once space is back, must put the
    /// tree back exactly.
    fn after_failed_history_op(&mut self, pre: Model, err: &str, undo_cmd: &str) -> Res<()> {
        let live = observe_fs(&self.fx.mnt).map_err(|e| Failure(format!("reading the mount: {e}")))?;
        let changed = !tree_diff(&pre.observe(), &live, 1).is_empty();
        self.adopt_new_checkpoints(&pre, Some(&live))?;
        if !changed {
            return Ok(());
        }
        let Some(at) = err.find(undo_cmd) else {
            return fail(format!("a failed command changed the tree and does not say how to undo it: {err}"));
        };
        let n: String = err[at + undo_cmd.len()..].chars().take_while(|c| c.is_ascii_digit()).collect();
        let Ok(n) = n.parse::<i64>() else { return fail(format!("no checkpoint in the undo hint: {err}")) };
        self.fs.remove_filler()?;
        self.tight = false;
        let cmd = undo_cmd.trim().trim_start_matches("rewindfs ");
        let out = self.cli(&[cmd, &n.to_string()]);
        if !out.status.success() {
            return fail(format!("the undo `{undo_cmd}{n}` failed with space back: {}", stderr(&out)));
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| Failure(e.to_string()))?;
        let key = if cmd == "rewind" { "safety_checkpoint" } else { "undo_checkpoint" };
        let first = Self::num(&v, key)?;
        if first != self.newest() + 1 {
            return fail(format!("the undo sealed {first}, expected {}", self.newest() + 1));
        }
        self.snaps.insert(first, live);
        self.model = pre;
        self.sealed(Self::num(&v, "result_checkpoint")?, self.model.clone())?;
        Ok(())
    }

    fn remount(&mut self) -> Res<()> {
        let mp = self.mp();
        let out = self.fx.rewindfs(&["unmount", &mp]);
        if !out.status.success() {
            self.check_refusal("unmount", &out)?;
            if !is_mounted(&self.fx.mnt) {
                return fail(format!("a failed unmount left no mount: {}", stderr(&out)));
            }
            self.refused += 1;
            return Ok(());
        }
        self.fx.forget_mount();
        if is_mounted(&self.fx.mnt) {
            return fail("still mounted after a successful unmount");
        }
        self.mount_again()
    }

    fn mount_again(&mut self) -> Res<()> {
        let (ws, mnt, store) =
            (self.fx.ws.to_string_lossy().into_owned(), self.mp(), self.fx.store.to_string_lossy().into_owned());
        let args = ["mount", ws.as_str(), mnt.as_str(), "--store", store.as_str(), "--auto-turn", "0"];
        let out = self.fx.rewindfs(&args);
        if !out.status.success() {
            self.check_refusal("mount", &out).map_err(|f| {
                let log = std::fs::read_to_string(self.fx.store.join("daemon.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(6).collect::<Vec<_>>().into_iter().rev().collect();
                Failure(format!("{}; the daemon log ends:\n    {}", f.0, tail.join("\n    ")))
            })?;
            self.refused += 1;
            // Once space is back, it must mount.
            self.fs.remove_filler()?;
            self.tight = false;
            self.fx.mount(false, &["--auto-turn", "0"]);
        } else {
            // As the fixture's own mount does: unmounted on drop.
            self.fx.adopt_mount();
        }
        let v = self.cli_json(&["status"])?;
        let v = if v.is_array() { v[0].clone() } else { v };
        let n = Self::num(&v, "turn")?;
        self.sealed(n, self.model.clone())
    }

    /// Space came back: fsck is clean, every view is right.
    fn space_is_back(&mut self) -> Res<()> {
        let mp = self.mp();
        let out = self.fx.rewindfs(&["fsck", "-C", &mp]);
        if !out.status.success() {
            return fail(format!("fsck with space back: {}: {}{}", describe_status(&out), stdout(&out), stderr(&out)));
        }
        self.check_views()
    }

    fn check_live(&self) -> Res<()> {
        let mnt = self.fx.mnt.clone();
        let got = io_timeout("reading the mount", IO_LIMIT, move || observe_fs(&mnt))
            .map_err(|e| Failure(format!("reading the mount: {e}")))?;
        let d = tree_diff(&self.model.observe(), &got, 12);
        if !d.is_empty() {
            return fail(format!("the mount differs from the model:\n    {}", d.join("\n    ")));
        }
        Ok(())
    }

    fn check_views(&self) -> Res<()> {
        for (n, snap) in &self.snaps {
            let root = self.fx.mnt.join(".rewindfs/checkpoints").join(n.to_string());
            let got = match io_timeout("reading a view", IO_LIMIT, move || observe_fs(&root)) {
                Ok(t) => t,
                // With the disk full, the journal's newest records may not
                // fit into the database: a view then fails (never shows a
                // later state as the past); with space back it must work.
                Err(e) if self.short_of_space() && (e.contains("os error 28") || e.contains("os error 5")) => continue,
                Err(e) => return fail(format!("reading checkpoint {n}'s view: {e}")),
            };
            let d = tree_diff(snap, &got, 12);
            if !d.is_empty() {
                return fail(format!("checkpoint {n}'s view differs from its copy:\n    {}", d.join("\n    ")));
            }
        }
        Ok(())
    }

    /// The packs hold exactly the records the chunk index lists.
    fn check_packs(&self) -> Res<()> {
        let (records, packs) = pack_accounting(&self.fx.store)?;
        if records != packs {
            return fail(format!(
                "the packs hold {packs} bytes of records, the index lists {records}: {} bytes nothing refers to",
                packs as i64 - records as i64
            ));
        }
        Ok(())
    }
}

/// (bytes of records the chunk index lists, bytes of records in the packs).
fn pack_accounting(store: &Path) -> Res<(u64, u64)> {
    let mut packs = 0u64;
    if let Ok(d) = std::fs::read_dir(store.join("chunks/packs")) {
        for e in d.flatten() {
            packs += e.metadata().map(|m| m.len().saturating_sub(16)).unwrap_or(0);
        }
    }
    let db = store.join("chunks/chunks.sqlite");
    let out = run_timeout(
        30,
        "sqlite3",
        &[db.as_os_str(), OsStr::new("SELECT COALESCE(SUM(64 + stored_len), 0) FROM chunks")],
        None,
        &[],
    );
    if !out.status.success() {
        return fail(format!("sqlite3 on the chunk index: {}", stderr(&out)));
    }
    let records = stdout(&out).trim().parse().map_err(|e| Failure(format!("sqlite3 said {:?}: {e}", stdout(&out))))?;
    Ok((records, packs))
}

fn do_fs(mnt: &Path, step: &Step) -> std::io::Result<()> {
    use std::fs::OpenOptions;
    let m = |p: &str| mnt.join(p);
    match step {
        Step::Fs(M::Create { path, len, seed }) => OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(m(path))?
            .write_all(&bytes_of(*seed, *len)),
        Step::Fs(M::Write { path, off, len, seed }) => {
            OpenOptions::new().write(true).open(m(path))?.write_all_at(&bytes_of(*seed, *len), *off)
        }
        Step::Fs(M::Append { path, len, seed }) => {
            OpenOptions::new().append(true).open(m(path))?.write_all(&bytes_of(*seed, *len))
        }
        Step::Fs(M::Trunc { path, len }) => OpenOptions::new().write(true).open(m(path))?.set_len(*len),
        Step::Fs(M::Rename { from, to, flag: Flag::Plain }) => std::fs::rename(m(from), m(to)),
        Step::Fs(M::Unlink(p)) => std::fs::remove_file(m(p)),
        _ => unreachable!("not a file operation: {step}"),
    }
}

fn gen_step(r: &Runner, rng: &mut Rng) -> Step {
    let pick = |rng: &mut Rng| PATHS[rng.below(PATHS.len())].to_string();
    let size = |rng: &mut Rng| match rng.below(4) {
        0 => rng.below(300),
        1 => rng.below(64 << 10),
        _ => (256 << 10) + rng.below(4 << 20),
    };
    let seed = rng.next() % 1_000_000;
    let cps: Vec<i64> = r.models.keys().copied().collect();
    let flen = |p: &str| r.model.node(p).map(|n| n.data.len()).unwrap_or(0);
    match rng.below(100) {
        0..=17 => Step::Fs(M::Create { path: pick(rng), len: size(rng), seed }),
        18..=29 => {
            let path = pick(rng);
            let off = rng.below(flen(&path) + 1000) as u64;
            let max = if rng.below(2) == 0 { 4096 } else { 1 << 20 };
            Step::Fs(M::Write { path, off, len: 1 + rng.below(max), seed })
        }
        30..=35 => Step::Fs(M::Append { path: pick(rng), len: 1 + rng.below(256 << 10), seed }),
        36..=40 => {
            let path = pick(rng);
            Step::Fs(M::Trunc { len: rng.below(flen(&path) + 4096) as u64, path })
        }
        41..=47 => Step::Fs(M::Rename { from: pick(rng), to: pick(rng), flag: Flag::Plain }),
        48..=52 => Step::Fs(M::Unlink(pick(rng))),
        53..=64 => Step::Fs(M::Turn(None)),
        65..=70 => Step::Fs(M::Rewind(*rng.pick(&cps).unwrap_or(&0))),
        71..=72 => Step::Fs(M::Undo),
        73..=78 => Step::Fs(M::Restore { cp: *rng.pick(&cps).unwrap_or(&0), path: pick(rng) }),
        79..=81 => Step::Fs(M::Remount),
        82..=93 => {
            // Mostly nearly nothing free, sometimes room for a few chunks.
            let kib = match rng.below(3) {
                0 => rng.below(64),
                1 => rng.below(1024),
                _ => rng.below(6 << 10),
            };
            Step::Fill(kib as u64)
        }
        _ => Step::Free,
    }
}

/// Ends a sequence: space back, fsck clean, views right, and the store
/// mounts again.
fn finish(r: &mut Runner) -> Res<()> {
    if r.tight {
        r.exec(&Step::Free)?;
    } else {
        r.space_is_back()?;
    }
    r.exec(&Step::Fs(M::Remount))?;
    r.check_views()
}

/// One sequence from `seed`: (steps run, refusals seen, failure).
fn run_seed(seed: u64, n: usize, layout: Layout) -> (Vec<Step>, u64, Option<Failure>) {
    let mut rng = Rng(seed);
    let mut steps = Vec::new();
    let mut refused = 0;
    let mut runner = None;
    let res = guarded(
        || {
            let r = runner.insert(Runner::new(layout)?);
            let mut tries = 0;
            while steps.len() < n && tries < n * 20 {
                tries += 1;
                let step = gen_step(r, &mut rng);
                steps.push(step.clone());
                if !r.exec(&step)? {
                    steps.pop();
                }
            }
            let done = finish(r);
            refused = r.refused;
            done
        },
        Failure,
    );
    drop(runner);
    (steps, refused, res.err())
}

fn run_steps(steps: &[Step], layout: Layout) -> Res<()> {
    let mut runner = None;
    let res = guarded(
        || {
            let r = runner.insert(Runner::new(layout)?);
            for (i, s) in steps.iter().enumerate() {
                r.exec(s).map_err(|f| Failure(format!("step {i} `{s}`: {}", f.0)))?;
            }
            finish(r).map_err(|f| Failure(format!("at the end (space back, remount): {}", f.0)))
        },
        Failure,
    );
    drop(runner);
    res
}

fn replay(lines: &[&str]) {
    replay_in(Layout::Apart, lines)
}

fn replay_in(layout: Layout, lines: &[&str]) {
    setup();
    let steps: Vec<Step> = lines.iter().map(|l| Step::parse(l).unwrap_or_else(|e| panic!("{e}"))).collect();
    if let Err(f) = run_steps(&steps, layout) {
        panic!("{}\nsequence ({layout:?}):\n{}", f.0, listing(&steps));
    }
}

fn setup() {
    common::require_fuse();
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
}

/// Runs the seeds of `<PREFIX>_...` (see [`sequences::seeds`]) in `layout`.
fn random_sequences(prefix: &str, layout: Layout, fixed: &[u64], steps: u64) {
    setup();
    if let Some(lines) = sequences::replay_from_env(prefix) {
        replay_in(layout, &lines.iter().map(String::as_str).collect::<Vec<_>>());
        return;
    }
    let n = sequences::env_u64(&format!("{prefix}_STEPS")).unwrap_or(steps) as usize;
    let seeds = sequences::seeds(prefix, fixed);
    let started = Instant::now();
    let (mut total, mut refusals, mut failures) = (0, 0, Vec::new());
    for seed in &seeds {
        let (steps, refused, failure) = run_seed(*seed, n, layout);
        total += steps.len();
        refusals += refused;
        if let Some(f) = failure {
            let text = format!(
                "{prefix}_SEED={seed}: failed at step {} `{}`: {}\n{}",
                steps.len().saturating_sub(1),
                steps.last().map(|s| s.to_string()).unwrap_or_default(),
                f.0,
                listing(&steps)
            );
            eprintln!("{text}");
            failures.push(text);
        }
    }
    let extra = format!(", {refusals} refusals for want of space");
    sequences::conclude(&format!("faults_store_full ({layout:?})"), seeds.len(), total, &extra, &failures, started);
}

/// CI: fixed seeds (FAULTS_SEQUENCES=N adds random ones). Each failure is
/// printed with its seed and as a replayable list of steps.
#[test]
fn random_sequences_with_the_store_filling_up() {
    random_sequences("FAULTS", Layout::Apart, &[1, 2, 3, 4, 5], 60);
}

/// The workspace and the store on one small filesystem: the attic is on
/// the full disk, and the workspace's own writes run out of space too
/// (FAULTS_SHARED_SEED, _SEQUENCES, _STEPS, _REPLAY as above).
#[test]
fn random_sequences_with_the_workspace_and_store_on_a_filling_disk() {
    random_sequences("FAULTS_SHARED", Layout::Shared, &[1, 2, 3], 40);
}

// Regression sequences found by the random test (docs/fault-test-failures.md).
// The initial tree is `a`, `sub/`, `sub/a`; checkpoint 0 is the mount.

/// FS1 (seed 728049155): a seal whose WAL checkpoint failed for want of
/// space had committed its checkpoint row but left the daemon's turn
/// behind: the next seal failed with "UNIQUE constraint failed:
/// checkpoints.id" and changes were recorded in the sealed turn.
#[test]
fn a_seal_that_cannot_be_made_durable_still_moves_the_turn_on() {
    replay(&[
        "restore 0 b",
        "create c 50847 441019",
        "create sub/c 3508270 191468",
        "fill 720",
        "restore 1 a",
        "append sub/c 260155 139199",
        "rm sub/c",
        "turn",
        "write sub/c 2961464 2570 321325",
        "remount",
        "rewind 0",
        "create b 3817237 866659",
        "create sub/a 3260895 328406",
        "fill 3033",
        "free",
        "create sub/b 267 493212",
        "create c 22995 333447",
        "create b 68 710766",
        "trunc c 23251",
        "rm c",
        "fill 589",
        "append a 154525 9881",
        "free",
        "trunc sub/a 3220665",
        "write sub/b 1023 123969 145819",
        "append a 165426 324456",
        "rewind 3",
        "create sub/b 37858 385144",
        "trunc c 24856",
        "mv a b",
        "fill 5559",
        "fill 27",
        "fill 33",
        "turn",
        "fill 61",
        "restore 1 sub/b",
    ]);
}

/// FS4 (seed 5): with the journal's newest records not foldable into the
/// database (disk full), views were served from the database alone, and
/// checkpoint 0's view showed `sub/a` as it is now instead of its recorded
/// pre-image. A query now fails instead (never wrong bytes).
#[test]
fn a_view_never_shows_a_later_state_when_the_journal_cannot_be_folded() {
    replay(&["trunc sub/a 150699", "fill 13", "append sub/a 232452 967264", "turn"]);
}

/// FS3 (seed 366969664): a rewind without an attic (a restore of the whole
/// tree) that failed for want of space left its temporary
/// `.rewindfs-restore-*` file in the tree.
#[test]
fn a_failed_restore_leaves_no_temporary_file() {
    replay(&[
        "remount",
        "trunc sub/a 135466",
        "create b 38452 998698",
        "create sub/c 18786 332829",
        "turn",
        "create b 3715502 475209",
        "turn",
        "write b 3708213 250242 164979",
        "fill 903",
        "mv sub/a b",
        "create sub/a 2282631 426663",
        "turn",
        "free",
        "append sub/a 93316 516880",
        "create a 44337 814803",
        "write a 44772 2149 36450",
        "rewind 1",
        "create sub/a 936097 460315",
        "create a 198 179224",
        "fill 17",
        "rewind 0",
        "turn",
    ]);
}

/// FS5 (shared layout, seed 830894792): an instant rewind (the attic on
/// the full disk) reported success although the workspace had no room for
/// the contents it leaves to the settler; reading `a` then failed with
/// ENOSPC. The rewind is now refused, nothing changed, saying the disk is
/// full.
#[test]
fn a_rewind_without_room_for_its_contents_is_refused() {
    replay_in(
        Layout::Shared,
        &[
            "fill 38",
            "write a 3369 2857 734856",
            "turn",
            "turn",
            "create b 3862288 46136",
            "turn",
            "restore 0 c",
            "fill 4855",
            "create b 88 706523",
            "turn",
            "create a 966060 125979",
            "mv b c",
            "turn",
            "remount",
            "rm sub/a",
            "write c 745 833771 965903",
            "rewind 2",
            "create a 2003167 309796",
            "create sub/a 10779 292646",
            "trunc sub/a 41303",
            "create sub/b 39722 856774",
            "restore 2 a",
            "turn",
            "restore 7 c",
            "append sub/a 102300 698984",
            "rewind 5",
        ],
    );
}

/// The store alone on a filesystem filled to the last
/// byte (its history, and a plain file for the rest). The owner frees it
/// with `gc`, seals a turn and unmounts, all through rewindfs; nothing a
/// kept checkpoint shows is lost.
#[test]
fn the_owner_frees_a_full_store_with_gc_then_turns_and_unmounts() {
    setup();
    let fs = LoopFs::new().unwrap_or_else(|f| panic!("{}", f.0));
    let mut fx = MountFixture::unmounted();
    fx.store = fs.dir.join("store");
    std::fs::write(fx.ws.join("small"), "small\n").expect("small file");
    fx.mount(false, &["--auto-turn", "0"]);
    let mp = fx.mnt.to_string_lossy().into_owned();
    // Each turn overwrites `big` in place with 4 MiB of new bytes: without
    // an attic the pre-image goes into the packs.
    let mut sealed = BTreeMap::new();
    for i in 0..8u64 {
        let data = bytes_of(1000 + i, 4 << 20);
        std::fs::write(fx.mnt.join("big"), &data).expect("writing big through the mount");
        let n = fx.turn(&format!("t{i}"));
        sealed.insert(n, data);
    }
    fs.leave_free(0).unwrap_or_else(|f| panic!("{}", f.0));
    // Whatever fallocate left (the filesystem's own metadata), writes take;
    // ext4 holds back room for delayed allocation until they are synced.
    if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(fs.filler()) {
        for len in [65536, 4096, 4096, 1024, 1024] {
            let block = vec![0u8; len];
            while f.write_all(&block).is_ok() {}
            let _ = f.sync_all();
        }
    }
    // ext4 keeps some blocks for its own metadata that statvfs counts as free.
    let full = fs.free_bytes();
    let probe = std::fs::write(fs.dir.join("probe"), vec![0u8; 4096])
        .and_then(|()| std::fs::File::open(fs.dir.join("probe"))?.sync_all());
    assert!(
        probe.as_ref().is_err_and(|e| e.raw_os_error() == Some(libc::ENOSPC)),
        "the store's filesystem is not full ({full} bytes free): {probe:?}"
    );
    let _ = std::fs::remove_file(fs.dir.join("probe"));

    let out = fx.rewindfs(&["gc", "-C", &mp, "--json", "--keep-count", "3", "--keep-days", "0"]);
    assert!(out.status.success(), "gc on a full store: {}: {}", describe_status(&out), stderr(&out));
    let freed = fs.free_bytes();
    assert!(freed >= full + (8 << 20), "gc gave back too little: {full} then {freed} bytes free");
    let out = fx.rewindfs(&["log", "-C", &mp, "--json"]);
    let log: serde_json::Value = serde_json::from_slice(&out.stdout).expect("log is JSON");
    let kept: Vec<i64> =
        log.as_array().expect("log is an array").iter().filter_map(|c| c["checkpoint"].as_i64()).collect();
    assert!(kept.len() >= 3, "gc kept {kept:?}");

    std::fs::write(fx.mnt.join("after"), "after the gc\n").expect("a write after the gc");
    let out = fx.rewindfs(&["turn", "-C", &mp, "--json", "--message-id", "after-gc"]);
    assert!(out.status.success(), "turn after gc: {}: {}", describe_status(&out), stderr(&out));
    // Checkpoint n shows `big` as it was written before it was sealed.
    for n in kept.iter().filter(|n| sealed.contains_key(n)) {
        let view = fx.mnt.join(format!(".rewindfs/checkpoints/{n}/big"));
        let got = std::fs::read(&view).unwrap_or_else(|e| panic!("reading {}: {e}", view.display()));
        assert!(got == sealed[n], "checkpoint {n}'s big differs from what was sealed");
    }
    let out = fx.rewindfs(&["unmount", &mp]);
    assert!(out.status.success(), "unmount after gc: {}: {}", describe_status(&out), stderr(&out));
    fx.forget_mount();
    assert!(!is_mounted(&fx.mnt), "still mounted after unmount");
}
