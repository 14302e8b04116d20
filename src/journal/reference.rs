//! Checkpoint references beyond numbers, `~N` and exact message ids: a
//! unique prefix of a message id (agents' prompt ids are 36-character
//! UUIDs), or words from a checkpoint's label (a prompt's first line).

use crate::meta::Checkpoint;
use crate::text::quoted;

/// The shortest message-id prefix taken as a reference: shorter ones would
/// catch typos of checkpoint numbers.
pub const MIN_PREFIX: usize = 4;

/// What a reference matches loosely: the checkpoints whose message id
/// starts with it (at least [`MIN_PREFIX`] characters), and those whose
/// label contains it (ignoring case). Both count alike, and alike with an
/// exact message id (`Journal::resolve`): the agent chooses ids and labels,
/// so no reading may hide another.
pub fn loose_matches(all: &[Checkpoint], reference: &str) -> Vec<i64> {
    let prefix = reference.chars().count() >= MIN_PREFIX;
    let needle = reference.to_lowercase();
    let words = !needle.trim().is_empty();
    all.iter()
        .filter(|c| {
            (prefix && c.message_id.as_deref().is_some_and(|m| m.starts_with(reference)))
                || (words && c.label.as_deref().is_some_and(|l| l.to_lowercase().contains(&needle)))
        })
        .map(|c| c.checkpoint)
        .collect()
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
