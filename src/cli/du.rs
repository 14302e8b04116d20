//! `rewindfs du`: where the store's bytes are.

use crate::cli::DuArgs;
use crate::cli::common;
use crate::cli::offline::{self, Source};
use crate::daemon::control as op;
use crate::error::Result;
use crate::text::human_bytes as bytes;

pub fn run(args: DuArgs) -> Result<i32> {
    if let Some(remote) = &args.remote {
        return crate::cli::remote::du(remote, args.target.json);
    }
    run_local(args).map(|()| 0)
}

fn run_local(args: DuArgs) -> Result<()> {
    let (d, store) = match offline::mount_or_store(args.target.mount.as_deref(), "du is")? {
        Source::Mounted(info) => (common::ask(&info, op::Du)?, info.store),
        Source::Store(o) => {
            let attic = |id, handle: &[u8], _| o.ws.tree().attic().remove_unreachable_stored(id, handle, true);
            let d = crate::journal::retention::du(o.ws.journal(), &attic, &o.info.store)
                .map_err(|e| crate::error::Error::Daemon(e.to_string()))?;
            (d, o.info.store.clone())
        }
    };
    if args.target.json {
        return common::print_json(&d);
    }
    outln!("on disk:     {} in {}", bytes(d.disk_bytes), store.display());
    outln!(
        "  packs:     {} ({} live; the rest is released, for compaction)",
        bytes(d.packs_bytes),
        bytes(d.packs_live_bytes)
    );
    outln!("  index:     {}", bytes(d.index_bytes));
    outln!("  metadata:  {}", bytes(d.metadata_bytes));
    outln!("  attic:     {} in {} removed files and directories", bytes(d.attic_bytes), d.attic_entries);
    outln!(
        "content:     {} recorded, {} unique in {} chunks ({:.2}x dedup), {} stored ({:.2}x compression)",
        bytes(d.logical_bytes),
        bytes(d.unique_bytes),
        d.chunks,
        d.dedup_ratio,
        bytes(d.stored_bytes),
        d.compression_ratio
    );
    let g = &d.gc_would_free;
    outln!(
        "gc would forget {} checkpoints and free {} in {} chunks and {} in {} attic files",
        g.forgotten.len(),
        bytes(g.bytes_freed),
        g.chunks_freed,
        bytes(g.attic_bytes_freed),
        g.attic_files_freed
    );
    if args.turns {
        outln!("{:>6}  {:>8}  content", "turn", "records");
        for t in &d.turns {
            outln!("{:>6}  {:>8}  {}", t.checkpoint, t.records, bytes(t.content_bytes));
        }
    }
    Ok(())
}
