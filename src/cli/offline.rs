//! The history of a workspace that is not mounted, read from its store:
//! `log`, `diff`, `history` and `du` work after `rewindfs run` has ended,
//! without mounting. The store is opened read-only (no recording, no
//! collection) and locked while it is read, so no daemon starts on it
//! meanwhile; a store in use is refused.

use std::path::{Path, PathBuf};

use crate::cli::common;
use crate::daemon::registry::{self, MountInfo};
use crate::engine::Workspace;
use crate::error::{Error, ErrorKind, Result};
use crate::store_dir::StoreDir;

/// A store opened for reading, with the workspace it records.
pub struct Offline {
    /// Where paths are taken from, as if the workspace were mounted in place.
    pub info: MountInfo,
    /// The workspace opened read-only (`Workspace::open_read_only`); no
    /// daemon serves it, so its tree lock is the readers' own.
    pub ws: Workspace,
    _lock: registry::Lock,
}

impl Offline {
    /// The workspace and the store's lock apart, for a reader that outlives
    /// this value (the server of a `show` view).
    pub fn into_parts(self) -> (MountInfo, Workspace, registry::Lock) {
        (self.info, self.ws, self._lock)
    }
}

/// What a reading command works on.
pub enum Source {
    Mounted(MountInfo),
    Store(Box<Offline>),
}

/// The workspace holding `target` (or one of its parents) whose default
/// store exists, with that store.
fn workspace_with_store(target: &Path) -> Option<(PathBuf, PathBuf)> {
    target.ancestors().find_map(|d| {
        let store = common::default_store(d);
        StoreDir::new(&store).meta().is_file().then(|| (d.to_path_buf(), store))
    })
}

/// The directory a command names with `-C`, or the current one.
fn target(explicit: Option<&Path>) -> Result<PathBuf> {
    match explicit {
        Some(p) => p.canonicalize().map_err(|e| Error::path(p, format!("cannot resolve: {e}"))),
        None => std::env::current_dir().map_err(|e| Error::io("cannot read the current directory", e)),
    }
}

/// The mount holding `explicit` (or the current directory); when there is
/// none, the store of the unmounted workspace holding it, opened for
/// reading. `what` names the command for the sentence on stderr.
pub fn mount_or_store(explicit: Option<&Path>, what: &str) -> Result<Source> {
    let no_mount = match common::find_mount(explicit) {
        Ok(info) => return Ok(Source::Mounted(info)),
        Err(e) if e.kind() == ErrorKind::NoMount => e,
        Err(e) => return Err(e),
    };
    let Some((workspace, store)) = target(explicit).ok().and_then(|t| workspace_with_store(&t)) else {
        return Err(no_mount);
    };
    if crate::engine::identity::records_other(&store, &workspace)? {
        return Err(Error::kind_of(
            ErrorKind::NoMount,
            format!(
                "{} has no history yet: its store {} holds the history of the directory that was at this path \
                 before (it was removed or replaced since); `rewindfs mount` sets that store aside and starts \
                 this directory's own",
                workspace.display(),
                store.display()
            ),
        ));
    }
    let offline = open(&workspace, &store)?;
    eprintln!(
        "rewindfs: {} is not mounted: {what} read from its store {} (files changed since the unmount are read \
         as they are now; a mount notices such changes and marks them)",
        workspace.display(),
        store.display()
    );
    Ok(Source::Store(Box::new(offline)))
}

/// Opens `store` read-only with `workspace` as the live tree (nothing is
/// recorded), holding the store's lock: refused when a daemon uses it.
pub fn open(workspace: &Path, store: &Path) -> Result<Offline> {
    let dir = StoreDir::new(store);
    let lock = registry::lock(&dir.lock(), &format!("store {}", store.display())).map_err(|e| {
        Error::kind_of(
            ErrorKind::Busy,
            format!("{e}; the store is in use (a mount starting or ending?): try again, or use -C <MOUNT>"),
        )
    })?;
    let ws = Workspace::open_read_only(workspace, store)?;
    let info = MountInfo {
        mountpoint: workspace.to_path_buf(),
        workspace: workspace.to_path_buf(),
        store: store.to_path_buf(),
        in_place: true,
        pid: 0,
        started_at: 0,
        socket: PathBuf::new(),
        passthrough: false,
        workspace_id: None,
        recovered: Vec::new(),
    };
    Ok(Offline { info, ws, _lock: lock })
}

/// What `rewind`, `restore` and `show` say outside any mount when the
/// workspace has a store: how to get there.
pub fn needs_mount(explicit: Option<&Path>, no_mount: Error, command: &str) -> Error {
    let Some((workspace, _)) = target(explicit).ok().and_then(|t| workspace_with_store(&t)) else {
        return no_mount;
    };
    let ws = crate::text::quote_name(workspace.as_os_str());
    Error::kind_of(
        ErrorKind::NoMount,
        format!(
            "{ws} is not mounted; its history is kept, and `{command}` changes or mounts the tree, so it needs \
             the mount: `rewindfs mount {ws}`, then `rewindfs {command} ...` in it (`rewindfs unmount {ws}` after), \
             or in one go `rewindfs run {ws} -- rewindfs {command} ...`; `rewindfs log -C {ws}` lists the checkpoints"
        ),
    )
}
