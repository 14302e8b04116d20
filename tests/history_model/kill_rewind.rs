//! `kill -9` of the daemon in the middle of a rewind, as a step
//! of the model test (`killrewind K N`). The daemon is mounted again with
//! the test hook `REWINDFS_TEST_KILL_AT=rewind-record:N` (N = 0:
//! `rewind-sealed:1`, just after the result was sealed), which kills it at
//! the N-th journal record of the rewind to K; a rewind with fewer records
//! completes, and the daemon is killed after it. Then the workspace is
//! mounted again, and what the mount says decides what the tree must be:
//! - it recovered the rewind (`recovered` in `status --json`, and "recovered:
//!   the rewind to checkpoint K" in its message): the safety checkpoint S is
//!   the tree before, the interrupted checkpoint is the half-rewound tree
//!   (its view is taken as it first reads, and must read the same ever
//!   after), the result and the live tree are checkpoint K;
//! - it recovered nothing: the rewind had either not begun (the tree is the
//!   one before) or sealed its result (the tree is K's), as `log` shows.
//!
//! Then the harness checks, as after every history step, the live tree and
//! every checkpoint's view (and `diff`, `history`, `show`, `log`).
//! Kill steps become `killrewind` half of the time, decided from a copy of
//! the generator's state (so the other steps of a seed stay as they were);
//! HISTORY_MODEL_KILL_REWIND=0 turns this off.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use super::{Res, Runner, fail, observe_fs};
use crate::common::{describe_status, stderr};
use crate::model::{Model, Rng, Step};

/// A `kill` step, or half of the time one that lands in a rewind.
pub(super) fn kill_step(snaps: &BTreeMap<i64, Model>, rng: &Rng) -> Step {
    if std::env::var("HISTORY_MODEL_KILL_REWIND").is_ok_and(|v| v == "0") {
        return Step::Kill;
    }
    let mut own = Rng(rng.0 ^ 0x6b69_6c6c_7265_7731);
    own.next();
    if own.below(2) == 0 {
        return Step::Kill;
    }
    let cps: Vec<i64> = snaps.keys().copied().collect();
    let to = *own.pick(&cps).expect("checkpoint 0");
    Step::KillRewind { to, at: own.below(9) as u64 }
}

impl Runner {
    pub(super) fn kill_rewind(&mut self, to: i64, at: u64) -> Res<()> {
        self.close_all();
        let point = if at == 0 { "rewind-sealed:1".to_string() } else { format!("rewind-record:{at}") };
        self.fx.unmount();
        self.fx.mount_with_env(false, &["--auto-turn", "0"], &[("REWINDFS_TEST_KILL_AT", &point)]);
        let m = self.current_checkpoint()?;
        self.sealed(Some(m), self.model.clone(), "mount (kill armed)")?;
        let pre = self.model.clone();
        let target = self.snaps[&to].clone();
        let newest = self.newest();
        let pid = self.fx.daemon_pid();
        let mp = self.mp();
        let out = self.fx.rewindfs(&["rewind", "-C", &mp, "--json", &to.to_string()]);
        if !out.status.success() && !stderr(&out).contains("completed by the next mount") {
            return fail(
                "killrewind",
                format!(
                    "the rewind killed at {point} {} without saying what happens next: {}",
                    describe_status(&out),
                    stderr(&out).trim()
                ),
            );
        }
        // A rewind with fewer records than `at` completed: killed after it.
        if let Some(p) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while Path::new(&format!("/proc/{pid}")).exists() {
            if Instant::now() > deadline {
                return fail("kill", format!("daemon {pid} still exists 20 s after kill -9"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // Detaches the dead mount.
        self.fx.unmount();
        let said = stderr(&self.fx.mount_output(false, &["--auto-turn", "0"], &[]));
        let recovered = self.fx.status_json()["recovered"].as_array().cloned().unwrap_or_default();
        let log = self.cli_json(&["log"])?;
        let fresh: Vec<serde_json::Value> = log
            .as_array()
            .map(|a| a.iter().filter(|v| v["checkpoint"].as_i64().is_some_and(|n| n > newest)).cloned().collect())
            .unwrap_or_default();
        let safety_label = format!("safety checkpoint before rewind to {to}");
        let is_safety = |v: &serde_json::Value| v["label"].as_str().is_some_and(|l| l.starts_with(&safety_label));
        let is_result = |v: &serde_json::Value| v["reason"] == "rewind" && v["parent"].as_i64() == Some(to);
        match recovered.as_slice() {
            [] => {
                if said.contains("recovered") {
                    return fail("killrewind", format!("nothing recovered, yet the mount says: {said}"));
                }
                let mut done = false;
                for v in &fresh {
                    let n = v["checkpoint"].as_i64();
                    let model = if is_safety(v) {
                        self.last_safety = n;
                        pre.clone()
                    } else if is_result(v) {
                        done = true;
                        target.clone()
                    } else if done {
                        target.clone()
                    } else {
                        pre.clone()
                    };
                    self.sealed(n, model, "after a kill during a rewind")?;
                }
                eprintln!(
                    "killrewind {to} {at}: {}",
                    if done { "the rewind was done before the kill" } else { "killed before the rewind began" }
                );
                self.model = if done { target } else { pre };
            }
            [r] => {
                let num = |k: &str| {
                    r[k].as_i64().ok_or_else(|| super::Failure { kind: "killrewind", msg: format!("no {k} in {r}") })
                };
                let (undo, interrupted, result) =
                    (num("undo_checkpoint")?, num("interrupted_checkpoint")?, num("result_checkpoint")?);
                if r["op"] != "rewind" || r["checkpoint"].as_i64() != Some(to) {
                    return fail("killrewind", format!("recovered something else than the rewind to {to}: {r}"));
                }
                if !said.contains(&format!("recovered: the rewind to checkpoint {to}")) {
                    return fail("killrewind", format!("the mount message does not say what was recovered: {said}"));
                }
                for v in &fresh {
                    let n = v["checkpoint"].as_i64();
                    let model = match n {
                        Some(n) if n == undo => pre.clone(),
                        Some(n) if n == result && is_result(v) => target.clone(),
                        Some(n) if n == interrupted => {
                            let view = self.fx.mnt.join(".rewindfs/checkpoints").join(n.to_string());
                            let seen = observe_fs(&view).or_else(|e| {
                                fail("view", format!("reading the interrupted checkpoint {n}'s view: {e}"))
                            })?;
                            Model::of_seen(&seen, &mut self.next_id)
                        }
                        _ => return fail("killrewind", format!("an unexpected checkpoint after the recovery: {v}")),
                    };
                    self.sealed(n, model, "after a recovered rewind")?;
                }
                eprintln!("killrewind {to} {at}: killed part-way, completed at the next mount");
                self.last_safety = Some(undo);
                self.model = target;
            }
            _ => return fail("killrewind", format!("more than one thing recovered: {recovered:?}")),
        }
        Ok(())
    }
}
