//! The live workspace: the backing directory as the mount presents it.

pub mod attr;
pub mod capture;
pub mod live;
pub mod objects;
pub mod pending;
pub mod rewind_ops;

pub use attr::{Attr, Caller, Ino, Kind, SetAttr, SetTime};
pub use live::{DirEntry, Fh, FsStats, LiveTree, OpenFile, XattrReply};
