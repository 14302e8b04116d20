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
    let (out, status) = push_output(fx, server);
    check(out, "rewindfs push");
    status
}

/// `push --wait --json`, whatever its exit status.
fn push_output(fx: &MountFixture, server: &S3Server) -> (Output, serde_json::Value) {
    let mut cmd = fx.command();
    for (k, v) in server.env() {
        cmd.env(k, v);
    }
    let out = run_with_timeout(cmd.args(["push", "--wait", "120", "--json", "-C"]).arg(fx.path()), CHILD_TIMEOUT);
    let status = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("push --json prints JSON ({e}): {}{}", stdout(&out), stderr(&out)));
    (out, status)
}

/// Lines of the daemon's log that contain `text`.
fn daemon_log_lines(fx: &MountFixture, text: &str) -> Vec<String> {
    let log = std::fs::read_to_string(fx.store.join("daemon.log")).expect("daemon log");
    log.lines().filter(|l| l.contains(text)).map(str::to_string).collect()
}

/// Clones every checkpoint in `numbers` from the bucket alone and
/// compares each with the mount's view of it.
fn assert_clones_match(fx: &MountFixture, server: &S3Server, url: &str, numbers: &[i64], what: &str) {
    let other = tempfile::tempdir().expect("a second machine's dir");
    for n in numbers {
        let dir = other.path().join(format!("c{n}"));
        check(elsewhere(server, other.path(), &["clone", &format!("{url}@{n}"), dir.to_str().unwrap()]), "clone");
        let view = fx.path().join(".rewindfs/checkpoints").join(n.to_string());
        assert_same_tree(&view, &dir, &format!("{what}: clone of checkpoint {n}"));
    }
}

/// `fsck --remote URL --json` from a home that never saw the workspace.
fn fsck_remote(server: &S3Server, home: &Path, url: &str) -> (Output, serde_json::Value) {
    let out = elsewhere(server, home, &["fsck", "--remote", url, "--json"]);
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("fsck --remote --json prints JSON ({e}): {}{}", stdout(&out), stderr(&out)));
    (out, report)
}

/// `fsck --remote` finds nothing: exit 0, `no problems`, and every
/// checkpoint in `numbers` checked.
fn assert_remote_clean(server: &S3Server, url: &str, checkpoints: usize, what: &str) {
    let home = tempfile::tempdir().expect("a home");
    let (out, report) = fsck_remote(server, home.path(), url);
    assert!(out.status.success(), "{what}: fsck --remote must pass: {report}");
    assert_eq!(report["problems"], serde_json::json!([]), "{what}: {report}");
    assert_eq!(report["checkpoints"].as_u64(), Some(checkpoints as u64), "{what}: {report}");
    assert_eq!(report["manifests_checked"].as_u64(), Some(checkpoints as u64), "{what}: {report}");
    let text = stdout(&elsewhere(server, home.path(), &["fsck", "--remote", url]));
    assert!(text.lines().next().is_some_and(|l| l.ends_with("no problems")), "{what}: {text}");
}

/// `fsck --remote` finds problems of `kind` naming one of `keys`.
fn assert_remote_problem(server: &S3Server, url: &str, kind: &str, keys: &[String], what: &str) -> serde_json::Value {
    let home = tempfile::tempdir().expect("a home");
    let (out, report) = fsck_remote(server, home.path(), url);
    assert_eq!(out.status.code(), Some(6), "{what}: fsck --remote exits 6 on problems: {report}");
    assert_eq!(report["exit_status"].as_i64(), Some(6), "{what}: {report}");
    let problems = report["problems"].as_array().expect("problems");
    let found = problems.iter().find(|p| p["kind"] == kind).unwrap_or_else(|| panic!("{what}: no {kind}: {report}"));
    let key = found["key"].as_str().unwrap_or_default();
    assert!(keys.iter().any(|k| k == key), "{what}: the problem names the object ({key}): {report}");
    found.clone()
}

fn env_refs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
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

    assert_remote_clean(&server, &url, 3, "a pushed history");
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
    // before its head is written; held before its first chunk until the
    // mount has answered.
    let pause = fx.dir.path().join("put-pause");
    std::fs::write(&pause, b"").unwrap();
    let mut env = server.env();
    env.push(("REWINDFS_TEST_KILL_AT", "remote-before-head:1".into()));
    env.push(("REWINDFS_TEST_REMOTE_PUT_PAUSE", pause.to_str().unwrap().into()));
    fx.mount_with_env(false, &["--remote", &url], &env_refs(&env));
    let pid = fx.daemon_pid();
    std::fs::remove_file(&pause).unwrap();
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
    assert_clones_match(&fx, &server, &url, &(0..=n).collect::<Vec<_>>(), "after the resumed push");
    fx.unmount();
}

/// The chunk objects the (file-backed) server holds, by key (`chunks/`
/// also holds the folders `locks/` and `collections/`).
fn chunk_keys(server: &S3Server) -> Vec<String> {
    std::fs::read_dir(server.object_path("chunks"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .map(|e| format!("chunks/{}", e.file_name().to_str().unwrap()))
                .collect()
        })
        .unwrap_or_default()
}

fn bucket_chunks(server: &S3Server) -> usize {
    chunk_keys(server).len()
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
    let finished_while_paused = ends_within(&mut rewind, std::time::Duration::from_secs(60));
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
    assert_clones_match(&fx, &server, &url, &[0, 1], "after the rewind");
    fx.unmount();
}

/// The uploader walks a checkpoint's tree through its view under the tree
/// lock (the sending after does not hold it). A rewind asked during the
/// walk waited for all of it: the length of the walk of the whole tree,
/// and of reading every live file on a last attempt. The walk now gives
/// way and is done again after. The hook holds the walk in a view lookup;
/// the rewind is asked; the hook lets one lookup go and is armed again at
/// once. The push then completes, every checkpoint as the mount shows it.
#[test]
fn a_rewind_does_not_wait_for_the_uploader_walking_a_checkpoint() {
    let server = S3Server::start();
    let mut fx = MountFixture::unmounted();
    sh(&fx.ws, "mkdir d; for i in $(seq 1 300); do echo $i > d/f$i; done");
    let pause = fx.dir.path().join("walk-pause");
    std::fs::write(&pause, b"").unwrap();
    let reached = fx.dir.path().join("walk-pause.reached");
    let url = server.url("walk");
    let mut env = server.env();
    env.push(("REWINDFS_TEST_WALK_PAUSE", pause.to_str().unwrap().into()));
    fx.mount_with_env(false, &["--remote", &url, "--auto-turn", "0"], &env_refs(&env));
    wait_for(&reached, "the uploader never walked checkpoint 0");
    fx.sh("echo changed > d/f1 && echo new > d/g");
    fx.turn("r000001");
    let mut rewind = spawn_cli(&fx, &["rewind", "0"]);
    // The rewind waits for the tree; the walk ends one lookup and is held
    // again at its next (if it gets that far).
    let gap = std::time::Duration::from_millis(15);
    let (finished, out) = one_step_let_go(&mut rewind, &pause, gap, "rewindfs rewind");
    assert!(finished, "the rewind waited for the uploader's walk, held by the hook");
    check(out, "rewindfs rewind while the uploader walks");
    assert_eq!(std::fs::read_to_string(fx.path().join("d/f1")).unwrap(), "1\n", "the rewind happened");
    assert!(!fx.path().join("d/g").exists(), "d/g was made after checkpoint 0");
    let pushed = push(&fx, &server);
    assert_eq!(pushed["backlog"], serde_json::json!([]), "{pushed}");
    let numbers: Vec<i64> =
        fx.cli_json(&["log"]).as_array().unwrap().iter().filter_map(|c| c["checkpoint"].as_i64()).collect();
    assert!(numbers.len() >= 4, "the mount, the turn, the safety and the rewind's checkpoints: {numbers:?}");
    assert_clones_match(&fx, &server, &url, &numbers, "after a walk gave way to a rewind");
    fx.unmount();
}

fn wait_for(path: &Path, what: &str) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !path.exists() {
        assert!(std::time::Instant::now() < until, "{what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn a_server_down_at_mount_delays_nothing_is_reported_unreachable_and_is_caught_up_when_back() {
    let mut server = S3Server::start();
    server.stop();
    let mut fx = MountFixture::unmounted();
    sh(&fx.ws, "echo before > a");
    let url = server.url("down");
    mount_with_remote(&mut fx, &server, &["--remote", &url, "--auto-turn", "0"]);
    // Recording and turns go on without the remote.
    fx.sh("echo one > b && mkdir d && echo two > d/c");
    let first = fx.turn("r000001");
    let (out, pushed) = push_output(&fx, &server);
    assert!(!out.status.success(), "push must fail while the server is down: {pushed}");
    assert_eq!(pushed["backlog"], serde_json::json!([0, first]), "{pushed}");
    assert_eq!(pushed["reachable"], serde_json::json!(false), "{pushed}");
    let error = pushed["last_error"].as_str().unwrap_or_default().to_string();
    assert!(error.contains("cannot be reached"), "the error says the server cannot be reached: {error}");
    let status = fx.status_json();
    assert_eq!(status["remote"]["reachable"], serde_json::json!(false), "{status}");
    assert_eq!(status["remote"]["last_error"].as_str(), Some(error.as_str()), "{status}");
    assert_eq!(status["remote"]["backlog"], serde_json::json!([0, first]), "{status}");
    let text = stdout(&fx.rewindfs(&["status", "-C", fx.path().to_str().unwrap()]));
    assert!(text.contains("UNREACHABLE") && text.contains("2 not pushed yet"), "status says it: {text}");
    let out = elsewhere(&server, fx.dir.path(), &["fsck", "--remote", &url]);
    assert!(
        out.status.code() == Some(1) && stderr(&out).contains("cannot be reached"),
        "fsck --remote of a server that is down cannot run: {}{}",
        stdout(&out),
        stderr(&out)
    );
    fx.sh("echo three > b");
    let second = fx.turn("r000002");
    // Failed passes again (the one push asked for, the uploader's own):
    // the failure is logged once.
    let (out, _) = push_output(&fx, &server);
    assert!(!out.status.success());
    let warned = daemon_log_lines(&fx, "Cannot push to");
    assert_eq!(warned.len(), 1, "the same failure is logged once: {warned:?}");

    server.restart();
    let pushed = push(&fx, &server);
    assert_eq!(pushed["backlog"], serde_json::json!([]), "{pushed}");
    assert_eq!(pushed["remote_checkpoint"].as_i64(), Some(second), "{pushed}");
    assert!(pushed.get("last_error").is_none(), "{pushed}");
    assert_eq!(daemon_log_lines(&fx, "answers again").len(), 1, "the recovery is logged");
    assert_clones_match(&fx, &server, &url, &[0, first, second], "after the server came back");
    fx.unmount();
}

#[test]
fn a_daemon_killed_mid_upload_leaves_no_head_for_it_and_the_next_mount_completes_it() {
    let server = S3Server::start();
    let mut fx = MountFixture::unmounted();
    sh(&fx.ws, "for i in 1 2 3 4; do head -c 40000 /dev/urandom > f$i; done");
    let pause = fx.dir.path().join("put-pause");
    // Three chunks go, then the uploader waits before the fourth.
    std::fs::write(&pause, b"3").unwrap();
    let url = server.url("killed");
    let mut env = server.env();
    env.push(("REWINDFS_TEST_REMOTE_PUT_PAUSE", pause.to_str().unwrap().into()));
    fx.mount_with_env(false, &["--remote", &url, "--auto-turn", "0"], &env_refs(&env));
    wait_for(&fx.dir.path().join("put-pause.reached"), "the uploader never reached its fourth chunk");
    let pid = fx.daemon_pid();
    check(run_with_timeout(Command::new("kill").args(["-9", &pid.to_string()]), CHILD_TIMEOUT), "kill -9");
    fx.detach_dead(pid);
    assert_eq!(bucket_chunks(&server), 3, "three chunks were sent before the kill");
    assert!(!server.object_path("killed/head.json").exists(), "a head was written for an unfinished checkpoint");
    let other = tempfile::tempdir().unwrap();
    let log = stdout(&check(elsewhere(&server, other.path(), &["log", &url]), "log after the kill"));
    assert!(log.contains("holds no checkpoint"), "{log}");
    let (out, report) = fsck_remote(&server, other.path(), &url);
    assert!(out.status.success() && report["problems"] == serde_json::json!([]), "after the kill: {report}");

    std::fs::remove_file(&pause).unwrap();
    mount_with_remote(&mut fx, &server, &["--auto-turn", "0"]);
    fx.sh("echo more > f1");
    let n = fx.turn("r000001");
    let pushed = push(&fx, &server);
    assert_eq!(pushed["backlog"], serde_json::json!([]), "{pushed}");
    assert_remote_clean(&server, &url, n as usize + 1, "after the kill and the next mount");
    assert_clones_match(&fx, &server, &url, &[0, n], "after the kill");
    fx.unmount();
}

#[test]
fn a_damaged_object_is_named_and_a_clone_leaves_nothing_half_made() {
    let server = S3Server::start();
    let mut fx = MountFixture::unmounted();
    let url = server.url("damaged");
    mount_with_remote(&mut fx, &server, &["--remote", &url, "--auto-turn", "0"]);
    fx.sh("mkdir d && head -c 100000 /dev/urandom > d/blob && echo small > a");
    let n = fx.turn("r000001");
    push(&fx, &server);
    fx.unmount();
    let other = tempfile::tempdir().unwrap();
    let home = other.path();
    let refused = |args: &[&str], names: &[String], what: &str| {
        let out = elsewhere(&server, home, args);
        let err = stderr(&out);
        assert!(!out.status.success(), "{what}: must fail: {}", stdout(&out));
        assert!(names.iter().any(|k| err.contains(k.as_str())), "{what}: the error names the object: {err}");
        err
    };

    // Every chunk damaged: flip the first byte.
    let chunks = chunk_keys(&server);
    assert!(!chunks.is_empty());
    let mut saved = Vec::new();
    for key in &chunks {
        let mut bytes = std::fs::read(server.object_path(key)).unwrap();
        saved.push((key.clone(), bytes.clone()));
        bytes[0] ^= 0xff;
        object_by_another_client(&server, key, Some(&bytes));
    }
    let target = home.join("clone");
    let damaged = assert_remote_problem(&server, &url, "chunk_damaged", &chunks, "damaged chunks");
    assert!(
        damaged["affected"].as_array().is_some_and(|a| a.iter().any(|x| x["checkpoint"].as_i64() == Some(n))),
        "the problem names the checkpoints it costs: {damaged}"
    );
    let err = refused(&["clone", &format!("{url}@{n}"), target.to_str().unwrap()], &chunks, "a damaged chunk");
    assert!(err.contains("does not match its blake3 name"), "{err}");
    assert!(!target.exists(), "a failed clone left its target behind");
    let empty = home.join("empty");
    std::fs::create_dir(&empty).unwrap();
    refused(&["clone", &format!("{url}@{n}"), empty.to_str().unwrap()], &chunks, "into an empty dir");
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0, "the empty target was filled in part");
    let left: Vec<_> = std::fs::read_dir(home)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().contains("rewindfs-clone"))
        .collect();
    assert!(left.is_empty(), "an unfinished clone was left: {left:?}");
    for (key, bytes) in saved {
        object_by_another_client(&server, &key, Some(&bytes));
    }
    assert_remote_clean(&server, &url, 2, "the chunks put back");
    // A chunk gone.
    let kept = std::fs::read(server.object_path(&chunks[0])).unwrap();
    object_by_another_client(&server, &chunks[0], None);
    assert_remote_problem(&server, &url, "chunk_missing", &chunks[..1], "a missing chunk");
    object_by_another_client(&server, &chunks[0], Some(&kept));

    // A damaged manifest.
    let manifests: Vec<String> = std::fs::read_dir(server.object_path("damaged/manifests"))
        .expect("manifests")
        .map(|e| format!("damaged/manifests/{}", e.unwrap().file_name().to_str().unwrap()))
        .collect();
    for key in &manifests {
        object_by_another_client(&server, key, Some(b"not a manifest"));
    }
    refused(&["clone", &format!("{url}@{n}"), target.to_str().unwrap()], &manifests, "a damaged manifest");
    assert_remote_problem(&server, &url, "manifest_damaged", &manifests, "a damaged manifest");
    assert!(!target.exists());

    // A damaged head (the one object not named by its content).
    object_by_another_client(&server, "damaged/head.json", Some(b"{\"format\": 1, \"check"));
    refused(&["log", &url], &["damaged/head.json".to_string()], "a damaged head");
    assert_remote_problem(&server, &url, "head_damaged", &["damaged/head.json".to_string()], "a damaged head");
}

#[test]
fn bad_credentials_and_a_missing_bucket_are_one_clear_error() {
    let server = S3Server::start();
    let mut fx = MountFixture::unmounted();
    let url = server.url("denied");
    let mut env = server.env();
    for (k, v) in env.iter_mut() {
        if *k == "AWS_SECRET_ACCESS_KEY" {
            *v = "not-the-secret".into();
        }
    }
    fx.mount_with_env(false, &["--remote", &url, "--auto-turn", "0"], &env_refs(&env));
    fx.sh("echo a > a");
    fx.turn("r000001");
    for _ in 0..3 {
        let (out, pushed) = push_output(&fx, &server);
        assert!(!out.status.success(), "{pushed}");
        let error = pushed["last_error"].as_str().unwrap_or_default();
        assert!(error.contains("access denied"), "the error says access was denied: {pushed}");
        assert_eq!(pushed["reachable"], serde_json::json!(true), "the server answered: {pushed}");
    }
    let warned = daemon_log_lines(&fx, "Cannot push to");
    assert_eq!(warned.len(), 1, "one line for the same failure, not one per retry: {warned:?}");
    assert!(daemon_log_lines(&fx, "not-the-secret").is_empty(), "a secret is in the daemon log");

    let other = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(bin());
    cmd.env("REWINDFS_RUNTIME_DIR", other.path().join("run")).env("REWINDFS_HOME", other.path().join("home"));
    cmd.envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    let out = run_with_timeout(cmd.args(["log", &url]), CHILD_TIMEOUT);
    assert!(
        !out.status.success() && stderr(&out).contains("access denied"),
        "log with bad credentials: {}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("not-the-secret"));

    let missing = "s3://no-such-bucket/ws";
    let out = elsewhere(&server, other.path(), &["log", missing]);
    assert!(
        !out.status.success() && stderr(&out).contains("the bucket does not exist"),
        "log of a missing bucket: {}{}",
        stdout(&out),
        stderr(&out)
    );
    fx.unmount();
}

/// `rewindfs show s3://...@N MOUNTPOINT` running in the foreground, from a
/// home that never saw the workspace, its chunk cache in `home/cache`.
struct RemoteShow {
    child: std::process::Child,
    mp: std::path::PathBuf,
    log: std::path::PathBuf,
}

fn mounted(mp: &Path) -> bool {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mp = mp.to_str().unwrap();
    text.lines().any(|l| l.split_whitespace().nth(4) == Some(mp))
}

fn show_command(server: &S3Server, home: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.env("REWINDFS_RUNTIME_DIR", home.join("run"))
        .env("REWINDFS_HOME", home.join("home"))
        .env("XDG_CACHE_HOME", home.join("cache"))
        .current_dir(home);
    for (k, v) in server.env() {
        cmd.env(k, v);
    }
    cmd.arg("show").args(args);
    cmd
}

impl RemoteShow {
    fn start(server: &S3Server, home: &Path, source: &str, mp: &Path, extra: &[&str]) -> RemoteShow {
        std::fs::create_dir_all(mp).unwrap();
        let log = home.join(format!("show-{}.log", mp.file_name().unwrap().to_str().unwrap()));
        let mut args = vec![source, mp.to_str().unwrap(), "--foreground"];
        args.extend_from_slice(extra);
        let child = show_command(server, home, &args)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("rewindfs show");
        let mut show = RemoteShow { child, mp: mp.to_path_buf(), log };
        let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !mounted(mp) {
            if let Ok(Some(status)) = show.child.try_wait() {
                panic!("show exited ({status}) before mounting: {}", show.log_text());
            }
            assert!(std::time::Instant::now() < until, "show did not mount: {}", show.log_text());
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        show
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Unmounted by `how` (a signal, or `rewindfs unmount`): the process
    /// exits 0 and leaves nothing mounted.
    fn stop(mut self, how: impl FnOnce(&RemoteShow)) {
        how(&self);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait for show") {
                break s;
            }
            assert!(std::time::Instant::now() < until, "show did not exit: {}", self.log_text());
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert!(status.success(), "show exits 0 once unmounted ({status}): {}", self.log_text());
        assert!(!mounted(&self.mp), "show left its mount behind");
    }
}

impl Drop for RemoteShow {
    fn drop(&mut self) {
        if mounted(&self.mp) {
            let _ = Command::new("umount").arg("-l").arg(&self.mp).status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sum of the sizes of the files in `dir`.
/// Each file once, by inode: a listing made while a file is renamed from
/// its temporary name may show it under both.
fn dir_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(d) = std::fs::read_dir(dir) else { return 0 };
    let files: std::collections::HashMap<u64, u64> =
        d.filter_map(|e| e.ok()?.metadata().ok()).map(|m| (m.ino(), m.len())).collect();
    files.values().sum()
}

#[test]
fn a_remote_checkpoint_is_shown_read_only_from_a_store_that_never_saw_the_workspace() {
    let server = S3Server::start();
    let mut fx = MountFixture::unmounted();
    sh(&fx.ws, "echo before-mount > old && mkdir keep && echo kept > keep/file");
    let url = server.url("team/shown");
    mount_with_remote(&mut fx, &server, &["--remote", &url, "--auto-turn", "0"]);
    let cps = record_history(&fx);
    let pushed = push(&fx, &server);
    assert_eq!(pushed["backlog"], serde_json::json!([]), "{pushed}");
    let other = tempfile::tempdir().expect("a second machine's dir");
    let home = other.path();
    for n in [0, cps[0], cps[1]] {
        let mp = home.join(format!("show-{n}"));
        // The newest in the background (the default), the others in the
        // foreground.
        let background = n == cps[1];
        let show = if background {
            std::fs::create_dir_all(&mp).unwrap();
            let out = run_with_timeout(
                &mut show_command(&server, home, &[&format!("{url}@{n}"), mp.to_str().unwrap(), "--json"]),
                CHILD_TIMEOUT,
            );
            let reply: serde_json::Value =
                serde_json::from_slice(&check(out, "show in the background").stdout).expect("show --json prints JSON");
            assert_eq!(reply["checkpoint"].as_i64(), Some(n), "{reply}");
            assert!(mounted(&mp), "show returned before its view was mounted");
            let pid = reply["pid"].as_i64().expect("the server's pid") as i32;
            assert!(alive(pid), "{reply}");
            Err(pid)
        } else {
            Ok(RemoteShow::start(&server, home, &format!("{url}@{n}"), &mp, &[]))
        };
        let ls = check(run_with_timeout(Command::new("ls").arg("-la").arg(&mp), CHILD_TIMEOUT), "ls -la");
        assert!(stdout(&ls).contains(" old\n"), "ls -la of checkpoint {n}: {}", stdout(&ls));
        // Against a clone of the same checkpoint and the workspace's own view.
        let clone = home.join(format!("clone-{n}"));
        check(elsewhere(&server, home, &["clone", &format!("{url}@{n}"), clone.to_str().unwrap()]), "clone");
        assert_same_tree(&clone, &mp, &format!("show of checkpoint {n} against its clone"));
        let view = fx.path().join(".rewindfs/checkpoints").join(n.to_string());
        assert_same_tree(&view, &mp, &format!("show of checkpoint {n} against the local view"));
        let (pattern, found) = if n == 0 { ("kept", "keep/file") } else { ("return 0", "proj/src/main.c") };
        let grep = run_with_timeout(Command::new("grep").args(["-r", "-l", pattern]).arg(&mp), CHILD_TIMEOUT);
        assert!(stdout(&grep).contains(found), "grep -r in checkpoint {n}: {}", stdout(&grep));
        if n == cps[0] {
            use std::os::unix::fs::{MetadataExt, PermissionsExt};
            let link = std::fs::read_link(mp.join("main-link")).expect("a symlink");
            assert_eq!(link, Path::new("proj/src/main.c"));
            let (a, b) = (mp.join("config").metadata().unwrap(), mp.join("config.hard").metadata().unwrap());
            assert_eq!((a.ino(), a.nlink()), (b.ino(), 2), "a hard link: one inode, two links");
            let readme = mp.join("proj/docs/readme").symlink_metadata().unwrap();
            assert_eq!(readme.permissions().mode() & 0o7777, 0o640);
            assert_eq!((readme.mtime(), readme.mtime_nsec()), (981173106, 123456789), "mtime of readme");
            assert_eq!(mp.join("proj/src/main.c").metadata().unwrap().permissions().mode() & 0o7777, 0o4755);
            let x = run_with_timeout(
                Command::new("getfattr").args(["-n", "user.tag", "--only-values"]).arg(mp.join("proj/src/main.c")),
                CHILD_TIMEOUT,
            );
            assert_eq!(stdout(&x), "v1", "an xattr: {}", stderr(&x));
            let write = std::fs::write(mp.join("old"), b"x");
            assert_eq!(write.err().and_then(|e| e.raw_os_error()), Some(libc::EROFS), "the view is read-only");
            // Ctrl-C ends it and unmounts.
            show.expect("in the foreground").stop(|s| {
                check(
                    run_with_timeout(Command::new("kill").args(["-INT", &s.child.id().to_string()]), CHILD_TIMEOUT),
                    "kill -INT",
                );
            });
        } else {
            match show {
                Ok(show) => show.stop(|s| {
                    let mp = s.mp.to_str().unwrap();
                    check(elsewhere(&server, home, &["unmount", mp]), "rewindfs unmount of a remote show");
                }),
                Err(pid) => {
                    check(elsewhere(&server, home, &["unmount", mp.to_str().unwrap()]), "unmount of a background show");
                    assert!(!mounted(&mp), "the background show left its mount");
                    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
                    while alive(pid) {
                        assert!(std::time::Instant::now() < until, "the background show did not exit");
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                }
            }
        }
    }
    let cache = home.join("cache/rewindfs/chunks");
    assert!(dir_bytes(&cache) > 0, "the chunks read are in the user's cache dir {}", cache.display());
    fx.unmount();
}

#[test]
fn a_remote_show_keeps_its_cache_within_the_bound_while_reading_a_larger_tree() {
    let server = S3Server::start();
    let mut fx = MountFixture::unmounted();
    // 3 MiB of content that does not compress or repeat.
    sh(
        &fx.ws,
        "mkdir -p d/e && for i in $(seq 1 24); do head -c 131072 /dev/urandom > d/f$i; done
        for i in $(seq 1 24); do head -c 1000 /dev/urandom > d/e/s$i; done",
    );
    let url = server.url("bounded");
    mount_with_remote(&mut fx, &server, &["--remote", &url, "--auto-turn", "0"]);
    let pushed = push(&fx, &server);
    assert_eq!(pushed["backlog"], serde_json::json!([]), "{pushed}");
    let other = tempfile::tempdir().unwrap();
    let home = other.path();
    let bound = 256 * 1024;
    let mp = home.join("mp");
    let show = RemoteShow::start(&server, home, &format!("{url}@0"), &mp, &["--cache-size", "256K"]);
    let cache = home.join("cache/rewindfs/chunks");
    // Watched while the tree is read.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (stop, cache) = (stop.clone(), cache.clone());
        std::thread::spawn(move || {
            let mut most = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                most = most.max(dir_bytes(&cache));
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            most
        })
    };
    assert_same_tree(&fx.path().join(".rewindfs/checkpoints/0"), &mp, "a tree 12 times the cache");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let most = watcher.join().unwrap();
    let after = dir_bytes(&cache);
    assert!(most <= bound && after <= bound, "the cache held {most} bytes at most ({after} after), bound {bound}");
    assert!(after > bound / 2, "the cache is used up to its bound: {after} bytes");
    show.stop(|s| {
        check(elsewhere(&server, home, &["unmount", s.mp.to_str().unwrap()]), "unmount");
    });
    // Too small for one chunk: refused before mounting.
    let out = run_with_timeout(
        &mut show_command(&server, home, &[&url, mp.to_str().unwrap(), "--cache-size", "1K"]),
        CHILD_TIMEOUT,
    );
    assert!(!out.status.success() && stderr(&out).contains("smaller than one chunk"), "{}", stderr(&out));
    assert!(!mounted(&mp));
    fx.unmount();
}

#[test]
fn a_damaged_chunk_fails_the_read_of_its_file_only_and_an_unknown_checkpoint_mounts_nothing() {
    let server = S3Server::start();
    let mut fx = MountFixture::unmounted();
    // One chunk each (under the smallest chunk size).
    let bad = b"the content of the file whose chunk is damaged\n";
    std::fs::write(fx.ws.join("bad"), bad).unwrap();
    sh(&fx.ws, "echo fine > good && mkdir d && head -c 100000 /dev/urandom > d/blob");
    let url = server.url("damaged-show");
    mount_with_remote(&mut fx, &server, &["--remote", &url, "--auto-turn", "0"]);
    push(&fx, &server);
    fx.unmount();
    let key = format!("chunks/{}", blake3::hash(bad).to_hex());
    let mut bytes = std::fs::read(server.object_path(&key)).expect("the chunk of `bad` is in the bucket");
    bytes[0] ^= 0xff;
    object_by_another_client(&server, &key, Some(&bytes));

    let other = tempfile::tempdir().unwrap();
    let home = other.path();
    let mp = home.join("mp");
    let show = RemoteShow::start(&server, home, &format!("{url}@0"), &mp, &[]);
    let cat = run_with_timeout(Command::new("cat").arg(mp.join("bad")), CHILD_TIMEOUT);
    assert!(
        !cat.status.success() && stderr(&cat).contains("Input/output error"),
        "cat bad: {}{}",
        stdout(&cat),
        stderr(&cat)
    );
    assert!(stdout(&cat).is_empty(), "no byte of a damaged chunk is served: {:?}", stdout(&cat));
    assert_eq!(std::fs::read(mp.join("good")).unwrap(), b"fine\n");
    assert_eq!(std::fs::read(mp.join("d/blob")).unwrap(), std::fs::read(fx.ws.join("d/blob")).unwrap());
    let ls = check(run_with_timeout(Command::new("ls").arg("-la").arg(&mp), CHILD_TIMEOUT), "ls");
    assert!(stdout(&ls).contains("bad"), "{}", stdout(&ls));
    // Asked again: EIO again, logged once.
    assert!(std::fs::read(mp.join("bad")).is_err());
    let cached = home.join("cache/rewindfs/chunks").join(blake3::hash(bad).to_hex().as_str());
    assert!(!cached.exists(), "a damaged chunk was cached");
    show.stop(|s| {
        check(elsewhere(&server, home, &["unmount", s.mp.to_str().unwrap()]), "unmount");
    });
    let log = std::fs::read_to_string(home.join("show-mp.log")).unwrap();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(&key)).collect();
    assert_eq!(lines.len(), 1, "one log line names the object: {log}");
    assert!(lines[0].contains("\"bad\"") || lines[0].contains(" bad "), "and the path: {}", lines[0]);
    assert!(lines[0].contains("does not match its blake3 name"), "{}", lines[0]);

    // An unknown checkpoint: a clear error, nothing mounted.
    let out = run_with_timeout(
        &mut show_command(&server, home, &[&format!("{url}@99"), mp.to_str().unwrap()]),
        CHILD_TIMEOUT,
    );
    assert!(!out.status.success(), "show of an unknown checkpoint must fail");
    assert!(stderr(&out).contains("holds no checkpoint 99"), "{}", stderr(&out));
    assert!(!mounted(&mp), "nothing is mounted for an unknown checkpoint");
    let out = run_with_timeout(
        &mut show_command(&server, home, &[&server.url("never-pushed"), mp.to_str().unwrap()]),
        CHILD_TIMEOUT,
    );
    assert!(!out.status.success() && stderr(&out).contains("nothing was pushed there"), "{}", stderr(&out));
    assert!(!mounted(&mp));
}

/// A remote `show` while its server is down: every read of what is not
/// cached fails (EIO), and the log says so once for the outage, not once
/// per read; once the server is back, reads work and the log says once
/// that it answers again. (Before, a line per read.)
#[test]
fn a_remote_show_logs_an_outage_once_and_its_end_once() {
    let mut server = S3Server::start();
    let mut fx = MountFixture::unmounted();
    sh(&fx.ws, "for i in 1 2 3 4; do echo \"file $i\" > f$i; done");
    let url = server.url("outage");
    mount_with_remote(&mut fx, &server, &["--remote", &url, "--auto-turn", "0"]);
    push(&fx, &server);
    fx.unmount();

    let other = tempfile::tempdir().unwrap();
    let home = other.path();
    let mp = home.join("mp");
    let show = RemoteShow::start(&server, home, &format!("{url}@0"), &mp, &[]);
    server.stop();
    for f in ["f1", "f2", "f3"] {
        for _ in 0..2 {
            let e = std::fs::read(mp.join(f)).expect_err("a read while the server is down");
            assert_eq!(e.raw_os_error(), Some(libc::EIO), "{f}: {e}");
        }
    }
    server.restart();
    for f in ["f1", "f2", "f3", "f4"] {
        assert_eq!(std::fs::read_to_string(mp.join(f)).unwrap(), format!("file {}\n", &f[1..]), "{f}");
    }
    show.stop(|s| {
        check(elsewhere(&server, home, &["unmount", s.mp.to_str().unwrap()]), "unmount");
    });
    let log = std::fs::read_to_string(home.join("show-mp.log")).unwrap();
    let failed: Vec<&str> = log.lines().filter(|l| l.contains("Cannot read")).collect();
    assert_eq!(failed.len(), 1, "the outage is logged once: {log}");
    assert!(failed[0].contains("cannot be reached"), "{}", failed[0]);
    assert_eq!(log.lines().filter(|l| l.contains("answers again")).count(), 1, "and its end once: {log}");
}

/// Bytes of every object the (file-backed) server holds.
fn bucket_bytes(server: &S3Server) -> u64 {
    fn walk(dir: &Path) -> u64 {
        std::fs::read_dir(dir)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| match e.file_type() {
                        Ok(t) if t.is_dir() => walk(&e.path()),
                        _ => e.metadata().map(|m| m.len()).unwrap_or(0),
                    })
                    .sum()
            })
            .unwrap_or(0)
    }
    walk(&server.dir.path().join("data").join(s3::BUCKET))
}

/// `du --remote URL --json` from a home that never saw a workspace.
fn du_remote(server: &S3Server, url: &str) -> serde_json::Value {
    let home = tempfile::tempdir().unwrap();
    let out = check(elsewhere(server, home.path(), &["du", "--remote", url, "--json"]), "du --remote");
    serde_json::from_slice(&out.stdout).expect("du --remote --json")
}

fn workspace_use<'a>(du: &'a serde_json::Value, prefix: &str) -> &'a serde_json::Value {
    du["workspaces"]
        .as_array()
        .and_then(|ws| ws.iter().find(|w| w["prefix"] == prefix))
        .unwrap_or_else(|| panic!("no workspace {prefix} in {du}"))
}

fn forget(fx: &MountFixture, checkpoints: &[i64]) {
    let mut args = vec!["forget".to_string(), "-C".into(), fx.path().to_str().unwrap().into()];
    args.extend(checkpoints.iter().map(|n| n.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    check(fx.rewindfs(&args), "rewindfs forget");
}

#[test]
fn two_workspaces_of_one_tree_store_it_once_and_a_forget_on_one_keeps_the_other_whole() {
    let server = S3Server::start();
    // One tree, 2 MiB of content that does not compress or repeat.
    let tree = tempfile::tempdir().unwrap();
    sh(
        tree.path(),
        "mkdir -p t/sub && for i in $(seq 10 25); do head -c 131072 /dev/urandom > t/f$i; done
        echo text > t/sub/readme",
    );
    let (mut a, mut b) = (MountFixture::unmounted(), MountFixture::unmounted());
    for fx in [&a, &b] {
        check(
            run_with_timeout(Command::new("cp").arg("-a").arg(tree.path().join("t")).arg(&fx.ws), CHILD_TIMEOUT),
            "cp",
        );
    }
    let (url_a, url_b) = (server.url("team/a"), server.url("team/b"));
    mount_with_remote(&mut a, &server, &["--remote", &url_a, "--auto-turn", "0"]);
    push(&a, &server);
    let one = bucket_bytes(&server);
    mount_with_remote(&mut b, &server, &["--remote", &url_b, "--auto-turn", "0"]);
    push(&b, &server);
    let two = bucket_bytes(&server);
    assert!(one > 2 << 20, "the first workspace's tree is in the bucket: {one} bytes");
    assert!(two - one < one / 50, "a second workspace of the same tree added {} bytes to {one}", two - one);

    let du = du_remote(&server, &server.url(""));
    assert_eq!(du["workspaces"].as_array().map(Vec::len), Some(2), "{du}");
    for prefix in ["team/a", "team/b"] {
        let w = workspace_use(&du, prefix);
        assert_eq!(w["own_bytes"].as_u64(), Some(0), "identical trees: nothing of {prefix} is its own: {w}");
        assert_eq!(w["shared_bytes"], du["chunk_bytes"], "every chunk is shared: {du}");
    }
    assert_eq!(du["unreferenced_bytes"].as_u64(), Some(0), "{du}");
    let text = stdout(&check(elsewhere(&server, tree.path(), &["du", "--remote", &server.url("")]), "du --remote"));
    assert!(text.contains("team/a: 1 checkpoints") && text.contains("0 B its own"), "{text}");

    // a drops a shared file and makes content of its own twice; b one.
    a.sh("rm t/f10 && head -c 100000 /dev/urandom > only-a1");
    let a1 = a.turn("r000001");
    a.sh("rm only-a1 && head -c 100000 /dev/urandom > only-a2");
    let a2 = a.turn("r000002");
    b.sh("head -c 100000 /dev/urandom > only-b");
    let b1 = b.turn("r000001");
    push(&a, &server);
    push(&b, &server);
    let du = du_remote(&server, &server.url(""));
    let own_a = workspace_use(&du, "team/a")["own_bytes"].as_u64().unwrap();
    assert!((190_000..=210_000).contains(&own_a), "a's own content: only-a1 and only-a2: {du}");
    let before = bucket_bytes(&server);

    // a forgets all but its newest: only-a1 goes; f10, which b still
    // names, and everything a's newest names stay.
    forget(&a, &[0, a1]);
    let pushed = push(&a, &server);
    assert!(pushed.get("collection_pending").is_none(), "{pushed}");
    let log = check(elsewhere(&server, tree.path(), &["log", &url_a, "--json"]), "log");
    let log: serde_json::Value = serde_json::from_slice(&log.stdout).unwrap();
    let numbers: Vec<i64> = log.as_array().unwrap().iter().filter_map(|c| c["checkpoint"].as_i64()).collect();
    assert_eq!(numbers, [a2], "the remote follows a's forget: {log}");
    let du = du_remote(&server, &server.url(""));
    assert_eq!(du["unreferenced_bytes"].as_u64(), Some(0), "the collection left nothing unreferenced: {du}");
    let own_a = workspace_use(&du, "team/a")["own_bytes"].as_u64().unwrap();
    assert!((90_000..=110_000).contains(&own_a), "a's own content is only-a2 now: {du}");
    let freed = before - bucket_bytes(&server);
    assert!((100_000..=130_000).contains(&freed), "only-a1 (and a's forgotten manifests) freed: {freed} bytes");
    assert_eq!(workspace_use(&du, "team/a")["unlisted_manifests"].as_u64(), Some(0), "{du}");
    // b is whole: every checkpoint clones byte-exact, f10 included.
    assert_clones_match(&b, &server, &url_b, &[0, b1], "b after a's forget");
    assert_clones_match(&a, &server, &url_a, &[a2], "a's kept checkpoint after its forget");
    assert_remote_clean(&server, &url_b, 2, "b after a's forget");
    assert_remote_clean(&server, &url_a, 1, "a after its forget");
    // The du of one workspace.
    let du_a = du_remote(&server, &url_a);
    assert_eq!(du_a["workspaces"].as_array().map(Vec::len), Some(1), "{du_a}");
    a.unmount();
    b.unmount();
}

/// `rclone` as a second S3 client of the server (another workspace's
/// objects): `put` `data` at `key`, or delete it (`None`).
fn object_by_another_client(server: &S3Server, key: &str, data: Option<&[u8]>) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new("rclone");
    cmd.arg("--config").arg(dir.path().join("rclone.conf")).arg("-q");
    let env = server.env();
    let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()).unwrap();
    cmd.env("RCLONE_S3_PROVIDER", "Other")
        .env("RCLONE_S3_ENDPOINT", get("AWS_ENDPOINT_URL"))
        .env("RCLONE_S3_ACCESS_KEY_ID", get("AWS_ACCESS_KEY_ID"))
        .env("RCLONE_S3_SECRET_ACCESS_KEY", get("AWS_SECRET_ACCESS_KEY"))
        .env("RCLONE_S3_REGION", get("AWS_REGION"))
        .env("RCLONE_S3_NO_CHECK_BUCKET", "true");
    let target = format!(":s3:{}/{key}", s3::BUCKET);
    match data {
        Some(data) => {
            let file = dir.path().join("object");
            std::fs::write(&file, data).unwrap();
            cmd.arg("copyto").arg(&file).arg(&target);
        }
        None => {
            cmd.arg("deletefile").arg(&target);
        }
    }
    check(run_with_timeout(&mut cmd, CHILD_TIMEOUT), "rclone as another S3 client");
}

#[test]
fn a_push_and_a_collection_of_one_bucket_exclude_each_other_through_its_locks() {
    let server = S3Server::start();
    let (mut a, mut b) = (MountFixture::unmounted(), MountFixture::unmounted());
    let (url_a, url_b) = (server.url("a"), server.url("b"));
    mount_with_remote(&mut a, &server, &["--remote", &url_a, "--auto-turn", "0"]);
    mount_with_remote(&mut b, &server, &["--remote", &url_b, "--auto-turn", "0"]);
    a.sh("head -c 50000 /dev/urandom > only-a");
    let a1 = a.turn("r000001");
    a.sh("rm only-a && echo x > x");
    let a2 = a.turn("r000002");
    push(&a, &server);
    push(&b, &server);

    // Another workspace collecting: b's push waits for it, and says so.
    object_by_another_client(&server, "chunks/locks/collect-elsewhere.json", Some(b"{}"));
    b.sh("echo new > y");
    let b1 = b.turn("r000001");
    let (out, status) = push_output(&b, &server);
    assert!(!out.status.success(), "a push during another's collection must wait: {status}");
    let error = status["last_error"].as_str().unwrap_or_default();
    assert!(error.contains("collecting the bucket") && error.contains("collect-elsewhere"), "{status}");
    assert!(status["backlog"].as_array().is_some_and(|b| b.contains(&b1.into())), "{status}");
    object_by_another_client(&server, "chunks/locks/collect-elsewhere.json", None);
    let status = push(&b, &server);
    assert_eq!(status["backlog"], serde_json::json!([]), "{status}");

    // Another workspace pushing: a's collection waits, the content stays.
    object_by_another_client(&server, "chunks/locks/push-elsewhere.json", Some(b"{}"));
    forget(&a, &[a1]);
    let status = push(&a, &server);
    assert_eq!(status["collection_pending"], serde_json::json!(true), "{status}");
    let text = stdout(&a.rewindfs(&["status", "-C", a.path().to_str().unwrap()]));
    assert!(text.contains("not collected yet"), "status says it: {text}");
    let du = du_remote(&server, &server.url(""));
    assert!(du["unreferenced_bytes"].as_u64().unwrap() >= 50_000, "only-a is not deleted yet: {du}");
    assert!(du["locks"].as_array().is_some_and(|l| l.iter().any(|k| k == "chunks/locks/push-elsewhere.json")), "{du}");
    object_by_another_client(&server, "chunks/locks/push-elsewhere.json", None);
    // The uploader tries again by itself.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let du = du_remote(&server, &server.url(""));
        if du["unreferenced_bytes"].as_u64() == Some(0) {
            break;
        }
        assert!(std::time::Instant::now() < until, "the postponed collection never ran: {du}");
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    assert!(a.status_json()["remote"].get("collection_pending").is_none(), "{}", a.status_json());
    let du = du_remote(&server, &server.url(""));
    assert_eq!(du["locks"], serde_json::json!([]), "a lock was left behind: {du}");
    assert_clones_match(&a, &server, &url_a, &[0, a2], "a after the collection");
    assert_clones_match(&b, &server, &url_b, &[0, b1], "b after a's collection");
    a.unmount();
    b.unmount();
}

/// The push lock of a daemon killed while it pushed: another workspace's
/// collection on the same machine sees from the lock's body (host, boot,
/// pid namespace, pid and its start time) that its holder is gone and
/// collects at once; and the next mount of the killed store removes its
/// own locks when it starts, even one it cannot tell dead (a collect lock
/// left before a reboot). (Before, both waited for the lock to be an hour
/// old: the collection stayed pending, and the store's own push was
/// refused as if another workspace collected.)
#[test]
fn a_push_lock_left_by_a_killed_daemon_holds_off_no_collection() {
    let server = S3Server::start();
    let (mut a, mut b) = (MountFixture::unmounted(), MountFixture::unmounted());
    let (url_a, url_b) = (server.url("a"), server.url("b"));
    mount_with_remote(&mut b, &server, &["--remote", &url_b, "--auto-turn", "0"]);
    b.sh("head -c 50000 /dev/urandom > only-b");
    let b1 = b.turn("r000001");
    b.sh("rm only-b && echo x > x");
    let b2 = b.turn("r000002");
    push(&b, &server);

    // a's daemon is killed holding its push lock, before its first chunk.
    sh(&a.ws, "head -c 40000 /dev/urandom > f1");
    let pause = a.dir.path().join("put-pause");
    std::fs::write(&pause, b"").unwrap();
    let mut env = server.env();
    env.push(("REWINDFS_TEST_REMOTE_PUT_PAUSE", pause.to_str().unwrap().into()));
    a.mount_with_env(false, &["--remote", &url_a, "--auto-turn", "0"], &env_refs(&env));
    wait_for(&a.dir.path().join("put-pause.reached"), "a's uploader never reached its first chunk");
    let pid = a.daemon_pid();
    check(run_with_timeout(Command::new("kill").args(["-9", &pid.to_string()]), CHILD_TIMEOUT), "kill -9");
    a.detach_dead(pid);
    std::fs::remove_file(&pause).unwrap();
    let du = du_remote(&server, &server.url(""));
    let held = |du: &serde_json::Value| {
        du["locks"].as_array().map(|l| l.iter().filter_map(|k| k.as_str().map(str::to_string)).collect::<Vec<_>>())
    };
    let locks = held(&du).expect("locks");
    assert!(locks.len() == 1 && locks[0].starts_with("chunks/locks/push-"), "the killed push left its lock: {du}");

    // b's collection is not held off by it.
    forget(&b, &[b1]);
    let status = push(&b, &server);
    assert!(status.get("collection_pending").is_none(), "the dead daemon's lock held the collection off: {status}");
    let du = du_remote(&server, &server.url(""));
    assert_eq!(du["unreferenced_bytes"].as_u64(), Some(0), "only-b was collected: {du}");
    assert_clones_match(&b, &server, &url_b, &[0, b2], "b after its collection");

    // a's next mount completes its push; its lock goes.
    mount_with_remote(&mut a, &server, &["--auto-turn", "0"]);
    assert_eq!(push(&a, &server)["backlog"], serde_json::json!([]));
    assert_eq!(held(&du_remote(&server, &server.url(""))), Some(vec![]), "a lock was left behind");
    a.unmount();

    // A collect lock of a's store left by a daemon of another boot (killed
    // while it collected, before the machine restarted): nobody can tell it
    // dead, but a's next mount removes it as it starts, and pushes.
    let head: serde_json::Value =
        serde_json::from_slice(&std::fs::read(server.object_path("a/head.json")).expect("a's head")).expect("head");
    let store_id = head["store_id"].as_str().expect("store id");
    let key = format!("chunks/locks/collect-{store_id}.json");
    let body =
        br#"{"prefix":"a","pid":1234,"started":5,"host":"gone","boot_id":"another-boot","pid_namespace":"pid:[1]"}"#;
    object_by_another_client(&server, &key, Some(body));
    assert_eq!(held(&du_remote(&server, &server.url(""))), Some(vec![key.clone()]));
    mount_with_remote(&mut a, &server, &["--auto-turn", "0"]);
    a.sh("echo more > f1");
    let a1 = a.turn("r000001");
    let (out, status) = push_output(&a, &server);
    assert!(out.status.success(), "a's own old lock held its push off: {status}");
    assert_eq!(status["backlog"], serde_json::json!([]), "{status}");
    assert_eq!(held(&du_remote(&server, &server.url(""))), Some(vec![]), "a's mount left its own old lock");
    assert_clones_match(&a, &server, &url_a, &[0, a1], "a after its lock was removed");
    a.unmount();
    b.unmount();
}

/// `unmount` waits for the remote at most `--wait` seconds: with the push
/// held (the uploader paused before a chunk) `unmount --wait 2` returns
/// long before its default minute, and says what is not on the remote and
/// the command that pushes it; with the server stopped it returns at the
/// first failed pass, saying the same and why; with the server back the
/// next mount sends everything, and `unmount` (stderr not a terminal: plain
/// lines, no bar) says it all went. (Before, `unmount` had no `--wait` and
/// always waited a minute.)
#[test]
fn unmount_waits_for_the_remote_within_its_bound_and_says_what_is_left_and_how_to_push_it() {
    let mut server = S3Server::start();
    let mut fx = MountFixture::unmounted();
    sh(&fx.ws, "head -c 40000 /dev/urandom > f1");
    let pause = fx.dir.path().join("put-pause");
    std::fs::write(&pause, b"").unwrap();
    let url = server.url("w");
    let mut env = server.env();
    env.push(("REWINDFS_TEST_REMOTE_PUT_PAUSE", pause.to_str().unwrap().into()));
    fx.mount_with_env(false, &["--remote", &url, "--auto-turn", "0"], &env_refs(&env));
    wait_for(&fx.dir.path().join("put-pause.reached"), "the uploader never reached its first chunk");
    let mp = fx.path().to_str().unwrap().to_string();
    let started = std::time::Instant::now();
    let out = check(fx.rewindfs(&["unmount", "--wait", "2", &mp]), "unmount --wait 2");
    let took = started.elapsed();
    fx.forget_mount();
    std::fs::remove_file(&pause).unwrap();
    let err = stderr(&out);
    assert!(took < std::time::Duration::from_secs(30), "unmount --wait 2 took {took:?}: {err}");
    assert!(err.contains(&format!("waiting up to 2 s for 1 checkpoints to reach {url}")), "{err}");
    assert!(err.contains(&format!("1 checkpoints are not on {url} yet (0)")), "{err}");
    assert!(err.contains(&format!("`rewindfs push -C {mp}`")), "{err}");
    assert!(!err.contains('\r') && !err.contains("\u{1b}["), "no bar when stderr is not a terminal: {err:?}");

    // The server stopped: the wait ends at the first failed pass.
    mount_with_remote(&mut fx, &server, &["--auto-turn", "0"]);
    server.stop();
    fx.sh("echo more > f2");
    let n = fx.turn("r000001");
    let out = check(fx.rewindfs(&["unmount", &mp]), "unmount with the server stopped");
    fx.forget_mount();
    let err = stderr(&out);
    assert!(err.contains("waiting up to 60 s for"), "{err}");
    assert!(err.contains(&format!("checkpoints are not on {url} yet")) && err.contains(&format!("{n})")), "{err}");
    assert!(err.contains("cannot be reached") && err.contains("`rewindfs push -C"), "{err}");

    // Back: the next mount sends it all, and `unmount` says so.
    server.restart();
    mount_with_remote(&mut fx, &server, &["--auto-turn", "0"]);
    fx.sh("echo last > f3");
    let last = fx.turn("r000002");
    let out = check(fx.rewindfs(&["unmount", &mp]), "unmount with the server back");
    fx.forget_mount();
    let err = stderr(&out);
    assert!(!err.contains("not on"), "{err}");
    if err.contains("waiting up to") {
        assert!(err.contains(&format!("checkpoints are on {url}")), "{err}");
    }
    let other = tempfile::tempdir().unwrap();
    let log = stdout(&check(elsewhere(&server, other.path(), &["log", &url, "--json"]), "log"));
    let listed: serde_json::Value = serde_json::from_str(&log).expect("log --json");
    assert!(listed.to_string().contains(&format!("\"checkpoint\":{last}")), "{listed}");
}

#[test]
fn the_object_store_killed_mid_push_loses_nothing_and_the_push_completes_once_it_is_back() {
    let mut server = S3Server::start();
    let mut fx = MountFixture::unmounted();
    // ~800 chunks: the push is still sending when the server is killed.
    sh(&fx.ws, "mkdir -p big && for i in $(seq 1 200); do head -c 65536 /dev/urandom > big/f$i; done");
    let url = server.url("killed-server");
    mount_with_remote(&mut fx, &server, &["--remote", &url, "--auto-turn", "0"]);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while bucket_chunks(&server) < 50 {
        assert!(std::time::Instant::now() < until, "the push never started");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // kill -9 while requests are in flight.
    server.stop();
    let sent = bucket_chunks(&server);
    assert!(sent < 700, "the push had finished before the server was killed ({sent} chunks)");
    // Recording and turns go on.
    fx.sh("echo more > big/f1 && rm big/f2");
    let n = fx.turn("r000001");
    let (out, status) = push_output(&fx, &server);
    assert!(!out.status.success(), "a push with the server dead must fail: {status}");
    assert_eq!(status["reachable"], serde_json::json!(false), "{status}");
    server.restart();
    let status = push(&fx, &server);
    assert_eq!(status["backlog"], serde_json::json!([]), "{status}");
    assert_remote_clean(&server, &url, n as usize + 1, "after the server was killed mid-push");
    assert_clones_match(&fx, &server, &url, &[0, n], "after the server was killed mid-push");
    fx.unmount();
}

#[test]
fn a_bucket_without_room_fails_the_push_clearly_recording_goes_on_and_the_push_completes_when_it_has_room() {
    // Garage: its own bucket quota, answered 403 AccessDenied "Bucket size
    // quota is reached". rclone has no quotas: its storage fills up.
    let server = S3Server::start_with_room(1 << 20);
    let mut fx = MountFixture::unmounted();
    sh(&fx.ws, "for i in $(seq 1 30); do head -c 100000 /dev/urandom > f$i; done");
    let url = server.url("full");
    mount_with_remote(&mut fx, &server, &["--remote", &url, "--auto-turn", "0"]);
    let (out, status) = push_output(&fx, &server);
    assert!(!out.status.success(), "a push to a full server must fail: {status}");
    assert_eq!(status["reachable"], serde_json::json!(true), "the server answered: {status}");
    let error = status["last_error"].as_str().unwrap_or_default().to_string();
    // The error names the object and the answer: a bare 500 from rclone's
    // full disk; Garage's quota is a full bucket, not refused credentials.
    let answer = if server.kind == "garage" { "the bucket is full (its quota is reached" } else { "500" };
    assert!(error.contains("cannot write chunks/") && error.contains(answer), "the error says what failed: {status}");
    let text = stdout(&fx.rewindfs(&["status", "-C", fx.path().to_str().unwrap()]));
    assert!(text.contains("FAILING") && text.contains("not pushed yet"), "status says it: {text}");
    // Recording and turns go on.
    fx.sh("echo more > f1 && rm f2");
    let n = fx.turn("r000001");
    assert_eq!(daemon_log_lines(&fx, "Cannot push to").len(), 1, "the failure is logged once");
    server.set_room(64 << 20);
    let status = push(&fx, &server);
    assert_eq!(status["backlog"], serde_json::json!([]), "{status}");
    assert_remote_clean(&server, &url, n as usize + 1, "after the server had room again");
    assert_clones_match(&fx, &server, &url, &[0, n], "after the server had room again");
    fx.unmount();
}

/// `fsck --remote --json` of the workspace's own remote as its owner:
/// mounted, through `-C MOUNT` and no credentials of its own; else through
/// `--store` with the server's credentials.
fn fsck_own_remote(fx: &MountFixture, server: &S3Server, mounted: bool) -> (Output, serde_json::Value) {
    let mut cmd = fx.command();
    cmd.args(["fsck", "--remote", "--json"]);
    if mounted {
        cmd.arg("-C").arg(fx.path());
    } else {
        cmd.arg("--store").arg(&fx.store);
        for (k, v) in server.env() {
            cmd.env(k, v);
        }
    }
    let out = run_with_timeout(&mut cmd, CHILD_TIMEOUT);
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("fsck --remote --json prints JSON ({e}): {}{}", stdout(&out), stderr(&out)));
    (out, report)
}

fn problem_kinds(report: &serde_json::Value) -> Vec<String> {
    report["problems"].as_array().expect("problems").iter().map(|p| p["kind"].as_str().unwrap().to_string()).collect()
}

#[test]
fn fsck_of_a_workspace_checks_its_own_remote_against_its_history_mounted_or_not() {
    let server = S3Server::start();
    let mut fx = MountFixture::unmounted();
    sh(&fx.ws, "echo one > a && echo two > b");
    let url = server.url("own");
    mount_with_remote(&mut fx, &server, &["--remote", &url, "--auto-turn", "0"]);
    fx.sh("echo three > a");
    let first = fx.turn("r000001");
    fx.sh("rm b");
    let second = fx.turn("r000002");
    assert_eq!(push(&fx, &server)["backlog"], serde_json::json!([]));
    // Mounted: the daemon checks with its own address and credentials
    // (this process has none).
    let (out, report) = fsck_own_remote(&fx, &server, true);
    assert!(out.status.success(), "a remote as the workspace has it is clean: {report}");
    assert_eq!(report["problems"], serde_json::json!([]), "{report}");
    assert_eq!(report["checkpoints"].as_u64(), Some(second as u64 + 1), "{report}");
    assert_eq!(report["remote"].as_str(), Some(url.as_str()), "{report}");
    // The bucket loses the newest checkpoint and another client rewrites
    // the message of the first: the daemon counts both as pushed.
    let key = "own/head.json";
    let original = std::fs::read(server.object_path(key)).expect("the head");
    let mut head: serde_json::Value = serde_json::from_slice(&original).expect("head json");
    let listed = head["checkpoints"].as_array_mut().unwrap();
    listed.retain(|c| c["checkpoint"].as_i64() != Some(second));
    for c in listed.iter_mut().filter(|c| c["checkpoint"].as_i64() == Some(first)) {
        c["message_id"] = serde_json::json!("r999999");
    }
    object_by_another_client(&server, key, Some(&serde_json::to_vec(&head).unwrap()));
    let (out, report) = fsck_own_remote(&fx, &server, true);
    assert_eq!(out.status.code(), Some(6), "{report}");
    let mut kinds = problem_kinds(&report);
    kinds.sort();
    assert_eq!(kinds, ["differs", "not_on_remote"], "{report}");
    let text = stdout(&run_with_timeout(fx.command().args(["fsck", "--remote", "-C"]).arg(fx.path()), CHILD_TIMEOUT));
    assert!(
        text.contains(&format!("checkpoint {second} was pushed, and the head no longer lists it"))
            && text.contains("r999999"),
        "the text names what is wrong: {text}"
    );
    // The address with -C is refused: one or the other.
    let out = run_with_timeout(fx.command().args(["fsck", "--remote", &url, "-C"]).arg(fx.path()), CHILD_TIMEOUT);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    object_by_another_client(&server, key, Some(&original));
    fx.unmount();
    // Unmounted: the store's own remote, from its store directory, with
    // this process's credentials.
    let (out, report) = fsck_own_remote(&fx, &server, false);
    assert!(out.status.success(), "{report}");
    assert_eq!(report["checkpoints"].as_u64(), Some(second as u64 + 1), "{report}");
    // Another store's history at this prefix.
    head = serde_json::from_slice(&original).unwrap();
    head["store_id"] = serde_json::json!("0123456789abcdef");
    object_by_another_client(&server, key, Some(&serde_json::to_vec(&head).unwrap()));
    let (out, report) = fsck_own_remote(&fx, &server, false);
    assert_eq!(out.status.code(), Some(6), "{report}");
    assert_eq!(problem_kinds(&report), ["other_writer"], "{report}");
    // Without a daemon nothing says what was pushed: a checkpoint the head
    // lacks is one to push, a note.
    head = serde_json::from_slice(&original).unwrap();
    head["checkpoints"].as_array_mut().unwrap().retain(|c| c["checkpoint"].as_i64() != Some(second));
    object_by_another_client(&server, key, Some(&serde_json::to_vec(&head).unwrap()));
    let (out, report) = fsck_own_remote(&fx, &server, false);
    assert!(out.status.success(), "{report}");
    let notes = report["notes"].to_string();
    assert!(notes.contains("not on the remote yet") && notes.contains(&second.to_string()), "{report}");
    // A store that never had a remote: a clear refusal.
    let other = MountFixture::unmounted();
    let out = run_with_timeout(other.command().args(["fsck", "--remote", "--store"]).arg(&other.store), CHILD_TIMEOUT);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("has no remote"), "{}", stderr(&out));
}

#[test]
fn credentials_region_and_endpoint_come_from_a_profile_of_the_shared_files() {
    let server = S3Server::start();
    let files = tempfile::tempdir().expect("a dir for the shared files");
    let env = server.env();
    let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()).unwrap();
    // The credentials file gives the keys, the config file the region and
    // the endpoint, of a profile that is not the default.
    let (credentials, config) = (files.path().join("credentials"), files.path().join("config"));
    std::fs::write(
        &credentials,
        format!(
            "[default]\naws_access_key_id = GKwrong\naws_secret_access_key = wrong\n\n[agents]\n\
             aws_access_key_id = {}\naws_secret_access_key = {}\n",
            get("AWS_ACCESS_KEY_ID"),
            get("AWS_SECRET_ACCESS_KEY")
        ),
    )
    .unwrap();
    std::fs::write(
        &config,
        format!("[profile agents]\nregion = {}\nendpoint_url = {}\n", get("AWS_REGION"), get("AWS_ENDPOINT_URL")),
    )
    .unwrap();
    let profile: Vec<(&str, &str)> = vec![
        ("AWS_PROFILE", "agents"),
        ("AWS_SHARED_CREDENTIALS_FILE", credentials.to_str().unwrap()),
        ("AWS_CONFIG_FILE", config.to_str().unwrap()),
    ];
    let mut fx = MountFixture::unmounted();
    sh(&fx.ws, "echo one > a");
    let url = server.url("profiled");
    fx.mount_with_env(false, &["--remote", &url, "--auto-turn", "0"], &profile);
    fx.sh("echo two > a");
    let n = fx.turn("r000001");
    let status = push(&fx, &server);
    assert_eq!(status["backlog"], serde_json::json!([]), "pushed with the profile's credentials: {status}");
    // Read back elsewhere with the profile alone (no AWS_* variables).
    let home = tempfile::tempdir().expect("a home");
    let mut cmd = Command::new(bin());
    cmd.env("REWINDFS_RUNTIME_DIR", home.path().join("run")).env("REWINDFS_HOME", home.path().join("home"));
    for (k, v) in &profile {
        cmd.env(k, v);
    }
    let out = run_with_timeout(cmd.args(["log", &url, "--json"]), CHILD_TIMEOUT);
    assert!(out.status.success(), "log with the profile: {}", stderr(&out));
    let log: serde_json::Value = serde_json::from_slice(&out.stdout).expect("log --json");
    assert!(log.to_string().contains("r000001"), "the remote's log lists the pushed turn: {log}");
    // The environment wins over the profile: the default profile's wrong
    // keys are not used when the variables say otherwise, and the
    // profile's are not used when the variables are wrong.
    let mut cmd = Command::new(bin());
    cmd.env("REWINDFS_RUNTIME_DIR", home.path().join("run")).env("REWINDFS_HOME", home.path().join("home"));
    for (k, v) in &profile {
        cmd.env(k, v);
    }
    cmd.env("AWS_SECRET_ACCESS_KEY", "not-the-secret");
    let out = run_with_timeout(cmd.args(["log", &url]), CHILD_TIMEOUT);
    assert!(!out.status.success() && stderr(&out).contains("access denied"), "{}", stderr(&out));
    // Nothing of the profile is written into the store.
    let grep = Command::new("grep").args(["-rl", s3::SECRET_FOR_TESTS]).arg(&fx.store).output().expect("grep");
    assert!(grep.stdout.is_empty(), "the secret is in {}", String::from_utf8_lossy(&grep.stdout));
    assert!(n >= 1);
    fx.unmount();
}
