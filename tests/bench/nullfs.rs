//! A FUSE filesystem that does no I/O: names live in memory, file data is
//! discarded. It answers with the same kernel options as the rewindfs live
//! mount (worker threads with cloned descriptors, long entry and attribute
//! timeouts, negative entries cached, default_permissions), so timing a
//! metadata workload on it measures what the FUSE transport itself costs on
//! this machine: the floor under any FUSE filesystem, rewindfs included.
//!
//!   cargo build --release --example nullfs
//!   target/release/examples/nullfs MOUNTPOINT [--threads N] [--uring]   (foreground; unmount to stop)
//!
//! Used by tests/bench/bench.py (target `null`). Not part of the product.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite,
    ReplyXattr, Request, WriteFlags,
};

const TTL: Duration = Duration::from_secs(3600);

#[derive(Default)]
struct Tree {
    /// (parent, name) -> (ino, is_dir)
    names: HashMap<(u64, OsString), (u64, bool)>,
    dirs: std::collections::HashSet<u64>,
    next_ino: u64,
}

struct NullFs {
    tree: Mutex<Tree>,
    started: SystemTime,
}

impl NullFs {
    fn attr(&self, ino: u64, dir: bool, req: &Request) -> FileAttr {
        FileAttr {
            ino: INodeNo(ino),
            size: if dir { 4096 } else { 100 },
            blocks: 8,
            atime: self.started,
            mtime: self.started,
            ctime: self.started,
            crtime: self.started,
            kind: if dir { FileType::Directory } else { FileType::RegularFile },
            perm: if dir { 0o755 } else { 0o644 },
            nlink: if dir { 2 } else { 1 },
            uid: if ino == 1 { 0 } else { req.uid() },
            gid: if ino == 1 { 0 } else { req.gid() },
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    fn tree(&self) -> std::sync::MutexGuard<'_, Tree> {
        self.tree.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn add(&self, parent: INodeNo, name: &OsStr, dir: bool) -> Result<u64, Errno> {
        let mut t = self.tree();
        let key = (parent.0, name.to_os_string());
        if t.names.contains_key(&key) {
            return Err(Errno::EEXIST);
        }
        t.next_ino += 1;
        let ino = t.next_ino;
        t.names.insert(key, (ino, dir));
        if dir {
            t.dirs.insert(ino);
        }
        Ok(ino)
    }

    fn negative(&self, req: &Request) -> FileAttr {
        let mut a = self.attr(0, false, req);
        a.ino = INodeNo(0);
        a
    }
}

impl Filesystem for NullFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        for flag in [InitFlags::FUSE_PARALLEL_DIROPS, InitFlags::FUSE_DO_READDIRPLUS, InitFlags::FUSE_MAX_PAGES] {
            let _ = config.add_capabilities(flag);
        }
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let found = self.tree().names.get(&(parent.0, name.to_os_string())).copied();
        match found {
            Some((ino, dir)) => reply.entry(&TTL, &self.attr(ino, dir, req), Generation(0)),
            None => reply.entry(&TTL, &self.negative(req), Generation(0)),
        }
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let dir = ino.0 == 1 || self.tree().dirs.contains(&ino.0);
        reply.attr(&TTL, &self.attr(ino.0, dir, req))
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, _mode: u32, _umask: u32, reply: ReplyEntry) {
        match self.add(parent, name, true) {
            Ok(ino) => reply.entry(&TTL, &self.attr(ino, true, req), Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        match self.add(parent, name, false) {
            Ok(ino) => {
                reply.created(&TTL, &self.attr(ino, false, req), Generation(0), FileHandle(ino), FopenFlags::empty())
            }
            Err(e) => reply.error(e),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        _size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.getattr(req, ino, None, reply)
    }

    fn symlink(&self, req: &Request, parent: INodeNo, name: &OsStr, _target: &std::path::Path, reply: ReplyEntry) {
        match self.add(parent, name, false) {
            Ok(ino) => reply.entry(&TTL, &self.attr(ino, false, req), Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(ino.0), FopenFlags::empty())
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        reply.written(data.len() as u32)
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok()
    }

    fn getxattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENODATA)
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let mut t = self.tree();
        match t.names.remove(&(parent.0, name.to_os_string())) {
            Some(v) => {
                t.names.insert((newparent.0, newname.to_os_string()), v);
                reply.ok()
            }
            None => reply.error(Errno::ENOENT),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.tree().names.remove(&(parent.0, name.to_os_string())) {
            Some(_) => reply.ok(),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.unlink(_req, parent, name, reply)
    }
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let mountpoint = args.get(1).expect("usage: nullfs MOUNTPOINT [--threads N] [--uring]");
    let threads = match args.iter().position(|a| a == "--threads") {
        Some(i) => args.get(i + 1).and_then(|n| n.parse().ok()).expect("--threads N"),
        None => 4,
    };
    let mut config = fuser::Config::default();
    config.mount_options =
        vec![fuser::MountOption::FSName("nullfs".to_string()), fuser::MountOption::DefaultPermissions];
    config.acl = fuser::SessionACL::All;
    config.n_threads = Some(threads);
    config.clone_fd = true;
    // `--uring`: FUSE over io_uring, as `rewindfs mount --transport uring`
    // (the kernel's fuse.enable_uring must be on).
    config.io_uring = args.iter().any(|a| a == "--uring");
    config.io_uring_threads_per_queue = 2;
    // The ring threads under SCHED_IDLE, as rewindfs runs them
    // (`fs::mount_config`): the woken process stays on its CPU.
    config.io_uring_sched_idle = true;
    let fs = NullFs { tree: Mutex::new(Tree { next_ino: 1, ..Tree::default() }), started: SystemTime::now() };
    fuser::Session::new(fs, std::path::Path::new(mountpoint), &config)?.run()
}
