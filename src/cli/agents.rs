//! The coding agents rewindfs wires itself into: what each one's prompt
//! hook sends on stdin, and where and how its hook entries are written in
//! its settings file. Pure functions on values; the commands that read and
//! write files are in `hook.rs` and `hooks.rs`.

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

/// An agent CLI with a prompt hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Agent {
    /// Claude Code (`claude`): UserPromptSubmit hook in settings.json.
    Claude,
    /// Gemini CLI (`gemini`): BeforeAgent hook in settings.json.
    Gemini,
    /// Codex CLI (`codex`): UserPromptSubmit hook in hooks.json (Codex runs
    /// it only once the user has trusted it).
    Codex,
}

impl Agent {
    pub const ALL: [Agent; 3] = [Agent::Claude, Agent::Gemini, Agent::Codex];

    pub fn name(self) -> &'static str {
        match self {
            Agent::Claude => "claude",
            Agent::Gemini => "gemini",
            Agent::Codex => "codex",
        }
    }

    /// The agent's hook event that fires once per user prompt, before the
    /// model sees it.
    pub fn event(self) -> &'static str {
        match self {
            Agent::Claude | Agent::Codex => "UserPromptSubmit",
            Agent::Gemini => "BeforeAgent",
        }
    }

    /// The agent a command line runs, by its program's file name.
    pub fn of_program(program: &str) -> Option<Agent> {
        let name = Path::new(program).file_name()?.to_str()?;
        Agent::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The user-wide settings file.
    pub fn user_settings(self) -> Option<PathBuf> {
        let home = || std::env::var_os("HOME").map(PathBuf::from);
        match self {
            // Claude Code moves its whole configuration with CLAUDE_CONFIG_DIR.
            Agent::Claude => std::env::var_os("CLAUDE_CONFIG_DIR")
                .map(PathBuf::from)
                .or_else(|| home().map(|h| h.join(".claude")))
                .map(|d| d.join("settings.json")),
            Agent::Gemini => home().map(|h| h.join(".gemini/settings.json")),
            Agent::Codex => std::env::var_os("CODEX_HOME")
                .map(PathBuf::from)
                .or_else(|| home().map(|h| h.join(".codex")))
                .map(|d| d.join("hooks.json")),
        }
    }

    /// The settings file of a project directory. For Claude Code the local
    /// (git-ignored) file: the hook names this machine's rewindfs binary,
    /// which is no business of the team's shared settings.
    pub fn project_settings(self, dir: &Path) -> PathBuf {
        match self {
            Agent::Claude => dir.join(".claude/settings.local.json"),
            Agent::Gemini => dir.join(".gemini/settings.json"),
            Agent::Codex => dir.join(".codex/hooks.json"),
        }
    }

    /// The hook entry that runs `command`.
    fn entry(self, command: &str) -> Json {
        let mut e = IndexMap::new();
        if self == Agent::Gemini {
            e.insert("name".into(), Json::Str("rewindfs".into()));
        }
        e.insert("type".into(), Json::Str("command".into()));
        e.insert("command".into(), Json::Str(command.into()));
        // The hook itself gives up after HOOK_DEADLINE; this only bounds a
        // hook that cannot even start.
        let timeout = match self {
            Agent::Claude | Agent::Codex => Json::Num(10.into()),
            Agent::Gemini => Json::Num(10_000.into()),
        };
        e.insert("timeout".into(), timeout);
        Json::Obj(e)
    }
}

/// How long `rewindfs hook` may take before it gives up and lets the agent
/// go on: the prompt waits for it.
pub const HOOK_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

/// The most characters of a prompt's first line kept as a label.
const LABEL_MAX: usize = 60;

/// What a prompt hook tells us.
#[derive(Debug, Default, PartialEq)]
pub struct PromptEvent {
    pub cwd: PathBuf,
    pub session: Option<String>,
    /// The agent's own id of the prompt, when it has one (Claude Code's
    /// `prompt_id`, Codex's `turn_id`).
    pub prompt_id: Option<String>,
    pub label: Option<String>,
}

#[derive(Deserialize)]
struct RawEvent {
    cwd: Option<PathBuf>,
    session_id: Option<String>,
    prompt_id: Option<String>,
    turn_id: Option<String>,
    prompt: Option<String>,
}

/// Parses the JSON a prompt hook gets on stdin. Claude Code, Gemini CLI and
/// Codex send the same names for what we use.
pub fn parse_event(input: &[u8]) -> Result<PromptEvent, String> {
    let raw: RawEvent = serde_json::from_slice(input).map_err(|e| format!("the hook input is not JSON: {e}"))?;
    let cwd = raw.cwd.ok_or("the hook input has no cwd")?;
    let non_empty = |s: Option<String>| s.filter(|s| !s.is_empty());
    Ok(PromptEvent {
        cwd,
        session: non_empty(raw.session_id),
        prompt_id: non_empty(raw.prompt_id).or(non_empty(raw.turn_id)),
        label: raw.prompt.as_deref().and_then(label_of),
    })
}

/// A prompt's label: its first non-blank line, control characters made
/// spaces, at most LABEL_MAX characters (then "...").
pub fn label_of(prompt: &str) -> Option<String> {
    let line = prompt.lines().map(str::trim).find(|l| !l.is_empty())?;
    let clean: String = line.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if clean.chars().count() <= LABEL_MAX {
        return Some(clean);
    }
    let mut cut: String = clean.chars().take(LABEL_MAX).collect();
    cut.truncate(cut.trim_end().len());
    cut.push_str("...");
    Some(cut)
}

/// A JSON value that keeps the order of object keys, so that a settings
/// file we edit differs from the user's only where we changed it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Json {
    Null,
    Bool(bool),
    Num(serde_json::Number),
    Str(String),
    Arr(Vec<Json>),
    Obj(IndexMap<String, Json>),
}

impl Json {
    fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// The shell command an agent runs for our hook.
pub fn hook_command(exe: &Path, agent: Agent) -> String {
    format!("{} hook {}", shell_quote(&exe.to_string_lossy()), agent.name())
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-+,:@%".contains(&b)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Whether a hook command is one of ours for `agent`: `<...>/rewindfs hook
/// <agent>`, whatever path the binary had when it was installed.
fn is_ours(command: &str, agent: Agent) -> bool {
    let Some(raw) = command.strip_suffix(&format!(" hook {}", agent.name())) else { return false };
    let program = match raw.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')) {
        Some(inner) => inner.replace(r"'\''", "'"),
        None => raw.to_string(),
    };
    // Exactly what `hook_command` writes, so that a user's own command
    // that merely ends the same way is never taken for ours.
    shell_quote(&program) == raw && Path::new(&program).file_name().is_some_and(|n| n == "rewindfs")
}

/// The hook groups of `agent`'s event in a settings document, if any.
fn groups(doc: &Json, agent: Agent) -> Option<&Vec<Json>> {
    let Json::Obj(root) = doc else { return None };
    let Some(Json::Obj(hooks)) = root.get("hooks") else { return None };
    match hooks.get(agent.event()) {
        Some(Json::Arr(groups)) => Some(groups),
        _ => None,
    }
}

/// The entries of one group (`{"matcher": ..., "hooks": [...]}`).
fn entries(group: &Json) -> Option<&Vec<Json>> {
    match group {
        Json::Obj(g) => match g.get("hooks") {
            Some(Json::Arr(e)) => Some(e),
            _ => None,
        },
        _ => None,
    }
}

fn entry_command(entry: &Json) -> Option<&str> {
    match entry {
        Json::Obj(e) => e.get("command").and_then(Json::as_str),
        _ => None,
    }
}

/// The commands of our hooks installed in a settings document.
pub fn installed(doc: &Json, agent: Agent) -> Vec<String> {
    groups(doc, agent)
        .into_iter()
        .flatten()
        .filter_map(entries)
        .flatten()
        .filter_map(entry_command)
        .filter(|c| is_ours(c, agent))
        .map(str::to_string)
        .collect()
}

/// Adds our hook running `command` to a settings document, or points an
/// existing one of ours at `command`. Everything else is left as it was.
/// Fails when the document's shape is not what the agent reads (then we do
/// not know what writing into it would do).
pub fn install(doc: &mut Json, agent: Agent, command: &str) -> Result<(), String> {
    let Json::Obj(root) = doc else { return Err("the settings file does not hold a JSON object".into()) };
    let hooks = root.entry("hooks".to_string()).or_insert_with(|| Json::Obj(IndexMap::new()));
    let Json::Obj(hooks) = hooks else { return Err("its \"hooks\" is not an object".into()) };
    let groups = hooks.entry(agent.event().to_string()).or_insert_with(|| Json::Arr(Vec::new()));
    let Json::Arr(groups) = groups else { return Err(format!("its \"hooks\".\"{}\" is not an array", agent.event())) };
    let mut found = false;
    for group in groups.iter_mut() {
        let Json::Obj(g) = group else { continue };
        let Some(Json::Arr(list)) = g.get_mut("hooks") else { continue };
        for entry in list.iter_mut() {
            let Json::Obj(e) = entry else { continue };
            if e.get("command").and_then(Json::as_str).is_some_and(|c| is_ours(c, agent)) {
                e.insert("command".into(), Json::Str(command.into()));
                found = true;
            }
        }
    }
    if !found {
        let mut group = IndexMap::new();
        if agent == Agent::Gemini {
            group.insert("matcher".into(), Json::Str("*".into()));
        }
        group.insert("hooks".into(), Json::Arr(vec![agent.entry(command)]));
        groups.push(Json::Obj(group));
    }
    Ok(())
}

/// Removes exactly our hook entries; a group, event or `hooks` object left
/// empty by that goes too (one we did not empty stays).
pub fn uninstall(doc: &mut Json, agent: Agent) -> usize {
    let Json::Obj(root) = doc else { return 0 };
    let Some(Json::Obj(hooks)) = root.get_mut("hooks") else { return 0 };
    let Some(Json::Arr(groups)) = hooks.get_mut(agent.event()) else { return 0 };
    let mut removed = 0;
    groups.retain_mut(|group| {
        let Json::Obj(g) = group else { return true };
        let Some(Json::Arr(list)) = g.get_mut("hooks") else { return true };
        let before = list.len();
        list.retain(|e| !entry_command(e).is_some_and(|c| is_ours(c, agent)));
        removed += before - list.len();
        !(before > 0 && list.is_empty())
    });
    if removed > 0 && groups.is_empty() {
        hooks.shift_remove(agent.event());
        if hooks.is_empty() {
            root.shift_remove("hooks");
        }
    }
    removed
}

/// The settings that wire `agent` for one run (`rewindfs run`), given to
/// it without touching the user's files.
pub fn run_settings(agent: Agent, command: &str) -> Json {
    let mut doc = Json::Obj(IndexMap::new());
    // A fresh object always takes the hook.
    let _ = install(&mut doc, agent, command);
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(s: &str) -> Json {
        serde_json::from_str(s).unwrap()
    }

    fn text(d: &Json) -> String {
        serde_json::to_string(d).unwrap()
    }

    #[test]
    fn claude_event_gives_prompt_id_session_and_first_line() {
        let e = parse_event(
            br#"{"session_id":"s1","transcript_path":"/t","cwd":"/w","prompt_id":"p-1","permission_mode":"default",
                "hook_event_name":"UserPromptSubmit","prompt":"\n  Fix the bug in app.py  \nand add a test"}"#,
        )
        .unwrap();
        assert_eq!(
            e,
            PromptEvent {
                cwd: "/w".into(),
                session: Some("s1".into()),
                prompt_id: Some("p-1".into()),
                label: Some("Fix the bug in app.py".into()),
            }
        );
        assert!(parse_event(b"{}").is_err(), "no cwd");
        let codex = parse_event(
            br#"{"session_id":"s2","turn_id":"019d036d-c7fa","cwd":"/w","hook_event_name":"UserPromptSubmit","prompt":"hi"}"#,
        )
        .unwrap();
        assert_eq!(codex.prompt_id.as_deref(), Some("019d036d-c7fa"), "Codex's turn id names the prompt");
        assert!(parse_event(b"not json").is_err());
    }

    #[test]
    fn labels_are_one_line_without_control_characters_and_truncated() {
        assert_eq!(label_of("a\tb\x1b[31m"), Some("a b [31m".into()));
        assert_eq!(label_of("  \n \n"), None);
        let long = "x".repeat(59) + " yyyyyyyy";
        let l = label_of(&long).unwrap();
        assert_eq!(l, "x".repeat(59) + "...");
        let wide = "é".repeat(100);
        assert_eq!(label_of(&wide).unwrap().chars().count(), 63);
    }

    #[test]
    fn install_keeps_everything_else_in_order_and_is_idempotent() {
        let before = r#"{"zeta":1,"alpha":{"b":2,"a":[1,2.5,null,true]},"hooks":{"Stop":[{"hooks":[{"type":"command","command":"x"}]}],"UserPromptSubmit":[{"hooks":[{"type":"command","command":"other"}]}]}}"#;
        let mut d = doc(before);
        install(&mut d, Agent::Claude, "/bin/rewindfs hook claude").unwrap();
        let once = text(&d);
        assert!(once.starts_with(r#"{"zeta":1,"alpha":{"b":2,"a":[1,2.5,null,true]},"hooks":{"Stop""#), "{once}");
        assert_eq!(installed(&d, Agent::Claude), vec!["/bin/rewindfs hook claude"]);
        assert_eq!(groups(&d, Agent::Claude).unwrap().len(), 2, "the user's own hook stays");
        install(&mut d, Agent::Claude, "/bin/rewindfs hook claude").unwrap();
        assert_eq!(text(&d), once, "a second install changes nothing");
        install(&mut d, Agent::Claude, "/opt/new/rewindfs hook claude").unwrap();
        assert_eq!(installed(&d, Agent::Claude), vec!["/opt/new/rewindfs hook claude"], "a moved binary is updated");
        assert_eq!(uninstall(&mut d, Agent::Claude), 1);
        assert_eq!(text(&d), before, "uninstall gives back the file as it was");
        assert_eq!(uninstall(&mut d, Agent::Claude), 0);
    }

    #[test]
    fn uninstall_removes_what_install_added_to_an_empty_file() {
        for agent in Agent::ALL {
            let mut d = doc("{}");
            install(&mut d, agent, &hook_command(Path::new("/a b/rewindfs"), agent)).unwrap();
            assert_eq!(installed(&d, agent).len(), 1, "{agent:?}");
            assert!(installed(&d, Agent::ALL.into_iter().find(|a| *a != agent).unwrap()).is_empty());
            assert_eq!(uninstall(&mut d, agent), 1);
            assert_eq!(text(&d), "{}");
        }
    }

    #[test]
    fn only_rewindfs_hook_commands_are_ours() {
        assert!(is_ours("/usr/bin/rewindfs hook claude", Agent::Claude));
        assert!(is_ours("'/my dir/rewindfs' hook claude", Agent::Claude));
        assert!(!is_ours("/usr/bin/rewindfs hook gemini", Agent::Claude));
        assert!(!is_ours("/usr/bin/notrewindfs hook claude", Agent::Claude));
        assert!(!is_ours("echo rewindfs hook claude; rm -rf x", Agent::Claude));
        assert!(!is_ours("echo x; /bin/rewindfs hook claude", Agent::Claude));
    }

    #[test]
    fn a_settings_file_of_another_shape_is_refused() {
        for bad in ["[]", r#"{"hooks":[]}"#, r#"{"hooks":{"UserPromptSubmit":{}}}"#] {
            assert!(install(&mut doc(bad), Agent::Claude, "c").is_err(), "{bad}");
        }
    }
}
