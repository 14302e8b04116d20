//! `rewindfs snapshot`, `forget` and `gc`: naming checkpoints and bounding
//! the history (`journal/retention.rs`).

use crate::cli::common;
use crate::cli::{ForgetArgs, GcArgs, ResetArgs, SnapshotArgs};
use crate::daemon::control as op;
use crate::error::{Error, ErrorKind, Result};
use crate::journal::retention::Collected;
use crate::text::human_bytes;
use crate::text::quote;

pub fn snapshot(args: SnapshotArgs) -> Result<()> {
    let info = common::find_mount(args.target.mount.as_deref())?;
    let at = args.at.map(|a| common::reference(&info, a)).transpose()?;
    let reply = common::ask(&info, op::Snapshot { name: args.name, message: args.message, at })?;
    if args.target.json {
        return common::print_json(&reply);
    }
    let how = if reply.sealed { "sealed and named" } else { "named" };
    outln!("checkpoint {} {how} {}", reply.checkpoint, quote(&reply.name));
    Ok(())
}

pub fn forget(args: ForgetArgs) -> Result<()> {
    let info = common::find_mount(args.target.mount.as_deref())?;
    let checkpoints = args.checkpoints.into_iter().map(|c| common::reference(&info, c)).collect::<Result<Vec<_>>>()?;
    let forget = op::Forget { checkpoints, dry_run: args.dry_run };
    let reply = common::ask_showing(&info, forget, "forgetting", args.target.json)?;
    if args.target.json {
        return common::print_json(&reply);
    }
    print_collected(&reply);
    Ok(())
}

pub fn gc(args: GcArgs) -> Result<()> {
    let info = common::find_mount(args.target.mount.as_deref())?;
    let gc = op::Gc { dry_run: args.dry_run, keep_count: args.keep_count, keep_days: args.keep_days, auto: args.auto };
    let reply = common::ask_showing(&info, gc, "collecting", args.target.json)?;
    if args.target.json {
        return common::print_json(&reply);
    }
    let p = &reply.policy;
    outln!(
        "policy: keep the newest {} checkpoints, all younger than {} days, named snapshots, the last {} rewinds' safety checkpoints; background collection {}",
        p.keep_count,
        p.keep_days,
        p.keep_rewinds,
        if p.auto { "on" } else { "off" }
    );
    print_collected(&reply.collected);
    let k = &reply.compacted;
    if k.packs > 0 {
        outln!(
            "compacted {} packs: {} bytes back on disk ({} live chunks copied)",
            k.packs,
            k.bytes_reclaimed,
            k.records
        );
    }
    Ok(())
}

pub fn reset(args: ResetArgs) -> Result<()> {
    if !args.confirm {
        return Err(Error::kind_of(ErrorKind::Usage, crate::daemon::RESET_UNCONFIRMED));
    }
    let info = common::find_mount(args.target.mount.as_deref())?;
    let reply = common::ask_showing(&info, op::Reset { confirm: true }, "deleting the history", args.target.json)?;
    if args.target.json {
        return common::print_json(&reply);
    }
    let c = &reply.collected;
    outln!(
        "history reset: {} checkpoints deleted, {} chunks ({}) and {} attic entries ({}) freed",
        c.forgotten.len(),
        c.chunks_freed,
        human_bytes(c.bytes_freed),
        c.attic_files_freed,
        human_bytes(c.attic_bytes_freed)
    );
    if reply.compacted.packs > 0 {
        outln!(
            "compacted {} packs: {} back on disk",
            reply.compacted.packs,
            human_bytes(reply.compacted.bytes_reclaimed)
        );
    }
    outln!("checkpoint {} is the workspace as it is now; nothing before it can be brought back", reply.checkpoint);
    Ok(())
}

fn print_collected(c: &Collected) {
    if c.forgotten.is_empty() {
        outln!("nothing to collect");
        return;
    }
    let list: Vec<String> = c.forgotten.iter().map(|n| n.to_string()).collect();
    let (forget, drop, free) =
        if c.dry_run { ("would forget", "would drop", "would free") } else { ("forgot", "dropped", "freed") };
    outln!("{forget} checkpoints {}", list.join(", "));
    outln!(
        "{drop} {} records ({} moved into the kept turns before them); {free} {} chunks ({} bytes)",
        c.records_dropped,
        c.records_moved,
        c.chunks_freed,
        c.bytes_freed
    );
    if c.attic_files_freed > 0 {
        outln!("{free} {} removed files in the attic ({} bytes)", c.attic_files_freed, c.attic_bytes_freed);
    }
}
