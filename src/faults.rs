//! Fault-injection and pause points, armed through the daemon's environment
//! (`REWINDFS_TEST_*`) in test builds; nothing else. Compiled in only with
//! the `test-hooks` feature (on in `cargo test` builds, off in every build
//! that is shipped); without it every hook is a no-op twin of the same
//! signature, so call sites need no `cfg`.
//!
//! The bottom of the layering: the store, journal, workspace, view, fs and
//! daemon call it, and it imports nothing from the crate.

/// The name of the daemon's thread that computes sealed turns' statistics
/// (re-exported as `report::TURN_STATS_THREAD`). Defined here because the
/// view-lookup pause point recognises that thread by it, and this module
/// must not import from the layers above it.
pub const TURN_STATS_THREAD: &str = "turn-stats";

/// The name of the daemon's thread that writes rewound files' bytes
/// (re-exported as `workspace::pending::SETTLER_THREAD`), for the same
/// reason: the settle pause point recognises that thread by it.
pub const SETTLER_THREAD: &str = "settler";

/// The name of the thread that pushes checkpoints to a remote
/// (re-exported as `remote::push::UPLOADER_THREAD`), for the same reason.
pub const UPLOADER_THREAD: &str = "uploader";

/// The hooks of a test build.
#[cfg(feature = "test-hooks")]
mod armed {
    /// Name whose lookup panics in the live mount's FUSE handler.
    pub const PANIC_NAME: &str = "rewindfs-test-panic";
    /// Name whose lookup panics while it holds the journal's state, so
    /// a test can see what a lock a panic left held is answered with.
    pub const PANIC_IN_JOURNAL_NAME: &str = "rewindfs-test-panic-in-journal";

    use std::sync::Mutex;

    /// What the daemon is doing, for `record` (`rewind`, `restore`).
    static PHASE: Mutex<Option<&'static str>> = Mutex::new(None);
    static REACHED: Mutex<Vec<(String, u64)>> = Mutex::new(Vec::new());

    /// How many times `key` was reached, this one included.
    fn reach(key: &str) -> u64 {
        let mut reached = REACHED.lock().unwrap_or_else(|p| p.into_inner());
        match reached.iter_mut().find(|(p, _)| p == key) {
            Some((_, c)) => {
                *c += 1;
                *c
            }
            None => {
                reached.push((key.to_string(), 1));
                1
            }
        }
    }

    /// `REWINDFS_TEST_KILL_AT=POINT:N` kills the daemon with SIGKILL the
    /// N-th time (from 1) it reaches `POINT`: a crash at a chosen place,
    /// with nothing cleaned up, exactly as `kill -9` would leave it.
    pub fn kill_point(point: &str) {
        crash_point(point);
        let Ok(spec) = std::env::var("REWINDFS_TEST_KILL_AT") else { return };
        let Some((name, n)) = spec.rsplit_once(':') else { return };
        if name != point {
            return;
        }
        let Ok(n) = n.parse::<u64>() else { return };
        if reach(point) == n {
            log::warn!("test hook: killing the daemon at {point} #{n}");
            let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        }
    }

    thread_local! {
        /// The in-process crash armed on this thread: point, N, times reached.
        static CRASH_AT: std::cell::RefCell<Option<(String, u64, u64)>> = const { std::cell::RefCell::new(None) };
    }

    /// What an in-process crash unwinds with (see [`crash_at`]).
    #[derive(Debug)]
    pub struct Crash {
        pub point: String,
    }

    /// The in-process twin of `REWINDFS_TEST_KILL_AT`, for tests that drive
    /// the core without a daemon: the `n`-th time (from 1) this thread
    /// reaches the kill point `point`, it panics with [`Crash`]; the test
    /// catches it, drops everything held in memory and opens again from
    /// what is durable. None disarms.
    pub fn crash_at(at: Option<(&str, u64)>) {
        CRASH_AT.with(|c| *c.borrow_mut() = at.map(|(p, n)| (p.to_string(), n, 0)));
    }

    fn crash_point(point: &str) {
        let crash = CRASH_AT.with(|c| {
            let mut c = c.borrow_mut();
            let Some((p, n, reached)) = c.as_mut().filter(|(p, _, _)| p == point) else { return false };
            *reached += 1;
            if *reached == *n {
                log::warn!("test hook: crashing in process at {p} #{n}");
                *c = None;
                return true;
            }
            false
        });
        if crash {
            std::panic::panic_any(Crash { point: point.to_string() });
        }
    }

    /// `REWINDFS_TEST_FAIL_AT=POINT:N`: whether this reach of `POINT` must
    /// fail (the N-th, from 1), so a test can make one step of a
    /// multi-step change fail and check that the earlier steps are undone.
    pub fn fail_point(point: &str) -> bool {
        let Ok(spec) = std::env::var("REWINDFS_TEST_FAIL_AT") else { return false };
        let Some((name, n)) = spec.rsplit_once(':') else { return false };
        if name != point {
            return false;
        }
        let Ok(n) = n.parse::<u64>() else { return false };
        let count = reach(&format!("fail:{point}"));
        if count == n {
            log::warn!("test hook: failing at {point} #{n}");
        }
        count == n
    }

    /// `REWINDFS_TEST_PANIC_IN=NAME` makes the daemon's background thread
    /// NAME panic at its next step, so a test can see what a failed
    /// background thread leaves (a read-only mount that says why).
    pub fn panic_point(name: &str) {
        if std::env::var("REWINDFS_TEST_PANIC_IN").is_ok_and(|v| v == name) {
            panic!("test hook: the {name} thread panics");
        }
    }

    /// Sets what the daemon is doing (None: nothing the hooks watch).
    pub fn phase(what: Option<&'static str>) {
        *PHASE.lock().unwrap_or_else(|p| p.into_inner()) = what;
    }

    /// A journal record was appended: `<phase>-record` is a kill point.
    pub fn record() {
        let phase = *PHASE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = phase {
            kill_point(&format!("{p}-record"));
        }
    }

    /// Keeps a frozen rewind or restore frozen this long after it changed
    /// the tree and before it seals its result
    /// (`REWINDFS_TEST_HOLD_FROZEN_MS`), so a test can race it.
    pub fn hold_frozen() {
        if let Some(ms) = std::env::var("REWINDFS_TEST_HOLD_FROZEN_MS").ok().and_then(|v| v.parse::<u64>().ok()) {
            log::warn!("test hook: holding the frozen tree {ms} ms");
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
    }

    /// Whether the journal must fail to become durable, as on a full or
    /// failing store: while the file named by `REWINDFS_TEST_FAIL_SYNC_WHILE`
    /// exists.
    pub fn sync_fails() -> bool {
        std::env::var_os("REWINDFS_TEST_FAIL_SYNC_WHILE").is_some_and(|p| std::path::Path::new(&p).exists())
    }

    /// Pauses the background turn-statistics thread in a view lookup,
    /// between the records and the live tree, while the file named by
    /// `REWINDFS_TEST_STATS_PAUSE` exists (it writes `<that>.reached` when
    /// it first waits), so a test can run a rewind in that window.
    pub fn view_lookup() {
        wait_in(super::TURN_STATS_THREAD, "REWINDFS_TEST_STATS_PAUSE", "the turn statistics wait in a view lookup");
    }

    /// Pauses the uploader's walk of a checkpoint at a query of its view,
    /// after it asked whether to give way, while the file named by
    /// `REWINDFS_TEST_WALK_PAUSE` exists (it writes `<that>.reached` when
    /// it first waits).
    pub fn view_query() {
        wait_in(super::UPLOADER_THREAD, "REWINDFS_TEST_WALK_PAUSE", "the uploader's walk waits at a view query");
    }

    /// Pauses the turn-statistics thread in a read of a file's content (a
    /// step of at most 4 MiB), after it asked whether to give way, while
    /// the file named by `REWINDFS_TEST_STATS_READ_PAUSE` exists (it writes
    /// `<that>.reached` when it first waits).
    pub fn view_read() {
        wait_in(super::TURN_STATS_THREAD, "REWINDFS_TEST_STATS_READ_PAUSE", "the turn statistics wait in a read");
    }

    /// Pauses the background settler before it writes a step of a file's
    /// bytes (after it asked whether to give way), while the file named by
    /// `REWINDFS_TEST_SETTLE_PAUSE` exists (it writes `<that>.reached` when
    /// it first waits). Reads that settle a file are not held.
    pub fn settle_step() {
        wait_in(super::SETTLER_THREAD, "REWINDFS_TEST_SETTLE_PAUSE", "the settler waits before a step of a file");
    }

    /// Pauses `log` after it listed the checkpoints and before it computes
    /// the open turn's statistics, while the file named by
    /// `REWINDFS_TEST_LOG_PAUSE` exists (it writes `<that>.reached` when it
    /// first waits), so a test can seal a turn in that window.
    pub fn log_listed() {
        wait_while("REWINDFS_TEST_LOG_PAUSE", "log waits after listing the checkpoints");
    }

    /// Holds a rewind right after its check of the contents (still inside
    /// it, before the tree freezes) while the file named by
    /// `REWINDFS_TEST_REWIND_CHECKED_PAUSE` exists (it writes
    /// `<that>.reached` when it first waits), so a test can change the
    /// tree in that window.
    pub fn rewind_checked() {
        wait_while("REWINDFS_TEST_REWIND_CHECKED_PAUSE", "the rewind waits after its check, before the freeze");
    }

    /// Whether [`remote_put`] may hold the uploader: its chunks are then
    /// sent one at a time, so what a test sees in the bucket while it holds
    /// is every chunk before the one held.
    pub fn remote_put_armed() -> bool {
        std::env::var_os("REWINDFS_TEST_REMOTE_PUT_PAUSE").is_some()
    }

    /// Holds the uploader before it sends a chunk while the file named by
    /// `REWINDFS_TEST_REMOTE_PUT_PAUSE` exists (it writes `<that>.reached`
    /// when it first waits): a push in flight for as long as a test needs.
    /// A number N in the file lets N chunks go first.
    pub fn remote_put() {
        if !remote_put_armed() {
            return;
        }
        let Some(pause) = std::env::var_os("REWINDFS_TEST_REMOTE_PUT_PAUSE") else { return };
        if let Some(n) = std::fs::read_to_string(&pause).ok().and_then(|t| t.trim().parse::<u64>().ok())
            && n > 0
        {
            let _ = std::fs::write(&pause, (n - 1).to_string());
            return;
        }
        wait_while("REWINDFS_TEST_REMOTE_PUT_PAUSE", "the uploader waits before sending a chunk");
    }

    /// As [`wait_while`], only on the thread named `thread`.
    fn wait_in(thread: &str, var: &str, what: &str) {
        if std::thread::current().name() == Some(thread) {
            wait_while(var, what);
        }
    }

    /// Waits while the file named by `$var` exists, writing `<that>.reached`
    /// when it first waits.
    fn wait_while(var: &str, what: &str) {
        let Some(pause) = std::env::var_os(var) else { return };
        let pause = std::path::PathBuf::from(pause);
        if pause.exists() {
            let mut reached = pause.clone().into_os_string();
            reached.push(".reached");
            let _ = std::fs::write(reached, b"");
            log::warn!("test hook: {what}");
        }
        while pause.exists() {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// The time a collection goes by, when `REWINDFS_TEST_NOW_MS` is set
    /// (Unix milliseconds): "older than D days" without waiting D days.
    pub fn now_ms() -> Option<i64> {
        std::env::var("REWINDFS_TEST_NOW_MS").ok().and_then(|v| v.parse().ok())
    }

    /// How many records a collection merges per transaction
    /// (`REWINDFS_TEST_GC_BATCH_ROWS`), so a small turn takes several.
    pub fn gc_batch_rows() -> Option<usize> {
        std::env::var("REWINDFS_TEST_GC_BATCH_ROWS").ok().and_then(|v| v.parse().ok()).filter(|&n| n > 0)
    }

    /// Holds a collection between two of its batches (the locks free)
    /// while the file named by `REWINDFS_TEST_GC_PAUSE` exists (it writes
    /// `<that>.reached` when it first waits), so a test can write and read
    /// views in that window.
    pub fn gc_batch_pause() {
        wait_while("REWINDFS_TEST_GC_PAUSE", "the collection waits between two batches");
    }

    /// The control socket's request deadline (`REWINDFS_TEST_REQUEST_DEADLINE_MS`),
    /// so a test sees an idle connection closed without waiting 30 s.
    pub fn request_deadline() -> Option<std::time::Duration> {
        std::env::var("REWINDFS_TEST_REQUEST_DEADLINE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(std::time::Duration::from_millis)
    }

    /// Whether the background settler waits: while the file named by
    /// `REWINDFS_TEST_SETTLER_PAUSE` exists (opens still settle), so a test
    /// can damage the store while rewound files are pending.
    pub fn settler_paused() -> bool {
        std::env::var_os("REWINDFS_TEST_SETTLER_PAUSE").is_some_and(|p| std::path::Path::new(&p).exists())
    }
}

#[cfg(feature = "test-hooks")]
pub use armed::*;

/// What the hooks become in a shipped build: nothing.
#[cfg(not(feature = "test-hooks"))]
mod disarmed {
    pub fn hold_frozen() {}
    pub fn view_lookup() {}
    pub fn view_query() {}
    pub fn view_read() {}
    pub fn settle_step() {}
    pub fn log_listed() {}
    pub fn rewind_checked() {}
    pub fn remote_put() {}
    pub fn remote_put_armed() -> bool {
        false
    }
    pub fn sync_fails() -> bool {
        false
    }
    pub fn settler_paused() -> bool {
        false
    }
    pub fn gc_batch_rows() -> Option<usize> {
        None
    }
    pub fn gc_batch_pause() {}
    pub fn request_deadline() -> Option<std::time::Duration> {
        None
    }
    pub fn kill_point(_point: &str) {}
    pub fn crash_at(_at: Option<(&str, u64)>) {}
    pub fn fail_point(_point: &str) -> bool {
        false
    }
    pub fn now_ms() -> Option<i64> {
        None
    }
    pub fn phase(_what: Option<&'static str>) {}
    pub fn panic_point(_name: &str) {}
    pub fn record() {}
}

#[cfg(not(feature = "test-hooks"))]
pub use disarmed::*;
