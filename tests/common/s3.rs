//! A real S3-compatible server on loopback for the remote tests: started
//! in a temp dir on free ports with one bucket and one key, killed when
//! dropped (a failing test unwinds through the drop too).
//!
//! Which server, by `REWINDFS_TEST_S3_SERVER`: `rclone` (the default,
//! `rclone serve s3` over a local directory; what
//! `mount-scripts/ensure-deps` installs, from a registry package that ships
//! the binary), `s3s-fs` (s3s's file-backed server, `cargo install s3s-fs
//! --features binary`) or `garage` (a single-node layout; its build is
//! long). All are real servers in their own process, speaking S3 over HTTP
//! with SigV4 signatures checked. A server that cannot be started fails
//! the test: the remote tests never skip.

use std::net::TcpListener;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BUCKET: &str = "rewindfs-test";
const KEY_ID: &str = "GK0123456789abcdef01234567";
pub const SECRET_FOR_TESTS: &str = SECRET;
const SECRET: &str = "7d1f0e36a1b7c0d8e9f80a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f";

pub struct S3Server {
    pub dir: tempfile::TempDir,
    pub endpoint: String,
    child: Child,
    pub kind: &'static str,
    /// How it was started, to start it again after `stop` (same port, same
    /// data).
    program: std::ffi::OsString,
    args: Vec<std::ffi::OsString>,
    port: u16,
    /// A tmpfs the data is on (`start_with_room` under rclone), unmounted on drop.
    small_disk: Option<std::path::PathBuf>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free loopback port").port()
}

fn program(name: &str) -> String {
    std::env::var(format!("REWINDFS_TEST_{}", name.to_uppercase().replace('-', "_"))).unwrap_or_else(|_| name.into())
}

impl S3Server {
    pub fn start() -> S3Server {
        let dir = tempfile::Builder::new().prefix("rewindfs-s3-").tempdir().expect("temp dir for the S3 server");
        match std::env::var("REWINDFS_TEST_S3_SERVER").as_deref() {
            Ok("garage") => Self::garage(dir),
            Ok("s3s-fs") => Self::s3s_fs(dir),
            Ok("rclone") | Err(_) => Self::rclone(dir, &[]),
            Ok(other) => panic!("REWINDFS_TEST_S3_SERVER={other}: expected rclone, s3s-fs or garage"),
        }
    }

    /// A server whose bucket holds at most about `bytes`; `set_room` gives
    /// it another limit. Garage: its own bucket quota (`garage bucket
    /// set-quotas --max-size`). rclone, which has no quotas: its data on a
    /// tmpfs of that size (needs root), so its storage fills up as a
    /// bucket that reached its quota refuses writes.
    pub fn start_with_room(bytes: u64) -> S3Server {
        if std::env::var("REWINDFS_TEST_S3_SERVER").as_deref() == Ok("garage") {
            let server = Self::start();
            server.set_room(bytes);
            return server;
        }
        let dir = tempfile::Builder::new().prefix("rewindfs-s3-").tempdir().expect("temp dir for the S3 server");
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "rewindfs-s3-small"])
            .arg(&data)
            .output()
            .expect("mount");
        assert!(out.status.success(), "cannot mount a tmpfs for the server: {}", String::from_utf8_lossy(&out.stderr));
        let mut server = Self::rclone(dir, &[]);
        server.small_disk = Some(data);
        server
    }

    /// The bucket's room (`start_with_room`).
    pub fn set_room(&self, bytes: u64) {
        if self.kind == "garage" {
            self.garage_retry(&["bucket", "set-quotas", "--max-size", &bytes.to_string(), BUCKET]);
            return;
        }
        let data = self.small_disk.as_ref().expect("a server started with start_with_room");
        let out =
            Command::new("mount").args(["-o", &format!("remount,size={bytes}")]).arg(data).output().expect("mount");
        assert!(out.status.success(), "cannot resize the tmpfs: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn rclone(dir: tempfile::TempDir, extra: &[&str]) -> S3Server {
        let port = free_port();
        let mut cmd = Command::new(program("rclone"));
        cmd.arg("serve")
            .arg("s3")
            // No user configuration: the served directory is a local path.
            .arg("--config")
            .arg(dir.path().join("rclone.conf"))
            .args(["--addr", &format!("127.0.0.1:{port}"), "--auth-key", &format!("{KEY_ID},{SECRET}")])
            .args(extra)
            .arg(Self::buckets(&dir));
        Self::serve(dir, "rclone", cmd, port, "run mount-scripts/ensure-deps (it installs rclone)")
    }

    fn s3s_fs(dir: tempfile::TempDir) -> S3Server {
        let port = free_port();
        let mut cmd = Command::new(program("s3s-fs"));
        cmd.args(["--host", "127.0.0.1", "--port", &port.to_string(), "--access-key", KEY_ID, "--secret-key", SECRET])
            .arg(Self::buckets(&dir));
        Self::serve(dir, "s3s-fs", cmd, port, "cargo install s3s-fs --features binary")
    }

    /// The directory a file-backed server serves, with the bucket in it.
    fn buckets(dir: &tempfile::TempDir) -> std::path::PathBuf {
        let root = dir.path().join("data");
        std::fs::create_dir_all(root.join(BUCKET)).expect("bucket dir");
        root
    }

    /// Starts `cmd`, logging to `server.log` in `dir`, and waits until it
    /// listens on `port`; `install` says how to get it when it is missing.
    fn serve(dir: tempfile::TempDir, kind: &'static str, mut cmd: Command, port: u16, install: &str) -> S3Server {
        let child = cmd
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("server.log")).expect("log"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run the {kind} S3 server ({e}): {install}"));
        let program = cmd.get_program().to_os_string();
        let args = cmd.get_args().map(|a| a.to_os_string()).collect();
        let mut server = S3Server {
            dir,
            endpoint: format!("http://127.0.0.1:{port}"),
            child,
            kind,
            program,
            args,
            port,
            small_disk: None,
        };
        server.wait_listening(port);
        server
    }

    /// Kills the server (kill -9): the remote unreachable.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts it again on the same port over the same data.
    pub fn restart(&mut self) {
        let log = std::fs::OpenOptions::new().append(true).open(self.dir.path().join("server.log")).expect("log");
        self.child = Command::new(&self.program)
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the {} S3 server again: {e}", self.kind));
        self.wait_listening(self.port);
    }

    /// The object at `key` as the (file-backed) server stores it.
    pub fn object_path(&self, key: &str) -> std::path::PathBuf {
        self.dir.path().join("data").join(BUCKET).join(key)
    }

    fn garage(dir: tempfile::TempDir) -> S3Server {
        let (rpc, s3) = (free_port(), free_port());
        let config = dir.path().join("garage.toml");
        std::fs::write(
            &config,
            format!(
                "metadata_dir = \"{d}/meta\"\ndata_dir = \"{d}/data\"\ndb_engine = \"lmdb\"\n\
                 replication_factor = 1\nrpc_bind_addr = \"127.0.0.1:{rpc}\"\n\
                 rpc_public_addr = \"127.0.0.1:{rpc}\"\n\
                 rpc_secret = \"{secret}\"\n[s3_api]\ns3_region = \"garage\"\napi_bind_addr = \"127.0.0.1:{s3}\"\n",
                d = dir.path().display(),
                secret = &SECRET[..64],
            ),
        )
        .expect("garage config");
        let mut cmd = Command::new(program("garage"));
        cmd.arg("-c").arg(&config).arg("server");
        let server = Self::serve(dir, "garage", cmd, s3, "cargo install garage");
        let status = server.garage_retry(&["status"]);
        let node = status
            .lines()
            .find_map(|l| {
                let w = l.split_whitespace().next()?;
                (w.len() >= 16 && w.bytes().all(|b| b.is_ascii_hexdigit())).then(|| w.to_string())
            })
            .unwrap_or_else(|| panic!("no node id in `garage status`:\n{status}"));
        server.garage_retry(&["layout", "assign", "-z", "dc1", "-c", "1G", &node]);
        server.garage_retry(&["layout", "apply", "--version", "1"]);
        server.garage_retry(&["bucket", "create", BUCKET]);
        server.garage_retry(&["key", "import", "--yes", "-n", "test", KEY_ID, SECRET]);
        server.garage_retry(&["bucket", "allow", "--read", "--write", "--owner", BUCKET, "--key", KEY_ID]);
        server
    }

    /// A garage CLI command, retried while the node is starting.
    fn garage_retry(&self, args: &[&str]) -> String {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let out = Command::new(program("garage"))
                .arg("-c")
                .arg(self.dir.path().join("garage.toml"))
                .args(args)
                .output()
                .expect("garage");
            if out.status.success() {
                return String::from_utf8_lossy(&out.stdout).into_owned();
            }
            assert!(
                Instant::now() < until,
                "garage {args:?} failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn wait_listening(&mut self, port: u16) {
        let until = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            let log = || std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the {} server exited ({status}) before listening:\n{}", self.kind, log());
            }
            assert!(Instant::now() < until, "the {} server did not listen on port {port}:\n{}", self.kind, log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The environment an S3 client needs to reach this server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID", KEY_ID.into()),
            ("AWS_SECRET_ACCESS_KEY", SECRET.into()),
            ("AWS_REGION", if self.kind == "garage" { "garage".into() } else { "us-east-1".into() }),
            ("AWS_ALLOW_HTTP", "true".into()),
        ]
    }

    /// `s3://BUCKET/prefix`.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{BUCKET}/{prefix}")
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(data) = &self.small_disk {
            let _ = Command::new("umount").arg("-l").arg(data).status();
        }
    }
}
