//! FUSE adapter for checkpoint views: the read-only `rewindfs show` mount,
//! and the replies the live mount gives for inodes under `.rewindfs/`.

use std::ffi::OsStr;
use std::sync::Arc;
use std::time::Duration;

use fuser::{
    FileHandle, Filesystem, FopenFlags, Generation, INodeNo, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyXattr, Request,
};
use log::warn;

use super::{file_attr, file_type};
use crate::engine::Workspace;
use crate::view::ViewError;
use crate::view::browse::Browser;
use crate::workspace::Ino;
use crate::world::Held;

/// Past checkpoints never change: their entries can be cached for long.
const VIEW_TTL: Duration = Duration::from_secs(3600);
/// The list of checkpoints grows with every turn.
const LISTING_TTL: Duration = Duration::from_secs(1);

pub(super) fn view_errno(e: &ViewError) -> fuser::Errno {
    match e {
        ViewError::Store(err) => warn!("a view could not read stored content: {err}"),
        ViewError::ChangedOutside(..) | ViewError::ChangedUnderMount { .. } | ViewError::Lost(_) => {
            warn!("a view cannot show an object: {e}")
        }
        _ => {}
    }
    super::errno(e)
}

fn ttl_for(b: &Browser, ino: Ino) -> Duration {
    if b.shown_checkpoint().is_some() || ino != b.top() { VIEW_TTL } else { LISTING_TTL }
}

pub(super) fn lookup(b: &Browser, held: Held<'_>, parent: Ino, name: &OsStr, reply: ReplyEntry) {
    match b.lookup(held, parent, name) {
        Ok(a) => {
            let ttl = if b.shown_checkpoint().is_none() && parent == b.top() { LISTING_TTL } else { VIEW_TTL };
            reply.entry(&ttl, &file_attr(&a), Generation(0))
        }
        Err(e) => reply.error(view_errno(&e)),
    }
}

pub(super) fn getattr(b: &Browser, held: Held<'_>, ino: Ino, reply: ReplyAttr) {
    match b.getattr(held, ino) {
        Ok(a) => reply.attr(&ttl_for(b, ino), &file_attr(&a)),
        Err(e) => reply.error(view_errno(&e)),
    }
}

pub(super) fn open(b: &Browser, held: Held<'_>, ino: Ino, flags: i32, reply: ReplyOpen) {
    if flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0 {
        return reply.error(fuser::Errno::EROFS);
    }
    match b.getattr(held, ino) {
        Ok(_) => reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE),
        Err(e) => reply.error(view_errno(&e)),
    }
}

pub(super) fn read(b: &Browser, held: Held<'_>, ino: Ino, offset: u64, size: u32, reply: ReplyData) {
    match b.read(held, ino, offset, size) {
        Ok(d) => reply.data(&d),
        Err(e) => reply.error(view_errno(&e)),
    }
}

pub(super) fn readlink(b: &Browser, held: Held<'_>, ino: Ino, reply: ReplyData) {
    match b.readlink(held, ino) {
        Ok(t) => reply.data(&t),
        Err(e) => reply.error(view_errno(&e)),
    }
}

pub(super) fn readdir(b: &Browser, held: Held<'_>, ino: Ino, offset: u64, mut reply: ReplyDirectory) {
    let entries = match b.readdir(held, ino) {
        Ok(e) => e,
        Err(e) => return reply.error(view_errno(&e)),
    };
    for (i, e) in entries.iter().enumerate().skip(offset as usize) {
        if reply.add(INodeNo(e.ino.0), (i + 1) as u64, file_type(e.kind), &e.name) {
            break;
        }
    }
    reply.ok();
}

pub(super) fn getxattr(b: &Browser, held: Held<'_>, ino: Ino, name: &OsStr, size: u32, reply: ReplyXattr) {
    match b.xattrs(held, ino) {
        Ok(x) => match x.into_iter().find(|(n, _)| n.as_slice() == name.as_encoded_bytes()) {
            None => reply.error(fuser::Errno::from_i32(libc::ENODATA)),
            Some((_, v)) if size == 0 => reply.size(v.len() as u32),
            Some((_, v)) if v.len() > size as usize => reply.error(fuser::Errno::from_i32(libc::ERANGE)),
            Some((_, v)) => reply.data(&v),
        },
        Err(e) => reply.error(view_errno(&e)),
    }
}

pub(super) fn listxattr(b: &Browser, held: Held<'_>, ino: Ino, size: u32, reply: ReplyXattr) {
    match b.xattrs(held, ino) {
        Ok(x) => {
            let mut names = Vec::new();
            for (n, _) in x {
                names.extend_from_slice(&n);
                names.push(0);
            }
            if size == 0 {
                reply.size(names.len() as u32)
            } else if names.len() > size as usize {
                reply.error(fuser::Errno::from_i32(libc::ERANGE))
            } else {
                reply.data(&names)
            }
        }
        Err(e) => reply.error(view_errno(&e)),
    }
}

/// A read-only mount of one checkpoint (`rewindfs show`).
pub struct ViewFs {
    browser: Arc<Browser>,
    /// Every request is a read of the live mount's workspace, as the
    /// `.rewindfs/` requests of the live mount are: a view reads the live
    /// tree and the records, and a rewind changes both while it holds the
    /// tree frozen.
    ws: Arc<Workspace>,
}

impl ViewFs {
    pub fn new(browser: Arc<Browser>, ws: Arc<Workspace>) -> ViewFs {
        ViewFs { browser, ws }
    }

    fn serve(&self, op: &'static str, f: impl FnOnce(Held<'_>)) {
        let read = self.ws.read();
        super::no_lost_worker(op, || f(read.held()));
    }
}

impl Filesystem for ViewFs {
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.browser.forget(Ino(ino.0), nlookup)
    }
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.serve("lookup", |held| lookup(&self.browser, held, Ino(parent.0), name, reply))
    }
    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.serve("getattr", |held| getattr(&self.browser, held, Ino(ino.0), reply))
    }
    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.serve("readlink", |held| readlink(&self.browser, held, Ino(ino.0), reply))
    }
    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.serve("open", |held| open(&self.browser, held, Ino(ino.0), flags.0, reply))
    }
    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        self.serve("read", |held| read(&self.browser, held, Ino(ino.0), offset, size, reply))
    }
    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.serve("opendir", |_| {
            reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_CACHE_DIR)
        })
    }
    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, reply: ReplyDirectory) {
        self.serve("readdir", |held| readdir(&self.browser, held, Ino(ino.0), offset, reply))
    }
    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.serve("getxattr", |held| getxattr(&self.browser, held, Ino(ino.0), name, size, reply))
    }
    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.serve("listxattr", |held| listxattr(&self.browser, held, Ino(ino.0), size, reply))
    }
    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.serve("statfs", |_| match self.browser.statfs() {
            Ok(s) => reply.statfs(s.blocks, 0, 0, s.files, 0, s.bsize, s.namelen, s.frsize),
            Err(e) => reply.error(view_errno(&e)),
        })
    }
}

/// A mounted, not yet served, view.
pub struct ViewSession(fuser::Session<ViewFs>);

impl ViewSession {
    /// Mounts a view read-only at `mountpoint` (`uring`: ask for FUSE over
    /// io_uring at FUSE_INIT, as the live mount does).
    pub fn mount(
        browser: Arc<Browser>,
        ws: Arc<Workspace>,
        mountpoint: &std::path::Path,
        fsname: &str,
        uring: bool,
    ) -> std::io::Result<ViewSession> {
        let mut config = super::mount_config(fsname, 2, uring);
        config.mount_options.retain(|o| !matches!(o, fuser::MountOption::Dev | fuser::MountOption::Suid));
        config.mount_options.extend([fuser::MountOption::RO, fuser::MountOption::NoDev, fuser::MountOption::NoSuid]);
        Ok(ViewSession(fuser::Session::new(ViewFs::new(browser, ws), mountpoint, &config)?))
    }

    /// Serves requests until unmounted.
    pub fn run(self) -> std::io::Result<()> {
        self.0.run()
    }

    /// How the view's requests travel (its rings start with `run`).
    pub fn transport(&self) -> super::TransportState {
        super::TransportState::of(&self.0)
    }
}

pub(super) fn readdirplus(b: &Browser, held: Held<'_>, ino: Ino, offset: u64, mut reply: fuser::ReplyDirectoryPlus) {
    let listed = b.readdir_plus(held, ino, offset as usize, |i, e, attr| {
        !reply.add(INodeNo(e.ino.0), (i + 1) as u64, &e.name, &ttl_for(b, e.ino), &file_attr(attr), Generation(0))
    });
    match listed {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(view_errno(&e)),
    }
}

/// The entry of `.rewindfs` itself in the live root.
pub(super) fn getattr_entry(b: &Browser, held: Held<'_>, reply: ReplyEntry) {
    match b.getattr(held, b.top()) {
        Ok(a) => reply.entry(&LISTING_TTL, &file_attr(&a), Generation(0)),
        Err(e) => reply.error(view_errno(&e)),
    }
}
