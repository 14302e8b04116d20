//! Random damage to the store, through the real binary. One seed
//! drives a random mix of file writes and removals, turns, rewinds,
//! remounts, `log` and `diff`, and damage at random moments: a byte
//! flipped in a pack file, a pack cut short, a pack deleted, a byte of
//! `meta.sqlite` changed (with the store unmounted), `journal.log` cut
//! short after a `kill -9` of the daemon. The promise checked after every
//! step:
//! - every command either succeeds with right results, or exits non-zero
//!   with a message that names the damage ("corrupt", "damaged", "cannot be
//!   read", "missing", "truncated", or points to `fsck`); before any damage,
//!   every command succeeds;
//! - nothing reports success over damage: a rewind that succeeds leaves the
//!   live tree exactly the checkpoint's; a view's file reads either the
//!   bytes sealed or fails with EIO (never other bytes); `diff` that
//!   succeeds lists exactly the changes between the copies; an `unmount`
//!   that succeeds leaves the plain workspace equal to the live tree, and
//!   one that fails leaves only bytes the workspace once held;
//! - `fsck` exits non-zero after damage to a pack (which always holds
//!   records only) and names it; after other damage it answers;
//! - what was not damaged stays readable: before any damage no read fails.
//!
//! Environment: DAMAGE_SEED=N runs that seed only, DAMAGE_SEQUENCES=N adds
//! N random seeds, DAMAGE_STEPS=N steps per sequence (default 24),
//! DAMAGE_REPLAY='step; step; ...' replays a printed sequence.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::sequences::{self, guarded, listing};
use common::{MountFixture, Rng, describe_status, io_timeout, is_mounted, stderr, stdout};

/// File names: few, so that writes hit existing files.
const PATHS: [&str; 5] = ["a", "b", "c", "d", "e"];
const IO_LIMIT: Duration = Duration::from_secs(60);

/// Words one of which a failure's message must hold: it names the damage
/// or says where to look.
const NAMES_DAMAGE: [&str; 8] =
    ["corrupt", "damage", "cannot be read", "missing", "truncated", "fsck", "malformed", "not a database"];

type Res<T> = Result<T, String>;

/// The workspace's files: name -> bytes.
type Files = BTreeMap<String, Vec<u8>>;

#[derive(Clone, Debug, PartialEq)]
enum Step {
    Write {
        path: &'static str,
        len: usize,
        seed: u64,
    },
    Rm(&'static str),
    Turn,
    Rewind(i64),
    Log,
    Diff(i64, i64),
    Remount,
    /// Flips a byte of pack `pack` (modulo their number) at `at` millionths
    /// of its length.
    Flip {
        pack: usize,
        at: u64,
    },
    /// Cuts pack `pack` at `at` millionths of its length.
    CutPack {
        pack: usize,
        at: u64,
    },
    DeletePack(usize),
    /// Unmounts, changes a byte of meta.sqlite at `at` millionths, mounts.
    Meta {
        at: u64,
    },
    /// Kills the daemon, cuts journal.log at `at` millionths of its
    /// written bytes, mounts.
    KillCutLog {
        at: u64,
    },
}

impl Step {
    fn damages(&self) -> bool {
        matches!(
            self,
            Step::Flip { .. }
                | Step::CutPack { .. }
                | Step::DeletePack(_)
                | Step::Meta { .. }
                | Step::KillCutLog { .. }
        )
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Write { path, len, seed } => write!(f, "write {path} {len} {seed}"),
            Step::Rm(p) => write!(f, "rm {p}"),
            Step::Turn => write!(f, "turn"),
            Step::Rewind(k) => write!(f, "rewind {k}"),
            Step::Log => write!(f, "log"),
            Step::Diff(a, b) => write!(f, "diff {a} {b}"),
            Step::Remount => write!(f, "remount"),
            Step::Flip { pack, at } => write!(f, "flip {pack} {at}"),
            Step::CutPack { pack, at } => write!(f, "cutpack {pack} {at}"),
            Step::DeletePack(p) => write!(f, "deletepack {p}"),
            Step::Meta { at } => write!(f, "meta {at}"),
            Step::KillCutLog { at } => write!(f, "killcutlog {at}"),
        }
    }
}

fn parse(line: &str) -> Res<Step> {
    let w: Vec<&str> = line.split_whitespace().collect();
    let bad = || format!("cannot parse step {line:?}");
    let n = |i: usize| w.get(i).and_then(|x| x.parse::<u64>().ok()).ok_or_else(bad);
    let path = |i: usize| w.get(i).and_then(|x| PATHS.iter().find(|p| *p == x).copied()).ok_or_else(bad);
    Ok(match *w.first().ok_or_else(bad)? {
        "write" => Step::Write { path: path(1)?, len: n(2)? as usize, seed: n(3)? },
        "rm" => Step::Rm(path(1)?),
        "turn" => Step::Turn,
        "rewind" => Step::Rewind(n(1)? as i64),
        "log" => Step::Log,
        "diff" => Step::Diff(n(1)? as i64, n(2)? as i64),
        "remount" => Step::Remount,
        "flip" => Step::Flip { pack: n(1)? as usize, at: n(2)? },
        "cutpack" => Step::CutPack { pack: n(1)? as usize, at: n(2)? },
        "deletepack" => Step::DeletePack(n(1)? as usize),
        "meta" => Step::Meta { at: n(1)? },
        "killcutlog" => Step::KillCutLog { at: n(1)? },
        _ => return Err(bad()),
    })
}

/// Incompressible bytes (stored raw in the packs), a function of the seed.
fn bytes_of(seed: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    blake3::Hasher::new().update(&seed.to_le_bytes()).finalize_xof().fill(&mut out);
    out
}

/// A file of a tree as read: its bytes, or the errno reading gave.
type Seen = BTreeMap<String, Result<Vec<u8>, i32>>;

/// Reads every file under `root` (one level: the test makes no
/// directories), `.rewindfs` aside.
fn read_tree(root: &Path) -> Res<Seen> {
    let root = root.to_path_buf();
    io_timeout("reading a tree", IO_LIMIT, move || {
        let mut out = Seen::new();
        let rd = std::fs::read_dir(&root).map_err(|e| format!("readdir {}: {e}", root.display()))?;
        for e in rd {
            let e = e.map_err(|e| format!("readdir {}: {e}", root.display()))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name == ".rewindfs" {
                continue;
            }
            let got = std::fs::read(e.path()).map_err(|e| e.raw_os_error().unwrap_or(-1));
            out.insert(name, got);
        }
        Ok(out)
    })
}

/// `seen` is `files`, except that with `eio_ok` a file may fail with EIO.
fn compare(files: &Files, seen: &Seen, eio_ok: bool, what: &str) -> Res<()> {
    let names: BTreeSet<&String> = files.keys().chain(seen.keys()).collect();
    for name in names {
        match (files.get(name), seen.get(name)) {
            (Some(want), Some(Ok(got))) if want == got => {}
            (Some(_), Some(Err(e))) if eio_ok && *e == libc::EIO => {}
            (want, got) => {
                let show = |v: Option<&Vec<u8>>| v.map_or("absent".to_string(), |b| format!("{} bytes", b.len()));
                let got = match got {
                    None => "absent".to_string(),
                    Some(Ok(b)) => {
                        format!("{} bytes{}", b.len(), if b.iter().all(|x| *x == 0) { " of NUL" } else { "" })
                    }
                    Some(Err(e)) => format!("errno {e}"),
                };
                return Err(format!("{what}: {name} should be {}, is {got}", show(want)));
            }
        }
    }
    Ok(())
}

fn names_damage(msg: &str) -> bool {
    let lower = msg.to_lowercase();
    NAMES_DAMAGE.iter().any(|w| lower.contains(w))
}

struct Runner {
    fx: MountFixture,
    live: Files,
    /// Each checkpoint's files as sealed.
    snaps: BTreeMap<i64, Files>,
    /// A damage step has run.
    damaged: bool,
    /// The store can no longer be mounted (refused, with the right message):
    /// the sequence ends.
    refused: bool,
    /// Every version any file had, for "no invented bytes".
    versions: BTreeSet<Vec<u8>>,
    /// `fsck --repair` ran (after a refused mount); a second refusal ends
    /// the sequence.
    repaired: bool,
    /// Commands that failed naming the damage, reads that gave EIO.
    refusals: std::cell::Cell<u64>,
    eio: std::cell::Cell<u64>,
}

impl Runner {
    fn new() -> Res<Runner> {
        let mut fx = MountFixture::unmounted();
        // Damaged on purpose, step by step.
        fx.damaged();
        let mut live = Files::new();
        for (p, len) in [("a", 3000usize), ("b", 200_000)] {
            let data = bytes_of(len as u64, len);
            std::fs::write(fx.ws.join(p), &data).map_err(|e| e.to_string())?;
            live.insert(p.to_string(), data);
        }
        fx.mount(false, &["--auto-turn", "0"]);
        let mut r = Runner {
            fx,
            versions: live.values().cloned().collect(),
            live,
            snaps: BTreeMap::new(),
            damaged: false,
            refused: false,
            repaired: false,
            refusals: Default::default(),
            eio: Default::default(),
        };
        r.mounted()?;
        Ok(r)
    }

    fn mp(&self) -> String {
        self.fx.mnt.to_string_lossy().into_owned()
    }

    fn cli(&self, args: &[&str]) -> std::process::Output {
        self.fx.cli_output(args)
    }

    /// A command failed: allowed only after damage, exiting non-zero with a
    /// message naming it.
    fn failed(&self, what: &str, out: &std::process::Output) -> Res<()> {
        let err = stderr(out);
        if !self.damaged {
            return Err(format!("{what} failed with an undamaged store ({}): {err}", describe_status(out)));
        }
        if out.status.code() == Some(0) || !names_damage(&err) {
            let fsck = self.fx.rewindfs(&["fsck", "-C", &self.mp()]);
            return Err(format!(
                "{what} failed ({}) without naming the damage: {err}\nfsck then says ({}): {}{}",
                describe_status(out),
                describe_status(&fsck),
                stdout(&fsck),
                stderr(&fsck)
            ));
        }
        self.refusals.set(self.refusals.get() + 1);
        Ok(())
    }

    fn json(out: &std::process::Output) -> Res<serde_json::Value> {
        serde_json::from_slice(&out.stdout).map_err(|e| format!("bad JSON ({e}): {}", stdout(out)))
    }

    fn sealed(&mut self, n: i64, files: Files) -> Res<()> {
        if let Some(newest) = self.snaps.keys().next_back()
            && n <= *newest
        {
            return Err(format!("sealed checkpoint {n}, but {newest} was sealed before"));
        }
        self.snaps.insert(n, files);
        Ok(())
    }

    /// After a mount: its checkpoint is the live tree.
    fn mounted(&mut self) -> Res<()> {
        let v = self.cli(&["status"]);
        if !v.status.success() {
            return Err(format!("status after mount: {}", stderr(&v)));
        }
        let v = Self::json(&v)?;
        let v = if v.is_array() { v[0].clone() } else { v };
        let n = v["turn"].as_i64().ok_or_else(|| format!("no turn in {v}"))?;
        self.sealed(n, self.live.clone())
    }

    fn packs(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(self.fx.store.join("chunks/packs"))
            .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "pack")).collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    fn exec(&mut self, step: &Step) -> Res<bool> {
        if step.damages() {
            self.damaged = true;
        }
        match step {
            Step::Write { path, len, seed } => {
                let data = bytes_of(*seed, *len);
                let (p, d) = (self.fx.mnt.join(path), data.clone());
                io_timeout("write", IO_LIMIT, move || std::fs::write(p, d))
                    .map_err(|e| format!("writing {path}: {e}"))?;
                self.versions.insert(data.clone());
                self.live.insert(path.to_string(), data);
            }
            Step::Rm(path) => {
                if !self.live.contains_key(*path) {
                    return Ok(false);
                }
                let p = self.fx.mnt.join(path);
                io_timeout("rm", IO_LIMIT, move || std::fs::remove_file(p)).map_err(|e| format!("rm {path}: {e}"))?;
                self.live.remove(*path);
            }
            Step::Turn => {
                let out = self.cli(&["turn"]);
                if out.status.success() {
                    let n = Self::json(&out)?["checkpoint"].as_i64().ok_or("no checkpoint from turn")?;
                    self.sealed(n, self.live.clone())?;
                } else {
                    self.failed("turn", &out)?;
                }
            }
            Step::Rewind(k) => {
                let Some(target) = self.snaps.get(k).cloned() else { return Ok(false) };
                let out = self.cli(&["rewind", &k.to_string()]);
                if out.status.success() {
                    let v = Self::json(&out)?;
                    let s = v["safety_checkpoint"].as_i64().ok_or("no safety_checkpoint")?;
                    let r = v["result_checkpoint"].as_i64().ok_or("no result_checkpoint")?;
                    self.sealed(s, self.live.clone())?;
                    self.sealed(r, target.clone())?;
                    self.live = target;
                } else {
                    self.failed(&format!("rewind {k}"), &out)?;
                    // Refused before anything changed: the tree is as it was.
                    let seen = read_tree(&self.fx.mnt)?;
                    compare(&self.live, &seen, true, &format!("live tree after a refused rewind to {k}"))?;
                    // A safety checkpoint may have been sealed before the refusal.
                    self.adopt_unseen()?;
                }
            }
            Step::Log => {
                let out = self.cli(&["log"]);
                if out.status.success() {
                    let v = Self::json(&out)?;
                    let listed: BTreeSet<i64> = v
                        .as_array()
                        .map(|a| a.iter().filter_map(|c| c["checkpoint"].as_i64()).collect())
                        .unwrap_or_default();
                    let known: BTreeSet<i64> = self.snaps.keys().copied().collect();
                    if !known.is_subset(&listed) {
                        return Err(format!("log lists {listed:?}, missing some of {known:?}"));
                    }
                } else {
                    self.failed("log", &out)?;
                }
            }
            Step::Diff(a, b) => {
                let (Some(fa), Some(fb)) = (self.snaps.get(a), self.snaps.get(b)) else { return Ok(false) };
                let out = self.cli(&["diff", &a.to_string(), &b.to_string()]);
                if out.status.success() {
                    let v = Self::json(&out)?;
                    let got: BTreeSet<String> = v["changes"]
                        .as_array()
                        .map(|c| c.iter().filter_map(|c| c["path"].as_str().map(String::from)).collect())
                        .unwrap_or_default();
                    let names: BTreeSet<&String> = fa.keys().chain(fb.keys()).collect();
                    let want: BTreeSet<String> =
                        names.into_iter().filter(|n| fa.get(*n) != fb.get(*n)).cloned().collect();
                    if got != want {
                        return Err(format!("diff {a} {b} lists {got:?}, the copies differ in {want:?}"));
                    }
                } else {
                    self.failed(&format!("diff {a} {b}"), &out)?;
                }
            }
            Step::Remount => {
                self.unmount()?;
                self.mount()?;
            }
            Step::Flip { pack, at } | Step::CutPack { pack, at } => {
                let packs = self.packs();
                if packs.is_empty() {
                    return Ok(false);
                }
                let p = &packs[pack % packs.len()];
                let bytes = std::fs::read(p).map_err(|e| format!("reading {}: {e}", p.display()))?;
                let off = (bytes.len() as u64 * at / 1_000_000).min(bytes.len().saturating_sub(1) as u64);
                let f = std::fs::OpenOptions::new().write(true).open(p).map_err(|e| e.to_string())?;
                if let Step::Flip { .. } = step {
                    let b = bytes.get(off as usize).copied().ok_or("empty pack")?;
                    f.write_all_at(&[b ^ 0x5a], off).map_err(|e| e.to_string())?;
                } else {
                    f.set_len(off).map_err(|e| e.to_string())?;
                }
                self.fsck_names_damage(step)?;
            }
            Step::DeletePack(pack) => {
                let packs = self.packs();
                if packs.is_empty() {
                    return Ok(false);
                }
                std::fs::remove_file(&packs[pack % packs.len()]).map_err(|e| e.to_string())?;
                self.fsck_names_damage(step)?;
            }
            Step::Meta { at } => {
                self.unmount()?;
                if self.refused {
                    return Ok(true);
                }
                let db = self.fx.store.join("meta.sqlite");
                let bytes = std::fs::read(&db).map_err(|e| format!("reading {}: {e}", db.display()))?;
                let off = (bytes.len() as u64 * at / 1_000_000).min(bytes.len().saturating_sub(1) as u64);
                let f = std::fs::OpenOptions::new().write(true).open(&db).map_err(|e| e.to_string())?;
                f.write_all_at(&[bytes[off as usize] ^ 0x5a], off).map_err(|e| e.to_string())?;
                self.mount()?;
            }
            Step::KillCutLog { at } => {
                let pid = self.fx.daemon_pid();
                // SAFETY: kill has no memory preconditions.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                let until = Instant::now() + IO_LIMIT;
                while Path::new(&format!("/proc/{pid}")).exists() {
                    if Instant::now() > until {
                        return Err(format!("daemon {pid} did not die"));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                let log = self.fx.store.join("journal.log");
                if let Ok(bytes) = std::fs::read(&log) {
                    // The log is preallocated and ends in zeros: cut
                    // within what was written.
                    let written = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i as u64 + 1);
                    let f = std::fs::OpenOptions::new().write(true).open(&log).map_err(|e| e.to_string())?;
                    f.set_len(written * at / 1_000_000).map_err(|e| e.to_string())?;
                }
                let out = self.fx.rewindfs(&["unmount", &self.mp()]);
                if !out.status.success() {
                    return Err(format!("unmount of the dead mount: {}", stderr(&out)));
                }
                self.fx.forget_mount();
                self.mount()?;
            }
        }
        if !self.refused {
            self.check()?;
        }
        Ok(true)
    }

    /// Checkpoints `log` lists beyond the newest known one (a safety
    /// checkpoint sealed before a refusal): the live tree.
    fn adopt_unseen(&mut self) -> Res<()> {
        let out = self.cli(&["log"]);
        if !out.status.success() {
            return self.failed("log", &out);
        }
        let newest = self.snaps.keys().next_back().copied().unwrap_or(-1);
        let v = Self::json(&out)?;
        for n in v.as_array().into_iter().flatten().filter_map(|c| c["checkpoint"].as_i64()).filter(|n| *n > newest) {
            self.sealed(n, self.live.clone())?;
        }
        Ok(())
    }

    fn fsck_names_damage(&self, step: &Step) -> Res<()> {
        let out = self.fx.rewindfs(&["fsck", "-C", &self.mp(), "--json"]);
        let text = format!("{}{}", stdout(&out), stderr(&out));
        if out.status.success() {
            return Err(format!("fsck finds nothing after `{step}`: {text}"));
        }
        if !names_damage(&text) && !text.contains("\"problems\"") {
            return Err(format!("fsck after `{step}` ({}) does not name the damage: {text}", describe_status(&out)));
        }
        Ok(())
    }

    fn unmount(&mut self) -> Res<()> {
        let out = self.fx.rewindfs(&["unmount", &self.mp()]);
        let gone = !is_mounted(&self.fx.mnt);
        if out.status.success() {
            self.fx.forget_mount();
            if !gone {
                return Err("still mounted after a successful unmount".into());
            }
            let seen = read_tree(&self.fx.ws)?;
            return compare(&self.live, &seen, false, "plain workspace after a successful unmount");
        }
        self.failed("unmount", &out)?;
        if !gone {
            return Err(format!("a failed unmount kept the mount: {}", stderr(&out)));
        }
        self.fx.forget_mount();
        // Files put back as before a rewind: only bytes the workspace held.
        let seen = read_tree(&self.fx.ws)?;
        let mut live = Files::new();
        for (name, got) in seen {
            match got {
                Ok(b) if self.versions.contains(&b) => {
                    live.insert(name, b);
                }
                Ok(b) => return Err(format!("after a failed unmount, {name} holds {} bytes it never had", b.len())),
                Err(e) => return Err(format!("after a failed unmount, reading plain {name} gives errno {e}")),
            }
        }
        self.live = live;
        Ok(())
    }

    fn mount(&mut self) -> Res<()> {
        let (ws, mnt, store) =
            (self.fx.ws.to_string_lossy().into_owned(), self.mp(), self.fx.store.to_string_lossy().into_owned());
        let out = self.fx.rewindfs(&["mount", &ws, &mnt, "--store", &store, "--auto-turn", "0"]);
        if !out.status.success() {
            self.failed("mount", &out)?;
            if is_mounted(&self.fx.mnt) {
                return Err(format!("a refused mount left a mount: {}", stderr(&out)));
            }
            eprintln!("mount refused: {}", stderr(&out).trim());
            // The store is refused from now on: fsck says why.
            let out = self.fx.rewindfs(&["fsck", "--store", &store]);
            if out.status.success() {
                return Err(format!("the mount was refused but fsck finds nothing: {}", stdout(&out)));
            }
            let text = format!("{}{}", stdout(&out), stderr(&out));
            if out.status.code() != Some(6) || !names_damage(&text) {
                return Err(format!(
                    "fsck of a refused store ({}) does not name the damage: {text}",
                    describe_status(&out)
                ));
            }
            if self.repaired {
                self.refused = true;
                return Ok(());
            }
            // What a user does next: repair drops what is lost, and says so.
            let out = self.fx.rewindfs(&["fsck", "--store", &store, "--repair"]);
            let text = format!("{}{}", stdout(&out), stderr(&out));
            if !matches!(out.status.code(), Some(6) | Some(7)) {
                return Err(format!("fsck --repair of a refused store ({}): {text}", describe_status(&out)));
            }
            eprintln!("mount refused; fsck --repair said ({}): {text}", describe_status(&out));
            self.repaired = true;
            return self.mount();
        }
        self.fx.adopt_mount();
        self.mounted()
    }

    /// The live tree and every view: right, or EIO after damage.
    fn check(&self) -> Res<()> {
        let count = |seen: &Seen| seen.values().filter(|v| v.is_err()).count() as u64;
        let seen = read_tree(&self.fx.mnt)?;
        self.eio.set(self.eio.get() + count(&seen));
        compare(&self.live, &seen, self.damaged, "live tree")?;
        for (n, files) in &self.snaps {
            let root = self.fx.mnt.join(".rewindfs/checkpoints").join(n.to_string());
            match read_tree(&root) {
                Ok(seen) => {
                    self.eio.set(self.eio.get() + count(&seen));
                    compare(files, &seen, self.damaged, &format!("checkpoint {n}'s view"))?
                }
                Err(e) if self.damaged && e.contains("os error 5") => {}
                Err(e) => return Err(format!("checkpoint {n}'s view: {e}")),
            }
        }
        Ok(())
    }
}

fn gen_step(r: &Runner, rng: &mut Rng) -> Step {
    let path = PATHS[rng.below(PATHS.len() as u64) as usize];
    let cps: Vec<i64> = r.snaps.keys().copied().collect();
    let cp = |rng: &mut Rng| cps[rng.below(cps.len() as u64) as usize];
    let at = rng.below(1_000_000);
    match rng.below(100) {
        0..=24 => {
            let len = match rng.below(3) {
                0 => rng.below(2000),
                _ => 20_000 + rng.below(300_000),
            } as usize;
            Step::Write { path, len, seed: rng.below(1_000_000) }
        }
        25..=31 => Step::Rm(path),
        32..=46 => Step::Turn,
        47..=58 => Step::Rewind(cp(rng)),
        59..=62 => Step::Log,
        63..=68 => Step::Diff(cp(rng), cp(rng)),
        69..=75 => Step::Remount,
        76..=84 => Step::Flip { pack: rng.below(4) as usize, at },
        85..=89 => Step::CutPack { pack: rng.below(4) as usize, at },
        90..=92 => Step::DeletePack(rng.below(4) as usize),
        93..=94 => Step::Meta { at },
        _ => Step::KillCutLog { at },
    }
}

/// Runs `steps`, or (with `rng`) generates up to `n` of them: the steps
/// run and the failure.
fn run(mut rng: Option<Rng>, fixed: &[Step], n: usize) -> (Vec<Step>, Option<String>) {
    let mut steps = Vec::new();
    let mut runner = None;
    let res = guarded(
        || {
            let r = runner.insert(Runner::new()?);
            let mut tries = 0;
            while !r.refused && steps.len() < if rng.is_some() { n } else { fixed.len() } && tries < n.max(1) * 20 {
                tries += 1;
                let step = match &mut rng {
                    Some(rng) => gen_step(r, rng),
                    None => fixed[steps.len()].clone(),
                };
                steps.push(step.clone());
                let ran = r.exec(&step).map_err(|e| format!("step {} `{step}`: {e}", steps.len() - 1))?;
                if !ran && rng.is_some() {
                    steps.pop();
                }
            }
            if !r.refused {
                r.exec(&Step::Remount).map_err(|e| format!("at the end (remount): {e}"))?;
            }
            eprintln!(
                "{} steps, {} commands refused naming the damage, {} reads gave EIO{}",
                steps.len(),
                r.refusals.get(),
                r.eio.get(),
                if r.refused { ", the store was refused at the end" } else { "" }
            );
            Ok(())
        },
        |p| p,
    );
    drop(runner);
    (steps, res.err())
}

#[allow(dead_code)]
fn replay(lines: &[&str]) {
    common::require_fuse();
    let steps: Vec<Step> = lines.iter().map(|l| parse(l).unwrap_or_else(|e| panic!("{e}"))).collect();
    if let (_, Some(f)) = run(None, &steps, steps.len()) {
        panic!("{f}\nsequence:\n{}", listing(&steps));
    }
}

/// CI: a few fixed seeds (DAMAGE_SEQUENCES=N adds random ones). Each
/// failure is printed with its seed and as a replayable list of steps.
#[test]
fn random_damage_between_random_operations() {
    common::require_fuse();
    if let Some(lines) = sequences::replay_from_env("DAMAGE") {
        replay(&lines.iter().map(String::as_str).collect::<Vec<_>>());
        return;
    }
    let n = sequences::env_u64("DAMAGE_STEPS").unwrap_or(24) as usize;
    let seeds = sequences::seeds("DAMAGE", &[1, 2, 3, 4, 5]);
    let started = Instant::now();
    let (mut total, mut failures) = (0, Vec::new());
    for seed in &seeds {
        let (steps, failure) = run(Some(Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)), &[], n);
        total += steps.len();
        if let Some(f) = failure {
            let text = format!("DAMAGE_SEED={seed}: {f}\n{}", listing(&steps));
            eprintln!("{text}");
            failures.push(text);
        }
    }
    sequences::conclude("faults_damage", seeds.len(), total, "", &failures, started);
}

// Regression sequences (docs/fault-test-failures.md). The initial tree is
// `a` (3,000 bytes) and `b` (200,000); checkpoint 0 is the mount.

/// FD1 (seed 393924795): a pack cut short after the last seal, then the
/// daemon killed: the next mount dropped the lost chunks from the index,
/// and `diff` failed with "chunk ... is not in the store", a message that
/// named neither the damage nor `fsck`.
#[test]
fn a_chunk_lost_with_a_cut_pack_is_named_as_damage() {
    replay(&[
        "log",
        "write c 96125 779049",
        "killcutlog 230563",
        "diff 0 0",
        "rewind 1",
        "turn",
        "rm b",
        "meta 690080",
        "turn",
        "turn",
        "write c 1824 481934",
        "cutpack 1 767952",
        "killcutlog 728618",
        "turn",
        "write c 145410 256417",
        "diff 8 1",
    ]);
}

/// A byte flipped inside a value of a row of `objects`
/// (an object's file handle) keeps every page well formed, so `PRAGMA
/// quick_check` passes it; the mount took it, and the object's records no
/// longer matched its file. The mount's check compares each index with its
/// table (`PRAGMA integrity_check`): the handle's unique index disagrees,
/// and the mount is refused, naming `fsck`, which reports it too.
#[test]
fn a_byte_flipped_in_a_row_value_of_the_objects_table_is_refused_at_mount() {
    let mut fx = MountFixture::unmounted();
    common::sh(&fx.ws, "echo one > a && echo two > b");
    fx.mount(false, &["--auto-turn", "0"]);
    fx.sh("echo more >> a && mv b c");
    fx.turn("t1");
    fx.unmount();
    let db = fx.store.join("meta.sqlite");
    let sql = |q: &str| common::sh(fx.dir.path(), &format!("sqlite3 '{}' \"{q}\"", db.display())).trim().to_string();
    // Everything in the main file, as a daemon leaves it after a clean unmount.
    sql("PRAGMA wal_checkpoint(TRUNCATE)");
    let handle = sql("SELECT hex(handle) FROM objects WHERE handle IS NOT NULL ORDER BY id DESC LIMIT 1");
    let handle: Vec<u8> = (0..handle.len() / 2)
        .map(|i| u8::from_str_radix(&handle[2 * i..2 * i + 2], 16).expect("hex from sqlite3"))
        .collect();
    assert!(handle.len() >= 8, "a file handle: {handle:?}");
    let page: usize = sql("PRAGMA page_size").parse().expect("page size");
    let root: usize = sql("SELECT rootpage FROM sqlite_master WHERE name = 'objects'").parse().expect("root page");
    assert_eq!(sql("SELECT COUNT(*) FROM objects").parse::<usize>().map(|n| n < 50), Ok(true), "one page of rows");
    let mut bytes = std::fs::read(&db).expect("read the database");
    let table = &bytes[(root - 1) * page..root * page];
    let at = (root - 1) * page
        + table.windows(handle.len()).position(|w| w == handle).expect("the handle in the objects table's page");
    bytes[at + handle.len() / 2] ^= 0x01;
    std::fs::write(&db, &bytes).expect("write the database");
    assert_eq!(sql("PRAGMA quick_check"), "ok", "the damage is inside a value, not in the page structure");

    let out = fx.rewindfs(&[
        "mount",
        fx.ws.to_str().expect("utf-8"),
        fx.mnt.to_str().expect("utf-8"),
        "--store",
        fx.store.to_str().expect("utf-8"),
    ]);
    if out.status.success() {
        fx.adopt_mount();
        panic!("mounted over a damaged objects table: {}", stdout(&out));
    }
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{}", describe_status(&out));
    assert!(err.contains("rewindfs fsck --store") && err.contains("damaged"), "the refusal: {err}");
    assert!(!is_mounted(&fx.mnt), "nothing is mounted");
    let fsck = fx.rewindfs(&["fsck", "--store", fx.store.to_str().expect("utf-8")]);
    assert!(!fsck.status.success(), "fsck must fail: {}", describe_status(&fsck));
    let text = format!("{}{}", stdout(&fsck), stderr(&fsck));
    assert!(text.contains("meta.sqlite is damaged"), "fsck does not report it: {text}");
}

/// A value that no index holds, changed to one that
/// cannot be (a pre-image's kind or size, a reference to an object that
/// does not exist). Every page and index stays consistent, so `PRAGMA
/// integrity_check` passes it, and the mount took it: views then showed a
/// file as another kind of thing, or failed far from the cause. The mount
/// checks such values (one aggregate query per table) and refuses, naming
/// the record and `fsck`, which reports it too. The sound database mounts.
#[test]
fn an_impossible_value_in_a_record_is_refused_at_mount_and_named_by_fsck() {
    let mut fx = MountFixture::unmounted();
    common::sh(&fx.ws, "echo one > a && echo two > b && mkdir d");
    fx.mount(false, &["--auto-turn", "0"]);
    fx.sh("echo more >> a && chmod 600 b && mv b d/c");
    fx.turn("t1");
    fx.unmount();
    let db = fx.store.join("meta.sqlite");
    let sql = |q: &str| common::sh(fx.dir.path(), &format!("sqlite3 '{}' \"{q}\"", db.display())).trim().to_string();
    // Everything in the main file, as a daemon leaves it after a clean unmount.
    sql("PRAGMA wal_checkpoint(TRUNCATE)");
    let sound = std::fs::read(&db).expect("read the database");
    let first_record = "(SELECT turn FROM object_pre ORDER BY turn, object LIMIT 1) AND object = \
                        (SELECT object FROM object_pre ORDER BY turn, object LIMIT 1)";
    let cases = [
        ("kind", format!("UPDATE object_pre SET kind = 9 WHERE turn = {first_record}"), "its kind is not a kind"),
        ("size", format!("UPDATE object_pre SET size = -5 WHERE turn = {first_record}"), "its size is negative"),
        (
            "target",
            "UPDATE entry_pre SET target = 1000000 WHERE target IS NOT NULL".to_string(),
            "it names an object that does not exist",
        ),
    ];
    let store = fx.store.to_str().expect("utf-8").to_string();
    for (what, update, said) in cases {
        std::fs::write(&db, &sound).expect("put the sound database back");
        sql(&update);
        assert_eq!(sql("PRAGMA integrity_check"), "ok", "{what}: the damage is a value, not the structure");
        let out =
            fx.rewindfs(&["mount", fx.ws.to_str().expect("utf-8"), fx.mnt.to_str().expect("utf-8"), "--store", &store]);
        if out.status.success() {
            fx.adopt_mount();
            panic!("mounted over an impossible {what}: {}", stdout(&out));
        }
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{what}: {}", describe_status(&out));
        assert!(err.contains("rewindfs fsck --store") && err.contains(said), "{what}: the refusal: {err}");
        assert!(!is_mounted(&fx.mnt), "nothing is mounted");
        let fsck = fx.rewindfs(&["fsck", "--store", &store]);
        assert!(!fsck.status.success(), "{what}: fsck must fail: {}", describe_status(&fsck));
        let text = format!("{}{}", stdout(&fsck), stderr(&fsck));
        assert!(text.contains(said), "{what}: fsck does not report it: {text}");
    }
    std::fs::write(&db, &sound).expect("put the sound database back");
    fx.mount(false, &["--auto-turn", "0"]);
    assert_eq!(std::fs::read_to_string(fx.path().join("d/c")).expect("d/c"), "two\n");
}
