//! Restoring a path whose parents were removed: the
//! parents come back as they were recorded (owner, mode), not as the
//! daemon's own directories, and a dry run of it changes nothing and
//! fails nothing.

mod common;

use std::os::unix::fs::MetadataExt;

use common::{MountFixture, stdout, test_user};

#[test]
fn parents_come_back_with_their_recorded_owner_and_mode_and_a_dry_run_works() {
    let (uid, gid) = test_user();
    let fx = MountFixture::manual_turns();
    fx.sh(&format!(
        "mkdir -p src/pkg && echo 'print(1)' > src/pkg/m.py && chown -R {uid}:{gid} src && chmod 750 src && chmod 705 src/pkg"
    ));
    let k = fx.turn("m1").to_string();
    fx.sh("rm -rf src");
    fx.turn("m2");
    let mp = fx.mountpoint.to_str().expect("utf-8").to_string();

    let dry = fx.rewindfs(&["restore", "-C", &mp, "--dry-run", &k, "--", "src/pkg/m.py"]);
    assert!(dry.status.success(), "the dry run failed: {}", common::stderr(&dry));
    let text = stdout(&dry);
    for p in ["src", "src/pkg", "src/pkg/m.py"] {
        assert!(text.lines().any(|l| l.ends_with(&format!(" {p}"))), "dry run does not list {p}:\n{text}");
    }
    assert!(!fx.path().join("src").exists(), "the dry run changed the tree");

    fx.cli(&["restore", &k, "--", "src/pkg/m.py"]);
    for (p, mode) in [("src", 0o750), ("src/pkg", 0o705), ("src/pkg/m.py", 0o644)] {
        let m = std::fs::symlink_metadata(fx.path().join(p)).expect(p);
        assert_eq!((m.uid(), m.gid()), (uid, gid), "{p}: owner");
        assert_eq!(m.mode() & 0o7777, mode, "{p}: mode");
    }
    assert_eq!(std::fs::read_to_string(fx.path().join("src/pkg/m.py")).expect("m.py"), "print(1)\n");
}

/// A restore of 1,200 paths names a few of them in the labels of
/// its checkpoints and counts the rest (every path was in the label: one
/// `log` line of about 10 KB).
#[test]
fn a_restore_of_many_paths_summarizes_its_labels() {
    let fx = MountFixture::manual_turns();
    fx.sh("mkdir d && for i in $(seq 1 1200); do echo $i > d/f$i; done");
    let k = fx.turn("m1").to_string();
    fx.sh("for i in $(seq 1 1200); do echo changed > d/f$i; done");
    let paths: Vec<String> = (1..=1200).map(|i| format!("d/f{i}")).collect();
    let mut args = vec!["restore", k.as_str(), "--"];
    args.extend(paths.iter().map(String::as_str));
    fx.cli(&args);
    assert_eq!(std::fs::read_to_string(fx.path().join("d/f1200")).expect("f1200"), "1200\n");
    let log = fx.cli_json(&["log"]);
    let labels: Vec<String> =
        log.as_array().expect("rows").iter().filter_map(|r| r["label"].as_str().map(String::from)).collect();
    let restore: Vec<&String> = labels.iter().filter(|l| l.contains("restor")).collect();
    assert_eq!(restore.len(), 2, "the checkpoints before and after the restore: {labels:?}");
    for l in restore {
        assert!(l.len() < 300 && l.contains("and 1197 more paths"), "{} bytes: {}", l.len(), &l[..l.len().min(300)]);
    }
    let text = fx.cli(&["log"]);
    assert!(text.lines().all(|l| l.len() < 400), "a log line is too long: {text}");
}
