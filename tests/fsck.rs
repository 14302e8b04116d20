//! `rewindfs fsck` through the real binary. A clean store passes
//! (mounted, through the daemon, and unmounted, read-only); a flipped byte
//! in a pack, a truncated pack, a missing pack, an attic file removed and
//! a row deleted with sqlite3 are each found and named by checkpoint and
//! path, with a non-zero exit; `--repair` drops only what is lost.

mod common;

use common::*;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Output;

/// Exit status of `fsck` when it found problems.
const PROBLEMS: i32 = 6;
/// Exit status of `fsck --repair` when it dealt with every problem.
const REPAIRED: i32 = 7;

/// A history over three checkpoints, then unmounted:
/// - `src/app.py`: "version-zero-of-app" at mount, "version-one-of-app" at
///   checkpoint 1 (m1), "version-two-of-app" at 2 (m2), then "final";
/// - `data.bin`: 300 kB of random bytes at mount and at 1, rewritten in
///   turn 2 (its old bytes become a record of several chunks, the last
///   ones stored);
/// - `gone.txt`: removed in turn 2 (kept in the attic);
/// - a directory renamed and a rewind to checkpoint 1 and back, so the
///   clean case covers what the attic and rewinds leave behind.
fn history() -> MountFixture {
    let mut fx = MountFixture::unmounted();
    sh(
        &fx.ws,
        "mkdir -p src lib/deep && printf version-zero-of-app > src/app.py
         head -c 300000 /dev/urandom > data.bin && echo bye > gone.txt && echo x > lib/deep/x.txt",
    );
    fx.mount(false, &["--auto-turn", "0"]);
    fx.sh("printf version-one-of-app > src/app.py");
    assert_eq!(fx.turn("m1"), 1);
    fx.sh("printf version-two-of-app > src/app.py && mv lib lib2");
    assert_eq!(fx.turn("m2"), 2);
    fx.sh("head -c 300000 /dev/urandom > data.bin && rm gone.txt && printf final > src/app.py");
    let rewound = fx.cli_json(&["rewind", "1"]);
    let safety = rewound["safety_checkpoint"].as_i64().expect("safety checkpoint");
    fx.cli_json(&["rewind", &safety.to_string()]);
    assert_eq!(std::fs::read(fx.path().join("src/app.py")).expect("app.py"), b"final");
    fx.unmount();
    fx
}

fn fsck(fx: &MountFixture, args: &[&str]) -> Output {
    let mut full = vec!["fsck"];
    full.extend_from_slice(args);
    fx.rewindfs(&full)
}

fn store_arg(fx: &MountFixture) -> String {
    fx.store.to_str().expect("utf-8 path").to_string()
}

/// Runs `fsck --store STORE` and asserts it found problems; returns stdout.
fn fsck_finds(fx: &MountFixture) -> String {
    let out = fsck(fx, &["--store", &store_arg(fx)]);
    assert_eq!(out.status.code(), Some(PROBLEMS), "fsck must fail: {}", describe_status(&out));
    stdout(&out)
}

fn pack(fx: &MountFixture) -> PathBuf {
    fx.store.join("chunks/packs/000001.pack")
}

/// Flips one byte of the first occurrence of `needle` in the pack.
fn flip(fx: &MountFixture, needle: &[u8]) {
    let path = pack(fx);
    let mut bytes = std::fs::read(&path).expect("read pack");
    let at = bytes.windows(needle.len()).position(|w| w == needle).expect("the bytes are stored raw in the pack");
    bytes[at + 3] ^= 0x20;
    std::fs::write(&path, bytes).expect("write pack");
}

fn sqlite(fx: &MountFixture, sql: &str) -> String {
    sh(fx.dir.path(), &format!("sqlite3 {} \"{sql}\"", fx.store.join("meta.sqlite").display()))
}

/// The object id of `gone.txt` (kept in the attic under that number).
fn gone_txt(fx: &MountFixture) -> String {
    let query = "SELECT DISTINCT target FROM entry_pre WHERE name = CAST('gone.txt' AS BLOB) AND target IS NOT NULL";
    let id = sqlite(fx, query).trim().to_string();
    assert!(!id.is_empty() && !id.contains('\n'), "gone.txt has one object: {id:?}");
    id
}

#[test]
fn a_clean_store_passes_mounted_and_unmounted() {
    let mut fx = history();
    // An orderly unmount folds the journal log and gives back its
    // preallocated blocks: a store at rest reserves nothing.
    let log = std::fs::metadata(fx.store.join("journal.log")).expect("journal.log");
    assert_eq!((log.len(), log.blocks()), (0, 0), "the journal log after an orderly unmount");
    let out = check(fsck(&fx, &["--store", &store_arg(&fx)]), "fsck --store of a clean store");
    let text = stdout(&out);
    assert!(text.lines().next().is_some_and(|l| l.ends_with("no problems")), "{text}");
    assert_eq!(text.lines().count(), 1, "a clean store has one summary line: {text}");

    let ws = fx.ws.to_str().expect("utf-8").to_string();
    let v: serde_json::Value = serde_json::from_str(&stdout(&check(
        fsck(&fx, &["-C", &ws, "--store", &store_arg(&fx), "--json"]),
        "fsck -C WS --json",
    )))
    .expect("json");
    assert_eq!(v["problems"], serde_json::json!([]), "{v}");
    assert_eq!(v["exit_status"], 0);
    assert!(v["chunks_checked"].as_u64().is_some_and(|n| n >= 5), "{v}");
    assert!(v["checkpoints"].as_u64().is_some_and(|n| n >= 5), "{v}");

    // Mounted: through the daemon.
    fx.mount(false, &["--auto-turn", "0"]);
    let mp = fx.mountpoint.to_str().expect("utf-8").to_string();
    let text = stdout(&check(fsck(&fx, &["-C", &mp]), "fsck -C MOUNT"));
    assert!(text.contains("no problems"), "{text}");
    // --store of a mounted store also goes through its daemon.
    check(fsck(&fx, &["--store", &store_arg(&fx)]), "fsck --store of a mounted store");
}

#[test]
fn a_flipped_byte_is_named_by_checkpoint_and_path_and_repair_drops_only_it() {
    let mut fx = history();
    let before = manifest(&fx.ws);
    flip(&fx, b"version-one-of-app");
    let text = fsck_finds(&fx);
    let line =
        text.lines().find(|l| l.contains("src/app.py")).unwrap_or_else(|| panic!("src/app.py is not named: {text}"));
    assert!(line.starts_with("checkpoint 1 (message m1): src/app.py: chunk "), "{line}");
    assert!(line.contains("is corrupt") && line.contains("pack 1 at offset"), "{line}");
    assert_eq!(text.lines().count(), 2, "one summary line, one problem: {text}");

    // Mounted, the daemon finds it too; --repair is refused while mounted.
    fx.mount(false, &["--auto-turn", "0"]);
    let mp = fx.mountpoint.to_str().expect("utf-8").to_string();
    let out = fsck(&fx, &["-C", &mp]);
    assert_eq!(out.status.code(), Some(PROBLEMS), "{}", describe_status(&out));
    assert!(stdout(&out).contains("checkpoint 1 (message m1): src/app.py: chunk "), "{}", stdout(&out));
    let out = fsck(&fx, &["-C", &mp, "--repair"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe_status(&out));
    assert!(stderr(&out).contains("needs it unmounted"), "{}", stderr(&out));
    fx.unmount();

    let out = fsck(&fx, &["--store", &store_arg(&fx), "--repair"]);
    assert_eq!(out.status.code(), Some(REPAIRED), "{}", describe_status(&out));
    assert!(stdout(&out).contains("repaired: dropped the record"), "{}", stdout(&out));
    check(fsck(&fx, &["--store", &store_arg(&fx)]), "fsck after --repair");
    assert_eq!(manifest(&fx.ws), before, "repair never touches the workspace");

    // The lost version reads as unknown, never as other bytes; the rest of
    // the history is intact.
    fx.mount(false, &["--auto-turn", "0"]);
    let cps = fx.path().join(".rewindfs/checkpoints");
    assert!(std::fs::read(cps.join("1/src/app.py")).is_err(), "checkpoint 1's app.py must not read as data");
    assert_eq!(std::fs::read(cps.join("0/src/app.py")).expect("checkpoint 0"), b"version-zero-of-app");
    assert_eq!(std::fs::read(cps.join("2/src/app.py")).expect("checkpoint 2"), b"version-two-of-app");
}

#[test]
fn a_truncated_pack_is_found_unmounted_and_refused_at_mount() {
    let fx = history();
    let path = pack(&fx);
    let len = std::fs::metadata(&path).expect("pack").len();
    // Less than the record headers the packs hold beyond the stored bytes
    // the database counts (64 per record): the mount's old coarse size
    // check let it through (and the open then dropped the chunk from the
    // index); only fsck saw it.
    std::fs::OpenOptions::new().write(true).open(&path).expect("open pack").set_len(len - 100).expect("truncate");
    let text = fsck_finds(&fx);
    assert!(
        text.lines()
            .any(|l| l.starts_with("checkpoint") && l.contains(": data.bin: chunk ") && l.contains("past the end")),
        "the truncated record is named by checkpoint and path: {text}"
    );
    // The mount refuses it: the packs hold fewer bytes of records than the
    // index listed at the newest seal (FD2 in docs/fault-test-failures.md).
    let (ws, mnt, store) = (fx.ws.clone(), fx.mnt.clone(), fx.store.clone());
    let out = fx.rewindfs(&[
        "mount",
        ws.to_str().expect("utf-8"),
        mnt.to_str().expect("utf-8"),
        "--store",
        store.to_str().expect("utf-8"),
        "--auto-turn",
        "0",
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "the mount must be refused: {}", describe_status(&out));
    assert!(err.contains("fewer than the") && err.contains("fsck --store"), "{err}");
    assert!(!is_mounted(&mnt), "a refused mount mounted");
}

#[test]
fn a_missing_pack_is_found_and_every_lost_file_named() {
    let fx = history();
    std::fs::remove_file(pack(&fx)).expect("remove pack");
    let text = fsck_finds(&fx);
    for path in ["src/app.py", "data.bin"] {
        assert!(
            text.lines().any(|l| l.starts_with("checkpoint") && l.contains(&format!(": {path}: chunk "))),
            "{path} is not named: {text}"
        );
    }
    assert!(text.contains("is missing"), "the missing pack is said: {text}");
}

#[test]
fn an_attic_file_removed_is_found_and_named() {
    let fx = history();
    let id = gone_txt(&fx);
    std::fs::remove_file(fx.store.join("attic").join(&id)).expect("remove the attic file");
    let text = fsck_finds(&fx);
    let line = text.lines().find(|l| l.contains("gone.txt")).unwrap_or_else(|| panic!("gone.txt is not named: {text}"));
    // Removed in turn 2 (not in checkpoint 3, the safety checkpoint before
    // the rewind to 1), back in 4 (the rewind's result) and 5 (the safety
    // checkpoint before the rewind back), gone again in 6.
    assert!(
        line.starts_with("checkpoints 0, 1 (message m1), 2 (message m2), 4, 5: gone.txt: the recorded inode is gone"),
        "{line}"
    );
}

#[test]
fn a_row_deleted_with_sqlite3_is_found_and_named() {
    let fx = history();
    let id = gone_txt(&fx);
    sqlite(&fx, &format!("DELETE FROM objects WHERE id = {id}"));
    let text = fsck_finds(&fx);
    assert!(text.contains(&format!("store: attic entry {id} belongs to no object")), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("checkpoint") && l.contains(": gone.txt: records name an object")),
        "{text}"
    );
}

/// Copies the store's database files aside (after a clean unmount), so a
/// test can damage them and put them back.
fn save_db(fx: &MountFixture) -> PathBuf {
    let saved = fx.dir.path().join("saved-db");
    std::fs::create_dir_all(&saved).expect("saved dir");
    sh(fx.dir.path(), &format!("cp -a {}/meta.sqlite* {}/", fx.store.display(), saved.display()));
    saved
}

fn restore_db(fx: &MountFixture, saved: &Path) {
    sh(
        fx.dir.path(),
        &format!("rm -f {0}/meta.sqlite* && cp -a {1}/meta.sqlite* {0}/", fx.store.display(), saved.display()),
    );
}

/// A database truncated to nothing, or with bytes flipped
/// in a table, is refused at mount with a message naming fsck (it used to
/// mount as an empty or wrong history), and fsck says what it is.
#[test]
fn a_truncated_or_damaged_database_is_refused_at_mount_and_named_by_fsck() {
    let mut fx = history();
    let saved = save_db(&fx);
    let refused = |fx: &MountFixture, what: &str| {
        let ws = fx.ws.to_str().expect("utf-8").to_string();
        let mnt = fx.mnt.to_str().expect("utf-8").to_string();
        let out = fx.rewindfs(&["mount", &ws, &mnt, "--store", &store_arg(fx)]);
        if out.status.success() {
            // Not left behind if the check is missing.
            fx.rewindfs(&["unmount", &mnt]);
        }
        assert_eq!(out.status.code(), Some(1), "{what}: mount must be refused: {}", describe_status(&out));
        let err = stderr(&out);
        assert!(err.contains("was not mounted") && err.contains("rewindfs fsck --store"), "{what}: {err}");
        assert!(!is_mounted(&fx.mnt), "{what}: nothing is mounted");
        let text = fsck_finds(fx);
        assert!(text.lines().nth(1).is_some_and(|l| l.starts_with("store: ")), "{what}: {text}");
        err
    };

    std::fs::write(fx.store.join("meta.sqlite"), b"").expect("truncate the database");
    let err = refused(&fx, "empty database");
    assert!(err.contains("meta.sqlite is empty, but the store holds"), "{err}");

    restore_db(&fx, &saved);
    sh(
        fx.dir.path(),
        &format!(
            "db={}/meta.sqlite; page=$(sqlite3 $db \"SELECT rootpage FROM sqlite_master WHERE name = 'objects'\")
             size=$(sqlite3 $db 'PRAGMA page_size')
             printf '\\377\\377\\377\\377\\377' | dd of=$db bs=1 seek=$(( (page - 1) * size + 3 )) conv=notrunc status=none",
            fx.store.display()
        ),
    );
    let err = refused(&fx, "objects table damaged");
    assert!(err.contains("malformed") || err.contains("damaged"), "{err}");

    // The good copy mounts, and its history is whole.
    restore_db(&fx, &saved);
    fx.mount(false, &["--auto-turn", "0"]);
    let cps = fx.path().join(".rewindfs/checkpoints");
    assert_eq!(std::fs::read(cps.join("1/src/app.py")).expect("checkpoint 1"), b"version-one-of-app");
}

/// A file created, changed in its attributes and removed
/// within one turn was never in a checkpoint; its record of the turn (the
/// chmod's) made fsck ask for its inode ("checkpoints 0, 1: object 2: the
/// recorded inode is gone", exit 6) although no view ever reads it.
#[test]
fn a_file_born_and_removed_in_one_turn_is_no_damage() {
    let mut fx = MountFixture::unmounted();
    fx.mount(false, &["--auto-turn", "0"]);
    fx.sh("echo a > f; chmod 600 f; rm f");
    fx.turn("t1");
    // Also with a second name (the first removal is no last link: its
    // record was taken as for any file), and a directory.
    fx.sh("echo b > g; ln g h; chmod 640 g; rm h; touch -d @1 g; rm g; mkdir d; chmod 700 d; rmdir d");
    fx.turn("t2");
    fx.assert_fsck_clean("born and removed in one turn");
    fx.unmount();
    let out = fsck(&fx, &["--store", &store_arg(&fx)]);
    assert!(out.status.success(), "fsck --store: {}: {}", describe_status(&out), stdout(&out));
}

/// A real loss is still reported. A file that checkpoint
/// 1 shows, changed in its attributes only in turn 1 (a record without
/// content: views read its bytes from the inode) and removed in turn 2
/// into the attic, then taken out of the attic by hand.
#[test]
fn a_lost_inode_of_a_checkpointed_file_is_still_reported() {
    let mut fx = MountFixture::unmounted();
    sh(&fx.ws, "echo kept > k");
    fx.mount(false, &["--auto-turn", "0"]);
    fx.sh("echo a > f");
    assert_eq!(fx.turn("t1"), 1);
    fx.sh("chmod 600 f k");
    assert_eq!(fx.turn("t2"), 2);
    fx.sh("rm f k");
    assert_eq!(fx.turn("t3"), 3);
    fx.assert_fsck_clean("before the attic loses them");
    fx.unmount();
    let attic = fx.store.join("attic");
    let entries: Vec<_> = std::fs::read_dir(&attic).expect("attic").map(|e| e.expect("entry").path()).collect();
    assert_eq!(entries.len(), 2, "f and k are in the attic: {entries:?}");
    for e in &entries {
        std::fs::remove_file(e).expect("remove the attic file");
    }
    let text = fsck_finds(&fx);
    for line in
        ["checkpoints 1 (message t1), 2 (message t2): f: the recorded inode is gone", ": k: the recorded inode is gone"]
    {
        assert!(text.lines().any(|l| l.contains(line)), "{line:?} is not reported: {text}");
    }
}

/// A store made by an ordinary workload over several
/// turns passes fsck, mounted and unmounted: files and directories
/// created, changed, renamed and removed (within a turn and across
/// turns), hard links, symlinks, a git repository, a rewind and its undo.
#[test]
fn a_store_made_by_an_ordinary_workload_passes() {
    let mut fx = MountFixture::unmounted();
    sh(&fx.ws, "mkdir -p src docs && echo one > src/a.c && echo doc > docs/r.md && echo x > old.txt");
    fx.mount(false, &["--auto-turn", "0"]);
    fx.sh("echo two >> src/a.c; echo tmp > src/a.c.swp; chmod 600 src/a.c.swp; mv src/a.c.swp src/b.c
         mkdir -p build/obj; for i in 1 2 3; do echo $i > build/obj/$i.o; chmod 755 build/obj/$i.o; done
         ln src/b.c hard; ln -s src/a.c link; rm old.txt; touch -d @100 docs/r.md");
    fx.turn("w1");
    fx.sh("rm -r build; mkdir build; echo new > build/out; mv docs manual; chmod 700 manual
         rm hard; echo more >> src/b.c; printf t > tmp; chmod 644 tmp; ln tmp tmp2; mv tmp2 tmp3; rm tmp tmp3
         mkdir gen; echo g > gen/x; chmod 600 gen/x; rm -r gen; rm link; ln -s manual/r.md link");
    fx.turn("w2");
    if std::process::Command::new("git").arg("--version").output().is_ok_and(|o| o.status.success()) {
        fx.sh("git init -q repo && cd repo && echo hello > README && mkdir lib && echo 'fn x() {}' > lib/x.rs
             git add -A && git -c user.name=t -c user.email=t@example.invalid commit -qm first
             echo again >> README && git add README
             git -c user.name=t -c user.email=t@example.invalid commit -qm second && git gc -q");
        fx.turn("w3");
    }
    fx.sh("echo later > src/a.c; rm -r manual; mkdir manual; echo r > manual/r.md");
    let rewound = fx.cli_json(&["rewind", "w1"]);
    let safety = rewound["safety_checkpoint"].as_i64().expect("safety checkpoint");
    fx.sh("echo after-rewind > src/c.c; chmod 600 src/c.c; rm src/c.c");
    fx.cli_json(&["rewind", &safety.to_string()]);
    assert_eq!(std::fs::read(fx.path().join("src/a.c")).expect("a.c"), b"later\n");
    fx.turn("w4");
    fx.assert_fsck_clean("ordinary workload");
    fx.unmount();
    let out = fsck(&fx, &["--store", &store_arg(&fx)]);
    assert!(out.status.success(), "fsck --store: {}: {}", describe_status(&out), stdout(&out));
}

/// Issue 26, item 5: changes under the mount (here, straight to the
/// workspace directory that a mount elsewhere serves) leave checkpoints
/// whose views cannot read a file (EIO), and fsck said "no problems". It
/// names them, with the path (exit 6): `f.txt`, written under the mount
/// and not recorded since, unknown at 0 and 1; `g.txt`, written under the
/// mount and then through it (its record holds the state it was given
/// under the mount), unknown at 0 and 1 too. `h.txt`, changed only through
/// the mount, is fine. Unmounted, the same; a change made while nothing
/// is mounted is one between mounts (the next mount marks it, its label
/// says so): no damage, and still none once mounted again.
#[test]
fn a_change_under_the_mount_is_named_with_the_checkpoints_it_made_unreadable() {
    let mut fx = MountFixture::unmounted();
    // Changed under the mount on purpose: fsck names what it cost.
    fx.damaged();
    sh(&fx.ws, "echo one > f.txt && echo one > g.txt && echo one > h.txt && echo one > i.txt");
    fx.mount(false, &["--auto-turn", "0"]);
    fx.sh("echo two > h.txt");
    assert_eq!(fx.turn("t1"), 1);
    // Far enough past the seal for the clock the kernel stamps files with.
    std::thread::sleep(std::time::Duration::from_millis(20));
    sh(&fx.ws, "echo under > f.txt && echo under > g.txt");
    fx.sh("echo after > g.txt && echo three > h.txt");
    assert_eq!(fx.turn("t2"), 2);
    let views = fx.path().join(".rewindfs/checkpoints");
    let f = std::fs::read_to_string(views.join("1/f.txt"));
    assert_eq!(f.as_ref().map_err(|e| e.raw_os_error()), Err(Some(libc::EIO)), "f.txt at 1: {f:?}");
    let expected = ["checkpoints 0, 1 (message t1): f.txt: ", "checkpoints 0, 1 (message t1): g.txt: "];
    let assert_named = |out: Output, what: &str| {
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(PROBLEMS), "{what} must fail: {} {text}", describe_status(&out));
        for line in expected {
            assert!(
                text.lines().any(|l| l.starts_with(line) && l.contains("changed under the mount")),
                "{what}: {line:?} is not reported: {text}"
            );
        }
        assert!(
            !text.contains("h.txt") && !text.contains("i.txt"),
            "{what} names a file changed through the mount or between mounts: {text}"
        );
        assert_eq!(text.lines().count(), 3, "{what}: one summary line and one per file: {text}");
    };
    let mp = fx.mountpoint.to_str().expect("utf-8").to_string();
    assert_named(fsck(&fx, &["-C", &mp]), "fsck through the daemon");
    let v: serde_json::Value = serde_json::from_slice(&fsck(&fx, &["-C", &mp, "--json"]).stdout).expect("fsck --json");
    assert!(
        v["problems"].as_array().is_some_and(|p| p.len() == 2 && p.iter().all(|p| p["kind"] == "changed_under_mount")),
        "{v}"
    );
    fx.unmount();
    sh(&fx.ws, "echo between > i.txt && echo between > h.txt");
    assert_named(fsck(&fx, &["--store", &store_arg(&fx)]), "fsck of the unmounted store");
    fx.mount(false, &["--auto-turn", "0"]);
    assert_named(fsck(&fx, &["-C", &mp]), "fsck after the next mount");
}
