//! `rewindfs hooks install|uninstall|status`: our prompt hook in an
//! agent's settings file, added and removed without touching anything
//! else in it.

use std::path::{Path, PathBuf};

use crate::cli::agents::{self, Agent, Json, codex};
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
    let before = doc.clone();
    if add {
        let exe = std::env::current_exe().map_err(|e| Error::io("cannot find the rewindfs binary", e))?;
        agents::install(&mut doc, agent, &agents::hook_command(&exe, agent))
            .map_err(|why| Error::path(&path, format!("{why}; edit it by hand")))?;
    } else {
        agents::uninstall(&mut doc, agent);
    }
    let (name, what) = (agent.name(), if add { "installed" } else { "removed" });
    if doc == before {
        let state = if add { "already installed" } else { "not installed" };
        outln!("rewindfs's {name} hook is {state} in {}; nothing to change", path.display());
    } else {
        let new_text = to_text(&doc)?;
        if let Some(backup) = replace(&path, old_text.as_deref(), &new_text, dry_run)? {
            let kept = backup.map(|b| format!(" (the previous file is {})", b.display())).unwrap_or_default();
            outln!("{what} rewindfs's {name} hook in {}{kept}", path.display());
        }
    }
    if agent == Agent::Codex {
        codex_trust(&path, &before, &doc, dry_run)?;
        if add && scope.project.is_some() {
            outln!(
                "note: Codex reads a project's .codex directory only once you trust the project \
                 (`codex` asks when it starts there)"
            );
        }
    }
    Ok(())
}

/// Writes `new_text` over `path` (whose text is `old_text`, None when it
/// does not exist), keeping the old text as `<path>.rewindfs-backup`. A dry
/// run prints the difference instead and returns None; otherwise the
/// backup's path, if there was a file to back up.
fn replace(path: &Path, old_text: Option<&str>, new_text: &str, dry_run: bool) -> Result<Option<Option<PathBuf>>> {
    if dry_run {
        let diff = similar::TextDiff::from_lines(old_text.unwrap_or_default(), new_text);
        let shown = path.display().to_string();
        out!("{}", diff.unified_diff().header(&shown, &shown));
        outln!("(dry run; {} unchanged)", path.display());
        return Ok(None);
    }
    let backup = match old_text {
        Some(text) => {
            let b = PathBuf::from(format!("{}.rewindfs-backup", path.display()));
            write_atomic(&b, text, path)?;
            Some(b)
        }
        None => None,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    }
    write_atomic(path, new_text, path)?;
    Ok(Some(backup))
}

/// Codex's config.toml: its text (None when missing) and document.
fn read_codex_config() -> Result<(PathBuf, Option<String>, toml_edit::DocumentMut)> {
    let home = codex::home().ok_or_else(|| Error::Usage("HOME is not set: cannot find Codex's config.toml".into()))?;
    let path = home.join("config.toml");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::io(format!("cannot read {}", path.display()), e)),
    };
    let doc = text
        .as_deref()
        .unwrap_or_default()
        .parse::<toml_edit::DocumentMut>()
        .map_err(|e| Error::path(&path, format!("is not valid TOML ({e}); fix it and try again")))?;
    Ok((path, text, doc))
}

/// Makes Codex's config.toml trust exactly our hooks of `hooks_file` as
/// they are in `after` (none after an uninstall); `before` names the hooks
/// of ours whose trust may be removed.
fn codex_trust(hooks_file: &Path, before: &Json, after: &Json, dry_run: bool) -> Result<()> {
    let (path, old_text, mut doc) = read_codex_config()?;
    let wanted = codex::wanted(hooks_file, after);
    let ours: Vec<String> =
        codex::positions(before).iter().chain(&codex::positions(after)).map(|(_, _, c)| codex::trust_hash(c)).collect();
    let changed = codex::set_trust(&mut doc, hooks_file, &wanted, &ours)
        .map_err(|why| Error::path(&path, format!("{why}; edit it by hand")))?;
    if !changed {
        return Ok(());
    }
    let what = if wanted.is_empty() { "removed Codex's trust in" } else { "trusted" };
    if let Some(backup) = replace(&path, old_text.as_deref(), &doc.to_string(), dry_run)? {
        let kept = backup.map(|b| format!(" (the previous file is {})", b.display())).unwrap_or_default();
        outln!("{what} rewindfs's codex hook in {}{kept}", path.display());
    }
    Ok(())
}

/// Whether Codex runs our hook for a prompt in `dir` without being told:
/// installed in the user's or the project's hooks.json and trusted.
pub fn codex_wired(dir: &Path) -> bool {
    let Ok((_, _, config)) = read_codex_config() else { return false };
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let files = [Agent::Codex.user_settings(), Some(Agent::Codex.project_settings(&dir))];
    files.into_iter().flatten().any(|f| {
        read_settings(&f)
            .is_ok_and(|(_, doc)| codex::wanted(&f, &doc).iter().any(|(k, h)| codex::is_trusted(&config, k, h)))
    })
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
                    cmds if agent == Agent::Codex => {
                        let config = read_codex_config().map(|(_, _, c)| c);
                        let trusted = codex::wanted(&path, &doc)
                            .iter()
                            .all(|(k, h)| config.as_ref().is_ok_and(|c| codex::is_trusted(c, k, h)));
                        let trust = if trusted {
                            "trusted"
                        } else {
                            "NOT trusted by Codex, which skips it: run `rewindfs hooks install codex` again"
                        };
                        format!("installed: {} ({trust})", cmds.join("; "))
                    }
                    cmds => format!("installed: {}", cmds.join("; ")),
                },
                Err(e) => format!("unreadable: {e}"),
            };
            outln!("{:<7} {:<8} {}: {state}", agent.name(), scope, path.display());
        }
    }
    Ok(())
}
