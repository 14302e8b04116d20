//! Which directory a store holds the history of. A store is found by the
//! workspace's path, but its records name the workspace's files by kernel
//! handle: a directory removed and made again at the same path is another
//! directory, whose files no record names, and the old history read
//! through it would give EIO for everything it held. So the store keeps
//! its workspace root's handle (set at the first mount), a store that
//! records another directory is refused ([`check`]), and the default store
//! of a replaced directory is set aside by the CLI ([`records_other`]).

use std::os::fd::AsFd;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};
use crate::meta::{Meta, MetaResult};

/// The state key of the workspace root's handle.
const ROOT_KEY: &str = "workspace_root";

/// The handle of the directory `workspace` (not following a final symlink).
pub fn root_handle(workspace: &Path) -> Result<Vec<u8>> {
    let dir = rustix::fs::open(
        workspace,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| Error::io(format!("cannot open workspace {}", workspace.display()), e.into()))?;
    let handle = crate::sys::name_to_handle_at(dir.as_fd(), std::ffi::OsStr::new(""))
        .map_err(|e| Error::io(format!("cannot identify workspace {}", workspace.display()), e))?;
    Ok(handle.to_bytes())
}

/// True if `meta` records a workspace root other than `root` (false for a
/// store that records none yet).
fn other(meta: &Meta, root: &[u8]) -> MetaResult<bool> {
    Ok(meta.get_state_bytes(ROOT_KEY)?.is_some_and(|r| r != root))
}

/// Whether the store at `store` (read-only, if it has a database at all)
/// holds the history of another directory than the one now at `workspace`.
pub fn records_other(store: &Path, workspace: &Path) -> Result<bool> {
    Ok(other_directory(store, workspace)?.is_some())
}

/// The path the store recorded for the other directory whose history it
/// holds (empty when it recorded none), if it holds another's.
fn other_directory(store: &Path, workspace: &Path) -> Result<Option<PathBuf>> {
    let db = crate::store_dir::StoreDir::new(store).meta();
    if !db.is_file() {
        return Ok(None);
    }
    // A database that cannot be read says nothing here: the store's checks
    // at opening name the damage (`journal::store_check`).
    let Ok(meta) = Meta::open_read_only(&db) else { return Ok(None) };
    if !other(&meta, &root_handle(workspace)?).unwrap_or(false) {
        return Ok(None);
    }
    let path = meta.get_state_bytes("workspace").ok().flatten().unwrap_or_default();
    Ok(Some(PathBuf::from(std::ffi::OsString::from_vec(path))))
}

/// The refusal of a store that records another directory.
pub fn refusal(store: &Path, workspace: &Path) -> Error {
    let recorded = other_directory(store, workspace).ok().flatten().unwrap_or_default();
    let whose = if recorded.as_os_str().is_empty() || recorded == workspace {
        format!(
            "the directory that was at {} before (it was removed or replaced since: its files are not the ones \
             the history names)",
            workspace.display()
        )
    } else {
        format!("another directory ({})", recorded.display())
    };
    Error::kind_of(
        ErrorKind::Usage,
        format!(
            "store {} holds the history of {whose}; give {} a store of its own (`--store DIR`)",
            store.display(),
            workspace.display()
        ),
    )
}

/// At opening: refuses a store that records another root than `workspace`'s,
/// and records the root in a store that has none yet.
pub fn check(meta: &Meta, store: &Path, workspace: &Path) -> Result<()> {
    let root = root_handle(workspace)?;
    let failed = |e: crate::meta::MetaError| Error::Daemon(format!("cannot read the workspace's identity: {e}"));
    if other(meta, &root).map_err(failed)? {
        return Err(refusal(store, workspace));
    }
    if meta.get_state_bytes(ROOT_KEY).map_err(failed)?.is_none() {
        meta.set_state_bytes(ROOT_KEY, &root).map_err(failed)?;
    }
    Ok(())
}
