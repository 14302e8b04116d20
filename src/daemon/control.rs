//! The control protocol between the CLI and a mount's daemon: one JSON
//! request line, one JSON response line, over a Unix socket that lives in
//! the runtime directory, never inside the mount.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
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
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".into());
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

/// Serves requests on `listener` with `handle` until the process ends.
/// Each connection is handled on its own thread so a slow request (an
/// unmount waiting for files to close) does not block `status`. A handler
/// that panics answers an error (and is logged); the daemon goes on.
///
/// A request line with `"progress": true` lets the handler send
/// [`Progress`] lines before the answer (the sink it is given writes them;
/// otherwise the sink does nothing).
pub fn serve<F>(listener: UnixListener, handle: F)
where
    F: Fn(Request, u32, &dyn Fn(Progress)) -> Response + Send + Sync + 'static,
{
    let handle = std::sync::Arc::new(handle);
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let handle = handle.clone();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(&stream);
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                return;
            }
            let _in_flight = InFlight::enter();
            // Who asks, from the kernel: never from the request.
            let Ok(peer) = rustix::net::sockopt::socket_peercred(&stream) else { return };
            let uid = peer.uid.as_raw();
            let value = serde_json::from_str::<serde_json::Value>(&line);
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
            if let Ok(mut out) = serde_json::to_vec(&response) {
                out.push(b'\n');
                let _ = (&stream).write_all(&out);
            }
        });
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
            serve(listener, |req, _, _| match req {
                Request::Log(_) => panic!("deliberate panic in a handler"),
                _ => Response::from_result::<()>(Ok(())),
            })
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
