//! REWINDFS PATCH: FUSE over io_uring (Linux 6.14+, `fs/fuse/dev_uring.c`).
//!
//! After `FUSE_INIT` negotiated `FUSE_OVER_IO_URING`, each CPU's queue gets
//! entries registered with `FUSE_IO_URING_CMD_REGISTER`; the kernel then puts a
//! request made on CPU n into a free entry of queue n and completes that
//! entry's command. The queue's thread (pinned to CPU n, so the requester and
//! the server share a CPU instead of waking one on the other) parses the
//! request with fuser's own parser, dispatches it like the `/dev/fuse` loop
//! does, writes the reply into the same entry and hands it back with
//! `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`, which also waits for the next request.
//!
//! `/dev/fuse` stays open and served by the classic threads: the kernel keeps
//! sending interrupts and forgets there, requests made before every queue had
//! an entry go there, notifications and passthrough's backing ids are written
//! to it, and if registering fails the connection simply stays classic.
//!
//! Layout of an entry (`struct fuse_uring_req_header` and the payload):
//! `in_out` (128 bytes: `fuse_in_header`, or on commit `fuse_out_header`),
//! `op_in` (128 bytes: the request's first argument, the per-op header),
//! `ring_ent_in_out` (flags, commit_id, payload_sz); the payload buffer holds
//! the other arguments, and on commit the whole reply body.

use std::alloc::Layout;
use std::io;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::thread;
use std::thread::JoinHandle;

use io_uring::IoUring;
use io_uring::cqueue;
use io_uring::opcode;
use io_uring::squeue;
use io_uring::types;
use log::debug;
use log::error;
use log::warn;
use parking_lot::Condvar;
use parking_lot::Mutex;

use crate::Filesystem;
use crate::ReplyEmpty;
use crate::channel::Channel;
use crate::channel::ChannelSender;
use crate::ll::Operation;
use crate::ll::fuse_abi as abi;
use crate::passthrough::BackingId;
use crate::request::RequestWithSender;
use crate::session::FilesystemHolder;
use crate::session::SessionACL;
use crate::session::SessionEventLoop;

const IN_OUT_SZ: usize = 128;
const OP_IN_SZ: usize = 128;
/// `sizeof(struct fuse_uring_req_header)`: in_out, op_in, ring_ent_in_out.
const HEADER_SZ: usize = IN_OUT_SZ + OP_IN_SZ + 32;
const OP_IN_OFFSET: usize = IN_OUT_SZ;
/// `ring_ent_in_out.commit_id` and `.payload_sz`.
const COMMIT_ID_OFFSET: usize = IN_OUT_SZ + OP_IN_SZ + 8;
const PAYLOAD_SZ_OFFSET: usize = IN_OUT_SZ + OP_IN_SZ + 16;
const IN_HEADER_SZ: usize = size_of::<abi::fuse_in_header>();
const OUT_HEADER_SZ: usize = size_of::<abi::fuse_out_header>();
/// `enum fuse_uring_cmd`.
const FUSE_IO_URING_CMD_REGISTER: u32 = 1;
const FUSE_IO_URING_CMD_COMMIT_AND_FETCH: u32 = 2;
/// `FUSE_MIN_READ_BUFFER`: the kernel never sizes a payload below it.
const MIN_PAYLOAD: usize = 8192;

/// How the rings are sized, fixed at `FUSE_INIT`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RingParams {
    /// At least the kernel's `ring->max_payload_sz`, or REGISTER fails.
    pub(crate) payload_size: usize,
    /// Entries per queue, each served by its own thread: one thread per
    /// queue would serialise every request of a CPU behind a slow one.
    pub(crate) threads_per_queue: usize,
    /// REWINDFS PATCH: the ring threads run under `SCHED_IDLE`
    /// (`Config::io_uring_sched_idle`).
    pub(crate) sched_idle: bool,
}

impl RingParams {
    /// The kernel's `max(FUSE_MIN_READ_BUFFER, max_write, max_pages * PAGE_SIZE)`.
    pub(crate) fn new(
        max_write: u32,
        max_pages: u16,
        threads_per_queue: usize,
        sched_idle: bool,
    ) -> Self {
        let pages = usize::from(max_pages) * page_size::get();
        RingParams {
            payload_size: MIN_PAYLOAD.max(max_write as usize).max(pages),
            threads_per_queue: threads_per_queue.max(1),
            sched_idle,
        }
    }
}

/// What the ring transport is doing, readable while the session runs.
#[derive(Debug, Clone, Default)]
pub struct RingStats {
    inner: Arc<StatsInner>,
}

#[derive(Debug, Default)]
struct StatsInner {
    requests: AtomicU64,
    registered_queues: AtomicUsize,
    queues: AtomicUsize,
    error: Mutex<Option<String>>,
}

impl RingStats {
    /// Requests served through the rings (not through `/dev/fuse`).
    pub fn requests(&self) -> u64 {
        self.inner.requests.load(Ordering::Relaxed)
    }
    /// Queues whose entries the kernel accepted (one per possible CPU).
    pub fn registered_queues(&self) -> usize {
        self.inner.registered_queues.load(Ordering::Relaxed)
    }
    /// Queues the session set up (0 when io_uring was not negotiated).
    pub fn queues(&self) -> usize {
        self.inner.queues.load(Ordering::Relaxed)
    }
    /// The first error that stopped a ring, if any: the connection then
    /// keeps being served through `/dev/fuse`.
    pub fn error(&self) -> Option<String> {
        self.inner.error.lock().clone()
    }
    fn fail(&self, what: String) {
        error!("{what}");
        self.inner.error.lock().get_or_insert(what);
    }
}

/// The CPUs the kernel made queues for: `num_possible_cpus()`.
fn possible_cpus() -> usize {
    let parsed = std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| {
            // "0-7" or "0" (possible CPUs are numbered from 0 without holes).
            let last = s.trim().rsplit(['-', ',']).next()?.parse::<usize>().ok()?;
            Some(last + 1)
        });
    parsed.unwrap_or_else(|| {
        thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    })
}

/// Starts the ring threads: `threads_per_queue` per possible CPU.
pub(crate) fn spawn<FS: Filesystem>(
    params: RingParams,
    stats: &RingStats,
    ch: &Channel,
    filesystem: &Arc<FilesystemHolder<FS>>,
    allowed: SessionACL,
    session_owner: nix::unistd::Uid,
) -> io::Result<Vec<JoinHandle<io::Result<()>>>> {
    let queues = possible_cpus();
    stats.inner.queues.store(queues, Ordering::Relaxed);
    let mut threads = Vec::new();
    for qid in 0..queues {
        for t in 0..params.threads_per_queue {
            let thread_name = format!("fuse-ring-{qid}");
            let worker = RingWorker {
                qid: qid as u16,
                first: t == 0,
                params,
                stats: stats.clone(),
                se: SessionEventLoop {
                    thread_name: thread_name.clone(),
                    filesystem: filesystem.clone(),
                    ch: ch.clone(),
                    allowed,
                    session_owner,
                },
            };
            threads.push(
                thread::Builder::new()
                    .name(thread_name)
                    .spawn(move || worker.run())?,
            );
        }
    }
    Ok(threads)
}

/// Page-aligned memory the kernel reads and writes while an entry's command
/// is pending: raw, so that no Rust reference to it exists meanwhile.
struct RawBuf {
    ptr: NonNull<u8>,
    len: usize,
}

impl RawBuf {
    fn new(len: usize) -> io::Result<Self> {
        let layout = Layout::from_size_align(len, page_size::get()).map_err(io::Error::other)?;
        // SAFETY: `len` is non-zero (a header or a payload of at least 8 KiB).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        Ok(RawBuf { ptr, len })
    }
}

impl Drop for RawBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this very layout (already validated there).
        unsafe {
            std::alloc::dealloc(
                self.ptr.as_ptr(),
                Layout::from_size_align_unchecked(self.len, page_size::get()),
            )
        }
    }
}

// SAFETY: a RawBuf is plain memory; who may touch it when is the entry
// protocol's business (see `Slot`).
unsafe impl Send for RawBuf {}
unsafe impl Sync for RawBuf {}

/// One registered entry: its buffers and the reply being written into them.
///
/// Ownership alternates: from the submit of REGISTER/COMMIT_AND_FETCH until
/// its completion the kernel owns the buffers and nothing here touches them;
/// from the completion until the next commit's submit the worker owns them,
/// and a reply (possibly from another thread) writes into them under `state`.
pub(crate) struct Slot {
    header: RawBuf,
    payload: RawBuf,
    /// The iovecs REGISTER names; kept alive as long as the entry.
    iov: [libc::iovec; 2],
    state: Mutex<SlotState>,
    replied: Condvar,
}

// SAFETY: `iov` only points into the slot's own buffers.
unsafe impl Send for Slot {}
unsafe impl Sync for Slot {}

#[derive(Debug, Default)]
struct SlotState {
    /// The request the worker is serving in this entry (0: none).
    unique: u64,
    replied: bool,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("state", &*self.state.lock())
            .finish_non_exhaustive()
    }
}

impl Slot {
    fn new(payload_size: usize) -> io::Result<Arc<Self>> {
        let header = RawBuf::new(HEADER_SZ)?;
        let payload = RawBuf::new(payload_size)?;
        let iov = [
            libc::iovec {
                iov_base: header.ptr.as_ptr().cast(),
                iov_len: HEADER_SZ,
            },
            libc::iovec {
                iov_base: payload.ptr.as_ptr().cast(),
                iov_len: payload_size,
            },
        ];
        Ok(Arc::new(Slot {
            header,
            payload,
            iov,
            state: Mutex::new(SlotState::default()),
            replied: Condvar::new(),
        }))
    }

    /// Copies the request the kernel delivered into `out` in the `/dev/fuse`
    /// wire shape (`fuse_in_header`, first argument, the other arguments),
    /// which fuser's parser reads. Returns its length and unique id.
    ///
    /// Must be called only between a completion and the next commit.
    fn take_request(&self, out: &mut [u8]) -> Result<(usize, u64), String> {
        // SAFETY: the completion handed the entry to us (see the type's doc);
        // both reads stay within the buffers' lengths.
        let header = unsafe { std::slice::from_raw_parts(self.header.ptr.as_ptr(), HEADER_SZ) };
        let word = |off: usize| {
            u32::from_ne_bytes([
                header[off],
                header[off + 1],
                header[off + 2],
                header[off + 3],
            ])
        };
        let len = word(0) as usize;
        let mut unique = [0u8; 8];
        unique.copy_from_slice(&header[COMMIT_ID_OFFSET..COMMIT_ID_OFFSET + 8]);
        // `commit_id`: the request's unique id, which the commit must name.
        let unique = u64::from_ne_bytes(unique);
        let payload_sz = word(PAYLOAD_SZ_OFFSET) as usize;
        let op_in = len
            .checked_sub(IN_HEADER_SZ + payload_sz)
            .filter(|&n| n <= OP_IN_SZ && payload_sz <= self.payload.len && len <= out.len())
            .ok_or_else(|| format!("malformed ring request: len {len}, payload {payload_sz}"))?;
        // SAFETY: as above; `payload_sz` was checked against the buffer.
        let payload = unsafe { std::slice::from_raw_parts(self.payload.ptr.as_ptr(), payload_sz) };
        out[..IN_HEADER_SZ].copy_from_slice(&header[..IN_HEADER_SZ]);
        out[IN_HEADER_SZ..IN_HEADER_SZ + op_in]
            .copy_from_slice(&header[OP_IN_OFFSET..OP_IN_OFFSET + op_in]);
        out[IN_HEADER_SZ + op_in..len].copy_from_slice(payload);
        let mut state = self.state.lock();
        state.unique = unique;
        state.replied = false;
        Ok((len, unique))
    }

    /// Writes a reply (`fuse_out_header` then the body, as fuser encodes it
    /// for `/dev/fuse`) into the entry: the header into `in_out`, the body
    /// into the payload, its length into `payload_sz`.
    fn put_reply(&self, data: &[io::IoSlice<'_>]) -> io::Result<()> {
        let mut state = self.state.lock();
        let total: usize = data.iter().map(|s| s.len()).sum();
        if state.replied || state.unique == 0 {
            return Err(io::Error::other("a second reply to a ring request"));
        }
        if total < OUT_HEADER_SZ || total - OUT_HEADER_SZ > self.payload.len {
            return Err(io::Error::other(format!(
                "ring reply of {total} bytes does not fit"
            )));
        }
        // SAFETY: the entry is ours until `replied` is set and the worker
        // commits it (it waits for that under this lock); writes stay within
        // HEADER_SZ and the payload length checked above.
        unsafe {
            let header = self.header.ptr.as_ptr();
            let payload = self.payload.ptr.as_ptr();
            let mut at = 0usize;
            for s in data {
                let in_header = OUT_HEADER_SZ.saturating_sub(at).min(s.len());
                std::ptr::copy_nonoverlapping(s.as_ptr(), header.add(at), in_header);
                let body_at = (at + in_header).saturating_sub(OUT_HEADER_SZ);
                std::ptr::copy_nonoverlapping(
                    s.as_ptr().add(in_header),
                    payload.add(body_at),
                    s.len() - in_header,
                );
                at += s.len();
            }
            let payload_sz = ((total - OUT_HEADER_SZ) as u32).to_ne_bytes();
            std::ptr::copy_nonoverlapping(payload_sz.as_ptr(), header.add(PAYLOAD_SZ_OFFSET), 4);
        }
        state.replied = true;
        self.replied.notify_all();
        Ok(())
    }

    /// Waits until the request in this entry has been answered (at once,
    /// unless the filesystem kept its reply to send from another thread).
    fn wait_replied(&self) -> u64 {
        let mut state = self.state.lock();
        while !state.replied {
            self.replied.wait(&mut state);
        }
        let unique = state.unique;
        state.unique = 0;
        unique
    }
}

/// Where a reply to a ring request goes.
#[derive(Debug, Clone)]
pub(crate) struct RingReply {
    slot: Arc<Slot>,
    /// `/dev/fuse`, for passthrough's backing ids.
    pub(crate) channel: ChannelSender,
}

impl RingReply {
    pub(crate) fn send(&self, data: &[io::IoSlice<'_>]) -> io::Result<()> {
        self.slot.put_reply(data)
    }
    pub(crate) fn open_backing(&self, fd: std::os::fd::BorrowedFd<'_>) -> io::Result<BackingId> {
        self.channel.open_backing(fd)
    }
}

/// The 80-byte command area of an SQE: `struct fuse_uring_cmd_req`.
fn cmd_req(commit_id: u64, qid: u16) -> [u8; 80] {
    let mut cmd = [0u8; 80];
    cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    cmd[16..18].copy_from_slice(&qid.to_ne_bytes());
    cmd
}

/// A REGISTER command: io-uring 0.7's `UringCmd80` sets `addr` but not
/// `len`, and the kernel wants `sqe->len` = 2 (header and payload iovecs).
fn register_sqe(fd: i32, slot: &Slot, qid: u16, user_data: u64) -> squeue::Entry128 {
    let sqe = opcode::UringCmd80::new(types::Fd(fd), FUSE_IO_URING_CMD_REGISTER)
        .cmd(cmd_req(0, qid))
        .addr(Some(slot.iov.as_ptr() as u64))
        .build()
        .user_data(user_data);
    // SAFETY: `Entry128` is `repr(C)` of a 64-byte `io_uring_sqe` (zeroed
    // before being filled, so every byte is initialised) and 64 more bytes:
    // 128 plain bytes either way. `len` is the u32 at offset 24 of the SQE.
    let mut bytes: [u8; 128] = unsafe { std::mem::transmute(sqe) };
    bytes[24..28].copy_from_slice(&2u32.to_ne_bytes());
    // SAFETY: the same 128 bytes back, with a valid length in `len`.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(bytes) }
}

fn commit_sqe(fd: i32, commit_id: u64, qid: u16, user_data: u64) -> squeue::Entry128 {
    opcode::UringCmd80::new(types::Fd(fd), FUSE_IO_URING_CMD_COMMIT_AND_FETCH)
        .cmd(cmd_req(commit_id, qid))
        .build()
        .user_data(user_data)
}

struct RingWorker<FS: Filesystem> {
    qid: u16,
    /// The queue's first thread counts the queue as registered.
    first: bool,
    params: RingParams,
    stats: RingStats,
    se: SessionEventLoop<FS>,
}

impl<FS: Filesystem> RingWorker<FS> {
    fn run(self) -> io::Result<()> {
        if let Err(e) = self.serve() {
            self.stats
                .fail(format!("FUSE ring queue {}: {e}", self.qid));
        }
        // A stopped ring leaves the connection to `/dev/fuse`: not an error
        // of the session.
        Ok(())
    }

    fn serve(&self) -> io::Result<()> {
        let mut cpus = nix::sched::CpuSet::new();
        if cpus.set(self.qid.into()).is_ok()
            && let Err(e) = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &cpus)
        {
            // An offline CPU's queue still needs its entry registered.
            debug!("cannot pin the ring thread of queue {}: {e}", self.qid);
        }
        if self.params.sched_idle {
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: a plain system call on the calling thread (pid 0),
            // with a pointer to a valid `sched_param` for its duration.
            if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
                debug!(
                    "cannot run the ring thread of queue {} under SCHED_IDLE: {}",
                    self.qid,
                    io::Error::last_os_error()
                );
            }
        }
        // One entry per thread: a thread serves one request at a time, and
        // an entry parked in the kernel is what lets a request in.
        let slot = Slot::new(self.params.payload_size)?;
        let mut ring: IoUring<squeue::Entry128, cqueue::Entry> = IoUring::builder()
            .setup_single_issuer()
            .setup_coop_taskrun()
            .build(4)?;
        let (result, pending) = self.serve_entry(&mut ring, &slot);
        if pending {
            // The kernel may still write into the entry until the ring's
            // teardown cancels the command (asynchronously, after close):
            // the buffers must outlive that, so they are never freed.
            std::mem::forget(slot.clone());
        }
        drop(ring);
        result
    }

    /// Registers `slot` on `ring` and serves the requests it brings until
    /// the connection ends. Returns whether a command is still pending.
    fn serve_entry(
        &self,
        ring: &mut IoUring<squeue::Entry128, cqueue::Entry>,
        slot: &Arc<Slot>,
    ) -> (io::Result<()>, bool) {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&std::os::fd::AsFd::as_fd(&self.se.ch));
        let sqe = register_sqe(fd, slot, self.qid, 0);
        // SAFETY: the SQE names `slot.iov` and the slot's buffers, which stay
        // allocated while the command is pending (`serve` leaks them if it
        // still is when the thread ends).
        if unsafe { ring.submission().push(&sqe) }.is_err() {
            return (Err(io::Error::other("submission queue full")), false);
        }
        if let Err(e) = ring.submit() {
            return (Err(e), false);
        }
        // REGISTER fails synchronously; on success it stays pending until a
        // request arrives, which can be at once (requests that waited for
        // every queue to be ready): such a completion is the first request.
        let mut first = ring.completion().next().map(|cqe| cqe.result());
        if let Some(res) = first.filter(|&res| res < 0) {
            let e = io::Error::from_raw_os_error(-res);
            return (
                Err(io::Error::other(format!(
                    "FUSE_IO_URING_CMD_REGISTER failed: {e}"
                ))),
                false,
            );
        }
        if self.first {
            self.stats
                .inner
                .registered_queues
                .fetch_add(1, Ordering::Relaxed);
        }
        let reply_to = RingReply {
            slot: slot.clone(),
            channel: self.se.ch.sender(),
        };
        let mut buf = vec![0u64; (self.params.payload_size + HEADER_SZ).div_ceil(8)];
        let buf: &mut [u8] = zerocopy::IntoBytes::as_mut_bytes(&mut buf[..]);
        loop {
            let res = match first.take() {
                Some(res) => res,
                None => {
                    match ring.submit_and_wait(1) {
                        Ok(_) => {}
                        Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                        Err(e) => return (Err(e), true),
                    }
                    // One entry per ring: at most one completion.
                    match ring.completion().next() {
                        Some(cqe) => cqe.result(),
                        None => continue,
                    }
                }
            };
            if res < 0 {
                let result = match -res {
                    // The connection ended (unmount, abort) or the ring is going away.
                    libc::ENOTCONN | libc::ENODEV | libc::ECANCELED => {
                        debug!(
                            "FUSE ring queue {} ends: {}",
                            self.qid,
                            io::Error::from_raw_os_error(-res)
                        );
                        Ok(())
                    }
                    e => Err(io::Error::from_raw_os_error(e)),
                };
                return (result, false);
            }
            let (len, unique) = match slot.take_request(buf) {
                Ok(r) => r,
                // The entry is ours but unusable: no command is pending.
                Err(e) => return (Err(io::Error::other(e)), false),
            };
            self.stats.inner.requests.fetch_add(1, Ordering::Relaxed);
            match RequestWithSender::for_ring(reply_to.clone(), &buf[..len]) {
                Some(req) => {
                    if let Ok(Operation::Destroy(_)) = req.request.operation() {
                        req.reply::<ReplyEmpty>().ok();
                    } else {
                        req.dispatch(&self.se);
                    }
                }
                None => {
                    warn!("unparsable ring request {unique}; answering EIO");
                    let header = abi::fuse_out_header {
                        len: OUT_HEADER_SZ as u32,
                        error: -libc::EIO,
                        unique,
                    };
                    let _ =
                        slot.put_reply(&[io::IoSlice::new(zerocopy::IntoBytes::as_bytes(&header))]);
                }
            }
            let commit_id = slot.wait_replied();
            let sqe = commit_sqe(fd, commit_id, self.qid, 0);
            // SAFETY: as for REGISTER.
            if unsafe { ring.submission().push(&sqe) }.is_err() {
                return (Err(io::Error::other("submission queue full")), false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header_bytes(slot: &Slot) -> Vec<u8> {
        // SAFETY: test only; no command is pending on this slot.
        unsafe { std::slice::from_raw_parts(slot.header.ptr.as_ptr(), HEADER_SZ) }.to_vec()
    }

    /// A request scattered as `fuse_uring_args_to_ring` scatters it comes out
    /// in the `/dev/fuse` shape, and a reply lands where
    /// `fuse_uring_copy_from_ring` reads it.
    #[test]
    fn request_gathered_and_reply_scattered() {
        let slot = Slot::new(MIN_PAYLOAD).unwrap();
        // A 40-byte in header (len 40 + 8 + 5), an 8-byte op header, a 5-byte payload.
        let mut inh = vec![0u8; IN_HEADER_SZ];
        inh[0..4].copy_from_slice(&53u32.to_ne_bytes());
        inh[4..8].copy_from_slice(&1u32.to_ne_bytes());
        inh[8..16].copy_from_slice(&77u64.to_ne_bytes());
        // SAFETY: test only; no command is pending on this slot.
        unsafe {
            let h = slot.header.ptr.as_ptr();
            std::ptr::copy_nonoverlapping(77u64.to_ne_bytes().as_ptr(), h.add(COMMIT_ID_OFFSET), 8);
            std::ptr::copy_nonoverlapping(inh.as_ptr(), h, IN_HEADER_SZ);
            std::ptr::copy_nonoverlapping([9u8; 8].as_ptr(), h.add(OP_IN_OFFSET), 8);
            std::ptr::copy_nonoverlapping(5u32.to_ne_bytes().as_ptr(), h.add(PAYLOAD_SZ_OFFSET), 4);
            std::ptr::copy_nonoverlapping(b"hello".as_ptr(), slot.payload.ptr.as_ptr(), 5);
        }
        let mut out = vec![0u8; 256];
        let (len, unique) = slot.take_request(&mut out).unwrap();
        assert_eq!((len, unique), (53, 77));
        assert_eq!(&out[..IN_HEADER_SZ], &inh[..]);
        assert_eq!(&out[IN_HEADER_SZ..48], &[9u8; 8]);
        assert_eq!(&out[48..53], b"hello");

        // The reply split across iovecs at an odd place.
        let mut reply = vec![0u8; OUT_HEADER_SZ];
        reply[8..16].copy_from_slice(&77u64.to_ne_bytes());
        reply.extend_from_slice(b"abcdefgh");
        let (a, b) = reply.split_at(10);
        slot.put_reply(&[io::IoSlice::new(a), io::IoSlice::new(b)])
            .unwrap();
        let h = header_bytes(&slot);
        assert_eq!(&h[..OUT_HEADER_SZ], &reply[..OUT_HEADER_SZ]);
        assert_eq!(
            u32::from_ne_bytes(
                h[PAYLOAD_SZ_OFFSET..PAYLOAD_SZ_OFFSET + 4]
                    .try_into()
                    .unwrap()
            ),
            8
        );
        // SAFETY: test only.
        let body = unsafe { std::slice::from_raw_parts(slot.payload.ptr.as_ptr(), 8) };
        assert_eq!(body, b"abcdefgh");
        assert_eq!(slot.wait_replied(), 77);
        // A late second reply is refused, not written over the next request.
        assert!(slot.put_reply(&[io::IoSlice::new(&reply)]).is_err());
    }

    #[test]
    fn malformed_lengths_are_refused() {
        let slot = Slot::new(MIN_PAYLOAD).unwrap();
        // SAFETY: test only.
        unsafe {
            let h = slot.header.ptr.as_ptr();
            std::ptr::copy_nonoverlapping(300u32.to_ne_bytes().as_ptr(), h, 4);
        }
        assert!(
            slot.take_request(&mut [0u8; 512]).is_err(),
            "op_in cannot exceed 128 bytes"
        );
    }

    #[test]
    fn register_sqe_carries_two_iovecs() {
        let slot = Slot::new(MIN_PAYLOAD).unwrap();
        let sqe = register_sqe(3, &slot, 1, 42);
        // SAFETY: test only: reading the plain bytes of the SQE.
        let bytes: [u8; 128] = unsafe { std::mem::transmute(sqe) };
        assert_eq!(u32::from_ne_bytes(bytes[24..28].try_into().unwrap()), 2);
        assert_eq!(
            u64::from_ne_bytes(bytes[16..24].try_into().unwrap()),
            slot.iov.as_ptr() as u64
        );
        assert_eq!(
            u16::from_ne_bytes(bytes[64..66].try_into().unwrap()),
            1,
            "qid in fuse_uring_cmd_req"
        );
        assert_eq!(
            u32::from_ne_bytes(bytes[8..12].try_into().unwrap()),
            FUSE_IO_URING_CMD_REGISTER
        );
        assert_eq!(u64::from_ne_bytes(bytes[32..40].try_into().unwrap()), 42);
    }
}
