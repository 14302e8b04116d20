//! Durability: the daemon is killed with SIGKILL in the middle of
//! a write-heavy turn. After the dead mount is detached and the workspace
//! remounted, every sealed checkpoint still rebuilds exactly as the copy
//! taken at its boundary, the state at remount is the live tree, and the
//! chunk store verifies.

mod common;

use std::ffi::OsStr;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;

#[test]
fn sealed_checkpoints_survive_kill_9_mid_turn() {
    let mut f = MountFixture::unmounted();
    for i in 0..200 {
        std::fs::write(f.ws.join(format!("f{i}")), format!("file {i}\n")).unwrap();
    }
    for i in 0..5 {
        let data: Vec<u8> = (0..200_000u32).map(|k| (k.wrapping_mul(2654435761).wrapping_add(i) >> 13) as u8).collect();
        std::fs::write(f.ws.join(format!("big{i}")), data).unwrap();
    }
    f.mount(false, &["--auto-turn", "0"]);
    let mut snaps = vec![f.snapshot("0")];
    f.sh("for i in $(seq 0 49); do echo more$i >> f$i; done; mkdir d; mv f1? d/; head -c 50000 /dev/urandom > big0");
    snaps.push(f.snapshot("1"));
    assert_eq!(f.turn("c1"), 1);
    f.sh("sed -i s/more/MORE/ f2?; rm f3?; head -c 70000 /dev/urandom > big1; mv d e");
    snaps.push(f.snapshot("2"));
    assert_eq!(f.turn("c2"), 2);

    // The write-heavy turn: appends, overwrites of big files, creates,
    // renames and deletes, until the daemon dies under it.
    let marker = f.dir.path().join("marker");
    let script = format!(
        "i=0; while true; do i=$((i+1)); \
           for j in 0 1 2 3 4 5 6 7 8 9; do echo $i >> f4$j; done; \
           head -c 100000 /dev/urandom > big$((i % 5)); \
           echo $i > n$i; mv n$i e/; mv f5$((i % 10)) g$i 2>/dev/null || true; rm -f f6$((i % 10)) e/n$((i - 3)); \
           [ $i -eq 40 ] && touch {}; \
         done",
        marker.display()
    );
    let mut writer = Command::new("timeout")
        .args(["-k", "5", "300", "sh", "-c", &script])
        .current_dir(&f.mnt)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own process group, so that the shell dies with `timeout`
        // (killing `timeout` alone left the loop running for ever).
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = f.daemon_pid();
    let mut waited = 0;
    while !marker.exists() {
        assert!(waited < 2400, "the writer never got 40 iterations in");
        std::thread::sleep(std::time::Duration::from_millis(50));
        waited += 1;
    }
    // SIGKILL the daemon while the writer keeps going.
    let o = run_timeout(10, "kill", &[OsStr::new("-9"), OsStr::new(&pid.to_string())], None, &[]);
    assert!(o.status.success(), "kill -9 {pid}");
    // SAFETY: kill has no memory preconditions; the group is the writer's own.
    unsafe { libc::kill(-(writer.id() as i32), libc::SIGKILL) };
    let _ = writer.wait();
    let mut gone = 0;
    while Path::new(&format!("/proc/{pid}")).exists() && gone < 600 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        gone += 1;
    }
    // `unmount` detaches a dead mount.
    let mnt = f.mnt.to_str().unwrap().to_string();
    check(f.rewindfs(&["unmount", &mnt]), "unmount of the dead mount");
    f.forget_mount();
    let at_remount = read_tree(&f.ws);

    // Remount: the history is there, a new checkpoint records the state now.
    f.mount(false, &["--auto-turn", "0"]);
    let log = f.cli_json(&["log"]);
    let numbers: Vec<i64> = log.as_array().unwrap().iter().map(|t| t["checkpoint"].as_i64().unwrap()).collect();
    assert_eq!(numbers, vec![0, 1, 2, 3], "checkpoints after remount: {log}");
    assert_eq!(log[1]["message_id"], "c1");
    assert_eq!(log[2]["message_id"], "c2");
    let remounted = f.snapshot("remount");
    assert!(
        tree_diff(&at_remount, &remounted).is_empty(),
        "the mount does not show the workspace: {:?}",
        tree_diff(&at_remount, &remounted)
    );
    f.unmount();

    let off = Offline::open(&f.ws, &f.store);
    let mut errs = Vec::new();
    for (n, snap) in snaps.iter().enumerate() {
        if let Err(e) = off.check(n as i64, snap, "sealed before the crash") {
            errs.push(e);
        }
    }
    if let Err(e) = off.check(3, &at_remount, "state at remount") {
        errs.push(e);
    }
    let verify = off.journal.store().verify().unwrap();
    assert!(verify.corrupt.is_empty(), "corrupt chunks after kill -9: {:?}", verify.corrupt);
    assert!(verify.checked > 0);
    assert!(errs.is_empty(), "{}", errs.join("\n"));
}
