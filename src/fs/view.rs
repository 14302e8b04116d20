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
use crate::view::browse::{Browser, Locked};
use crate::view::source::ViewSource;
use crate::workspace::Ino;

/// Past checkpoints never change: their entries can be cached for long.
const VIEW_TTL: Duration = Duration::from_secs(3600);
/// The list of checkpoints grows with every turn.
const LISTING_TTL: Duration = Duration::from_secs(1);

pub(super) fn view_errno(e: &ViewError) -> fuser::Errno {
    let errno = super::errno(e);
    match e {
        ViewError::Store(err) => warn!("a view could not read stored content: {err}"),
        ViewError::ChangedOutside(..) | ViewError::ChangedUnderMount { .. } | ViewError::Lost(_) => {
            warn!("a view cannot show an object: {e}")
        }
        // The answers a walk expects (a name that is not there, a read of
        // a directory) are not worth a line; any other failure is: an EIO
        // from a view says nothing of its cause to the reader.
        _ if !EXPECTED.contains(&errno.code()) => warn!("a view failed ({}): {e}", errno.code()),
        _ => {}
    }
    errno
}

/// Errors a view answers as part of browsing, not as failures.
const EXPECTED: [i32; 6] = [libc::ENOENT, libc::ENOTDIR, libc::EISDIR, libc::EINVAL, libc::ENODATA, libc::ESTALE];

fn ttl_for(s: &(impl ViewSource + ?Sized), ino: Ino) -> Duration {
    if s.may_change(ino) { LISTING_TTL } else { VIEW_TTL }
}

pub(super) fn lookup(s: &(impl ViewSource + ?Sized), parent: Ino, name: &OsStr, reply: ReplyEntry) {
    match s.lookup(parent, name) {
        Ok(a) => reply.entry(&ttl_for(s, parent), &file_attr(&a), Generation(0)),
        Err(e) => reply.error(view_errno(&e)),
    }
}

pub(super) fn getattr(s: &(impl ViewSource + ?Sized), ino: Ino, reply: ReplyAttr) {
    match s.getattr(ino) {
        Ok(a) => reply.attr(&ttl_for(s, ino), &file_attr(&a)),
        Err(e) => reply.error(view_errno(&e)),
    }
}

pub(super) fn open(s: &(impl ViewSource + ?Sized), ino: Ino, flags: i32, reply: ReplyOpen) {
    if flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0 {
        return reply.error(fuser::Errno::EROFS);
    }
    match s.getattr(ino) {
        Ok(_) => reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE),
        Err(e) => reply.error(view_errno(&e)),
    }
}

pub(super) fn read(s: &(impl ViewSource + ?Sized), ino: Ino, offset: u64, size: u32, reply: ReplyData) {
    match s.read(ino, offset, size) {
        Ok(d) => reply.data(&d),
        Err(e) => reply.error(view_errno(&e)),
    }
}

pub(super) fn readlink(s: &(impl ViewSource + ?Sized), ino: Ino, reply: ReplyData) {
    match s.readlink(ino) {
        Ok(t) => reply.data(&t),
        Err(e) => reply.error(view_errno(&e)),
    }
}

pub(super) fn readdir(s: &(impl ViewSource + ?Sized), ino: Ino, offset: u64, mut reply: ReplyDirectory) {
    let entries = match s.readdir(ino) {
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

pub(super) fn getxattr(s: &(impl ViewSource + ?Sized), ino: Ino, name: &OsStr, size: u32, reply: ReplyXattr) {
    match s.xattrs(ino) {
        Ok(x) => match x.into_iter().find(|(n, _)| n.as_slice() == name.as_encoded_bytes()) {
            None => reply.error(fuser::Errno::from_i32(libc::ENODATA)),
            Some((_, v)) if size == 0 => reply.size(v.len() as u32),
            Some((_, v)) if v.len() > size as usize => reply.error(fuser::Errno::from_i32(libc::ERANGE)),
            Some((_, v)) => reply.data(&v),
        },
        Err(e) => reply.error(view_errno(&e)),
    }
}

pub(super) fn listxattr(s: &(impl ViewSource + ?Sized), ino: Ino, size: u32, reply: ReplyXattr) {
    match s.xattrs(ino) {
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

pub(super) fn readdirplus(s: &(impl ViewSource + ?Sized), ino: Ino, offset: u64, mut reply: fuser::ReplyDirectoryPlus) {
    let listed = s.readdir_plus(ino, offset as usize, &mut |i, e, attr| {
        !reply.add(INodeNo(e.ino.0), (i + 1) as u64, &e.name, &ttl_for(s, e.ino), &file_attr(attr), Generation(0))
    });
    match listed {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(view_errno(&e)),
    }
}

/// The entry of `.rewindfs` itself in the live root.
pub(super) fn getattr_entry(s: &Locked<'_>, reply: ReplyEntry) {
    match s.getattr(s.top()) {
        Ok(a) => reply.entry(&LISTING_TTL, &file_attr(&a), Generation(0)),
        Err(e) => reply.error(view_errno(&e)),
    }
}

/// Where a view mount's answers come from: each request is served with a
/// source, under whatever lock that source needs.
pub trait Served: Send + Sync + 'static {
    fn with(&self, f: &mut dyn FnMut(&dyn ViewSource));
    /// The kernel forgot references (no lock: numbers only).
    fn forget(&self, ino: Ino, nlookup: u64);
}

/// A checkpoint of a local workspace (`rewindfs show N`): every request
/// is a read of the live mount's workspace, as the `.rewindfs/` requests
/// of the live mount are: a view reads the live tree and the records, and
/// a rewind changes both while it holds the tree frozen.
pub struct LocalView {
    pub browser: Arc<Browser>,
    pub ws: Arc<Workspace>,
}

impl Served for LocalView {
    fn with(&self, f: &mut dyn FnMut(&dyn ViewSource)) {
        let read = self.ws.read();
        f(&Locked { browser: &self.browser, held: read.held() })
    }
    fn forget(&self, ino: Ino, nlookup: u64) {
        self.browser.forget(ino, nlookup)
    }
}

/// A checkpoint of a remote (`rewindfs show s3://...`): immutable, read
/// without a lock.
impl Served for crate::remote::show::RemoteTree {
    fn with(&self, f: &mut dyn FnMut(&dyn ViewSource)) {
        f(self)
    }
    fn forget(&self, ino: Ino, nlookup: u64) {
        ViewSource::forget(self, ino, nlookup)
    }
}

/// A read-only mount of one checkpoint (`rewindfs show`).
pub struct ViewFs<S: Served> {
    source: S,
}

impl<S: Served> ViewFs<S> {
    pub fn new(source: S) -> ViewFs<S> {
        ViewFs { source }
    }

    fn serve(&self, op: &'static str, f: impl FnOnce(&dyn ViewSource)) {
        let mut f = Some(f);
        super::no_lost_worker(op, || {
            self.source.with(&mut |s| {
                if let Some(f) = f.take() {
                    f(s)
                }
            })
        });
    }
}

impl<S: Served> Filesystem for ViewFs<S> {
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.source.forget(Ino(ino.0), nlookup)
    }
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.serve("lookup", |s| lookup(s, Ino(parent.0), name, reply))
    }
    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.serve("getattr", |s| getattr(s, Ino(ino.0), reply))
    }
    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.serve("readlink", |s| readlink(s, Ino(ino.0), reply))
    }
    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.serve("open", |s| open(s, Ino(ino.0), flags.0, reply))
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
        self.serve("read", |s| read(s, Ino(ino.0), offset, size, reply))
    }
    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.serve("opendir", |_| {
            reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_CACHE_DIR)
        })
    }
    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, reply: ReplyDirectory) {
        self.serve("readdir", |s| readdir(s, Ino(ino.0), offset, reply))
    }
    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.serve("getxattr", |s| getxattr(s, Ino(ino.0), name, size, reply))
    }
    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.serve("listxattr", |s| listxattr(s, Ino(ino.0), size, reply))
    }
    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.serve("statfs", |s| match s.statfs() {
            Ok(st) => reply.statfs(st.blocks, 0, 0, st.files, 0, st.bsize, st.namelen, st.frsize),
            Err(e) => reply.error(view_errno(&e)),
        })
    }
}

/// A mounted, not yet served, view.
pub struct ViewSession<S: Served>(fuser::Session<ViewFs<S>>);

impl<S: Served> ViewSession<S> {
    /// Mounts a view read-only at `mountpoint` (`uring`: ask for FUSE over
    /// io_uring at FUSE_INIT, as the live mount does).
    pub fn mount(
        source: S,
        mountpoint: &std::path::Path,
        fsname: &str,
        uring: bool,
    ) -> std::io::Result<ViewSession<S>> {
        let mut config = super::mount_config(fsname, 2, uring);
        config.mount_options.retain(|o| !matches!(o, fuser::MountOption::Dev | fuser::MountOption::Suid));
        config.mount_options.extend([fuser::MountOption::RO, fuser::MountOption::NoDev, fuser::MountOption::NoSuid]);
        Ok(ViewSession(fuser::Session::new(ViewFs::new(source), mountpoint, &config)?))
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
