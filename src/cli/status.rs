//! `rewindfs status`: what is mounted where.

use std::time::Duration;

use crate::cli::StatusArgs;
use crate::cli::common;
use crate::daemon::control::{self, Request};
use crate::daemon::registry::{self, MountInfo};
use crate::error::{Error, Result};

fn query(info: &MountInfo) -> serde_json::Value {
    match control::call(&info.socket, &Request::Status, Duration::from_secs(10)) {
        Ok(r) if r.ok => r.data,
        Ok(r) => serde_json::json!({ "mountpoint": info.mountpoint, "error": r.error }),
        Err(e) => serde_json::json!({ "mountpoint": info.mountpoint, "error": e.to_string() }),
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
    let statuses: Vec<serde_json::Value> = infos.iter().map(query).collect();
    if args.json {
        let out = if args.mount.is_some() && statuses.len() == 1 {
            statuses[0].clone()
        } else {
            serde_json::Value::Array(statuses)
        };
        println!("{}", serde_json::to_string_pretty(&out).map_err(|e| Error::Daemon(e.to_string()))?);
        return Ok(());
    }
    if statuses.is_empty() {
        println!("no rewindfs mounts");
        return Ok(());
    }
    for s in statuses {
        if let Some(err) = s.get("error").and_then(|e| e.as_str()) {
            println!("{}: daemon not answering: {err}", s["mountpoint"].as_str().unwrap_or("?"));
            continue;
        }
        let str_of = |k: &str| s.get(k).and_then(|v| v.as_str()).unwrap_or("?").to_string();
        let mode = if s["in_place"].as_bool() == Some(true) {
            " (in place)".to_string()
        } else {
            format!(" (workspace {})", str_of("workspace"))
        };
        println!("{}{mode}", str_of("mountpoint"));
        println!("  store:       {}", str_of("store"));
        println!("  daemon pid:  {}", s["pid"]);
        println!("  uptime:      {}s", s["uptime_secs"]);
        println!("  passthrough: {}", if s["passthrough"].as_bool() == Some(true) { "on" } else { "off" });
        let message = s["message_id"].as_str().map(|m| format!(" (message {m})")).unwrap_or_default();
        println!("  turn:        {}{message}, {} changes recorded", s["turn"], s["turn_changes"]);
        match s["pending_files"].as_u64() {
            Some(0) | None => {}
            Some(n) => println!("  settling:    {n} rewound files still being written to the workspace"),
        }
    }
    Ok(())
}
