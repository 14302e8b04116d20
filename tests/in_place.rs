//! An in-place mount and the processes already inside the workspace:
//! they would keep using the directory under the mount,
//! unrecorded, so the mount is refused and names them; `rewindfs run`
//! started from inside the workspace is fine (its shell only waits).

mod common;

use std::process::{Command, Stdio};

use common::{MountFixture, check, stderr};

fn s(p: &std::path::Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Starts `program` inside the workspace and keeps it running.
fn occupant(dir: &std::path::Path, program: &[&str]) -> std::process::Child {
    Command::new(program[0])
        .args(&program[1..])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("start the occupant")
}

#[test]
fn a_shell_inside_the_workspace_blocks_an_in_place_mount_until_it_leaves() {
    let mut fx = MountFixture::unmounted();
    std::fs::write(fx.ws.join("f.txt"), "one\n").expect("write");
    let mut shell = occupant(&fx.ws, &["sleep", "60"]);
    let pid = shell.id();
    let out = fx.rewindfs(&["mount", s(&fx.ws), "--store", s(&fx.store), "--auto-turn", "0"]);
    let _ = shell.kill();
    let _ = shell.wait();
    if out.status.success() {
        let _ = fx.rewindfs(&["unmount", "--lazy", s(&fx.ws)]);
        panic!("the in-place mount went ahead with pid {pid} inside the workspace");
    }
    let err = stderr(&out);
    assert!(err.contains(&format!("pid {pid} (sleep): working directory")), "the refusal does not name sleep: {err}");
    assert!(err.contains("rewindfs run"), "the refusal does not say what to do: {err}");
    assert!(!common::is_mounted(&fx.ws), "mounted anyway");
    // Gone: the mount works.
    fx.mount(true, &["--auto-turn", "0"]);
    fx.sh("echo two > f.txt");
    assert_eq!(std::fs::read_to_string(fx.path().join("f.txt")).expect("read"), "two\n");
}

#[test]
fn an_open_file_inside_the_workspace_blocks_an_in_place_mount() {
    let fx = MountFixture::unmounted();
    std::fs::write(fx.ws.join("held.txt"), "x\n").expect("write");
    let held = fx.ws.join("held.txt");
    let mut holder = occupant(std::path::Path::new("/"), &["sh", "-c", &format!("exec 3<'{}'; sleep 60", s(&held))]);
    let pid = holder.id();
    // The shell opens the file as it starts.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.filter_map(|e| e.ok()).any(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == held)))
        .unwrap_or(false)
    {
        assert!(std::time::Instant::now() < deadline, "the holder never opened the file");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = fx.rewindfs(&["mount", s(&fx.ws), "--store", s(&fx.store), "--auto-turn", "0"]);
    let _ = holder.kill();
    let _ = holder.wait();
    if out.status.success() {
        let _ = fx.rewindfs(&["unmount", "--lazy", s(&fx.ws)]);
        panic!("the in-place mount went ahead with {} held open", held.display());
    }
    let err = stderr(&out);
    assert!(err.contains(&format!("pid {pid}")) && err.contains("open file"), "the refusal does not name it: {err}");
}

/// A process that mapped a workspace file shared and
/// closed its descriptor writes the file through the mapping with nothing
/// else inside the workspace (its working directory elsewhere): the
/// in-place mount is refused and names the mapping, as for an open file.
/// Before, the mount went ahead, and the writes bypassed recording.
#[test]
fn a_shared_mapping_of_a_workspace_file_blocks_an_in_place_mount() {
    let fx = MountFixture::unmounted();
    let mapped = fx.ws.join("mapped.bin");
    std::fs::write(&mapped, vec![b'0'; 4096]).expect("write");
    let code = "import mmap, os, sys, time\n\
                f = open(sys.argv[1], 'r+b'); m = mmap.mmap(f.fileno(), 0); f.close()\n\
                os.chdir('/'); print('ready', flush=True)\n\
                while True:\n    m[0:1] = b'x'; time.sleep(0.05)\n";
    let mut mapper = Command::new("python3")
        .args(["-c", code])
        .arg(&mapped)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the mapping process");
    let pid = mapper.id();
    let mut line = String::new();
    use std::io::BufRead;
    let _ = std::io::BufReader::new(mapper.stdout.take().expect("stdout")).read_line(&mut line);
    let out = fx.rewindfs(&["mount", s(&fx.ws), "--store", s(&fx.store), "--auto-turn", "0"]);
    let _ = mapper.kill();
    let _ = mapper.wait();
    assert_eq!(line.trim(), "ready", "the mapping process did not start");
    if out.status.success() {
        let _ = fx.rewindfs(&["unmount", "--lazy", s(&fx.ws)]);
        panic!("the in-place mount went ahead while pid {pid} wrote {} through a shared mapping", mapped.display());
    }
    let err = stderr(&out);
    assert!(
        err.contains(&format!("pid {pid}")) && err.contains(&format!("shared mapping of {}", mapped.display())),
        "the refusal does not name the mapping: {err}"
    );
    assert!(!common::is_mounted(&fx.ws), "mounted anyway");
}

#[test]
fn run_started_from_inside_the_workspace_records_the_command() {
    let fx = MountFixture::unmounted();
    let script = format!(
        "cd '{ws}' && '{bin}' run . --store '{store}' --auto-turn 0 -- sh -c 'echo made > made.txt && '\"'{bin}'\"' turn --message-id after'",
        ws = s(&fx.ws),
        bin = common::bin(),
        store = s(&fx.store)
    );
    let out = common::run_with_timeout(
        Command::new("sh")
            .arg("-c")
            .arg(&script)
            .env("REWINDFS_RUNTIME_DIR", &fx.run)
            .env("REWINDFS_HOME", fx.dir.path().join("home")),
        common::CHILD_TIMEOUT,
    );
    check(out, "rewindfs run from inside the workspace");
    assert_eq!(std::fs::read_to_string(fx.ws.join("made.txt")).expect("made.txt"), "made\n");
    assert!(!common::is_mounted(&fx.ws), "run left the mount behind");
}

/// Mounts `fx`'s workspace in place and returns the daemon's descriptor of
/// the directory under the mount (`/proc/PID/fd/N`): a shell that enters it
/// bypasses the mount, as a process that was inside before the mount would.
fn mount_in_place_and_find_under(fx: &mut MountFixture) -> std::path::PathBuf {
    use std::os::unix::fs::MetadataExt;
    let before = std::fs::metadata(&fx.ws).expect("stat the workspace");
    // Changes under the mount are history fsck names as unknown.
    fx.damaged();
    fx.mount(true, &["--auto-turn", "0"]);
    let pid = fx.daemon_pid();
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the daemon's descriptors")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_dir() && m.dev() == before.dev() && m.ino() == before.ino()))
        .expect("the daemon holds the directory under the mount")
}

/// A process whose working directory is the directory
/// under an in-place mount (as an agent's is when it was there before the
/// mount) writes through it, bypassing the mount. The mount refuses to start
/// beside such a process, so the test makes one afterwards, entering the
/// directory through the daemon's own descriptor of it. The views of the
/// checkpoints sealed before that write must not show its bytes (or a file
/// it created) as the past: their state there is unknown (EIO), as for a
/// change made between two mounts. The checkpoint sealed after it shows
/// them: by then, they were the tree.
#[test]
fn a_write_that_bypassed_an_in_place_mount_is_not_shown_as_the_past() {
    let mut fx = MountFixture::unmounted();
    std::fs::write(fx.ws.join("f.txt"), "one\n").expect("write");
    std::fs::write(fx.ws.join("g.txt"), "kept\n").expect("write");
    let under = mount_in_place_and_find_under(&mut fx);
    fx.sh("echo two > f.txt");
    let first = fx.turn("t1");
    fx.sh("echo three > f.txt");
    let second = fx.turn("t2");
    // Far enough past the seal for the clock the kernel stamps files with.
    std::thread::sleep(std::time::Duration::from_millis(20));
    common::sh(
        std::path::Path::new("/"),
        &format!("cd '{}' && echo bypassed > f.txt && echo new > new.txt", s(&under)),
    );
    assert_eq!(std::fs::read_to_string(fx.path().join("f.txt")).expect("read"), "bypassed\n", "not the same file");
    let views = fx.path().join(".rewindfs/checkpoints");
    let read = |k: i64, name: &str| std::fs::read_to_string(views.join(k.to_string()).join(name));
    // Recorded before the write: the past is known.
    assert_eq!(read(first, "f.txt").expect("f.txt at the first checkpoint"), "two\n");
    let f = read(second, "f.txt");
    assert_eq!(
        f.as_ref().map_err(|e| e.raw_os_error()),
        Err(Some(libc::EIO)),
        "checkpoint {second} shows the write that bypassed the mount as its past: {f:?}"
    );
    let n = read(second, "new.txt");
    assert!(
        n.as_ref().is_err_and(|e| e.raw_os_error() == Some(libc::EIO)),
        "checkpoint {second} shows the file created under the mount as its past: {n:?}"
    );
    assert_eq!(read(second, "g.txt").expect("g.txt, untouched"), "kept\n");
    let third = fx.turn("t3");
    assert_eq!(read(third, "f.txt").expect("f.txt after the write"), "bypassed\n");
    assert_eq!(read(third, "new.txt").expect("new.txt after the write"), "new\n");
}

/// A write that bypassed the mount, followed by a change
/// of the same file through it. The pre-image recorded by that change is
/// the bypassed state, which the checkpoints sealed before the bypass never
/// had: their views must show the file unknown (EIO, "unknown" in `diff`),
/// not the bypassed bytes, and a rewind to one of them is refused, naming
/// the file, with nothing changed. A checkpoint sealed after the bypass
/// shows the bypassed bytes: by then they were the tree. `f.txt` is changed
/// through the mount in the turn of the bypass, `g.txt` in the next one.
#[test]
fn a_bypassing_write_then_a_change_through_the_mount_is_not_recorded_as_the_past() {
    let mut fx = MountFixture::unmounted();
    for name in ["f.txt", "g.txt", "h.txt"] {
        std::fs::write(fx.ws.join(name), "one\n").expect("write");
    }
    let under = mount_in_place_and_find_under(&mut fx);
    fx.sh("echo two > f.txt && echo two > g.txt");
    let a = fx.turn("a");
    // Far enough past the seal for the clock the kernel stamps files with.
    std::thread::sleep(std::time::Duration::from_millis(20));
    common::sh(
        std::path::Path::new("/"),
        &format!("cd '{}' && echo bypassed > f.txt && echo bypassed > g.txt", s(&under)),
    );
    fx.sh("echo after > f.txt");
    let b = fx.turn("b");
    fx.sh("echo after > g.txt");
    let c = fx.turn("c");
    let views = fx.path().join(".rewindfs/checkpoints");
    let read = |k: i64, name: &str| std::fs::read_to_string(views.join(k.to_string()).join(name));
    for name in ["f.txt", "g.txt"] {
        let got = read(a, name);
        assert_eq!(
            got.as_ref().map_err(|e| e.raw_os_error()),
            Err(Some(libc::EIO)),
            "checkpoint {a} shows the bypassed state of {name}, recorded by a later change through the mount, as its past: {got:?}"
        );
    }
    assert_eq!(read(a, "h.txt").expect("h.txt, untouched"), "one\n");
    assert_eq!(read(b, "f.txt").expect("f.txt at b"), "after\n");
    assert_eq!(read(b, "g.txt").expect("g.txt at b, sealed after the bypass"), "bypassed\n");
    assert_eq!(read(c, "g.txt").expect("g.txt at c"), "after\n");
    let mp = s(fx.path()).to_string();
    let diff = check(fx.rewindfs(&["diff", "-C", &mp, &a.to_string(), &c.to_string()]), "diff");
    let text = common::stdout(&diff);
    for name in ["f.txt", "g.txt"] {
        assert!(text.contains(&format!("{name}: changed without passing through rewindfs")), "diff: {text}");
    }
    let live = common::read_tree(fx.path());
    let out = fx.rewindfs(&["rewind", "-C", &mp, &a.to_string()]);
    assert!(!out.status.success(), "a rewind to {a} went ahead over unknown states: {}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("f.txt") && err.contains("g.txt") && err.contains("unknown"), "rewind refusal: {err}");
    assert!(common::tree_diff(&live, &common::read_tree(fx.path())).is_empty(), "the refused rewind changed the tree");
}

/// Changes that bypassed the mount and left mtime at or
/// before the checkpoint's seal: attributes alone (chmod, chown, an xattr)
/// and a write whose mtime was then set back (`touch -d`). Only ctime shows
/// them, and a user cannot set it back. The views of the checkpoint sealed
/// before them must say the state is unknown (EIO), not show the new
/// attributes or bytes as the past. The daemon's own ctime changes must not
/// be taken for them: a file renamed through the mount, and one rewound
/// and filled by the settler, stay readable in the views that show them.
#[test]
fn an_attribute_change_or_an_mtime_set_back_that_bypassed_the_mount_is_not_shown_as_the_past() {
    use std::os::unix::fs::PermissionsExt;
    let mut fx = MountFixture::unmounted();
    for name in ["f.txt", "g.txt", "h.txt", "k.txt", "o.txt", "r.txt", "m.txt"] {
        std::fs::write(fx.ws.join(name), "one\n").expect("write");
    }
    let under = mount_in_place_and_find_under(&mut fx);
    let views = fx.path().join(".rewindfs/checkpoints");
    let read = |k: i64, name: &str| std::fs::read_to_string(views.join(k.to_string()).join(name));
    let first = fx.turn("first");
    // A rewound file the settler fills after the rewind's checkpoint.
    fx.sh("echo two > r.txt");
    fx.turn("r changed");
    let mp = s(fx.path()).to_string();
    check(fx.rewindfs(&["rewind", "-C", &mp, &first.to_string()]), "rewind");
    let k = fx.turn("k");
    assert_eq!(std::fs::read_to_string(fx.path().join("r.txt")).expect("r.txt, settled"), "one\n");
    // Far enough past the seal for the clock the kernel stamps files with.
    std::thread::sleep(std::time::Duration::from_millis(20));
    fx.sh("mv k.txt k2.txt");
    common::sh(
        std::path::Path::new("/"),
        &format!(
            "cd '{}' && chmod 600 f.txt && echo bypassed > g.txt && touch -d '2001-01-01' g.txt \
             && setfattr -n user.note -v bypassed h.txt && chown 12345 o.txt",
            s(&under)
        ),
    );
    for name in ["f.txt", "g.txt", "h.txt", "o.txt"] {
        let got = read(k, name);
        assert_eq!(
            got.as_ref().map_err(|e| e.raw_os_error()),
            Err(Some(libc::EIO)),
            "checkpoint {k} shows {name}, changed under the mount with mtime left in the past, as its past: {got:?}"
        );
        let st = std::fs::metadata(views.join(k.to_string()).join(name));
        assert_eq!(st.as_ref().map(|_| ()).map_err(|e| e.raw_os_error()), Err(Some(libc::EIO)), "stat {name} at {k}");
    }
    assert_eq!(read(k, "k.txt").expect("k.txt, renamed through the mount"), "one\n");
    assert_eq!(read(k, "r.txt").expect("r.txt, filled by the settler"), "one\n");
    assert_eq!(read(k, "m.txt").expect("m.txt, untouched"), "one\n");
    let diff = check(fx.rewindfs(&["diff", "-C", &mp, &k.to_string()]), "diff");
    let text = common::stdout(&diff);
    for name in ["f.txt", "g.txt", "h.txt", "o.txt"] {
        assert!(text.contains(&format!("{name}: changed without passing through rewindfs")), "diff: {text}");
    }
    // The next checkpoint shows them: by then they were the tree.
    let next = fx.turn("next");
    let f = views.join(next.to_string()).join("f.txt");
    assert_eq!(std::fs::metadata(&f).expect("f.txt at the next checkpoint").permissions().mode() & 0o777, 0o600);
    assert_eq!(read(next, "g.txt").expect("g.txt at the next checkpoint"), "bypassed\n");
    // The rename and the fill are in a sealed turn now: still the daemon's.
    assert_eq!(read(k, "k.txt").expect("k.txt at k, once sealed"), "one\n");
    assert_eq!(read(k, "r.txt").expect("r.txt at k, once sealed"), "one\n");
}

/// An attribute change that bypassed the mount, then a
/// change of the same file through it: the pre-image then recorded holds
/// the bypassed mode, which the checkpoint sealed before never had.
#[test]
fn a_bypassing_chmod_then_a_write_through_the_mount_is_not_recorded_as_the_past() {
    let mut fx = MountFixture::unmounted();
    std::fs::write(fx.ws.join("f.txt"), "one\n").expect("write");
    std::fs::write(fx.ws.join("g.txt"), "one\n").expect("write");
    let under = mount_in_place_and_find_under(&mut fx);
    let a = fx.turn("a");
    std::thread::sleep(std::time::Duration::from_millis(20));
    fx.sh("mv g.txt g2.txt");
    common::sh(std::path::Path::new("/"), &format!("cd '{}' && chmod 600 f.txt", s(&under)));
    fx.sh("echo after >> f.txt");
    fx.turn("renamed");
    fx.sh("echo after >> g2.txt");
    let b = fx.turn("b");
    let views = fx.path().join(".rewindfs/checkpoints");
    let got = std::fs::metadata(views.join(a.to_string()).join("f.txt"));
    assert_eq!(
        got.as_ref().map(|m| m.len()).map_err(|e| e.raw_os_error()),
        Err(Some(libc::EIO)),
        "checkpoint {a} shows the mode set under the mount, recorded by a later write through it, as its past"
    );
    assert_eq!(
        std::fs::read_to_string(views.join(a.to_string()).join("g.txt"))
            .expect("g.txt, renamed through the mount since"),
        "one\n"
    );
    assert_eq!(std::fs::read_to_string(views.join(b.to_string()).join("f.txt")).expect("f.txt at b"), "one\nafter\n");
}

/// A file removed under the mount (bypassing it), with
/// nothing recorded of it since the checkpoint. A view of that checkpoint
/// that had already met the file (a name the kernel keeps, a descriptor
/// held open) must say its state is unknown (EIO), never ESTALE, ENOENT
/// for a name that `stat` just showed, or other bytes.
#[test]
fn a_file_removed_under_the_mount_is_unknown_in_a_view_that_knew_it() {
    use std::io::Read;
    let mut fx = MountFixture::unmounted();
    std::fs::write(fx.ws.join("f.txt"), "one\n").expect("write");
    std::fs::write(fx.ws.join("g.txt"), "two\n").expect("write");
    let under = mount_in_place_and_find_under(&mut fx);
    let k = fx.turn("k");
    let view = fx.path().join(format!(".rewindfs/checkpoints/{k}"));
    std::fs::metadata(view.join("f.txt")).expect("f.txt in the view");
    let mut held = std::fs::File::open(view.join("g.txt")).expect("open g.txt in the view");
    common::sh(std::path::Path::new("/"), &format!("cd '{}' && rm f.txt g.txt", s(&under)));
    let f = std::fs::read_to_string(view.join("f.txt"));
    assert_eq!(
        f.as_ref().map_err(|e| e.raw_os_error()),
        Err(Some(libc::EIO)),
        "a file removed under the mount, read through a name the view had shown: {f:?}"
    );
    let mut g = String::new();
    let read = held.read_to_string(&mut g);
    assert_eq!(
        read.as_ref().map_err(|e| e.raw_os_error()),
        Err(Some(libc::EIO)),
        "a file removed under the mount, read through a descriptor held open in the view: {read:?} {g:?}"
    );
}

/// A file removed under the mount, in a directory that
/// no view had listed yet. A fresh listing of the checkpoint must not show
/// the directory without the file as its past: nothing says which name
/// went, so the listing is unknown (EIO), as for a directory changed
/// between mounts, and so is a lookup of a name it does not hold now; the
/// names still there are shown; `diff` lists the directory as unknown. A
/// directory changed through the mount (a rename) lists as before.
#[test]
fn a_fresh_listing_of_a_checkpoint_does_not_hide_a_file_removed_under_the_mount() {
    let mut fx = MountFixture::unmounted();
    for dir in ["d", "e"] {
        std::fs::create_dir(fx.ws.join(dir)).expect("mkdir");
        for name in ["f.txt", "g.txt"] {
            std::fs::write(fx.ws.join(dir).join(name), "one\n").expect("write");
        }
    }
    let under = mount_in_place_and_find_under(&mut fx);
    let k = fx.turn("k");
    std::thread::sleep(std::time::Duration::from_millis(20));
    fx.sh("mv e/f.txt e/f2.txt");
    common::sh(std::path::Path::new("/"), &format!("cd '{}' && rm d/f.txt", s(&under)));
    let view = fx.path().join(format!(".rewindfs/checkpoints/{k}"));
    let listed = std::fs::read_dir(view.join("d"))
        .and_then(|l| l.map(|e| e.map(|e| e.file_name())).collect::<Result<Vec<_>, _>>());
    assert_eq!(
        listed.as_ref().map_err(|e| e.raw_os_error()),
        Err(Some(libc::EIO)),
        "a fresh listing of d at {k} hides the file removed under the mount: {listed:?}"
    );
    let f = std::fs::metadata(view.join("d/f.txt"));
    assert_eq!(f.as_ref().map(|_| ()).map_err(|e| e.raw_os_error()), Err(Some(libc::EIO)), "d/f.txt at {k}");
    assert_eq!(std::fs::read_to_string(view.join("d/g.txt")).expect("d/g.txt, still there"), "one\n");
    let mut e: Vec<_> = std::fs::read_dir(view.join("e"))
        .expect("e, changed through the mount")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    e.sort();
    assert_eq!(e, ["f.txt", "g.txt"], "e at {k}");
    let mp = s(fx.path()).to_string();
    let diff = check(fx.rewindfs(&["diff", "-C", &mp, &k.to_string()]), "diff");
    let text = common::stdout(&diff);
    assert!(text.contains("d: changed without passing through rewindfs"), "diff: {text}");
    assert!(text.contains("e/f2.txt"), "diff: {text}");
    // A restore through that directory cannot know what to put back.
    let live = common::read_tree(fx.path());
    let out = fx.rewindfs(&["restore", "-C", &mp, &k.to_string(), "--", "d/f.txt"]);
    assert!(!out.status.success(), "a restore of d/f.txt at {k} went ahead over an unknown listing: {}", stderr(&out));
    assert!(stderr(&out).contains("unknown"), "restore refusal: {}", stderr(&out));
    assert!(common::tree_diff(&live, &common::read_tree(fx.path())).is_empty(), "the refused restore changed the tree");
    let next = fx.turn("next");
    let mut d: Vec<_> = std::fs::read_dir(fx.path().join(format!(".rewindfs/checkpoints/{next}/d")))
        .expect("d at the next checkpoint")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    d.sort();
    assert_eq!(d, ["g.txt"]);
    assert!(std::fs::read_dir(view.join("e")).is_ok(), "e at {k}, once the rename's turn is sealed");
}

/// A rewind of an in-place mount must never look a path up through the
/// mount it serves: the kernel's path of a backing file is the same string
/// as the mounted one, and resolving it there asks this daemon, whose tree
/// the rewind holds frozen. With the kernel's entries dropped, a rewind over
/// a hard link and content changes hung for good (found in the Claude Code
/// end-to-end test: `rewind` timed out after 120 s).
#[test]
fn an_in_place_rewind_never_looks_a_path_up_through_its_own_mount() {
    let mut fx = MountFixture::unmounted();
    std::fs::create_dir_all(fx.ws.join("d")).expect("mkdir");
    for i in 0..20 {
        std::fs::write(fx.ws.join(format!("d/f{i}")), format!("{i}\n")).expect("write");
    }
    fx.mount(true, &["--auto-turn", "0"]);
    fx.sh("echo changed >> d/f1 && ln d/f2 d/f2-link && ln d/f3 f3-link && chmod 600 d/f4 && rm d/f5");
    let first = fx.turn("t1");
    fx.sh("echo again >> d/f1 && echo more >> d/f2 && ln d/f6 d/f6-link && mv d/f7 d/f7-moved && rm d/f8");
    fx.turn("t2");
    // The kernel forgets its entries: every lookup now reaches the daemon.
    fx.sh("sync");
    std::fs::write("/proc/sys/vm/drop_caches", "2").expect("drop caches");
    let out = fx.rewindfs(&["rewind", "-C", s(&fx.ws), "--json", &first.to_string()]);
    assert!(out.status.success(), "rewind: {}", common::stderr(&out));
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout).expect("rewind --json");
    let safety = reply["safety_checkpoint"].as_i64().expect("safety_checkpoint").to_string();
    assert_eq!(std::fs::read_to_string(fx.path().join("d/f1")).expect("d/f1"), "1\nchanged\n");
    assert_eq!(std::fs::read_to_string(fx.path().join("d/f2")).expect("d/f2"), "2\n");
    assert!(fx.path().join("d/f7").exists() && !fx.path().join("d/f7-moved").exists());
    assert!(fx.path().join("d/f8").exists() && !fx.path().join("d/f6-link").exists());
    assert!(fx.path().join("d/f2-link").exists() && fx.path().join("f3-link").exists());
    std::fs::write("/proc/sys/vm/drop_caches", "2").expect("drop caches");
    let out = fx.rewindfs(&["rewind", "-C", s(&fx.ws), "--json", &safety]);
    assert!(out.status.success(), "rewind back to the safety checkpoint: {}", common::stderr(&out));
    assert_eq!(std::fs::read_to_string(fx.path().join("d/f2")).expect("d/f2"), "2\nmore\n");
    assert!(fx.path().join("d/f7-moved").exists() && fx.path().join("d/f6-link").exists());
}

/// The open turn, from `status`: a refused rewind or restore seals nothing.
fn open_turn(fx: &MountFixture) -> i64 {
    fx.status_json()["turn"].as_i64().expect("turn in status")
}

/// Asserts that `rewindfs ARGS` is refused (exit 1) naming each of
/// `names` as unknown, and changes neither the tree nor the history.
fn assert_refused(fx: &MountFixture, args: &[&str], names: &[&str]) -> String {
    let live = common::read_tree(fx.path());
    let turn = open_turn(fx);
    let out = fx.rewindfs(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{args:?} must be refused: {} {err}", common::describe_status(&out));
    for name in names {
        assert!(err.contains(name) && err.contains("unknown"), "{args:?} does not name {name} as unknown: {err}");
    }
    assert!(err.contains("nothing was changed"), "{args:?}: {err}");
    assert!(common::tree_diff(&live, &common::read_tree(fx.path())).is_empty(), "{args:?} changed the tree");
    assert_eq!(open_turn(fx), turn, "{args:?} sealed a checkpoint");
    err
}

/// Issue 26, item 5: a file written and another created under the mount,
/// with nothing recorded of either since checkpoint 0 (the mount's). A
/// rewind visits what the journal recorded since the checkpoint, so it
/// used to leave both as they were, print "0 changes" and exit 0, though
/// `--dry-run` listed them as unknown. The rewind and its preview are both
/// refused (exit 1) with the same message naming both files, with nothing
/// changed and no checkpoint sealed; so is a restore of the written file.
/// A checkpoint sealed after the change rewinds as usual.
#[test]
fn a_rewind_over_files_changed_under_the_mount_is_refused_with_nothing_changed() {
    let mut fx = MountFixture::unmounted();
    std::fs::write(fx.ws.join("f.txt"), "one\n").expect("write");
    std::fs::write(fx.ws.join("g.txt"), "kept\n").expect("write");
    let under = mount_in_place_and_find_under(&mut fx);
    // Far enough past the mount's seal for the clock the kernel stamps files with.
    std::thread::sleep(std::time::Duration::from_millis(20));
    common::sh(
        std::path::Path::new("/"),
        &format!("cd '{}' && echo bypassed > f.txt && echo new > new.txt", s(&under)),
    );
    let mp = s(fx.path()).to_string();
    let dry = assert_refused(&fx, &["rewind", "-C", &mp, "--dry-run", "0"], &["f.txt", "new.txt"]);
    let real = assert_refused(&fx, &["rewind", "-C", &mp, "0"], &["f.txt", "new.txt"]);
    assert_eq!(dry, real, "the preview and the rewind disagree");
    assert_refused(&fx, &["restore", "-C", &mp, "0", "--", "f.txt"], &["f.txt"]);
    assert_refused(&fx, &["restore", "-C", &mp, "--dry-run", "0", "--", "f.txt"], &["f.txt"]);
    // After the change: its checkpoint holds it.
    let after = fx.turn("after");
    fx.sh("echo later > f.txt && rm new.txt");
    check(fx.rewindfs(&["rewind", "-C", &mp, &after.to_string()]), "rewind to a checkpoint sealed after the change");
    assert_eq!(std::fs::read_to_string(fx.path().join("f.txt")).expect("f.txt"), "bypassed\n");
    assert_eq!(std::fs::read_to_string(fx.path().join("new.txt")).expect("new.txt"), "new\n");
}

/// Issue 26, item 5: a name removed under the mount. Nothing says what the
/// file was, so a rewind to a checkpoint that had it cannot put it back:
/// it used to leave it removed and report success. It is refused, naming
/// the directory whose listing is unknown, and so is its preview.
#[test]
fn a_rewind_over_a_name_removed_under_the_mount_is_refused_with_nothing_changed() {
    let mut fx = MountFixture::unmounted();
    std::fs::create_dir(fx.ws.join("notes")).expect("mkdir");
    for name in ["x.txt", "y.txt"] {
        std::fs::write(fx.ws.join("notes").join(name), "one\n").expect("write");
    }
    let under = mount_in_place_and_find_under(&mut fx);
    fx.sh("echo two > notes/y.txt");
    let k = fx.turn("k");
    std::thread::sleep(std::time::Duration::from_millis(20));
    common::sh(std::path::Path::new("/"), &format!("cd '{}' && rm notes/x.txt", s(&under)));
    fx.sh("echo three > notes/y.txt");
    let mp = s(fx.path()).to_string();
    let k = k.to_string();
    let dry = assert_refused(&fx, &["rewind", "-C", &mp, "--dry-run", &k], &["notes"]);
    let real = assert_refused(&fx, &["rewind", "-C", &mp, &k], &["notes"]);
    assert_eq!(dry, real, "the preview and the rewind disagree");
    assert_eq!(std::fs::read_to_string(fx.path().join("notes/y.txt")).expect("notes/y.txt"), "three\n");
}
