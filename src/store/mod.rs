//! See lib.rs for the module map.
