//! The command-line contract: mount, status, unmount, run, and the errors
//! a user gets for the mistakes they will make.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::{
    CHILD_TIMEOUT, MountFixture, check, describe_status, is_mounted, run_with_timeout, stderr, stdout, wait_child,
};

/// Exit statuses of docs/cli.md ("Exit status").
const FAILED: i32 = 1;
const USAGE: i32 = 2;
const NO_MOUNT: i32 = 3;
const BUSY: i32 = 4;
const REFUSED: i32 = 5;

/// Asserts a usage error: exit 2 and one `rewindfs: ...` line mentioning `needle`.
fn assert_usage_error(out: &Output, needle: &str) {
    assert_error(out, USAGE, needle)
}

/// Asserts exit `status` and one `rewindfs: ...` line mentioning `needle`.
fn assert_error(out: &Output, status: i32, needle: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(status), "expected exit {status} ({}); stderr: {err}", describe_status(out));
    assert!(err.starts_with("rewindfs: "), "error must start with 'rewindfs: ': {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "error must be one line: {err}");
    assert!(err.contains(needle), "error should mention {needle:?}: {err}");
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "gave up waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn process_alive(pid: i32) -> bool {
    // Zombies count as gone.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
        .unwrap_or(false)
}

#[test]
fn status_json_describes_the_mount() {
    let fx = MountFixture::new();
    let e = fx.status_json();
    assert_eq!(e["mountpoint"].as_str(), Some(s(&fx.mnt)));
    assert_eq!(e["workspace"].as_str(), Some(s(&fx.ws)));
    assert_eq!(e["store"].as_str(), Some(s(&fx.store)));
    let pid = e["pid"].as_i64().expect("pid") as i32;
    assert!(process_alive(pid), "daemon pid {pid} is not running");
}

#[test]
fn mounting_twice_is_refused() {
    let fx = MountFixture::new();
    let mnt2 = fx.dir.path().join("mnt2");
    std::fs::create_dir(&mnt2).unwrap();
    let store2 = fx.dir.path().join("store2");
    let out = fx.rewindfs(&["mount", s(&fx.ws), s(&mnt2), "--store", s(&store2)]);
    assert_error(&out, BUSY, "already");
    assert!(!is_mounted(&mnt2));

    // Same store, another workspace.
    let ws2 = fx.dir.path().join("ws2");
    std::fs::create_dir(&ws2).unwrap();
    let out = fx.rewindfs(&["mount", s(&ws2), s(&mnt2), "--store", s(&fx.store)]);
    assert_error(&out, BUSY, "store");
    assert!(!is_mounted(&mnt2));
    // The first mount still works.
    std::fs::write(fx.mnt.join("still"), "ok").unwrap();
}

#[test]
fn path_problems_are_usage_errors() {
    let fx = MountFixture::unmounted();
    let root = fx.dir.path();
    let out = fx.rewindfs(&["mount", s(&root.join("missing")), s(&fx.mnt), "--store", s(&fx.store)]);
    assert_usage_error(&out, "does not exist");

    std::fs::write(fx.mnt.join("occupant"), "x").unwrap();
    let out = fx.rewindfs(&["mount", s(&fx.ws), s(&fx.mnt), "--store", s(&fx.store)]);
    assert_usage_error(&out, "not an empty directory");
    std::fs::remove_file(fx.mnt.join("occupant")).unwrap();

    let inside = fx.ws.join("store");
    let out = fx.rewindfs(&["mount", s(&fx.ws), s(&fx.mnt), "--store", s(&inside)]);
    assert_usage_error(&out, "outside the workspace");

    let out = fx.rewindfs(&["mount", s(&fx.ws), s(&fx.ws.join("sub")), "--store", s(&fx.store)]);
    assert_eq!(out.status.code(), Some(2), "mountpoint inside the workspace: {}", stderr(&out));
    assert!(!is_mounted(&fx.mnt) && !is_mounted(&fx.ws));
}

#[test]
fn run_returns_status_and_leaves_an_ordinary_directory() {
    let fx = MountFixture::unmounted();
    std::fs::write(fx.ws.join("before"), "old").unwrap();
    let script = "grep -q ' rewindfs:' /proc/self/mountinfo && echo mounted > seen; cat before >> seen; echo new > after; exit 7";
    let out = fx.rewindfs(&["run", s(&fx.ws), "--store", s(&fx.store), "--", "sh", "-c", script]);
    assert_eq!(out.status.code(), Some(7), "run must exit with the command's status; stderr: {}", stderr(&out));
    assert!(!is_mounted(&fx.ws), "workspace still mounted after run");
    assert_eq!(std::fs::read_to_string(fx.ws.join("seen")).unwrap(), "mounted\nold");
    assert_eq!(std::fs::read_to_string(fx.ws.join("after")).unwrap(), "new\n");

    let out = fx.rewindfs(&["run", s(&fx.ws), "--store", s(&fx.store), "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn run_forwards_sigterm_and_unmounts() {
    let fx = MountFixture::unmounted();
    let mut cmd = fx.command();
    cmd.args(["run", s(&fx.ws), "--store", s(&fx.store), "--", "sh", "-c", "echo $$ > shpid; exec sleep 100"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn rewindfs run");
    let ws = fx.ws.clone();
    wait_until("the command started in the mounted workspace", || {
        is_mounted(&ws) && std::fs::metadata(ws.join("shpid")).is_ok_and(|m| m.len() > 0)
    });
    let cmd_pid: i32 = std::fs::read_to_string(fx.ws.join("shpid")).unwrap().trim().parse().unwrap();
    // SAFETY: kill has no memory preconditions.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = wait_child(&mut child, CHILD_TIMEOUT, "rewindfs run (after SIGTERM)");
    assert_eq!(
        out.status.code(),
        Some(128 + libc::SIGTERM),
        "run should exit with the command's status; stderr: {}",
        stderr(&out)
    );
    assert!(!process_alive(cmd_pid), "the command (pid {cmd_pid}) did not get the SIGTERM");
    assert!(!is_mounted(&fx.ws), "workspace still mounted after SIGTERM");
    assert!(fx.ws.join("shpid").exists(), "the command's file is not in the backing dir");
}

#[test]
fn unmount_detaches_a_dead_mount() {
    let mut fx = MountFixture::new();
    std::fs::write(fx.mnt.join("f"), "data").unwrap();
    let pid = fx.daemon_pid();
    // SAFETY: kill has no memory preconditions.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    wait_until("the daemon died", || !process_alive(pid));
    let err = std::fs::metadata(fx.mnt.join("f")).expect_err("a dead mount must not answer");
    // The kernel answers ECONNABORTED on the first request after the
    // daemon's death, ENOTCONN afterwards; over io_uring, a request queued
    // on a ring when the daemon died is cancelled (ECANCELED).
    assert!(matches!(err.raw_os_error(), Some(libc::ENOTCONN | libc::ECONNABORTED | libc::ECANCELED)), "{err}");
    let out = fx.rewindfs(&["unmount", s(&fx.mnt)]);
    assert_eq!(out.status.code(), Some(0), "unmount of a dead mount: {}", stderr(&out));
    fx.forget_mount();
    assert!(!is_mounted(&fx.mnt));
    assert_eq!(std::fs::read_to_string(fx.ws.join("f")).unwrap(), "data");
    // It can be mounted again.
    fx.mount(false, &[]);
    assert_eq!(std::fs::read_to_string(fx.mnt.join("f")).unwrap(), "data");
}

#[test]
fn in_place_writes_reach_the_backing_dir() {
    let mut fx = MountFixture::unmounted();
    std::fs::write(fx.ws.join("old"), "1").unwrap();
    fx.mount(true, &[]);
    assert!(is_mounted(&fx.ws));
    let e = fx.status_json();
    assert_eq!(e["in_place"].as_bool(), Some(true), "{e}");
    std::fs::write(fx.ws.join("new"), "2").unwrap();
    std::fs::remove_file(fx.ws.join("old")).unwrap();
    fx.unmount();
    assert_eq!(std::fs::read_to_string(fx.ws.join("new")).unwrap(), "2");
    assert!(!fx.ws.join("old").exists());
}

#[test]
fn unmount_of_something_not_mounted_fails_cleanly() {
    let fx = MountFixture::unmounted();
    let out = fx.rewindfs(&["unmount", s(&fx.mnt)]);
    assert_error(&out, NO_MOUNT, "not a rewindfs mount");
}

#[test]
fn commands_outside_a_mount_exit_with_no_mount() {
    let fx = MountFixture::unmounted();
    for args in [&["log", "-C", s(&fx.ws)][..], &["rewind", "-C", s(&fx.ws), "0"], &["status", "-C", s(&fx.mnt)]] {
        assert_error(&fx.rewindfs(args), NO_MOUNT, "not inside a rewindfs mount");
    }
    let mut cmd = fx.command();
    cmd.arg("log").current_dir(&fx.ws);
    let out = common::run_with_timeout(&mut cmd, CHILD_TIMEOUT);
    assert_error(&out, NO_MOUNT, "use -C");
}

#[test]
fn refused_requests_exit_with_the_status_of_their_kind() {
    let fx = MountFixture::manual_turns();
    std::fs::write(fx.mnt.join("a.txt"), "one\n").unwrap();
    fx.turn("m1");
    let mp = s(&fx.mnt);
    let view = fx.dir.path().join("view");
    std::fs::create_dir(&view).unwrap();
    // The daemon refuses an unknown checkpoint: a usage error, for every
    // command that takes one, and nothing happens.
    for args in [
        &["diff", "-C", mp, "nope"][..],
        &["rewind", "-C", mp, "nope"],
        &["rewind", "-C", mp, "--dry-run", "~99"],
        &["restore", "-C", mp, "nope", "--", "a.txt"],
        &["show", "-C", mp, "nope", s(&view)],
    ] {
        assert_error(&fx.rewindfs(args), USAGE, "unknown checkpoint");
    }
    let log = fx.cli_json(&["log"]);
    assert_eq!(log.as_array().map(|a| a.len()), Some(2), "a refused request sealed a checkpoint: {log}");
    // A path outside the mount, caught by the CLI.
    assert_error(&fx.rewindfs(&["history", "-C", mp, "/"]), USAGE, "not inside the mount");
}

#[test]
fn a_failing_operation_exits_1() {
    let mut fx = MountFixture::manual_turns();
    fx.damaged();
    std::fs::write(fx.mnt.join("a.txt"), "old line\n".repeat(100)).unwrap();
    fx.turn("m1");
    // The pre-image of a.txt goes into the chunk store.
    std::fs::write(fx.mnt.join("a.txt"), "new line\n".repeat(100)).unwrap();
    fx.turn("m2");
    let old = fx.cli(&["diff", "m1", "m2"]);
    assert!(old.contains("-old line"), "the diff should read the stored pre-image: {old}");
    // Damage every pack: the request is valid, reading the checkpoint fails.
    let packs = walk_files(&fx.store.join("chunks"));
    assert!(!packs.is_empty(), "no pack files in {}", fx.store.display());
    for p in &packs {
        let len = std::fs::metadata(p).unwrap().len() as usize;
        std::fs::OpenOptions::new().write(true).open(p).unwrap().write_all(&vec![0x5a; len]).unwrap();
    }
    let out = fx.rewindfs(&["diff", "-C", s(&fx.mnt), "m1", "m2"]);
    assert_error(&out, FAILED, "");
    assert!(stderr(&out).contains("cannot compute the diff"), "{}", stderr(&out));
}

/// ENOSPC in the middle of a rewind was reported as a usage error
/// (exit 2). The store lives on a small ext4 image, filled up before the
/// rewind, so the rewind cannot store the live content it moves aside.
#[test]
fn a_rewind_that_runs_out_of_space_exits_1() {
    let mut fx = MountFixture::unmounted();
    let img = fx.dir.path().join("store.img");
    common::check(
        common::run_with_timeout(std::process::Command::new("truncate").args(["-s", "32M", s(&img)]), CHILD_TIMEOUT),
        "truncate",
    );
    common::check(
        common::run_with_timeout(std::process::Command::new("mkfs.ext4").args(["-q", s(&img)]), CHILD_TIMEOUT),
        "mkfs.ext4",
    );
    common::check(
        common::run_with_timeout(
            std::process::Command::new("mount").args(["-o", "loop", s(&img), s(&fx.store)]),
            CHILD_TIMEOUT,
        ),
        "mount -o loop (are loop devices available?)",
    );
    let _store = LazyUnmount(fx.store.clone());
    fx.mount(false, &["--auto-turn", "0"]);
    fx.sh("head -c 2000000 /dev/urandom > big.bin");
    fx.turn("m1");
    // Not in the store: only its pre-image (the m1 content) is.
    fx.sh("head -c 2000000 /dev/urandom > big.bin");
    let filler = fx.store.join("filler");
    let _ = common::run_with_timeout(
        std::process::Command::new("dd").args(["if=/dev/zero", &format!("of={}", s(&filler)), "bs=64k"]),
        CHILD_TIMEOUT,
    );
    let before = std::fs::read(fx.mnt.join("big.bin")).expect("read big.bin");
    let out = fx.rewindfs(&["rewind", "-C", s(&fx.mnt), "m1"]);
    // Whichever write meets the full disk first (a chunk, or SQLite's),
    // the user reads the kernel's words, and the refused rewind changed nothing.
    assert_error(&out, FAILED, "No space left on device");
    assert!(std::fs::read(fx.mnt.join("big.bin")).expect("read big.bin") == before, "a refused rewind changed big.bin");
    std::fs::remove_file(&filler).unwrap();
    fx.unmount();
}

/// Lazily unmounts a filesystem the test mounted, however the test ends.
struct LazyUnmount(std::path::PathBuf);

impl Drop for LazyUnmount {
    fn drop(&mut self) {
        let _ = common::run_with_timeout(std::process::Command::new("umount").arg("-l").arg(&self.0), CHILD_TIMEOUT);
    }
}

fn walk_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk_files(&p));
        } else if p.metadata().is_ok_and(|m| m.len() > 0) {
            out.push(p);
        }
    }
    out
}

#[test]
fn another_user_is_refused_by_the_socket() {
    let fx = MountFixture::new();
    let (uid, gid) = common::test_user();
    let mut cmd = std::process::Command::new("setpriv");
    cmd.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg("--clear-groups")
        .arg(common::bin())
        .args(["log", "-C", s(&fx.mnt)])
        .env("REWINDFS_RUNTIME_DIR", &fx.run);
    let out = common::run_with_timeout(&mut cmd, CHILD_TIMEOUT);
    assert_error(&out, REFUSED, "Permission denied");
}

/// The fixture itself: a panicking test still unmounts.
#[test]
fn fixture_unmounts_when_a_test_panics() {
    let (tx, rx) = std::sync::mpsc::channel();
    let result = std::thread::spawn(move || {
        let fx = MountFixture::new();
        tx.send(fx.mnt.clone()).unwrap();
        panic!("deliberate panic inside a mounted test");
    })
    .join();
    assert!(result.is_err());
    let mnt = rx.recv().unwrap();
    assert!(!is_mounted(&mnt), "{} is still mounted after the test panicked", mnt.display());
}

/// The fixture itself: a stuck child fails the test instead of hanging it.
#[test]
#[should_panic(expected = "timed out")]
fn stuck_child_fails_the_test() {
    common::run_with_timeout(std::process::Command::new("sleep").arg("100"), Duration::from_secs(1));
}

#[test]
fn unmount_of_a_busy_mount_is_refused_then_lazy_works() {
    let mut fx = MountFixture::new();
    std::fs::write(fx.mnt.join("held"), "x").unwrap();
    let held = std::fs::File::open(fx.mnt.join("held")).unwrap();
    let out = fx.rewindfs(&["unmount", s(&fx.mnt)]);
    assert_error(&out, BUSY, "busy");
    assert!(is_mounted(&fx.mnt), "a refused unmount must leave the mount working");
    std::fs::write(fx.mnt.join("after"), "still works").unwrap();
    let pid = fx.daemon_pid();
    let out = fx.rewindfs(&["unmount", "--lazy", s(&fx.mnt)]);
    assert!(out.status.success(), "lazy unmount: {}", stderr(&out));
    fx.forget_mount();
    assert!(!is_mounted(&fx.mnt));
    // The open file still works until closed; then the daemon exits.
    let mut buf = String::new();
    std::io::Read::read_to_string(&mut &held, &mut buf).unwrap();
    assert_eq!(buf, "x");
    drop(held);
    wait_until("the daemon exited after the last file closed", || !process_alive(pid));
    assert_eq!(std::fs::read_to_string(fx.ws.join("after")).unwrap(), "still works");
}

#[test]
fn run_detaches_lazily_when_a_background_process_holds_the_mount() {
    let fx = MountFixture::unmounted();
    let pidfile = fx.dir.path().join("bgpid");
    let script = format!("echo data > held; sleep 300 < held > /dev/null 2>&1 & echo $! > {}; exit 5", s(&pidfile));
    let out = fx.rewindfs(&["run", s(&fx.ws), "--store", s(&fx.store), "--", "sh", "-c", &script]);
    let bg: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    let alive = process_alive(bg);
    // SAFETY: kill has no memory preconditions.
    unsafe { libc::kill(bg, libc::SIGKILL) };
    assert!(alive, "the background process should still have been running");
    assert_eq!(out.status.code(), Some(5), "run must exit with the command's status; stderr: {}", stderr(&out));
    assert!(stderr(&out).contains("lazily"), "run should say it detached lazily: {}", stderr(&out));
    wait_until("the lazily detached mount is gone", || !is_mounted(&fx.ws));
    assert_eq!(std::fs::read_to_string(fx.ws.join("held")).unwrap(), "data\n");
}

#[test]
fn a_new_store_s_directories_are_private_to_their_owner_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let mut fx = MountFixture::unmounted();
    // rewindfs creates the store itself; the daemon runs with umask 0.
    std::fs::remove_dir(&fx.store).expect("remove the fixture's store dir");
    fx.mount(false, &[]);
    fx.sh("echo x > f && rm f");
    for dir in [fx.store.clone(), fx.store.join("chunks"), fx.store.join("chunks/packs"), fx.store.join("attic")] {
        let mode = std::fs::metadata(&dir).expect("store directory").permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700, "{} has mode {mode:o}", dir.display());
    }
}

/// A reader that stops reading (`rewindfs log | head -1`) ends the command
/// quietly, with the status of a program killed by SIGPIPE; it was a Rust
/// panic ("failed printing to stdout: Broken pipe") and status 101.
#[test]
fn output_to_a_closed_pipe_ends_quietly_with_status_141() {
    let fx = MountFixture::new();
    std::fs::write(fx.mnt.join("f"), "one\n").unwrap();
    fx.cli(&["turn"]);
    for args in [&["log", "-C", s(&fx.mnt)][..], &["status", "-C", s(&fx.mnt)], &["--help"]] {
        // The read end is closed before the command writes a byte.
        let (read, write) = std::io::pipe().expect("pipe");
        drop(read);
        let mut child = fx.command().args(args).stdout(write).stderr(Stdio::piped()).spawn().expect("spawn rewindfs");
        let out = wait_child(&mut child, CHILD_TIMEOUT, "rewindfs on a closed pipe");
        let err = stderr(&out);
        assert!(!err.contains("panicked"), "rewindfs {args:?} panicked on a closed pipe: {err}");
        if args[0] != "--help" {
            assert_eq!(out.status.code(), Some(141), "rewindfs {args:?}: {}: {err}", describe_status(&out));
        }
    }
}

/// A view or a mount whose last file was closed a moment before the
/// unmount (or is held by a forked child until it calls exec: the model
/// test met that once, "cannot unmount view: Device or resource busy")
/// unmounts; one held for good is refused as busy, after the grace.
#[test]
fn unmount_waits_a_moment_for_a_file_being_closed() {
    let mut fx = MountFixture::new();
    std::fs::write(fx.mnt.join("f"), "one\n").unwrap();
    let n = fx.cli_json(&["turn"])["checkpoint"].as_i64().expect("checkpoint");
    let view = fx.dir.path().join("view");
    std::fs::create_dir_all(&view).unwrap();
    fx.cli(&["show", &n.to_string(), s(&view)]);
    for mp in [view.clone(), fx.mnt.clone()] {
        let held = std::fs::File::open(mp.join("f")).unwrap();
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(held);
        });
        let out = fx.rewindfs(&["unmount", s(&mp)]);
        closer.join().unwrap();
        assert!(out.status.success(), "unmount of {} closed 300 ms later: {}", mp.display(), stderr(&out));
        assert!(!is_mounted(&mp), "{} is still mounted", mp.display());
    }
    fx.forget_mount();
}

/// `rewindfs run` without a workspace runs a demo that shows each command
/// before its output, where the past is as a folder and what to try next,
/// then removes its scratch workspace and store.
#[test]
fn the_demo_shows_its_commands_and_cleans_up() {
    let fx = MountFixture::unmounted();
    let tmp = fx.dir.path().join("tmp");
    std::fs::create_dir(&tmp).expect("mkdir tmp");
    let out = check(run_with_timeout(fx.command().arg("run").env("TMPDIR", &tmp), CHILD_TIMEOUT), "the demo");
    let (text, err) = (stdout(&out), stderr(&out));
    for line in [
        "$ rewindfs turn --message-id prompt-1",
        "$ rewindfs diff --stat prompt-1 prompt-2",
        " hello.py | +1 -0 (added)",
        "$ cat .rewindfs/messages/prompt-1/README.txt\nhello world\n",
        "$ rewindfs rewind prompt-1\nrewound to checkpoint 1",
        "# Try it on your own project",
    ] {
        assert!(text.contains(line), "{line:?} missing from the demo:\n{text}");
    }
    assert!(text.contains("/.rewindfs/messages/prompt-1/ (and .rewindfs/checkpoints/N/)"), "{text}");
    assert!(err.contains("removed the demo workspace"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&tmp).expect("tmp").collect();
    assert!(left.is_empty(), "the demo left {left:?}");
    let stores = fx.dir.path().join("home/stores");
    let stores_left: Vec<_> = std::fs::read_dir(&stores).map(|d| d.collect()).unwrap_or_default();
    assert!(stores_left.is_empty(), "the demo left stores: {stores_left:?}");
}

/// `rewindfs stores` lists the default stores with their workspaces, and
/// says which workspace is gone; the runtime directory keeps no lock file
/// of a workspace after its mount ends, and a mount removes those left.
#[test]
fn stores_are_listed_and_workspace_locks_do_not_pile_up() {
    let fx = MountFixture::unmounted();
    let ws = fx.ws.to_str().expect("utf-8 path").to_string();
    let scratch = fx.dir.path().join("scratch");
    std::fs::create_dir(&scratch).expect("mkdir");
    let leftover = fx.run.join("workspace-1-2.lock");
    std::fs::write(&leftover, "").expect("a lock left by a killed daemon");
    for w in [&scratch, &fx.ws] {
        check(fx.rewindfs(&["run", w.to_str().expect("utf-8"), "--", "true"]), "rewindfs run");
    }
    let locks: Vec<String> = std::fs::read_dir(&fx.run)
        .expect("runtime dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("workspace-"))
        .collect();
    assert!(locks.is_empty(), "lock files left: {locks:?}");
    std::fs::remove_dir(&scratch).expect("rmdir scratch");

    let out = check(fx.rewindfs(&["stores"]), "rewindfs stores");
    let text = stdout(&out);
    let row = |w: &str| text.lines().find(|l| l.contains(&format!("  {w} -> "))).map(String::from);
    assert!(row(&ws).is_some_and(|r| !r.contains("gone")), "{text}");
    assert!(row(scratch.to_str().expect("utf-8")).is_some_and(|r| r.contains("  gone  ")), "{text}");
    assert!(text.contains("2 stores,"), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&check(fx.rewindfs(&["stores", "--json"]), "stores --json"))).expect("json");
    assert_eq!(json.as_array().map(Vec::len), Some(2), "{json}");
    assert!(json[0]["bytes"].as_u64().is_some_and(|b| b > 0), "{json}");
}
