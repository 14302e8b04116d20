//! Restoring a path whose parents were removed (issue 12, item 6): the
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
