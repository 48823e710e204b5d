//! Model clients: streaming chat completions with tool calls.
//!
//! - [`types`]: `ChatRequest`, `ModelEvent`, the `ModelClient` trait.
//! - [`error`]: `ModelError`, typed from the HTTP status to the user.

pub mod error;
pub mod types;

pub use error::ModelError;
pub use types::{
    ChatRequest, FinishReason, ModelClient, ModelEvent, ModelStream, ToolCallRequest, Usage,
};
