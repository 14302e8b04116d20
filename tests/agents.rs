//! The real agent CLIs inside a mount: Claude Code, Gemini CLI and Codex
//! from npm, driven by a scripted model server of our own
//! (tests/agents/model_server.py) that answers each prompt with a fixed
//! scenario of tool calls: file writes and edits, a build writing hundreds
//! of files, `rm -rf`, `git init` and commits. Everything runs in a network
//! namespace of its own (`unshare -n`) with the server on its loopback, so
//! nothing leaves the machine.
//!
//! The server copies the workspace when a prompt's first model request
//! arrives: the agent has run its prompt hook and waits, so the copy is the
//! tree the prompt's checkpoint must hold.

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;
use sha2::Digest;

const CLAUDE: (&str, &str, &str) = ("@anthropic-ai/claude-code", "2.1.328", "claude");
const GEMINI: (&str, &str, &str) = ("@google/gemini-cli", "0.61.0", "gemini");
const CODEX: (&str, &str, &str) = ("@openai/codex", "0.171.0", "codex");

/// The model server's port in its network namespace (Codex takes the
/// address from its config file, not from the environment).
const MODEL_PORT: u16 = 18321;

/// One npm install at a time (the tests of this file run in parallel).
static NPM: Mutex<()> = Mutex::new(());

/// The agent CLI's executable, installed with npm into a cache under the
/// target directory (or $REWINDFS_AGENT_CLIS) when it is not there yet.
/// Fails the test, loudly, when it cannot be installed.
fn agent_cli((package, version, bin): (&str, &str, &str)) -> PathBuf {
    let _one = NPM.lock().unwrap_or_else(|p| p.into_inner());
    let cache = std::env::var_os("REWINDFS_AGENT_CLIS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("agent-clis"));
    let dir = cache.join(format!("{}@{version}", package.replace('/', "+")));
    let exe = dir.join("node_modules/.bin").join(bin);
    if exe.exists() {
        return exe;
    }
    let tmp = cache.join(format!("{}.installing", dir.file_name().and_then(OsStr::to_str).unwrap_or("cli")));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).expect("cannot create the agent CLI cache");
    let started = Instant::now();
    // Its own npm cache, removed after: the packages are large and the
    // installed copy is all we keep.
    let npm_cache = tmp.join(".npm-cache");
    let out = run_with_timeout(
        Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--no-package-lock", "--loglevel=error", "--prefix"])
            .arg(&tmp)
            .arg("--cache")
            .arg(&npm_cache)
            .arg(format!("{package}@{version}")),
        Duration::from_secs(600),
    );
    let _ = std::fs::remove_dir_all(&npm_cache);
    assert!(
        out.status.success(),
        "cannot install {package}@{version} with npm (the agent tests need it; is the npm registry reachable?): {}\n{}{}",
        describe_status(&out),
        stdout(&out),
        stderr(&out)
    );
    std::fs::rename(&tmp, &dir).expect("cannot move the installed agent CLI into place");
    eprintln!("installed {package}@{version} in {:.1}s", started.elapsed().as_secs_f64());
    assert!(exe.exists(), "{package}@{version} installed no {}", exe.display());
    exe
}

/// Starts the model server in a fresh network namespace, points the agent
/// at it and runs the rest of the command line there.
const DRIVER: &str = r#"
ip link set lo up || exit 90
api=$1; shift
rm -f "$PORT_FILE"
python3 "$SERVER" --api "$api" --workspace "$WS" --snapshots "$SNAPS" --port-file "$PORT_FILE" --log "$SERVER_LOG" \
    --port "$MODEL_PORT" &
srv=$!
trap 'kill $srv 2>/dev/null' EXIT
for _ in $(seq 200); do [ -s "$PORT_FILE" ] && break; sleep 0.05; done
[ -s "$PORT_FILE" ] || { echo "the model server did not start" >&2; exit 91; }
export ANTHROPIC_BASE_URL="http://127.0.0.1:$(cat "$PORT_FILE")"
export GOOGLE_GEMINI_BASE_URL="$ANTHROPIC_BASE_URL"
cd "$WS" || exit 92
"$@"
"#;

/// A mounted-workspace scenario for one agent: the fixture, a scratch HOME,
/// the server's snapshots, and a log of what the agent's hooks received.
struct Scene {
    fx: MountFixture,
    home: PathBuf,
    snaps: PathBuf,
    hook_log: PathBuf,
    server_log: PathBuf,
    bin_dir: PathBuf,
}

impl Scene {
    fn new(cli: &Path) -> Scene {
        let fx = MountFixture::unmounted();
        let root = fx.dir.path().canonicalize().expect("temp dir");
        let (home, snaps, bin_dir) = (root.join("home"), root.join("snaps"), root.join("bin"));
        for d in [&home, &snaps, &bin_dir] {
            std::fs::create_dir_all(d).expect("cannot create scene dirs");
        }
        // The agent finds `rewindfs`, the agent CLI and git on PATH.
        std::os::unix::fs::symlink(cli, bin_dir.join(cli.file_name().expect("cli name"))).expect("symlink cli");
        std::os::unix::fs::symlink(bin(), bin_dir.join("rewindfs")).expect("symlink rewindfs");
        let (hook_log, server_log) = (root.join("hook-input.log"), root.join("server.log"));
        let s = Scene { fx, home, snaps, hook_log, server_log, bin_dir };
        s.fx.sh_in_ws("printf 'first notes\\n' > old.txt && printf '# demo\\n' > README.md");
        s
    }

    /// A command with the scene's environment and nothing else of ours
    /// (no API keys or agent settings of whoever runs the tests).
    fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new(program);
        let path = format!("{}:{}", self.bin_dir.display(), std::env::var("PATH").unwrap_or_default());
        c.env_clear()
            .env("PATH", path)
            .env("HOME", &self.home)
            .env("LANG", "C.UTF-8")
            .env("TERM", "dumb")
            .env("REWINDFS_RUNTIME_DIR", &self.fx.run)
            .env("REWINDFS_HOME", self.fx.dir.path().join("rewindfs-home"))
            .env("ANTHROPIC_API_KEY", "dummy")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            // Root may skip permission prompts only in a declared sandbox.
            .env("IS_SANDBOX", "1")
            .env("GEMINI_API_KEY", "dummy")
            // Headless runs refuse an untrusted folder.
            .env("GEMINI_CLI_TRUST_WORKSPACE", "true")
            // Not the workspace: an in-place mount refuses processes inside.
            .current_dir(self.fx.dir.path());
        c
    }

    /// `rewindfs ARGS` in the scene's environment; asserts success.
    fn rewindfs(&self, args: &[&str]) -> String {
        stdout(&check(run_with_timeout(self.command(bin()).args(args), CHILD_TIMEOUT), &format!("rewindfs {args:?}")))
    }

    /// Runs ARGS inside a network namespace of its own with the model
    /// server on its loopback; asserts success.
    fn offline(&self, api: &str, args: &[&OsStr]) -> Output {
        let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/agents/model_server.py");
        let port_file = self.fx.dir.path().join("port");
        let mut c = self.command("unshare");
        c.args(["-n", "bash", "-c", DRIVER, "driver", api])
            .args(args)
            .env("SERVER", server)
            .env("WS", &self.fx.ws)
            .env("SNAPS", &self.snaps)
            .env("PORT_FILE", port_file)
            .env("MODEL_PORT", MODEL_PORT.to_string())
            .env("SERVER_LOG", &self.server_log);
        let out = run_with_timeout(&mut c, CHILD_TIMEOUT);
        if !out.status.success() {
            let log = std::fs::read_to_string(&self.server_log).unwrap_or_default();
            panic!(
                "{args:?} under unshare -n failed: {}\nstdout: {}\nstderr: {}\nserver log:\n{log}",
                describe_status(&out),
                stdout(&out),
                stderr(&out)
            );
        }
        out
    }

    /// What the agent's prompt hooks received, one JSON object per prompt
    /// (written by the user's own logging hook).
    fn hook_inputs(&self) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(&self.hook_log).unwrap_or_default();
        serde_json::Deserializer::from_str(&text)
            .into_iter::<serde_json::Value>()
            .map(|v| v.unwrap_or_else(|e| panic!("bad hook input in {}: {e}\n{text}", self.hook_log.display())))
            .collect()
    }

    fn log_json(&self) -> Vec<serde_json::Value> {
        let ws = self.fx.ws.to_str().expect("utf-8 path");
        let v: serde_json::Value =
            serde_json::from_str(&self.rewindfs(&["log", "-C", ws, "--json"])).expect("log --json is JSON");
        v.as_array().expect("log --json is an array").clone()
    }

    /// `cp -a` of the workspace (through the mount) into NAME.
    fn copy(&self, name: &str) -> PathBuf {
        let dst = self.fx.dir.path().join(name);
        let out = run_with_timeout(Command::new("cp").arg("-a").arg(self.fx.ws.join(".")).arg(&dst), CHILD_TIMEOUT);
        check(out, "cp -a of the workspace");
        dst
    }
}

impl MountFixture {
    fn sh_in_ws(&self, script: &str) -> String {
        sh(&self.ws, script)
    }
}

/// The checkpoints sealed for an agent session's prompts, oldest first.
fn prompt_checkpoints(log: &[serde_json::Value], session: &str) -> Vec<serde_json::Value> {
    log.iter().filter(|t| t["session"] == session).cloned().collect()
}

/// What differs between the agents in the end-to-end scenario.
struct AgentSpec {
    name: &'static str,
    cli: (&'static str, &'static str, &'static str),
    /// The model API the scripted server speaks.
    api: &'static str,
    /// The user's settings file, relative to HOME.
    settings: &'static str,
    /// Settings the agent needs besides hooks.
    base_settings: serde_json::Value,
    /// Other files of the user's configuration (relative to HOME), written
    /// by `setup`; they must not change either.
    other_files: &'static [&'static str],
    /// Writes the other files, given HOME and the user's logging hook.
    setup: fn(home: &Path, logging_hook: &str),
    /// The hook event that fires per prompt.
    event: &'static str,
    /// The command line of one prompt, continuing the session when `resume`.
    args: fn(prompt: &str, resume: Option<&str>) -> Vec<String>,
    /// The session id, from the agent's output.
    session_of: fn(&str) -> String,
    /// The message ids the prompts' checkpoints must have, from what the
    /// hooks received.
    message_ids: fn(&[serde_json::Value], &str) -> Vec<String>,
    /// Its process name in `log`'s programs.
    program: &'static str,
}

const PROMPTS: [&str; 3] = [
    "Create the app and build it (scenario prompt 1)\nUse python.",
    "Bump the greeting and clean up (scenario prompt 2)",
    "Package it (scenario prompt 3)",
];

/// One agent end to end: one prompt under `rewindfs run` (wired for the
/// run, nothing installed), then `hooks install` and two more prompts of
/// the same session in a mount. Each prompt gets one checkpoint, named by
/// its message id and labelled with its first line, whose view is the tree
/// the agent started the prompt from; references by id prefix and label
/// work; rewinding to each prompt gives that tree back exactly (the Bash
/// changes included), and the rewind can be undone.
fn agent_end_to_end(spec: &AgentSpec) {
    let started = Instant::now();
    let cli = agent_cli(spec.cli);
    let scene = Scene::new(&cli);
    let ws = scene.fx.ws.to_str().expect("utf-8 path").to_string();
    let store = scene.fx.store.to_str().expect("utf-8 path").to_string();

    // The user's own settings: a hook that logs what the agent sends (so
    // the test knows each prompt's id), which `hooks install` must keep.
    let user_settings = scene.home.join(spec.settings);
    std::fs::create_dir_all(user_settings.parent().expect("parent")).expect("mkdir settings dir");
    let logging_hook = format!("cat >> {}; echo >> {}", scene.hook_log.display(), scene.hook_log.display());
    let mut settings = spec.base_settings.clone();
    settings["hooks"] = serde_json::json!({spec.event: [{"hooks": [{"type": "command", "command": logging_hook}]}]});
    let original = serde_json::to_string_pretty(&settings).expect("json") + "\n";
    std::fs::write(&user_settings, &original).expect("write settings");
    let read_settings = || std::fs::read_to_string(&user_settings).expect("settings");
    (spec.setup)(&scene.home, &logging_hook);
    let others = || -> Vec<String> {
        let read = |f: &&str| std::fs::read_to_string(scene.home.join(f)).expect("a configuration file");
        spec.other_files.iter().map(read).collect()
    };
    let other_originals = others();

    let session_of = |out: &Output| -> String { (spec.session_of)(&stdout(out)) };

    // Prompt 1: `rewindfs run` mounts, wires the agent for the run (no
    // hook of ours installed yet) and unmounts.
    let t = Instant::now();
    let mut args: Vec<String> = ["rewindfs", "run", &ws, "--store", &store, "--"].map(String::from).to_vec();
    args.extend((spec.args)(PROMPTS[0], None));
    let out = scene.offline(spec.api, &args.iter().map(OsStr::new).collect::<Vec<_>>());
    let session = session_of(&out);
    eprintln!("{}: prompt 1 (rewindfs run) took {:.1}s", spec.name, t.elapsed().as_secs_f64());
    assert_eq!(read_settings(), original, "`run` changed the user's settings");
    assert_eq!(others(), other_originals, "`run` changed the user's configuration");

    // Then the hook installed for the user, next to the user's own.
    let installed = scene.rewindfs(&["hooks", "install", spec.name, "--dry-run"]);
    let ours = format!("hook {}", spec.name);
    assert!(installed.contains('+') && installed.contains(&ours), "dry run shows no change: {installed}");
    assert_eq!(read_settings(), original, "--dry-run wrote the file");
    scene.rewindfs(&["hooks", "install", spec.name]);
    let again = scene.rewindfs(&["hooks", "install", spec.name]);
    assert!(again.contains("already installed"), "second install: {again}");
    let backup = std::fs::read_to_string(format!("{}.rewindfs-backup", user_settings.display())).expect("backup");
    assert_eq!(backup, original, "the backup is the file as it was");
    let status = scene.rewindfs(&["hooks", "status"]);
    let line = format!("{:<7} user", spec.name);
    assert!(status.lines().any(|l| l.starts_with(&line) && l.contains("installed: ")), "{status}");
    if spec.name == "codex" {
        assert!(status.lines().any(|l| l.starts_with(&line) && l.ends_with("(trusted)")), "{status}");
    }

    // Prompts 2 and 3 continue the session in a plain mount.
    scene.rewindfs(&["mount", &ws, "--store", &store]);
    let mut mounted = Unmount { scene: &scene, ws: ws.clone() };
    for prompt in &PROMPTS[1..] {
        let t = Instant::now();
        let args = (spec.args)(prompt, Some(&session));
        let out = scene.offline(spec.api, &args.iter().map(OsStr::new).collect::<Vec<_>>());
        assert_eq!(session_of(&out), session, "the session was not continued");
        eprintln!("{}: a prompt took {:.1}s", spec.name, t.elapsed().as_secs_f64());
    }
    let final_copy = scene.copy("final");
    scenario_ran(&scene.snaps, &final_copy, spec.name);

    // One checkpoint per prompt, named by its message id, labelled with
    // its first line.
    let inputs = scene.hook_inputs();
    assert_eq!(inputs.len(), 3, "the logging hook saw {} prompts: {inputs:?}", inputs.len());
    let log = scene.log_json();
    let mine = prompt_checkpoints(&log, &session);
    let ids = (spec.message_ids)(&inputs, &session);
    let got: Vec<&str> = mine.iter().map(|t| t["message_id"].as_str().unwrap_or("")).collect();
    assert_eq!(got, ids, "checkpoints of the session vs message ids; log: {log:#?}");
    let labels: Vec<&str> = mine.iter().map(|t| t["label"].as_str().unwrap_or("")).collect();
    assert_eq!(
        labels,
        ["Create the app and build it (scenario prompt 1)", PROMPTS[1], PROMPTS[2]],
        "labels are the prompts' first lines"
    );

    // Each prompt's checkpoint is the tree the agent started it from.
    for (n, id) in ids.iter().enumerate() {
        let snap = scene.snaps.join(format!("p{}", n + 1));
        assert_same_tree(&snap, &scene.fx.ws.join(".rewindfs/messages").join(id), &format!("view of prompt {}", n + 1));
    }
    // The agent's processes, not its threads, are named.
    let p1 = &mine[0]["programs"];
    let names: Vec<&String> = p1.as_object().expect("programs").keys().collect();
    assert!(names.iter().any(|n| *n == spec.program), "the edit tools' changes are not {}'s: {names:?}", spec.program);
    assert!(names.iter().all(|n| !n.starts_with("Bun ")), "thread names in programs: {names:?}");
    for p in ["git", "mkdir"] {
        assert!(names.iter().any(|n| *n == p), "{p} missing from prompt 1's programs {names:?}");
    }
    let text_log = scene.rewindfs(&["log", "-C", &ws]);
    eprintln!("{} session, `rewindfs log`:\n{text_log}", spec.name);
    let row = text_log
        .lines()
        .find(|l| l.contains("(scenario prompt 2)"))
        .unwrap_or_else(|| panic!("no row for {}:\n{text_log}", ids[1]));
    assert!(row.ends_with("\"Bump the greeting and clean up (scenario prompt 2)\""), "label not last, quoted: {row}");
    assert!(row.contains(&format!("  {}", &ids[1][..8])), "the row does not name prompt 2's id: {row}");

    // A prompt is named by its id, a unique prefix of it, or its label.
    // The shortest prefix of the first id that is no other's (Gemini's ids
    // share the session; then it is the whole id).
    let prefix = (8..=ids[0].len())
        .map(|n| ids[0][..n].to_string())
        .find(|p| ids[1..].iter().all(|i| !i.starts_with(p.as_str())))
        .unwrap_or_else(|| ids[0].clone());
    let references = [prefix, "bump the GREETING".to_string(), ids[2].clone()];
    let stat = scene.rewindfs(&["diff", "-C", &ws, "--stat", &references[0], &references[1]]);
    assert!(stat.contains("build/app.bin | +1 -0 (added)") && stat.contains("app.py"), "{stat}");
    let shown = scene.fx.dir.path().join("shown");
    std::fs::create_dir(&shown).expect("mkdir");
    scene.rewindfs(&["show", "-C", &ws, "Package it", shown.to_str().expect("utf-8 path")]);
    assert_same_tree(&scene.snaps.join("p3"), &shown, "show by label");
    scene.rewindfs(&["unmount", shown.to_str().expect("utf-8 path")]);

    // Rewind to each prompt, newest first, then undo.
    let mut safety = None;
    for (n, reference) in references.iter().enumerate().rev() {
        let out = scene.rewindfs(&["rewind", "-C", &ws, "--json", reference]);
        let v: serde_json::Value = serde_json::from_str(&out).expect("rewind --json");
        safety.get_or_insert(v["safety_checkpoint"].as_i64().expect("safety checkpoint"));
        let what = format!("rewound to prompt {}", n + 1);
        assert_same_tree(&scene.snaps.join(format!("p{}", n + 1)), &scene.fx.ws, &what);
    }
    let undo = safety.expect("a rewind").to_string();
    scene.rewindfs(&["rewind", "-C", &ws, &undo]);
    assert_same_tree(&final_copy, &scene.fx.ws, "the first rewind undone");
    // A rewind to a prompt says how to take the agent's conversation back
    // to it too, with the agent's own command (the prompts above resumed
    // the session the same way).
    let out = scene.rewindfs(&["rewind", "-C", &ws, &references[1]]);
    let resume = match spec.name {
        "codex" => format!("`codex resume {session}`"),
        name => format!("`{name} --resume {session}`"),
    };
    assert!(out.contains(&resume) && out.contains(&format!("\"{}\"", PROMPTS[1])), "{out}");

    // The same prompt sent again after the rewind: two checkpoints of one
    // label; a reference by its words takes the one on the current branch
    // and says so, and `log` marks the abandoned one.
    let args = (spec.args)(PROMPTS[1], Some(&session));
    scene.offline(spec.api, &args.iter().map(OsStr::new).collect::<Vec<_>>());
    let again = prompt_checkpoints(&scene.log_json(), &session);
    let resent = again.last().expect("the prompt sent again")["checkpoint"].as_i64().expect("number");
    let old = mine[1]["checkpoint"].as_i64().expect("number");
    assert_eq!(again.last().map(|t| t["label"].clone()), Some(PROMPTS[1].into()), "{again:#?}");
    let out = check(
        run_with_timeout(scene.command(bin()).args(["diff", "-C", &ws, "--stat", "greeting BUMP"]), CHILD_TIMEOUT),
        "diff by the label's words",
    );
    let note =
        format!("checkpoint {resent} is on the current branch; checkpoint {old} matched too, abandoned by a rewind");
    assert!(stderr(&out).contains(&note), "{}", stderr(&out));
    let text_log = scene.rewindfs(&["log", "-C", &ws]);
    let mark = |n: i64| text_log.lines().find(|l| l.get(1..4) == Some(&format!("{n:>3}"))).map(|l| &l[..1]);
    assert_eq!((mark(old), mark(resent)), (Some("x"), Some("*")), "{text_log}");

    mounted.done();
    let removed = scene.rewindfs(&["hooks", "uninstall", spec.name]);
    assert!(removed.contains("removed"), "{removed}");
    assert_eq!(read_settings(), original, "uninstall left the file as it was");
    assert_eq!(others(), other_originals, "uninstall left the configuration as it was");
    eprintln!("{} end to end: {:.1}s", spec.name, started.elapsed().as_secs_f64());
}

/// The agent really did what the scenario asked (an agent that refuses a
/// command still answers, and the views would match an idle agent too):
/// the build of prompt 1, the edit and removals of prompt 2, the chmod and
/// symlink of prompt 3.
fn scenario_ran(snaps: &Path, final_copy: &Path, agent: &str) {
    use std::os::unix::fs::PermissionsExt;
    let p2 = snaps.join("p2");
    assert!(p2.join("build/obj/o300.o").is_file() && p2.join(".git").is_dir(), "{agent}: prompt 1's build did not run");
    assert!(p2.join("notes/todo.md").is_file() && p2.join("old.txt").is_file(), "{agent}: prompt 1's writes");
    let p3 = snaps.join("p3");
    let app = std::fs::read_to_string(p3.join("app.py")).unwrap_or_default();
    assert!(app.contains("hello v2"), "{agent}: prompt 2's edit did not happen: {app:?}");
    assert!(!p3.join("build").exists() && !p3.join("old.txt").exists(), "{agent}: prompt 2's removals did not run");
    assert!(p3.join("notes/log.txt").is_file(), "{agent}: prompt 2's shell step did not run");
    let mode = std::fs::metadata(final_copy.join("dist/app.py")).map(|m| m.permissions().mode() & 0o777);
    assert_eq!(mode.ok(), Some(0o600), "{agent}: prompt 3's chmod");
    let link = std::fs::read_link(final_copy.join("current")).ok();
    assert_eq!(link.as_deref(), Some(Path::new("dist/app.py")), "{agent}: prompt 3's symlink");
}

/// Claude Code: UserPromptSubmit carries a fresh prompt_id per prompt.
#[test]
fn claude_code_prompts_are_checkpoints() {
    agent_end_to_end(&AgentSpec {
        name: "claude",
        cli: CLAUDE,
        api: "anthropic",
        settings: ".claude/settings.json",
        base_settings: serde_json::json!({}),
        other_files: &[],
        setup: |_, _| {},
        event: "UserPromptSubmit",
        args: |prompt, resume| {
            let mut a: Vec<String> = vec!["claude".into(), "-p".into(), prompt.into()];
            a.extend(["--output-format", "json", "--dangerously-skip-permissions"].map(String::from));
            if let Some(s) = resume {
                a.extend(["--resume".into(), s.into()]);
            }
            a
        },
        session_of: |out| {
            let v = json_of(out);
            assert_eq!(v["is_error"], false, "claude reported an error: {v}");
            v["session_id"].as_str().unwrap_or_else(|| panic!("no session_id in {v}")).to_string()
        },
        message_ids: |inputs, _| {
            inputs.iter().map(|i| i["prompt_id"].as_str().expect("prompt_id").to_string()).collect()
        },
        program: "claude",
    });
}

/// Gemini CLI: BeforeAgent has no prompt id; the message ids are the
/// session id and the prompt's number in it.
#[test]
fn gemini_cli_prompts_are_checkpoints() {
    agent_end_to_end(&AgentSpec {
        name: "gemini",
        cli: GEMINI,
        api: "gemini",
        settings: ".gemini/settings.json",
        base_settings: serde_json::json!({"security": {"auth": {"selectedType": "gemini-api-key"}}}),
        other_files: &[],
        setup: |_, _| {},
        event: "BeforeAgent",
        args: |prompt, resume| {
            // An explicit model: the default asks a router model first.
            let mut a: Vec<String> = vec!["gemini".into(), "-p".into(), prompt.into()];
            a.extend(["--output-format", "json", "--yolo", "-m", "gemini-2.5-flash"].map(String::from));
            // By the session's id, as `rewindfs rewind` tells the user.
            if let Some(s) = resume {
                a.extend(["--resume".into(), s.into()]);
            }
            a
        },
        session_of: |out| {
            let v = json_of(out);
            v["session_id"].as_str().unwrap_or_else(|| panic!("no session_id in {v}")).to_string()
        },
        message_ids: |inputs, session| {
            for i in inputs {
                assert_eq!(i["session_id"], session, "a prompt of another session: {i}");
            }
            (1..=inputs.len()).map(|n| format!("{session}-{n:06}")).collect()
        },
        program: "node",
    });
}

/// Codex: UserPromptSubmit carries the turn's id. The user's config.toml
/// points Codex at the scripted server and trusts the user's own logging
/// hook (as Codex's review screen would); `hooks install` adds the trust
/// of ours, `rewindfs run` gives both on the command line.
#[test]
fn codex_prompts_are_checkpoints() {
    agent_end_to_end(&AgentSpec {
        name: "codex",
        cli: CODEX,
        api: "openai",
        settings: ".codex/hooks.json",
        base_settings: serde_json::json!({}),
        other_files: &[".codex/config.toml"],
        setup: |home, logging_hook| {
            let hooks_json = home.join(".codex/hooks.json");
            // Codex's fingerprint of a hook, computed here on our own
            // from what its source does (serde_json sorts the keys; the
            // hook gives no timeout, Codex's default is 600 s).
            let identity = serde_json::json!({"event_name": "user_prompt_submit",
                "hooks": [{"type": "command", "command": logging_hook, "timeout": 600, "async": false}]});
            let digest = sha2::Sha256::digest(identity.to_string().as_bytes());
            let hash: String = digest.iter().map(|b| format!("{b:02x}")).collect();
            let config = format!(
                "# the user's own\nmodel = \"gpt-5.5\"\nmodel_provider = \"scripted\"\n\n\
                 [model_providers.scripted]\nname = \"scripted\"\nbase_url = \"http://127.0.0.1:{MODEL_PORT}/v1\"\n\
                 wire_api = \"responses\"\n\n\
                 [hooks.state.\"{}:user_prompt_submit:0:0\"]\ntrusted_hash = \"sha256:{hash}\"\n",
                hooks_json.display()
            );
            std::fs::write(home.join(".codex/config.toml"), config).expect("write config.toml");
        },
        event: "UserPromptSubmit",
        args: |prompt, resume| {
            let mut a: Vec<String> = ["codex", "exec"].map(String::from).to_vec();
            if let Some(s) = resume {
                a.extend(["resume".into(), s.into()]);
            }
            a.extend(
                ["--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"].map(String::from),
            );
            a.push(prompt.into());
            a
        },
        session_of: |out| {
            let events: Vec<serde_json::Value> = out.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
            assert!(events.iter().any(|e| e["type"] == "turn.completed"), "codex did not complete the turn: {out}");
            let started = events.iter().find(|e| e["type"] == "thread.started");
            let id = started.and_then(|e| e["thread_id"].as_str());
            id.unwrap_or_else(|| panic!("no thread.started in {out}")).to_string()
        },
        message_ids: |inputs, session| {
            for i in inputs {
                assert_eq!(i["session_id"], session, "a prompt of another session: {i}");
            }
            inputs.iter().map(|i| i["turn_id"].as_str().expect("turn_id").to_string()).collect()
        },
        program: "codex",
    });
}

/// `rewindfs run -- codex` with a stand-in `codex` that records its
/// arguments: the run gives our hook and its trust entry with `-c`, before
/// the subcommand; once the user's own install is trusted it adds nothing
/// (the hook would run twice); the user's files are never changed by it.
#[test]
fn run_wires_codex_unless_the_user_s_trusted_hook_does() {
    let fx_dir = tempfile::tempdir().expect("tempdir");
    let fake = fx_dir.path().join("codex");
    let args_file = fx_dir.path().join("args");
    std::fs::write(&fake, format!("#!/bin/sh\nprintf '%s\\n' \"$@\" > {}\n", args_file.display())).expect("write");
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let scene = Scene::new(&fake);
    let (ws, store) = (scene.fx.ws.to_str().expect("utf-8"), scene.fx.store.to_str().expect("utf-8"));
    let run = || -> Vec<String> {
        let _ = std::fs::remove_file(&args_file);
        scene.rewindfs(&["run", ws, "--store", store, "--", "codex", "exec", "hi"]);
        std::fs::read_to_string(&args_file).expect("the stand-in codex ran").lines().map(String::from).collect()
    };
    let args = run();
    assert_eq!(args.len(), 6, "{args:?}");
    assert_eq!((args[0].as_str(), args[2].as_str()), ("-c", "-c"), "{args:?}");
    assert!(
        args[1].starts_with("hooks.UserPromptSubmit=[{hooks=[{type=\"command\",command=")
            && args[1].contains(" hook codex")
    );
    assert!(
        args[3].starts_with(
            "hooks.state={\"/<session-flags>/config.toml:user_prompt_submit:0:0\"={trusted_hash=\"sha256:"
        )
    );
    assert_eq!(args[4..], ["exec", "hi"]);
    assert!(!scene.home.join(".codex").exists(), "run wrote into the user's ~/.codex");

    scene.rewindfs(&["hooks", "install", "codex"]);
    assert_eq!(run(), ["exec", "hi"], "the user's trusted hook already runs");
    // Untrusted again (say the user edited config.toml): wired for the run.
    let config = scene.home.join(".codex/config.toml");
    std::fs::write(&config, "").expect("truncate config.toml");
    assert!(scene.rewindfs(&["hooks", "status"]).contains("NOT trusted by Codex"));
    assert_eq!(run().len(), 6);
}

fn json_of(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("the agent printed no JSON ({e}): {out}"))
}

/// Unmounts the scene's workspace when dropped (also on a failed assert).
struct Unmount<'a> {
    scene: &'a Scene,
    ws: String,
}

impl Unmount<'_> {
    fn done(&mut self) {
        self.scene.rewindfs(&["unmount", &self.ws]);
        self.ws.clear();
    }
}

impl Drop for Unmount<'_> {
    fn drop(&mut self) {
        if !self.ws.is_empty() {
            let _ = run_with_timeout(self.scene.command(bin()).args(["unmount", &self.ws]), CHILD_TIMEOUT);
            if is_mounted(Path::new(&self.ws)) {
                let _ = Command::new("umount").arg("-l").arg(&self.ws).status();
            }
        }
    }
}

/// `rewindfs hook` without a real agent: outside any mount it exits 0 and
/// prints nothing; inside one, Codex's UserPromptSubmit input (no prompt
/// id: its turn id names the prompt) seals one checkpoint, and nothing
/// goes to stdout (Claude Code and Codex put a prompt hook's stdout in
/// the model's context).
#[test]
fn hook_is_silent_outside_a_mount_and_keys_codex_prompts_by_turn_id() {
    let fx = MountFixture::new();
    let hook = |cwd: &Path, input: String| -> Output {
        let mut c = fx.command();
        c.args(["hook", "codex"]).stdin(std::process::Stdio::piped());
        c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).current_dir(cwd);
        let mut child = c.spawn().expect("spawn rewindfs hook");
        use std::io::Write;
        child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write hook input");
        wait_child(&mut child, CHILD_TIMEOUT, "rewindfs hook codex")
    };
    let outside = fx.dir.path().to_path_buf();
    let input = |cwd: &Path| {
        serde_json::json!({"session_id": "s-9", "turn_id": "019d036e-3164", "cwd": cwd,
            "hook_event_name": "UserPromptSubmit", "prompt": "Tidy the docs\nplease"})
        .to_string()
    };
    let out = hook(&outside, input(&outside));
    assert!(out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(), "{}", describe_status(&out));

    let inside = fx.path().join("sub");
    std::fs::create_dir(&inside).expect("mkdir in mount");
    for _ in 0..2 {
        // A hook that fires twice for one prompt gets the same checkpoint.
        let out = hook(&inside, input(&inside));
        assert!(out.status.success(), "{}: {}", describe_status(&out), stderr(&out));
        assert!(out.stdout.is_empty(), "the hook printed on stdout: {}", stdout(&out));
    }
    let mp = fx.path().to_str().expect("utf-8 path").to_string();
    let log: serde_json::Value =
        serde_json::from_str(&stdout(&check(fx.rewindfs(&["log", "-C", &mp, "--json"]), "log"))).expect("json");
    let mine: Vec<&serde_json::Value> =
        log.as_array().expect("array").iter().filter(|t| t["session"] == "s-9").collect();
    assert_eq!(mine.len(), 1, "{log:#}");
    assert_eq!(mine[0]["message_id"], "019d036e-3164");
    assert_eq!(mine[0]["label"], "Tidy the docs");
}

/// `rewind` without a checkpoint: refused without a terminal; on one (a
/// tmux pane), a list of the prompts, newest first, where Down and Enter
/// pick the older one; what the rewind would change is shown, and on `y`
/// the workspace is rewound there.
#[test]
fn rewind_without_a_checkpoint_offers_a_picker_on_a_terminal() {
    let fx = MountFixture::new();
    let mp = fx.path().to_str().expect("utf-8 path").to_string();
    let turn = |id: &str, label: &str| {
        check(fx.rewindfs(&["turn", "-C", &mp, "--message-id", id, "--session", "s", "--label", label]), "turn");
    };
    turn("p-one", "First prompt");
    fx.sh("echo one > a.txt");
    turn("p-two", "Second prompt");
    fx.sh("echo two > a.txt && echo b > b.txt");

    let out = fx.rewindfs(&["rewind", "-C", &mp]);
    assert_eq!(out.status.code(), Some(2), "{}", describe_status(&out));
    assert!(stderr(&out).contains("only on a terminal"), "{}", stderr(&out));

    let socket = format!("rewindfs-test-{}", std::process::id());
    let (result, rc) = (fx.dir.path().join("result"), fx.dir.path().join("rc"));
    let script = format!(
        "REWINDFS_RUNTIME_DIR={} {} rewind -C {mp} > {}; echo $? > {}; sleep 60",
        fx.run.display(),
        bin(),
        result.display(),
        rc.display()
    );
    let tmux = |args: &[&str]| -> Output {
        run_with_timeout(Command::new("tmux").args(["-L", &socket]).args(args), Duration::from_secs(30))
    };
    struct Server<'a>(&'a dyn Fn(&[&str]) -> Output);
    impl Drop for Server<'_> {
        fn drop(&mut self) {
            (self.0)(&["kill-server"]);
        }
    }
    check(tmux(&["new-session", "-d", "-x", "160", "-y", "30", &script]), "tmux new-session");
    let _server = Server(&tmux);
    let screen = || stdout(&tmux(&["capture-pane", "-p"]));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !screen().contains("Second prompt") {
        assert!(Instant::now() < deadline, "no list on the terminal:\n{}", screen());
        std::thread::sleep(Duration::from_millis(100));
    }
    let shown = screen();
    let (two, one) = (shown.find("Second prompt").expect("p-two"), shown.find("First prompt"));
    assert!(one.is_some_and(|one| two < one), "newest first:\n{shown}");
    check(tmux(&["send-keys", "Down"]), "send Down");
    std::thread::sleep(Duration::from_millis(300));
    check(tmux(&["send-keys", "Enter"]), "send Enter");
    // Before anything is done, what the rewind would change, and a question.
    while !screen().contains("Rewind? (n: back to the list") {
        assert!(Instant::now() < deadline, "no preview on the terminal:\n{}", screen());
        std::thread::sleep(Duration::from_millis(100));
    }
    let preview = screen();
    assert!(preview.contains("rewind to checkpoint 1 would change 2 files (+0 -2 lines)"), "{preview}");
    assert!(preview.contains("delete    a.txt  (+0 -1)") && preview.contains("delete    b.txt"), "{preview}");
    assert!(fx.path().join("b.txt").exists() && !rc.exists(), "rewound before the answer");
    check(tmux(&["send-keys", "y"]), "send y");
    while !rc.exists() {
        assert!(Instant::now() < deadline, "rewind did not finish:\n{}", screen());
        std::thread::sleep(Duration::from_millis(100));
    }
    let done = std::fs::read_to_string(&result).expect("result");
    assert_eq!(std::fs::read_to_string(&rc).expect("rc").trim(), "0", "{done}\n{}", screen());
    assert!(done.starts_with("rewound to checkpoint 1:"), "{done}");
    assert!(!fx.path().join("a.txt").exists() && !fx.path().join("b.txt").exists(), "not rewound to p-one");
}

/// Wiring that lasts and says what it does: `hooks install` names the
/// `rewindfs` on PATH (not the build's own path, which `cargo clean`
/// removes) and warns when there is none; `run` finds the agent behind
/// `env VAR=1`, warns about a wrapper it cannot see into, and wires one
/// named with `--agent`; a settings file in another layout is rewritten
/// with a note saying so.
#[test]
fn wiring_names_a_lasting_binary_and_says_what_it_cannot_see() {
    let fx_dir = tempfile::tempdir().expect("tempdir");
    let fake = fx_dir.path().join("claude");
    let args_file = fx_dir.path().join("args");
    std::fs::write(&fake, format!("#!/bin/sh\nprintf '%s\\n' \"$@\" > {}\n", args_file.display())).expect("write");
    let wrapper = fx_dir.path().join("claude-wrapper.sh");
    std::fs::write(&wrapper, format!("#!/bin/sh\nexec {} \"$@\"\n", fake.display())).expect("write");
    for f in [&fake, &wrapper] {
        std::fs::set_permissions(f, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    }
    let scene = Scene::new(&fake);
    let (ws, store) = (scene.fx.ws.to_str().expect("utf-8"), scene.fx.store.to_str().expect("utf-8"));
    let run = |command: &[&str]| -> (Vec<String>, String) {
        let _ = std::fs::remove_file(&args_file);
        let mut args = vec!["run", ws, "--store", store];
        args.extend_from_slice(command);
        let out = check(run_with_timeout(scene.command(bin()).args(&args), CHILD_TIMEOUT), "rewindfs run");
        let seen = std::fs::read_to_string(&args_file).unwrap_or_default().lines().map(String::from).collect();
        (seen, stderr(&out))
    };
    let (seen, _) = run(&["--", "env", "FOO=1", "claude", "-p", "hi"]);
    assert_eq!(seen.first().map(String::as_str), Some("--settings"), "env FOO=1 claude is not wired: {seen:?}");
    let wrapper = wrapper.to_str().expect("utf-8");
    let (seen, err) = run(&["--", wrapper, "-p", "hi"]);
    assert_eq!(seen, ["-p", "hi"], "{seen:?}");
    assert!(err.contains("cannot tell whether") && err.contains("--agent claude"), "{err}");
    let (seen, err) = run(&["--agent", "claude", "--", wrapper, "-p", "hi"]);
    assert_eq!(seen.first().map(String::as_str), Some("--settings"), "--agent claude is not wired: {seen:?}");
    assert!(!err.contains("cannot tell"), "{err}");

    // The hook names the rewindfs on PATH (the scene's bin directory).
    let settings = scene.home.join(".claude/settings.json");
    std::fs::create_dir_all(settings.parent().expect("parent")).expect("mkdir");
    std::fs::write(&settings, "{\n    \"model\": \"x\"\n}\n").expect("write settings");
    let out =
        check(run_with_timeout(scene.command(bin()).args(["hooks", "install", "claude"]), CHILD_TIMEOUT), "install");
    let text = std::fs::read_to_string(&settings).expect("settings");
    let on_path = format!("{}/rewindfs hook claude", scene.bin_dir.display());
    assert!(text.contains(&on_path), "the hook does not name {on_path}: {text}");
    assert!(stdout(&out).contains("was not laid out as 2-space JSON"), "{}", stdout(&out));
    assert!(!stderr(&out).contains("not the `rewindfs` on PATH"), "{}", stderr(&out));
    let out = check(
        run_with_timeout(
            scene.command(bin()).env("PATH", "/usr/bin:/bin").args(["hooks", "install", "gemini"]),
            CHILD_TIMEOUT,
        ),
        "install without rewindfs on PATH",
    );
    assert!(stderr(&out).contains("not the `rewindfs` on PATH"), "{}", stderr(&out));
}
