//! The FUSE adapter: the only module that names `fuser` types. Each method
//! converts the request into our types, calls the live tree, and converts
//! the answer back; errors become errnos in `errno()`.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, BackingId, CopyFileRangeFlags, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use log::{debug, info, warn};

mod page_cache;
pub mod transport;
pub mod view;

use crate::error::{AsErrno, Errno};
use crate::sys::FileHandle as ObjectHandle;
use crate::view::browse::{Browser, Locked};
use crate::workspace::{Attr, Caller, Fh, HIDDEN_DIR, Ino, Kind, LiveTree, OpenFile, SetAttr, SetTime, XattrReply};
use crate::world::{Held, KernelCache, World};

/// Inode numbers of `.rewindfs/` and the views under it start here, far
/// above any backing inode number.
const HIDDEN_INO_BASE: u64 = 1 << 62;

/// Largest read/write request the kernel sends (FUSE's max_pages is raised
/// to match): 1 MiB, the kernel's default ceiling.
const MAX_REQUEST: u32 = 1 << 20;

/// How file data reaches the backing files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Passthrough {
    /// The kernel reads and writes the backing file directly (FUSE
    /// passthrough): native data speed. Needs CAP_SYS_ADMIN.
    All,
    /// Every read and write goes through the daemon.
    Off,
}

/// How the data of one open file moves (see `LiveFs::open_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpenMode {
    /// The kernel reads and writes the backing file.
    Passthrough,
    /// Through the daemon, with the kernel's page cache.
    Daemon,
    /// Through the daemon, every read and write (FOPEN_DIRECT_IO).
    DirectThroughDaemon,
}

/// Options for the FUSE session.
#[derive(Clone, Debug)]
pub struct FsOptions {
    /// How long the kernel may cache entries and attributes. The daemon is
    /// the only writer, so this can be long.
    pub cache_timeout: Duration,
    pub passthrough: Passthrough,
}

impl Default for FsOptions {
    fn default() -> Self {
        FsOptions { cache_timeout: Duration::from_secs(3600), passthrough: Passthrough::All }
    }
}

/// At most this many backing ids are kept for inodes nobody has open (see
/// `BackingIds`); past it, those are given back.
const KEPT_BACKINGS_MAX: usize = 1 << 17;

/// The passthrough backing ids: one per inode, shared by all its opens (the
/// kernel requires one backing file per inode at a time), and kept after
/// the last release while the kernel remembers the inode, so that opening
/// it again (a second `grep -r`, a build reading its sources) costs no
/// registration. A kept id holds a reference to the backing inode in the
/// kernel (no descriptor of ours); it is given back when the kernel forgets
/// the inode, or when more than `KEPT_BACKINGS_MAX` are idle.
///
/// The read-only opens served from the page cache are kept beside them,
/// under the same lock: an inode's opens are all passthrough or none is
/// (`page_cache`).
#[derive(Default)]
struct BackingIds {
    by_ino: HashMap<Ino, Kept>,
    by_fh: HashMap<Fh, Arc<BackingId>>,
    page_cache: page_cache::PageCacheOpens,
}

/// How the data of an open the daemon would pass through reaches the
/// kernel (`LiveFs::route`).
enum Route {
    /// Passthrough, with this backing id.
    Backing(Arc<BackingId>),
    /// Read-only, through the page cache: keep the pages the kernel holds
    /// (they are the file's) or not.
    PageCache { keep: bool },
    /// Writable while page-cache opens of the inode are in use: every
    /// write through the daemon (FOPEN_DIRECT_IO).
    Direct,
    /// Passthrough is not available: through the daemon, with the page
    /// cache.
    Unavailable,
}

impl Route {
    /// The open reply's flags for a route without a backing id.
    fn flags(&self) -> FopenFlags {
        match self {
            Route::PageCache { keep: false } => FopenFlags::empty(),
            Route::Direct => FopenFlags::FOPEN_DIRECT_IO,
            _ => FopenFlags::FOPEN_KEEP_CACHE,
        }
    }
}

/// The backing id of an inode, and the object it was registered for: an
/// open uses it only for that same object (the handle names the backing
/// inode, generation included), never for another object that came to
/// carry the same inode number.
struct Kept {
    object: ObjectHandle,
    id: Arc<BackingId>,
}

impl Kept {
    /// Whether an open file uses it (the map holds one reference).
    fn in_use(&self) -> bool {
        Arc::strong_count(&self.id) > 1
    }
}

/// The live workspace as a FUSE filesystem.
pub struct LiveFs {
    tree: Arc<LiveTree>,
    /// Every request is an ordinary operation of the world: a rewind or
    /// restore freezes it, so a process sees the whole old tree or the
    /// whole new one.
    world: Arc<World>,
    /// Serves `.rewindfs/` (checkpoint views) when recording.
    browser: Option<Arc<Browser>>,
    options: FsOptions,
    passthrough: AtomicBool,
    /// The kernel can open directories without the daemon
    /// (FUSE_NO_OPENDIR_SUPPORT): `opendir` answers ENOSYS (see there).
    no_opendir: AtomicBool,
    backing: Mutex<BackingIds>,
    /// Filled once the session exists: to tell the kernel about attribute
    /// changes the daemon makes while serving another request.
    invalidator: Arc<std::sync::OnceLock<Invalidator>>,
}

impl LiveFs {
    pub fn new(tree: Arc<LiveTree>, options: FsOptions, world: Arc<World>) -> LiveFs {
        let passthrough = options.passthrough == Passthrough::All;
        let browser = tree.journal().map(|j| Arc::new(Browser::hidden(tree.clone(), j.clone(), HIDDEN_INO_BASE)));
        LiveFs {
            tree,
            world,
            browser,
            options,
            passthrough: AtomicBool::new(passthrough),
            no_opendir: AtomicBool::new(false),
            backing: Mutex::new(BackingIds::default()),
            invalidator: Arc::new(std::sync::OnceLock::new()),
        }
    }

    /// What serves `.rewindfs/` (None when not recording).
    pub fn browser(&self) -> Option<Arc<Browser>> {
        self.browser.clone()
    }

    /// Serves one request as an ordinary operation of the world.
    fn serve(&self, op: &'static str, f: impl FnOnce(Held<'_>)) {
        let op_ = self.world.op();
        no_lost_worker(op, || f(op_.held()));
    }

    /// The browser, when `ino` is under `.rewindfs/`.
    fn hidden(&self, ino: INodeNo) -> Option<&Browser> {
        self.browser.as_deref().filter(|b| ino.0 >= HIDDEN_INO_BASE && b.owns(Ino(ino.0)))
    }

    fn ttl(&self) -> Duration {
        self.options.cache_timeout
    }

    fn backing(&self) -> std::sync::MutexGuard<'_, BackingIds> {
        crate::poison::lock(&self.backing, "the passthrough backing ids")
    }

    /// Whether the kernel is reading and writing backing files directly.
    pub fn passthrough_active(&self) -> bool {
        self.passthrough.load(Ordering::Relaxed)
    }

    /// How an open's data should move. With FUSE_HANDLE_KILLPRIV_V2 the
    /// kernel no longer clears setuid/setgid on write: a passthrough write
    /// would keep them where ext4 clears them. So a file with such bits,
    /// opened for writing by a user without CAP_FSETID, is served by the
    /// daemon (direct I/O: it stays out of the kernel's cached-I/O mode,
    /// which would lock out passthrough opens of the same inode), and its
    /// writes clear the bits. If the inode is already open through
    /// passthrough, the kernel requires passthrough for this open too: the
    /// bits are then cleared now, at open, a little earlier than ext4 would.
    fn open_mode(&self, i: Ino, fh: Fh, file: &OpenFile, req: &Request) -> Result<OpenMode, Errno> {
        if !self.passthrough_active() {
            return Ok(OpenMode::Daemon);
        }
        if !file.writable || req.uid() == 0 || !self.tree.has_privileges_to_drop(file)? {
            return Ok(OpenMode::Passthrough);
        }
        let open_elsewhere = self.backing().by_ino.get(&i).is_some_and(Kept::in_use);
        if open_elsewhere {
            self.drop_privileges(i, fh, req)?;
            return Ok(OpenMode::Passthrough);
        }
        debug!("inode {i:?} (setuid/setgid) opened for writing by uid {} without passthrough (fh {fh:?})", req.uid());
        Ok(OpenMode::DirectThroughDaemon)
    }

    /// Clears setuid/setgid before a write by `req`'s user, and makes the
    /// kernel forget the mode it caches (no reply carries attributes here).
    fn drop_privileges(&self, i: Ino, fh: Fh, req: &Request) -> Result<(), Errno> {
        if self.tree.drop_privileges(fh, caller(req))?
            && let Some(inv) = self.invalidator.get()
        {
            inv.attributes(i);
        }
        Ok(())
    }

    /// How the data of the open `file` moves when the daemon would pass
    /// it through (see `page_cache`): a small file opened read-only
    /// through the page cache unless passthrough opens of it are in use; a
    /// writable open through the daemon while page-cache opens of it are;
    /// otherwise passthrough, with the backing id found or created (`open`)
    /// for the inode and remembered for `fh`.
    fn route(&self, file: &OpenFile, fh: Fh, open: impl FnOnce() -> io::Result<BackingId>) -> Route {
        if !self.passthrough_active() {
            return Route::Unavailable;
        }
        let small = !file.writable && file.file.metadata().is_ok_and(|m| m.len() <= page_cache::PAGE_CACHE_MAX);
        let mut ids = self.backing();
        if file.writable {
            ids.page_cache.written(file.ino);
            if ids.page_cache.in_use(file.ino) {
                debug!("inode {:?} opened for writing while read through the page cache (fh {fh:?})", file.ino);
                return Route::Direct;
            }
        } else {
            let passthrough_in_use = ids.by_ino.get(&file.ino).is_some_and(Kept::in_use);
            if !passthrough_in_use && (small || ids.page_cache.in_use(file.ino)) {
                return Route::PageCache { keep: ids.page_cache.open(file.ino, fh, &file.object) };
            }
        }
        let kept = ids.by_ino.get(&file.ino).filter(|k| k.object == file.object).map(|k| k.id.clone());
        let id = match kept {
            Some(id) => id,
            None => match open() {
                Ok(id) => {
                    let id = Arc::new(id);
                    if ids.by_ino.len() >= KEPT_BACKINGS_MAX {
                        ids.by_ino.retain(|_, k| k.in_use());
                        debug!("gave back the idle passthrough backing ids ({} in use)", ids.by_ino.len());
                    }
                    ids.by_ino.insert(file.ino, Kept { object: file.object.clone(), id: id.clone() });
                    id
                }
                Err(e) => {
                    warn!("FUSE passthrough is unavailable ({e}); file data will go through the daemon");
                    self.passthrough.store(false, Ordering::Relaxed);
                    return Route::Unavailable;
                }
            },
        };
        ids.by_fh.insert(fh, id.clone());
        Route::Backing(id)
    }

    /// The open `fh` is closed; its inode's backing id stays (see `BackingIds`).
    fn release_backing(&self, fh: Fh) {
        let mut ids = self.backing();
        ids.by_fh.remove(&fh);
        ids.page_cache.release(fh);
    }

    /// The kernel forgot `ino`: nothing will open it without a new lookup.
    fn forget_backing(&self, ino: Ino) {
        let mut ids = self.backing();
        if ids.by_ino.get(&ino).is_some_and(|k| !k.in_use()) {
            ids.by_ino.remove(&ino);
        }
        ids.page_cache.forget(ino);
    }

    /// `ino`'s content changed through the daemon (a write, a truncation):
    /// the next page-cache open does not keep the pages read before. The
    /// kernel drops the pages of open readers itself: before a write of a
    /// file opened FOPEN_DIRECT_IO, the pages it covers; at a truncation,
    /// those past the new size.
    /// Without passthrough no open uses the table: a write costs no lock.
    fn content_changed(&self, ino: Ino) {
        if self.passthrough_active() {
            self.backing().page_cache.written(ino);
        }
    }
}

/// Runs one FUSE handler so that a panic costs one request, not a worker
/// thread: fuser 0.18 serves with a fixed set of threads and a panicking
/// handler ends its thread (after as many panics as threads, the mount
/// hangs). The reply, dropped unsent while the panic unwinds, answers EIO
/// (fuser's `Drop` for replies); a reply already sent is not sent again.
pub(crate) fn no_lost_worker(op: &'static str, f: impl FnOnce()) {
    if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        let what = crate::error::panic_message(&*panic);
        log::error!("FUSE {op} panicked ({what}); the request was answered EIO");
    }
}

/// The errno a FUSE reply carries for any internal error.
fn errno(e: impl AsErrno) -> fuser::Errno {
    fuser::Errno::from_i32(e.errno().0)
}

fn ino(i: INodeNo) -> Ino {
    Ino(i.0)
}

fn caller(req: &Request) -> Caller {
    Caller { uid: req.uid(), gid: req.gid(), pid: req.pid() }
}

fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::Socket => FileType::Socket,
        Kind::CharDevice => FileType::CharDevice,
        Kind::BlockDevice => FileType::BlockDevice,
    }
}

fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino.0),
        size: a.size,
        blocks: a.blocks,
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
        crtime: a.ctime,
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
        flags: 0,
    }
}

fn set_time(t: Option<TimeOrNow>) -> Option<SetTime> {
    t.map(|t| match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(t) => SetTime::At(t),
    })
}

impl Filesystem for LiveFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        if let Err(max) = config.set_max_write(MAX_REQUEST) {
            let _ = config.set_max_write(max);
        }
        let _ = config.set_max_readahead(MAX_REQUEST);
        let wanted = [
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_READDIRPLUS_AUTO,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_CACHE_SYMLINKS,
            InitFlags::FUSE_MAX_PAGES,
            // The kernel stops asking for security.capability before every
            // write (one round trip each); clearing setuid/setgid on write
            // and truncation becomes ours (see `open_reply`).
            InitFlags::FUSE_HANDLE_KILLPRIV_V2,
            // The pages of a file read through the page cache are dropped
            // when its attributes come back with another mtime or size
            // (see `page_cache`), and a directory's listing kept by the
            // kernel is checked against a fresh mtime when read from its
            // start once the directory's attributes expired (see `opendir`).
            InitFlags::FUSE_AUTO_INVAL_DATA,
            // A file opened for writing through the daemon beside readers
            // of its pages (`page_cache`) can still be mapped shared.
            InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP,
        ];
        for flag in wanted {
            if config.add_capabilities(flag).is_err() {
                debug!("the kernel does not offer {flag:?}");
            }
        }
        // Offered, not asked for: the kernel says it can open directories
        // itself.
        let no_opendir = config.add_capabilities(InitFlags::FUSE_NO_OPENDIR_SUPPORT).is_ok();
        self.no_opendir.store(no_opendir, Ordering::Relaxed);

        if self.passthrough_active() {
            let ok =
                config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok() && config.set_max_stack_depth(1).is_ok();
            if !ok {
                warn!("the kernel does not offer FUSE passthrough; file data will go through the daemon");
                self.passthrough.store(false, Ordering::Relaxed);
            }
        }
        info!(
            "FUSE session started: passthrough {}, cache timeout {:?}",
            if self.passthrough_active() { "on" } else { "off" },
            self.options.cache_timeout
        );
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.serve("lookup", |held| {
            #[cfg(feature = "test-hooks")]
            if name == crate::faults::PANIC_NAME {
                panic!("test hook: a panic injected into lookup");
            }
            #[cfg(feature = "test-hooks")]
            if let (true, Some(journal)) = (name == crate::faults::PANIC_IN_JOURNAL_NAME, self.tree.journal()) {
                let _: crate::meta::MetaResult<()> =
                    journal.with_meta(|_| panic!("test hook: a panic injected while the journal is held"));
            }
            if let Some(b) = self.hidden(parent) {
                return view::lookup(&Locked { browser: b, held }, ino(parent), name, reply);
            }
            match self.tree.lookup(ino(parent), name) {
                // A real `.rewindfs` in the workspace wins: user data is never hidden.
                Err(e)
                    if e == Errno::ENOENT
                        && parent == INodeNo::ROOT
                        && name == HIDDEN_DIR
                        && self.browser.is_some() =>
                {
                    let b = self.browser.as_deref().expect("checked above");
                    view::getattr_entry(&Locked { browser: b, held }, reply)
                }
                Ok(a) => reply.entry(&self.ttl(), &file_attr(&a), Generation(0)),
                // A negative entry (inode 0) the kernel may cache: compilers and
                // git look up many names that do not exist, and every create
                // starts with a lookup. The daemon is the only writer, and names
                // it creates behind the kernel's back (restore, rewind) are
                // invalidated.
                Err(e) if e == Errno::ENOENT => {
                    let negative = Attr::synthetic(Ino(0), Kind::File, 0, 0, SystemTime::UNIX_EPOCH);
                    reply.entry(&self.ttl(), &file_attr(&negative), Generation(0))
                }
                Err(e) => reply.error(errno(e)),
            }
        })
    }

    fn forget(&self, _req: &Request, i: INodeNo, nlookup: u64) {
        // No world lock: forgetting changes nothing a rewind looks at.
        no_lost_worker("forget", || match &self.browser {
            Some(b) if i.0 >= HIDDEN_INO_BASE => b.forget(ino(i), nlookup),
            _ => {
                if self.tree.forget(ino(i), nlookup) {
                    self.forget_backing(ino(i));
                }
            }
        });
    }

    fn getattr(&self, _req: &Request, i: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        self.serve("getattr", |held| {
            if let Some(b) = self.hidden(i) {
                return view::getattr(&Locked { browser: b, held }, ino(i), reply);
            }
            match self.tree.getattr(ino(i), fh.map(|f| Fh(f.0))) {
                Ok(a) => reply.attr(&self.ttl(), &file_attr(&a)),
                Err(e) => reply.error(errno(e)),
            }
        })
    }

    fn setattr(
        &self,
        req: &Request,
        i: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.serve("setattr", |_| {
            if self.hidden(i).is_some() {
                return reply.error(fuser::Errno::EROFS);
            }
            let set = SetAttr { mode, uid, gid, size, atime: set_time(atime), mtime: set_time(mtime) };
            if size.is_some() {
                self.content_changed(ino(i));
            }
            match self.tree.setattr(ino(i), set, fh.map(|f| Fh(f.0)), caller(req)) {
                Ok(a) => reply.attr(&self.ttl(), &file_attr(&a)),
                Err(e) => {
                    // The steps undone still changed the ctime, and a
                    // truncation or a failed undo stays: the kernel must not
                    // keep the attributes it cached before the call.
                    if let Some(inv) = self.invalidator.get() {
                        inv.attributes(ino(i));
                    }
                    reply.error(errno(e))
                }
            }
        })
    }

    fn readlink(&self, _req: &Request, i: INodeNo, reply: ReplyData) {
        self.serve("readlink", |held| {
            if let Some(b) = self.hidden(i) {
                return view::readlink(&Locked { browser: b, held }, ino(i), reply);
            }
            match self.tree.readlink(ino(i)) {
                Ok(t) => reply.data(&t),
                Err(e) => reply.error(errno(e)),
            }
        })
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        self.serve("mknod", |_| {
            if self.hidden(parent).is_some() {
                return reply.error(fuser::Errno::EROFS);
            }
            match self.tree.mknod(ino(parent), name, mode & !umask, rdev, caller(req)) {
                Ok(a) => reply.entry(&self.ttl(), &file_attr(&a), Generation(0)),
                Err(e) => reply.error(errno(e)),
            }
        })
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        self.serve("mkdir", |_| {
            if self.hidden(parent).is_some() {
                return reply.error(fuser::Errno::EROFS);
            }
            match self.tree.mkdir(ino(parent), name, mode & !umask, caller(req)) {
                Ok(a) => reply.entry(&self.ttl(), &file_attr(&a), Generation(0)),
                Err(e) => reply.error(errno(e)),
            }
        })
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.serve("unlink", |_| {
            if self.hidden(parent).is_some() {
                return reply.error(fuser::Errno::EROFS);
            }
            match self.tree.unlink(ino(parent), name, caller(req)) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(e)),
            }
        })
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.serve("rmdir", |_| {
            if self.hidden(parent).is_some() {
                return reply.error(fuser::Errno::EROFS);
            }
            match self.tree.rmdir(ino(parent), name, caller(req)) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(e)),
            }
        })
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        self.serve("symlink", |_| {
            if self.hidden(parent).is_some() {
                return reply.error(fuser::Errno::EROFS);
            }
            match self.tree.symlink(ino(parent), link_name, target.as_os_str(), caller(req)) {
                Ok(a) => reply.entry(&self.ttl(), &file_attr(&a), Generation(0)),
                Err(e) => reply.error(errno(e)),
            }
        })
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.serve("rename", |_| {
            if self.hidden(parent).is_some() || self.hidden(newparent).is_some() {
                return reply.error(fuser::Errno::EROFS);
            }
            match self.tree.rename(ino(parent), name, ino(newparent), newname, flags.bits(), caller(req)) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(e)),
            }
        })
    }

    fn link(&self, req: &Request, i: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        self.serve("link", |_| {
            if self.hidden(newparent).is_some() {
                return reply.error(fuser::Errno::EROFS);
            }
            match self.tree.link(ino(i), ino(newparent), newname, caller(req)) {
                Ok(a) => reply.entry(&self.ttl(), &file_attr(&a), Generation(0)),
                Err(e) => reply.error(errno(e)),
            }
        })
    }

    fn open(&self, req: &Request, i: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.serve("open", |held| {
            if let Some(b) = self.hidden(i) {
                return view::open(&Locked { browser: b, held }, ino(i), flags.0, reply);
            }
            let (fh, file) = match self.tree.open(ino(i), flags.0, caller(req)) {
                Ok(x) => x,
                Err(e) => return reply.error(errno(e)),
            };
            match self.open_mode(ino(i), fh, &file, req) {
                Ok(OpenMode::Passthrough) => match self.route(&file, fh, || reply.open_backing(&file.file)) {
                    Route::Backing(id) => reply.opened_passthrough(FileHandle(fh.0), FopenFlags::empty(), &id),
                    other => reply.opened(FileHandle(fh.0), other.flags()),
                },
                Ok(OpenMode::Daemon) => reply.opened(FileHandle(fh.0), FopenFlags::FOPEN_KEEP_CACHE),
                Ok(OpenMode::DirectThroughDaemon) => reply.opened(FileHandle(fh.0), FopenFlags::FOPEN_DIRECT_IO),
                Err(e) => {
                    self.tree.release(fh);
                    reply.error(errno(e))
                }
            }
        })
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.serve("create", |_| {
            if self.hidden(parent).is_some() {
                return reply.error(fuser::Errno::EROFS);
            }
            let (attr, fh, file) = match self.tree.create(ino(parent), name, mode & !umask, flags, caller(req)) {
                Ok(x) => x,
                Err(e) => return reply.error(errno(e)),
            };
            let (ttl, fattr) = (self.ttl(), file_attr(&attr));
            let flags = match self.open_mode(attr.ino, fh, &file, req) {
                Ok(OpenMode::Passthrough) => match self.route(&file, fh, || reply.open_backing(&file.file)) {
                    Route::Backing(id) => {
                        return reply.created_passthrough(
                            &ttl,
                            &fattr,
                            Generation(0),
                            FileHandle(fh.0),
                            FopenFlags::empty(),
                            &id,
                        );
                    }
                    other => other.flags(),
                },
                Ok(OpenMode::Daemon) => FopenFlags::FOPEN_KEEP_CACHE,
                Ok(OpenMode::DirectThroughDaemon) => FopenFlags::FOPEN_DIRECT_IO,
                Err(e) => {
                    self.tree.release(fh);
                    return reply.error(errno(e));
                }
            };
            reply.created(&ttl, &fattr, Generation(0), FileHandle(fh.0), flags)
        })
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.serve("read", |held| {
            if let Some(b) = self.hidden(_ino) {
                return view::read(&Locked { browser: b, held }, ino(_ino), offset, size, reply);
            }
            match self.tree.open_files().read(Fh(fh.0), offset, size) {
                Ok(data) => reply.data(&data),
                Err(e) => reply.error(errno(e)),
            }
        })
    }

    fn write(
        &self,
        req: &Request,
        i: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.serve("write", |_| {
            // The kernel marks writes by users without CAP_FSETID.
            if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID)
                && let Err(e) = self.drop_privileges(ino(i), Fh(fh.0), req)
            {
                return reply.error(errno(e));
            }
            match self.tree.write(Fh(fh.0), offset, data) {
                Ok(n) => {
                    self.content_changed(ino(i));
                    reply.written(n)
                }
                Err(e) => reply.error(errno(e)),
            }
        })
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        // Nothing to do on close (locks are the kernel's, data is written
        // through); ENOSYS makes the kernel stop sending flush at all.
        reply.error(fuser::Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.serve("release", |_| {
            self.tree.release(Fh(fh.0));
            self.release_backing(Fh(fh.0));
            reply.ok();
        })
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        self.serve("fsync", |_| match self.tree.open_files().fsync(Fh(fh.0), datasync) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        })
    }

    /// With FUSE_NO_OPENDIR_SUPPORT, ENOSYS: from then on the kernel opens
    /// directories itself, with no `OPENDIR` and no `RELEASEDIR` per
    /// directory walked (a warm `git status` sends nothing for a directory
    /// whose listing it keeps), and keeps every listing (`FOPEN_KEEP_CACHE
    /// | FOPEN_CACHE_DIR` is its default then), checked against the
    /// directory's mtime. Nothing is kept per open directory either way:
    /// listings are served by offset alone (`workspace::listings`). Under
    /// `.rewindfs/`, the lists of checkpoints change: the engine drops the
    /// kernel's copies at every change (`Workspace::lists_changed`), and
    /// their mtime is the time they are asked about, so a listing read
    /// across a change is not kept. Without the feature, the same flags by
    /// reply, and none under `.rewindfs/`.
    fn opendir(&self, _req: &Request, i: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.serve("opendir", |_| {
            if self.no_opendir.load(Ordering::Relaxed) {
                return reply.error(fuser::Errno::ENOSYS);
            }
            if self.hidden(i).is_some() {
                return reply.opened(FileHandle(0), FopenFlags::empty());
            }
            match self.tree.check_dir(ino(i)) {
                Ok(()) => reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_CACHE_DIR),
                Err(e) => reply.error(errno(e)),
            }
        })
    }

    fn readdir(&self, _req: &Request, dir: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        self.serve("readdir", |held| {
            if let Some(b) = self.hidden(dir) {
                return view::readdir(&Locked { browser: b, held }, ino(dir), offset, reply);
            }
            let page = match self.tree.readdir(ino(dir), offset) {
                Ok(p) => p,
                Err(e) => return reply.error(errno(e)),
            };
            for (i, entry) in page.entries.iter().enumerate().skip(page.start) {
                if reply.add(INodeNo(entry.ino.0), page.offset_after(i), file_type(entry.kind), &entry.name) {
                    break;
                }
            }
            reply.ok();
        })
    }

    fn readdirplus(&self, _req: &Request, dir: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        self.serve("readdirplus", |held| {
            if let Some(b) = self.hidden(dir) {
                return view::readdirplus(&Locked { browser: b, held }, ino(dir), offset, reply);
            }
            let page = match self.tree.readdir(ino(dir), offset) {
                Ok(p) => p,
                Err(e) => return reply.error(errno(e)),
            };
            let ttl = self.ttl();
            for (i, entry) in page.entries.iter().enumerate().skip(page.start) {
                let dots = entry.name == "." || entry.name == "..";
                // The kernel takes a lookup reference for every entry but "." and "..".
                let attr = if dots {
                    self.tree.getattr(if entry.name == "." { ino(dir) } else { entry.ino }, None).ok()
                } else {
                    match self.tree.lookup(ino(dir), &entry.name) {
                        Ok(a) => Some(a),
                        // Removed since the listing was read: leave it out.
                        Err(_) => continue,
                    }
                };
                let attr =
                    attr.map(|a| file_attr(&a)).unwrap_or_else(|| file_attr(&placeholder(entry.ino, entry.kind)));
                let full = reply.add(attr.ino, page.offset_after(i), &entry.name, &ttl, &attr, Generation(0));
                if full {
                    // Not sent: give back the lookup we took for it.
                    if !dots {
                        self.tree.forget(Ino(attr.ino.0), 1);
                    }
                    break;
                }
            }
            reply.ok();
        })
    }

    /// Nothing is kept per open directory.
    fn releasedir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, i: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        self.serve("fsyncdir", |_| match self.tree.fsyncdir(ino(i)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        })
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.serve("statfs", |_| match self.tree.statfs() {
            Ok(s) => reply.statfs(s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize),
            Err(e) => reply.error(errno(e)),
        })
    }

    fn setxattr(
        &self,
        req: &Request,
        i: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.serve("setxattr", |_| {
            if self.hidden(i).is_some() {
                return reply.error(fuser::Errno::EROFS);
            }
            match self.tree.setxattr(ino(i), name, value, flags, caller(req)) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(e)),
            }
        })
    }

    fn getxattr(&self, _req: &Request, i: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.serve("getxattr", |held| {
            if let Some(b) = self.hidden(i) {
                return view::getxattr(&Locked { browser: b, held }, ino(i), name, size, reply);
            }
            match self.tree.getxattr(ino(i), name, size) {
                Ok(XattrReply::Size(n)) => reply.size(n),
                Ok(XattrReply::Data(d)) => reply.data(&d),
                Err(e) => reply.error(errno(e)),
            }
        })
    }

    fn listxattr(&self, _req: &Request, i: INodeNo, size: u32, reply: ReplyXattr) {
        self.serve("listxattr", |held| {
            if let Some(b) = self.hidden(i) {
                return view::listxattr(&Locked { browser: b, held }, ino(i), size, reply);
            }
            match self.tree.listxattr(ino(i), size) {
                Ok(XattrReply::Size(n)) => reply.size(n),
                Ok(XattrReply::Data(d)) => reply.data(&d),
                Err(e) => reply.error(errno(e)),
            }
        })
    }

    fn removexattr(&self, req: &Request, i: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.serve("removexattr", |_| {
            if self.hidden(i).is_some() {
                return reply.error(fuser::Errno::EROFS);
            }
            match self.tree.removexattr(ino(i), name, caller(req)) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(e)),
            }
        })
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        self.serve("access", |_| {
            // Permissions are checked by the kernel (default_permissions).
            reply.ok();
        })
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.serve("fallocate", |_| match self.tree.open_files().fallocate(Fh(fh.0), offset, length, mode) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        })
    }

    fn lseek(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, offset: i64, whence: i32, reply: ReplyLseek) {
        self.serve("lseek", |_| match self.tree.open_files().lseek(Fh(fh.0), offset, whence) {
            Ok(o) => reply.offset(o),
            Err(e) => reply.error(errno(e)),
        })
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        _ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        self.serve("copy_file_range", |_| {
            match self.tree.open_files().copy_file_range(Fh(fh_in.0), offset_in, Fh(fh_out.0), offset_out, len) {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(errno(e)),
            }
        })
    }
}

/// Attributes for a "." or ".." entry that could not be stat'ed: the kernel
/// only uses their inode number and type.
fn placeholder(i: Ino, kind: Kind) -> Attr {
    Attr::synthetic(i, kind, 0o755, 1, SystemTime::UNIX_EPOCH)
}

/// Tells the kernel to drop cached names and attributes after the daemon
/// changed the tree itself (restore, rewind).
#[derive(Clone)]
pub struct Invalidator {
    notifier: fuser::Notifier,
    /// A duplicate of the session's /dev/fuse descriptor, for the entry
    /// notification with flags that fuser cannot send.
    device: Arc<std::os::fd::OwnedFd>,
}

/// `FUSE_NOTIFY_INVAL_ENTRY`, and its flag (protocol 7.38) that marks the
/// entry stale without pruning the dentries below it.
const FUSE_NOTIFY_INVAL_ENTRY: i32 = 3;
const FUSE_EXPIRE_ONLY: u32 = 1;

/// The notification that expires the kernel's cached entry `name` in
/// `parent`: fuse_out_header (len, code, unique 0), then
/// fuse_notify_inval_entry_out (parent, namelen, flags), then the name and
/// a NUL.
fn expire_entry_message(parent: u64, name: &[u8]) -> Vec<u8> {
    let len = 16 + 16 + name.len() + 1;
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&FUSE_NOTIFY_INVAL_ENTRY.to_ne_bytes());
    m.extend_from_slice(&0u64.to_ne_bytes());
    m.extend_from_slice(&parent.to_ne_bytes());
    m.extend_from_slice(&(name.len() as u32).to_ne_bytes());
    m.extend_from_slice(&FUSE_EXPIRE_ONLY.to_ne_bytes());
    m.extend_from_slice(name);
    m.push(0);
    m
}

impl Invalidator {
    /// Makes the kernel look up `name` in `parent` again before using its
    /// cached entry. The entry is expired, not pruned: pruning a directory
    /// the kernel knows well (a build tree of 20,000 files) drops every
    /// cached dentry and inode below it inside this call, tens of
    /// milliseconds on a rewind's critical path. Expired, the next lookup
    /// of the name asks the daemon, finds the entry changed and prunes it
    /// then. A kernel older than protocol 7.38 ignores the flag and prunes
    /// at once, which is slower but as exact.
    pub fn entry(&self, parent: Ino, name: &OsStr) {
        use std::os::unix::ffi::OsStrExt;
        let message = expire_entry_message(parent.0, name.as_bytes());
        match rustix::io::write(&*self.device, &message) {
            Ok(_) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => debug!("cannot invalidate entry {name:?} in {parent:?}: {e}"),
        }
    }

    /// Forget the cached attributes of `ino` (not its pages).
    pub fn attributes(&self, ino: Ino) {
        if let Err(e) = self.notifier.inval_inode(INodeNo(ino.0), -1, 0) {
            debug!("cannot invalidate the attributes of inode {ino:?}: {e}");
        }
    }

    /// Forget the cached attributes and pages of `ino`.
    pub fn inode(&self, ino: Ino) {
        if let Err(e) = self.notifier.inval_inode(INodeNo(ino.0), 0, 0) {
            debug!("cannot invalidate inode {ino:?}: {e}");
        }
    }
}

impl KernelCache for Invalidator {
    fn expire_entry(&self, parent: Ino, name: &OsStr) {
        self.entry(parent, name)
    }
    fn forget_inode(&self, ino: Ino) {
        self.inode(ino)
    }
}

/// Mount options for a live workspace mount, and the base of a view
/// mount's (`uring`: ask for FUSE over io_uring at FUSE_INIT).
pub fn mount_config(fsname: &str, threads: usize, uring: bool) -> fuser::Config {
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName(fsname.to_string()),
        fuser::MountOption::Subtype("rewindfs".to_string()),
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::Dev,
        fuser::MountOption::Suid,
    ];
    config.acl = fuser::SessionACL::All;
    config.n_threads = Some(threads);
    config.clone_fd = true;
    config.io_uring = uring;
    // Two threads (each with its ring entry) per CPU: one request that
    // blocks (a large fsync) does not hold up every other request made on
    // that CPU.
    config.io_uring_threads_per_queue = 2;
    // The ring threads run under SCHED_IDLE, so that the process a ring
    // thread answers is woken on its own CPU instead of being moved to an
    // idle one: a warm open, read and close of a small file 20-23 µs here
    // instead of 90-150 µs (docs/benchmarks.md, "Ring threads under
    // SCHED_IDLE"). A normal thread still preempts them and they still
    // get their turn under load: measured with CPU hogs beside, the same
    // latencies either way.
    config.io_uring_sched_idle = true;
    config
}

/// How a mount's requests travel, for `status`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TransportReport {
    /// "uring" when every CPU's ring is registered, else "classic".
    pub transport: String,
    /// Requests served through the rings since the mount.
    pub ring_requests: u64,
    /// Why the rings are not in use although io_uring was negotiated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring_error: Option<String>,
}

/// A live view of the mount's transport.
#[derive(Clone)]
pub struct TransportState {
    negotiated: bool,
    stats: fuser::RingStats,
}

impl TransportState {
    pub fn report(&self) -> TransportReport {
        let s = &self.stats;
        let up = self.negotiated && s.queues() > 0 && s.registered_queues() == s.queues() && s.error().is_none();
        TransportReport {
            transport: if up { "uring" } else { "classic" }.to_string(),
            ring_requests: s.requests(),
            ring_error: s.error(),
        }
    }

    /// Waits until every CPU's ring is registered (at once when io_uring
    /// was not negotiated), or says why they are not.
    pub fn wait_started(&self, timeout: Duration) -> Result<(), String> {
        let deadline = std::time::Instant::now() + timeout;
        let s = &self.stats;
        if !self.negotiated {
            return Ok(());
        }
        loop {
            if let Some(e) = s.error() {
                return Err(e);
            }
            if s.queues() > 0 && s.registered_queues() == s.queues() {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                return Err(format!("the FUSE rings did not register within {timeout:?}"));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn of<FS: fuser::Filesystem>(session: &fuser::Session<FS>) -> TransportState {
        TransportState { negotiated: session.io_uring(), stats: session.ring_stats() }
    }

    /// Whether FUSE_INIT negotiated io_uring (the rings start with `run`).
    pub fn negotiated(&self) -> bool {
        self.negotiated
    }
}

/// A mounted session, ready to run.
pub struct MountedSession {
    session: fuser::Session<LiveFs>,
}

impl MountedSession {
    /// Mounts `fs` at `mountpoint`.
    pub fn mount(
        fs: LiveFs,
        mountpoint: &Path,
        fsname: &str,
        threads: usize,
        uring: bool,
    ) -> io::Result<MountedSession> {
        let slot = fs.invalidator.clone();
        let config = mount_config(fsname, threads, uring);
        let session = MountedSession { session: fuser::Session::new(fs, mountpoint, &config)? };
        let _ = slot.set(session.invalidator()?);
        Ok(session)
    }

    pub fn invalidator(&self) -> io::Result<Invalidator> {
        use std::os::fd::AsFd;
        let device = Arc::new(self.session.as_fd().try_clone_to_owned()?);
        Ok(Invalidator { notifier: self.session.notifier(), device })
    }

    /// Serves requests until the filesystem is unmounted.
    pub fn run(self) -> io::Result<()> {
        self.session.run()
    }

    pub fn transport(&self) -> TransportState {
        TransportState::of(&self.session)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expire_entry_message_is_the_kernel_layout() {
        let m = expire_entry_message(0x42, b"abc");
        let expected = vec![
            0x24, 0, 0, 0, 0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // header: len 36, code 3, unique 0
            0x42, 0, 0, 0, 0, 0, 0, 0, // parent
            0x03, 0, 0, 0, 0x01, 0, 0, 0, // namelen, FUSE_EXPIRE_ONLY
            b'a', b'b', b'c', 0,
        ];
        assert_eq!(m, expected);
    }
}
