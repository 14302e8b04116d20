//! A mounted workspace with a `cp -a` copy of the tree at every checkpoint
//! it seals, and the bookkeeping of a rewind's two checkpoints (the safety
//! checkpoint is the tree before it, the result the tree rewound to). The
//! tests that compare the live tree and the views with copies share it
//! (tests/interrupted.rs, tests/history_regressions.rs); each compares in
//! its own way.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::{MountFixture, sh};

pub struct CopiedHistory {
    pub fx: MountFixture,
    /// The copy of the tree at each checkpoint, by number.
    pub copies: BTreeMap<i64, PathBuf>,
    /// Copies made so far (names `copyN`).
    pub n: usize,
}

impl CopiedHistory {
    /// `setup` runs in the plain workspace, which is then mounted with
    /// `args`; checkpoint 0 is that tree.
    pub fn new(setup: &str, args: &[&str]) -> CopiedHistory {
        Self::with_env(setup, args, &[])
    }

    /// As `new`, with more environment for the daemon.
    pub fn with_env(setup: &str, args: &[&str], env: &[(&str, &str)]) -> CopiedHistory {
        let mut fx = MountFixture::unmounted();
        sh(&fx.ws, setup);
        fx.mount_with_env(false, args, env);
        let mut h = CopiedHistory { fx, copies: BTreeMap::new(), n: 0 };
        let c0 = h.copy();
        h.copies.insert(0, c0);
        h
    }

    /// A copy of the live tree now, under a new name.
    pub fn copy(&mut self) -> PathBuf {
        self.n += 1;
        self.fx.copy_tree(&format!("copy{}", self.n))
    }

    /// Seals a checkpoint and keeps a copy of it.
    pub fn turn(&mut self) -> i64 {
        let n = self.fx.turn(&format!("t{}", self.n));
        let c = self.copy();
        self.copies.insert(n, c);
        n
    }

    /// Rewinds to `to` (it must succeed) and records the copies of its
    /// safety and result checkpoints; returns the safety checkpoint and
    /// the answer of `rewind --json`. The caller checks the live tree
    /// against `copies[to]`.
    pub fn rewind_recorded(&mut self, to: i64) -> (i64, serde_json::Value) {
        self.rewind_recorded_after(to, || {})
    }

    /// As `rewind_recorded`, calling `just_before` between the copy of the
    /// tree and the rewind.
    pub fn rewind_recorded_after(&mut self, to: i64, just_before: impl FnOnce()) -> (i64, serde_json::Value) {
        let before = self.copy();
        just_before();
        let v = self.fx.cli_json(&["rewind", &to.to_string()]);
        let safety = v["safety_checkpoint"].as_i64().unwrap_or_else(|| panic!("no safety_checkpoint in {v}"));
        let result = v["result_checkpoint"].as_i64().unwrap_or_else(|| panic!("no result_checkpoint in {v}"));
        self.copies.insert(safety, before);
        let expected = self.copies[&to].clone();
        self.copies.insert(result, expected);
        (safety, v)
    }
}
