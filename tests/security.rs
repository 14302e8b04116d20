//! The agent as an attacker: an unprivileged user inside the
//! mount tries to redirect the owner's commands, forge a view, and block a
//! restore. Each attack ran as the test user through `setpriv`.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Output};

use common::{MountFixture, check, stderr, stdout, test_user};

/// Runs a python3 program in `dir` as the unprivileged test user.
fn py_as_agent(dir: &std::path::Path, code: &str) -> Output {
    let (uid, gid) = test_user();
    common::py_as_in(dir, uid, gid, code)
}

/// Starts a python3 program as the unprivileged test user in `dir` (its
/// own process group) and waits until it creates `dir/ready`.
fn spawn_agent_server(dir: &std::path::Path, code: &str) -> std::process::Child {
    let (uid, gid) = test_user();
    let child = Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg("--clear-groups")
        .args(["/usr/bin/python3", "-c", code])
        .current_dir(dir)
        .process_group(0)
        .spawn()
        .expect("start the attacker");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !dir.join("ready").exists() {
        assert!(std::time::Instant::now() < deadline, "the attacker's server did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child
}

/// The mount's info file in the fixture's runtime directory.
fn mount_file(fx: &MountFixture) -> std::path::PathBuf {
    let files: Vec<_> = std::fs::read_dir(&fx.run)
        .expect("runtime dir")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    assert_eq!(files.len(), 1, "one mount file in {}: {files:?}", fx.run.display());
    files[0].clone()
}

#[test]
fn runtime_files_belong_to_the_daemon_and_are_not_writable_by_the_agent() {
    let fx = MountFixture::manual_turns();
    let info = mount_file(&fx);
    let meta = std::fs::symlink_metadata(&info).expect("mount file");
    assert_eq!(meta.uid(), 0, "mount file owner");
    assert_eq!(meta.mode() & 0o7777, 0o644, "mount file mode");
    let out = py_as_agent(
        fx.dir.path(),
        &format!(
            r#"
import errno
try:
    open({:?}, 'r+')
    raise SystemExit('the agent could open the mount file for writing')
except PermissionError:
    pass
"#,
            info.to_str().expect("utf-8")
        ),
    );
    check(out, "agent writes the mount file");
}

/// A mount file the agent could rewrite (as the old 0666 ones were) is not
/// believed: the owner's command fails and says why, and never reaches the
/// agent's socket.
#[test]
fn a_mount_file_writable_by_others_is_refused_and_its_socket_never_called() {
    let mut fx = MountFixture::manual_turns();
    // Its mount file is made untrusted: no command reaches the daemon.
    fx.damaged();
    fx.turn("m1");
    let info = mount_file(&fx);
    std::fs::set_permissions(&info, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let evil = fx.dir.path().join("evil");
    std::fs::create_dir(&evil).expect("mkdir evil");
    let (uid, gid) = test_user();
    std::os::unix::fs::chown(&evil, Some(uid), Some(gid)).expect("chown evil");
    let marker = evil.join("called");
    // The agent points the file at a socket of its own that answers as a
    // daemon would, and notes every connection.
    let server = format!(
        r#"
import json, os, socket, threading, time
info = {info:?}
sock_path = {sock:?}
s = socket.socket(socket.AF_UNIX); s.bind(sock_path); s.listen(4)
d = json.load(open(info)); d['socket'] = sock_path
open(info, 'w').write(json.dumps(d))
def serve():
    while True:
        c, _ = s.accept()
        open({marker:?}, 'a').write('called\n')
        c.recv(65536); c.sendall(b'{{"ok":true,"data":{{"checkpoint":42}}}}\n'); c.close()
threading.Thread(target=serve, daemon=True).start()
open({ready:?}, 'w').write('ready')
time.sleep(30)
"#,
        info = info.to_str().expect("utf-8"),
        sock = evil.join("sock").to_str().expect("utf-8"),
        marker = marker.to_str().expect("utf-8"),
        ready = evil.join("ready").to_str().expect("utf-8"),
    );
    let mut attacker = spawn_agent_server(&evil, &server);
    let mp = fx.mountpoint.to_str().expect("utf-8").to_string();
    let turn = fx.rewindfs(&["turn", "-C", &mp, "--message-id", "m2"]);
    let rewind = fx.rewindfs(&["rewind", "-C", &mp, "0"]);
    let _ = attacker.kill();
    let _ = attacker.wait();
    for (what, out) in [("turn", &turn), ("rewind", &rewind)] {
        assert!(!out.status.success(), "{what} through a tampered mount file succeeded: {}", stdout(out));
        assert!(
            stderr(out).contains("writable by others") || stderr(out).contains("refusing to trust"),
            "{what} does not say why the mount file is refused: {}",
            stderr(out)
        );
    }
    assert!(!marker.exists(), "the owner's command reached the agent's socket");
}

use std::os::unix::process::CommandExt;

/// `sub/.rewindfs` renamed to the root would stand in for the checkpoints;
/// no operation may create the reserved name at the root.
#[test]
fn the_agent_cannot_create_the_reserved_name_at_the_root() {
    let fx = MountFixture::manual_turns();
    fx.sh("echo real > a.txt && chmod 777 .");
    fx.turn("m1");
    let out = py_as_agent(
        fx.path(),
        r#"
import errno, os
os.makedirs('sub/.rewindfs/messages/m1')
open('sub/.rewindfs/messages/m1/a.txt', 'w').write('FORGED\n')
open('sub/f', 'w').write('x')
def refused(what, f, *args):
    try:
        f(*args)
    except OSError as e:
        return e.errno
    raise SystemExit(what + ' of .rewindfs at the root succeeded')
refused('rename', os.rename, 'sub/.rewindfs', '.rewindfs')
refused('mkdir', os.mkdir, '.rewindfs')
refused('symlink', os.symlink, 'sub/.rewindfs', '.rewindfs')
refused('link', os.link, 'sub/f', '.rewindfs')
refused('mkfifo', os.mkfifo, '.rewindfs')
refused('create', os.open, '.rewindfs', os.O_CREAT | os.O_WRONLY | os.O_EXCL)
"#,
    );
    check(out, "the agent's attempts at the reserved name");
    let seen = std::fs::read_to_string(fx.path().join(".rewindfs/messages/m1/a.txt")).expect("the real view");
    assert_eq!(seen, "real\n", "the view of m1 was forged");
    assert!(!fx.ws.join(".rewindfs").exists(), "a .rewindfs appeared in the backing tree");
}

/// The restore's temporary file goes next to the target; a name the agent
/// can guess (it once held the daemon's pid) lets it block every restore.
#[test]
fn a_restore_is_not_blocked_by_names_the_agent_made_in_advance() {
    let fx = MountFixture::manual_turns();
    fx.sh("mkdir -m 777 d && echo one > d/f.txt");
    let first = fx.turn("m1");
    fx.sh("echo two > d/f.txt");
    fx.turn("m2");
    let pid = fx.daemon_pid();
    let out = py_as_agent(
        &fx.path().join("d"),
        &format!("import os\nfor n in range(1, 200):\n    os.mkfifo('.rewindfs-restore-{pid}-%d' % n)\n"),
    );
    check(out, "the agent's FIFOs");
    let mp = fx.mountpoint.to_str().expect("utf-8").to_string();
    let out = fx.rewindfs(&["restore", "-C", &mp, &first.to_string(), "--", "d/f.txt"]);
    assert!(out.status.success(), "restore failed: {}", stderr(&out));
    assert_eq!(std::fs::read_to_string(fx.path().join("d/f.txt")).expect("f.txt"), "one\n");
}

/// `rewindfs mount ARGS`, with the fixture's runtime dir; the output.
fn mount_cmd(fx: &MountFixture, args: &[&str]) -> Output {
    let mut full = vec!["mount"];
    full.extend_from_slice(args);
    fx.rewindfs(&full)
}

/// Asserts that a mount was refused with `why` in its message; a mount
/// that went ahead anyway is taken down so it cannot outlive the test.
fn assert_refused(fx: &MountFixture, out: &Output, mountpoint: &std::path::Path, why: &str) {
    if out.status.success() {
        let _ = fx.rewindfs(&["unmount", "--lazy", s(mountpoint)]);
        panic!("the mount on {} was accepted; it must be refused because {why}", mountpoint.display());
    }
    assert!(stderr(out).contains(why), "the refusal does not say {why:?}: {}", stderr(out));
}

fn s(p: &std::path::Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn a_shared_directory_given_as_store_is_refused_and_left_as_it_was() {
    let fx = MountFixture::unmounted();
    let shared = fx.dir.path().join("shared");
    std::fs::create_dir(&shared).expect("mkdir");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let out = mount_cmd(&fx, &[s(&fx.ws), s(&fx.mnt), "--store", s(&shared)]);
    assert_refused(&fx, &out, &fx.mnt, "writable by others");
    let mode = std::fs::metadata(&shared).expect("stat").mode() & 0o7777;
    assert_eq!(mode, 0o1777, "the directory's mode was changed");
    // Someone's directory (as `--store ~` would be): refused, untouched.
    let home = fx.dir.path().join("home-like");
    std::fs::create_dir(&home).expect("mkdir");
    std::fs::write(home.join("notes.txt"), "mine").expect("write");
    let out = mount_cmd(&fx, &[s(&fx.ws), s(&fx.mnt), "--store", s(&home)]);
    assert_refused(&fx, &out, &fx.mnt, "not a rewindfs store");
    assert_eq!(std::fs::metadata(&home).expect("stat").mode() & 0o7777, 0o755, "the directory's mode was changed");
    let names: Vec<_> = std::fs::read_dir(&home).expect("ls").filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
    assert_eq!(names, vec![std::ffi::OsString::from("notes.txt")], "the refused store was written to");
}

#[test]
fn a_store_that_contains_the_workspace_is_refused() {
    let fx = MountFixture::unmounted();
    let sp = fx.dir.path().join("sp");
    std::fs::create_dir_all(sp.join("ws7")).expect("mkdir");
    let out = mount_cmd(&fx, &[s(&sp.join("ws7")), s(&fx.mnt), "--store", s(&sp)]);
    assert_refused(&fx, &out, &fx.mnt, "must not contain the workspace");
    assert!(!common::is_mounted(&fx.mnt));
}

/// Mounts a second workspace on `<tmp>/NAME-mnt`; the output.
fn second_mount(fx: &MountFixture, ws: &std::path::Path, name: &str, store: &std::path::Path) -> Output {
    let mnt = fx.dir.path().join(format!("{name}-mnt"));
    std::fs::create_dir_all(&mnt).expect("mkdir");
    mount_cmd(fx, &[s(ws), s(&mnt), "--store", s(store), "--auto-turn", "0"])
}

#[test]
fn a_store_inside_another_mounted_workspace_is_refused() {
    let fx = MountFixture::manual_turns();
    let other = fx.dir.path().join("other");
    std::fs::create_dir(&other).expect("mkdir");
    let out = second_mount(&fx, &other, "other", &fx.path().join("hidden-store"));
    assert_refused(&fx, &out, &fx.dir.path().join("other-mnt"), "outside every workspace");
    assert!(!fx.ws.join("hidden-store").exists(), "the refused store left a directory behind");
}

#[test]
fn the_same_workspace_through_a_bind_mount_is_refused() {
    let fx = MountFixture::manual_turns();
    let alias = fx.dir.path().join("alias");
    std::fs::create_dir(&alias).expect("mkdir");
    check(
        common::run_with_timeout(Command::new("mount").args(["--bind", s(&fx.ws), s(&alias)]), common::CHILD_TIMEOUT),
        "mount --bind",
    );
    let out = second_mount(&fx, &alias, "alias", &fx.dir.path().join("store2"));
    let _ = common::run_with_timeout(Command::new("umount").arg("-l").arg(&alias), common::CHILD_TIMEOUT);
    assert_refused(&fx, &out, &fx.dir.path().join("alias-mnt"), "already mounted");
}

#[test]
fn the_parent_of_a_mounted_workspace_is_refused() {
    let fx = MountFixture::manual_turns();
    // In place, so no other rule (a mountpoint inside the workspace) applies.
    let store = tempfile::tempdir().expect("tempdir");
    let parent = fx.dir.path();
    let out = mount_cmd(&fx, &[s(parent), "--store", s(&store.path().join("s")), "--auto-turn", "0"]);
    assert_refused(&fx, &out, parent, "mounting over it would hide that mount");
}

#[test]
fn show_refuses_a_symlinked_mountpoint() {
    let fx = MountFixture::manual_turns();
    let first = fx.turn("m1");
    let secret = fx.dir.path().join("root-only");
    std::fs::create_dir(&secret).expect("mkdir");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let link = fx.dir.path().join("view");
    std::os::unix::fs::symlink(&secret, &link).expect("symlink");
    let out = fx.rewindfs(&["show", "-C", s(&fx.mountpoint), &first.to_string(), s(&link)]);
    assert!(!out.status.success(), "show followed a symlinked mountpoint");
    assert!(stderr(&out).contains("symlink"), "{}", stderr(&out));
    assert!(!common::is_mounted(&secret), "the view was mounted on the symlink's target");
}

/// Defence in depth: even a trusted-looking socket file (root's, 0600, at
/// the mount's own path) is not believed when another user's process
/// serves it (SO_PEERCRED); no request reaches that process.
#[test]
fn a_socket_served_by_another_user_gets_no_request() {
    let fx = MountFixture::manual_turns();
    let info = mount_file(&fx);
    let real = info.with_extension("sock");
    assert!(real.exists(), "no socket beside {}", info.display());
    let evil = fx.dir.path().join("evil2");
    std::fs::create_dir(&evil).expect("mkdir evil");
    let (uid, gid) = test_user();
    std::os::unix::fs::chown(&evil, Some(uid), Some(gid)).expect("chown evil");
    let heard = evil.join("heard");
    let server = format!(
        r#"
import socket, time
s = socket.socket(socket.AF_UNIX); s.bind({sock:?}); s.listen(4)
open({ready:?}, 'w').write('ready')
s.settimeout(30)
while True:
    c, _ = s.accept(); c.settimeout(3)
    try:
        data = c.recv(65536)
    except Exception:
        data = b''
    open({heard:?}, 'ab').write(b'[' + data + b']')
    c.close()
"#,
        sock = s(&evil.join("sock")),
        ready = s(&evil.join("ready")),
        heard = s(&heard),
    );
    let mut attacker = spawn_agent_server(&evil, &server);
    // Put the attacker's socket where the daemon's was, as root would find
    // it: owned by root, mode 0600. The daemon's own is kept aside.
    let aside = fx.dir.path().join("daemon.sock");
    std::fs::hard_link(&real, &aside).expect("keep the daemon's socket");
    std::os::unix::fs::chown(evil.join("sock"), Some(0), Some(0)).expect("chown");
    std::fs::set_permissions(evil.join("sock"), std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::rename(evil.join("sock"), &real).expect("replace the socket");
    let out = fx.rewindfs(&["turn", "-C", s(&fx.mountpoint), "--message-id", "m2"]);
    std::fs::rename(&aside, &real).expect("put the daemon's socket back");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let _ = attacker.kill();
    let _ = attacker.wait();
    assert!(!out.status.success(), "turn through another user's socket succeeded: {}", stdout(&out));
    assert!(stderr(&out).contains("refusing to talk to it"), "{}", stderr(&out));
    let got = std::fs::read(&heard).unwrap_or_default();
    assert!(!String::from_utf8_lossy(&got).contains("turn"), "the request reached the attacker: {got:?}");
    fx.turn("m3");
}

/// Names and labels come from the agent: printed for the owner, they must
/// not fake lines of our output or reach the terminal as escapes.
#[test]
fn hostile_names_and_labels_are_quoted_in_human_output() {
    let fx = MountFixture::manual_turns();
    fx.sh("echo one > plain.txt");
    let first = fx.turn("m1");
    let fake = "x | +1 -1 (modified)";
    let escape = "red\u{1b}[31mtext";
    let newline = "two\nlines";
    for name in [fake, escape, newline] {
        std::fs::write(fx.path().join(name), "agent\n").expect("create a hostile name");
    }
    let mp = fx.mountpoint.to_str().expect("utf-8").to_string();
    check(
        fx.rewindfs(&["turn", "-C", &mp, "--message-id", "m2", "--label", "fix\u{1b}]0;owned\u{7}\nnext"]),
        "turn with a hostile label",
    );
    let outputs = [
        fx.rewindfs(&["diff", "-C", &mp, &first.to_string(), "--stat"]),
        fx.rewindfs(&["log", "-C", &mp]),
        fx.rewindfs(&["log", "-C", &mp, "--graph"]),
        fx.rewindfs(&["restore", "-C", &mp, "--dry-run", &first.to_string(), "--", "."]),
        fx.rewindfs(&["rewind", "-C", &mp, "--dry-run", &first.to_string()]),
    ];
    for out in &outputs {
        let text = stdout(&check(out.clone(), "human output"));
        assert!(!text.contains('\u{1b}') && !text.contains('\u{7}'), "an escape reached the terminal:\n{text:?}");
        assert!(!text.contains("two\nlines"), "a name broke a line:\n{text}");
    }
    let stat = stdout(&outputs[0]);
    assert!(stat.contains(" \"x | +1 -1 (modified)\" | +1 -0 (added)"), "the fake line is not quoted:\n{stat}");
    assert!(stat.contains("\"two\\nlines\""), "{stat}");
}

/// `rewindfs ARGS` run as the unprivileged test user, with the fixture's
/// runtime dir, from a copy of the binary it can execute.
fn rewindfs_as_agent(fx: &MountFixture, args: &[&str]) -> Output {
    rewindfs_as_agent_in(fx, args, true)
}

/// `rewindfs` (a copy the test user can run) as the unprivileged test
/// user, in the fixture's directory.
fn agent_command(fx: &MountFixture) -> Command {
    let bin = fx.dir.path().join("rewindfs-for-agent");
    if !bin.exists() {
        std::fs::copy(common::bin(), &bin).expect("copy the binary");
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let (uid, gid) = test_user();
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg("--clear-groups")
        .arg(&bin)
        .current_dir(fx.dir.path());
    cmd
}

/// As `rewindfs_as_agent`; without `fixture_runtime`, with the agent's own
/// default runtime directory, as an agent run by hand has.
fn rewindfs_as_agent_in(fx: &MountFixture, args: &[&str], fixture_runtime: bool) -> Output {
    let mut cmd = agent_command(fx);
    cmd.args(args);
    if fixture_runtime {
        cmd.env("REWINDFS_RUNTIME_DIR", &fx.run);
    } else {
        cmd.env_remove("REWINDFS_RUNTIME_DIR").env_remove("XDG_RUNTIME_DIR");
    }
    common::run_with_timeout(&mut cmd, common::CHILD_TIMEOUT)
}

#[test]
fn the_agent_user_may_mark_turns_and_preview_but_not_change_the_tree() {
    let fx = MountFixture::with_args(false, &["--auto-turn", "0", "--agent-user", common::TEST_USER]);
    fx.sh("echo one > f.txt && chmod 666 f.txt");
    let first = fx.turn("m1").to_string();
    fx.sh("echo two > f.txt");
    let mp = s(&fx.mountpoint).to_string();
    let turn = check(rewindfs_as_agent(&fx, &["turn", "-C", &mp, "--message-id", "agent-1"]), "the agent's turn");
    assert!(stdout(&turn).contains("agent-1"), "{}", stdout(&turn));
    for args in [
        vec!["log", "-C", &mp],
        vec!["diff", "-C", &mp, &first, "--stat"],
        vec!["history", "-C", &mp, "f.txt"],
        vec!["rewind", "-C", &mp, "--dry-run", &first],
        vec!["restore", "-C", &mp, "--dry-run", &first, "--", "f.txt"],
    ] {
        check(rewindfs_as_agent(&fx, &args), &format!("the agent's {args:?}"));
    }
    for args in [
        vec!["rewind", "-C", &mp, &first],
        vec!["restore", "-C", &mp, &first, "--", "f.txt"],
        vec!["unmount", &mp],
        vec!["push", "-C", &mp],
        // The check of the remote reads the whole bucket.
        vec!["fsck", "-C", &mp, "--remote"],
    ] {
        let out = rewindfs_as_agent(&fx, &args);
        assert_eq!(out.status.code(), Some(5), "the agent's {args:?} must be refused: {}", stderr(&out));
        assert!(stderr(&out).contains("owner's"), "{args:?}: {}", stderr(&out));
    }
    assert_eq!(std::fs::read_to_string(fx.path().join("f.txt")).expect("f.txt"), "two\n", "the tree changed");
    assert!(common::is_mounted(&fx.mountpoint));
    // The owner still may.
    fx.cli(&["rewind", &first]);
    assert_eq!(std::fs::read_to_string(fx.path().join("f.txt")).expect("f.txt"), "one\n");
}

#[test]
fn the_agent_user_can_neither_delete_nor_pin_history() {
    let fx = MountFixture::with_args(false, &["--auto-turn", "0", "--agent-user", common::TEST_USER]);
    fx.sh("echo one > f.txt");
    let first = fx.turn("m1").to_string();
    fx.sh("echo two > f.txt");
    fx.turn("m2");
    let before = fx.cli_json(&["log"]);
    let mp = s(&fx.mountpoint).to_string();
    // Previews and reading the store's use are the agent's too.
    for args in [
        vec!["forget", "-C", &mp, "--dry-run", &first],
        vec!["gc", "-C", &mp, "--dry-run", "--keep-count", "1", "--keep-days", "0"],
        vec!["du", "-C", &mp],
    ] {
        check(rewindfs_as_agent(&fx, &args), &format!("the agent's {args:?}"));
    }
    for args in [
        vec!["forget", "-C", &mp, &first],
        vec!["gc", "-C", &mp, "--keep-count", "1", "--keep-days", "0"],
        vec!["gc", "-C", &mp, "--auto", "off"],
        vec!["snapshot", "-C", &mp, "mine", "--at", &first],
        vec!["reset", "-C", &mp, "--confirm"],
    ] {
        let out = rewindfs_as_agent(&fx, &args);
        assert_eq!(out.status.code(), Some(5), "the agent's {args:?} must be refused: {}", stderr(&out));
        assert!(stderr(&out).contains("owner's"), "{args:?}: {}", stderr(&out));
    }
    assert_eq!(fx.cli_json(&["log"]), before, "the history changed");
    let status = fx.status_json();
    assert_eq!(status["retention"]["keep_count"].as_u64(), Some(200), "the policy changed: {status}");
    assert_eq!(status["retention"]["auto"].as_bool(), Some(true), "the policy changed: {status}");
    // The owner still may.
    fx.cli_json(&["forget", &first]);
}

#[test]
fn without_an_agent_user_no_other_user_reaches_the_daemon() {
    let fx = MountFixture::manual_turns();
    let mp = s(&fx.mountpoint).to_string();
    for args in [vec!["turn", "-C", &mp], vec!["log", "-C", &mp], vec!["reset", "-C", &mp, "--confirm"]] {
        let out = rewindfs_as_agent(&fx, &args);
        assert_eq!(out.status.code(), Some(5), "{args:?} from another user: {}", stderr(&out));
    }
}

#[test]
fn run_as_runs_the_command_as_the_agent_user_who_cannot_rewind() {
    let fx = MountFixture::unmounted();
    let (uid, _) = test_user();
    std::fs::write(fx.ws.join("f.txt"), "one\n").expect("write");
    common::sh(fx.dir.path(), "chmod 777 ws && chmod 666 ws/f.txt");
    let _ = rewindfs_as_agent(&fx, &["--version"]);
    let agent_bin = fx.dir.path().join("rewindfs-for-agent");
    let script = format!(
        "id -u > whoami; echo two > f.txt; '{bin}' turn --message-id a1 > turned; '{bin}' rewind 0 2> refused; echo $? > status",
        bin = s(&agent_bin)
    );
    let out = fx.rewindfs(&[
        "run",
        s(&fx.ws),
        "--store",
        s(&fx.store),
        "--auto-turn",
        "0",
        "--as",
        common::TEST_USER,
        "--",
        "sh",
        "-c",
        &script,
    ]);
    check(out, "rewindfs run --as");
    let read = |n: &str| std::fs::read_to_string(fx.ws.join(n)).unwrap_or_else(|e| panic!("{n}: {e}"));
    assert_eq!(read("whoami").trim(), uid.to_string(), "the command did not run as the agent user");
    assert!(read("turned").contains("a1"), "the agent could not mark a turn: {}", read("turned"));
    assert_eq!(read("status").trim(), "5", "the agent's rewind was not refused: {}", read("refused"));
    assert_eq!(read("f.txt"), "two\n");
}

/// Lazily unmounts a mountpoint when dropped (a test that mounts outside
/// the fixture's own runtime directory).
struct LazyUnmount(std::path::PathBuf);

impl Drop for LazyUnmount {
    fn drop(&mut self) {
        if common::is_mounted(&self.0) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

/// The daemon runs with umask 0 (a FUSE create takes the caller's mode as
/// it is). The runtime directory it made for its workspace lock came out
/// mode 777, so the first mount after a boot (`/run` starts empty) was
/// refused by its own trust check, and so was every command after it
/// until someone ran chmod. The files it made in the store (the journal
/// log, the chunk store's lock, id and reserve) came out mode 666, so in a
/// store directory of mode 755 another user, an agent, could write the
/// journal log and forge history.
#[test]
fn a_first_mount_makes_its_runtime_directory_and_store_files_writable_by_their_owner_only() {
    let fx = MountFixture::unmounted();
    let fresh = fx.dir.path().join("fresh");
    let run = fresh.join("rt");
    let store = fx.dir.path().join("store755");
    std::fs::create_dir(&store).expect("mkdir");
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let rewindfs = |args: &[&str]| {
        common::run_with_timeout(
            Command::new(common::bin()).args(args).env("REWINDFS_RUNTIME_DIR", &run),
            std::time::Duration::from_secs(120),
        )
    };
    let _guard = LazyUnmount(fx.mnt.clone());
    check(rewindfs(&["mount", s(&fx.ws), s(&fx.mnt), "--store", s(&store)]), "first mount, no runtime directory yet");
    for dir in [&fresh, &run] {
        let mode = std::fs::metadata(dir).expect("runtime directory").mode() & 0o7777;
        assert_eq!(mode & 0o022, 0, "{} is writable by others (mode {mode:o})", dir.display());
    }
    std::fs::write(fx.mnt.join("f"), "x").expect("a change, so the journal log is written");
    let mut open = Vec::new();
    let mut stack = vec![store.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("store listing") {
            let p = e.expect("entry").path();
            let m = std::fs::symlink_metadata(&p).expect("stat");
            if m.mode() & 0o022 != 0 {
                open.push(format!("{:o} {}", m.mode() & 0o7777, p.display()));
            }
            if m.is_dir() && !p.ends_with("attic") {
                stack.push(p);
            }
        }
    }
    assert_eq!(open, Vec::<String>::new(), "store files writable by others");
    // The attack itself: the agent appends a forged record to the log.
    let out = py_as_agent(
        fx.dir.path(),
        &format!(
            r#"
try:
    open({:?}, 'ab').write(b'forged')
    raise SystemExit('the agent could write the journal log')
except PermissionError:
    pass
"#,
            s(&store.join("journal.log"))
        ),
    );
    check(out, "agent writes the journal log");
    check(rewindfs(&["status", "-C", s(&fx.mnt)]), "status after the first mount");
    check(rewindfs(&["unmount", s(&fx.mnt)]), "unmount");
}

/// A root-owned file outside the workspace: its path, text and mode.
fn root_file(dir: &std::path::Path, name: &str, text: &str, mode: u32) -> (std::path::PathBuf, String, u32) {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write a root file");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    (path, text.to_string(), mode)
}

/// Asserts that root's files are as they were: text and mode.
fn assert_untouched(files: &[(std::path::PathBuf, String, u32)], what: &str) {
    for (path, text, mode) in files {
        let meta = std::fs::symlink_metadata(path).expect("stat a root file");
        assert!(meta.is_file(), "{what}: {} is no longer a regular file", path.display());
        assert_eq!(meta.mode() & 0o7777, *mode, "{what}: the mode of {} changed", path.display());
        assert_eq!(
            std::fs::read_to_string(path).expect("read"),
            *text,
            "{what}: root's {} was written",
            path.display()
        );
    }
}

/// `rewindfs hooks install AGENT --project WS` as root, with HOME and
/// CODEX_HOME in the fixture (never root's own settings).
fn hooks_install(fx: &MountFixture, agent: &str, project: &std::path::Path) -> Output {
    let home = fx.dir.path().join("home");
    std::fs::create_dir_all(&home).expect("mkdir home");
    common::run_with_timeout(
        fx.command()
            .args(["hooks", "install", agent, "--project", s(project)])
            .env("HOME", &home)
            .env("CODEX_HOME", home.join(".codex")),
        common::CHILD_TIMEOUT,
    )
}

/// The agent owns the workspace, and so the agents' settings directories in
/// it: every symlink it can plant there, root's `hooks install --project`
/// must not follow (it used to create `<file>.rewindfs-tmp` with a plain
/// create and copy a mode onto it, so root wrote JSON into, and chmodded,
/// any file on the machine).
#[test]
fn hooks_install_in_a_project_follows_none_of_the_agents_symlinks() {
    let fx = MountFixture::unmounted();
    let (uid, gid) = test_user();
    let outside = fx.dir.path().join("root-only");
    std::fs::create_dir(&outside).expect("mkdir");
    let json = "{\"root\": \"secret\"}\n";
    let settings = root_file(&outside, "settings.json", json, 0o600);
    let tmp_target = root_file(&outside, "tmp-target", "root's own\n", 0o600);
    let backup_target = root_file(&outside, "backup-target", "root's backup\n", 0o640);
    let backup_tmp_target = root_file(&outside, "backup-tmp-target", "root's other\n", 0o600);
    let in_dir = root_file(&outside, "settings.local.json", json, 0o600);
    let all = [settings.clone(), tmp_target.clone(), backup_target.clone(), backup_tmp_target.clone(), in_dir];

    // 1. The settings file itself is a symlink to root's file, and every
    // name install ever wrote beside it too.
    let ws1 = fx.dir.path().join("ws1");
    std::fs::create_dir(&ws1).expect("mkdir");
    std::os::unix::fs::chown(&ws1, Some(uid), Some(gid)).expect("chown");
    let plant = |ws: &std::path::Path, code: &str| check(py_as_agent(ws, code), "the agent plants symlinks");
    plant(
        &ws1,
        &format!(
            r#"
os.mkdir('.claude')
os.symlink({settings:?}, '.claude/settings.local.json')
os.symlink({tmp:?}, '.claude/settings.local.json.rewindfs-tmp')
os.symlink({backup:?}, '.claude/settings.local.json.rewindfs-backup')
os.symlink({backup_tmp:?}, '.claude/settings.local.json.rewindfs-backup.rewindfs-tmp')
"#,
            settings = s(&settings.0),
            tmp = s(&tmp_target.0),
            backup = s(&backup_target.0),
            backup_tmp = s(&backup_tmp_target.0),
        ),
    );
    let out = hooks_install(&fx, "claude", &ws1);
    assert_untouched(&all, "a symlinked settings file");
    assert!(!out.status.success(), "install through a symlinked settings file succeeded: {}", stdout(&out));
    let named = ws1.join(".claude/settings.local.json");
    assert!(
        stderr(&out).contains("symlink") && stderr(&out).contains(s(&named)),
        "the refusal does not name the symlink {}: {}",
        named.display(),
        stderr(&out)
    );

    // 2. A plain settings file of the agent's, mode 666, with the old
    // temporary and backup names planted: install goes ahead, inside the
    // workspace only.
    let ws2 = fx.dir.path().join("ws2");
    std::fs::create_dir(&ws2).expect("mkdir");
    std::os::unix::fs::chown(&ws2, Some(uid), Some(gid)).expect("chown");
    plant(
        &ws2,
        &format!(
            r#"
os.mkdir('.claude')
open('.claude/settings.local.json', 'w').write('{{"mine": 1}}\n')
os.chmod('.claude/settings.local.json', 0o666)
os.symlink({tmp:?}, '.claude/settings.local.json.rewindfs-tmp')
os.symlink({backup_tmp:?}, '.claude/settings.local.json.rewindfs-backup.rewindfs-tmp')
"#,
            tmp = s(&tmp_target.0),
            backup_tmp = s(&backup_tmp_target.0),
        ),
    );
    let out = hooks_install(&fx, "claude", &ws2);
    assert_untouched(&all, "planted temporary names");
    check(out, "install beside planted temporary names");
    let written = std::fs::read_to_string(ws2.join(".claude/settings.local.json")).expect("settings");
    assert!(written.contains("\"mine\"") && written.contains("hook claude"), "{written}");
    let meta = std::fs::symlink_metadata(ws2.join(".claude/settings.local.json")).expect("stat");
    assert!(meta.is_file(), "the settings file is not a regular file");
    let backup = std::fs::read_to_string(ws2.join(".claude/settings.local.json.rewindfs-backup")).expect("backup");
    assert_eq!(backup, "{\"mine\": 1}\n");

    // 3. The settings directory is a symlink to a directory of root's, for
    // each agent.
    for (agent, dir) in [("claude", ".claude"), ("gemini", ".gemini"), ("codex", ".codex")] {
        let ws = fx.dir.path().join(format!("ws-{agent}"));
        std::fs::create_dir(&ws).expect("mkdir");
        std::os::unix::fs::chown(&ws, Some(uid), Some(gid)).expect("chown");
        plant(&ws, &format!("os.symlink({:?}, {dir:?})", s(&outside)));
        let names = || {
            let mut n: Vec<_> =
                std::fs::read_dir(&outside).expect("ls").map(|e| e.expect("entry").file_name()).collect();
            n.sort();
            n
        };
        let before = names();
        let out = hooks_install(&fx, agent, &ws);
        assert_untouched(&all, &format!("a symlinked {dir}"));
        let after = names();
        assert_eq!(before, after, "{agent}: install made files in root's directory through {dir}");
        assert!(!out.status.success(), "{agent}: install through a symlinked {dir} succeeded: {}", stdout(&out));
        assert!(
            stderr(&out).contains("symlink") && stderr(&out).contains(s(&ws.join(dir))),
            "{agent}: the refusal does not name the symlink {dir}: {}",
            stderr(&out)
        );
    }
}

/// A daemon whose agent user is the test user, with the control socket's
/// request deadline cut to `deadline_ms` (test hook); its pid and socket.
fn agent_mount(deadline_ms: u32) -> (MountFixture, i32, String) {
    let mut fx = MountFixture::unmounted();
    let deadline = deadline_ms.to_string();
    fx.mount_with_env(
        false,
        &["--auto-turn", "0", "--agent-user", common::TEST_USER],
        &[("REWINDFS_TEST_REQUEST_DEADLINE_MS", &deadline)],
    );
    let status = fx.status_json();
    let pid = status["pid"].as_i64().expect("status has a pid") as i32;
    let socket = status["socket"].as_str().expect("status has a socket").to_string();
    (fx, pid, socket)
}

/// A field of /proc/PID/status (`VmRSS`, `Threads`) as a number (kB for
/// sizes).
fn proc_status(pid: i32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the daemon's /proc status");
    let line = text.lines().find(|l| l.starts_with(&format!("{field}:"))).expect("the field");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("a number")
}

/// A directory the agent user owns, beside the fixture's.
fn agent_dir(fx: &MountFixture, name: &str) -> std::path::PathBuf {
    let dir = fx.dir.path().join(name);
    std::fs::create_dir(&dir).expect("mkdir");
    let (uid, gid) = test_user();
    std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).expect("chown");
    dir
}

/// One agent connection sent 1 GB without a newline and the daemon grew
/// past 1 GB: a request line is capped (1 MiB), a longer one is answered
/// with an error and its connection closed.
#[test]
fn a_request_line_without_end_is_cut_at_the_cap_and_the_daemon_does_not_grow() {
    let (fx, pid, socket) = agent_mount(30_000);
    let baseline = proc_status(pid, "VmRSS");
    let dir = agent_dir(&fx, "flood");
    let code = format!(
        r#"
import json, socket, time
c = socket.socket(socket.AF_UNIX); c.settimeout(30); c.connect({socket:?})
chunk = b'x' * (1 << 20)
sent, error = 0, None
try:
    for _ in range(64):
        c.sendall(chunk)
        sent += 1
    # The old daemon holds all of it until the line ends.
    time.sleep(1)
    c.shutdown(socket.SHUT_WR)
except OSError as e:
    error = str(e)
reply = b''
try:
    while True:
        d = c.recv(65536)
        if not d:
            break
        reply += d
except OSError as e:
    error = (error or '') + '; ' + str(e)
print(json.dumps({{'sent_mib': sent, 'error': error, 'reply': reply.decode('utf-8', 'replace')}}))
"#
    );
    let flood = std::thread::spawn({
        let dir = dir.clone();
        move || py_as_agent(&dir, &code)
    });
    let mut peak = baseline;
    while !flood.is_finished() {
        peak = peak.max(proc_status(pid, "VmRSS"));
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let out = check(flood.join().expect("the flood thread"), "the agent's long line");
    let result: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("the agent's report");
    assert!(
        peak < baseline + 32 * 1024 && peak < 200 * 1024,
        "the daemon grew from {baseline} kB to {peak} kB on one line without end ({result})"
    );
    let reply: serde_json::Value = serde_json::from_str(result["reply"].as_str().expect("reply").trim())
        .unwrap_or_else(|e| panic!("no one-line error reply ({e}): {result}"));
    assert_eq!(reply["ok"], false, "{reply}");
    let message = reply["error"]["message"].as_str().expect("message");
    assert!(message.contains("1 MiB"), "the reply does not say what the cap is: {message}");
    assert!(result["sent_mib"].as_u64().expect("sent") < 64, "the daemon read all 64 MiB: {result}");
    // The daemon goes on serving the owner and the agent.
    fx.status_json();
    check(rewindfs_as_agent(&fx, &["log", "-C", s(&fx.mountpoint)]), "the agent's log after its long line");
}

/// 1,500 idle connections made 1,511 daemon threads: the agent's
/// connections are bounded (16 at a time), the ones over the bound are
/// answered with an error at once, an idle one is closed at the request
/// deadline, the owner is served meanwhile, and once the flood ends the
/// agent is served again.
#[test]
fn a_flood_of_idle_connections_is_bounded_and_the_owner_is_still_served() {
    let (fx, pid, socket) = agent_mount(4_000);
    let baseline = proc_status(pid, "Threads");
    let dir = agent_dir(&fx, "idle");
    let code = format!(
        r#"
import json, os, socket, time
conns = []
for _ in range(200):
    c = socket.socket(socket.AF_UNIX); c.settimeout(15); c.connect({socket:?}); conns.append(c)
open('ready', 'w').write('ready')
deadline = time.time() + 60
# The first trickles a request that never ends, a byte at a time, past
# the request deadline (4 s).
conns[0].sendall(b'{{"op":')
trickle_until = time.time() + 6
while (not os.path.exists('done') or time.time() < trickle_until) and time.time() < deadline:
    try:
        conns[0].send(b' ')
    except OSError:
        pass
    time.sleep(0.1)
replies = []
# The old daemon never answers an idle connection: give up together.
end = time.time() + 10
for c in conns:
    got = b''
    try:
        while True:
            c.settimeout(max(0.01, end - time.time()))
            d = c.recv(65536)
            if not d:
                break
            got += d
    except OSError as e:
        got += ('<%s>' % e).encode()
    replies.append(got.decode('utf-8', 'replace'))
    c.close()
open('result.json', 'w').write(json.dumps(replies))
"#
    );
    let mut agent = spawn_agent_server(&dir, &code);
    let during = proc_status(pid, "Threads");
    let started = std::time::Instant::now();
    let status = fx.rewindfs(&["status", "-C", s(&fx.mountpoint), "--json"]);
    let took = started.elapsed();
    std::fs::write(dir.join("done"), "").expect("end the flood");
    let out = common::wait_child(&mut agent, std::time::Duration::from_secs(90), "the agent's idle connections");
    check(out, "the agent's idle connections");
    assert!(
        during <= baseline + 16 + 4,
        "200 idle connections of the agent made the daemon go from {baseline} to {during} threads"
    );
    check(status, "the owner's status during the flood");
    assert!(took < std::time::Duration::from_secs(5), "the owner's status took {took:?} during the flood");
    let replies: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("result.json")).expect("result")).expect("json");
    let count = |what: &str| replies.iter().filter(|r| r.contains(what)).count();
    let (refused, timed_out) = (count("too many connections"), count("no whole request"));
    assert!(refused >= 200 - 16, "{refused} connections over the bound were refused: {replies:?}");
    assert_eq!(refused + timed_out, 200, "every connection ends with an error line: {replies:?}");
    assert!(replies[0].contains("no whole request"), "a trickling request was not cut at the deadline: {}", replies[0]);
    // The flood is over: the agent is served again, and its threads went.
    check(rewindfs_as_agent(&fx, &["turn", "-C", s(&fx.mountpoint), "--message-id", "after-flood"]), "agent turn");
    let settled = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while proc_status(pid, "Threads") > baseline + 2 {
        assert!(std::time::Instant::now() < settled, "the flood's threads stayed: {}", proc_status(pid, "Threads"));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The agent may seal turns, as often as it likes, but a
/// turn that changed nothing pushes no checkpoint out of the owner's
/// count-based retention: the owner's checkpoints with changes stay, views
/// and all, after a collection.
#[test]
fn the_agent_s_empty_turns_push_none_of_the_owner_s_checkpoints_out() {
    let fx = MountFixture::with_args(false, &["--auto-turn", "0", "--agent-user", common::TEST_USER]);
    // The owner's policy: the 4 newest, whatever their age.
    fx.cli(&["gc", "--keep-count", "4", "--keep-days", "0", "--auto", "off"]);
    let mut owners = Vec::new();
    for i in 1..=3 {
        fx.sh(&format!("echo {i} > f{i}"));
        owners.push(fx.turn(&format!("owner-{i}")));
    }
    let mp = s(&fx.mountpoint).to_string();
    for i in 0..20 {
        check(
            rewindfs_as_agent(&fx, &["turn", "-C", &mp, "--message-id", &format!("agent-{i:03}")]),
            "the agent's empty turn",
        );
    }
    fx.cli(&["gc"]);
    let log = fx.cli_json(&["log"]);
    let listed: Vec<i64> =
        log.as_array().expect("log --json is an array").iter().filter_map(|c| c["checkpoint"].as_i64()).collect();
    for (i, c) in owners.iter().enumerate() {
        assert!(listed.contains(c), "the owner's checkpoint {c} was collected after 20 empty turns; kept: {listed:?}");
        let f = fx.path().join(format!(".rewindfs/checkpoints/{c}/f{}", i + 1));
        assert_eq!(std::fs::read_to_string(&f).expect("the view of a kept checkpoint"), format!("{}\n", i + 1));
    }
}

/// The agent's message ids cannot capture the owner's
/// references. The agent seals the short form `log` shows of the owner's
/// prompt id (refused: a message id may not be a prefix of another), and
/// an id equal to the words of the owner's label (sealed, but the owner's
/// reference by those words is then ambiguous, never the agent's). `log`
/// tells the agent's checkpoints from the owner's.
#[test]
fn the_agent_cannot_capture_the_owners_references_with_its_message_ids() {
    let fx = MountFixture::with_args(false, &["--auto-turn", "0", "--agent-user", common::TEST_USER]);
    let mp = s(&fx.mountpoint).to_string();
    let owner_id = "3f2a9c10-1b69-42ac-a7c5-8a1f880122ea";
    fx.sh("echo one > f.txt && chmod 666 f.txt");
    let sealed = fx.cli_json(&["turn", "--message-id", owner_id, "--label", "fix the tests"]);
    let owner = sealed["checkpoint"].as_i64().expect("the owner's checkpoint");
    fx.sh("echo two > f.txt");
    let log = fx.cli(&["log"]);
    let short = "3f2a9c10";
    assert!(log.contains(&format!(" {short} ")), "log shows the owner's id cut short: {log}");

    for id in [short, "3f2a", "3f2a9c10-1b69-42ac-a7c5-8a1f880122ea-x"] {
        let out = rewindfs_as_agent(&fx, &["turn", "-C", &mp, "--message-id", id]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "the agent's id {id:?} must be refused: {}",
            common::describe_status(&out)
        );
        assert!(
            stderr(&out).contains("prefix") && stderr(&out).contains(&format!("\"{owner_id}\"")),
            "{id}: {}",
            stderr(&out)
        );
    }
    let out = check(
        rewindfs_as_agent(&fx, &["turn", "-C", &mp, "--message-id", "fix the tests", "--json"]),
        "the agent's turn named as the owner's label",
    );
    let agents: serde_json::Value = serde_json::from_slice(&out.stdout).expect("turn --json");
    let agents = agents["checkpoint"].as_i64().expect("the agent's checkpoint");
    assert_ne!(agents, owner);

    // The owner's short id still names the owner's checkpoint.
    let preview = fx.cli_json(&["rewind", "--dry-run", short]);
    assert_eq!(preview["checkpoint"].as_i64(), Some(owner), "{preview}");
    // The label words name the owner's checkpoint, or are refused as
    // ambiguous with both listed: never the agent's.
    let out = fx.cli_output(&["rewind", "--dry-run", "fix the tests"]);
    if out.status.success() {
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("rewind --json");
        assert_eq!(v["checkpoint"].as_i64(), Some(owner), "{v}");
    } else {
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("ambiguous") && err.contains(&format!("{owner} (message \"{owner_id}\")")), "{err}");
        assert!(err.contains(&format!("{agents} (message \"fix the tests\")")), "{err}");
    }

    // `log` says which checkpoints the agent sealed.
    let rows = fx.cli_json(&["log"]);
    let row = |n: i64| rows.as_array().and_then(|r| r.iter().find(|t| t["checkpoint"] == n)).cloned();
    assert_eq!(row(agents).map(|r| r["by_agent"].clone()), Some(serde_json::json!(true)), "{rows}");
    assert_eq!(row(owner).map(|r| r["by_agent"].clone()), Some(serde_json::json!(false)), "{rows}");
    let log = fx.cli(&["log"]);
    let line = |n: i64| log.lines().find(|l| l.get(1..4).map(str::trim) == Some(&n.to_string())).unwrap_or("");
    assert!(line(agents).contains("(sealed by the agent)"), "{log}");
    assert!(!line(owner).contains("(sealed by the agent)"), "{log}");
}

/// The agent's `unmount` of the owner's live mount,
/// found (as the agent's other commands find it) in root's runtime
/// directory, is the owner-only refusal (exit 5). It was taken for a dead
/// mount, whose detach failed: "cannot detach dead mount ... Operation not
/// permitted" (exit 1).
#[test]
fn the_agents_unmount_of_a_live_mount_is_refused_as_the_owners() {
    let mut fx = MountFixture::unmounted();
    // The mount publishes itself where root's mounts are by default; the
    // agent has no REWINDFS_RUNTIME_DIR and looks there after its own.
    fx.run = std::path::PathBuf::from("/run/rewindfs");
    fx.mount(false, &["--auto-turn", "0", "--agent-user", common::TEST_USER]);
    let mp = s(&fx.mountpoint).to_string();
    check(rewindfs_as_agent_in(&fx, &["log", "-C", &mp], false), "the agent finds the mount");
    let out = rewindfs_as_agent_in(&fx, &["unmount", &mp], false);
    assert_eq!(out.status.code(), Some(5), "the agent's unmount: {}{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).contains("owner's"), "{}", stderr(&out));
    assert!(common::is_mounted(&fx.mountpoint), "the mount is still there");
    fx.unmount();
}

/// A view served from the store of a workspace that is not mounted (`show`
/// outside a mount, a process of root's own): the store is private to its
/// owner, so the agent's user can neither read it nor use it. Its own
/// `show` and `log` of the workspace, given root's home, fail and mount
/// nothing; it cannot unmount the owner's view; the store's directory and
/// database stay closed to it while the view is served.
#[test]
fn the_agent_user_can_neither_read_nor_use_a_store_served_view() {
    let fx = MountFixture::unmounted();
    let ws = s(&fx.ws).to_string();
    std::fs::write(fx.ws.join("secret.txt"), "v0\n").expect("write");
    let script = format!("echo v1 > secret.txt && {} turn --message-id r000001 >/dev/null", common::bin());
    check(fx.rewindfs(&["run", &ws, "--", "sh", "-c", &script]), "run");
    let view = fx.dir.path().join("view");
    std::fs::create_dir(&view).expect("mkdir view");
    let out = check(fx.rewindfs(&["show", "-C", &ws, "1", s(&view)]), "the owner's show");
    assert!(stdout(&out).contains("served from its store by pid"), "{}", stdout(&out));
    assert!(common::is_mounted(&view));

    let home = fx.dir.path().join("home");
    let theirs = fx.dir.path().join("agent-view");
    std::fs::create_dir(&theirs).expect("mkdir");
    let (uid, gid) = test_user();
    std::os::unix::fs::chown(&theirs, Some(uid), Some(gid)).expect("chown");
    let as_agent = |args: &[&str]| {
        let mut cmd = agent_command(&fx);
        cmd.args(args).env("REWINDFS_HOME", &home).env("REWINDFS_RUNTIME_DIR", &fx.run);
        common::run_with_timeout(&mut cmd, common::CHILD_TIMEOUT)
    };
    for args in [vec!["show", "-C", &ws, "1", s(&theirs)], vec!["log", "-C", &ws], vec!["unmount", s(&view)]] {
        let out = as_agent(&args);
        assert!(!out.status.success(), "the agent's {args:?} must fail: {}{}", stdout(&out), stderr(&out));
    }
    assert!(!common::is_mounted(&theirs), "the agent mounted a view of the owner's store");
    assert!(common::is_mounted(&view), "the agent unmounted the owner's view");

    // The store itself: nothing in it can be listed or opened.
    let stores: Vec<std::path::PathBuf> = walk_dirs(&home);
    let private: Vec<&std::path::PathBuf> = stores
        .iter()
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir() && m.mode() & 0o077 == 0))
        .collect();
    assert!(!private.is_empty(), "no private directory under {}", home.display());
    let mut files: Vec<String> = Vec::new();
    for d in &private {
        for e in std::fs::read_dir(d).expect("read store dir").flatten() {
            files.push(s(&e.path()).to_string());
        }
        files.push(s(d).to_string());
    }
    let code = format!(
        "import os\nopened = []\nfor p in {files:?}:\n    try:\n        if os.path.isdir(p):\n            os.listdir(p)\n        else:\n            open(p, 'rb').read(1)\n        opened.append(p)\n    except PermissionError:\n        pass\nprint(opened)\n"
    );
    let out = check(py_as_agent(fx.dir.path(), &code), "the agent's reads of the store");
    assert_eq!(stdout(&out).trim(), "[]", "the agent read parts of the owner's store");

    check(fx.rewindfs(&["unmount", s(&view)]), "the owner's unmount");
    assert!(!common::is_mounted(&view));
}

/// Every directory under `dir` (`dir` included).
fn walk_dirs(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        if let Ok(d) = std::fs::read_dir(&out[i]) {
            for e in d.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    out.push(e.path());
                }
            }
        }
        i += 1;
    }
    out
}
