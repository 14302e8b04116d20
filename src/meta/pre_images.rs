//! The pre-image records, as one area of the metadata: what each
//! (directory, name) entry referred to and what each object was at the
//! start of every turn that changed it, and the objects changed outside
//! the mount. A view of checkpoint K reads, for each entry and object,
//! the earliest record of a turn at or after K; a rewind and fsck read the
//! same. [`PreImages`] is that area's interface: [`Meta`] implements it
//! over SQLite (`entry_pre`, `object_pre`, `tainted`; docs/format.md),
//! [`MemoryPreImages`] is the in-memory model, and [`kit`] is the one
//! suite both pass. The journal hands it out through
//! `Journal::with_pre_images`.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Mutex;

use rusqlite::{OptionalExtension, params};

use super::{
    Ctx, EntryRecord, Meta, MetaResult, OBJECT_COLUMNS, ObjectId, ObjectState, TurnChanges, object_state_from_row,
};

/// The earliest content record of an object at or after a turn: (its turn,
/// the whole content's blake3, the encoded chunk list).
pub type ContentRecord = (i64, Vec<u8>, Vec<u8>);

/// The pre-image records (see the module's comment). Every query answers
/// from the earliest record of a turn at or after `from` (or, for
/// `taint_after`, after it); a turn holds at most one record per entry
/// and per object, the first one made.
pub trait PreImages {
    /// Records that `name` in `dir` referred to `target` (None: no such
    /// name) at the start of `turn`, unless already recorded for that
    /// turn. Returns whether a record was written.
    fn record_entry(
        &self,
        turn: i64,
        dir: ObjectId,
        name: &[u8],
        target: Option<ObjectId>,
        program: Option<&str>,
    ) -> MetaResult<bool>;

    /// Records an object's state at the start of `turn`. The first record
    /// of a turn stays; a later one only gives content to a record made
    /// without it.
    fn record_object(&self, turn: i64, object: ObjectId, s: &ObjectState, program: Option<&str>) -> MetaResult<()>;

    /// Marks `object` as changed outside the mount before checkpoint `turn`.
    fn taint(&self, object: ObjectId, turn: i64) -> MetaResult<()>;

    /// What (dir, name) referred to at its earliest record at or after
    /// `from` (None: no record; Some(None): the name did not exist).
    fn entry_at(&self, dir: ObjectId, name: &[u8], from: i64) -> MetaResult<Option<Option<ObjectId>>>;

    /// The turn of that record.
    fn entry_turn_at(&self, dir: ObjectId, name: &[u8], from: i64) -> MetaResult<Option<i64>>;

    /// For every name of `dir` with a record at or after `from`: what its
    /// earliest such record says (in no particular order).
    fn entries_of_dir(&self, dir: ObjectId, from: i64) -> MetaResult<Vec<(Vec<u8>, Option<ObjectId>)>>;

    /// The object's earliest record at or after `from`.
    fn object_at(&self, object: ObjectId, from: i64) -> MetaResult<Option<ObjectState>>;

    /// The turn of that record.
    fn object_turn_at(&self, object: ObjectId, from: i64) -> MetaResult<Option<i64>>;

    /// The object's earliest record at or after `from` that holds content.
    fn content_at(&self, object: ObjectId, from: i64) -> MetaResult<Option<ContentRecord>>;

    /// The newest turn holding a record of `object`.
    fn last_object_turn(&self, object: ObjectId) -> MetaResult<Option<i64>>;

    /// The earliest checkpoint after `from` before which `object` was
    /// changed outside the mount.
    fn taint_after(&self, object: ObjectId, from: i64) -> MetaResult<Option<i64>>;

    /// The entry records of one turn (in no particular order).
    fn entries_in_turn(&self, turn: i64) -> MetaResult<Vec<EntryRecord>>;

    /// Objects that some name referred to at the start of `turn`, among
    /// the names recorded in that turn (renamed, replaced or removed).
    fn entry_targets_in_turn(&self, turn: i64) -> MetaResult<HashSet<ObjectId>>;

    /// How many records (entries and objects) each program caused in a
    /// turn.
    fn programs_in_turn(&self, turn: i64) -> MetaResult<BTreeMap<String, u64>>;

    /// Everything a turn changed: the directories with entry records in
    /// it, and the objects with object records (in no particular order).
    fn changed_in_turn(&self, turn: i64) -> MetaResult<TurnChanges>;
}

impl Meta {
    /// The turn an aggregate (`MIN(turn)`, `MAX(turn)`) selects; None when
    /// no record matches.
    fn turn_of(&self, sql: &str, args: impl rusqlite::Params, what: &str) -> MetaResult<Option<i64>> {
        self.conn.prepare_cached(sql).ctx("prepare")?.query_row(args, |r| r.get(0)).ctx(what)
    }
}

impl PreImages for Meta {
    fn record_entry(
        &self,
        turn: i64,
        dir: ObjectId,
        name: &[u8],
        target: Option<ObjectId>,
        program: Option<&str>,
    ) -> MetaResult<bool> {
        let n = self
            .conn
            .prepare_cached(
                "INSERT OR IGNORE INTO entry_pre(turn, dir, name, target, program) VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .ctx("prepare")?
            .execute(params![turn, dir.0, name, target.map(|t| t.0), program])
            .ctx("record entry pre-image")?;
        Ok(n > 0)
    }

    /// Also counts the references of a chunk list the record now holds
    /// (`refs.rs`), in the same transaction.
    fn record_object(&self, turn: i64, object: ObjectId, s: &ObjectState, program: Option<&str>) -> MetaResult<()> {
        self.atomic(|m| m.record_object_counted(turn, object, s, program))
    }

    fn taint(&self, object: ObjectId, turn: i64) -> MetaResult<()> {
        self.conn
            .prepare_cached("INSERT OR IGNORE INTO tainted(object, turn) VALUES (?1, ?2)")
            .ctx("prepare")?
            .execute(params![object.0, turn])
            .ctx("record an outside change")?;
        Ok(())
    }

    fn entry_at(&self, dir: ObjectId, name: &[u8], from: i64) -> MetaResult<Option<Option<ObjectId>>> {
        self.conn
            .prepare_cached(
                "SELECT target FROM entry_pre WHERE dir = ?1 AND name = ?2 AND turn >= ?3 ORDER BY turn LIMIT 1",
            )
            .ctx("prepare")?
            .query_row(params![dir.0, name, from], |r| r.get::<_, Option<i64>>(0))
            .optional()
            .map(|o| o.map(|t| t.map(ObjectId)))
            .ctx("read entry pre-image")
    }

    fn entry_turn_at(&self, dir: ObjectId, name: &[u8], from: i64) -> MetaResult<Option<i64>> {
        self.turn_of(
            "SELECT MIN(turn) FROM entry_pre WHERE dir = ?1 AND name = ?2 AND turn >= ?3",
            params![dir.0, name, from],
            "read entry pre-image",
        )
    }

    fn entries_of_dir(&self, dir: ObjectId, from: i64) -> MetaResult<Vec<(Vec<u8>, Option<ObjectId>)>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT name, target FROM entry_pre e WHERE dir = ?1 AND turn >= ?2
                 AND turn = (SELECT MIN(turn) FROM entry_pre f WHERE f.dir = e.dir AND f.name = e.name AND f.turn >= ?2)",
            )
            .ctx("prepare")?;
        let rows = stmt
            .query_map(params![dir.0, from], |r| {
                Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, Option<i64>>(1)?.map(ObjectId)))
            })
            .ctx("list entry pre-images")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("list entry pre-images")
    }

    fn object_at(&self, object: ObjectId, from: i64) -> MetaResult<Option<ObjectState>> {
        let sql =
            format!("SELECT {OBJECT_COLUMNS} FROM object_pre WHERE object = ?1 AND turn >= ?2 ORDER BY turn LIMIT 1");
        self.conn
            .prepare_cached(&sql)
            .ctx("prepare")?
            .query_row(params![object.0, from], |r| object_state_from_row(r, 0))
            .optional()
            .ctx("read object pre-image")
    }

    fn object_turn_at(&self, object: ObjectId, from: i64) -> MetaResult<Option<i64>> {
        self.turn_of(
            "SELECT MIN(turn) FROM object_pre WHERE object = ?1 AND turn >= ?2",
            params![object.0, from],
            "read object pre-image",
        )
    }

    fn content_at(&self, object: ObjectId, from: i64) -> MetaResult<Option<ContentRecord>> {
        self.conn
            .prepare_cached("SELECT turn, content_hash, chunks FROM object_pre WHERE object = ?1 AND turn >= ?2 AND chunks IS NOT NULL ORDER BY turn LIMIT 1")
            .ctx("prepare")?
            .query_row(params![object.0, from], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()
            .ctx("read content pre-image")
    }

    fn last_object_turn(&self, object: ObjectId) -> MetaResult<Option<i64>> {
        self.turn_of("SELECT MAX(turn) FROM object_pre WHERE object = ?1", params![object.0], "read object pre-image")
    }

    fn taint_after(&self, object: ObjectId, from: i64) -> MetaResult<Option<i64>> {
        self.turn_of(
            "SELECT MIN(turn) FROM tainted WHERE object = ?1 AND turn > ?2",
            params![object.0, from],
            "read outside changes",
        )
    }

    fn entries_in_turn(&self, turn: i64) -> MetaResult<Vec<EntryRecord>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT dir, name, target, program FROM entry_pre WHERE turn = ?1")
            .ctx("prepare")?;
        let rows = stmt
            .query_map([turn], |r| {
                Ok(EntryRecord {
                    turn,
                    dir: ObjectId(r.get(0)?),
                    name: r.get(1)?,
                    target: r.get::<_, Option<i64>>(2)?.map(ObjectId),
                    program: r.get(3)?,
                })
            })
            .ctx("list entries of turn")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("list entries of turn")
    }

    fn entry_targets_in_turn(&self, turn: i64) -> MetaResult<HashSet<ObjectId>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT target FROM entry_pre WHERE turn = ?1 AND target IS NOT NULL")
            .ctx("prepare")?;
        let rows = stmt.query_map([turn], |r| r.get(0).map(ObjectId)).ctx("list entry targets of turn")?;
        rows.collect::<rusqlite::Result<_>>().ctx("list entry targets of turn")
    }

    fn programs_in_turn(&self, turn: i64) -> MetaResult<BTreeMap<String, u64>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT program, COUNT(*) FROM (SELECT program FROM entry_pre WHERE turn = ?1
                     UNION ALL SELECT program FROM object_pre WHERE turn = ?1)
                 WHERE program IS NOT NULL GROUP BY program",
            )
            .ctx("prepare")?;
        let rows =
            stmt.query_map([turn], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64))).ctx("count programs of turn")?;
        rows.collect::<rusqlite::Result<_>>().ctx("count programs of turn")
    }

    fn changed_in_turn(&self, turn: i64) -> MetaResult<TurnChanges> {
        let mut stmt = self.conn.prepare_cached("SELECT DISTINCT dir FROM entry_pre WHERE turn = ?1").ctx("prepare")?;
        let dirs = stmt
            .query_map([turn], |r| r.get(0).map(ObjectId))
            .ctx("list changed directories")?
            .collect::<rusqlite::Result<Vec<_>>>()
            .ctx("list changed directories")?;
        let mut stmt =
            self.conn.prepare_cached("SELECT object, kind FROM object_pre WHERE turn = ?1").ctx("prepare")?;
        let objects = stmt
            .query_map([turn], |r| Ok((ObjectId(r.get(0)?), r.get(1)?)))
            .ctx("list changed objects")?
            .collect::<rusqlite::Result<Vec<_>>>()
            .ctx("list changed objects")?;
        Ok(TurnChanges { dirs, objects })
    }
}

/// The model of the pre-image records: ordered maps, each query the plain
/// reading of its contract. What the SQLite implementation must agree with
/// ([`kit::agrees`]), and a store of records for tests that need no
/// database.
#[derive(Default)]
pub struct MemoryPreImages {
    inner: Mutex<Model>,
}

#[derive(Default)]
struct Model {
    /// (dir, name) -> turn -> target.
    entries: BTreeMap<(ObjectId, Vec<u8>), BTreeMap<i64, Option<ObjectId>>>,
    /// object -> turn -> state.
    objects: BTreeMap<ObjectId, BTreeMap<i64, ObjectState>>,
    /// The program of each record, where one was given: (turn, "entry" or
    /// "object", its key).
    programs: BTreeMap<(i64, Record), String>,
    /// (object, checkpoint).
    tainted: BTreeSet<(ObjectId, i64)>,
}

/// A record of the model, for its program.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Record {
    Entry(ObjectId, Vec<u8>),
    Object(ObjectId),
}

impl MemoryPreImages {
    pub fn new() -> MemoryPreImages {
        MemoryPreImages::default()
    }

    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        crate::poison::lock(&self.inner, "the pre-image model")
    }
}

impl PreImages for MemoryPreImages {
    fn record_entry(
        &self,
        turn: i64,
        dir: ObjectId,
        name: &[u8],
        target: Option<ObjectId>,
        program: Option<&str>,
    ) -> MetaResult<bool> {
        let mut m = self.model();
        let turns = m.entries.entry((dir, name.to_vec())).or_default();
        if turns.contains_key(&turn) {
            return Ok(false);
        }
        turns.insert(turn, target);
        if let Some(p) = program {
            m.programs.insert((turn, Record::Entry(dir, name.to_vec())), p.to_string());
        }
        Ok(true)
    }

    fn record_object(&self, turn: i64, object: ObjectId, s: &ObjectState, program: Option<&str>) -> MetaResult<()> {
        let mut m = self.model();
        let turns = m.objects.entry(object).or_default();
        match turns.get_mut(&turn) {
            None => {
                turns.insert(turn, s.clone());
                if let Some(p) = program {
                    m.programs.insert((turn, Record::Object(object)), p.to_string());
                }
            }
            Some(first) if first.content.is_none() => first.content = s.content.clone(),
            Some(_) => {}
        }
        Ok(())
    }

    fn taint(&self, object: ObjectId, turn: i64) -> MetaResult<()> {
        self.model().tainted.insert((object, turn));
        Ok(())
    }

    fn entry_at(&self, dir: ObjectId, name: &[u8], from: i64) -> MetaResult<Option<Option<ObjectId>>> {
        let m = self.model();
        Ok(m.entries.get(&(dir, name.to_vec())).and_then(|t| t.range(from..).next()).map(|(_, target)| *target))
    }

    fn entry_turn_at(&self, dir: ObjectId, name: &[u8], from: i64) -> MetaResult<Option<i64>> {
        let m = self.model();
        Ok(m.entries.get(&(dir, name.to_vec())).and_then(|t| t.range(from..).next()).map(|(turn, _)| *turn))
    }

    fn entries_of_dir(&self, dir: ObjectId, from: i64) -> MetaResult<Vec<(Vec<u8>, Option<ObjectId>)>> {
        let m = self.model();
        Ok(m.entries
            .range((dir, Vec::new())..)
            .take_while(|((d, _), _)| *d == dir)
            .filter_map(|((_, name), turns)| turns.range(from..).next().map(|(_, target)| (name.clone(), *target)))
            .collect())
    }

    fn object_at(&self, object: ObjectId, from: i64) -> MetaResult<Option<ObjectState>> {
        let m = self.model();
        Ok(m.objects.get(&object).and_then(|t| t.range(from..).next()).map(|(_, s)| s.clone()))
    }

    fn object_turn_at(&self, object: ObjectId, from: i64) -> MetaResult<Option<i64>> {
        let m = self.model();
        Ok(m.objects.get(&object).and_then(|t| t.range(from..).next()).map(|(turn, _)| *turn))
    }

    fn content_at(&self, object: ObjectId, from: i64) -> MetaResult<Option<ContentRecord>> {
        let m = self.model();
        Ok(m.objects.get(&object).and_then(|t| {
            t.range(from..)
                .find_map(|(turn, s)| s.content.as_ref().map(|(hash, chunks)| (*turn, hash.clone(), chunks.clone())))
        }))
    }

    fn last_object_turn(&self, object: ObjectId) -> MetaResult<Option<i64>> {
        Ok(self.model().objects.get(&object).and_then(|t| t.keys().next_back().copied()))
    }

    fn taint_after(&self, object: ObjectId, from: i64) -> MetaResult<Option<i64>> {
        let m = self.model();
        Ok(m.tainted
            .range((object, from.saturating_add(1))..)
            .take_while(|(o, _)| *o == object)
            .map(|(_, t)| *t)
            .next())
    }

    fn entries_in_turn(&self, turn: i64) -> MetaResult<Vec<EntryRecord>> {
        let m = self.model();
        Ok(m.entries
            .iter()
            .filter_map(|((dir, name), turns)| {
                turns.get(&turn).map(|target| EntryRecord {
                    turn,
                    dir: *dir,
                    name: name.clone(),
                    target: *target,
                    program: m.programs.get(&(turn, Record::Entry(*dir, name.clone()))).cloned(),
                })
            })
            .collect())
    }

    fn entry_targets_in_turn(&self, turn: i64) -> MetaResult<HashSet<ObjectId>> {
        let m = self.model();
        Ok(m.entries.values().filter_map(|turns| turns.get(&turn).copied().flatten()).collect())
    }

    fn programs_in_turn(&self, turn: i64) -> MetaResult<BTreeMap<String, u64>> {
        let mut counts = BTreeMap::new();
        let m = self.model();
        let records = m.programs.range((turn, Record::Entry(ObjectId(i64::MIN), Vec::new()))..);
        for (_, program) in records.take_while(|((t, _), _)| *t == turn) {
            *counts.entry(program.clone()).or_insert(0) += 1;
        }
        Ok(counts)
    }

    fn changed_in_turn(&self, turn: i64) -> MetaResult<TurnChanges> {
        let m = self.model();
        let dirs: BTreeSet<ObjectId> =
            m.entries.iter().filter(|(_, turns)| turns.contains_key(&turn)).map(|((dir, _), _)| *dir).collect();
        let objects =
            m.objects.iter().filter_map(|(object, turns)| turns.get(&turn).map(|s| (*object, s.kind))).collect();
        Ok(TurnChanges { dirs: dirs.into_iter().collect(), objects })
    }
}

/// The suite every implementation of [`PreImages`] passes: [`kit::run_all`]
/// with fixed answers, and [`kit::agrees`], which applies one seeded random
/// sequence of records to two implementations and compares every query.
#[cfg(any(test, feature = "test-kit"))]
pub mod kit {
    use super::*;

    fn state(size: u64, content: Option<u8>) -> ObjectState {
        ObjectState {
            kind: 1,
            perm: 0o644,
            uid: 1000,
            gid: 1000,
            rdev: 0,
            size,
            mtime_ns: size as i64 * 1000,
            ctime_ns: size as i64 * 1000 + 1,
            nlink: 1,
            target: None,
            xattrs: Vec::new(),
            content: content.map(|b| (vec![b; 32], vec![b; 8])),
        }
    }

    /// Fixed records and the answers every implementation must give, on an
    /// empty store of records.
    pub fn run_all(r: &dyn PreImages) {
        let (dir, other, a, b) = (ObjectId(1), ObjectId(2), ObjectId(10), ObjectId(11));
        // Entries: the first record of a turn stays.
        assert!(r.record_entry(3, dir, b"x", Some(a), Some("sh")).expect("record"));
        assert!(!r.record_entry(3, dir, b"x", Some(b), None).expect("record again"), "a second record of a turn");
        assert!(r.record_entry(5, dir, b"x", None, None).expect("record"));
        assert!(r.record_entry(4, dir, b"y", None, None).expect("record"));
        assert!(r.record_entry(4, other, b"x", Some(b), None).expect("record"));
        assert_eq!(r.entry_at(dir, b"x", 0).expect("entry_at"), Some(Some(a)));
        assert_eq!(r.entry_at(dir, b"x", 3).expect("entry_at"), Some(Some(a)), "a record of turn `from` counts");
        assert_eq!(r.entry_at(dir, b"x", 4).expect("entry_at"), Some(None));
        assert_eq!(r.entry_at(dir, b"x", 6).expect("entry_at"), None);
        assert_eq!(r.entry_at(dir, b"z", 0).expect("entry_at"), None);
        assert_eq!(r.entry_turn_at(dir, b"x", 4).expect("entry_turn_at"), Some(5));
        assert_eq!(r.entry_turn_at(dir, b"x", 6).expect("entry_turn_at"), None);
        let mut listed = r.entries_of_dir(dir, 4).expect("entries_of_dir");
        listed.sort();
        assert_eq!(listed, vec![(b"x".to_vec(), None), (b"y".to_vec(), None)]);
        let mut listed = r.entries_of_dir(dir, 0).expect("entries_of_dir");
        listed.sort();
        assert_eq!(listed, vec![(b"x".to_vec(), Some(a)), (b"y".to_vec(), None)]);
        assert!(r.entries_of_dir(dir, 6).expect("entries_of_dir").is_empty());
        // Objects: a later record of the turn only adds missing content.
        r.record_object(2, a, &state(1, None), None).expect("record");
        r.record_object(2, a, &state(99, Some(7)), None).expect("give content");
        r.record_object(2, a, &state(98, Some(8)), None).expect("record again");
        r.record_object(4, a, &state(2, None), None).expect("record");
        r.record_object(6, a, &state(3, Some(9)), Some("cc")).expect("record");
        let first = r.object_at(a, 0).expect("object_at").expect("a record");
        assert_eq!((first.size, first.content.as_ref().map(|c| c.0[0])), (1, Some(7)));
        assert_eq!(r.object_at(a, 3).expect("object_at").map(|s| s.size), Some(2));
        assert_eq!(r.object_at(a, 7).expect("object_at"), None);
        assert_eq!(r.object_turn_at(a, 3).expect("object_turn_at"), Some(4));
        assert_eq!(r.object_turn_at(b, 0).expect("object_turn_at"), None);
        assert_eq!(r.content_at(a, 3).expect("content_at"), Some((6, vec![9; 32], vec![9; 8])), "content skips");
        assert_eq!(r.content_at(a, 0).expect("content_at").map(|c| c.0), Some(2));
        assert_eq!(r.content_at(a, 7).expect("content_at"), None);
        assert_eq!(r.last_object_turn(a).expect("last_object_turn"), Some(6));
        assert_eq!(r.last_object_turn(b).expect("last_object_turn"), None);
        // Outside changes: strictly after `from`.
        r.taint(a, 4).expect("taint");
        r.taint(a, 4).expect("taint again");
        r.taint(a, 8).expect("taint");
        r.taint(b, 1).expect("taint");
        assert_eq!(r.taint_after(a, 0).expect("taint_after"), Some(4));
        assert_eq!(r.taint_after(a, 4).expect("taint_after"), Some(8));
        assert_eq!(r.taint_after(a, 8).expect("taint_after"), None);
        assert_eq!(r.taint_after(ObjectId(12), 0).expect("taint_after"), None);
        // One turn's records.
        let mut entries: Vec<_> = r
            .entries_in_turn(4)
            .expect("entries_in_turn")
            .into_iter()
            .map(|e| (e.turn, e.dir, e.name, e.target, e.program))
            .collect();
        entries.sort();
        assert_eq!(entries, vec![(4, dir, b"y".to_vec(), None, None), (4, other, b"x".to_vec(), Some(b), None)]);
        let first: Vec<_> = r.entries_in_turn(3).expect("entries_in_turn").into_iter().map(|e| e.program).collect();
        assert_eq!(first, vec![Some("sh".to_string())], "the first record's program stays");
        assert!(r.entries_in_turn(9).expect("entries_in_turn").is_empty());
        assert_eq!(r.entry_targets_in_turn(4).expect("targets"), HashSet::from([b]));
        assert_eq!(r.entry_targets_in_turn(5).expect("targets"), HashSet::new(), "a removed name targets nothing");
        assert_eq!(r.programs_in_turn(3).expect("programs"), BTreeMap::from([("sh".to_string(), 1)]));
        assert_eq!(r.programs_in_turn(6).expect("programs"), BTreeMap::from([("cc".to_string(), 1)]));
        assert!(r.programs_in_turn(4).expect("programs").is_empty());
        let mut changed = r.changed_in_turn(4).expect("changed_in_turn");
        changed.dirs.sort();
        assert_eq!((changed.dirs, changed.objects), (vec![dir, other], vec![(a, 1)]));
    }

    /// One seeded random sequence of records (a few directories, names,
    /// objects and turns, so records collide), applied to `a` and `b`
    /// (both empty), then every query at every turn compared.
    pub fn agrees(a: &dyn PreImages, b: &dyn PreImages, seed: u64) {
        let mut next = crate::meta::kit_random(seed);
        const TURNS: i64 = 8;
        let names: [&[u8]; 3] = [b"a", b"b", b"\xffc"];
        for _ in 0..200 {
            let turn = next(TURNS as u64) as i64;
            let (dir, object) = (ObjectId(1 + next(2) as i64), ObjectId(10 + next(4) as i64));
            let program = [None, Some("sh"), Some("cc")][next(3) as usize];
            match next(3) {
                0 => {
                    let name = names[next(3) as usize];
                    let target = (next(3) > 0).then_some(object);
                    let added = (
                        a.record_entry(turn, dir, name, target, program),
                        b.record_entry(turn, dir, name, target, program),
                    );
                    assert_eq!(added.0.expect("record"), added.1.expect("record"), "seed {seed}: record_entry");
                }
                1 => {
                    let mut s = state(next(1000), (next(2) == 0).then(|| next(256) as u8));
                    s.kind = 1 + next(2) as u8;
                    a.record_object(turn, object, &s, program).expect("record");
                    b.record_object(turn, object, &s, program).expect("record");
                }
                _ => {
                    a.taint(object, turn).expect("taint");
                    b.taint(object, turn).expect("taint");
                }
            }
        }
        let sorted = |mut v: Vec<(Vec<u8>, Option<ObjectId>)>| {
            v.sort();
            v
        };
        for turn in -1..=TURNS {
            let q = |r: &dyn PreImages| {
                let mut entries: Vec<_> = r
                    .entries_in_turn(turn)
                    .expect("q")
                    .into_iter()
                    .map(|e| (e.turn, e.dir, e.name, e.target, e.program))
                    .collect();
                entries.sort();
                let mut changed = r.changed_in_turn(turn).expect("q");
                changed.dirs.sort();
                changed.objects.sort();
                let targets: BTreeSet<ObjectId> = r.entry_targets_in_turn(turn).expect("q").into_iter().collect();
                (entries, targets, r.programs_in_turn(turn).expect("q"), changed.dirs, changed.objects)
            };
            assert_eq!(q(a), q(b), "seed {seed}: the records of turn {turn}");
        }
        for from in -1..=TURNS {
            for dir in [ObjectId(1), ObjectId(2)] {
                let (la, lb) = (a.entries_of_dir(dir, from).expect("list"), b.entries_of_dir(dir, from).expect("list"));
                assert_eq!(sorted(la), sorted(lb), "seed {seed}: entries_of_dir({dir:?}, {from})");
                for name in names {
                    let q = |r: &dyn PreImages| {
                        (r.entry_at(dir, name, from).expect("q"), r.entry_turn_at(dir, name, from).expect("q"))
                    };
                    assert_eq!(q(a), q(b), "seed {seed}: entry ({dir:?}, {name:?}) at {from}");
                }
            }
            for object in (10..14).map(ObjectId) {
                let q = |r: &dyn PreImages| {
                    (
                        r.object_at(object, from).expect("q"),
                        r.object_turn_at(object, from).expect("q"),
                        r.content_at(object, from).expect("q"),
                        r.last_object_turn(object).expect("q"),
                        r.taint_after(object, from).expect("q"),
                    )
                };
                assert_eq!(q(a), q(b), "seed {seed}: object {object:?} at {from}");
            }
        }
    }
}
