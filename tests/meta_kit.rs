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

/// The three tests of an area whose model needs nothing else: the kit on
/// the database, the kit on the model, and the two compared.
macro_rules! area_kit {
    ($area:ident, $model:expr) => {
        mod $area {
            use super::*;

            #[test]
            fn database_passes_the_kit() {
                meta::$area::kit::run_all(&database().1);
            }

            #[test]
            fn model_passes_the_kit() {
                meta::$area::kit::run_all(&$model);
            }

            #[test]
            fn database_agrees_with_the_model() {
                for seed in SEEDS {
                    meta::$area::kit::agrees(&database().1, &$model, seed);
                }
            }
        }
    };
}

area_kit!(pre_images, meta::MemoryPreImages::new());
area_kit!(checkpoints, meta::MemoryCheckpoints::new());
area_kit!(turn_stats, meta::MemoryTurnStatistics::new());
area_kit!(objects, meta::MemoryObjects::new());
area_kit!(retention, meta::MemoryRetention::new());

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
