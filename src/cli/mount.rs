//! `rewindfs mount`: start a daemon serving a workspace.

use std::io::Write;

use crate::cli::MountArgs;
use crate::cli::common::{self, DAEMON_ENV};
use crate::daemon;
use crate::error::Result;

pub fn run(args: MountArgs) -> Result<()> {
    let mut spec = common::prepare(&args.workspace, args.mountpoint.as_deref(), &args.opts)?;
    spec.abandon_interrupted = args.abandon_interrupted;
    let as_daemon = std::env::var_os(DAEMON_ENV).is_some();
    note_uring_switch(&spec, as_daemon);
    if !args.foreground {
        common::refuse_occupied(&spec, &std::collections::HashSet::from([std::process::id()]))?;
        let info = common::spawn_daemon(&spec)?;
        let place = if info.in_place { "in place".to_string() } else { format!("on {}", info.mountpoint.display()) };
        outln!(
            "mounted {} {place} (store {}, daemon pid {})",
            info.workspace.display(),
            info.store.display(),
            info.pid
        );
        common::print_recovered(&info);
        return Ok(());
    }
    if as_daemon {
        crate::sys::setsid();
    }
    daemon::serve(spec, |ready| {
        // A daemon started by `mount` reports on stdout (a pipe its parent
        // reads); in the foreground, the user reads stderr.
        match (ready, as_daemon) {
            (Ok(_), true) => {
                let mut out = std::io::stdout();
                let _ = writeln!(out, "ready");
                let _ = out.flush();
            }
            (Err(e), true) => {
                // Structured, so `mount` exits with the status of the kind.
                let failure = serde_json::to_string(&e.to_failure()).unwrap_or_else(|_| e.to_string());
                let mut out = std::io::stdout();
                let _ = writeln!(out, "error: {failure}");
                let _ = out.flush();
            }
            (Ok(info), false) => {
                eprintln!(
                    "rewindfs: serving {} on {} (Ctrl-C to unmount)",
                    info.workspace.display(),
                    info.mountpoint.display()
                );
                common::print_recovered(info);
            }
            (Err(_), false) => {}
        }
    })
}

/// With `--transport auto` io_uring is used only when the kernel's switch is
/// on; root could switch it on, so say how (the switch is system-wide: it is
/// flipped only when asked, with `--transport uring`). The user reads it
/// from `mount`; the daemon it starts only logs it: its stderr is the
/// daemon log in the store, which may be on a full disk, and a failed
/// write there must not stop the daemon (`eprintln!` panics on one).
fn note_uring_switch(spec: &crate::daemon::MountSpec, as_daemon: bool) {
    use crate::fs::transport::{self, Transport, UringSwitch};
    if spec.transport == Transport::Auto && crate::sys::geteuid() == 0 && transport::uring_switch() == UringSwitch::Off
    {
        if as_daemon {
            log::info!("{}", transport::SWITCH_HINT);
        } else {
            let _ = writeln!(std::io::stderr(), "rewindfs: note: {}", transport::SWITCH_HINT);
        }
    }
}
