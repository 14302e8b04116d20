//! rewindfs: a FUSE filesystem that records every change made inside a
//! workspace, lets anyone browse past checkpoints, and rewinds the tree.
//!
//! Layout (one module per concept):
//! - [`sys`]: the only place allowed `unsafe` (file handles, signal handler);
//!   the rest of the crate is `#![deny(unsafe_code)]`.
//! - [`workspace`]: the live tree: object table, backing-tree operations.
//! - [`store`]: the content-addressed chunk store.
//! - [`store_dir`]: a store directory's layout: its parts, named once.
//! - [`sqlite`]: what the chunk index and the metadata share as SQLite
//!   databases (errno of a failure, giving free pages back).
//! - [`meta`]: the SQLite metadata (objects, checkpoints, pre-images).
//! - [`journal`]: turns, checkpoints, recording pre-images.
//! - [`view`]: the tree at a checkpoint, resolved on demand.
//! - [`report`]: log statistics, diffs, path history.
//! - [`fsck`]: checks a store and names what damage costs, by checkpoint and path.
//! - [`restore`]: putting paths back as they were at a checkpoint.
//! - [`rewind`]: whole-tree rewind at the cost of what changed.
//! - [`world`]: the world lock: ordinary operations vs. rewind and restore,
//!   and history-changing operations one at a time.
//! - [`fs`]: the FUSE adapter; no `fuser` type appears outside it.
//! - [`daemon`]: mount lifecycle, control socket, registry of mounts.
//! - [`cli`]: one file per subcommand.
//! - [`text`]: names, byte counts and times made safe and readable to print (for every layer).
//! - [`name_json`]: file names in JSON without loss (UTF-8 as strings, other bytes as base64).
//! - [`poison`]: locks a panic left held are refused, not served from.
//! - [`faults`]: fault-injection and pause points for the tests (no-ops unless
//!   the `test-hooks` feature is on); the bottom layer, importing nothing.

#![deny(unsafe_code)]

pub mod cli;
pub mod daemon;
pub mod engine;
pub mod error;
pub mod faults;
pub mod fs;
pub mod fsck;
pub mod journal;
pub mod meta;
pub mod name_json;
pub mod poison;
pub mod remote;
pub mod report;
pub mod restore;
pub mod rewind;
pub mod sqlite;
pub mod store;
pub mod store_dir;
#[allow(unsafe_code)]
pub mod sys;
pub mod text;
pub mod view;
pub mod workspace;
pub mod world;

pub use error::{Error, Result};
