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
