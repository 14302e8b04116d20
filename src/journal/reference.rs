//! Checkpoint references beyond numbers, `~N` and exact message ids: a
//! unique prefix of a message id (agents' prompt ids are 36-character
//! UUIDs), or words from a checkpoint's label (a prompt's first line).

use crate::meta::Checkpoint;

/// The shortest message-id prefix taken as a reference: shorter ones would
/// catch typos of checkpoint numbers.
pub const MIN_PREFIX: usize = 4;

/// What a reference that names no checkpoint exactly matches: the
/// checkpoints whose message id starts with it, else those whose label
/// contains it (ignoring case). Empty when neither.
pub fn loose_matches(all: &[Checkpoint], reference: &str) -> Vec<i64> {
    if reference.chars().count() >= MIN_PREFIX {
        let by_prefix: Vec<i64> = all
            .iter()
            .filter(|c| c.message_id.as_deref().is_some_and(|m| m.starts_with(reference)))
            .map(|c| c.checkpoint)
            .collect();
        if !by_prefix.is_empty() {
            return by_prefix;
        }
    }
    let needle = reference.to_lowercase();
    if needle.trim().is_empty() {
        return Vec::new();
    }
    all.iter()
        .filter(|c| c.label.as_deref().is_some_and(|l| l.to_lowercase().contains(&needle)))
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
                s.push_str(&format!(" (message {m})"));
            }
            if let Some(l) = &c.label {
                s.push_str(&format!(" {l:?}"));
            }
            s
        })
        .collect::<Vec<_>>()
        .join(", ")
}
