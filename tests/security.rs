//! The agent as an attacker (issue 13): an unprivileged user inside the
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
    let fx = MountFixture::manual_turns();
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

/// As `rewindfs_as_agent`; without `fixture_runtime`, with the agent's own
/// default runtime directory, as an agent run by hand has.
fn rewindfs_as_agent_in(fx: &MountFixture, args: &[&str], fixture_runtime: bool) -> Output {
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
        .args(args)
        .current_dir(fx.dir.path());
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
    for args in
        [vec!["rewind", "-C", &mp, &first], vec!["restore", "-C", &mp, &first, "--", "f.txt"], vec!["unmount", &mp]]
    {
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

/// Issue 26, item 2: the agent's message ids cannot capture the owner's
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

/// Issue 26, smaller ones: the agent's `unmount` of the owner's live mount,
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
