//! Issue 11: the world lock and the panic policy. History operations run
//! one at a time (a restore sent during a rewind runs after it; auto-turn
//! never seals inside a restore), a FUSE handler that panics costs one
//! request and not the mount, and a rewind that fails part-way leaves no
//! stale name in the kernel's cache.
//!
//! The races are made certain with the test hook
//! `REWINDFS_TEST_HOLD_FROZEN_MS` (compiled into `cargo test` builds only):
//! a rewind or restore holds its frozen tree that long after changing it.

mod common;

use common::*;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Mounted on `mnt` with the daemon environment `env` and `extra` arguments.
fn mount(extra: &[&str], env: &[(&str, &str)]) -> MountFixture {
    let mut fx = MountFixture::unmounted();
    fx.mount_with_env(false, extra, env);
    fx
}

/// `rewindfs ARGS -C MOUNT --json` on its own thread: (output, when it ended).
fn spawn_cli(fx: &MountFixture, args: &[&str]) -> std::thread::JoinHandle<Output> {
    let mp = fx.path().to_str().expect("utf-8 path").to_string();
    // `--json` before any `--`.
    let mut full: Vec<String> = vec![args[0].to_string(), "-C".into(), mp, "--json".into()];
    full.extend(args[1..].iter().map(|s| s.to_string()));
    let mut cmd = fx.command();
    cmd.args(&full);
    std::thread::spawn(move || run_with_timeout(&mut cmd, CHILD_TIMEOUT))
}

fn json_of(out: Output, what: &str) -> serde_json::Value {
    let out = check(out, what);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{what}: bad JSON ({e}): {}", stdout(&out)))
}

fn num(v: &serde_json::Value, key: &str) -> i64 {
    v[key].as_i64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

/// Reasons of every checkpoint, by number.
fn reasons(fx: &MountFixture) -> Vec<(i64, String)> {
    let log = fx.cli_json(&["log"]);
    log.as_array()
        .expect("log --json is an array")
        .iter()
        .map(|c| (num(c, "checkpoint"), c["reason"].as_str().unwrap_or_default().to_string()))
        .collect()
}

#[test]
fn a_restore_sent_during_a_rewind_runs_after_it_and_both_results_are_exact() {
    let fx = mount(&["--auto-turn", "0"], &[("REWINDFS_TEST_HOLD_FROZEN_MS", "1500")]);
    fx.sh("echo a0 > a && echo b0 > b && mkdir d && echo x > d/x");
    let k0 = fx.turn("m0");
    let c0 = fx.copy_tree("c0");
    fx.sh("echo a1 > a && echo b1 > b && echo new > d/new");
    let k1 = fx.turn("m1");
    fx.sh("echo a2 > a && echo b2 > b && rm -r d");
    fx.turn("m2");

    let rewind = spawn_cli(&fx, &["rewind", &k0.to_string()]);
    // The rewind holds its frozen tree 1.5 s: the restore arrives inside.
    std::thread::sleep(Duration::from_millis(500));
    let restore = spawn_cli(&fx, &["restore", &k1.to_string(), "--", "b"]);
    let rewind = json_of(rewind.join().expect("rewind thread"), "rewind");
    let restore = json_of(restore.join().expect("restore thread"), "restore");
    let (safety, rewound) = (num(&rewind, "safety_checkpoint"), num(&rewind, "result_checkpoint"));
    let (undo, restored) = (num(&restore, "undo_checkpoint"), num(&restore, "result_checkpoint"));
    assert!(
        rewound < undo,
        "the restore did not wait for the rewind: rewind sealed {safety}..{rewound}, restore {undo}..{restored}"
    );
    assert_eq!((rewound, restored), (safety + 1, undo + 1), "a checkpoint was sealed inside an operation");

    // The rewind's result is exactly checkpoint k0; the restore's is k0
    // with b as it was at k1, and so is the live tree.
    assert_same_tree(&c0, &fx.path().join(format!(".rewindfs/checkpoints/{rewound}")), "rewind result");
    let contents = |root: &Path| sh(root, "find . -path ./.rewindfs -prune -o -print | sort && cat a b d/x");
    assert_eq!(contents(fx.path()), ".\n./a\n./b\n./d\n./d/x\na0\nb1\nx\n");
    assert_eq!(contents(&fx.path().join(format!(".rewindfs/checkpoints/{restored}"))), contents(fx.path()));
}

#[test]
fn auto_turn_never_seals_a_checkpoint_inside_a_restore() {
    let mut fx = MountFixture::unmounted();
    std::fs::write(fx.ws.join("f"), "at mount\n").expect("write f");
    // Quiet after 0.3 s; the restore holds its frozen tree 2 s, long
    // enough for several auto-turn ticks.
    fx.mount_with_env(false, &["--auto-turn", "0.3"], &[("REWINDFS_TEST_HOLD_FROZEN_MS", "2000")]);
    fx.sh("echo changed > f");
    // Let auto-turn seal the change, so the restore starts from a quiet turn.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !reasons(&fx).iter().any(|(_, r)| r == "auto") {
        assert!(Instant::now() < deadline, "auto-turn sealed nothing: {:?}", reasons(&fx));
        std::thread::sleep(Duration::from_millis(100));
    }
    let v = json_of(spawn_cli(&fx, &["restore", "0", "--", "f"]).join().expect("restore thread"), "restore");
    let (undo, restored) = (num(&v, "undo_checkpoint"), num(&v, "result_checkpoint"));
    let inside: Vec<(i64, String)> = reasons(&fx).into_iter().filter(|(n, _)| *n > undo && *n < restored).collect();
    assert!(inside.is_empty(), "checkpoints sealed inside the restore ({undo}..{restored}): {inside:?}");
    assert_eq!(restored, undo + 1);
    assert_eq!(std::fs::read_to_string(fx.path().join("f")).expect("read f"), "at mount\n");
    let at_result = fx.path().join(format!(".rewindfs/checkpoints/{restored}/f"));
    assert_eq!(std::fs::read_to_string(at_result).expect("read f at the result"), "at mount\n");
}

#[test]
fn a_panicking_fuse_handler_costs_one_request_not_the_mount() {
    // Four worker threads (the default): twelve panics would have ended
    // every one of them three times over.
    let fx = mount(&["--threads", "4"], &[]);
    let started = Instant::now();
    for i in 0..12 {
        let out = run_with_timeout(
            Command::new("python3")
                .arg("-c")
                .arg(py_program(&format!(
                    "print(err(os.stat, 'rewindfs-test-panic'))\nopen('f{i}', 'w').write('{i}')\nprint(open('f{i}').read())"
                )))
                .current_dir(fx.path()),
            Duration::from_secs(20),
        );
        let out = stdout(&check(out, &format!("request after {i} panics")));
        assert_eq!(out, format!("{}\n{i}\n", libc::EIO), "after {i} panics");
    }
    assert!(started.elapsed() < Duration::from_secs(60));
    let log = std::fs::read_to_string(fx.store.join("daemon.log")).expect("daemon log");
    assert!(log.contains("FUSE lookup panicked"), "no log line names the operation:\n{log}");
    assert_eq!(fx.sh("ls | wc -l").trim(), "12");
}

/// Clears the immutable flag of a backing file, also when the test fails
/// (a temp dir with an immutable file cannot be removed).
struct Immutable<'a>(&'a Path);

impl Drop for Immutable<'_> {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(self.0).status();
    }
}

#[test]
fn a_rewind_that_fails_part_way_leaves_no_stale_name() {
    let fx = MountFixture::manual_turns();
    fx.sh("mkdir d");
    let k = fx.turn("m0");
    let names: Vec<String> =
        (1..=5).map(|i| format!("a{i}")).chain(["m".into()]).chain((1..=5).map(|i| format!("z{i}"))).collect();
    for n in &names {
        std::fs::write(fx.path().join("d").join(n), n).expect("create");
    }
    fx.turn("m1");
    // The kernel caches every name (for the 3,600 s cache timeout).
    for n in &names {
        assert!(fx.path().join("d").join(n).exists());
    }
    // A real reason for the rewind to stop part-way: `m` cannot be moved.
    let m = fx.ws.join("d/m");
    check(run_with_timeout(Command::new("chattr").arg("+i").arg(&m), CHILD_TIMEOUT), "chattr +i");
    let _unlock = Immutable(&m);
    let mp = fx.path().to_str().expect("utf-8").to_string();
    let out = fx.rewindfs(&["rewind", "-C", &mp, &k.to_string()]);
    assert!(!out.status.success(), "the rewind should fail on an immutable file: {}", stdout(&out));
    assert!(stderr(&out).contains("part-way"), "{}", stderr(&out));
    let mut moved = 0;
    for n in &names {
        let backing = fx.ws.join("d").join(n).exists();
        moved += usize::from(!backing);
        assert_eq!(
            fx.path().join("d").join(n).exists(),
            backing,
            "d/{n}: the mount's answer is stale (the backing tree {} it)",
            if backing { "has" } else { "no longer has" }
        );
    }
    assert!(moved > 0, "the rewind failed before moving anything: the test proves nothing");
}

#[test]
fn a_request_holding_a_directory_lock_does_not_deadlock_the_invalidation() {
    let fx = mount(&["--auto-turn", "0"], &[("REWINDFS_TEST_HOLD_FROZEN_MS", "1000")]);
    fx.sh("mkdir d && echo old > d/old");
    let k = fx.turn("m0");
    fx.sh("rm d/old && echo new > d/new");
    fx.turn("m1");
    let rewind = spawn_cli(&fx, &["rewind", &k.to_string()]);
    std::thread::sleep(Duration::from_millis(400));
    // The kernel holds d's lock while this create waits for the frozen
    // tree; expiring d/new needs that lock.
    let started = Instant::now();
    fx.sh("echo third > d/third");
    let v = json_of(rewind.join().expect("rewind thread"), "rewind");
    assert!(started.elapsed() < Duration::from_secs(30), "the create and the rewind took {:?}", started.elapsed());
    assert!(v["result_checkpoint"].is_i64());
    assert_eq!(fx.sh("ls d"), "old\nthird\n");
}
