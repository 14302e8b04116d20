//! `rewindfs hooks install|uninstall|status`: our prompt hook in an
//! agent's settings file, added and removed without touching anything
//! else in it.

use std::path::{Path, PathBuf};

use crate::cli::agents::{self, Agent, Json};
use crate::cli::{HookScope, HooksArgs, HooksCommand};
use crate::error::{Error, Result};

pub fn run(args: HooksArgs) -> Result<()> {
    match args.command {
        HooksCommand::Install(e) => edit(e.agent, &e.scope, e.dry_run, true),
        HooksCommand::Uninstall(e) => edit(e.agent, &e.scope, e.dry_run, false),
        HooksCommand::Status { project } => status(project.as_deref()),
    }
}

/// The settings file a scope names.
fn settings_file(agent: Agent, scope: &HookScope) -> Result<PathBuf> {
    match &scope.project {
        Some(dir) => {
            let dir = dir.canonicalize().map_err(|e| Error::path(dir, format!("cannot resolve the project: {e}")))?;
            Ok(agent.project_settings(&dir))
        }
        None => agent.user_settings().ok_or_else(|| Error::Usage("HOME is not set: give --project DIR".into())),
    }
}

/// The file's text and its parsed document; `{}` for a missing file.
pub fn read_settings(path: &Path) -> Result<(Option<String>, Json)> {
    match std::fs::read_to_string(path) {
        Ok(text) if text.trim().is_empty() => Ok((Some(text), Json::Obj(Default::default()))),
        Ok(text) => {
            let doc = serde_json::from_str(&text).map_err(|e| {
                Error::path(path, format!("is not plain JSON ({e}); edit it by hand, or fix it and try again"))
            })?;
            Ok((Some(text), doc))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((None, Json::Obj(Default::default()))),
        Err(e) => Err(Error::io(format!("cannot read {}", path.display()), e)),
    }
}

fn to_text(doc: &Json) -> Result<String> {
    serde_json::to_string_pretty(doc)
        .map(|t| t + "\n")
        .map_err(|e| Error::Failure(crate::error::Failure::internal(format!("cannot encode JSON: {e}"))))
}

fn edit(agent: Agent, scope: &HookScope, dry_run: bool, add: bool) -> Result<()> {
    let path = settings_file(agent, scope)?;
    let (old_text, mut doc) = read_settings(&path)?;
    let changed = if add {
        let exe = std::env::current_exe().map_err(|e| Error::io("cannot find the rewindfs binary", e))?;
        let before = doc.clone();
        agents::install(&mut doc, agent, &agents::hook_command(&exe, agent))
            .map_err(|why| Error::path(&path, format!("{why}; edit it by hand")))?;
        doc != before
    } else {
        agents::uninstall(&mut doc, agent) > 0
    };
    let (name, what) = (agent.name(), if add { "installed" } else { "removed" });
    if !changed {
        let state = if add { "already installed" } else { "not installed" };
        println!("rewindfs's {name} hook is {state} in {}; nothing to change", path.display());
        return Ok(());
    }
    let new_text = to_text(&doc)?;
    let old = old_text.clone().unwrap_or_default();
    if dry_run {
        let diff = similar::TextDiff::from_lines(&old, &new_text);
        let shown = path.display().to_string();
        print!("{}", diff.unified_diff().header(&shown, &shown));
        println!("(dry run; {} unchanged)", path.display());
        return Ok(());
    }
    let backup = match &old_text {
        Some(text) => {
            let b = PathBuf::from(format!("{}.rewindfs-backup", path.display()));
            write_atomic(&b, text, &path)?;
            Some(b)
        }
        None => None,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    }
    write_atomic(&path, &new_text, &path)?;
    match backup {
        Some(b) => {
            println!("{what} rewindfs's {name} hook in {} (the previous file is {})", path.display(), b.display())
        }
        None => println!("{what} rewindfs's {name} hook in {}", path.display()),
    }
    if add && agent == Agent::Codex {
        // Codex skips a new hook, silently, until a person trusts it; there
        // is no supported way for us to trust it on the user's behalf.
        println!(
            "note: Codex runs a new hook only after you trust it: start `codex` in a terminal and choose to trust it \
             when it shows \"Hooks need review\" (or use /hooks); `codex exec` skips untrusted hooks"
        );
    }
    Ok(())
}

/// Writes `text` to `path` through a temporary file and a rename, with the
/// permissions of `like` when it exists (a settings file may be private).
fn write_atomic(path: &Path, text: &str, like: &Path) -> Result<()> {
    use std::io::Write;
    let tmp = PathBuf::from(format!("{}.rewindfs-tmp", path.display()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        if let Ok(meta) = std::fs::metadata(like) {
            f.set_permissions(meta.permissions())?;
        }
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::io(format!("cannot write {}", path.display()), e)
    })
}

fn status(project: Option<&Path>) -> Result<()> {
    let dir = match project {
        Some(p) => p.to_path_buf(),
        None => std::env::current_dir().map_err(|e| Error::io("cannot read the current directory", e))?,
    };
    for agent in Agent::ALL {
        let files = [("user", agent.user_settings()), ("project", Some(agent.project_settings(&dir)))];
        for (scope, path) in files {
            let Some(path) = path else { continue };
            let state = match read_settings(&path) {
                Ok((None, _)) => "no settings file".to_string(),
                Ok((Some(_), doc)) => match agents::installed(&doc, agent).as_slice() {
                    [] => "not installed".to_string(),
                    cmds => format!("installed: {}", cmds.join("; ")),
                },
                Err(e) => format!("unreadable: {e}"),
            };
            println!("{:<7} {:<8} {}: {state}", agent.name(), scope, path.display());
        }
    }
    Ok(())
}
