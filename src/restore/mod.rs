//! Putting the past back: make paths of the live tree (or all of it) what
//! they were at a checkpoint. Every change goes through the live tree's own
//! operations, so it is recorded like any other writer's and can be undone.
//!
//! Safety: names are resolved one component at a time relative to
//! directory handles, and symlinks are never followed, whatever the live
//! tree or the checkpoint contain; nothing outside the workspace is touched.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use crate::error::{AsErrno, Errno};
use crate::journal::Journal;
use crate::view::{Content, Node, NodeState, TreeView, ViewError};
use crate::workspace::live::Created;
use crate::workspace::{Attr, Caller, Ino, Kind, LiveTree, SetAttr, SetTime};
use crate::world::{Frozen, Held, Touched};

/// Errors while restoring.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("reading the checkpoint: {0}")]
    View(#[from] ViewError),
    #[error("{path}: {errno}")]
    Live { path: String, errno: Errno },
    #[error("{0}: not a path inside the workspace")]
    BadPath(String),
    #[error(transparent)]
    Meta(#[from] crate::meta::MetaError),
    #[error(transparent)]
    Journal(#[from] crate::journal::JournalError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

impl AsErrno for RestoreError {
    fn errno(&self) -> Errno {
        match self {
            RestoreError::View(e) => e.errno(),
            RestoreError::Live { errno, .. } => *errno,
            RestoreError::BadPath(_) => Errno::EINVAL,
            RestoreError::Meta(e) => e.errno(),
            RestoreError::Journal(e) => e.errno(),
            RestoreError::Store(e) => e.errno(),
        }
    }
}

/// One change a restore makes (or would make, with --dry-run).
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct Planned {
    /// In JSON as `crate::name_json` writes names.
    #[serde(with = "crate::name_json")]
    pub path: PathBuf,
    #[serde(rename = "action")]
    pub action: Action,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Did not exist, is recreated.
    Recreate,
    /// Exists now, did not exist then: removed.
    Delete,
    /// Content or type differs: replaced.
    Restore,
    /// Only mode, owner, times or xattrs differ.
    Attributes,
}

struct Ctx<'a> {
    tree: &'a LiveTree,
    view: TreeView<'a>,
    dry_run: bool,
    caller: Caller,
    out: Vec<Planned>,
    touched: &'a mut Touched,
    temp_counter: u64,
}

fn live_err(path: &Path, errno: Errno) -> RestoreError {
    RestoreError::Live { path: path.display().to_string(), errno }
}

/// Restores `paths` (relative to the root; empty = the whole tree) to
/// their state at `checkpoint`, with the tree frozen. Returns what changed;
/// what the kernel must forget goes into the frozen section's set, also
/// when the restore fails part-way.
pub fn restore(
    frozen: &mut Frozen<'_>,
    tree: &LiveTree,
    journal: &Journal,
    checkpoint: i64,
    paths: &[PathBuf],
) -> Result<Vec<Planned>, RestoreError> {
    let (lock, touched) = frozen.parts();
    run(lock, tree, journal, checkpoint, paths, false, touched)
}

/// What [`restore`] would change, changing nothing (a dry run).
pub fn preview(
    lock: Held<'_>,
    tree: &LiveTree,
    journal: &Journal,
    checkpoint: i64,
    paths: &[PathBuf],
) -> Result<Vec<Planned>, RestoreError> {
    run(lock, tree, journal, checkpoint, paths, true, &mut Touched::default())
}

fn run<'a>(
    lock: Held<'a>,
    tree: &'a LiveTree,
    journal: &'a Journal,
    checkpoint: i64,
    paths: &[PathBuf],
    dry_run: bool,
    touched: &'a mut Touched,
) -> Result<Vec<Planned>, RestoreError> {
    let caller = Caller { uid: 0, gid: 0, pid: std::process::id() };
    let mut ctx = Ctx {
        tree,
        view: TreeView::at(lock, tree, journal, checkpoint),
        dry_run,
        caller,
        out: Vec::new(),
        touched,
        temp_counter: 0,
    };
    let targets: Vec<PathBuf> = if paths.is_empty() { vec![PathBuf::new()] } else { paths.to_vec() };
    for p in targets {
        let comps: Vec<OsString> = p
            .components()
            .map(|c| match c {
                Component::Normal(n) => Ok(Some(n.to_os_string())),
                Component::CurDir => Ok(None),
                _ => Err(RestoreError::BadPath(p.display().to_string())),
            })
            .filter_map(|r| r.transpose())
            .collect::<Result<_, _>>()?;
        if comps.is_empty() {
            let root = ctx.view.root()?;
            ctx.sync_dir_contents(Ino::ROOT, &root, PathBuf::new())?;
            let state = ctx.view.state(&root)?;
            ctx.sync_attrs(Ino::ROOT, None, &state, Path::new("."))?;
            continue;
        }
        // Walk down to the parent, creating directories that existed then.
        let mut live_dir = Ino::ROOT;
        let mut node = ctx.view.root()?;
        let mut path = PathBuf::new();
        let (last, parents) = comps.split_last().expect("non-empty");
        let mut ok = true;
        // Parents recreated on the way down get their recorded mode, times
        // and xattrs once what is below them is in place.
        let mut recreated = Vec::new();
        for name in parents {
            path.push(name);
            let Some(child) = ctx.view.lookup(&node, name)? else {
                ok = false;
                break;
            };
            let state = ctx.view.state(&child)?;
            if !state.is_dir() {
                ok = false;
                break;
            }
            // A parent that was another kind of thing (a file) is replaced
            // by a new directory: recreated, like a missing one.
            let existed = live_dir != Ino(0)
                && ctx.tree.child(live_dir, name).map_err(|e| live_err(&path, e))?.is_some_and(|a| a.kind == Kind::Dir);
            live_dir = ctx.ensure_dir(live_dir, name, &state, &path)?;
            if !existed && live_dir != Ino(0) {
                recreated.push((live_dir, state, path.clone()));
            }
            node = child;
        }
        if !ok {
            // The parent did not exist then: restoring means removing the path.
            ctx.sync_entry_absent_path(&comps)?;
            continue;
        }
        path.push(last);
        let target = ctx.view.lookup(&node, last)?;
        ctx.sync_entry(live_dir, last, target.as_ref(), path)?;
        for (ino, state, path) in recreated.into_iter().rev() {
            ctx.sync_attrs(ino, None, &state, &path)?;
        }
    }
    Ok(ctx.out)
}

impl Ctx<'_> {
    fn plan(&mut self, path: &Path, action: Action) {
        self.out.push(Planned { path: path.to_path_buf(), action });
    }

    fn touch(&mut self, dir: Ino, name: &OsStr) {
        self.touched.entries.insert((dir, name.to_os_string()));
        self.touched.inodes.insert(dir);
    }

    /// Removes a path whose parent did not exist at the checkpoint.
    fn sync_entry_absent_path(&mut self, comps: &[OsString]) -> Result<(), RestoreError> {
        let mut dir = Ino::ROOT;
        let mut path = PathBuf::new();
        for (i, name) in comps.iter().enumerate() {
            path.push(name);
            let Some(a) = self.tree.child(dir, name).map_err(|e| live_err(&path, e))? else { return Ok(()) };
            if i + 1 == comps.len() || a.kind != Kind::Dir {
                return self.remove(dir, name, a, &path);
            }
            dir = a.ino;
        }
        Ok(())
    }

    /// Makes `name` in live directory `dir` what `target` was.
    fn sync_entry(&mut self, dir: Ino, name: &OsStr, target: Option<&Node>, path: PathBuf) -> Result<(), RestoreError> {
        if dir == Ino(0) {
            // Dry run below a directory that would be recreated: nothing
            // live to compare with.
            if let Some(target) = target {
                self.plan(&path, Action::Recreate);
                if self.view.state(target)?.is_dir() {
                    self.sync_dir_contents(Ino(0), target, path)?;
                }
            }
            return Ok(());
        }
        let live = self.tree.child(dir, name).map_err(|e| live_err(&path, e))?;
        let Some(target) = target else {
            if let Some(a) = live {
                self.remove(dir, name, a, &path)?;
            }
            return Ok(());
        };
        let state = self.view.state(target)?;
        let same_object =
            live.is_some_and(|a| self.tree.objects().get(a.ino).is_some_and(|(h, _)| Some(h) == target.handle));
        match Kind::from_code(state.kind) {
            Kind::Dir => {
                let ino = self.ensure_dir(dir, name, &state, &path)?;
                self.sync_dir_contents(ino, target, path.clone())?;
                if let Some(a) = self.tree.child(dir, name).map_err(|e| live_err(&path, e))? {
                    self.sync_attrs(a.ino, Some(a), &state, &path)?;
                }
            }
            Kind::File => {
                let same_content = match (&state.content, live) {
                    (Content::Live(_), Some(a)) if same_object && a.kind == Kind::File => true,
                    (_, Some(a)) if a.kind == Kind::File && a.size == state.size => {
                        self.live_content_equals(a.ino, &state)?
                    }
                    _ => false,
                };
                if same_content {
                    let a = live.expect("same content implies a live file");
                    self.sync_attrs(a.ino, Some(a), &state, &path)?;
                } else {
                    self.plan(&path, if live.is_some() { Action::Restore } else { Action::Recreate });
                    if !self.dry_run {
                        self.write_file(dir, name, &state, &path)?;
                    }
                }
            }
            Kind::Symlink => {
                let target_bytes = state.target.clone().unwrap_or_default();
                let same = match live {
                    Some(a) if a.kind == Kind::Symlink => {
                        self.tree.readlink(a.ino).map_err(|e| live_err(&path, e))? == target_bytes
                    }
                    _ => false,
                };
                if !same {
                    self.plan(&path, if live.is_some() { Action::Restore } else { Action::Recreate });
                    if !self.dry_run {
                        if let Some(a) = live {
                            self.remove_quiet(dir, name, a, &path)?;
                        }
                        let caller = Caller { uid: state.uid, gid: state.gid, pid: self.caller.pid };
                        self.tree
                            .symlink(dir, name, OsStr::from_bytes(&target_bytes), caller)
                            .map_err(|e| live_err(&path, e))?;
                        self.touch(dir, name);
                    }
                }
            }
            _ => {
                // Devices, fifos and sockets: recreate when missing.
                if live.is_none() {
                    self.plan(&path, Action::Recreate);
                    if !self.dry_run {
                        let mode = state.perm | type_bits(Kind::from_code(state.kind));
                        self.tree.mknod(dir, name, mode, 0, self.caller).map_err(|e| live_err(&path, e))?;
                        self.touch(dir, name);
                    }
                }
            }
        }
        Ok(())
    }

    fn live_content_equals(&self, ino: Ino, state: &NodeState) -> Result<bool, RestoreError> {
        let want = self.view.read_all(state)?;
        let Ok(fh) = self.tree.open(ino, libc::O_RDONLY, self.caller) else {
            // Unreadable (a rewound file whose bytes cannot be read back):
            // it is not the content wanted, and is replaced.
            return Ok(false);
        };
        let got = self.tree.open_files().read(fh.0, 0, (state.size as u32).saturating_add(1));
        self.tree.release(fh.0);
        Ok(got.map(|g| g == want).unwrap_or(false))
    }

    /// Makes sure `name` in `dir` is a directory; returns its inode.
    fn ensure_dir(&mut self, dir: Ino, name: &OsStr, state: &NodeState, path: &Path) -> Result<Ino, RestoreError> {
        if dir == Ino(0) {
            // Dry run below a directory that would be recreated.
            self.plan(path, Action::Recreate);
            return Ok(Ino(0));
        }
        match self.tree.child(dir, name).map_err(|e| live_err(path, e))? {
            Some(a) if a.kind == Kind::Dir => Ok(a.ino),
            other => {
                self.plan(path, if other.is_some() { Action::Restore } else { Action::Recreate });
                if self.dry_run {
                    // Nothing exists to descend into: report children as recreated.
                    return Ok(Ino(0));
                }
                if let Some(a) = other {
                    self.remove_quiet(dir, name, a, path)?;
                }
                // Owned as recorded: a directory made by the daemon for its
                // own user would lock the agent out of it.
                let owner = Caller { uid: state.uid, gid: state.gid, pid: self.caller.pid };
                let a = self.tree.mkdir(dir, name, state.perm, owner).map_err(|e| live_err(path, e))?;
                self.touch(dir, name);
                Ok(a.ino)
            }
        }
    }

    fn sync_dir_contents(&mut self, ino: Ino, target: &Node, path: PathBuf) -> Result<(), RestoreError> {
        let wanted = self.view.list(target)?;
        if ino == Ino(0) {
            // Dry run below a directory that would be recreated.
            for (name, child) in wanted {
                let p = path.join(&name);
                self.plan(&p, Action::Recreate);
                if self.view.state(&child)?.is_dir() {
                    self.sync_dir_contents(Ino(0), &child, p)?;
                }
            }
            return Ok(());
        }
        let wanted_names: BTreeSet<OsString> = wanted.iter().map(|(n, _)| n.clone()).collect();
        for name in self.tree.names(ino).map_err(|e| live_err(&path, e))? {
            if ino == Ino::ROOT && name == crate::workspace::HIDDEN_DIR {
                continue;
            }
            if !wanted_names.contains(&name) {
                let p = path.join(&name);
                if let Some(a) = self.tree.child(ino, &name).map_err(|e| live_err(&p, e))? {
                    self.remove(ino, &name, a, &p)?;
                }
            }
        }
        for (name, child) in wanted {
            let p = path.join(&name);
            self.sync_entry(ino, &name, Some(&child), p)?;
        }
        Ok(())
    }

    fn sync_attrs(&mut self, ino: Ino, live: Option<Attr>, state: &NodeState, path: &Path) -> Result<(), RestoreError> {
        let live = match live {
            Some(a) => a,
            None => self.tree.getattr(ino, None).map_err(|e| live_err(path, e))?,
        };
        let mtime = crate::workspace::attr::time_of_ns(state.mtime_ns);
        let mut set = owner_and_mode_changes(&live, state);
        let live_x = self.tree.xattrs_of(ino);
        let xattrs_differ = live_x != state.xattrs;
        if set.mode.is_none() && set.uid.is_none() && set.gid.is_none() && live.mtime == mtime && !xattrs_differ {
            return Ok(());
        }
        if !live.kind.eq(&Kind::Dir) || set.mode.is_some() || set.uid.is_some() || xattrs_differ {
            self.plan(path, Action::Attributes);
        }
        if self.dry_run {
            return Ok(());
        }
        // Before the change: a setattr that fails still changed the ctime
        // (and its undo may fail), so the kernel must forget its copy then too.
        self.touched.inodes.insert(ino);
        if xattrs_differ {
            replace_xattrs(self.tree, ino, &live_x, &state.xattrs, self.caller);
        }
        if live.kind != Kind::Symlink || set.uid.is_some() || set.gid.is_some() {
            set.mtime = Some(SetTime::At(mtime));
            set.atime = Some(SetTime::At(mtime));
        }
        self.tree.setattr(ino, set, None, self.caller).map_err(|e| live_err(path, e))?;
        Ok(())
    }

    /// Creates a file under an unpredictable temporary name in `dir`. The
    /// directory is the agent's too: a name it could guess (the daemon's pid
    /// is public) could be taken first to make every restore fail, so the
    /// name is random and a taken one is retried with another.
    fn create_temp(
        &mut self,
        dir: Ino,
        perm: u32,
        caller: Caller,
        path: &Path,
    ) -> Result<(OsString, Created), RestoreError> {
        const ATTEMPTS: u32 = 16;
        let mut last = Errno(libc::EEXIST);
        for _ in 0..ATTEMPTS {
            self.temp_counter += 1;
            let temp = OsString::from(format!(".rewindfs-restore-{:016x}", random_u64(self.temp_counter)));
            match self.tree.create(dir, &temp, perm, libc::O_WRONLY, caller) {
                Ok(created) => return Ok((temp, created)),
                Err(e) if e == Errno(libc::EEXIST) => last = e,
                Err(e) => return Err(live_err(path, e)),
            }
        }
        log::warn!("{ATTEMPTS} random temporary names next to {} were all taken", path.display());
        Err(live_err(path, last))
    }

    /// Writes the file next to its place under a temporary name, then
    /// renames it over: a reader sees the old or the new file, never half.
    fn write_file(&mut self, dir: Ino, name: &OsStr, state: &NodeState, path: &Path) -> Result<(), RestoreError> {
        let caller = Caller { uid: state.uid, gid: state.gid, pid: self.caller.pid };
        let (temp, (attr, fh, _)) = self.create_temp(dir, state.perm, caller, path)?;
        let mut offset = 0u64;
        let mut buf = vec![0u8; 1 << 20];
        let result = (|| -> Result<(), RestoreError> {
            loop {
                let n = self.view.read_at(state, offset, &mut buf)?;
                if n == 0 {
                    break;
                }
                self.tree.write(fh, offset, &buf[..n]).map_err(|e| live_err(path, e))?;
                offset += n as u64;
            }
            Ok(())
        })();
        self.tree.release(fh);
        if let Err(e) = result {
            let _ = self.tree.unlink(dir, &temp, self.caller);
            return Err(e);
        }
        let placed = (|| -> Result<_, RestoreError> {
            let replaced = self.tree.child(dir, name).map_err(|e| live_err(path, e))?;
            if let Some(live) = replaced
                && live.kind == Kind::Dir
            {
                self.remove_quiet(dir, name, live, path)?;
            }
            self.tree.rename(dir, &temp, dir, name, 0, self.caller).map_err(|e| live_err(path, e))?;
            Ok(replaced)
        })();
        // A rename refused (the replaced file's content cannot be stored:
        // a full store) must not leave the temporary file in the tree.
        let replaced = match placed {
            Ok(r) => r,
            Err(e) => {
                let _ = self.tree.unlink(dir, &temp, self.caller);
                return Err(e);
            }
        };
        self.touch(dir, &temp);
        self.touch(dir, name);
        // A replaced file with other names lost one: the kernel must not
        // keep its old link count.
        if let Some(live) = replaced {
            self.touched.inodes.insert(live.ino);
        }
        self.sync_attrs(attr.ino, None, state, path)?;
        Ok(())
    }

    fn remove(&mut self, dir: Ino, name: &OsStr, live: Attr, path: &Path) -> Result<(), RestoreError> {
        self.plan(path, Action::Delete);
        if self.dry_run {
            return Ok(());
        }
        self.remove_quiet(dir, name, live, path)
    }

    /// Removes a live entry (recursively for directories), never following
    /// symlinks.
    fn remove_quiet(&mut self, dir: Ino, name: &OsStr, live: Attr, path: &Path) -> Result<(), RestoreError> {
        if live.kind == Kind::Dir {
            for child in self.tree.names(live.ino).map_err(|e| live_err(path, e))? {
                let p = path.join(&child);
                if let Some(a) = self.tree.child(live.ino, &child).map_err(|e| live_err(&p, e))? {
                    self.remove_quiet(live.ino, &child, a, &p)?;
                }
            }
            self.tree.rmdir(dir, name, self.caller).map_err(|e| live_err(path, e))?;
        } else {
            self.tree.unlink(dir, name, self.caller).map_err(|e| live_err(path, e))?;
        }
        self.touch(dir, name);
        self.touched.inodes.insert(live.ino);
        Ok(())
    }
}

fn type_bits(kind: Kind) -> u32 {
    match kind {
        Kind::Fifo => libc::S_IFIFO,
        Kind::Socket => libc::S_IFSOCK,
        Kind::CharDevice => libc::S_IFCHR,
        Kind::BlockDevice => libc::S_IFBLK,
        Kind::Dir => libc::S_IFDIR,
        Kind::Symlink => libc::S_IFLNK,
        Kind::File => libc::S_IFREG,
    }
}

/// The owner and mode changes that give `live` the recorded `state`'s.
pub(crate) fn owner_and_mode_changes(live: &Attr, state: &NodeState) -> SetAttr {
    let mut set = SetAttr::default();
    if u32::from(live.perm) != state.perm && live.kind != Kind::Symlink {
        set.mode = Some(state.perm);
    }
    if live.uid != state.uid {
        set.uid = Some(state.uid);
    }
    if live.gid != state.gid {
        set.gid = Some(state.gid);
    }
    set
}

/// Makes the xattrs of `ino` exactly `want` (recorded through the tree).
pub(crate) fn replace_xattrs(
    tree: &LiveTree,
    ino: Ino,
    live: &[(Vec<u8>, Vec<u8>)],
    want: &[(Vec<u8>, Vec<u8>)],
    caller: Caller,
) {
    for (n, _) in live {
        if !want.iter().any(|(m, _)| m == n) {
            let _ = tree.removexattr(ino, OsStr::from_bytes(n), caller);
        }
    }
    for (n, v) in want {
        let _ = tree.setxattr(ino, OsStr::from_bytes(n), v, 0, caller);
    }
}

/// 64 unpredictable bits: the standard library seeds `RandomState` from the
/// operating system's random source.
pub fn random_u64(salt: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(salt);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each error of this module, through the one boundary ([`AsErrno`]).
    #[test]
    fn errno_mapping_table() {
        let cases: Vec<(RestoreError, i32, &str)> = vec![
            (RestoreError::Live { path: "a".into(), errno: Errno::EEXIST }, libc::EEXIST, "restore live"),
            (RestoreError::BadPath("..".into()), libc::EINVAL, "restore bad path"),
        ];
        for (err, want, what) in cases {
            assert_eq!(err.errno(), Errno(want), "{what}");
        }
    }
}
