//! What the two SQLite databases, the chunk store's index and the
//! metadata, share: the errno behind a SQLite failure, the note that names
//! a full disk as the kernel does, and giving free pages back after a
//! collection.

use std::path::Path;

use rusqlite::Connection;

use crate::error::Errno;

/// SQLite says "database or disk is full" for a full disk: named as the
/// kernel names it too, so every ENOSPC reads the same to the user.
pub fn disk_full_note(e: &rusqlite::Error) -> &'static str {
    if sqlite_errno(e) == Some(Errno::ENOSPC) { " (No space left on device)" } else { "" }
}

/// The errno behind a SQLite error, if it has one: the only map of SQLite
/// codes to errnos.
pub fn sqlite_errno(e: &rusqlite::Error) -> Option<Errno> {
    match e {
        rusqlite::Error::SqliteFailure(e, _) => match e.code {
            rusqlite::ErrorCode::DiskFull => Some(Errno::ENOSPC),
            rusqlite::ErrorCode::SystemIoFailure => Some(Errno::EIO),
            rusqlite::ErrorCode::ReadOnly => Some(Errno::EROFS),
            _ => None,
        },
        _ => None,
    }
}

/// A database whose free pages are at least this share of it is rewritten
/// (`VACUUM`) after a collection: below that the pages are reused soon
/// enough, and a rewrite costs the whole file.
const VACUUM_FREE_SHARE: i64 = 4;
/// ... and when they are at least this many pages (a small file is not
/// worth a rewrite).
const VACUUM_MIN_FREE_PAGES: i64 = 16;

/// After a collection: gives a database's free pages back to the
/// filesystem (`incremental_vacuum` when it was created with
/// `auto_vacuum=INCREMENTAL`, otherwise a `VACUUM` when a large share of
/// it is free), then empties its WAL (`wal_checkpoint(TRUNCATE)`), which
/// otherwise keeps the largest size it ever reached. Deleted rows only put
/// pages on SQLite's freelist, so without this what `gc` frees never
/// shows on disk. A failed `VACUUM` (no room for its copy) is logged, not
/// fatal: the pages stay free for reuse.
pub fn shrink(conn: &Connection, path: &Path) -> rusqlite::Result<()> {
    let pages: i64 = conn.prepare_cached("PRAGMA page_count")?.query_row([], |r| r.get(0))?;
    let free: i64 = conn.prepare_cached("PRAGMA freelist_count")?.query_row([], |r| r.get(0))?;
    let auto_vacuum: i64 = conn.prepare_cached("PRAGMA auto_vacuum")?.query_row([], |r| r.get(0))?;
    if free > 0 && auto_vacuum == 2 {
        conn.execute_batch("PRAGMA incremental_vacuum")?;
    } else if free >= VACUUM_MIN_FREE_PAGES && free * VACUUM_FREE_SHARE >= pages {
        // Its copy of the database goes to a file even where temporary
        // data is kept in memory (`temp_store`): it is as large as the
        // database.
        let temp_store: i64 = conn.prepare_cached("PRAGMA temp_store")?.query_row([], |r| r.get(0))?;
        conn.pragma_update(None, "temp_store", "FILE")?;
        match conn.execute_batch("VACUUM") {
            Ok(()) => log::info!("Rewrote {} without its {free} free pages of {pages}.", path.display()),
            Err(e) => log::warn!(
                "Cannot rewrite {} without its {free} free pages ({e}); they stay for reuse.",
                path.display()
            ),
        }
        conn.pragma_update(None, "temp_store", temp_store)?;
    }
    let busy: i64 = conn.prepare_cached("PRAGMA wal_checkpoint(TRUNCATE)")?.query_row([], |r| r.get(0))?;
    if busy != 0 {
        log::warn!("The log of {} was not emptied: a reader was in the way.", path.display());
    }
    Ok(())
}
