//! The store cannot take a pre-image: the store lives on a
//! small ext4 image (loop device) that is filled up. A change that needs a
//! pre-image (overwriting an existing big file) is refused with ENOSPC and
//! leaves the file unchanged; once space is freed the same change works,
//! and the checkpoint before it still rebuilds.

mod common;

use std::ffi::OsStr;
use std::path::Path;

use common::*;

struct LoopMount(std::path::PathBuf);

impl Drop for LoopMount {
    fn drop(&mut self) {
        let _ = run_timeout(30, "umount", &[OsStr::new("-l"), self.0.as_os_str()], None, &[]);
    }
}

/// Bytes of records in the store's pack files (each starts with a 16-byte
/// header).
fn pack_bytes(store: &Path) -> u64 {
    std::fs::read_dir(store.join("chunks/packs"))
        .map(|d| d.filter_map(|e| e.ok()).filter_map(|e| e.metadata().ok()).map(|m| m.len().saturating_sub(16)).sum())
        .unwrap_or(0)
}

fn must(o: std::process::Output, what: &str) {
    assert!(o.status.success(), "{what}: {}", String::from_utf8_lossy(&o.stderr));
}

/// The store of `f` on a fresh 64 MiB ext4 image, loop-mounted.
fn store_on_small_fs(f: &MountFixture) -> LoopMount {
    let img = f.dir.path().join("store.img");
    must(run_timeout(30, "truncate", &[OsStr::new("-s"), OsStr::new("64M"), img.as_os_str()], None, &[]), "truncate");
    must(run_timeout(60, "mkfs.ext4", &[OsStr::new("-q"), img.as_os_str()], None, &[]), "mkfs.ext4");
    std::fs::create_dir_all(&f.store).unwrap();
    must(
        run_timeout(
            60,
            "mount",
            &[OsStr::new("-o"), OsStr::new("loop"), img.as_os_str(), f.store.as_os_str()],
            None,
            &[],
        ),
        "mount -o loop (are loop devices available?)",
    );
    LoopMount(f.store.clone())
}

#[test]
fn full_store_refuses_the_change_with_enospc() {
    let mut f = MountFixture::unmounted();
    let _loop = store_on_small_fs(&f);

    // 24 MiB of incompressible data in the workspace.
    let original: Vec<u8> = {
        let mut h = blake3::Hasher::new();
        h.update(b"seed");
        let mut out = vec![0u8; 24 << 20];
        h.finalize_xof().fill(&mut out);
        out
    };
    std::fs::write(f.ws.join("big.bin"), &original).unwrap();
    std::fs::write(f.ws.join("small.txt"), "small\n").unwrap();
    f.mount(false, &["--auto-turn", "0"]);
    let snap0 = f.snapshot("0");
    // Fill the store's filesystem, leaving well under 24 MiB.
    let filler = f.store.join("filler");
    let _ = run_timeout(
        120,
        "dd",
        &[OsStr::new("if=/dev/zero"), OsStr::new(&format!("of={}", filler.display())), OsStr::new("bs=1M")],
        None,
        &[],
    );
    let df = run_timeout(10, "df", &[OsStr::new("-B1"), OsStr::new("--output=avail"), f.store.as_os_str()], None, &[]);
    eprintln!("store filesystem after filling: {}", String::from_utf8_lossy(&df.stdout).replace('\n', " "));
    // Give SQLite room for its journal, not the store room for 24 MiB.
    let len = std::fs::metadata(&filler).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&filler).unwrap().set_len(len - (4 << 20)).unwrap();

    // Overwrite 1 MiB in place in the big file: needs its pre-image.
    let target = f.mnt.join("big.bin");
    let packs_before = pack_bytes(&f.store);
    let o = run_timeout(
        120,
        "dd",
        &[
            OsStr::new("if=/dev/zero"),
            OsStr::new(&format!("of={}", target.display())),
            OsStr::new("bs=1M"),
            OsStr::new("count=1"),
            OsStr::new("conv=notrunc"),
        ],
        None,
        &[],
    );
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "dd over a big file succeeded with a full store: {err}");
    assert!(err.contains("No space left on device"), "dd failed, but not with ENOSPC: {err}");
    // Truncation needs the pre-image too.
    let t = run_timeout(60, "truncate", &[OsStr::new("-s"), OsStr::new("0"), target.as_os_str()], None, &[]);
    assert!(
        !t.status.success() && String::from_utf8_lossy(&t.stderr).contains("No space left on device"),
        "truncate: {:?} {}",
        t.status,
        String::from_utf8_lossy(&t.stderr)
    );
    assert!(read_mounted(&target) == original, "big.bin changed although its pre-image could not be recorded");
    assert!(std::fs::read(f.ws.join("big.bin")).unwrap() == original, "backing big.bin changed");
    // The refused pre-image left nothing behind: the chunks stored before
    // the store ran out were taken back, so small edits still fit.
    assert_eq!(pack_bytes(&f.store), packs_before, "a refused pre-image left chunks in the packs");
    std::fs::write(f.mnt.join("small.txt"), "small, edited while the store is nearly full\n")
        .expect("a small edit with the store nearly full");

    // Free space: the same change goes through.
    std::fs::remove_file(&filler).unwrap();
    let o = run_timeout(
        120,
        "dd",
        &[
            OsStr::new("if=/dev/zero"),
            OsStr::new(&format!("of={}", target.display())),
            OsStr::new("bs=1M"),
            OsStr::new("count=1"),
            OsStr::new("conv=notrunc"),
        ],
        None,
        &[],
    );
    assert!(o.status.success(), "dd after freeing space: {}", String::from_utf8_lossy(&o.stderr));
    let now = read_mounted(&target);
    assert!(now[..1 << 20].iter().all(|b| *b == 0) && now[1 << 20..] == original[1 << 20..]);
    let snap1 = f.snapshot("1");
    assert_eq!(f.turn("after"), 1);
    f.unmount();

    let off = Offline::open(&f.ws, &f.store);
    let mut errs = Vec::new();
    for (n, s) in [(0, &snap0), (1, &snap1)] {
        if let Err(e) = off.check(n, s, "copy") {
            errs.push(e);
        }
    }
    let v = off.journal.store().verify().unwrap();
    assert!(v.corrupt.is_empty(), "corrupt chunks after ENOSPC: {:?}", v.corrupt);
    assert!(errs.is_empty(), "{}", errs.join("\n"));
    drop(off);
    assert!(Path::new(&f.store).exists());
}

/// Reads a file on the mount, with a timeout.
fn read_mounted(p: &std::path::Path) -> Vec<u8> {
    let p = p.to_path_buf();
    io_timeout(&format!("read {}", p.display()), CHILD_TIMEOUT, move || std::fs::read(p)).expect("read")
}

/// Unmount makes the history durable before the mount goes. When it cannot
/// (a store that fails to sync), `unmount` exits non-zero, says so, and the
/// mount stays, recording as before; once the store works again, unmount
/// succeeds and the history is all there at the next mount.
#[test]
fn unmount_that_cannot_make_history_durable_fails_and_keeps_the_mount() {
    let mut f = MountFixture::unmounted();
    std::fs::write(f.ws.join("a.txt"), b"one\n").unwrap();
    let flag = f.dir.path().join("fail-sync");
    f.mount_with_env(false, &["--auto-turn", "0"], &[("REWINDFS_TEST_FAIL_SYNC_WHILE", flag.to_str().expect("utf-8"))]);
    let mnt = f.mnt.to_str().unwrap().to_string();
    f.turn("m1");
    f.sh("printf 'two\\n' >> a.txt");

    std::fs::write(&flag, b"").unwrap();
    let out = f.rewindfs(&["unmount", &mnt]);
    assert_eq!(out.status.code(), Some(1), "unmount must fail (exit 1): {}", describe_status(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot make the history durable") && err.contains("stays mounted"), "{err}");
    assert!(is_mounted(&f.mnt), "the mount must stay when the history is not durable");
    // Still recording.
    f.sh("printf 'three\\n' >> a.txt");
    let second = f.turn("m2");

    std::fs::remove_file(&flag).unwrap();
    f.unmount();
    assert!(!is_mounted(&f.mnt));
    assert_eq!(std::fs::read(f.ws.join("a.txt")).unwrap(), b"one\ntwo\nthree\n");
    f.mount(false, &["--auto-turn", "0"]);
    let view = |n: i64| std::fs::read(f.mnt.join(format!(".rewindfs/checkpoints/{n}/a.txt"))).unwrap();
    assert_eq!(view(1), b"one\n", "checkpoint m1 holds the file as it was");
    assert_eq!(view(second), b"one\ntwo\nthree\n", "checkpoint m2 holds the changes made around the failed unmount");
}

/// The kernel's FUSE-over-io_uring switch, set for one test and put back
/// when it ends.
struct UringSwitch(Option<String>);

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

impl UringSwitch {
    fn set(on: bool) -> UringSwitch {
        let before = std::fs::read_to_string(ENABLE_URING).ok().map(|s| s.trim().to_string());
        assert!(before.is_some(), "{ENABLE_URING} is missing: this kernel has no FUSE over io_uring");
        std::fs::write(ENABLE_URING, if on { "Y" } else { "N" }).expect("switching enable_uring (root needed)");
        UringSwitch(before)
    }
}

impl Drop for UringSwitch {
    fn drop(&mut self) {
        if let Some(before) = &self.0 {
            let _ = std::fs::write(ENABLE_URING, before);
        }
    }
}

/// The daemon's stderr is `daemon.log` in the store. With the store's disk
/// full, a note it printed there (`--transport auto` with the kernel's
/// io_uring switch off) failed and the daemon panicked before it served:
/// `mount` said only "the daemon failed to start" (found by
/// faults_store_full on a fresh machine, where the switch is off). A mount
/// on a full store either works or says the store is full; once space is
/// back it works, with the history there.
#[test]
fn a_mount_with_its_daemon_log_on_a_full_disk_works_or_says_the_store_is_full() {
    let mut f = MountFixture::unmounted();
    let _loop = store_on_small_fs(&f);
    std::fs::write(f.ws.join("a.txt"), "a\n").unwrap();
    f.mount(false, &["--auto-turn", "0"]);
    std::fs::write(f.mnt.join("a.txt"), "a, edited\n").unwrap();
    assert_eq!(f.turn("edit"), 1);
    f.unmount();
    // Every block taken by the daemon log itself (the store refuses a file
    // it did not make): the log cannot grow by a byte.
    let log_path = f.store.join("daemon.log");
    let log_len = std::fs::metadata(&log_path).unwrap().len();
    {
        use std::io::Write;
        let mut log = std::fs::OpenOptions::new().append(true).open(&log_path).unwrap();
        for size in [1 << 20, 4096, 1] {
            let block = vec![b'\n'; size];
            while log.write_all(&block).is_ok() {}
        }
    }
    let _switch = UringSwitch::set(false);
    let (ws, mnt, store) = (f.ws.display().to_string(), f.mnt.display().to_string(), f.store.display().to_string());
    let o = f.rewindfs(&["mount", &ws, &mnt, "--store", &store, "--auto-turn", "0", "--transport", "auto"]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    if o.status.success() {
        f.adopt_mount();
        assert_eq!(std::fs::read_to_string(f.mnt.join("a.txt")).unwrap(), "a, edited\n");
        f.unmount();
    } else {
        assert_eq!(o.status.code(), Some(1), "mount on a full store: {err}");
        assert!(
            ["No space left on device", "disk is full", "full"].iter().any(|w| err.contains(w)),
            "mount on a full store failed without saying the store is full: {err}"
        );
    }
    std::fs::OpenOptions::new().write(true).open(&log_path).unwrap().set_len(log_len).unwrap();
    f.mount(false, &["--auto-turn", "0"]);
    assert_eq!(std::fs::read_to_string(f.mnt.join("a.txt")).unwrap(), "a, edited\n");
    let log = f.cli(&["log"]);
    assert!(log.contains("edit"), "the history is not all there after space came back: {log}");
    f.unmount();
}
