//! The builtin tools, one module per family. Each module exposes `*_tool`
//! constructors returning [`Tool`](crate::tools::Tool)s whose argument
//! structs' doc comments are what the model reads.

pub mod fs;
pub mod shell;
pub mod spill;
pub mod tape;
pub mod web;

pub use shell::ShellManager;
pub use web::WebFetchSettings;
