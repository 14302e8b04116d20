//! Every checkpoint can be browsed, exactly, through `show` and
//! through `.rewindfs/checkpoints/N`, compared with a `cp -a` copy taken at
//! each boundary (contents, modes, owners, mtimes, symlink targets, hard
//! links, xattrs, empty directories).

mod common;

use common::*;
use std::path::{Path, PathBuf};

/// Several turns of real changes; returns (checkpoint, copy) pairs.
fn record_history(fx: &MountFixture) -> Vec<(i64, PathBuf)> {
    let mut cps = vec![(0, fx.copy_tree("c0"))];
    // Turn 1: a tree with everything a view must reproduce.
    fx.sh("mkdir -p proj/src proj/docs gone/deep/er empty/nested
         echo 'int main() { return 0; }' > proj/src/main.c
         seq 1 50000 > proj/src/big.txt
         echo readme > proj/docs/readme
         for i in 1 2 3; do echo \"deep $i\" > gone/deep/er/f$i; done
         echo secret-old-words > gone/note
         echo config-v1 > config && ln config config.hard
         echo victim > victim
         ln -s proj/src/main.c main-link
         chmod 640 proj/docs/readme && chown 1234:5678 proj/docs/readme
         touch -d '2001-02-03 04:05:06.123456789' proj/docs/readme
         chmod 711 proj/src && touch -d '1999-12-31 23:59:59' empty/nested");
    fx.py("os.setxattr('proj/src/main.c', 'user.tag', b'v1'); os.setxattr('proj', 'user.dir', b'd1')");
    cps.push((fx.turn("m1"), fx.copy_tree("c1")));

    // Turn 2: rm -rf, mv of a directory, a file replaced by a symlink, a
    // hard link broken by an editor's atomic save, attribute changes.
    fx.sh("rm -rf gone
         mv proj/docs proj/documentation
         rm victim && ln -s ../outside/victim victim
         printf 'config-v2\\n' > .config.swp && mv .config.swp config
         chmod 600 proj/src/main.c && chown 42:43 proj/src/main.c
         touch -d '2010-01-01 00:00:00' proj/src/big.txt
         dd if=/dev/zero of=proj/src/big.txt bs=1 count=100 seek=1000 conv=notrunc status=none
         mkdir -p new-empty/a/b
         rmdir empty/nested");
    fx.py("os.setxattr('proj/src/main.c', 'user.tag', b'v2'); os.setxattr('config', 'user.new', b'x'); os.removexattr('proj', 'user.dir')");
    cps.push((fx.turn("m2"), fx.copy_tree("c2")));

    // Turn 3: writes through the surviving hard link, a symlink retargeted,
    // a directory moved back, truncation.
    fx.sh("echo appended >> config.hard
         ln -sfn proj/documentation/readme main-link
         mv proj/documentation docs-top
         truncate -s 10 proj/src/big.txt
         ln proj/src/big.txt big-again
         rm -r new-empty/a");
    cps.push((fx.turn("m3"), fx.copy_tree("c3")));
    // The live tree moves on; the views must not.
    fx.sh("rm -rf proj docs-top && echo after > after && chmod 700 .");
    cps
}

fn compare_all(fx: &MountFixture, cps: &[(i64, PathBuf)], when: &str) {
    for (n, copy) in cps {
        let hidden = fx.path().join(".rewindfs/checkpoints").join(n.to_string());
        assert_same_tree(copy, &hidden, &format!("{when}: .rewindfs/checkpoints/{n}"));
        let mp = fx.dir.path().join(format!("view-{n}"));
        std::fs::create_dir_all(&mp).unwrap();
        fx.cli(&["show", &n.to_string(), mp.to_str().unwrap()]);
        assert!(is_mounted(&mp), "show {n} did not mount {}", mp.display());
        assert_same_tree(copy, &mp, &format!("{when}: show {n}"));
        check(fx.rewindfs(&["unmount", mp.to_str().unwrap()]), "unmount view");
        assert!(!is_mounted(&mp));
    }
}

#[test]
fn every_checkpoint_view_is_an_exact_copy_before_and_after_remount() {
    let mut fx = MountFixture::manual_turns();
    let cps = record_history(&fx);
    compare_all(&fx, &cps, "live");
    // By message id too.
    assert_same_tree(&cps[2].1, &fx.path().join(".rewindfs/messages/m2"), ".rewindfs/messages/m2");
    fx.unmount();
    fx.mount(false, &["--auto-turn", "0"]);
    compare_all(&fx, &cps, "after remount");
}

fn errno_of(dir: &Path, code: &str) -> String {
    py(dir, code).trim().to_string()
}

#[test]
fn hidden_dir_is_not_walked_and_is_read_only() {
    let fx = MountFixture::manual_turns();
    fx.sh("mkdir d && echo only-in-history-xyzzy > d/f && echo keep > k");
    let n = fx.turn("m1");
    fx.sh("rm -rf d");
    fx.turn("m2");

    let ls = fx.sh("ls -a");
    assert!(!ls.lines().any(|l| l == ".rewindfs"), "ls -a lists .rewindfs:\n{ls}");
    let find = fx.sh("find .");
    assert!(!find.contains("rewindfs"), "find . enters .rewindfs:\n{find}");
    let grep = run_with_timeout(
        std::process::Command::new("grep").args(["-r", "xyzzy", "."]).current_dir(fx.path()),
        CHILD_TIMEOUT,
    );
    assert_eq!(grep.status.code(), Some(1), "grep -r found history: {}", stdout(&grep));
    // But reachable by name, and cd works.
    assert_eq!(fx.sh(&format!("cd .rewindfs/checkpoints/{n}/d && cat f")), "only-in-history-xyzzy\n");
    assert!(fx.sh("cat .rewindfs/README").len() > 10, "README is empty");

    let erofs = libc::EROFS.to_string();
    let writes = format!(
        "b = '.rewindfs/checkpoints/{n}'
print(err(os.open, '.rewindfs/new', os.O_CREAT | os.O_WRONLY),
      err(os.open, b + '/k', os.O_WRONLY), err(os.open, b + '/new', os.O_CREAT | os.O_WRONLY),
      err(os.mkdir, b + '/dir'), err(os.unlink, b + '/k'), err(os.rename, b + '/k', b + '/k2'),
      err(os.chmod, b + '/k', 0o777), err(os.setxattr, b + '/k', 'user.x', b'1'),
      err(os.rmdir, b + '/d'), err(os.symlink, 'x', b + '/l'), err(os.truncate, b + '/k', 0),
      err(os.utime, b + '/k', (1, 1)))"
    );
    let got = errno_of(fx.path(), &writes);
    for e in got.split_whitespace() {
        assert_eq!(e, erofs, "a write under .rewindfs did not fail with EROFS: errnos {got}");
    }
    // The same in a `show` mount.
    let mp = fx.dir.path().join("view");
    std::fs::create_dir(&mp).unwrap();
    fx.cli(&["show", &n.to_string(), mp.to_str().unwrap()]);
    let got = errno_of(
        &mp,
        "print(err(os.open, 'k', os.O_WRONLY), err(os.open, 'new', os.O_CREAT | os.O_WRONLY), err(os.mkdir, 'x'),
      err(os.unlink, 'k'), err(os.chmod, 'k', 0o777), err(os.setxattr, 'k', 'user.x', b'1'), err(os.rename, 'k', 'k2'))",
    );
    for e in got.split_whitespace() {
        assert_eq!(e, erofs, "a write in a show mount did not fail with EROFS: errnos {got}");
    }
    check(fx.rewindfs(&["unmount", mp.to_str().unwrap()]), "unmount view");
    // Nothing changed.
    assert_eq!(fx.sh("ls -a"), ".\n..\nk\n");
}

/// Flips one byte of a chunk whose file's old content exists only in the
/// store: that file reads EIO through the view, another one reads fine.
#[test]
fn corrupt_chunk_gives_eio_for_that_file_only() {
    let mut fx = MountFixture::manual_turns();
    // Random bytes: stored uncompressed, so they can be found in the pack.
    fx.py("open('victim', 'wb').write(os.urandom(300000)); open('other', 'wb').write(os.urandom(300000))");
    let n = fx.turn("m1");
    let old_victim = std::fs::read(fx.path().join("victim")).unwrap();
    let old_other = std::fs::read(fx.path().join("other")).unwrap();
    // Rewritten in place: the old bytes now live only in the chunk store.
    fx.sh("dd if=/dev/zero of=victim bs=300000 count=1 conv=notrunc status=none && dd if=/dev/zero of=other bs=300000 count=1 conv=notrunc status=none");
    fx.turn("m2");
    fx.unmount();

    let packs: Vec<PathBuf> =
        walk_files(&fx.store).into_iter().filter(|p| p.extension().is_some_and(|e| e == "pack")).collect();
    assert!(!packs.is_empty(), "no pack files under {}", fx.store.display());
    let needle = &old_victim[150000..150064];
    let mut flipped = false;
    for p in &packs {
        let mut data = std::fs::read(p).unwrap();
        if let Some(at) = data.windows(needle.len()).position(|w| w == needle) {
            data[at + 10] ^= 0xff;
            std::fs::write(p, &data).unwrap();
            flipped = true;
            break;
        }
    }
    assert!(flipped, "the old content of victim is not in any pack file: {packs:?}");

    fx.mount(false, &["--auto-turn", "0"]);
    let base = fx.path().join(format!(".rewindfs/checkpoints/{n}"));
    let e = std::fs::read(base.join("victim")).expect_err("reading a corrupt chunk through the view succeeded");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "corrupt chunk: {e}");
    assert_eq!(std::fs::read(base.join("other")).unwrap(), old_other, "an unaffected file of the same view");
    assert_eq!(std::fs::read(fx.path().join("victim")).unwrap(), vec![0u8; 300000], "live file");
    // The same through `show`.
    let mp = fx.dir.path().join("view");
    std::fs::create_dir(&mp).unwrap();
    fx.cli(&["show", &n.to_string(), mp.to_str().unwrap()]);
    let e = std::fs::read(mp.join("victim")).expect_err("show: corrupt chunk read");
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    assert_eq!(std::fs::read(mp.join("other")).unwrap(), old_other);
    check(fx.rewindfs(&["unmount", mp.to_str().unwrap()]), "unmount view");
    fx.unmount();
    let log = std::fs::read_to_string(fx.store.join("daemon.log")).unwrap_or_default();
    assert!(
        log.lines()
            .any(|l| l.contains("chunk") && (l.contains("hash") || l.contains("corrupt") || l.contains("verify"))),
        "no log line names the bad chunk:\n{log}"
    );
}

fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if e.file_type().unwrap().is_dir() {
            out.extend(walk_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A workspace with a real `.rewindfs` entry: the real one wins in the
/// live mount (it is listed, readable and writable like any directory, and
/// recorded); the views are then only reachable through `show`.
#[test]
fn a_real_rewindfs_entry_wins() {
    let mut fx = MountFixture::unmounted();
    sh(&fx.ws, "mkdir .rewindfs && echo mine > .rewindfs/mine && echo a > a");
    fx.mount(false, &["--auto-turn", "0"]);
    assert!(fx.sh("ls -a").lines().any(|l| l == ".rewindfs"), "the real .rewindfs is not listed");
    assert_eq!(fx.sh("cat .rewindfs/mine"), "mine\n");
    assert!(!fx.path().join(".rewindfs/checkpoints").exists(), "the hidden views shadow the real .rewindfs");
    let n = fx.turn("m1");
    fx.sh("echo changed > .rewindfs/mine && echo b > a");
    fx.turn("m2");
    let mp = fx.dir.path().join("view");
    std::fs::create_dir(&mp).unwrap();
    fx.cli(&["show", &n.to_string(), mp.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(mp.join(".rewindfs/mine")).unwrap(), "mine\n", "the view of the real .rewindfs");
    assert_eq!(std::fs::read_to_string(mp.join("a")).unwrap(), "a\n");
    check(fx.rewindfs(&["unmount", mp.to_str().unwrap()]), "unmount view");
}

/// `status --json`'s count of inode numbers held by `.rewindfs/`.
fn view_inodes(fx: &MountFixture) -> u64 {
    let s = fx.status_json();
    s["view_inodes"].as_u64().unwrap_or_else(|| panic!("no view_inodes in {s}"))
}

/// Walking views made the daemon's table of `.rewindfs/` inodes
/// grow for good. Once the kernel forgets the entries (drop_caches), the
/// daemon frees them, and walking the view again still gives the same tree.
#[test]
fn forgotten_view_entries_are_freed_and_the_view_still_works() {
    let fx = MountFixture::manual_turns();
    fx.sh("mkdir -p a/b c && for i in $(seq 1 60); do echo \"b $i\" > a/b/f$i; echo \"c $i\" > c/g$i; done");
    let n = fx.turn("m1");
    // The live tree moves on: part of the view comes from the store.
    fx.sh("rm -rf a && echo changed > c/g1");
    let walk = || fx.sh(&format!("cd .rewindfs/checkpoints/{n} && find . -type f | sort | xargs cat | md5sum"));
    let expected = sh(
        fx.dir.path(),
        "mkdir -p want/a/b want/c && cd want && for i in $(seq 1 60); do echo \"b $i\" > a/b/f$i; echo \"c $i\" > c/g$i; done
         find . -type f | sort | xargs cat | md5sum",
    );
    let baseline = view_inodes(&fx);
    assert_eq!(walk(), expected, "first walk of checkpoint {n}");
    let walked = view_inodes(&fx);
    assert!(walked >= baseline + 120, "the walk should hold the entries the kernel remembers: {baseline} -> {walked}");

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut now = walked;
    while now > baseline + 2 && std::time::Instant::now() < deadline {
        std::fs::write("/proc/sys/vm/drop_caches", "2").expect("cannot drop the kernel's caches");
        std::thread::sleep(std::time::Duration::from_millis(200));
        now = view_inodes(&fx);
    }
    assert!(
        now <= baseline + 2,
        "the daemon still holds {now} view inodes after the kernel forgot them ({baseline} before the walk, {walked} after)"
    );

    assert_eq!(walk(), expected, "walk of checkpoint {n} after the kernel forgot it");
    assert!(view_inodes(&fx) >= baseline + 120, "the second walk holds its entries again");

    // The same through `show`, whose browser frees forgotten entries too.
    let mp = fx.dir.path().join("view");
    std::fs::create_dir(&mp).unwrap();
    fx.cli(&["show", &n.to_string(), mp.to_str().unwrap()]);
    let walk_show = || sh(&mp, "find . -type f | sort | xargs cat | md5sum");
    assert_eq!(walk_show(), expected, "show {n}");
    std::fs::write("/proc/sys/vm/drop_caches", "2").expect("cannot drop the kernel's caches");
    assert_eq!(walk_show(), expected, "show {n} after the kernel forgot it");
    check(fx.rewindfs(&["unmount", mp.to_str().unwrap()]), "unmount view");
}

/// The kernel keeps every directory listing (it opens directories itself:
/// `fs::LiveFs::opendir`), the lists of checkpoints included. Each seal
/// and forget shows at once in a listing, also in one read by a process
/// whose working directory is the list (no path walk that would look it
/// up again), and a listing read twice with nothing in between is the
/// same.
#[test]
fn the_lists_of_checkpoints_show_every_seal_and_forget_at_once() {
    let fx = MountFixture::manual_turns();
    let script = format!(
        r#"
B={bin}; M={mnt}
export REWINDFS_RUNTIME_DIR={run} REWINDFS_HOME={home}
cd .rewindfs/checkpoints
l() {{ echo "$(ls | sort -n | paste -sd' ') / $(ls ../messages | sort | paste -sd' ')"; }}
l; l
echo x > "$M/a"; $B turn -C "$M" --message-id m000001 >/dev/null; l
echo y > "$M/b"; $B turn -C "$M" --message-id m000002 >/dev/null; l; l
$B forget -C "$M" 1 >/dev/null; l
"#,
        bin = env!("CARGO_BIN_EXE_rewindfs"),
        mnt = fx.path().display(),
        run = fx.run.display(),
        home = fx.dir.path().join("home").display(),
    );
    assert_eq!(
        fx.sh(&script),
        "0 / \n0 / \n0 1 / m000001\n0 1 2 / m000001 m000002\n0 1 2 / m000001 m000002\n0 2 / m000002\n"
    );
}
