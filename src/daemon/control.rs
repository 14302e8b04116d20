//! The control protocol between the CLI and a mount's daemon: one JSON
//! request line, one JSON response line, over a Unix socket that lives in
//! the runtime directory, never inside the mount.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Failure, Result};

pub use super::protocol::*;

/// Sends one request and waits for its typed answer. A refusal comes back
/// as an [`Error::Failure`] with the daemon's kind and errno.
pub fn call<O: Op>(socket: &Path, op: O, timeout: Duration) -> Result<O::Reply> {
    Ok(exchange(socket, &op.into(), timeout)?.into_result()?)
}

/// As [`call`], asking the daemon for [`Progress`] lines, each given to
/// `progress` as it comes (`timeout` is then the longest wait between two).
pub fn call_with_progress<O: Op>(
    socket: &Path,
    op: O,
    timeout: Duration,
    progress: &mut dyn FnMut(Progress),
) -> Result<O::Reply> {
    Ok(exchange_with(socket, &op.into(), timeout, Some(progress))?.into_result()?)
}

/// Sends one request and reads the raw answer.
pub fn exchange(socket: &Path, request: &Request, timeout: Duration) -> Result<Response> {
    exchange_with(socket, request, timeout, None)
}

fn exchange_with(
    socket: &Path,
    request: &Request,
    timeout: Duration,
    mut progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<Response> {
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        // The socket is the owner's (mode 0600): another user gets EACCES.
        let kind = match e.raw_os_error() {
            Some(libc::EACCES | libc::EPERM) => ErrorKind::Refused,
            _ => ErrorKind::NoMount,
        };
        Failure::new(
            kind,
            e.raw_os_error(),
            format!("cannot reach the rewindfs daemon at {} ({e}); is it running?", socket.display()),
        )
    })?;
    check_peer(&stream, socket)?;
    stream.set_read_timeout(Some(timeout)).ok();
    let encode = |e: serde_json::Error| Failure::internal(format!("cannot encode a request: {e}"));
    let mut value = serde_json::to_value(request).map_err(encode)?;
    if let (Some(_), Some(fields)) = (&progress, value.as_object_mut()) {
        fields.insert("progress".into(), true.into());
    }
    let mut line = serde_json::to_vec(&value).map_err(encode)?;
    line.push(b'\n');
    stream.write_all(&line).map_err(|e| Error::io("cannot send a request to the daemon", e))?;
    let mut reader = BufReader::new(stream);
    loop {
        let mut answer = String::new();
        reader.read_line(&mut answer).map_err(|e| Error::io("no answer from the daemon", e))?;
        if answer.is_empty() {
            return Err(Error::Daemon(
                "the daemon closed the connection without answering (did it die? a rewind or restore it was applying \
                 is completed by the next mount: `rewindfs unmount` the dead mount, then mount again)"
                    .into(),
            ));
        }
        if let Some(p) = progress.as_mut()
            && let Ok(line) = serde_json::from_str::<ProgressLine>(&answer)
        {
            p(line.progress);
            continue;
        }
        return Ok(serde_json::from_str(&answer)
            .map_err(|e| Failure::internal(format!("malformed answer from the daemon: {e}")))?);
    }
}

/// Checks who serves the socket (SO_PEERCRED): a daemon runs as root or as
/// the caller. Anything else is another user's process answering in the
/// daemon's place, and would be told the owner's requests.
fn check_peer(stream: &UnixStream, socket: &Path) -> Result<()> {
    let peer = rustix::net::sockopt::socket_peercred(stream)
        .map_err(|e| Error::io(format!("cannot see who serves {}", socket.display()), e.into()))?;
    let (uid, me) = (peer.uid.as_raw(), crate::sys::geteuid());
    if uid != 0 && uid != me {
        return Err(Error::kind_of(
            ErrorKind::Refused,
            format!(
                "{} is served by process {} of uid {uid}, neither root nor you (uid {me}); refusing to talk to it",
                socket.display(),
                peer.pid.as_raw_nonzero()
            ),
        ));
    }
    Ok(())
}

/// Requests being handled whose answer is not written yet.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// Waits (at most `limit`) until every request being handled has been
/// answered. The daemon calls it before exiting: an unmount request ends
/// the FUSE session, and exiting at once would drop the unmount's answer.
pub fn drain(limit: Duration) {
    let deadline = Instant::now() + limit;
    while IN_FLIGHT.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs a handler; a panic becomes an `internal` answer and a log line
/// naming the request, instead of a connection closed without an answer
/// and a request counted in flight for ever.
fn guarded(handle: &dyn Fn(Request) -> Response, req: Request) -> Response {
    let op = req.name();
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handle(req))) {
        Ok(response) => response,
        Err(payload) => {
            let what = crate::error::panic_message(&*payload);
            log::error!("control request `{op}` panicked: {what}");
            Response::failure(Failure::internal(format!(
                "the daemon failed while handling `{op}` (a bug; see the daemon log): {what}"
            )))
        }
    }
}

/// A request counted in `IN_FLIGHT` until dropped, also by a panic.
struct InFlight;

impl InFlight {
    fn enter() -> InFlight {
        IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The longest request line the daemon reads. A request is a few hundred
/// bytes; the longest real one, a restore of many paths, stays well below.
/// A longer line is answered with an error and its connection closed, so
/// one connection never holds more than this of the daemon's memory.
pub const MAX_REQUEST: usize = 1 << 20;

/// How long a request may take to arrive whole, counted from the
/// connection: an idle or trickling client gives its thread back then.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(30);

/// How long one write of an answer may wait for a client that does not
/// read it.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections served at once for the owner (root or the daemon's user).
pub const OWNER_CONNECTIONS: usize = 64;

/// Connections served at once for the agent's user, and for all other
/// users together: below the owner's, so a flood of them never takes the
/// owner's turn.
pub const OTHER_CONNECTIONS: usize = 16;

/// Whose connections are counted together against one bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Peer {
    Owner,
    /// The mount's agent user.
    Agent,
    /// Every other user: refused whatever they ask, so they share one bound.
    Others,
}

impl Peer {
    pub fn max_connections(self) -> usize {
        match self {
            Peer::Owner => OWNER_CONNECTIONS,
            Peer::Agent | Peer::Others => OTHER_CONNECTIONS,
        }
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Owner => write!(f, "the owner"),
            Peer::Agent => write!(f, "the agent's user"),
            Peer::Others => write!(f, "other users"),
        }
    }
}

/// The connections open per peer. A slot is given back when the
/// connection's thread ends, also by a panic.
#[derive(Default)]
struct Connections {
    open: HashMap<Peer, usize>,
    /// Peers told "too many" since their last connection ended: a flood is
    /// logged once, not once a connection.
    warned: HashSet<Peer>,
}

struct Slot {
    peer: Peer,
    table: Arc<Mutex<Connections>>,
}

impl Slot {
    /// A slot for `peer`, or None when it has its bound's worth open (and
    /// whether this refusal is the first since one ended).
    fn take(table: &Arc<Mutex<Connections>>, peer: Peer) -> Result<Slot, bool> {
        let mut t = crate::poison::lock(table, "the control connections");
        let open = t.open.entry(peer).or_default();
        if *open >= peer.max_connections() {
            return Err(t.warned.insert(peer));
        }
        *open += 1;
        Ok(Slot { peer, table: table.clone() })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut t = crate::poison::lock(&self.table, "the control connections");
        if let Some(open) = t.open.get_mut(&self.peer) {
            *open = open.saturating_sub(1);
        }
        t.warned.remove(&self.peer);
    }
}

/// Why a connection gave no request.
enum Unread {
    /// Closed before sending anything: nobody to answer.
    Closed,
    TooLong,
    Late(Duration),
    Io(std::io::Error),
}

/// Reads one request line (without its newline), at most MAX_REQUEST
/// bytes, arriving whole within `deadline` of the connection.
fn read_request(stream: &UnixStream, deadline: Duration) -> std::result::Result<Vec<u8>, Unread> {
    let until = Instant::now() + deadline;
    let mut line = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Unread::Late(deadline));
        }
        stream.set_read_timeout(Some(left)).map_err(Unread::Io)?;
        let n = match (&*stream).read(&mut buf) {
            // A client that ends its request with end of file instead of a
            // newline is answered too.
            Ok(0) if line.is_empty() => return Err(Unread::Closed),
            Ok(0) => return Ok(line),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Err(Unread::Late(deadline));
            }
            Err(e) => return Err(Unread::Io(e)),
        };
        let end = buf[..n].iter().position(|&b| b == b'\n');
        if line.len() + end.unwrap_or(n) > MAX_REQUEST {
            return Err(Unread::TooLong);
        }
        line.extend_from_slice(&buf[..end.unwrap_or(n)]);
        if end.is_some() {
            return Ok(line);
        }
    }
}

/// Writes `response` as one line; a client gone or not reading loses it.
fn answer(stream: &UnixStream, response: &Response) {
    if let Ok(mut out) = serde_json::to_vec(response) {
        out.push(b'\n');
        let _ = (&*stream).write_all(&out);
    }
}

/// Serves requests on `listener` with `handle` until the process ends.
/// Each connection is handled on its own thread so a slow request (an
/// unmount waiting for files to close) does not block `status`; `peer`
/// says whose bound a uid's connections count against. A connection over
/// its bound is answered with an error at once by the accepting thread and
/// closed, without a thread of its own. A handler that panics answers an
/// error (and is logged); the daemon goes on.
///
/// A request line with `"progress": true` lets the handler send
/// [`Progress`] lines before the answer (the sink it is given writes them;
/// otherwise the sink does nothing).
pub fn serve<F>(listener: UnixListener, peer: impl Fn(u32) -> Peer, handle: F)
where
    F: Fn(Request, u32, &dyn Fn(Progress)) -> Response + Send + Sync + 'static,
{
    let handle = Arc::new(handle);
    let table = Arc::new(Mutex::new(Connections::default()));
    let deadline = crate::faults::request_deadline().unwrap_or(REQUEST_DEADLINE);
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                // Out of descriptors, say: waiting lets connections end
                // instead of spinning on the same error.
                log::warn!("cannot accept a control connection ({e}); waiting a moment before the next");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        // Who asks, from the kernel: never from the request.
        let Ok(cred) = rustix::net::sockopt::socket_peercred(&stream) else { continue };
        let uid = cred.uid.as_raw();
        let who = peer(uid);
        let slot = match Slot::take(&table, who) {
            Ok(slot) => slot,
            Err(first) => {
                let max = who.max_connections();
                if first {
                    log::warn!(
                        "refusing control connections of {who} (uid {uid}): {max} are open already, \
                         the most served at once"
                    );
                }
                // A fresh socket's buffer takes one line; never wait for it.
                let _ = stream.set_nonblocking(true);
                answer(
                    &stream,
                    &Response::failure(Failure::new(
                        ErrorKind::Busy,
                        Some(libc::EAGAIN),
                        format!(
                            "too many connections from {who} (uid {uid}): {max} are open, the most served at once; \
                             try again"
                        ),
                    )),
                );
                continue;
            }
        };
        let handle = handle.clone();
        let spawned = std::thread::Builder::new().name("control-client".into()).spawn(move || {
            let _slot = slot;
            let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
            let line = match read_request(&stream, deadline) {
                Ok(line) => line,
                Err(Unread::Closed) => return,
                Err(Unread::Io(e)) => {
                    log::info!("a control connection of uid {uid} failed before its request: {e}");
                    return;
                }
                Err(Unread::TooLong) => {
                    log::warn!("closing a control connection of uid {uid}: its request is longer than the cap");
                    let message = format!("request longer than {} MiB; connection closed", MAX_REQUEST >> 20);
                    return answer(
                        &stream,
                        &Response::failure(Failure::new(ErrorKind::Usage, Some(libc::EMSGSIZE), message)),
                    );
                }
                Err(Unread::Late(d)) => {
                    log::info!("closing a control connection of uid {uid}: no whole request within {d:?}");
                    let message = format!("no whole request within {d:?} of connecting; connection closed");
                    return answer(
                        &stream,
                        &Response::failure(Failure::new(ErrorKind::Usage, Some(libc::ETIMEDOUT), message)),
                    );
                }
            };
            let _in_flight = InFlight::enter();
            let value = serde_json::from_slice::<serde_json::Value>(&line);
            let wants_progress = value.as_ref().is_ok_and(|v| v.get("progress") == Some(&true.into()));
            let sink = |p: Progress| {
                if wants_progress && let Ok(mut out) = serde_json::to_vec(&ProgressLine { progress: p }) {
                    out.push(b'\n');
                    let _ = (&stream).write_all(&out);
                }
            };
            let response = match value.and_then(serde_json::from_value::<Request>) {
                Ok(req) => guarded(&|req| handle(req, uid, &sink), req),
                Err(e) => Response::failure(Failure::internal(format!("malformed request: {e}"))),
            };
            answer(&stream, &response);
        });
        if let Err(e) = spawned {
            // The closure, its slot and the connection are dropped: the
            // client sees the connection closed.
            log::warn!("cannot start a thread for a control connection of uid {uid}: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_handler_answers_internal_and_is_not_left_in_flight() {
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = dir.path().join("control.sock");
        let listener = UnixListener::bind(&socket).expect("bind");
        std::thread::spawn(move || {
            serve(
                listener,
                |_| Peer::Owner,
                |req, _, _| match req {
                    Request::Log(_) => panic!("deliberate panic in a handler"),
                    _ => Response::from_result::<()>(Ok(())),
                },
            )
        });
        let err = call(&socket, Log, Duration::from_secs(10)).expect_err("a panicking handler answered ok");
        assert_eq!(err.kind(), ErrorKind::Internal, "{err}");
        assert!(err.to_string().contains("`log`"), "the answer should name the request: {err}");
        // The daemon keeps serving, and nothing is counted in flight.
        call(&socket, Unmount { lazy: false }, Duration::from_secs(10)).expect("the next request");
        let started = Instant::now();
        drain(Duration::from_secs(5));
        assert!(started.elapsed() < Duration::from_secs(2), "a request stayed in flight after its handler panicked");
    }
}
