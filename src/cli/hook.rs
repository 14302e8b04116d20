//! `rewindfs hook <agent>`: what an agent's prompt hook runs. Reads the
//! hook's JSON on stdin, finds the rewindfs mount holding the agent's
//! working directory and seals a checkpoint named after the prompt.
//!
//! The agent waits for this before its model sees the prompt, and Claude
//! Code puts whatever a prompt hook prints on stdout into the model's
//! context. So it prints nothing on stdout, exits 0 at once when the
//! directory is in no mount (a user-wide install is harmless), and gives
//! up after HOOK_DEADLINE when the daemon does not answer (exit 1: the
//! agents show a failed hook and go on; exit 2 would block the prompt).

use std::io::Read;
use std::time::Duration;

use crate::cli::agents::{Agent, HOOK_DEADLINE, PromptEvent, parse_event};
use crate::cli::{common, turn};
use crate::daemon::control as op;
use crate::daemon::registry::MountInfo;
use crate::error::{ErrorKind, Result};
use crate::journal::{TurnInfo, check_message_id};

/// The most bytes of hook input read (a prompt may be long; its label is
/// one line of it).
const INPUT_MAX: u64 = 16 << 20;

pub fn run(agent: Agent) -> i32 {
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin().take(INPUT_MAX).read_to_end(&mut input) {
        eprintln!("rewindfs hook {}: cannot read the hook input: {e}", agent.name());
        return 1;
    }
    let event = match parse_event(&input) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("rewindfs hook {}: {e}", agent.name());
            return 1;
        }
    };
    // The work runs on a thread of its own so that a daemon stuck in a
    // flush cannot hold the agent's prompt: past the deadline the process
    // exits and the thread with it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(checkpoint(agent, &event));
    });
    match rx.recv_timeout(HOOK_DEADLINE) {
        Ok(Ok(_)) => 0,
        Ok(Err(e)) if e.kind() == ErrorKind::NoMount => {
            log::debug!("hook {}: {e}; nothing to do", agent.name());
            0
        }
        Ok(Err(e)) => {
            eprintln!("rewindfs hook {}: no checkpoint for this prompt: {e}", agent.name());
            1
        }
        Err(_) => {
            eprintln!(
                "rewindfs hook {}: no checkpoint for this prompt: the rewindfs daemon did not answer within {}s",
                agent.name(),
                HOOK_DEADLINE.as_secs()
            );
            1
        }
    }
}

/// Seals the checkpoint of one prompt.
fn checkpoint(agent: Agent, event: &PromptEvent) -> Result<i64> {
    let info = common::find_mount(Some(&event.cwd))?;
    // What is left of the deadline, less a margin to report a timeout.
    let timeout = HOOK_DEADLINE.saturating_sub(Duration::from_millis(500));
    let message_id = message_id(agent, event, &info, timeout)?;
    let turn = TurnInfo { message_id, session: event.session.clone(), label: event.label.clone(), sealed_by: None };
    let reply = turn::seal(&info, turn, timeout)?;
    Ok(reply.checkpoint)
}

/// Gemini prompt numbers are written with this many digits at least.
const GEMINI_DIGITS: usize = 6;

/// The next Gemini message id of `session`, given the mount's message ids:
/// one more than the highest number of the session, zero-padded so that
/// no id is a prefix of another (`<session>-1` of `<session>-10`), which
/// a seal refuses (docs/cli.md, "Checkpoint references"). Ids of older
/// versions, not padded, are counted too.
fn gemini_id<'a>(session: &str, ids: impl Iterator<Item = &'a str>) -> String {
    let prefix = format!("{session}-");
    let last = ids.filter_map(|id| id.strip_prefix(&prefix)?.parse::<u64>().ok()).max().unwrap_or(0);
    format!("{prefix}{:0width$}", last + 1, width = GEMINI_DIGITS)
}

/// The message id of a prompt: Claude Code's own prompt id; for Gemini
/// CLI, which has none, the session id and the prompt's number in the
/// session (one more than the highest this mount has seen, so a rewind
/// never makes a number come round again). None when the agent gave
/// nothing usable; the checkpoint still gets its session and label.
fn message_id(agent: Agent, event: &PromptEvent, info: &MountInfo, timeout: Duration) -> Result<Option<String>> {
    let id = match agent {
        Agent::Claude | Agent::Codex => event.prompt_id.clone(),
        Agent::Gemini => match &event.session {
            Some(session) => {
                let rows = op::call(&info.socket, op::Checkpoints, timeout)?;
                Some(gemini_id(session, rows.iter().filter_map(|c| c.message_id.as_deref())))
            }
            None => None,
        },
    };
    Ok(id.filter(|id| match check_message_id(id) {
        Ok(()) => true,
        Err(e) => {
            log::warn!("hook {}: no message id for this prompt: {e}", agent.name());
            false
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::gemini_id;

    /// A seal refuses a message id that is a prefix of
    /// another, so the tenth prompt of a session must not begin with the
    /// first's id.
    #[test]
    fn gemini_ids_are_numbered_without_one_being_a_prefix_of_another() {
        assert_eq!(gemini_id("s", std::iter::empty()), "s-000001");
        assert_eq!(gemini_id("s", ["s-000009", "t-000020", "s-3"].into_iter()), "s-000010");
        // Older, unpadded ids of the session are counted.
        assert_eq!(gemini_id("s", ["s-1", "s-12"].into_iter()), "s-000013");
        let mut all: Vec<String> = Vec::new();
        for _ in 0..120 {
            let next = gemini_id("s", all.iter().map(String::as_str));
            assert!(!all.iter().any(|o| o.starts_with(&next) || next.starts_with(o.as_str())), "{next}");
            all.push(next);
        }
    }
}
