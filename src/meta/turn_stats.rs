//! The turns' statistics, as one area of the metadata: what `log` shows
//! for each sealed turn (files added, modified and deleted, lines added and
//! removed, records by program), stored once computed, and where each
//! turn's changes are in the tree at its end (so that computing them, and
//! a rewind's check, visit only those paths). [`TurnStatistics`] is that
//! area's interface: [`Meta`] implements it over SQLite (`turn_summaries`,
//! `turn_programs`; docs/format.md), [`MemoryTurnStatistics`] is the
//! in-memory model, and [`kit`] is the one suite both pass. The journal
//! hands it out through `Journal::with_turn_stats`. Folding a forgotten
//! turn's rows into the next is retention's (`meta/retention.rs`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use rusqlite::{OptionalExtension, params};

use super::{Ctx, Meta, MetaResult, TurnStats};

/// The turns' statistics and paths (see the module's comment). A turn's
/// statistics and its paths are set apart and kept apart: setting one
/// leaves the other.
pub trait TurnStatistics {
    /// Stores a sealed turn's statistics (replacing earlier ones, programs
    /// included).
    fn set_turn_stats(&self, turn: i64, stats: &TurnStats) -> MetaResult<()>;

    /// Every stored turn's statistics, by turn.
    fn turn_stats(&self) -> MetaResult<HashMap<i64, TurnStats>>;

    /// One turn's stored statistics, if computed.
    fn turn_stats_of(&self, turn: i64) -> MetaResult<Option<TurnStats>>;

    /// Where the changes of `turn` are in the tree at its end: `Some`
    /// paths (encoded by `report`'s `encode_paths`), or `None` when only a
    /// walk of the whole tree can tell. Set when the turn is sealed.
    fn set_turn_paths(&self, turn: i64, paths: Option<&[u8]>) -> MetaResult<()>;

    /// The paths recorded by `set_turn_paths` (`None`: none set, or the
    /// whole tree).
    fn turn_paths(&self, turn: i64) -> MetaResult<Option<Vec<u8>>>;
}

impl Meta {
    fn stored_turn_stats(&self, only: Option<i64>) -> MetaResult<HashMap<i64, TurnStats>> {
        let mut out = HashMap::new();
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT turn, files_added, files_modified, files_deleted, lines_added, lines_removed
                 FROM turn_summaries WHERE files_added IS NOT NULL AND (?1 IS NULL OR turn = ?1)",
            )
            .ctx("prepare")?;
        let rows = stmt
            .query_map([only], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    TurnStats {
                        files_added: r.get::<_, i64>(1)? as u64,
                        files_modified: r.get::<_, i64>(2)? as u64,
                        files_deleted: r.get::<_, i64>(3)? as u64,
                        lines_added: r.get::<_, i64>(4)? as u64,
                        lines_removed: r.get::<_, i64>(5)? as u64,
                        programs: Default::default(),
                    },
                ))
            })
            .ctx("read turn statistics")?;
        for row in rows {
            let (turn, stats) = row.ctx("read turn statistics")?;
            out.insert(turn, stats);
        }
        let mut stmt = self
            .conn
            .prepare_cached("SELECT turn, program, records FROM turn_programs WHERE ?1 IS NULL OR turn = ?1")
            .ctx("prepare")?;
        let rows = stmt
            .query_map([only], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?)))
            .ctx("read turn statistics")?;
        for row in rows {
            let (turn, program, n) = row.ctx("read turn statistics")?;
            if let Some(s) = out.get_mut(&turn) {
                s.programs.insert(program, n as u64);
            }
        }
        Ok(out)
    }
}

impl TurnStatistics for Meta {
    fn set_turn_stats(&self, turn: i64, stats: &TurnStats) -> MetaResult<()> {
        self.transaction(|m| {
            m.conn
                .prepare_cached(
                    "INSERT INTO turn_summaries(turn, files_added, files_modified, files_deleted,
                         lines_added, lines_removed) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT(turn) DO UPDATE SET files_added = excluded.files_added,
                         files_modified = excluded.files_modified, files_deleted = excluded.files_deleted,
                         lines_added = excluded.lines_added, lines_removed = excluded.lines_removed",
                )
                .ctx("prepare")?
                .execute(params![
                    turn,
                    stats.files_added as i64,
                    stats.files_modified as i64,
                    stats.files_deleted as i64,
                    stats.lines_added as i64,
                    stats.lines_removed as i64
                ])
                .ctx("store turn statistics")?;
            m.exec("DELETE FROM turn_programs WHERE turn = ?1", [turn]).ctx("store turn statistics")?;
            let mut insert = m
                .conn
                .prepare_cached("INSERT INTO turn_programs(turn, program, records) VALUES (?1, ?2, ?3)")
                .ctx("prepare")?;
            for (program, n) in &stats.programs {
                insert.execute(params![turn, program, *n as i64]).ctx("store turn statistics")?;
            }
            Ok(())
        })
    }

    fn turn_stats(&self) -> MetaResult<HashMap<i64, TurnStats>> {
        self.stored_turn_stats(None)
    }

    fn turn_stats_of(&self, turn: i64) -> MetaResult<Option<TurnStats>> {
        Ok(self.stored_turn_stats(Some(turn))?.remove(&turn))
    }

    fn set_turn_paths(&self, turn: i64, paths: Option<&[u8]>) -> MetaResult<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO turn_summaries(turn, paths) VALUES (?1, ?2)
                 ON CONFLICT(turn) DO UPDATE SET paths = excluded.paths",
            )
            .ctx("prepare")?
            .execute(params![turn, paths])
            .ctx("record where a turn's changes are")?;
        Ok(())
    }

    fn turn_paths(&self, turn: i64) -> MetaResult<Option<Vec<u8>>> {
        self.conn
            .prepare_cached("SELECT paths FROM turn_summaries WHERE turn = ?1")
            .ctx("prepare")?
            .query_row([turn], |r| r.get::<_, Option<Vec<u8>>>(0))
            .optional()
            .map(Option::flatten)
            .ctx("read where a turn's changes are")
    }
}

/// The model of the turns' statistics: ordered maps, each query the plain
/// reading of its contract (what the SQLite implementation must agree
/// with, [`kit::agrees`]).
#[derive(Default)]
pub struct MemoryTurnStatistics {
    inner: Mutex<Model>,
}

#[derive(Default)]
struct Model {
    stats: BTreeMap<i64, TurnStats>,
    paths: BTreeMap<i64, Vec<u8>>,
}

impl MemoryTurnStatistics {
    pub fn new() -> MemoryTurnStatistics {
        MemoryTurnStatistics::default()
    }

    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        crate::poison::lock(&self.inner, "the turn statistics model")
    }
}

impl TurnStatistics for MemoryTurnStatistics {
    fn set_turn_stats(&self, turn: i64, stats: &TurnStats) -> MetaResult<()> {
        self.model().stats.insert(turn, stats.clone());
        Ok(())
    }

    fn turn_stats(&self) -> MetaResult<HashMap<i64, TurnStats>> {
        Ok(self.model().stats.iter().map(|(t, s)| (*t, s.clone())).collect())
    }

    fn turn_stats_of(&self, turn: i64) -> MetaResult<Option<TurnStats>> {
        Ok(self.model().stats.get(&turn).cloned())
    }

    fn set_turn_paths(&self, turn: i64, paths: Option<&[u8]>) -> MetaResult<()> {
        let mut m = self.model();
        match paths {
            Some(p) => m.paths.insert(turn, p.to_vec()),
            None => m.paths.remove(&turn),
        };
        Ok(())
    }

    fn turn_paths(&self, turn: i64) -> MetaResult<Option<Vec<u8>>> {
        Ok(self.model().paths.get(&turn).cloned())
    }
}

/// The suite every implementation of [`TurnStatistics`] passes:
/// [`kit::run_all`] with fixed answers, and [`kit::agrees`], which applies
/// one seeded random sequence to two implementations and compares every
/// query.
#[cfg(any(test, feature = "test-kit"))]
pub mod kit {
    use super::*;

    fn stats(n: u64, programs: &[(&str, u64)]) -> TurnStats {
        TurnStats {
            files_added: n,
            files_modified: n + 1,
            files_deleted: n + 2,
            lines_added: n * 10,
            lines_removed: n * 10 + 1,
            programs: programs.iter().map(|(p, k)| (p.to_string(), *k)).collect(),
        }
    }

    /// Fixed statistics and paths, and the answers every implementation
    /// must give, on an empty store.
    pub fn run_all(r: &dyn TurnStatistics) {
        assert!(r.turn_stats().expect("all").is_empty());
        assert_eq!(r.turn_paths(3).expect("paths"), None);
        r.set_turn_paths(4, Some(b"a\0b/c\0")).expect("paths");
        r.set_turn_paths(5, None).expect("whole tree");
        assert_eq!(r.turn_paths(4).expect("paths").as_deref(), Some(&b"a\0b/c\0"[..]));
        assert_eq!(r.turn_paths(5).expect("paths"), None, "a whole-tree turn");
        assert!(r.turn_stats().expect("all").is_empty(), "paths alone are not statistics");
        assert_eq!(r.turn_stats_of(4).expect("one"), None);
        let four = stats(1, &[("cargo", 3), ("sh", 1)]);
        r.set_turn_stats(4, &four).expect("store");
        r.set_turn_stats(4, &four).expect("store again");
        r.set_turn_stats(6, &stats(2, &[])).expect("store");
        assert_eq!(r.turn_stats_of(4).expect("one"), Some(four.clone()));
        assert_eq!(r.turn_paths(4).expect("paths").as_deref(), Some(&b"a\0b/c\0"[..]), "the paths stay");
        let replaced = stats(7, &[("sh", 2)]);
        r.set_turn_stats(4, &replaced).expect("replace");
        let all = r.turn_stats().expect("all");
        assert_eq!(all.len(), 2);
        assert_eq!(all.get(&4), Some(&replaced), "the programs are replaced too");
        assert_eq!(all.get(&6), Some(&stats(2, &[])));
        r.set_turn_paths(4, None).expect("whole tree");
        assert_eq!(r.turn_paths(4).expect("paths"), None);
        assert_eq!(r.turn_stats_of(4).expect("one"), Some(replaced), "the statistics stay");
    }

    /// One seeded random sequence of statistics and paths set (a few
    /// turns, so they are replaced), applied to `a` and `b` (both empty),
    /// then every query compared.
    pub fn agrees(a: &dyn TurnStatistics, b: &dyn TurnStatistics, seed: u64) {
        let mut next = crate::meta::kit_random(seed);
        let programs = ["cc", "sh", "ld"];
        for _ in 0..60 {
            let turn = next(6) as i64;
            if next(2) == 0 {
                let mut chosen: Vec<(&str, u64)> = Vec::new();
                for p in programs {
                    if next(2) == 0 {
                        chosen.push((p, next(50)));
                    }
                }
                let s = stats(next(100), &chosen);
                a.set_turn_stats(turn, &s).expect("store");
                b.set_turn_stats(turn, &s).expect("store");
            } else {
                let paths = (next(3) > 0).then(|| vec![b'a' + next(26) as u8, 0]);
                a.set_turn_paths(turn, paths.as_deref()).expect("paths");
                b.set_turn_paths(turn, paths.as_deref()).expect("paths");
            }
        }
        assert_eq!(a.turn_stats().expect("all"), b.turn_stats().expect("all"), "seed {seed}");
        for turn in -1..7 {
            let q = |r: &dyn TurnStatistics| (r.turn_stats_of(turn).expect("q"), r.turn_paths(turn).expect("q"));
            assert_eq!(q(a), q(b), "seed {seed}: turn {turn}");
        }
    }
}
