//! Checks of a store as a whole, cheap enough for every mount: that the
//! database is sound and that the packs and the attic belong to it. A
//! database truncated to nothing next to packs and an attic full of
//! history, or one restored from an older copy, would otherwise mount as
//! an empty or wrong history and say nothing.

use std::path::Path;

use crate::meta::Meta;
use crate::store_dir::StoreDir;

use super::record_log::{LogRecord, RecordLog};

/// One thing wrong with the store as a whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreDamage {
    pub detail: String,
    /// The database cannot be used at all: nothing else can be checked.
    pub fatal: bool,
}

fn damage(detail: String, fatal: bool) -> StoreDamage {
    StoreDamage { detail, fatal }
}

/// Bytes in pack files, and whether any holds a record.
/// (bytes of the pack files, how many, whether any holds a record).
fn pack_bytes(dir: &StoreDir) -> (u64, u64, bool) {
    let Ok(entries) = std::fs::read_dir(dir.packs()) else { return (0, 0, false) };
    let sizes: Vec<u64> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".pack"))
        .filter_map(|e| e.metadata().ok().map(|m| m.len()))
        .collect();
    let header = crate::store::pack::PACK_HEADER_LEN;
    (sizes.iter().sum(), sizes.len() as u64, sizes.iter().any(|s| *s > header))
}

/// The number of attic entries and the largest object id among their names.
fn attic_entries(dir: &StoreDir) -> (usize, Option<i64>) {
    let Ok(entries) = std::fs::read_dir(dir.attic()) else { return (0, None) };
    let names: Vec<String> =
        entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    (names.len(), names.iter().filter_map(|n| n.parse::<i64>().ok()).max())
}

/// What is wrong with the store in `dir` as a whole (empty: nothing).
/// Reads only; safe beside a running daemon. Bounded in cost for a mount
/// (see [`Meta::probe`]).
pub fn store_damage(dir: &Path) -> Vec<StoreDamage> {
    damage_of(dir, false)
}

/// Like [`store_damage`], comparing every index of the database with its
/// table whatever its size (`fsck`).
pub fn store_damage_thorough(dir: &Path) -> Vec<StoreDamage> {
    damage_of(dir, true)
}

fn damage_of(dir: &Path, thorough: bool) -> Vec<StoreDamage> {
    let parts = StoreDir::new(dir);
    let meta = parts.meta();
    let (packs, pack_count, has_chunks) = pack_bytes(&parts);
    let (attic, attic_max) = attic_entries(&parts);
    let holds = || format!("the store holds {packs} bytes of packs and {attic} attic entries");
    let len = std::fs::metadata(&meta).map(|m| m.len());
    if len.as_ref().map_or(true, |l| *l == 0) {
        if has_chunks || attic > 0 {
            let what = if len.is_ok() { "is empty" } else { "is missing" };
            return vec![damage(
                format!("{} {what}, but {}: the history they belong to is gone", meta.display(), holds()),
                true,
            )];
        }
        return Vec::new();
    }
    let probe = match Meta::probe(&meta, thorough) {
        Ok(p) => p,
        Err(e) => return vec![damage(format!("{} cannot be read: {e}", meta.display()), true)],
    };
    if !probe.damage.is_empty() {
        let shown: Vec<&str> = probe.damage.iter().take(3).map(String::as_str).collect();
        return vec![damage(
            format!("{} is damaged (SQLite integrity check: {})", meta.display(), shown.join("; ")),
            true,
        )];
    }
    if !probe.impossible.is_empty() {
        let shown: Vec<&str> = probe.impossible.iter().take(3).map(String::as_str).collect();
        return vec![damage(
            format!(
                "{} is damaged: it holds values that cannot be (a byte flipped inside a value, which SQLite does not check): {}",
                meta.display(),
                shown.join("; ")
            ),
            true,
        )];
    }
    if probe.version == 0 && (has_chunks || attic > 0) {
        return vec![damage(format!("{} holds no rewindfs history, but {}", meta.display(), holds()), true)];
    }
    // Object ids the daemon logged but did not fold into the database
    // before it was killed are known too: the next open folds them.
    let logged = RecordLog::read(&parts.journal_log()).unwrap_or_default();
    let logged_max = logged
        .iter()
        .filter_map(|r| match r {
            LogRecord::Object { id, .. } | LogRecord::NewObject { id, .. } => Some(*id),
            _ => None,
        })
        .max();
    let known_max = probe.max_object_id.max(logged_max);
    let mut out = Vec::new();
    if let Some(recorded) = probe.store_bytes.and_then(|b| u64::try_from(b).ok())
        && packs < recorded
    {
        out.push(damage(
            format!(
                "the packs hold {packs} bytes, fewer than the {recorded} the database recorded: packs were lost, \
                 truncated or replaced"
            ),
            false,
        ));
    }
    let records = packs.saturating_sub(pack_count * crate::store::pack::PACK_HEADER_LEN);
    if let Some(sealed) = probe.sealed_record_bytes.and_then(|b| u64::try_from(b).ok())
        && records < sealed
        && out.is_empty()
    {
        out.push(damage(
            format!(
                "the packs hold {records} bytes of records, fewer than the {sealed} they held at the newest \
                 checkpoint: packs were lost, truncated or replaced"
            ),
            false,
        ));
    }
    if let Some(newest) = attic_max
        && known_max.is_none_or(|m| newest > m)
    {
        out.push(damage(
            format!(
                "attic entry {newest} names an object the database does not know (newest {}): the database is older \
                 than the attic (replaced, or restored from a copy)",
                known_max.map_or("none".to_string(), |m| m.to_string())
            ),
            false,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::Objects;

    #[test]
    fn an_empty_database_next_to_history_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(store_damage(dir.path()).is_empty(), "a new store is fine");
        std::fs::create_dir_all(dir.path().join("attic")).expect("attic");
        std::fs::write(dir.path().join("attic/7"), b"kept").expect("attic entry");
        std::fs::write(dir.path().join("meta.sqlite"), b"").expect("empty db");
        let found = store_damage(dir.path());
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].fatal && found[0].detail.contains("is empty"), "{found:?}");
    }

    #[test]
    fn garbage_and_an_older_database_are_found() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("meta.sqlite");
        {
            let meta = Meta::open(&path).expect("meta");
            meta.intern_object(b"h", 1).expect("object");
        }
        std::fs::create_dir_all(dir.path().join("attic")).expect("attic");
        std::fs::write(dir.path().join("attic/1"), b"known").expect("attic entry");
        assert!(store_damage(dir.path()).is_empty());
        std::fs::write(dir.path().join("attic/2"), b"unknown").expect("attic entry");
        let found = store_damage(dir.path());
        assert!(found.len() == 1 && !found[0].fatal && found[0].detail.contains("attic entry 2"), "{found:?}");

        std::fs::write(&path, vec![0x5a; 8192]).expect("garbage");
        let _ = std::fs::remove_file(dir.path().join("meta.sqlite-wal"));
        let found = store_damage(dir.path());
        assert!(found.len() == 1 && found[0].fatal, "{found:?}");
    }

    /// A pack cut by fewer bytes than its record headers was missed when
    /// the packs' size (headers included) was compared with the chunks'
    /// stored bytes (headers not): the next open silently dropped the
    /// chunk as "lost before a sync", though it had been synced at a seal.
    #[test]
    fn a_pack_cut_below_what_was_sealed_is_found() {
        use crate::journal::{Journal, TurnInfo};
        use crate::meta::Reason;
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let journal = Journal::open_dir(dir.path()).expect("journal");
            for i in 0..4u8 {
                let mut data = vec![0u8; 10_000];
                blake3::Hasher::new().update(&[i]).finalize_xof().fill(&mut data);
                journal.store().put(&data).expect("put");
            }
            journal.seal(&TurnInfo::default(), Reason::Turn, || {}).expect("seal");
        }
        assert!(store_damage(dir.path()).is_empty(), "a sound store");
        let pack = StoreDir::new(dir.path()).packs().join("000001.pack");
        let len = std::fs::metadata(&pack).expect("pack").len();
        let file = std::fs::OpenOptions::new().write(true).open(&pack).expect("open pack");
        file.set_len(len - 100).expect("cut the pack");
        let found = store_damage(dir.path());
        assert!(found.len() == 1 && found[0].detail.contains("fewer than the"), "{found:?}");
    }
}
