//! `rewindfs unmount`: flush, stop the daemon, leave an ordinary directory.

use std::time::{Duration, Instant};

use crate::cli::UnmountArgs;
use crate::cli::common;
use crate::daemon::control;
use crate::daemon::{self, MountState, registry};
use crate::error::{Error, ErrorKind, Result};
use crate::sys;

pub fn run(args: UnmountArgs) -> Result<()> {
    let mp = common::absolute_no_follow(&args.mountpoint)?;
    unmount_waiting(&mp, args.lazy, Duration::from_secs(args.wait))?;
    outln!("unmounted {}", mp.display());
    Ok(())
}

/// Unmounts the rewindfs mount at `mp` and waits for its daemon to exit,
/// first waiting up to a minute for sealed checkpoints to reach its remote.
pub fn unmount(mp: &std::path::Path, lazy: bool) -> Result<()> {
    unmount_waiting(mp, lazy, crate::cli::remote::UNMOUNT_WAIT)
}

/// [`unmount`], waiting up to `wait` for the remote.
pub fn unmount_waiting(mp: &std::path::Path, lazy: bool, wait: Duration) -> Result<()> {
    if daemon::view_mountpoints().iter().any(|v| v == mp) {
        return sys::umount_within(mp, lazy, sys::UNMOUNT_GRACE)
            .map_err(|e| Error::io(format!("cannot unmount view {}", mp.display()), e));
    }
    match daemon::mount_state(mp) {
        MountState::NotMounted => {
            Err(Error::kind_of(ErrorKind::NoMount, format!("{} is not a rewindfs mount", mp.display())))
        }
        MountState::Dead(_) => detach_dead(mp),
        MountState::Live(info) | MountState::Starting(info) => {
            if !lazy {
                crate::cli::remote::drain_before_unmount(&info, wait);
            }
            let request = control::Unmount { lazy }.into();
            match control::exchange(&info.socket, &request, Duration::from_secs(120)) {
                // An answer: done, or refused (busy) with nothing unmounted.
                Ok(answer) => {
                    if let Err(e) = answer.into_result::<()>() {
                        // Unmounted, but not everything was done (files that
                        // could not be settled): the daemon exits all the same.
                        if !daemon::is_fuse_mountpoint(mp) {
                            let until = Instant::now() + Duration::from_secs(60);
                            while sys::process_alive(info.pid) && Instant::now() < until {
                                std::thread::sleep(Duration::from_millis(20));
                            }
                        }
                        return Err(e.into());
                    }
                }
                // The daemon unmounts, then exits; it may exit before its
                // answer is written. Gone from the mount table is success.
                // A daemon that died before unmounting (killed as we
                // connected, or in the middle of putting files back) leaves
                // its mount dead: it is detached, but the unmount's work
                // (files put back, history made durable) was not done, so
                // this is a failure.
                Err(e) => {
                    // Refused at connect: the request never reached the
                    // daemon (killed, its threads still exiting): none of
                    // the unmount's work had begun, as for a daemon already
                    // gone.
                    let never_reached = e.kind() == ErrorKind::NoMount
                        && matches!(crate::error::AsErrno::errno(&e).0, libc::ECONNREFUSED | libc::ENOENT);
                    let until = Instant::now() + Duration::from_secs(5);
                    while sys::process_alive(info.pid) && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    match daemon::mount_state(mp) {
                        MountState::NotMounted => {}
                        MountState::Dead(_) if never_reached => return detach_dead(mp),
                        MountState::Dead(_) => {
                            detach_dead(mp)?;
                            return Err(Error::kind_of(
                                ErrorKind::Failed,
                                format!(
                                    "the daemon of {} (pid {}) died before it unmounted ({e}); its dead mount was \
                                     detached, but the unmount was not done: what it was putting back is completed \
                                     by the next mount (mount again, then unmount)",
                                    mp.display(),
                                    info.pid
                                ),
                            ));
                        }
                        _ => return Err(e),
                    }
                }
            }
            // After a lazy detach the daemon keeps serving the files still
            // open, and exits only when they are closed: do not wait for that.
            let deadline = Instant::now() + Duration::from_secs(if lazy { 2 } else { 60 });
            while sys::process_alive(info.pid) {
                if lazy && Instant::now() > deadline {
                    eprintln!(
                        "rewindfs: detached {}; daemon pid {} keeps serving the files still open and exits when they are closed",
                        mp.display(),
                        info.pid
                    );
                    return Ok(());
                }
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

/// The daemon is gone: the mount only answers ENOTCONN. Detach it.
fn detach_dead(mp: &std::path::Path) -> Result<()> {
    sys::umount(mp, true).map_err(|e| Error::io(format!("cannot detach dead mount {}", mp.display()), e))?;
    registry::withdraw(mp);
    eprintln!("rewindfs: the daemon of {} was gone; detached the dead mount", mp.display());
    Ok(())
}
