//! `rewindfs turn`: seal a checkpoint.

use rustix::fs::{Mode, OFlags};

use crate::cli::TurnArgs;
use crate::cli::common;
use crate::daemon::control as op;
use crate::error::{Error, Result};
use crate::journal::TurnInfo;

pub fn run(args: TurnArgs) -> Result<()> {
    let info = common::find_mount(args.target.mount.as_deref())?;
    // Writes the kernel still holds (dirty mmap pages, cached data) reach
    // the daemon before the boundary.
    let dir = rustix::fs::open(&info.mountpoint, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| Error::io(format!("cannot open {}", info.mountpoint.display()), e.into()))?;
    rustix::fs::syncfs(&dir).map_err(|e| Error::io(format!("cannot flush {}", info.mountpoint.display()), e.into()))?;
    let turn = TurnInfo { message_id: args.message_id, session: args.session, label: args.label };
    let reply = common::ask(&info, op::Turn { info: turn })?;
    if args.target.json {
        return common::print_json(&reply);
    }
    let n = reply.checkpoint;
    match &reply.info.message_id {
        Some(m) => println!("checkpoint {n} (before message {})", crate::cli::quote::quote(&m)),
        None => println!("checkpoint {n}"),
    }
    Ok(())
}
