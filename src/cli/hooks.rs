//! `rewindfs hooks install|uninstall|status`: our prompt hook in an
//! agent's settings file, added and removed without touching anything
//! else in it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::cli::agents::{self, Agent, Json, codex};
use crate::cli::common;
use crate::cli::safe_file::{Dir, Existing};
use crate::cli::{HookScope, HooksArgs, HooksCommand};
use crate::error::{Error, Result};

pub fn run(args: HooksArgs) -> Result<()> {
    match args.command {
        HooksCommand::Install(e) => edit(e.agent, &e.scope, e.dry_run, true),
        HooksCommand::Uninstall(e) => edit(e.agent, &e.scope, e.dry_run, false),
        HooksCommand::Status { project } => status(project.as_deref()),
    }
}

/// A settings file, and the directory above it that is trusted as named:
/// the project the owner gave, or the user's own settings directory. The
/// directories between them (a project's `.claude/`) and the file belong
/// to whoever may write the project, the agent included: no symlink there
/// is followed (`safe_file`).
struct Settings {
    base: PathBuf,
    path: PathBuf,
}

impl Settings {
    /// The settings file a scope names.
    fn of(agent: Agent, scope: &HookScope) -> Result<Settings> {
        match &scope.project {
            Some(dir) => {
                let dir =
                    dir.canonicalize().map_err(|e| Error::path(dir, format!("cannot resolve the project: {e}")))?;
                Ok(Settings { path: agent.project_settings(&dir), base: dir })
            }
            None => {
                let path =
                    agent.user_settings().ok_or_else(|| Error::Usage("HOME is not set: give --project DIR".into()))?;
                Ok(Settings::in_own_dir(path))
            }
        }
    }

    /// A file of the user's own, in a directory trusted as named.
    fn in_own_dir(path: PathBuf) -> Settings {
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Settings { base, path }
    }

    /// The file as it is now: its directory (None when missing), its name,
    /// what it holds (None when missing).
    fn open(&self) -> Result<(Option<Dir>, OsString, Option<Existing>)> {
        let (dir, name) = Dir::of_file(&self.base, &self.path, false)?;
        let existing = match &dir {
            Some(d) => d.read(&name)?,
            None => None,
        };
        Ok((dir, name, existing))
    }

    /// Writes `new_text` over the file (whose directory and contents
    /// `open` found), keeping the old text as `<file>.rewindfs-backup`
    /// with the old mode. A dry run prints the difference instead and
    /// returns None; otherwise the backup's path, if there was a file to
    /// back up.
    fn replace(
        &self,
        opened: (Option<Dir>, OsString, Option<Existing>),
        new_text: &str,
        dry_run: bool,
    ) -> Result<Option<Option<PathBuf>>> {
        let (dir, name, existing) = opened;
        let path = &self.path;
        if dry_run {
            let old = existing.as_ref().map(|e| e.text.as_str()).unwrap_or_default();
            let diff = similar::TextDiff::from_lines(old, new_text);
            let shown = path.display().to_string();
            out!("{}", diff.unified_diff().header(&shown, &shown));
            outln!("(dry run; {} unchanged)", path.display());
            return Ok(None);
        }
        let dir = match dir {
            Some(d) => d,
            None => {
                std::fs::create_dir_all(&self.base)
                    .map_err(|e| Error::io(format!("cannot create {}", self.base.display()), e))?;
                Dir::of_file(&self.base, path, true)?
                    .0
                    .ok_or_else(|| Error::path(path, "its directory vanished while it was made"))?
            }
        };
        let mut backup_name = name.clone();
        backup_name.push(".rewindfs-backup");
        let backup = match &existing {
            Some(old) => {
                dir.replace(&backup_name, old.text.as_bytes(), old.mode)?;
                Some(dir.path().join(&backup_name))
            }
            None => None,
        };
        // A new settings file is readable by all, as one made by an editor.
        dir.replace(&name, new_text.as_bytes(), existing.map_or(0o644, |e| e.mode))?;
        Ok(Some(backup))
    }
}

/// A settings file's text parsed, `{}` for a missing or blank one.
fn parse(path: &Path, text: Option<String>) -> Result<(Option<String>, Json)> {
    match text {
        Some(text) if text.trim().is_empty() => Ok((Some(text), Json::Obj(Default::default()))),
        Some(text) => {
            let doc = serde_json::from_str(&text).map_err(|e| {
                Error::path(path, format!("is not plain JSON ({e}); edit it by hand, or fix it and try again"))
            })?;
            Ok((Some(text), doc))
        }
        None => Ok((None, Json::Obj(Default::default()))),
    }
}

/// The file's text and its parsed document; `{}` for a missing file.
/// Nothing below `project` (when the file is a project's; else its own
/// directory) is followed if it is a symlink: it is refused.
pub fn read_settings(path: &Path, project: Option<&Path>) -> Result<(Option<String>, Json)> {
    let settings = match project {
        Some(dir) => Settings { base: dir.to_path_buf(), path: path.to_path_buf() },
        None => Settings::in_own_dir(path.to_path_buf()),
    };
    parse(path, settings.open()?.2.map(|e| e.text))
}

fn to_text(doc: &Json) -> Result<String> {
    serde_json::to_string_pretty(doc)
        .map(|t| t + "\n")
        .map_err(|e| Error::Failure(crate::error::Failure::internal(format!("cannot encode JSON: {e}"))))
}

/// The rewindfs an installed hook runs: the `rewindfs` on PATH when it is
/// this very binary (a path that outlives a rebuild, `cargo clean` or a
/// reinstall), else this binary's own path, with a warning that says how
/// to get one that lasts.
fn hook_binary() -> Result<PathBuf> {
    let exe = std::env::current_exe().map_err(|e| Error::io("cannot find the rewindfs binary", e))?;
    let real = exe.canonicalize().ok();
    if let Some(on_path) = common::which("rewindfs").filter(|p| p.canonicalize().ok() == real) {
        return Ok(on_path);
    }
    eprintln!(
        "rewindfs: warning: the hook runs {}, which is not the `rewindfs` on PATH: rebuilding elsewhere, `cargo clean` \
         or removing it breaks the hook without a word; put rewindfs on PATH (`install -m 755 {} /usr/local/bin/`) \
         and install the hook again",
        exe.display(),
        exe.display()
    );
    Ok(exe)
}

fn edit(agent: Agent, scope: &HookScope, dry_run: bool, add: bool) -> Result<()> {
    let settings = Settings::of(agent, scope)?;
    let path = settings.path.clone();
    let opened = settings.open()?;
    let original = opened.2.as_ref().map(|e| e.text.clone());
    let (_, mut doc) = parse(&path, original.clone())?;
    let before = doc.clone();
    if add {
        let exe = hook_binary()?;
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
        if let Some(backup) = settings.replace(opened, &new_text, dry_run)? {
            let kept = backup.as_ref().map(|b| format!(" (the previous file is {})", b.display())).unwrap_or_default();
            outln!("{what} rewindfs's {name} hook in {}{kept}", path.display());
            // The file is written in the agent's own layout (2-space JSON):
            // one laid out otherwise changes beyond our entries, and the
            // user is told so rather than find out.
            let relaid = original.is_some_and(|t| !t.trim().is_empty() && t != to_text(&before).unwrap_or_default());
            if relaid {
                let was = backup.map(|b| b.display().to_string()).unwrap_or_else(|| "the previous file".into());
                outln!(
                    "note: {} was not laid out as 2-space JSON; it is now, so its text changed beyond rewindfs's \
                     entries (same settings); `diff {was} {}` shows it",
                    path.display(),
                    path.display()
                );
            }
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

/// Codex's config.toml.
fn codex_config() -> Result<Settings> {
    let home = codex::home().ok_or_else(|| Error::Usage("HOME is not set: cannot find Codex's config.toml".into()))?;
    Ok(Settings::in_own_dir(home.join("config.toml")))
}

/// config.toml's text parsed.
fn parse_codex_config(path: &Path, text: Option<&str>) -> Result<toml_edit::DocumentMut> {
    text.unwrap_or_default()
        .parse::<toml_edit::DocumentMut>()
        .map_err(|e| Error::path(path, format!("is not valid TOML ({e}); fix it and try again")))
}

/// Codex's config.toml as a document (empty when missing).
fn read_codex_config() -> Result<toml_edit::DocumentMut> {
    let config = codex_config()?;
    parse_codex_config(&config.path, config.open()?.2.map(|e| e.text).as_deref())
}

/// Makes Codex's config.toml trust exactly our hooks of `hooks_file` as
/// they are in `after` (none after an uninstall); `before` names the hooks
/// of ours whose trust may be removed.
fn codex_trust(hooks_file: &Path, before: &Json, after: &Json, dry_run: bool) -> Result<()> {
    let config = codex_config()?;
    let opened = config.open()?;
    let path = &config.path;
    let mut doc = parse_codex_config(path, opened.2.as_ref().map(|e| e.text.as_str()))?;
    let wanted = codex::wanted(hooks_file, after);
    let ours: Vec<String> =
        codex::positions(before).iter().chain(&codex::positions(after)).map(|(_, _, c)| codex::trust_hash(c)).collect();
    let changed = codex::set_trust(&mut doc, hooks_file, &wanted, &ours)
        .map_err(|why| Error::path(path, format!("{why}; edit it by hand")))?;
    if !changed {
        return Ok(());
    }
    let what = if wanted.is_empty() { "removed Codex's trust in" } else { "trusted" };
    if let Some(backup) = config.replace(opened, &doc.to_string(), dry_run)? {
        let kept = backup.map(|b| format!(" (the previous file is {})", b.display())).unwrap_or_default();
        outln!("{what} rewindfs's codex hook in {}{kept}", path.display());
    }
    Ok(())
}

/// Whether Codex runs our hook for a prompt in `dir` without being told:
/// installed in the user's or the project's hooks.json and trusted.
pub fn codex_wired(dir: &Path) -> bool {
    let Ok(config) = read_codex_config() else { return false };
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let files = [(Agent::Codex.user_settings(), None), (Some(Agent::Codex.project_settings(&dir)), Some(&dir))];
    files.into_iter().filter_map(|(f, p)| Some((f?, p))).any(|(f, project)| {
        read_settings(&f, project.map(PathBuf::as_path))
            .is_ok_and(|(_, doc)| codex::wanted(&f, &doc).iter().any(|(k, h)| codex::is_trusted(&config, k, h)))
    })
}

fn status(project: Option<&Path>) -> Result<()> {
    let dir = match project {
        Some(p) => p.to_path_buf(),
        None => std::env::current_dir().map_err(|e| Error::io("cannot read the current directory", e))?,
    };
    for agent in Agent::ALL {
        let files =
            [("user", agent.user_settings(), None), ("project", Some(agent.project_settings(&dir)), Some(&dir))];
        for (scope, path, project) in files {
            let Some(path) = path else { continue };
            let state = match read_settings(&path, project.map(PathBuf::as_path)) {
                Ok((None, _)) => "no settings file".to_string(),
                Ok((Some(_), doc)) => match agents::installed(&doc, agent).as_slice() {
                    [] => "not installed".to_string(),
                    cmds if agent == Agent::Codex => {
                        let config = read_codex_config();
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
