//! Processes already inside a directory, found through /proc as `fuser -m`
//! does. A process whose working directory or open files are inside a
//! workspace when it is mounted in place keeps using the directory under
//! the mount: its changes are never recorded and cannot be rewound.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// One process and how it is inside the directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occupant {
    pub pid: u32,
    pub command: String,
    /// "working directory", "root directory" or "open file <path>".
    pub how: String,
}

/// Every process (but those in `except`) whose working directory, root or
/// open descriptors are inside `dir`. Processes whose /proc entries cannot
/// be read (gone, or another user's without privilege) are skipped.
pub fn inside(dir: &Path, except: &HashSet<u32>) -> Vec<Occupant> {
    let Ok(procs) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut out = Vec::new();
    for entry in procs.filter_map(|e| e.ok()) {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if except.contains(&pid) {
            continue;
        }
        let base = entry.path();
        let command = std::fs::read_to_string(base.join("comm")).map(|s| s.trim().to_string()).unwrap_or_default();
        let mut found = |how: String| out.push(Occupant { pid, command: command.clone(), how });
        for (link, how) in [("cwd", "working directory"), ("root", "root directory")] {
            if points_inside(&base.join(link), dir) {
                found(how.to_string());
            }
        }
        let Ok(fds) = std::fs::read_dir(base.join("fd")) else { continue };
        for fd in fds.filter_map(|e| e.ok()) {
            if let Ok(target) = std::fs::read_link(fd.path())
                && target.starts_with(dir)
            {
                found(format!("open file {}", target.display()));
                // One open file is enough to name the process.
                break;
            }
        }
    }
    out
}

fn points_inside(link: &Path, dir: &Path) -> bool {
    std::fs::read_link(link).is_ok_and(|t: PathBuf| t.starts_with(dir))
}

/// This process and its ancestors: the shell that waits for `rewindfs run`
/// does not use the workspace while the command runs.
pub fn self_and_ancestors() -> HashSet<u32> {
    let mut out = HashSet::new();
    let mut pid = std::process::id();
    while pid > 1 && out.insert(pid) {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { break };
        // The command name (field 2) is in parentheses and may hold spaces.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else { break };
        match after.split_whitespace().nth(1).and_then(|s| s.parse::<u32>().ok()) {
            Some(ppid) => pid = ppid,
            None => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_child_working_inside_and_not_the_excepted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let dir = dir.path().canonicalize().expect("canonical");
        let mut child = std::process::Command::new("sleep").arg("30").current_dir(&dir).spawn().expect("sleep");
        let pid = child.id();
        // Until the child has exec'd, /proc shows the test's own name.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|c| c.trim() != "sleep").unwrap_or(true) {
            assert!(std::time::Instant::now() < deadline, "sleep did not start");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let found = inside(&dir, &HashSet::new());
        let excepted = inside(&dir, &HashSet::from([pid]));
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            found.iter().any(|o| o.pid == pid && o.how == "working directory" && o.command == "sleep"),
            "sleep in {} not found: {found:?}",
            dir.display()
        );
        assert!(!excepted.iter().any(|o| o.pid == pid), "an excepted pid was listed: {excepted:?}");
    }

    #[test]
    fn ancestors_include_this_process_and_its_parent() {
        let me = self_and_ancestors();
        assert!(me.contains(&std::process::id()));
        assert!(me.len() >= 2, "no parent found: {me:?}");
    }
}
