//! `rewindfs unmount`: flush, stop the daemon, leave an ordinary directory.

use std::time::{Duration, Instant};

use crate::cli::common;
use crate::cli::UnmountArgs;
use crate::daemon::control::{self, Request};
use crate::daemon::{self, registry, MountState};
use crate::error::{Error, Result};
use crate::sys;

pub fn run(args: UnmountArgs) -> Result<()> {
    let mp = common::absolute_no_follow(&args.mountpoint)?;
    unmount(&mp, args.lazy)?;
    println!("unmounted {}", mp.display());
    Ok(())
}

/// Unmounts the rewindfs mount at `mp` and waits for its daemon to exit.
pub fn unmount(mp: &std::path::Path, lazy: bool) -> Result<()> {
    if daemon::view_mountpoints().iter().any(|v| v == mp) {
        return sys::umount(mp, lazy).map_err(|e| Error::io(format!("cannot unmount view {}", mp.display()), e));
    }
    match daemon::mount_state(mp) {
        MountState::NotMounted => Err(Error::Usage(format!("{} is not a rewindfs mount", mp.display()))),
        MountState::Dead(_) => {
            // The daemon is gone: the mount only answers ENOTCONN. Detach it.
            sys::umount(mp, true).map_err(|e| Error::io(format!("cannot detach dead mount {}", mp.display()), e))?;
            registry::withdraw(mp);
            eprintln!("rewindfs: the daemon of {} was gone; detached the dead mount", mp.display());
            Ok(())
        }
        MountState::Live(info) | MountState::Starting(info) => {
            let answer = control::call(&info.socket, &Request::Unmount { lazy }, Duration::from_secs(120))?;
            if !answer.ok {
                return Err(Error::Daemon(answer.error.unwrap_or_else(|| "unmount failed".into())));
            }
            let deadline = Instant::now() + Duration::from_secs(60);
            while sys::process_alive(info.pid) {
                if Instant::now() > deadline {
                    return Err(Error::Daemon(format!(
                        "{} is unmounted but daemon pid {} has not exited after 60 s",
                        mp.display(),
                        info.pid
                    )));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(())
        }
    }
}
