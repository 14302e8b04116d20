//! Fixture for the journal tests: a workspace, a mountpoint and a store in
//! a temp dir; the CLI under a timeout; plain-copy snapshots of the tree;
//! and the tree at a checkpoint rebuilt through the library (after
//! unmount), to compare byte for byte.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use rewindfs::journal::Journal;
use rewindfs::view::{Node, TreeView};
use rewindfs::workspace::LiveTree;

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

/// Runs a command under `timeout`, so a hung mount fails the test instead
/// of hanging it.
pub fn run_timeout(secs: u32, program: &str, args: &[&OsStr], dir: Option<&Path>, env: &[(&str, &OsStr)]) -> Output {
    let mut c = Command::new("timeout");
    c.arg("-k").arg("5").arg(secs.to_string()).arg(program).args(args);
    if let Some(d) = dir {
        c.current_dir(d);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.stdin(Stdio::null());
    c.output().unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A workspace, mountpoint and store in one temp dir.
pub struct Fixture {
    pub tmp: tempfile::TempDir,
    pub ws: PathBuf,
    pub mnt: PathBuf,
    pub store: PathBuf,
    pub run: PathBuf,
    pub copies: PathBuf,
    pub mounted: bool,
}

impl Fixture {
    pub fn new() -> Fixture {
        assert!(
            Path::new("/dev/fuse").exists(),
            "/dev/fuse is missing: these tests mount a FUSE filesystem and cannot run here"
        );
        let tmp = tempfile::Builder::new().prefix("rwfs-journal-").tempdir().unwrap();
        let p = tmp.path().to_path_buf();
        let f = Fixture {
            ws: p.join("ws"),
            mnt: p.join("mnt"),
            store: p.join("store"),
            run: p.join("run"),
            copies: p.join("copies"),
            tmp,
            mounted: false,
        };
        for d in [&f.ws, &f.mnt, &f.run, &f.copies] {
            std::fs::create_dir_all(d).unwrap();
        }
        f
    }

    pub fn cli_raw(&self, args: &[&str]) -> Output {
        let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        run_timeout(300, BIN, &args, Some(self.tmp.path()), &[("REWINDFS_RUNTIME_DIR", self.run.as_os_str())])
    }

    /// Runs the CLI and asserts success; returns stdout.
    pub fn cli(&self, args: &[&str]) -> String {
        let o = self.cli_raw(args);
        assert!(o.status.success(), "rewindfs {args:?} failed:\n{}", show(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Runs a CLI command against this mount with `--json`.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mnt = self.mnt.to_str().unwrap().to_string();
        let mut full: Vec<&str> = vec![args[0], "-C", &mnt, "--json"];
        full.extend_from_slice(&args[1..]);
        let out = self.cli(&full);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("rewindfs {full:?}: bad JSON ({e}): {out}"))
    }

    pub fn mount(&mut self) {
        let (ws, mnt, store) = (
            self.ws.to_str().unwrap().to_string(),
            self.mnt.to_str().unwrap().to_string(),
            self.store.to_str().unwrap().to_string(),
        );
        self.cli(&["mount", &ws, &mnt, "--store", &store, "--auto-turn", "0"]);
        self.mounted = true;
    }

    pub fn unmount(&mut self) {
        let mnt = self.mnt.to_str().unwrap().to_string();
        self.cli(&["unmount", &mnt]);
        self.mounted = false;
    }

    /// The daemon's pid.
    pub fn daemon_pid(&self) -> i32 {
        let v = self.json(&["status"]);
        let v = if v.is_array() { v[0].clone() } else { v };
        v["pid"].as_i64().unwrap_or_else(|| panic!("no pid in status: {v}")) as i32
    }

    /// Seals a checkpoint; returns its number.
    pub fn turn(&self, message_id: &str) -> i64 {
        let v = self.json(&[
            "turn",
            "--message-id",
            message_id,
            "--session",
            "s1",
            "--label",
            &format!("label {message_id}"),
        ]);
        v["checkpoint"].as_i64().unwrap_or_else(|| panic!("no checkpoint in {v}"))
    }

    /// Runs a shell script inside the mount (cwd = mount root).
    pub fn sh(&self, script: &str) -> String {
        let o = run_timeout(300, "sh", &[OsStr::new("-ec"), OsStr::new(script)], Some(&self.mnt), &[]);
        assert!(o.status.success(), "script failed: {script}\n{}", show(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// `cp -a` of the mount into copies/<name>; returns the copy read back.
    pub fn snapshot(&self, name: &str) -> Tree {
        let dst = self.copies.join(name);
        let o = run_timeout(300, "cp", &[OsStr::new("-a"), self.mnt.join(".").as_os_str(), dst.as_os_str()], None, &[]);
        assert!(o.status.success(), "cp -a of the mount failed: {}", show(&o));
        read_tree(&dst)
    }

    /// Runs SQL against the store's metadata with the sqlite3 tool;
    /// returns the first column of the first row.
    pub fn sql(&self, query: &str) -> String {
        let db = self.store.join("meta.sqlite");
        let o = run_timeout(60, "sqlite3", &[db.as_os_str(), OsStr::new(query)], None, &[]);
        assert!(o.status.success(), "sqlite3 {query}: {}", show(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    pub fn sql_i64(&self, query: &str) -> i64 {
        let s = self.sql(query);
        s.parse().unwrap_or_else(|_| panic!("{query}: not a number: {s:?}"))
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if self.mounted {
            let mnt = self.mnt.to_str().unwrap().to_string();
            let o = self.cli_raw(&["unmount", &mnt]);
            if !o.status.success() {
                let _ = run_timeout(30, "umount", &[OsStr::new("-l"), self.mnt.as_os_str()], None, &[]);
            }
        }
    }
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
        let tree =
            LiveTree::new(ws, Some(journal.clone())).unwrap_or_else(|e| panic!("open workspace {}: {e}", ws.display()));
        Offline { journal, tree }
    }

    /// The tree at `checkpoint`, rebuilt from the journal and the live
    /// workspace (what a view of that checkpoint would show).
    pub fn tree_at(&self, checkpoint: i64) -> Result<Tree, String> {
        let view = TreeView::at(&self.tree, &self.journal, checkpoint);
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
