//! Named snapshots, `forget`, and `gc` by the retention policy,
//! on a mounted workspace. After every collection: the views of every kept
//! checkpoint equal the copies taken when they were sealed, references to
//! forgotten ones fail saying so, a rewind to a kept one is exact, and
//! `fsck` is clean. The policy's clock is injected (`REWINDFS_TEST_NOW_MS`,
//! a test hook) so "older than 14 days" needs no waiting.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use common::*;
use rewindfs::meta::Retention;

const ARGS: &[&str] = &["--auto-turn", "0"];
const DAY_MS: i64 = 86_400_000;

/// A mount with manual turns and a copy of the tree at each checkpoint.
struct Case {
    fx: MountFixture,
    copies: BTreeMap<i64, PathBuf>,
    n: usize,
}

impl Case {
    fn new(env: &[(&str, &str)]) -> Case {
        let mut fx = MountFixture::unmounted();
        sh(&fx.ws, "mkdir -p src && echo one > src/a && head -c 200000 /dev/urandom > big && echo keep > k");
        fx.mount_with_env(false, ARGS, env);
        let mut c = Case { fx, copies: BTreeMap::new(), n: 0 };
        let c0 = c.copy();
        c.copies.insert(0, c0);
        c
    }

    fn mp(&self) -> String {
        self.fx.path().to_str().expect("utf-8 path").to_string()
    }

    fn copy(&mut self) -> PathBuf {
        self.n += 1;
        self.fx.copy_tree(&format!("copy{}", self.n))
    }

    /// Changes the tree (a new version of `big`: chunks only its turn has),
    /// then seals a checkpoint and copies the tree.
    fn step(&mut self, i: usize) -> i64 {
        self.fx.sh(&format!(
            "head -c 150000 /dev/urandom > big && echo v{i} >> src/a && echo n{i} > src/n{i} && rm -f src/n{prev}",
            prev = i.wrapping_sub(1)
        ));
        let n = self.fx.turn(&format!("t{i}"));
        let c = self.copy();
        self.copies.insert(n, c);
        n
    }

    /// Runs `rewindfs ARGS -C MOUNT`; the output, whatever the status.
    fn run(&self, args: &[&str]) -> std::process::Output {
        let mp = self.mp();
        let mut full = vec![args[0], "-C", &mp];
        full.extend_from_slice(&args[1..]);
        self.fx.rewindfs(&full)
    }

    /// The checkpoints `log` lists.
    fn listed(&self) -> Vec<i64> {
        let log = self.fx.cli_json(&["log"]);
        log.as_array().expect("log is an array").iter().map(|c| c["checkpoint"].as_i64().expect("number")).collect()
    }

    /// Every kept checkpoint with a copy reads back as the copy; forgotten
    /// ones are gone from `log` and `.rewindfs/checkpoints/`.
    fn check_views(&self, forgotten: &[i64], when: &str) {
        let listed = self.listed();
        for n in forgotten {
            assert!(!listed.contains(n), "{when}: forgotten checkpoint {n} is still in log: {listed:?}");
            assert!(
                !self.fx.path().join(format!(".rewindfs/checkpoints/{n}")).exists(),
                "{when}: forgotten checkpoint {n} still has a view"
            );
        }
        for (n, copy) in &self.copies {
            if forgotten.contains(n) {
                continue;
            }
            assert!(listed.contains(n), "{when}: kept checkpoint {n} is missing from log: {listed:?}");
            let view = self.fx.path().join(format!(".rewindfs/checkpoints/{n}"));
            let (e, a) = (manifest(copy), manifest(&view));
            if e != a {
                assert_same_tree(copy, &view, &format!("{when}: view of checkpoint {n}"));
                panic!("{when}: view of checkpoint {n} differs:\n{e}\n---\n{a}");
            }
        }
    }

    /// Entries in the attic.
    fn attic(&self) -> usize {
        std::fs::read_dir(self.fx.store.join("attic")).expect("attic").count()
    }

    fn fsck_clean(&self, when: &str) {
        let out = self.run(&["fsck"]);
        assert!(
            out.status.success(),
            "{when}: fsck is not clean: {}\n{}{}",
            describe_status(&out),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Runs `args`, which a test hook makes the daemon die in; waits for
    /// it to die and takes the dead mount down.
    fn killed_by(&mut self, args: &[&str]) {
        let pid = self.fx.daemon_pid();
        let out = self.run(args);
        assert!(!out.status.success(), "the daemon was to die in {args:?}: {}", describe_status(&out));
        self.fx.detach_dead(pid);
    }

    /// Bytes of the pack files.
    fn packs(&self) -> u64 {
        std::fs::read_dir(self.fx.store.join("chunks/packs"))
            .expect("packs")
            .map(|e| e.expect("pack entry").metadata().expect("pack size").len())
            .sum()
    }

    /// Chunks in the chunk store's index (read beside the daemon).
    fn chunks(&self) -> u64 {
        use rewindfs::store::ChunkStore;
        let store = rewindfs::store::PackStore::open_read_only(&self.fx.store.join("chunks")).expect("chunk store");
        store.stats().expect("stats").chunks
    }
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_millis() as i64
}

#[test]
fn snapshots_name_checkpoints_and_forget_merges_turns_keeping_every_kept_view_exact() {
    let mut c = Case::new(&[]);
    let t: Vec<i64> = (1..=4).map(|i| c.step(i)).collect();

    // A name for an existing checkpoint, and one sealed now.
    let v = c.fx.cli_json(&["snapshot", "first", "--at", &t[0].to_string(), "--message", "before the refactor"]);
    assert_eq!((v["checkpoint"].as_i64(), v["sealed"].as_bool()), (Some(t[0]), Some(false)), "{v}");
    let v = c.fx.cli_json(&["snapshot", "now"]);
    let now = v["checkpoint"].as_i64().expect("checkpoint");
    assert_eq!(v["sealed"].as_bool(), Some(true), "{v}");
    let copy = c.copy();
    c.copies.insert(now, copy);
    // Names are references; log and status show them.
    let d = c.fx.cli_json(&["diff", "first", "now"]);
    assert_eq!(d["from"].as_i64(), Some(t[0]), "{d}");
    let log = c.fx.cli_json(&["log"]);
    let named: Vec<(i64, String)> = log
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|e| Some((e["checkpoint"].as_i64()?, e["name"].as_str()?.to_string())))
        .collect();
    assert_eq!(named, vec![(t[0], "first".to_string()), (now, "now".to_string())]);
    assert!(c.fx.cli(&["log"]).contains("[first]"), "log shows the name");
    let status = c.fx.status_json();
    assert_eq!(status["snapshots"].as_array().map(|a| a.len()), Some(2), "{status}");
    assert_eq!(status["retention"]["keep_count"].as_u64(), Some(200), "{status}");
    // Refused: a taken name, a name that is a number, a second name.
    for (args, says) in [
        (vec!["snapshot", "first", "--at", "2"], "already names checkpoint"),
        (vec!["snapshot", "42"], "all digits"),
        (vec!["snapshot", "second", "--at", "first"], "already named"),
    ] {
        let out = c.run(&args);
        assert!(!out.status.success() && stderr(&out).contains(says), "{args:?}: {}", describe_status(&out));
    }
    assert_eq!(c.listed().len(), 6, "a refused name seals nothing");

    // forget: a dry run changes nothing; then t2 and t3 go.
    let before = c.chunks();
    let dry = c.fx.cli_json(&["forget", "t2", "t3", "--dry-run"]);
    assert_eq!(dry["forgotten"], serde_json::json!([t[1], t[2]]), "{dry}");
    assert!(dry["bytes_freed"].as_u64().is_some_and(|b| b > 100_000), "two versions of big go: {dry}");
    assert_eq!(c.listed().len(), 6, "--dry-run forgot nothing");
    // src/n2 and src/n3 lived only at t2 and t3: their removed files go
    // from the attic.
    assert_eq!(dry["attic_files_freed"].as_u64(), Some(2), "{dry}");
    let attic = c.attic();
    let done = c.fx.cli_json(&["forget", "t2", "t3"]);
    assert_eq!(done["chunks_freed"], dry["chunks_freed"], "{done}");
    assert_eq!(done["attic_files_freed"].as_u64(), Some(2), "{done}");
    assert_eq!(c.attic(), attic - 2, "the attic lost exactly those two");
    assert_eq!(c.chunks(), before - done["chunks_freed"].as_u64().expect("count"));
    for reference in [t[1].to_string(), "t3".to_string()] {
        let out = c.run(&["diff", &reference]);
        assert!(!out.status.success(), "diff {reference} of a forgotten checkpoint succeeded");
        let e = stderr(&out);
        assert!(e.contains("forgotten") && e.contains(&format!("checkpoint {}'s turn", t[0])), "{e}");
    }
    // Kept whatever is asked: names (the newest is `now`).
    for (what, says) in [("first", "named snapshot"), ("now", "named snapshot")] {
        let out = c.run(&["forget", what]);
        assert!(!out.status.success() && stderr(&out).contains(says), "forget {what}: {}", describe_status(&out));
    }
    c.check_views(&[t[1], t[2]], "after forget");
    // t1's turn now runs to t4: its log line is `diff t1 t4`.
    let log = c.fx.cli_json(&["log"]);
    let line = log.as_array().expect("array").iter().find(|e| e["checkpoint"].as_i64() == Some(t[0])).expect("t1");
    let d = c.fx.cli_json(&["diff", "first", "t4"]);
    let count = |kind: &str| d["changes"].as_array().expect("changes").iter().filter(|x| x["change"] == kind).count();
    assert_eq!(line["files_added"].as_u64(), Some(count("added") as u64), "{line} vs {d}");
    assert_eq!(line["files_deleted"].as_u64(), Some(count("deleted") as u64), "{line} vs {d}");
    assert_eq!(line["files_modified"].as_u64(), Some(count("modified") as u64), "{line} vs {d}");
    c.fsck_clean("after forget");
    // A rewind to a kept checkpoint whose turn took a forgotten one's.
    c.fx.cli_json(&["rewind", "first"]);
    assert_same_tree(&c.copies[&t[0]], c.fx.path(), "live tree after rewinding to first");
    c.fsck_clean("after the rewind");
}

#[test]
fn gc_keeps_the_young_and_collects_the_old_by_an_injected_clock() {
    let mut c = Case::new(&[]);
    let t: Vec<i64> = (1..=5).map(|i| c.step(i)).collect();
    c.fx.cli_json(&["snapshot", "kept", "--at", &t[1].to_string()]);
    // Today everything is young: nothing goes, whatever the count.
    let v = c.fx.cli_json(&["gc", "--keep-count", "1"]);
    assert_eq!(v["forgotten"], serde_json::json!([]), "{v}");
    assert_eq!(c.fx.status_json()["retention"]["keep_count"].as_u64(), Some(1), "gc's options are the policy now");
    // A month later (the daemon's clock), the old ones go but the named
    // and the 2 newest of the branch (the mount checkpoint and t5).
    c.fx.unmount();
    let later = (now_ms() + 30 * DAY_MS).to_string();
    c.fx.mount_with_env(false, ARGS, &[("REWINDFS_TEST_NOW_MS", &later)]);
    let dry = c.fx.cli_json(&["gc", "--dry-run", "--keep-count", "2"]);
    let expected = serde_json::json!([0, t[0], t[2], t[3]]);
    assert_eq!(dry["forgotten"], expected, "{dry}");
    assert_eq!(c.fx.status_json()["retention"]["keep_count"].as_u64(), Some(1), "--dry-run stores nothing");
    let text = c.fx.cli(&["gc", "--dry-run", "--keep-count", "2"]);
    assert!(text.contains("would forget checkpoints") && text.contains("would free"), "{text}");
    // du says where the bytes are and what gc would free (under the
    // stored policy: keep-count 1, which keeps less than 2).
    let du = c.fx.cli_json(&["du"]);
    for key in ["disk_bytes", "packs_bytes", "packs_live_bytes", "metadata_bytes", "attic_entries", "logical_bytes"] {
        assert!(du[key].as_u64().is_some_and(|n| n > 0), "{key}: {du}");
    }
    assert!(du["disk_bytes"].as_u64() > du["packs_bytes"].as_u64(), "{du}");
    assert!(du["packs_live_bytes"].as_u64() >= du["stored_bytes"].as_u64(), "records take headers too: {du}");
    let turns = du["turns"].as_array().expect("turns");
    assert!(turns.iter().any(|t| t["content_bytes"].as_u64().is_some_and(|b| b >= 150_000)), "{du}");
    let would = du["gc_would_free"]["forgotten"].as_array().expect("forgotten").len();
    assert!(would >= 4, "keep-count 1 lets at least what keep-count 2 does go: {du}");
    let text = c.fx.cli(&["du", "--turns"]);
    assert!(text.contains("dedup") && text.contains("gc would forget"), "{text}");
    let before = c.chunks();
    let done = c.fx.cli_json(&["gc", "--keep-count", "2"]);
    assert_eq!(done["forgotten"], expected, "{done}");
    assert!(done["chunks_freed"].as_u64().is_some_and(|n| n > 0), "{done}");
    assert!(done["attic_files_freed"].as_u64().is_some_and(|n| n > 0), "{done}");
    assert_eq!(c.chunks(), before - done["chunks_freed"].as_u64().expect("count"));
    let out = c.run(&["diff", "t1"]);
    assert!(stderr(&out).contains("collected by retention"), "{}", describe_status(&out));
    c.check_views(&[0, t[0], t[2], t[3]], "after gc");
    c.fsck_clean("after gc");
    // Most of the only pack was released: it was rewritten, and the store
    // mounts again (its packs are smaller than the newest checkpoint's
    // recorded store size was).
    assert_eq!(done["compacted"]["packs"].as_u64(), Some(1), "{done}");
    assert!(done["compacted"]["bytes_reclaimed"].as_u64().is_some_and(|b| b > 100_000), "{done}");
    let on_disk = c.packs();
    c.fx.unmount();
    c.fx.mount_with_env(false, ARGS, &[("REWINDFS_TEST_NOW_MS", &later)]);
    assert_eq!(c.packs(), on_disk);
    let du_after = c.fx.cli_json(&["du"]);
    assert!(du_after["packs_bytes"].as_u64() < du["packs_bytes"].as_u64(), "{du_after}");
    assert!(du_after["attic_entries"].as_u64() < du["attic_entries"].as_u64(), "{du_after}");
    c.check_views(&[0, t[0], t[2], t[3]], "after gc and a remount");
    c.fsck_clean("after gc and a remount");
    c.fx.cli_json(&["rewind", "kept"]);
    assert_same_tree(&c.copies[&t[1]], c.fx.path(), "live tree after rewinding to kept");
    // Nothing more to collect: the rest is protected or counted.
    let again = c.fx.cli_json(&["gc", "--keep-count", "2", "--dry-run"]);
    assert!(again["forgotten"].as_array().is_some_and(|a| a.iter().all(|n| n.as_i64() != Some(t[1]))), "{again}");
}

#[test]
fn a_gc_killed_after_its_commit_is_finished_at_the_next_mount() {
    let later = (now_ms() + 30 * DAY_MS).to_string();
    // `gc` forgets one checkpoint per collection, oldest first: killed
    // after the second one's commit (checkpoint t1, whose turn removed
    // src/n1, now alone in the attic), before it freed anything.
    let mut c = Case::new(&[("REWINDFS_TEST_NOW_MS", &later), ("REWINDFS_TEST_KILL_AT", "gc-committed:2")]);
    let t: Vec<i64> = (1..=4).map(|i| c.step(i)).collect();
    c.killed_by(&["gc", "--keep-count", "1", "--json"]);
    // Committed: the checkpoints are gone; the chunks are not freed yet.
    let meta = rewindfs::meta::Meta::open_read_only(&c.fx.store.join("meta.sqlite")).expect("meta");
    let left = meta.gc_chunks().expect("gc_chunks");
    assert!(!left.is_empty(), "the kill left the collection's intent");
    let attic_left = meta.gc_attic().expect("gc_attic");
    assert!(!attic_left.is_empty(), "removed files to take out of the attic");
    for id in &attic_left {
        assert!(c.fx.store.join("attic").join(id.0.to_string()).exists(), "attic entry {id:?} went before the kill");
    }
    drop(meta);
    let chunk_dir = c.fx.store.join("chunks");
    let has = |id: &rewindfs::store::ChunkId| {
        use rewindfs::store::ChunkStore;
        let store = rewindfs::store::PackStore::open_read_only(&chunk_dir).expect("chunk store");
        store.contains(id).expect("contains")
    };
    assert!(left.iter().all(has), "nothing of the killed collection was freed before the kill");
    let before = c.chunks();
    c.fx.mount_with_env(false, ARGS, &[("REWINDFS_TEST_NOW_MS", &later)]);
    assert_eq!(c.chunks(), before - left.len() as u64, "the mount finished the collection");
    assert!(!left.iter().any(has), "the mount freed what the killed collection listed");
    let meta = rewindfs::meta::Meta::open_read_only(&c.fx.store.join("meta.sqlite")).expect("meta");
    assert!(meta.gc_chunks().expect("gc_chunks").is_empty());
    assert!(meta.gc_attic().expect("gc_attic").is_empty());
    drop(meta);
    for id in &attic_left {
        assert!(!c.fx.store.join("attic").join(id.0.to_string()).exists(), "attic entry {id:?} is still there");
    }
    let listed = c.listed();
    assert!(!listed.contains(&0) && !listed.contains(&t[0]), "{listed:?}");
    assert!(t[1..].iter().all(|n| listed.contains(n)), "{listed:?}");
    // Views looked up now must not outlive their checkpoints' collection
    // in the kernel's cache.
    c.check_views(&[0, t[0]], "after the interrupted gc");
    c.fsck_clean("after the interrupted gc");
    // The rest goes with the next gc (the remount sealed a checkpoint).
    c.fx.cli_json(&["gc", "--keep-count", "2"]);
    c.check_views(&[0, t[0], t[1], t[2]], "after the next gc");
    c.fsck_clean("after the next gc");
    c.fx.cli_json(&["rewind", &t[3].to_string()]);
    assert_same_tree(&c.copies[&t[3]], c.fx.path(), "live tree after rewinding to t4");
}

/// A history whose checkpoint `made` is followed by a turn that removes a
/// directory of 12 files (each its own content): forgetting `made` merges
/// that turn into `t1`'s, dropping its 13 entry records (the names did not
/// exist at `t1`) and emptying the attic of the 12 files. Returns (t1,
/// made, the checkpoint after the removal).
fn history_with_a_large_removal(c: &mut Case) -> (i64, i64, i64) {
    let t1 = c.step(1);
    c.fx.sh("mkdir many && for i in $(seq 1 12); do head -c 30000 /dev/urandom > many/f$i; done");
    let made = c.fx.turn("made");
    let copy = c.copy();
    c.copies.insert(made, copy);
    c.fx.sh("rm -rf many && echo gone > src/gone");
    let removed = c.fx.turn("removed");
    let copy = c.copy();
    c.copies.insert(removed, copy);
    (t1, made, removed)
}

#[test]
fn a_forget_killed_between_two_batches_is_finished_at_the_next_mount_losing_nothing_kept() {
    // Three records per transaction: the removal's merge takes several,
    // and the daemon dies after the second.
    let env = [("REWINDFS_TEST_GC_BATCH_ROWS", "3"), ("REWINDFS_TEST_KILL_AT", "gc-batch:2")];
    let mut c = Case::new(&env);
    let (t1, made, removed) = history_with_a_large_removal(&mut c);
    let attic = c.attic();
    c.killed_by(&["forget", "made"]);
    let meta = rewindfs::meta::Meta::open_read_only(&c.fx.store.join("meta.sqlite")).expect("meta");
    let under_way = meta.forgetting().expect("forgetting");
    assert_eq!(under_way.map(|g| (g.checkpoint, g.into)), Some((made, Some(t1))), "the kill left the forget under way");
    drop(meta);
    c.fx.mount_with_env(false, ARGS, &[]);
    let meta = rewindfs::meta::Meta::open_read_only(&c.fx.store.join("meta.sqlite")).expect("meta");
    assert_eq!(meta.forgetting().expect("forgetting"), None, "the mount finished the forget");
    assert!(meta.gc_chunks().expect("gc_chunks").is_empty() && meta.gc_attic().expect("gc_attic").is_empty());
    drop(meta);
    assert_eq!(c.attic(), attic - 12, "the removed files no kept checkpoint reaches left the attic");
    c.check_views(&[made], "after the interrupted forget");
    c.fsck_clean("after the interrupted forget");
    let out = c.run(&["diff", "made"]);
    assert!(stderr(&out).contains("forgotten"), "{}", describe_status(&out));
    c.fx.cli_json(&["rewind", &t1.to_string()]);
    assert_same_tree(&c.copies[&t1], c.fx.path(), "live tree after rewinding to t1");
    c.fx.cli_json(&["rewind", &removed.to_string()]);
    assert_same_tree(&c.copies[&removed], c.fx.path(), "live tree after rewinding to the removal");
}

/// Ends a collection's pause however the test ends (the mount's unmount
/// would wait for it).
struct Unpause(PathBuf);

impl Drop for Unpause {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn writes_views_and_fsck_go_on_between_the_batches_of_a_forget() {
    let pause = tempfile::NamedTempFile::new().expect("pause file");
    let reached = format!("{}.reached", pause.path().display());
    let env = [("REWINDFS_TEST_GC_BATCH_ROWS", "3"), ("REWINDFS_TEST_GC_PAUSE", pause.path().to_str().expect("path"))];
    let mut c = Case::new(&env);
    let (_, made, _) = history_with_a_large_removal(&mut c);
    c.fsck_clean("before the forget");
    let attic = c.attic();
    let mp = c.mp();
    let _unpause = Unpause(pause.path().to_path_buf());
    let mut forget = c.fx.command();
    forget.args(["forget", "-C", &mp, "made", "--json"]);
    forget.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let mut child = forget.spawn().expect("spawn forget");
    let deadline = std::time::Instant::now() + CHILD_TIMEOUT;
    while !Path::new(&reached).exists() {
        assert!(std::time::Instant::now() < deadline, "the forget never paused between two batches");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Between two batches: a write completes, every kept view reads as it
    // did, the forgotten checkpoint is gone, and fsck finds nothing wrong.
    c.fx.sh("echo during > src/during");
    c.check_views(&[made], "between two batches");
    c.fsck_clean("between two batches");
    std::fs::remove_file(pause.path()).expect("end the pause");
    let out = wait_child(&mut child, CHILD_TIMEOUT, "forget");
    assert!(out.status.success(), "forget: {}", describe_status(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["forgotten"], serde_json::json!([made]), "{v}");
    assert_eq!(v["attic_files_freed"].as_u64(), Some(12), "{v}");
    assert_eq!(c.attic(), attic - 12);
    let after = c.fx.turn("after");
    let copy = c.copy();
    c.copies.insert(after, copy);
    assert_eq!(std::fs::read_to_string(c.fx.path().join("src/during")).expect("written between batches"), "during\n");
    c.check_views(&[made], "after the forget");
    c.fsck_clean("after the forget");
}

#[test]
fn a_forgotten_or_collected_checkpoint_s_view_is_gone_at_once_though_the_kernel_had_looked_it_up() {
    let later = (now_ms() + 30 * DAY_MS).to_string();
    let mut c = Case::new(&[("REWINDFS_TEST_NOW_MS", &later)]);
    let t: Vec<i64> = (1..=4).map(|i| c.step(i)).collect();
    let view = |c: &Case, path: &str| c.fx.path().join(".rewindfs").join(path);
    let gone = |c: &Case, path: &str| match std::fs::symlink_metadata(view(c, path)) {
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        Ok(_) => false,
    };
    // Looked up (the kernel caches a view's entry for an hour). A view's
    // root is one directory inode whatever names it, and the kernel keeps
    // one name of a directory: one name per checkpoint here.
    for path in [format!("checkpoints/{}", t[1]), "messages/t1".to_string(), "checkpoints/0".to_string()] {
        assert!(!gone(&c, &path), "{path} before");
    }
    c.fx.cli_json(&["forget", "t2"]);
    assert!(gone(&c, &format!("checkpoints/{}", t[1])), "checkpoints/{} after forget", t[1]);
    let v = c.fx.cli_json(&["gc", "--keep-count", "2"]);
    assert_eq!(v["forgotten"], serde_json::json!([0, t[0]]), "{v}");
    assert!(gone(&c, "messages/t1"), "messages/t1 after gc");
    assert!(gone(&c, "checkpoints/0"), "checkpoints/0 after gc");
    assert!(!gone(&c, &format!("checkpoints/{}", t[3])), "the kept newest stays");
}

/// Builds a history with a name, a rewind's safety checkpoint and a
/// directory the rewind moved aside whole into the attic.
fn history_to_reset(c: &mut Case) -> Vec<i64> {
    let mut t: Vec<i64> = (1..=3).map(|i| c.step(i)).collect();
    c.fx.cli_json(&["snapshot", "kept", "--at", &t[0].to_string()]);
    c.fx.sh("mkdir -p made/deep && head -c 100000 /dev/urandom > made/deep/f && echo x > made/g");
    t.push(c.fx.turn("t-made"));
    c.fx.cli_json(&["rewind", &t[2].to_string()]);
    assert!(!c.fx.path().join("made").exists(), "the rewind took the new directory away");
    t.push(c.step(5));
    t
}

/// What `reset` must leave: the workspace as `copy`, one checkpoint whose
/// view is it (and the mount's checkpoint after a remount), no attic,
/// references to `old` saying they were reset.
fn check_reset(c: &Case, copy: &Path, fresh: i64, old: &[i64], when: &str) {
    assert_same_tree(copy, c.fx.path(), &format!("{when}: the workspace"));
    let listed = c.listed();
    assert!(
        listed[0] == fresh && listed[1..].iter().all(|&n| n > fresh),
        "{when}: log lists the fresh checkpoint first: {listed:?}"
    );
    assert_same_tree(copy, &c.fx.path().join(format!(".rewindfs/checkpoints/{fresh}")), &format!("{when}: its view"));
    for n in old {
        assert!(!c.fx.path().join(format!(".rewindfs/checkpoints/{n}")).exists(), "{when}: view of {n}");
    }
    for reference in ["kept".to_string(), old[0].to_string(), "t2".to_string()] {
        let out = c.run(&["diff", &reference]);
        let e = stderr(&out);
        assert!(!out.status.success() && e.contains("reset") && e.contains("cannot be undone"), "{when}: {e}");
    }
    let out = c.run(&["rewind", &old[1].to_string()]);
    assert!(!out.status.success() && stderr(&out).contains("reset"), "{when}: {}", describe_status(&out));
    assert_eq!(c.attic(), 0, "{when}: the attic is empty (directories moved aside whole too)");
    c.fsck_clean(when);
}

#[test]
fn reset_deletes_all_history_but_never_the_workspace() {
    let mut c = Case::new(&[]);
    let t = history_to_reset(&mut c);
    let attic_dirs = std::fs::read_dir(c.fx.store.join("attic"))
        .expect("attic")
        .filter(|e| e.as_ref().is_ok_and(|e| e.path().is_dir()))
        .count();
    assert!(attic_dirs > 0, "the rewind moved a directory aside whole");
    // Refused without --confirm, by the CLI (exit 2), changing nothing.
    let listed = c.listed();
    let out = c.run(&["reset"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe_status(&out));
    assert!(stderr(&out).contains("--confirm") && stderr(&out).contains("cannot be undone"), "{}", stderr(&out));
    assert_eq!(c.listed(), listed, "a refused reset changes nothing");

    let copy = c.copy();
    let (chunks, packs) = (c.chunks(), c.packs());
    // Looked up: the kernel caches a view's entry for an hour.
    for n in &listed {
        assert!(c.fx.path().join(format!(".rewindfs/checkpoints/{n}")).exists(), "view of {n} before the reset");
    }
    let v = c.fx.cli_json(&["reset", "--confirm"]);
    let fresh = v["checkpoint"].as_i64().expect("checkpoint");
    let mut old = vec![0];
    old.extend(&t);
    assert_eq!(v["forgotten"].as_array().map(|a| a.len()), Some(listed.len()), "{v}");
    assert!(v["attic_files_freed"].as_u64().is_some_and(|n| n >= 3), "{v}");
    assert_eq!(c.listed(), vec![fresh], "log lists the fresh checkpoint only");
    check_reset(&c, &copy, fresh, &old, "after reset");
    assert!(c.chunks() < chunks / 4, "chunks {} of {chunks} left", c.chunks());
    assert!(c.packs() + 500_000 < packs, "the packs shrank from {packs} to {}", c.packs());
    // History starts again from the fresh checkpoint.
    let n = c.step(6);
    c.fx.cli_json(&["rewind", &fresh.to_string()]);
    assert_same_tree(&copy, c.fx.path(), "rewound to the fresh checkpoint");
    assert!(c.listed().contains(&n));
    c.fx.unmount();
    c.fx.mount_with_env(false, ARGS, &[]);
    assert_same_tree(&copy, c.fx.path(), "after a remount");
    c.fsck_clean("after a remount");
}

#[test]
fn a_reset_killed_before_or_after_its_commit_loses_nothing_of_the_workspace() {
    let mut c = Case::new(&[("REWINDFS_TEST_KILL_AT", "reset-sealed:1")]);
    let t = history_to_reset(&mut c);
    let copy = c.copy();
    let listed = c.listed();
    // Killed after the fresh seal, before the collection: the history is whole.
    c.killed_by(&["reset", "--confirm"]);
    c.fx.mount_with_env(false, ARGS, &[("REWINDFS_TEST_KILL_AT", "gc-committed:1")]);
    assert_same_tree(&copy, c.fx.path(), "the workspace after a reset killed before its commit");
    let now = c.listed();
    assert!(listed.iter().all(|n| now.contains(n)), "no checkpoint went: {listed:?} -> {now:?}");
    c.check_views(&[], "after a reset killed before its commit");
    // Killed after the commit, before freeing: the next mount frees.
    c.killed_by(&["reset", "--confirm"]);
    let meta = rewindfs::meta::Meta::open_read_only(&c.fx.store.join("meta.sqlite")).expect("meta");
    assert!(!meta.gc_attic().expect("gc_attic").is_empty(), "the kill left the attic to empty");
    drop(meta);
    c.fx.mount_with_env(false, ARGS, &[]);
    let fresh = *c.listed().first().expect("a checkpoint");
    let mut old = vec![0];
    old.extend(&t);
    check_reset(&c, &copy, fresh, &old, "after a reset killed after its commit");
}

#[test]
fn the_background_collection_keeps_the_history_within_the_policy_without_gc() {
    let mut c = Case::new(&[]);
    // Keep 3 checkpoints, whatever their age; nothing is old enough to go
    // yet, and 3 is less than a batch: nothing runs.
    let v = c.fx.cli_json(&["gc", "--keep-count", "3", "--keep-days", "0"]);
    assert_eq!(v["policy"]["auto"].as_bool(), Some(true), "on by default: {v}");
    let status = c.fx.status_json();
    assert!(status["auto_gc"].is_null(), "no background collection yet: {status}");
    for i in 1..=20 {
        c.step(i);
    }
    // The daemon collects by itself (it looks every half second).
    let bound = 3 + rewindfs::journal::retention::AUTO_BATCH;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while c.listed().len() >= bound {
        assert!(std::time::Instant::now() < deadline, "never collected: {:?}", c.listed());
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // The run is noted for `status` when it ends, after its compaction:
    // the history can already be within the bound while it compacts.
    loop {
        let status = c.fx.status_json();
        if !status["auto_gc"].is_null() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the background run never ended: {status}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // A run that started after an earlier one was noted may still be
    // forgetting: the views are compared once none runs and none is due
    // (the plan read first: without a seal it only shrinks).
    let status = loop {
        let plan = c.fx.cli_json(&["gc", "--dry-run"]);
        let due = plan["forgotten"].as_array().expect("forgotten").len() >= rewindfs::journal::retention::AUTO_BATCH;
        let status = c.fx.status_json();
        if !due && status["auto_gc_running"] == false {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "the background collection never settled: {plan} {status}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let run = &status["auto_gc"];
    assert!(run["forgotten"].as_u64().is_some_and(|n| n >= 8), "{status}");
    assert!(run["bytes_freed"].as_u64().is_some_and(|n| n > 100_000), "{status}");
    // Each slice held the turn gate for its transaction only (a generous
    // bound: a debug build on a loaded machine; release: benchmarks.md).
    let longest = run["longest_slice_ms"].as_f64().unwrap_or(-1.0);
    assert!(longest > 0.0 && longest < 2000.0, "{status}");
    let text = c.fx.cli(&["status"]);
    assert!(text.contains("auto gc:     on; last ran") && text.contains("writes waited at most"), "{text}");
    let listed = c.listed();
    let forgotten: Vec<i64> = c.copies.keys().copied().filter(|n| !listed.contains(n)).collect();
    c.check_views(&forgotten, "after the background collection");
    c.fsck_clean("after the background collection");
    // Off: 12 more turns, nothing goes.
    let v = c.fx.cli_json(&["gc", "--auto", "off"]);
    assert_eq!(v["policy"]["auto"].as_bool(), Some(false), "{v}");
    let kept = c.listed().len();
    for i in 21..=32 {
        c.step(i);
    }
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert_eq!(c.listed().len(), kept + 12, "with --auto off nothing is collected");
    assert!(c.fx.cli(&["status"]).contains("auto gc:     off"));
}

#[test]
fn gc_removes_a_directory_a_rewind_moved_aside_once_no_kept_checkpoint_reaches_it() {
    let mut c = Case::new(&[]);
    let t1 = c.step(1);
    c.fx.sh("mkdir -p made/deep && head -c 100000 /dev/urandom > made/deep/f && echo x > made/g && ln -s g made/l");
    c.fx.turn("t-made");
    c.fx.cli_json(&["rewind", &t1.to_string()]);
    let attic_dirs = |c: &Case| {
        std::fs::read_dir(c.fx.store.join("attic"))
            .expect("attic")
            .filter(|e| e.as_ref().is_ok_and(|e| e.path().symlink_metadata().is_ok_and(|m| m.is_dir())))
            .count()
    };
    assert_eq!(attic_dirs(&c), 1, "the rewind moved made/ aside whole");
    c.step(3);
    c.step(4);
    // A month later, with no rewind's safety checkpoint kept: only the
    // newest and the checkpoint last rewound to (t1) stay.
    c.fx.unmount();
    let meta = rewindfs::meta::Meta::open(&c.fx.store.join("meta.sqlite")).expect("meta");
    meta.set_state("retention.keep_rewinds", "0").expect("policy");
    drop(meta);
    let later = (now_ms() + 30 * DAY_MS).to_string();
    c.fx.mount_with_env(false, ARGS, &[("REWINDFS_TEST_NOW_MS", &later)]);
    let dry = c.fx.cli_json(&["gc", "--dry-run", "--keep-count", "1"]);
    assert_eq!(attic_dirs(&c), 1, "--dry-run removes nothing");
    let v = c.fx.cli_json(&["gc", "--keep-count", "1"]);
    assert_eq!(v["attic_files_freed"], dry["attic_files_freed"], "{v} vs {dry}");
    assert_eq!(attic_dirs(&c), 0, "made/ left the attic: {v}");
    assert!(v["attic_bytes_freed"].as_u64().is_some_and(|b| b >= 100_000), "{v}");
    let listed = c.listed();
    assert!(listed.contains(&t1), "{listed:?}");
    let forgotten: Vec<i64> = c.copies.keys().copied().filter(|n| !listed.contains(n)).collect();
    c.check_views(&forgotten, "after gc");
    c.fsck_clean("after gc");
    c.fx.cli_json(&["rewind", &t1.to_string()]);
    assert_same_tree(&c.copies[&t1], c.fx.path(), "rewound to t1");
}

/// The ranges of checkpoints whose state of an object is unknown
/// (`bypassed`), read beside the daemon.
fn bypassed(c: &Case) -> Vec<(i64, i64)> {
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
    let db = rusqlite::Connection::open_with_flags(c.fx.store.join("meta.sqlite"), flags).expect("meta.sqlite");
    let mut stmt = db.prepare("SELECT first, last FROM bypassed ORDER BY first").expect("prepare");
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).expect("read bypassed");
    rows.collect::<rusqlite::Result<_>>().expect("read bypassed")
}

/// A change that bypassed the mount (a write to
/// the mount's source) and then a change through it leave checkpoints
/// 0..=b unknown for that file (`bypassed`). Forgetting some of them keeps
/// the range while a kept checkpoint lies in it, and that checkpoint's view
/// still fails the file (EIO), which `fsck` names; forgetting the last of
/// them drops the range, and `fsck` is clean again.
#[test]
fn forget_drops_a_bypassed_change_s_unknown_states_once_no_kept_checkpoint_has_them() {
    let mut c = Case::new(&[]);
    let a = c.step(1);
    let b = c.step(2);
    // Far enough past the seal for the clock the kernel stamps files with.
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(c.fx.ws.join("k"), "bypassed\n").expect("write the mount's source");
    c.fx.sh("echo after >> k");
    let d = c.step(3);
    assert_eq!(bypassed(&c), vec![(0, b)], "checkpoints 0 to {b} do not know k");
    let read_k = |c: &Case, n: i64| std::fs::read(c.fx.path().join(format!(".rewindfs/checkpoints/{n}/k")));
    let unknown = |c: &Case, n: i64, when: &str| {
        let got = read_k(c, n);
        assert_eq!(got.as_ref().map_err(|e| e.raw_os_error()), Err(Some(libc::EIO)), "{when}: k at {n}: {got:?}");
    };
    for n in [0, a, b] {
        unknown(&c, n, "before forget");
    }
    c.fx.cli_json(&["forget", &a.to_string(), &b.to_string()]);
    assert_eq!(bypassed(&c), vec![(0, b)], "checkpoint 0 is kept and its state of k is still unknown");
    unknown(&c, 0, &format!("after forgetting {a} and {b}"));
    // fsck names what the view of 0 cannot read back, and only that.
    let out = c.run(&["fsck"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(6), "fsck names the unreadable state: {}\n{text}", describe_status(&out));
    let problems: Vec<&str> = text.lines().filter(|l| l.starts_with("checkpoint")).collect();
    assert_eq!(problems.len(), 1, "{text}");
    assert!(problems[0].starts_with("checkpoint 0: k: changed under the mount"), "{text}");
    c.fx.cli_json(&["forget", "0"]);
    assert_eq!(bypassed(&c), vec![], "no kept checkpoint lies in 0..={b} any more");
    // k is known at every kept checkpoint (d read the bypassed bytes as
    // the tree), as every other file.
    c.copies.retain(|n, _| *n == d);
    c.check_views(&[0, a, b], "after forgetting the range");
    assert_eq!(read_k(&c, d).expect("k at d"), b"bypassed\nafter\n");
    c.fsck_clean("after forgetting the range");
}

#[test]
fn forget_and_gc_report_progress_one_checkpoint_at_a_time_to_a_client_that_asks() {
    let mut c = Case::new(&[]);
    for i in 1..=6 {
        c.step(i);
    }
    let socket = c.fx.status_json()["socket"].as_str().expect("socket").to_string();
    let mut seen = Vec::new();
    let forget =
        rewindfs::daemon::protocol::Forget { checkpoints: vec!["4".into(), "2".into(), "3".into()], dry_run: false };
    let reply = rewindfs::daemon::control::call_with_progress(
        Path::new(&socket),
        forget,
        std::time::Duration::from_secs(60),
        &mut |p| seen.push(p),
    )
    .expect("forget");
    assert_eq!(reply.forgotten, vec![2, 3, 4], "{reply:?}");
    // One line per checkpoint, each a collection of its own.
    let done: Vec<(u64, u64)> = seen.iter().map(|p| (p.done, p.total)).collect();
    assert_eq!(done, vec![(1, 3), (2, 3), (3, 3)], "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0].bytes_freed <= w[1].bytes_freed), "{seen:?}");
    assert_eq!(seen.last().map(|p| p.bytes_freed), Some(reply.bytes_freed), "{seen:?}");
    assert!(reply.bytes_freed > 100_000, "each turn had its own version of big: {reply:?}");
    c.check_views(&[2, 3, 4], "after forgetting with progress");
    // Without asking, no progress line comes (the plain call reads one
    // line: a progress line would be taken for a malformed answer).
    let gc =
        rewindfs::daemon::protocol::Gc { dry_run: false, keep_count: Some(2), keep_days: Some(0), auto: Some(false) };
    let reply =
        rewindfs::daemon::control::call(Path::new(&socket), gc, std::time::Duration::from_secs(60)).expect("gc");
    assert_eq!(reply.collected.forgotten.len(), 2, "{reply:?}");
    // The CLI draws nothing when stderr is not a terminal.
    let out = c.run(&["forget", "5"]);
    assert!(out.status.success(), "{}", describe_status(&out));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    c.fsck_clean("after the collections");
}

/// Bytes the files under `dir` take on disk (`du`: allocated blocks).
fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for e in std::fs::read_dir(dir).expect("read_dir").map(|e| e.expect("entry")) {
        let m = e.metadata().expect("metadata");
        total += m.blocks() * 512;
        if m.is_dir() {
            total += disk_usage(&e.path());
        }
    }
    total
}

/// What `gc` frees shows in `du` of the store, not only
/// in the packs: the SQLite logs are truncated and the databases give
/// their freed pages back.
#[test]
fn what_gc_frees_shows_in_the_disk_usage_of_the_store() {
    use std::io::Write;
    let mut c = Case::new(&[]);
    // 13 checkpoints, each overwriting `data` in place with 3 MiB of new
    // bytes: every pre-image goes into the packs.
    for i in 0..13u64 {
        let mut bytes = vec![0u8; 3 << 20];
        let mut h = blake3::Hasher::new();
        h.update(&i.to_le_bytes());
        h.finalize_xof().fill(&mut bytes);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(c.fx.path().join("data"))
            .expect("open data");
        f.write_all(&bytes).expect("write data");
        drop(f);
        let n = c.fx.turn(&format!("d{i}"));
        let copy = c.copy();
        c.copies.insert(n, copy);
    }
    let store = c.fx.store.clone();
    let (du0, packs0) = (disk_usage(&store), disk_usage(&store.join("chunks/packs")));
    let done = c.fx.cli_json(&["gc", "--keep-count", "3", "--keep-days", "0"]);
    let forgotten: Vec<i64> =
        done["forgotten"].as_array().expect("forgotten").iter().filter_map(|n| n.as_i64()).collect();
    assert!(forgotten.len() >= 10, "{done}");
    let (du1, packs1) = (disk_usage(&store), disk_usage(&store.join("chunks/packs")));
    eprintln!("store {du0} -> {du1} bytes, packs {packs0} -> {packs1} bytes");
    assert!(packs0 - packs1 > 20 << 20, "the packs gave back {} bytes", packs0 - packs1);
    let wals: Vec<(PathBuf, u64)> = ["meta.sqlite-wal", "chunks/chunks.sqlite-wal"]
        .iter()
        .map(|w| store.join(w))
        .map(|w| (w.clone(), std::fs::metadata(&w).map(|m| m.len()).unwrap_or(0)))
        .collect();
    assert!(
        du0.saturating_sub(du1) * 10 >= (packs0 - packs1) * 9,
        "the store gave back {} bytes on disk, the packs {}; the logs: {wals:?}",
        du0.saturating_sub(du1),
        packs0 - packs1
    );
    assert!(wals.iter().all(|(_, len)| *len < 64 << 10), "a log was left long after gc: {wals:?}");
    c.check_views(&forgotten, "after gc");
    c.fsck_clean("after gc");
}
