//! The in-memory model of the tree and the steps that change it. Objects
//! have identities, so hard links, descriptors and rewinds that bring an
//! object back are modelled; a checkpoint's snapshot is a clone.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// The pool of names: small, so that renames over things and reuse of names are common.
pub const NAMES: [&str; 4] = ["a", "b", "c", "d"];
pub const MAX_DEPTH: usize = 3;
/// Descriptors held at once.
pub const SLOTS: usize = 2;

/// splitmix64: small, seedable, and the same on every platform.
#[derive(Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { (self.next() % n as u64) as usize }
    }
    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> Option<&'a T> {
        if v.is_empty() { None } else { Some(&v[self.below(v.len())]) }
    }
}

/// Text-like bytes (so `diff` counts lines), a function of the seed alone.
pub fn gen_bytes(seed: u64, len: usize) -> Vec<u8> {
    const WORDS: [&str; 8] = ["alpha", "beta", "gamma", "fn main() {", "}", "let y = 1;", "x", ""];
    let mut r = Rng(seed);
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        out.extend_from_slice(WORDS[r.below(WORDS.len())].as_bytes());
        out.push(if r.below(3) == 0 { b'\n' } else { b' ' });
    }
    out.truncate(len);
    out
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub kind: Kind,
    /// A file's bytes, a symlink's target.
    pub data: Vec<u8>,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub xattrs: BTreeMap<String, Vec<u8>>,
}

impl Node {
    pub fn new(kind: Kind, data: Vec<u8>, mode: u32) -> Node {
        Node { kind, data, mode, uid: 0, gid: 0, xattrs: BTreeMap::new() }
    }
}

/// What a tree shows at one path: compared field by field with what the
/// mount (or a view) shows.
#[derive(Clone, Debug, PartialEq)]
pub struct Seen {
    pub kind: Kind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub data: Vec<u8>,
    /// Link count of a non-directory (0 for directories: FUSE's is not checked).
    pub nlink: u64,
    /// For a non-directory with more links: the first path (in order) of the same object.
    pub link_of: Option<String>,
    pub xattrs: BTreeMap<String, Vec<u8>>,
}

pub type SeenTree = BTreeMap<String, Seen>;

/// Fills `link_of` from an object key per path (inode or node id).
pub fn link_groups(tree: &mut SeenTree, key: &BTreeMap<String, u64>) {
    let mut first: BTreeMap<u64, String> = BTreeMap::new();
    for (p, s) in tree.iter_mut() {
        if s.kind == Kind::Dir {
            continue;
        }
        let Some(k) = key.get(p) else { continue };
        let f = first.entry(*k).or_insert_with(|| p.clone());
        if s.nlink > 1 {
            s.link_of = Some(f.clone());
        }
    }
}

pub fn describe(s: &Seen) -> String {
    let what = match s.kind {
        Kind::Dir => "dir".to_string(),
        Kind::Symlink => format!("symlink -> {:?}", String::from_utf8_lossy(&s.data)),
        Kind::File => {
            format!("file {} bytes blake3 {}", s.data.len(), &blake3::hash(&s.data).to_hex()[..10])
        }
    };
    let xattrs: Vec<String> = s.xattrs.iter().map(|(k, v)| format!("{k}={}B", v.len())).collect();
    format!(
        "{what} mode {:o} owner {}:{} size {} nlink {}{} xattrs [{}]",
        s.mode,
        s.uid,
        s.gid,
        s.size,
        s.nlink,
        s.link_of.as_ref().map(|l| format!(" (same object as {l})")).unwrap_or_default(),
        xattrs.join(",")
    )
}

/// Differences between an expected and an actual tree, at most `max` lines.
pub fn tree_diff(want: &SeenTree, got: &SeenTree, max: usize) -> Vec<String> {
    let mut out = Vec::new();
    for (p, w) in want {
        match got.get(p) {
            None => out.push(format!("missing {p}: want {}", describe(w))),
            Some(g) if g != w => {
                out.push(format!("differs {p}:\n      want {}\n      got  {}", describe(w), describe(g)))
            }
            _ => {}
        }
    }
    for (p, g) in got {
        if !want.contains_key(p) {
            out.push(format!("extra {p}: {}", describe(g)));
        }
    }
    out.truncate(max);
    out
}

pub fn parent(p: &str) -> &str {
    p.rfind('/').map(|i| &p[..i]).unwrap_or("")
}

pub fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() { name.to_string() } else { format!("{dir}/{name}") }
}

/// `a` is `b` or below it.
pub fn within(a: &str, b: &str) -> bool {
    a == b || (a.starts_with(b) && a.as_bytes().get(b.len()) == Some(&b'/'))
}

#[derive(Clone, Debug, Default)]
pub struct Model {
    pub entries: BTreeMap<String, u64>,
    pub nodes: BTreeMap<u64, Node>,
}

impl Model {
    pub fn kind(&self, p: &str) -> Option<Kind> {
        if p.is_empty() {
            return Some(Kind::Dir);
        }
        self.entries.get(p).map(|id| self.nodes[id].kind)
    }
    pub fn node(&self, p: &str) -> Option<&Node> {
        self.entries.get(p).map(|id| &self.nodes[id])
    }
    pub fn node_mut(&mut self, p: &str) -> Option<&mut Node> {
        let id = *self.entries.get(p)?;
        self.nodes.get_mut(&id)
    }
    pub fn children(&self, p: &str) -> Vec<String> {
        self.entries.keys().filter(|k| !k.is_empty() && parent(k) == p && k.as_str() != p).cloned().collect()
    }
    pub fn paths(&self, f: impl Fn(Kind) -> bool) -> Vec<String> {
        self.entries.iter().filter(|(_, id)| f(self.nodes[id].kind)).map(|(p, _)| p.clone()).collect()
    }
    /// Removes `p` and everything below it (nodes are collected by `gc`).
    pub fn remove_subtree(&mut self, p: &str) {
        let gone: Vec<String> = self.entries.keys().filter(|k| within(k, p)).cloned().collect();
        for k in gone {
            self.entries.remove(&k);
        }
    }
    pub fn insert(&mut self, p: &str, node: Node, next_id: &mut u64) -> u64 {
        *next_id += 1;
        self.nodes.insert(*next_id, node);
        self.entries.insert(p.to_string(), *next_id);
        *next_id
    }
    /// Drops unreachable nodes; returns them (a descriptor may still hold one).
    pub fn gc(&mut self) -> Vec<(u64, Node)> {
        let live: std::collections::BTreeSet<u64> = self.entries.values().copied().collect();
        let dead: Vec<u64> = self.nodes.keys().filter(|id| !live.contains(id)).copied().collect();
        dead.into_iter().map(|id| (id, self.nodes.remove(&id).expect("listed"))).collect()
    }
    pub fn nlink(&self, id: u64) -> u64 {
        self.entries.values().filter(|v| **v == id).count() as u64
    }

    /// A model of a tree known only by what it showed (the half-rewound
    /// tree an interrupted rewind left): its `observe` gives `seen` back.
    pub fn of_seen(seen: &SeenTree, next_id: &mut u64) -> Model {
        let mut m = Model::default();
        for (p, s) in seen {
            // The first name of a linked object is its own `link_of`.
            if let Some(&id) = s.link_of.as_ref().filter(|f| *f != p).and_then(|f| m.entries.get(f)) {
                m.entries.insert(p.clone(), id);
                continue;
            }
            let node = Node {
                kind: s.kind,
                data: s.data.clone(),
                mode: s.mode,
                uid: s.uid,
                gid: s.gid,
                xattrs: s.xattrs.clone(),
            };
            m.insert(p, node, next_id);
        }
        m
    }

    /// What the tree shows.
    pub fn observe(&self) -> SeenTree {
        let mut t = SeenTree::new();
        for (p, id) in &self.entries {
            let n = &self.nodes[id];
            let seen = Seen {
                kind: n.kind,
                mode: if n.kind == Kind::Symlink { 0o777 } else { n.mode },
                uid: n.uid,
                gid: n.gid,
                size: n.data.len() as u64,
                data: n.data.clone(),
                nlink: if n.kind == Kind::Dir { 0 } else { self.nlink(*id) },
                link_of: None,
                xattrs: n.xattrs.clone(),
            };
            t.insert(p.clone(), seen);
        }
        link_groups(&mut t, &self.entries);
        t
    }

    /// `restore` of `path` from the snapshot `k`, as src/restore does it:
    /// parents that were directories then are made directories (missing
    /// ones, and ones that are now another kind of thing, with their
    /// recorded attributes); a path whose parent was not a directory then is
    /// removed; a file with other bytes is replaced by a new object with
    /// the checkpoint's bytes and attributes; a file with the same bytes
    /// keeps its object and gets the checkpoint's attributes; a symlink
    /// with the same target is left alone. Returns the nodes it left in
    /// no tree, dropped from the model (a descriptor may still hold one):
    /// kept, one would stand for an object the store no longer has.
    #[must_use = "a descriptor may still hold a node the restore replaced"]
    pub fn restore(&mut self, k: &Model, path: &str, next_id: &mut u64) -> Vec<(u64, Node)> {
        self.restore_entries(k, path, next_id);
        self.gc()
    }

    fn restore_entries(&mut self, k: &Model, path: &str, next_id: &mut u64) {
        let comps: Vec<&str> = path.split('/').collect();
        let mut cur = String::new();
        let mut recreated = Vec::new();
        for c in &comps[..comps.len() - 1] {
            cur = join(&cur, c);
            if k.kind(&cur) != Some(Kind::Dir) {
                self.restore_absent_path(&comps);
                return;
            }
            let existed = self.kind(&cur) == Some(Kind::Dir);
            let want = k.node(&cur).expect("a dir");
            self.ensure_dir(&cur, want, next_id);
            if !existed {
                recreated.push((cur.clone(), want.clone()));
            }
        }
        self.sync_entry(k, path, next_id);
        // Parents that did not exist as directories (missing, or another
        // kind of thing, replaced) get their recorded attributes.
        for (p, want) in recreated.into_iter().rev() {
            self.set_attrs(&p, &want);
        }
    }

    fn restore_absent_path(&mut self, comps: &[&str]) {
        let mut cur = String::new();
        for (i, c) in comps.iter().enumerate() {
            cur = join(&cur, c);
            match self.kind(&cur) {
                None => return,
                Some(kind) if i + 1 == comps.len() || kind != Kind::Dir => {
                    self.remove_subtree(&cur);
                    return;
                }
                _ => {}
            }
        }
    }

    fn ensure_dir(&mut self, p: &str, want: &Node, next_id: &mut u64) {
        if self.kind(p) == Some(Kind::Dir) {
            return;
        }
        self.remove_subtree(p);
        self.insert(p, Node::new(Kind::Dir, Vec::new(), want.mode), next_id);
    }

    fn sync_entry(&mut self, k: &Model, p: &str, next_id: &mut u64) {
        let Some(want) = k.node(p) else {
            self.remove_subtree(p);
            return;
        };
        let want = want.clone();
        match want.kind {
            Kind::Dir => {
                self.ensure_dir(p, &want, next_id);
                for c in self.children(p) {
                    if k.kind(&c).is_none() {
                        self.remove_subtree(&c);
                    }
                }
                for c in k.children(p) {
                    self.sync_entry(k, &c, next_id);
                }
                self.set_attrs(p, &want);
            }
            Kind::File => {
                if self.node(p).is_some_and(|n| n.kind == Kind::File && n.data == want.data) {
                    self.set_attrs(p, &want);
                } else {
                    self.remove_subtree(p);
                    self.insert(p, want, next_id);
                }
            }
            Kind::Symlink => {
                if !self.node(p).is_some_and(|n| n.kind == Kind::Symlink && n.data == want.data) {
                    self.remove_subtree(p);
                    self.insert(p, Node { xattrs: BTreeMap::new(), ..want }, next_id);
                }
            }
        }
    }

    fn set_attrs(&mut self, p: &str, want: &Node) {
        let n = self.node_mut(p).expect("exists");
        n.mode = want.mode;
        n.uid = want.uid;
        n.gid = want.gid;
        n.xattrs = want.xattrs.clone();
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flag {
    Plain,
    Exchange,
    NoReplace,
}

/// One step of a sequence. `Display` and `parse` give the one-line form a
/// failure is printed in and a regression test replays.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// open(O_CREAT|O_TRUNC) and write LEN bytes.
    Create {
        path: String,
        len: usize,
        seed: u64,
    },
    Write {
        path: String,
        off: u64,
        len: usize,
        seed: u64,
    },
    Append {
        path: String,
        len: usize,
        seed: u64,
    },
    Trunc {
        path: String,
        len: u64,
    },
    Rename {
        from: String,
        to: String,
        flag: Flag,
    },
    Link {
        from: String,
        to: String,
    },
    Unlink(String),
    Mkdir(String),
    Rmdir(String),
    RmRf(String),
    Symlink {
        target: String,
        path: String,
    },
    Chmod {
        path: String,
        mode: u32,
    },
    Chown {
        path: String,
        uid: u32,
        gid: u32,
    },
    Utime {
        path: String,
        secs: i64,
    },
    SetX {
        path: String,
        name: u8,
        len: usize,
        seed: u64,
    },
    RmX {
        path: String,
        name: u8,
    },
    /// Opens PATH read-write and holds the descriptor in the lowest free slot.
    Open(String),
    FdWrite {
        slot: usize,
        off: u64,
        len: usize,
        seed: u64,
    },
    Close(usize),
    Turn(Option<String>),
    Rewind(i64),
    /// Rewind to the safety checkpoint of the last rewind.
    Undo,
    Restore {
        cp: i64,
        path: String,
    },
    Remount,
    /// kill -9 of the daemon, then remount.
    Kill,
    /// kill -9 of the daemon during a rewind to `to`: at its `at`-th
    /// journal record (0: just after its result was sealed; after the
    /// rewind, if it has fewer records), then remount.
    KillRewind {
        to: i64,
        at: u64,
    },
    /// A crash during a restore of `path` from `cp`, at its `at`-th journal
    /// record (after it, if it has fewer), then an open (the in-process
    /// tier only).
    KillRestore {
        cp: i64,
        path: String,
        at: u64,
    },
    /// `gc --keep-count N` (the in-process tier only).
    Gc(u64),
    /// `forget K` (the in-process tier only).
    Forget(i64),
    /// `snapshot NAME [--at K]` (the in-process tier only).
    Snapshot(Option<i64>),
    /// `reset --confirm` (the in-process tier only).
    Reset,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Step::*;
        match self {
            Create { path, len, seed } => write!(f, "create {path} {len} {seed}"),
            Write { path, off, len, seed } => write!(f, "write {path} {off} {len} {seed}"),
            Append { path, len, seed } => write!(f, "append {path} {len} {seed}"),
            Trunc { path, len } => write!(f, "trunc {path} {len}"),
            Rename { from, to, flag } => {
                let v = match flag {
                    Flag::Plain => "mv",
                    Flag::Exchange => "mvx",
                    Flag::NoReplace => "mvn",
                };
                write!(f, "{v} {from} {to}")
            }
            Link { from, to } => write!(f, "link {from} {to}"),
            Unlink(p) => write!(f, "rm {p}"),
            Mkdir(p) => write!(f, "mkdir {p}"),
            Rmdir(p) => write!(f, "rmdir {p}"),
            RmRf(p) => write!(f, "rmrf {p}"),
            Symlink { target, path } => write!(f, "symlink {target} {path}"),
            Chmod { path, mode } => write!(f, "chmod {path} {mode:o}"),
            Chown { path, uid, gid } => write!(f, "chown {path} {uid} {gid}"),
            Utime { path, secs } => write!(f, "utime {path} {secs}"),
            SetX { path, name, len, seed } => write!(f, "setx {path} {name} {len} {seed}"),
            RmX { path, name } => write!(f, "rmx {path} {name}"),
            Open(p) => write!(f, "open {p}"),
            FdWrite { slot, off, len, seed } => write!(f, "fdwrite {slot} {off} {len} {seed}"),
            Close(s) => write!(f, "close {s}"),
            Turn(None) => write!(f, "turn"),
            Turn(Some(m)) => write!(f, "turn {m}"),
            Rewind(k) => write!(f, "rewind {k}"),
            Undo => write!(f, "undo"),
            Restore { cp, path } => write!(f, "restore {cp} {path}"),
            Remount => write!(f, "remount"),
            Kill => write!(f, "kill"),
            KillRewind { to, at } => write!(f, "killrewind {to} {at}"),
            KillRestore { cp, path, at } => write!(f, "killrestore {cp} {path} {at}"),
            Gc(keep) => write!(f, "gc {keep}"),
            Forget(k) => write!(f, "forget {k}"),
            Snapshot(None) => write!(f, "snapshot"),
            Snapshot(Some(k)) => write!(f, "snapshot {k}"),
            Reset => write!(f, "reset"),
        }
    }
}

impl Step {
    pub fn parse(line: &str) -> Result<Step, String> {
        let w: Vec<&str> = line.split_whitespace().collect();
        let bad = || format!("cannot parse step {line:?}");
        let s = |i: usize| w.get(i).map(|x| x.to_string()).ok_or_else(bad);
        let n = |i: usize| w.get(i).and_then(|x| x.parse::<u64>().ok()).ok_or_else(bad);
        let i = |i: usize| w.get(i).and_then(|x| x.parse::<i64>().ok()).ok_or_else(bad);
        use Step::*;
        let step = match *w.first().ok_or_else(bad)? {
            "create" => Create { path: s(1)?, len: n(2)? as usize, seed: n(3)? },
            "write" => Write { path: s(1)?, off: n(2)?, len: n(3)? as usize, seed: n(4)? },
            "append" => Append { path: s(1)?, len: n(2)? as usize, seed: n(3)? },
            "trunc" => Trunc { path: s(1)?, len: n(2)? },
            "mv" => Rename { from: s(1)?, to: s(2)?, flag: Flag::Plain },
            "mvx" => Rename { from: s(1)?, to: s(2)?, flag: Flag::Exchange },
            "mvn" => Rename { from: s(1)?, to: s(2)?, flag: Flag::NoReplace },
            "link" => Link { from: s(1)?, to: s(2)? },
            "rm" => Unlink(s(1)?),
            "mkdir" => Mkdir(s(1)?),
            "rmdir" => Rmdir(s(1)?),
            "rmrf" => RmRf(s(1)?),
            "symlink" => Symlink { target: s(1)?, path: s(2)? },
            "chmod" => Chmod { path: s(1)?, mode: u32::from_str_radix(&s(2)?, 8).map_err(|_| bad())? },
            "chown" => Chown { path: s(1)?, uid: n(2)? as u32, gid: n(3)? as u32 },
            "utime" => Utime { path: s(1)?, secs: i(2)? },
            "setx" => SetX { path: s(1)?, name: n(2)? as u8, len: n(3)? as usize, seed: n(4)? },
            "rmx" => RmX { path: s(1)?, name: n(2)? as u8 },
            "open" => Open(s(1)?),
            "fdwrite" => FdWrite { slot: n(1)? as usize, off: n(2)?, len: n(3)? as usize, seed: n(4)? },
            "close" => Close(n(1)? as usize),
            "turn" => Turn(w.get(1).map(|x| x.to_string())),
            "rewind" => Rewind(i(1)?),
            "undo" => Undo,
            "restore" => Restore { cp: i(1)?, path: s(2)? },
            "remount" => Remount,
            "kill" => Kill,
            "killrewind" => KillRewind { to: i(1)?, at: n(2)? },
            "killrestore" => KillRestore { cp: i(1)?, path: s(2)?, at: n(3)? },
            "gc" => Gc(n(1)?),
            "forget" => Forget(i(1)?),
            "snapshot" => Snapshot(w.get(1).map(|_| i(1)).transpose()?),
            "reset" => Reset,
            _ => return Err(bad()),
        };
        Ok(step)
    }

    pub fn is_history(&self) -> bool {
        matches!(
            self,
            Step::Turn(_)
                | Step::Rewind(_)
                | Step::Undo
                | Step::Restore { .. }
                | Step::Remount
                | Step::Kill
                | Step::KillRewind { .. }
                | Step::KillRestore { .. }
                | Step::Gc(_)
                | Step::Forget(_)
                | Step::Snapshot(_)
                | Step::Reset
        )
    }
}

/// What the model expects of a file-system step.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// Not valid in this state (a replayed or shrunk sequence): not run.
    Skip,
    Ok,
    Errno(i32),
}

impl Model {
    fn dir_ok(&self, p: &str) -> bool {
        !p.is_empty() && self.kind(parent(p)) == Some(Kind::Dir)
    }

    /// Applies a file-system step (not descriptors nor history) to the model.
    pub fn apply(&mut self, step: &Step, next_id: &mut u64) -> Verdict {
        use Step::*;
        match step {
            Create { path, len, seed } => {
                if !self.dir_ok(path) {
                    return Verdict::Skip;
                }
                let data = gen_bytes(*seed, *len);
                match self.kind(path) {
                    None => {
                        self.insert(path, Node::new(Kind::File, data, 0o644), next_id);
                    }
                    Some(Kind::File) => self.node_mut(path).expect("file").data = data,
                    _ => return Verdict::Skip,
                }
            }
            Write { path, off, len, seed } => {
                let Some(n) = self.node_mut(path).filter(|n| n.kind == Kind::File) else { return Verdict::Skip };
                write_at(&mut n.data, *off, &gen_bytes(*seed, *len));
            }
            Append { path, len, seed } => {
                let Some(n) = self.node_mut(path).filter(|n| n.kind == Kind::File) else { return Verdict::Skip };
                n.data.extend_from_slice(&gen_bytes(*seed, *len));
            }
            Trunc { path, len } => {
                let Some(n) = self.node_mut(path).filter(|n| n.kind == Kind::File) else { return Verdict::Skip };
                n.data.resize(*len as usize, 0);
            }
            Rename { from, to, flag } => return self.rename(from, to, *flag),
            Link { from, to } => {
                if self.kind(from) != Some(Kind::File) || !self.dir_ok(to) || self.kind(to).is_some() {
                    return Verdict::Skip;
                }
                let id = self.entries[from];
                self.entries.insert(to.clone(), id);
            }
            Unlink(p) => {
                if !matches!(self.kind(p), Some(Kind::File | Kind::Symlink)) || p.is_empty() {
                    return Verdict::Skip;
                }
                self.entries.remove(p);
            }
            Mkdir(p) => {
                if !self.dir_ok(p) || self.kind(p).is_some() {
                    return Verdict::Skip;
                }
                self.insert(p, Node::new(Kind::Dir, Vec::new(), 0o755), next_id);
            }
            Rmdir(p) => {
                if p.is_empty() || self.kind(p) != Some(Kind::Dir) || !self.children(p).is_empty() {
                    return Verdict::Skip;
                }
                self.entries.remove(p);
            }
            RmRf(p) => {
                if p.is_empty() || self.kind(p).is_none() {
                    return Verdict::Skip;
                }
                self.remove_subtree(p);
            }
            Symlink { target, path } => {
                if !self.dir_ok(path) || self.kind(path).is_some() {
                    return Verdict::Skip;
                }
                self.insert(path, Node::new(Kind::Symlink, target.as_bytes().to_vec(), 0o777), next_id);
            }
            Chmod { path, mode } => {
                let Some(n) = self.node_mut(path).filter(|n| n.kind != Kind::Symlink) else { return Verdict::Skip };
                n.mode = *mode;
            }
            Chown { path, uid, gid } => {
                let Some(n) = self.node_mut(path).filter(|n| n.kind != Kind::Symlink) else { return Verdict::Skip };
                n.uid = *uid;
                n.gid = *gid;
            }
            Utime { path, .. } => {
                if self.kind(path).is_none() || path.is_empty() {
                    return Verdict::Skip;
                }
            }
            SetX { path, name, len, seed } => {
                let Some(n) = self.node_mut(path).filter(|n| n.kind != Kind::Symlink) else { return Verdict::Skip };
                n.xattrs.insert(xattr_name(*name), gen_bytes(*seed, *len));
            }
            RmX { path, name } => {
                let Some(n) = self.node_mut(path).filter(|n| n.kind != Kind::Symlink) else { return Verdict::Skip };
                if n.xattrs.remove(&xattr_name(*name)).is_none() {
                    return Verdict::Errno(libc::ENODATA);
                }
            }
            _ => return Verdict::Skip,
        }
        Verdict::Ok
    }

    fn rename(&mut self, from: &str, to: &str, flag: Flag) -> Verdict {
        let (Some(fk), true) = (self.kind(from), self.dir_ok(to)) else { return Verdict::Skip };
        if from.is_empty() || from == to || within(to, from) {
            return Verdict::Skip;
        }
        let tk = self.kind(to);
        match flag {
            Flag::NoReplace if tk.is_some() => return Verdict::Errno(libc::EEXIST),
            Flag::Exchange => {
                if tk.is_none() || within(from, to) {
                    return Verdict::Skip;
                }
                let a = self.take_subtree(from);
                let b = self.take_subtree(to);
                self.put_subtree(to, a);
                self.put_subtree(from, b);
                return Verdict::Ok;
            }
            _ => {}
        }
        match (fk, tk) {
            (_, None) => {}
            (Kind::Dir, Some(Kind::Dir)) if self.children(to).is_empty() => {}
            (Kind::File | Kind::Symlink, Some(Kind::File | Kind::Symlink)) => {
                if self.entries[from] == self.entries[to] {
                    // The same object under both names: rename does nothing.
                    return Verdict::Ok;
                }
            }
            _ => return Verdict::Skip,
        }
        self.remove_subtree(to);
        let moved = self.take_subtree(from);
        self.put_subtree(to, moved);
        Verdict::Ok
    }

    fn take_subtree(&mut self, p: &str) -> Vec<(String, u64)> {
        let keys: Vec<String> = self.entries.keys().filter(|k| within(k, p)).cloned().collect();
        keys.into_iter().map(|k| (k[p.len()..].to_string(), self.entries.remove(&k).expect("listed"))).collect()
    }

    fn put_subtree(&mut self, p: &str, items: Vec<(String, u64)>) {
        for (rest, id) in items {
            self.entries.insert(format!("{p}{rest}"), id);
        }
    }
}

pub fn xattr_name(n: u8) -> String {
    format!("user.x{n}")
}

pub fn write_at(data: &mut Vec<u8>, off: u64, bytes: &[u8]) {
    let off = off as usize;
    if bytes.is_empty() {
        return;
    }
    if data.len() < off + bytes.len() {
        data.resize(off + bytes.len(), 0);
    }
    data[off..off + bytes.len()].copy_from_slice(bytes);
}

/// A step the generator picks for the state (mostly valid ones): the
/// model, the checkpoints' snapshots, the sizes of the objects the
/// descriptor slots hold; `kill` makes the step of the last kind (a crash).
pub fn gen_step(
    rng: &mut Rng,
    m: &Model,
    snaps: &BTreeMap<i64, Model>,
    fd_sizes: &[usize],
    turn_ids: &mut u64,
    kill: impl FnOnce(&Rng) -> Step,
) -> Step {
    const WEIGHTS: [(u8, usize); 27] = [
        (0, 8),   // create
        (1, 8),   // write
        (2, 5),   // append
        (3, 4),   // trunc
        (4, 8),   // mv
        (5, 2),   // mvx
        (6, 2),   // mvn
        (7, 4),   // link
        (8, 5),   // rm
        (9, 7),   // mkdir
        (10, 2),  // rmdir
        (11, 3),  // rmrf
        (12, 3),  // symlink
        (13, 3),  // chmod
        (14, 2),  // chown
        (15, 1),  // utime
        (16, 3),  // setx
        (17, 1),  // rmx
        (18, 2),  // open
        (19, 3),  // fdwrite
        (20, 1),  // close
        (21, 12), // turn
        (22, 4),  // rewind
        (23, 2),  // undo
        (24, 3),  // restore
        (25, 1),  // remount
        (26, 1),  // kill
    ];
    let total: usize = WEIGHTS.iter().map(|w| w.1).sum();
    let mut x = rng.below(total);
    let mut op = 0;
    for (o, w) in WEIGHTS {
        if x < w {
            op = o;
            break;
        }
        x -= w;
    }
    let files = m.paths(|k| k == Kind::File);
    let any = m.paths(|_| true);
    let attr_able = m.paths(|k| k != Kind::Symlink);
    let file_or = |rng: &mut Rng| rng.pick(&files).cloned().unwrap_or_else(|| "a".into());
    let any_or = |rng: &mut Rng| rng.pick(&any).cloned().unwrap_or_else(|| "a".into());
    let seed = rng.next() % 100_000;
    let len = |rng: &mut Rng| if rng.below(10) == 0 { 20_000 + rng.below(80_000) } else { rng.below(300) };
    use Step::*;
    match op {
        0 => {
            let path = if rng.below(3) == 0 { file_or(rng) } else { new_path(m, rng) };
            Create { path, len: len(rng), seed }
        }
        1 => {
            let path = file_or(rng);
            let size = m.node(&path).map(|n| n.data.len()).unwrap_or(0);
            Write { path, off: rng.below(size + 100) as u64, len: 1 + rng.below(400), seed }
        }
        2 => Append { path: file_or(rng), len: 1 + rng.below(200), seed },
        3 => {
            let path = file_or(rng);
            let size = m.node(&path).map(|n| n.data.len()).unwrap_or(0);
            Trunc { path, len: rng.below(size + 3000) as u64 }
        }
        4..=6 => {
            let from = any_or(rng);
            let to = if op == 5 || rng.below(4) == 0 { any_or(rng) } else { new_path(m, rng) };
            let flag = [Flag::Plain, Flag::Exchange, Flag::NoReplace][op as usize - 4];
            Rename { from, to, flag }
        }
        7 => Link { from: file_or(rng), to: new_path(m, rng) },
        8 => Unlink(rng.pick(&m.paths(|k| k != Kind::Dir)).cloned().unwrap_or_else(|| "a".into())),
        9 => Mkdir(new_path(m, rng)),
        10 => {
            let empty: Vec<String> =
                m.paths(|k| k == Kind::Dir).into_iter().filter(|d| m.children(d).is_empty()).collect();
            Rmdir(rng.pick(&empty).cloned().unwrap_or_else(|| "b".into()))
        }
        11 => RmRf(any_or(rng)),
        12 => {
            let target = match rng.below(4) {
                0 => any_or(rng),
                1 => format!("../{}", NAMES[rng.below(4)]),
                2 => "nowhere/x".to_string(),
                _ => "/nonexistent-rewindfs-target".to_string(),
            };
            Symlink { target, path: new_path(m, rng) }
        }
        13 => {
            let path = rng.pick(&attr_able).cloned().unwrap_or_else(|| "a".into());
            let modes: &[u32] = if m.kind(&path) == Some(Kind::Dir) {
                &[0o755, 0o700, 0o750, 0o555]
            } else {
                &[0o644, 0o600, 0o755, 0o444, 0o640]
            };
            Chmod { path, mode: *rng.pick(modes).expect("modes") }
        }
        14 => Chown {
            path: rng.pick(&attr_able).cloned().unwrap_or_else(|| "a".into()),
            uid: [0, 1000, 1234][rng.below(3)],
            gid: [0, 1000, 4321][rng.below(3)],
        },
        15 => Utime { path: any_or(rng), secs: 1_000_000_000 + rng.below(900_000_000) as i64 },
        16 => SetX {
            path: rng.pick(&attr_able).cloned().unwrap_or_else(|| "a".into()),
            name: rng.below(3) as u8,
            len: rng.below(40),
            seed,
        },
        17 => RmX { path: rng.pick(&attr_able).cloned().unwrap_or_else(|| "a".into()), name: rng.below(3) as u8 },
        18 => Open(file_or(rng)),
        19 => {
            let slot = rng.below(SLOTS);
            let size = fd_sizes.get(slot).copied().unwrap_or(0);
            FdWrite { slot, off: rng.below(size + 50) as u64, len: 1 + rng.below(300), seed }
        }
        20 => Close(rng.below(SLOTS)),
        21 => {
            if rng.below(10) < 7 {
                *turn_ids += 1;
                Turn(Some(format!("m{turn_ids}")))
            } else {
                Turn(None)
            }
        }
        22 => {
            let cps: Vec<i64> = snaps.keys().copied().collect();
            Rewind(*rng.pick(&cps).expect("checkpoint 0"))
        }
        23 => Undo,
        24 => {
            let cps: Vec<i64> = snaps.keys().copied().collect();
            let cp = *rng.pick(&cps).expect("checkpoint 0");
            let then: Vec<String> = snaps[&cp].entries.keys().cloned().collect();
            let path = match rng.below(3) {
                0 => any_or(rng),
                1 => rng.pick(&then).cloned().unwrap_or_else(|| "a".into()),
                _ => new_path(m, rng),
            };
            Restore { cp, path }
        }
        25 => Remount,
        _ => kill(rng),
    }
}

/// A path in an existing directory (not too deep), with a name from the
/// small pool, so that names collide often.
fn new_path(m: &Model, rng: &mut Rng) -> String {
    let mut dirs = vec![String::new()];
    dirs.extend(m.paths(|k| k == Kind::Dir).into_iter().filter(|d| d.split('/').count() < MAX_DEPTH));
    let dir = rng.pick(&dirs).cloned().unwrap_or_default();
    join(&dir, NAMES[rng.below(NAMES.len())])
}

/// As src/report's `same_state`: kind, mode, owner, target and content.
pub fn same_state(a: &Seen, b: &Seen) -> bool {
    a.kind == b.kind && a.mode == b.mode && a.uid == b.uid && a.gid == b.gid && a.data == b.data
}

fn is_binary(data: &[u8]) -> bool {
    data.iter().take(8000).any(|b| *b == 0) || std::str::from_utf8(data).is_err()
}

/// (path, change, lines added, lines removed, binary)
pub type Change = (String, String, u64, u64, bool);

/// What `diff A B` must list: every non-directory path added, deleted or
/// changed, with line counts as `diff` computes them.
pub fn expected_diff(a: &Model, b: &Model) -> BTreeSet<Change> {
    let nondir =
        |t: SeenTree| -> BTreeMap<String, Seen> { t.into_iter().filter(|(_, s)| s.kind != Kind::Dir).collect() };
    let (ta, tb) = (nondir(a.observe()), nondir(b.observe()));
    let mut out = BTreeSet::new();
    let paths: BTreeSet<&String> = ta.keys().chain(tb.keys()).collect();
    for p in paths {
        let (x, y) = (ta.get(p), tb.get(p));
        let change = match (x, y) {
            (None, Some(_)) => "added",
            (Some(_), None) => "deleted",
            (Some(x), Some(y)) if !same_state(x, y) => "modified",
            _ => continue,
        };
        let old = x.map(|s| s.data.as_slice()).unwrap_or(&[]);
        let new = y.map(|s| s.data.as_slice()).unwrap_or(&[]);
        let (mut add, mut del, binary) = (0, 0, is_binary(old) || is_binary(new));
        if !binary {
            let (o, n) = (String::from_utf8_lossy(old), String::from_utf8_lossy(new));
            let diff = similar::TextDiff::from_lines(o.as_ref(), n.as_ref());
            for op in diff.ops() {
                for c in diff.iter_changes(op) {
                    match c.tag() {
                        similar::ChangeTag::Insert => add += 1,
                        similar::ChangeTag::Delete => del += 1,
                        similar::ChangeTag::Equal => {}
                    }
                }
            }
        }
        out.insert((p.clone(), change.to_string(), add, del, binary));
    }
    out
}

/// How a `log --json` row's statistics differ from the model's diff of
/// its turn, if they do.
pub fn log_row_mismatch(row: &serde_json::Value, d: &BTreeSet<Change>) -> Option<String> {
    let count = |k: &str| d.iter().filter(|x| x.1 == k).count() as u64;
    let want =
        [count("added"), count("modified"), count("deleted"), d.iter().map(|x| x.2).sum(), d.iter().map(|x| x.3).sum()];
    let keys = ["files_added", "files_modified", "files_deleted", "lines_added", "lines_removed"];
    let got: Vec<u64> = keys.iter().map(|k| row[k].as_u64().unwrap_or(u64::MAX)).collect();
    (got != want).then(|| format!("{keys:?} want {want:?}, got {got:?}"))
}

pub fn parse_changes(v: &serde_json::Value) -> BTreeSet<Change> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    (
                        c["path"].as_str().unwrap_or("?").to_string(),
                        c["change"].as_str().unwrap_or("?").to_string(),
                        c["lines_added"].as_u64().unwrap_or(u64::MAX),
                        c["lines_removed"].as_u64().unwrap_or(u64::MAX),
                        c["binary"].as_bool().unwrap_or(false),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A sequence as a regression test replays it.
pub fn listing(steps: &[Step]) -> String {
    let quoted: Vec<String> = steps.iter().map(|s| format!("    \"{s}\",")).collect();
    format!("replay(&[\n{}\n]);", quoted.join("\n"))
}

/// Delta debugging over the step list: drops chunks, then single steps,
/// while `run` (a replay of a candidate on a fresh workspace) still fails
/// with the same kind; stops at `budget`. Returns the shortest list, its
/// failure (kind, message; None if it did not fail again) and the replays.
pub fn shrink(
    steps: Vec<Step>,
    kind: &'static str,
    budget: std::time::Duration,
    mut run: impl FnMut(&[Step]) -> Option<(&'static str, String)>,
) -> (Vec<Step>, Option<(&'static str, String)>, usize) {
    let started = std::time::Instant::now();
    let mut cur = steps;
    let mut last = run(&cur);
    let mut runs = 1;
    let mut parts = 2usize;
    while cur.len() > 1 && started.elapsed() < budget {
        let chunk = cur.len().div_ceil(parts);
        let mut reduced = false;
        let tries = parts;
        for i in 0..tries {
            if started.elapsed() >= budget {
                break;
            }
            let (lo, hi) = (i * chunk, ((i + 1) * chunk).min(cur.len()));
            if lo >= hi {
                continue;
            }
            let cand: Vec<Step> = cur[..lo].iter().chain(&cur[hi..]).cloned().collect();
            runs += 1;
            if let Some(f) = run(&cand).filter(|f| f.0 == kind) {
                cur = cand;
                last = Some(f);
                parts = (parts - 1).max(2);
                reduced = true;
                break;
            }
        }
        if !reduced {
            if parts >= cur.len() {
                break;
            }
            parts = (parts * 2).min(cur.len());
        }
    }
    (cur, last, runs)
}

/// What `history PATH` must list: the checkpoints whose turn (to the next
/// checkpoint, or to the live tree `live`) changed PATH, and how.
pub fn expected_history(snaps: &BTreeMap<i64, Model>, live: &Model, p: &str) -> Vec<(i64, String)> {
    let mut want = Vec::new();
    let cps: Vec<i64> = snaps.keys().copied().collect();
    for (i, c) in cps.iter().enumerate() {
        let next = cps.get(i + 1).map(|n| &snaps[n]).unwrap_or(live);
        let (a, b) = (snaps[c].observe().remove(p), next.observe().remove(p));
        let change = match (&a, &b) {
            (None, Some(_)) => "added",
            (Some(_), None) => "deleted",
            (Some(x), Some(y)) if !same_state(x, y) => "modified",
            _ => continue,
        };
        want.push((*c, change.to_string()));
    }
    want
}

/// How a `history --json` answer differs from [`expected_history`], if it does.
pub fn history_mismatch(v: &serde_json::Value, want: &[(i64, String)]) -> Option<String> {
    let got: Vec<(i64, String)> = v
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| (e["checkpoint"].as_i64().unwrap_or(-1), e["change"].as_str().unwrap_or("?").to_string()))
                .collect()
        })
        .unwrap_or_default();
    (got != want).then(|| format!("want {want:?}, got {got:?}"))
}

/// How the changes of a `diff --json` answer differ from the model's diff, if they do.
pub fn diff_mismatch(want: &BTreeSet<Change>, changes: &serde_json::Value) -> Option<String> {
    let got = parse_changes(changes);
    if *want == got {
        return None;
    }
    let missing: Vec<_> = want.difference(&got).collect();
    let extra: Vec<_> = got.difference(want).collect();
    Some(format!("missing (path, change, +, -, binary) {missing:?}; unexpected {extra:?}"))
}

/// How `log --json` rows differ from the checkpoints made (`snaps`), and,
/// with `stats`, each turn's statistics from the model's diff of its
/// checkpoint to the next (or to the live tree): the kind and what.
pub fn log_mismatch(
    rows: &[serde_json::Value],
    snaps: &BTreeMap<i64, Model>,
    live: &Model,
    stats: bool,
) -> Option<(&'static str, String)> {
    let listed: Vec<i64> = rows.iter().filter_map(|r| r["checkpoint"].as_i64()).collect();
    let known: Vec<i64> = snaps.keys().copied().collect();
    if listed != known {
        return Some(("checkpoints", format!("log lists checkpoints {listed:?}, the test made {known:?}")));
    }
    if !stats {
        return None;
    }
    for (i, row) in rows.iter().enumerate() {
        let c = known[i];
        let next = known.get(i + 1).map(|n| &snaps[n]).unwrap_or(live);
        if let Some(wrong) = log_row_mismatch(row, &expected_diff(&snaps[&c], next)) {
            return Some(("log", format!("log row {c}: {wrong}")));
        }
    }
    None
}

/// The steps of a printed sequence (`replay(&[...])`, or steps separated
/// by `;` or newlines; quotes and commas allowed).
pub fn replay_lines(list: &str) -> Vec<String> {
    list.split([';', '\n'])
        .map(|l| l.trim().trim_end_matches(',').trim_matches('"').to_string())
        .filter(|l| !l.is_empty() && !l.starts_with("replay") && !l.starts_with(']'))
        .collect()
}

/// After a rewind from `pre` (the model is the checkpoint's tree now): a
/// held descriptor keeps its object, which is in the tree if the rewind
/// kept (or brought back) that inode, else moved away. `held` lists the
/// objects the descriptors hold, in slot order; `attached(i, path)` says
/// whether the `i`-th one's inode is the one at `path` now. Detached
/// objects go to `orphans` with their bytes before the rewind.
pub fn reattach(
    model: &mut Model,
    pre: &Model,
    orphans: &mut BTreeMap<u64, Node>,
    held: &[u64],
    next_id: &mut u64,
    mut attached: impl FnMut(usize, &str) -> Result<bool, String>,
) -> Result<(), String> {
    // Taken before any slot changes them: two descriptors may hold one object.
    let before: BTreeMap<u64, Node> =
        held.iter().map(|x| (*x, pre.nodes.get(x).or_else(|| orphans.get(x)).cloned().expect("held"))).collect();
    for (i, &x) in held.iter().enumerate() {
        let here = model.entries.iter().find(|(_, id)| **id == x).map(|(p, _)| p.clone());
        let on = match &here {
            Some(p) => attached(i, p)?,
            None => false,
        };
        if on {
            orphans.remove(&x);
            continue;
        }
        if here.is_some() {
            // Another inode now stands for the object in the tree: it gets
            // a new identity, the descriptor keeps the old one (a later
            // rewind may bring that inode back).
            *next_id += 1;
            let node = model.nodes.remove(&x).expect("in the tree");
            model.nodes.insert(*next_id, node);
            model.entries.values_mut().filter(|id| **id == x).for_each(|id| *id = *next_id);
        }
        orphans.insert(x, before[&x].clone());
    }
    let held: std::collections::BTreeSet<u64> = held.iter().copied().collect();
    orphans.retain(|id, _| held.contains(id));
    Ok(())
}

/// How a descriptor's reads differ from its object's bytes, if they do.
pub fn fd_mismatch(slot: usize, size: u64, got: &[u8], want: &[u8]) -> Option<String> {
    (size != want.len() as u64 || got != want).then(|| {
        format!(
            "descriptor {slot}: size {size}, reads {} bytes (blake3 {}); model: {} bytes (blake3 {})",
            got.len(),
            &blake3::hash(got).to_hex()[..10],
            want.len(),
            &blake3::hash(want).to_hex()[..10]
        )
    })
}

/// The seeds a run takes from its environment, `PREFIX_*`: `_SEED=N` that
/// one alone; else `fixed` (unless `_FIXED=0`) and `_SEQUENCES=N` random
/// ones (default `random`), derived from `_BASE_SEED` if set, else from
/// the clock. The random ones are written straight to stderr, not through
/// the test's captured output: a run that is aborted still says how to
/// replay them.
pub fn seeds_from_env(prefix: &str, fixed: impl IntoIterator<Item = u64>, random: u64) -> Vec<u64> {
    let var = |name: &str| std::env::var(format!("{prefix}_{name}")).ok();
    let num = |name: &str| var(name).and_then(|s| s.parse::<u64>().ok());
    if let Some(s) = num("SEED") {
        return vec![s];
    }
    let mut seeds: Vec<u64> = Vec::new();
    if var("FIXED").is_none_or(|v| v != "0") {
        seeds.extend(fixed);
    }
    let base = num("BASE_SEED").unwrap_or_else(|| {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        now as u64 ^ u64::from(std::process::id()) << 32
    });
    let random: Vec<u64> =
        (0..num("SEQUENCES").unwrap_or(random)).map(|i| Rng(base.wrapping_add(i)).next() % 1_000_000_000).collect();
    use std::io::Write;
    let name = prefix.to_lowercase();
    if random.len() <= 100 {
        let _ = writeln!(std::io::stderr(), "{name}: random seeds {random:?} (replay one: {prefix}_SEED=N)");
    } else {
        let _ = writeln!(
            std::io::stderr(),
            "{name}: {} random seeds from {prefix}_BASE_SEED={base} (a failing one is printed; replay it with \
             {prefix}_SEED=N)",
            random.len()
        );
    }
    seeds.extend(random);
    seeds
}
