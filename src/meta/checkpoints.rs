//! Checkpoints and their names, as one area of the metadata: sealing a
//! checkpoint, listing and finding them (by number, from the newest, by
//! time), labels, and the names a reference can use (message ids and
//! snapshot names). [`Checkpoints`] is that area's interface: [`Meta`]
//! implements it over SQLite (`checkpoints`, `snapshots`;
//! docs/format.md), [`MemoryCheckpoints`] is the in-memory model, and
//! [`kit`] is the one suite both pass. The journal hands it out through
//! `Journal::with_checkpoints`; what a reference means (`journal/reference.rs`)
//! is decided above it, from these answers. Forgetting checkpoints is
//! retention's (`meta/retention.rs`).

use std::collections::BTreeMap;
use std::sync::Mutex;

use rusqlite::{OptionalExtension, params};

use super::{CHECKPOINT_COLUMNS, CHECKPOINT_FROM, Checkpoint, Ctx, Meta, MetaResult, checkpoint_from_row};

/// The checkpoints and their names (see the module's comment). Lists are
/// oldest first; a checkpoint's `name` and `snapshot_message` are its
/// snapshot's, whatever `seal` was given.
pub trait Checkpoints {
    /// Seals a checkpoint: inserts its row (refused if the number exists).
    fn seal(&self, c: &Checkpoint) -> MetaResult<()>;

    /// Sets the label of a checkpoint (nothing if there is no such one).
    fn set_label(&self, checkpoint: i64, label: &str) -> MetaResult<()>;

    /// Names checkpoint `checkpoint` (the caller has checked the name;
    /// refused if the name or the checkpoint has one already). `at`:
    /// Unix milliseconds.
    fn add_snapshot(&self, name: &str, checkpoint: i64, message: Option<&str>, at: i64) -> MetaResult<()>;

    /// All checkpoints.
    fn checkpoints(&self) -> MetaResult<Vec<Checkpoint>>;

    /// Checkpoint `n`, if it exists.
    fn checkpoint(&self, n: i64) -> MetaResult<Option<Checkpoint>>;

    /// The checkpoint `back` before the newest (0: the newest), if there
    /// are that many: `~N` without reading the others' rows.
    fn checkpoint_back(&self, back: u64) -> MetaResult<Option<Checkpoint>>;

    /// The newest checkpoint sealed before `ns` (ns since the epoch), to
    /// the end of its millisecond: `created_at` has ms, and a change in the
    /// same millisecond as a seal may be before or after it.
    fn newest_sealed_before(&self, ns: i64) -> MetaResult<Option<i64>>;

    /// The first checkpoint after turn `turn` and when it was sealed (ms).
    fn first_sealed_after(&self, turn: i64) -> MetaResult<Option<(i64, i64)>>;

    /// The checkpoints whose message id or snapshot name is `word`.
    fn checkpoints_named(&self, word: &str) -> MetaResult<Vec<i64>>;

    /// The oldest checkpoint other than `except` whose message id is `id`.
    fn checkpoint_with_message(&self, id: &str, except: Option<i64>) -> MetaResult<Option<i64>>;

    /// The oldest checkpoint whose message id is not `id` but shares a
    /// prefix reference with it: one of the two starts with the other, and
    /// the shorter has at least `min` characters (shorter ones are no
    /// prefix reference). As (checkpoint, its message id).
    fn checkpoint_with_overlapping_message(&self, id: &str, min: usize) -> MetaResult<Option<(i64, String)>>;

    /// The checkpoint a snapshot name names.
    fn snapshot(&self, name: &str) -> MetaResult<Option<i64>>;

    /// The named snapshots, as (name, checkpoint), oldest checkpoint first.
    fn snapshot_names(&self) -> MetaResult<Vec<(String, i64)>>;
}

impl Checkpoints for Meta {
    fn seal(&self, c: &Checkpoint) -> MetaResult<()> {
        self.exec(
                "INSERT INTO checkpoints(id, parent, message_id, session, label, reason, created_at, store_bytes_at_start, sealed_by)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![c.checkpoint, c.parent, c.message_id, c.session, c.label, c.reason.as_str(), c.created_at, c.store_bytes_at_start, c.sealed_by],
            )
            .ctx("record checkpoint")?;
        Ok(())
    }

    fn set_label(&self, checkpoint: i64, label: &str) -> MetaResult<()> {
        self.exec("UPDATE checkpoints SET label = ?1 WHERE id = ?2", params![label, checkpoint])
            .ctx("label checkpoint")?;
        Ok(())
    }

    fn add_snapshot(&self, name: &str, checkpoint: i64, message: Option<&str>, at: i64) -> MetaResult<()> {
        self.exec(
            "INSERT INTO snapshots(name, checkpoint, message, created_at) VALUES (?1, ?2, ?3, ?4)",
            params![name, checkpoint, message, at],
        )
        .ctx("name a checkpoint")?;
        Ok(())
    }

    fn checkpoints(&self) -> MetaResult<Vec<Checkpoint>> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!("SELECT {CHECKPOINT_COLUMNS} {CHECKPOINT_FROM} ORDER BY c.id"))
            .ctx("prepare")?;
        let rows = stmt.query_map([], checkpoint_from_row).ctx("list checkpoints")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("list checkpoints")
    }

    fn checkpoint(&self, n: i64) -> MetaResult<Option<Checkpoint>> {
        self.conn
            .prepare_cached(&format!("SELECT {CHECKPOINT_COLUMNS} {CHECKPOINT_FROM} WHERE c.id = ?1"))
            .ctx("prepare")?
            .query_row([n], checkpoint_from_row)
            .optional()
            .ctx("read checkpoint")
    }

    fn checkpoint_back(&self, back: u64) -> MetaResult<Option<Checkpoint>> {
        let Ok(back) = i64::try_from(back) else { return Ok(None) };
        self.conn
            .prepare_cached(&format!(
                "SELECT {CHECKPOINT_COLUMNS} {CHECKPOINT_FROM} ORDER BY c.id DESC LIMIT 1 OFFSET ?1"
            ))
            .ctx("prepare")?
            .query_row([back], checkpoint_from_row)
            .optional()
            .ctx("read checkpoint")
    }

    fn newest_sealed_before(&self, ns: i64) -> MetaResult<Option<i64>> {
        self.conn
            .prepare_cached("SELECT MAX(id) FROM checkpoints WHERE (created_at + 1) * 1000000 < ?1")
            .ctx("prepare")?
            .query_row(params![ns], |r| r.get(0))
            .ctx("read checkpoints")
    }

    fn first_sealed_after(&self, turn: i64) -> MetaResult<Option<(i64, i64)>> {
        self.conn
            .prepare_cached("SELECT id, created_at FROM checkpoints WHERE id > ?1 ORDER BY id LIMIT 1")
            .ctx("prepare")?
            .query_row(params![turn], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .ctx("read checkpoint")
    }

    /// Indexed: `checkpoints_by_message`, the snapshots' names.
    fn checkpoints_named(&self, word: &str) -> MetaResult<Vec<i64>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT id FROM checkpoints WHERE message_id = ?1 \
                 UNION SELECT c.id FROM snapshots s JOIN checkpoints c ON c.id = s.checkpoint WHERE s.name = ?1 \
                 ORDER BY 1",
            )
            .ctx("prepare")?;
        let rows = stmt.query_map([word], |r| r.get(0)).ctx("read checkpoints")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("read checkpoints")
    }

    fn checkpoint_with_message(&self, id: &str, except: Option<i64>) -> MetaResult<Option<i64>> {
        self.conn
            .prepare_cached("SELECT id FROM checkpoints WHERE message_id = ?1 AND id IS NOT ?2 ORDER BY id LIMIT 1")
            .ctx("prepare")?
            .query_row(params![id, except], |r| r.get(0))
            .optional()
            .ctx("read checkpoints")
    }

    fn checkpoint_with_overlapping_message(&self, id: &str, min: usize) -> MetaResult<Option<(i64, String)>> {
        // Indexed (`checkpoints_by_message`), as a seal's other checks:
        // longer ids beginning with `id` lie in one range of the index
        // (UTF-8 sorts bytewise as code points), and the shorter ones `id`
        // begins with are among its prefixes, each looked up.
        let mut found: Option<(i64, String)> = None;
        let mut keep = |hit: Option<(i64, String)>| {
            if let Some(h) = hit
                && found.as_ref().is_none_or(|f| h.0 < f.0)
            {
                found = Some(h);
            }
        };
        if id.chars().count() >= min {
            let end = format!("{id}\u{10ffff}");
            let hit = self
                .conn
                .prepare_cached(
                    "SELECT id, message_id FROM checkpoints WHERE message_id > ?1 AND message_id < ?2
                     AND substr(message_id, 1, length(?1)) = ?1 ORDER BY id LIMIT 1",
                )
                .ctx("prepare")?
                .query_row(params![id, end], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
                .ctx("read checkpoints")?;
            keep(hit);
        }
        let mut stmt = self
            .conn
            .prepare_cached("SELECT id, message_id FROM checkpoints WHERE message_id = ?1 ORDER BY id LIMIT 1")
            .ctx("prepare")?;
        for (n, (at, _)) in id.char_indices().enumerate() {
            if n < min {
                continue;
            }
            let hit = stmt.query_row([&id[..at]], |r| Ok((r.get(0)?, r.get(1)?))).optional().ctx("read checkpoints")?;
            keep(hit);
        }
        Ok(found)
    }

    fn snapshot(&self, name: &str) -> MetaResult<Option<i64>> {
        self.conn
            .prepare_cached(
                "SELECT s.checkpoint FROM snapshots s JOIN checkpoints c ON c.id = s.checkpoint WHERE s.name = ?1",
            )
            .ctx("prepare")?
            .query_row([name], |r| r.get(0))
            .optional()
            .ctx("read snapshot")
    }

    fn snapshot_names(&self) -> MetaResult<Vec<(String, i64)>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT s.name, s.checkpoint FROM snapshots s JOIN checkpoints c ON c.id = s.checkpoint ORDER BY s.checkpoint",
            )
            .ctx("prepare")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).ctx("read snapshots")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("read snapshots")
    }
}

/// The model of the checkpoints and their names: ordered maps, each query
/// the plain reading of its contract (what the SQLite implementation must
/// agree with, [`kit::agrees`]).
#[derive(Default)]
pub struct MemoryCheckpoints {
    inner: Mutex<Model>,
}

#[derive(Default)]
struct Model {
    /// number -> row, without its snapshot's name and message.
    rows: BTreeMap<i64, Checkpoint>,
    /// name -> (checkpoint, message).
    snapshots: BTreeMap<String, (i64, Option<String>)>,
}

impl Model {
    /// The row of `n` with its snapshot's name, as a query returns it.
    fn named(&self, c: &Checkpoint) -> Checkpoint {
        let snapshot = self.snapshots.iter().find(|(_, (at, _))| *at == c.checkpoint);
        Checkpoint {
            name: snapshot.map(|(name, _)| name.clone()),
            snapshot_message: snapshot.and_then(|(_, (_, message))| message.clone()),
            ..c.clone()
        }
    }
}

impl MemoryCheckpoints {
    pub fn new() -> MemoryCheckpoints {
        MemoryCheckpoints::default()
    }

    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        crate::poison::lock(&self.inner, "the checkpoint model")
    }
}

impl Checkpoints for MemoryCheckpoints {
    fn seal(&self, c: &Checkpoint) -> MetaResult<()> {
        let mut m = self.model();
        if m.rows.contains_key(&c.checkpoint) {
            return Err(super::refused("record checkpoint", "the checkpoint exists"));
        }
        m.rows.insert(c.checkpoint, Checkpoint { name: None, snapshot_message: None, ..c.clone() });
        Ok(())
    }

    fn set_label(&self, checkpoint: i64, label: &str) -> MetaResult<()> {
        if let Some(c) = self.model().rows.get_mut(&checkpoint) {
            c.label = Some(label.to_string());
        }
        Ok(())
    }

    fn add_snapshot(&self, name: &str, checkpoint: i64, message: Option<&str>, _at: i64) -> MetaResult<()> {
        let mut m = self.model();
        if m.snapshots.contains_key(name) || m.snapshots.values().any(|(at, _)| *at == checkpoint) {
            return Err(super::refused("name a checkpoint", "the name or the checkpoint is taken"));
        }
        m.snapshots.insert(name.to_string(), (checkpoint, message.map(str::to_string)));
        Ok(())
    }

    fn checkpoints(&self) -> MetaResult<Vec<Checkpoint>> {
        let m = self.model();
        Ok(m.rows.values().map(|c| m.named(c)).collect())
    }

    fn checkpoint(&self, n: i64) -> MetaResult<Option<Checkpoint>> {
        let m = self.model();
        Ok(m.rows.get(&n).map(|c| m.named(c)))
    }

    fn checkpoint_back(&self, back: u64) -> MetaResult<Option<Checkpoint>> {
        let m = self.model();
        let Ok(back) = usize::try_from(back) else { return Ok(None) };
        Ok(m.rows.values().rev().nth(back).map(|c| m.named(c)))
    }

    fn newest_sealed_before(&self, ns: i64) -> MetaResult<Option<i64>> {
        let m = self.model();
        Ok(m.rows.values().filter(|c| super::end_of_ms(c.created_at) < ns).map(|c| c.checkpoint).max())
    }

    fn first_sealed_after(&self, turn: i64) -> MetaResult<Option<(i64, i64)>> {
        let m = self.model();
        Ok(m.rows.range(turn.saturating_add(1)..).next().map(|(n, c)| (*n, c.created_at)))
    }

    fn checkpoints_named(&self, word: &str) -> MetaResult<Vec<i64>> {
        let m = self.model();
        let snapshot = m.snapshots.get(word).map(|(n, _)| *n);
        Ok(m.rows
            .values()
            .filter(|c| c.message_id.as_deref() == Some(word) || snapshot == Some(c.checkpoint))
            .map(|c| c.checkpoint)
            .collect())
    }

    fn checkpoint_with_message(&self, id: &str, except: Option<i64>) -> MetaResult<Option<i64>> {
        let m = self.model();
        Ok(m.rows
            .values()
            .find(|c| c.message_id.as_deref() == Some(id) && Some(c.checkpoint) != except)
            .map(|c| c.checkpoint))
    }

    fn checkpoint_with_overlapping_message(&self, id: &str, min: usize) -> MetaResult<Option<(i64, String)>> {
        let m = self.model();
        let overlaps = |other: &str| {
            let (short, long) = if other.len() < id.len() { (other, id) } else { (id, other) };
            other != id && long.starts_with(short) && short.chars().count() >= min
        };
        Ok(m.rows.values().find_map(|c| {
            c.message_id.as_deref().filter(|other| overlaps(other)).map(|other| (c.checkpoint, other.to_string()))
        }))
    }

    fn snapshot(&self, name: &str) -> MetaResult<Option<i64>> {
        let m = self.model();
        Ok(m.snapshots.get(name).map(|(n, _)| *n).filter(|n| m.rows.contains_key(n)))
    }

    fn snapshot_names(&self) -> MetaResult<Vec<(String, i64)>> {
        let m = self.model();
        let mut names: Vec<(String, i64)> = m
            .snapshots
            .iter()
            .filter(|(_, (n, _))| m.rows.contains_key(n))
            .map(|(name, (n, _))| (name.clone(), *n))
            .collect();
        names.sort_by_key(|(_, n)| *n);
        Ok(names)
    }
}

/// The suite every implementation of [`Checkpoints`] passes:
/// [`kit::run_all`] with fixed answers, and [`kit::agrees`], which applies
/// one seeded random sequence of seals, labels and names to two
/// implementations and compares every query.
#[cfg(any(test, feature = "test-kit"))]
pub mod kit {
    use super::*;
    use crate::meta::Reason;

    /// Checkpoint `n`, sealed at `n` seconds, with message id `message`.
    pub fn checkpoint(n: i64, message: Option<&str>) -> Checkpoint {
        Checkpoint {
            checkpoint: n,
            parent: (n > 0).then(|| n - 1),
            message_id: message.map(str::to_string),
            session: Some("s".into()),
            label: None,
            reason: if n == 0 { Reason::Mount } else { Reason::Turn },
            created_at: n * 1000,
            store_bytes_at_start: n * 10,
            // Ignored by a seal: a name is a snapshot's.
            name: Some("ignored".into()),
            snapshot_message: Some("ignored".into()),
            sealed_by: (n % 2 == 1).then_some(1000),
        }
    }

    fn numbers(all: &[Checkpoint]) -> Vec<i64> {
        all.iter().map(|c| c.checkpoint).collect()
    }

    /// Fixed checkpoints and names, and the answers every implementation
    /// must give, on an empty store.
    pub fn run_all(r: &dyn Checkpoints) {
        assert!(r.checkpoints().expect("list").is_empty());
        assert!(r.checkpoint_back(0).expect("back").is_none());
        for (n, message) in [(0, None), (1, Some("m-01")), (2, Some("m-0102")), (3, Some("m-01")), (5, Some("x"))] {
            r.seal(&checkpoint(n, message)).expect("seal");
        }
        assert!(r.seal(&checkpoint(3, None)).is_err(), "a number sealed twice is refused");
        assert_eq!(numbers(&r.checkpoints().expect("list")), vec![0, 1, 2, 3, 5]);
        let one = r.checkpoint(1).expect("read").expect("checkpoint 1");
        assert_eq!((one.name.as_deref(), one.snapshot_message.as_deref()), (None, None), "a seal names nothing");
        assert_eq!((one.parent, one.sealed_by, one.created_at), (Some(0), Some(1000), 1000));
        assert!(r.checkpoint(4).expect("read").is_none());
        assert_eq!(r.checkpoint_back(0).expect("back").map(|c| c.checkpoint), Some(5));
        assert_eq!(r.checkpoint_back(2).expect("back").map(|c| c.checkpoint), Some(2));
        assert!(r.checkpoint_back(5).expect("back").is_none());
        assert!(r.checkpoint_back(u64::MAX).expect("back").is_none());
        // Sealed at n s = created_at n*1000 ms: before `ns` once its ms ended.
        assert_eq!(r.newest_sealed_before(2_001_000_001).expect("before"), Some(2));
        assert_eq!(r.newest_sealed_before(2_001_000_000).expect("before"), Some(1), "the seal's own millisecond");
        assert_eq!(r.newest_sealed_before(0).expect("before"), None);
        assert_eq!(r.first_sealed_after(3).expect("after"), Some((5, 5000)));
        assert_eq!(r.first_sealed_after(5).expect("after"), None);
        // Labels.
        r.set_label(2, "two words").expect("label");
        r.set_label(9, "nobody").expect("label of no checkpoint");
        assert_eq!(r.checkpoint(2).expect("read").and_then(|c| c.label).as_deref(), Some("two words"));
        // Message ids.
        assert_eq!(r.checkpoint_with_message("m-01", None).expect("by message"), Some(1));
        assert_eq!(r.checkpoint_with_message("m-01", Some(1)).expect("by message"), Some(3));
        assert_eq!(r.checkpoint_with_message("m-0", None).expect("by message"), None);
        assert_eq!(r.checkpoint_with_overlapping_message("m-01", 3).expect("overlap"), Some((2, "m-0102".into())));
        assert_eq!(r.checkpoint_with_overlapping_message("m-0102x", 3).expect("overlap"), Some((1, "m-01".into())));
        assert_eq!(r.checkpoint_with_overlapping_message("m-0102x", 5).expect("overlap"), Some((2, "m-0102".into())));
        assert_eq!(r.checkpoint_with_overlapping_message("m-01", 5).expect("overlap"), None, "too short a prefix");
        assert_eq!(r.checkpoint_with_overlapping_message("y", 0).expect("overlap"), None);
        // Snapshot names.
        r.add_snapshot("keep", 3, Some("why"), 7).expect("name");
        assert!(r.add_snapshot("keep", 2, None, 7).is_err(), "a name used twice");
        assert!(r.add_snapshot("again", 3, None, 7).is_err(), "a checkpoint named twice");
        r.add_snapshot("m-01", 5, None, 8).expect("a name like a message id");
        let three = r.checkpoint(3).expect("read").expect("checkpoint 3");
        assert_eq!((three.name.as_deref(), three.snapshot_message.as_deref()), (Some("keep"), Some("why")));
        assert_eq!(r.snapshot("keep").expect("snapshot"), Some(3));
        assert_eq!(r.snapshot("none").expect("snapshot"), None);
        assert_eq!(r.snapshot_names().expect("names"), vec![("keep".into(), 3), ("m-01".into(), 5)]);
        assert_eq!(r.checkpoints_named("m-01").expect("named"), vec![1, 3, 5]);
        assert_eq!(r.checkpoints_named("keep").expect("named"), vec![3]);
        assert!(r.checkpoints_named("m-0").expect("named").is_empty());
    }

    /// One seeded random sequence of seals, labels and snapshot names (a
    /// few message ids that are prefixes of each other, so lookups
    /// collide), applied to `a` and `b` (both empty), then every query
    /// compared.
    pub fn agrees(a: &dyn Checkpoints, b: &dyn Checkpoints, seed: u64) {
        let mut next = crate::meta::kit_random(seed);
        let words = ["m", "m1", "m12", "m2", "é", "éa", "n"];
        for _ in 0..60 {
            let n = next(20) as i64;
            match next(4) {
                0 | 1 => {
                    let message = (next(4) > 0).then(|| words[next(words.len() as u64) as usize]);
                    let c = Checkpoint { created_at: next(20_000) as i64, ..checkpoint(n, message) };
                    assert_eq!(a.seal(&c).is_ok(), b.seal(&c).is_ok(), "seed {seed}: seal {n}");
                }
                2 => {
                    let label = words[next(words.len() as u64) as usize];
                    a.set_label(n, label).expect("label");
                    b.set_label(n, label).expect("label");
                }
                _ => {
                    let name = words[next(words.len() as u64) as usize];
                    let (ra, rb) = (a.add_snapshot(name, n, Some("why"), 1), b.add_snapshot(name, n, Some("why"), 1));
                    assert_eq!(ra.is_ok(), rb.is_ok(), "seed {seed}: add_snapshot {name} {n}");
                }
            }
        }
        let all = |r: &dyn Checkpoints| format!("{:?}", r.checkpoints().expect("list"));
        assert_eq!(all(a), all(b), "seed {seed}: checkpoints");
        assert_eq!(a.snapshot_names().expect("names"), b.snapshot_names().expect("names"), "seed {seed}");
        for n in -1..=21 {
            let q = |r: &dyn Checkpoints| {
                format!(
                    "{:?}",
                    (
                        r.checkpoint(n).expect("q"),
                        r.checkpoint_back(n as u64).expect("q"),
                        r.first_sealed_after(n).expect("q"),
                        r.newest_sealed_before(n * 1_000_000_000).expect("q"),
                        r.newest_sealed_before(n * 1_000_000).expect("q"),
                    )
                )
            };
            assert_eq!(q(a), q(b), "seed {seed}: checkpoint {n}");
        }
        for word in words.iter().chain(&["", "m12x", "x"]) {
            let q = |r: &dyn Checkpoints| {
                (
                    r.checkpoints_named(word).expect("q"),
                    r.checkpoint_with_message(word, None).expect("q"),
                    r.checkpoint_with_message(word, Some(3)).expect("q"),
                    (0..4).map(|min| r.checkpoint_with_overlapping_message(word, min).expect("q")).collect::<Vec<_>>(),
                    r.snapshot(word).expect("q"),
                )
            };
            assert_eq!(q(a), q(b), "seed {seed}: {word:?}");
        }
    }
}
