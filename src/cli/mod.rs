//! The command line: argument definitions and one file per subcommand.

mod common;
mod mount;
mod run;
mod status;
mod unmount;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::error::Result;

/// rewindfs: every change to a workspace recorded, any past state browsable,
/// the whole tree rewound in milliseconds.
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
    /// daemon keeps running in the background (its log is DAEMON.log in the
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
    /// Threads serving FUSE requests.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub threads: usize,
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
}

#[derive(Args, Debug)]
pub struct UnmountArgs {
    /// The mountpoint (for an in-place mount, the workspace).
    pub mountpoint: PathBuf,
    /// Detach even if processes still use the mount; it goes away when they
    /// close their files.
    #[arg(long)]
    pub lazy: bool,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The workspace to mount in place. Without it, a scratch workspace is
    /// created for a short demo.
    pub workspace: Option<PathBuf>,
    #[command(flatten)]
    pub opts: MountOpts,
    /// The command to run and its arguments (after `--`). Default: $SHELL.
    #[arg(last = true)]
    pub command: Vec<String>,
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
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rewindfs: {e}");
            e.exit_code()
        }
    }
}
