//! Issue 16: FUSE over io_uring. `--transport uring` serves the live mount
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
