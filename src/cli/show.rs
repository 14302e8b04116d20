//! `rewindfs show`: mount a read-only view of a checkpoint. A mounted
//! workspace's daemon serves its views; for a workspace that is not
//! mounted, a process of its own serves the view from the store, read-only,
//! until the view is unmounted.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::cli::ShowArgs;
use crate::cli::common::{self, DAEMON_ENV};
use crate::cli::offline::{self, Source};
use crate::daemon::control as op;
use crate::error::{Error, Result};
use crate::fs::view::{Served, ViewSession};

pub fn run(args: ShowArgs) -> Result<()> {
    if crate::remote::RemoteUrl::is_remote(&args.checkpoint) {
        return crate::cli::remote::show(args);
    }
    let mp = empty_mountpoint(&args.mountpoint)?;
    let (reply, workspace, server) = match offline::mount_or_store(args.target.mount.as_deref(), "the view is")? {
        Source::Mounted(info) => {
            if args.foreground {
                return Err(Error::Usage(format!(
                    "{} is mounted: its daemon serves the views (--foreground is for a workspace that is not mounted)",
                    info.workspace.display()
                )));
            }
            refuse_inside(&mp, &info.mountpoint, &info.workspace)?;
            let checkpoint = common::reference(&info, args.checkpoint)?;
            (common::ask(&info, op::Show { checkpoint, mountpoint: mp.clone() })?, info.workspace, None)
        }
        Source::Store(o) => {
            refuse_inside(&mp, &o.info.mountpoint, &o.info.workspace)?;
            let n = crate::cli::history::offline_reference(&o, &args.checkpoint)?;
            let (workspace, store) = (o.info.workspace.clone(), o.info.store.clone());
            if args.foreground {
                return serve_here(*o, n, &mp, args.target.json);
            }
            // The server takes the store's lock itself.
            drop(o);
            let (reply, pid) = spawn_server(&workspace, &store, n, &mp)?;
            (reply, workspace, Some(pid))
        }
    };
    if args.target.json {
        return common::print_json(&reply);
    }
    let served = match server {
        Some(pid) => format!(
            "; served from its store by pid {pid}, which keeps the store locked: the workspace cannot be mounted until the view is removed"
        ),
        None => String::new(),
    };
    outln!(
        "checkpoint {} of {} is on {} (read-only{served}; `rewindfs unmount {}` to remove)",
        reply.checkpoint,
        workspace.display(),
        mp.display(),
        mp.display()
    );
    Ok(())
}

/// `path` made absolute, checked to be an empty directory that is not a
/// symlink.
pub fn empty_mountpoint(path: &Path) -> Result<PathBuf> {
    let mp = common::absolute_no_follow(path)?;
    // mount(2) follows a final symlink: one the agent planted would put the
    // view somewhere else than the path printed.
    if std::fs::symlink_metadata(&mp).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(Error::path(&mp, "mountpoint is a symlink; give the directory itself"));
    }
    let empty = std::fs::read_dir(&mp).map(|mut d| d.next().is_none());
    match empty {
        Ok(true) => {}
        Ok(false) => return Err(Error::path(&mp, "mountpoint is not an empty directory")),
        Err(_) => return Err(Error::path(&mp, "mountpoint does not exist (create an empty directory first)")),
    }
    Ok(mp)
}

fn refuse_inside(mp: &Path, mountpoint: &Path, workspace: &Path) -> Result<()> {
    if mp.starts_with(mountpoint) || mp.starts_with(workspace) {
        return Err(Error::path(mp, "a view cannot be mounted inside the workspace it shows"));
    }
    Ok(())
}

/// Serves the view of checkpoint `n` from the store in this process until
/// it is unmounted ([`serve_in_process`]).
fn serve_here(o: offline::Offline, n: i64, mp: &Path, json: bool) -> Result<()> {
    let (info, ws, lock) = o.into_parts();
    let served = serve_in_process(mp, json, || {
        let (session, reply) = crate::daemon::mount_store_view(ws, &info.workspace, n, mp)?;
        let shown = format!("checkpoint {n} of {}", info.workspace.display());
        Ok(Mounted { session, reply: serde_json::to_value(&reply).unwrap_or_default(), shown })
    });
    drop(lock);
    served
}

/// A view mounted by a process that serves it ([`serve_in_process`]).
pub struct Mounted<S: Served> {
    pub session: ViewSession<S>,
    /// What `show --json` prints about it.
    pub reply: serde_json::Value,
    /// What it shows, in words ("checkpoint N of WHAT").
    pub shown: String,
}

/// A view served by a process of its own, from a store or from a remote:
/// `mount` mounts it, then it is served here until it is unmounted (by
/// `rewindfs unmount`, or SIGINT/SIGTERM/SIGHUP through the signal
/// watcher). Started by `show` in the background ([`DAEMON_ENV`] set), it
/// leaves its parent's session and says `ready JSON` (or `error:
/// FAILURE`) on stdout, a pipe its parent reads; run by a user, it says
/// so on stderr (the JSON on stdout with `--json`). Serving that ends with
/// the view still mounted (its connection aborted, a failure, while a
/// process kept it busy) detaches it: no dead mount is left behind.
pub fn serve_in_process<S: Served>(mp: &Path, json: bool, mount: impl FnOnce() -> Result<Mounted<S>>) -> Result<()> {
    let as_server = std::env::var_os(DAEMON_ENV).is_some();
    if as_server {
        crate::sys::setsid();
    }
    let mut out = std::io::stdout();
    let mounted = match mount() {
        Ok(m) => m,
        Err(e) => {
            if as_server {
                let failure = serde_json::to_string(&e.to_failure()).unwrap_or_else(|_| e.to_string());
                let _ = writeln!(out, "error: {failure}");
                let _ = out.flush();
            }
            return Err(e);
        }
    };
    crate::daemon::spawn_signal_watcher(mp.to_path_buf());
    if as_server {
        let _ = writeln!(out, "ready {}", mounted.reply);
        let _ = out.flush();
    } else if json {
        common::print_json(&mounted.reply)?;
    } else {
        eprintln!(
            "rewindfs: {} is on {} (read-only; Ctrl-C or `rewindfs unmount {}` to remove)",
            mounted.shown,
            mp.display(),
            mp.display()
        );
    }
    let served = mounted.session.run();
    if crate::daemon::view_mountpoints().iter().any(|v| v == mp) {
        log::warn!("the view on {} was still mounted when its serving ended: detaching it", mp.display());
        let _ = crate::sys::umount(mp, true);
    }
    if served.is_ok() {
        log::info!("view on {} unmounted", mp.display());
    }
    served.map_err(|e| Error::io(format!("serving the view on {}", mp.display()), e))
}

/// Starts a process serving the view of checkpoint `n` (`show
/// --foreground`, detached, its log the store's daemon log) and waits until
/// the view is mounted.
fn spawn_server(workspace: &Path, store: &Path, n: i64, mp: &Path) -> Result<(op::ShowReply, u32)> {
    let (detail, pid) = common::spawn_background(store, "the view's server", |cmd| {
        cmd.arg("show").arg("-C").arg(workspace).arg(n.to_string()).arg(mp);
    })?;
    let reply = serde_json::from_str(&detail).unwrap_or_else(|_| op::ShowReply {
        checkpoint: n,
        mountpoint: PathBuf::from(mp),
        transport: String::new(),
    });
    Ok((reply, pid))
}
