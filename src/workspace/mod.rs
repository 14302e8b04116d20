//! The live workspace: the backing directory as the mount presents it.
//!
//! One module per responsibility; `LiveTree` (`live.rs`) owns the parts
//! and composes them into filesystem operations.

pub mod attic;
pub mod attr;
pub mod backing;
pub mod capture;
pub mod listings;
pub mod live;
pub mod objects;
pub mod open_files;
pub mod opener;
pub mod pending;
pub mod rewind_ops;

pub use attr::{Attr, Caller, Ino, Kind, SetAttr, SetTime};
pub use backing::{FsStats, XattrReply};
pub use live::{HIDDEN_DIR, LiveTree};
pub use open_files::{DirEntry, Fh, OpenFile};
pub use opener::Opener;
