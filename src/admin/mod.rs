//! The admin console (`/admin`): the data its handlers serve.
//!
//! - [`tape_view`]: a tape's pages by id range, its anchors, search and
//!   JSON-lines export, as fast on a million entries as on ten.

pub mod tape_view;
