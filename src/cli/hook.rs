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

/// Seals the checkpoint of one prompt; None when the directory is in no
/// mount.
fn checkpoint(agent: Agent, event: &PromptEvent) -> Result<i64> {
    let info = common::find_mount(Some(&event.cwd))?;
    let message_id = message_id(agent, event, &info)?;
    let turn = TurnInfo { message_id, session: event.session.clone(), label: event.label.clone() };
    // What is left of the deadline, less a margin to report a timeout.
    let reply = turn::seal(&info, turn, HOOK_DEADLINE.saturating_sub(Duration::from_millis(500)))?;
    Ok(reply.checkpoint)
}

/// The message id of a prompt: the agent's own prompt id when it is a
/// valid one.
fn message_id(agent: Agent, event: &PromptEvent, _info: &MountInfo) -> Result<Option<String>> {
    let valid = |id: &String| match check_message_id(id) {
        Ok(()) => true,
        Err(e) => {
            log::warn!("hook {}: the prompt id is not used as a message id: {e}", agent.name());
            false
        }
    };
    Ok(event.prompt_id.clone().filter(valid))
}
