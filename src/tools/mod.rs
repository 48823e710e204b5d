//! Tools: what the model (and comma commands) can call.
//!
//! - [`tool`]: `Tool`, typed tools from an argument struct, rendering.
//! - [`capability`]: what a tool can do (`read`, `write`, `exec`, `network`,
//!   `session`), for policies to allow or deny by.
//! - [`registry`]: `ToolRegistry`, lookups by registry or model name.
//! - [`context`]: `ToolContext`, what a call knows about its run.
//! - [`error`]: `ToolError`, returned to the model as a result.

pub mod builtin;
pub mod capability;
pub mod context;
pub mod error;
pub mod registry;
pub mod tool;

pub use capability::{Capabilities, Capability};
pub use context::ToolContext;
pub use error::{ToolError, ToolErrorKind};
pub use registry::{ToolRegistry, UnknownTools};
pub use tool::{Tool, default_render, model_name};
