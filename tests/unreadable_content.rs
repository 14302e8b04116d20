//! Rewind over unreadable content. A rewind whose
//! contents cannot all be read back from the store (a byte flipped in the
//! pack, the pack truncated or deleted) is refused, naming the files and
//! the checkpoint, and changes nothing. Damage that appears after a rewind
//! switched never reaches the workspace: the other pending files settle,
//! `status` lists the one that cannot be, reading it gives EIO, and
//! `unmount` exits non-zero naming it, with its pre-rewind bytes back in
//! the plain workspace.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Random bytes (stored raw in the pack: zstd saves nothing on them).
fn random(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    (0..len).map(|_| rng.next() as u8).collect()
}

/// The file contents of the history built by [`history`].
struct Versions {
    /// `a.txt` and `b.txt` at checkpoint 1 (the content a rewind to 1
    /// takes from the store).
    a0: Vec<u8>,
    b0: Vec<u8>,
    /// Their bytes at checkpoint 2 and in the live tree.
    a1: Vec<u8>,
    b1: Vec<u8>,
}

/// `a.txt`, `b.txt` (200 kB each) and `keep.txt` at mount; checkpoint 1
/// (m1); both files rewritten; checkpoint 2 (m2). Mounted on `mnt` with
/// manual turns and the daemon environment `env`.
fn history(env: &[(&str, &str)]) -> (MountFixture, Versions) {
    let mut fx = MountFixture::unmounted();
    let v = Versions { a0: random(1, 200_000), b0: random(2, 200_000), a1: random(3, 200_000), b1: random(4, 200_000) };
    std::fs::write(fx.ws.join("a.txt"), &v.a0).expect("write a.txt");
    std::fs::write(fx.ws.join("b.txt"), &v.b0).expect("write b.txt");
    std::fs::write(fx.ws.join("keep.txt"), b"keep\n").expect("write keep.txt");
    fx.mount_with_env(false, &["--auto-turn", "0"], env);
    assert_eq!(fx.turn("m1"), 1);
    std::fs::write(fx.path().join("a.txt"), &v.a1).expect("rewrite a.txt");
    std::fs::write(fx.path().join("b.txt"), &v.b1).expect("rewrite b.txt");
    assert_eq!(fx.turn("m2"), 2);
    (fx, v)
}

fn pack(fx: &MountFixture) -> PathBuf {
    fx.store.join("chunks/packs/000001.pack")
}

/// Where a piece of `content` is stored in the pack.
fn offset_in_pack(fx: &MountFixture, content: &[u8]) -> usize {
    let needle = &content[5000..5032];
    let bytes = std::fs::read(pack(fx)).expect("read pack");
    bytes.windows(needle.len()).position(|w| w == needle).expect("the content is stored raw in the pack")
}

#[derive(Clone, Copy, Debug)]
enum Damage {
    Flip,
    Truncate,
    Delete,
}

/// Damages the stored copy of `content` (with the daemon running).
fn damage(fx: &MountFixture, how: Damage, content: &[u8]) {
    let at = offset_in_pack(fx, content);
    match how {
        Damage::Flip => {
            let mut bytes = std::fs::read(pack(fx)).expect("read pack");
            bytes[at + 3] ^= 0x20;
            std::fs::write(pack(fx), bytes).expect("write pack");
        }
        Damage::Truncate => {
            let file = std::fs::OpenOptions::new().write(true).open(pack(fx)).expect("open pack");
            file.set_len(at as u64).expect("truncate pack");
        }
        Damage::Delete => std::fs::remove_file(pack(fx)).expect("remove pack"),
    }
}

/// One line per object of the live tree and of every checkpoint view:
/// kind, size, mode and the hash of the bytes, or the errno reading gave.
const STATE_PY: &str = r#"
import os, sys, hashlib
def walk(root, label):
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x != '.rewindfs')
        for n in sorted(files):
            p = os.path.join(d, n)
            st = os.lstat(p)
            try:
                with open(p, 'rb') as f:
                    h = hashlib.sha256(f.read()).hexdigest()[:16]
            except OSError as e:
                h = 'ERR%d' % e.errno
            print(label, os.path.relpath(p, root), oct(st.st_mode), st.st_size, h)
root = sys.argv[1]
walk(root, 'live')
cps = os.path.join(root, '.rewindfs', 'checkpoints')
for k in sorted(os.listdir(cps), key=int):
    walk(os.path.join(cps, k), 'checkpoint-' + k)
"#;

fn state(fx: &MountFixture) -> String {
    let out =
        run_with_timeout(std::process::Command::new("python3").arg("-c").arg(STATE_PY).arg(fx.path()), CHILD_TIMEOUT);
    stdout(&check(out, "state of the tree and its views"))
}

/// The newest checkpoint (not `log`: its statistics may need the damaged
/// content).
fn checkpoints(fx: &MountFixture) -> i64 {
    fx.status_json()["turn"].as_i64().expect("status has the turn")
}

fn mp(fx: &MountFixture) -> String {
    fx.path().to_str().expect("utf-8 path").to_string()
}

/// A rewind to checkpoint 1 over damaged content of `a.txt` is refused,
/// and so is its dry run, naming the file and the checkpoint; nothing
/// changes: no checkpoint sealed, the live tree and every view as before.
fn refused_before_the_switch(how: Damage) {
    let (mut fx, v) = history(&[]);
    if let Damage::Delete = how {
        // A daemon that has read the pack keeps it open, and a deleted pack
        // stays readable to it; a fresh one has not opened it yet.
        fx.unmount();
        fx.mount(false, &["--auto-turn", "0"]);
    }
    damage(&fx, how, &v.a0);
    let before = state(&fx);
    let sealed = checkpoints(&fx);

    let out = fx.rewindfs(&["rewind", "-C", &mp(&fx), "1"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "the rewind must fail ({how:?}): {}", describe_status(&out));
    assert!(err.contains("a.txt") && err.contains("checkpoint 1") && err.contains("refused"), "{how:?}: {err}");
    assert!(!err.contains("keep.txt"), "only unreadable files are named: {err}");

    let dry = fx.rewindfs(&["rewind", "-C", &mp(&fx), "1", "--dry-run"]);
    assert_eq!(dry.status.code(), Some(1), "the dry run must fail ({how:?}): {}", describe_status(&dry));
    assert!(stderr(&dry).contains("a.txt"), "the dry run names the file: {}", stderr(&dry));

    assert_eq!(checkpoints(&fx), sealed, "a refused rewind seals no checkpoint ({how:?})");
    assert_eq!(state(&fx), before, "a refused rewind changes nothing, live or in any view ({how:?})");
    assert_eq!(std::fs::read(fx.path().join("a.txt")).expect("a.txt"), v.a1);
    assert_eq!(fx.status_json()["pending_files"], 0, "nothing is left pending");
    fx.unmount();
    assert_eq!(std::fs::read(fx.ws.join("a.txt")).expect("plain a.txt"), v.a1);
    assert_eq!(std::fs::read(fx.ws.join("b.txt")).expect("plain b.txt"), v.b1);
}

#[test]
fn a_rewind_over_a_flipped_byte_is_refused_and_changes_nothing() {
    refused_before_the_switch(Damage::Flip);
}

#[test]
fn a_rewind_over_a_truncated_pack_is_refused_and_changes_nothing() {
    refused_before_the_switch(Damage::Truncate);
}

#[test]
fn a_rewind_over_a_deleted_pack_is_refused_and_changes_nothing() {
    refused_before_the_switch(Damage::Delete);
}

fn unreadable_path_errno(path: &Path) -> Option<i32> {
    let path = path.to_path_buf();
    io_timeout("reading a.txt", CHILD_TIMEOUT, move || std::fs::read(&path).err().and_then(|e| e.raw_os_error()))
}

/// Damage that appears while rewound files are pending (the settler held
/// by a test hook): the settler never writes what it cannot read, the
/// other file settles, `status` names the bad one, reads give EIO, and
/// `unmount` fails naming it, with its pre-rewind bytes in the workspace.
#[test]
fn damage_after_the_switch_is_contained_and_unmount_puts_the_file_back() {
    let hold = tempfile::NamedTempFile::new().expect("pause file");
    let hold_path = hold.path().to_str().expect("utf-8 path").to_string();
    let (mut fx, v) = history(&[("REWINDFS_TEST_SETTLER_PAUSE", &hold_path)]);
    fx.cli_json(&["rewind", "1"]);
    assert_eq!(fx.status_json()["pending_files"], 2, "both rewound files wait for the settler");
    damage(&fx, Damage::Flip, &v.a0);
    drop(hold);

    // b.txt settles although a.txt cannot (whichever the settler tries
    // first), and a.txt is listed with its reason.
    wait_for("b.txt to settle and a.txt to be listed", || {
        let s = fx.status_json();
        s["pending_files"] == 1 && s["unsettled"].as_array().is_some_and(|u| !u.is_empty())
    });
    let s = fx.status_json();
    let unsettled = s["unsettled"].as_array().expect("unsettled list");
    assert_eq!(unsettled.len(), 1, "{s}");
    assert_eq!(unsettled[0]["path"], "a.txt", "{s}");
    assert!(unsettled[0]["reason"].as_str().is_some_and(|r| r.contains("chunk")), "the reason names the chunk: {s}");
    let text = stdout(&check(fx.rewindfs(&["status", "-C", &mp(&fx)]), "status"));
    assert!(text.contains("cannot settle") && text.contains("a.txt"), "{text}");
    // Settled by the settler, not by a reader: the backing file has it.
    assert_eq!(std::fs::read(fx.ws.join("b.txt")).expect("backing b.txt"), v.b0);
    // Never zeros: the backing placeholder was not written.
    let placeholder = std::fs::read(fx.ws.join("a.txt")).expect("backing a.txt");
    assert!(placeholder.iter().all(|b| *b == 0), "the settler wrote nothing it could not read");

    assert_eq!(unreadable_path_errno(&fx.path().join("a.txt")), Some(libc::EIO), "reading a.txt gives EIO");
    assert_eq!(std::fs::read(fx.path().join("b.txt")).expect("b.txt"), v.b0);
    let log = std::fs::read_to_string(fx.store.join("daemon.log")).expect("daemon log");
    let named: Vec<&str> = log.lines().filter(|l| l.contains("a.txt") && l.contains("chunk")).collect();
    assert!(!named.is_empty(), "the log names the path and the chunk:\n{log}");
    // One line from the settler for the file, not one per try.
    std::thread::sleep(Duration::from_secs(3));
    let log = std::fs::read_to_string(fx.store.join("daemon.log")).expect("daemon log");
    let settler_lines = log.lines().filter(|l| l.contains("cannot settle a.txt")).count();
    assert_eq!(settler_lines, 1, "one settler line per file:\n{log}");

    // With the kernel's dentries dropped (memory pressure; another job's
    // `drop_caches`), the file's inode no longer knows its name: the
    // unmount must still find it in the tree. Before, it took the file for
    // one moved out of the tree, unmounted with exit 0 and left zeros.
    std::fs::write("/proc/sys/vm/drop_caches", "2").expect("drop the dentry cache (root)");
    let out = fx.rewindfs(&["unmount", &mp(&fx)]);
    assert_eq!(out.status.code(), Some(1), "unmount must fail: {}", describe_status(&out));
    assert!(stderr(&out).contains("a.txt"), "unmount names the file: {}", stderr(&out));
    fx.forget_mount();
    assert!(!is_mounted(fx.path()), "the mount is gone");
    assert_eq!(std::fs::read(fx.ws.join("a.txt")).expect("plain a.txt"), v.a1, "a.txt as before the rewind");
    assert_eq!(std::fs::read(fx.ws.join("b.txt")).expect("plain b.txt"), v.b0, "b.txt rewound");
    assert_eq!(std::fs::read(fx.ws.join("keep.txt")).expect("plain keep.txt"), b"keep\n");
}

/// A restore of two files, one of whose contents cannot be read back, is
/// refused before it changes either (before, the other was restored and
/// the command failed part-way after sealing a checkpoint).
#[test]
fn a_restore_over_a_flipped_byte_is_refused_and_changes_nothing() {
    let (mut fx, v) = history(&[]);
    damage(&fx, Damage::Flip, &v.a0);
    let before = state(&fx);
    let sealed = checkpoints(&fx);
    let (a, b) = (fx.path().join("a.txt"), fx.path().join("b.txt"));
    let (a, b) = (a.to_str().expect("utf-8 path"), b.to_str().expect("utf-8 path"));

    let dry = fx.rewindfs(&["restore", "-C", &mp(&fx), "--dry-run", "1", "--", b, a]);
    assert_eq!(dry.status.code(), Some(1), "the dry run must fail: {}", describe_status(&dry));
    assert!(stderr(&dry).contains("a.txt"), "the dry run names the file: {}", stderr(&dry));

    let out = fx.rewindfs(&["restore", "-C", &mp(&fx), "1", "--", b, a]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "the restore must fail: {}", describe_status(&out));
    assert!(err.contains("a.txt") && err.contains("checkpoint 1") && err.contains("refused"), "{err}");
    assert!(!err.contains("b.txt"), "only the unreadable file is named: {err}");
    assert_eq!(checkpoints(&fx), sealed, "a refused restore seals no checkpoint");
    assert_eq!(state(&fx), before, "a refused restore changes nothing, live or in any view");
    assert_eq!(std::fs::read(fx.path().join("b.txt")).expect("b.txt"), v.b1);
    fx.unmount();
}

/// A file that cannot be settled survives a `kill -9` of the daemon: the
/// next daemon finds it again, lists it, and its `unmount` puts it back as
/// it was before the rewind (found from the newest rewind, since the new
/// daemon did not make it pending).
#[test]
fn an_unsettled_file_left_by_a_killed_daemon_is_put_back_by_the_next_unmount() {
    let hold = tempfile::NamedTempFile::new().expect("pause file");
    let hold_path = hold.path().to_str().expect("utf-8 path").to_string();
    let (mut fx, v) = history(&[("REWINDFS_TEST_SETTLER_PAUSE", &hold_path)]);
    fx.cli_json(&["rewind", "1"]);
    damage(&fx, Damage::Flip, &v.a0);
    let pid = fx.daemon_pid();
    // SAFETY: kill has no memory preconditions.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    wait_for("the daemon to die", || !std::path::Path::new(&format!("/proc/{pid}")).exists());
    check(fx.rewindfs(&["unmount", &mp(&fx)]), "unmount of the dead mount");
    fx.forget_mount();
    drop(hold);

    fx.mount(false, &["--auto-turn", "0"]);
    wait_for("b.txt to settle and a.txt to be listed", || {
        let s = fx.status_json();
        s["pending_files"] == 1 && s["unsettled"].as_array().is_some_and(|u| u.len() == 1)
    });
    assert_eq!(fx.status_json()["unsettled"][0]["path"], "a.txt");
    assert_eq!(unreadable_path_errno(&fx.path().join("a.txt")), Some(libc::EIO), "reading a.txt gives EIO");
    assert_eq!(std::fs::read(fx.path().join("b.txt")).expect("b.txt"), v.b0);

    let out = fx.rewindfs(&["unmount", &mp(&fx)]);
    assert_eq!(out.status.code(), Some(1), "unmount must fail: {}", describe_status(&out));
    assert!(stderr(&out).contains("a.txt"), "unmount names the file: {}", stderr(&out));
    fx.forget_mount();
    assert_eq!(std::fs::read(fx.ws.join("a.txt")).expect("plain a.txt"), v.a1, "a.txt as before the rewind");
    assert_eq!(std::fs::read(fx.ws.join("b.txt")).expect("plain b.txt"), v.b0, "b.txt rewound");
}

#[test]
fn log_lists_every_turn_and_names_the_damage_when_one_turns_content_is_unreadable() {
    // The statistics of turn m1 (a.txt and b.txt rewritten) are not stored
    // yet when a byte of a.txt's old content is flipped in the pack: the
    // daemon's statistics thread is held (REWINDFS_TEST_STATS_PAUSE) until
    // the damage is done. `log` used to fail whole; it lists every turn,
    // marks m1's statistics unavailable naming the file and the chunk, and
    // exits 1.
    let mut fx = MountFixture::unmounted();
    // A byte of the pack flipped on purpose.
    fx.damaged();
    let v = Versions { a0: random(1, 200_000), b0: random(2, 200_000), a1: random(3, 200_000), b1: random(4, 200_000) };
    std::fs::write(fx.ws.join("a.txt"), &v.a0).expect("write a.txt");
    std::fs::write(fx.ws.join("b.txt"), &v.b0).expect("write b.txt");
    let pause = fx.dir.path().join("stats-pause");
    let reached = fx.dir.path().join("stats-pause.reached");
    let pause_env = pause.to_str().expect("utf-8 path").to_string();
    fx.mount_with_env(false, &["--auto-turn", "0"], &[("REWINDFS_TEST_STATS_PAUSE", &pause_env)]);
    assert_eq!(fx.turn("m1"), 1);
    std::fs::write(&pause, b"").expect("create the pause file");
    std::fs::write(fx.path().join("a.txt"), &v.a1).expect("rewrite a.txt");
    std::fs::write(fx.path().join("b.txt"), &v.b1).expect("rewrite b.txt");
    assert_eq!(fx.turn("m2"), 2);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !reached.exists() {
        assert!(Instant::now() < deadline, "the statistics thread never reached its pause");
        std::thread::sleep(Duration::from_millis(10));
    }
    damage(&fx, Damage::Flip, &v.a0);
    std::fs::remove_file(&pause).expect("remove the pause file");

    // `--all`: the mount's row (no change before m1) is listed too.
    let out = fx.rewindfs(&["log", "-C", &mp(&fx), "--all"]);
    let (text, err) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(1), "log must exit 1: {}", describe_status(&out));
    let rows: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(rows.len(), 3, "every checkpoint is listed:\n{text}\n{err}");
    assert!(rows[1].contains("m1") && rows[1].contains('?'), "m1's statistics are shown unknown: {text}");
    assert!(!rows[0].contains('?') && !rows[2].contains('?'), "the other rows have their statistics: {text}");
    assert!(err.contains("turn 1") && err.contains("a.txt") && err.contains("chunk"), "stderr names it: {err}");

    let out = fx.rewindfs(&["log", "-C", &mp(&fx), "--json"]);
    assert_eq!(out.status.code(), Some(1), "log --json must exit 1 too: {}", describe_status(&out));
    let rows: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("log --json prints JSON");
    let rows = rows.as_array().expect("an array");
    assert_eq!(rows.len(), 3, "every checkpoint is listed: {rows:?}");
    let why = rows[1]["stats_unavailable"].as_str().unwrap_or_else(|| panic!("m1 has a reason: {rows:?}"));
    assert!(why.contains("a.txt") && why.contains("checkpoint 1") && why.contains("corrupt"), "{why}");
    assert!(rows[0]["stats_unavailable"].is_null() && rows[2]["stats_unavailable"].is_null(), "{rows:?}");
    assert_eq!(rows[0]["checkpoint"], 0);
    assert_eq!(rows[2]["checkpoint"], 2);
}

/// `kill -9` of the daemon while `unmount` puts back a file that cannot be
/// settled (after the put-back's first record): the put-back is journaled
/// as a restore's intent, so the next mount completes it and says so, and
/// the next `unmount` succeeds with the file as it was before the rewind.
/// Before, the put-back wrote no intent: the next mount served the half
/// put-back tree without a word.
#[test]
fn a_put_back_killed_part_way_is_completed_by_the_next_mount() {
    let hold = tempfile::NamedTempFile::new().expect("pause file");
    let hold_path = hold.path().to_str().expect("utf-8 path").to_string();
    let (mut fx, v) =
        history(&[("REWINDFS_TEST_SETTLER_PAUSE", &hold_path), ("REWINDFS_TEST_KILL_AT", "putback-record:1")]);
    let rewound = fx.cli_json(&["rewind", "1"]);
    let safety = rewound["safety_checkpoint"].as_i64().expect("safety_checkpoint");
    damage(&fx, Damage::Flip, &v.a0);
    drop(hold);
    wait_for("b.txt to settle and a.txt to be listed", || {
        let s = fx.status_json();
        s["pending_files"] == 1 && s["unsettled"].as_array().is_some_and(|u| u.len() == 1)
    });
    let pid = fx.daemon_pid();
    let out = fx.rewindfs(&["unmount", &mp(&fx)]);
    assert!(
        !out.status.success(),
        "an unmount whose daemon died reported success: {}; daemon log:\n{}",
        stdout(&out),
        std::fs::read_to_string(fx.store.join("daemon.log")).unwrap_or_default()
    );
    wait_for("the daemon to die", || !std::path::Path::new(&format!("/proc/{pid}")).exists());
    if is_mounted(fx.path()) {
        check(fx.rewindfs(&["unmount", &mp(&fx)]), "unmount of the dead mount");
    }
    fx.forget_mount();

    let said = stderr(&fx.mount_output(false, &["--auto-turn", "0"], &[]));
    assert!(
        said.contains(&format!("recovered: the restore of a.txt from checkpoint {safety} started at"))
            && said.contains("completed at this mount"),
        "the mount does not say it completed the put-back: {said}"
    );
    let recovered = fx.status_json()["recovered"].clone();
    assert_eq!(recovered[0]["op"], "restore", "{recovered}");
    assert_eq!(std::fs::read(fx.path().join("a.txt")).expect("a.txt"), v.a1, "a.txt as before the rewind");
    assert_eq!(std::fs::read(fx.path().join("b.txt")).expect("b.txt"), v.b0, "b.txt rewound");
    let s = fx.status_json();
    // The rewound placeholder, replaced, is history only (in the attic):
    // listed, never in the tree.
    let unsettled = s["unsettled"].as_array().expect("unsettled list");
    assert!(unsettled.iter().all(|u| u["path"] != "a.txt"), "a.txt is put back, not pending: {s}");
    fx.unmount();
    assert_eq!(std::fs::read(fx.ws.join("a.txt")).expect("plain a.txt"), v.a1, "a.txt as before the rewind");
    assert_eq!(std::fs::read(fx.ws.join("b.txt")).expect("plain b.txt"), v.b0, "b.txt rewound");
    assert_eq!(std::fs::read(fx.ws.join("keep.txt")).expect("plain keep.txt"), b"keep\n");
}
