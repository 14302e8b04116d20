//! `rewindfs show`: mount a read-only view of a checkpoint.

use crate::cli::ShowArgs;
use crate::cli::common;
use crate::daemon::control as op;
use crate::error::{Error, Result};

pub fn run(args: ShowArgs) -> Result<i32> {
    if crate::remote::RemoteUrl::is_remote(&args.checkpoint) {
        return crate::cli::remote::show(args);
    }
    let info = crate::cli::history::mount_for(args.target.mount.as_deref(), "show")?;
    let mp = empty_mountpoint(&args.mountpoint)?;
    if mp.starts_with(&info.mountpoint) || mp.starts_with(&info.workspace) {
        return Err(Error::path(&mp, "a view cannot be mounted inside the workspace it shows"));
    }
    let checkpoint = common::reference(&info, args.checkpoint)?;
    let reply = common::ask(&info, op::Show { checkpoint, mountpoint: mp.clone() })?;
    if args.target.json {
        common::print_json(&reply)?;
        return Ok(0);
    }
    outln!(
        "checkpoint {} of {} is on {} (read-only; `rewindfs unmount {}` to remove)",
        reply.checkpoint,
        info.workspace.display(),
        mp.display(),
        mp.display()
    );
    Ok(0)
}

/// `path` made absolute, checked to be an empty directory that is not a
/// symlink.
pub fn empty_mountpoint(path: &std::path::Path) -> Result<std::path::PathBuf> {
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
