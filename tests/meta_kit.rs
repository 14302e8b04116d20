//! The metadata areas' test kits (`rewindfs::meta::<area>::kit`, feature
//! `test-kit`) run from outside the crate: each area's fixed answers on
//! the SQLite database (a file, as a store holds it) and on its in-memory
//! model, and 30 seeded random sequences applied to both and compared
//! query by query.
//!
//! This mounts nothing: it checks the metadata seam only; the journal,
//! the in-process model tier (`tests/history_engine.rs`) and the mounted
//! tests check what is built on it.

use std::sync::Arc;

use rewindfs::meta::{self, Meta};

/// A fresh database in a file of its own (kept until the test ends).
fn database() -> (tempfile::TempDir, Meta) {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = Meta::open(&dir.path().join("meta.sqlite")).expect("open the database");
    (dir, m)
}

const SEEDS: std::ops::RangeInclusive<u64> = 1..=30;

#[test]
fn pre_images_database_passes_the_kit() {
    meta::pre_images::kit::run_all(&database().1);
}

#[test]
fn pre_images_model_passes_the_kit() {
    meta::pre_images::kit::run_all(&meta::MemoryPreImages::new());
}

#[test]
fn pre_images_database_agrees_with_the_model() {
    for seed in SEEDS {
        meta::pre_images::kit::agrees(&database().1, &meta::MemoryPreImages::new(), seed);
    }
}

#[test]
fn checkpoints_database_passes_the_kit() {
    meta::checkpoints::kit::run_all(&database().1);
}

#[test]
fn checkpoints_model_passes_the_kit() {
    meta::checkpoints::kit::run_all(&meta::MemoryCheckpoints::new());
}

#[test]
fn checkpoints_database_agrees_with_the_model() {
    for seed in SEEDS {
        meta::checkpoints::kit::agrees(&database().1, &meta::MemoryCheckpoints::new(), seed);
    }
}

#[test]
fn intents_database_passes_the_kit() {
    let (_dir, m) = database();
    meta::intents::kit::run_all(&m, &m);
}

#[test]
fn intents_model_passes_the_kit() {
    let records = Arc::new(meta::MemoryPreImages::new());
    meta::intents::kit::run_all(&meta::MemoryIntents::new(records.clone()), &*records);
}

#[test]
fn intents_database_agrees_with_the_model() {
    for seed in SEEDS {
        let (_dir, m) = database();
        let records = Arc::new(meta::MemoryPreImages::new());
        let model = meta::MemoryIntents::new(records.clone());
        meta::intents::kit::agrees((&m, &m), (&model, &*records), seed);
    }
}
