//! A change of the tree that is a turn of its own: a restore, a rewind, or
//! the put-back of files an unmount cannot settle. Each is atomic for
//! everyone else and can be undone, and each takes the same steps, which
//! are written once here: the tree frozen; what was recorded meanwhile
//! checked again; the state before it sealed (the checkpoint that undoes
//! it); each change noted as an intent before it is made (the next mount
//! completes one a crash interrupted, `rewind/recovery.rs`); the result
//! sealed; the intents ended; the kernel told what changed before anyone
//! sees the tree. A caller says only what it changes.

use crate::error::{AsErrno, Failure};
use crate::journal::TurnInfo;
use crate::meta::{IntentOp, Reason};
use crate::world::Touched;
use crate::world::{Frozen, HistoryOp, Thawed};

use super::{Ctx, seal};

/// A frozen tree with its "before" checkpoint sealed; the changes go in
/// [`Transaction::change`] and it ends with [`Transaction::commit`].
/// Dropped on any other error, it tells the kernel what the part done
/// changed and leaves its intents for the next mount to complete.
pub(super) struct Transaction<'h> {
    ctx: &'h Ctx,
    frozen: Frozen<'h>,
    /// The checkpoint sealed before anything changed: what undoes it.
    pub before: i64,
    intents: Vec<i64>,
}

impl<'h> Transaction<'h> {
    /// Freezes the tree, runs `check` frozen (what was recorded since the
    /// caller checked unfrozen), then seals the state before the change
    /// with the label `before`.
    pub fn begin(
        ctx: &'h Ctx,
        history: &'h HistoryOp<'_>,
        check: impl FnOnce() -> Result<(), Failure>,
        before: String,
    ) -> Result<Transaction<'h>, Failure> {
        let frozen = history.freeze(&ctx.invalidator);
        check()?;
        let before = seal(ctx, &TurnInfo { label: Some(before), ..Default::default() }, Reason::Turn)?;
        Ok(Transaction { ctx, frozen, before, intents: Vec::new() })
    }

    /// Notes, durably, that `op` to checkpoint `checkpoint` (of `paths`, or
    /// the whole tree) is about to change the tree.
    pub fn intend(&mut self, op: IntentOp, checkpoint: i64, paths: &[Vec<u8>]) -> Result<(), Failure> {
        let id = self.ctx.journal.begin_intent(op, checkpoint, self.before, paths).map_err(|e| {
            Failure::failed(e.errno().0, format!("cannot record what is about to change ({e}); nothing was changed"))
        })?;
        self.intents.push(id);
        Ok(())
    }

    /// Makes one change, with `phase` the name the fault hooks know it by.
    /// A failure is the caller's to word (with the undo, `before`): the
    /// intents end, so none is left for the next mount to finish.
    pub fn change<T, E>(&mut self, phase: &'static str, f: impl FnOnce(&mut Touched) -> Result<T, E>) -> Result<T, E> {
        crate::faults::phase(Some(phase));
        let changed = f(self.frozen.touched());
        crate::faults::phase(None);
        if changed.is_err() {
            self.end_intents();
        }
        changed
    }

    /// Seals the result with `seal`, ends the intents and thaws the tree
    /// (the kernel forgets what changed first). A seal that fails is
    /// reported; the tree has changed whole either way, so no intent is
    /// left for the next mount.
    pub fn commit(mut self, seal: impl FnOnce() -> Result<i64, Failure>) -> Result<(i64, Thawed), Failure> {
        crate::faults::hold_frozen();
        let sealed = seal();
        self.end_intents();
        let Transaction { frozen, .. } = self;
        let thawed = frozen.thaw();
        Ok((sealed?, thawed))
    }

    /// The operation is over (its result sealed, or its failure reported).
    /// If this fails, the next mount finds the result sealed and only ends it.
    fn end_intents(&mut self) {
        for id in self.intents.drain(..) {
            if let Err(e) = self.ctx.journal.end_intent(id) {
                log::warn!("cannot clear the intent of a finished operation ({e}); the next mount will");
            }
        }
    }
}
