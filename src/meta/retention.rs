//! The tables of a bounded history (schema 9): named snapshots, forgotten
//! checkpoints, and the collection that merges a checkpoint's turn into the
//! kept one before it and frees what no kept checkpoint needs.
//!
//! Why merging keeps every kept view exact: the tree at checkpoint K is the
//! live tree patched with the earliest record at or after turn K for each
//! key. Forgetting F, whose previous kept checkpoint is P, moves F's
//! records into turn P where P has none for the same key (the key did not
//! change during turn P, so its state at F was its state at P) and drops
//! the others (P's earlier record wins for every view at or before P, and
//! views at or after the next kept checkpoint never read turn P or F). An
//! object record of P without content borrows F's content: nothing
//! rewrote the file during turn P, or P's record would carry content.
//!
//! What a collection keeps about itself is one area of the metadata:
//! [`Retention`] is its interface (the `retention.*` settings in `state`,
//! `forgotten`, `gc_chunks`, `gc_attic`; docs/format.md), [`Meta`]
//! implements it over SQLite, [`MemoryRetention`] is the in-memory model,
//! and [`kit`] is the one suite both pass. The journal hands it out
//! through `Journal::with_retention`. The merge itself (`forget_begin`,
//! `forget_rows`, `drop_unreachable`, `plan_rows`) reads and writes the
//! records, objects and checkpoints together, and stays on [`Meta`].

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Mutex;

use rusqlite::{OptionalExtension, params};

use super::{Checkpoint, Ctx, Meta, MetaError, MetaResult, ObjectId, Objects};
use crate::store::ChunkId;

/// A checkpoint that was forgotten: what references to it are told.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Forgotten {
    pub checkpoint: i64,
    pub message_id: Option<String>,
    pub label: Option<String>,
    /// The kept checkpoint whose turn took its changes (None: it was the
    /// oldest, its records were dropped).
    pub merged_into: Option<i64>,
    /// `forget` or `retention`.
    pub by: String,
    /// Unix milliseconds.
    pub at: i64,
}

/// What forgetting checkpoints released, for the caller to free.
#[derive(Clone, Debug, Default)]
pub struct Merged {
    /// Chunk lists of the records dropped (their chunks may still be used
    /// by other records: see [`Meta::unreferenced`]).
    pub dropped_lists: Vec<Vec<u8>>,
    /// Records dropped (entry and object records).
    pub dropped_records: u64,
    /// Records moved into the previous kept turn.
    pub moved_records: u64,
    /// Objects a dropped record named (entry targets, recorded objects):
    /// the ones no record names any more may be removable from the attic.
    pub dropped_objects: Vec<ObjectId>,
}

/// A forget under way ([`Meta::forget_begin`]): checkpoint `checkpoint` is
/// gone from `checkpoints`, and its turn's records are being merged into
/// turn `into` (None: dropped) a batch at a time.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Forgetting {
    pub checkpoint: i64,
    pub into: Option<i64>,
}

/// Prefix of the `state` keys of the area's settings ([`Retention::setting`]).
const SETTINGS: &str = "retention.";

/// The setting of the forget under way (its intent: the next open ends
/// it): `retention.forgetting` in `state`.
const FORGETTING: &str = "forgetting";

/// What [`Meta::plan_rows`] read.
#[derive(Clone, Debug, Default)]
pub struct PlanRows {
    /// Every checkpoint read, by number: the candidates, the newest, the
    /// rewinds and the checkpoints before each.
    pub rows: Vec<Checkpoint>,
    /// The candidates (older than the horizon and not among the newest of
    /// the current branch, or the ones asked about), the newest left out.
    pub candidates: Vec<i64>,
    /// Of `rows`, those that mark outside changes.
    pub tainted: HashSet<i64>,
    /// SQLite virtual machine steps the reads took (what they cost).
    pub steps: u64,
}

impl Merged {
    /// Adds what the next batch of the same forget released.
    pub fn absorb(&mut self, m: Merged) {
        self.dropped_lists.extend(m.dropped_lists);
        self.dropped_records += m.dropped_records;
        self.moved_records += m.moved_records;
        self.dropped_objects.extend(m.dropped_objects);
    }
}

/// What a collection keeps about itself (see the module's comment): the
/// retention settings, the checkpoints forgotten, the forget under way and
/// the intents of a committed collection (chunks to free, attic entries to
/// remove). The merge of a forgotten turn, which reads and writes the
/// records, objects and checkpoints together, is [`Meta`]'s.
pub trait Retention {
    /// A retention setting (`retention.<name>` in `state`: the policy's
    /// `keep_count`, `keep_days`, `keep_rewinds`, `auto`, the last
    /// background run's `last_auto`, and the forget under way).
    fn setting(&self, name: &str) -> MetaResult<Option<String>>;

    /// Stores these settings, together (in the caller's transaction if
    /// one is open).
    fn set_settings(&self, settings: &[(&str, &str)]) -> MetaResult<()>;

    /// Notes that a checkpoint was forgotten (replacing an earlier note of
    /// the same checkpoint).
    fn note_forgotten(&self, f: &Forgotten) -> MetaResult<()>;

    /// A forgotten checkpoint by number or message id (the newest such).
    fn forgotten(&self, reference: &str) -> MetaResult<Option<Forgotten>>;

    /// The newest checkpoint `by` forgot and when (`reset`: everything
    /// up to it went, names included).
    fn last_forgotten_by(&self, by: &str) -> MetaResult<Option<(i64, i64)>>;

    /// Removes a setting.
    fn remove_setting(&self, name: &str) -> MetaResult<()>;

    /// The forget under way, if one is ([`Meta::forget_begin`]).
    fn forgetting(&self) -> MetaResult<Option<Forgetting>> {
        match self.setting(FORGETTING)? {
            None => Ok(None),
            Some(v) => {
                serde_json::from_str(&v).map(Some).map_err(|_| MetaError::Malformed { what: "forget under way" })
            }
        }
    }

    /// Notes the forget under way (None: it ended).
    fn set_forgetting(&self, g: Option<&Forgetting>) -> MetaResult<()> {
        match g {
            Some(g) => self.set_settings(&[(FORGETTING, &serde_json::to_string(g).unwrap_or_default())]),
            None => self.remove_setting(FORGETTING),
        }
    }

    /// Notes chunks a committed collection must free (its intent).
    fn add_gc_chunks(&self, ids: &HashSet<ChunkId>) -> MetaResult<()>;

    /// Chunks a committed collection has still to free (in no order).
    fn gc_chunks(&self) -> MetaResult<Vec<ChunkId>>;

    /// These chunks of `gc_chunks` were freed.
    fn remove_gc_chunks(&self, ids: &[ChunkId]) -> MetaResult<()>;

    /// Notes an attic entry a committed collection must remove.
    fn note_gc_attic(&self, id: ObjectId) -> MetaResult<()>;

    /// Attic entries a committed collection has still to remove (in no
    /// order).
    fn gc_attic(&self) -> MetaResult<Vec<ObjectId>>;

    /// The attic entries of `gc_attic` were removed.
    fn clear_gc_attic(&self) -> MetaResult<()>;

    /// The chunks were freed and the attic entries removed.
    fn clear_gc_chunks(&self) -> MetaResult<()>;
}

impl Retention for Meta {
    fn setting(&self, name: &str) -> MetaResult<Option<String>> {
        self.get_state(&format!("{SETTINGS}{name}"))
    }

    fn set_settings(&self, settings: &[(&str, &str)]) -> MetaResult<()> {
        let write = |m: &Meta| -> MetaResult<()> {
            for (name, value) in settings {
                m.set_state(&format!("{SETTINGS}{name}"), value)?;
            }
            Ok(())
        };
        // In the caller's transaction (a forget's), or in one of its own.
        match self.conn.is_autocommit() {
            true => self.transaction(write),
            false => write(self),
        }
    }

    fn note_forgotten(&self, f: &Forgotten) -> MetaResult<()> {
        self.conn
            .execute(
                "INSERT OR REPLACE INTO forgotten(checkpoint, message_id, label, merged_into, by, at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![f.checkpoint, f.message_id, f.label, f.merged_into, f.by, f.at],
            )
            .ctx("note a forgotten checkpoint")?;
        Ok(())
    }

    fn forgotten(&self, reference: &str) -> MetaResult<Option<Forgotten>> {
        let number = reference.parse::<i64>().ok();
        self.conn
            .query_row(
                "SELECT checkpoint, message_id, label, merged_into, by, at FROM forgotten \
                 WHERE checkpoint = ?1 OR message_id = ?2 ORDER BY checkpoint DESC LIMIT 1",
                params![number, reference],
                |r| {
                    Ok(Forgotten {
                        checkpoint: r.get(0)?,
                        message_id: r.get(1)?,
                        label: r.get(2)?,
                        merged_into: r.get(3)?,
                        by: r.get(4)?,
                        at: r.get(5)?,
                    })
                },
            )
            .optional()
            .ctx("read forgotten checkpoints")
    }

    fn last_forgotten_by(&self, by: &str) -> MetaResult<Option<(i64, i64)>> {
        self.conn
            .query_row(
                "SELECT checkpoint, at FROM forgotten WHERE by = ?1 ORDER BY checkpoint DESC LIMIT 1",
                [by],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .ctx("read forgotten checkpoints")
    }

    fn remove_setting(&self, name: &str) -> MetaResult<()> {
        self.conn.execute("DELETE FROM state WHERE key = ?1", [format!("{SETTINGS}{name}")]).ctx("remove a setting")?;
        Ok(())
    }

    fn add_gc_chunks(&self, ids: &HashSet<ChunkId>) -> MetaResult<()> {
        let mut stmt = self.conn.prepare_cached("INSERT OR IGNORE INTO gc_chunks(chunk) VALUES (?1)").ctx("prepare")?;
        for id in ids {
            stmt.execute([id.as_bytes().as_slice()]).ctx("note a chunk to free")?;
        }
        Ok(())
    }

    fn gc_chunks(&self) -> MetaResult<Vec<ChunkId>> {
        self.chunk_ids("SELECT chunk FROM gc_chunks", [], "chunk id in gc_chunks")
    }

    fn remove_gc_chunks(&self, ids: &[ChunkId]) -> MetaResult<()> {
        let mut stmt = self.conn.prepare_cached("DELETE FROM gc_chunks WHERE chunk = ?1").ctx("prepare")?;
        for id in ids {
            stmt.execute([id.as_bytes().as_slice()]).ctx("clear a chunk to free")?;
        }
        Ok(())
    }

    fn note_gc_attic(&self, id: ObjectId) -> MetaResult<()> {
        self.conn.execute("INSERT OR IGNORE INTO gc_attic(object) VALUES (?1)", [id.0]).ctx("note attic removal")?;
        Ok(())
    }

    fn gc_attic(&self) -> MetaResult<Vec<ObjectId>> {
        let mut stmt = self.conn.prepare("SELECT object FROM gc_attic").ctx("prepare")?;
        let rows = stmt.query_map([], |r| r.get(0).map(ObjectId)).ctx("list attic removals")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("list attic removals")
    }

    fn clear_gc_attic(&self) -> MetaResult<()> {
        self.conn.execute("DELETE FROM gc_attic", []).ctx("clear attic removals")?;
        Ok(())
    }

    fn clear_gc_chunks(&self) -> MetaResult<()> {
        self.conn.execute("DELETE FROM gc_chunks", []).ctx("clear chunks to free")?;
        self.clear_gc_attic()
    }
}

/// The model of what a collection keeps about itself: ordered maps and
/// sets, each query the plain reading of its contract (what the SQLite
/// implementation must agree with, [`kit::agrees`]).
#[derive(Default)]
pub struct MemoryRetention {
    inner: Mutex<Model>,
}

#[derive(Default)]
struct Model {
    settings: BTreeMap<String, String>,
    forgotten: BTreeMap<i64, Forgotten>,
    gc_chunks: BTreeSet<ChunkId>,
    gc_attic: BTreeSet<ObjectId>,
}

impl MemoryRetention {
    pub fn new() -> MemoryRetention {
        MemoryRetention::default()
    }

    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        crate::poison::lock(&self.inner, "the retention model")
    }
}

impl Retention for MemoryRetention {
    fn setting(&self, name: &str) -> MetaResult<Option<String>> {
        Ok(self.model().settings.get(name).cloned())
    }

    fn set_settings(&self, settings: &[(&str, &str)]) -> MetaResult<()> {
        let mut m = self.model();
        for (name, value) in settings {
            m.settings.insert(name.to_string(), value.to_string());
        }
        Ok(())
    }

    fn note_forgotten(&self, f: &Forgotten) -> MetaResult<()> {
        self.model().forgotten.insert(f.checkpoint, f.clone());
        Ok(())
    }

    fn forgotten(&self, reference: &str) -> MetaResult<Option<Forgotten>> {
        let number = reference.parse::<i64>().ok();
        Ok(self
            .model()
            .forgotten
            .values()
            .rev()
            .find(|f| Some(f.checkpoint) == number || f.message_id.as_deref() == Some(reference))
            .cloned())
    }

    fn last_forgotten_by(&self, by: &str) -> MetaResult<Option<(i64, i64)>> {
        Ok(self.model().forgotten.values().rev().find(|f| f.by == by).map(|f| (f.checkpoint, f.at)))
    }

    fn remove_setting(&self, name: &str) -> MetaResult<()> {
        self.model().settings.remove(name);
        Ok(())
    }

    fn add_gc_chunks(&self, ids: &HashSet<ChunkId>) -> MetaResult<()> {
        self.model().gc_chunks.extend(ids.iter().copied());
        Ok(())
    }

    fn gc_chunks(&self) -> MetaResult<Vec<ChunkId>> {
        Ok(self.model().gc_chunks.iter().copied().collect())
    }

    fn remove_gc_chunks(&self, ids: &[ChunkId]) -> MetaResult<()> {
        let mut m = self.model();
        for id in ids {
            m.gc_chunks.remove(id);
        }
        Ok(())
    }

    fn note_gc_attic(&self, id: ObjectId) -> MetaResult<()> {
        self.model().gc_attic.insert(id);
        Ok(())
    }

    fn gc_attic(&self) -> MetaResult<Vec<ObjectId>> {
        Ok(self.model().gc_attic.iter().copied().collect())
    }

    fn clear_gc_attic(&self) -> MetaResult<()> {
        self.model().gc_attic.clear();
        Ok(())
    }

    fn clear_gc_chunks(&self) -> MetaResult<()> {
        let mut m = self.model();
        m.gc_chunks.clear();
        m.gc_attic.clear();
        Ok(())
    }
}

/// The suite every implementation of [`Retention`] passes:
/// [`kit::run_all`] with fixed answers, and [`kit::agrees`], which applies
/// one seeded random sequence to two implementations and compares every
/// query.
#[cfg(any(test, feature = "test-kit"))]
pub mod kit {
    use super::*;

    fn forgotten(checkpoint: i64, message: Option<&str>, by: &str, at: i64) -> Forgotten {
        Forgotten {
            checkpoint,
            message_id: message.map(String::from),
            label: (checkpoint % 2 == 0).then(|| format!("label {checkpoint}")),
            merged_into: (checkpoint > 0).then(|| checkpoint - 1),
            by: by.into(),
            at,
        }
    }

    fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
        v.sort();
        v
    }

    /// Fixed settings, forgotten checkpoints, forgets and intents, and the
    /// answers every implementation must give, on an empty store.
    pub fn run_all(r: &dyn Retention) {
        assert_eq!(r.setting("keep_count").expect("setting"), None);
        r.set_settings(&[("keep_count", "5"), ("auto", "off")]).expect("set");
        r.set_settings(&[("keep_count", "7")]).expect("set again");
        assert_eq!(r.setting("keep_count").expect("setting").as_deref(), Some("7"));
        assert_eq!(r.setting("auto").expect("setting").as_deref(), Some("off"), "the others stay");
        r.set_settings(&[("last_auto", "{}")]).expect("set");
        r.remove_setting("last_auto").expect("remove");
        r.remove_setting("never set").expect("remove");
        assert_eq!(r.setting("last_auto").expect("setting"), None);

        assert_eq!(r.forgotten("3").expect("forgotten"), None);
        assert_eq!(r.last_forgotten_by("reset").expect("by"), None);
        r.note_forgotten(&forgotten(3, Some("m3"), "forget", 30)).expect("note");
        r.note_forgotten(&forgotten(5, Some("m3"), "retention", 50)).expect("note");
        r.note_forgotten(&forgotten(4, None, "reset", 40)).expect("note");
        assert_eq!(r.forgotten("3").expect("forgotten"), Some(forgotten(3, Some("m3"), "forget", 30)));
        assert_eq!(
            r.forgotten("m3").expect("forgotten").map(|f| f.checkpoint),
            Some(5),
            "the newest with that message id"
        );
        assert_eq!(r.forgotten("4").expect("forgotten"), Some(forgotten(4, None, "reset", 40)));
        assert_eq!(r.forgotten("m4").expect("forgotten"), None);
        assert_eq!(r.last_forgotten_by("reset").expect("by"), Some((4, 40)));
        r.note_forgotten(&forgotten(4, Some("m4"), "forget", 41)).expect("replace");
        assert_eq!(r.last_forgotten_by("reset").expect("by"), None, "replaced");
        assert_eq!(r.last_forgotten_by("forget").expect("by"), Some((4, 41)));

        assert_eq!(r.forgetting().expect("forgetting"), None);
        let g = Forgetting { checkpoint: 6, into: Some(5) };
        r.set_forgetting(Some(&g)).expect("begin");
        assert_eq!(r.forgetting().expect("forgetting"), Some(g));
        r.set_forgetting(Some(&Forgetting { checkpoint: 2, into: None })).expect("another");
        assert_eq!(r.forgetting().expect("forgetting"), Some(Forgetting { checkpoint: 2, into: None }));
        r.set_forgetting(None).expect("end");
        assert_eq!(r.forgetting().expect("forgetting"), None);
        r.set_settings(&[(FORGETTING, "not a forget")]).expect("set");
        assert!(r.forgetting().is_err(), "a malformed forget under way is an error");
        r.set_forgetting(None).expect("end");

        let (a, b, c) = (ChunkId::of(b"a"), ChunkId::of(b"b"), ChunkId::of(b"c"));
        assert!(r.gc_chunks().expect("chunks").is_empty());
        r.add_gc_chunks(&[a, b].into_iter().collect()).expect("add");
        r.add_gc_chunks(&[b, c].into_iter().collect()).expect("add again");
        assert_eq!(sorted(r.gc_chunks().expect("chunks")), sorted(vec![a, b, c]));
        r.remove_gc_chunks(&[b, ChunkId::of(b"never")]).expect("remove");
        assert_eq!(sorted(r.gc_chunks().expect("chunks")), sorted(vec![a, c]));
        r.note_gc_attic(ObjectId(9)).expect("attic");
        r.note_gc_attic(ObjectId(9)).expect("attic again");
        r.note_gc_attic(ObjectId(2)).expect("attic");
        assert_eq!(sorted(r.gc_attic().expect("attic")), vec![ObjectId(2), ObjectId(9)]);
        r.clear_gc_attic().expect("clear");
        assert!(r.gc_attic().expect("attic").is_empty());
        assert_eq!(r.gc_chunks().expect("chunks").len(), 2, "clearing the attic leaves the chunks");
        r.note_gc_attic(ObjectId(3)).expect("attic");
        r.clear_gc_chunks().expect("clear");
        assert!(r.gc_chunks().expect("chunks").is_empty() && r.gc_attic().expect("attic").is_empty());
        assert_eq!(r.setting("keep_count").expect("setting").as_deref(), Some("7"), "the settings stay");
    }

    /// One seeded random sequence of settings, forgotten checkpoints (a
    /// few numbers and message ids, so they are replaced and shared),
    /// forgets and intents, applied to `a` and `b` (both empty), then
    /// every query compared.
    pub fn agrees(a: &dyn Retention, b: &dyn Retention, seed: u64) {
        let mut next = crate::meta::kit_random(seed);
        let names = ["keep_count", "keep_days", "auto", "last_auto"];
        let bys = ["forget", "retention", "reset"];
        let chunk = |n: u64| ChunkId::of(&n.to_le_bytes());
        for _ in 0..80 {
            let both = |f: &dyn Fn(&dyn Retention)| {
                f(a);
                f(b);
            };
            match next(8) {
                0 => {
                    let (name, value) = (names[next(4) as usize], next(10).to_string());
                    match value.as_str() {
                        "0" => both(&|r| r.remove_setting(name).expect("remove")),
                        _ => both(&|r| r.set_settings(&[(name, &value)]).expect("set")),
                    }
                }
                1 | 2 => {
                    let message = format!("m{:06}", next(4));
                    let f = forgotten(next(8) as i64, (next(3) > 0).then_some(&message), bys[next(3) as usize], 1);
                    let f = Forgotten { at: next(1000) as i64, ..f };
                    both(&|r| r.note_forgotten(&f).expect("note"));
                }
                3 => {
                    let g = (next(3) > 0).then(|| Forgetting {
                        checkpoint: next(8) as i64,
                        into: (next(2) == 0).then(|| next(8) as i64),
                    });
                    both(&|r| r.set_forgetting(g.as_ref()).expect("forgetting"));
                }
                4 => {
                    let ids: HashSet<ChunkId> = (0..next(4)).map(|_| chunk(next(10))).collect();
                    both(&|r| r.add_gc_chunks(&ids).expect("add"));
                }
                5 => {
                    let ids: Vec<ChunkId> = (0..next(4)).map(|_| chunk(next(10))).collect();
                    both(&|r| r.remove_gc_chunks(&ids).expect("remove"));
                }
                6 => {
                    let id = ObjectId(next(10) as i64);
                    both(&|r| r.note_gc_attic(id).expect("attic"));
                }
                _ => match next(6) {
                    0 => both(&|r| r.clear_gc_chunks().expect("clear")),
                    1 => both(&|r| r.clear_gc_attic().expect("clear")),
                    _ => {}
                },
            }
        }
        let q = |r: &dyn Retention| {
            (
                names.map(|n| r.setting(n).expect("setting")),
                r.forgetting().expect("forgetting"),
                sorted(r.gc_chunks().expect("chunks")),
                sorted(r.gc_attic().expect("attic")),
                bys.map(|by| r.last_forgotten_by(by).expect("by")),
            )
        };
        assert_eq!(q(a), q(b), "seed {seed}");
        for reference in (-1..9).map(|n| n.to_string()).chain((0..5).map(|n| format!("m{n:06}"))) {
            assert_eq!(
                a.forgotten(&reference).expect("forgotten"),
                b.forgotten(&reference).expect("forgotten"),
                "seed {seed}: {reference}"
            );
        }
    }
}

impl Meta {
    /// Turns holding a mark of objects changed outside the mount.
    pub fn tainted_turns(&self) -> MetaResult<HashSet<i64>> {
        let mut stmt = self.conn.prepare("SELECT DISTINCT turn FROM tainted").ctx("prepare")?;
        let rows = stmt.query_map([], |r| r.get(0)).ctx("list marks")?;
        rows.collect::<rusqlite::Result<HashSet<i64>>>().ctx("list marks")
    }

    /// What retention planning reads (`Journal::plan_retention`): the
    /// checkpoints older than `horizon` that are not among the
    /// `keep_count` newest of the current branch (or, with `only`, those
    /// asked about), the newest, and the `keep_rewinds` newest rewinds (at
    /// least one: the last rewound-to) with the three checkpoints before
    /// each. Each read is indexed: the cost is what can go, the policy's
    /// count (the branch's newest, walked in one recursive query) and the
    /// rewinds, not the history; with nothing older than `horizon`, a few
    /// lookups.
    pub fn plan_rows(
        &self,
        horizon: i64,
        keep_count: u64,
        keep_rewinds: u64,
        only: Option<&[i64]>,
    ) -> MetaResult<PlanRows> {
        let mut out = PlanRows::default();
        let newest = self.plan_query("", "c.id = (SELECT MAX(id) FROM checkpoints)", [], &mut out)?;
        let Some(&newest) = newest.first() else { return Ok(out) };
        out.candidates = match only {
            Some(ids) => {
                let mut found = Vec::new();
                for &id in ids {
                    found.extend(self.plan_query("", "c.id = ?1", [id], &mut out)?);
                }
                found
            }
            None => {
                let mut stmt = self
                    .conn
                    .prepare_cached(
                        "SELECT EXISTS (SELECT 1 FROM checkpoints INDEXED BY checkpoints_by_time \
                         WHERE created_at < ?1 AND id < ?2)",
                    )
                    .ctx("prepare")?;
                stmt.reset_status(rusqlite::StatementStatus::VmStep);
                let any: bool = stmt.query_row([horizon, newest], |r| r.get(0)).ctx("read checkpoints")?;
                out.steps += stmt.get_status(rusqlite::StatementStatus::VmStep) as u64;
                if !any {
                    return Ok(out);
                }
                let count = keep_count.min(i64::MAX as u64) as i64;
                // `n` counts the checkpoints with changes on the way (see
                // `CHANGED`): a run of empty turns, which anyone allowed to
                // seal can make as often as they like, pushes nothing out.
                self.plan_query(
                    &format!(
                        "WITH RECURSIVE branch(id, n) AS (SELECT ?2, 1 WHERE ?3 > 0 UNION ALL \
                           SELECT c.parent, b.n + ({}) FROM branch b JOIN checkpoints c ON c.id = b.id \
                           JOIN checkpoints p ON p.id = c.parent \
                           WHERE b.n < ?3) ",
                        changed("p")
                    ),
                    "c.id IN (SELECT id FROM checkpoints INDEXED BY checkpoints_by_time \
                       WHERE created_at < ?1 AND id < ?2 AND id NOT IN (SELECT id FROM branch))",
                    params![horizon, newest, count],
                    &mut out,
                )?
            }
        };
        out.candidates.retain(|&c| c != newest);
        if out.candidates.is_empty() {
            return Ok(out);
        }
        let rewinds = self.plan_query(
            "",
            "c.id IN (SELECT id FROM checkpoints INDEXED BY checkpoints_rewinds WHERE reason = 'rewind' \
             ORDER BY id DESC LIMIT ?1)",
            [keep_rewinds.clamp(1, i64::MAX as u64) as i64],
            &mut out,
        )?;
        for r in rewinds {
            self.plan_query(
                "",
                "c.id IN (SELECT id FROM checkpoints WHERE id < ?1 ORDER BY id DESC LIMIT 3)",
                [r],
                &mut out,
            )?;
        }
        out.rows.sort_unstable_by_key(|c| c.checkpoint);
        out.rows.dedup_by_key(|c| c.checkpoint);
        Ok(out)
    }

    /// The checkpoints whose turn changed nothing, among `ids`: a turn (or
    /// quiet period) checkpoint with no record in the turn that ended at it.
    pub fn empty_checkpoints(&self, ids: &[i64]) -> MetaResult<std::collections::HashSet<i64>> {
        let sql = format!("SELECT NOT ({}) FROM checkpoints p WHERE p.id = ?1", changed("p"));
        let mut stmt = self.conn.prepare_cached(&sql).ctx("prepare")?;
        let mut out = std::collections::HashSet::new();
        for &id in ids {
            let empty: Option<bool> = stmt.query_row([id], |r| r.get(0)).optional().ctx("read checkpoints")?;
            if empty == Some(true) {
                out.insert(id);
            }
        }
        Ok(out)
    }

    /// The numbers of the checkpoints `condition` selects (after `with`, a
    /// `WITH` clause or nothing); each is added to `out` with whether it
    /// marks outside changes, and the SQLite steps it took.
    fn plan_query(
        &self,
        with: &str,
        condition: &str,
        p: impl rusqlite::Params,
        out: &mut PlanRows,
    ) -> MetaResult<Vec<i64>> {
        let sql = format!(
            "{with}SELECT {}, EXISTS (SELECT 1 FROM tainted t WHERE t.turn = c.id) {} WHERE {condition}",
            super::CHECKPOINT_COLUMNS,
            super::CHECKPOINT_FROM
        );
        let mut stmt = self.conn.prepare_cached(&sql).ctx("prepare")?;
        stmt.reset_status(rusqlite::StatementStatus::VmStep);
        let rows = stmt
            .query_map(p, |r| Ok((super::checkpoint_from_row(r)?, r.get(super::CHECKPOINT_COLUMN_COUNT)?)))
            .ctx("read checkpoints")?;
        let mut found = Vec::new();
        for row in rows {
            let (c, tainted): (Checkpoint, bool) = row.ctx("read checkpoints")?;
            if tainted {
                out.tainted.insert(c.checkpoint);
            }
            found.push(c.checkpoint);
            out.rows.push(c);
        }
        out.steps += stmt.get_status(rusqlite::StatementStatus::VmStep) as u64;
        Ok(found)
    }

    /// Forgets checkpoint `f` whole: [`Meta::forget_begin`] then every
    /// batch of [`Meta::forget_rows`], in the caller's transaction (`reset`,
    /// dry runs; a collection that writes runs the batches apart).
    pub fn forget_checkpoint(&self, f: i64, by: &str, at: i64) -> MetaResult<Merged> {
        let g = self.forget_begin(f, by, at)?;
        let mut merged = Merged::default();
        loop {
            let (batch, done) = self.forget_rows(&g, usize::MAX)?;
            merged.absorb(batch);
            if done {
                return Ok(merged);
            }
        }
    }

    /// Starts forgetting checkpoint `f` (see the module comment): it leaves
    /// `checkpoints` for `forgotten` (references are told it was forgotten
    /// `by`), its children hang from its parent, its program counts and
    /// objects' birth turns go to the previous kept checkpoint P, and the
    /// forget is noted (`retention.forgetting`) so that the next open
    /// finishes it. Its records stay in turn F until [`Meta::forget_rows`]
    /// merges them: meanwhile every view of a kept checkpoint reads what it
    /// read before (a view at P reads P's record of a key or else F's, as
    /// before; later views never read turns P or F). The caller runs it
    /// inside a transaction and refuses the newest checkpoint.
    pub fn forget_begin(&self, f: i64, by: &str, at: i64) -> MetaResult<Forgetting> {
        let c = &self.conn;
        if self.forgetting()?.is_some() {
            return Err(MetaError::Malformed { what: "checkpoint to forget (another forget is not finished)" });
        }
        let row: Option<(Option<i64>, Option<String>, Option<String>)> = c
            .query_row("SELECT parent, message_id, label FROM checkpoints WHERE id = ?1", [f], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()
            .ctx("read checkpoint")?;
        let Some((parent, message_id, label)) = row else {
            return Err(MetaError::Malformed { what: "checkpoint to forget (it does not exist)" });
        };
        let newer: Option<i64> =
            c.query_row("SELECT MIN(id) FROM checkpoints WHERE id > ?1", [f], |r| r.get(0)).ctx("read checkpoints")?;
        let Some(newer) = newer else {
            return Err(MetaError::Malformed { what: "checkpoint to forget (it is the newest)" });
        };
        let p: Option<i64> =
            c.query_row("SELECT MAX(id) FROM checkpoints WHERE id < ?1", [f], |r| r.get(0)).ctx("read checkpoints")?;
        if let Some(p) = p {
            c.execute(
                "INSERT INTO turn_programs(turn, program, records) \
                 SELECT ?2, program, records FROM turn_programs WHERE turn = ?1 AND true \
                 ON CONFLICT(turn, program) DO UPDATE SET records = records + excluded.records",
                params![f, p],
            )
            .ctx("merge program counts")?;
            c.execute("UPDATE objects SET born_turn = ?2 WHERE born_turn = ?1", params![f, p])
                .ctx("move birth turns")?;
        }
        c.execute("DELETE FROM turn_programs WHERE turn = ?1", [f]).ctx("drop program counts")?;
        // P's statistics now span P to the next kept checkpoint: `log`
        // computes them again, over whole trees (the paths noted at P's
        // seal do not place F's changes), from views that the merge leaves
        // as they are.
        c.execute("DELETE FROM turn_summaries WHERE turn = ?1 OR turn = ?2", params![f, p.unwrap_or(-1)])
            .ctx("drop turn statistics")?;
        c.execute("UPDATE checkpoints SET parent = ?2 WHERE parent = ?1", params![f, parent])
            .ctx("re-parent checkpoints")?;
        self.note_forgotten(&Forgotten { checkpoint: f, message_id, label, merged_into: p, by: by.into(), at })?;
        c.execute("DELETE FROM snapshots WHERE checkpoint = ?1", [f]).ctx("drop snapshot name")?;
        c.execute("DELETE FROM checkpoints WHERE id = ?1", [f]).ctx("drop checkpoint")?;
        self.prune_own_changes()?;
        self.prune_bypassed(p, newer)?;
        let g = Forgetting { checkpoint: f, into: p };
        self.set_forgetting(Some(&g))?;
        Ok(g)
    }

    /// Drops the notes of the daemon's own changes (`meta/bypass.rs`) that
    /// no kept checkpoint can ask about any more. Every question is about a
    /// ctime later than the seal of a kept checkpoint (a view's bound, or a
    /// bypass's range, which needs a seal before the ctime), so after the
    /// earliest seal, E (the end of its millisecond):
    /// - a settler's ctime (`own_ctime`) at or before E is never asked;
    /// - a rewind's turn T before the oldest checkpoint O answers up to the
    ///   seal of the first checkpoint after T, which is O: when O's seal is
    ///   E, it answers nothing asked. (With a clock set back, the oldest
    ///   may not be sealed first: then its rows stay.)
    ///
    /// Forgetting the safety checkpoint of a rewind (T itself, with kept
    /// checkpoints before it) keeps its row: views of those ask about it.
    /// Each read and delete is indexed.
    fn prune_own_changes(&self) -> MetaResult<()> {
        let c = &self.conn;
        let earliest: Option<i64> = c
            .query_row("SELECT (MIN(created_at) + 1) * 1000000 FROM checkpoints", [], |r| r.get(0))
            .ctx("read checkpoints")?;
        let Some(earliest) = earliest else { return Ok(()) };
        c.execute("DELETE FROM own_ctime WHERE ctime_ns <= ?1", [earliest]).ctx("drop the daemon's own ctimes")?;
        c.execute(
            "DELETE FROM daemon_turns WHERE turn < (SELECT MIN(id) FROM checkpoints) \
             AND (SELECT (created_at + 1) * 1000000 FROM checkpoints ORDER BY id LIMIT 1) <= ?1",
            [earliest],
        )
        .ctx("drop the turns of old rewinds")?;
        Ok(())
    }

    /// Drops the ranges of unknown states (`bypassed`) that no kept
    /// checkpoint lies in any more, once a forget left `p` and `newer` as
    /// the kept checkpoints around the gap it made (`p` None: none before).
    /// Views ask only about kept checkpoints, so such a range answers
    /// nothing; one that still holds a kept checkpoint stays whole (it
    /// must go on saying "unknown" there). A range with none is one that
    /// lies in the gap: it starts after `p` and ends before `newer`.
    /// Indexed by where ranges start (`bypassed_by_first`): the rows read
    /// are those that start in the gap.
    fn prune_bypassed(&self, p: Option<i64>, newer: i64) -> MetaResult<()> {
        self.conn
            .prepare_cached("DELETE FROM bypassed WHERE first > ?1 AND first < ?2 AND last < ?2")
            .ctx("prepare")?
            .execute(params![p.unwrap_or(-1), newer])
            .ctx("drop ranges of unknown states no kept checkpoint reads")?;
        Ok(())
    }

    /// Merges up to `rows` records of the forget under way into turn P (all
    /// of its object records first, then its entry records): for each key,
    /// in one step, the record of F is dropped when P has one (its content
    /// lent first to P's record without content) and moved to P otherwise,
    /// and a pending file whose list it is follows it or gets a copy. Each
    /// key is merged whole, so a view between two batches reads what it did
    /// before the forget. Done (true) when no record of F is left; the
    /// forget's note is then cleared in the same transaction.
    pub fn forget_rows(&self, g: &Forgetting, rows: usize) -> MetaResult<(Merged, bool)> {
        let c = &self.conn;
        let (f, p) = (g.checkpoint, g.into);
        // -1 is no turn: with no previous checkpoint, every record of F goes.
        let p_or = p.unwrap_or(-1);
        let offset = rows.saturating_sub(1).min(i64::MAX as usize) as i64;
        let mut merged = Merged::default();
        let nth_object: Option<i64> = c
            .query_row(
                "SELECT object FROM object_pre WHERE turn = ?1 ORDER BY object LIMIT 1 OFFSET ?2",
                params![f, offset],
                |r| r.get(0),
            )
            .optional()
            .ctx("read object records")?;
        let any_object = nth_object.is_some()
            || c.query_row("SELECT EXISTS (SELECT 1 FROM object_pre WHERE turn = ?1)", [f], |r| r.get(0))
                .ctx("read object records")?;
        if any_object {
            // Fewer than `rows` left: all of them.
            self.merge_objects(f, p_or, nth_object.unwrap_or(i64::MAX), &mut merged)?;
        } else {
            let nth_entry: Option<(i64, Vec<u8>)> = c
                .query_row(
                    "SELECT dir, name FROM entry_pre WHERE turn = ?1 ORDER BY dir, name LIMIT 1 OFFSET ?2",
                    params![f, offset],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .ctx("read entry records")?;
            // No directory has number i64::MAX: every entry record left.
            let (dir, name) = nth_entry.unwrap_or((i64::MAX, Vec::new()));
            self.merge_entries(f, p_or, (dir, &name), &mut merged)?;
        }
        let left: bool = c
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM object_pre WHERE turn = ?1) OR EXISTS (SELECT 1 FROM entry_pre WHERE turn = ?1)",
                [f],
                |r| r.get(0),
            )
            .ctx("read records")?;
        if !left {
            if let Some(p) = p {
                c.execute("UPDATE pending SET source_turn = ?2 WHERE source_turn = ?1", params![f, p])
                    .ctx("move pending sources")?;
            }
            self.set_forgetting(None)?;
        }
        Ok((merged, !left))
    }

    /// One batch of [`Meta::forget_rows`]: F's object records up to object
    /// `bound`.
    fn merge_objects(&self, f: i64, p_or: i64, bound: i64, merged: &mut Merged) -> MetaResult<()> {
        let c = &self.conn;
        let shadowed = "EXISTS (SELECT 1 FROM object_pre pp WHERE pp.turn = ?2 AND pp.object = ff.object)";
        // Pending files whose list is a record about to go get a copy.
        self.count_lists(
            &format!(
                "UPDATE pending SET chunks = (SELECT ff.chunks FROM object_pre ff \
                     WHERE ff.turn = ?1 AND ff.object = pending.source_object), \
                     source_turn = NULL, source_object = NULL \
                 WHERE source_turn = ?1 AND source_object <= ?3 AND chunks IS NULL AND EXISTS (SELECT 1 FROM object_pre ff \
                     WHERE ff.turn = ?1 AND ff.object = pending.source_object AND (?2 < 0 OR {shadowed})) \
                 RETURNING chunks"
            ),
            params![f, p_or, bound],
            1,
        )?;
        // P's records without content borrow F's.
        self.count_lists(
            "UPDATE object_pre SET \
                 content_hash = (SELECT ff.content_hash FROM object_pre ff WHERE ff.turn = ?1 AND ff.object = object_pre.object), \
                 chunks = (SELECT ff.chunks FROM object_pre ff WHERE ff.turn = ?1 AND ff.object = object_pre.object) \
             WHERE turn = ?2 AND object <= ?3 AND chunks IS NULL AND EXISTS (SELECT 1 FROM object_pre ff \
                 WHERE ff.turn = ?1 AND ff.object = object_pre.object AND ff.chunks IS NOT NULL) \
             RETURNING chunks",
            params![f, p_or, bound],
            1,
        )?;
        let dropped: Vec<(i64, Option<Vec<u8>>)> = {
            let mut stmt = c
                .prepare_cached(&format!(
                    "DELETE FROM object_pre AS ff WHERE ff.turn = ?1 AND ff.object <= ?3 AND (?2 < 0 OR {shadowed}) \
                     RETURNING object, chunks"
                ))
                .ctx("prepare")?;
            let rows = stmt.query_map(params![f, p_or, bound], |r| Ok((r.get(0)?, r.get(1)?))).ctx("drop records")?;
            rows.collect::<rusqlite::Result<_>>().ctx("drop records")?
        };
        merged.dropped_records += dropped.len() as u64;
        for (object, list) in dropped {
            merged.dropped_objects.push(ObjectId(object));
            if let Some(list) = list {
                self.count_list(&list, -1)?;
                merged.dropped_lists.push(list);
            }
        }
        if p_or >= 0 {
            merged.moved_records += c
                .prepare_cached("UPDATE object_pre SET turn = ?2 WHERE turn = ?1 AND object <= ?3")
                .ctx("prepare")?
                .execute(params![f, p_or, bound])
                .ctx("move object records")? as u64;
            c.prepare_cached("UPDATE pending SET source_turn = ?2 WHERE source_turn = ?1 AND source_object <= ?3")
                .ctx("prepare")?
                .execute(params![f, p_or, bound])
                .ctx("move pending sources")?;
        }
        Ok(())
    }

    /// One batch of [`Meta::forget_rows`]: F's entry records up to
    /// (directory, name) `bound`.
    fn merge_entries(&self, f: i64, p_or: i64, bound: (i64, &[u8]), merged: &mut Merged) -> MetaResult<()> {
        let c = &self.conn;
        let dropped: Vec<Option<i64>> = {
            let mut stmt = c
                .prepare_cached(
                    "DELETE FROM entry_pre AS ff WHERE ff.turn = ?1 AND (ff.dir, ff.name) <= (?3, ?4) AND (?2 < 0 OR \
                     EXISTS (SELECT 1 FROM entry_pre pp WHERE pp.turn = ?2 AND pp.dir = ff.dir AND pp.name = ff.name)) \
                     RETURNING target",
                )
                .ctx("prepare")?;
            let rows = stmt.query_map(params![f, p_or, bound.0, bound.1], |r| r.get(0)).ctx("drop entry records")?;
            rows.collect::<rusqlite::Result<_>>().ctx("drop entry records")?
        };
        merged.dropped_records += dropped.len() as u64;
        merged.dropped_objects.extend(dropped.into_iter().flatten().map(ObjectId));
        if p_or >= 0 {
            merged.moved_records += c
                .prepare_cached("UPDATE entry_pre SET turn = ?2 WHERE turn = ?1 AND (dir, name) <= (?3, ?4)")
                .ctx("prepare")?
                .execute(params![f, p_or, bound.0, bound.1])
                .ctx("move entry records")? as u64;
        }
        Ok(())
    }

    /// Forgets the cached content of those of `objects` whose newest
    /// content record no longer holds the cached list (it went with a
    /// dropped record): the cache is only trusted while a record keeps its
    /// chunks counted (see `refs.rs`), and `fsck` would find a stale row
    /// naming a freed chunk.
    pub fn forget_stale_known(&self, objects: &[ObjectId]) -> MetaResult<()> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "DELETE FROM known_content AS k WHERE k.object = ?1 AND k.chunks IS NOT (SELECT o.chunks FROM object_pre o \
                 WHERE o.object = ?1 AND o.chunks IS NOT NULL ORDER BY o.turn DESC LIMIT 1)",
            )
            .ctx("prepare")?;
        let mut seen = HashSet::new();
        for id in objects {
            if seen.insert(*id) {
                stmt.execute([id.0]).ctx("forget stale cached content")?;
            }
        }
        Ok(())
    }

    /// Of `candidates`, the objects no entry record names (no view can
    /// reach them through a name) and that are not pending, with their
    /// handles: if one sits alone in the attic, nothing needs it.
    pub fn unnamed_objects(&self, candidates: &[ObjectId]) -> MetaResult<Vec<(ObjectId, Vec<u8>)>> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT o.handle FROM objects o WHERE o.id = ?1 AND o.handle IS NOT NULL \
                 AND NOT EXISTS (SELECT 1 FROM entry_pre e WHERE e.target = o.id) \
                 AND NOT EXISTS (SELECT 1 FROM pending p WHERE p.handle = o.handle)",
            )
            .ctx("prepare")?;
        for id in candidates {
            if !seen.insert(*id) {
                continue;
            }
            if let Some(handle) = stmt.query_row([id.0], |r| r.get::<_, Vec<u8>>(0)).optional().ctx("read object")? {
                out.push((*id, handle));
            }
        }
        Ok(out)
    }

    /// Drops every record of an object no view can reach (its attic entry
    /// is being removed), noting the removal (`gc_attic`); the chunk lists
    /// of the records dropped.
    pub fn drop_unreachable(&self, id: ObjectId) -> MetaResult<Vec<Vec<u8>>> {
        // A pending file whose list is one of these records keeps a copy.
        self.count_lists(
            "UPDATE pending SET chunks = (SELECT ff.chunks FROM object_pre ff \
                 WHERE ff.turn = pending.source_turn AND ff.object = pending.source_object), \
                 source_turn = NULL, source_object = NULL \
             WHERE source_object = ?1 AND chunks IS NULL RETURNING chunks",
            [id.0],
            1,
        )?;
        let lists: Vec<Vec<u8>> = self
            .count_lists("DELETE FROM object_pre WHERE object = ?1 RETURNING chunks", [id.0], -1)?
            .into_iter()
            .flatten()
            .collect();
        self.forget_known_content(id)?;
        // Gone from the tree for good: no view asks about its ctime.
        self.conn.execute("DELETE FROM own_ctime WHERE object = ?1", [id.0]).ctx("drop the daemon's own ctime")?;
        self.conn.execute("DELETE FROM bypassed WHERE object = ?1", [id.0]).ctx("drop its unknown states")?;
        self.note_gc_attic(id)?;
        // Its slot goes after the commit; a rewind must no longer count on it.
        self.attic_take(id)?;
        Ok(lists)
    }

    /// For `reset`, once every checkpoint before `keep` is forgotten: drops
    /// the marks of outside changes before it (no view before it is left)
    /// and lists the objects in their attic slot that nothing reaches any
    /// more (not pending, named by no entry record: the records left are
    /// those of turn `keep`, whose removals stay in the attic).
    pub fn reset_attic(&self, keep: i64) -> MetaResult<Vec<ObjectId>> {
        self.conn.execute("DELETE FROM tainted WHERE turn < ?1", [keep]).ctx("drop outside-change marks")?;
        let mut stmt = self
            .conn
            .prepare(
                "SELECT a.object FROM attic a LEFT JOIN objects o ON o.id = a.object \
                 WHERE NOT EXISTS (SELECT 1 FROM entry_pre e WHERE e.target = a.object) \
                 AND (o.handle IS NULL OR NOT EXISTS (SELECT 1 FROM pending p WHERE p.handle = o.handle))",
            )
            .ctx("prepare")?;
        let rows = stmt.query_map([], |r| r.get(0).map(ObjectId)).ctx("list the attic")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("list the attic")
    }

    /// Whether an entry record names object `id` (a view can reach it).
    pub fn is_named(&self, id: ObjectId) -> MetaResult<bool> {
        self.conn
            .prepare_cached("SELECT 1 FROM entry_pre WHERE target = ?1 LIMIT 1")
            .ctx("prepare")?
            .query_row([id.0], |_| Ok(()))
            .optional()
            .map(|r| r.is_some())
            .ctx("read entry records")
    }

    /// The message id of checkpoint `n` (None: it has none, or there is no such checkpoint).
    pub fn checkpoint_message(&self, n: i64) -> MetaResult<Option<String>> {
        Ok(self
            .conn
            .query_row("SELECT message_id FROM checkpoints WHERE id = ?1", [n], |r| r.get::<_, Option<String>>(0))
            .optional()
            .ctx("read checkpoint")?
            .flatten())
    }

    /// Lowers the store size the newest checkpoint recorded to `bytes` if
    /// it is more: compaction is about to make the packs smaller, and the
    /// mount-time check takes packs smaller than that size for lost ones.
    pub fn lower_store_bytes(&self, bytes: i64) -> MetaResult<()> {
        self.conn
            .execute(
                "UPDATE checkpoints SET store_bytes_at_start = MIN(store_bytes_at_start, ?1) \
                 WHERE id = (SELECT MAX(id) FROM checkpoints)",
                [bytes],
            )
            .ctx("lower the recorded store size")?;
        Ok(())
    }

    /// Lowers the record bytes the packs held at the last seal (the mount's
    /// check for lost packs) to `bytes`, when a compaction leaves less.
    pub fn lower_sealed_record_bytes(&self, bytes: i64) -> MetaResult<()> {
        self.conn
            .execute(
                "UPDATE state SET value = CAST(MIN(CAST(value AS INTEGER), ?1) AS TEXT) WHERE key = ?2",
                rusqlite::params![bytes, super::SEALED_RECORD_BYTES],
            )
            .ctx("lower the sealed record bytes")?;
        Ok(())
    }

    /// Per turn: (turn, records, bytes of content captured), and the
    /// total bytes of content every record refers to (for `du`).
    pub fn turn_usage(&self) -> MetaResult<Vec<(i64, u64, u64)>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT turn, SUM(n), SUM(bytes) FROM ( \
                   SELECT turn, COUNT(*) AS n, SUM(CASE WHEN chunks IS NOT NULL THEN size ELSE 0 END) AS bytes \
                   FROM object_pre GROUP BY turn \
                   UNION ALL SELECT turn, COUNT(*), 0 FROM entry_pre GROUP BY turn) \
                 GROUP BY turn ORDER BY turn",
            )
            .ctx("prepare")?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)? as u64, r.get::<_, i64>(2)? as u64)))
            .ctx("measure turns")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("measure turns")
    }

    /// Runs `f` in a transaction that is always rolled back: what a
    /// collection would do, for `--dry-run`.
    /// The file this database is in (None in memory).
    pub fn path(&self) -> Option<std::path::PathBuf> {
        self.conn.path().filter(|p| !p.is_empty()).map(std::path::PathBuf::from)
    }

    /// A copy in memory of the database in `path` as last committed, read
    /// through a connection of its own in one read transaction: in WAL
    /// mode it waits for no writer and no writer waits for it (a dry run
    /// works on it, holding nothing). Its size in memory is the file's.
    pub fn copy_of(path: &std::path::Path) -> MetaResult<Meta> {
        use rusqlite::OpenFlags;
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let src = rusqlite::Connection::open_with_flags(path, flags).ctx("open a copy's source")?;
        src.busy_timeout(std::time::Duration::from_secs(10)).ctx("set busy timeout")?;
        let mut conn = rusqlite::Connection::open_in_memory().ctx("open a copy")?;
        {
            let backup = rusqlite::backup::Backup::new(&src, &mut conn).ctx("start a copy")?;
            // Every page in one step: one read transaction, one snapshot.
            // Busy only while another connection recovers the WAL.
            let mut tries = 0;
            loop {
                match backup.step(-1).ctx("copy the database")? {
                    rusqlite::backup::StepResult::Done => break,
                    _ if tries < 100 => {
                        tries += 1;
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                    _ => return Err(MetaError::Malformed { what: "copy of the database (its file stayed busy)" }),
                }
            }
        }
        Ok(Meta { conn, batch: Default::default() })
    }

    pub fn rolled_back<T>(&self, f: impl FnOnce(&Meta) -> MetaResult<T>) -> MetaResult<T> {
        let [begin, rollback] = match self.in_batch() {
            true => ["SAVEPOINT planned", "ROLLBACK TO planned; RELEASE planned"],
            false => ["BEGIN IMMEDIATE", "ROLLBACK"],
        };
        self.conn.execute_batch(begin).ctx("begin")?;
        let out = f(self);
        self.conn.execute_batch(rollback).ctx("roll back")?;
        out
    }
}

/// SQL: 1 if checkpoint `c` (a table alias) counts for `keep_count`, else 0.
/// A mount, a rewind or a restore counts; a turn or a quiet period counts
/// if the turn that ended at it recorded anything (its records carry the
/// number of the checkpoint before it, whatever was forgotten between).
fn changed(c: &str) -> String {
    format!(
        "CASE WHEN {c}.reason NOT IN ('turn', 'auto') THEN 1 \
         WHEN EXISTS (SELECT 1 FROM entry_pre e WHERE e.turn = \
           (SELECT MAX(id) FROM checkpoints WHERE id < {c}.id)) THEN 1 \
         WHEN EXISTS (SELECT 1 FROM object_pre o WHERE o.turn = \
           (SELECT MAX(id) FROM checkpoints WHERE id < {c}.id)) THEN 1 ELSE 0 END"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::{Checkpoint, Checkpoints, Intents, ObjectId, ObjectState, PreImages, Reason, test_file_state};
    use crate::store::ContentRef;

    fn checkpoint(m: &Meta, n: i64) {
        m.seal(&Checkpoint {
            checkpoint: n,
            parent: (n > 0).then_some(n - 1),
            message_id: Some(format!("m{n}")),
            session: None,
            label: None,
            reason: Reason::Turn,
            created_at: n,
            store_bytes_at_start: 0,
            name: None,
            snapshot_message: None,
            sealed_by: None,
        })
        .unwrap();
    }

    fn list(data: &[u8]) -> (Vec<u8>, Vec<u8>, ChunkId) {
        let id = ChunkId::of(data);
        let r = ContentRef {
            hash: id,
            size: data.len() as u64,
            chunks: vec![crate::store::ChunkSpan { id, len: data.len() as u32 }],
        };
        (id.as_bytes().to_vec(), r.encode_chunks(), id)
    }

    /// Schema 12's notes of the daemon's own changes: forgetting the
    /// oldest checkpoints drops those no kept checkpoint can ask about
    /// (every question is about a ctime after a kept seal), and answers
    /// every question that can still be asked as before; forgetting a
    /// rewind's safety checkpoint keeps its turn's start.
    #[test]
    fn forgetting_the_oldest_drops_the_daemons_notes_no_kept_checkpoint_asks_about() {
        let m = Meta::open_in_memory().unwrap();
        let ms = |x: i64| x * 1_000_000;
        // Checkpoints 0..=6 sealed at 10, 20, ... 70 ms; rewinds changed the
        // tree in turns 1 (from 12 ms) and 4 (from 43 ms); the settler left
        // ctimes 15, 35 and 55 ms on objects 1, 2, 3.
        for n in 0..7 {
            checkpoint(&m, n);
            m.conn.execute("UPDATE checkpoints SET created_at = ?2 WHERE id = ?1", [n, 10 * (n + 1)]).unwrap();
        }
        m.mark_daemon_turn(1, ms(12)).unwrap();
        m.mark_daemon_turn(4, ms(43)).unwrap();
        for (o, at) in [(1, 15), (2, 35), (3, 55)] {
            m.set_own_ctime(ObjectId(o), ms(at)).unwrap();
        }
        let grid: Vec<i64> = (0..160).map(|i| i * 500_000).collect();
        let answers = |m: &Meta| -> Vec<bool> { grid.iter().map(|&ns| m.in_daemon_turn(ns, 6).unwrap()).collect() };
        let before = answers(&m);
        let rows = |m: &Meta, table: &str| -> i64 {
            m.conn.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0)).unwrap()
        };
        // The safety checkpoint of the second rewind (4) goes, 3 is kept
        // before it: its views still ask, its row stays.
        m.forget_checkpoint(4, "forget", 0).unwrap();
        assert_eq!((rows(&m, "daemon_turns"), rows(&m, "own_ctime")), (2, 3));
        assert_eq!(answers(&m), before, "forgetting a safety checkpoint changes no answer");
        // 0 and 1 go: 2, sealed at 30 ms, is the oldest. Turn 1's row and
        // the ctime of 15 ms are older than every question.
        m.forget_checkpoint(0, "forget", 0).unwrap();
        m.forget_checkpoint(1, "forget", 0).unwrap();
        let turns: Vec<i64> = {
            let mut stmt = m.conn.prepare("SELECT turn FROM daemon_turns").unwrap();
            stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
        };
        assert_eq!(turns, vec![4]);
        assert_eq!(m.own_ctime(ObjectId(1)).unwrap(), None);
        assert_eq!(
            (m.own_ctime(ObjectId(2)).unwrap(), m.own_ctime(ObjectId(3)).unwrap()),
            (Some(ms(35)), Some(ms(55)))
        );
        let after = answers(&m);
        for ((ns, was), now) in grid.iter().zip(&before).zip(&after) {
            if *ns > crate::meta::end_of_ms(30) {
                assert_eq!(now, was, "a question a kept checkpoint asks, at {ns} ns");
            }
        }
    }

    /// The ranges of unknown states (`bypassed`) that no kept
    /// checkpoint lies in go with the forget that leaves them so, and those
    /// of an object dropped as unreachable go with it; a range that still
    /// holds a kept checkpoint stays whole, and every kept checkpoint's
    /// answer stays what it was. Each forget deletes through the index of
    /// where ranges start, not by reading the table.
    #[test]
    fn forgetting_drops_the_bypassed_ranges_no_kept_checkpoint_lies_in() {
        let m = Meta::open_in_memory().unwrap();
        for n in 0..10 {
            checkpoint(&m, n);
        }
        let ranges = [(1, 2, 4), (2, 3, 3), (3, 0, 7), (4, 5, 6), (5, 8, 8), (6, 1, 1), (6, 6, 8)];
        for (o, first, last) in ranges {
            m.mark_bypassed(ObjectId(o), first, last).unwrap();
        }
        let answers = |m: &Meta, kept: &[i64]| -> Vec<Option<i64>> {
            (1..=6)
                .flat_map(|o| kept.iter().map(move |&k| (o, k)))
                .map(|(o, k)| m.bypassed_at(ObjectId(o), k).unwrap())
                .collect()
        };
        let table = |m: &Meta| -> Vec<(i64, i64, i64)> {
            let mut stmt = m.conn.prepare("SELECT object, first, last FROM bypassed ORDER BY object, first").unwrap();
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap().map(Result::unwrap).collect()
        };
        let mut kept: Vec<i64> = (0..10).collect();
        for f in [3, 2, 4, 5, 6, 0, 8] {
            kept.retain(|&k| k != f);
            let before = answers(&m, &kept);
            m.transaction(|m| m.forget_checkpoint(f, "retention", 0)).unwrap();
            assert_eq!(answers(&m, &kept), before, "after forgetting {f}: a kept checkpoint's answer changed");
            let expected: Vec<(i64, i64, i64)> = ranges
                .iter()
                .copied()
                .filter(|&(_, first, last)| kept.iter().any(|k| (first..=last).contains(k)))
                .collect();
            assert_eq!(table(&m), expected, "after forgetting {f} (kept {kept:?})");
        }
        // Kept: 1, 7, 9. Object 6's range 6..=8 holds 7 alone.
        assert_eq!(table(&m), vec![(3, 0, 7), (6, 1, 1), (6, 6, 8)]);
        m.transaction(|m| m.drop_unreachable(ObjectId(6)).map(drop)).unwrap();
        assert_eq!(table(&m), vec![(3, 0, 7)], "an unreachable object's ranges go with it");
        let plan: Vec<String> = {
            let mut stmt = m
                .conn
                .prepare("EXPLAIN QUERY PLAN DELETE FROM bypassed WHERE first > ?1 AND first < ?2 AND last < ?2")
                .unwrap();
            stmt.query_map(params![1, 7], |r| r.get::<_, String>(3)).unwrap().map(Result::unwrap).collect()
        };
        assert!(plan.iter().any(|l| l.contains("bypassed_by_first")), "not indexed: {plan:?}");
    }

    #[test]
    fn forgetting_merges_into_the_previous_kept_turn_and_views_stay() {
        let m = Meta::open_in_memory().unwrap();
        for n in 0..4 {
            checkpoint(&m, n);
        }
        let (d, o, q) = (ObjectId(1), ObjectId(2), ObjectId(3));
        let (h1, l1, c1) = list(b"one");
        let (h2, l2, c2) = list(b"two");
        // Turn 1: o's mode changed (no content); turn 2: o rewritten (content
        // "two"), q rewritten (content "one"); names x (turn 1 and 2), y (turn 2).
        m.record_object(1, o, &test_file_state(3), None).unwrap();
        let mut with = test_file_state(3);
        with.content = Some((h2.clone(), l2.clone()));
        m.record_object(2, o, &with, None).unwrap();
        with.content = Some((h1.clone(), l1.clone()));
        m.record_object(2, q, &with, None).unwrap();
        m.record_entry(1, d, b"x", None, None).unwrap();
        m.record_entry(2, d, b"x", Some(o), None).unwrap();
        m.record_entry(2, d, b"y", Some(q), None).unwrap();
        // What views of kept checkpoints 1 and 3 read.
        let views = |m: &Meta| -> Vec<_> {
            [1, 3]
                .iter()
                .map(|&k| {
                    (
                        m.object_at(o, k).unwrap().map(|s| ObjectState { content: None, ..s }),
                        m.content_at(o, k).unwrap().map(|c| c.2),
                        m.entry_at(d, b"x", k).unwrap(),
                        m.entry_at(d, b"y", k).unwrap(),
                        m.content_at(q, k).unwrap().map(|c| c.2),
                    )
                })
                .collect()
        };
        // Rewound files whose lists are the records of turn 2: o's record
        // goes (shadowed), q's moves.
        m.add_pending(b"ho", &h2, crate::meta::PendingList::Record(2, o), 0).unwrap();
        m.add_pending(b"hq", &h1, crate::meta::PendingList::Record(2, q), 0).unwrap();
        let before = views(&m);
        // One record per transaction, as a collection does with writes in
        // between: after each, the kept views read what they did, every
        // pending file's list resolves, the counts are right and `fsck`
        // finds no record of an unknown turn.
        let g = m.transaction(|m| m.forget_begin(2, "forget", 99)).unwrap();
        assert_eq!(m.forgetting().unwrap(), Some(g.clone()), "the forget is noted until its last batch");
        let mut merged = Merged::default();
        let mut batches = 0;
        loop {
            assert_eq!(views(&m), before, "views of kept checkpoints 1 and 3 after {batches} batches");
            assert!(m.pending_sources().unwrap().iter().all(|p| p.inline.is_some() || p.source_chunks.is_some()));
            assert_eq!(m.wrong_chunk_counts().unwrap(), vec![], "after {batches} batches");
            assert_eq!(m.records_of_unknown_turns().unwrap(), vec![], "after {batches} batches");
            let (batch, done) = m.transaction(|m| m.forget_rows(&g, 1)).unwrap();
            merged.absorb(batch);
            batches += 1;
            if done {
                break;
            }
        }
        assert_eq!(batches, 4, "o's, q's, x's and y's records, one at a time");
        assert_eq!(m.forgetting().unwrap(), None);
        assert_eq!(merged.dropped_records, 2, "o's record and x's record of turn 2 are shadowed by turn 1's");
        assert_eq!(merged.moved_records, 2, "q's record and y's entry move to turn 1");
        let after = views(&m);
        assert_eq!(before, after, "views of kept checkpoints 1 and 3 are unchanged");
        assert_eq!(m.content_at(o, 1).unwrap().unwrap().0, 1, "turn 1's record took turn 2's content");
        let pending: Vec<_> =
            m.pending_sources().unwrap().into_iter().map(|p| (p.handle, p.inline, p.source)).collect();
        assert!(pending.contains(&(b"ho".to_vec(), Some(l2.clone()), None)), "a copy of the dropped list: {pending:?}");
        assert!(pending.contains(&(b"hq".to_vec(), None, Some((1, q)))), "follows the moved record: {pending:?}");
        let ids: Vec<i64> = m.checkpoints().unwrap().iter().map(|c| c.checkpoint).collect();
        assert_eq!(ids, vec![0, 1, 3]);
        assert_eq!(m.checkpoints().unwrap()[2].parent, Some(1), "3 hangs from 2's parent");
        let f = m.forgotten("m2").unwrap().unwrap();
        assert_eq!((f.checkpoint, f.merged_into, f.by.as_str()), (2, Some(1), "forget"));
        // Both contents are still referenced (o's by turn 1, q's moved).
        let candidates: HashSet<ChunkId> = [c1, c2].into_iter().collect();
        assert!(m.unreferenced_chunks(usize::MAX).unwrap().is_empty());
        assert_eq!(m.wrong_chunk_counts().unwrap(), vec![], "the counts follow the merge");
        assert_eq!(m.chunk_count(&c2).unwrap(), Some(2), "o's record in turn 1 (borrowed) and the pending copy");
        // Once the rewound files are settled, forgetting 1 and 0 (the
        // oldest: its records are dropped) frees both.
        m.remove_pending(b"ho").unwrap();
        m.remove_pending(b"hq").unwrap();
        let mut lists = Vec::new();
        for f in [0, 1] {
            lists.extend(m.transaction(|m| m.forget_checkpoint(f, "retention", 100)).unwrap().dropped_lists);
        }
        assert_eq!(lists.len(), 2);
        assert_eq!(m.unreferenced_chunks(usize::MAX).unwrap(), candidates, "both counts fell to zero");
        assert_eq!(m.wrong_chunk_counts().unwrap(), vec![]);
        assert!(m.transaction(|m| m.forget_checkpoint(3, "forget", 1)).is_err(), "the newest is never forgotten");
    }

    #[test]
    fn forgetting_the_oldest_or_an_unreachable_object_leaves_pending_files_a_copy_of_their_list() {
        let m = Meta::open_in_memory().unwrap();
        for n in 0..3 {
            checkpoint(&m, n);
        }
        let (o, q) = (ObjectId(2), ObjectId(3));
        let (h1, l1, c1) = list(b"one");
        let (h2, l2, c2) = list(b"two");
        let mut with = test_file_state(3);
        with.content = Some((h1.clone(), l1.clone()));
        m.record_object(0, o, &with, None).unwrap();
        with.content = Some((h2.clone(), l2.clone()));
        m.record_object(1, q, &with, None).unwrap();
        // Rewound files whose lists are those records.
        m.add_pending(b"ho", &h1, crate::meta::PendingList::Record(0, o), 0).unwrap();
        m.add_pending(b"hq", &h2, crate::meta::PendingList::Record(1, q), 0).unwrap();
        // 0 is the oldest: its records are dropped, not moved.
        let merged = m.transaction(|m| m.forget_checkpoint(0, "reset", 9)).unwrap();
        assert_eq!(merged.dropped_records, 1);
        m.transaction(|m| m.drop_unreachable(q)).unwrap();
        let pending: Vec<_> =
            m.pending_sources().unwrap().into_iter().map(|p| (p.handle, p.inline, p.source)).collect();
        assert!(pending.contains(&(b"ho".to_vec(), Some(l1.clone()), None)), "{pending:?}");
        assert!(pending.contains(&(b"hq".to_vec(), Some(l2.clone()), None)), "{pending:?}");
        let candidates: HashSet<ChunkId> = [c1, c2].into_iter().collect();
        assert!(m.unreferenced_chunks(usize::MAX).unwrap().is_empty(), "the pending files still need both chunks");
        assert_eq!(m.wrong_chunk_counts().unwrap(), vec![]);
        assert!(candidates.iter().all(|c| m.chunk_count(c).unwrap() == Some(1)), "each pending copy counts once");
    }
}
