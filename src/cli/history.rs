//! `rewindfs log`, `diff` and `history`: reading the record.

use crate::cli::common;
use crate::cli::{DiffArgs, HistoryArgs, LogArgs};
use crate::daemon::control::{self as op, RewindReply};
use crate::error::Result;
use crate::report::{ChangeKind, TurnSummary};
use crate::text::{quote, quote_name, quoted};

fn human_bytes(n: i64) -> String {
    let n = n.max(0) as f64;
    match n {
        n if n >= 1e9 => format!("{:.1}G", n / 1e9),
        n if n >= 1e6 => format!("{:.1}M", n / 1e6),
        n if n >= 1e3 => format!("{:.1}k", n / 1e3),
        n => format!("{n}B"),
    }
}

/// Exits 1 when some turn's statistics are unavailable (every row is
/// still printed, and stderr says which and why), so that scripts notice.
pub fn log(args: LogArgs) -> Result<i32> {
    if let Some(remote) = &args.remote {
        return crate::cli::remote::log(remote, args.target.json);
    }
    let info = common::find_mount(args.target.mount.as_deref())?;
    let turns = common::ask(&info, op::Log)?;
    let unavailable: Vec<String> = turns
        .iter()
        .filter_map(|t| t.stats_unavailable.as_ref().map(|why| format!("turn {}: {why}", t.checkpoint)))
        .collect();
    let status = if unavailable.is_empty() { 0 } else { 1 };
    for line in &unavailable {
        eprintln!("rewindfs: statistics unavailable for {line}");
    }
    if args.target.json {
        return common::print_json(&turns).map(|_| status);
    }
    if args.graph {
        graph(&turns);
        return Ok(status);
    }
    outln!(
        "{:>4}  {:<20}  {:<16}  {:>5} {:>5} {:>5}  {:>7} {:>7}  {:>7}  programs",
        "#",
        "created",
        "message",
        "+file",
        "~file",
        "-file",
        "+lines",
        "-lines",
        "stored"
    );
    let ids: Vec<&str> = turns.iter().filter_map(|t| t.message_id.as_deref()).collect();
    for t in &turns {
        let message = match &t.message_id {
            Some(m) if !m.is_empty() => quote(short_id(m, &ids)),
            _ => format!("({})", reason_name(t)),
        };
        let mut programs: Vec<String> = t.name.iter().map(|n| format!("[{}]", quote(n))).collect();
        programs.extend(t.programs.iter().map(|(k, v)| format!("{}:{v}", quote(k))));
        // The agent's own words (its message id and label) are told from
        // the owner's: a reference the owner copies from here names the
        // checkpoint it names, whoever sealed it (docs/cli.md).
        if t.by_agent {
            programs.push(AGENT_MARK.to_string());
        }
        // Last, so that a long label does not push the columns around; an
        // agent's prompt (a session) is shown in quotes.
        match &t.label {
            Some(l) if t.session.is_some() => programs.push(quoted(l)),
            Some(l) => programs.push(quote(l)),
            None => {}
        }
        let marker = if t.current { "*" } else { " " };
        let counts = [t.files_added, t.files_modified, t.files_deleted, t.lines_added, t.lines_removed];
        // Unknown, not zero: `?` where the statistics could not be computed.
        let [fa, fm, fd, la, lr] =
            counts.map(|n| if t.stats_unavailable.is_some() { "?".to_string() } else { n.to_string() });
        outln!(
            "{marker}{:>3}  {:<20}  {:<16}  {fa:>5} {fm:>5} {fd:>5}  {la:>7} {lr:>7}  {:>7}  {}",
            t.checkpoint,
            t.created_at,
            message,
            human_bytes(t.bytes_stored),
            programs.join(" ")
        );
    }
    Ok(status)
}

/// How `log`, `log --graph` and the picker mark a checkpoint sealed by the
/// mount's agent user.
pub const AGENT_MARK: &str = "(sealed by the agent)";

/// A message id as `log` shows it: agents' prompt ids are 36-character
/// UUIDs, so a long one is cut to its shortest unique prefix of at least 8
/// characters (a reference that names it, as git does with hashes).
fn short_id<'a>(id: &'a str, all: &[&str]) -> &'a str {
    if id.chars().count() <= 16 {
        return id;
    }
    (8..id.len())
        .filter(|n| id.is_char_boundary(*n))
        .map(|n| &id[..n])
        .find(|p| all.iter().filter(|o| o.starts_with(p)).count() == 1)
        .unwrap_or(id)
}

pub fn diff(args: DiffArgs) -> Result<i32> {
    let info = common::find_mount(args.target.mount.as_deref())?;
    let paths = args.paths.iter().map(|p| common::path_in_mount(&info, p)).collect::<Result<Vec<_>>>()?;
    let reply = common::ask(&info, op::Diff { from: args.from, to: args.to, paths, patch: !args.stat })?;
    if args.target.json {
        common::print_json(&reply)?;
        return Ok(0);
    }
    let changes = reply.changes;
    let (mut added, mut removed) = (0, 0);
    for c in &changes {
        let (path, a, r) = (quote_name(&c.path), c.lines_added, c.lines_removed);
        added += a;
        removed += r;
        let kind = change_name(&c.change);
        if args.stat {
            if c.binary {
                outln!(" {path} | binary ({kind})");
            } else {
                outln!(" {path} | +{a} -{r} ({kind})");
            }
        } else if c.change == ChangeKind::Unknown {
            outln!(
                "{path}: changed without passing through rewindfs (between mounts, or under the mount); its state at one side is unknown"
            );
        } else if c.binary {
            outln!("Binary file {path} {kind}");
        } else {
            out!("{}", c.patch);
        }
    }
    if args.stat {
        outln!(" {} files changed, {added} insertions(+), {removed} deletions(-)", changes.len());
    }
    Ok(0)
}

pub fn history(args: HistoryArgs) -> Result<()> {
    let info = common::find_mount(args.target.mount.as_deref())?;
    let path = common::path_in_mount(&info, &args.path)?;
    let events = common::ask(&info, op::History { path: path.clone() })?;
    if args.target.json {
        return common::print_json(&events);
    }
    if events.is_empty() {
        outln!("no recorded turn changed {}", quote_name(&path));
    }
    for e in events {
        let msg = e.message_id.map(|m| format!(" (message {})", quote(&m))).unwrap_or_default();
        outln!("turn {}{msg}: {}", e.checkpoint, change_name(&e.change));
    }
    Ok(())
}

pub fn restore(args: crate::cli::RestoreArgs) -> Result<()> {
    let info = common::find_mount(args.target.mount.as_deref())?;
    let paths = args.paths.iter().map(|p| common::path_in_mount(&info, p)).collect::<Result<Vec<_>>>()?;
    let reply = common::ask(&info, op::Restore { checkpoint: args.checkpoint, paths, dry_run: args.dry_run })?;
    if args.target.json {
        return common::print_json(&reply);
    }
    for c in &reply.changes {
        outln!("{:<10} {}", action_name(&c.action), quote_name(&c.path));
    }
    match reply.undo_checkpoint {
        Some(undo) if !reply.dry_run => outln!(
            "{} changes made from checkpoint {}; undo with `rewindfs restore {undo} -- <paths>`",
            reply.changes.len(),
            reply.checkpoint,
        ),
        _ => outln!("{} changes would be made (dry run; nothing changed)", reply.changes.len()),
    }
    Ok(())
}

pub fn rewind(args: crate::cli::RewindArgs) -> Result<()> {
    let info = common::find_mount(args.target.mount.as_deref())?;
    let checkpoint = match args.checkpoint {
        Some(c) => c,
        None => match crate::cli::picker::pick(&info)? {
            Some(n) => n.to_string(),
            None => return Ok(()),
        },
    };
    let reply = common::ask(&info, op::Rewind { checkpoint, dry_run: args.dry_run })?;
    if args.target.json {
        return common::print_json(&reply);
    }
    match reply {
        RewindReply::Preview(p) => {
            // From the live tree to the checkpoint: "added" comes back, "deleted" goes away.
            let (mut plus, mut minus) = (0, 0);
            for c in &p.changes {
                let what = match c.change {
                    ChangeKind::Added => "recreate",
                    ChangeKind::Deleted => "delete",
                    _ => "restore",
                };
                let (a, r) = (c.lines_added, c.lines_removed);
                plus += a;
                minus += r;
                let lines = if c.binary { "binary".to_string() } else { format!("+{a} -{r}") };
                outln!("{what:<9} {}  ({lines})", quote_name(&c.path));
            }
            outln!(
                "rewind to checkpoint {} would change {} files (+{plus} -{minus} lines); nothing changed",
                p.checkpoint,
                p.changes.len()
            );
        }
        RewindReply::Done(d) => outln!(
            "rewound to checkpoint {}: {} changes in {:.1} ms; undo with `rewindfs rewind {}`",
            d.checkpoint,
            d.changes.len(),
            d.elapsed_ms,
            d.safety_checkpoint
        ),
    }
    Ok(())
}

/// The wire name of a serde enum value (`added`, `turn`, ...): the text
/// output uses the same words as `--json`.
fn wire_name<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "?".into(),
    }
}

fn change_name(c: &ChangeKind) -> String {
    wire_name(c)
}

fn action_name(a: &crate::restore::Action) -> String {
    wire_name(a)
}

fn reason_name(t: &TurnSummary) -> String {
    wire_name(&t.reason)
}

/// `log --graph`: the history as a tree of branches.
pub fn graph(turns: &[TurnSummary]) {
    let parent_of = |n: i64| turns.iter().find(|t| t.checkpoint == n).and_then(|t| t.parent);
    let current = turns.iter().find(|t| t.current).map(|t| t.checkpoint);
    let mut active = std::collections::HashSet::new();
    let mut at = current;
    while let Some(n) = at {
        if !active.insert(n) {
            break;
        }
        at = parent_of(n);
    }
    for t in turns.iter().rev() {
        let n = t.checkpoint;
        let mark = if Some(n) == current {
            "*"
        } else if active.contains(&n) {
            "o"
        } else {
            "x"
        };
        let mut text = t
            .message_id
            .as_ref()
            .map(|m| format!("message {}", quote(m)))
            .unwrap_or_else(|| format!("({})", reason_name(t)));
        if t.by_agent {
            text.push_str(&format!(" {AGENT_MARK}"));
        }
        if let Some(l) = &t.label {
            text.push_str(&format!(" {}", quote(l)));
        }
        let branch = match t.parent {
            Some(p) if p != n - 1 => format!("  <- branches from {p}"),
            _ => String::new(),
        };
        outln!("{mark} {n:>4}  {text}{branch}");
    }
}

#[cfg(test)]
mod tests {
    use super::{quoted, short_id};

    #[test]
    fn long_message_ids_are_cut_to_a_unique_prefix() {
        let all = ["9c776ace-1b69-42ac-a7c5-8a1f880122ea", "9c776acf-0000-42ac-a7c5-8a1f880122ea", "m1"];
        assert_eq!(short_id(all[0], &all), "9c776ace");
        let near = ["9c776ace-1b69-42ac", "9c776ace-1b70-42ac", "m1"];
        assert_eq!(short_id(near[0], &near), "9c776ace-1b6");
        assert_eq!(short_id("m1", &all), "m1", "short ids stay whole");
    }

    #[test]
    fn prompt_labels_are_always_quoted() {
        assert_eq!(quoted("Fix the bug"), "\"Fix the bug\"");
        assert_eq!(quoted("a\nb"), "\"a\\nb\"");
    }
}
