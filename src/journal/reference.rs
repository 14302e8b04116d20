//! Checkpoint references beyond numbers, `~N` and exact message ids: a
//! unique prefix of a message id (agents' prompt ids are 36-character
//! UUIDs), words from a checkpoint's label (a prompt's first line), or
//! `=LABEL`, the whole label exactly.

use crate::meta::Checkpoint;
use crate::text::quoted;

/// The shortest message-id prefix taken as a reference: shorter ones would
/// catch typos of checkpoint numbers.
pub const MIN_PREFIX: usize = 4;

/// What begins an exact label reference (`=Bump the greeting`); no message
/// id or snapshot name may begin with it.
pub const EXACT: char = '=';

/// The words of a text, lower-cased: runs of letters and digits.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

/// Whether every word of the reference begins a word of the label,
/// whatever their case and order: "BUMP greeting" finds "Bump the
/// greeting and clean up", and "greet bump" too.
fn words_match(label: &str, wanted: &[String]) -> bool {
    let have = words(label);
    wanted.iter().all(|w| have.iter().any(|h| h.starts_with(w.as_str())))
}

/// What a reference matches loosely: the checkpoints whose message id
/// starts with it (at least [`MIN_PREFIX`] characters), and those whose
/// label holds its words (see [`words_match`]); with [`EXACT`] first, only
/// the labels that are the rest exactly. Both count alike, and alike with
/// an exact message id (`Journal::resolve`): the agent chooses ids and
/// labels, so no reading may hide another.
pub fn loose_matches(all: &[Checkpoint], reference: &str) -> Vec<i64> {
    if let Some(label) = reference.strip_prefix(EXACT) {
        return all.iter().filter(|c| c.label.as_deref() == Some(label)).map(|c| c.checkpoint).collect();
    }
    let prefix = reference.chars().count() >= MIN_PREFIX;
    let wanted = words(reference);
    let ends = elided(reference);
    all.iter()
        .filter(|c| {
            (prefix && c.message_id.as_deref().is_some_and(|m| m.starts_with(reference)))
                || ends.is_some_and(|(a, b)| {
                    c.message_id
                        .as_deref()
                        .is_some_and(|m| m.len() >= a.len() + b.len() && m.starts_with(a) && m.ends_with(b))
                })
                || (!wanted.is_empty() && c.label.as_deref().is_some_and(|l| words_match(l, &wanted)))
        })
        .map(|c| c.checkpoint)
        .collect()
}

/// What marks the elided middle of a long message id, as `log` shows it
/// (`9c776ace…-000002`); `...` is taken too.
pub const ELISION: &str = "…";

/// A reference `START…END` (or `START...END`): a message id beginning with
/// START (at least [`MIN_PREFIX`] characters) and ending with END.
fn elided(reference: &str) -> Option<(&str, &str)> {
    let (a, b) = reference.split_once(ELISION).or_else(|| reference.split_once("..."))?;
    (a.chars().count() >= MIN_PREFIX && !b.is_empty()).then_some((a, b))
}

/// The checkpoints whose turns the current branch keeps: `current`, and
/// each ancestor of it followed on the branch by a checkpoint of its own
/// turn (not by a rewind to it). A checkpoint a rewind went back to (or
/// before) is the state the branch grew from, but the turn that followed
/// it was abandoned: the prompt sent there was undone. Rows are
/// (checkpoint, parent, sealed by a rewind).
pub fn kept_turns(rows: &[(i64, Option<i64>, bool)], current: i64) -> std::collections::HashSet<i64> {
    let row = |n: i64| rows.iter().find(|r| r.0 == n);
    let mut kept = std::collections::HashSet::from([current]);
    let mut seen = std::collections::HashSet::new();
    let mut at = current;
    while seen.insert(at) {
        let Some(&(_, Some(parent), rewind)) = row(at) else { break };
        if !rewind {
            kept.insert(parent);
        }
        at = parent;
    }
    kept
}

/// [`kept_turns`] of checkpoint rows.
pub fn current_branch(all: &[Checkpoint], current: i64) -> std::collections::HashSet<i64> {
    let rows: Vec<(i64, Option<i64>, bool)> =
        all.iter().map(|c| (c.checkpoint, c.parent, c.reason == crate::meta::Reason::Rewind)).collect();
    kept_turns(&rows, current)
}

/// Among several checkpoints a reference matches, the one whose turn the
/// current branch keeps when exactly one is and the others' turns were
/// abandoned by a rewind (a prompt sent again after a rewind gives two
/// checkpoints of one label), with a sentence saying so. Only among checkpoints sealed by
/// one caller: the agent's user cannot take a reference meant for the
/// owner's checkpoint by sealing a like one on the current branch.
pub fn prefer_current_branch(all: &[Checkpoint], matches: &[i64], current: i64) -> Option<(i64, String)> {
    let branch = current_branch(all, current);
    let rows: Vec<&Checkpoint> = matches.iter().filter_map(|n| all.iter().find(|c| c.checkpoint == *n)).collect();
    if rows.len() != matches.len() || rows.windows(2).any(|w| w[0].sealed_by != w[1].sealed_by) {
        return None;
    }
    let (on, off): (Vec<&Checkpoint>, Vec<&Checkpoint>) = rows.iter().partition(|c| branch.contains(&c.checkpoint));
    match on.as_slice() {
        [one] => {
            let others: Vec<String> = off.iter().map(|c| c.checkpoint.to_string()).collect();
            let note = format!(
                "checkpoint {} is on the current branch; {} {} matched too, abandoned by a rewind (name {} by its number)",
                one.checkpoint,
                if others.len() == 1 { "checkpoint" } else { "checkpoints" },
                others.join(", "),
                if others.len() == 1 { "it" } else { "one" },
            );
            Some((one.checkpoint, note))
        }
        _ => None,
    }
}

/// How an ambiguous loose reference lists its candidates: number, message
/// id and label, so the user can pick one.
pub fn describe(all: &[Checkpoint], matches: &[i64]) -> String {
    matches
        .iter()
        .filter_map(|n| all.iter().find(|c| c.checkpoint == *n))
        .map(|c| {
            let mut s = c.checkpoint.to_string();
            if let Some(m) = &c.message_id {
                s.push_str(&format!(" (message {})", quoted(m)));
            }
            if let Some(l) = &c.label {
                s.push_str(&format!(" {}", quoted(l)));
            }
            s
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(n: i64, parent: Option<i64>, id: Option<&str>, label: Option<&str>) -> Checkpoint {
        serde_json::from_value(serde_json::json!({
            "checkpoint": n, "parent": parent, "message_id": id, "session": null, "label": label,
            "reason": "turn", "created_at": 0, "store_bytes_at_start": 0,
        }))
        .expect("a checkpoint row")
    }

    #[test]
    fn label_words_match_in_any_case_and_order() {
        let all = [row(1, None, Some("p1"), Some("Bump the greeting and clean up")), row(2, Some(1), None, Some("x"))];
        for r in ["bump the greeting", "BUMP greeting", "greeting bump", "greet", "clean-up"] {
            assert_eq!(loose_matches(&all, r), [1], "{r}");
        }
        for r in ["bump the farewell", "reeting", "---", "=bump the greeting and clean up"] {
            assert!(loose_matches(&all, r).is_empty(), "{r}");
        }
        assert_eq!(loose_matches(&all, "=Bump the greeting and clean up"), [1], "exact mode");
    }

    #[test]
    fn an_elided_id_names_the_ids_with_both_ends() {
        let s = "9c776ace-1b69-42ac-a7c5-8a1f880122ea";
        let all = [row(1, None, Some(&format!("{s}-000001")), None), row(2, None, Some(&format!("{s}-000012")), None)];
        assert_eq!(loose_matches(&all, "9c776ace…-000012"), [2]);
        assert_eq!(loose_matches(&all, "9c77...01"), [1]);
        assert_eq!(loose_matches(&all, "9c7…01"), Vec::<i64>::new(), "the start is a prefix: 4 characters at least");
        assert_eq!(loose_matches(&all, "9c776ace…"), Vec::<i64>::new());
    }

    #[test]
    fn the_current_branch_is_preferred_and_said() {
        // Prompt 1's turn abandoned by a rewind to 1 (the state before
        // it); 4 is the same prompt sent again.
        let mut all = vec![
            row(0, None, None, None),
            row(1, Some(0), Some("a1"), Some("Bump it")),
            row(2, Some(1), None, None),
            row(3, Some(1), None, Some("rewound to 1")),
            row(4, Some(3), Some("a2"), Some("Bump it")),
        ];
        all[3].reason = crate::meta::Reason::Rewind;
        assert_eq!(current_branch(&all, 4), [0, 3, 4].into());
        let (n, note) = prefer_current_branch(&all, &[1, 4], 4).expect("preferred");
        assert_eq!(n, 4);
        assert!(note.contains("checkpoint 1 matched too, abandoned"), "{note}");
        assert_eq!(prefer_current_branch(&all, &[1, 4], 2).map(|p| p.0), Some(1));
        all[4].sealed_by = Some(1000);
        assert_eq!(prefer_current_branch(&all, &[1, 4], 4), None, "sealed by another user: ambiguous");
    }
}
