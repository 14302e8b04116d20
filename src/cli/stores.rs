//! `rewindfs stores`: every store under `$REWINDFS_HOME/stores`, with the
//! workspace it records, its size and when it was last used, so that the
//! stores of scratch workspaces can be found and removed.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::Serialize;

use crate::cli::StoresArgs;
use crate::cli::common;
use crate::daemon::registry;
use crate::error::Result;
use crate::meta::Meta;
use crate::store_dir::StoreDir;
use crate::text::{human_bytes, quote_name};

/// One store, as listed.
#[derive(Debug, Serialize)]
pub struct StoreRow {
    #[serde(with = "crate::name_json")]
    pub store: PathBuf,
    /// The workspace recorded at its last mount (None: unreadable).
    #[serde(with = "crate::name_json::option")]
    pub workspace: Option<PathBuf>,
    /// Whether that workspace still exists (false when another directory
    /// is at its path now).
    pub workspace_exists: bool,
    /// Another directory is at the workspace's path now: the one this
    /// history names was removed or replaced (a store that `mount` set
    /// aside, or the next `mount` will).
    pub replaced: bool,
    pub bytes: u64,
    /// When its history last changed (UTC).
    pub last_used: String,
    /// Served by a live daemon now.
    pub mounted: bool,
}

/// Bytes of the files under `dir`, not following symlinks.
fn size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => size(&e.path()),
            Ok(_) => e.metadata().map(|m| m.len()).unwrap_or(0),
            Err(_) => 0,
        })
        .sum()
}

/// The newest change among a store's database files.
fn last_used(dir: &StoreDir) -> i64 {
    let meta = dir.meta();
    let wal = PathBuf::from(format!("{}-wal", meta.display()));
    [meta, wal, dir.journal_log()]
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok()?.modified().ok()?.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as i64)
        .max()
        .unwrap_or(0)
}

fn recorded_workspace(dir: &StoreDir) -> Option<PathBuf> {
    let meta = Meta::open_read_only(&dir.meta()).ok()?;
    let bytes = meta.get_state_bytes("workspace").ok().flatten().filter(|w| !w.is_empty())?;
    Some(PathBuf::from(OsString::from_vec(bytes)))
}

pub fn rows() -> Vec<StoreRow> {
    let mounted: Vec<PathBuf> =
        registry::list().into_iter().filter(|i| crate::sys::process_alive(i.pid)).map(|i| i.store).collect();
    let Ok(entries) = std::fs::read_dir(common::stores_dir()) else { return Vec::new() };
    let mut out: Vec<StoreRow> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| StoreDir::new(p).meta().is_file())
        .map(|store| {
            let dir = StoreDir::new(&store);
            let workspace = recorded_workspace(&dir);
            let at_path = workspace.as_ref().is_some_and(|w| w.is_dir());
            let replaced = at_path
                && workspace
                    .as_ref()
                    .is_some_and(|w| crate::engine::identity::records_other(&store, w).unwrap_or(false));
            StoreRow {
                workspace_exists: at_path && !replaced,
                replaced,
                workspace,
                bytes: size(&store),
                last_used: crate::text::rfc3339(last_used(&dir)),
                mounted: mounted.contains(&store),
                store,
            }
        })
        .collect();
    out.sort_by(|a, b| b.last_used.cmp(&a.last_used));
    out
}

pub fn run(args: StoresArgs) -> Result<()> {
    let rows = rows();
    if args.json {
        return common::print_json(&rows);
    }
    if rows.is_empty() {
        outln!("no stores in {}", common::stores_dir().display());
        return Ok(());
    }
    outln!("{:<20}  {:>9}  {:<8}  workspace -> store", "last used", "size", "state");
    for r in &rows {
        let state = match (r.mounted, r.workspace_exists, r.replaced) {
            (true, _, _) => "mounted",
            (false, true, _) => "",
            (false, false, true) => "replaced",
            (false, false, false) => "gone",
        };
        let ws = r.workspace.as_ref().map(|w| quote_name(w.as_os_str())).unwrap_or_else(|| "?".into());
        outln!(
            "{:<20}  {:>9}  {state:<8}  {ws} -> {}",
            r.last_used,
            human_bytes(r.bytes),
            quote_name(r.store.as_os_str())
        );
    }
    let total: u64 = rows.iter().map(|r| r.bytes).sum();
    outln!(
        "{} stores, {} in {}; `rm -r STORE` removes one that is not mounted (its history is lost; the workspace is untouched)",
        rows.len(),
        human_bytes(total),
        common::stores_dir().display()
    );
    Ok(())
}
