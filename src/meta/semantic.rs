//! Values no index holds, checked for being possible at all. SQLite keeps
//! no checksums of its own: a byte flipped inside such a value (an object's
//! kind, a pre-image's size, a reference to an object or a turn) keeps
//! every page and index consistent, passes `PRAGMA integrity_check`, and
//! was mounted. Each table is checked by one aggregate query (a scan of
//! the table, cheaper than the integrity check that reads every page and
//! index); only a table that fails is asked which row and which value.
//! No rule reads a blob's bytes (a chunk list of a large file spans
//! overflow pages; `fsck` decodes every list anyway): lengths and NULLs
//! are in the record header.

use rusqlite::{Connection, params};

use super::{Ctx, MetaResult};

/// One table's rules: the schema version that has every column they name,
/// how to name a row, and each impossible value with what it means.
/// `lim.newest` is the newest checkpoint (the open turn), `lim.max_object`
/// the largest object id.
struct Rules {
    table: &'static str,
    since: i64,
    row: &'static str,
    bad: &'static [(&'static str, &'static str)],
}

/// Kinds are coded 1 to 7 (`Kind::code`).
const RULES: &[Rules] = &[
    Rules {
        table: "objects",
        since: 4,
        row: "'object ' || id",
        bad: &[
            ("kind NOT BETWEEN 1 AND 7", "its kind is not a kind"),
            ("id < 1", "its id is not an id"),
            (
                "born_turn IS NOT NULL AND born_turn NOT BETWEEN 0 AND lim.newest",
                "it is born in a turn that does not exist",
            ),
        ],
    },
    Rules {
        table: "object_pre",
        since: 1,
        row: "'turn ' || turn || ', object ' || object",
        bad: &[
            ("kind NOT BETWEEN 1 AND 7", "its kind is not a kind"),
            ("size < 0", "its size is negative"),
            ("perm NOT BETWEEN 0 AND 4095", "its permission bits are out of range"),
            ("uid NOT BETWEEN 0 AND 4294967295 OR gid NOT BETWEEN 0 AND 4294967295", "its owner is out of range"),
            ("nlink < 0", "its link count is negative"),
            ("turn NOT BETWEEN 0 AND lim.newest", "its turn does not exist"),
            ("object NOT BETWEEN 1 AND lim.max_object", "it names an object that does not exist"),
            (
                "(content_hash IS NULL) <> (chunks IS NULL)",
                "it has a content hash without a chunk list, or the reverse",
            ),
            ("length(content_hash) <> 32", "its content hash is not 32 bytes"),
        ],
    },
    Rules {
        table: "entry_pre",
        since: 1,
        row: "'turn ' || turn || ', directory ' || dir",
        bad: &[
            ("turn NOT BETWEEN 0 AND lim.newest", "its turn does not exist"),
            ("dir NOT BETWEEN 1 AND lim.max_object", "its directory is an object that does not exist"),
            (
                "target IS NOT NULL AND target NOT BETWEEN 1 AND lim.max_object",
                "it names an object that does not exist",
            ),
            ("length(name) = 0 OR instr(name, x'2f') > 0 OR instr(name, x'00') > 0", "its name is not a name"),
        ],
    },
    Rules {
        table: "checkpoints",
        since: 1,
        row: "'checkpoint ' || id",
        bad: &[
            ("id < 0", "its number is negative"),
            ("parent IS NOT NULL AND parent NOT BETWEEN 0 AND id - 1", "its parent is not an earlier checkpoint"),
            ("created_at < 0", "its time is negative"),
        ],
    },
    Rules {
        table: "known_content",
        since: 1,
        row: "'cached content of object ' || object",
        bad: &[
            ("object NOT BETWEEN 1 AND lim.max_object", "it names an object that does not exist"),
            ("size < 0", "its size is negative"),
            ("length(content_hash) <> 32", "its content hash is not 32 bytes"),
        ],
    },
    Rules {
        table: "tainted",
        since: 2,
        row: "'outside change of object ' || object",
        bad: &[
            ("object NOT BETWEEN 1 AND lim.max_object", "it names an object that does not exist"),
            // `fsck --repair` marks the checkpoint after a dropped record,
            // which may be the next one, not sealed yet.
            ("turn NOT BETWEEN 0 AND lim.newest + 1", "its checkpoint does not exist"),
        ],
    },
    Rules {
        table: "pending",
        since: 5,
        row: "'pending file ' || hex(handle)",
        bad: &[
            (
                "source_turn IS NOT NULL AND source_turn NOT BETWEEN 0 AND lim.newest",
                "its record's turn does not exist",
            ),
            (
                "source_object IS NOT NULL AND source_object NOT BETWEEN 1 AND lim.max_object",
                "its record's object does not exist",
            ),
        ],
    },
    Rules {
        table: "chunk_refs",
        since: 10,
        row: "'reference count of chunk ' || hex(chunk)",
        bad: &[("refs < 0", "its count is negative")],
    },
    Rules {
        table: "bypassed",
        since: 11,
        row: "'bypassed change of object ' || object",
        bad: &[
            ("object NOT BETWEEN 1 AND lim.max_object", "it names an object that does not exist"),
            ("first < 0 OR last < first OR last > lim.newest", "its checkpoints do not exist"),
        ],
    },
    Rules {
        table: "own_ctime",
        since: 12,
        row: "'own change of object ' || object",
        bad: &[
            ("object NOT BETWEEN 1 AND lim.max_object", "it names an object that does not exist"),
            // The settler's fill is stamped by the clock of its time.
            ("ctime_ns < 0", "its time is negative"),
        ],
    },
    Rules {
        table: "daemon_turns",
        since: 12,
        row: "'turn ' || turn || ' of a rewind'",
        bad: &[
            // A rewind or restore changes the tree in the open turn.
            ("turn NOT BETWEEN 0 AND lim.newest", "its turn does not exist"),
            ("started_ns < 0", "its start is negative"),
        ],
    },
];

/// The bounds the rules compare with, joined to each table.
const LIMITS: &str = ", (SELECT ?1 AS newest, ?2 AS max_object) AS lim";

/// At most this many rows are described; the count says the rest.
const SHOWN: usize = 3;

/// Every impossible value found, as sentences naming the row (empty when
/// none). `version` is the database's schema version.
pub(super) fn impossible_values(conn: &Connection, version: i64) -> MetaResult<Vec<String>> {
    let newest: Option<i64> =
        conn.query_row("SELECT MAX(id) FROM checkpoints", [], |r| r.get(0)).ctx("read checkpoints")?;
    let max_object: Option<i64> =
        conn.query_row("SELECT MAX(id) FROM objects", [], |r| r.get(0)).ctx("read objects")?;
    let (newest, max_object) = (newest.unwrap_or(-1), max_object.unwrap_or(0));
    let mut out = Vec::new();
    for rules in RULES.iter().filter(|r| version >= r.since) {
        let any = rules.bad.iter().map(|(c, _)| format!("({c})")).collect::<Vec<_>>().join(" OR ");
        let sql = format!("SELECT COUNT(*) FROM {} {LIMITS} WHERE {any}", rules.table);
        let count: i64 = conn.query_row(&sql, params![newest, max_object], |r| r.get(0)).ctx("check values")?;
        if count == 0 {
            continue;
        }
        let mut described = 0;
        for (cond, what) in rules.bad {
            if described >= SHOWN {
                break;
            }
            let sql = format!("SELECT {} FROM {} {LIMITS} WHERE {cond} LIMIT {SHOWN}", rules.row, rules.table);
            let mut stmt = conn.prepare(&sql).ctx("prepare")?;
            let rows = stmt.query_map(params![newest, max_object], |r| r.get::<_, String>(0)).ctx("check values")?;
            for row in rows.take(SHOWN - described) {
                out.push(format!("{} ({}): {what}", rules.table, row.ctx("check values")?));
                described += 1;
            }
        }
        if count as usize > described {
            out.push(format!("{} more rows of {} hold impossible values", count as usize - described, rules.table));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::Meta;

    /// Schema 12's notes of the daemon's own changes have their rules, as
    /// every other table: a flipped byte there would hide a bypass.
    #[test]
    fn the_daemons_own_changes_have_rules() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.sqlite");
        {
            let m = Meta::open(&path).unwrap();
            m.conn
                .execute_batch(
                    "INSERT INTO checkpoints(id, reason, created_at) VALUES (0, 'mount', 5), (1, 'turn', 6);
                     INSERT INTO objects(id, handle, kind) VALUES (1, x'01', 1);
                     INSERT INTO own_ctime(object, ctime_ns) VALUES (1, 7);
                     INSERT INTO daemon_turns(turn, started_ns) VALUES (1, 8);",
                )
                .unwrap();
        }
        assert_eq!(Meta::probe(&path, true).unwrap().impossible, Vec::<String>::new(), "sound values");
        let cases = [
            (
                "UPDATE own_ctime SET object = 9",
                "own_ctime (own change of object 9): it names an object that does not exist",
            ),
            ("UPDATE own_ctime SET ctime_ns = -1", "own_ctime (own change of object 1): its time is negative"),
            ("UPDATE daemon_turns SET turn = 2", "daemon_turns (turn 2 of a rewind): its turn does not exist"),
            ("UPDATE daemon_turns SET started_ns = -8", "daemon_turns (turn 1 of a rewind): its start is negative"),
        ];
        for (damage, said) in cases {
            let m = Meta::open(&path).unwrap();
            m.conn.execute_batch(&format!("SAVEPOINT s; {damage};")).unwrap();
            let found = impossible(&m);
            m.conn.execute_batch("ROLLBACK TO s; RELEASE s;").unwrap();
            assert_eq!(found, vec![said.to_string()], "{damage}");
        }
    }

    fn impossible(m: &Meta) -> Vec<String> {
        super::impossible_values(&m.conn, super::super::SCHEMA_VERSION).unwrap()
    }
}
