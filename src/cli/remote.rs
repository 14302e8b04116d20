//! The remote's commands: `push`, `clone`, `log s3://...`, and the wait
//! for the backlog before `unmount`.

use std::time::Duration;

use crate::cli::{CloneArgs, PushArgs, ShowArgs};
use crate::cli::{common, show};
use crate::daemon::protocol as op;
use crate::daemon::registry::MountInfo;
use crate::error::{AsErrno, Error, ErrorKind, Failure, Result};
use crate::remote::check::{Local, RemoteReport};
use crate::remote::push::RemoteStatus;
use crate::remote::{Bucket, RemoteError, RemoteUrl};

/// How long `unmount` waits for the backlog to reach the remote, unless
/// `--wait` says otherwise.
pub const UNMOUNT_WAIT: Duration = Duration::from_secs(60);

fn remote_error(e: RemoteError) -> Error {
    let kind = match &e {
        RemoteError::BadAddress { .. } | RemoteError::Refused { .. } => ErrorKind::Usage,
        _ => ErrorKind::Failed,
    };
    Error::Failure(Failure::new(kind, Some(e.errno().0), e.to_string()))
}

/// `rewindfs push`: sends what is sealed now and waits for it.
pub fn push(args: PushArgs) -> Result<i32> {
    let info = common::find_mount(args.target.mount.as_deref())?;
    let status = common::ask(&info, op::Push { wait_secs: args.wait })?;
    if args.target.json {
        common::print_json(&status)?;
    } else {
        print_status(&status);
    }
    Ok(if status.backlog.is_empty() { 0 } else { 1 })
}

fn print_status(s: &RemoteStatus) {
    match s.remote_checkpoint {
        Some(n) => outln!("{}: holds checkpoints up to {n}", s.remote),
        None => outln!("{}: holds no checkpoint yet", s.remote),
    }
    if s.backlog.is_empty() {
        outln!("nothing left to push");
    } else {
        outln!("{} checkpoints not pushed yet: {}", s.backlog.len(), list(&s.backlog));
    }
    if let Some(e) = &s.last_error {
        eprintln!("rewindfs: the last push failed: {e}");
    }
}

/// One line for `status`: what the remote holds, what it lacks, and why.
pub fn status_line(s: &RemoteStatus) -> String {
    let holds = match s.remote_checkpoint {
        Some(n) => format!("holds checkpoints up to {n}"),
        None => "holds no checkpoint yet".to_string(),
    };
    let behind = if s.backlog.is_empty() {
        "nothing to push".to_string()
    } else {
        format!("{} not pushed yet ({})", s.backlog.len(), list(&s.backlog))
    };
    let collecting = if s.collection_pending {
        "; content of forgotten checkpoints not collected yet (another workspace holds a lock of the bucket)"
    } else {
        ""
    };
    let failing = match (&s.last_error, s.reachable) {
        (Some(e), Some(false)) => format!("; UNREACHABLE: {e}"),
        (Some(e), _) => format!("; FAILING: {e}"),
        (None, _) => String::new(),
    };
    format!("{}: {holds}, {behind}{collecting}{failing}", s.remote)
}

fn list(ns: &[i64]) -> String {
    let shown: Vec<String> = ns.iter().take(10).map(|n| n.to_string()).collect();
    if ns.len() > 10 { format!("{} ...", shown.join(", ")) } else { shown.join(", ") }
}

/// Before an unmount: waits (at most `wait`) for the sealed checkpoints
/// to reach the remote, showing how many have (a bar on a terminal, a line
/// per checkpoint otherwise), and says what has not and how to send it
/// later. A failed pass ends the wait: the remote refuses or cannot be
/// reached, and the uploader's next try is its own.
pub fn drain_before_unmount(info: &MountInfo, wait: Duration) {
    use std::io::IsTerminal;
    let Ok(status) = common::ask(info, op::Status) else { return };
    let Some(remote) = status.remote else { return };
    if remote.backlog.is_empty() {
        return;
    }
    let total = remote.backlog.len() as u64;
    eprintln!("rewindfs: waiting up to {} s for {total} checkpoints to reach {}", wait.as_secs(), remote.remote);
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(total);
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} checkpoints ({elapsed})")
        {
            bar.set_style(style);
        }
        bar.set_message(format!("pushing to {}", remote.remote));
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    });
    // One push request waits for the whole (it returns when everything is
    // there or a pass that started after it failed); `status` meanwhile
    // shows the progress.
    let (tx, rx) = std::sync::mpsc::channel();
    let asking = info.clone();
    std::thread::spawn(move || {
        let _ = tx.send(common::ask(&asking, op::Push { wait_secs: wait.as_secs() }));
    });
    let mut shown = 0;
    let left = loop {
        match rx.recv_timeout(Duration::from_millis(250)) {
            Ok(Ok(s)) => break s,
            Ok(Err(_)) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break remote,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
        let Some(now) = common::ask(info, op::Status).ok().and_then(|s| s.remote) else { continue };
        let done = total.saturating_sub(now.backlog.len() as u64);
        match &bar {
            Some(bar) => bar.set_position(done),
            None if done > shown => eprintln!("rewindfs: {done} of {total} checkpoints are on {}", now.remote),
            None => {}
        }
        shown = shown.max(done);
    };
    match bar {
        Some(bar) => bar.finish_and_clear(),
        None if left.backlog.is_empty() => eprintln!("rewindfs: all {total} checkpoints are on {}", left.remote),
        None => {}
    }
    if !left.backlog.is_empty() {
        eprintln!(
            "rewindfs: {} checkpoints are not on {} yet ({}){}; the next mount of this store pushes them, or mount it \
             and run `rewindfs push -C {}`",
            left.backlog.len(),
            left.remote,
            list(&left.backlog),
            left.last_error.as_deref().map(|e| format!(": {e}")).unwrap_or_default(),
            info.mountpoint.display()
        );
    }
}

/// `rewindfs log s3://bucket/prefix`: the checkpoints the remote holds.
pub fn log(remote: &str, json: bool) -> Result<i32> {
    let url = RemoteUrl::parse(remote).map_err(remote_error)?;
    let bucket = Bucket::open(&url).map_err(remote_error)?;
    let head = bucket.head().map_err(remote_error)?.unwrap_or_default();
    if json {
        common::print_json(&head.checkpoints)?;
        return Ok(0);
    }
    if head.checkpoints.is_empty() {
        outln!("{url} holds no checkpoint");
    }
    for c in &head.checkpoints {
        let mut line = format!(
            "{:>4}  {}  {:<8}",
            c.checkpoint,
            crate::text::rfc3339(c.created_at),
            serde_json::to_value(c.reason).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
        );
        if let Some(m) = &c.message_id {
            line.push_str(&format!("  [{m}]"));
        }
        if let Some(n) = &c.name {
            line.push_str(&format!("  ({n})"));
        }
        if let Some(l) = &c.label {
            line.push_str(&format!("  {l}"));
        }
        line.push_str(&format!("  {} entries, {}", c.entries, crate::text::human_bytes(c.bytes)));
        outln!("{line}");
    }
    Ok(0)
}

/// `rewindfs fsck --remote s3://bucket/prefix`: exit 0 when every
/// checkpoint the head lists reads back, `problems_exit` when some do not;
/// an error (exit 1) when the bucket cannot be asked.
/// `fsck --remote URL`: the bucket read back, held against `local` (a
/// workspace's history) when given.
pub fn fsck(
    remote: &str,
    local: Option<&dyn Fn() -> std::result::Result<Local, String>>,
    json: bool,
    problems_exit: i32,
) -> Result<i32> {
    let url = RemoteUrl::parse(remote).map_err(remote_error)?;
    let bucket = Bucket::open(&url).map_err(remote_error)?;
    let report = crate::remote::check::check(&bucket, local, |_, _| {}).map_err(remote_error)?;
    print_check(&report, json, problems_exit)
}

/// Prints what `fsck --remote` found; the exit status.
pub fn print_check(report: &RemoteReport, json: bool, problems_exit: i32) -> Result<i32> {
    let code = if report.problems.is_empty() { 0 } else { problems_exit };
    if json {
        let mut v = serde_json::to_value(report).map_err(|e| Error::Daemon(e.to_string()))?;
        v["exit_status"] = code.into();
        common::print_json(&v)?;
        return Ok(code);
    }
    let found = match report.problems.len() {
        0 => "no problems".to_string(),
        1 => "1 problem".to_string(),
        n => format!("{n} problems"),
    };
    outln!(
        "fsck {}: {} checkpoints, {} manifests and {} chunks ({}) read: {found}",
        report.remote,
        report.checkpoints,
        report.manifests_checked,
        report.chunks_checked,
        crate::text::human_bytes(report.bytes_checked)
    );
    for p in &report.problems {
        let costs: Vec<String> = p
            .affected
            .iter()
            .map(|a| {
                let message = a.message_id.as_deref().map(|m| format!(" (message {m})")).unwrap_or_default();
                let path = a.path.as_deref().map(|p| format!(": {}", crate::text::quote_name(p))).unwrap_or_default();
                format!("checkpoint {}{message}{path}", a.checkpoint)
            })
            .collect();
        let costs = if costs.is_empty() { String::new() } else { format!("; costs {}", costs.join(", ")) };
        outln!("{}: {}{costs}", p.key, p.detail);
    }
    for n in &report.notes {
        outln!("note: {n}");
    }
    Ok(code)
}

pub fn clone(args: CloneArgs) -> Result<i32> {
    let (url, at) = RemoteUrl::parse_at(&args.source).map_err(remote_error)?;
    let bucket = Bucket::open(&url).map_err(remote_error)?;
    let done = crate::remote::clone::clone_into(&bucket, at.as_deref(), &args.dir).map_err(remote_error)?;
    for what in &done.not_set {
        eprintln!("rewindfs: not set: {what}");
    }
    if args.json {
        common::print_json(&done)?;
    } else {
        outln!(
            "cloned checkpoint {} of {url} into {}: {} entries, {}",
            done.checkpoint,
            args.dir.display(),
            done.entries,
            crate::text::human_bytes(done.bytes)
        );
    }
    Ok(if done.not_set.is_empty() { 0 } else { 1 })
}

/// `rewindfs show s3://bucket/prefix[@CHECKPOINT] MOUNTPOINT`: the
/// checkpoint's manifest is read and checked before anything is mounted;
/// then the view is served until it is unmounted (`rewindfs unmount
/// MOUNTPOINT`, or Ctrl-C/SIGTERM with `--foreground`): by a process of its
/// own in the background, as `show` of a workspace that is not mounted,
/// its log `<cache>/rewindfs/show.log`; with `--foreground`, by this one.
pub fn show(args: ShowArgs) -> Result<()> {
    let mp = crate::cli::show::empty_mountpoint(&args.mountpoint)?;
    let one_chunk = u64::from(crate::store::chunker::MAX_CHUNK);
    if args.cache_size < one_chunk {
        return Err(Error::Usage(format!(
            "--cache-size {} is smaller than one chunk ({})",
            args.cache_size,
            crate::text::human_bytes(one_chunk)
        )));
    }
    let dir = crate::remote::cache::default_dir()
        .ok_or_else(|| Error::Usage("no cache directory: set XDG_CACHE_HOME or HOME".into()))?;
    if args.foreground {
        return serve_show(&args, &dir, &mp);
    }
    let log = dir.parent().unwrap_or(&dir).join("show.log");
    crate::store_dir::create_private_dir(log.parent().unwrap_or(&dir))
        .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    let (detail, pid) = common::spawn_background_logged(&log, "the view's server", |cmd| {
        cmd.arg("show").arg(&args.checkpoint).arg(&mp).arg("--cache-size").arg(args.cache_size.to_string());
    })?;
    let reply: serde_json::Value = serde_json::from_str(&detail).unwrap_or_default();
    if args.target.json {
        let mut reply = reply;
        reply["pid"] = pid.into();
        return common::print_json(&reply);
    }
    outln!(
        "checkpoint {} of {} is on {} (read-only; served by pid {pid}, log {}; `rewindfs unmount {}` to remove)",
        reply["checkpoint"],
        reply["remote"].as_str().unwrap_or(&args.checkpoint),
        mp.display(),
        log.display(),
        mp.display()
    );
    Ok(())
}

/// Serves the remote view in this process until it is unmounted
/// ([`show::serve_in_process`]).
fn serve_show(args: &ShowArgs, cache_dir: &std::path::Path, mp: &std::path::Path) -> Result<()> {
    show::serve_in_process(mp, args.target.json, || {
        let (url, at) = RemoteUrl::parse_at(&args.checkpoint).map_err(remote_error)?;
        let cache = crate::remote::cache::ChunkCache::open(cache_dir, args.cache_size).map_err(remote_error)?;
        let bucket = Bucket::open(&url).map_err(remote_error)?;
        let tree = crate::remote::show::RemoteTree::open(bucket, at.as_deref(), cache).map_err(remote_error)?;
        let n = tree.checkpoint().checkpoint;
        let fsname = format!("{}{url}@{n}", crate::daemon::VIEW_FSNAME_PREFIX);
        let session = crate::daemon::mount_view(tree, mp, &fsname, false)?;
        let reply = serde_json::json!({ "checkpoint": n, "remote": url.to_string(), "mountpoint": mp });
        Ok(show::Mounted { session, reply, shown: format!("checkpoint {n} of {url}") })
    })
}

/// `rewindfs du --remote s3://bucket[/prefix]`: who references what in a
/// bucket shared by several workspaces.
pub fn du(remote: &str, json: bool) -> Result<i32> {
    use crate::text::human_bytes as bytes;
    let url = RemoteUrl::parse_bucket(remote).map_err(remote_error)?;
    let bucket = Bucket::open(&url).map_err(remote_error)?;
    let mut census = crate::remote::shared::census(&bucket).map_err(remote_error)?;
    if !url.prefix.is_empty() {
        census.workspaces.retain(|w| w.prefix == url.prefix);
        if census.workspaces.is_empty() {
            return Err(remote_error(RemoteError::Missing {
                remote: url.to_string(),
                key: format!("{} (nothing was pushed there)", url.head_key()),
            }));
        }
    }
    if json {
        common::print_json(&census)?;
        return Ok(0);
    }
    outln!(
        "{}: {} in {} chunks; {} of it named by several workspaces (stored once), {} by none",
        census.remote,
        bytes(census.chunk_bytes),
        census.chunk_objects,
        bytes(census.shared_bytes),
        bytes(census.unreferenced_bytes)
    );
    for w in &census.workspaces {
        let mut line = format!(
            "  {}: {} checkpoints, {} of content ({} its own, {} shared), {} of head and manifests",
            w.prefix,
            w.checkpoints,
            bytes(w.referenced_bytes),
            bytes(w.own_bytes),
            bytes(w.shared_bytes),
            bytes(w.metadata_bytes)
        );
        if w.unlisted_manifests > 0 {
            line.push_str(&format!(", {} manifests of forgotten checkpoints", w.unlisted_manifests));
        }
        if w.missing_chunks > 0 {
            line.push_str(&format!(", {} chunks MISSING (see fsck --remote)", w.missing_chunks));
        }
        outln!("{line}");
    }
    for l in &census.locks {
        outln!("  held: {l}");
    }
    Ok(0)
}
