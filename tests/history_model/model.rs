//! The in-memory model of the tree and the steps that change it. Objects
//! have identities, so hard links, descriptors and rewinds that bring an
//! object back are modelled; a checkpoint's snapshot is a clone.

use std::collections::BTreeMap;
use std::fmt;

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
    /// with the same target is left alone.
    pub fn restore(&mut self, k: &Model, path: &str, next_id: &mut u64) {
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
