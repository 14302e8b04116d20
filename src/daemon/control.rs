//! The control protocol between the CLI and a mount's daemon: one JSON
//! request line, one JSON response line, over a Unix socket that lives in
//! the runtime directory, never inside the mount.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What the CLI asks a daemon.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    Status,
    /// Flush and unmount; `lazy` detaches even while files are in use.
    Unmount {
        lazy: bool,
    },
    /// Seal the current turn as a checkpoint (the CLI has already flushed
    /// the mount with syncfs).
    Turn {
        info: crate::journal::TurnInfo,
    },
    /// Every checkpoint with its turn's statistics.
    Log,
    /// Changes between two checkpoint references (`to` None = live tree).
    Diff {
        from: String,
        to: Option<String>,
        paths: Vec<std::path::PathBuf>,
        patch: bool,
    },
    /// The turns that changed a path (relative to the mount root).
    History {
        path: std::path::PathBuf,
    },
    /// Put paths (relative to the root; empty = everything) back as they
    /// were at a checkpoint, as a new turn.
    Restore {
        checkpoint: String,
        paths: Vec<std::path::PathBuf>,
        dry_run: bool,
    },
    /// Make the whole live tree the tree of a checkpoint, after sealing a
    /// safety checkpoint.
    Rewind {
        checkpoint: String,
        dry_run: bool,
    },
    /// Mount a read-only view of a checkpoint at `mountpoint`.
    Show {
        checkpoint: String,
        mountpoint: std::path::PathBuf,
    },
    /// Check the store (`rewindfs fsck` on a mounted workspace); the answer
    /// is a `fsck::Report`. Never repairs: that needs the store unused.
    Fsck,
}

/// A daemon's answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub data: serde_json::Value,
}

impl Response {
    pub fn ok(data: serde_json::Value) -> Response {
        Response { ok: true, error: None, data }
    }
    pub fn err(message: impl Into<String>) -> Response {
        Response { ok: false, error: Some(message.into()), data: serde_json::Value::Null }
    }
}

/// Sends one request and waits for the answer.
pub fn call(socket: &Path, request: &Request, timeout: Duration) -> Result<Response> {
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        Error::Daemon(format!("cannot reach the rewindfs daemon at {} ({e}); is it running?", socket.display()))
    })?;
    stream.set_read_timeout(Some(timeout)).ok();
    let mut line = serde_json::to_vec(request).map_err(|e| Error::Daemon(e.to_string()))?;
    line.push(b'\n');
    stream.write_all(&line).map_err(|e| Error::io("cannot send a request to the daemon", e))?;
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer).map_err(|e| Error::io("no answer from the daemon", e))?;
    if answer.is_empty() {
        return Err(Error::Daemon("the daemon closed the connection without answering".into()));
    }
    serde_json::from_str(&answer).map_err(|e| Error::Daemon(format!("malformed answer from the daemon: {e}")))
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

/// Serves requests on `listener` with `handle` until the process ends.
/// Each connection is handled on its own thread so a slow request (an
/// unmount waiting for files to close) does not block `status`.
pub fn serve<F>(listener: UnixListener, handle: F)
where
    F: Fn(Request) -> Response + Send + Sync + 'static,
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
            IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
            let response = match serde_json::from_str::<Request>(&line) {
                Ok(req) => handle(req),
                Err(e) => Response::err(format!("malformed request: {e}")),
            };
            if let Ok(mut out) = serde_json::to_vec(&response) {
                out.push(b'\n');
                let _ = (&stream).write_all(&out);
            }
            IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        });
    }
}
