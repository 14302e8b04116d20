//! `rewindfs turn`: seal a checkpoint.

use rustix::fs::{Mode, OFlags};

use crate::cli::TurnArgs;
use crate::cli::common;
use crate::daemon::control::Request;
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
    let data = common::ask(&info, &Request::Turn { info: turn })?;
    if args.target.json {
        return common::print_json(&data);
    }
    let n = &data["checkpoint"];
    match data["message_id"].as_str() {
        Some(m) => println!("checkpoint {n} (before message {m})"),
        None => println!("checkpoint {n}"),
    }
    Ok(())
}
