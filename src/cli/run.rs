//! `rewindfs run`: mount in place, run a command inside, unmount after.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use log::warn;

use crate::cli::RunArgs;
use crate::cli::agents::{self, Agent};
use crate::cli::common;
use crate::cli::hooks;
use crate::cli::safe_file;
use crate::cli::unmount;
use crate::error::{Error, Result};
use crate::sys;

/// A short demonstration run when no workspace is given: each command is
/// shown before its output, with a sentence on what it shows, and it ends
/// with what to try next. `run` removes the workspace and its store after.
const DEMO_SCRIPT: &str = r#"set -e
R="${REWINDFS:-rewindfs}"
rewindfs() { "$R" "$@"; }
say() { printf '\n# %s\n' "$*"; }
run() { printf '$ %s\n' "$1"; eval "$1"; }
say "A scratch workspace, mounted in place by rewindfs: $(pwd)"
run "ls"
say "A coding agent's prompt hook seals a checkpoint before each prompt; here by hand:"
run "rewindfs turn --message-id prompt-1 --label 'Edit, build and clean up'"
say "The agent edits, builds and deletes, with its own tools or shell commands: all of it is recorded."
run "echo 'print(\"hello from the agent\")' > hello.py"
run "mkdir -p build && for i in 1 2 3; do echo \"object \$i\" > build/obj\$i.o; done"
run "sed -i 's/hello world/hello rewindfs/' README.txt"
run "rm old-notes.txt"
run "rewindfs turn --message-id prompt-2 --label 'The next prompt'"
say "One row per checkpoint; row prompt-1 is what that prompt changed:"
run "rewindfs log"
run "rewindfs diff --stat prompt-1 prompt-2"
say "The past, as a plain read-only folder: $(pwd)/.rewindfs/messages/prompt-1/ (and .rewindfs/checkpoints/N/)"
run "ls .rewindfs/messages/prompt-1/"
run "cat .rewindfs/messages/prompt-1/README.txt"
say "Rewind the whole tree to before prompt-1; the rewind itself can be undone:"
run "rewindfs rewind --dry-run prompt-1"
run "rewindfs rewind prompt-1"
run "ls"
run "rewindfs log --graph"
say "Try it on your own project, with your agent (claude, gemini or codex):"
echo "  mount-scripts/rewindfs-run ~/project -- claude     (rewindfs run ~/project -- claude once it is on PATH)"
echo "  then, in ~/project: rewindfs log; rewindfs rewind (a list of the prompts to pick from); ls .rewindfs/messages/"
echo "  more in README.md and docs/cli.md"
"#;

/// A new scratch directory in the temporary directory, which anyone may
/// write: under a name nobody can guess and made here (an existing name,
/// or a symlink planted at it, fails and another is tried), so the files
/// written in it are root's own.
fn demo_workspace() -> Result<PathBuf> {
    let made = (0..16).find_map(|salt| {
        let dir = std::env::temp_dir().join(format!("rewindfs-demo-{:016x}", crate::restore::random_u64(salt)));
        match std::fs::DirBuilder::new().create(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => None,
            other => Some(other.map(|()| dir).map_err(|e| Error::io("cannot create a demo workspace", e))),
        }
    });
    let dir = made.unwrap_or_else(|| Err(Error::Usage("cannot find a free name for a demo workspace".into())))?;
    std::fs::write(dir.join("README.txt"), "hello world\n").map_err(|e| Error::io("cannot write demo file", e))?;
    std::fs::write(dir.join("old-notes.txt"), "to be deleted\n").map_err(|e| Error::io("cannot write demo file", e))?;
    Ok(dir)
}

pub fn run(mut args: RunArgs) -> Result<i32> {
    if let Some(user) = &args.as_user {
        if args.opts.agent_user.as_ref().is_some_and(|a| a != user) {
            return Err(Error::Usage("--as and --agent-user name different users".into()));
        }
        args.opts.agent_user = Some(user.clone());
    }
    let run_as = args.as_user.as_deref().map(common::user_ids).transpose()?;
    let mut demo = false;
    let (workspace, command) = match args.workspace {
        Some(ws) => {
            let cmd = if args.command.is_empty() {
                vec![std::env::var_os("SHELL").unwrap_or_else(|| "/bin/sh".into())]
            } else {
                args.command
            };
            (ws, cmd)
        }
        None => {
            let ws = demo_workspace()?;
            eprintln!("rewindfs: no workspace given; running a demo on scratch workspace {}", ws.display());
            demo = args.command.is_empty();
            let cmd = if demo { vec!["sh".into(), "-c".into(), DEMO_SCRIPT.into()] } else { args.command };
            (ws, cmd)
        }
    };
    let mut command = command;
    // The demo names agents only in what it prints.
    let found = if demo { None } else { agent_of(&command, args.agent.as_deref())? };
    let wiring = match found {
        Some(found) => wire_agent(&mut command, &workspace, found),
        None => Wiring::default(),
    };
    let spec = common::prepare(&workspace, None, &args.opts)?;
    // The shell that started `run` waits for it; the command itself starts
    // inside the mount.
    common::refuse_occupied(&spec, &crate::cli::occupants::self_and_ancestors())?;
    let info = common::spawn_daemon(&spec)?;
    eprintln!("rewindfs: mounted {} in place (daemon pid {})", info.workspace.display(), info.pid);
    common::print_recovered(&info);

    // From here on, whatever happens, unmount before returning.
    sys::signals::install();
    let status = run_child(&command, &info.mountpoint, run_as, &wiring.env);
    if let Some(temp) = &wiring.temp {
        let _ = std::fs::remove_file(temp);
    }
    let unmounted = unmount_when_idle(&info.mountpoint);
    let code = status?;
    unmounted?;
    eprintln!("rewindfs: unmounted {}", info.mountpoint.display());
    if demo {
        // The demo's workspace and history are of no use after it.
        for dir in [&spec.workspace, &spec.store] {
            if let Err(e) = std::fs::remove_dir_all(dir) {
                warn!("cannot remove the demo's {}: {e}", dir.display());
            }
        }
        eprintln!("rewindfs: removed the demo workspace {} and its store", spec.workspace.display());
    }
    Ok(code)
}

/// Which agent COMMAND starts, and where its options go: the program
/// itself, or the one `env` runs (past its options and assignments);
/// `declared` (`--agent`) says it for a wrapper script, whose options are
/// then put right after it (it must pass them on). A command line that
/// names an agent it cannot place is warned about, not wired.
fn agent_of(command: &[OsString], declared: Option<&str>) -> Result<Option<(Agent, usize)>> {
    let base = |a: &OsString| std::path::Path::new(a).file_name().map(|n| n.to_string_lossy().into_owned());
    let mut at = 0;
    if command.first().and_then(base).as_deref() == Some("env") {
        at = 1;
        while let Some(a) = command.get(at).map(|a| a.to_string_lossy()) {
            if matches!(a.as_ref(), "-u" | "--unset" | "-C" | "--chdir" | "-S" | "--split-string") {
                at += 2;
            } else if a.starts_with('-') || (a.contains('=') && !a.starts_with('=')) {
                at += 1;
            } else {
                break;
            }
        }
    }
    let program = command.get(at);
    match declared {
        Some("none") => return Ok(None),
        Some(name) => {
            let agent = Agent::ALL.into_iter().find(|a| a.name() == name).ok_or_else(|| {
                Error::Usage(format!("--agent {name:?}: the agents are claude, gemini and codex (or none)"))
            })?;
            return Ok(program.map(|_| (agent, at + 1)));
        }
        None => {}
    }
    if let Some(agent) = program.and_then(|p| p.to_str()).and_then(Agent::of_program) {
        return Ok(Some((agent, at + 1)));
    }
    let named = command.iter().find_map(|a| {
        let a = a.to_string_lossy().to_lowercase();
        Agent::ALL.into_iter().find(|g| a.contains(g.name()))
    });
    if let (Some(agent), Some(program)) = (named, program) {
        eprintln!(
            "rewindfs: warning: cannot tell whether {} starts {} (not its program's name), so its prompts are \
             not wired to checkpoints for this run; say which agent it starts with `rewindfs run --agent {} ...` \
             (a wrapper must pass its arguments on), or `--agent none`",
            crate::text::quote_name(program),
            agent.name(),
            agent.name()
        );
    }
    Ok(None)
}

/// What `run` adds to COMMAND so that a recognized agent calls our prompt
/// hook for this run, without touching the user's settings.
#[derive(Default)]
struct Wiring {
    env: Vec<(String, PathBuf)>,
    /// A settings file made for the run, removed after it.
    temp: Option<PathBuf>,
}

/// Claude Code takes extra settings with `--settings`, merged with the
/// user's own (when the user also installed the hook, the second call for
/// a prompt finds its checkpoint already sealed and changes nothing).
/// Codex takes our hook and its trust entry with `-c`, unless the user's
/// own (trusted) install already runs it.
/// Gemini CLI has no such flag: it reads its system settings from
/// GEMINI_CLI_SYSTEM_SETTINGS_PATH, so the run gets a copy of those with
/// the hook added, unless the user's or the project's settings already
/// hold it (Gemini's message ids count prompts: one call per prompt).
/// The options go right after the agent's program (`at`).
fn wire_agent(command: &mut Vec<OsString>, workspace: &std::path::Path, (agent, at): (Agent, usize)) -> Wiring {
    let Ok(exe) = std::env::current_exe() else { return Wiring::default() };
    let hook = agents::hook_command(&exe, agent);
    match agent {
        Agent::Claude => {
            if let Ok(json) = serde_json::to_string(&agents::run_settings(agent, &hook)) {
                command.splice(at..at, [OsString::from("--settings"), OsString::from(json)]);
            }
            Wiring::default()
        }
        // Codex takes config and hook state with `-c` (before a subcommand
        // such as `exec`, they hold for it too): our hook and its trust
        // entry, for this run only.
        Agent::Codex => {
            if !hooks::codex_wired(workspace) {
                command.splice(at..at, agents::codex::run_overrides(&hook).map(OsString::from));
            }
            Wiring::default()
        }
        Agent::Gemini => {
            let installed = [(agent.user_settings(), None), (Some(agent.project_settings(workspace)), Some(workspace))]
                .into_iter()
                .filter_map(|(f, project)| Some((f?, project)))
                .any(|(f, project)| {
                    hooks::read_settings(&f, project).is_ok_and(|(_, doc)| !agents::installed(&doc, agent).is_empty())
                });
            if installed {
                return Wiring::default();
            }
            const VAR: &str = "GEMINI_CLI_SYSTEM_SETTINGS_PATH";
            let system =
                std::env::var_os(VAR).map(PathBuf::from).unwrap_or_else(|| "/etc/gemini-cli/settings.json".into());
            let mut doc = hooks::read_settings(&system, None)
                .map(|(_, d)| d)
                .unwrap_or_else(|_| agents::Json::Obj(Default::default()));
            if let Err(why) = agents::install(&mut doc, agent, &hook) {
                warn!("cannot add the rewindfs hook to a copy of {}: {why}; gemini runs unwired", system.display());
                return Wiring::default();
            }
            let Some(dir) = private_dir() else {
                warn!("no directory that Gemini CLI trusts for system settings; gemini runs unwired");
                return Wiring::default();
            };
            let name = OsString::from(format!("rewindfs-gemini-{}.json", std::process::id()));
            let temp = dir.join(&name);
            // Readable by the agent's user, whom `--as` runs gemini as.
            let write = || -> Result<()> {
                let text = serde_json::to_string_pretty(&doc).map_err(std::io::Error::other);
                let text = text.map_err(|e| Error::io("cannot encode Gemini's settings", e))?;
                let opened = safe_file::Dir::open(&dir, &[], false)?;
                let opened = opened.ok_or_else(|| Error::path(&dir, "vanished"))?;
                Ok(opened.replace(&name, text.as_bytes(), 0o644)?)
            };
            match write() {
                Ok(()) => Wiring { env: vec![(VAR.to_string(), temp.clone())], temp: Some(temp) },
                Err(e) => {
                    warn!("cannot write {}: {e}; gemini runs unwired", temp.display());
                    Wiring::default()
                }
            }
        }
    }
}

/// A directory for a settings file that Gemini CLI will read: it skips
/// system settings below any directory writable by group or others (so
/// nothing under /tmp). Owned by root or us besides: its owner could plant
/// a symlink at our file's name.
fn private_dir() -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let secure = |d: &std::path::Path| {
        d.is_absolute()
            && d.ancestors().all(|a| {
                std::fs::metadata(a)
                    .is_ok_and(|m| m.is_dir() && m.mode() & 0o022 == 0 && (m.uid() == 0 || m.uid() == sys::geteuid()))
            })
    };
    let candidates = [
        std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from),
        (sys::geteuid() == 0).then(|| PathBuf::from("/run")),
        std::env::var_os("HOME").map(PathBuf::from),
    ];
    candidates.into_iter().flatten().find(|d| secure(d))
}

fn run_child(
    command: &[OsString],
    cwd: &std::path::Path,
    run_as: Option<(u32, u32)>,
    env: &[(String, PathBuf)],
) -> Result<i32> {
    let (program, rest) = command.split_first().ok_or_else(|| Error::Usage("no command given".into()))?;
    let mut cmd = match run_as {
        None => Command::new(program),
        Some((uid, gid)) => {
            // setpriv sets the user, its group and its supplementary groups
            // before COMMAND starts; nothing of root's stays.
            let mut c = Command::new("setpriv");
            c.arg(format!("--reuid={uid}")).arg(format!("--regid={gid}")).arg("--init-groups").arg("--").arg(program);
            c
        }
    };
    let mut child = cmd
        .args(rest)
        .current_dir(cwd)
        .env("REWINDFS", std::env::current_exe().unwrap_or_else(|_| "rewindfs".into()))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .spawn()
        .map_err(|e| Error::io(format!("cannot run {}", program.display()), e))?;
    loop {
        if let Some(sig) = sys::signals::take() {
            // Ctrl-C already reached the child through the terminal's
            // process group; forward the others.
            if sig != libc::SIGINT {
                let _ = sys::kill(child.id() as i32, sig);
            }
        }
        match child.try_wait() {
            Ok(Some(status)) => {
                use std::os::unix::process::ExitStatusExt;
                return Ok(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(Error::io("cannot wait for the command", e)),
        }
    }
}

/// Unmounts; when processes started by the command still use the mount,
/// waits a little, then detaches lazily so the workspace is freed as soon
/// as they exit.
fn unmount_when_idle(mp: &std::path::Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        match unmount::unmount(mp, false) {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() < deadline => {
                log::debug!("unmount of {} not possible yet: {e}", mp.display());
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => {
                warn!("{e}; detaching {} lazily", mp.display());
                eprintln!(
                    "rewindfs: {} is still in use; detaching it lazily (it goes away when those processes exit)",
                    mp.display()
                );
                return unmount::unmount(mp, true);
            }
        }
    }
}
