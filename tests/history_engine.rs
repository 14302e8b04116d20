//! The model test without FUSE: the generator of tests/history_model.rs
//! drives the core (`engine::Workspace` and the `LiveTree` calls the FUSE
//! adapter makes) in process, with the same model and the same checks of
//! the live tree, every checkpoint's view, `diff`, `history`, `log` and
//! `fsck`, so thousands of sequences run where the mounted tier runs a few.
//! On top of the mounted tier's steps: crashes at the rewind's fault points
//! (everything in memory dropped, the workspace opened again from what is
//! durable), `gc`, `forget`, `snapshot` and `reset`, a reader of views and
//! `log` racing every rewind, and rewinds tried with the store's reads
//! failing. The chunk store rotates over the pack files of the store
//! directory, an in-memory store and the fault-injecting store (the
//! in-memory ones are kept across a crash, as a disk is).
//!
//! No privilege is needed: the steps need uid 0 of their user namespace
//! (root's permission checks, `chown` to ids the namespace maps), which
//! `unshare --map-auto --map-root-user` gives any user, and where opening
//! by handle (`open_by_handle_at`, CAP_DAC_READ_SEARCH) is refused the
//! workspaces open objects through held descriptors
//! (`Opener::HeldDescriptors`); `sequences_run_without_privilege` runs
//! sequences so as the unprivileged test user. Without uid 0 the test
//! fails (does not skip), naming that command. Steps that need a kernel are mapped to their analogue:
//! `remount` and `kill` reopen the workspace; descriptors are open files of
//! the core, read and written through it.
//!
//! Environment: HISTORY_ENGINE_SEED=N runs that seed only;
//! HISTORY_ENGINE_SEQUENCES=N random sequences (default 60) after the
//! fixed seeds 1-20 (HISTORY_ENGINE_FIXED=0 leaves those out), their seeds
//! derived from HISTORY_ENGINE_BASE_SEED if set, else printed on stderr
//! outside the output capture; HISTORY_ENGINE_STEPS=N steps per sequence
//! (default 80); HISTORY_ENGINE_BACKEND=pack|memory|faulty (default: by
//! seed, in turn); HISTORY_ENGINE_SHRINK_SECS=N (default 60);
//! HISTORY_ENGINE_REPLAY='step; step; ...' replays one printed sequence;
//! HISTORY_ENGINE_THREADS=N sequences at once (default: the cores, at most 4);
//! HISTORY_ENGINE_SECS=N stops starting sequences after N seconds (a soak:
//! set HISTORY_ENGINE_SEQUENCES high and the time here);
//! HISTORY_ENGINE_OPENER=handle|held chooses how objects are opened
//! (default: by handle when the process may);
//! HISTORY_ENGINE_SHARED_LOCKS=1 leaves SQLite's locking as the daemon has
//! it (by default each workspace's database is owned alone,
//! `Meta::own_alone`: its lock is kept rather than taken per statement).

#[path = "history_engine/harness.rs"]
mod harness;
#[path = "history_model/model.rs"]
#[allow(dead_code)]
mod model;

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use harness::{Backend, Failure, Runner};
use model::{Rng, Step, listing};

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

/// The ids the model's `chown` steps give files (model.rs), which must
/// exist in this process's user namespace.
const CHOWN_UIDS: [u32; 2] = [1000, 1234];
const CHOWN_GIDS: [u32; 2] = [1000, 4321];

/// Whether `id` is mapped in `/proc/self/{uid,gid}_map` (`which`).
fn mapped(which: &str, id: u32) -> bool {
    let map = std::fs::read_to_string(format!("/proc/self/{which}_map")).unwrap_or_default();
    map.lines().any(|l| {
        let f: Vec<u64> = l.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        f.len() == 3 && (f[0]..f[0] + f[2]).contains(&u64::from(id))
    })
}

/// The user id outside this process's user namespace that its uid 0 is
/// (0 in the initial namespace).
fn root_outside() -> u64 {
    let map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    map.lines()
        .find_map(|l| {
            let f: Vec<u64> = l.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            (f.len() == 3 && f[0] == 0).then_some(f[1])
        })
        .unwrap_or(0)
}

/// Checks what the tier needs and chooses how objects are opened: its
/// name, for the summary line.
fn setup() -> &'static str {
    // The steps expect root's permission checks (writing a 0444 file,
    // creating in a 0555 directory) and give files to other users: root
    // of a user namespace has both over the ids it maps, no privilege
    // needed (only opening by handle is not given, see `choose_opener`).
    let hint = "run it as root, or unprivileged as root of a user namespace that maps subordinate ids: \
                `unshare --map-auto --map-root-user cargo test --release --test history_engine`";
    assert!(rustix::process::geteuid().is_root(), "the in-process model tier needs uid 0: {hint}");
    for (which, ids) in [("uid", CHOWN_UIDS), ("gid", CHOWN_GIDS)] {
        for id in ids {
            assert!(
                mapped(which, id),
                "the model gives files to {which} {id}, which this user namespace does not map: {hint}"
            );
        }
    }
    let opener = harness::choose_opener();
    // As the daemon: modes are the ones asked for.
    rustix::process::umask(rustix::fs::Mode::empty());
    // A simulated crash unwinds with `faults::Crash`: not worth a line each.
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<rewindfs::faults::Crash>().is_none() {
                previous(info);
            }
        }));
    });
    opener
}

fn backend_for(seed: u64) -> Backend {
    match std::env::var("HISTORY_ENGINE_BACKEND").as_deref() {
        Ok("pack") => Backend::Pack,
        Ok("memory") => Backend::Memory,
        Ok("faulty") => Backend::Faulty,
        _ => [Backend::Pack, Backend::Memory, Backend::Faulty][(seed % 3) as usize],
    }
}

/// Runs `f`, turning a panic into a failure of kind "panic".
fn guarded<T>(f: impl FnOnce() -> Result<T, Failure>) -> Result<T, Failure> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            Err(Failure { kind: "panic", msg })
        }
    }
}

/// Generates and runs one sequence of `n` steps from `seed`: the steps run
/// (up to the failing one) and the failure, if any.
fn run_seed(seed: u64, n: usize, backend: Backend) -> (Vec<Step>, Option<Failure>, Tally) {
    let mut rng = Rng(seed);
    let mut steps: Vec<Step> = Vec::new();
    let mut tally = Tally::default();
    let result = guarded(|| {
        let mut r = Runner::new(backend)?;
        let mut tries = 0;
        let ran = (|| {
            while steps.len() < n && tries < n * 20 {
                tries += 1;
                let step = r.gen_step(&mut rng);
                steps.push(step.clone());
                if !r.exec(&step)? {
                    steps.pop();
                }
            }
            r.check_end()
        })();
        tally.reads = r.racing_reads;
        tally.events = std::mem::take(&mut r.events);
        ran
    });
    (steps, result.err(), tally)
}

/// A sequence that failed: its seed, store and steps, and the failure.
type Failed = (u64, Backend, Vec<Step>, Failure);

/// What the sequences did, summed for the summary line.
#[derive(Default)]
struct Tally {
    reads: u64,
    events: std::collections::BTreeMap<&'static str, u64>,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.reads += other.reads;
        for (k, n) in other.events {
            *self.events.entry(k).or_default() += n;
        }
    }
}

/// Runs a given list of steps on a fresh workspace (steps that do not apply are left out).
fn run_steps(steps: &[Step], backend: Backend) -> Result<(), Failure> {
    guarded(|| {
        let mut r = Runner::new(backend)?;
        for step in steps {
            r.exec(step)?;
        }
        r.check_end()
    })
}

fn report(seed: Option<u64>, backend: Backend, steps: &[Step], f: &Failure, budget: Duration) -> String {
    let (short, last, runs) =
        model::shrink(steps.to_vec(), f.kind, budget, |cand| run_steps(cand, backend).err().map(|f| (f.kind, f.msg)));
    let (kind, msg) = last.unwrap_or((f.kind, "(did not fail again on replay)".into()));
    let seed = seed.map(|s| format!("HISTORY_ENGINE_SEED={s} ")).unwrap_or_default();
    format!(
        "{seed}HISTORY_ENGINE_BACKEND={} failed at step {} `{}` ({}): {}\nshrunk to {} steps ({runs} \
         replays), failing with ({kind}): {msg}\n{}",
        backend.name(),
        steps.len().saturating_sub(1),
        steps.last().map(|s| s.to_string()).unwrap_or_default(),
        f.kind,
        f.msg,
        short.len(),
        listing(&short)
    )
}

/// Replays a regression sequence on every backend; panics with the failure.
#[allow(dead_code)]
fn replay(lines: &[&str]) {
    let _ = setup();
    let steps: Vec<Step> = lines.iter().map(|l| Step::parse(l).unwrap_or_else(|e| panic!("{e}"))).collect();
    for backend in [Backend::Pack, Backend::Memory, Backend::Faulty] {
        if let Err(f) = run_steps(&steps, backend) {
            panic!("({}) on {}: {}\nsequence:\n{}", f.kind, backend.name(), f.msg, listing(&steps));
        }
    }
}

/// Fixed seeds 1-20 and 60 random ones (HISTORY_ENGINE_SEQUENCES=N), 80
/// steps each; every failure is shrunk and printed as a replayable list.
#[test]
fn random_sequences_against_the_model_in_process() {
    let opener = setup();
    let steps = env_u64("HISTORY_ENGINE_STEPS").unwrap_or(80) as usize;
    let shrink_budget = Duration::from_secs(env_u64("HISTORY_ENGINE_SHRINK_SECS").unwrap_or(60));
    if let Ok(list) = std::env::var("HISTORY_ENGINE_REPLAY") {
        let lines = model::replay_lines(&list);
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        replay(&refs);
        return;
    }
    let seeds = model::seeds_from_env("HISTORY_ENGINE", 1..=20, 60);
    // Sequences run on a few threads (each its own workspace); failures
    // are shrunk after, one at a time.
    let workers = env_u64("HISTORY_ENGINE_THREADS")
        .map(|n| n as usize)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()).min(4))
        .max(1);
    let started = Instant::now();
    let deadline = env_u64("HISTORY_ENGINE_SECS").map(|s| started + Duration::from_secs(s));
    let next = AtomicUsize::new(0);
    let done: Mutex<(usize, usize, Tally, Vec<Failed>)> = Mutex::default();
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return;
                    }
                    let Some(&seed) = seeds.get(next.fetch_add(1, Ordering::SeqCst)) else { return };
                    let backend = backend_for(seed);
                    let (ran, failed, tally) = run_seed(seed, steps, backend);
                    let mut d = done.lock().unwrap_or_else(|p| p.into_inner());
                    d.0 += 1;
                    d.1 += ran.len();
                    d.2.add(tally);
                    if let Some(f) = failed {
                        eprintln!("history_engine: seed {seed} failed ({}): {}", f.kind, f.msg);
                        d.3.push((seed, backend, ran, f));
                    }
                }
            });
        }
    });
    let ran_for = started.elapsed().as_secs_f64();
    let (sequences, total_steps, tally, failed) = done.into_inner().unwrap_or_else(|p| p.into_inner());
    let shrink_until = Instant::now() + shrink_budget;
    let mut failures = Vec::new();
    for (seed, backend, ran, f) in &failed {
        let text = report(Some(*seed), *backend, ran, f, shrink_until.saturating_duration_since(Instant::now()));
        eprintln!("{text}");
        failures.push(text);
    }
    let events: Vec<String> = tally.events.iter().map(|(k, n)| format!("{n} {k}")).collect();
    eprintln!(
        "history_engine: {} sequences, {total_steps} steps ({}), {} reads racing a rewind, {} failures in {ran_for:.1} s \
         on {workers} threads ({:.0} sequences a minute), objects opened {opener}, as uid {}",
        sequences,
        events.join(", "),
        tally.reads,
        failures.len(),
        sequences as f64 * 60.0 / ran_for.max(0.001),
        root_outside()
    );
    assert!(failures.is_empty(), "{} sequences failed:\n\n{}", failures.len(), failures.join("\n\n"));
}

/// The tier without privilege: sequences run again by this binary as the
/// unprivileged test user (`setpriv`, as root: the CI case), as root of a
/// user namespace that maps the user's subordinate ids (`unshare
/// --map-auto --map-root-user`), its workspaces opening objects through
/// held descriptors (no CAP_DAC_READ_SEARCH). Every sequence must have run
/// and passed, as that user. Run unprivileged, the namespace alone.
/// HISTORY_ENGINE_ROOTLESS_SEED=N replays its seeds.
#[test]
fn sequences_run_without_privilege() {
    const SEQUENCES: usize = 8;
    let base = env_u64("HISTORY_ENGINE_ROOTLESS_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64 % 1_000_000_007)
    });
    eprintln!("history_engine: unprivileged sequences from HISTORY_ENGINE_ROOTLESS_SEED={base}");
    let exe = std::env::current_exe().expect("this test binary");
    let as_root = rustix::process::geteuid().is_root();
    let user = as_root.then(|| {
        let id = |flag: &str| -> u32 {
            let out = std::process::Command::new("id").args([flag, "rewindfs-test"]).output().expect("run id");
            assert!(
                out.status.success(),
                "no user rewindfs-test to run the tier as (`mount-scripts/ensure-deps tests` creates it)"
            );
            String::from_utf8_lossy(&out.stdout).trim().parse().expect("a numeric id")
        };
        (id("-u"), id("-g"))
    });
    let mut cmd = match user {
        Some((uid, gid)) => {
            let mut c = std::process::Command::new("setpriv");
            c.arg(format!("--reuid={uid}")).arg(format!("--regid={gid}")).args(["--clear-groups", "unshare"]);
            c
        }
        None => std::process::Command::new("unshare"),
    };
    cmd.args(["--map-auto", "--map-root-user", "--"])
        .arg(&exe)
        .args(["--exact", "random_sequences_against_the_model_in_process", "--nocapture"])
        .current_dir("/");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("HISTORY_ENGINE_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("HISTORY_ENGINE_OPENER", "held")
        .env("HISTORY_ENGINE_FIXED", "0")
        .env("HISTORY_ENGINE_SEQUENCES", SEQUENCES.to_string())
        .env("HISTORY_ENGINE_BASE_SEED", base.to_string());
    let out = cmd.output().expect("run the tier unprivileged (setpriv, unshare)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the unprivileged run failed ({}), replay with HISTORY_ENGINE_ROOTLESS_SEED={base}:\n{err}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    let summary = err
        .lines()
        .find(|l| l.starts_with("history_engine: ") && l.contains(" sequences, "))
        .unwrap_or_else(|| panic!("no summary line from the unprivileged run:\n{err}"));
    let ran: usize = summary["history_engine: ".len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {summary:?}"));
    assert_eq!(ran, SEQUENCES, "sequences run unprivileged: {summary}");
    assert!(summary.contains(" 0 failures "), "{summary}");
    assert!(summary.contains("objects opened through held descriptors"), "{summary}");
    let outside = user.map_or(u64::from(rustix::process::geteuid().as_raw()), |(uid, _)| u64::from(uid));
    assert!(summary.ends_with(&format!(", as uid {outside}")), "run as uid {outside}: {summary}");
    assert_ne!(outside, 0, "the unprivileged run ran as root");
}

/// A descriptor held on a file removed and brought back by a rewind, then
/// written: the write is recorded through the core, so a rewind to the
/// safety checkpoint is not refused as if the file had been changed
/// behind the mount. (Found by this tier while its lookups took no
/// reference, which no kernel does for an open file: its writer was then
/// no longer known by its number.)
#[test]
fn a_write_through_a_descriptor_held_across_a_rewind_is_recorded() {
    replay(&["open a", "turn m1", "rmrf a", "turn m2", "turn", "rewind 1", "fdwrite 0 131 85 58322", "rewind 4"]);
}

/// A rewind killed while it dropped a stray hard link from a directory it
/// had moved into the attic, completed at the next open, then a rewind to
/// the interrupted checkpoint: the directory is still in the attic, not in
/// the tree. It put the link back there, where nobody sees it, and the live
/// view counted it (`a` nlink 2 with one name). A name is put back only in
/// a directory that is in the tree.
#[test]
fn a_rewind_puts_no_name_back_in_a_directory_left_in_the_attic() {
    replay(&[
        "turn m1",
        "rm b/a",
        "turn m2",
        "turn",
        "turn",
        "mkdir b/a",
        "mkdir b/c",
        "link a b/c/a",
        "turn m3",
        "killrewind 4 8",
        "rewind 7",
    ]);
}

/// A file linked into a new directory, which an undo moves into the attic
/// whole; a rewind then takes the file out of it for its name in the tree.
/// Its other name stayed in that directory, in the attic, counted in the
/// link count the views show (nlink 2 for one name): the stray links were
/// looked for only in directories the rewind itself had moved aside.
#[test]
fn a_rewind_drops_a_stray_link_left_in_a_directory_an_earlier_rewind_moved_aside() {
    replay(&[
        "turn",
        "rewind 1",
        "remount",
        "undo",
        "rewind 3",
        "turn",
        "remount",
        "killrewind 4 5",
        "kill",
        "kill",
        "rewind 10",
        "remount",
        "remount",
        "open a",
        "rewind 11",
        "mvx a b/a",
        "remount",
        "mkdir c",
        "link b/a c/c",
        "mv b/a c/d",
        "undo",
        "rewind 22",
    ]);
}

/// A rewind to the checkpoint an interrupted rewind left brings back its
/// temporary name (`.rewindfs-rewind-4`) as a file of the tree; written,
/// then rewound over, the next rewind needed that very name for its own
/// temporary and failed part-way (EEXIST). An agent could block every
/// rewind the same way by making such names. A rewind's temporary name is
/// one the directory does not hold.
#[test]
fn a_rewind_takes_a_temporary_name_the_tree_does_not_hold() {
    replay(&[
        "trunc a 2246",
        "chmod b 750",
        "create c 216 55354",
        "turn m1",
        "turn",
        "write c 258 368 74671",
        "turn m2",
        "killrewind 2 5",
        "rewind 5",
        "write .rewindfs-rewind-4 181 209 74752",
        "rewind 8",
    ]);
}

/// A restore completed after a crash, whose interrupted tree is rewound to
/// later: a descriptor opened there, the file linked and written, then a
/// rewind that swaps in another inode. The descriptor keeps the old inode
/// and its bytes (840); the model expected 433, the bytes of a node the
/// completed restore had replaced but kept (the harness's model, not the
/// engine: it dropped unreachable nodes before the restore, not after).
#[test]
fn a_descriptor_on_a_file_of_an_interrupted_restore_s_tree_keeps_its_inode_across_a_rewind() {
    replay(&[
        "append b/a 133 41161",
        "killrestore 0 b 2",
        "turn m1",
        "turn m2",
        "rewind 5",
        "rewind 2",
        "turn m3",
        "turn m4",
        "undo",
        "rewind 3",
        "rewind 10",
        "open b/a",
        "link b/a b/c",
        "write b/c 475 365 50952",
        "rewind 16",
    ]);
}

/// The same, for a restore the crash let finish: a file appended, restored
/// (the crash after the restore), rewound to the checkpoint before the
/// append (a new inode with the old bytes), opened, then rewound to the
/// restore's result. The descriptor keeps its inode's 40 bytes; the model
/// expected 187, the appended bytes of the node the restore replaced,
/// which it had kept in no tree under the identity the rewind reused.
/// `Model::restore` now drops what it replaces and hands it back.
#[test]
fn a_descriptor_across_a_rewind_after_a_restore_the_crash_let_finish_reads_its_own_inode() {
    replay(&[
        "rewind 0",
        "turn",
        "rewind 1",
        "turn",
        "append a 147 70957",
        "killrestore 0 a 6",
        "turn m3",
        "rewind 6",
        "open a",
        "rewind 11",
    ]);
}

/// A rewind killed between noting that a file's old inode moves into the
/// attic and the move (it swaps a new inode in at the name): the attic
/// table named the file as moved while it was still at its name, so the
/// rewind completed at the next open left it there with its new bytes,
/// and the result checkpoint (14) showed them (113 bytes, not 300). The
/// table is brought in line with the attic's slots at every open.
#[test]
fn a_rewind_killed_before_the_move_into_the_attic_it_noted_still_puts_the_file_back() {
    replay(&[
        "turn",
        "turn m2",
        "turn m3",
        "turn",
        "rewind 3",
        "snapshot",
        "rewind 3",
        "rmrf b",
        "rewind 9",
        "create b/a 113 50805",
        "killrewind 11 4",
    ]);
}

/// A rewind killed while swapping a new inode in at each of the three
/// names of a file held open: the old inode had moved from its first name
/// into its attic slot, the second name was swapped, the third not yet.
/// The mount's checkpoint (23) counted the slot among the file's links
/// (2) where its tree holds one name; the completion now counts a file's
/// own slot among its names outside the tree, as it counted names inside
/// directories moved aside.
#[test]
fn a_rewind_killed_between_the_names_of_a_file_it_swaps_leaves_a_checkpoint_with_its_links_in_the_tree() {
    replay(&[
        "rmrf b",
        "link a b",
        "turn m1",
        "rewind 1",
        "turn m2",
        "turn m3",
        "rewind 2",
        "restore 1 a",
        "turn m4",
        "turn m5",
        "mv a d",
        "link b a",
        "killrestore 2 a 4",
        "turn m7",
        "turn m8",
        "rewind 14",
        "turn m9",
        "remount",
        "turn",
        "open b",
        "killrewind 21 8",
    ]);
}

/// A restore killed part-way, completed at the next open, which puts
/// away the temporary names it finds: one was the agent's, a second link
/// to `d/b/a` under a name a restore had used before (the agent saw it
/// while an earlier interrupted restore left it). Moved into the attic,
/// that name stayed counted among the file's links: the result
/// checkpoint (13) showed `d/b/a` with 2 where the tree held 1. A name
/// of a file linked elsewhere is now removed as by an `unlink`. Found by
/// a soak of this tier.
#[test]
fn a_restore_completed_at_open_leaves_a_file_linked_at_a_temporary_name_its_links_in_the_tree() {
    replay(&[
        "rewind 0",
        "killrestore 2 b/a 3",
        "turn",
        "killrestore 6 b 4",
        "mkdir d",
        "mkdir d/b",
        "turn m3",
        "create b/.rewindfs-restore-be183eb11af39163 162 21542",
        "link b/.rewindfs-restore-be183eb11af39163 d/b/a",
        "killrestore 10 b 2",
    ]);
}

/// The same with the swap's first name one that rewind had itself put
/// back earlier in its turn (the file taken out of its attic slot): the
/// name's entry record, from then, named no object, so the completion
/// did not look at the file's slot, and the mount's checkpoint (15)
/// counted it among the file's links (2 where its tree held `c/a/b`
/// alone). The completion also looks at the slots moved into since.
#[test]
fn a_rewind_killed_swapping_a_file_it_had_put_back_leaves_a_checkpoint_with_its_links_in_the_tree() {
    replay(&[
        "turn m1",
        "snapshot",
        "turn",
        "rewind 0",
        "turn m2",
        "turn m3",
        "restore 1 a",
        "mvx a b",
        "mkdir c",
        "mkdir a/d",
        "turn m4",
        "mkdir c/a",
        "create a/d/b 294 36900",
        "turn m5",
        "link a/d/b c/a/b",
        "restore 11 c",
        "create a/d/b 143 32960",
        "rm a/d/b",
        "killrewind 12 8",
    ]);
}
