//! Files whose bytes are still in the chunk store: a rewind puts a file in
//! place with its size and attributes at once and leaves the bytes to the
//! settler, so the rewind costs metadata only. Any open of such a file
//! writes its bytes first; reads through views come from the store.
//!
//! Bytes that cannot be read back from the store (a damaged or missing
//! pack) are never written: the file stays pending, is marked unsettled
//! (reads give EIO, `status` lists it) and is retried with a growing delay,
//! while the other pending files go on.
//!
//! A file stops being pending only once its bytes are durable. The
//! settler writes files in batches and makes each batch durable together
//! (writeback started as each file is written, then one `syncfs` and one
//! commit of the journal's database): a rewind of thousands of small files
//! costs a few flushes, not one per file.

use std::collections::HashMap;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::fs::Timespec;

use crate::error::Errno;
use crate::journal::Journal;
use crate::meta::{ObjectId, PendingList};
use crate::store::ContentRef;
use crate::sys::FileHandle;
use crate::workspace::backing::{self, Backing};

type Res<T> = std::result::Result<T, Errno>;

pub use crate::faults::SETTLER_THREAD;

/// What a pending file must contain.
#[derive(Clone, Debug)]
pub struct PendingContent {
    pub content: ContentRef,
    pub mtime_ns: i64,
    /// The checkpoint sealed just before the rewind that made it pending
    /// (its safety checkpoint), where it was not yet; None for files loaded
    /// from an earlier daemon.
    pub before: Option<i64>,
}

/// A pending file the settler could not fill.
#[derive(Clone, Debug)]
pub struct Unsettled {
    pub handle: FileHandle,
    /// Where it is, relative to the workspace root (None: not in the tree,
    /// e.g. moved to the attic since).
    pub path: Option<std::path::PathBuf>,
    /// Why (the chunk that cannot be read, or the write that failed).
    pub reason: String,
    pub before: Option<i64>,
    next_try: Instant,
    delay: Duration,
}

/// First and longest wait before a file that could not be settled is tried
/// again by the settler (a reader's open tries it at once).
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// Contents up to this size are read whole into memory and written once
/// verified; larger ones are read twice (verified, then written).
const VERIFY_IN_MEMORY: u64 = 64 << 20;

/// The settler asks whether to give way at least this often (in bytes
/// written), and after every chunk it reads.
const GIVE_WAY_STEP: usize = 4 << 20;

/// A step of the settler writes at most this many files, then makes them
/// durable together (see the module's doc). It holds their descriptors
/// until then.
const BATCH_FILES: usize = 256;

/// A step takes no more files once it has written this many bytes (a
/// larger file is written alone), or once it has been writing this long:
/// a reader that opens a pending file waits for the step under way.
const BATCH_BYTES: u64 = 32 << 20;
const BATCH_TIME: Duration = Duration::from_millis(50);

/// What one step of the settler did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettleStep {
    /// A file was settled, or marked unsettled and skipped until its next
    /// try: more may wait.
    Settled,
    /// No pending file is left to try now.
    Idle,
    /// A rewind or restore waits to freeze the tree: the file was left
    /// pending part-written (reads never see those bytes: an open writes
    /// the whole file first) and is written again from its start.
    GaveWay,
}

/// Why a file was not filled.
enum Unfilled {
    GaveWay,
    Failed(Errno, String),
}

/// A pending file whose bytes were written, not yet durable.
struct Written {
    handle: FileHandle,
    content: PendingContent,
    /// None: the file is gone (nothing was written, nothing to sync).
    file: Option<std::fs::File>,
    /// Its ctime once filled: the daemon's own change.
    ctime_ns: Option<i64>,
}

/// The pending files of a tree, by handle.
#[derive(Default, Debug)]
pub struct PendingSet {
    files: std::sync::Mutex<HashMap<FileHandle, PendingContent>>,
    /// One materialisation at a time: a file is never written twice.
    settle_lock: std::sync::Mutex<()>,
    /// Pending files that could not be settled, by handle.
    unsettled: std::sync::Mutex<HashMap<FileHandle, Unsettled>>,
    /// Since the daemon started: files settled, and the most made durable
    /// by one step.
    settled: std::sync::atomic::AtomicU64,
    largest_step: std::sync::atomic::AtomicU64,
}

/// What the settler has done since the daemon started (`status --json`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SettledCounts {
    /// Rewound files whose bytes were written and made durable (or found
    /// removed since), by the settler or by a reader's open.
    pub files: u64,
    /// The most files one step made durable together.
    pub largest_step: u64,
}

/// Writes pending files' bytes into the tree: the pending set, with the
/// backing tree it writes to and the journal that lists the files.
#[derive(Clone, Copy)]
pub struct Settler<'a> {
    set: &'a PendingSet,
    backing: &'a Backing,
    journal: Option<&'a Journal>,
}

fn eio<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> Errno + '_ {
    move |e| {
        log::error!("{what}: {e}");
        Errno::EIO
    }
}

impl PendingSet {
    fn pending_map(&self) -> std::sync::MutexGuard<'_, HashMap<FileHandle, PendingContent>> {
        crate::poison::lock(&self.files, "the rewound files awaiting their bytes")
    }

    fn unsettled_map(&self) -> std::sync::MutexGuard<'_, HashMap<FileHandle, Unsettled>> {
        crate::poison::lock(&self.unsettled, "the unsettled files")
    }

    /// The pending files that could not be settled so far, and why.
    pub fn unsettled(&self) -> Vec<Unsettled> {
        let mut list: Vec<Unsettled> = self.unsettled_map().values().cloned().collect();
        list.sort_by(|a, b| a.path.cmp(&b.path));
        list
    }

    /// How many rewound files still wait for the settler to write their
    /// bytes into the workspace (0: the workspace on disk is up to date).
    pub fn count(&self) -> usize {
        self.pending_map().len()
    }

    /// What was settled since the daemon started.
    pub fn settled_counts(&self) -> SettledCounts {
        use std::sync::atomic::Ordering::Relaxed;
        SettledCounts { files: self.settled.load(Relaxed), largest_step: self.largest_step.load(Relaxed) }
    }

    /// The content a pending file will receive, if it is pending.
    pub fn content(&self, handle: &FileHandle) -> Option<ContentRef> {
        self.pending_map().get(handle).map(|p| p.content.clone())
    }

    /// Shows a pending file with the mtime it will have: until the settler
    /// is done, the backing file has the placeholder's mtime or that of the
    /// settler's own writes, which the kernel would cache for the whole
    /// cache timeout if it asked in that moment.
    pub(crate) fn with_mtime(&self, handle: &FileHandle, attr: &mut crate::workspace::Attr) {
        let map = self.pending_map();
        if map.is_empty() {
            return;
        }
        if let Some(p) = map.get(handle) {
            attr.mtime = super::attr::time_of_ns(p.mtime_ns);
        }
    }
}

impl<'a> Settler<'a> {
    pub(crate) fn new(set: &'a PendingSet, backing: &'a Backing, journal: Option<&'a Journal>) -> Settler<'a> {
        Settler { set, backing, journal }
    }

    fn pending_map(&self) -> std::sync::MutexGuard<'a, HashMap<FileHandle, PendingContent>> {
        self.set.pending_map()
    }

    fn unsettled_map(&self) -> std::sync::MutexGuard<'a, HashMap<FileHandle, Unsettled>> {
        self.set.unsettled_map()
    }

    /// Loads the pending files recorded by an earlier daemon (a crash
    /// during a settle resumes here).
    pub fn load(&self) -> Res<usize> {
        let Some(journal) = self.journal else { return Ok(0) };
        let rows = journal.with_intents(|m| m.all_pending()).map_err(eio("cannot read pending files"))?;
        let mut map = self.pending_map();
        for row in rows {
            let Some(chunks) = row.chunks else {
                log::error!("the chunk list of a pending file is missing from the journal");
                return Err(Errno::EIO);
            };
            let content = ContentRef::from_columns(&row.hash, &chunks).map_err(eio("malformed pending content"))?;
            // Not a handle any file can have: nothing to fill.
            let Some(handle) = FileHandle::from_bytes(&row.handle) else {
                log::error!("the handle of a pending file is malformed; it is left out");
                continue;
            };
            map.insert(handle, PendingContent { content, mtime_ns: row.mtime_ns, before: None });
        }
        Ok(map.len())
    }

    /// Records that the file `handle` must receive `content`, whose chunk
    /// list is also held by the pre-image record `record` (turn, object)
    /// when given (then it is not copied).
    pub(crate) fn add(
        &self,
        handle: &FileHandle,
        content: ContentRef,
        record: Option<(i64, ObjectId)>,
        mtime_ns: i64,
    ) -> Res<()> {
        let Some(journal) = self.journal else { return Err(Errno::EIO) };
        let inline;
        let list = match record {
            Some((turn, object)) => PendingList::Record(turn, object),
            None => {
                inline = content.encode_chunks();
                PendingList::Inline(&inline)
            }
        };
        journal.note_pending(handle, &content, list, mtime_ns).map_err(eio("cannot record pending content"))?;
        let before = Some(journal.current_turn());
        self.pending_map().insert(handle.clone(), PendingContent { content, mtime_ns, before });
        Ok(())
    }

    /// Writes a pending file's bytes now, for a reader's open (no-op when
    /// it is not pending): a step of one file that never gives way.
    /// Content that cannot be read back leaves the file untouched and
    /// pending, and answers EIO (logged with the path and the chunk).
    pub fn settle(&self, handle: &FileHandle) -> Res<()> {
        // Every open asks: one not pending must not wait for the settler's
        // step (up to 256 files and a sync) under its lock. A file becomes
        // pending only in a rewind or restore, with the tree frozen (no open
        // beside it), or when the mount starts.
        if !self.pending_map().contains_key(handle) {
            return Ok(());
        }
        match self.settle_batch(std::slice::from_ref(handle), &|| false, true)? {
            (_, Some(errno)) => Err(errno),
            (_, None) => Ok(()),
        }
    }

    /// Opens the pending file `handle` and writes `p` into it, without
    /// making it durable. The content comes back with the error.
    fn write(
        &self,
        handle: &FileHandle,
        p: PendingContent,
        journal: &Journal,
        give_way: &dyn Fn() -> bool,
    ) -> Result<Written, (PendingContent, Unfilled)> {
        match self.backing.open_handle(handle, libc::O_WRONLY) {
            Ok(fd) => match fill(journal.store(), &p, fd, give_way) {
                Ok((file, ctime_ns)) => Ok(Written { handle: handle.clone(), content: p, file: Some(file), ctime_ns }),
                Err(Unfilled::GaveWay) => {
                    log::debug!("the settler gave way to a rewind or restore ({} bytes left pending)", p.content.size);
                    Err((p, Unfilled::GaveWay))
                }
                Err(failed) => Err((p, failed)),
            },
            // Removed since: nothing to fill.
            Err(e) if e == Errno::ENOENT => {
                Ok(Written { handle: handle.clone(), content: p, file: None, ctime_ns: None })
            }
            Err(e) => Err((p, Unfilled::Failed(e, format!("cannot open it: {e}")))),
        }
    }

    /// Makes the `written` files durable, then no longer pending, in one
    /// commit of the journal's database. Several files are made durable by
    /// one `syncfs` of the filesystem (their bytes and its journal in one
    /// flush, where an `fdatasync` each costs a flush each); one file, or
    /// several whose `syncfs` failed, by an `fdatasync` each, which also
    /// says which file failed. A file whose sync fails stays pending,
    /// marked unsettled; the first such failure is returned.
    fn make_durable(&self, journal: &Journal, written: Vec<Written>, for_reader: bool) -> Res<Option<Errno>> {
        let mut failed = None;
        let mut fail = |w: &Written, e: std::io::Error| {
            let (errno, reason) = write_failure(&e);
            let errno = self.cannot_settle(&w.handle, &w.content, reason, errno, for_reader);
            failed = failed.or(Some(errno));
        };
        let (mut durable, mut to_sync) = (Vec::with_capacity(written.len()), Vec::new());
        for w in written {
            match &w.file {
                None => durable.push(w),
                Some(_) if crate::faults::fail_point("settle-sync") => {
                    fail(&w, std::io::Error::from_raw_os_error(libc::EIO))
                }
                Some(_) => to_sync.push(w),
            }
        }
        let together = match to_sync.as_slice() {
            [first, _, ..] => first.file.as_ref().is_some_and(|f| rustix::fs::syncfs(f).is_ok()),
            _ => false,
        };
        for w in to_sync {
            if !together && let Some(Err(e)) = w.file.as_ref().map(|f| f.sync_data()) {
                fail(&w, e);
                continue;
            }
            durable.push(w);
        }
        crate::faults::kill_point("settle-written");
        let done: Vec<(FileHandle, Option<i64>)> = durable.iter().map(|w| (w.handle.clone(), w.ctime_ns)).collect();
        journal.settled(&done).map_err(eio("cannot clear pending content"))?;
        let bytes: u64 = durable.iter().map(|w| w.content.content.size).sum();
        let mut pending = self.pending_map();
        let mut unsettled = self.unsettled_map();
        for w in &durable {
            pending.remove(&w.handle);
            if let Some(u) = unsettled.remove(&w.handle) {
                log::info!("settled {} after all", shown_path(u.path.as_deref()));
            }
        }
        let n = durable.len() as u64;
        self.set.settled.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        self.set.largest_step.fetch_max(n, std::sync::atomic::Ordering::Relaxed);
        log::debug!("settled {n} rewound files ({bytes} bytes)");
        Ok(failed)
    }

    /// One step over `handles` (those still pending): up to
    /// [`BATCH_FILES`] of them written, then made durable together. A file
    /// that cannot be written is marked unsettled and the others go on;
    /// the first such failure comes back with the step. Giving way (asked
    /// after every chunk, and before the files are made durable) leaves
    /// every file of the step pending: what was written is written again
    /// after the rewind or restore. `for_reader`: the step is a reader's
    /// open of its one file (said as a read error, retried at the next
    /// open rather than after a delay).
    fn settle_batch(
        &self,
        handles: &[FileHandle],
        give_way: &dyn Fn() -> bool,
        for_reader: bool,
    ) -> Res<(SettleStep, Option<Errno>)> {
        let _one = crate::poison::lock(&self.set.settle_lock, "the settler's lock");
        let started = Instant::now();
        let (mut written, mut bytes, mut failed) = (Vec::new(), 0u64, None);
        for handle in handles.iter().take(BATCH_FILES) {
            if bytes >= BATCH_BYTES || started.elapsed() >= BATCH_TIME {
                break;
            }
            let Some(p) = self.pending_map().get(handle).cloned() else { continue };
            let Some(journal) = self.journal else { return Err(Errno::EIO) };
            match self.write(handle, p, journal, give_way) {
                Ok(w) => {
                    bytes += w.content.content.size;
                    written.push(w);
                }
                Err((_, Unfilled::GaveWay)) => return Ok((SettleStep::GaveWay, failed)),
                Err((p, Unfilled::Failed(errno, reason))) => {
                    failed = failed.or(Some(self.cannot_settle(handle, &p, reason, errno, for_reader)));
                }
            }
        }
        // Nothing written: nothing to make durable (and nothing to commit).
        if written.is_empty() {
            return Ok((SettleStep::Settled, failed));
        }
        let Some(journal) = self.journal else { return Err(Errno::EIO) };
        if give_way() {
            return Ok((SettleStep::GaveWay, failed));
        }
        let failed_sync = self.make_durable(journal, written, for_reader)?;
        Ok((SettleStep::Settled, failed.or(failed_sync)))
    }

    /// Marks a file that could not be settled: the settler skips it until
    /// its next try, and says so once per file.
    fn cannot_settle(
        &self,
        handle: &FileHandle,
        p: &PendingContent,
        reason: String,
        errno: Errno,
        for_reader: bool,
    ) -> Errno {
        let path = self.backing.path_of_handle(handle);
        let shown = shown_path(path.as_deref());
        let now = Instant::now();
        let mut map = self.unsettled_map();
        let first = !map.contains_key(handle);
        let u = map.entry(handle.clone()).or_insert_with(|| Unsettled {
            handle: handle.clone(),
            path: None,
            reason: String::new(),
            before: p.before,
            next_try: now,
            delay: Duration::ZERO,
        });
        u.path = path;
        u.reason = reason.clone();
        if !for_reader {
            u.delay = (u.delay * 2).clamp(RETRY_FIRST, RETRY_MAX);
            u.next_try = now + u.delay;
        }
        if for_reader {
            log::warn!("{}: {shown}: its rewound bytes cannot be read: {reason}", errno);
        } else if first {
            log::error!(
                "cannot settle {shown}: {reason}; it stays pending (reads give EIO, `rewindfs status` lists it), \
                 the other files go on, and it is tried again later"
            );
        } else {
            log::debug!("still cannot settle {shown}: {reason}");
        }
        errno
    }

    /// One step of the settler: pending files that are not waiting for a
    /// retry written and made durable together, giving way when
    /// `give_way` says so (asked after every chunk).
    pub fn settle_one(&self, give_way: &dyn Fn() -> bool) -> Res<SettleStep> {
        let now = Instant::now();
        let next: Vec<FileHandle> = {
            let map = self.pending_map();
            let unsettled = self.unsettled_map();
            map.keys()
                .filter(|k| unsettled.get(*k).is_none_or(|u| u.next_try <= now))
                .take(BATCH_FILES)
                .cloned()
                .collect()
        };
        if next.is_empty() {
            return Ok(SettleStep::Idle);
        }
        self.settle_batch(&next, give_way, false).map(|(step, _)| step)
    }

    /// Tries every pending file once, whatever its retry time (at
    /// unmount); returns those that could not be settled.
    pub fn settle_all_now(&self) -> Vec<Unsettled> {
        let mut keys: Vec<FileHandle> = self.pending_map().keys().cloned().collect();
        while !keys.is_empty() {
            // A step may stop before the end of its share (bytes, time).
            let before = keys.len();
            let _ = self.settle_batch(&keys, &|| false, false);
            let (pending, unsettled) = (self.pending_map(), self.unsettled_map());
            keys.retain(|k| pending.contains_key(k) && !unsettled.contains_key(k));
            if keys.len() == before {
                break;
            }
        }
        let pending = self.pending_map();
        self.set.unsettled().into_iter().filter(|u| pending.contains_key(&u.handle)).collect()
    }
}

/// How a pending file is named in messages.
pub fn shown_path(path: Option<&std::path::Path>) -> String {
    match path {
        Some(p) => p.display().to_string(),
        None => "a rewound file outside the tree".to_string(),
    }
}

/// Writes a pending file's content into `fd`, which holds the placeholder,
/// and starts its writeback (not waiting for it: see `make_durable`).
/// Every chunk is read and verified before the first byte is written, so
/// content that cannot be read back leaves the file as it was. Returns the
/// file and its ctime once filled (the daemon's own change, see
/// `Journal::settled`), if it can be read.
fn fill(
    store: &dyn crate::store::ChunkStore,
    p: &PendingContent,
    fd: OwnedFd,
    give_way: &dyn Fn() -> bool,
) -> Result<(std::fs::File, Option<i64>), Unfilled> {
    let file = std::fs::File::from(fd);
    let mut out = GivingWay { inner: &file, give_way, stopped: false };
    if p.content.size <= VERIFY_IN_MEMORY {
        let mut bytes = GivingWay { inner: Vec::with_capacity(p.content.size as usize), give_way, stopped: false };
        let read = crate::store::read_content_to(store, &p.content, &mut bytes);
        read.map_err(|e| bytes.or_gave_way(unreadable(e)))?;
        out.write_all(&bytes.inner).map_err(|e| out.or_gave_way(unwritable(e)))?;
    } else {
        let mut verified = GivingWay { inner: std::io::sink(), give_way, stopped: false };
        let read = crate::store::read_content_to(store, &p.content, &mut verified);
        read.map_err(|e| verified.or_gave_way(unreadable(e)))?;
        let written = crate::store::read_content_to(store, &p.content, &mut out);
        written.map_err(|e| out.or_gave_way(unreadable(e)))?;
    }
    if give_way() {
        return Err(Unfilled::GaveWay);
    }
    // Only a hint (the sync comes later): a filesystem without it still
    // gets its bytes.
    let _ = crate::sys::start_writeback(file.as_fd());
    let t =
        Timespec { tv_sec: p.mtime_ns.div_euclid(1_000_000_000), tv_nsec: p.mtime_ns.rem_euclid(1_000_000_000) as _ };
    let _ = backing::set_times(file.as_fd(), t, t);
    let ctime_ns = rustix::fs::fstat(&file).ok().map(|st| crate::journal::ns(st.st_ctime, st.st_ctime_nsec as i64));
    Ok((file, ctime_ns))
}

/// A writer that stops (fails, and says so in `stopped`) once `give_way`
/// says a rewind or restore waits, asked before every write of at most
/// [`GIVE_WAY_STEP`] bytes.
struct GivingWay<'a, W> {
    inner: W,
    give_way: &'a dyn Fn() -> bool,
    stopped: bool,
}

impl<W> GivingWay<'_, W> {
    /// Why a read or write through this writer failed: it gave way, or
    /// `failed`.
    fn or_gave_way(&self, failed: Unfilled) -> Unfilled {
        match self.stopped {
            true => Unfilled::GaveWay,
            false => failed,
        }
    }
}

fn unreadable(e: crate::store::StoreError) -> Unfilled {
    Unfilled::Failed(crate::error::AsErrno::errno(&e), e.to_string())
}

fn unwritable(e: std::io::Error) -> Unfilled {
    let (errno, reason) = write_failure(&e);
    Unfilled::Failed(errno, reason)
}

/// A failed write or sync of a pending file: its errno, and the reason
/// given for the file.
fn write_failure(e: &std::io::Error) -> (Errno, String) {
    (crate::error::AsErrno::errno(e), format!("cannot write it: {e}"))
}

impl<W: Write> Write for GivingWay<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if (self.give_way)() {
            self.stopped = true;
            return Err(std::io::Error::other("gave way to a rewind or restore"));
        }
        crate::faults::settle_step();
        let step = buf.len().min(GIVE_WAY_STEP);
        self.inner.write(&buf[..step])
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{MemoryStore, store_content};
    use std::cell::Cell;

    /// A content stored in a memory store, and a file to fill with it.
    fn stored(size: usize) -> (MemoryStore, PendingContent, Vec<u8>, tempfile::NamedTempFile) {
        let store = MemoryStore::new();
        let bytes: Vec<u8> = (0..size).map(|i| (i * 7 % 253) as u8).collect();
        let content = store_content(&store, &bytes[..]).expect("store the content");
        let p = PendingContent { content, mtime_ns: 1_000_000_000, before: None };
        (store, p, bytes, tempfile::NamedTempFile::new().expect("a file to fill"))
    }

    fn fd_of(file: &tempfile::NamedTempFile) -> OwnedFd {
        OwnedFd::from(file.reopen().expect("reopen the file"))
    }

    /// Asked to give way after `calls` questions; counts them.
    fn after(calls: u32, asked: &Cell<u32>) -> impl Fn() -> bool + '_ {
        move || {
            asked.set(asked.get() + 1);
            asked.get() > calls
        }
    }

    /// Filling gives way at whichever question it is asked to (reading,
    /// writing, or before the sync), in memory or on disk (verified in
    /// memory, or read twice), and a fill after it writes the whole content.
    #[test]
    fn a_fill_gives_way_part_way_and_a_fill_after_writes_it_whole() {
        for size in [300 << 10, VERIFY_IN_MEMORY as usize + (5 << 20)] {
            let (store, p, bytes, file) = stored(size);
            let asked = Cell::new(0);
            assert!(fill(&store, &p, fd_of(&file), &after(u32::MAX, &asked)).is_ok(), "size {size}: filled");
            let questions = asked.get();
            assert!(questions > 3, "size {size}: asked at each chunk and step ({questions})");
            for calls in [0, 1, questions / 2, questions - 1] {
                std::fs::write(file.path(), b"").expect("empty the file");
                let asked = Cell::new(0);
                let stopped = fill(&store, &p, fd_of(&file), &after(calls, &asked));
                assert!(matches!(stopped, Err(Unfilled::GaveWay)), "size {size}: gave way after {calls} questions");
                assert_eq!(asked.get(), calls + 1, "size {size}: asked until it stopped");
                let on_disk = std::fs::read(file.path()).expect("read the file");
                assert!(on_disk.len() <= size, "size {size}: {} bytes written", on_disk.len());
                let filled = fill(&store, &p, fd_of(&file), &|| false);
                assert!(filled.is_ok(), "size {size}: the second fill ends");
                assert!(std::fs::read(file.path()).expect("read the file") == bytes, "size {size}: the whole content");
            }
        }
    }

    /// A writer step is at most `GIVE_WAY_STEP` bytes, so a large write
    /// asks more than once.
    #[test]
    fn a_large_write_asks_at_every_step() {
        let asked = Cell::new(0);
        let give_way = after(u32::MAX, &asked);
        let mut out = GivingWay { inner: Vec::new(), give_way: &give_way, stopped: false };
        out.write_all(&vec![1u8; 3 * GIVE_WAY_STEP + 1]).expect("write");
        assert_eq!(asked.get(), 4, "asked before each of the four steps");
        assert_eq!(out.inner.len(), 3 * GIVE_WAY_STEP + 1);
    }
}
