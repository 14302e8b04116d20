//! An in-place mount and the processes already inside the workspace
//! (issue 12, item 5): they would keep using the directory under the mount,
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
