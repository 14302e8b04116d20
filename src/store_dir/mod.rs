//! The store directory's layout: what rewindfs puts in it and where,
//! named once. Imports nothing from the crate, so every layer that opens a
//! part (the chunk store, the attic, the journal) can reach it; the checks
//! that the parts belong together need the database and the journal's log,
//! so they sit with the journal, which opens a store directory as a whole
//! (`journal::store_check`, `journal::store_identity`).
//!
//! A store holds the metadata database (`meta.sqlite` and its WAL), the
//! chunk store (`chunks/`: packs, indexes and the store id), the attic
//! (`attic/`: files moved aside, named by object id), the journal log the
//! daemon appends to between folds, the daemon's own log and the lock that
//! keeps one daemon per store.

use std::path::{Path, PathBuf};

/// Every name rewindfs puts at the top of a store directory. Anything else
/// there means the directory is someone's, not a store.
pub const ENTRIES: &[&str] = &[
    "meta.sqlite",
    "meta.sqlite-wal",
    "meta.sqlite-shm",
    "journal.log",
    "daemon.log",
    "lock",
    "chunks",
    "attic",
    // The remote the store's history is pushed to (`mount --remote`).
    "remote",
    // A store on a filesystem of its own.
    "lost+found",
];

/// Creates directory `path` of a store (and its missing parents) private to
/// its owner, mode 0700 whatever the umask (the daemon runs with umask 0):
/// a store holds the past contents of every file of the workspace.
pub fn create_private_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(path)
}

/// The paths of a store's parts, named once.
#[derive(Clone, Debug)]
pub struct StoreDir {
    root: PathBuf,
}

impl StoreDir {
    pub fn new(root: &Path) -> StoreDir {
        StoreDir { root: root.to_path_buf() }
    }
    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn meta(&self) -> PathBuf {
        self.root.join("meta.sqlite")
    }
    pub fn chunks(&self) -> PathBuf {
        self.root.join("chunks")
    }
    pub fn packs(&self) -> PathBuf {
        self.chunks().join("packs")
    }
    /// The file beside the packs that says which database they belong to.
    pub fn id_file(&self) -> PathBuf {
        self.chunks().join("store-id")
    }
    pub fn attic(&self) -> PathBuf {
        self.root.join("attic")
    }
    pub fn journal_log(&self) -> PathBuf {
        self.root.join("journal.log")
    }
    pub fn daemon_log(&self) -> PathBuf {
        self.root.join("daemon.log")
    }
    pub fn lock(&self) -> PathBuf {
        self.root.join("lock")
    }
    /// The address (`s3://bucket/prefix`, never credentials) of the
    /// remote the history is pushed to.
    pub fn remote(&self) -> PathBuf {
        self.root.join("remote")
    }
}
