//! Tools: what the model (and comma commands) can call.
//!
//! Tools never see the agent: this module imports nothing from `agent/` or
//! `codemode/`, so tools (and later tools from MCP servers) build on it alone.
//!
//! - [`tool`]: `Tool`, typed tools from an argument struct, rendering.
//! - [`capability`]: what a tool can do (`read`, `write`, `exec`, `network`,
//!   `session`), for policies to allow or deny by.
//! - [`registry`]: `ToolRegistry`, lookups by registry or model name.
//! - [`context`]: `ToolContext`, what a call knows about its run.
//! - [`host`]: `ToolHost`, the narrow handle a call has on the agent.
//! - [`chat`]: `TurnChat`, the gateway's handle on a turn's chat (to send
//!   files), found in the turn state.
//! - [`state`]: `TurnState`, the run's shared values; [`bus`]: `EventBus`,
//!   the run's typed events (the agent's loop events and tools' own).
//! - [`switch`]: the session-switch events (`,model`, `,reasoning_effort`,
//!   `,code_mode`), written and read back in one place.
//! - [`error`]: `ToolError`, returned to the model as a result.

pub mod builtin;
pub mod bus;
pub mod capability;
pub mod chat;
pub mod context;
pub mod error;
pub mod host;
pub mod registry;
pub mod state;
pub mod switch;
pub mod tool;

pub use bus::EventBus;
pub use capability::{Capabilities, Capability};
pub use chat::{ChatFile, ChatOutlet, SentFile, TurnChat};
pub use context::ToolContext;
pub use error::{ToolError, ToolErrorKind};
pub use host::{CommandGate, ContextLimits, ToolHost};
pub use registry::{NameTaken, ToolRegistry, UnknownTools};
pub use state::TurnState;
pub use tool::{Tool, default_render, model_name};
