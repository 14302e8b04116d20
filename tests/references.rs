//! Checkpoint references as a person writes them, on a real mount: words
//! of a label in any case and order, `=LABEL` for the label exactly, and a
//! prompt sent again after a rewind (two checkpoints of one label), where
//! the one on the current branch is taken and stderr says so; `log` and
//! the picker mark turns a rewind abandoned.

mod common;

use common::*;

fn ok(fx: &MountFixture, args: &[&str]) -> (String, String) {
    let out = check(fx.rewindfs(args), &format!("rewindfs {args:?}"));
    (stdout(&out), stderr(&out))
}

fn turn(fx: &MountFixture, mp: &str, id: &str, label: &str) {
    ok(fx, &["turn", "-C", mp, "--message-id", id, "--session", "s1", "--label", label]);
}

#[test]
fn label_words_match_in_any_case_and_order_and_exactly_with_equals() {
    let fx = MountFixture::new();
    let mp = fx.path().to_str().expect("utf-8 path").to_string();
    turn(&fx, &mp, "r000001", "Bump the greeting and clean up");
    fx.sh("echo v2 > app.py");
    turn(&fx, &mp, "r000002", "Package it");
    for reference in ["bump the greeting", "BUMP greeting", "greeting bump", "=Bump the greeting and clean up"] {
        let (out, _) = ok(&fx, &["diff", "-C", &mp, "--stat", reference, "r000002"]);
        assert!(out.contains("app.py | +1 -0 (added)"), "{reference}: {out}");
    }
    for reference in ["bump the farewell", "=bump the greeting and clean up", "=Bump the greeting"] {
        let out = fx.rewindfs(&["diff", "-C", &mp, reference]);
        assert_eq!(out.status.code(), Some(2), "{reference}: {}", describe_status(&out));
        assert!(stderr(&out).contains("unknown checkpoint"), "{reference}: {}", stderr(&out));
    }
    // `=` begins an exact label reference, so no message id may.
    let out = fx.rewindfs(&["turn", "-C", &mp, "--message-id", "=r000003"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe_status(&out));
    assert!(stderr(&out).contains("starts with '='"), "{}", stderr(&out));
}

#[test]
fn a_prompt_sent_again_after_a_rewind_is_found_on_the_current_branch() {
    let fx = MountFixture::new();
    let mp = fx.path().to_str().expect("utf-8 path").to_string();
    turn(&fx, &mp, "r000001", "Create the app");
    fx.sh("echo v1 > app.py");
    turn(&fx, &mp, "r000002", "Bump the greeting");
    fx.sh("echo v2 > app.py");
    turn(&fx, &mp, "r000003", "Package it");
    // Back to before "Bump the greeting", then the same prompt again.
    ok(&fx, &["rewind", "-C", &mp, "r000002"]);
    turn(&fx, &mp, "r000004", "Bump the greeting");
    fx.sh("echo v3 > app.py");

    let (out, err) = ok(&fx, &["rewind", "-C", &mp, "--dry-run", "bump the greeting"]);
    let again: serde_json::Value = serde_json::from_str(&ok(&fx, &["log", "-C", &mp, "--json"]).0).expect("json");
    let n =
        again.as_array().expect("array").iter().find(|t| t["message_id"] == "r000004").expect("r000004")["checkpoint"]
            .as_i64()
            .expect("number");
    assert!(out.contains(&format!("rewind to checkpoint {n} would change")), "{out}");
    assert!(
        err.contains(&format!(
            "checkpoint {n} is on the current branch; checkpoint 2 matched too, abandoned by a rewind"
        )),
        "{err}"
    );

    // `log` marks the abandoned turns with `x`, the current one with `*`.
    let (log, _) = ok(&fx, &["log", "-C", &mp]);
    let mark = |id: &str| log.lines().find(|l| l.contains(id)).map(|l| l[..1].to_string());
    assert_eq!(mark("r000001").as_deref(), Some(" "), "{log}");
    assert_eq!(mark("r000002").as_deref(), Some("x"), "{log}");
    assert_eq!(mark("r000003").as_deref(), Some("x"), "{log}");
    assert_eq!(mark("r000004").as_deref(), Some("*"), "{log}");
}

/// After `rewindfs run` ends, the reading commands find the workspace's
/// store (the default one) and read it; `rewind` says how to get a mount.
#[test]
fn the_history_of_an_unmounted_workspace_is_read_from_its_store() {
    let fx = MountFixture::unmounted();
    let ws = fx.ws.to_str().expect("utf-8 path").to_string();
    let script = format!(
        "{rw} turn --message-id r000001 --label 'Bump the greeting' >/dev/null && echo v1 > app.py && \
         {rw} turn --message-id r000002 --label 'Package it' >/dev/null && mkdir dist && echo x > dist/app",
        rw = bin()
    );
    ok(&fx, &["run", &ws, "--", "sh", "-c", &script]);
    assert!(!is_mounted(&fx.ws));

    let (log, err) = ok(&fx, &["log", "-C", &ws]);
    assert!(log.contains("r000001") && log.contains("Package it"), "{log}");
    assert!(err.contains("is not mounted: the history is read from its store"), "{err}");
    let (stat, _) = ok(&fx, &["diff", "-C", &ws, "--stat", "BUMP greeting", "r000002"]);
    assert!(stat.contains("app.py | +1 -0 (added)"), "{stat}");
    let (live, _) = ok(&fx, &["diff", "-C", &ws, "--stat", "package"]);
    assert!(live.contains("dist/app | +1 -0 (added)"), "{live}");
    // From inside the workspace, without -C.
    let out =
        check(run_with_timeout(fx.command().args(["history", "app.py"]).current_dir(&fx.ws), CHILD_TIMEOUT), "history");
    assert!(stdout(&out).contains("turn 1 (message r000001): added"), "{}", stdout(&out));
    let (du, _) = ok(&fx, &["du", "-C", &ws]);
    assert!(du.starts_with("on disk:"), "{du}");

    let out = fx.rewindfs(&["rewind", "-C", &ws, "r000001"]);
    assert_eq!(out.status.code(), Some(3), "{}", describe_status(&out));
    assert!(stderr(&out).contains(&format!("`rewindfs run {ws} -- rewindfs rewind ...`")), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(fx.ws.join("app.py")).expect("app.py"), "v1\n", "nothing changed");
    // Nothing the reads did keeps the store: a mount works at once.
    ok(&fx, &["run", &ws, "--", "true"]);
}

/// Unmounts a view on drop, lazily if `rewindfs unmount` fails: a failing
/// test leaves no mount behind.
struct ViewGuard(std::path::PathBuf);

impl Drop for ViewGuard {
    fn drop(&mut self) {
        if is_mounted(&self.0) {
            let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

/// `show` of a workspace that is not mounted: a process of its own serves
/// the checkpoint from the store, read-only, exactly as the mount's own view
/// shows it; while it does, the workspace cannot be mounted (the message
/// names the view); once the view is unmounted its server is gone and the
/// store free. (Before, `show` outside a mount only said how to get one.)
#[test]
fn a_checkpoint_of_an_unmounted_workspace_is_shown_from_its_store() {
    let fx = MountFixture::unmounted();
    let ws = fx.ws.to_str().expect("utf-8 path").to_string();
    std::fs::write(fx.ws.join("app.py"), "v0\n").expect("write");
    let script = format!(
        "echo v1 > app.py && mkdir -p src/deep && echo lib > src/deep/lib.py && ln -s deep/lib.py src/link && \
         chmod 751 src/deep && {rw} turn --message-id r000001 --label 'First' >/dev/null && \
         echo v2 > app.py && rm -r src && {rw} turn --message-id r000002 --label 'Second' >/dev/null",
        rw = bin()
    );
    ok(&fx, &["run", &ws, "--", "sh", "-c", &script]);
    assert!(!is_mounted(&fx.ws));

    let view = fx.dir.path().join("view");
    std::fs::create_dir(&view).expect("mkdir view");
    let guard = ViewGuard(view.clone());
    let (out, err) = ok(&fx, &["show", "-C", &ws, "first", view.to_str().expect("utf-8")]);
    assert!(is_mounted(&view), "show did not mount {}: {out} {err}", view.display());
    assert!(out.contains("checkpoint 1 of") && out.contains("served from its store by pid"), "{out}");
    assert_eq!(std::fs::read_to_string(view.join("app.py")).expect("app.py"), "v1\n");
    assert_eq!(std::fs::read_link(view.join("src/link")).expect("link"), std::path::Path::new("deep/lib.py"));
    let copy = fx.dir.path().join("copy");
    check(
        run_with_timeout(std::process::Command::new("cp").arg("-a").arg(&view).arg(&copy), CHILD_TIMEOUT),
        "cp -a of the view",
    );
    let e = std::fs::write(view.join("app.py"), "x").expect_err("a write into the view");
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");

    // The store is the view's while it is mounted.
    let out = fx.rewindfs(&["run", &ws, "--", "true"]);
    assert_eq!(out.status.code(), Some(4), "{}", describe_status(&out));
    assert!(
        stderr(&out).contains("while a view of its history is served from its store")
            && stderr(&out).contains(view.to_str().expect("utf-8")),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read_to_string(fx.ws.join("app.py")).expect("app.py"), "v2\n", "nothing changed");

    ok(&fx, &["unmount", view.to_str().expect("utf-8")]);
    assert!(!is_mounted(&view));
    drop(guard);
    // The server ends with its view: the store is free for a mount, whose
    // own view of checkpoint 1 is what `show` served.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let compare = format!("diff -r --no-dereference {} .rewindfs/checkpoints/1", copy.display());
    loop {
        let out = fx.rewindfs(&["run", &ws, "--", "sh", "-c", &compare]);
        if out.status.success() {
            break;
        }
        assert!(
            out.status.code() == Some(4) && std::time::Instant::now() < deadline,
            "the mount's view differs from the one `show` served, or the store stayed locked: {}",
            describe_status(&out)
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (meta, _) = ok(&fx, &["run", &ws, "--", "stat", "-c", "%a", ".rewindfs/checkpoints/1/src/deep"]);
    assert_eq!(meta.trim(), "751");
    assert_eq!(
        std::fs::metadata(copy.join("src/deep"))
            .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777)
            .ok(),
        Some(0o751)
    );

    // An unknown checkpoint mounts nothing.
    let out = fx.rewindfs(&["show", "-C", &ws, "r999999", view.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2), "{}", describe_status(&out));
    assert!(stderr(&out).contains("unknown checkpoint"), "{}", stderr(&out));
    assert!(!is_mounted(&view));
}

/// A view served from the store whose FUSE connection is aborted (through
/// fusectl, as `fusermount`'s own abort or a crashed kernel session ends
/// it) while a process sits in it: its server ends, and takes the view's
/// mount with it rather than leave a dead mount ("Transport endpoint is
/// not connected") at the path. (Before, the remote view detached it and
/// the store-served one did not: the mount stayed.)
#[test]
fn a_store_served_view_whose_connection_is_aborted_leaves_no_dead_mount() {
    let fx = MountFixture::unmounted();
    let ws = fx.ws.to_str().expect("utf-8 path").to_string();
    std::fs::write(fx.ws.join("app.py"), "v0\n").expect("write");
    let script = format!("echo v1 > app.py && {} turn --message-id r000001 >/dev/null", bin());
    ok(&fx, &["run", &ws, "--", "sh", "-c", &script]);
    let view = fx.dir.path().join("view");
    std::fs::create_dir(&view).expect("mkdir view");
    let guard = ViewGuard(view.clone());
    let (out, _) = ok(&fx, &["show", "-C", &ws, "1", view.to_str().expect("utf-8")]);
    let pid: u32 = out
        .split("served from its store by pid ")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no server pid in {out}"));
    assert_eq!(std::fs::read_to_string(view.join("app.py")).expect("app.py"), "v1\n");

    // A process browsing the view keeps it busy.
    let mut inside = std::process::Command::new("sleep").arg("600").current_dir(&view).spawn().expect("sleep");
    if !std::fs::read_to_string("/proc/self/mounts").expect("mounts").contains(" /sys/fs/fuse/connections fusectl ") {
        check(
            run_with_timeout(
                std::process::Command::new("mount").args(["-t", "fusectl", "none", "/sys/fs/fuse/connections"]),
                CHILD_TIMEOUT,
            ),
            "mounting fusectl, which the test aborts the view's connection through",
        );
    }
    let info = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let dev = info
        .lines()
        .find(|l| l.split_whitespace().nth(4) == view.to_str())
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|d| d.split_once(':'))
        .map(|(_, minor)| minor.to_string())
        .expect("the view's device");
    std::fs::write(format!("/sys/fs/fuse/connections/{dev}/abort"), "1").expect("abort the view's connection");

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let gone = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')))
            .unwrap_or(true)
    };
    while !gone(pid) {
        assert!(std::time::Instant::now() < deadline, "the view's server (pid {pid}) did not end");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let left = is_mounted(&view);
    let _ = inside.kill();
    let _ = inside.wait();
    drop(guard);
    assert!(!left, "the view's server ended and left its dead mount on {}", view.display());
    // The store is free: the workspace mounts again.
    ok(&fx, &["run", &ws, "--", "true"]);
}

/// A workspace removed and made again at the same path is another
/// directory (its files are other inodes): `log` there says it has no
/// history yet, its first `run` sets the old default store aside (kept,
/// listed as `replaced`) and starts a history whose checkpoints read back,
/// and the old store given with `--store` is refused. (Before, the old
/// store was taken up again: its checkpoints were listed, and the new
/// mount's checkpoint 0 gave EIO.)
#[test]
fn a_workspace_made_again_at_the_same_path_gets_a_history_of_its_own() {
    let fx = MountFixture::unmounted();
    let ws = fx.ws.to_str().expect("utf-8 path").to_string();
    std::fs::write(fx.ws.join("a.txt"), "one\n").expect("write");
    let first = format!("echo two > a.txt && {} turn --message-id r000001 >/dev/null", bin());
    ok(&fx, &["run", &ws, "--", "sh", "-c", &first]);
    std::fs::remove_dir_all(&fx.ws).expect("remove the workspace");
    std::fs::create_dir(&fx.ws).expect("make it again");
    std::fs::write(fx.ws.join("a.txt"), "three\n").expect("write");

    let out = fx.rewindfs(&["log", "-C", &ws]);
    assert_eq!(out.status.code(), Some(3), "{}", describe_status(&out));
    assert!(stderr(&out).contains("has no history yet"), "{}", stderr(&out));

    let second = format!(
        "cat .rewindfs/checkpoints/0/a.txt && echo four > a.txt && {rw} turn --message-id r000002 >/dev/null && \
         cat .rewindfs/checkpoints/1/a.txt && {rw} log",
        rw = bin()
    );
    let (out, err) = ok(&fx, &["run", &ws, "--", "sh", "-c", &second]);
    assert!(out.starts_with("three\nfour\n"), "the new history's checkpoints read back: {out}\n{err}");
    assert!(!out.contains("r000001"), "the old history is not this directory's: {out}");
    assert!(err.contains("is not the directory whose history") && err.contains(".replaced-"), "{err}");

    let stores = fx.rewindfs(&["stores", "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&stores.stdout).expect("stores --json");
    let rows = rows.as_array().expect("an array");
    assert_eq!(rows.len(), 2, "{rows:?}");
    let old = rows.iter().find(|r| r["replaced"] == true).unwrap_or_else(|| panic!("no replaced store: {rows:?}"));
    assert_eq!(old["workspace_exists"], false, "{old:?}");
    let old_store = old["store"].as_str().expect("store path").to_string();
    let (old_log, _) = ok(&fx, &["log", "--all", "-C", &ws]);
    assert!(old_log.contains("r000002") && !old_log.contains("r000001"), "{old_log}");

    let out = fx.rewindfs(&["run", &ws, "--store", &old_store, "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe_status(&out));
    assert!(stderr(&out).contains("holds the history of the directory that was at"), "{}", stderr(&out));
    assert!(!is_mounted(&fx.ws));
}

/// A mount's row holds the changes made after mounting, before the next
/// checkpoint, and says so; a mount where nothing changed gets no row
/// unless `--all`.
#[test]
fn mount_rows_say_what_they_hold_and_idle_mounts_are_not_listed() {
    let mut fx = MountFixture::new();
    let mp = fx.path().to_str().expect("utf-8 path").to_string();
    fx.sh("echo a > before-the-first-prompt.txt");
    turn(&fx, &mp, "r000001", "First prompt");
    fx.unmount();
    fx.mount(false, &[]);
    let mp = fx.path().to_str().expect("utf-8 path").to_string();
    turn(&fx, &mp, "r000002", "Second prompt");
    let (log, _) = ok(&fx, &["log", "-C", &mp]);
    let rows: Vec<&str> = log.lines().filter(|l| l.contains("(since mount)")).collect();
    assert_eq!(rows.len(), 1, "{log}");
    assert!(rows[0].contains("(since mount)         1     0     0"), "{log}");
    assert!(!log.contains("(mount)"), "{log}");
    assert!(log.contains("(1 mount where nothing changed before the next checkpoint not shown"), "{log}");
    let (all, _) = ok(&fx, &["log", "-C", &mp, "--all"]);
    assert_eq!(all.lines().filter(|l| l.contains("(since mount)")).count(), 2, "{all}");
}
