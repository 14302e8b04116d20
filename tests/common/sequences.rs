//! What the randomized sequence tests (`faults_store_full`,
//! `faults_damage`) share: seeds from the environment, a failure caught
//! as text, a sequence printed so it can be pasted back, and the summary.

use std::fmt::Display;
use std::time::Instant;

pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

/// The seeds to run: `<PREFIX>_SEED` alone if set; else `fixed` (unless
/// `<PREFIX>_FIXED=0`) and `<PREFIX>_SEQUENCES` random ones.
pub fn seeds(prefix: &str, fixed: &[u64]) -> Vec<u64> {
    if let Some(s) = env_u64(&format!("{prefix}_SEED")) {
        return vec![s];
    }
    let mut seeds = Vec::new();
    if std::env::var(format!("{prefix}_FIXED")).map_or(true, |v| v != "0") {
        seeds.extend_from_slice(fixed);
    }
    let base = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    for i in 0..env_u64(&format!("{prefix}_SEQUENCES")).unwrap_or(0) {
        seeds.push(super::Rng(base.wrapping_add(i).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1).next() % 1_000_000_000);
    }
    seeds
}

/// The steps of `<PREFIX>_REPLAY` ('step; step; ...', or a printed
/// [`listing`] pasted whole), if set.
pub fn replay_from_env(prefix: &str) -> Option<Vec<String>> {
    let list = std::env::var(format!("{prefix}_REPLAY")).ok()?;
    Some(
        list.split([';', ',', '\n'])
            .map(|l| l.trim().trim_end_matches(',').trim_matches('"').to_string())
            .filter(|l| !l.is_empty() && !l.starts_with("replay") && !l.starts_with(']'))
            .collect(),
    )
}

/// Runs `f`, a panic in it (an assertion of the fixture) becoming its
/// message.
pub fn guarded<T, E>(f: impl FnOnce() -> Result<T, E>, from_panic: impl FnOnce(String) -> E) -> Result<T, E> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(from_panic(
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into()),
        )),
    }
}

/// A sequence as the Rust of a regression test.
pub fn listing(steps: &[impl Display]) -> String {
    let quoted: Vec<String> = steps.iter().map(|s| format!("    \"{s}\",")).collect();
    format!("replay(&[\n{}\n]);", quoted.join("\n"))
}

/// Prints the summary line and fails with every failure.
pub fn conclude(name: &str, seeds: usize, steps: usize, extra: &str, failures: &[String], started: Instant) {
    eprintln!(
        "{name}: {seeds} sequences, {steps} steps{extra}, {} failures in {:.0} s",
        failures.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{} sequences failed:\n\n{}", failures.len(), failures.join("\n\n"));
}
