//! Processes already inside a directory, found through /proc as `fuser -m`
//! does. A process whose working directory, open files or shared mappings
//! are inside a workspace when it is mounted in place keeps using the
//! directory under the mount: its changes are never recorded and cannot be
//! rewound. A shared mapping outlives the descriptor it was made from, so
//! a process that mapped a file and closed it writes the file with nothing
//! else left to show it.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// One process and how it is inside the directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occupant {
    pub pid: u32,
    pub command: String,
    /// "working directory", "root directory", "open file <path>" or
    /// "shared mapping of <path>".
    pub how: String,
}

/// Every process (but those in `except`) whose working directory, root,
/// open descriptors or shared mappings are inside `dir`. Processes whose /proc entries cannot
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
        if let Ok(fds) = std::fs::read_dir(base.join("fd")) {
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
        if let Some(mapped) = std::fs::read_to_string(base.join("maps")).ok().and_then(|m| shared_mapping_in(&m, dir)) {
            found(format!("shared mapping of {}", mapped.display()));
        }
    }
    out
}

/// The first file inside `dir` that a `/proc/PID/maps` listing maps
/// shared: a write through it reaches the file without a system call.
/// Private mappings are left out (their writes are the process's own
/// copy), but not shared read-only ones, which `mprotect` can make
/// writable.
fn shared_mapping_in(maps: &str, dir: &Path) -> Option<PathBuf> {
    maps.lines().find_map(|line| {
        // address perms offset dev inode pathname (which may hold spaces)
        let mut rest = line;
        let mut fields = Vec::with_capacity(5);
        for _ in 0..5 {
            rest = rest.trim_start();
            let end = rest.find(char::is_whitespace)?;
            fields.push(&rest[..end]);
            rest = &rest[end..];
        }
        let path = Path::new(rest.trim_start());
        (fields[1].ends_with('s') && path.starts_with(dir)).then(|| path.to_path_buf())
    })
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
    fn a_shared_mapping_inside_is_found_and_a_private_one_is_not() {
        let maps = "55d0-55d1 r-xp 00000000 fd:00 12 /usr/bin/python3\n\
                    7f00-7f01 rw-p 00000000 fd:00 13 /ws/private map\n\
                    7f02-7f03 rw-s 00000000 fd:00 14 /ws/with space\n";
        assert_eq!(shared_mapping_in(maps, Path::new("/ws")), Some(PathBuf::from("/ws/with space")));
        assert_eq!(shared_mapping_in(maps, Path::new("/elsewhere")), None);
        let private = "7f00-7f01 rw-p 00000000 fd:00 13 /ws/f\n";
        assert_eq!(shared_mapping_in(private, Path::new("/ws")), None);
    }

    #[test]
    fn finds_a_process_whose_only_tie_is_a_shared_mapping() {
        let dir = tempfile::tempdir().expect("tempdir");
        let dir = dir.path().canonicalize().expect("canonical");
        let file = dir.join("mapped");
        std::fs::write(&file, b"0123456789").expect("write");
        // Maps the file shared, closes it and leaves the directory: only
        // the mapping is left inside.
        let code = "import mmap, os, sys, time\n\
                    f = open(sys.argv[1], 'r+b'); m = mmap.mmap(f.fileno(), 0); f.close()\n\
                    os.chdir('/'); print('ready', flush=True); time.sleep(30)\n";
        let mut child = std::process::Command::new("python3")
            .args(["-c", code])
            .arg(&file)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        use std::io::BufRead;
        let _ = std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line);
        let found = inside(&dir, &HashSet::new());
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(line.trim(), "ready", "the mapping process did not start");
        assert!(
            found.iter().any(|o| o.pid == child.id() && o.how == format!("shared mapping of {}", file.display())),
            "the process mapping {} was not found: {found:?}",
            file.display()
        );
    }

    #[test]
    fn ancestors_include_this_process_and_its_parent() {
        let me = self_and_ancestors();
        assert!(me.contains(&std::process::id()));
        assert!(me.len() >= 2, "no parent found: {me:?}");
    }
}
