//! File names that are not UTF-8, end to end: given as
//! arguments as raw bytes, carried to the daemon and back, printed by
//! `--json` in the lossless form of docs/cli.md ("Names in JSON") and
//! quoted with octal escapes by the text output. The JSON is decoded here
//! as a program would, with `base64 -d`, not with rewindfs's own code.

mod common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::Output;

use common::{CHILD_TIMEOUT, MountFixture, check, run_with_timeout, stdout};

const FILE: &[u8] = b"bad\xff\xfe.txt";
const DIR: &[u8] = b"d\xe9j\xe0";

fn os(bytes: &[u8]) -> &OsStr {
    OsStr::from_bytes(bytes)
}

fn join(parts: &[&[u8]]) -> Vec<u8> {
    parts.join(&b'/')
}

/// `rewindfs ARGS` with arguments as bytes.
fn cli(fx: &MountFixture, args: &[&OsStr]) -> Output {
    run_with_timeout(fx.command().args(args), CHILD_TIMEOUT)
}

fn json(out: Output, what: &str) -> serde_json::Value {
    let out = check(out, what);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{what} printed no JSON ({e}): {}", stdout(&out)))
}

/// The bytes of a name in the documented form: a string, or
/// `{"base64": ...}` decoded by coreutils.
fn decode(v: &serde_json::Value) -> Vec<u8> {
    if let Some(s) = v.as_str() {
        return s.as_bytes().to_vec();
    }
    let obj = v.as_object().unwrap_or_else(|| panic!("a name is a string or an object: {v}"));
    assert_eq!(obj.len(), 1, "a name object has one key: {v}");
    let code = obj["base64"].as_str().unwrap_or_else(|| panic!("no base64 string in {v}"));
    let out = run_with_timeout(
        std::process::Command::new("sh").args(["-c", "printf %s \"$1\" | base64 -d", "sh", code]),
        CHILD_TIMEOUT,
    );
    check(out, "base64 -d").stdout
}

/// The decoded `path` of every entry of `changes`, with its `field`.
fn changes(v: &serde_json::Value, field: &str) -> Vec<(Vec<u8>, String)> {
    v["changes"]
        .as_array()
        .unwrap_or_else(|| panic!("no changes in {v}"))
        .iter()
        .map(|c| (decode(&c["path"]), c[field].as_str().unwrap_or_default().to_string()))
        .collect()
}

/// A file and a directory (with a file inside) named by bytes that are
/// not UTF-8, sealed as m1; then the file is modified and the directory
/// removed.
fn setup(fx: &MountFixture) {
    let root = fx.path();
    std::fs::write(root.join(os(FILE)), "one\n").expect("create the file");
    std::fs::create_dir(root.join(os(DIR))).expect("create the directory");
    std::fs::write(root.join(os(DIR)).join("f.txt"), "x\n").expect("create the file in the directory");
    check(fx.rewindfs(&["turn", "-C", fx.path().to_str().expect("utf-8"), "--message-id", "m1"]), "turn m1");
    std::fs::write(root.join(os(FILE)), "two\n").expect("modify the file");
    std::fs::remove_dir_all(root.join(os(DIR))).expect("remove the directory");
}

#[test]
fn json_output_names_non_utf8_paths_losslessly() {
    let fx = MountFixture::new();
    setup(&fx);
    let mp = fx.path().as_os_str();
    let dir_file = join(&[DIR, b"f.txt"]);

    let v = json(cli(&fx, &[os(b"diff"), os(b"-C"), mp, os(b"--json"), os(b"m1")]), "diff --json");
    let got = changes(&v, "change");
    assert!(got.contains(&(FILE.to_vec(), "modified".into())), "diff --json lost the file's name: {v}");
    assert!(got.contains(&(dir_file.clone(), "deleted".into())), "diff --json lost the directory's name: {v}");
    // The string form is for UTF-8 names only: no U+FFFD stands in for bytes.
    assert!(!v.to_string().contains('\u{fffd}'), "a name was replaced lossily: {v}");
    let patch = v["changes"].as_array().expect("changes").iter().find_map(|c| c["patch"].as_str()).unwrap_or_default();
    assert!(patch.contains("--- \"a/bad\\377\\376.txt\""), "the patch header must quote the name: {patch}");

    let v =
        json(cli(&fx, &[os(b"rewind"), os(b"-C"), mp, os(b"--json"), os(b"--dry-run"), os(b"m1")]), "rewind --dry-run");
    let got = changes(&v, "change");
    assert!(got.contains(&(FILE.to_vec(), "modified".into())), "rewind --dry-run --json lost the file's name: {v}");
    assert!(got.contains(&(dir_file, "added".into())), "rewind --dry-run --json lost the directory's name: {v}");

    // Text output: quoted, each byte that is not UTF-8 as an octal escape.
    let out = check(cli(&fx, &[os(b"diff"), os(b"-C"), mp, os(b"--stat"), os(b"m1")]), "diff --stat");
    let text = stdout(&out);
    assert!(text.contains(" \"bad\\377\\376.txt\" | +1 -1 (modified)"), "diff --stat:\n{text}");
    assert!(text.contains(" \"d\\351j\\340/f.txt\" | +0 -1 (deleted)"), "diff --stat:\n{text}");
    let out = check(cli(&fx, &[os(b"rewind"), os(b"-C"), mp, os(b"--dry-run"), os(b"m1")]), "rewind --dry-run");
    let text = stdout(&out);
    assert!(text.contains("restore   \"bad\\377\\376.txt\""), "rewind --dry-run:\n{text}");
    assert!(text.contains("recreate  \"d\\351j\\340/f.txt\""), "rewind --dry-run:\n{text}");
}

#[test]
fn non_utf8_paths_are_accepted_as_arguments() {
    let fx = MountFixture::new();
    setup(&fx);
    let mp = fx.path().as_os_str();
    let file: PathBuf = fx.path().join(os(FILE));
    let dir: PathBuf = fx.path().join(os(DIR));

    let out = cli(&fx, &[os(b"history"), os(b"-C"), mp, file.as_os_str()]);
    let text = stdout(&check(out, "history of the file"));
    assert!(text.contains("turn 1 (message m1): modified"), "history of the file:\n{text}");
    let v = json(cli(&fx, &[os(b"history"), os(b"-C"), mp, os(b"--json"), file.as_os_str()]), "history --json");
    let turns: Vec<(i64, &str)> = v
        .as_array()
        .expect("history --json is an array")
        .iter()
        .map(|e| (e["checkpoint"].as_i64().unwrap_or(-1), e["change"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(turns, vec![(0, "added"), (1, "modified")], "{v}");
    let v =
        json(cli(&fx, &[os(b"diff"), os(b"-C"), mp, os(b"--json"), os(b"m1"), os(b"--"), dir.as_os_str()]), "diff DIR");
    assert_eq!(changes(&v, "change"), vec![(join(&[DIR, b"f.txt"]), "deleted".to_string())], "{v}");

    let out = cli(
        &fx,
        &[os(b"restore"), os(b"-C"), mp, os(b"--json"), os(b"m1"), os(b"--"), file.as_os_str(), dir.as_os_str()],
    );
    let v = json(out, "restore of the file and the directory");
    let got: Vec<Vec<u8>> = changes(&v, "action").into_iter().map(|(p, _)| p).collect();
    assert!(got.contains(&FILE.to_vec()) && got.contains(&DIR.to_vec()), "restore --json: {v}");
    assert_eq!(std::fs::read_to_string(&file).expect("the file is back"), "one\n");
    assert_eq!(std::fs::read_to_string(dir.join("f.txt")).expect("the directory is back"), "x\n");

    // What the text output prints can be given back through the shell:
    // `$'...'` reads the octal escapes as the same bytes.
    let out =
        run_with_timeout(fx.command().current_dir(fx.path()).args(["history", "--json"]).arg(os(FILE)), CHILD_TIMEOUT);
    let direct = json(out, "history by relative path");
    let mut bash = std::process::Command::new("bash");
    bash.env("REWINDFS_RUNTIME_DIR", &fx.run)
        .env("REWINDFS_HOME", fx.dir.path().join("home"))
        .current_dir(fx.path())
        .args(["-c", "\"$0\" history --json $'bad\\377\\376.txt'", common::bin()]);
    assert_eq!(json(run_with_timeout(&mut bash, CHILD_TIMEOUT), "history through bash $'...'"), direct);
}

#[test]
fn run_passes_non_utf8_arguments_to_the_command() {
    let fx = MountFixture::unmounted();
    let out = run_with_timeout(
        fx.command()
            .arg("run")
            .arg(&fx.ws)
            .arg("--store")
            .arg(&fx.store)
            .args(["--", "sh", "-c", "printf %s \"$1\" > \"$1\"", "sh"])
            .arg(os(FILE)),
        CHILD_TIMEOUT,
    );
    check(out, "run with a non-UTF-8 argument");
    assert_eq!(std::fs::read(fx.ws.join(os(FILE))).expect("the command made the file"), FILE);
}

#[test]
fn a_workspace_and_store_at_non_utf8_paths_are_reported_losslessly() {
    let mut fx = MountFixture::unmounted();
    fx.ws = fx.dir.path().join(os(b"ws\xff"));
    fx.store = fx.dir.path().join(os(b"store\xfe"));
    std::fs::create_dir(&fx.ws).expect("create the workspace");
    fx.mount(false, &[]);
    let e = fx.status_json();
    assert_eq!(decode(&e["workspace"]), fx.ws.as_os_str().as_bytes(), "{e}");
    assert_eq!(decode(&e["store"]), fx.store.as_os_str().as_bytes(), "{e}");
    let out = cli(&fx, &[os(b"turn"), os(b"-C"), fx.ws.as_os_str(), os(b"--json")]);
    assert_eq!(json(out, "turn -C WORKSPACE")["checkpoint"], 1);
    fx.unmount();
    // Offline, fsck finds the workspace from the path the store recorded:
    // a lossy record would name another directory and check no live tree.
    let out = cli(&fx, &[os(b"fsck"), os(b"--store"), fx.store.as_os_str(), os(b"--json")]);
    let report = json(out, "fsck --store STORE --json");
    let notes = report["notes"].to_string();
    assert!(!notes.contains("workspace is unknown"), "fsck did not find the non-UTF-8 workspace: {report}");
}
