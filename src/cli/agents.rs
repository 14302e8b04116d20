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
    /// Codex CLI (`codex`): UserPromptSubmit hook in hooks.json, trusted
    /// in its config.toml (Codex skips a hook it has no trust entry for).
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

    /// The agent whose prompt hook sealed a checkpoint, from its ids: Gemini
    /// CLI's message ids are `<session>-<n>`; Codex's sessions are UUIDs of
    /// version 7 (time-ordered); Claude Code's are of version 4.
    pub fn of_prompt(message_id: &str, session: &str) -> Option<Agent> {
        let number = message_id.strip_prefix(session).and_then(|r| r.strip_prefix('-'));
        if number.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
            return Some(Agent::Gemini);
        }
        let version = |id: &str| (id.len() == 36 && id.as_bytes()[8] == b'-').then(|| id.as_bytes()[14]);
        match version(session) {
            Some(b'7') => Some(Agent::Codex),
            Some(b'4') => Some(Agent::Claude),
            _ => None,
        }
    }

    /// How to bring the agent's conversation back to just before a prompt
    /// (labelled `label`) of `session`, once rewindfs has rewound the files
    /// there: the agent's own command that resumes the session, and what
    /// to pick in its rewind so that only the conversation goes back (the
    /// files are rewindfs's, every change included).
    pub fn conversation_rewind(self, session: &str, label: &str) -> String {
        let prompt = crate::text::quoted(label);
        match self {
            Agent::Claude => format!(
                "`claude --resume {session}`, then Esc Esc (/rewind), pick {prompt} and \"Restore conversation\""
            ),
            Agent::Gemini => {
                format!("`gemini --resume {session}`, then /rewind, pick {prompt} and \"Rewind conversation\"")
            }
            Agent::Codex => {
                format!("`codex resume {session}`, then Esc Esc, step back to {prompt} and Enter to edit it")
            }
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
            Agent::Codex => codex::home().map(|d| d.join("hooks.json")),
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
            Agent::Claude => Json::Num(10.into()),
            Agent::Codex => Json::Num(codex::TIMEOUT.into()),
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

/// Codex's trust in hooks. Codex runs a hook from the user's or a
/// project's files only when the user's config.toml holds, under
/// `hooks.state."<file>:user_prompt_submit:<group>:<handler>"`, a
/// `trusted_hash` equal to its fingerprint of that hook; otherwise it skips
/// the hook without a word (`codex exec` included). Its review screen
/// writes that entry when a person trusts the hook; `hooks install codex`
/// writes it for the one hook it installs, and `rewindfs run` gives the
/// hook and its entry for the run on the command line (`-c`), where Codex
/// reads hook state too.
pub mod codex {
    use std::path::{Path, PathBuf};

    use sha2::Digest;
    use toml_edit::{DocumentMut, Item, Table};

    use super::{Agent, Json, groups};

    /// Seconds Codex gives our hook (it is part of the fingerprint).
    pub const TIMEOUT: u64 = 10;

    /// Codex's name of the event in hook state keys.
    const EVENT_KEY: &str = "user_prompt_submit";

    /// The file name Codex gives the hooks passed with `-c` (their layer has
    /// no file).
    const SESSION_FLAGS_SOURCE: &str = "/<session-flags>/config.toml";

    /// Codex's own directory: CODEX_HOME, which Codex canonicalizes, else
    /// ~/.codex as it is.
    pub fn home() -> Option<PathBuf> {
        match std::env::var_os("CODEX_HOME").filter(|v| !v.is_empty()) {
            Some(dir) => {
                let dir = PathBuf::from(dir);
                Some(dir.canonicalize().unwrap_or(dir))
            }
            None => std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".codex")),
        }
    }

    /// The key of the state Codex looks up for the handler at
    /// (group, handler) of the UserPromptSubmit list in `source`.
    pub fn state_key(source: &Path, group: usize, handler: usize) -> String {
        format!("{}:{EVENT_KEY}:{group}:{handler}", source.display())
    }

    /// Codex's fingerprint of our hook entry (`hook_entry`'s fields): the
    /// SHA-256 of its normalized form as compact JSON with sorted keys
    /// (codex-rs `command_hook_hash`, `version_for_toml`). A group without a
    /// matcher, as ours (Codex drops a UserPromptSubmit matcher anyway).
    pub fn trust_hash(command: &str) -> String {
        let command = serde_json::to_string(command).unwrap_or_default();
        let identity = format!(
            r#"{{"event_name":"{EVENT_KEY}","hooks":[{{"async":false,"command":{command},"timeout":{TIMEOUT},"type":"command"}}]}}"#
        );
        let digest = sha2::Sha256::digest(identity.as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("sha256:{hex}")
    }

    /// Our hooks in a hooks.json document: (group, handler, command).
    pub fn positions(doc: &Json) -> Vec<(usize, usize, String)> {
        let mut out = Vec::new();
        for (g, group) in groups(doc, Agent::Codex).into_iter().flatten().enumerate() {
            for (h, entry) in super::entries(group).into_iter().flatten().enumerate() {
                if let Some(c) = super::entry_command(entry).filter(|c| super::is_ours(c, Agent::Codex)) {
                    out.push((g, h, c.to_string()));
                }
            }
        }
        out
    }

    /// The trust entries our hooks in `doc` (the hooks.json at `source`)
    /// need: state key and hash.
    pub fn wanted(source: &Path, doc: &Json) -> Vec<(String, String)> {
        positions(doc).into_iter().map(|(g, h, c)| (state_key(source, g, h), trust_hash(&c))).collect()
    }

    /// The `-c` arguments that give Codex our hook and its trust for one
    /// run, as TOML values (Codex reads a value that does not parse as a
    /// plain string, so they must parse).
    pub fn run_overrides(command: &str) -> [String; 4] {
        let cmd = toml_edit::Value::from(command).to_string();
        let key = toml_edit::Value::from(format!("{SESSION_FLAGS_SOURCE}:{EVENT_KEY}:0:0")).to_string();
        [
            "-c".into(),
            format!(
                r#"hooks.UserPromptSubmit=[{{hooks=[{{type="command",command={},timeout={TIMEOUT}}}]}}]"#,
                cmd.trim()
            ),
            "-c".into(),
            format!(r#"hooks.state={{{}={{trusted_hash="{}"}}}}"#, key.trim(), trust_hash(command)),
        ]
    }

    /// The `hooks.state` table of a config.toml, if it has one.
    fn state(doc: &DocumentMut) -> Option<&dyn toml_edit::TableLike> {
        doc.get("hooks")?.as_table_like()?.get("state")?.as_table_like()
    }

    /// Whether config.toml trusts `hash` under `key`.
    pub fn is_trusted(doc: &DocumentMut, key: &str, hash: &str) -> bool {
        state(doc)
            .and_then(|s| s.get(key))
            .and_then(|e| e.as_table_like())
            .and_then(|e| e.get("trusted_hash"))
            .and_then(|h| h.as_str())
            == Some(hash)
    }

    /// Makes config.toml trust exactly `wanted` among the entries of
    /// `source` (our hooks): adds the missing ones, and removes those of
    /// `source` whose hash is one of `ours` (our hooks' fingerprints, past
    /// or present) but that are no longer wanted. Entries of other hooks
    /// are never touched. Returns whether anything changed; fails on a
    /// `hooks` or `hooks.state` that is not a table.
    pub fn set_trust(
        doc: &mut DocumentMut,
        source: &Path,
        wanted: &[(String, String)],
        ours: &[String],
    ) -> Result<bool, String> {
        let prefix = format!("{}:{EVENT_KEY}:", source.display());
        let stale: Vec<String> = match state(doc) {
            Some(s) => s
                .iter()
                .filter(|(k, _)| k.starts_with(&prefix) && !wanted.iter().any(|(w, _)| w == k))
                .filter(|(_, v)| {
                    let hash = v.as_table_like().and_then(|t| t.get("trusted_hash")).and_then(|h| h.as_str());
                    hash.is_some_and(|h| ours.iter().any(|o| o == h))
                })
                .map(|(k, _)| k.to_string())
                .collect(),
            None => Vec::new(),
        };
        let missing: Vec<&(String, String)> = wanted.iter().filter(|(k, h)| !is_trusted(doc, k, h)).collect();
        if stale.is_empty() && missing.is_empty() {
            return Ok(false);
        }
        let hooks = doc.entry("hooks").or_insert_with(|| {
            let mut t = Table::new();
            t.set_implicit(true);
            Item::Table(t)
        });
        let hooks = hooks.as_table_mut().ok_or("its `hooks` is not a table")?;
        let state = hooks.entry("state").or_insert_with(|| {
            let mut t = Table::new();
            t.set_implicit(true);
            Item::Table(t)
        });
        let state = state.as_table_mut().ok_or("its `hooks.state` is not a table")?;
        for key in &stale {
            state.remove(key);
        }
        for (key, hash) in missing {
            match state.get_mut(key).and_then(Item::as_table_like_mut) {
                // The user's own entry for this hook (say, `enabled`): only
                // its hash changes.
                Some(entry) => {
                    entry.insert("trusted_hash", toml_edit::value(hash.as_str()));
                }
                None => {
                    let mut entry = Table::new();
                    entry.insert("trusted_hash", toml_edit::value(hash.as_str()));
                    state.insert(key, Item::Table(entry));
                }
            }
        }
        // Tables left empty that only held ours go (an explicit header
        // the user wrote stays).
        if state.is_empty() && state.is_implicit() {
            hooks.remove("state");
        }
        if hooks.is_empty() && hooks.is_implicit() {
            doc.remove("hooks");
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 30, item 1: the agent of a prompt's checkpoint, from the ids
    /// each agent's hook gives (as tests/agents.rs sees them).
    #[test]
    fn the_agent_of_a_prompt_is_told_by_its_ids() {
        let gemini = "9c776ace-1b69-42ac-a7c5-8a1f880122ea";
        assert_eq!(Agent::of_prompt(&format!("{gemini}-000002"), gemini), Some(Agent::Gemini));
        let codex = "019d036e-3164-7a10-9c2e-5f6a7b8c9d0e";
        assert_eq!(Agent::of_prompt("019d036e-31a0-7b11-8d2e-000000000001", codex), Some(Agent::Codex));
        let claude = "5f0e2b7c-1d3a-4e5f-9a8b-7c6d5e4f3a2b";
        assert_eq!(Agent::of_prompt("c854c72f-0a1b-4c2d-8e3f-405162738495", claude), Some(Agent::Claude));
        assert_eq!(Agent::of_prompt("m1", "s1"), None, "a harness's own ids name no agent");
        let how = Agent::Claude.conversation_rewind(claude, "Bump it");
        assert!(how.starts_with(&format!("`claude --resume {claude}`")) && how.contains("\"Bump it\""), "{how}");
    }

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

    #[test]
    fn codex_trust_hash_is_codex_s_own() {
        // The hash Codex 0.171.0 itself accepted for this command (a hook
        // with a wrong one is skipped): the fingerprint must stay Codex's.
        assert_eq!(
            codex::trust_hash("cat >> /tmp/cx/hook.log; echo >> /tmp/cx/hook.log"),
            "sha256:3d3f08e0a5695a84cd687f32998fbf22be3a5df9690137226eb91ea5cc64499f"
        );
    }

    #[test]
    fn codex_run_overrides_are_toml_holding_the_hook_and_its_trust() {
        let cmd = "'/my dir/rewindfs' hook codex";
        let args = codex::run_overrides(cmd);
        assert_eq!((args[0].as_str(), args[2].as_str()), ("-c", "-c"));
        let parse = |arg: &str| -> toml_edit::DocumentMut {
            let (key, value) = arg.split_once('=').unwrap();
            format!("{key} = {value}").parse().unwrap_or_else(|e| panic!("{arg}: {e}"))
        };
        let hooks = parse(&args[1]);
        let entry = &hooks["hooks"]["UserPromptSubmit"][0]["hooks"][0];
        assert_eq!(entry["command"].as_str(), Some(cmd));
        assert_eq!(entry["timeout"].as_integer(), Some(10));
        let state = parse(&args[3]);
        let hash =
            state["hooks"]["state"]["/<session-flags>/config.toml:user_prompt_submit:0:0"]["trusted_hash"].as_str();
        assert_eq!(hash, Some(codex::trust_hash(cmd).as_str()));
    }

    #[test]
    fn codex_trust_is_added_and_removed_leaving_the_config_as_it_was() {
        let before =
            "# mine\nmodel = \"m\"\n\n[hooks.state.\"/other/hooks.json:user_prompt_submit:0:0\"]\nenabled = false\n";
        let mut config: toml_edit::DocumentMut = before.parse().unwrap();
        let source = Path::new("/h/.codex/hooks.json");
        let mut hooks = doc(r#"{"hooks":{"UserPromptSubmit":[{"hooks":[{"type":"command","command":"mine"}]}]}}"#);
        install(&mut hooks, Agent::Codex, "/bin/rewindfs hook codex").unwrap();
        let wanted = codex::wanted(source, &hooks);
        assert_eq!(wanted.len(), 1);
        assert_eq!(wanted[0].0, "/h/.codex/hooks.json:user_prompt_submit:1:0", "our group follows the user's");
        let ours = vec![wanted[0].1.clone()];
        assert!(codex::set_trust(&mut config, source, &wanted, &ours).unwrap());
        assert!(codex::is_trusted(&config, &wanted[0].0, &wanted[0].1));
        let trusted = config.to_string();
        assert!(trusted.starts_with(before), "the user's text is kept: {trusted}");
        assert!(!codex::set_trust(&mut config, source, &wanted, &ours).unwrap(), "a second time changes nothing");
        // The user's hook goes: ours moves to group 0, and its trust with it.
        let moved = doc(
            r#"{"hooks":{"UserPromptSubmit":[{"hooks":[{"type":"command","command":"/bin/rewindfs hook codex","timeout":10}]}]}}"#,
        );
        let now = codex::wanted(source, &moved);
        assert!(codex::set_trust(&mut config, source, &now, &ours).unwrap());
        assert!(codex::is_trusted(&config, &now[0].0, &now[0].1));
        assert!(!codex::is_trusted(&config, &wanted[0].0, &wanted[0].1), "the stale entry went");
        assert!(codex::set_trust(&mut config, source, &[], &ours).unwrap());
        assert_eq!(config.to_string(), before, "uninstall gives back the file as it was");
        let mut empty = toml_edit::DocumentMut::new();
        assert!(codex::set_trust(&mut empty, source, &now, &ours).unwrap());
        assert!(codex::set_trust(&mut empty, source, &[], &ours).unwrap());
        assert_eq!(empty.to_string(), "");
        let mut odd: toml_edit::DocumentMut = "hooks = 3\n".parse().unwrap();
        assert!(codex::set_trust(&mut odd, source, &now, &ours).is_err());
    }
}
