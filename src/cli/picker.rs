//! `rewind` without a checkpoint: on a terminal, a list of the recent
//! prompts (newest first) with their labels and what their turns changed,
//! to pick the one to go back to. Without a terminal it refuses: a script
//! must say where to rewind.

use std::io::IsTerminal;

use crate::cli::common;
use crate::daemon::control as op;
use crate::daemon::registry::MountInfo;
use crate::error::{Error, Result};
use crate::report::TurnSummary;
use crate::text::quote;

/// How many checkpoints the list offers.
const SHOWN: usize = 30;

/// The checkpoint picked, or None when the user backed out (Esc, q).
pub fn pick(info: &MountInfo) -> Result<Option<i64>> {
    if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        return Err(Error::Usage(
            "rewind needs a CHECKPOINT (a number, ~N, a message id or prefix, or words of a label); \
             the list to pick from is offered only on a terminal"
                .into(),
        ));
    }
    let turns = common::ask(info, op::Log)?;
    let choices = candidates(&turns);
    if choices.is_empty() {
        return Err(Error::Usage("there is no earlier checkpoint to rewind to".into()));
    }
    let branch = crate::cli::history::current_branch(&turns);
    let items: Vec<String> = choices.iter().map(|t| item(t, branch.contains(&t.checkpoint))).collect();
    let terminal =
        |e: dialoguer::Error| Error::io("cannot read the choice from the terminal", std::io::Error::other(e));
    let mut at = 0;
    loop {
        let picked = dialoguer::Select::with_theme(&dialoguer::theme::SimpleTheme)
            .with_prompt("Rewind the whole workspace to the state before which prompt? (Esc to cancel)")
            .items(&items)
            .default(at)
            .max_length(15)
            .interact_opt()
            .map_err(terminal)?;
        let Some(i) = picked else { return Ok(None) };
        at = i;
        let n = choices[i].checkpoint;
        // What it would do, as `--dry-run` says, before anything is done.
        let reply = common::ask(info, op::Rewind { checkpoint: n.to_string(), dry_run: true })?;
        let changes = match &reply {
            op::RewindReply::Preview(p) => p.changes.as_slice(),
            op::RewindReply::Done(_) => &[],
        };
        let (lines, total) = crate::cli::history::preview(changes, n);
        for l in lines.iter().take(PREVIEWED) {
            eprintln!("  {l}");
        }
        if lines.len() > PREVIEWED {
            eprintln!("  ... and {} more files", lines.len() - PREVIEWED);
        }
        if let Some(hint) = crate::cli::history::conversation_hint(info, n) {
            eprintln!("  ({hint})");
        }
        let confirmed = dialoguer::Confirm::with_theme(&dialoguer::theme::SimpleTheme)
            .with_prompt(format!("{total}. Rewind? (n: back to the list, Esc: cancel)"))
            .default(false)
            .interact_opt()
            .map_err(terminal)?;
        match confirmed {
            Some(true) => return Ok(Some(n)),
            Some(false) => continue,
            None => return Ok(None),
        }
    }
}

/// How many files of a preview the picker lists before asking.
const PREVIEWED: usize = 12;

/// The checkpoints offered, newest first: those of prompts (a message id)
/// when there are any, else every checkpoint but the current one.
fn candidates(turns: &[TurnSummary]) -> Vec<&TurnSummary> {
    let prompts: Vec<&TurnSummary> = turns.iter().rev().filter(|t| t.message_id.is_some()).take(SHOWN).collect();
    if !prompts.is_empty() {
        return prompts;
    }
    turns.iter().rev().filter(|t| !t.current).take(SHOWN).collect()
}

/// How the picker marks a checkpoint that is not on the current branch.
pub const ABANDONED: &str = "(abandoned by a rewind)";

/// One line of the list; `on_branch`: on the current branch.
fn item(t: &TurnSummary, on_branch: bool) -> String {
    let what = match (&t.label, &t.message_id) {
        (Some(l), _) => quote(l),
        (None, Some(m)) => format!("message {}", quote(m)),
        (None, None) => format!(
            "({})",
            serde_json::to_value(t.reason).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default()
        ),
    };
    let mut by = if t.by_agent { format!("  {}", crate::cli::history::AGENT_MARK) } else { String::new() };
    if !on_branch {
        by.push_str(&format!("  {ABANDONED}"));
    }
    format!(
        "{:>4}  {}  {what}  (its turn: +{} ~{} -{} files){by}",
        t.checkpoint, t.created_at, t.files_added, t.files_modified, t.files_deleted
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(n: i64, message: Option<&str>, current: bool) -> TurnSummary {
        serde_json::from_value(serde_json::json!({
            "checkpoint": n, "parent": null, "message_id": message, "session": null, "label": null,
            "reason": "turn", "created_at": "2026-12-03T10:00:00Z", "current": current,
            "files_added": 1, "files_modified": 2, "files_deleted": 3, "lines_added": 0, "lines_removed": 0,
            "bytes_stored": 0, "programs": {}
        }))
        .unwrap()
    }

    #[test]
    fn prompts_are_offered_newest_first() {
        let turns = [turn(0, None, false), turn(1, Some("p1"), false), turn(2, None, false), turn(3, Some("p2"), true)];
        let offered: Vec<i64> = candidates(&turns).iter().map(|t| t.checkpoint).collect();
        assert_eq!(offered, [3, 1]);
        assert_eq!(item(&turns[1], true), "   1  2026-12-03T10:00:00Z  message p1  (its turn: +1 ~2 -3 files)");
        let plain = [turn(0, None, false), turn(1, None, true)];
        let offered: Vec<i64> = candidates(&plain).iter().map(|t| t.checkpoint).collect();
        assert_eq!(offered, [0], "without prompts, every checkpoint but the current one");
    }

    /// The agent's checkpoints are marked as its own.
    #[test]
    fn the_agents_checkpoints_are_marked() {
        let mut t = turn(1, Some("p1"), false);
        t.by_agent = true;
        assert_eq!(
            item(&t, true),
            "   1  2026-12-03T10:00:00Z  message p1  (its turn: +1 ~2 -3 files)  (sealed by the agent)"
        );
    }
}
