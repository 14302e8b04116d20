//! The daemon killed (SIGKILL) in the middle of a rewind,
//! a restore, a settle and a turn. The kill points are deterministic (the
//! `test-hooks` feature: `REWINDFS_TEST_KILL_AT=POINT:N` kills the daemon
//! the N-th time it reaches POINT, e.g. after the N-th record a rewind
//! writes), plus one kill at a time chosen by the clock. After each, the
//! dead mount is detached and the workspace mounted again; then:
//! - the live tree is what the interrupted command asked for (the next
//!   mount completes a rewind or restore it finds interrupted), exactly;
//! - the mount's message and `status` say what was recovered;
//! - every checkpoint's view equals the copy taken when it was sealed, and
//!   the checkpoint of the half-changed tree reads back whole;
//! - `log`, `diff`, `history` and `rewind --dry-run` work, and so does the
//!   next rewind (the undo).

mod common;

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use common::*;

const ARGS: &[&str] = &["--auto-turn", "0"];

/// A mount with manual turns, and the copy of every checkpoint sealed.
struct Case {
    h: common::copied::CopiedHistory,
    /// Manifests of the copies (they never change), by path.
    manifests: RefCell<HashMap<PathBuf, String>>,
    /// Checkpoints whose views were checked since they were sealed.
    checked: RefCell<BTreeSet<i64>>,
}

impl std::ops::Deref for Case {
    type Target = common::copied::CopiedHistory;
    fn deref(&self) -> &Self::Target {
        &self.h
    }
}

impl std::ops::DerefMut for Case {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.h
    }
}

impl Case {
    /// `setup` runs in the plain workspace; checkpoint 0 is its tree.
    fn new(setup: &str) -> Case {
        Case {
            h: common::copied::CopiedHistory::new(setup, ARGS),
            manifests: RefCell::new(HashMap::new()),
            checked: RefCell::new(BTreeSet::new()),
        }
    }

    fn mp(&self) -> String {
        self.fx.path().to_str().expect("utf-8 path").to_string()
    }

    /// The newest checkpoint.
    fn newest(&self) -> i64 {
        let log = self.fx.cli_json(&["log"]);
        log.as_array().and_then(|a| a.last()).and_then(|c| c["checkpoint"].as_i64()).expect("a checkpoint in log")
    }

    /// Unmounts and mounts again with `env` for the daemon.
    fn remount_with(&mut self, env: &[(&str, &str)]) {
        self.fx.unmount();
        self.fx.mount_with_env(false, ARGS, env);
    }

    /// Runs `rewindfs ARGS -C MOUNT --json`, whose daemon is to die under
    /// it; waits until the daemon is gone and detaches the dead mount.
    fn killed(&mut self, args: &[&str]) -> Output {
        let pid = self.fx.status_json()["pid"].as_i64().expect("pid") as i32;
        let mp = self.mp();
        let mut full = vec![args[0], "-C", &mp, "--json"];
        full.extend_from_slice(&args[1..]);
        let out = self.fx.rewindfs(&full);
        self.detach_dead(pid);
        out
    }

    fn detach_dead(&mut self, pid: i32) {
        self.fx.detach_dead(pid);
    }

    /// Mounts again; returns the mount's stderr.
    fn remount(&mut self) -> String {
        stderr(&self.fx.mount_output(false, ARGS, &[]))
    }

    /// What `status --json` says was recovered at this mount.
    fn recovered(&self) -> Vec<serde_json::Value> {
        self.fx.status_json()["recovered"].as_array().cloned().unwrap_or_default()
    }

    /// `actual` is an exact copy of `expected` (see `common::manifest`).
    fn same_tree(&self, expected: &Path, actual: &Path, what: &str) {
        let e = self.manifests.borrow_mut().entry(expected.to_path_buf()).or_insert_with(|| manifest(expected)).clone();
        let a = manifest(actual);
        if e != a {
            // Names the differences.
            assert_same_tree(expected, actual, what);
            panic!("{what}: manifests differ:\n{e}\n---\n{a}");
        }
    }

    /// Every copied checkpoint's view not checked yet equals its copy;
    /// every checkpoint `log` lists is in `.rewindfs/checkpoints/`, and
    /// those without a copy read back whole.
    fn check_views(&self, when: &str) {
        for (n, copy) in &self.copies {
            if self.checked.borrow().contains(n) {
                continue;
            }
            let view = self.fx.path().join(format!(".rewindfs/checkpoints/{n}"));
            self.same_tree(copy, &view, &format!("{when}: view of checkpoint {n}"));
            self.checked.borrow_mut().insert(*n);
        }
        let listed = self.fx.sh("ls .rewindfs/checkpoints");
        let listed: Vec<i64> = listed.split_whitespace().filter_map(|s| s.parse().ok()).collect();
        let log = self.fx.cli_json(&["log"]);
        for c in log.as_array().expect("log is an array") {
            let n = c["checkpoint"].as_i64().expect("checkpoint");
            assert!(listed.contains(&n), "{when}: checkpoint {n} is missing from .rewindfs/checkpoints: {listed:?}");
            if !self.copies.contains_key(&n) && self.checked.borrow_mut().insert(n) {
                self.fx.sh(&format!(
                    "find .rewindfs/checkpoints/{n} -type f -print0 | xargs -0 -r cat > /dev/null && \
                     find .rewindfs/checkpoints/{n} > /dev/null"
                ));
            }
        }
    }

    /// `log`, `diff`, `history` and `rewind --dry-run` answer.
    fn check_commands(&self, from: i64, to: i64, path: &str) {
        let log = self.fx.cli_json(&["log"]);
        assert!(log.as_array().is_some_and(|a| !a.is_empty()), "log: {log}");
        let d = self.fx.cli_json(&["diff", &from.to_string(), &to.to_string()]);
        assert!(d["changes"].is_array(), "diff {from} {to}: {d}");
        let p = self.fx.path().join(path);
        let h = self.fx.cli_json(&["history", p.to_str().expect("utf-8")]);
        assert!(h.is_array(), "history {path}: {h}");
        let dry = self.fx.cli_json(&["rewind", &from.to_string(), "--dry-run"]);
        assert!(dry["changes"].is_array(), "rewind --dry-run {from}: {dry}");
    }

    /// Rewinds to `to` (must succeed) and checks the tree; returns the
    /// safety checkpoint and the time the daemon took.
    fn rewind(&mut self, to: i64) -> (i64, f64) {
        let (safety, v) = self.rewind_recorded(to);
        self.same_tree(&self.copies[&to], self.fx.path(), &format!("live tree after rewind to {to}"));
        (safety, v["elapsed_ms"].as_f64().unwrap_or(0.0))
    }
}

/// A workspace of 2 x `n` files, then a turn that changes ~2.9 x `n`
/// things: `n` files appended to (a rewind replaces their inodes and leaves
/// the old bytes pending), `n`/2 deleted, `n`/2 created, `n`/5 chmods, a
/// directory renamed and a new one with 3 x `n`/10 files.
fn many_changes(n: usize) -> (Case, i64, i64) {
    let mut c = Case::new(&format!(
        "mkdir -p a b c/sub && for i in $(seq 1 {n}); do echo \"a $i\" > a/f$i; echo \"b $i\" > b/f$i; done \
         && echo x > c/sub/x && head -c 300000 /dev/urandom > big",
    ));
    let c1 = c.turn();
    c.fx.sh(&format!(
        "for i in $(seq 1 {n}); do echo more >> a/f$i; done; for i in $(seq 1 {half}); do rm b/f$i; done; \
         for i in $(seq 1 {half}); do echo new > b/new$i; done; \
         for i in $(seq {kept} {chmod_end}); do chmod 600 b/f$i; done; mv c c2; mkdir d; \
         for i in $(seq 1 {d}); do echo g > d/g$i; done; echo tail >> big",
        half = n / 2,
        kept = n / 2 + 1,
        chmod_end = n / 2 + n / 5,
        d = 3 * n / 10,
    ));
    let c2 = c.turn();
    (c, c1, c2)
}

/// How the daemon dies.
#[derive(Clone, Copy, Debug)]
enum Kill {
    /// At a test hook's kill point (`POINT:N`).
    At(&'static str),
    /// By the clock, this long after the command started.
    After(Duration),
}

/// What became of an interrupted rewind.
struct Outcome {
    /// The mount found it half done and completed it.
    completed_at_mount: bool,
    /// Its safety checkpoint, if it was sealed (rewinding there undoes it).
    safety: Option<i64>,
}

/// One rewind to `c1` whose daemon is killed, checked after the next mount.
fn interrupted_rewind(c: &mut Case, c1: i64, kill: Kill) -> Outcome {
    if let Kill::At(point) = kill {
        c.remount_with(&[("REWINDFS_TEST_KILL_AT", point)]);
    }
    let before = c.copy();
    let newest = c.newest();
    let out = match kill {
        Kill::At(point) => {
            let out = c.killed(&["rewind", &c1.to_string()]);
            assert!(!out.status.success(), "rewind killed at {point} reported success: {}", stdout(&out));
            out
        }
        Kill::After(after) => {
            let pid = c.fx.status_json()["pid"].as_i64().expect("pid") as i32;
            let mp = c.mp();
            let mut cmd = c.fx.command();
            cmd.args(["rewind", "-C", &mp, "--json", &c1.to_string()]);
            cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
            let mut child = cmd.spawn().expect("rewind");
            std::thread::sleep(after);
            // SAFETY: kill has no memory preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let out = wait_child(&mut child, CHILD_TIMEOUT, "rewind");
            c.detach_dead(pid);
            out
        }
    };
    let said = c.remount();
    let recovered = c.recovered();
    let log = c.fx.cli_json(&["log"]);
    let cps: Vec<serde_json::Value> = log.as_array().cloned().unwrap_or_default();
    eprintln!("kill {kill:?}: rewind {} ({}); mount said: {said}", describe_status(&out), stderr(&out).trim());
    if !out.status.success() {
        let err = stderr(&out);
        assert!(err.contains("completed by the next mount"), "a killed rewind must say what happens next: {err}");
    }
    let safety = cps
        .iter()
        .filter(|v| v["checkpoint"].as_i64().is_some_and(|n| n > newest))
        .find(|v| {
            v["label"].as_str().is_some_and(|l| l.starts_with(&format!("safety checkpoint before rewind to {c1}")))
        })
        .and_then(|v| v["checkpoint"].as_i64());
    if let Some(s) = safety {
        c.copies.insert(s, before.clone());
    }
    if recovered.is_empty() {
        // Killed before the rewind began, or after its result was sealed:
        // the tree is the one before, or the one asked for.
        assert!(!said.contains("recovered"), "nothing recovered, yet the mount says: {said}");
        let result = cps
            .iter()
            .filter(|v| v["checkpoint"].as_i64().is_some_and(|n| n > newest))
            .find(|v| v["reason"] == "rewind" && v["parent"].as_i64() == Some(c1))
            .and_then(|v| v["checkpoint"].as_i64());
        let expected = match result {
            Some(r) => {
                let copy = c.copies[&c1].clone();
                c.copies.insert(r, copy);
                c.copies[&c1].clone()
            }
            None => before.clone(),
        };
        c.same_tree(&expected, c.fx.path(), "live tree after a kill outside the rewind's changes");
        c.check_views("after a kill outside the rewind's changes");
        return Outcome { completed_at_mount: false, safety };
    }
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    let r = &recovered[0];
    let undo = r["undo_checkpoint"].as_i64().expect("undo_checkpoint");
    let result = r["result_checkpoint"].as_i64().expect("result_checkpoint");
    let interrupted = r["interrupted_checkpoint"].as_i64().expect("interrupted_checkpoint");
    assert_eq!(r["op"], "rewind");
    assert_eq!(r["checkpoint"].as_i64(), Some(c1));
    assert_eq!(Some(undo), safety, "the undo checkpoint is the rewind's safety checkpoint: {r}");
    assert_eq!((interrupted, result), (undo + 1, undo + 2), "{r}");
    assert!(
        said.contains(&format!("recovered: the rewind to checkpoint {c1}"))
            && said.contains(&format!("result checkpoint {result}"))
            && said.contains(&format!("rewindfs rewind {undo}")),
        "the mount message does not say what was recovered: {said}"
    );
    let status = c.fx.cli(&["status"]);
    assert!(status.contains(&format!("recovered: the rewind to checkpoint {c1}")), "status: {status}");
    let rc = cps.iter().find(|v| v["checkpoint"].as_i64() == Some(result)).expect("result in log");
    assert_eq!((rc["reason"].as_str(), rc["parent"].as_i64()), (Some("rewind"), Some(c1)), "{rc}");
    let copy = c.copies[&c1].clone();
    c.copies.insert(result, copy);
    c.same_tree(&c.copies[&c1], c.fx.path(), "live tree after the interrupted rewind was completed");
    c.check_views("after the interrupted rewind was completed");
    c.check_commands(undo, result, "a/f1");
    Outcome { completed_at_mount: true, safety }
}

/// `kill -9` of the daemon at several points of a rewind of ~2,900
/// changes: after its first record, in the middle, late, and after its
/// result was sealed (the intent not yet cleared). Before intents the next
/// mount served the half-rewound tree and called the rest changes made
/// outside rewindfs. After each, the undo (a rewind) works.
#[test]
fn a_rewind_killed_part_way_is_completed_by_the_next_mount() {
    let (mut c, c1, c2) = many_changes(1000);
    for point in ["rewind-record:1", "rewind-record:1500", "rewind-record:4000", "rewind-sealed:1"] {
        let o = interrupted_rewind(&mut c, c1, Kill::At(point));
        assert_eq!(o.completed_at_mount, point != "rewind-sealed:1", "kill at {point}: completed at mount?");
        let safety = o.safety.unwrap_or_else(|| panic!("kill at {point}: no safety checkpoint"));
        c.rewind(safety);
    }
    // The views checked when they were sealed are still right after all
    // that (every view is checked once; these again).
    c.checked.borrow_mut().retain(|n| ![0, c1, c2].contains(n));
    c.check_views("at the end");
}

/// Killed while a rewind swaps a new inode in for a file whose content
/// changed: once the new inode has its temporary name, and once it took
/// the file's name (the old inode under the temporary one). Before, the
/// next mount took the new inode for an object changed outside rewindfs
/// (in the clock-timed test below, now and then), whose state at every
/// earlier checkpoint was then unknown: the rewind back to the safety
/// checkpoint was refused.
#[test]
fn a_rewind_killed_while_swapping_in_a_new_inode_is_completed_by_the_next_mount() {
    let (mut c, c1, _c2) = many_changes(40);
    for point in [
        "rewind-swap-named:1",
        "rewind-swapped:1",
        "rewind-swap-named:9",
        "rewind-swapped:7",
        "attic-noted:1",
        "attic-noted:8",
    ] {
        let o = interrupted_rewind(&mut c, c1, Kill::At(point));
        assert!(o.completed_at_mount, "kill at {point}: not completed at mount");
        let safety = o.safety.unwrap_or_else(|| panic!("kill at {point}: no safety checkpoint"));
        c.rewind(safety);
    }
}

/// Killed between noting that a deleted file moves into the attic and the
/// move: the file is still at its name, and the next mount must not take
/// it for one in the attic (the table named it so, and a rewind to the
/// checkpoint that had "new" skipped it, leaving "newer").
#[test]
fn a_delete_killed_before_its_move_into_the_attic_leaves_the_file_for_the_rewind() {
    let mut c = Case::new("echo old > a && echo keep > b");
    c.fx.sh("echo new > a");
    let c1 = c.turn();
    c.fx.sh("echo newer > a");
    let c2 = c.turn();
    c.remount_with(&[("REWINDFS_TEST_KILL_AT", "attic-noted:1")]);
    let pid = c.fx.status_json()["pid"].as_i64().expect("pid") as i32;
    let rm = std::process::Command::new("rm").arg(c.fx.path().join("a")).output().expect("rm");
    assert!(!rm.status.success(), "rm through a daemon killed before the move succeeded");
    c.detach_dead(pid);
    c.remount();
    assert_eq!(std::fs::read_to_string(c.fx.path().join("a")).expect("a is still at its name"), "newer\n");
    c.check_views("after the daemon died");
    c.rewind(c1);
    c.rewind(c2);
    c.fx.sh("rm a");
    c.rewind(c1);
}

/// Killed right after a file was created through the mount, whose birth
/// note may still wait for the next log write. The next mount finds an
/// object born in the last turn, not one changed outside rewindfs.
#[test]
fn a_file_created_just_before_the_daemon_died_is_not_an_outside_change() {
    let mut c = Case::new("echo a > a");
    let c1 = c.turn();
    c.fx.sh("echo b >> a && echo n > new");
    let pid = c.fx.status_json()["pid"].as_i64().expect("pid") as i32;
    // SAFETY: kill has no memory preconditions.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    c.detach_dead(pid);
    let said = c.remount();
    let log = c.fx.cli_json(&["log"]);
    let labels: Vec<String> =
        log.as_array().expect("log").iter().filter_map(|v| v["label"].as_str().map(str::to_string)).collect();
    assert!(
        !labels.iter().any(|l| l.contains("changed outside")),
        "a file created through the mount was taken for an outside change: {labels:?}; mount said {said}"
    );
    assert_eq!(std::fs::read_to_string(c.fx.path().join("new")).expect("new"), "n\n");
    c.check_views("after the daemon died");
    c.rewind(c1);
    assert!(!c.fx.path().join("new").exists(), "the rewind to {c1} left the file created after it");
}

/// The same, killed by the clock at several moments of a rewind of ~1,200
/// changes (its time measured first): whatever moment the kill lands on,
/// the next mount shows the tree before or the tree asked for, never a mix.
#[test]
fn a_rewind_killed_at_a_moment_chosen_by_the_clock_is_never_left_half_done() {
    let (mut c, c1, _c2) = many_changes(400);
    let (safety, ms) = c.rewind(c1);
    c.rewind(safety);
    eprintln!("a whole rewind took {ms:.1} ms in the daemon");
    let mut completed = 0;
    for frac in [0.2, 0.5] {
        // The CLI's own start and the safety seal come first.
        let after = Duration::from_micros((ms * 1000.0 * frac) as u64 + 15_000);
        let o = interrupted_rewind(&mut c, c1, Kill::After(after));
        completed += usize::from(o.completed_at_mount);
        if let Some(s) = o.safety {
            c.rewind(s);
        }
    }
    eprintln!("{completed} of 2 kills landed inside the rewind's changes");
}

/// `kill -9` at several points of a restore of a directory of 500 files
/// and a file: the next mount completes it (the paths as they were at the
/// checkpoint, the rest as before), says so, and every view reads back.
#[test]
fn a_restore_killed_part_way_is_completed_by_the_next_mount() {
    let mut c = Case::new(
        "mkdir d && for i in $(seq 1 400); do echo \"d $i\" > d/f$i; done && echo top > top && echo keep > keep",
    );
    let c1 = c.turn();
    c.fx.sh("for i in $(seq 1 400); do echo more >> d/f$i; done; rm d/f1??; \
         for i in $(seq 1 100); do echo n > d/n$i; done; echo changed > top; echo also > keep");
    c.turn();
    for point in ["restore-record:1", "restore-record:300", "restore-record:800"] {
        c.remount_with(&[("REWINDFS_TEST_KILL_AT", point)]);
        let before = c.copy();
        let (d, top) = (c.fx.path().join("d"), c.fx.path().join("top"));
        let out = c.killed(&["restore", &c1.to_string(), "--", d.to_str().unwrap(), top.to_str().unwrap()]);
        assert!(!out.status.success(), "restore killed at {point} reported success: {}", stdout(&out));
        assert!(stderr(&out).contains("completed by the next mount"), "{}", stderr(&out));
        let said = c.remount();
        let recovered = c.recovered();
        assert_eq!(recovered.len(), 1, "kill at {point}: recovered {recovered:?}; mount said {said}");
        let r = &recovered[0];
        assert_eq!((r["op"].as_str(), r["checkpoint"].as_i64()), (Some("restore"), Some(c1)), "{r}");
        assert_eq!(r["paths"], serde_json::json!(["d", "top"]), "{r}");
        let undo = r["undo_checkpoint"].as_i64().expect("undo_checkpoint");
        let result = r["result_checkpoint"].as_i64().expect("result_checkpoint");
        assert!(
            said.contains(&format!("recovered: the restore of d, top from checkpoint {c1}"))
                && said.contains(&format!("result checkpoint {result}")),
            "the mount message does not say what was recovered: {said}"
        );
        c.copies.insert(undo, before.clone());
        // The paths as at c1, everything else as before.
        let expected = c.fx.dir.path().join(format!("expected-{}", c.n));
        let c1_copy = c.copies[&c1].clone();
        sh(
            c.fx.dir.path(),
            &format!(
                "cp -a {b} {e} && rm -rf {e}/d {e}/top && cp -a {c}/d {c}/top {e}/",
                b = before.display(),
                e = expected.display(),
                c = c1_copy.display()
            ),
        );
        let d = tree_diff(&read_tree(&expected), &read_tree(c.fx.path()));
        assert!(d.is_empty(), "kill at {point}: the live tree is not the restored one:\n{}", d.join("\n"));
        let now = c.copy();
        c.copies.insert(result, now);
        c.check_views(&format!("after the restore killed at {point} was completed"));
        c.check_commands(undo, result, "top");
        // The next rewind works: back to the tree before the restore.
        c.rewind(undo);
    }
}

/// `kill -9` while the settler writes a rewound 64 MiB file: once its
/// bytes are written and before they are marked settled (a test hook), and
/// by the clock in the middle of the write. The next mount finishes the
/// settle; `log`, `diff`, `history`, `rewind --dry-run` and every view
/// (the rewind's result checkpoint too) work. Before, the settler's own
/// write was taken for a change made outside rewindfs.
#[test]
fn a_settle_killed_part_way_leaves_every_command_and_view_working() {
    let mut c = Case::new("head -c 64M /dev/urandom > big && echo small > small");
    let c1 = c.turn();
    c.fx.sh("dd if=/dev/urandom of=big bs=1M count=64 conv=notrunc status=none && echo changed > small");
    let c2 = c.turn();
    for kill in [Kill::At("settle-written:1"), Kill::After(Duration::from_millis(40))] {
        if let Kill::At(point) = kill {
            c.remount_with(&[("REWINDFS_TEST_KILL_AT", point)]);
        }
        let before = c.copy();
        let pid = c.fx.status_json()["pid"].as_i64().expect("pid") as i32;
        let v = c.fx.cli_json(&["rewind", &c1.to_string()]);
        let safety = v["safety_checkpoint"].as_i64().unwrap_or_else(|| panic!("no safety_checkpoint in {v}"));
        let result = v["result_checkpoint"].as_i64().unwrap_or_else(|| panic!("no result_checkpoint in {v}"));
        if let Kill::After(after) = kill {
            let pending = c.fx.status_json()["pending_files"].as_i64();
            std::thread::sleep(after);
            // SAFETY: kill has no memory preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            eprintln!("killed with {pending:?} files pending");
        }
        c.detach_dead(pid);
        c.copies.insert(safety, before);
        let copy = c.copies[&c1].clone();
        c.copies.insert(result, copy);
        let said = c.remount();
        assert!(!said.contains("recovered"), "the rewind was whole; the mount says: {said}");
        c.same_tree(&c.copies[&c1], c.fx.path(), &format!("live tree after a kill {kill:?} during the settle"));
        c.check_views(&format!("after a kill {kill:?} during the settle"));
        c.check_commands(safety, result, "big");
        c.fx.cli_json(&["rewind", &c2.to_string(), "--dry-run"]);
        c.rewind(safety);
    }
}

/// `kill -9` of the daemon while `turn` seals (its checkpoint committed,
/// the files open for writing not yet recorded again): `turn` fails and
/// says so, the checkpoint is there and equals the tree at the turn, and
/// the next turn and rewind work.
#[test]
fn a_turn_killed_while_sealing_loses_nothing() {
    let mut c = Case::new("echo a > a && mkdir d && echo b > d/b");
    c.turn();
    c.remount_with(&[("REWINDFS_TEST_KILL_AT", "seal-committed:1")]);
    c.fx.sh("echo more >> a && echo c > d/c && rm d/b");
    let at_turn = c.copy();
    let newest = c.newest();
    let out = c.killed(&["turn", "--message-id", "m-killed"]);
    assert!(!out.status.success(), "turn killed while sealing reported success: {}", stdout(&out));
    assert!(stderr(&out).contains("rewindfs:"), "{}", stderr(&out));
    let said = c.remount();
    assert!(!said.contains("recovered"), "{said}");
    let log = c.fx.cli_json(&["log"]);
    let sealed = log.as_array().unwrap().iter().find(|v| v["message_id"] == "m-killed").cloned();
    let sealed = sealed.unwrap_or_else(|| panic!("the committed checkpoint is not in log: {log}"));
    let n = sealed["checkpoint"].as_i64().expect("checkpoint");
    assert_eq!(n, newest + 1, "{log}");
    c.copies.insert(n, at_turn.clone());
    c.same_tree(&at_turn, c.fx.path(), "live tree after a kill during turn");
    c.check_views("after a kill during turn");
    c.check_commands(newest, n, "a");
    c.fx.sh("echo x > x");
    c.turn();
    c.rewind(n);
    c.check_views("after the next rewind");
}

/// A restore killed part-way whose completion needs content damaged since
/// (a byte flipped in the pack): the next mount cannot complete it and is
/// refused, naming `--abandon-interrupted`, and nothing is mounted. Before,
/// there was no way out: every mount was refused. With the flag, the
/// mount gives the restore up: the workspace is exactly as the kill left
/// it, sealed as the mount checkpoint labelled so, the mount message and
/// `status` say what was done, the safety checkpoint reads back and can be
/// rewound to, and a new restore of the damaged file is refused.
#[test]
fn an_interrupted_restore_that_cannot_be_completed_is_given_up_only_when_asked() {
    let mut c = Case::new(
        "mkdir d && for i in $(seq 1 200); do echo \"d $i\" > d/f$i; done && head -c 300000 /dev/urandom > big",
    );
    let c1 = c.turn();
    c.fx.sh("for i in $(seq 1 200); do echo more >> d/f$i; done; head -c 300000 /dev/urandom > big");
    c.turn();
    c.remount_with(&[("REWINDFS_TEST_KILL_AT", "restore-record:100")]);
    let before = c.copy();
    let newest = c.newest();
    let (d, big) = (c.fx.path().join("d"), c.fx.path().join("big"));
    let out = c.killed(&["restore", &c1.to_string(), "--", d.to_str().unwrap(), big.to_str().unwrap()]);
    assert!(!out.status.success(), "restore killed part-way reported success: {}", stdout(&out));
    // The tree as the kill left it, in the plain workspace (nothing mounted).
    let half = c.fx.dir.path().join("copies/half");
    check(
        run_with_timeout(std::process::Command::new("cp").arg("-a").arg(&c.fx.ws).arg(&half), CHILD_TIMEOUT),
        "cp -a of the plain workspace",
    );
    assert_ne!(manifest(&half), manifest(&before), "the kill left nothing half done");
    assert_ne!(manifest(&half.join("d")), manifest(&c.copies[&c1].join("d")), "the kill left nothing half done");
    // Damage big's content at c1: the completion needs it.
    c.fx.damaged();
    let old_big = std::fs::read(c.copies[&c1].join("big")).expect("read big at c1");
    let needle = &old_big[5000..5032];
    let mut flipped = 0;
    for entry in std::fs::read_dir(c.fx.store.join("chunks/packs")).expect("packs dir") {
        let p = entry.expect("pack entry").path();
        let mut bytes = std::fs::read(&p).expect("read pack");
        if let Some(at) = bytes.windows(needle.len()).position(|w| w == needle) {
            bytes[at + 3] ^= 0x20;
            std::fs::write(&p, bytes).expect("write pack");
            flipped += 1;
        }
    }
    assert_eq!(flipped, 1, "big's content at checkpoint {c1} is stored raw in one pack");
    let (ws, mnt, store) = (c.fx.ws.clone(), c.fx.mnt.clone(), c.fx.store.clone());
    let mount = |extra: &[&str]| {
        let mut args = vec![ws.to_str().unwrap(), mnt.to_str().unwrap(), "--store", store.to_str().unwrap()];
        args.extend_from_slice(ARGS);
        args.extend_from_slice(extra);
        let mut cmd = c.fx.command();
        cmd.arg("mount").args(&args);
        run_with_timeout(&mut cmd, CHILD_TIMEOUT)
    };
    // Without the flag: refused, twice (nothing changes in between).
    for attempt in 1..=2 {
        let out = mount(&[]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "mount #{attempt} of a stuck restore: {err}");
        assert!(
            err.contains(&format!("the restore of d, big from checkpoint {c1} was interrupted"))
                && err.contains("could not be completed at mount")
                && err.contains("--abandon-interrupted")
                && err.contains("fsck --store"),
            "mount #{attempt}: the refusal does not say what is stuck and what to do: {err}"
        );
        assert!(!is_mounted(&mnt), "mount #{attempt} was refused, yet {} is mounted", mnt.display());
    }
    c.same_tree(&half, &ws, "plain workspace after the refused mounts");
    // With it: mounted as it is.
    let out = mount(&["--abandon-interrupted"]);
    c.fx.adopt_mount();
    let said = stderr(&check(out, "mount --abandon-interrupted"));
    let recovered = c.recovered();
    assert_eq!(recovered.len(), 1, "{recovered:?}; mount said {said}");
    let r = &recovered[0];
    assert_eq!(
        (r["op"].as_str(), r["checkpoint"].as_i64(), r["abandoned"].as_bool()),
        (Some("restore"), Some(c1), Some(true))
    );
    let undo = r["undo_checkpoint"].as_i64().expect("undo_checkpoint");
    let kept = r["interrupted_checkpoint"].as_i64().expect("interrupted_checkpoint");
    assert_eq!(r["result_checkpoint"].as_i64(), Some(kept), "{r}");
    assert!(undo > newest && kept > undo, "{r}");
    assert!(
        said.contains(&format!("abandoned: the restore of d, big from checkpoint {c1}"))
            && said.contains(&format!("sealed as checkpoint {kept}"))
            && said.contains(&format!("Checkpoint {undo} is the tree before it"))
            && said.contains(&format!("`rewindfs restore {undo} -- d big` goes back to it")),
        "the mount message does not say what it did: {said}"
    );
    // The restore's temporary file, if the kill left one, stays and is named.
    let temporaries = sh(&half, "find . -name '.rewindfs-restore-*' -printf '%P\\n'");
    for t in temporaries.lines() {
        assert!(said.contains(&format!("temporary files were left in the tree too: {t}")), "{t}: {said}");
    }
    eprintln!("mount said: {said}");
    let status = c.fx.cli(&["status"]);
    assert!(status.contains(&format!("abandoned: the restore of d, big from checkpoint {c1}")), "status: {status}");
    c.same_tree(&half, c.fx.path(), "live tree after the restore was given up");
    let log = c.fx.cli_json(&["log"]);
    let label =
        log.as_array().unwrap().iter().find(|v| v["checkpoint"].as_i64() == Some(kept)).map(|v| v["label"].clone());
    assert!(
        label.as_ref().and_then(|l| l.as_str()).is_some_and(|l| l.contains("given up (--abandon-interrupted)")),
        "checkpoint {kept} is not labelled as the tree of a given-up restore: {label:?}"
    );
    c.copies.insert(undo, before);
    c.copies.insert(kept, half);
    // Checkpoints 0 and c1 hold the damaged content: their views give EIO.
    c.checked.borrow_mut().extend([0, c1]);
    c.check_views("after the restore was given up");
    // The damage is still named: restoring big again is refused.
    let out = c.fx.rewindfs(&["restore", "-C", &c.mp(), &c1.to_string(), "--", big.to_str().unwrap()]);
    assert!(!out.status.success(), "a restore of damaged content reported success: {}", stdout(&out));
    assert!(stderr(&out).contains("big"), "the refusal does not name the file: {}", stderr(&out));
    // The safety checkpoint is rewindable, and nothing is stuck any more.
    c.rewind(undo);
    c.fx.unmount();
    let said = c.remount();
    assert!(!said.contains("recovered") && !said.contains("abandoned"), "{said}");
}
