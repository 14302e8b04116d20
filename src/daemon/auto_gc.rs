//! Collection in the background, when the stored policy says so (issue
//! 15): after a seal, once the policy lets [`AUTO_BATCH`] checkpoints go.
//!
//! It never holds anything long. Each slice takes the history lock (so it
//! never runs inside a rewind, restore or `turn`, and waits for them) and
//! forgets one checkpoint in short steps (`journal/retention.rs`): one
//! transaction takes the checkpoint out of view, each next one merges a
//! bounded batch of its records, each step freeing chunks lists and
//! releases a bounded number. Only those steps hold the turn gate
//! exclusively, which is what a recording FUSE operation waits for (the
//! slice's longest step is logged at debug level, the longest of a run kept
//! for `status`). Between slices the locks are free and the thread pauses.
//! The compaction that follows takes the chunk store's writer for one
//! copied record at a time (and the final index swap), so a capture waits
//! at most that long; reads never wait.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use log::{debug, info, warn};

use super::Ctx;
use crate::journal::retention::{AUTO_BATCH, AutoRun};

/// How often the thread looks for a new seal.
const TICK: Duration = Duration::from_millis(500);
/// The pause between two slices: writers waiting on the gate go first.
const PAUSE: Duration = Duration::from_millis(20);

pub(super) fn spawn(ctx: Arc<Ctx>) {
    let _ = super::spawn_guarded("auto-gc", ctx.ws.journal().clone(), move || {
        let mut seen = None;
        loop {
            std::thread::sleep(TICK);
            let turn = ctx.ws.journal().current_turn();
            if seen == Some(turn) {
                continue;
            }
            let _running = Running::set(&ctx.auto_gc_running);
            match due(&ctx) {
                Ok(false) => {}
                Ok(true) => match run(&ctx) {
                    Ok(r) => info!(
                        "background collection: {} checkpoints forgotten, {} bytes freed in {} slices (longest {:.1} ms)",
                        r.forgotten, r.bytes_freed, r.slices, r.longest_slice_ms
                    ),
                    Err(e) => warn!("background collection stopped: {e}"),
                },
                Err(e) => warn!("cannot plan a background collection: {e}"),
            }
            seen = Some(turn);
        }
    });
}

/// Marks the background collection as planning or running (for `status`)
/// until dropped, a panic included.
struct Running<'a>(&'a AtomicBool);

impl<'a> Running<'a> {
    fn set(flag: &'a AtomicBool) -> Running<'a> {
        flag.store(true, Ordering::SeqCst);
        Running(flag)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// Whether the policy is on and lets at least a batch go.
fn due(ctx: &Ctx) -> crate::journal::JournalResult<bool> {
    let policy = ctx.ws.journal().policy()?;
    Ok(policy.auto && ctx.ws.journal().plan_retention(&policy)?.len() >= AUTO_BATCH)
}

/// Forgets what the policy lets go, one checkpoint per slice, then
/// compacts; notes what it did for `status`.
fn run(ctx: &Ctx) -> crate::journal::JournalResult<AutoRun> {
    let journal = &**ctx.ws.journal();
    let mut out = AutoRun::default();
    let attic = |id, handle: &[u8], dry| ctx.ws.tree().attic().remove_unreachable_stored(id, handle, dry);
    loop {
        let Some(history) = ctx.ws.try_history() else {
            std::thread::sleep(PAUSE);
            continue;
        };
        // Planned again each slice: a name or a rewind in between may
        // protect what was a victim.
        let policy = journal.policy()?;
        if !policy.auto {
            break;
        }
        let Some(&victim) = journal.plan_retention(&policy)?.first() else { break };
        let started = Instant::now();
        let hide =
            |n, message: Option<&str>, begin: &mut dyn FnMut()| ctx.ws.hide_checkpoint(&history, n, message, begin);
        let c = journal.collect(&[victim], "retention", false, &attic, Some(&ctx.info.store.join("attic")), &hide)?;
        debug!(
            "background slice: checkpoint {victim} forgotten, turn gate held {:.2} ms at most, slice {:.2} ms",
            c.gate_ms,
            started.elapsed().as_secs_f64() * 1000.0
        );
        out.slices += 1;
        out.longest_slice_ms = out.longest_slice_ms.max(c.gate_ms);
        out.forgotten += c.forgotten.len() as u64;
        out.chunks_freed += c.chunks_freed;
        out.bytes_freed += c.bytes_freed;
        out.attic_files_freed += c.attic_files_freed;
        drop(history);
        std::thread::sleep(PAUSE);
    }
    if out.chunks_freed > 0 {
        let _history = ctx.ws.history();
        out.bytes_reclaimed = journal.compact()?.bytes_reclaimed;
        journal.shrink();
    }
    out.at = crate::journal::retention::now_ms();
    journal.set_last_auto(&out)?;
    Ok(out)
}
