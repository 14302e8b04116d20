//! The chunk store's test kit (`rewindfs::store::conformance`, feature
//! `test-kit`) run from outside the crate on every backend
//! `rewindfs::store::open` builds from an address: `memory://`,
//! `pack:///dir`, `faulty+memory://` and `faulty+pack:///dir` (no faults
//! armed for the plain suite), plus crash durability and a torn tail on
//! the pack store; the `Reclaiming` extension's kit on every backend that
//! has it (the pack store, bare and wrapped).
//!
//! This mounts nothing: it checks the storage seam only, as a new backend
//! (an S3-compatible object store, for example) would be checked; the mounted
//! tests check the filesystem above it.

use std::path::Path;
use std::sync::Arc;

use rewindfs::store::{self, ChunkStore, FaultyStore, conformance};

fn pack_address(dir: &Path) -> String {
    format!("pack://{}", dir.to_str().expect("utf-8 temp dir"))
}

fn open(address: &str) -> Arc<dyn ChunkStore> {
    store::open(address).unwrap_or_else(|e| panic!("opening {address}: {e}"))
}

#[test]
fn memory_passes_the_kit() {
    conformance::run_all(&*open("memory://"));
}

#[test]
fn pack_passes_the_kit() {
    let dir = tempfile::tempdir().expect("tempdir");
    conformance::run_all(&*open(&pack_address(dir.path())));
}

/// The memory store frees a chunk's room on release: it has no
/// reclaiming side, and the wrapper around it has none either.
#[test]
fn memory_has_no_reclaiming_extension() {
    assert!(open("memory://").reclaiming().is_none());
    assert!(open("faulty+memory://").reclaiming().is_none());
}

#[test]
fn pack_passes_the_reclaiming_kit() {
    let dir = tempfile::tempdir().expect("tempdir");
    conformance::run_reclaiming(&*open(&pack_address(dir.path())));
}

#[test]
fn faulty_pack_passes_the_reclaiming_kit() {
    let dir = tempfile::tempdir().expect("tempdir");
    conformance::run_reclaiming(&*open(&format!("faulty+{}", pack_address(dir.path()))));
}

#[test]
fn pack_compaction_is_durable_after_a_crash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let address = pack_address(dir.path());
    conformance::compaction_durable_after_crash(&|| open(&address));
}

#[test]
fn faulty_pack_compaction_is_durable_after_a_crash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let address = format!("faulty+{}", pack_address(dir.path()));
    conformance::compaction_durable_after_crash(&|| open(&address));
}

#[test]
fn faulty_memory_passes_the_kit() {
    conformance::run_all(&*open("faulty+memory://"));
}

#[test]
fn faulty_pack_passes_the_kit() {
    let dir = tempfile::tempdir().expect("tempdir");
    conformance::run_all(&*open(&format!("faulty+{}", pack_address(dir.path()))));
}

/// Damage injected by the faulty wrapper is what `verify` reports, over
/// each backend.
#[test]
fn verify_finds_damage_on_every_backend() {
    let dir = tempfile::tempdir().expect("tempdir");
    for address in ["memory://".to_string(), pack_address(dir.path())] {
        conformance::verify_finds_damage(&FaultyStore::new(open(&address)));
    }
}

#[test]
fn pack_is_durable_after_a_crash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let address = pack_address(dir.path());
    conformance::durable_after_crash(&|| open(&address));
}

#[test]
fn faulty_pack_is_durable_after_a_crash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let address = format!("faulty+{}", pack_address(dir.path()));
    conformance::durable_after_crash(&|| open(&address));
}

/// The newest pack loses its last few bytes between the drop and the
/// reopen, as a crash part-way through an append leaves it.
#[test]
fn pack_survives_a_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let address = pack_address(dir.path());
    let tear = || {
        let packs = dir.path().join("packs");
        let newest =
            std::fs::read_dir(&packs).expect("packs dir").map(|e| e.expect("entry").path()).max().expect("a pack");
        let file = std::fs::OpenOptions::new().write(true).open(&newest).expect("open pack");
        let len = file.metadata().expect("metadata").len();
        file.set_len(len - 5).expect("truncate pack");
    };
    conformance::torn_tail(&|| open(&address), &tear);
}
