//! FUSE over io_uring. `--transport uring` serves the live mount
//! from per-CPU rings (the daemon's `fuse-ring-N` threads, requests counted
//! in `status --json`), `--transport classic` from /dev/fuse only. The rest
//! of the suite runs on either with REWINDFS_TEST_TRANSPORT (see
//! tests/common).

mod common;

use common::*;

/// The names of the daemon's threads.
fn thread_names(pid: i32) -> Vec<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the daemon's /proc entry");
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect()
}

fn ring_requests(fx: &MountFixture) -> u64 {
    fx.status_json()["ring_requests"].as_u64().expect("status --json has ring_requests")
}

/// Creates, stats, renames and removes a few files through the mount.
fn metadata_workload(fx: &MountFixture) {
    let dir = fx.path().join("d");
    std::fs::create_dir(&dir).unwrap();
    for i in 0..20 {
        let p = dir.join(format!("f{i}"));
        std::fs::write(&p, format!("content {i}")).unwrap();
        std::fs::rename(&p, dir.join(format!("g{i}"))).unwrap();
    }
    let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 20);
    assert_eq!(std::fs::read_to_string(dir.join("g7")).unwrap(), "content 7");
    for i in 0..20 {
        std::fs::remove_file(dir.join(format!("g{i}"))).unwrap();
    }
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn uring_transport_serves_requests_on_the_rings() {
    let fx = MountFixture::with_args(false, &["--transport", "uring"]);
    let status = fx.status_json();
    assert_eq!(status["transport"], "uring", "status: {status}");
    let threads = thread_names(fx.daemon_pid());
    let cpus = std::thread::available_parallelism().unwrap().get();
    for cpu in 0..cpus {
        let name = format!("fuse-ring-{cpu}");
        assert!(threads.contains(&name), "no {name} thread in the daemon: {threads:?}");
    }
    let before = ring_requests(&fx);
    metadata_workload(&fx);
    let after = ring_requests(&fx);
    // 20 creates, renames and unlinks at least, each its own request.
    assert!(after >= before + 60, "the rings served {} requests of the workload", after - before);
}

#[test]
fn classic_transport_uses_no_ring() {
    let fx = MountFixture::with_args(false, &["--transport", "classic"]);
    metadata_workload(&fx);
    let status = fx.status_json();
    assert_eq!(status["transport"], "classic", "status: {status}");
    assert_eq!(status["ring_requests"], 0, "status: {status}");
    let threads = thread_names(fx.daemon_pid());
    assert!(!threads.iter().any(|t| t.starts_with("fuse-ring")), "ring threads on a classic mount: {threads:?}");
}

/// The scheduling policy of each of the daemon's threads, by name
/// (`/proc/PID/task/TID/stat`, field 41).
fn thread_policies(pid: i32) -> Vec<(String, u32)> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the daemon's /proc entry");
    tasks
        .filter_map(|t| {
            let dir = t.ok()?.path();
            let name = std::fs::read_to_string(dir.join("comm")).ok()?.trim().to_string();
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            // The fields after the name (which may hold spaces) start at 3.
            let after = &stat[stat.rfind(')')? + 2..];
            let policy = after.split(' ').nth(41 - 3)?.parse().ok()?;
            Some((name, policy))
        })
        .collect()
}

/// Reads each of `n` small files (`small/f{i}`, made by the test) twice,
/// like a second `grep -r`: open, read, close. Prints how many times the
/// reading process moved to another CPU during the second pass.
const READ_AND_COUNT_MOVES: &str = r#"
import os, sys
n = int(sys.argv[1])
names = [f"small/f{i}" for i in range(n)]
def moves():
    for line in open("/proc/thread-self/sched"):
        if line.startswith("se.nr_migrations"):
            return int(line.split(":")[1])
    raise SystemExit("no se.nr_migrations in /proc/thread-self/sched")
def read_all():
    for i, name in enumerate(names):
        fd = os.open(name, os.O_RDONLY)
        text = os.read(fd, 65536)
        os.close(fd)
        assert text.startswith(b"small file %d\n" % i), (name, text)
read_all()
before = moves()
read_all()
print(moves() - before)
"#;

/// A ring thread answers on the CPU of the process that asked, and wakes
/// it while still running there. Under SCHED_IDLE, that CPU counts as idle
/// and the process is woken where it was; before, the scheduler moved it to
/// the other CPU at almost every request (1,792 and 1,886 moves in two runs
/// of 2,000 files here, 130 µs a file against 20 µs).
#[test]
fn ring_threads_run_under_sched_idle_so_a_reader_stays_on_its_cpu() {
    let fx = MountFixture::with_args(false, &["--transport", "uring"]);
    assert_eq!(fx.status_json()["transport"], "uring");
    let policies = thread_policies(fx.daemon_pid());
    let rings: Vec<_> = policies.iter().filter(|(n, _)| n.starts_with("fuse-ring")).collect();
    assert!(!rings.is_empty(), "no ring threads: {policies:?}");
    assert!(
        rings.iter().all(|(_, p)| *p == libc::SCHED_IDLE as u32),
        "ring threads not under SCHED_IDLE: {policies:?}"
    );
    let others: Vec<_> = policies.iter().filter(|(n, _)| !n.starts_with("fuse-ring")).collect();
    assert!(others.iter().all(|(_, p)| *p == libc::SCHED_OTHER as u32), "other threads changed: {others:?}");

    let dir = fx.path().join("small");
    std::fs::create_dir(&dir).unwrap();
    let files: Vec<_> = (0..2000).map(|i| dir.join(format!("f{i}"))).collect();
    for (i, f) in files.iter().enumerate() {
        std::fs::write(f, format!("small file {i}\n").repeat(1 + i % 50)).unwrap();
    }
    // A single-threaded process, as `grep` is (the moves are counted for
    // its one thread).
    let script = format!("python3 - 2000 <<'EOF'\n{READ_AND_COUNT_MOVES}\nEOF");
    let moved: u64 = fx.sh(&script).trim().parse().expect("a count of moves");
    assert!(moved < 200, "the reading process moved to another CPU {moved} times over 2,000 files");
}

/// Invalidation (notifications go through /dev/fuse even on the ring) and
/// the kernel caches: a rewind changes the tree behind the kernel's back and
/// the mount must show the rewound tree at once.
#[test]
fn uring_rewind_invalidates_the_kernel_cache() {
    let fx = MountFixture::with_args(false, &["--transport", "uring", "--auto-turn", "0"]);
    let f = fx.path().join("f");
    std::fs::write(&f, "one").unwrap();
    let cp = fx.turn("m1");
    std::fs::write(&f, "two, longer").unwrap();
    std::fs::write(fx.path().join("new"), "x").unwrap();
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "two, longer");
    fx.cli_json(&["rewind", &cp.to_string()]);
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "one");
    assert!(!fx.path().join("new").exists(), "a name created after the checkpoint is gone");
    assert_eq!(fx.status_json()["transport"], "uring");
}

/// A checkpoint with files, a symlink, an xattr, an empty directory and a
/// file larger than one ring entry's payload (1 MiB), then changes after
/// it; returns the checkpoint and a `cp -a` copy of it. No hard links: a
/// view numbers an inode again once the kernel forgot it, so a
/// `drop_caches` from elsewhere during the walk would split a pair
/// (tests/views.rs covers hard links).
fn checkpoint_with_copy(fx: &MountFixture) -> (i64, std::path::PathBuf) {
    fx.sh("mkdir -p a/b empty && seq 1 400000 > a/big && echo small > a/b/s && ln -s b/s a/link
         echo other > hard && chmod 640 a/b/s && touch -d '2001-02-03 04:05:06' a/b/s");
    fx.py("os.setxattr('a/b/s', 'user.tag', b'v1')");
    let cp = fx.turn("m1");
    let copy = fx.copy_tree("c1");
    fx.sh("rm -rf a empty && echo later > hard");
    (cp, copy)
}

/// `show`s checkpoint `cp` of `fx`; the view's entry in `status --json`.
fn show_view(fx: &MountFixture, cp: i64, mp: &std::path::Path) -> serde_json::Value {
    std::fs::create_dir_all(mp).unwrap();
    let reply = fx.cli_json(&["show", &cp.to_string(), mp.to_str().unwrap()]);
    assert!(is_mounted(mp), "show did not mount {}", mp.display());
    let status = fx.status_json();
    let views = status["views"].as_array().unwrap_or_else(|| panic!("status has no views: {status}"));
    let view = views
        .iter()
        .find(|v| v["mountpoint"] == mp.to_str().unwrap())
        .unwrap_or_else(|| panic!("status does not list the view on {}: {status}", mp.display()))
        .clone();
    assert_eq!(reply["transport"], view["transport"], "show and status disagree: {reply} / {view}");
    view
}

fn view_ring_requests(fx: &MountFixture, mp: &std::path::Path) -> u64 {
    let status = fx.status_json();
    status["views"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["mountpoint"] == mp.to_str().unwrap()))
        .and_then(|v| v["ring_requests"].as_u64())
        .unwrap_or_else(|| panic!("no ring_requests for the view on {}: {status}", mp.display()))
}

/// A `show` mount takes the live mount's transport; on either,
/// the view and `.rewindfs/checkpoints/N` are exact copies of the tree.
#[test]
fn views_use_the_live_mounts_transport_and_are_exact_on_both() {
    for transport in ["uring", "classic"] {
        let fx = MountFixture::with_args(false, &["--transport", transport, "--auto-turn", "0"]);
        let (cp, copy) = checkpoint_with_copy(&fx);
        let hidden = fx.path().join(".rewindfs/checkpoints").join(cp.to_string());
        let live_before = ring_requests(&fx);
        assert_same_tree(&copy, &hidden, &format!("{transport}: .rewindfs/checkpoints/{cp}"));
        if transport == "uring" {
            // .rewindfs/ is served by the live mount, so by its rings.
            assert!(ring_requests(&fx) > live_before, "{transport}: .rewindfs/ was not read through the rings");
        }

        let mp = fx.dir.path().join(format!("view-{transport}"));
        let view = show_view(&fx, cp, &mp);
        assert_eq!(view["transport"], transport, "{transport}: the view's transport: {view}");
        let before = view_ring_requests(&fx, &mp);
        assert_same_tree(&copy, &mp, &format!("{transport}: show {cp}"));
        let served = view_ring_requests(&fx, &mp) - before;
        if transport == "uring" {
            // A lookup, getattr and read at least per file of the tree.
            assert!(served >= 10, "the view's rings served {served} requests of a full walk");
        } else {
            assert_eq!(served, 0, "a classic view served requests on rings");
        }
        check(fx.rewindfs(&["unmount", mp.to_str().unwrap()]), "unmount view");
        assert!(!is_mounted(&mp));
        let status = fx.status_json();
        assert_eq!(status["views"], serde_json::json!([]), "an unmounted view is still listed: {status}");
    }
}
