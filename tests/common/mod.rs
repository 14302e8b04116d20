//! Shared fixture for the mounted end-to-end tests: a temp dir with
//! `ws/`, `mnt/`, `store/` and `run/`, mounted through the real binary,
//! unmounted on drop (also when the test panics). Every child process runs
//! with a timeout, and a process-wide watchdog detaches every mount and
//! aborts if a test binary runs far too long, so a stuck mount fails the
//! suite instead of hanging CI.

#![allow(dead_code)]

pub mod copied;
pub mod sequences;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use rewindfs::journal::Journal;
use rewindfs::view::{Node, TreeView};
use rewindfs::workspace::LiveTree;

/// How long one child process may run before it is killed and the test fails.
pub const CHILD_TIMEOUT: Duration = Duration::from_secs(120);
/// Last resort for a whole test binary.
const WATCHDOG_LIMIT: Duration = Duration::from_secs(600);

/// The unprivileged user the permission tests run as.
pub const TEST_USER: &str = "rewindfs-test";

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_rewindfs")
}

static PARITY_DIRS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Mountpoints currently mounted by fixtures of this process, for the watchdog.
static LIVE_MOUNTS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn live_mounts() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    LIVE_MOUNTS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts the watchdog once per process.
fn start_watchdog() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        std::thread::Builder::new()
            .name("watchdog".into())
            .spawn(|| {
                std::thread::sleep(WATCHDOG_LIMIT);
                eprintln!("watchdog: test binary ran longer than {WATCHDOG_LIMIT:?}; detaching mounts and aborting");
                for mp in live_mounts().iter() {
                    let _ = Command::new("umount").arg("-l").arg(mp).status();
                }
                std::process::abort();
            })
            .expect("cannot start the watchdog thread");
    });
}

/// Fails (never skips) when the machine cannot run mounted tests.
pub fn require_fuse() {
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: mounted tests need FUSE (modprobe fuse, or run the container with --device /dev/fuse)"
    );
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "mounted tests must run as root (rewindfs opens files by handle); euid is {euid}");
    start_watchdog();
}

/// Runs `cmd` to completion with a timeout; on timeout kills its whole
/// process group and panics. Output is captured.
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Output {
    let desc = format!("{cmd:?}");
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot run {desc}: {e}"));

    wait_child(&mut child, timeout, &desc)
}

/// Whether a spawned child ends within `timeout` (it is left running, and
/// reaped, if not: `wait_child` collects it after).
pub fn ends_within(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if child.try_wait().expect("wait for a child").is_some() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A background task held at a test hook (while the file `pause`
/// exists) and `child` waiting for it: the hook lets the task go for one
/// step (`gap`) and is armed again. Whether `child` then ended within 20 s
/// (before giving way was added, it waited for the hook), and its output.
pub fn one_step_let_go(child: &mut Child, pause: &std::path::Path, gap: Duration, what: &str) -> (bool, Output) {
    // The child waits for the task by then.
    std::thread::sleep(Duration::from_millis(500));
    std::fs::remove_file(pause).expect("remove the pause file");
    std::thread::sleep(gap);
    std::fs::write(pause, b"").expect("create the pause file again");
    let finished = ends_within(child, Duration::from_secs(20));
    std::fs::remove_file(pause).expect("remove the pause file");
    (finished, wait_child(child, CHILD_TIMEOUT, what))
}

/// Waits for a spawned child (stdout/stderr piped) with a timeout.
pub fn wait_child(child: &mut Child, timeout: Duration, desc: &str) -> Output {
    let mut readers = Vec::new();
    for pipe in [
        child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
        child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
    ] {
        readers.push(std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        }));
    }
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() > deadline => {
                // SAFETY: kill has no memory preconditions; the child leads its own group.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                let _ = child.kill();
                let _ = child.wait();
                panic!("timed out after {timeout:?}: {desc}");
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("cannot wait for {desc}: {e}"),
        }
    };
    let mut it = readers.into_iter().map(|r| r.join().unwrap_or_default());
    Output { status, stdout: it.next().unwrap_or_default(), stderr: it.next().unwrap_or_default() }
}

/// Panics with the output unless the command succeeded.
pub fn check(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout: {}\nstderr: {}",
        describe_status(&out),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn describe_status(out: &Output) -> String {
    match (out.status.code(), out.status.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "unknown status".into(),
    }
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs a shell script in `dir`, asserting success; returns stdout.
pub fn sh(dir: &Path, script: &str) -> String {
    let out = run_with_timeout(
        Command::new("bash").arg("-euo").arg("pipefail").arg("-c").arg(script).current_dir(dir),
        CHILD_TIMEOUT,
    );
    stdout(&check(out, &format!("bash script in {}:\n{script}\n", dir.display())))
}

/// Put before every python3 test program: common imports, and `err(fn,
/// *args)`, which returns the errno of the call (0 when it succeeds).
pub const PY_PRELUDE: &str = "import os, errno, stat
def err(fn, *a):
    try:
        fn(*a)
    except OSError as e:
        return e.errno
    return 0
";

/// A python3 program with the prelude.
pub fn py_program(code: &str) -> String {
    format!("{PY_PRELUDE}{code}")
}

/// Runs a python3 program (with the prelude) in `dir`, asserting success;
/// returns stdout.
pub fn py(dir: &Path, code: &str) -> String {
    let out = run_with_timeout(Command::new("python3").arg("-c").arg(py_program(code)).current_dir(dir), CHILD_TIMEOUT);
    stdout(&check(out, &format!("python3 in {}:\n{code}\n", dir.display())))
}

/// Whether `path` is a mountpoint in this process's mount table.
/// Runs a python3 program in `dir` as `uid:gid` (no supplementary groups):
/// the system python, since a per-user install (pyenv under /root) is not
/// reachable by other users.
pub fn py_as_in(dir: &Path, uid: u32, gid: u32, code: &str) -> Output {
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg("--clear-groups")
        .args(["/usr/bin/python3", "-c", &py_program(code)])
        .current_dir(dir);
    run_with_timeout(&mut cmd, CHILD_TIMEOUT)
}

pub fn is_mounted(path: &Path) -> bool {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let p = path.to_string_lossy().replace(' ', "\\040");
    text.lines().any(|l| l.split_whitespace().nth(4) == Some(p.as_str()))
}

/// Creates the unprivileged test user if missing; returns (uid, gid).
pub fn test_user() -> (u32, u32) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let exists = run_with_timeout(Command::new("id").arg("-u").arg(TEST_USER), CHILD_TIMEOUT).status.success();
        if !exists {
            let out = run_with_timeout(
                Command::new("useradd").args(["--no-create-home", "--shell", "/bin/sh", TEST_USER]),
                CHILD_TIMEOUT,
            );
            // Two test binaries may race to create it.
            let again = run_with_timeout(Command::new("id").arg("-u").arg(TEST_USER), CHILD_TIMEOUT);
            assert!(again.status.success(), "cannot create user {TEST_USER}: {}", stderr(&out));
        }
    });
    let uid = stdout(&check(run_with_timeout(Command::new("id").arg("-u").arg(TEST_USER), CHILD_TIMEOUT), "id -u"));
    let gid = stdout(&check(run_with_timeout(Command::new("id").arg("-g").arg(TEST_USER), CHILD_TIMEOUT), "id -g"));
    (uid.trim().parse().expect("uid"), gid.trim().parse().expect("gid"))
}

/// A temp dir with a workspace mounted through the real binary.
pub struct MountFixture {
    pub dir: tempfile::TempDir,
    pub ws: PathBuf,
    pub mnt: PathBuf,
    pub store: PathBuf,
    pub run: PathBuf,
    /// Where the mount is: `mnt`, or `ws` for an in-place mount.
    pub mountpoint: PathBuf,
    mounted: bool,
    /// Whether the drop runs `fsck` of a mount still up (on unless a test
    /// damages its store on purpose: `damaged`).
    fsck_at_end: bool,
}

impl MountFixture {
    /// The directories, nothing mounted yet.
    pub fn unmounted() -> MountFixture {
        require_fuse();
        let dir = tempfile::Builder::new().prefix("rewindfs-test-").tempdir().expect("cannot create temp dir");
        // Reachable by the unprivileged test user.
        sh(dir.path(), "chmod 755 .");
        let root = dir.path().canonicalize().expect("canonical temp dir");
        let (ws, mnt, store, run) = (root.join("ws"), root.join("mnt"), root.join("store"), root.join("run"));
        for d in [&ws, &mnt, &store, &run] {
            std::fs::create_dir(d).expect("cannot create fixture dir");
        }
        let mountpoint = mnt.clone();
        MountFixture { dir, ws, mnt, store, run, mountpoint, mounted: false, fsck_at_end: true }
    }

    /// `ws` mounted on `mnt` (in place when REWINDFS_TEST_IN_PLACE=1, to put
    /// a whole test file through an in-place mount).
    pub fn new() -> MountFixture {
        Self::with_args(std::env::var_os("REWINDFS_TEST_IN_PLACE").is_some_and(|v| v == "1"), &[])
    }

    /// `ws` mounted in place.
    pub fn in_place() -> MountFixture {
        Self::with_args(true, &[])
    }

    /// Mounts with extra `rewindfs mount` arguments (e.g. `--passthrough off`).
    pub fn with_args(in_place: bool, extra: &[&str]) -> MountFixture {
        let mut fx = Self::unmounted();
        fx.mount(in_place, extra);
        fx
    }

    /// Mounts `ws` (in place, or on `mnt`), asserting success.
    pub fn mount(&mut self, in_place: bool, extra: &[&str]) {
        self.mount_with_env(in_place, extra, &[])
    }

    /// As `mount`, with extra environment for the daemon (the test hooks of
    /// `rewindfs::faults`).
    pub fn mount_with_env(&mut self, in_place: bool, extra: &[&str], env: &[(&str, &str)]) {
        self.mount_output(in_place, extra, env);
    }

    /// As `mount_with_env`; returns the output of `rewindfs mount` (its
    /// stderr says what the daemon recovered).
    pub fn mount_output(&mut self, in_place: bool, extra: &[&str], env: &[(&str, &str)]) -> Output {
        self.mountpoint = if in_place { self.ws.clone() } else { self.mnt.clone() };
        // As bytes: a test may put the workspace or store at a name that is
        // not UTF-8.
        let mut args: Vec<&OsStr> = vec![OsStr::new("mount"), self.ws.as_os_str()];
        if !in_place {
            args.push(self.mnt.as_os_str());
        }
        args.extend([OsStr::new("--store"), self.store.as_os_str()]);
        // Arguments for every mount of a run that asks for none itself,
        // e.g. "--passthrough off" to put the suite through the daemon's
        // data path.
        let from_env = std::env::var("REWINDFS_TEST_MOUNT_ARGS").unwrap_or_default();
        if extra.is_empty() {
            args.extend(from_env.split_whitespace().map(OsStr::new));
        }
        args.extend(extra.iter().map(OsStr::new));
        // REWINDFS_TEST_TRANSPORT=uring|classic puts every mount of a run on
        // that FUSE transport (a mount that names its own keeps it). With
        // `uring` the mount fails unless every CPU's ring registered, so a
        // run cannot silently fall back to /dev/fuse.
        let transport = std::env::var("REWINDFS_TEST_TRANSPORT").unwrap_or_default();
        if !transport.is_empty() && !extra.contains(&"--transport") {
            args.extend([OsStr::new("--transport"), OsStr::new(&transport)]);
        }
        let out = run_with_timeout(self.command().args(&args).envs(env.iter().copied()), CHILD_TIMEOUT);
        let out = check(out, "rewindfs mount");
        self.mounted = true;
        live_mounts().push(self.mountpoint.clone());
        assert!(is_mounted(&self.mountpoint), "{} is not in the mount table after mount", self.mountpoint.display());
        out
    }

    /// The mounted tree.
    pub fn path(&self) -> &Path {
        &self.mountpoint
    }

    /// A `rewindfs` command with this fixture's runtime dir and store home.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(bin());
        cmd.env("REWINDFS_RUNTIME_DIR", &self.run).env("REWINDFS_HOME", self.dir.path().join("home"));
        cmd
    }

    /// Runs `rewindfs ARGS` with a timeout; the output, whatever the status.
    pub fn rewindfs(&self, args: &[&str]) -> Output {
        run_with_timeout(self.command().args(args), CHILD_TIMEOUT)
    }

    /// Says the test damages its store on purpose: the drop does not
    /// check it with `fsck`.
    pub fn damaged(&mut self) {
        self.fsck_at_end = false;
    }

    /// Unmounts, asserting success and that the mount is gone.
    pub fn unmount(&mut self) {
        check(run_with_timeout(self.command().arg("unmount").arg(&self.mountpoint), CHILD_TIMEOUT), "rewindfs unmount");
        self.forget_mount();
        assert!(!is_mounted(&self.mountpoint), "{} is still mounted after unmount", self.mountpoint.display());
    }

    /// Records a mount of `ws` on `mnt` that the test made itself (with
    /// `rewindfs mount`, to see it fail), so that drop unmounts it.
    pub fn adopt_mount(&mut self) {
        self.mountpoint = self.mnt.clone();
        self.mounted = true;
        live_mounts().push(self.mountpoint.clone());
    }

    /// Records that the mount is gone (a test unmounted it another way).
    pub fn forget_mount(&mut self) {
        self.mounted = false;
        live_mounts().retain(|p| p != &self.mountpoint);
    }

    /// Waits for daemon `pid` (killed by a test hook) to die, then takes
    /// its dead mount down.
    pub fn detach_dead(&mut self, pid: i32) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Path::new(&format!("/proc/{pid}")).exists() {
            assert!(Instant::now() < deadline, "daemon {pid} did not die");
            std::thread::sleep(Duration::from_millis(20));
        }
        let mp = self.mountpoint.clone();
        check(run_with_timeout(self.command().arg("unmount").arg(&mp), CHILD_TIMEOUT), "unmount of the dead mount");
        self.forget_mount();
    }

    /// This mount's entry in `status -C MOUNT --json`.
    pub fn status_json(&self) -> serde_json::Value {
        let mp = self.mountpoint.display();
        let out = check(
            run_with_timeout(self.command().arg("status").arg("-C").arg(&self.mountpoint).arg("--json"), CHILD_TIMEOUT),
            "rewindfs status",
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status --json prints JSON");
        let entry = if v.is_array() { v[0].clone() } else { v };
        assert!(entry.is_object(), "status --json has no entry for {mp}: {}", stdout(&out));
        entry
    }

    /// The daemon's pid, from `status --json`.
    pub fn daemon_pid(&self) -> i32 {
        self.status_json()["pid"].as_i64().expect("status has a pid") as i32
    }

    /// A fresh plain directory beside the mount (same filesystem as the
    /// backing dir), set up by `setup` exactly as the mount is.
    pub fn plain_twin(&self, name: &str, setup: &str) -> PathBuf {
        let plain = self.dir.path().join(name);
        std::fs::create_dir(&plain).expect("cannot create plain twin");
        sh(&plain, setup);
        self.sh(setup);
        plain
    }

    /// Runs `program` in a plain directory and in the mount (both set up
    /// with `setup`), and asserts that they print the same lines.
    pub fn assert_parity(&self, setup: &str, program: impl Fn(&Path) -> String) {
        let n = PARITY_DIRS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let plain = self.plain_twin(&format!("plain-{n}"), setup);
        let (expected, actual) = (program(&plain), program(self.path()));
        let diff: Vec<String> = expected
            .lines()
            .zip(actual.lines())
            .filter(|(x, y)| x != y)
            .map(|(x, y)| format!("plain: {x}\nmount: {y}"))
            .collect();
        assert!(
            diff.is_empty() && expected.lines().count() == actual.lines().count(),
            "the mount differs from a plain directory:\n{}\nplain output:\n{expected}\nmount output:\n{actual}",
            diff.join("\n")
        );
    }

    /// `fsck -C MOUNT` through the daemon finds nothing: exit 0, the one
    /// summary line, and no problem in `--json` (every store made
    /// by ordinary use passes fsck).
    pub fn assert_fsck_clean(&self, what: &str) {
        let mp = self.mountpoint.to_str().expect("utf-8 mountpoint").to_string();
        let out = self.rewindfs(&["fsck", "-C", &mp]);
        let text = stdout(&out);
        assert!(
            out.status.success() && text.lines().next().is_some_and(|l| l.ends_with("no problems")),
            "{what}: fsck must pass ({}): {text}{}",
            describe_status(&out),
            stderr(&out)
        );
        let out = self.rewindfs(&["fsck", "-C", &mp, "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("fsck --json prints JSON");
        assert_eq!(v["problems"], serde_json::json!([]), "{what}: {v}");
    }

    /// Runs a shell script in the mount.
    pub fn sh(&self, script: &str) -> String {
        sh(self.path(), script)
    }

    /// Runs a python3 program in the mount.
    pub fn py(&self, code: &str) -> String {
        py(self.path(), code)
    }
}

impl Drop for MountFixture {
    fn drop(&mut self) {
        // A failed test shows the end of its daemon log (a flaky failure in
        // CI leaves nothing else), and REWINDFS_TEST_KEEP_LOGS=DIR keeps the
        // whole log (its daemons inherit RUST_LOG) before the temp dir goes.
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.store.join("daemon.log")).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(40)..];
            eprintln!("the daemon log ends:\n    {}", tail.join("\n    "));
        }
        if std::thread::panicking()
            && let Some(dir) = std::env::var_os("REWINDFS_TEST_KEEP_LOGS")
        {
            let name = std::thread::current().name().unwrap_or("test").replace("::", "-");
            let to = Path::new(&dir).join(format!("{name}-{}.log", std::process::id()));
            let _ = std::fs::create_dir_all(&dir);
            match std::fs::copy(self.store.join("daemon.log"), &to) {
                Ok(_) => eprintln!("daemon log kept: {}", to.display()),
                Err(e) => eprintln!("daemon log not kept: {e}"),
            }
        }
        if !self.mounted {
            return;
        }
        let mp = self.mountpoint.clone();
        // Every store a test leaves mounted passes `fsck` (through its
        // daemon), whatever the test did: a test that passes while leaving
        // history fsck finds wrong fails here, after the unmount below.
        let found = (self.fsck_at_end && !std::thread::panicking()).then(|| {
            let out = self.rewindfs(&["fsck", "-C", mp.to_str().expect("utf-8 mountpoint")]);
            let text = stdout(&out);
            // A daemon the test killed does not answer (3): nothing to check.
            let clean = out.status.code() == Some(3)
                || (out.status.success() && text.lines().next().is_some_and(|l| l.ends_with("no problems")));
            (!clean).then(|| format!("fsck at the end of the test ({}): {text}{}", describe_status(&out), stderr(&out)))
        });
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_with_timeout(self.command().arg("unmount").arg(&mp), Duration::from_secs(60)).status.success()
        }))
        .unwrap_or(false);
        if !ok || is_mounted(&mp) {
            let _ = Command::new("umount").arg("-l").arg(&mp).status();
        }
        live_mounts().retain(|p| p != &mp);
        if let Some(Some(problems)) = found {
            panic!("{problems}");
        }
    }
}

/// Prints one line per object below a root (the root included, as `.`):
/// kind and mode, owner, mtime (not for symlinks), size and content hash,
/// symlink target, link count and which earlier path shares the inode
/// (within this tree), and `user.*` xattrs. Two trees are exact copies of
/// each other when their manifests are equal.
pub const MANIFEST_PY: &str = r#"
import os, sys, stat, hashlib
root = sys.argv[1]
first, out = {}, []
def xattrs(p):
    try:
        names = sorted(os.listxattr(p, follow_symlinks=False))
    except OSError as e:
        return 'ERR%d' % e.errno
    return ','.join('%s=%s' % (n, os.getxattr(p, n, follow_symlinks=False).hex()) for n in names if n.startswith('user.'))
def visit(rel):
    p = os.path.join(root, rel) if rel else root
    st = os.lstat(p)
    f = [rel or '.', 'mode=%o' % st.st_mode, 'owner=%d:%d' % (st.st_uid, st.st_gid)]
    if stat.S_ISLNK(st.st_mode):
        f.append('-> %r' % os.readlink(p))
    else:
        f.append('mtime=%d' % st.st_mtime_ns)
    if stat.S_ISREG(st.st_mode):
        h = hashlib.sha256()
        with open(p, 'rb') as fh:
            for b in iter(lambda: fh.read(1 << 20), b''):
                h.update(b)
        f.append('size=%d sha=%s' % (st.st_size, h.hexdigest()[:16]))
    if not stat.S_ISDIR(st.st_mode):
        f.append('nlink=%d' % st.st_nlink)
        if st.st_nlink > 1:
            f.append('inode-of=%s' % first.setdefault((st.st_dev, st.st_ino), rel))
    f.append('xattrs=' + xattrs(p))
    out.append(' '.join(f))
    if stat.S_ISDIR(st.st_mode):
        for n in sorted(os.listdir(p)):
            visit(os.path.join(rel, n))
visit('')
print('\n'.join(out))
"#;

/// The manifest (see `MANIFEST_PY`) of the tree at `root`.
pub fn manifest(root: &Path) -> String {
    let out = run_with_timeout(Command::new("python3").arg("-c").arg(MANIFEST_PY).arg(root), CHILD_TIMEOUT);
    stdout(&check(out, &format!("manifest of {}", root.display())))
}

/// Asserts that `actual` is an exact copy of `expected`: `diff -r` finds
/// nothing and the manifests (modes, owners, mtimes, symlink targets, hard
/// links, xattrs) are equal.
pub fn assert_same_tree(expected: &Path, actual: &Path, what: &str) {
    let d = run_with_timeout(
        Command::new("diff").arg("-r").arg("--no-dereference").arg(expected).arg(actual),
        CHILD_TIMEOUT,
    );
    // `diff` does not compare special files: two fifos (or sockets) at one
    // path are reported as "File A is a fifo while file B is a fifo". Those
    // lines alone are no difference; the manifests below compare their
    // type, mode, owner, mtime and links.
    let same_kind_special = |line: &str| {
        line.strip_prefix("File ").and_then(|l| l.split_once(" while file ")).is_some_and(|(a, b)| {
            ["fifo", "socket"].iter().any(|k| {
                let is = format!(" is a {k}");
                a.ends_with(&is) && b.ends_with(&is)
            })
        })
    };
    let only_special = d.status.code() == Some(1) && stderr(&d).is_empty() && stdout(&d).lines().all(same_kind_special);
    assert!(
        d.status.success() || only_special,
        "{what}: diff -r {} {} finds differences:\n{}{}",
        expected.display(),
        actual.display(),
        stdout(&d),
        stderr(&d)
    );
    let (e, a) = (manifest(expected), manifest(actual));
    let diffs: Vec<String> = e
        .lines()
        .zip(a.lines())
        .filter(|(x, y)| x != y)
        .take(20)
        .map(|(x, y)| format!("  expected: {x}\n  actual:   {y}"))
        .collect();
    assert!(
        diffs.is_empty() && e.lines().count() == a.lines().count(),
        "{what}: {} is not an exact copy of {} ({} vs {} objects):\n{}",
        actual.display(),
        expected.display(),
        e.lines().count(),
        a.lines().count(),
        if diffs.is_empty() { format!("expected manifest:\n{e}\nactual manifest:\n{a}") } else { diffs.join("\n") }
    );
}

// ---------------------------------------------------------------------------
// The journal tests' fixture (formerly tests/journal_common): a workspace,
// a mountpoint and a store in a temp dir; the CLI under a timeout;
// plain-copy snapshots of the tree; and the tree at a checkpoint rebuilt
// through the library (after unmount), to compare byte for byte. It shares
// the runner, the watchdog and the root/FUSE check above.

/// The binary under test (as `bin()`).
pub const BIN: &str = env!("CARGO_BIN_EXE_rewindfs");

/// One object of a tree, as `diff -r` plus modes would compare it.
#[derive(Clone, PartialEq, Eq)]
pub enum Obj {
    Dir { perm: u32 },
    File { perm: u32, data: Vec<u8> },
    Symlink { target: Vec<u8> },
    Other { kind: u8 },
}

impl std::fmt::Debug for Obj {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Obj::Dir { perm } => write!(f, "dir {perm:o}"),
            Obj::File { perm, data } => {
                let shown = String::from_utf8_lossy(&data[..data.len().min(80)]);
                write!(
                    f,
                    "file {perm:o} {} bytes {:?} blake3 {}",
                    data.len(),
                    shown,
                    &blake3::hash(data).to_hex()[..12]
                )
            }
            Obj::Symlink { target } => write!(f, "symlink -> {:?}", String::from_utf8_lossy(target)),
            Obj::Other { kind } => write!(f, "special kind {kind}"),
        }
    }
}

/// A whole tree: relative path -> object (the root itself is not listed).
pub type Tree = BTreeMap<PathBuf, Obj>;

/// Reads a plain directory tree (no symlink is followed).
pub fn read_tree(root: &Path) -> Tree {
    let mut out = Tree::new();
    fn walk(root: &Path, rel: &Path, out: &mut Tree) {
        let dir = root.join(rel);
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        for name in names {
            let r = rel.join(&name);
            let p = root.join(&r);
            let md = std::fs::symlink_metadata(&p).unwrap_or_else(|e| panic!("lstat {}: {e}", p.display()));
            let perm = md.permissions().mode() & 0o7777;
            let ft = md.file_type();
            if ft.is_dir() {
                out.insert(r.clone(), Obj::Dir { perm });
                walk(root, &r, out);
            } else if ft.is_file() {
                let data = std::fs::read(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
                out.insert(r, Obj::File { perm, data });
            } else if ft.is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                out.insert(r, Obj::Symlink { target: t.as_os_str().as_bytes().to_vec() });
            } else {
                out.insert(r, Obj::Other { kind: (md.mode() >> 12) as u8 });
            }
        }
    }
    walk(root, Path::new(""), &mut out);
    out
}

/// Paths that differ between two trees (every kind, modes included).
pub fn tree_diff(a: &Tree, b: &Tree) -> Vec<String> {
    let mut out = Vec::new();
    for (p, x) in a {
        match b.get(p) {
            None => out.push(format!("only in A: {} ({x:?})", p.display())),
            Some(y) if x != y => out.push(format!("differs: {}\n    A: {x:?}\n    B: {y:?}", p.display())),
            _ => {}
        }
    }
    for (p, y) in b {
        if !a.contains_key(p) {
            out.push(format!("only in B: {} ({y:?})", p.display()));
        }
    }
    out
}

/// The non-directory paths `rewindfs diff` should name between two trees:
/// added, deleted, or changed in kind, permissions, content or target
/// (what `diff -r` finds, plus modes).
pub fn changed_files(a: &Tree, b: &Tree) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let not_dir = |o: &Obj| !matches!(o, Obj::Dir { .. });
    for (p, x) in a {
        let y = b.get(p);
        match (not_dir(x), y) {
            (true, None) => {
                out.insert(p.display().to_string());
            }
            (true, Some(y)) if x != y => {
                out.insert(p.display().to_string());
            }
            (false, Some(y)) if not_dir(y) => {
                out.insert(p.display().to_string());
            }
            _ => {}
        }
    }
    for (p, y) in b {
        if not_dir(y) && !a.get(p).is_some_and(not_dir) {
            out.insert(p.display().to_string());
        }
    }
    out
}

/// Runs `program ARGS` (in `dir`, with `env`) with a timeout of `secs`
/// seconds, through `run_with_timeout`: on timeout its process group is
/// killed and the test fails. Output is captured.
pub fn run_timeout(secs: u32, program: &str, args: &[&OsStr], dir: Option<&Path>, env: &[(&str, &OsStr)]) -> Output {
    let mut c = Command::new(program);
    c.args(args);
    if let Some(d) = dir {
        c.current_dir(d);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    run_with_timeout(&mut c, Duration::from_secs(u64::from(secs)))
}

/// Runs `f` on its own thread and waits at most `timeout` for it: file I/O
/// on a mount from the test process itself, which would hang the test if
/// the daemon stopped answering. On timeout the test fails (the stuck
/// thread is left behind; the watchdog detaches the mounts).
pub fn io_timeout<T: Send + 'static>(what: &str, timeout: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("mount-io".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .unwrap_or_else(|e| panic!("cannot start a thread for {what}: {e}"));
    match rx.recv_timeout(timeout) {
        Ok(v) => v,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("timed out after {timeout:?}: {what}"),
        // The closure panicked: its message is already printed.
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("{what} failed"),
    }
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Opens the journal and the workspace directly (the mount must be gone).
/// Opening records a new "mount" checkpoint, which later checks ignore.
pub struct Offline {
    pub journal: Arc<Journal>,
    pub tree: LiveTree,
}

impl Offline {
    pub fn open(ws: &Path, store: &Path) -> Offline {
        let journal =
            Arc::new(Journal::open_dir(store).unwrap_or_else(|e| panic!("open journal {}: {e}", store.display())));
        let tree = LiveTree::new(ws, Some(journal.clone()), rewindfs::workspace::Opener::ByHandle)
            .unwrap_or_else(|e| panic!("open workspace {}: {e}", ws.display()));
        Offline { journal, tree }
    }

    /// The tree at `checkpoint`, rebuilt from the journal and the live
    /// workspace (what a view of that checkpoint would show).
    pub fn tree_at(&self, checkpoint: i64) -> Result<Tree, String> {
        // Nothing serves the workspace: a lock of the check's own.
        let world = rewindfs::world::World::new();
        let op = world.op();
        let view = TreeView::at(op.held(), &self.tree, &self.journal, checkpoint);
        let mut out = Tree::new();
        let root = view.root().map_err(|e| format!("root: {e}"))?;
        fn walk(view: &TreeView<'_>, dir: &Node, rel: &Path, out: &mut Tree) -> Result<(), String> {
            for (name, node) in view.list(dir).map_err(|e| format!("list {}: {e}", rel.display()))? {
                let r = rel.join(&name);
                let st = view.state(&node).map_err(|e| format!("state of {}: {e}", r.display()))?;
                if st.is_dir() {
                    out.insert(r.clone(), Obj::Dir { perm: st.perm });
                    walk(view, &node, &r, out)?;
                } else if st.is_file() {
                    let data = view.read_all(&st).map_err(|e| format!("read {}: {e}", r.display()))?;
                    if data.len() as u64 != st.size {
                        return Err(format!("{}: read {} bytes, state says {}", r.display(), data.len(), st.size));
                    }
                    out.insert(r, Obj::File { perm: st.perm, data });
                } else if let Some(t) = st.target.clone() {
                    out.insert(r, Obj::Symlink { target: t });
                } else {
                    out.insert(r, Obj::Other { kind: st.kind });
                }
            }
            Ok(())
        }
        walk(&view, &root, Path::new(""), &mut out)?;
        Ok(out)
    }

    /// Asserts that checkpoint `n` rebuilds exactly as `expected`.
    pub fn check(&self, n: i64, expected: &Tree, what: &str) -> Result<(), String> {
        let got = self.tree_at(n)?;
        let d = tree_diff(expected, &got);
        if d.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "checkpoint {n} ({what}) does not rebuild as the copy (A = copy, B = rebuilt):\n  {}",
                d.join("\n  ")
            ))
        }
    }
}

/// A deterministic generator (xorshift64*), so a failing run can be
/// repeated from its seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| b"abcdefgh\n"[self.below(9) as usize]).collect()
    }
}

/// Names a checkpoint-reference error message must contain.
pub fn lists_checkpoints(msg: &str, numbers: &[i64]) -> bool {
    numbers.iter().all(|n| msg.contains(&n.to_string()))
}

impl MountFixture {
    /// Mounted on `mnt` with `--auto-turn 0` (turns only when a test says).
    pub fn manual_turns() -> MountFixture {
        Self::with_args(false, &["--auto-turn", "0"])
    }

    /// Runs `rewindfs ARGS -C MOUNT` and asserts success; returns stdout.
    pub fn cli(&self, args: &[&str]) -> String {
        let mp = self.mountpoint.to_str().expect("utf-8 path").to_string();
        let mut full: Vec<&str> = vec![args[0], "-C", &mp];
        full.extend_from_slice(&args[1..]);
        stdout(&check(self.rewindfs(&full), &format!("rewindfs {full:?}")))
    }

    /// Runs `rewindfs CMD -C MOUNT --json ARGS...`; the output, whatever
    /// the status (for tests that expect failures).
    pub fn cli_output(&self, args: &[&str]) -> Output {
        let mp = self.mountpoint.to_string_lossy().into_owned();
        let mut full = vec![args[0], "-C", mp.as_str(), "--json"];
        full.extend_from_slice(&args[1..]);
        self.rewindfs(&full)
    }

    /// As `cli`, with `--json` (before the other arguments, so that
    /// paths after `--` stay paths), parsed.
    pub fn cli_json(&self, args: &[&str]) -> serde_json::Value {
        let mut full = vec![args[0], "--json"];
        full.extend_from_slice(&args[1..]);
        let out = self.cli(&full);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("rewindfs {full:?}: bad JSON ({e}): {out}"))
    }

    /// Seals a checkpoint (`turn --message-id M`); returns its number.
    pub fn turn(&self, message_id: &str) -> i64 {
        let v = self.cli_json(&["turn", "--message-id", message_id]);
        v["checkpoint"].as_i64().unwrap_or_else(|| panic!("no checkpoint in {v}"))
    }

    /// As `turn`, with a session and a label.
    pub fn turn_as(&self, message_id: &str, session: &str, label: &str) -> i64 {
        let v = self.cli_json(&["turn", "--message-id", message_id, "--session", session, "--label", label]);
        v["checkpoint"].as_i64().unwrap_or_else(|| panic!("no checkpoint in {v}"))
    }

    /// A `cp -a` copy of the mounted tree (`copy_tree`), read back.
    pub fn snapshot(&self, name: &str) -> Tree {
        read_tree(&self.copy_tree(name))
    }

    /// Runs SQL against the store's metadata with the sqlite3 tool;
    /// returns the first column of the first row.
    pub fn sql(&self, query: &str) -> String {
        let db = self.store.join("meta.sqlite");
        stdout(&check(run_with_timeout(Command::new("sqlite3").arg(db).arg(query), CHILD_TIMEOUT), query))
            .trim()
            .to_string()
    }

    /// `sql`, as a number.
    pub fn sql_i64(&self, query: &str) -> i64 {
        let s = self.sql(query);
        s.parse().unwrap_or_else(|_| panic!("{query}: not a number: {s:?}"))
    }

    /// A `cp -a` copy of the mounted tree, at `<tmp>/copies/NAME`.
    pub fn copy_tree(&self, name: &str) -> PathBuf {
        let dst = self.dir.path().join("copies").join(name);
        std::fs::create_dir_all(dst.parent().expect("parent")).expect("cannot create copies dir");
        let out = run_with_timeout(Command::new("cp").arg("-a").arg(self.path().join(".")).arg(&dst), CHILD_TIMEOUT);
        check(out, "cp -a of the mount");
        dst
    }
}

/// Lazily detaches every mount of this process's fixtures (for a test's own
/// watchdog, before it aborts).
pub fn detach_live_mounts() {
    for mp in live_mounts().iter() {
        let _ = Command::new("umount").arg("-l").arg(mp).status();
    }
}

/// Mounts with the pause hook `var` armed on the file `name` in the test's
/// directory (created by the test when it wants the pause); returns that
/// file and the one the hook writes when it first waits.
pub fn mount_with_hook(f: &mut MountFixture, var: &str, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let pause = f.dir.path().join(name);
    let reached = f.dir.path().join(format!("{name}.reached"));
    let pause_env = pause.to_str().expect("utf-8 path").to_string();
    f.mount_with_env(false, &["--auto-turn", "0"], &[(var, &pause_env)]);
    (pause, reached)
}

/// `rewindfs COMMAND -C MOUNT ARGS...` started in the background, its
/// output piped.
pub fn spawn_cli(f: &MountFixture, args: &[&str]) -> std::process::Child {
    let mp = f.path().to_str().expect("utf-8 path").to_string();
    let (command, rest) = args.split_first().expect("a command");
    f.command()
        .arg(command)
        .args(["-C", &mp])
        .args(rest)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn rewindfs {command}: {e}"))
}

/// Waits (20 s at most, polling) until `cond` holds.
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !cond() {
        assert!(std::time::Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Waits (20 s at most) until a test hook wrote its `.reached` file.
pub fn wait_reached(reached: &std::path::Path, never: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !reached.exists() {
        assert!(std::time::Instant::now() < deadline, "{never}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
