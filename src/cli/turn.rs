//! `rewindfs turn`: seal a checkpoint.

use std::time::Duration;

use rustix::fs::{Mode, OFlags};

use crate::cli::TurnArgs;
use crate::cli::common;
use crate::daemon::control::{self as op, TurnReply};
use crate::daemon::registry::MountInfo;
use crate::error::{Error, Result};
use crate::journal::TurnInfo;

pub fn run(args: TurnArgs) -> Result<()> {
    let info = common::find_mount(args.target.mount.as_deref())?;
    let turn = TurnInfo { message_id: args.message_id, session: args.session, label: args.label, sealed_by: None };
    let reply = seal(&info, turn, Duration::from_secs(600))?;
    if args.target.json {
        return common::print_json(&reply);
    }
    let n = reply.checkpoint;
    match &reply.info.message_id {
        Some(m) => outln!("checkpoint {n} (before message {})", crate::text::quote(m)),
        None => outln!("checkpoint {n}"),
    }
    Ok(())
}

/// Flushes the mount, then asks its daemon to seal a checkpoint, waiting at
/// most `timeout` for the answer.
pub fn seal(info: &MountInfo, turn: TurnInfo, timeout: Duration) -> Result<TurnReply> {
    // Writes the kernel still holds (dirty mmap pages, cached data) reach
    // the daemon before the boundary.
    let dir = rustix::fs::open(&info.mountpoint, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| Error::io(format!("cannot open {}", info.mountpoint.display()), e.into()))?;
    rustix::fs::syncfs(&dir).map_err(|e| Error::io(format!("cannot flush {}", info.mountpoint.display()), e.into()))?;
    op::call(&info.socket, op::Turn { info: turn }, timeout)
}
