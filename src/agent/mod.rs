//! The agent runtime: the loop, its events and turn state.

pub mod bus;
pub mod state;

pub use bus::{AgentEvent, EventBus, HandlerError, HandlerId};
pub use state::TurnState;

/// Placeholder until the loop lands; tools hold an optional handle to it.
#[derive(Clone, Default)]
pub struct Agent {}
