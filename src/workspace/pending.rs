//! Files whose bytes are still in the chunk store: a rewind puts a file in
//! place with its size and attributes at once and leaves the bytes to the
//! settler, so the rewind costs metadata only. Any open of such a file
//! writes its bytes first; reads through views come from the store.

use std::collections::HashMap;
use std::os::fd::AsFd;

use rustix::fs::{AtFlags, Timespec, Timestamps};

use crate::error::Errno;
use crate::meta::{ObjectId, PendingList};
use crate::store::ContentRef;
use crate::sys::{self, FileHandle};
use crate::workspace::live::LiveTree;

type Res<T> = std::result::Result<T, Errno>;

/// What a pending file must contain.
#[derive(Clone, Debug)]
pub struct PendingContent {
    pub content: ContentRef,
    pub mtime_ns: i64,
}

/// The pending files of a tree, by handle bytes.
#[derive(Default, Debug)]
pub struct PendingSet {
    pub(crate) files: std::sync::Mutex<HashMap<Vec<u8>, PendingContent>>,
    /// One materialisation at a time: a file is never written twice.
    pub(crate) settle_lock: std::sync::Mutex<()>,
}

fn eio<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> Errno + '_ {
    move |e| {
        log::error!("{what}: {e}");
        Errno::EIO
    }
}

impl LiveTree {
    fn pending_map(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, PendingContent>> {
        self.pending.files.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many rewound files still wait for the settler to write their
    /// bytes into the workspace (0: the workspace on disk is up to date).
    pub fn pending_count(&self) -> usize {
        self.pending_map().len()
    }

    /// Loads the pending files recorded by an earlier daemon (a crash
    /// during a settle resumes here).
    pub fn load_pending(&self) -> Res<usize> {
        let Some(journal) = self.journal() else { return Ok(0) };
        let rows = journal.with_meta(|m| m.all_pending()).map_err(eio("cannot read pending files"))?;
        let mut map = self.pending_map();
        for row in rows {
            let Some(chunks) = row.chunks else {
                log::error!("the chunk list of a pending file is missing from the journal");
                return Err(Errno::EIO);
            };
            let spans = ContentRef::decode_chunks(&chunks).map_err(eio("malformed pending content"))?;
            let hash = crate::store::ChunkId::from_slice(&row.hash).map_err(eio("malformed pending hash"))?;
            let size = spans.iter().map(|s| s.len as u64).sum();
            let content = ContentRef { hash, size, chunks: spans };
            map.insert(row.handle, PendingContent { content, mtime_ns: row.mtime_ns });
        }
        Ok(map.len())
    }

    /// Records that the file `handle` must receive `content`, whose chunk
    /// list is also held by the pre-image record `record` (turn, object)
    /// when given (then it is not copied).
    pub(crate) fn add_pending(
        &self,
        handle: &FileHandle,
        content: ContentRef,
        record: Option<(i64, ObjectId)>,
        mtime_ns: i64,
    ) -> Res<()> {
        let Some(journal) = self.journal() else { return Err(Errno::EIO) };
        let key = handle.to_bytes();
        let inline;
        let list = match record {
            Some((turn, object)) => PendingList::Record(turn, object),
            None => {
                inline = content.encode_chunks();
                PendingList::Inline(&inline)
            }
        };
        journal
            .with_meta(|m| m.add_pending(&key, content.hash.as_bytes(), list, mtime_ns))
            .map_err(eio("cannot record pending content"))?;
        self.pending_map().insert(key, PendingContent { content, mtime_ns });
        Ok(())
    }

    /// The content a pending file will receive, if it is pending.
    pub fn pending_content(&self, handle: &FileHandle) -> Option<ContentRef> {
        self.pending_map().get(&handle.to_bytes()).map(|p| p.content.clone())
    }

    /// Shows a pending file with the mtime it will have: until the settler
    /// is done, the backing file has the placeholder's mtime or that of the
    /// settler's own writes, which the kernel would cache for the whole
    /// cache timeout if it asked in that moment.
    pub(crate) fn with_pending_mtime(&self, handle: &FileHandle, attr: &mut crate::workspace::Attr) {
        let map = self.pending_map();
        if map.is_empty() {
            return;
        }
        if let Some(p) = map.get(&handle.to_bytes()) {
            attr.mtime = crate::view::browse::time_of_ns(p.mtime_ns);
        }
    }

    /// Writes a pending file's bytes now (no-op when it is not pending).
    pub fn settle(&self, handle: &FileHandle) -> Res<()> {
        if self.pending_map().is_empty() {
            return Ok(());
        }
        let _one = self.pending.settle_lock.lock().unwrap_or_else(|p| p.into_inner());
        let key = handle.to_bytes();
        let Some(p) = self.pending_map().get(&key).cloned() else { return Ok(()) };
        let Some(journal) = self.journal() else { return Err(Errno::EIO) };
        match self.open_handle(handle, libc::O_WRONLY) {
            Ok(fd) => {
                let mut file = std::fs::File::from(fd);
                crate::store::read_content_to(journal.store(), &p.content, &mut file)
                    .map_err(eio("cannot write a rewound file"))?;
                file.sync_data().map_err(Errno::from)?;
                let path = sys::proc_fd_path(file.as_fd());
                let t = Timespec {
                    tv_sec: p.mtime_ns.div_euclid(1_000_000_000),
                    tv_nsec: p.mtime_ns.rem_euclid(1_000_000_000) as _,
                };
                let _ = rustix::fs::utimensat(
                    rustix::fs::CWD,
                    path.as_c_str(),
                    &Timestamps { last_access: t, last_modification: t },
                    AtFlags::empty(),
                );
            }
            // Removed since: nothing to fill.
            Err(e) if e == Errno::ENOENT => {}
            Err(e) => return Err(e),
        }
        crate::world::test_hooks::kill_point("settle-written");
        journal.settled(&key).map_err(eio("cannot clear pending content"))?;
        self.pending_map().remove(&key);
        log::debug!("settled a rewound file ({} bytes)", p.content.size);
        Ok(())
    }

    /// Settles one pending file; `false` when none is left.
    pub fn settle_one(&self) -> Res<bool> {
        let next = self.pending_map().keys().next().cloned();
        match next.and_then(|k| FileHandle::from_bytes(&k)) {
            Some(h) => self.settle(&h).map(|_| true),
            None => Ok(false),
        }
    }
}
