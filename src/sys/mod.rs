//! The only module allowed `unsafe` (the crate denies it everywhere else):
//! thin, safe wrappers over Linux calls. Most go through `rustix`'s safe
//! API; `unsafe` remains only for what `rustix` does not provide, each block
//! with a `SAFETY:` comment saying why it is sound:
//! - [`name_to_handle_at`] and [`open_by_handle_at`] (persistent file
//!   handles), including adopting the descriptor the latter returns;
//! - [`signals::install`] (a process-wide `sigaction`; `rustix` exposes it
//!   only through its unstable runtime API, itself `unsafe`);
//! - [`SharedMap`] (a file mapped shared for writing: `mmap`, the copy
//!   into it and `munmap`).

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

/// Largest file handle the kernel hands out (MAX_HANDLE_SZ in the kernel).
const MAX_HANDLE_SZ: usize = 128;

/// An opaque, persistent kernel file handle (`name_to_handle_at`): names an
/// inode on its filesystem without holding a descriptor, survives renames
/// and remounts, and (on ext4) changes when the inode number is reused, so
/// it is how we recognise "the same file" cheaply.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct FileHandle {
    handle_type: i32,
    bytes: Box<[u8]>,
}

impl FileHandle {
    /// Serialised form: 4 bytes little-endian handle type, then the bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.bytes.len());
        out.extend_from_slice(&self.handle_type.to_le_bytes());
        out.extend_from_slice(&self.bytes);
        out
    }

    /// Inverse of [`FileHandle::to_bytes`]; `None` when malformed.
    pub fn from_bytes(raw: &[u8]) -> Option<FileHandle> {
        if raw.len() < 4 || raw.len() - 4 > MAX_HANDLE_SZ {
            return None;
        }
        let handle_type = i32::from_le_bytes(raw[..4].try_into().ok()?);
        Some(FileHandle { handle_type, bytes: raw[4..].into() })
    }
}

#[repr(C)]
struct RawHandle {
    handle_bytes: libc::c_uint,
    handle_type: libc::c_int,
    f_handle: [u8; MAX_HANDLE_SZ],
}

fn cstring(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// The handle of `name` in `dir` (or of `dir` itself when `name` is empty),
/// never following a final symlink.
pub fn name_to_handle_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<FileHandle> {
    let cname = cstring(name)?;
    let mut raw =
        RawHandle { handle_bytes: MAX_HANDLE_SZ as libc::c_uint, handle_type: 0, f_handle: [0; MAX_HANDLE_SZ] };
    let mut mount_id: libc::c_int = 0;
    let flags = if name.is_empty() { libc::AT_EMPTY_PATH } else { 0 };
    // SAFETY: `raw` is a properly sized `struct file_handle` with
    // handle_bytes set to the capacity of f_handle; `cname` is a valid
    // NUL-terminated string; `mount_id` is a valid out pointer.
    let rc = unsafe {
        libc::name_to_handle_at(
            dir.as_raw_fd(),
            cname.as_ptr(),
            (&mut raw as *mut RawHandle).cast(),
            &mut mount_id,
            flags,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let len = (raw.handle_bytes as usize).min(MAX_HANDLE_SZ);
    Ok(FileHandle { handle_type: raw.handle_type, bytes: raw.f_handle[..len].into() })
}

/// Opens the inode a handle names. `mount_fd` is any descriptor on the same
/// filesystem. Needs CAP_DAC_READ_SEARCH.
pub fn open_by_handle_at(mount_fd: BorrowedFd<'_>, handle: &FileHandle, flags: i32) -> io::Result<OwnedFd> {
    let mut raw = RawHandle {
        handle_bytes: handle.bytes.len() as libc::c_uint,
        handle_type: handle.handle_type,
        f_handle: [0; MAX_HANDLE_SZ],
    };
    raw.f_handle[..handle.bytes.len()].copy_from_slice(&handle.bytes);
    // SAFETY: `raw` is a valid `struct file_handle` whose handle_bytes does
    // not exceed the f_handle array (a FileHandle never holds more than
    // MAX_HANDLE_SZ bytes: both constructors ensure it, and copy_from_slice
    // above would panic otherwise); the kernel only reads it.
    let fd = unsafe {
        libc::open_by_handle_at(mount_fd.as_raw_fd(), (&mut raw as *mut RawHandle).cast(), flags | libc::O_CLOEXEC)
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor (fd >= 0 checked
    // above) and nothing else owns it, so the OwnedFd is its only owner.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `/proc/self/fd/N`: lets path-only calls (xattrs, chmod, truncate) act on
/// the inode an `O_PATH` descriptor refers to, without resolving any name.
pub fn proc_fd_path(fd: BorrowedFd<'_>) -> CString {
    // A decimal number never contains NUL.
    CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap_or_default()
}

/// `getxattr` on the inode behind `fd`; with an empty `buf`, returns the size.
pub fn getxattr(fd: BorrowedFd<'_>, name: &OsStr, buf: &mut [u8]) -> io::Result<usize> {
    let path = proc_fd_path(fd);
    // rustix splits libc's "empty buffer means size query" into its own call.
    if buf.is_empty() {
        Ok(rustix::fs::getxattr_query(path.as_c_str(), name)?)
    } else {
        Ok(rustix::fs::getxattr(path.as_c_str(), name, buf)?)
    }
}

/// `listxattr` on the inode behind `fd`; with an empty `buf`, returns the size.
pub fn listxattr(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    let path = proc_fd_path(fd);
    if buf.is_empty() {
        Ok(rustix::fs::listxattr_query(path.as_c_str())?)
    } else {
        Ok(rustix::fs::listxattr(path.as_c_str(), buf)?)
    }
}

/// `setxattr` on the inode behind `fd`; `flags` as for setxattr(2)
/// (XATTR_CREATE, XATTR_REPLACE), passed to the kernel unchanged.
pub fn setxattr(fd: BorrowedFd<'_>, name: &OsStr, value: &[u8], flags: i32) -> io::Result<()> {
    let path = proc_fd_path(fd);
    let flags = rustix::fs::XattrFlags::from_bits_retain(flags as u32);
    Ok(rustix::fs::setxattr(path.as_c_str(), name, value, flags)?)
}

/// `removexattr` on the inode behind `fd`.
pub fn removexattr(fd: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    let path = proc_fd_path(fd);
    Ok(rustix::fs::removexattr(path.as_c_str(), name)?)
}

/// `lseek` with SEEK_DATA / SEEK_HOLE support on an open file. An unknown
/// `whence` is EINVAL, as from the kernel.
pub fn lseek(fd: BorrowedFd<'_>, offset: i64, whence: i32) -> io::Result<i64> {
    use rustix::fs::SeekFrom;
    // rustix passes the unsigned positions to the kernel as the same i64
    // bits, so a negative offset still gets the kernel's own error.
    let pos = match whence {
        libc::SEEK_SET => SeekFrom::Start(offset as u64),
        libc::SEEK_CUR => SeekFrom::Current(offset),
        libc::SEEK_END => SeekFrom::End(offset),
        libc::SEEK_DATA => SeekFrom::Data(offset as u64),
        libc::SEEK_HOLE => SeekFrom::Hole(offset as u64),
        _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
    };
    // The kernel's result is a loff_t, so it fits.
    Ok(rustix::fs::seek(fd, pos)? as i64)
}

/// `copy_file_range` between two open files; returns bytes copied.
pub fn copy_file_range(
    src: BorrowedFd<'_>,
    src_off: u64,
    dst: BorrowedFd<'_>,
    dst_off: u64,
    len: usize,
) -> io::Result<usize> {
    let (mut so, mut doff) = (src_off, dst_off);
    Ok(rustix::fs::copy_file_range(src, Some(&mut so), dst, Some(&mut doff), len)?)
}

/// Starts the writeback of a file's dirty pages without waiting for it
/// (`sync_file_range` with `SYNC_FILE_RANGE_WRITE`): the sync of several
/// files written one after the other then finds most of their bytes
/// written already.
pub fn start_writeback(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: sync_file_range reads no memory of ours; the descriptor is
    // borrowed for the call.
    let r = unsafe { libc::sync_file_range(fd.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Preallocates `[0, len)` of a file (blocks reserved, the size grown to
/// `len` if smaller): a store into a [`SharedMap`] of that range then
/// needs no block, which a full disk would answer with SIGBUS.
pub fn preallocate(fd: BorrowedFd<'_>, len: u64) -> io::Result<()> {
    Ok(rustix::fs::fallocate(fd, rustix::fs::FallocateFlags::empty(), 0, len)?)
}

/// Zeroes `[0, len)` of a file, keeping its blocks and size
/// (`FALLOC_FL_ZERO_RANGE`): the page cache of the range is dropped, and a
/// mapping of it reads zeros from then on.
pub fn zero_range(fd: BorrowedFd<'_>, len: u64) -> io::Result<()> {
    use rustix::fs::FallocateFlags;
    Ok(rustix::fs::fallocate(fd, FallocateFlags::ZERO_RANGE | FallocateFlags::KEEP_SIZE, 0, len)?)
}

/// The first `len` bytes of a file mapped shared and writable. A copy into
/// it lands in the file's page cache, as a `write()` does, without a
/// system call: it survives the death of the process the same way. Only
/// written, never read through, so what another process does to the file
/// meanwhile cannot break a reference of ours; a file cut shorter than the
/// mapping (by another process) makes a store past its end raise SIGBUS.
pub struct SharedMap {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by this value alone (no other Rust value
// points into it), and its memory is process-wide: moving the owner to
// another thread is as sound as moving a Vec.
unsafe impl Send for SharedMap {}

impl SharedMap {
    /// Maps `[0, len)` of `fd` (opened for reading and writing).
    pub fn new(fd: BorrowedFd<'_>, len: usize) -> io::Result<SharedMap> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: a new mapping at an address the kernel picks, so it
        // overlaps no memory Rust knows; the result is checked before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = std::ptr::NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        Ok(SharedMap { ptr, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `bytes` to offset `at`; false (nothing copied) when they do
    /// not fit.
    pub fn write_at(&mut self, at: usize, bytes: &[u8]) -> bool {
        if at.checked_add(bytes.len()).is_none_or(|end| end > self.len) {
            return false;
        }
        // SAFETY: `at + bytes.len() <= len`, checked above, so the
        // destination lies inside the mapping, which lives as long as
        // `self`; `bytes` is Rust memory, which cannot overlap a mapping
        // no reference points into.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.as_ptr().add(at), bytes.len()) };
        true
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; no reference
        // into it outlives `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Sets the process umask to 0 so the modes the kernel hands the daemon
/// (already masked by the caller's umask) land on disk exactly.
pub fn clear_umask() {
    rustix::process::umask(rustix::fs::Mode::empty());
}

/// Sends `signal` to the process `pid`; `Ok(false)` when the process does
/// not exist. Only a single process (pid > 0) and a known signal number are
/// accepted; anything else is EINVAL.
pub fn kill(pid: i32, signal: i32) -> io::Result<bool> {
    let einval = || io::Error::from_raw_os_error(libc::EINVAL);
    let pid = if pid > 0 { rustix::process::Pid::from_raw(pid) } else { None }.ok_or_else(einval)?;
    let signal = rustix::process::Signal::from_named_raw(signal).ok_or_else(einval)?;
    match rustix::process::kill_process(pid, signal) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::SRCH) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// This boot of the machine (`/proc/sys/kernel/random/boot_id`): a pid of
/// another boot names no process of this one.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok().map(|s| s.trim().to_string())
}

/// The pid namespace this process sees pids in (`pid:[N]`): a pid is
/// only meaningful within one.
pub fn pid_namespace() -> Option<String> {
    std::fs::read_link("/proc/self/ns/pid").ok().map(|p| p.to_string_lossy().into_owned())
}

/// The machine's host name.
pub fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|s| s.trim().to_string())
}

/// When process `pid` started, in clock ticks since boot (field 22 of
/// `/proc/PID/stat`): with the pid, it names one process, since a pid is
/// only reused by a process that starts later.
pub fn process_start(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields from 3 on follow the parenthesised command name.
    stat.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()
}

/// Whether a process with that pid is alive (zombies count as dead).
pub fn process_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // Field 3 (after the parenthesised command name) is the state.
            let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
            if !matches!(state, Some("Z") | Some("X") | None) {
                return true;
            }
            // A thread-group leader shows Z as soon as it exits, while the
            // other threads may still be exiting and holding the process's
            // descriptors (and its locks): it is gone once they are too.
            std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.count() > 1).unwrap_or(false)
        }
        Err(_) => false,
    }
}

/// Unmounts `target` (as root: umount2; lazily with MNT_DETACH).
pub fn umount(target: &std::path::Path, lazy: bool) -> io::Result<()> {
    let flags = if lazy { rustix::mount::UnmountFlags::DETACH } else { rustix::mount::UnmountFlags::empty() };
    Ok(rustix::mount::unmount(target, flags)?)
}

/// As `umount`, but a mount that is busy is tried again for up to `grace`:
/// a file closed a moment ago may still pin it, e.g. through a copy of the
/// descriptor table that a forked child holds until it calls exec. Still
/// busy after that: EBUSY, as from `umount`.
pub fn umount_within(target: &std::path::Path, lazy: bool, grace: std::time::Duration) -> io::Result<()> {
    let until = std::time::Instant::now() + grace;
    loop {
        match umount(target, lazy) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && std::time::Instant::now() < until => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// How long an unmount waits for a mount that is busy for a moment.
pub const UNMOUNT_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// The effective uid of this process.
pub fn geteuid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Makes SIGINT, SIGTERM and SIGHUP set a flag instead of killing the
/// process, and returns that flag's reader. Used by `run` (which must
/// unmount after its child exits) and by the daemon (which must unmount
/// cleanly).
pub mod signals {
    use std::sync::atomic::{AtomicI32, Ordering};

    static LAST_SIGNAL: AtomicI32 = AtomicI32::new(0);

    extern "C" fn record(sig: libc::c_int) {
        LAST_SIGNAL.store(sig, Ordering::SeqCst);
    }

    /// Installs the handler for SIGINT, SIGTERM and SIGHUP.
    pub fn install() {
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: `record` is async-signal-safe (a single atomic store,
            // no allocation, no locks) and has the `extern "C" fn(c_int)`
            // signature a handler without SA_SIGINFO must have; an all-zero
            // `sigaction` is a valid value of that plain C struct, and
            // sa_mask is then initialised by sigemptyset; both pointers
            // passed are valid for the duration of the calls.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = record as *const () as usize;
                libc::sigemptyset(&mut action.sa_mask);
                action.sa_flags = 0;
                libc::sigaction(sig, &action, std::ptr::null_mut());
            }
        }
    }

    /// The last signal received since the last call, if any.
    pub fn take() -> Option<i32> {
        match LAST_SIGNAL.swap(0, Ordering::SeqCst) {
            0 => None,
            s => Some(s),
        }
    }
}

/// Creates a new session so a daemon survives its parent's terminal.
pub fn setsid() {
    // Failure (already a group leader) is harmless.
    let _ = rustix::process::setsid();
}
