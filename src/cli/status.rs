//! `rewindfs status`: what is mounted where.

use std::time::Duration;

use crate::cli::StatusArgs;
use crate::cli::common;
use crate::daemon::control::{self, StatusReply};
use crate::daemon::registry::{self, MountInfo};
use crate::error::Result;

/// One mount's line in `status`: its daemon's answer, or why there is none.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum Entry {
    Answered(Box<StatusReply>),
    Silent { mountpoint: std::path::PathBuf, error: String },
}

fn query(info: &MountInfo) -> Entry {
    match control::call(&info.socket, control::Status, Duration::from_secs(10)) {
        Ok(r) => Entry::Answered(Box::new(r)),
        Err(e) => Entry::Silent { mountpoint: info.mountpoint.clone(), error: e.to_string() },
    }
}

pub fn run(args: StatusArgs) -> Result<()> {
    let infos: Vec<MountInfo> = match &args.mount {
        Some(m) => vec![common::find_mount(Some(m))?],
        None => match common::find_mount(None) {
            Ok(info) => vec![info],
            Err(_) => registry::list().into_iter().filter(|i| crate::sys::process_alive(i.pid)).collect(),
        },
    };
    let statuses: Vec<Entry> = infos.iter().map(query).collect();
    if args.json {
        return match statuses.as_slice() {
            [one] if args.mount.is_some() => common::print_json(one),
            all => common::print_json(&all),
        };
    }
    if statuses.is_empty() {
        outln!("no rewindfs mounts (`rewindfs stores` lists the stores of unmounted workspaces)");
        return Ok(());
    }
    for s in statuses {
        let s = match s {
            Entry::Silent { mountpoint, error } => {
                outln!("{}: daemon not answering: {error}", mountpoint.display());
                continue;
            }
            Entry::Answered(s) => s,
        };
        let m = &s.mount;
        let mode =
            if m.in_place { " (in place)".to_string() } else { format!(" (workspace {})", m.workspace.display()) };
        outln!("{}{mode}", m.mountpoint.display());
        if let Some(why) = &s.failure {
            outln!("  READ-ONLY:   {why}; changes are refused until it is unmounted and mounted again");
        }
        outln!("  store:       {}", m.store.display());
        outln!("  daemon pid:  {}", m.pid);
        outln!("  uptime:      {}s", s.uptime_secs);
        outln!("  passthrough: {}", if m.passthrough { "on" } else { "off" });
        if !s.transport.transport.is_empty() {
            outln!("  transport:   {}", transport_line(&s.transport));
        }
        for v in &s.views {
            outln!(
                "  view:        checkpoint {} on {}, {}",
                v.checkpoint,
                crate::text::quote_name(&v.mountpoint),
                transport_line(&v.transport)
            );
        }
        let message =
            s.message_id.as_ref().map(|m| format!(" (message {})", crate::text::quote(m))).unwrap_or_default();
        match s.turn {
            Some(turn) => outln!("  turn:        {turn}{message}, {} changes recorded", s.turn_changes),
            None => outln!("  turn:        unknown (the journal is not read after the failure above)"),
        }
        for r in &m.recovered {
            outln!("  {}", r.message);
        }
        if s.pending_files > 0 {
            outln!("  settling:    {} rewound files still being written to the workspace", s.pending_files);
        }
        for u in &s.unsettled {
            outln!("  cannot settle: {} ({})", crate::text::quote(&u.path), u.reason);
        }
        if let Some(p) = &s.retention {
            outln!(
                "  retention:   keep the newest {} checkpoints, all younger than {} days, named snapshots, \
                 the safety checkpoints of the last {} rewinds",
                p.keep_count,
                p.keep_days,
                p.keep_rewinds
            );
            let last = match &s.auto_gc {
                Some(r) => format!(
                    "last ran {}: forgot {} checkpoints, freed {} and {} attic files, {} back on disk; \
                     writes waited at most {:.1} ms",
                    crate::text::rfc3339(r.at),
                    r.forgotten,
                    crate::text::human_bytes(r.bytes_freed),
                    r.attic_files_freed,
                    crate::text::human_bytes(r.bytes_reclaimed),
                    r.longest_slice_ms
                ),
                None => "has not run yet".to_string(),
            };
            outln!("  auto gc:     {}; {last}", if p.auto { "on" } else { "off" });
            if s.auto_gc_running {
                outln!("               a background collection is under way");
            }
        }
        if !s.snapshots.is_empty() {
            let names: Vec<String> =
                s.snapshots.iter().map(|n| format!("{} ({})", crate::text::quote(&n.name), n.checkpoint)).collect();
            outln!("  snapshots:   {}", names.join(", "));
        }
        if let Some(r) = &s.remote {
            outln!("  remote:      {}", crate::cli::remote::status_line(r));
        }
    }
    Ok(())
}

/// "uring (N requests served on the rings)", "classic", or why the rings stopped.
fn transport_line(t: &crate::fs::TransportReport) -> String {
    match &t.ring_error {
        Some(e) => format!("{} (io_uring stopped: {e})", t.transport),
        None if t.transport == "uring" => format!("uring ({} requests served on the rings)", t.ring_requests),
        None => t.transport.clone(),
    }
}
