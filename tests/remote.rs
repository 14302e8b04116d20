//! History replicated to a real S3-compatible server on loopback: a mount
//! with `--remote` pushes its sealed checkpoints, and a store directory
//! that never saw the workspace logs and clones them from the bucket
//! alone, byte and attribute exact against the checkpoints' views.

mod common;
#[path = "common/s3.rs"]
mod s3;

use std::path::Path;
use std::process::{Command, Output};

use common::*;
use s3::S3Server;

/// `rewindfs ARGS` with the server's credentials, from a directory and
/// home that have never seen the workspace.
fn elsewhere(server: &S3Server, home: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(bin());
    cmd.env("REWINDFS_RUNTIME_DIR", home.join("run")).env("REWINDFS_HOME", home.join("home")).current_dir(home);
    for (k, v) in server.env() {
        cmd.env(k, v);
    }
    run_with_timeout(cmd.args(args), CHILD_TIMEOUT)
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
}

fn mount_with_remote(fx: &mut MountFixture, server: &S3Server, extra: &[&str]) {
    let env = server.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    fx.mount_with_env(false, extra, &env);
}

fn push(fx: &MountFixture, server: &S3Server) -> serde_json::Value {
    let mut cmd = fx.command();
    for (k, v) in server.env() {
        cmd.env(k, v);
    }
    let out = check(
        run_with_timeout(cmd.args(["push", "--wait", "120", "--json", "-C"]).arg(fx.path()), CHILD_TIMEOUT),
        "rewindfs push",
    );
    serde_json::from_slice(&out.stdout).expect("push --json prints JSON")
}

/// A tree with what a clone must reproduce, then two turns of changes.
fn record_history(fx: &MountFixture) -> Vec<i64> {
    fx.sh("mkdir -p proj/src proj/docs empty/nested
         echo 'int main() { return 0; }' > proj/src/main.c
         head -c 300000 /dev/urandom > proj/src/blob.bin
         seq 1 20000 > proj/src/big.txt
         echo readme > proj/docs/readme
         echo config-v1 > config && ln config config.hard
         ln -s proj/src/main.c main-link
         mkfifo pipe
         chmod 640 proj/docs/readme && chown 1234:5678 proj/docs/readme
         chmod 4755 proj/src/main.c
         touch -d '2001-02-03 04:05:06.123456789' proj/docs/readme
         chmod 711 proj/src && touch -d '1999-12-31 23:59:59' empty/nested");
    fx.py("os.setxattr('proj/src/main.c', 'user.tag', b'v1'); os.setxattr('proj', 'user.dir', b'd1')");
    let mut cps = vec![fx.turn("r000001")];
    fx.sh("mv proj/docs proj/documentation
         printf 'config-v2\\n' > .config.swp && mv .config.swp config
         dd if=/dev/zero of=proj/src/big.txt bs=1 count=100 seek=1000 conv=notrunc status=none
         rm proj/src/blob.bin && echo new > fresh && ln -sfn proj/documentation/readme main-link");
    fx.py("os.setxattr('proj/src/main.c', 'user.tag', b'v2')");
    cps.push(fx.turn("r000002"));
    // The live tree moves on; the remote's checkpoints must not.
    fx.sh("echo appended >> config.hard && rm -rf proj");
    cps
}

#[test]
fn a_pushed_history_is_logged_and_cloned_exactly_from_a_store_that_never_saw_the_workspace() {
    let server = S3Server::start();
    let mut fx = MountFixture::unmounted();
    // The workspace as it is before the mount: never changed, so only the
    // live tree holds it.
    sh(&fx.ws, "echo before-mount > old && mkdir keep && echo kept > keep/file");
    let url = server.url("team/ws1");
    mount_with_remote(&mut fx, &server, &["--remote", &url]);
    let cps = record_history(&fx);
    let pushed = push(&fx, &server);
    assert_eq!(pushed["backlog"], serde_json::json!([]), "push left a backlog: {pushed}");
    let newest = *cps.last().unwrap();
    assert_eq!(pushed["remote_checkpoint"].as_i64(), Some(newest), "{pushed}");
    let status = fx.status_json();
    assert_eq!(status["remote"]["remote"].as_str(), Some(url.as_str()), "status names the remote: {status}");
    assert_eq!(status["remote"]["remote_checkpoint"].as_i64(), Some(newest), "{status}");
    // No credential in the store.
    let stored = std::fs::read_to_string(fx.store.join("remote")).expect("the store keeps the remote");
    assert_eq!(stored.trim(), url);
    let grep = Command::new("grep").args(["-rl", s3::SECRET_FOR_TESTS]).arg(&fx.store).output().expect("grep");
    assert!(grep.stdout.is_empty(), "the secret is in the store: {}", stdout(&grep));

    let other = tempfile::tempdir().expect("a second machine's dir");
    let log = check(elsewhere(&server, other.path(), &["log", &url, "--json"]), "log s3://");
    let log: serde_json::Value = serde_json::from_slice(&log.stdout).expect("log --json");
    let numbers: Vec<i64> = log.as_array().expect("a list").iter().filter_map(|c| c["checkpoint"].as_i64()).collect();
    assert_eq!(numbers, [0, cps[0], cps[1]], "{log}");
    assert_eq!(log[2]["message_id"].as_str(), Some("r000002"));
    let text = stdout(&check(elsewhere(&server, other.path(), &["log", &url]), "log s3:// (text)"));
    assert!(text.contains("[r000001]"), "{text}");

    for n in [0, cps[0], cps[1]] {
        let dir = other.path().join(format!("clone-{n}"));
        let out = elsewhere(&server, other.path(), &["clone", &format!("{url}@{n}"), dir.to_str().unwrap()]);
        check(out, &format!("clone of checkpoint {n}"));
        let view = fx.path().join(".rewindfs/checkpoints").join(n.to_string());
        assert_same_tree(&view, &dir, &format!("clone of checkpoint {n}"));
    }
    // By message id, into a directory that exists (empty).
    let by_id = other.path().join("by-id");
    std::fs::create_dir(&by_id).unwrap();
    check(
        elsewhere(&server, other.path(), &["clone", &format!("{url}@r000001"), by_id.to_str().unwrap()]),
        "clone by message id",
    );
    assert_same_tree(&fx.path().join(".rewindfs/checkpoints").join(cps[0].to_string()), &by_id, "clone by id");
    // Not over a directory with something in it.
    let refused = elsewhere(&server, other.path(), &["clone", &url, by_id.to_str().unwrap()]);
    assert!(!refused.status.success(), "a clone into a non-empty directory must fail");
    fx.unmount();
}

#[test]
fn a_later_mount_pushes_to_the_stored_remote_and_a_kill_mid_push_resumes() {
    let server = S3Server::start();
    let mut fx = MountFixture::unmounted();
    sh(&fx.ws, "echo one > a && mkdir d && head -c 100000 /dev/urandom > d/blob");
    let url = server.url("ws2");
    // Killed after the first checkpoint's content and manifest are sent,
    // before its head is written.
    let mut env = server.env();
    env.push(("REWINDFS_TEST_KILL_AT", "remote-before-head:1".into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    fx.mount_with_env(false, &["--remote", &url], &env);
    let pid = fx.daemon_pid();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while alive(pid) {
        assert!(std::time::Instant::now() < until, "the daemon was not killed at the push");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    fx.detach_dead(pid);
    let other = tempfile::tempdir().unwrap();
    let log = stdout(&check(elsewhere(&server, other.path(), &["log", &url]), "log after the kill"));
    assert!(log.contains("holds no checkpoint"), "a head was written before the kill: {log}");

    // No --remote: the store remembers it.
    mount_with_remote(&mut fx, &server, &[]);
    fx.sh("echo two > a");
    let n = fx.turn("r000003");
    let pushed = push(&fx, &server);
    assert_eq!(pushed["backlog"], serde_json::json!([]), "{pushed}");
    assert_eq!(pushed["remote_checkpoint"].as_i64(), Some(n));
    for k in 0..=n {
        let dir = other.path().join(format!("c{k}"));
        check(elsewhere(&server, other.path(), &["clone", &format!("{url}@{k}"), dir.to_str().unwrap()]), "clone");
        assert_same_tree(&fx.path().join(".rewindfs/checkpoints").join(k.to_string()), &dir, "clone after resume");
    }
    fx.unmount();
}

/// The chunk objects the (file-backed) server holds.
fn bucket_chunks(server: &S3Server) -> usize {
    std::fs::read_dir(server.dir.path().join("data").join(s3::BUCKET).join("chunks")).map(|d| d.count()).unwrap_or(0)
}

#[test]
fn a_rewind_while_a_push_is_in_flight_does_not_wait_for_the_network() {
    let server = S3Server::start();
    let mut fx = MountFixture::unmounted();
    // Checkpoint 0's content lives only in the workspace: the first push
    // reads and sends it all.
    sh(&fx.ws, "for i in 1 2 3 4; do head -c 40000 /dev/urandom > f$i; done");
    // The uploader stops before each chunk it sends while this file exists:
    // a network that does not answer, for as long as the test needs.
    let pause = fx.dir.path().join("put-pause");
    std::fs::write(&pause, b"").unwrap();
    let reached = fx.dir.path().join("put-pause.reached");
    let url = server.url("slow");
    let mut env = server.env();
    env.push(("REWINDFS_TEST_REMOTE_PUT_PAUSE", pause.to_str().unwrap().into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    fx.mount_with_env(false, &["--remote", &url, "--auto-turn", "0"], &env);
    let before = fx.copy_tree("before");
    fx.sh("echo changed > f1 && rm f2 && echo new > f5");
    fx.turn("r000001");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !reached.exists() {
        assert!(std::time::Instant::now() < until, "the uploader never started sending");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // A push is in flight: it holds a chunk it cannot send.
    let mp = fx.path().to_str().unwrap().to_string();
    let mut rewind = fx
        .command()
        .args(["rewind", "-C", &mp, "0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("rewindfs rewind");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let finished_while_paused = loop {
        if rewind.try_wait().expect("wait for the rewind").is_some() {
            break true;
        }
        if std::time::Instant::now() >= until {
            break false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let head_then = server.dir.path().join("data").join(s3::BUCKET).join("slow/head.json").exists();
    let chunks_then = bucket_chunks(&server);
    std::fs::remove_file(&pause).unwrap();
    let out = wait_child(&mut rewind, CHILD_TIMEOUT, "rewindfs rewind");
    assert!(finished_while_paused, "the rewind finished only after the uploader was let go: it waited for the network");
    assert!(
        !head_then && chunks_then < 4,
        "the push had finished before the rewind ({chunks_then} chunks, head: {head_then})"
    );
    check(out, "rewindfs rewind while a push is in flight");
    for f in ["f1", "f2", "f3", "f4"] {
        assert_eq!(std::fs::read(fx.path().join(f)).ok(), std::fs::read(before.join(f)).ok(), "{f} after the rewind");
    }
    assert!(!fx.path().join("f5").exists(), "f5 was made after checkpoint 0");
    // The push then completes every checkpoint, the rewind's included.
    let pushed = push(&fx, &server);
    assert_eq!(pushed["backlog"], serde_json::json!([]), "{pushed}");
    let other = tempfile::tempdir().unwrap();
    for n in [0, 1] {
        let dir = other.path().join(format!("c{n}"));
        check(elsewhere(&server, other.path(), &["clone", &format!("{url}@{n}"), dir.to_str().unwrap()]), "clone");
        assert_same_tree(&fx.path().join(".rewindfs/checkpoints").join(n.to_string()), &dir, "clone after the rewind");
    }
    fx.unmount();
}
