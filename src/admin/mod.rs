//! The admin console (`/admin`): the data its handlers serve.
//!
//! - [`tape_view`]: a tape's pages by id range, its anchors, search and
//!   JSON-lines export, as fast on a million entries as on ten.
//! - [`live`]: samples of the numbers `/metrics` exports and the rates
//!   between two of them, for the live charts.

pub mod live;
pub mod tape_view;
