//! What several subcommands share: checking paths, choosing the store,
//! starting a daemon, and finding the mount a command acts on.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::cli::MountOpts;
use crate::daemon::registry::{self, MountInfo};
use crate::daemon::{self, MountSpec, MountState};
use crate::error::{Error, ErrorKind, Result};
use crate::fs::Passthrough;

/// Set in the environment of a daemon started by `mount`: it reports
/// readiness on stdout instead of logging there.
pub const DAEMON_ENV: &str = "REWINDFS_DAEMON";

/// Makes a path absolute and canonical without entering the last
/// component (which may be a dead mount answering ENOTCONN).
pub fn absolute_no_follow(path: &Path) -> Result<PathBuf> {
    let abs = std::path::absolute(path).map_err(|e| Error::io(format!("bad path {}", path.display()), e))?;
    match (abs.parent(), abs.file_name()) {
        (Some(parent), Some(name)) => {
            let parent = parent.canonicalize().map_err(|e| Error::path(parent, format!("cannot resolve: {e}")))?;
            Ok(parent.join(name))
        }
        _ => Ok(abs),
    }
}

/// The default store of a workspace: `$REWINDFS_HOME/stores/<name>-<hash>`.
pub fn default_store(workspace: &Path) -> PathBuf {
    let name = workspace.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "root".into());
    let hash = blake3::hash(workspace.as_os_str().as_encoded_bytes()).to_hex();
    stores_dir().join(format!("{name}-{}", &hash[..12]))
}

/// The default store of `workspace`, set aside first (renamed
/// `<store>.replaced-<time>`, and said on stderr) when it holds the
/// history of another directory that was at the same path: that history
/// is kept, and this directory starts its own.
fn fresh_default_store(workspace: &Path) -> Result<PathBuf> {
    let store = default_store(workspace);
    if !crate::engine::identity::records_other(&store, workspace)? {
        return Ok(store);
    }
    let _lock = registry::lock(&crate::store_dir::StoreDir::new(&store).lock(), &format!("store {}", store.display()))
        .map_err(|e| Error::kind_of(ErrorKind::Busy, format!("{e}; the store is in use: try again")))?;
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    // 2026-12-05T10:15:56Z as 20261205T101556Z: a file name without colons.
    let stamp: String = crate::text::rfc3339(now_ms).chars().filter(|c| !matches!(c, '-' | ':')).collect();
    let aside = PathBuf::from(format!("{}.replaced-{stamp}", store.display()));
    std::fs::rename(&store, &aside)
        .map_err(|e| Error::io(format!("cannot move {} aside to {}", store.display(), aside.display()), e))?;
    eprintln!(
        "rewindfs: {} is not the directory whose history {} held (that one was removed or replaced); its history \
         is kept in {} (`rewindfs stores` lists it; `rm -r` it when it is no longer wanted), and this directory \
         starts its own",
        workspace.display(),
        store.display(),
        aside.display()
    );
    Ok(store)
}

/// Where default stores are made: `$REWINDFS_HOME/stores`.
pub fn stores_dir() -> PathBuf {
    let home = std::env::var_os("REWINDFS_HOME").map(PathBuf::from).unwrap_or_else(|| {
        let base = std::env::var_os("XDG_DATA_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
            .unwrap_or_else(|| PathBuf::from("/var/lib"));
        base.join("rewindfs")
    });
    home.join("stores")
}

fn check_fuse_available() -> Result<()> {
    if !Path::new("/dev/fuse").exists() {
        return Err(Error::Usage(
            "/dev/fuse is missing: load the fuse module (`modprobe fuse`), or give the container the device (`--device /dev/fuse`)".into(),
        ));
    }
    if crate::sys::geteuid() != 0 && which("fusermount3").is_none() {
        return Err(Error::Usage("fusermount3 is missing: install fuse3 (`apt-get install fuse3`)".into()));
    }
    Ok(())
}

/// Finds an executable in PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

fn is_within(path: &Path, dir: &Path) -> bool {
    path.starts_with(dir)
}

/// The uid and gid of a user given by name or number, from /etc/passwd.
pub fn user_ids(user: &str) -> Result<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").map_err(|e| Error::io("cannot read /etc/passwd", e))?;
    let found = passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        let (uid, gid) = (f.get(2)?.parse::<u32>().ok()?, f.get(3)?.parse::<u32>().ok()?);
        (f[0] == user || uid.to_string() == user).then_some((uid, gid))
    });
    match (found, user.parse::<u32>()) {
        (Some(ids), _) => Ok(ids),
        (None, Ok(uid)) => Ok((uid, uid)),
        (None, Err(_)) => Err(Error::Usage(format!("no user {user:?} in /etc/passwd"))),
    }
}

fn user_uid(user: &str) -> Result<u32> {
    let (uid, _) = user_ids(user)?;
    if uid == 0 {
        return Err(Error::Usage(
            "the agent user must not be root: root can do everything the owner can (see docs/design.md, threat model)"
                .into(),
        ));
    }
    Ok(uid)
}

/// Device and inode of a directory, without following a final symlink.
fn dir_id(path: &Path) -> Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).map_err(|e| Error::path(path, format!("cannot stat: {e}")))?;
    Ok((meta.dev(), meta.ino()))
}

/// Whether `outer` is `inner` or one of its ancestors, by object: each
/// ancestor of `inner` is compared by device and inode, so another path to
/// the same directory (a bind mount, a symlinked parent) counts too.
fn encloses(outer: &Path, inner: &Path) -> bool {
    if is_within(inner, outer) {
        return true;
    }
    let Ok(id) = dir_id(outer) else { return false };
    // Ancestors only: `inner` itself may be a live mount whose root would
    // be answered by its daemon.
    inner.ancestors().skip(1).any(|a| dir_id(a).is_ok_and(|a| a == id))
}

/// Creates the store directory private to its owner, or checks that an
/// existing one already is. An existing directory's mode is never changed:
/// `--store /tmp` must not turn /tmp into a 0700 directory.
fn create_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match std::fs::symlink_metadata(dir) {
        Ok(meta) => {
            if !meta.file_type().is_dir() {
                return Err(Error::path(dir, "the store is not a directory (a symlink is not followed)"));
            }
            let me = crate::sys::geteuid();
            if meta.uid() != me {
                return Err(Error::path(
                    dir,
                    format!(
                        "the store belongs to uid {}, not to you (uid {me}); choose a directory of your own",
                        meta.uid()
                    ),
                ));
            }
            if meta.mode() & 0o022 != 0 {
                return Err(Error::path(
                    dir,
                    format!(
                        "the store is writable by others (mode {:o}); choose a directory of its own (it is created private)",
                        meta.mode() & 0o7777
                    ),
                ));
            }
            let names: Vec<std::ffi::OsString> = std::fs::read_dir(dir)
                .map_err(|e| Error::io(format!("cannot read store {}", dir.display()), e))?
                .filter_map(|e| e.ok().map(|e| e.file_name()))
                .collect();
            if names.is_empty() {
                // An empty directory made for the store: make it private,
                // as a store created by rewindfs is.
                use std::os::unix::fs::PermissionsExt;
                return std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                    .map_err(|e| Error::io(format!("cannot set permissions of {}", dir.display()), e));
            }
            if let Some(other) = names.iter().find(|n| !crate::store_dir::ENTRIES.iter().any(|s| n.as_os_str() == *s)) {
                return Err(Error::path(
                    dir,
                    format!(
                        "the store holds {:?}, which rewindfs did not put there: it is not a rewindfs store; give an empty or new directory",
                        other
                    ),
                ));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| Error::io(format!("cannot create {}", parent.display()), e))?;
            }
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(dir)
                .map_err(|e| Error::io(format!("cannot create store {}", dir.display()), e))
        }
        Err(e) => Err(Error::io(format!("cannot read store {}", dir.display()), e)),
    }
}

/// Checks everything that can be checked before starting a daemon, and
/// turns the arguments into a spec. Problems are usage errors (exit 2).
pub fn prepare(workspace: &Path, mountpoint: Option<&Path>, opts: &MountOpts) -> Result<MountSpec> {
    check_fuse_available()?;
    let ws_abs = std::path::absolute(workspace).map_err(|e| Error::io("bad workspace path", e))?;
    if !ws_abs.exists() {
        return Err(Error::path(&ws_abs, "workspace does not exist (create it first: `mkdir -p` it)"));
    }
    let ws = ws_abs.canonicalize().map_err(|e| Error::path(&ws_abs, format!("cannot resolve workspace: {e}")))?;
    if !ws.is_dir() {
        return Err(Error::path(&ws, "workspace is not a directory"));
    }
    for mp in daemon::rewindfs_mountpoints() {
        if mp == ws {
            return Err(already_mounted(&ws));
        }
        if is_within(&ws, &mp) {
            return Err(Error::path(
                &ws,
                format!("workspace is inside the rewindfs mount {}; choose its backing directory", mp.display()),
            ));
        }
    }
    let mp = match mountpoint {
        None => ws.clone(),
        Some(m) => {
            let abs = absolute_no_follow(m)?;
            if let MountState::Live(_) | MountState::Dead(_) = daemon::mount_state(&abs) {
                return Err(already_mounted(&abs));
            }
            let mp = abs
                .canonicalize()
                .map_err(|_| Error::path(&abs, "mountpoint does not exist (create an empty directory there first)"))?;
            if !mp.is_dir() {
                return Err(Error::path(&mp, "mountpoint is not a directory"));
            }
            let empty = std::fs::read_dir(&mp).map(|mut d| d.next().is_none()).unwrap_or(false);
            if mp != ws && !empty {
                return Err(Error::path(
                    &mp,
                    "mountpoint is not an empty directory (omit it to mount the workspace in place)",
                ));
            }
            if mp != ws && (is_within(&mp, &ws) || is_within(&ws, &mp)) {
                return Err(Error::path(&mp, "mountpoint must not be inside the workspace, nor contain it"));
            }
            mp
        }
    };
    let ws_id = dir_id(&ws)?;
    let live: Vec<MountInfo> = registry::list().into_iter().filter(|i| crate::sys::process_alive(i.pid)).collect();
    for info in &live {
        // Compared by object: a bind mount or a symlink names the same
        // directory under another path.
        if info.workspace == ws || info.workspace_id == Some(ws_id) {
            return Err(Error::kind_of(
                ErrorKind::Busy,
                format!(
                    "workspace {} is already mounted on {} as {} (daemon pid {}); unmount it first",
                    ws.display(),
                    info.mountpoint.display(),
                    info.workspace.display(),
                    info.pid
                ),
            ));
        }
        for other in [&info.workspace, &info.mountpoint] {
            if encloses(&ws, other) || encloses(&mp, other) {
                return Err(Error::path(
                    &ws,
                    format!(
                        "{} holds the rewindfs mount {} (daemon pid {}); mounting over it would hide that mount",
                        if encloses(&ws, other) { ws.display() } else { mp.display() },
                        other.display(),
                        info.pid
                    ),
                ));
            }
        }
    }
    let store_arg = match &opts.store {
        Some(s) => s.clone(),
        None => fresh_default_store(&ws)?,
    };
    let store_abs = std::path::absolute(&store_arg).map_err(|e| Error::io("bad store path", e))?;
    // Checked before anything is created: a refused store leaves no trace.
    let store_parent = store_abs.ancestors().find(|a| a.exists()).and_then(|a| a.canonicalize().ok());
    if let Some(existing) = store_parent.as_deref()
        && (is_within(existing, &ws) || is_within(existing, &mp))
    {
        return Err(Error::path(
            &store_abs,
            "the store must be outside the workspace (the agent must not be able to write history)",
        ));
    }
    if is_within(&ws, &store_abs) || is_within(&mp, &store_abs) {
        return Err(Error::path(
            &store_abs,
            "the store must not contain the workspace or the mountpoint (the daemon keeps the store private)",
        ));
    }
    for info in &live {
        if let Some(existing) = store_parent.as_deref()
            && (is_within(existing, &info.workspace) || is_within(existing, &info.mountpoint))
        {
            return Err(Error::path(
                &store_abs,
                format!(
                    "the store must be outside every workspace; it is inside {}, mounted by daemon pid {}",
                    info.mountpoint.display(),
                    info.pid
                ),
            ));
        }
    }
    create_private_dir(&store_abs)?;
    let store =
        store_abs.canonicalize().map_err(|e| Error::io(format!("cannot resolve store {}", store_abs.display()), e))?;
    if is_within(&store, &ws) || is_within(&store, &mp) {
        return Err(Error::path(
            &store,
            "the store must be outside the workspace (the agent must not be able to write history)",
        ));
    }
    if encloses(&store, &ws) || encloses(&store, &mp) {
        return Err(Error::path(
            &store,
            "the store must not contain the workspace or the mountpoint (the daemon keeps the store private)",
        ));
    }
    for info in &live {
        if info.store == store {
            return Err(Error::kind_of(
                ErrorKind::Busy,
                format!(
                    "store {} is already in use by the mount on {} (daemon pid {})",
                    store.display(),
                    info.mountpoint.display(),
                    info.pid
                ),
            ));
        }
    }

    Ok(MountSpec {
        workspace: ws,
        mountpoint: mp,
        store,
        passthrough: if opts.passthrough == "off" { Passthrough::Off } else { Passthrough::All },
        cache_timeout: Duration::from_secs(opts.cache_timeout),
        threads: opts.threads.max(1),
        transport: crate::fs::transport::Transport::parse(&opts.transport).unwrap_or_default(),
        auto_turn: (opts.auto_turn > 0.0).then(|| Duration::from_secs_f64(opts.auto_turn)),
        record: !opts.no_record,
        agent_uid: opts.agent_user.as_deref().map(user_uid).transpose()?,
        abandon_interrupted: false,
        remote: opts
            .remote
            .as_deref()
            .map(crate::remote::RemoteUrl::parse)
            .transpose()
            .map_err(|e| Error::Usage(e.to_string()))?,
    })
}

/// Refuses an in-place mount while processes other than `except` are
/// inside the workspace: they would go on using the directory under the
/// mount, and nothing they do would be recorded.
pub fn refuse_occupied(spec: &MountSpec, except: &std::collections::HashSet<u32>) -> Result<()> {
    // Its server reads the store and the tree, and keeps the store locked.
    let views = daemon::views_of(&spec.workspace);
    if !views.is_empty() {
        let list: Vec<String> = views.iter().map(|v| v.display().to_string()).collect();
        return Err(Error::kind_of(
            ErrorKind::Busy,
            format!(
                "{} cannot be mounted while a view of its history is served from its store on {} (`rewindfs show`): \
                 `rewindfs unmount {}` first",
                spec.workspace.display(),
                list.join(", "),
                list[0]
            ),
        ));
    }
    if !spec.in_place() {
        return Ok(());
    }
    let found = crate::cli::occupants::inside(&spec.workspace, except);
    if found.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = found.iter().map(|o| format!("  pid {} ({}): {}", o.pid, o.command, o.how)).collect();
    Err(Error::kind_of(
        ErrorKind::Busy,
        format!(
            "{} cannot be mounted in place: these processes are inside it, and what they do there would bypass the mount and never be recorded:\n{}\nleave the directory (cd elsewhere, or close those files) and mount again, or use `rewindfs run {} -- COMMAND`, which starts COMMAND inside the mount",
            spec.workspace.display(),
            list.join("\n"),
            spec.workspace.display()
        ),
    ))
}

fn already_mounted(path: &Path) -> Error {
    match daemon::mount_state(path) {
        MountState::Dead(_) => Error::kind_of(
            ErrorKind::Busy,
            format!(
                "{} is a dead rewindfs mount (its daemon is gone); run `rewindfs unmount {}` first",
                path.display(),
                path.display()
            ),
        ),
        MountState::Live(info) | MountState::Starting(info) => Error::kind_of(
            ErrorKind::Busy,
            format!("{} is already mounted by rewindfs (daemon pid {}); unmount it first", path.display(), info.pid),
        ),
        MountState::NotMounted => {
            Error::kind_of(ErrorKind::Busy, format!("{} is already a mountpoint", path.display()))
        }
    }
}

/// Starts a background daemon for `spec` and waits until its mount is
/// ready. The daemon logs to `daemon.log` in the store.
pub fn spawn_daemon(spec: &MountSpec) -> Result<MountInfo> {
    spawn_background(&spec.store, "the rewindfs daemon", |cmd| {
        cmd.arg("mount")
            .arg(&spec.workspace)
            .arg(&spec.mountpoint)
            .arg("--store")
            .arg(&spec.store)
            .arg("--passthrough")
            .arg(if spec.passthrough == Passthrough::Off { "off" } else { "all" })
            .arg("--cache-timeout")
            .arg(spec.cache_timeout.as_secs().to_string())
            .arg("--threads")
            .arg(spec.threads.to_string())
            .arg("--transport")
            .arg(spec.transport.as_str())
            .arg("--auto-turn")
            .arg(spec.auto_turn.map(|d| d.as_secs_f64()).unwrap_or(0.0).to_string())
            .args(if spec.record { None } else { Some("--no-record") })
            .args(spec.agent_uid.map(|u| ["--agent-user".to_string(), u.to_string()]).into_iter().flatten())
            .args(spec.abandon_interrupted.then_some("--abandon-interrupted"))
            .args(spec.remote.iter().flat_map(|url| ["--remote".to_string(), url.to_string()]));
    })?;
    registry::read(&spec.mountpoint)
        .ok_or_else(|| Error::Daemon("the daemon started but did not publish its mount".into()))
}

/// Starts this executable in the background with the arguments `args`
/// gives it and `--foreground`, its stderr appended to the store's
/// `daemon.log`, and waits (60 s at most) until it says on stdout `ready[
/// DETAIL]` (returns DETAIL and its pid) or `error: FAILURE` (its error).
/// `what` names it; one that says neither is killed.
pub fn spawn_background(store: &Path, what: &str, args: impl FnOnce(&mut Command)) -> Result<(String, u32)> {
    spawn_background_logged(&crate::store_dir::StoreDir::new(store).daemon_log(), what, args)
}

/// As [`spawn_background`], its stderr appended to `log_path`.
pub fn spawn_background_logged(log_path: &Path, what: &str, args: impl FnOnce(&mut Command)) -> Result<(String, u32)> {
    let exe = std::env::current_exe().map_err(|e| Error::io("cannot find the rewindfs executable", e))?;
    let log_path = log_path.to_path_buf();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| Error::io(format!("cannot open daemon log {}", log_path.display()), e))?;
    let mut cmd = Command::new(exe);
    args(&mut cmd);
    cmd.arg("--foreground")
        .env(DAEMON_ENV, "1")
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log));
    if std::env::var_os("RUST_LOG").is_none() {
        cmd.env("RUST_LOG", "rewindfs=info");
    }
    let mut child = cmd.spawn().map_err(|e| Error::io(format!("cannot start {what}"), e))?;
    let stdout = child.stdout.take().ok_or_else(|| Error::Daemon(format!("{what} has no stdout")))?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let line = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).unwrap_or_default();
    if let Some(rest) = line.strip_prefix("ready") {
        return Ok((rest.trim().to_string(), child.id()));
    }
    let _ = child.kill();
    let _ = child.wait();
    match line.strip_prefix("error: ").map(str::trim) {
        Some(msg) if !msg.is_empty() => Err(serde_json::from_str::<crate::error::Failure>(msg)
            .map(Error::Failure)
            .unwrap_or_else(|_| Error::Usage(msg.to_string()))),
        _ => Err(Error::Daemon(format!("{what} failed to start; see {}", log_path.display()))),
    }
}

/// Says on stderr what the daemon found interrupted and completed.
pub fn print_recovered(info: &MountInfo) {
    for r in &info.recovered {
        eprintln!("rewindfs: {}", r.message);
    }
}

/// The mount a command acts on: `-C MOUNT`, else the one containing the
/// current directory.
pub fn find_mount(explicit: Option<&Path>) -> Result<MountInfo> {
    let (trusted, refused) = registry::list_checked();
    let live: Vec<MountInfo> = trusted.into_iter().filter(|i| crate::sys::process_alive(i.pid)).collect();
    let target = match explicit {
        Some(p) => absolute_no_follow(p)?,
        None => std::env::current_dir().map_err(|e| Error::io("cannot read the current directory", e))?,
    };
    live.into_iter()
        .filter(|i| target.starts_with(&i.mountpoint) || target.starts_with(&i.workspace))
        .max_by_key(|i| i.mountpoint.as_os_str().len())
        .ok_or_else(|| {
            let base = match explicit {
                Some(p) => format!("{} is not inside a rewindfs mount", p.display()),
                None => "the current directory is not inside a rewindfs mount (use -C <MOUNT>)".to_string(),
            };
            if refused.is_empty() {
                Error::kind_of(ErrorKind::NoMount, base)
            } else {
                Error::kind_of(ErrorKind::NoMount, format!("{base}; runtime files refused: {}", refused.join("; ")))
            }
        })
}

/// Sends a request to the daemon of `info` and returns its typed answer; a
/// refusal keeps the daemon's kind (and so its exit status).
pub fn ask<O: crate::daemon::control::Op>(info: &MountInfo, op: O) -> Result<O::Reply> {
    crate::daemon::control::call(&info.socket, op, Duration::from_secs(600))
}

/// [`ask`], showing on stderr that the daemon works, when stderr is a
/// terminal and `json` is off: a spinner and the time elapsed, which
/// becomes a bar (checkpoints forgotten of the total, bytes freed) as soon
/// as the daemon reports progress (`gc`, `forget`, `reset` do; a collection
/// or a check of a large store takes minutes).
pub fn ask_showing<O: crate::daemon::control::Op>(info: &MountInfo, op: O, what: &str, json: bool) -> Result<O::Reply> {
    use std::io::IsTerminal;
    if json || !std::io::stderr().is_terminal() {
        return ask(info, op);
    }
    let bar = indicatif::ProgressBar::new_spinner();
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        bar.set_style(style);
    }
    bar.set_message(what.to_string());
    bar.enable_steady_tick(Duration::from_millis(120));
    let mut counting = false;
    let mut show = |p: crate::daemon::protocol::Progress| {
        if !counting && p.total > 0 {
            counting = true;
            if let Ok(style) =
                indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} checkpoints ({elapsed})")
            {
                bar.set_style(style);
            }
            bar.set_length(p.total);
        }
        bar.set_position(p.done);
        bar.set_message(format!("{what}: {} freed", crate::text::human_bytes(p.bytes_freed)));
    };
    let reply = crate::daemon::control::call_with_progress(&info.socket, op, Duration::from_secs(600), &mut show);
    bar.finish_and_clear();
    reply
}

/// A path given on the command line, relative to the mount root.
pub fn path_in_mount(info: &MountInfo, path: &Path) -> Result<PathBuf> {
    let normalize = |abs: &Path| -> PathBuf {
        abs.components().fold(PathBuf::new(), |mut acc, c| {
            match c {
                std::path::Component::ParentDir => {
                    acc.pop();
                }
                std::path::Component::CurDir => {}
                other => acc.push(other),
            }
            acc
        })
    };
    let abs = std::path::absolute(path).map_err(|e| Error::io(format!("bad path {}", path.display()), e))?;
    // A relative path is taken from the current directory when that is
    // inside the mount, otherwise from the mount root (as `-C` suggests).
    let inside = |p: &Path| [&info.mountpoint, &info.workspace].iter().any(|r| p.starts_with(r));
    let abs = if path.is_relative() && !inside(&normalize(&abs)) { info.mountpoint.join(path) } else { abs };
    let normal = normalize(&abs);
    for root in [&info.mountpoint, &info.workspace] {
        if let Ok(rel) = normal.strip_prefix(root) {
            return Ok(rel.to_path_buf());
        }
    }
    Err(Error::Usage(format!("{} is not inside the mount {}", path.display(), info.mountpoint.display())))
}

/// Prints a reply as JSON for programs (keys sorted, as docs/cli.md shows).
pub fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    let text = serde_json::to_value(v)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .map_err(|e| Error::Failure(crate::error::Failure::internal(format!("cannot encode JSON: {e}"))))?;
    outln!("{text}");
    Ok(())
}

/// A checkpoint reference as the daemon resolves it, as a number: when it
/// matched abandoned checkpoints too and the one on the current branch was
/// taken, stderr says so. Numbers and `~N` go as they are.
pub fn reference(info: &MountInfo, reference: String) -> Result<String> {
    if reference.starts_with('~') || reference.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(reference);
    }
    let reply = ask(info, crate::daemon::control::Resolve { reference })?;
    if let Some(note) = reply.note {
        eprintln!("rewindfs: {note}");
    }
    Ok(reply.checkpoint.to_string())
}
