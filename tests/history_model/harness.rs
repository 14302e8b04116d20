//! Runs steps on a mounted workspace and on the model in lockstep, and
//! checks the mount, its checkpoint views and the CLI's reports against
//! the model.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::model::*;
pub use super::model::{Change, log_row_mismatch, parse_changes};
// Explicit: tests/common has its own `Rng` and `tree_diff`.
use super::model::{Rng, tree_diff};
use crate::common::*;

#[path = "kill_rewind.rs"]
mod kill_rewind;
#[path = "readers.rs"]
mod readers;

/// Why a sequence failed: `kind` groups failures for shrinking.
#[derive(Clone, Debug)]
pub struct Failure {
    pub kind: &'static str,
    pub msg: String,
}

type Res<T> = Result<T, Failure>;

fn fail<T>(kind: &'static str, msg: impl Into<String>) -> Res<T> {
    Err(Failure { kind, msg: msg.into() })
}

struct Held {
    file: File,
    node: u64,
}

#[derive(Clone, Copy, Default)]
pub struct Opts {
    /// Also compare `log --json` statistics with the model's diff of each turn.
    pub check_log: bool,
}

pub struct Runner {
    pub fx: MountFixture,
    pub model: Model,
    pub snaps: BTreeMap<i64, Model>,
    next_id: u64,
    fds: Vec<Option<Held>>,
    orphans: BTreeMap<u64, Node>,
    last_safety: Option<i64>,
    turn_ids: u64,
    checks: u64,
    /// Checkpoints sealed by the current history step, whose diffs are
    /// checked after the views.
    new_cps: Vec<i64>,
    opts: Opts,
    /// Readers of sealed checkpoints racing the steps.
    readers: Option<std::sync::Arc<readers::Readers>>,
}

fn io_err(e: rustix::io::Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e.raw_os_error())
}

impl Runner {
    /// A fresh workspace with a small tree, mounted with turns only from the test.
    pub fn new(opts: Opts) -> Res<Runner> {
        let mut fx = MountFixture::unmounted();
        let mut model = Model::default();
        let mut next_id = 0;
        let init = [("a", Kind::File, 40u64), ("b", Kind::Dir, 0), ("b/a", Kind::File, 300)];
        for (p, kind, len) in init {
            let path = fx.ws.join(p);
            let node = if kind == Kind::Dir {
                std::fs::create_dir(&path).map_err(|e| Failure { kind: "setup", msg: e.to_string() })?;
                Node::new(Kind::Dir, Vec::new(), 0o755)
            } else {
                let data = gen_bytes(len, len as usize);
                std::fs::write(&path, &data).map_err(|e| Failure { kind: "setup", msg: e.to_string() })?;
                Node::new(Kind::File, data, 0o644)
            };
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(node.mode))
                .map_err(|e| Failure { kind: "setup", msg: e.to_string() })?;
            model.insert(p, node, &mut next_id);
        }
        fx.mount(false, &["--auto-turn", "0"]);
        let mut r = Runner {
            fx,
            model,
            snaps: BTreeMap::new(),
            next_id,
            fds: (0..SLOTS).map(|_| None).collect(),
            orphans: BTreeMap::new(),
            last_safety: None,
            turn_ids: 0,
            checks: 0,
            new_cps: Vec::new(),
            opts,
            readers: None,
        };
        let m = r.current_checkpoint()?;
        if m != 0 {
            return fail("checkpoints", format!("the first mount made checkpoint {m}, not 0"));
        }
        r.snaps.insert(0, r.model.clone());
        if std::env::var("HISTORY_MODEL_READERS").map_or(true, |v| v != "0") {
            let mount = readers::Mount {
                mnt: r.fx.mnt.clone(),
                run: r.fx.run.clone(),
                home: r.fx.dir.path().join("home"),
                daemon_log: r.fx.store.join("daemon.log"),
            };
            let seed =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
            let readers = readers::Readers::start(mount, seed);
            readers.sealed(0, r.model.observe(), None);
            r.readers = Some(std::sync::Arc::new(readers));
        }
        r.check_live()?;
        Ok(r)
    }

    fn m(&self, p: &str) -> PathBuf {
        self.fx.mnt.join(p)
    }

    fn mp(&self) -> String {
        self.fx.mnt.to_string_lossy().into_owned()
    }

    fn cli_json(&self, args: &[&str]) -> Res<serde_json::Value> {
        let mp = self.mp();
        let mut full = vec![args[0], "-C", mp.as_str(), "--json"];
        full.extend_from_slice(&args[1..]);
        let out = self.fx.rewindfs(&full);
        if !out.status.success() {
            return fail(
                "cli",
                format!("rewindfs {full:?} failed ({}): {}", describe_status(&out), stderr(&out).trim()),
            );
        }
        serde_json::from_slice(&out.stdout).or_else(|e| fail("cli", format!("rewindfs {full:?}: bad JSON ({e})")))
    }

    fn current_checkpoint(&self) -> Res<i64> {
        let v = self.cli_json(&["status"])?;
        v["turn"].as_i64().ok_or_else(|| Failure { kind: "cli", msg: format!("status has no turn: {v}") })
    }

    fn newest(&self) -> i64 {
        self.snaps.keys().next_back().copied().unwrap_or(-1)
    }

    /// Records the model as checkpoint `n`, which must be the next number.
    fn sealed(&mut self, n: Option<i64>, model: Model, what: &str) -> Res<i64> {
        let Some(n) = n else { return fail("cli", format!("{what}: no checkpoint number in the answer")) };
        if n != self.newest() + 1 {
            return fail("checkpoints", format!("{what} sealed checkpoint {n}, expected {}", self.newest() + 1));
        }
        if let Some(r) = &self.readers {
            let diff = self.snaps.get(&(n - 1)).map(|a| expected_diff(a, &model));
            r.sealed(n, model.observe(), diff);
        }
        self.snaps.insert(n, model);
        self.new_cps.push(n);
        Ok(n)
    }

    /// Runs one step; Ok(false) if the step does not apply in this state.
    pub fn exec(&mut self, step: &Step) -> Res<bool> {
        if let Some(r) = &self.readers {
            r.step(step.to_string());
        }
        let ran = match step {
            Step::Open(_) | Step::FdWrite { .. } | Step::Close(_) => self.fd_step(step)?,
            s if s.is_history() => self.history_step(step)?,
            _ => self.fs_step(step)?,
        };
        if ran {
            self.check_live()?;
            self.check_fds()?;
        }
        self.check_readers()?;
        Ok(ran)
    }

    /// What the readers racing the steps got wrong, if anything.
    pub fn check_readers(&self) -> Res<()> {
        match self.readers.as_ref().and_then(|r| r.failure()) {
            Some(f) => fail("concurrent reader", f),
            None => Ok(()),
        }
    }

    /// How many times the readers racing the steps read the past.
    pub fn concurrent_reads(&self) -> u64 {
        self.readers.as_ref().map_or(0, |r| r.reads())
    }

    fn fs_step(&mut self, step: &Step) -> Res<bool> {
        let verdict = self.model.apply(step, &mut self.next_id);
        if verdict == Verdict::Skip {
            return Ok(false);
        }
        let got = self.do_fs(step);
        match (&verdict, &got) {
            (Verdict::Ok, Ok(())) => {}
            (Verdict::Errno(e), Err(err)) if err.raw_os_error() == Some(*e) => {}
            _ => return fail("op", format!("`{step}`: the model expects {verdict:?}, the mount answered {got:?}")),
        }
        self.collect_orphans();
        Ok(true)
    }

    fn collect_orphans(&mut self) {
        let dropped = self.model.gc();
        self.keep_held(dropped);
    }

    /// Of nodes dropped from the model, keeps those a descriptor holds.
    fn keep_held(&mut self, dropped: Vec<(u64, Node)>) {
        for (id, node) in dropped {
            if self.fds.iter().flatten().any(|h| h.node == id) {
                self.orphans.insert(id, node);
            }
        }
    }

    fn do_fs(&self, step: &Step) -> std::io::Result<()> {
        use rustix::fs::{AtFlags, CWD, RenameFlags, Timestamps, XattrFlags};
        match step {
            Step::Create { path, len, seed } => OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o644)
                .open(self.m(path))?
                .write_all(&gen_bytes(*seed, *len)),
            Step::Write { path, off, len, seed } => {
                OpenOptions::new().write(true).open(self.m(path))?.write_all_at(&gen_bytes(*seed, *len), *off)
            }
            Step::Append { path, len, seed } => {
                OpenOptions::new().append(true).open(self.m(path))?.write_all(&gen_bytes(*seed, *len))
            }
            Step::Trunc { path, len } => OpenOptions::new().write(true).open(self.m(path))?.set_len(*len),
            Step::Rename { from, to, flag } => {
                let flags = match flag {
                    Flag::Plain => return std::fs::rename(self.m(from), self.m(to)),
                    Flag::Exchange => RenameFlags::EXCHANGE,
                    Flag::NoReplace => RenameFlags::NOREPLACE,
                };
                rustix::fs::renameat_with(CWD, self.m(from), CWD, self.m(to), flags).map_err(io_err)
            }
            Step::Link { from, to } => std::fs::hard_link(self.m(from), self.m(to)),
            Step::Unlink(p) => std::fs::remove_file(self.m(p)),
            Step::Mkdir(p) => std::fs::DirBuilder::new().mode(0o755).create(self.m(p)),
            Step::Rmdir(p) => std::fs::remove_dir(self.m(p)),
            Step::RmRf(p) => {
                if std::fs::symlink_metadata(self.m(p))?.is_dir() {
                    std::fs::remove_dir_all(self.m(p))
                } else {
                    std::fs::remove_file(self.m(p))
                }
            }
            Step::Symlink { target, path } => std::os::unix::fs::symlink(target, self.m(path)),
            Step::Chmod { path, mode } => {
                std::fs::set_permissions(self.m(path), std::fs::Permissions::from_mode(*mode))
            }
            Step::Chown { path, uid, gid } => std::os::unix::fs::lchown(self.m(path), Some(*uid), Some(*gid)),
            Step::Utime { path, secs } => {
                let t = rustix::fs::Timespec { tv_sec: *secs, tv_nsec: 0 };
                let ts = Timestamps { last_access: t, last_modification: t };
                rustix::fs::utimensat(CWD, self.m(path), &ts, AtFlags::SYMLINK_NOFOLLOW).map_err(io_err)
            }
            Step::SetX { path, name, len, seed } => {
                rustix::fs::lsetxattr(self.m(path), xattr_name(*name), &gen_bytes(*seed, *len), XattrFlags::empty())
                    .map_err(io_err)
            }
            Step::RmX { path, name } => rustix::fs::lremovexattr(self.m(path), xattr_name(*name)).map_err(io_err),
            _ => unreachable!("not a file-system step: {step}"),
        }
    }

    fn node_of_fd(&mut self, node: u64) -> Option<&mut Node> {
        if self.model.nodes.contains_key(&node) { self.model.nodes.get_mut(&node) } else { self.orphans.get_mut(&node) }
    }

    fn fd_step(&mut self, step: &Step) -> Res<bool> {
        match step {
            Step::Open(p) => {
                let Some(slot) = self.fds.iter().position(|f| f.is_none()) else { return Ok(false) };
                if self.model.kind(p) != Some(Kind::File) {
                    return Ok(false);
                }
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(self.m(p))
                    .or_else(|e| fail("op", format!("`{step}`: {e}")))?;
                self.fds[slot] = Some(Held { file, node: self.model.entries[p] });
            }
            Step::FdWrite { slot, off, len, seed } => {
                let Some(Some(h)) = self.fds.get(*slot) else { return Ok(false) };
                let (data, node) = (gen_bytes(*seed, *len), h.node);
                h.file.write_all_at(&data, *off).or_else(|e| fail("op", format!("`{step}`: {e}")))?;
                let n = self.node_of_fd(node).expect("a held node is in the tree or an orphan");
                write_at(&mut n.data, *off, &data);
            }
            Step::Close(slot) => {
                if self.fds.get(*slot).is_none_or(|f| f.is_none()) {
                    return Ok(false);
                }
                self.fds[*slot] = None;
                self.forget_orphans();
            }
            _ => unreachable!(),
        }
        Ok(true)
    }

    fn forget_orphans(&mut self) {
        let held: BTreeSet<u64> = self.fds.iter().flatten().map(|h| h.node).collect();
        self.orphans.retain(|id, _| held.contains(id));
    }

    fn close_all(&mut self) {
        self.fds.iter_mut().for_each(|f| *f = None);
        self.orphans.clear();
    }

    fn history_step(&mut self, step: &Step) -> Res<bool> {
        match step {
            Step::Turn(id) => {
                let mut args = vec!["turn"];
                if let Some(id) = id {
                    args.extend(["--message-id", id.as_str()]);
                }
                let v = self.cli_json(&args)?;
                self.sealed(v["checkpoint"].as_i64(), self.model.clone(), "turn")?;
            }
            Step::Rewind(k) => {
                if !self.snaps.contains_key(k) {
                    return Ok(false);
                }
                self.rewind(*k)?;
            }
            Step::Undo => {
                let Some(s) = self.last_safety else { return Ok(false) };
                self.rewind(s)?;
            }
            Step::Restore { cp, path } => {
                if !self.snaps.contains_key(cp) || path.is_empty() {
                    return Ok(false);
                }
                let pre = self.model.clone();
                let target = self.m(path).to_string_lossy().into_owned();
                let cps = cp.to_string();
                let v = self.cli_json(&["restore", &cps, "--", &target])?;
                self.sealed(v["undo_checkpoint"].as_i64(), pre, "restore (before)")?;
                let k = self.snaps[cp].clone();
                let dropped = self.model.restore(&k, path, &mut self.next_id);
                self.keep_held(dropped);
                self.sealed(v["result_checkpoint"].as_i64(), self.model.clone(), "restore (after)")?;
            }
            Step::Remount => {
                let readers = self.readers.clone();
                let _gone = readers.as_ref().map(|r| r.unmounted());
                self.close_all();
                self.fx.unmount();
                self.remounted()?;
            }
            Step::KillRewind { to, at } => {
                if !self.snaps.contains_key(to) {
                    return Ok(false);
                }
                let readers = self.readers.clone();
                let _gone = readers.as_ref().map(|r| r.unmounted());
                self.kill_rewind(*to, *at)?;
            }
            Step::Kill => {
                let readers = self.readers.clone();
                let _gone = readers.as_ref().map(|r| r.unmounted());
                self.close_all();
                let pid = self.fx.daemon_pid();
                let p = rustix::process::Pid::from_raw(pid).expect("a daemon pid is positive");
                rustix::process::kill_process(p, rustix::process::Signal::KILL)
                    .or_else(|e| fail("kill", format!("kill -9 {pid}: {e}")))?;
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
                while Path::new(&format!("/proc/{pid}")).exists() {
                    if std::time::Instant::now() > deadline {
                        return fail("kill", format!("daemon {pid} still exists 20 s after kill -9"));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                // Detaches the dead mount.
                self.fx.unmount();
                self.remounted()?;
            }
            // Steps of the in-process tier (tests/history_engine.rs).
            Step::KillRestore { .. } | Step::Gc(_) | Step::Forget(_) | Step::Snapshot(_) | Step::Reset => {
                return Ok(false);
            }
            _ => unreachable!(),
        }
        self.check_history_state()?;
        Ok(true)
    }

    fn remounted(&mut self) -> Res<()> {
        self.fx.mount(false, &["--auto-turn", "0"]);
        let m = self.current_checkpoint()?;
        self.sealed(Some(m), self.model.clone(), "mount")?;
        Ok(())
    }

    fn check_new_diffs(&mut self) -> Res<()> {
        for n in std::mem::take(&mut self.new_cps) {
            self.check_diff(n)?;
        }
        Ok(())
    }

    fn rewind(&mut self, k: i64) -> Res<()> {
        let pre = self.model.clone();
        let v = self.cli_json(&["rewind", &k.to_string()])?;
        let s = self.sealed(v["safety_checkpoint"].as_i64(), pre.clone(), "rewind (safety)")?;
        self.model = self.snaps[&k].clone();
        let held: Vec<&Held> = self.fds.iter().flatten().collect();
        let nodes: Vec<u64> = held.iter().map(|h| h.node).collect();
        let mnt = self.fx.mnt.clone();
        reattach(&mut self.model, &pre, &mut self.orphans, &nodes, &mut self.next_id, |i, p| {
            let ino = held[i].file.metadata().map(|m| m.ino()).map_err(|e| format!("fstat: {e}"))?;
            Ok(std::fs::symlink_metadata(mnt.join(p)).map(|m| m.ino() == ino).unwrap_or(false))
        })
        .or_else(|e| fail("fd", e))?;
        self.sealed(v["result_checkpoint"].as_i64(), self.model.clone(), "rewind (result)")?;
        self.last_safety = Some(s);
        Ok(())
    }

    /// The live tree equals the model.
    pub fn check_live(&self) -> Res<()> {
        let got = observe_fs(&self.fx.mnt).or_else(|e| fail("live", format!("reading the mount: {e}")))?;
        let d = tree_diff(&self.model.observe(), &got, 12);
        if !d.is_empty() {
            return fail("live", format!("the mount differs from the model:\n    {}", d.join("\n    ")));
        }
        Ok(())
    }

    fn check_fds(&self) -> Res<()> {
        for (slot, h) in self.fds.iter().enumerate() {
            let Some(h) = h else { continue };
            let want = &self.model.nodes.get(&h.node).or_else(|| self.orphans.get(&h.node)).expect("held").data;
            let size = h.file.metadata().map(|m| m.len()).or_else(|e| fail("fd", format!("fstat: {e}")))?;
            let mut got = vec![0u8; want.len() + 1];
            let n = read_full_at(&h.file, &mut got).or_else(|e| fail("fd", format!("pread: {e}")))?;
            got.truncate(n);
            if let Some(wrong) = fd_mismatch(slot, size, &got, want) {
                return fail("fd", wrong);
            }
        }
        Ok(())
    }

    /// After every history step: every checkpoint's view equals
    /// its snapshot; now and then one through `show`, and `history` of a path.
    fn check_history_state(&mut self) -> Res<()> {
        self.checks += 1;
        for (n, snap) in &self.snaps {
            let root = self.fx.mnt.join(".rewindfs/checkpoints").join(n.to_string());
            let (got, inos) =
                observe_fs_inos(&root).or_else(|e| fail("view", format!("reading checkpoint {n}'s view: {e}")))?;
            let want = snap.observe();
            let d = tree_diff(&want, &got, 12);
            if !d.is_empty() {
                return fail(
                    "view",
                    format!(
                        "checkpoint {n}'s view differs from the model:\n    {}{}",
                        d.join("\n    "),
                        link_numbers(&root, &want, &inos)
                    ),
                );
            }
        }
        let mut rng = Rng(self.checks);
        if self.checks % 3 == 1 {
            let cps: Vec<i64> = self.snaps.keys().copied().collect();
            let k = *rng.pick(&cps).expect("checkpoint 0");
            self.check_show(k)?;
        }
        let mut all: BTreeSet<String> = BTreeSet::new();
        for s in self.snaps.values() {
            all.extend(s.entries.keys().cloned());
        }
        let all: Vec<String> = all.into_iter().collect();
        if let Some(p) = rng.pick(&all) {
            self.check_path_history(&p.clone())?;
        }
        self.check_new_diffs()
    }

    fn check_show(&self, k: i64) -> Res<()> {
        let dir = self.fx.dir.path().join(format!("show-{k}-{}", self.checks));
        std::fs::create_dir(&dir).or_else(|e| fail("show", e.to_string()))?;
        let d = dir.to_string_lossy().into_owned();
        self.cli_json(&["show", &k.to_string(), &d])?;
        let got = observe_fs(&dir);
        let out = self.fx.rewindfs(&["unmount", &d]);
        let got = got.or_else(|e| fail("show", format!("reading `show {k}`: {e}")))?;
        if !out.status.success() {
            return fail("show", format!("unmount of `show {k}` failed: {}", stderr(&out)));
        }
        let diff = tree_diff(&self.snaps[&k].observe(), &got, 12);
        if !diff.is_empty() {
            return fail("show", format!("`show {k}` differs from the model:\n    {}", diff.join("\n    ")));
        }
        Ok(())
    }

    /// `diff --json N-1 N` equals the model's diff (when both are known).
    fn check_diff(&self, n: i64) -> Res<()> {
        let Some(a) = self.snaps.get(&(n - 1)) else { return Ok(()) };
        let want = expected_diff(a, &self.snaps[&n]);
        let v = self.cli_json(&["diff", &(n - 1).to_string(), &n.to_string()])?;
        match diff_mismatch(&want, &v["changes"]) {
            Some(wrong) => fail("diff", format!("diff {} {n}: {wrong}", n - 1)),
            None => Ok(()),
        }
    }

    /// `history PATH` lists the turns whose changes (checkpoint to the next
    /// by number, or to the live tree) touched PATH.
    fn check_path_history(&self, p: &str) -> Res<()> {
        let want = expected_history(&self.snaps, &self.model, p);
        let target = self.m(p).to_string_lossy().into_owned();
        let v = self.cli_json(&["history", &target])?;
        match history_mismatch(&v, &want) {
            Some(wrong) => fail("history", format!("history {p}: {wrong}")),
            None => Ok(()),
        }
    }

    /// At the end of a sequence: `fsck` finds nothing wrong (every store
    /// made by ordinary use passes it), `log --json` lists
    /// exactly the checkpoints made, and (with `check_log`) each turn's
    /// statistics equal the model's diff from its checkpoint to the next.
    pub fn check_end(&self) -> Res<()> {
        self.check_readers()?;
        eprintln!("history_model: {} reads of the past raced the steps", self.concurrent_reads());
        self.check_fsck()?;
        let v = self.cli_json(&["log"])?;
        let rows = v.as_array().cloned().unwrap_or_default();
        match log_mismatch(&rows, &self.snaps, &self.model, self.opts.check_log) {
            Some((kind, wrong)) => fail(kind, wrong),
            None => Ok(()),
        }
    }

    /// `fsck` through the daemon: exit 0 and no problem listed. Its exit
    /// status for problems (6) is no CLI failure, so `cli_json` is not used.
    fn check_fsck(&self) -> Res<()> {
        let mp = self.mp();
        let out = self.fx.rewindfs(&["fsck", "-C", &mp, "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        let clean = v["problems"].as_array().is_some_and(|p| p.is_empty());
        if !out.status.success() || !clean {
            return fail(
                "fsck",
                format!(
                    "fsck of a store made by ordinary use found problems ({}): {}{}",
                    describe_status(&out),
                    stdout(&out).trim(),
                    stderr(&out).trim()
                ),
            );
        }
        Ok(())
    }

    /// A step the generator picks for the current state (mostly valid ones).
    pub fn gen_step(&mut self, rng: &mut Rng) -> Step {
        let sizes: Vec<usize> = (0..SLOTS)
            .map(|slot| {
                self.fds[slot]
                    .as_ref()
                    .and_then(|h| self.model.nodes.get(&h.node).or_else(|| self.orphans.get(&h.node)))
                    .map(|n| n.data.len())
                    .unwrap_or(0)
            })
            .collect();
        let snaps = &self.snaps;
        gen_step(rng, &self.model, snaps, &sizes, &mut self.turn_ids, |rng| kill_rewind::kill_step(snaps, rng))
    }
}

fn read_full_at(f: &File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        let k = f.read_at(&mut buf[n..], n as u64)?;
        if k == 0 {
            break;
        }
        n += k;
    }
    Ok(n)
}

/// What a directory tree shows (the root itself not included).
pub fn observe_fs(root: &Path) -> Result<SeenTree, String> {
    observe_fs_inos(root).map(|(t, _)| t)
}

/// As `observe_fs`, with the inode number each path showed.
fn observe_fs_inos(root: &Path) -> Result<(SeenTree, BTreeMap<String, u64>), String> {
    let mut t = SeenTree::new();
    let mut inos = BTreeMap::new();
    walk(root, "", &mut t, &mut inos)?;
    link_groups(&mut t, &inos);
    Ok((t, inos))
}

/// For a view that grouped hard links wrongly: the inode number of every
/// name the model says has several links, as the check's walk saw it (by
/// `lstat` after `readdir`) and as `lstat` and `readdir` (`d_ino`) see it
/// now, so a split says whether it held or was transient.
fn link_numbers(root: &Path, want: &SeenTree, seen: &BTreeMap<String, u64>) -> String {
    let mut out = Vec::new();
    for (p, w) in want.iter().filter(|(_, w)| w.kind != Kind::Dir && w.nlink > 1) {
        let now =
            std::fs::symlink_metadata(root.join(p)).map(|m| m.ino().to_string()).unwrap_or_else(|e| e.to_string());
        let name = Path::new(p).file_name().unwrap_or_default().to_owned();
        let dir = root.join(parent(p));
        let d_ino = std::fs::read_dir(&dir)
            .ok()
            .and_then(|rd| rd.flatten().find(|e| e.file_name() == name))
            .map(|e| std::os::unix::fs::DirEntryExt::ino(&e).to_string())
            .unwrap_or_else(|| "?".into());
        let group = w.link_of.as_deref().unwrap_or(p);
        out.push(format!(
            "{p} (model: same object as {group}): walk ino {}, lstat now {now}, d_ino now {d_ino}",
            seen.get(p).map(|i| i.to_string()).unwrap_or_else(|| "-".into())
        ));
    }
    if out.is_empty() {
        String::new()
    } else {
        format!("\n  inode numbers of linked names:\n    {}", out.join("\n    "))
    }
}

fn walk(root: &Path, rel: &str, t: &mut SeenTree, inos: &mut BTreeMap<String, u64>) -> Result<(), String> {
    let dir = root.join(rel);
    let rd = std::fs::read_dir(&dir).map_err(|e| format!("readdir {}: {e}", dir.display()))?;
    let mut names = Vec::new();
    for e in rd {
        let e = e.map_err(|e| format!("readdir {}: {e}", dir.display()))?;
        names.push(e.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    for name in names {
        let p = join(rel, &name);
        let full = root.join(&p);
        let md = std::fs::symlink_metadata(&full).map_err(|e| format!("lstat {p}: {e}"))?;
        let ft = md.file_type();
        let kind = if ft.is_dir() {
            Kind::Dir
        } else if ft.is_symlink() {
            Kind::Symlink
        } else {
            Kind::File
        };
        let data = match kind {
            Kind::File => std::fs::read(&full).map_err(|e| format!("read {p}: {e}"))?,
            Kind::Symlink => {
                use std::os::unix::ffi::OsStrExt;
                std::fs::read_link(&full).map_err(|e| format!("readlink {p}: {e}"))?.as_os_str().as_bytes().to_vec()
            }
            Kind::Dir => Vec::new(),
        };
        let xattrs = if kind == Kind::Symlink {
            BTreeMap::new()
        } else {
            user_xattrs(&full).map_err(|e| format!("xattrs of {p}: {e}"))?
        };
        inos.insert(p.clone(), md.ino());
        t.insert(
            p.clone(),
            Seen {
                kind,
                mode: md.mode() & 0o7777,
                uid: md.uid(),
                gid: md.gid(),
                size: if kind == Kind::Dir { 0 } else { md.len() },
                data,
                nlink: if kind == Kind::Dir { 0 } else { md.nlink() },
                link_of: None,
                xattrs,
            },
        );
        if kind == Kind::Dir {
            walk(root, &p, t, inos)?;
        }
    }
    Ok(())
}

fn user_xattrs(p: &Path) -> Result<BTreeMap<String, Vec<u8>>, rustix::io::Errno> {
    let mut buf = vec![0u8; 1 << 16];
    let n = rustix::fs::llistxattr(p, &mut buf[..])?;
    let mut out = BTreeMap::new();
    for name in buf[..n].split(|b| *b == 0).filter(|n| n.starts_with(b"user.")) {
        let name = String::from_utf8_lossy(name).into_owned();
        let mut v = vec![0u8; 1 << 16];
        let k = rustix::fs::lgetxattr(p, name.as_str(), &mut v[..])?;
        v.truncate(k);
        out.insert(name, v);
    }
    Ok(out)
}
