//! `rewindfs log`, `diff` and `history`: reading the record.

use crate::cli::common;
use crate::cli::offline::{self, Source};
use crate::cli::{DiffArgs, HistoryArgs, LogArgs};
use crate::daemon::control::{self as op, RewindReply};
use crate::error::{Error, Result};
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
    let turns = match offline::mount_or_store(args.target.mount.as_deref(), "the history is")? {
        Source::Mounted(info) => common::ask(&info, op::Log)?,
        Source::Store(o) => o.ws.read().log()?,
    };
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
    let branch = current_branch(&turns);
    let mut hidden = 0;
    for t in &turns {
        if !args.all && idle_mount(t) {
            hidden += 1;
            continue;
        }
        let message = match &t.message_id {
            Some(m) if !m.is_empty() => quote(&short_id(m, &ids)),
            _ => row_name(t),
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
        let marker = match (t.current, branch.contains(&t.checkpoint)) {
            (true, _) => "*",
            (false, true) => " ",
            (false, false) => ABANDONED_MARK,
        };
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
    if hidden > 0 {
        let s = if hidden == 1 { "" } else { "s" };
        outln!(
            "({hidden} mount{s} where nothing changed before the next checkpoint not shown; `log --all` shows them)"
        );
    }
    Ok(status)
}

/// A mount checkpoint whose turn changed nothing: every `run` and `mount`
/// seals one, and a row of zeros would only say that it happened. The
/// current one, a named one and one whose statistics are unknown stay.
fn idle_mount(t: &TurnSummary) -> bool {
    t.reason == crate::meta::Reason::Mount
        && !t.current
        && t.name.is_none()
        && t.stats_unavailable.is_none()
        && t.bytes_stored == 0
        && t.programs.is_empty()
        && [t.files_added, t.files_modified, t.files_deleted, t.lines_added, t.lines_removed] == [0; 5]
}

/// How a row without a message id is named in `log`: by why it was
/// sealed; a mount's row holds the changes made after mounting, before
/// the next checkpoint.
fn row_name(t: &TurnSummary) -> String {
    match t.reason {
        crate::meta::Reason::Mount => "(since mount)".to_string(),
        _ => format!("({})", reason_name(t)),
    }
}

/// How `log`, `log --graph` and the picker mark a checkpoint sealed by the
/// mount's agent user.
pub const AGENT_MARK: &str = "(sealed by the agent)";

/// A message id as `log` shows it: agents' prompt ids are 36-character
/// UUIDs, so a long one is cut to its shortest unique prefix of at least 8
/// characters (a reference that names it, as git does with hashes). When
/// that is still longer than 16 characters (Gemini CLI's ids are the
/// session's UUID and the prompt's number), it is the first 8, `…`, and the
/// shortest end no other id of that start has, from a `-` when one is
/// near: `9c776ace…-000002`, a reference too (`START…END`).
fn short_id(id: &str, all: &[&str]) -> String {
    if id.chars().count() <= 16 {
        return id.to_string();
    }
    let prefix = (8..id.len())
        .filter(|n| id.is_char_boundary(*n))
        .map(|n| &id[..n])
        .find(|p| all.iter().filter(|o| o.starts_with(p)).count() == 1)
        .unwrap_or(id);
    if prefix.chars().count() <= 16 {
        return prefix.to_string();
    }
    let start = &id[..id.char_indices().nth(8).map_or(id.len(), |(i, _)| i)];
    let rivals: Vec<&&str> = all.iter().filter(|o| **o != id && o.starts_with(start)).collect();
    let unique_end = (start.len() + 1..id.len())
        .rev()
        .filter(|n| id.is_char_boundary(*n))
        .map(|n| &id[n..])
        .find(|e| rivals.iter().all(|o| !o.ends_with(e) || o.len() < start.len() + e.len()));
    match unique_end {
        Some(end) => {
            // From the nearest `-` before, when it is close: reads as a part of the id.
            let from = id.len() - end.len();
            let dash = id[..from].rfind('-').filter(|d| from - d <= 8).unwrap_or(from);
            let end = &id[dash..];
            if start.len() + end.len() + 1 < prefix.len() {
                format!("{start}{}{end}", crate::journal::reference::ELISION)
            } else {
                prefix.to_string()
            }
        }
        None => prefix.to_string(),
    }
}

pub fn diff(args: DiffArgs) -> Result<i32> {
    let reply = match offline::mount_or_store(args.target.mount.as_deref(), "the diff is")? {
        Source::Mounted(info) => {
            let paths = args.paths.iter().map(|p| common::path_in_mount(&info, p)).collect::<Result<Vec<_>>>()?;
            let from = common::reference(&info, args.from)?;
            let to = args.to.map(|t| common::reference(&info, t)).transpose()?;
            common::ask(&info, op::Diff { from, to, paths, patch: !args.stat })?
        }
        Source::Store(o) => {
            let paths = args.paths.iter().map(|p| common::path_in_mount(&o.info, p)).collect::<Result<Vec<_>>>()?;
            let from = offline_reference(&o, &args.from)?;
            let to = args.to.as_deref().map(|t| offline_reference(&o, t)).transpose()?;
            let read = o.ws.read();
            let view = |n: Option<i64>| match n {
                Some(n) => read.view(n),
                None => read.live(),
            };
            let changes = crate::report::diff(&view(Some(from)), &view(to), &paths, !args.stat)
                .map_err(|e| view_failed("the diff", e))?;
            op::DiffReply { from, to, changes }
        }
    };
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
    let (path, events) = match offline::mount_or_store(args.target.mount.as_deref(), "the history is")? {
        Source::Mounted(info) => {
            let path = common::path_in_mount(&info, &args.path)?;
            (path.clone(), common::ask(&info, op::History { path })?)
        }
        Source::Store(o) => {
            let path = common::path_in_mount(&o.info, &args.path)?;
            let events = o.ws.read().history(&path)?;
            (path, events)
        }
    };
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

/// A reference resolved in a store read offline; stderr says when the
/// current branch was preferred, as through a daemon.
pub(crate) fn offline_reference(o: &offline::Offline, reference: &str) -> Result<i64> {
    use crate::journal::JournalError;
    match o.ws.journal().resolve_noted(reference) {
        Ok((c, note)) => {
            if let Some(note) = note {
                eprintln!("rewindfs: {note}");
            }
            Ok(c.0)
        }
        Err(
            e @ (JournalError::UnknownCheckpoint { .. }
            | JournalError::Ambiguous { .. }
            | JournalError::Forgotten { .. }),
        ) => Err(Error::Usage(e.to_string())),
        Err(e) => Err(Error::Daemon(format!("cannot read the checkpoints: {e}"))),
    }
}

/// A view that could not be read from a store read offline.
fn view_failed(what: &str, e: crate::view::ViewError) -> Error {
    Error::kind_of(crate::error::ErrorKind::Failed, format!("cannot read {what}: {e}"))
}

/// The mount of a command that changes the tree, or, outside any, how to
/// get to one (`offline::needs_mount`).
pub fn mount_for(explicit: Option<&std::path::Path>, command: &str) -> Result<crate::daemon::registry::MountInfo> {
    common::find_mount(explicit).map_err(|e| match e.kind() {
        crate::error::ErrorKind::NoMount => offline::needs_mount(explicit, e, command),
        _ => e,
    })
}

pub fn restore(args: crate::cli::RestoreArgs) -> Result<()> {
    let info = mount_for(args.target.mount.as_deref(), "restore")?;
    let paths = args.paths.iter().map(|p| common::path_in_mount(&info, p)).collect::<Result<Vec<_>>>()?;
    let checkpoint = common::reference(&info, args.checkpoint)?;
    let reply = common::ask(&info, op::Restore { checkpoint, paths, dry_run: args.dry_run })?;
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
    let info = mount_for(args.target.mount.as_deref(), "rewind")?;
    let checkpoint = match args.checkpoint {
        Some(c) => common::reference(&info, c)?,
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
            let (lines, total) = preview(&p.changes, p.checkpoint);
            for l in lines {
                outln!("{l}");
            }
            outln!("{total}; nothing changed");
        }
        RewindReply::Done(d) => {
            outln!(
                "rewound to checkpoint {}: {} changes in {:.1} ms; undo with `rewindfs rewind {}`",
                d.checkpoint,
                d.changes.len(),
                d.elapsed_ms,
                d.safety_checkpoint
            );
            if let Some(hint) = conversation_hint(&info, d.checkpoint) {
                outln!("{hint}");
            }
        }
    }
    Ok(())
}

/// For a checkpoint an agent's prompt hook sealed: how to take the agent's
/// conversation back to the same prompt (the files are rewound; the
/// conversation is the agent's), with the agent's own command.
pub fn conversation_hint(info: &crate::daemon::registry::MountInfo, checkpoint: i64) -> Option<String> {
    let rows = common::ask(info, op::Checkpoints).ok()?;
    let row = rows.iter().find(|c| c.checkpoint == checkpoint)?;
    let (id, session) = (row.message_id.as_deref()?, row.session.as_deref()?);
    let agent = crate::cli::agents::Agent::of_prompt(id, session)?;
    let label = row.label.as_deref().unwrap_or(id);
    Some(format!(
        "to take {}'s conversation back to that prompt too: {}",
        agent.name(),
        agent.conversation_rewind(session, label)
    ))
}

/// What a rewind to `checkpoint` would change (`--dry-run`, and the
/// picker before it asks): one line per file, from the live tree to the
/// checkpoint ("added" comes back, "deleted" goes away), and the total.
pub fn preview(changes: &[crate::report::FileChange], checkpoint: i64) -> (Vec<String>, String) {
    let (mut plus, mut minus) = (0, 0);
    let mut lines = Vec::new();
    for c in changes {
        let what = match c.change {
            ChangeKind::Added => "recreate",
            ChangeKind::Deleted => "delete",
            _ => "restore",
        };
        let (a, r) = (c.lines_added, c.lines_removed);
        plus += a;
        minus += r;
        let count = if c.binary { "binary".to_string() } else { format!("+{a} -{r}") };
        lines.push(format!("{what:<9} {}  ({count})", quote_name(&c.path)));
    }
    let total =
        format!("rewind to checkpoint {checkpoint} would change {} files (+{plus} -{minus} lines)", changes.len());
    (lines, total)
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

/// How `log` and `log --graph` mark a checkpoint abandoned by a rewind
/// (not on the current branch).
pub const ABANDONED_MARK: &str = "x";

/// The checkpoints whose turns the current branch keeps; the others'
/// turns were abandoned by a rewind (`journal::reference::kept_turns`).
pub fn current_branch(turns: &[TurnSummary]) -> std::collections::HashSet<i64> {
    let rows: Vec<(i64, Option<i64>, bool)> =
        turns.iter().map(|t| (t.checkpoint, t.parent, t.reason == crate::meta::Reason::Rewind)).collect();
    match turns.iter().find(|t| t.current) {
        Some(c) => crate::journal::reference::kept_turns(&rows, c.checkpoint),
        None => Default::default(),
    }
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
            ABANDONED_MARK
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
        // Gemini CLI's: one session, numbered prompts.
        let s = "9c776ace-1b69-42ac-a7c5-8a1f880122ea";
        let (one, two, twelve) = (format!("{s}-000001"), format!("{s}-000002"), format!("{s}-000012"));
        let gemini = [one.as_str(), two.as_str(), twelve.as_str()];
        assert_eq!(short_id(&two, &gemini), "9c776ace…-000002");
        assert_eq!(short_id(&twelve, &gemini), "9c776ace…-000012");
    }

    #[test]
    fn prompt_labels_are_always_quoted() {
        assert_eq!(quoted("Fix the bug"), "\"Fix the bug\"");
        assert_eq!(quoted("a\nb"), "\"a\\nb\"");
    }
}
