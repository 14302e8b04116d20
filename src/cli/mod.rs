//! The command line: argument definitions and one file per subcommand.

/// `print!` for the CLI's output: a reader that stopped reading (`rewindfs
/// log | head`) ends the command quietly with status 141, as a program
/// killed by SIGPIPE does, instead of a panic (Rust ignores SIGPIPE, and
/// `print!` panics on the failed write).
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::write_out(format_args!($($arg)*)) };
}

/// `println!` with `out!`'s handling of a closed pipe.
macro_rules! outln {
    () => { $crate::cli::write_out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::cli::write_out(format_args!("{}\n", format_args!($($arg)*))) };
}

mod agents;
mod common;
mod du;
mod fsck;
mod history;
mod hook;
mod hooks;
mod mount;
mod occupants;
mod offline;
mod picker;
mod remote;
mod run;
mod safe_file;
mod show;
mod snapshot;
mod status;
mod stores;
mod turn;
mod unmount;

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::error::Result;

/// rewindfs: every change to a workspace recorded, any past state browsable,
/// the whole tree rewound at the cost of what changed, not of its size.
///
/// A workspace is an ordinary directory. While it is mounted, every process
/// that works inside it goes through rewindfs; unmount it and it is an
/// ordinary directory again, holding every change as plain files.
#[derive(Parser, Debug)]
#[command(name = "rewindfs", version, propagate_version = true, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Mount a workspace (in place, or on a separate mountpoint).
    ///
    /// Without MOUNTPOINT the workspace is mounted over itself: the daemon
    /// keeps a descriptor of the real directory, so every process using the
    /// path goes through the mount. Returns once the mount is ready; the
    /// daemon keeps running in the background (its log is daemon.log in the
    /// store) unless --foreground.
    Mount(MountArgs),
    /// Flush everything and unmount; the directory is ordinary again.
    Unmount(UnmountArgs),
    /// Mount WORKSPACE in place, run COMMAND inside it, unmount when it exits.
    ///
    /// COMMAND runs with its working directory in the workspace and the
    /// same environment. Ctrl-C and SIGTERM reach COMMAND; rewindfs
    /// unmounts after it exits and exits with COMMAND's status. Example:
    /// `rewindfs run ~/project -- claude`.
    Run(RunArgs),
    /// Show what is mounted where, which store, the daemon's pid and uptime.
    Status(StatusArgs),
    /// Seal everything so far as a checkpoint and start a new turn.
    ///
    /// `turn --message-id m1` makes checkpoint N labelled m1: the state just
    /// before message m1 was acted on. Flushes the mount first, so every
    /// write that completed before this returns belongs to the earlier turn.
    Turn(TurnArgs),
    /// List checkpoints, oldest first, with what each turn changed.
    Log(LogArgs),
    /// Show changes between two checkpoints (TO defaults to the live tree).
    ///
    /// A checkpoint is a number, ~N (N before the newest), a message id or a
    /// unique prefix of one, or words of its label.
    Diff(DiffArgs),
    /// List the checkpoints whose turns changed PATH.
    History(HistoryArgs),
    /// Mount the tree as it was at CHECKPOINT, read-only, at MOUNTPOINT.
    ///
    /// The view does not move while the agent keeps writing; every write
    /// fails with EROFS. Nothing is copied. `rewindfs unmount MOUNTPOINT`
    /// removes it. The same views are under `.rewindfs/checkpoints/<N>/` and
    /// `.rewindfs/messages/<id>/` in the live mount.
    ///
    /// `show s3://bucket/prefix[@CHECKPOINT] MOUNTPOINT` shows a checkpoint
    /// of a remote on a machine that has only the bucket: it serves in the
    /// foreground until unmounted (Ctrl-C, or `rewindfs unmount` from
    /// elsewhere), fetching chunks when they are read into a bounded cache
    /// under $XDG_CACHE_HOME/rewindfs/chunks (~/.cache/rewindfs/chunks).
    Show(ShowArgs),
    /// Put files or directories back as they were at CHECKPOINT.
    ///
    /// Runs as a turn of its own between two checkpoints, so it can be
    /// undone by restoring the first of them (printed). Never writes
    /// outside the workspace, whatever symlinks the live tree or the
    /// checkpoint contain.
    Restore(RestoreArgs),
    /// Make the whole workspace what it was at CHECKPOINT.
    ///
    /// First seals the current state as a safety checkpoint (printed):
    /// `rewindfs rewind <safety>` undoes the rewind. New turns then grow a
    /// new branch from CHECKPOINT; the abandoned branch stays browsable.
    Rewind(RewindArgs),
    /// Name a checkpoint: a new one sealed now, or an existing one (--at).
    ///
    /// A name is a checkpoint reference wherever one is taken, and a named
    /// checkpoint is never collected by `gc` nor dropped by `forget`.
    Snapshot(SnapshotArgs),
    /// Drop checkpoints now, freeing what no kept checkpoint needs.
    ///
    /// Each checkpoint's turn merges into the kept checkpoint before it
    /// (whose `log` line and `diff` then span both); views of the other
    /// checkpoints stay exact. References to a forgotten checkpoint fail
    /// saying so. Named snapshots, the newest checkpoint, the checkpoint
    /// last rewound to and recent rewinds' safety checkpoints are kept.
    Forget(ForgetArgs),
    /// Collect what the retention policy lets go.
    ///
    /// The policy (stored in the store, shown by `status`): keep the
    /// newest --keep-count checkpoints with changes of the current branch
    /// (default 200; turns that changed nothing do not count),
    /// every checkpoint younger than --keep-days days (default 14, which
    /// is also how long abandoned branches stay), named snapshots, the
    /// checkpoint last rewound to and the safety checkpoints of the last 5
    /// rewinds. Options given are stored as the new policy (not with
    /// --dry-run). With --auto on (the default) the daemon also collects
    /// by itself, in short slices, once 8 checkpoints can go; `status`
    /// shows its last run.
    Gc(GcArgs),
    /// Where the store's bytes are: on disk by part, logical, the dedup
    /// and compression ratios, the attic, per turn, and what gc would free.
    Du(DuArgs),
    /// Push sealed checkpoints to the store's remote now.
    ///
    /// The daemon pushes in the background after each seal; this waits
    /// (at most --wait seconds) until every checkpoint sealed before it is
    /// on the remote, and exits 1 while some are not.
    Push(PushArgs),
    /// Write a checkpoint of a remote into a plain directory.
    ///
    /// `rewindfs clone s3://bucket/prefix@CHECKPOINT DIR` (default: the
    /// newest checkpoint) needs only the bucket: every byte fetched is
    /// checked against its blake3 name; names, contents, modes, owners
    /// (as root), mtimes, symlinks, hard links and extended attributes are
    /// the checkpoint's. DIR must be empty or absent.
    Clone(CloneArgs),
    /// Delete all history, never the workspace (needs --confirm).
    ///
    /// Seals the tree as it is as a fresh checkpoint, then deletes every
    /// other checkpoint (named snapshots, rewinds' safety checkpoints and
    /// abandoned branches too), their records, chunks and attic entries,
    /// and compacts the packs. Afterwards `log` lists that one checkpoint;
    /// references to the old ones fail saying they were deleted by a
    /// reset. A reset cannot be undone: there is no safety checkpoint to
    /// rewind to, and nothing from before it can be brought back.
    Reset(ResetArgs),
    /// Check that every checkpoint can be read back; name what damage costs.
    ///
    /// Reads every chunk and checks its hash, follows every reference
    /// (records, chunks, packs, attic, checkpoints) and reports each problem
    /// by checkpoint and path. Exit status 0: clean; 4: problems found;
    /// 5: --repair dealt with every problem found (history was lost). On a
    /// mounted workspace it asks the daemon; --repair needs the store
    /// unmounted.
    Fsck(FsckArgs),
    /// List every store under $REWINDFS_HOME/stores: workspace, size, last use.
    Stores(StoresArgs),
    /// Wire a coding agent's prompt hook to rewindfs (install, uninstall, status).
    ///
    /// With the hook installed, each prompt seals a checkpoint named by the
    /// prompt's id and labelled with its first line, in whatever rewindfs
    /// mount the agent works in (outside any mount the hook does nothing).
    Hooks(HooksArgs),
    /// What an agent's prompt hook runs (reads the hook's JSON on stdin).
    ///
    /// Seals a checkpoint for the prompt in the mount holding the agent's
    /// working directory; prints nothing on stdout; exits 0 when there is
    /// no mount; gives up after 5 s.
    Hook {
        #[arg(value_enum)]
        agent: agents::Agent,
    },
}

#[derive(Args, Debug)]
pub struct HooksArgs {
    #[command(subcommand)]
    pub command: HooksCommand,
}

#[derive(Subcommand, Debug)]
pub enum HooksCommand {
    /// Add rewindfs's prompt hook to the agent's settings (idempotent;
    /// keeps everything else; the previous file is kept as
    /// `<file>.rewindfs-backup`).
    Install(HookEdit),
    /// Remove exactly the hook entries `install` adds.
    Uninstall(HookEdit),
    /// Say which settings files hold rewindfs's hooks.
    Status {
        /// The project directory to look at (default: the current one).
        #[arg(long, value_name = "DIR")]
        project: Option<PathBuf>,
    },
}

/// Which agent's hook to add or remove, where.
#[derive(Args, Debug)]
pub struct HookEdit {
    #[arg(value_enum)]
    pub agent: agents::Agent,
    #[command(flatten)]
    pub scope: HookScope,
    /// Print the change; write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Which settings file: the user's (default) or a project's.
#[derive(Args, Debug)]
#[group(multiple = false)]
pub struct HookScope {
    /// The user's settings (~/.claude/settings.json, ~/.gemini/settings.json,
    /// ~/.codex/hooks.json); the default.
    #[arg(long)]
    pub user: bool,
    /// The project in DIR (DIR/.claude/settings.local.json,
    /// DIR/.gemini/settings.json, DIR/.codex/hooks.json).
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct FsckArgs {
    /// A mounted workspace (checked through its daemon), or an unmounted
    /// one (its store is opened read-only); default: the mount containing
    /// the current directory.
    #[arg(short = 'C', value_name = "MOUNT")]
    pub mount: Option<PathBuf>,
    /// The store directory to check (default: the workspace's default store).
    #[arg(long, value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// Drop what cannot be recovered (records whose content is gone,
    /// damaged chunks, cached content) and say which checkpoints and paths
    /// lost what. Never touches the workspace. Needs the store unmounted.
    #[arg(long)]
    pub repair: bool,
    /// Check a remote instead (`s3://bucket/prefix`): every checkpoint its
    /// head lists, read back from the bucket alone. Without an address, the
    /// workspace's own remote (the one it was mounted with), its head also
    /// held against the workspace's history: written by this store, listing
    /// every checkpoint pushed, each as the workspace has it. On a mounted
    /// workspace the daemon checks, with its address and credentials.
    #[arg(long, value_name = "URL", num_args = 0..=1, conflicts_with = "repair")]
    pub remote: Option<Option<String>>,
    /// Print JSON for programs.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct SnapshotArgs {
    #[command(flatten)]
    pub target: Target,
    /// The name: a word (not a number, not starting with `~` or `-`, no
    /// `/` or control characters, at most 128 bytes), unique.
    pub name: String,
    /// A note kept with the name (and the label of a checkpoint sealed for it).
    #[arg(long, value_name = "TEXT")]
    pub message: Option<String>,
    /// Name this existing checkpoint instead of sealing a new one.
    #[arg(long, value_name = "CHECKPOINT")]
    pub at: Option<String>,
}

#[derive(Args, Debug)]
pub struct DuArgs {
    #[command(flatten)]
    pub target: Target,
    /// One line per turn too.
    #[arg(long)]
    pub turns: bool,
    /// A bucket instead (`s3://bucket`, or `s3://bucket/prefix` for one
    /// workspace of it): what each workspace references, what it alone
    /// does, what several share (stored once), and what none references.
    #[arg(long, value_name = "URL", conflicts_with_all = ["turns", "mount"])]
    pub remote: Option<String>,
}

#[derive(Args, Debug)]
pub struct ResetArgs {
    #[command(flatten)]
    pub target: Target,
    /// Yes, delete all history (refused without it).
    #[arg(long)]
    pub confirm: bool,
}

#[derive(Args, Debug)]
pub struct ForgetArgs {
    #[command(flatten)]
    pub target: Target,
    /// Checkpoints to drop (any reference).
    #[arg(required = true)]
    pub checkpoints: Vec<String>,
    /// Change nothing; say what would be dropped and freed.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Args, Debug)]
pub struct GcArgs {
    #[command(flatten)]
    pub target: Target,
    /// Change nothing; list what would go and the bytes it would free.
    #[arg(long)]
    pub dry_run: bool,
    /// Keep the newest N checkpoints of the current branch whatever their age.
    #[arg(long, value_name = "N")]
    pub keep_count: Option<u64>,
    /// Keep every checkpoint younger than D days.
    #[arg(long, value_name = "D")]
    pub keep_days: Option<u64>,
    /// Collect in the background once 8 checkpoints can go (stored; on by default).
    #[arg(long, value_name = "on|off", value_parser = on_off)]
    pub auto: Option<bool>,
}

fn on_off(v: &str) -> std::result::Result<bool, String> {
    match v {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{v:?} is neither on nor off")),
    }
}

#[derive(Args, Debug)]
pub struct RewindArgs {
    #[command(flatten)]
    pub target: Target,
    /// A checkpoint: a number, ~N, a message id or a unique prefix of one (at
    /// least 4 characters), or words of its label. Without it, on a
    /// terminal, pick one from the recent prompts.
    pub checkpoint: Option<String>,
    /// Change nothing; show what would be restored, deleted and recreated.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Args, Debug)]
pub struct RestoreArgs {
    #[command(flatten)]
    pub target: Target,
    /// A checkpoint: a number, ~N, a message id or a unique prefix of one (at
    /// least 4 characters), or words of its label.
    pub checkpoint: String,
    /// Only list what would change.
    #[arg(long)]
    pub dry_run: bool,
    /// Paths to restore (relative to the current directory when it is inside
    /// the mount, otherwise to the mount root).
    #[arg(last = true, required = true)]
    pub paths: Vec<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ShowArgs {
    #[command(flatten)]
    pub target: Target,
    /// A checkpoint: a number, ~N, a message id or a unique prefix of one (at
    /// least 4 characters), or words of its label; or
    /// s3://bucket/prefix[@CHECKPOINT] (a number, message id or name).
    pub checkpoint: String,
    /// An empty directory to mount the view on.
    pub mountpoint: PathBuf,
    /// For a remote: the most the chunk cache may hold (bytes, or with a
    /// K, M or G suffix).
    #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = parse_size)]
    pub cache_size: u64,
    /// Serve the view in this process until it is unmounted (Ctrl-C), for
    /// a workspace that is not mounted. Without it, a process of its own
    /// serves such a view in the background; a mounted workspace's daemon
    /// serves its views.
    #[arg(long)]
    pub foreground: bool,
}

/// `4096`, `512K`, `64M`, `1G` (powers of 1024).
fn parse_size(text: &str) -> std::result::Result<u64, String> {
    let text = text.trim();
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => text.split_at(i),
        None => (text, ""),
    };
    let shift = match unit.to_ascii_uppercase().trim_end_matches("IB").trim_end_matches('B') {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("{text:?}: a size is a number with an optional K, M, G or T")),
    };
    let n: u64 = digits.parse().map_err(|_| format!("{text:?}: a size is a number with an optional K, M, G or T"))?;
    n.checked_mul(1 << shift).ok_or_else(|| format!("{text:?}: too large"))
}

/// Selects the mount and output format.
#[derive(Args, Debug, Clone)]
pub struct Target {
    /// The mount to act on; default: the rewindfs mount containing the
    /// current directory.
    #[arg(short = 'C', value_name = "MOUNT")]
    pub mount: Option<PathBuf>,
    /// Print JSON for programs.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct TurnArgs {
    #[command(flatten)]
    pub target: Target,
    /// The id of the message whose changes start now.
    #[arg(long, value_name = "ID")]
    pub message_id: Option<String>,
    /// The agent session this turn belongs to.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// A free-form label.
    #[arg(long, value_name = "TEXT")]
    pub label: Option<String>,
}

#[derive(Args, Debug)]
pub struct LogArgs {
    #[command(flatten)]
    pub target: Target,
    /// Read the history from a remote (s3://bucket/prefix) instead of a
    /// mount: no daemon, no store needed.
    #[arg(value_name = "REMOTE")]
    pub remote: Option<String>,
    /// Draw the history graph: `*` current, `o` on the current path,
    /// `x` on abandoned branches.
    #[arg(long)]
    pub graph: bool,
    /// Also list mount checkpoints whose turn changed nothing (hidden
    /// otherwise).
    #[arg(long)]
    pub all: bool,
}

#[derive(Args, Debug)]
pub struct PushArgs {
    #[command(flatten)]
    pub target: Target,
    /// Seconds to wait for the push.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub wait: u64,
}

#[derive(Args, Debug)]
pub struct CloneArgs {
    /// s3://bucket/prefix[@CHECKPOINT] (a number, message id or name).
    pub source: String,
    /// The directory to write (created; must be empty if it exists).
    pub dir: std::path::PathBuf,
    /// Print JSON for programs.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    #[command(flatten)]
    pub target: Target,
    /// The older checkpoint.
    pub from: String,
    /// The newer checkpoint; default: the live tree.
    pub to: Option<String>,
    /// One line per file with added/removed line counts instead of patches.
    #[arg(long)]
    pub stat: bool,
    /// Restrict to these paths (relative to the current directory when it is
    /// inside the mount, otherwise to the mount root).
    #[arg(last = true)]
    pub paths: Vec<PathBuf>,
}

#[derive(Args, Debug)]
pub struct HistoryArgs {
    #[command(flatten)]
    pub target: Target,
    /// A path inside the mount.
    pub path: PathBuf,
}

/// Options shared by every command that mounts.
#[derive(Args, Debug, Clone)]
pub struct MountOpts {
    /// Where history is kept. Default: $REWINDFS_HOME/stores/<name>-<hash>,
    /// with REWINDFS_HOME defaulting to ~/.local/share/rewindfs. Must not be
    /// inside the workspace.
    #[arg(long, value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// How file data moves: `all` lets the kernel read and write backing
    /// files directly (FUSE passthrough, needs root; falls back to `off`
    /// when unavailable), `off` sends all data through the daemon.
    #[arg(long, value_name = "MODE", default_value = "all", value_parser = ["all", "off"])]
    pub passthrough: String,
    /// Seconds the kernel may cache names and attributes.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
    pub cache_timeout: u64,
    /// The user the agent runs as (name or uid; not root). That user may
    /// mark turns (`rewindfs turn`, for its hooks), read the history
    /// (`status`, `log`, `diff`, `history`, `fsck`) and preview (`--dry-run`),
    /// but not rewind, restore, unmount or mount views. Without it, only
    /// the owner can reach the daemon.
    #[arg(long, value_name = "USER")]
    pub agent_user: Option<String>,
    /// Push sealed checkpoints to S3-compatible object storage, in the
    /// background (s3://bucket/prefix; the prefix is this workspace's own).
    /// Stored in the store: later mounts push there without it.
    /// Credentials and endpoint come from the environment
    /// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION,
    /// AWS_ENDPOINT_URL, AWS_ALLOW_HTTP) and are never stored.
    #[arg(long, value_name = "URL")]
    pub remote: Option<String>,
    /// Threads serving FUSE requests.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub threads: usize,
    /// How FUSE requests travel: `uring` serves each CPU's requests on an
    /// io_uring on that CPU (Linux 6.14+; switches the kernel's
    /// `enable_uring` on if it is off, which needs root, and fails when it
    /// cannot), `classic` reads and writes /dev/fuse, `auto` takes io_uring
    /// when the kernel has it switched on.
    #[arg(long, value_name = "MODE", default_value = "auto", value_parser = ["auto", "uring", "classic"])]
    pub transport: String,
    /// Without a harness calling `rewindfs turn`, seal a checkpoint after
    /// this many seconds without writes (if anything changed). On by
    /// default so that a plain shell session still gets undo points; the
    /// first explicit `turn` switches it off for the rest of the mount,
    /// since a harness knows where turns end. 0 disables it.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    pub auto_turn: f64,
    /// Serve the workspace without recording anything (for measuring the
    /// cost of recording; history, views and rewind are unavailable).
    #[arg(long, hide = true)]
    pub no_record: bool,
}

#[derive(Args, Debug)]
pub struct MountArgs {
    /// The directory to mount (must exist).
    pub workspace: PathBuf,
    /// An empty directory to mount it on; default: the workspace itself.
    pub mountpoint: Option<PathBuf>,
    #[command(flatten)]
    pub opts: MountOpts,
    /// Stay in the foreground and log to stderr.
    #[arg(long)]
    pub foreground: bool,
    /// Give up a rewind or restore the previous daemon died in, when it
    /// cannot be completed: the workspace is mounted as the interruption
    /// left it (sealed as a checkpoint, labelled so); the checkpoint before
    /// the operation stays, to go back to.
    #[arg(long)]
    pub abandon_interrupted: bool,
}

#[derive(Args, Debug)]
pub struct UnmountArgs {
    /// The mountpoint (for an in-place mount, the workspace).
    pub mountpoint: PathBuf,
    /// Detach even if processes still use the mount; it goes away when they
    /// close their files.
    #[arg(long)]
    pub lazy: bool,
    /// How long to wait for sealed checkpoints to reach the store's remote
    /// before unmounting (0: do not wait; what is left is pushed by the
    /// next mount).
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub wait: u64,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The workspace to mount in place. Without it, a scratch workspace is
    /// created for a short demo.
    pub workspace: Option<PathBuf>,
    #[command(flatten)]
    pub opts: MountOpts,
    /// Run COMMAND as this user (name or uid; not root), who becomes the
    /// mount's agent user (see --agent-user): it can mark turns and read
    /// history, but not rewind or restore. Needs `setpriv` (util-linux).
    #[arg(long = "as", value_name = "USER")]
    pub as_user: Option<String>,
    /// The agent COMMAND starts (claude, gemini, codex), when its name does
    /// not say it (a wrapper script); `none` wires nothing.
    #[arg(long, value_name = "AGENT")]
    pub agent: Option<String>,
    /// The command to run and its arguments (after `--`). Default: $SHELL.
    #[arg(last = true)]
    pub command: Vec<OsString>,
}

#[derive(Args, Debug)]
pub struct StoresArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The mount to act on; default: the rewindfs mount containing the
    /// current directory, or every mount when there is none.
    #[arg(short = 'C', value_name = "MOUNT")]
    pub mount: Option<PathBuf>,
    /// Print JSON for programs.
    #[arg(long)]
    pub json: bool,
}

/// Runs a parsed command line; returns the process exit status.
pub fn run(cli: Cli) -> i32 {
    let result: Result<i32> = match cli.command {
        Command::Mount(a) => mount::run(a).map(|_| 0),
        Command::Unmount(a) => unmount::run(a).map(|_| 0),
        Command::Run(a) => run::run(a),
        Command::Status(a) => status::run(a).map(|_| 0),
        Command::Turn(a) => turn::run(a).map(|_| 0),
        Command::Log(a) => history::log(a),
        Command::Diff(a) => history::diff(a),
        Command::History(a) => history::history(a).map(|_| 0),
        Command::Show(a) => show::run(a).map(|_| 0),
        Command::Restore(a) => history::restore(a).map(|_| 0),
        Command::Rewind(a) => history::rewind(a).map(|_| 0),
        Command::Fsck(a) => fsck::run(a),
        Command::Snapshot(a) => snapshot::snapshot(a).map(|_| 0),
        Command::Forget(a) => snapshot::forget(a).map(|_| 0),
        Command::Gc(a) => snapshot::gc(a).map(|_| 0),
        Command::Du(a) => du::run(a),
        Command::Push(a) => remote::push(a),
        Command::Clone(a) => remote::clone(a),
        Command::Reset(a) => snapshot::reset(a).map(|_| 0),
        Command::Hooks(a) => hooks::run(a).map(|_| 0),
        Command::Stores(a) => stores::run(a).map(|_| 0),
        Command::Hook { agent } => return hook::run(agent),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rewindfs: {e}");
            e.exit_code()
        }
    }
}

/// Writes the CLI's output to stdout (see `out!`).
pub(crate) fn write_out(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(141);
        }
        let _ = writeln!(std::io::stderr(), "rewindfs: cannot write the output: {e}");
        std::process::exit(1);
    }
}
