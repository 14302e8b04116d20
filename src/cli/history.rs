//! `rewindfs log`, `diff` and `history`: reading the record.

use crate::cli::common;
use crate::cli::{DiffArgs, HistoryArgs, LogArgs};
use crate::daemon::control::Request;
use crate::error::Result;

fn human_bytes(n: i64) -> String {
    let n = n.max(0) as f64;
    match n {
        n if n >= 1e9 => format!("{:.1}G", n / 1e9),
        n if n >= 1e6 => format!("{:.1}M", n / 1e6),
        n if n >= 1e3 => format!("{:.1}k", n / 1e3),
        n => format!("{n}B"),
    }
}

pub fn log(args: LogArgs) -> Result<()> {
    let info = common::find_mount(args.target.mount.as_deref())?;
    let data = common::ask(&info, &Request::Log)?;
    if args.target.json {
        return common::print_json(&data);
    }
    if args.graph {
        graph(&data);
        return Ok(());
    }
    println!(
        "{:>4}  {:<20}  {:<16}  {:>5} {:>5} {:>5}  {:>7} {:>7}  {:>7}  programs",
        "#", "created", "message", "+file", "~file", "-file", "+lines", "-lines", "stored"
    );
    for t in data.as_array().into_iter().flatten() {
        let s = |k: &str| t[k].as_str().unwrap_or("").to_string();
        let n = |k: &str| t[k].as_u64().unwrap_or(0);
        let mut message = s("message_id");
        if message.is_empty() {
            message = format!("({})", s("reason"));
        }
        if let Some(l) = t["label"].as_str() {
            message = format!("{message} {l}");
        }
        let programs: Vec<String> = t["programs"]
            .as_object()
            .map(|m| m.iter().map(|(k, v)| format!("{k}:{}", v.as_u64().unwrap_or(0))).collect())
            .unwrap_or_default();
        let marker = if t["current"].as_bool() == Some(true) { "*" } else { " " };
        println!(
            "{marker}{:>3}  {:<20}  {:<16}  {:>5} {:>5} {:>5}  {:>7} {:>7}  {:>7}  {}",
            t["checkpoint"],
            s("created_at"),
            message,
            n("files_added"),
            n("files_modified"),
            n("files_deleted"),
            n("lines_added"),
            n("lines_removed"),
            human_bytes(t["bytes_stored"].as_i64().unwrap_or(0)),
            programs.join(" ")
        );
    }
    Ok(())
}

pub fn diff(args: DiffArgs) -> Result<i32> {
    let info = common::find_mount(args.target.mount.as_deref())?;
    let paths = args.paths.iter().map(|p| common::path_in_mount(&info, p)).collect::<Result<Vec<_>>>()?;
    let data = common::ask(&info, &Request::Diff { from: args.from, to: args.to, paths, patch: !args.stat })?;
    if args.target.json {
        common::print_json(&data)?;
        return Ok(0);
    }
    let changes = data["changes"].as_array().cloned().unwrap_or_default();
    let (mut added, mut removed) = (0, 0);
    for c in &changes {
        let path = c["path"].as_str().unwrap_or("?");
        let (a, r) = (c["lines_added"].as_u64().unwrap_or(0), c["lines_removed"].as_u64().unwrap_or(0));
        added += a;
        removed += r;
        let kind = c["change"].as_str().unwrap_or("");
        if args.stat {
            if c["binary"].as_bool() == Some(true) {
                println!(" {path} | binary ({kind})");
            } else {
                println!(" {path} | +{a} -{r} ({kind})");
            }
        } else if kind == "unknown" {
            println!("{path}: changed outside rewindfs between mounts; its state at one side is unknown");
        } else if c["binary"].as_bool() == Some(true) {
            println!("Binary file {path} {kind}");
        } else if let Some(p) = c["patch"].as_str() {
            print!("{p}");
        }
    }
    if args.stat {
        println!(" {} files changed, {added} insertions(+), {removed} deletions(-)", changes.len());
    }
    Ok(0)
}

pub fn history(args: HistoryArgs) -> Result<()> {
    let info = common::find_mount(args.target.mount.as_deref())?;
    let path = common::path_in_mount(&info, &args.path)?;
    let data = common::ask(&info, &Request::History { path: path.clone() })?;
    if args.target.json {
        return common::print_json(&data);
    }
    let events = data.as_array().cloned().unwrap_or_default();
    if events.is_empty() {
        println!("no recorded turn changed {}", path.display());
    }
    for e in events {
        let msg = e["message_id"].as_str().map(|m| format!(" (message {m})")).unwrap_or_default();
        println!("turn {}{msg}: {}", e["checkpoint"], e["change"].as_str().unwrap_or("?"));
    }
    Ok(())
}

pub fn restore(args: crate::cli::RestoreArgs) -> Result<()> {
    let info = common::find_mount(args.target.mount.as_deref())?;
    let paths = args.paths.iter().map(|p| common::path_in_mount(&info, p)).collect::<Result<Vec<_>>>()?;
    let data = common::ask(&info, &Request::Restore { checkpoint: args.checkpoint, paths, dry_run: args.dry_run })?;
    if args.target.json {
        return common::print_json(&data);
    }
    let changes = data["changes"].as_array().cloned().unwrap_or_default();
    for c in &changes {
        println!("{:<10} {}", c["action"].as_str().unwrap_or("?"), c["path"].as_str().unwrap_or("?"));
    }
    if args.dry_run {
        println!("{} changes would be made (dry run; nothing changed)", changes.len());
    } else {
        println!(
            "{} changes made from checkpoint {}; undo with `rewindfs restore {} -- <paths>`",
            changes.len(),
            data["checkpoint"],
            data["undo_checkpoint"]
        );
    }
    Ok(())
}

pub fn rewind(args: crate::cli::RewindArgs) -> Result<()> {
    let info = common::find_mount(args.target.mount.as_deref())?;
    let data = common::ask(&info, &Request::Rewind { checkpoint: args.checkpoint, dry_run: args.dry_run })?;
    if args.target.json {
        return common::print_json(&data);
    }
    let changes = data["changes"].as_array().cloned().unwrap_or_default();
    if args.dry_run {
        // From the live tree to the checkpoint: "added" comes back, "deleted" goes away.
        let (mut plus, mut minus) = (0, 0);
        for c in &changes {
            let what = match c["change"].as_str() {
                Some("added") => "recreate",
                Some("deleted") => "delete",
                _ => "restore",
            };
            let (a, r) = (c["lines_added"].as_u64().unwrap_or(0), c["lines_removed"].as_u64().unwrap_or(0));
            plus += a;
            minus += r;
            let lines = if c["binary"].as_bool() == Some(true) { "binary".to_string() } else { format!("+{a} -{r}") };
            println!("{what:<9} {}  ({lines})", c["path"].as_str().unwrap_or("?"));
        }
        println!(
            "rewind to checkpoint {} would change {} files (+{plus} -{minus} lines); nothing changed",
            data["checkpoint"],
            changes.len()
        );
        return Ok(());
    }
    println!(
        "rewound to checkpoint {}: {} changes in {:.1} ms; undo with `rewindfs rewind {}`",
        data["checkpoint"],
        changes.len(),
        data["elapsed_ms"].as_f64().unwrap_or(0.0),
        data["safety_checkpoint"]
    );
    Ok(())
}

/// `log --graph`: the history as a tree of branches.
pub fn graph(data: &serde_json::Value) {
    let turns = data.as_array().cloned().unwrap_or_default();
    let parent_of =
        |n: i64| turns.iter().find(|t| t["checkpoint"].as_i64() == Some(n)).and_then(|t| t["parent"].as_i64());
    let current = turns.iter().find(|t| t["current"].as_bool() == Some(true)).and_then(|t| t["checkpoint"].as_i64());
    let mut active = std::collections::HashSet::new();
    let mut at = current;
    while let Some(n) = at {
        if !active.insert(n) {
            break;
        }
        at = parent_of(n);
    }
    for t in turns.iter().rev() {
        let n = t["checkpoint"].as_i64().unwrap_or(-1);
        let mark = if Some(n) == current {
            "*"
        } else if active.contains(&n) {
            "o"
        } else {
            "x"
        };
        let mut text = t["message_id"]
            .as_str()
            .map(|m| format!("message {m}"))
            .unwrap_or_else(|| format!("({})", t["reason"].as_str().unwrap_or("")));
        if let Some(l) = t["label"].as_str() {
            text.push_str(&format!(" {l}"));
        }
        let branch = match t["parent"].as_i64() {
            Some(p) if p != n - 1 => format!("  <- branches from {p}"),
            _ => String::new(),
        };
        println!("{mark} {n:>4}  {text}{branch}");
    }
}
