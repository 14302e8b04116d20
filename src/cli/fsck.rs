//! `rewindfs fsck`: checks a store and says what damage costs, by
//! checkpoint and path. The checks are in `crate::fsck`; this file finds
//! the store, chooses how to reach it (through a running daemon, or opened
//! read-only when nothing uses it), shows progress and prints the report.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use crate::cli::FsckArgs;
use crate::cli::common;
use crate::daemon::registry::{self, MountInfo};
use crate::error::{Error, Result};
use crate::fsck::{self, Problem, Report, Target};
use crate::journal::Journal;
use crate::meta::Meta;
use crate::store::{Address, PackStore};
use crate::store_dir::StoreDir;
use crate::text::quote_name;
use crate::workspace::{LiveTree, Opener};

/// Exit status: problems were found (and not all repaired).
pub const EXIT_PROBLEMS: i32 = 6;
/// Exit status: `--repair` dealt with every problem found; the store is
/// consistent again but history was lost.
pub const EXIT_REPAIRED: i32 = 7;

/// Where the check runs.
enum Via {
    /// The workspace is mounted: its daemon checks with its own view of
    /// the store (records not yet folded into SQLite included).
    Daemon(MountInfo),
    /// Nothing uses the store: opened read-only here.
    Offline { store: PathBuf, workspace: Option<PathBuf> },
}

fn live_mounts() -> Vec<MountInfo> {
    registry::list().into_iter().filter(|i| crate::sys::process_alive(i.pid)).collect()
}

fn canonical(path: &Path, what: &str) -> Result<PathBuf> {
    path.canonicalize().map_err(|e| Error::path(path, format!("cannot resolve {what}: {e}")))
}

fn choose(args: &FsckArgs) -> Result<Via> {
    let store = args.store.as_deref().map(|s| canonical(s, "the store")).transpose()?;
    if let Some(m) = &args.mount {
        if let Ok(info) = common::find_mount(Some(m)) {
            return Ok(Via::Daemon(info));
        }
        let workspace = canonical(m, "the workspace")?;
        let store = store.unwrap_or_else(|| common::default_store(&workspace));
        return Ok(match live_mounts().into_iter().find(|i| i.store == store) {
            Some(info) => Via::Daemon(info),
            None => Via::Offline { store, workspace: Some(workspace) },
        });
    }
    match store {
        Some(store) => Ok(match live_mounts().into_iter().find(|i| i.store == store) {
            Some(info) => Via::Daemon(info),
            None => Via::Offline { store, workspace: None },
        }),
        None => common::find_mount(None).map(Via::Daemon).map_err(|_| {
            Error::Usage(
                "the current directory is not inside a rewindfs mount (use -C <MOUNT or WORKSPACE> or --store <DIR>)"
                    .into(),
            )
        }),
    }
}

pub fn run(args: FsckArgs) -> Result<i32> {
    match &args.remote {
        Some(Some(_)) if args.mount.is_some() || args.store.is_some() => {
            return Err(Error::Usage(
                "--remote with an address checks that bucket alone: leave out -C and --store, or the address \
                 (`--remote` alone checks the workspace's own remote)"
                    .into(),
            ));
        }
        Some(Some(url)) => return crate::cli::remote::fsck(url, None, args.json, EXIT_PROBLEMS),
        Some(None) => return own_remote(&args),
        None => {}
    }
    let via = choose(&args)?;
    let (store, report) = match via {
        Via::Daemon(info) => {
            if args.repair {
                return Err(Error::Usage(format!(
                    "store {} is in use by the mount on {} (daemon pid {}); `--repair` needs it unmounted: \
                     run `rewindfs unmount {}`, then `rewindfs fsck --store {} --repair`",
                    info.store.display(),
                    info.mountpoint.display(),
                    info.pid,
                    info.mountpoint.display(),
                    info.store.display()
                )));
            }
            let what = format!("checking {} through its daemon (pid {})", info.mountpoint.display(), info.pid);
            let report: Report = common::ask_showing(&info, crate::daemon::protocol::Fsck, &what, args.json)?;
            (info.store, report)
        }
        Via::Offline { store, workspace } => {
            let report = offline(&store, workspace, args.repair, !args.json)?;
            (store, report)
        }
    };
    let code = exit_status(&report, args.repair);
    if args.json {
        let mut v = serde_json::to_value(&report).map_err(|e| Error::Daemon(e.to_string()))?;
        v["store"] = serde_json::to_value(crate::name_json::Name(store.as_os_str()))
            .map_err(|e| Error::Daemon(e.to_string()))?;
        v["repair"] = args.repair.into();
        v["exit_status"] = code.into();
        common::print_json(&v)?;
    } else {
        out!("{}", render(&store, &report));
    }
    Ok(code)
}

/// `fsck --remote` without an address: the workspace's own remote, held
/// against its history (by its daemon when mounted).
fn own_remote(args: &FsckArgs) -> Result<i32> {
    match choose(args)? {
        Via::Daemon(info) => {
            let what =
                format!("checking the remote of {} through its daemon (pid {})", info.mountpoint.display(), info.pid);
            let report = common::ask_showing(&info, crate::daemon::protocol::FsckRemote, &what, args.json)?;
            crate::cli::remote::print_check(&report, args.json, EXIT_PROBLEMS)
        }
        Via::Offline { store, .. } => {
            let dir = StoreDir::new(&store);
            let url = match std::fs::read_to_string(dir.remote()) {
                Ok(url) => url.trim().to_string(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(Error::Usage(format!(
                        "store {} has no remote (it was never mounted with --remote): give one, \
                         `rewindfs fsck --remote s3://bucket/prefix`",
                        store.display()
                    )));
                }
                Err(e) => return Err(Error::io(format!("cannot read {}", dir.remote().display()), e)),
            };
            let store_id = std::fs::read_to_string(dir.id_file())
                .map_err(|e| Error::io(format!("cannot read {}", dir.id_file().display()), e))?
                .trim()
                .to_string();
            // Held while reading: a daemon starting on the store would push.
            let _lock = registry::lock(&dir.lock(), &format!("store {}", store.display()))?;
            let meta = Meta::open_read_only(&dir.meta()).map_err(|e| Error::Daemon(e.to_string()))?;
            let local = || {
                use crate::meta::Checkpoints;
                Ok(crate::remote::check::Local {
                    store_id: store_id.clone(),
                    checkpoints: meta.checkpoints().map_err(|e| format!("cannot read the checkpoints: {e}"))?,
                    pushed: None,
                })
            };
            crate::cli::remote::fsck(&url, Some(&local), args.json, EXIT_PROBLEMS)
        }
    }
}

fn exit_status(report: &Report, repair: bool) -> i32 {
    if report.is_clean() {
        0
    } else if repair && report.problems.iter().all(|p| p.repaired.is_some()) {
        EXIT_REPAIRED
    } else {
        EXIT_PROBLEMS
    }
}

/// Checks a store nothing else uses, from read-only handles; with
/// `repair`, reopens it for writing to apply the repairs.
fn offline(store: &Path, workspace: Option<PathBuf>, repair: bool, show_progress: bool) -> Result<Report> {
    let meta_path = StoreDir::new(store).meta();
    if !meta_path.is_file() && !StoreDir::new(store).chunks().is_dir() {
        return Err(Error::path(store, "not a rewindfs store (no meta.sqlite)"));
    }
    // Held while checking too: a daemon starting on the store mid-check
    // would change what is being read.
    let _lock = registry::lock(&StoreDir::new(store).lock(), &format!("store {}", store.display()))?;
    // A database that cannot be used at all: that is the whole report.
    let fatal: Vec<fsck::StoreDamage> = fsck::store_damage_thorough(store).into_iter().filter(|d| d.fatal).collect();
    if !fatal.is_empty() {
        return Ok(Report::unusable(fatal));
    }
    let meta = Meta::open_read_only(&meta_path).map_err(|e| Error::Daemon(e.to_string()))?;
    let workspace = workspace.or_else(|| {
        let recorded = meta.get_state_bytes("workspace").ok().flatten().filter(|w| !w.is_empty())?;
        Some(PathBuf::from(OsString::from_vec(recorded))).filter(|p| p.is_dir())
    });
    let chunks =
        Address::pack_read_only(&StoreDir::new(store).chunks()).open().map_err(|e| Error::Daemon(e.to_string()))?;
    let journal = Journal::read_only(meta, chunks).map_err(|e| Error::Daemon(e.to_string()))?;
    let tree = match &workspace {
        Some(w) => Some(LiveTree::new(w, None, Opener::ByHandle)?),
        None => None,
    };
    let attic = StoreDir::new(store).attic();
    // No daemon serves the workspace: this check's own lock, for the views
    // it names paths in.
    let world = crate::world::World::new();
    let op = world.op();
    let target = Target {
        journal: &journal,
        tree: tree.as_ref(),
        lock: Some(op.held()),
        attic: attic.is_dir().then_some(attic.as_path()),
        store_dir: Some(store),
        unserved_since_ns: journal.outside_since_ns(),
    };
    let bar = show_progress.then(progress_bar).flatten();
    let mut report = fsck::check(&target, &mut |p| {
        if let Some(bar) = &bar {
            match p {
                fsck::Progress::Chunks { done, total } => {
                    bar.set_length(total.max(done));
                    bar.set_position(done);
                }
                fsck::Progress::References => bar.set_message("following references"),
            }
        }
    })
    .map_err(|e| Error::Daemon(format!("fsck could not finish: {e}")))?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if workspace.is_none() {
        report.notes.push(
            "the workspace is unknown (give it with -C): paths are named from records alone, unverified".to_string(),
        );
    }
    let log = StoreDir::new(store).journal_log();
    if crate::journal::record_log::RecordLog::holds_records(&log) {
        report.notes.push(format!(
            "{} holds records the last daemon did not fold into the database (it was killed); \
             the next mount folds them in; they were not checked",
            log.display()
        ));
    }
    if repair && !report.is_clean() {
        drop(journal);
        let meta = Meta::open(&meta_path).map_err(|e| Error::Daemon(e.to_string()))?;
        let pack = PackStore::open(&StoreDir::new(store).chunks()).map_err(|e| Error::Daemon(e.to_string()))?;
        fsck::repair(&meta, &pack, &mut report).map_err(|e| Error::Daemon(format!("repair failed: {e}")))?;
        use crate::store::ChunkStore;
        pack.sync().map_err(|e| Error::Daemon(e.to_string()))?;
        meta.sync().map_err(|e| Error::Daemon(e.to_string()))?;
    }
    Ok(report)
}

/// A bar on stderr, only when it is a terminal: reading every chunk of a
/// large store takes minutes.
fn progress_bar() -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(0);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{spinner} reading chunks {bytes}/{total_bytes} {wide_bar} {eta} {msg}")
    {
        bar.set_style(style);
    }
    Some(bar)
}

fn checkpoint_label(k: i64, message: &Option<String>) -> String {
    match message {
        Some(m) => format!("{k} (message {m})"),
        None => k.to_string(),
    }
}

/// The lines of one problem: one per path it costs, naming the
/// checkpoints that show that path damaged.
fn problem_lines(p: &Problem) -> Vec<String> {
    let mut lines = Vec::new();
    if p.affected.is_empty() {
        let subject = match p.object {
            Some(o) => format!("object {o}"),
            None => "store".to_string(),
        };
        lines.push(format!("{subject}: {}", p.kind));
    }
    // Group checkpoints by path, keeping the order they came in.
    let mut groups: Vec<(Option<&Path>, Vec<String>, bool)> = Vec::new();
    for a in &p.affected {
        let label = match a.checkpoint {
            Some(k) => checkpoint_label(k, &a.message_id),
            None => String::new(),
        };
        let live = a.checkpoint.is_none();
        match groups.iter_mut().find(|(path, _, l)| *path == a.path.as_deref() && *l == live) {
            Some(g) => g.1.push(label),
            None => groups.push((a.path.as_deref(), vec![label], live)),
        }
    }
    for (path, labels, live) in groups {
        let path = match (path, p.object) {
            (Some(p), _) if p.as_os_str().is_empty() => "/".to_string(),
            (Some(p), _) => quote_name(p),
            (None, Some(o)) => format!("object {o}"),
            (None, None) => "unknown path".to_string(),
        };
        let place = if live {
            "workspace".to_string()
        } else if labels.len() == 1 {
            format!("checkpoint {}", labels[0])
        } else {
            format!("checkpoints {}", labels.join(", "))
        };
        lines.push(format!("{place}: {path}: {}", p.kind));
    }
    if let Some(done) = &p.repaired {
        lines.push(format!("  repaired: {done}"));
    }
    lines
}

/// The human report: a summary line, one line per problem (and path),
/// then notes.
pub fn render(store: &Path, report: &Report) -> String {
    let mut out = format!(
        "fsck {}: {} chunks ({}) read, {} records and {} checkpoints checked: {}\n",
        store.display(),
        report.chunks_checked,
        crate::text::human_bytes(report.bytes_checked),
        report.records_checked,
        report.checkpoints,
        match report.problems.len() {
            0 => "no problems".to_string(),
            1 => "1 problem".to_string(),
            n => format!("{n} problems"),
        }
    );
    for p in &report.problems {
        for line in problem_lines(p) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    for note in &report.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fsck::{Affected, ProblemKind};

    fn corrupt() -> Problem {
        Problem {
            kind: ProblemKind::ChunkCorrupt {
                chunk: "ab".repeat(32),
                detail: "content hashes to cd".into(),
                pack: Some(1),
                offset: Some(16),
                others: 0,
            },
            object: Some(7),
            record_turn: Some(3),
            affected: vec![
                Affected { checkpoint: Some(2), message_id: None, path: Some("src/app.py".into()) },
                Affected { checkpoint: Some(3), message_id: Some("m2".into()), path: Some("src/app.py".into()) },
                Affected { checkpoint: Some(1), message_id: None, path: None },
            ],
            repairable: true,
            repaired: None,
        }
    }

    #[test]
    fn problems_are_named_by_checkpoint_and_path() {
        let lines = problem_lines(&corrupt());
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].starts_with("checkpoints 2, 3 (message m2): src/app.py: chunk abab"), "{}", lines[0]);
        assert!(lines[0].contains("pack 1 at offset 16"), "{}", lines[0]);
        assert!(lines[1].starts_with("checkpoint 1: object 7: chunk"), "{}", lines[1]);
    }

    #[test]
    fn exit_status_says_clean_found_or_repaired() {
        let mut report = Report::default();
        assert_eq!(exit_status(&report, false), 0);
        report.problems.push(corrupt());
        assert_eq!(exit_status(&report, false), EXIT_PROBLEMS);
        assert_eq!(exit_status(&report, true), EXIT_PROBLEMS, "nothing repaired yet");
        report.problems[0].repaired = Some("dropped".into());
        assert_eq!(exit_status(&report, true), EXIT_REPAIRED);
        let text = render(Path::new("/s"), &report);
        assert!(text.starts_with("fsck /s: 0 chunks (0 B) read, 0 records and 0 checkpoints checked: 1 problem\n"));
        assert!(text.contains("  repaired: dropped\n"), "{text}");
    }
}
