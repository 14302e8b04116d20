//! That a store's database and its packs belong together: a database from
//! another store (copied over, or restored from the wrong backup) must not
//! be mounted as the history of these packs and this attic. The database
//! is checked for emptiness and damage before ([`super::store_check`]). A
//! refusal changes nothing and names `rewindfs fsck`.

use std::path::Path;

use crate::error::{Error, ErrorKind, Result};
use crate::meta::{Checkpoints, Meta};

use crate::store_dir::StoreDir;

/// The key of the store id in the database's `state` table; the same id is
/// kept beside the packs ([`StoreDir::id_file`]).
const ID_KEY: &str = "store_id";

/// How much history a store directory holds outside its database.
fn history_outside_db(dir: &StoreDir) -> (usize, usize) {
    let count = |p: &Path| std::fs::read_dir(p).map(|d| d.filter_map(|e| e.ok()).count()).unwrap_or(0);
    let packs = std::fs::read_dir(dir.packs())
        .map(|d| d.filter_map(|e| e.ok()).filter(|e| e.metadata().is_ok_and(|m| m.len() > 0)).count())
        .unwrap_or(0);
    (packs, count(&dir.attic()))
}

fn refuse(dir: &Path, what: String) -> Error {
    Error::kind_of(
        ErrorKind::Failed,
        format!(
            "store {}: {what}; nothing was changed. Check it with `rewindfs fsck --store {}`",
            dir.display(),
            dir.display()
        ),
    )
}

/// Opens `dir/meta.sqlite` after checking that the database and the packs
/// carry the same store id. A new store gets its id here.
pub fn open_checked(dir: &Path) -> Result<Meta> {
    let parts = StoreDir::new(dir);
    let db = parts.meta();
    let id_path = parts.id_file();
    let file_id = match std::fs::read_to_string(&id_path) {
        Ok(s) => Some(s.trim().to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::io(format!("cannot read {}", id_path.display()), e)),
    };
    // Emptiness and damage were checked before (`super::store_check::store_damage`).
    let (packs, attic) = history_outside_db(&parts);
    let meta = Meta::open(&db).map_err(|e| refuse(dir, format!("its database cannot be opened: {e}")))?;
    let db_id = meta.get_state(ID_KEY).map_err(|e| refuse(dir, format!("its database is damaged: {e}")))?;
    let has_history = meta.checkpoints().map(|c| !c.is_empty()).unwrap_or(false);
    match (db_id, file_id) {
        (Some(a), Some(b)) if a == b => Ok(meta),
        (Some(a), Some(b)) => Err(refuse(
            dir,
            format!("its database (store id {a}) and its packs (store id {b}) belong to different stores"),
        )),
        (None, Some(b)) => Err(refuse(
            dir,
            format!("its packs belong to store {b}, but its database carries no store id: the database was replaced"),
        )),
        (db_id, None) => {
            if db_id.is_none() && !has_history && (packs > 0 || attic > 0) {
                return Err(refuse(
                    dir,
                    format!(
                        "its database holds no history, but the store holds {packs} pack files and {attic} files in the attic: the database was replaced"
                    ),
                ));
            }
            // A new store, or one made before stores had ids: give it one.
            let id = db_id.unwrap_or_else(new_id);
            meta.set_state(ID_KEY, &id).map_err(|e| Error::Daemon(e.to_string()))?;
            crate::store_dir::create_private_dir(&parts.chunks())
                .map_err(|e| Error::io(format!("cannot create {}", parts.chunks().display()), e))?;
            let tmp = id_path.with_extension("tmp");
            // Explicit mode: the daemon's umask is 0.
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o644)
                .open(&tmp)
                .and_then(|mut f| {
                    use std::io::Write;
                    f.write_all(format!("{id}\n").as_bytes())?;
                    f.sync_all()
                })
                .and_then(|()| std::fs::rename(&tmp, &id_path))
                .map_err(|e| Error::io(format!("cannot write {}", id_path.display()), e))?;
            Ok(meta)
        }
    }
}

/// 128 random bits as hex (the standard library seeds `RandomState` from
/// the operating system's random source).
fn new_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let half = || {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
        h.finish()
    };
    format!("{:016x}{:016x}", half(), half())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_store_gets_an_id_and_opens_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(open_checked(dir.path()).expect("new store"));
        let id = std::fs::read_to_string(StoreDir::new(dir.path()).id_file()).expect("id file");
        assert_eq!(id.trim().len(), 32);
        drop(open_checked(dir.path()).expect("second open"));
    }

    #[test]
    fn a_database_of_another_store_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(open_checked(dir.path()).expect("new store"));
        let other = tempfile::tempdir().expect("tempdir");
        drop(open_checked(other.path()).expect("other store"));
        std::fs::copy(other.path().join("meta.sqlite"), dir.path().join("meta.sqlite")).expect("swap");
        let err = open_checked(dir.path()).expect_err("a database of another store must be refused").to_string();
        assert!(err.contains("belong to different stores") && err.contains("fsck"), "{err}");
    }
}
