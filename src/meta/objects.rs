//! Objects and their handles, as one area of the metadata: the persistent
//! object ids (one file, directory or symlink, the same across renames
//! and remounts), the backing inode's file handle each id stands for, its
//! kind, the turn it was created in, and which objects are in their attic
//! slot. [`Objects`] is that area's interface: [`Meta`] implements it over
//! SQLite (`objects`, `attic`; docs/format.md), [`MemoryObjects`] is the
//! in-memory model, and [`kit`] is the one suite both pass. The journal
//! hands it out through `Journal::with_objects`. A handle names at most
//! one object: giving it to one takes it from another (whose inode died
//! and whose number the filesystem reused).

use std::collections::BTreeMap;
use std::sync::Mutex;

use rusqlite::{OptionalExtension, params};

use super::{Ctx, Meta, MetaResult, ObjectId};

/// Objects and their handles (see the module's comment).
pub trait Objects {
    /// The object id of a handle, if it was ever recorded.
    fn object_by_handle(&self, handle: &[u8]) -> MetaResult<Option<ObjectId>>;

    /// The object id of a handle, recording it (under the next id) if new.
    fn intern_object(&self, handle: &[u8], kind: u8) -> MetaResult<ObjectId>;

    /// Notes that an object was created in `turn` (the first note stays).
    fn set_born(&self, id: ObjectId, turn: i64) -> MetaResult<()>;

    /// Notes that object `id` is in its attic slot since `turn` (None:
    /// found there when the table was first filled).
    fn attic_put(&self, id: ObjectId, turn: Option<i64>) -> MetaResult<()>;

    /// Notes that object `id` left its attic slot.
    fn attic_take(&self, id: ObjectId) -> MetaResult<()>;

    /// Whether object `id` is in its attic slot, and since which turn.
    fn attic_since(&self, id: ObjectId) -> MetaResult<Option<Option<i64>>>;

    /// Every object in its attic slot, by id.
    fn attic_objects(&self) -> MetaResult<Vec<ObjectId>>;

    /// The objects that moved into their attic slot in `turn` or later, by
    /// id (not those found there without a turn).
    fn attic_objects_since(&self, turn: i64) -> MetaResult<Vec<ObjectId>>;

    /// The turn an object was created in, if recorded.
    fn born_turn(&self, id: ObjectId) -> MetaResult<Option<i64>>;

    /// Records an object under a given id (ids are handed out by the
    /// journal); nothing if the id or the handle has a row already.
    fn insert_object(&self, id: ObjectId, handle: &[u8], kind: u8) -> MetaResult<()>;

    /// Records an object just created, under a given id. Its handle names
    /// no other living inode, so a row holding it names a dead one (the
    /// filesystem reused its number and generation): that row gives the
    /// handle up, or the insert would be ignored and the new id would have
    /// no row. Repeating it changes nothing: once the id has its row, the
    /// handle may have moved on (a rewind rebinds).
    fn insert_new_object(&self, id: ObjectId, handle: &[u8], kind: u8) -> MetaResult<()>;

    /// The largest object id in use (0: none).
    fn max_object_id(&self) -> MetaResult<i64>;

    /// The kind code an object was recorded with.
    fn object_kind(&self, id: ObjectId) -> MetaResult<Option<u8>>;

    /// The handle of an object (None once forgotten or given up).
    fn object_handle(&self, id: ObjectId) -> MetaResult<Option<Vec<u8>>>;

    /// Points an object id at a new backing inode (a rewind recreated
    /// it), taking the handle from any other object.
    fn set_object_handle(&self, id: ObjectId, handle: &[u8]) -> MetaResult<()>;

    /// Every object row: (id, handle), in no particular order.
    fn object_handles(&self) -> MetaResult<Vec<(ObjectId, Option<Vec<u8>>)>>;
}

impl Objects for Meta {
    fn object_by_handle(&self, handle: &[u8]) -> MetaResult<Option<ObjectId>> {
        self.conn
            .prepare_cached("SELECT id FROM objects WHERE handle = ?1")
            .ctx("prepare")?
            .query_row([handle], |r| r.get(0).map(ObjectId))
            .optional()
            .ctx("find object")
    }

    fn intern_object(&self, handle: &[u8], kind: u8) -> MetaResult<ObjectId> {
        if let Some(id) = self.object_by_handle(handle)? {
            return Ok(id);
        }
        self.conn
            .prepare_cached("INSERT INTO objects(handle, kind) VALUES (?1, ?2)")
            .ctx("prepare")?
            .execute(params![handle, kind])
            .ctx("record object")?;
        Ok(ObjectId(self.conn.last_insert_rowid()))
    }

    fn set_born(&self, id: ObjectId, turn: i64) -> MetaResult<()> {
        self.conn
            .prepare_cached("UPDATE objects SET born_turn = ?1 WHERE id = ?2 AND born_turn IS NULL")
            .ctx("prepare")?
            .execute(params![turn, id.0])
            .ctx("record creation turn")?;
        Ok(())
    }

    fn attic_put(&self, id: ObjectId, turn: Option<i64>) -> MetaResult<()> {
        self.conn
            .prepare_cached("INSERT OR REPLACE INTO attic(object, since_turn) VALUES (?1, ?2)")
            .ctx("prepare")?
            .execute(params![id.0, turn])
            .ctx("record a move into the attic")?;
        Ok(())
    }

    fn attic_take(&self, id: ObjectId) -> MetaResult<()> {
        self.conn
            .prepare_cached("DELETE FROM attic WHERE object = ?1")
            .ctx("prepare")?
            .execute([id.0])
            .ctx("record a move out of the attic")?;
        Ok(())
    }

    fn attic_since(&self, id: ObjectId) -> MetaResult<Option<Option<i64>>> {
        self.conn
            .prepare_cached("SELECT since_turn FROM attic WHERE object = ?1")
            .ctx("prepare")?
            .query_row([id.0], |r| r.get::<_, Option<i64>>(0))
            .optional()
            .ctx("read the attic table")
    }

    fn attic_objects(&self) -> MetaResult<Vec<ObjectId>> {
        let mut stmt = self.conn.prepare_cached("SELECT object FROM attic ORDER BY object").ctx("prepare")?;
        let rows = stmt.query_map([], |r| Ok(ObjectId(r.get(0)?))).ctx("read the attic table")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("read the attic table")
    }

    fn attic_objects_since(&self, turn: i64) -> MetaResult<Vec<ObjectId>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT object FROM attic WHERE since_turn >= ?1 ORDER BY object")
            .ctx("prepare")?;
        let rows = stmt.query_map([turn], |r| Ok(ObjectId(r.get(0)?))).ctx("read the attic table")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("read the attic table")
    }

    fn born_turn(&self, id: ObjectId) -> MetaResult<Option<i64>> {
        self.conn
            .prepare_cached("SELECT born_turn FROM objects WHERE id = ?1")
            .ctx("prepare")?
            .query_row([id.0], |r| r.get::<_, Option<i64>>(0))
            .optional()
            .map(Option::flatten)
            .ctx("read creation turn")
    }

    fn insert_object(&self, id: ObjectId, handle: &[u8], kind: u8) -> MetaResult<()> {
        self.conn
            .prepare_cached("INSERT OR IGNORE INTO objects(id, handle, kind) VALUES (?1, ?2, ?3)")
            .ctx("prepare")?
            .execute(params![id.0, handle, kind])
            .ctx("record object")?;
        Ok(())
    }

    fn insert_new_object(&self, id: ObjectId, handle: &[u8], kind: u8) -> MetaResult<()> {
        self.conn
            .prepare_cached(
                "UPDATE objects SET handle = NULL WHERE handle = ?1 AND id != ?2 \
                 AND NOT EXISTS (SELECT 1 FROM objects WHERE id = ?2)",
            )
            .ctx("prepare")?
            .execute(params![handle, id.0])
            .ctx("release a dead object's handle")?;
        self.insert_object(id, handle, kind)
    }

    fn max_object_id(&self) -> MetaResult<i64> {
        self.row("SELECT COALESCE(MAX(id), 0) FROM objects", [], |r| r.get(0)).ctx("read object ids")
    }

    fn object_kind(&self, id: ObjectId) -> MetaResult<Option<u8>> {
        self.conn
            .prepare_cached("SELECT kind FROM objects WHERE id = ?1")
            .ctx("prepare")?
            .query_row([id.0], |r| r.get(0))
            .optional()
            .ctx("read object kind")
    }

    fn object_handle(&self, id: ObjectId) -> MetaResult<Option<Vec<u8>>> {
        self.conn
            .prepare_cached("SELECT handle FROM objects WHERE id = ?1")
            .ctx("prepare")?
            .query_row([id.0], |r| r.get(0))
            .optional()
            .ctx("read object")
            .map(Option::flatten)
    }

    fn set_object_handle(&self, id: ObjectId, handle: &[u8]) -> MetaResult<()> {
        self.exec("UPDATE objects SET handle = NULL WHERE handle = ?1 AND id != ?2", params![handle, id.0])
            .ctx("release handle")?;
        self.exec("UPDATE objects SET handle = ?1 WHERE id = ?2", params![handle, id.0]).ctx("rebind object")?;
        Ok(())
    }

    fn object_handles(&self) -> MetaResult<Vec<(ObjectId, Option<Vec<u8>>)>> {
        let mut stmt = self.conn.prepare_cached("SELECT id, handle FROM objects").ctx("prepare")?;
        let rows = stmt.query_map([], |r| Ok((ObjectId(r.get(0)?), r.get(1)?))).ctx("list objects")?;
        rows.collect::<rusqlite::Result<Vec<_>>>().ctx("list objects")
    }
}

/// The model of the objects: ordered maps, each query the plain reading
/// of its contract (what the SQLite implementation must agree with,
/// [`kit::agrees`]).
#[derive(Default)]
pub struct MemoryObjects {
    inner: Mutex<Model>,
}

#[derive(Clone)]
struct Row {
    handle: Option<Vec<u8>>,
    kind: u8,
    born: Option<i64>,
}

#[derive(Default)]
struct Model {
    rows: BTreeMap<ObjectId, Row>,
    attic: BTreeMap<ObjectId, Option<i64>>,
}

impl Model {
    fn holder(&self, handle: &[u8]) -> Option<ObjectId> {
        self.rows.iter().find(|(_, r)| r.handle.as_deref() == Some(handle)).map(|(id, _)| *id)
    }

    fn give_up(&mut self, handle: &[u8], except: ObjectId) {
        for (id, r) in self.rows.iter_mut() {
            if *id != except && r.handle.as_deref() == Some(handle) {
                r.handle = None;
            }
        }
    }

    fn insert(&mut self, id: ObjectId, handle: &[u8], kind: u8) {
        if !self.rows.contains_key(&id) && self.holder(handle).is_none() {
            self.rows.insert(id, Row { handle: Some(handle.to_vec()), kind, born: None });
        }
    }
}

impl MemoryObjects {
    pub fn new() -> MemoryObjects {
        MemoryObjects::default()
    }

    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        crate::poison::lock(&self.inner, "the object model")
    }
}

impl Objects for MemoryObjects {
    fn object_by_handle(&self, handle: &[u8]) -> MetaResult<Option<ObjectId>> {
        Ok(self.model().holder(handle))
    }

    fn intern_object(&self, handle: &[u8], kind: u8) -> MetaResult<ObjectId> {
        let mut m = self.model();
        if let Some(id) = m.holder(handle) {
            return Ok(id);
        }
        let id = ObjectId(m.rows.keys().next_back().map_or(1, |last| last.0 + 1));
        m.insert(id, handle, kind);
        Ok(id)
    }

    fn set_born(&self, id: ObjectId, turn: i64) -> MetaResult<()> {
        if let Some(r) = self.model().rows.get_mut(&id) {
            r.born.get_or_insert(turn);
        }
        Ok(())
    }

    fn attic_put(&self, id: ObjectId, turn: Option<i64>) -> MetaResult<()> {
        self.model().attic.insert(id, turn);
        Ok(())
    }

    fn attic_take(&self, id: ObjectId) -> MetaResult<()> {
        self.model().attic.remove(&id);
        Ok(())
    }

    fn attic_since(&self, id: ObjectId) -> MetaResult<Option<Option<i64>>> {
        Ok(self.model().attic.get(&id).copied())
    }

    fn attic_objects(&self) -> MetaResult<Vec<ObjectId>> {
        Ok(self.model().attic.keys().copied().collect())
    }

    fn attic_objects_since(&self, turn: i64) -> MetaResult<Vec<ObjectId>> {
        let mut ids: Vec<ObjectId> = self
            .model()
            .attic
            .iter()
            .filter(|(_, since)| since.is_some_and(|t| t >= turn))
            .map(|(id, _)| *id)
            .collect();
        ids.sort();
        Ok(ids)
    }

    fn born_turn(&self, id: ObjectId) -> MetaResult<Option<i64>> {
        Ok(self.model().rows.get(&id).and_then(|r| r.born))
    }

    fn insert_object(&self, id: ObjectId, handle: &[u8], kind: u8) -> MetaResult<()> {
        self.model().insert(id, handle, kind);
        Ok(())
    }

    fn insert_new_object(&self, id: ObjectId, handle: &[u8], kind: u8) -> MetaResult<()> {
        let mut m = self.model();
        if !m.rows.contains_key(&id) {
            m.give_up(handle, id);
        }
        m.insert(id, handle, kind);
        Ok(())
    }

    fn max_object_id(&self) -> MetaResult<i64> {
        Ok(self.model().rows.keys().next_back().map_or(0, |id| id.0))
    }

    fn object_kind(&self, id: ObjectId) -> MetaResult<Option<u8>> {
        Ok(self.model().rows.get(&id).map(|r| r.kind))
    }

    fn object_handle(&self, id: ObjectId) -> MetaResult<Option<Vec<u8>>> {
        Ok(self.model().rows.get(&id).and_then(|r| r.handle.clone()))
    }

    fn set_object_handle(&self, id: ObjectId, handle: &[u8]) -> MetaResult<()> {
        let mut m = self.model();
        m.give_up(handle, id);
        if let Some(r) = m.rows.get_mut(&id) {
            r.handle = Some(handle.to_vec());
        }
        Ok(())
    }

    fn object_handles(&self) -> MetaResult<Vec<(ObjectId, Option<Vec<u8>>)>> {
        Ok(self.model().rows.iter().map(|(id, r)| (*id, r.handle.clone())).collect())
    }
}

/// The suite every implementation of [`Objects`] passes: [`kit::run_all`]
/// with fixed answers, and [`kit::agrees`], which applies one seeded
/// random sequence to two implementations and compares every query.
#[cfg(any(test, feature = "test-kit"))]
pub mod kit {
    use super::*;

    fn sorted(r: &dyn Objects) -> Vec<(ObjectId, Option<Vec<u8>>)> {
        let mut all = r.object_handles().expect("list");
        all.sort();
        all
    }

    /// Fixed objects, and the answers every implementation must give, on
    /// an empty store.
    pub fn run_all(r: &dyn Objects) {
        assert_eq!(r.max_object_id().expect("max"), 0);
        assert_eq!(r.object_by_handle(b"h1").expect("find"), None);
        let a = r.intern_object(b"h1", 1).expect("intern");
        assert_eq!(r.intern_object(b"h1", 2).expect("intern again"), a, "a known handle keeps its id");
        let b = r.intern_object(b"\xffh2", 2).expect("intern");
        assert!(b > a, "ids grow");
        assert_eq!((r.object_kind(a).expect("kind"), r.object_kind(b).expect("kind")), (Some(1), Some(2)));
        assert_eq!(r.object_kind(ObjectId(99)).expect("kind"), None);
        // Ids the journal hands out.
        r.insert_object(ObjectId(10), b"h10", 1).expect("insert");
        r.insert_object(ObjectId(10), b"other", 3).expect("insert again");
        r.insert_object(ObjectId(11), b"h10", 1).expect("a handle in use");
        assert_eq!(r.object_handle(ObjectId(10)).expect("handle"), Some(b"h10".to_vec()));
        assert_eq!(r.object_kind(ObjectId(10)).expect("kind"), Some(1), "a repeated insert changes nothing");
        assert_eq!(r.object_kind(ObjectId(11)).expect("kind"), None, "a handle in use is not inserted twice");
        assert_eq!(r.max_object_id().expect("max"), 10);
        // A new object takes the handle of a dead one.
        r.insert_new_object(ObjectId(12), b"h10", 1).expect("insert new");
        assert_eq!(r.object_by_handle(b"h10").expect("find"), Some(ObjectId(12)));
        assert_eq!(r.object_handle(ObjectId(10)).expect("handle"), None, "the dead object gave it up");
        r.insert_new_object(ObjectId(12), b"h1", 1).expect("insert new again");
        assert_eq!(r.object_by_handle(b"h1").expect("find"), Some(a), "a repeated insert takes nothing");
        // A rebind.
        r.set_object_handle(ObjectId(10), b"h1").expect("rebind");
        assert_eq!(r.object_by_handle(b"h1").expect("find"), Some(ObjectId(10)));
        assert_eq!(r.object_handle(a).expect("handle"), None);
        r.set_object_handle(ObjectId(50), b"h50").expect("rebind no object");
        assert_eq!(r.object_by_handle(b"h50").expect("find"), None);
        assert_eq!(
            sorted(r),
            vec![
                (a, None),
                (b, Some(b"\xffh2".to_vec())),
                (ObjectId(10), Some(b"h1".to_vec())),
                (ObjectId(12), Some(b"h10".to_vec())),
            ]
        );
        // Creation turns: the first note stays.
        assert_eq!(r.born_turn(b).expect("born"), None);
        r.set_born(b, 4).expect("born");
        r.set_born(b, 6).expect("born again");
        r.set_born(ObjectId(77), 1).expect("born of no object");
        assert_eq!(r.born_turn(b).expect("born"), Some(4));
        assert_eq!(r.born_turn(ObjectId(77)).expect("born"), None);
        // The attic.
        assert_eq!(r.attic_since(b).expect("attic"), None);
        r.attic_put(b, Some(3)).expect("put");
        r.attic_put(a, None).expect("put");
        r.attic_put(b, Some(5)).expect("put again");
        assert_eq!(r.attic_since(b).expect("attic"), Some(Some(5)));
        assert_eq!(r.attic_since(a).expect("attic"), Some(None), "found there: no turn");
        assert_eq!(r.attic_objects().expect("attic"), vec![a, b]);
        r.attic_take(a).expect("take");
        r.attic_take(a).expect("take again");
        assert_eq!(r.attic_objects().expect("attic"), vec![b]);
    }

    /// One seeded random sequence of interns, inserts, rebinds, creation
    /// turns and attic moves (a few handles and ids, so they collide),
    /// applied to `a` and `b` (both empty), then every query compared.
    pub fn agrees(a: &dyn Objects, b: &dyn Objects, seed: u64) {
        let mut next = crate::meta::kit_random(seed);
        let handles: [&[u8]; 5] = [b"a", b"b", b"c", b"\x00d", b"ee"];
        for step in 0..80 {
            let handle = handles[next(5) as usize];
            let (id, kind) = (ObjectId(1 + next(8) as i64), next(4) as u8);
            match next(7) {
                0 => {
                    let ids = (
                        a.intern_object(handle, kind).expect("intern"),
                        b.intern_object(handle, kind).expect("intern"),
                    );
                    assert_eq!(ids.0, ids.1, "seed {seed}: step {step}: intern");
                }
                1 => {
                    a.insert_object(id, handle, kind).expect("insert");
                    b.insert_object(id, handle, kind).expect("insert");
                }
                2 => {
                    a.insert_new_object(id, handle, kind).expect("insert");
                    b.insert_new_object(id, handle, kind).expect("insert");
                }
                3 => {
                    a.set_object_handle(id, handle).expect("rebind");
                    b.set_object_handle(id, handle).expect("rebind");
                }
                4 => {
                    let turn = next(6) as i64;
                    a.set_born(id, turn).expect("born");
                    b.set_born(id, turn).expect("born");
                }
                5 => {
                    let turn = (next(3) > 0).then(|| next(6) as i64);
                    a.attic_put(id, turn).expect("put");
                    b.attic_put(id, turn).expect("put");
                }
                _ => {
                    a.attic_take(id).expect("take");
                    b.attic_take(id).expect("take");
                }
            }
        }
        assert_eq!(sorted(a), sorted(b), "seed {seed}: objects");
        assert_eq!(a.max_object_id().expect("q"), b.max_object_id().expect("q"), "seed {seed}");
        assert_eq!(a.attic_objects().expect("q"), b.attic_objects().expect("q"), "seed {seed}");
        for turn in 0..7 {
            let since = a.attic_objects_since(turn).expect("q");
            assert_eq!(since, b.attic_objects_since(turn).expect("q"), "seed {seed}: since {turn}");
            let by_row: Vec<ObjectId> = a
                .attic_objects()
                .expect("q")
                .into_iter()
                .filter(|id| a.attic_since(*id).expect("q").flatten().is_some_and(|t| t >= turn))
                .collect();
            assert_eq!(since, by_row, "seed {seed}: since {turn}, row by row");
        }
        for id in (0..10).map(ObjectId) {
            let q = |r: &dyn Objects| {
                (
                    r.object_kind(id).expect("q"),
                    r.object_handle(id).expect("q"),
                    r.born_turn(id).expect("q"),
                    r.attic_since(id).expect("q"),
                )
            };
            assert_eq!(q(a), q(b), "seed {seed}: {id:?}");
        }
        for h in handles {
            assert_eq!(a.object_by_handle(h).expect("q"), b.object_by_handle(h).expect("q"), "seed {seed}: {h:?}");
        }
    }
}
