//! The world lock and the panic policy. History operations run
//! one at a time (a restore sent during a rewind runs after it; auto-turn
//! never seals inside a restore), a FUSE handler that panics costs one
//! request and not the mount, and a rewind that fails part-way leaves no
//! stale name in the kernel's cache.
//!
//! The races are made certain with the test hook
//! `REWINDFS_TEST_HOLD_FROZEN_MS` (compiled into `cargo test` builds only):
//! a rewind or restore holds its frozen tree that long after changing it,
//! and says so in the daemon's log.

mod common;

use common::*;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
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

/// Waits until the daemon holds a frozen tree for the test hook (its
/// log says so), so that what follows happens inside it.
fn wait_until_frozen(fx: &MountFixture) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let log = fx.store.join("daemon.log");
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("test hook: holding the frozen tree") {
        assert!(Instant::now() < deadline, "the daemon never held a frozen tree");
        std::thread::sleep(Duration::from_millis(10));
    }
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
    wait_until_frozen(&fx);
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

/// Failure policy: a background thread of the daemon that panics
/// (here the turn statistics, by a test hook) does not end in silence. The
/// mount turns read-only and says why: `status` shows the failure, a
/// change through the mount is refused (EROFS), a seal fails saying why,
/// and everything already recorded stays readable, views included, until
/// an unmount that still works.
#[test]
fn a_background_thread_that_panics_leaves_a_read_only_mount_that_says_why() {
    let mut fx = mount(&["--auto-turn", "0"], &[("REWINDFS_TEST_PANIC_IN", "turn-stats")]);
    fx.sh("echo one > f");
    let sealed = fx.turn("m1");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        let status = fx.status_json();
        if status["failure"].is_string() {
            break status;
        }
        assert!(Instant::now() < deadline, "the thread's panic never showed in status: {status}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let why = status["failure"].as_str().unwrap_or_default().to_string();
    assert!(why.contains("turn-stats") && why.contains("panics"), "status does not say what failed: {why}");
    let human = stdout(&check(fx.rewindfs(&["status", "-C", fx.path().to_str().expect("utf-8")]), "status"));
    assert!(human.contains("READ-ONLY"), "the human status does not say it: {human}");
    let write = std::fs::write(fx.path().join("f"), "two\n");
    assert_eq!(write.map_err(|e| e.raw_os_error()), Err(Some(libc::EROFS)), "a write after the failure");
    let create = std::fs::write(fx.path().join("g"), "new\n");
    assert_eq!(create.map_err(|e| e.raw_os_error()), Err(Some(libc::EROFS)), "a create after the failure");
    let turn = fx.cli_output(&["turn", "--message-id", "m2"]);
    assert!(!turn.status.success(), "a seal after the failure succeeded");
    assert!(stderr(&turn).contains("read-only"), "the refused seal does not say why: {}", stderr(&turn));
    assert_eq!(std::fs::read_to_string(fx.path().join("f")).expect("read f"), "one\n");
    let view = fx.path().join(format!(".rewindfs/checkpoints/{sealed}/f"));
    assert_eq!(std::fs::read_to_string(view).expect("read the view"), "one\n");
    fx.unmount();
    assert_eq!(std::fs::read_to_string(fx.ws.join("f")).expect("the workspace's f"), "one\n");
}

/// Failure policy: a lock a panic left held is not served from. A FUSE
/// request panics (by a test hook) while it holds the journal's state;
/// from then on nothing is built on that state: a change through the
/// mount is refused (EROFS), a view of the past (which reads the journal)
/// answers EIO, a seal fails and `status` says why, while live files stay
/// readable.
#[test]
fn a_panic_holding_the_journal_leaves_a_mount_that_refuses_what_needs_it() {
    let mut fx = mount(&["--auto-turn", "0"], &[]);
    fx.sh("echo one > f");
    let sealed = fx.turn("m1");
    let panicked = std::fs::metadata(fx.path().join("rewindfs-test-panic-in-journal"));
    assert_eq!(panicked.map(|_| ()).map_err(|e| e.raw_os_error()), Err(Some(libc::EIO)), "the hooked lookup");
    let write = std::fs::write(fx.path().join("f"), "two\n");
    assert_eq!(write.map_err(|e| e.raw_os_error()), Err(Some(libc::EROFS)), "a write after the panic");
    let create = std::fs::write(fx.path().join("g"), "new\n");
    assert_eq!(create.map_err(|e| e.raw_os_error()), Err(Some(libc::EROFS)), "a create after the panic");
    assert_eq!(std::fs::read_to_string(fx.path().join("f")).expect("read f"), "one\n");
    let view = std::fs::read_to_string(fx.path().join(format!(".rewindfs/checkpoints/{sealed}/f")));
    assert_eq!(view.map_err(|e| e.raw_os_error()), Err(Some(libc::EIO)), "a view read from the poisoned journal");
    let turn = fx.cli_output(&["turn", "--message-id", "m2"]);
    assert!(!turn.status.success(), "a seal after the panic succeeded");
    assert!(stderr(&turn).contains("half-changed"), "the refused seal does not say why: {}", stderr(&turn));
    // `status` still reports (it reads nothing from the journal's state)
    // and says why the mount is read-only. (Before, it failed.)
    let status = check(fx.rewindfs(&["status", "-C", fx.path().to_str().expect("utf-8")]), "status");
    let said = stdout(&status);
    assert!(
        said.contains("READ-ONLY:") && said.contains("journal's state was left half-changed"),
        "status does not say what failed: {said}"
    );
    assert!(said.contains("turn:        unknown"), "{said}");
    let json = fx.status_json();
    assert!(json["turn"].is_null() && json["failure"].is_string(), "{json}");
    fx.unmount();
    assert_eq!(std::fs::read_to_string(fx.ws.join("f")).expect("the workspace's f"), "one\n");
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
    // A process ready to create d/third, with everything else it needs
    // cached, so that its only request is the create, sent while the
    // kernel holds d's lock.
    let mut creator = Command::new("python3")
        .arg("-c")
        .arg("import os, sys\nos.chdir(sys.argv[1])\nos.stat('d')\nprint('ready', flush=True)\nsys.stdin.readline()\nopen('d/third', 'w').write('third')")
        .arg(fx.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("python3");
    let mut ready = String::new();
    let out = creator.stdout.take().expect("stdout");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut ready).expect("read the creator's output");
    assert_eq!(ready, "ready\n");
    let rewind = spawn_cli(&fx, &["rewind", &k.to_string()]);
    wait_until_frozen(&fx);
    let started = Instant::now();
    creator.stdin.take().expect("stdin").write_all(b"go\n").expect("start the create");
    check(wait_child(&mut creator, CHILD_TIMEOUT, "the create"), "the create");
    let v = json_of(rewind.join().expect("rewind thread"), "rewind");
    assert!(started.elapsed() < Duration::from_secs(30), "the create and the rewind took {:?}", started.elapsed());
    assert!(v["result_checkpoint"].is_i64());
    assert_eq!(fx.sh("ls d"), "old\nthird\n");
    // The path taken: the helper stalled on d's lock and the tree was
    // released for the create, then the helper finished.
    let log = std::fs::read_to_string(fx.store.join("daemon.log")).expect("daemon log");
    assert!(log.contains("invalidation stalled"), "the invalidation never waited for the create:\n{log}");
}

/// A small deterministic generator for the races' jitter (seeded, so a
/// failure names the iteration it happened in).
struct Jitter(u64);

impl Jitter {
    fn micros(&mut self, max: u64) -> Duration {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        Duration::from_micros((self.0 >> 33) % max)
    }
}

/// The bytes of file `n` in round `i`: a size and pattern of their own,
/// so a read that mixes two rounds, or is cut short, shows.
fn round_bytes(i: usize, n: usize) -> Vec<u8> {
    format!("round {i:06} file {n:02} ").repeat(30 + (i + n) % 13).into_bytes()
}

/// Spins until `deadline` (a sleep is too coarse to land a race inside a
/// window of microseconds).
fn spin_until(deadline: Instant) {
    while Instant::now() < deadline {
        std::hint::spin_loop();
    }
}

fn show_read(r: &std::io::Result<Vec<u8>>) -> String {
    match r {
        Ok(b) => format!("{} bytes: {:?}", b.len(), String::from_utf8_lossy(&b[..b.len().min(40)])),
        Err(e) => format!("error: {e}"),
    }
}

/// Files raced per checkpoint: each one's first overwrite after the seal is
/// the one whose pre-image is recorded, so each is one race for one seal.
const RACED_FILES: usize = 24;

/// A checkpoint view read while the live file is overwritten
/// through the mount gives the checkpoint's bytes and size, exactly, every
/// time; never EIO ("changed under the mount"), nothing, or the new bytes
/// (kept by the kernel's page cache for a second read). The view of each
/// new checkpoint is a new inode, so each round's first read of a file
/// reaches the daemon, in a race with the round's first overwrite of it.
#[test]
fn a_checkpoint_view_read_during_an_overwrite_gives_the_checkpoint_s_bytes() {
    let fx = mount(&["--auto-turn", "0"], &[]);
    let files: Vec<std::path::PathBuf> = (0..RACED_FILES).map(|n| fx.path().join(format!("f{n:02}"))).collect();
    for (n, f) in files.iter().enumerate() {
        std::fs::write(f, round_bytes(0, n)).expect("write f");
    }
    let mut jitter = Jitter(31);
    let started = Instant::now();
    let mut rounds = 0;
    while rounds < 2000 && started.elapsed() < Duration::from_secs(25) {
        let i = rounds;
        let checkpoint = fx.turn(&format!("r{i:06}"));
        let views: Vec<std::path::PathBuf> =
            (0..RACED_FILES).map(|n| fx.path().join(format!(".rewindfs/checkpoints/{checkpoint}/f{n:02}"))).collect();
        let go = Instant::now() + Duration::from_micros(300);
        let (reader_delay, writer_delay) = (jitter.micros(300), jitter.micros(300));
        let reader = {
            let views = views.clone();
            std::thread::spawn(move || {
                spin_until(go + reader_delay);
                views.iter().map(|v| (std::fs::metadata(v).map(|m| m.len()), std::fs::read(v))).collect::<Vec<_>>()
            })
        };
        spin_until(go + writer_delay);
        for (n, f) in files.iter().enumerate() {
            std::fs::write(f, round_bytes(i + 1, n)).expect("overwrite f");
        }
        let reads = reader.join().expect("reader thread");
        for (n, (size, read)) in reads.iter().enumerate() {
            let expected = round_bytes(i, n);
            assert!(
                matches!(read, Ok(b) if *b == expected) && matches!(size, Ok(s) if *s == expected.len() as u64),
                "round {i}: checkpoint {checkpoint}'s f{n:02}, read during an overwrite, gave size {size:?} \
                 and {} (expected {} bytes of round {i})",
                show_read(read),
                expected.len()
            );
            // Again, now that the overwrite is done: what the kernel kept.
            let again = std::fs::read(&views[n]);
            assert!(
                matches!(&again, Ok(b) if *b == expected),
                "round {i}: checkpoint {checkpoint}'s f{n:02} read again after the overwrite gave {}",
                show_read(&again)
            );
        }
        rounds += 1;
    }
    eprintln!("{rounds} rounds of {RACED_FILES} files in {:?}", started.elapsed());
    assert!(rounds >= 50, "only {rounds} rounds ran; the race was hardly tried");
}

/// The statistics a sealed turn stores are those of the turn,
/// whatever is written right after the seal. A turn removes one name of
/// each of a set of hard-linked files (or adds one back); right after its
/// seal, the other name of each is overwritten, while the daemon computes
/// the sealed turn's statistics in the background. The turn changed no
/// content: `log` must count its names only (`+0 ~0 -N`, or `+N ~0 -0`),
/// never the overwrite that came after.
#[test]
fn a_turn_s_stored_statistics_never_count_a_write_made_after_its_seal() {
    const LINKED: usize = 200;
    let fx = mount(&["--auto-turn", "0"], &[]);
    let (kept, extra): (Vec<_>, Vec<_>) =
        (0..LINKED).map(|n| (fx.path().join(format!("h{n:02}")), fx.path().join(format!("g{n:02}")))).unzip();
    for (n, (h, g)) in kept.iter().zip(&extra).enumerate() {
        std::fs::write(h, round_bytes(0, n)).expect("write h");
        std::fs::hard_link(h, g).expect("link g");
    }
    let mut before = fx.turn("setup");
    // (checkpoint, names added, names removed) of each linking turn.
    let mut linking_turns: Vec<(i64, usize, usize)> = Vec::new();
    let started = Instant::now();
    let mut round = 0;
    while round < 400 && started.elapsed() < Duration::from_secs(20) {
        round += 1;
        let linked = round % 2 == 0;
        for (h, g) in kept.iter().zip(&extra) {
            if linked {
                std::fs::hard_link(h, g).expect("link g again");
            } else {
                std::fs::remove_file(g).expect("remove g");
            }
        }
        fx.turn(&format!("links{round:04}"));
        for (n, h) in kept.iter().enumerate() {
            std::fs::write(h, round_bytes(round, n)).expect("overwrite h");
        }
        linking_turns.push((before, if linked { LINKED } else { 0 }, if linked { 0 } else { LINKED }));
        before = fx.turn(&format!("writes{round:04}"));
    }
    let log = fx.cli_json(&["log"]);
    let by_checkpoint: std::collections::HashMap<i64, &serde_json::Value> =
        log.as_array().expect("log --json is an array").iter().map(|c| (num(c, "checkpoint"), c)).collect();
    for (checkpoint, added, removed) in &linking_turns {
        let c = by_checkpoint.get(checkpoint).unwrap_or_else(|| panic!("checkpoint {checkpoint} is not in the log"));
        let counts = (num(c, "files_added"), num(c, "files_modified"), num(c, "files_deleted"));
        assert_eq!(
            counts,
            (*added as i64, 0, *removed as i64),
            "the turn after checkpoint {checkpoint} only linked or unlinked names; its statistics \
             (+added ~modified -deleted) counted a write made after its seal"
        );
    }
    eprintln!("{round} rounds of {LINKED} linked files in {:?}", started.elapsed());
    assert!(round >= 20, "only {round} rounds ran; the race was hardly tried");
}

/// The read-only mount of `rewindfs show` serves its requests as
/// ordinary operations of the live mount's world, as `.rewindfs/` does: a
/// view reads the live tree and the records, and a rewind changes both
/// while it holds the tree frozen, so a request that arrives meanwhile
/// waits for the rewind (before, it was answered at once, from a tree half
/// rewound), and then gives the checkpoint exactly.
#[test]
fn a_show_mount_waits_for_a_rewind_holding_the_tree_frozen() {
    let fx = mount(&["--auto-turn", "0"], &[("REWINDFS_TEST_HOLD_FROZEN_MS", "1500")]);
    fx.sh("echo a0 > a && mkdir d && for i in 1 2 3; do echo $i > d/f$i; done");
    let k0 = fx.turn("m0");
    fx.sh("echo a1 > a && echo new > d/new && rm d/f1");
    fx.turn("m1");
    let view = fx.dir.path().join("view");
    std::fs::create_dir(&view).expect("view mountpoint");
    let view_s = view.to_str().expect("utf-8 path").to_string();
    fx.cli_json(&["show", &k0.to_string(), &view_s]);
    let rewind = spawn_cli(&fx, &["rewind", &k0.to_string()]);
    wait_until_frozen(&fx);
    let frozen_at = Instant::now();
    // Names the view mount has not looked up yet: each reaches the daemon.
    let read = std::fs::read_to_string(view.join("d/f2"));
    let waited = frozen_at.elapsed();
    let listing = std::fs::read_dir(view.join("d")).map(|d| {
        let mut names: Vec<String> =
            d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    });
    json_of(rewind.join().expect("rewind thread"), "rewind");
    assert_eq!(read.as_deref().ok(), Some("2\n"), "checkpoint {k0}'s d/f2 through `show`");
    assert_eq!(
        listing.ok(),
        Some(vec!["f1".to_string(), "f2".into(), "f3".into()]),
        "checkpoint {k0}'s d through `show`"
    );
    assert!(
        waited >= Duration::from_millis(500),
        "a `show` mount answered in {waited:?} while a rewind held the tree frozen for 1.5 s"
    );
    check(fx.rewindfs(&["unmount", &view_s]), "unmount of the view");
}
