//! Whole-tree rewind. Real programs over several turns, a `cp -a`
//! copy at each boundary; rewind to each checkpoint and compare (contents,
//! modes, owners, mtimes, symlinks, hard links, xattrs); undo; branches in
//! `log --graph`; the plain workspace after unmount; readers during a
//! rewind; kill -9 during the settle; symlinks pointing outside.

mod common;

use common::*;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Rows of the store's `pending` table, read directly (for a daemon that
/// is dead or gone).
fn pending_rows(fx: &MountFixture) -> i64 {
    let query = format!("sqlite3 {} 'select count(*) from pending'", fx.store.join("meta.sqlite").display());
    sh(fx.dir.path(), &query).trim().parse().unwrap()
}

/// Rewinds; returns the safety checkpoint.
fn rewind(fx: &MountFixture, to: i64) -> i64 {
    let v = fx.cli_json(&["rewind", &to.to_string()]);
    v["safety_checkpoint"].as_i64().unwrap_or_else(|| panic!("no safety_checkpoint in {v}"))
}

const GIT: &str = "git -c user.name=t -c user.email=t@example.com -c init.defaultBranch=main";

#[test]
fn rewind_to_every_checkpoint_undo_branch_and_unmount() {
    let mut fx = MountFixture::manual_turns();
    let mut cps: Vec<(i64, PathBuf)> = vec![(0, fx.copy_tree("c0"))];
    fx.sh(&format!(
        "mkdir -p src tree/a/b tree/c
         printf 'int x;\\n' > src/x.c && printf 'echo hi\\n' > run.sh
         for i in $(seq 1 50); do echo \"leaf $i\" > tree/a/b/f$i; done
         echo over-target > target.txt && echo source > source.txt
         echo shared > h1 && ln h1 h2
         {GIT} init -q . && {GIT} add -A && {GIT} commit -qm one
         head -c 64M /dev/urandom > big.bin"
    ));
    fx.py("os.setxattr('src/x.c', 'user.v', b'1')");
    cps.push((fx.turn("m1"), fx.copy_tree("c1")));

    // A build writing thousands of files, a large file rewritten in place,
    // a rename over, a directory rename, rm -rf, a commit.
    fx.sh(&format!(
        "python3 -c \"
import os
for d in range(30):
    os.makedirs('build/obj/%d' % d)
    for i in range(100):
        open('build/obj/%d/%d.o' % (d, i), 'w').write('object %d %d\\n' % (d, i))
\"
         dd if=/dev/urandom of=big.bin bs=1M count=4 seek=10 conv=notrunc status=none
         mv source.txt target.txt
         mv src lib && echo 'int y;' >> lib/x.c
         rm -rf tree
         echo 'shared v2' > h1
         ln -s lib/x.c link && chmod 755 run.sh
         {GIT} add -A && {GIT} commit -qm two"
    ));
    fx.py("os.setxattr('lib/x.c', 'user.v', b'2')");
    cps.push((fx.turn("m2"), fx.copy_tree("c2")));

    fx.sh(&format!(
        "rm -rf build
         mkdir -p tree2/x/y && echo new > tree2/x/y/z
         dd if=/dev/urandom of=big.bin bs=1M count=64 conv=notrunc status=none
         mv lib src2 && rm link && ln -s src2 link
         printf 'replaced by an editor\\n' > .h1.tmp && mv .h1.tmp h1
         touch -d '2005-05-05 05:05:05' run.sh
         {GIT} add -A && {GIT} commit -qm three"
    ));
    cps.push((fx.turn("m3"), fx.copy_tree("c3")));
    let latest = cps.last().unwrap().1.clone();

    // --dry-run --json lists the changes and changes nothing.
    let before = manifest(fx.path());
    let log_before = fx.cli_json(&["log"]).as_array().map(|a| a.len());
    let dry = fx.cli_json(&["rewind", &cps[1].0.to_string(), "--dry-run"]);
    let paths: Vec<&str> =
        dry["changes"].as_array().expect("changes").iter().filter_map(|c| c["path"].as_str()).collect();
    for p in ["big.bin", "target.txt", "h1", "run.sh", "src/x.c", "tree/a/b/f1"] {
        assert!(paths.contains(&p), "dry-run does not list {p}: {dry}");
    }
    assert_eq!(dry["dry_run"], true);
    assert_eq!(manifest(fx.path()), before, "rewind --dry-run changed the tree");
    assert_eq!(fx.cli_json(&["log"]).as_array().map(|a| a.len()), log_before, "rewind --dry-run sealed checkpoints");

    // Rewind to each checkpoint, compare, undo, compare with the latest.
    for i in [0usize, 1, 2, 3, 1, 0, 2] {
        let (n, copy) = (&cps[i].0, &cps[i].1);
        let safety = rewind(&fx, *n);
        assert_same_tree(copy, fx.path(), &format!("live tree after rewind to {n}"));
        if i > 0 {
            let log = fx.sh(&format!("{GIT} log --oneline | wc -l"));
            assert_eq!(log.trim(), i.to_string(), "git history after rewind to {n}");
            fx.sh("git fsck --no-progress 2>&1");
        }
        rewind(&fx, safety);
        assert_same_tree(&latest, fx.path(), &format!("live tree after undoing the rewind to {n} (rewind {safety})"));
    }

    // A new branch from checkpoint 1.
    let c1 = cps[1].0;
    rewind(&fx, c1);
    fx.sh("echo branch > branch.txt");
    let b1 = fx.turn("b1");
    fx.sh("echo more >> branch.txt");
    let b2 = fx.turn("b2");
    let graph = fx.cli(&["log", "--graph"]);
    let mark = |n: i64| -> char {
        graph
            .lines()
            .find(|l| l.get(1..).map(|r| r.split_whitespace().next() == Some(&n.to_string())).unwrap_or(false))
            .and_then(|l| l.chars().next())
            .unwrap_or_else(|| panic!("checkpoint {n} is not in log --graph:\n{graph}"))
    };
    assert_eq!(mark(b2), '*', "current checkpoint:\n{graph}");
    for n in [b1, c1, 0] {
        assert_eq!(mark(n), 'o', "checkpoint {n} is on the active path:\n{graph}");
    }
    for n in [cps[2].0, cps[3].0] {
        assert_eq!(mark(n), 'x', "checkpoint {n} is on an abandoned branch:\n{graph}");
    }
    assert!(graph.contains("message b2") && graph.contains("message m3"), "message ids in log --graph:\n{graph}");
    // The abandoned branch stays browsable.
    for (n, copy) in &cps[2..] {
        assert_same_tree(
            copy,
            &fx.path().join(format!(".rewindfs/checkpoints/{n}")),
            &format!("abandoned checkpoint {n}"),
        );
    }

    // Unmount right after a rewind: the settler finishes first, and the
    // plain workspace is the rewound tree.
    rewind(&fx, cps[3].0);
    fx.unmount();
    assert_same_tree(&latest, &fx.ws, "plain workspace after rewind + unmount");
}

/// Two files always written together with the same generation: a reader
/// reading a, b, a never sees a == a' != b while at most one rewind
/// overlapped its reads. A descriptor opened before a rewind keeps the old
/// file.
#[test]
fn readers_never_see_a_mixed_tree_and_old_descriptors_keep_the_old_file() {
    let fx = MountFixture::manual_turns();
    let mut cps = Vec::new();
    for g in 1..=4 {
        // Odd generations rewrite in place, even ones replace by rename.
        let script = if g % 2 == 1 {
            format!(
                "python3 -c \"import sys; [open(n, 'r+' if __import__('os').path.exists(n) else 'w').write(('gen %d ' % {g}).ljust(200000, '.')) for n in ('a', 'b')]\""
            )
        } else {
            format!(
                "for n in a b; do python3 -c \"open('$n.tmp', 'w').write(('gen %d ' % {g}).ljust(200000, '.'))\" && mv $n.tmp $n; done"
            )
        };
        fx.sh(&script);
        cps.push(fx.turn(&format!("g{g}")));
    }
    assert_eq!(&fx.sh("head -c 6 a; head -c 6 b"), "gen 4 gen 4 ");

    // The rewind counter lives outside the mount: odd while a rewind runs.
    let counter = fx.dir.path().join("counter");
    std::fs::write(&counter, "0").unwrap();
    let stop = fx.dir.path().join("stop");
    let reader = format!(
        r#"
import os, sys
def gen(n):
    with open(n, 'rb') as f:
        return f.read(200000).split(b' ')[1]
def cnt():
    return int(open({counter:?}).read())
mixes, windows, reads = [], 0, 0
while not os.path.exists({stop:?}):
    c1 = cnt(); a1 = gen('a'); b = gen('b'); a2 = gen('a'); c2 = cnt()
    reads += 1
    # At most one rewind overlapped these reads.
    if c2 - c1 <= 1 or (c1 % 2 == 0 and c2 - c1 == 2):
        if c1 != c2:
            windows += 1
        if a1 == a2 and b != a1:
            mixes.append((c1, c2, a1, b, a2))
print(reads, windows, len(mixes), mixes[:5])
"#
    );
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(&reader)
        .current_dir(fx.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let set = |v: u64| {
        let tmp = counter.with_extension("tmp");
        std::fs::write(&tmp, v.to_string()).unwrap();
        std::fs::rename(&tmp, &counter).unwrap();
    };
    let mut c = 0u64;
    let order = [0usize, 2, 1, 3, 0, 3, 1, 2, 0, 1, 3, 2, 0, 2, 3, 1];
    for i in order {
        c += 1;
        set(c);
        rewind(&fx, cps[i]);
        c += 1;
        set(c);
        let want = format!("gen {} gen {} ", i + 1, i + 1);
        assert_eq!(fx.sh("head -c 6 a; head -c 6 b"), want, "after rewind to {}", cps[i]);
    }
    std::fs::write(&stop, "").unwrap();
    let out = wait_child(&mut child, CHILD_TIMEOUT, "reader");
    let text = stdout(&check(out, "reader"));
    let fields: Vec<&str> = text.split_whitespace().collect();
    eprintln!("reader: {text}");
    assert_eq!(fields.get(2), Some(&"0"), "the reader saw a mixed tree (c1, c2, a, b, a'): {text}");
    assert!(fields[0].parse::<u64>().unwrap() > 0, "the reader never read: {text}");

    // Descriptors opened before a rewind: now at generation 3 (cps[2]),
    // 'a' was rewritten in place in turn 3 and replaced by rename in turn 4.
    rewind(&fx, cps[2]);
    let mut fa = std::fs::File::open(fx.path().join("a")).unwrap();
    let mut fb = std::fs::File::open(fx.path().join("b")).unwrap();
    let read6 = |f: &mut std::fs::File| {
        let mut buf = [0u8; 6];
        f.seek(SeekFrom::Start(0)).unwrap();
        f.read_exact(&mut buf).unwrap();
        String::from_utf8_lossy(&buf).into_owned()
    };
    assert_eq!(read6(&mut fa), "gen 3 ");
    rewind(&fx, cps[1]); // gen 2: a was replaced by rename in turn 2
    assert_eq!(read6(&mut fa), "gen 3 ", "an open descriptor after a rewind (file replaced by rename since)");
    rewind(&fx, cps[0]); // gen 1
    assert_eq!(read6(&mut fb), "gen 3 ", "an open descriptor after two rewinds");
    assert_eq!(fx.sh("head -c 6 a; head -c 6 b"), "gen 1 gen 1 ", "new opens see the rewound files");
}

/// Rewinding a turn that rewrote a big file in place leaves its bytes
/// pending; kill -9 right after `rewind` returns; the next mount resumes
/// the settle.
#[test]
fn kill_during_settle_resumes_on_next_mount() {
    let mut fx = MountFixture::manual_turns();
    fx.sh("head -c 96M /dev/urandom > big.bin && echo small > small");
    let c1 = fx.turn("m1");
    let copy = fx.copy_tree("c1");
    fx.sh("dd if=/dev/urandom of=big.bin bs=1M count=96 conv=notrunc status=none && echo changed > small");
    fx.turn("m2");
    let pid = fx.daemon_pid();
    let mp = fx.path().to_str().unwrap().to_string();
    let out = run_with_timeout(
        fx.command().arg("rewind").arg("-C").arg(&mp).arg(c1.to_string()).arg("--json"),
        CHILD_TIMEOUT,
    );
    // SAFETY: kill has no memory preconditions.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    check(out, "rewind");
    let pending = pending_rows(&fx);
    eprintln!("pending files left by the killed daemon: {pending}");
    // A daemon killed in the middle of a fill's `sync_data` dies only once
    // the write-back is done: unmounting before then meets it alive (the
    // unmount then rightly says it died before unmounting).
    fx.detach_dead(pid);
    assert!(!is_mounted(fx.path()));
    fx.mount(false, &["--auto-turn", "0"]);
    assert_same_tree(&copy, fx.path(), "after kill -9 during the settle and remount");
    fx.unmount();
    assert_same_tree(&copy, &fx.ws, "plain workspace after the resumed settle");
    let left = pending_rows(&fx);
    assert_eq!(left, 0, "pending files left after a clean unmount");
}

/// The settler writes a rewind's files in steps of many files, made
/// durable together (one `syncfs` once all of the step are written, then
/// one commit of the journal's database): before, each file cost its own
/// flush and commit (2,000 small files: 2 s). A file whose
/// sync fails stays pending while the others of its step settle, and
/// settles at its retry. Every file ends with its rewound bytes, settled
/// once.
#[test]
fn the_settler_makes_many_rewound_files_durable_together_and_a_failed_sync_costs_one_file() {
    const FILES: usize = 300;
    let hold = tempfile::NamedTempFile::new().expect("pause file");
    let hold_path = hold.path().to_str().expect("utf-8 path").to_string();
    let mut fx = MountFixture::unmounted();
    std::fs::create_dir(fx.ws.join("d")).expect("mkdir d");
    for i in 0..FILES {
        std::fs::write(fx.ws.join(format!("d/f{i}")), format!("original {i}\n")).expect("write a file");
    }
    let env = [
        ("REWINDFS_TEST_SETTLER_PAUSE", hold_path.as_str()),
        ("REWINDFS_TEST_FAIL_AT", "settle-sync:2"),
        // The failed file and its retry are said at warn and info.
        ("RUST_LOG", "rewindfs=info"),
    ];
    fx.mount_with_env(false, &["--auto-turn", "0"], &env);
    let c1 = fx.turn("m1");
    fx.sh(&format!("for i in $(seq 0 {}); do echo changed >> d/f$i; done", FILES - 1));
    fx.turn("m2");
    rewind(&fx, c1);
    assert_eq!(fx.status_json()["pending_files"], FILES, "every rewound file waits for the held settler");
    drop(hold);
    wait_for("the settler to settle every file", || fx.status_json()["pending_files"] == 0);

    let status = fx.status_json();
    assert_eq!(status["settled_files"], FILES, "each file settled once: {status}");
    let largest = status["largest_settle_step"].as_u64().expect("largest_settle_step in status --json");
    assert!(largest > 1, "no step made several files durable together: {status}");
    let log = std::fs::read_to_string(fx.store.join("daemon.log")).expect("daemon log");
    let failed: Vec<&str> =
        log.lines().filter(|l| l.contains("cannot settle d/f") && l.contains("cannot write")).collect();
    assert_eq!(failed.len(), 1, "one file's sync failed, and is named:\n{log}");
    let again = log.lines().any(|l| l.contains("settled d/f") && l.contains("after all"));
    assert!(again, "the file whose sync failed settled at its retry:\n{log}");
    for i in 0..FILES {
        let want = format!("original {i}\n");
        assert_eq!(
            std::fs::read_to_string(fx.ws.join(format!("d/f{i}"))).expect("backing file"),
            want,
            "d/f{i} on disk"
        );
        assert_eq!(std::fs::read_to_string(fx.path().join(format!("d/f{i}"))).expect("file"), want, "d/f{i}");
    }
    fx.unmount();
    assert_eq!(pending_rows(&fx), 0, "pending rows left after a clean unmount");
}

/// Names that rewind and restore must replace are symlinks to a directory
/// outside the workspace: nothing outside is touched.
#[test]
fn rewind_and_restore_never_touch_outside_through_symlinks() {
    let fx = MountFixture::manual_turns();
    let outside = fx.dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    sh(&outside, "mkdir d && echo outside-f > d/f && echo outside-file > file && echo outside-x > x && chmod 600 file");
    let outside_before = manifest(&outside);
    fx.sh("mkdir d && echo inside-f > d/f && echo inside-file > file && chmod 644 file");
    let c1 = fx.turn("m1");
    let copy = fx.copy_tree("c1");
    let out = outside.to_str().unwrap();
    fx.sh(&format!("rm -rf d file && ln -s {out}/d d && ln -s {out}/file file && ln -s {out}/x x"));
    fx.turn("m2");
    let dry = fx.cli_json(&["rewind", &c1.to_string(), "--dry-run"]);
    assert!(!dry["changes"].as_array().unwrap().is_empty(), "dry-run: {dry}");
    let safety = rewind(&fx, c1);
    assert_same_tree(&copy, fx.path(), "after rewind over outward symlinks");
    assert_eq!(manifest(&outside), outside_before, "rewind changed files outside the workspace");
    // Back to the symlinks, then restore through them.
    rewind(&fx, safety);
    assert_eq!(fx.sh("readlink d file x"), format!("{out}/d\n{out}/file\n{out}/x\n"));
    let abs = |n: &str| fx.path().join(n).to_str().unwrap().to_string();
    fx.cli(&["restore", &c1.to_string(), "--", &abs("d"), &abs("file"), &abs("x")]);
    assert_eq!(manifest(&outside), outside_before, "restore changed files outside the workspace");
    assert_eq!(fx.sh("cat d/f file; test ! -e x && test ! -L x && echo gone"), "inside-f\ninside-file\ngone\n");
    // And the unmounted store/workspace never wrote there either.
    assert_eq!(sh(&outside, "cat d/f file x"), "outside-f\noutside-file\noutside-x\n");
    let _ = Path::new(out);
}

#[test]
fn cached_names_of_a_removed_tree_are_gone_and_status_reports_the_settler() {
    let mut fx = MountFixture::manual_turns();
    fx.sh("head -c 64M /dev/urandom > big.bin");
    let c1 = fx.turn("m1");
    let copy = fx.copy_tree("c1");
    // A build tree the kernel has cached whole (find stats every name), and
    // the big file rewritten in place.
    fx.sh(
        "for d in $(seq 1 20); do mkdir -p gen/d$d; for f in $(seq 1 50); do echo $d$f > gen/d$d/f$f.o; done; done; \
         find gen -type f | wc -l; dd if=/dev/urandom of=big.bin bs=1M count=64 conv=notrunc status=none",
    );
    fx.turn("m2");
    rewind(&fx, c1);
    let root = fx.path();
    assert!(!root.join("gen").exists(), "gen/ still visible after the rewind");
    assert!(!root.join("gen/d3").exists(), "gen/d3 still visible after the rewind");
    assert!(!root.join("gen/d3/f7.o").exists(), "a cached file under gen/ still visible after the rewind");
    let listing = fx.sh("ls -A");
    assert!(!listing.lines().any(|l| l == "gen"), "gen listed after the rewind: {listing}");
    // status --json says when the settler has written every rewound file:
    // once it reports 0, the plain workspace holds the rewound bytes.
    let first = fx.status_json()["pending_files"].as_u64().expect("pending_files in status --json");
    eprintln!("pending files right after the rewind: {first}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let n = fx.status_json()["pending_files"].as_u64().expect("pending_files");
        if n == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the settler did not finish within 120 s ({n} pending)");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let on_disk = std::fs::read(fx.ws.join("big.bin")).expect("read the workspace's big.bin");
    let expected = std::fs::read(copy.join("big.bin")).expect("read the copy");
    assert!(on_disk == expected, "pending_files was 0 but the workspace's big.bin is not the rewound content");
    assert_same_tree(&copy, fx.path(), "the mount after the rewind");
    // Names come back when the tree is made again (the expired entries are
    // looked up afresh, not served from the old cache).
    fx.sh("mkdir -p gen/d3 && echo new > gen/d3/f7.o");
    assert_eq!(std::fs::read_to_string(root.join("gen/d3/f7.o")).unwrap(), "new\n");
    assert!(!root.join("gen/d4").exists(), "gen/d4 of the removed tree came back");
    fx.unmount();
}

/// A rewind reads the states at the checkpoint once, in its check before
/// the tree freezes, and the frozen rewind uses them. A file whose only
/// record since the checkpoint is a `chmod` (so its content there is still
/// the live one) and that is then written between the check and the
/// freeze must get its content back all the same: the write is a record,
/// so the check runs again, frozen, and reads the states anew. The hook
/// holds the rewind at the very end of its check. A first version counted
/// the records only after the check (here: after the write), so a write
/// made while the check ran went unnoticed and the rewind used its stale
/// states (this test then failed).
#[test]
fn a_file_written_between_the_rewinds_check_and_its_freeze_gets_its_content_back() {
    let mut f = MountFixture::unmounted();
    std::fs::write(f.ws.join("a"), "at m1\n").expect("write a");
    let (pause, reached) = mount_with_hook(&mut f, "REWINDFS_TEST_REWIND_CHECKED_PAUSE", "rewind-pause");
    f.turn("m1");
    f.sh("chmod 600 a");
    f.turn("m2");
    std::fs::write(&pause, b"").expect("create the pause file");
    let mut rewind = spawn_cli(&f, &["rewind", "m1"]);
    wait_reached(&reached, "the rewind never reached the hook after its check");
    f.sh("echo 'written while the rewind waited' > a");
    std::fs::remove_file(&pause).expect("remove the pause file");
    check(wait_child(&mut rewind, CHILD_TIMEOUT, "rewindfs rewind"), "rewindfs rewind");
    let a = f.path().join("a");
    assert_eq!(std::fs::read_to_string(&a).expect("read a"), "at m1\n", "the rewind put back the content of m1");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&a).expect("stat a").permissions()) & 0o777;
    assert_eq!(mode, 0o644, "the rewind put back the mode of m1");
}

/// A rewind leaves a file's old bytes to the settler, which wrote each
/// file whole while holding the tree: undoing that rewind at once (or any
/// rewind right after it) waited for the whole file to be written, 5 s
/// for a 1 GiB file against 14 ms once it was. The settler now asks
/// before every step whether a rewind or restore waits, leaves the file
/// pending and writes it again after. The hook holds the settler before a
/// step of the file; the undo is asked; the hook lets one step go and is
/// armed again at once. Then the file left part-written settles, and
/// each checkpoint still reads as it was.
#[test]
fn undoing_a_rewind_does_not_wait_for_the_settler_to_write_a_large_file() {
    let mut f = MountFixture::unmounted();
    // Many steps (chunks read, 4 MiB written): the hook lets one go.
    let size = 48 << 20;
    let old: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    let new: Vec<u8> = (0..size).map(|i| (i % 241) as u8).collect();
    std::fs::write(f.ws.join("big"), &old).expect("write big");
    let (pause, reached) = mount_with_hook(&mut f, "REWINDFS_TEST_SETTLE_PAUSE", "settle-pause");
    let m1 = f.turn("m1");
    std::fs::write(f.path().join("big"), &new).expect("rewrite big");
    f.turn("m2");
    std::fs::write(&pause, b"").expect("create the pause file");
    let rewound = f.cli_json(&["rewind", "m1"]);
    let safety = rewound["safety_checkpoint"].as_i64().expect("the rewind names its safety checkpoint").to_string();
    wait_reached(&reached, "the settler never started writing the rewound file");
    let mut undo = spawn_cli(&f, &["rewind", &safety]);
    // The undo waits for the tree; the settler ends one step and is held
    // again at its next (if it gets that far).
    let gap = std::time::Duration::from_millis(15);
    let (finished, out) = one_step_let_go(&mut undo, &pause, gap, "rewindfs rewind (the undo)");
    assert!(finished, "the undo waited for the settler, held by the hook");
    check(out, "rewindfs rewind (the undo)");
    let big = f.path().join("big");
    assert!(std::fs::read(&big).expect("read big") == new, "the undo put back the bytes of m2");
    // The file the settler left part-written (now kept for history only)
    // is written whole after.
    wait_for("the settler to finish", || f.status_json()["pending_files"] == 0);
    let at_m1 = f.path().join(format!(".rewindfs/checkpoints/{m1}/big"));
    assert!(std::fs::read(&at_m1).expect("read big at m1") == old, "checkpoint 1 still reads the old bytes");
    f.cli_json(&["rewind", "m1"]);
    assert!(std::fs::read(&big).expect("read big") == old, "a rewind to m1 puts back the old bytes");
    wait_for("the settler to finish", || f.status_json()["pending_files"] == 0);
    assert!(std::fs::read(f.ws.join("big")).expect("read the backing big") == old, "settled whole on disk");
    f.cli(&["fsck"]);
}
