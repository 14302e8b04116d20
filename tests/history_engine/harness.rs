//! Runs the model test's steps on the core in process: a `Workspace` over a
//! backing directory and a store, driven through the same `LiveTree` calls
//! the FUSE adapter makes (by inode number), and the same `Workspace`
//! methods the control socket dispatches to. Checks the live tree, every
//! checkpoint's view (through the `Browser` a `show` mount serves), `diff`,
//! `history`, `log` and `fsck` against the model.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rewindfs::engine::replies::RewindReply;
use rewindfs::engine::{Options, Workspace};
use rewindfs::journal::TurnInfo;
use rewindfs::store::{ChunkStore, FaultyStore, MemoryStore};
use rewindfs::view::browse::Browser;
use rewindfs::workspace::{Caller, Fh, Ino, Kind as LiveKind, LiveTree, OpenFile, Opener, SetAttr, SetTime};
use rewindfs::world::Held;

use super::model::*;

/// Why a sequence failed: `kind` groups failures for shrinking.
#[derive(Clone, Debug)]
pub struct Failure {
    pub kind: &'static str,
    pub msg: String,
}

pub type Res<T> = Result<T, Failure>;

pub fn fail<T>(kind: &'static str, msg: impl Into<String>) -> Res<T> {
    Err(Failure { kind, msg: msg.into() })
}

/// Where the chunks are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The store directory's pack files.
    Pack,
    /// An in-memory store, kept across a simulated crash.
    Memory,
    /// The fault-injecting store around an in-memory one: a rewind is also
    /// tried with reads failing (it must refuse whole, or not need them).
    Faulty,
}

impl Backend {
    /// As HISTORY_ENGINE_BACKEND names it.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Pack => "pack",
            Backend::Memory => "memory",
            Backend::Faulty => "faulty",
        }
    }
}

const CALLER: Caller = Caller { uid: 0, gid: 0, pid: 1 };
/// Bytes read per call, as the kernel asks.
const READ_SIZE: u32 = 128 * 1024;

struct HeldFd {
    fh: Fh,
    file: Arc<OpenFile>,
    node: u64,
}

pub struct Runner {
    _dir: tempfile::TempDir,
    ws_path: PathBuf,
    store_path: PathBuf,
    chunks: Option<Arc<dyn ChunkStore>>,
    faulty: Option<Arc<FaultyStore<MemoryStore>>>,
    ws: Option<Workspace>,
    pub model: Model,
    pub snaps: BTreeMap<i64, Model>,
    next_id: u64,
    fds: Vec<Option<HeldFd>>,
    orphans: BTreeMap<u64, Node>,
    last_safety: Option<i64>,
    turn_ids: u64,
    snapshot_names: u64,
    /// Checkpoints named by a snapshot (a checkpoint has one name).
    named: BTreeSet<i64>,
    checks: u64,
    /// The newest checkpoint number sealed (forgotten ones included).
    last_sealed: i64,
    new_cps: Vec<i64>,
    /// Reads of sealed checkpoints made while a rewind ran.
    pub racing_reads: u64,
    /// How many times each kind of event happened (history steps, crashes
    /// by where they landed), for the summary.
    pub events: BTreeMap<&'static str, u64>,
}

static OPENER: std::sync::OnceLock<Opener> = std::sync::OnceLock::new();

/// How the workspaces open their objects, chosen by `choose_opener`.
pub fn opener() -> Opener {
    *OPENER.get().expect("the opener is chosen before any workspace opens")
}

/// Chooses how every workspace of this run opens objects by handle:
/// HISTORY_ENGINE_OPENER=handle (`open_by_handle_at`, as the daemon) or
/// held (an `O_PATH` descriptor kept per object, no privilege); unset, by
/// handle when this process may, else held. Returns its name for the
/// summary line.
pub fn choose_opener() -> &'static str {
    let chosen = *OPENER.get_or_init(|| match std::env::var("HISTORY_ENGINE_OPENER").as_deref() {
        Ok("handle") => Opener::ByHandle,
        Ok("held") => Opener::HeldDescriptors,
        Ok(other) => panic!("HISTORY_ENGINE_OPENER={other}: expected `handle` or `held`"),
        Err(_) => {
            let dir = temp_dir().expect("a temporary directory");
            match LiveTree::new(dir.path(), None, Opener::ByHandle) {
                Ok(_) => Opener::ByHandle,
                Err(_) => Opener::HeldDescriptors,
            }
        }
    });
    match chosen {
        Opener::ByHandle => "by handle",
        Opener::HeldDescriptors => "through held descriptors",
    }
}

/// Where the temporary trees go: tmpfs when there is one (fsync costs
/// nothing there), else the default temporary directory.
fn temp_dir() -> std::io::Result<tempfile::TempDir> {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(d) = tempfile::Builder::new().prefix("rewindfs-engine-").tempdir_in(shm)
    {
        return Ok(d);
    }
    tempfile::Builder::new().prefix("rewindfs-engine-").tempdir()
}

fn setup_err<E: std::fmt::Display>(e: E) -> Failure {
    Failure { kind: "setup", msg: e.to_string() }
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

fn errno_text(e: rewindfs::error::Errno) -> String {
    std::io::Error::from_raw_os_error(e.0).to_string()
}

impl Runner {
    /// A fresh workspace with the model test's small tree, opened in process.
    pub fn new(backend: Backend) -> Res<Runner> {
        let dir = temp_dir().map_err(setup_err)?;
        let ws_path = dir.path().join("ws");
        let store_path = dir.path().join("store");
        std::fs::create_dir(&ws_path).map_err(setup_err)?;
        rewindfs::store_dir::create_private_dir(&store_path).map_err(setup_err)?;
        let mut model = Model::default();
        let mut next_id = 0;
        let init = [("a", Kind::File, 40u64), ("b", Kind::Dir, 0), ("b/a", Kind::File, 300)];
        for (p, kind, len) in init {
            let path = ws_path.join(p);
            let node = if kind == Kind::Dir {
                std::fs::create_dir(&path).map_err(setup_err)?;
                Node::new(Kind::Dir, Vec::new(), 0o755)
            } else {
                let data = gen_bytes(len, len as usize);
                std::fs::write(&path, &data).map_err(setup_err)?;
                Node::new(Kind::File, data, 0o644)
            };
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(node.mode)).map_err(setup_err)?;
            model.insert(p, node, &mut next_id);
        }
        let (chunks, faulty): (Option<Arc<dyn ChunkStore>>, _) = match backend {
            Backend::Pack => (None, None),
            Backend::Memory => (Some(Arc::new(MemoryStore::new())), None),
            Backend::Faulty => {
                let f = Arc::new(FaultyStore::new(MemoryStore::new()));
                (Some(f.clone()), Some(f))
            }
        };
        let mut r = Runner {
            _dir: dir,
            ws_path,
            store_path,
            chunks,
            faulty,
            ws: None,
            model,
            snaps: BTreeMap::new(),
            next_id,
            fds: (0..SLOTS).map(|_| None).collect(),
            orphans: BTreeMap::new(),
            last_safety: None,
            turn_ids: 0,
            snapshot_names: 0,
            named: BTreeSet::new(),
            checks: 0,
            last_sealed: -1,
            new_cps: Vec::new(),
            racing_reads: 0,
            events: BTreeMap::new(),
        };
        r.open()?;
        let m = r.ws().journal().current_turn();
        if m != 0 {
            return fail("checkpoints", format!("the first open made checkpoint {m}, not 0"));
        }
        r.sealed(Some(0), r.model.clone(), "open")?;
        r.new_cps.clear();
        r.check_live()?;
        Ok(r)
    }

    fn open(&mut self) -> Res<()> {
        let mut options = Options::new(&self.ws_path, &self.store_path);
        options.chunks = self.chunks.clone();
        options.opener = opener();
        let ws = Workspace::open(&options).or_else(|e| fail("open", format!("opening the workspace: {e}")))?;
        // Nothing else reads this store while the test runs (its `fsck`
        // aside): SQLite's lock is kept, not taken around every statement
        // (a third of the CPU time otherwise, in `fcntl`).
        if std::env::var("HISTORY_ENGINE_SHARED_LOCKS").is_err() {
            ws.journal()
                .with_meta(|m| m.own_alone(true))
                .or_else(|e| fail("open", format!("locking the store: {e}")))?;
        }
        self.ws = Some(ws);
        Ok(())
    }

    fn ws(&self) -> &Workspace {
        self.ws.as_ref().expect("the workspace is open between steps")
    }

    fn tree(&self) -> &LiveTree {
        self.ws().tree()
    }

    /// Everything in memory goes, as when the process dies; what is on
    /// disk (and the chunk store kept across) is opened again.
    fn crash_and_reopen(&mut self) -> Res<()> {
        self.close_all();
        self.ws = None;
        self.open()
    }

    fn newest(&self) -> i64 {
        self.last_sealed
    }

    /// Records the model as checkpoint `n`, which must be the next number.
    fn sealed(&mut self, n: Option<i64>, model: Model, what: &str) -> Res<i64> {
        let Some(n) = n else { return fail("engine", format!("{what}: no checkpoint number in the answer")) };
        if n != self.newest() + 1 {
            return fail("checkpoints", format!("{what} sealed checkpoint {n}, expected {}", self.newest() + 1));
        }
        self.snaps.insert(n, model);
        self.last_sealed = n;
        self.new_cps.push(n);
        Ok(n)
    }

    /// Runs one step; Ok(false) if the step does not apply in this state.
    pub fn exec(&mut self, step: &Step) -> Res<bool> {
        let ran = match step {
            Step::Open(_) | Step::FdWrite { .. } | Step::Close(_) => self.fd_step(step)?,
            s if s.is_history() => self.history_step(step)?,
            _ => self.fs_step(step)?,
        };
        if ran {
            self.check_live()?;
            self.check_fds()?;
        }
        Ok(ran)
    }

    /// The inode number of `path` (the root for ""), resolved name by name
    /// from the root as the kernel does; None when a component is missing.
    fn resolve(&self, path: &str) -> Result<Option<Ino>, rewindfs::error::Errno> {
        resolve_in(self.tree(), path)
    }

    fn at(&self, path: &str) -> Result<Ino, rewindfs::error::Errno> {
        self.resolve(path)?.ok_or(rewindfs::error::Errno(libc::ENOENT))
    }

    /// The parent's inode number and the last name of `path`.
    fn parent_of(&self, path: &str) -> Result<(Ino, OsString), rewindfs::error::Errno> {
        let name = path.rsplit('/').next().unwrap_or(path);
        Ok((self.at(parent(path))?, OsString::from(name)))
    }

    fn fs_step(&mut self, step: &Step) -> Res<bool> {
        let verdict = self.model.apply(step, &mut self.next_id);
        if verdict == Verdict::Skip {
            return Ok(false);
        }
        let got = {
            let _op = self.ws().world().op();
            self.do_fs(step)
        };
        match (&verdict, &got) {
            (Verdict::Ok, Ok(())) => {}
            (Verdict::Errno(e), Err(err)) if err.0 == *e => {}
            _ => {
                let got = got.map_err(errno_text);
                return fail("op", format!("`{step}`: the model expects {verdict:?}, the core answered {got:?}"));
            }
        }
        self.collect_orphans();
        Ok(true)
    }

    fn collect_orphans(&mut self) {
        let dropped = self.model.gc();
        self.keep_held(dropped);
    }

    /// Of nodes dropped from the model, keeps those a descriptor holds.
    fn keep_held(&mut self, dropped: Vec<(u64, Node)>) {
        for (id, node) in dropped {
            if self.fds.iter().flatten().any(|h| h.node == id) {
                self.orphans.insert(id, node);
            }
        }
    }

    /// Writes `data` at `off` through a descriptor opened for it, and closes it.
    fn write_through(
        &self,
        ino: Ino,
        off: Option<u64>,
        truncate: bool,
        data: &[u8],
    ) -> Result<(), rewindfs::error::Errno> {
        let tree = self.tree();
        let (fh, file) = tree.open(ino, libc::O_WRONLY, CALLER)?;
        let done = (|| {
            if truncate {
                tree.setattr(ino, SetAttr { size: Some(0), ..Default::default() }, Some(fh), CALLER)?;
            }
            let off = match off {
                Some(o) => o,
                None => tree.getattr(file.ino, Some(fh))?.size,
            };
            if !data.is_empty() {
                tree.write(fh, off, data)?;
            }
            Ok(())
        })();
        tree.release(fh);
        done
    }

    /// One file-system step, as the kernel would send it to the adapter.
    fn do_fs(&self, step: &Step) -> Result<(), rewindfs::error::Errno> {
        let tree = self.tree();
        match step {
            Step::Create { path, len, seed } => {
                let data = gen_bytes(*seed, *len);
                match self.resolve(path)? {
                    Some(ino) => self.write_through(ino, Some(0), true, &data),
                    None => {
                        let (dir, name) = self.parent_of(path)?;
                        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC;
                        let (_, fh, _) = tree.create(dir, &name, 0o644, flags, CALLER)?;
                        let written = if data.is_empty() { Ok(0) } else { tree.write(fh, 0, &data) };
                        tree.release(fh);
                        written.map(|_| ())
                    }
                }
            }
            Step::Write { path, off, len, seed } => {
                self.write_through(self.at(path)?, Some(*off), false, &gen_bytes(*seed, *len))
            }
            Step::Append { path, len, seed } => {
                self.write_through(self.at(path)?, None, false, &gen_bytes(*seed, *len))
            }
            Step::Trunc { path, len } => {
                let ino = self.at(path)?;
                let (fh, _) = tree.open(ino, libc::O_WRONLY, CALLER)?;
                let done = tree.setattr(ino, SetAttr { size: Some(*len), ..Default::default() }, Some(fh), CALLER);
                tree.release(fh);
                done.map(|_| ())
            }
            Step::Rename { from, to, flag } => {
                let (a, an) = self.parent_of(from)?;
                let (b, bn) = self.parent_of(to)?;
                let flags = match flag {
                    Flag::Plain => 0,
                    Flag::Exchange => libc::RENAME_EXCHANGE,
                    Flag::NoReplace => libc::RENAME_NOREPLACE,
                };
                tree.rename(a, &an, b, &bn, flags, CALLER)
            }
            Step::Link { from, to } => {
                let ino = self.at(from)?;
                let (dir, name) = self.parent_of(to)?;
                tree.link(ino, dir, &name, CALLER).map(|_| ())
            }
            Step::Unlink(p) => {
                let (dir, name) = self.parent_of(p)?;
                tree.unlink(dir, &name, CALLER)
            }
            Step::Mkdir(p) => {
                let (dir, name) = self.parent_of(p)?;
                tree.mkdir(dir, &name, 0o755, CALLER).map(|_| ())
            }
            Step::Rmdir(p) => {
                let (dir, name) = self.parent_of(p)?;
                tree.rmdir(dir, &name, CALLER)
            }
            Step::RmRf(p) => self.remove_all(p),
            Step::Symlink { target, path } => {
                let (dir, name) = self.parent_of(path)?;
                tree.symlink(dir, &name, os(target), CALLER).map(|_| ())
            }
            Step::Chmod { path, mode } => {
                let set = SetAttr { mode: Some(*mode), ..Default::default() };
                tree.setattr(self.at(path)?, set, None, CALLER).map(|_| ())
            }
            Step::Chown { path, uid, gid } => {
                let set = SetAttr { uid: Some(*uid), gid: Some(*gid), ..Default::default() };
                tree.setattr(self.at(path)?, set, None, CALLER).map(|_| ())
            }
            Step::Utime { path, secs } => {
                let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(*secs as u64);
                let set = SetAttr { atime: Some(SetTime::At(t)), mtime: Some(SetTime::At(t)), ..Default::default() };
                tree.setattr(self.at(path)?, set, None, CALLER).map(|_| ())
            }
            Step::SetX { path, name, len, seed } => {
                tree.setxattr(self.at(path)?, os(&xattr_name(*name)), &gen_bytes(*seed, *len), 0, CALLER)
            }
            Step::RmX { path, name } => tree.removexattr(self.at(path)?, os(&xattr_name(*name)), CALLER),
            _ => unreachable!("not a file-system step: {step}"),
        }
    }

    /// `rm -rf`: children first, as `remove_dir_all` does.
    fn remove_all(&self, p: &str) -> Result<(), rewindfs::error::Errno> {
        let tree = self.tree();
        let (dir, name) = self.parent_of(p)?;
        let attr = tree.lookup(dir, &name)?;
        if attr.kind != LiveKind::Dir {
            return tree.unlink(dir, &name, CALLER);
        }
        for child in tree.names(attr.ino)? {
            self.remove_all(&join(p, &child.to_string_lossy()))?;
        }
        tree.rmdir(dir, &name, CALLER)
    }

    fn node_of_fd(&mut self, node: u64) -> Option<&mut Node> {
        if self.model.nodes.contains_key(&node) { self.model.nodes.get_mut(&node) } else { self.orphans.get_mut(&node) }
    }

    fn fd_step(&mut self, step: &Step) -> Res<bool> {
        match step {
            Step::Open(p) => {
                let Some(slot) = self.fds.iter().position(|f| f.is_none()) else { return Ok(false) };
                if self.model.kind(p) != Some(Kind::File) {
                    return Ok(false);
                }
                let opened = {
                    let _op = self.ws().world().op();
                    self.at(p).and_then(|ino| self.tree().open(ino, libc::O_RDWR, CALLER))
                };
                let (fh, file) = opened.or_else(|e| fail("op", format!("`{step}`: {}", errno_text(e))))?;
                self.fds[slot] = Some(HeldFd { fh, file, node: self.model.entries[p] });
            }
            Step::FdWrite { slot, off, len, seed } => {
                let Some(Some(h)) = self.fds.get(*slot) else { return Ok(false) };
                let (data, node, fh) = (gen_bytes(*seed, *len), h.node, h.fh);
                {
                    let _op = self.ws().world().op();
                    self.tree()
                        .write(fh, *off, &data)
                        .or_else(|e| fail("op", format!("`{step}`: {}", errno_text(e))))?;
                }
                let n = self.node_of_fd(node).expect("a held node is in the tree or an orphan");
                write_at(&mut n.data, *off, &data);
            }
            Step::Close(slot) => {
                let Some(Some(h)) = self.fds.get_mut(*slot).map(|f| f.take()) else { return Ok(false) };
                {
                    let _op = self.ws().world().op();
                    self.tree().release(h.fh);
                }
                self.forget_orphans();
            }
            _ => unreachable!(),
        }
        Ok(true)
    }

    fn forget_orphans(&mut self) {
        let held: BTreeSet<u64> = self.fds.iter().flatten().map(|h| h.node).collect();
        self.orphans.retain(|id, _| held.contains(id));
    }

    fn close_all(&mut self) {
        if let Some(ws) = &self.ws {
            for h in self.fds.iter_mut().filter_map(Option::take) {
                ws.tree().release(h.fh);
            }
        }
        self.fds.iter_mut().for_each(|f| *f = None);
        self.orphans.clear();
    }

    fn engine<T>(&self, what: &str, r: Result<T, rewindfs::error::Failure>) -> Res<T> {
        r.or_else(|f| fail("engine", format!("{what}: {}", f.message)))
    }

    fn note(&mut self, event: &'static str) {
        *self.events.entry(event).or_default() += 1;
    }

    fn history_step(&mut self, step: &Step) -> Res<bool> {
        let kind = match step {
            Step::Turn(_) => "turn",
            Step::Rewind(_) | Step::Undo => "rewind",
            Step::Restore { .. } => "restore",
            Step::Remount => "close and open",
            Step::Kill => "crash between steps",
            Step::KillRewind { .. } => "crash in a rewind",
            Step::KillRestore { .. } => "crash in a restore",
            Step::Gc(_) => "gc",
            Step::Forget(_) => "forget",
            Step::Snapshot(_) => "snapshot",
            _ => "reset",
        };
        match step {
            Step::Turn(id) => {
                let info = TurnInfo { message_id: id.clone(), ..Default::default() };
                let n = self.engine("turn", self.ws().turn(&info))?;
                self.sealed(Some(n), self.model.clone(), "turn")?;
            }
            Step::Rewind(k) => {
                if !self.snaps.contains_key(k) {
                    return Ok(false);
                }
                self.rewind(*k)?;
            }
            Step::Undo => {
                let Some(s) = self.last_safety.filter(|s| self.snaps.contains_key(s)) else { return Ok(false) };
                self.rewind(s)?;
            }
            Step::Restore { cp, path } => {
                if !self.snaps.contains_key(cp) || path.is_empty() {
                    return Ok(false);
                }
                let pre = self.model.clone();
                let reply =
                    self.engine("restore", self.ws().restore(&cp.to_string(), &[PathBuf::from(path)], false))?;
                self.sealed(reply.undo_checkpoint, pre, "restore (before)")?;
                let k = self.snaps[cp].clone();
                let dropped = self.model.restore(&k, path, &mut self.next_id);
                self.keep_held(dropped);
                self.sealed(reply.result_checkpoint, self.model.clone(), "restore (after)")?;
            }
            // As an unmount does: what cannot be settled is put back, the
            // journal made durable, the close marked clean; then opened again.
            Step::Remount => {
                self.close_all();
                let put_back = {
                    let history = self.ws().history();
                    self.ws().put_back_unsettled(&history)
                };
                if let Some(message) = self.engine("put back", put_back)? {
                    return fail("remount", format!("files were put back, the store being healthy: {message}"));
                }
                self.ws().close();
                self.crash_and_reopen()?;
                let m = self.ws().journal().current_turn();
                self.sealed(Some(m), self.model.clone(), "open")?;
            }
            Step::Kill => {
                self.crash_and_reopen()?;
                let m = self.ws().journal().current_turn();
                self.sealed(Some(m), self.model.clone(), "open")?;
            }
            Step::KillRewind { to, at } => {
                if !self.snaps.contains_key(to) {
                    return Ok(false);
                }
                self.crash_in_rewind(*to, *at)?;
            }
            Step::KillRestore { cp, path, at } => {
                if !self.snaps.contains_key(cp) || path.is_empty() {
                    return Ok(false);
                }
                self.crash_in_restore(*cp, path, *at)?;
            }
            Step::Gc(keep) => {
                let gc = self.ws().gc(false, Some(*keep), Some(0), None, &|_| {});
                let reply = self.engine("gc", gc)?;
                self.forgotten(&reply.collected.forgotten, "gc")?;
            }
            Step::Forget(k) => {
                if !self.snaps.contains_key(k) {
                    return Ok(false);
                }
                match self.ws().forget(&[k.to_string()], false, &|_| {}) {
                    Ok(c) => self.forgotten(&c.forgotten, "forget")?,
                    // Named checkpoints and the newest are kept.
                    Err(f) if f.kind == rewindfs::error::ErrorKind::Usage && f.message.contains("is kept") => {}
                    Err(f) => return fail("engine", format!("forget {k}: {}", f.message)),
                }
            }
            Step::Snapshot(at) => {
                if at.is_some_and(|k| !self.snaps.contains_key(&k)) {
                    return Ok(false);
                }
                self.snapshot_names += 1;
                let name = format!("s{:06}", self.snapshot_names);
                let at_ref = at.map(|k| k.to_string());
                let named = self.ws().snapshot(&name, None, at_ref.as_deref());
                if let Some(k) = at.filter(|k| self.named.contains(k)) {
                    return match named {
                        Err(f) if f.kind == rewindfs::error::ErrorKind::Usage => Ok(false),
                        other => fail("snapshot", format!("a second name for checkpoint {k}: {other:?}")),
                    };
                }
                let reply = self.engine("snapshot", named)?;
                self.named.insert(reply.checkpoint);
                if reply.sealed {
                    self.sealed(Some(reply.checkpoint), self.model.clone(), "snapshot")?;
                } else if Some(reply.checkpoint) != *at {
                    return fail("engine", format!("snapshot at {at:?} named checkpoint {}", reply.checkpoint));
                }
            }
            Step::Reset => {
                let reply = self.engine("reset", self.ws().reset(true, &|_| {}))?;
                self.sealed(Some(reply.checkpoint), self.model.clone(), "reset")?;
                let gone: Vec<i64> = self.snaps.keys().copied().filter(|&n| n != reply.checkpoint).collect();
                if reply.collected.forgotten != gone {
                    return fail(
                        "reset",
                        format!("reset forgot {:?}; every other checkpoint was {gone:?}", reply.collected.forgotten),
                    );
                }
                self.forgotten(&gone, "reset")?;
            }
            _ => unreachable!(),
        }
        self.note(kind);
        self.check_history_state()?;
        Ok(true)
    }

    /// Checkpoints a collection forgot leave the model's list; the others
    /// must read as before (checked by the caller).
    fn forgotten(&mut self, gone: &[i64], what: &'static str) -> Res<()> {
        for n in gone {
            self.named.remove(n);
            if self.snaps.remove(n).is_none() {
                return fail(what, format!("{what} forgot checkpoint {n}, which the test did not know"));
            }
        }
        let listed: Vec<i64> = self
            .ws()
            .journal()
            .with_checkpoints(|m| m.checkpoints())
            .or_else(|e| fail(what, e.to_string()))?
            .iter()
            .map(|c| c.checkpoint)
            .collect();
        let known: Vec<i64> = self.snaps.keys().copied().collect();
        if listed != known {
            return fail(
                what,
                format!("after {what} the store lists checkpoints {listed:?}, the test knows {known:?}"),
            );
        }
        if self.last_safety.is_some_and(|s| !self.snaps.contains_key(&s)) {
            self.last_safety = None;
        }
        Ok(())
    }

    fn rewind(&mut self, k: i64) -> Res<()> {
        let pre = self.model.clone();
        // With reads failing, a rewind that needs the store refuses before
        // anything changes; one that does not goes through.
        if let Some(f) = self.faulty.clone().filter(|_| self.checks % 4 == 3) {
            f.fail_gets(Some(libc::EIO));
            let tried = self.ws().rewind(&k.to_string(), false);
            f.heal();
            match tried {
                Ok(reply) => {
                    self.note("rewind with reads failing: done (nothing to read)");
                    return self.rewound(reply, pre, k);
                }
                Err(e) if e.errno == Some(libc::EIO) => {
                    self.note("rewind with reads failing: refused");
                    self.check_live()?;
                    let newest = self.ws().journal().current_turn();
                    if newest != self.newest() {
                        return fail("faulty", format!("a refused rewind sealed checkpoint {newest}: {}", e.message));
                    }
                }
                Err(e) => return fail("faulty", format!("rewind {k} with reads failing: {}", e.message)),
            }
        }
        let reply = self.rewind_with_readers(k)?;
        self.rewound(reply, pre, k)
    }

    /// Runs the rewind while a reader reads sealed checkpoints' views and
    /// `log` through the core: each read is before or after the rewind
    /// (it holds the tree frozen), never a mix.
    fn rewind_with_readers(&mut self, k: i64) -> Res<RewindReply> {
        let sealed: Vec<(i64, SeenTree)> = self.snaps.iter().map(|(n, m)| (*n, m.observe())).collect();
        let pairs: Vec<(i64, BTreeSet<Change>)> = self
            .snaps
            .iter()
            .zip(self.snaps.iter().skip(1))
            .map(|((a, ma), (_, mb))| (*a, expected_diff(ma, mb)))
            .collect();
        let ws = self.ws();
        let stop = AtomicBool::new(false);
        let reads = AtomicU64::new(0);
        // The reader says when its first read is done (or drops the sender
        // when it ends first): the rewind waits for it without spinning.
        let (started, first_read) = std::sync::mpsc::channel::<()>();
        let mut started = Some(started);
        let (stop, reads, sealed, pairs) = (&stop, &reads, &sealed, &pairs);
        let (reply, wrong) = std::thread::scope(|s| {
            let reader = s.spawn(move || {
                let mut rng = Rng(k as u64 ^ 0x5eed);
                loop {
                    let (n, want) = &sealed[rng.below(sealed.len())];
                    let got = {
                        let r = ws.read();
                        observe_view(&r, *n)
                    };
                    if let Some(started) = started.take() {
                        let _ = started.send(());
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                    match got {
                        Err(e) => return Some(format!("reading checkpoint {n}'s view during a rewind: {e}")),
                        Ok(got) => {
                            let d = tree_diff(want, &got, 8);
                            if !d.is_empty() {
                                return Some(format!(
                                    "checkpoint {n}'s view read during a rewind differs:\n    {}",
                                    d.join("\n    ")
                                ));
                            }
                        }
                    }
                    if rng.below(4) == 0 {
                        let rows = ws.read().log();
                        if let Some(wrong) = log_rows_wrong(rows, pairs) {
                            return Some(format!("`log` during a rewind: {wrong}"));
                        }
                    }
                    if stop.load(Ordering::SeqCst) {
                        return None;
                    }
                }
            });
            let _ = first_read.recv();
            let reply = ws.rewind(&k.to_string(), false);
            stop.store(true, Ordering::SeqCst);
            (reply, reader.join().unwrap_or_else(|_| Some("the reader panicked".into())))
        });
        self.racing_reads += reads.load(Ordering::Relaxed);
        if let Some(w) = wrong {
            return fail("concurrent reader", w);
        }
        self.engine(&format!("rewind {k}"), reply)
    }

    fn rewound(&mut self, reply: RewindReply, pre: Model, k: i64) -> Res<()> {
        let RewindReply::Done(d) = reply else { return fail("engine", "a rewind answered with a preview") };
        let s = self.sealed(Some(d.safety_checkpoint), pre.clone(), "rewind (safety)")?;
        self.model = self.snaps[&k].clone();
        self.descriptors_after_rewind(&pre)?;
        self.sealed(Some(d.result_checkpoint), self.model.clone(), "rewind (result)")?;
        self.last_safety = Some(s);
        Ok(())
    }

    /// A held descriptor keeps its object: it is in the tree if the rewind
    /// kept (or brought back) that inode, else it was moved away.
    fn descriptors_after_rewind(&mut self, pre: &Model) -> Res<()> {
        let inos: Vec<Ino> = self.fds.iter().flatten().map(|h| h.file.ino).collect();
        let nodes: Vec<u64> = self.fds.iter().flatten().map(|h| h.node).collect();
        let ws = self.ws.take().expect("open");
        let found = {
            let _op = ws.world().op();
            let at = |p: &str| resolve_in(ws.tree(), p).ok().flatten();
            reattach(&mut self.model, pre, &mut self.orphans, &nodes, &mut self.next_id, |i, p| {
                Ok(at(p) == Some(inos[i]))
            })
        };
        self.ws = Some(ws);
        found.or_else(|e| fail("fd", e))
    }

    /// Runs `op` with a crash armed at `point` (the N-th reach of a kill
    /// point), then drops everything in memory and opens the workspace
    /// again: what the open recovered, and the checkpoints after `newest`.
    fn crash_during(
        &mut self,
        what: &'static str,
        point: (&str, u64),
        newest: i64,
        op: impl FnOnce(&Workspace) -> Result<(), rewindfs::error::Failure>,
    ) -> Res<(Vec<rewindfs::rewind::recovery::Recovered>, Vec<rewindfs::meta::Checkpoint>)> {
        rewindfs::faults::crash_at(Some(point));
        let ws = self.ws.take().expect("open");
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| op(&ws)));
        rewindfs::faults::crash_at(None);
        match &outcome {
            Ok(Ok(())) => {}
            Ok(Err(f)) => return fail(what, format!("failed before the crash: {}", f.message)),
            Err(p) if p.downcast_ref::<rewindfs::faults::Crash>().is_some() => {}
            Err(p) => return fail("panic", format!("{what} panicked: {}", panic_text(p.as_ref()))),
        }
        drop(outcome);
        drop(ws);
        self.open()?;
        let recovered = self.ws().recovered().to_vec();
        let fresh = self
            .ws()
            .journal()
            .with_checkpoints(|m| m.checkpoints())
            .or_else(|e| fail(what, e.to_string()))?
            .into_iter()
            .filter(|c| c.checkpoint > newest)
            .collect();
        Ok((recovered, fresh))
    }

    /// A crash at the `at`-th journal record of a rewind to `to` (0: just
    /// after its result was sealed; after the rewind if it has fewer),
    /// then an open, which completes it or finds it not begun or done.
    fn crash_in_rewind(&mut self, to: i64, at: u64) -> Res<()> {
        self.close_all();
        let pre = self.model.clone();
        let target = self.snaps[&to].clone();
        let newest = self.newest();
        let point = if at == 0 { ("rewind-sealed", 1) } else { ("rewind-record", at) };
        let (recovered, fresh) =
            self.crash_during("killrewind", point, newest, |ws| ws.rewind(&to.to_string(), false).map(|_| ()))?;
        let safety_label = format!("safety checkpoint before rewind to {to}");
        let is_safety =
            |c: &rewindfs::meta::Checkpoint| c.label.as_deref().is_some_and(|l| l.starts_with(&safety_label));
        let is_result =
            |c: &rewindfs::meta::Checkpoint| c.reason == rewindfs::meta::Reason::Rewind && c.parent == Some(to);
        match recovered.as_slice() {
            [] => {
                self.note(if fresh.iter().any(is_result) { "crash after a rewind" } else { "crash before a rewind" });
                let mut done = false;
                for c in &fresh {
                    let model = if is_safety(c) {
                        self.last_safety = Some(c.checkpoint);
                        pre.clone()
                    } else if is_result(c) {
                        done = true;
                        target.clone()
                    } else if done {
                        target.clone()
                    } else {
                        pre.clone()
                    };
                    self.sealed(Some(c.checkpoint), model, "after a crash during a rewind")?;
                }
                self.model = if done { target } else { pre };
            }
            [r] => {
                self.note("crash part-way through a rewind, completed at open");
                if r.op != rewindfs::meta::IntentOp::Rewind || r.checkpoint != to {
                    return fail("killrewind", format!("recovered something else than the rewind to {to}: {r:?}"));
                }
                for c in &fresh {
                    let n = c.checkpoint;
                    let model = if n == r.undo_checkpoint {
                        pre.clone()
                    } else if n == r.result_checkpoint && is_result(c) {
                        target.clone()
                    } else if n == r.interrupted_checkpoint {
                        let seen = observe_view(&self.ws().read(), n)
                            .or_else(|e| fail("view", format!("reading the interrupted checkpoint {n}: {e}")))?;
                        Model::of_seen(&seen, &mut self.next_id)
                    } else {
                        return fail("killrewind", format!("an unexpected checkpoint after the recovery: {c:?}"));
                    };
                    self.sealed(Some(n), model, "after a recovered rewind")?;
                }
                self.last_safety = Some(r.undo_checkpoint);
                self.model = target;
            }
            _ => return fail("killrewind", format!("more than one thing recovered: {recovered:?}")),
        }
        Ok(())
    }

    /// A crash at the `at`-th journal record of a restore of `path` from
    /// `cp` (after it if it has fewer), then an open, which completes it
    /// from the tree the crash left, or finds it done.
    fn crash_in_restore(&mut self, cp: i64, path: &str, at: u64) -> Res<()> {
        self.close_all();
        let pre = self.model.clone();
        let newest = self.newest();
        let (recovered, fresh) = self.crash_during("killrestore", ("restore-record", at), newest, |ws| {
            ws.restore(&cp.to_string(), &[PathBuf::from(path)], false).map(|_| ())
        })?;
        let k = self.snaps[&cp].clone();
        match recovered.as_slice() {
            [] => {
                // Done before the crash: before, result, and the open's.
                self.note("crash after a restore");
                let mut done = pre.clone();
                // No descriptor is open across the crash: what the restore
                // replaced is held by none.
                let _ = done.restore(&k, path, &mut self.next_id);
                let result = fresh.iter().find(|c| c.label.as_deref().is_some_and(|l| l.starts_with("restored ")));
                let Some(result) = result.map(|c| c.checkpoint) else {
                    return fail("killrestore", format!("nothing recovered and no result sealed: {fresh:?}"));
                };
                for c in &fresh {
                    let model = if c.checkpoint < result { pre.clone() } else { done.clone() };
                    self.sealed(Some(c.checkpoint), model, "after a crash during a restore")?;
                }
                self.model = done;
            }
            [r] => {
                self.note("crash part-way through a restore, completed at open");
                if r.op != rewindfs::meta::IntentOp::Restore || r.checkpoint != cp {
                    return fail("killrestore", format!("recovered something else than the restore from {cp}: {r:?}"));
                }
                let mut result = None;
                for c in &fresh {
                    let n = c.checkpoint;
                    let model = if n == r.undo_checkpoint {
                        pre.clone()
                    } else if n == r.interrupted_checkpoint {
                        let seen = observe_view(&self.ws().read(), n)
                            .or_else(|e| fail("view", format!("reading the interrupted checkpoint {n}: {e}")))?;
                        let half = Model::of_seen(&seen, &mut self.next_id);
                        // Completing it is restoring the path from the
                        // tree the crash left, its temporary files put away.
                        let mut done = half.clone();
                        done.entries.retain(|p, _| !is_temporary(p));
                        // No descriptor is open across the crash: what the
                        // restore replaced is held by none.
                        let _ = done.restore(&k, path, &mut self.next_id);
                        result = Some(done);
                        half
                    } else if n == r.result_checkpoint {
                        match &result {
                            Some(done) => done.clone(),
                            None => return fail("killrestore", "the result was sealed before the interrupted tree"),
                        }
                    } else {
                        return fail("killrestore", format!("an unexpected checkpoint after the recovery: {c:?}"));
                    };
                    self.sealed(Some(n), model, "after a recovered restore")?;
                }
                match result {
                    Some(done) => self.model = done,
                    None => return fail("killrestore", "no interrupted checkpoint after the recovery"),
                }
            }
            _ => return fail("killrestore", format!("more than one thing recovered: {recovered:?}")),
        }
        Ok(())
    }

    /// The live tree equals the model.
    pub fn check_live(&self) -> Res<()> {
        let got = {
            let _op = self.ws().world().op();
            observe_live(self.tree()).or_else(|e| fail("live", format!("reading the live tree: {e}")))?
        };
        let d = tree_diff(&self.model.observe(), &got, 12);
        if !d.is_empty() {
            return fail("live", format!("the live tree differs from the model:\n    {}", d.join("\n    ")));
        }
        Ok(())
    }

    fn check_fds(&self) -> Res<()> {
        let _op = self.ws().world().op();
        for (slot, h) in self.fds.iter().enumerate() {
            let Some(h) = h else { continue };
            let want = &self.model.nodes.get(&h.node).or_else(|| self.orphans.get(&h.node)).expect("held").data;
            let size = self
                .tree()
                .getattr(h.file.ino, Some(h.fh))
                .map(|a| a.size)
                .or_else(|e| fail("fd", format!("fstat: {}", errno_text(e))))?;
            let got = read_all(|off| self.tree().open_files().read(h.fh, off, READ_SIZE)).or_else(|e| fail("fd", e))?;
            if let Some(wrong) = fd_mismatch(slot, size, &got, want) {
                return fail("fd", wrong);
            }
        }
        Ok(())
    }

    /// After every history step: every checkpoint's view equals its
    /// snapshot; `history` of a path; `diff` of each new checkpoint.
    fn check_history_state(&mut self) -> Res<()> {
        self.checks += 1;
        let mut rng = Rng(self.checks);
        // Reading every view is most of a sequence's time: every one after
        // every fourth history step (and at the end), else the new ones and
        // two others (HISTORY_ENGINE_ALL_VIEWS=1: every one, every time).
        let all = self.checks.is_multiple_of(4) || std::env::var("HISTORY_ENGINE_ALL_VIEWS").is_ok_and(|v| v == "1");
        let older: Vec<i64> = self.snaps.keys().copied().filter(|n| !self.new_cps.contains(n)).collect();
        let mut some: BTreeSet<i64> = self.new_cps.iter().copied().filter(|n| self.snaps.contains_key(n)).collect();
        for _ in 0..2 {
            some.extend(rng.pick(&older));
        }
        if all {
            some = self.snaps.keys().copied().collect();
        }
        self.check_views(&some)?;
        let mut all: BTreeSet<String> = BTreeSet::new();
        for s in self.snaps.values() {
            all.extend(s.entries.keys().cloned());
        }
        let all: Vec<String> = all.into_iter().collect();
        if let Some(p) = rng.pick(&all) {
            self.check_path_history(&p.clone())?;
        }
        for n in std::mem::take(&mut self.new_cps) {
            self.check_diff(n)?;
        }
        Ok(())
    }

    /// The views of checkpoints `which` equal their snapshots.
    fn check_views(&self, which: &BTreeSet<i64>) -> Res<()> {
        for n in which {
            let got = observe_view(&self.ws().read(), *n)
                .or_else(|e| fail("view", format!("reading checkpoint {n}'s view: {e}")))?;
            let d = tree_diff(&self.snaps[n].observe(), &got, 12);
            if !d.is_empty() {
                return fail(
                    "view",
                    format!("checkpoint {n}'s view differs from the model:\n    {}", d.join("\n    ")),
                );
            }
        }
        Ok(())
    }

    /// `diff N-1 N` equals the model's diff (when both are known).
    fn check_diff(&self, n: i64) -> Res<()> {
        let (Some(a), Some(b)) = (self.snaps.get(&(n - 1)), self.snaps.get(&n)) else { return Ok(()) };
        let reply =
            self.engine("diff", self.ws().read().diff(&(n - 1).to_string(), Some(&n.to_string()), &[], false))?;
        match diff_mismatch(&expected_diff(a, b), &serde_json::to_value(&reply.changes).unwrap_or_default()) {
            Some(wrong) => fail("diff", format!("diff {} {n}: {wrong}", n - 1)),
            None => Ok(()),
        }
    }

    /// `history PATH` lists the turns whose changes (checkpoint to the
    /// next, or to the live tree) touched PATH.
    fn check_path_history(&self, p: &str) -> Res<()> {
        let events = self.engine("history", self.ws().read().history(Path::new(p)))?;
        let want = expected_history(&self.snaps, &self.model, p);
        match history_mismatch(&serde_json::to_value(&events).unwrap_or_default(), &want) {
            Some(wrong) => fail("history", format!("history {p}: {wrong}")),
            None => Ok(()),
        }
    }

    /// At the end of a sequence: every view equals its snapshot, `fsck`
    /// finds nothing wrong, `log` lists
    /// exactly the checkpoints made and each turn's statistics equal the
    /// model's diff from its checkpoint to the next.
    pub fn check_end(&self) -> Res<()> {
        self.check_views(&self.snaps.keys().copied().collect())?;
        // `fsck` reads the database through a connection of its own.
        (self.ws().journal().with_meta(|m| m.own_alone(false)))
            .or_else(|e| fail("fsck", format!("giving the store's lock up: {e}")))?;
        let report = self.engine("fsck", self.ws().read().fsck())?;
        let v = serde_json::to_value(&report).unwrap_or_default();
        if !v["problems"].as_array().is_some_and(|p| p.is_empty()) {
            return fail("fsck", format!("fsck of a store made by ordinary use found problems: {v}"));
        }
        let rows = self.engine("log", self.ws().read().log())?;
        let rows = serde_json::to_value(&rows).unwrap_or_default();
        match log_mismatch(rows.as_array().map_or(&[][..], |r| r.as_slice()), &self.snaps, &self.model, true) {
            Some((kind, wrong)) => fail(kind, wrong),
            None => Ok(()),
        }
    }

    /// A step for the current state: the model test's generator, with the
    /// steps only this tier has (gc, forget, snapshot, reset) mixed in.
    pub fn gen_step(&mut self, rng: &mut Rng) -> Step {
        let cps: Vec<i64> = self.snaps.keys().copied().collect();
        match rng.below(100) {
            0 => return Step::Gc(1 + rng.below(6) as u64),
            1 | 2 => return Step::Forget(*rng.pick(&cps).expect("a checkpoint")),
            3 => return Step::Snapshot(if rng.below(2) == 0 { None } else { rng.pick(&cps).copied() }),
            4 if rng.below(4) == 0 => return Step::Reset,
            _ => {}
        }
        let sizes: Vec<usize> = (0..SLOTS)
            .map(|slot| {
                self.fds[slot]
                    .as_ref()
                    .and_then(|h| self.model.nodes.get(&h.node).or_else(|| self.orphans.get(&h.node)))
                    .map(|n| n.data.len())
                    .unwrap_or(0)
            })
            .collect();
        let snaps = &self.snaps;
        gen_step(rng, &self.model, snaps, &sizes, &mut self.turn_ids, |rng| {
            // As the mounted tier: half of the crashes land in a rewind.
            let mut own = Rng(rng.0 ^ 0x6b69_6c6c_7265_7731);
            own.next();
            let cps: Vec<i64> = snaps.keys().copied().collect();
            let cp = *own.pick(&cps).expect("checkpoint 0");
            match own.below(4) {
                0 | 1 => Step::Kill,
                2 => Step::KillRewind { to: cp, at: own.below(9) as u64 },
                _ => {
                    let then: Vec<String> = snaps[&cp].entries.keys().cloned().collect();
                    let path = own.pick(&then).cloned().unwrap_or_else(|| "a".into());
                    Step::KillRestore { cp, path, at: 1 + own.below(6) as u64 }
                }
            }
        })
    }
}

fn log_rows_wrong(
    rows: Result<Vec<rewindfs::report::TurnSummary>, rewindfs::error::Failure>,
    pairs: &[(i64, BTreeSet<Change>)],
) -> Option<String> {
    let rows = match rows {
        Ok(r) => r,
        Err(f) => return Some(f.message),
    };
    let v = serde_json::to_value(&rows).unwrap_or_default();
    let rows = v.as_array().cloned().unwrap_or_default();
    for (c, d) in pairs {
        let Some(row) = rows.iter().find(|r| r["checkpoint"].as_i64() == Some(*c)) else {
            return Some(format!("checkpoint {c} is not listed"));
        };
        if let Some(wrong) = log_row_mismatch(row, d) {
            return Some(format!("row {c}: {wrong}"));
        }
    }
    None
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

/// Reads `read(offset)` until a short answer.
fn read_all<E: std::fmt::Debug>(mut read: impl FnMut(u64) -> Result<Vec<u8>, E>) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let chunk = read(out.len() as u64).map_err(|e| format!("read at {}: {e:?}", out.len()))?;
        let n = chunk.len();
        out.extend_from_slice(&chunk);
        if n < READ_SIZE as usize {
            return Ok(out);
        }
    }
}

fn kind_of(k: LiveKind) -> Kind {
    match k {
        LiveKind::Dir => Kind::Dir,
        LiveKind::Symlink => Kind::Symlink,
        _ => Kind::File,
    }
}

fn user_xattrs(all: Vec<(Vec<u8>, Vec<u8>)>) -> BTreeMap<String, Vec<u8>> {
    all.into_iter()
        .filter(|(n, _)| n.starts_with(b"user."))
        .map(|(n, v)| (String::from_utf8_lossy(&n).into_owned(), v))
        .collect()
}

/// The inode number of `path` in `tree` (the root for ""), looked up name
/// by name as the kernel does, each lookup a reference the kernel keeps
/// (as a kernel with memory to spare keeps its entries); None when a
/// component is missing.
fn resolve_in(tree: &LiveTree, path: &str) -> Result<Option<Ino>, rewindfs::error::Errno> {
    let mut ino = Ino::ROOT;
    if path.is_empty() {
        return Ok(Some(ino));
    }
    for c in path.split('/') {
        match tree.lookup(ino, os(c)) {
            Ok(a) => ino = a.ino,
            Err(e) if e.0 == libc::ENOENT => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    Ok(Some(ino))
}

/// A file a rewind or restore writes before renaming it into place.
fn is_temporary(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.starts_with(".rewindfs-restore-") || name.starts_with(".rewindfs-rewind-")
}

/// What a path shows, from its attributes and contents.
fn seen(kind: Kind, attr: &rewindfs::workspace::Attr, data: Vec<u8>, xattrs: BTreeMap<String, Vec<u8>>) -> Seen {
    Seen {
        kind,
        mode: u32::from(attr.perm) & 0o7777,
        uid: attr.uid,
        gid: attr.gid,
        size: if kind == Kind::Dir { 0 } else { attr.size },
        data,
        nlink: if kind == Kind::Dir { 0 } else { u64::from(attr.nlink) },
        link_of: None,
        xattrs,
    }
}

/// What the live tree shows through the core, as a process walking the
/// mount would see it (the caller holds the tree lock).
fn observe_live(tree: &LiveTree) -> Result<SeenTree, String> {
    let mut t = SeenTree::new();
    let mut inos = BTreeMap::new();
    walk_live(tree, Ino::ROOT, "", &mut t, &mut inos)?;
    link_groups(&mut t, &inos);
    Ok(t)
}

fn walk_live(
    tree: &LiveTree,
    dir: Ino,
    rel: &str,
    t: &mut SeenTree,
    inos: &mut BTreeMap<String, u64>,
) -> Result<(), String> {
    let mut names: Vec<OsString> = tree.names(dir).map_err(|e| format!("readdir {rel}: {}", errno_text(e)))?;
    names.sort();
    for name in names {
        let p = join(rel, &name.to_string_lossy());
        let attr = tree.lookup(dir, &name).map_err(|e| format!("lookup {p}: {}", errno_text(e)))?;
        let attr = tree.getattr(attr.ino, None).map_err(|e| format!("getattr {p}: {}", errno_text(e)))?;
        let kind = kind_of(attr.kind);
        let data = match kind {
            Kind::File => {
                let (fh, _) =
                    tree.open(attr.ino, libc::O_RDONLY, CALLER).map_err(|e| format!("open {p}: {}", errno_text(e)))?;
                let data = read_all(|off| tree.open_files().read(fh, off, READ_SIZE));
                tree.release(fh);
                data.map_err(|e| format!("{p}: {e}"))?
            }
            Kind::Symlink => tree.readlink(attr.ino).map_err(|e| format!("readlink {p}: {}", errno_text(e)))?,
            Kind::Dir => Vec::new(),
        };
        let xattrs = if kind == Kind::Symlink { BTreeMap::new() } else { user_xattrs(tree.xattrs_of(attr.ino)) };
        inos.insert(p.clone(), attr.ino.0);
        t.insert(p.clone(), seen(kind, &attr, data, xattrs));
        if kind == Kind::Dir {
            walk_live(tree, attr.ino, &p, t, inos)?;
        }
    }
    Ok(())
}

/// What checkpoint `n` shows through the browser a `show` mount serves.
pub fn observe_view(r: &rewindfs::engine::Reader<'_>, n: i64) -> Result<SeenTree, String> {
    let b = r.browser(n).map_err(|f| f.message)?;
    let mut t = SeenTree::new();
    let mut inos = BTreeMap::new();
    walk_view(&b, r.held(), b.top(), "", &mut t, &mut inos)?;
    link_groups(&mut t, &inos);
    Ok(t)
}

fn walk_view(
    b: &Browser,
    held: Held<'_>,
    dir: Ino,
    rel: &str,
    t: &mut SeenTree,
    inos: &mut BTreeMap<String, u64>,
) -> Result<(), String> {
    let entries = b.readdir(held, dir).map_err(|e| format!("readdir {rel}: {e}"))?;
    let mut names: Vec<OsString> =
        entries.into_iter().map(|e| e.name).filter(|n| n.as_bytes() != b"." && n.as_bytes() != b"..").collect();
    names.sort();
    for name in names {
        let p = join(rel, &name.to_string_lossy());
        let attr = b.lookup(held, dir, &name).map_err(|e| format!("lookup {p}: {e}"))?;
        let kind = kind_of(attr.kind);
        let data = match kind {
            Kind::File => read_all(|off| b.read(held, attr.ino, off, READ_SIZE)).map_err(|e| format!("{p}: {e}"))?,
            Kind::Symlink => b.readlink(held, attr.ino).map_err(|e| format!("readlink {p}: {e}"))?,
            Kind::Dir => Vec::new(),
        };
        let xattrs = if kind == Kind::Symlink {
            BTreeMap::new()
        } else {
            user_xattrs(b.xattrs(held, attr.ino).map_err(|e| format!("xattrs of {p}: {e}"))?)
        };
        inos.insert(p.clone(), attr.ino.0);
        t.insert(p.clone(), seen(kind, &attr, data, xattrs));
        if kind == Kind::Dir {
            walk_view(b, held, attr.ino, &p, t, inos)?;
        }
    }
    Ok(())
}
