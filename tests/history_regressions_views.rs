//! Sequences found by the model test (tests/history_model.rs) in
//! which the view of an old checkpoint changed after later operations, each
//! one a regression test. Each sequence is replayed by the model test's own
//! harness, which after every history step compares every sealed
//! checkpoint's view with the model's snapshot of that checkpoint (see
//! /work/notes/model-failures.md, F2 to F4, for where they came from).
//!
//! The common cause: a checkpoint view met an object before it was ever
//! recorded (so before it had an object id) and the browser kept that node;
//! the records written later when the object changed (rm -rf, mv, a
//! restore, a rewind) were looked up by id only, so they never applied to
//! it and the view showed the later live state.

mod common;
#[allow(dead_code)]
#[path = "history_model/harness.rs"]
mod harness;
#[allow(dead_code)]
#[path = "history_model/model.rs"]
mod model;

use harness::{Opts, Runner};
use model::Step;

/// Runs `lines` (model steps, as the model test prints them) on a fresh
/// mount; panics with the first difference from the model.
fn replay(lines: &[&str]) {
    common::require_fuse();
    // As tests/history_model.rs: the model's files are made 644 and
    // directories 755 whatever the caller's umask, and the fixture's own
    // directories (store, runtime dir) must not be writable by others.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
    let steps: Vec<Step> = lines.iter().map(|l| Step::parse(l).unwrap_or_else(|e| panic!("{e}"))).collect();
    let run = || -> Result<(), harness::Failure> {
        let mut r = Runner::new(Opts::default())?;
        for step in &steps {
            if !r.exec(step)? {
                panic!("step `{step}` does not apply: the sequence no longer tests what it was written for");
            }
        }
        r.check_end()
    };
    if let Err(f) = run() {
        panic!("({}) {}\nsequence: {lines:?}", f.kind, f.msg);
    }
}

/// F2: a restore that recreates `b` as the parent of `b/d` (which did not
/// exist at 4): the view of 0 lost `b/a` (and showed `d`).
#[test]
fn view_of_0_keeps_a_removed_directory_after_a_restore_recreates_it() {
    replay(&["turn", "turn m1", "rewind 1", "rmrf b", "restore 4 b/d"]);
}

/// F2, variant: a directory made after a rewind showed in the view of the
/// checkpoint before the rewind once a restore followed.
#[test]
fn view_of_0_does_not_show_a_directory_made_after_a_rewind() {
    replay(&["turn m1", "rewind 1", "mkdir d", "restore 2 b"]);
}

/// F3: a file written in place after a rewind, then moved away by the undo:
/// the view of the rewind's result checkpoint showed its older bytes.
#[test]
fn view_keeps_bytes_written_in_place_before_an_undo() {
    replay(&["rewind 0", "write a 76 81 12492", "restore 1 b/a", "undo"]);
}

/// F3, variant: an append, a no-op restore, then a rewind.
#[test]
fn view_keeps_an_append_after_a_restore_and_a_rewind() {
    replay(&["turn m1", "turn m2", "append a 134 20839", "turn", "restore 3 b/a", "rewind 0"]);
}

/// F4: after kill -9 and a remount, a rename then a restore removing the
/// new name: the view of 0 lost `a`.
#[test]
fn view_of_0_keeps_a_file_renamed_after_a_crash() {
    replay(&["kill", "mv a c", "restore 1 c"]);
}

/// F4, variant: after kill -9, `rm -rf b` and a restore of a path that did
/// not exist: the view of 0 lost `b` and `b/a`.
#[test]
fn view_of_0_keeps_a_directory_removed_after_a_crash() {
    replay(&["kill", "rmrf b", "restore 1 d"]);
}

/// A file changed and renamed, held open, then rewound: the rewind visited
/// it twice (once as changed, once as put back). The first visit swapped a
/// new inode in under the old name and moved the current one (the one the
/// descriptor holds) to the attic; the second found that one and rewrote
/// it in place, so the descriptor read the old 40 bytes instead of its 693.
#[test]
fn rewind_leaves_the_bytes_of_a_descriptor_alone_when_it_puts_a_renamed_file_back() {
    replay(&["trunc a 693", "mv a c", "open c", "rewind 0"]);
}

/// After kill -9, the daemon looks for changes made outside the mount since
/// the newest checkpoint. That checkpoint's time has only milliseconds, and
/// the rewind's last changes (the root's times put back) fall in the same
/// millisecond as its result checkpoint: the root was taken for changed
/// outside, and every older view failed with EIO. (Before the fix this
/// failed in most runs, not all: both had to fall in one millisecond.)
#[test]
fn a_rewind_just_before_a_crash_is_not_taken_for_an_outside_change() {
    replay(&["symlink ../a d", "rewind 0", "kill"]);
}

/// A rewind left `a`'s old bytes pending; the settler wrote them after the
/// result checkpoint was sealed, then the daemon was killed. The next mount
/// took that write for a change made outside the mount: the rewind's result
/// checkpoint could no longer show `a`.
#[test]
fn a_file_the_settler_filled_before_a_crash_is_not_taken_for_an_outside_change() {
    replay(&["append a 100 5", "rewind 0", "kill"]);
}

/// The other side of the two tests above: after a rewind (its file filled
/// by the settler) and kill -9, a file changed outside the mount is still
/// marked, and the views of earlier checkpoints refuse to show its live
/// bytes, while the rewound file reads back.
#[test]
fn a_change_made_outside_after_a_crash_is_still_detected() {
    common::require_fuse();
    let mut fx = common::MountFixture::unmounted();
    common::sh(&fx.ws, "echo one > a && echo two > b");
    fx.mount(false, &["--auto-turn", "0"]);
    fx.sh("echo more >> a");
    fx.turn("t1");
    let v = fx.cli_json(&["rewind", "0"]);
    let result = v["result_checkpoint"].as_i64().unwrap_or_else(|| panic!("no result_checkpoint in {v}"));
    let pid = fx.daemon_pid();
    fx.sh(&format!("kill -9 {pid} && while [ -e /proc/{pid} ]; do sleep 0.01; done"));
    fx.unmount();
    common::sh(&fx.ws, "echo changed > b");
    fx.mount(false, &["--auto-turn", "0"]);
    let view = fx.path().join(format!(".rewindfs/checkpoints/{result}"));
    assert_eq!(std::fs::read_to_string(view.join("a")).unwrap_or_else(|e| panic!("view of a: {e}")), "one\n");
    let b = std::fs::read_to_string(view.join("b"));
    assert_eq!(
        b.as_ref().map_err(|e| e.raw_os_error()),
        Err(Some(libc::EIO)),
        "the view of {result} shows b changed outside the mount after the crash: {b:?}"
    );
}

/// F12 (seed 655218057): a restore of `b/a` while `b` is a file replaces
/// `b` with a directory. Restore gave that directory the recorded owner (so
/// that the agent is not locked out) but not its xattrs or times, while the
/// model gave it neither: the two disagreed on the owner, which showed as a
/// view differing from the model after the restore. A directory put in the
/// place of a file is recreated like a missing one: mode, owner, times and
/// xattrs as recorded.
#[test]
fn restore_through_a_parent_that_is_now_a_file_gives_it_its_recorded_attributes() {
    replay(&["chown b 1234 4321", "setx b 1 7 43859", "turn m1", "rmrf b", "create b 10 1", "restore 1 b/a"]);
}

/// A mount of a workspace holding `a` and its hard link `l`, after one
/// turn; the view of checkpoint 0 (no record of the file yet).
fn linked_pair() -> (common::MountFixture, std::path::PathBuf) {
    common::require_fuse();
    let mut fx = common::MountFixture::unmounted();
    common::sh(&fx.ws, "echo one > a && ln a l");
    fx.mount(false, &["--auto-turn", "0"]);
    fx.turn("t1");
    let view = fx.path().join(".rewindfs/checkpoints/0");
    (fx, view)
}

/// E1: two names of one file (a hard link) showed different inode numbers
/// in a checkpoint view. The browser numbered a view object by the node it
/// was first met as: `a`, met before anything was recorded of the file,
/// was numbered as a node without id; once the file was recorded (the
/// chmod), its other name `l` came as a node with an id, which is another
/// key, so another number, while the kernel still held the first.
#[test]
fn two_names_of_one_file_have_one_inode_number_in_a_view() {
    use std::os::unix::fs::{DirEntryExt, MetadataExt};
    let (fx, view) = linked_pair();
    let stat =
        |name: &str| std::fs::symlink_metadata(view.join(name)).unwrap_or_else(|e| panic!("view of {name}: {e}"));
    let a = stat("a");
    fx.sh("chmod 600 a");
    let l = stat("l");
    assert_eq!((a.nlink(), l.nlink()), (2, 2), "both names of the file, link count 2");
    assert_eq!(l.mode() & 0o777, 0o644, "the view shows the mode at checkpoint 0");
    assert_eq!(a.ino(), l.ino(), "`a` and its hard link `l` have different inode numbers in the view of 0");
    // Listed (readdirplus, as `ls -l` does) and looked up again: still one number.
    let listed: Vec<(String, u64)> = std::fs::read_dir(&view)
        .expect("list the view of 0")
        .map(|e| e.expect("entry"))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.ino()))
        .collect();
    for (name, ino) in &listed {
        if name == "a" || name == "l" {
            assert_eq!(*ino, a.ino(), "{name} listed with another inode number: {listed:?}");
        }
    }
    assert_eq!(stat("a").ino(), stat("l").ino());
}

/// F15: the kernel forgets view inodes whenever it reclaims memory (under
/// load; here `drop_caches`), and a name looked up again was given a new
/// number: a walk that stats one name of a hard-linked file, loses the
/// inode to reclaim, then stats the other name, saw two numbers. An object
/// keeps its number across forgets, numbered by handle (no record yet) or
/// by id (after the chmod), and across the change from one to the other.
#[test]
fn a_hard_linked_file_keeps_one_inode_number_in_a_view_after_the_kernel_forgets_it() {
    use std::os::unix::fs::MetadataExt;
    let (fx, view) = linked_pair();
    let ino =
        |name: &str| std::fs::symlink_metadata(view.join(name)).unwrap_or_else(|e| panic!("view of {name}: {e}")).ino();
    let held = || fx.status_json()["view_inodes"].as_u64().unwrap_or_else(|| panic!("no view_inodes"));
    let baseline = held();
    // Until the daemon has been told to forget everything the stat took.
    let forget = || {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while held() > baseline && std::time::Instant::now() < deadline {
            std::fs::write("/proc/sys/vm/drop_caches", "2").expect("cannot drop the kernel's caches");
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        assert!(held() <= baseline, "the kernel did not forget the view's inodes: {} held, {baseline} before", held());
    };
    let first = ino("a");
    forget();
    assert_eq!(ino("l"), first, "`l` after the kernel forgot `a` (the file has no record yet)");
    forget();
    fx.sh("chmod 600 a");
    assert_eq!(ino("l"), first, "`l` after the file got an id");
    forget();
    assert_eq!(ino("a"), first, "`a` after a forget, numbered by id");
}

/// A directory that was in the workspace before the mount (never
/// recorded, so a view numbers it by handle) is looked up in the view of
/// checkpoint 0 (the kernel keeps that entry for an hour), then removed
/// and brought back by a rewind, which recreates it as a new inode. The
/// kernel asks again by the number it kept: the view answered EIO ("an
/// object never recorded was changed under the mount"), since the number
/// named the handle the object no longer has, until a listing of the
/// checkpoint gave a new number.
#[test]
fn a_view_entry_kept_by_the_kernel_still_reads_after_a_rewind_recreates_it() {
    let mut fx = common::MountFixture::unmounted();
    std::fs::create_dir(fx.ws.join("b")).expect("mkdir b");
    std::fs::write(fx.ws.join("b/a"), b"before the mount\n").expect("write b/a");
    fx.mount(false, &["--auto-turn", "0"]);
    let script = r#"
import os, sys
v = '.rewindfs/checkpoints/0/b'
def look():
    st = os.stat(v)
    xattrs = os.listxattr(v)
    return (st.st_ino, sorted(os.listdir(v)), open(v + '/a').read(), xattrs)
first = look()
print(first[1], repr(first[2]))
sys.stdout.flush()
"#;
    let before = fx.py(script);
    assert_eq!(before.trim(), "['a'] 'before the mount\\n'");
    let c1 = fx.turn("r000001");
    fx.sh("rm -rf b");
    fx.cli_json(&["rewind", &c1.to_string()]);
    assert_eq!(fx.sh("cat b/a"), "before the mount\n", "b is back in the live tree");
    // The same lookups, by the numbers the kernel kept.
    assert_eq!(fx.py(script).trim(), "['a'] 'before the mount\\n'", "the view of 0 after the rewind");
    fx.assert_fsck_clean("after a view entry outlived its object's inode");
}
