//! Model clients: streaming chat completions with tool calls.
//!
//! - [`types`]: `ChatRequest`, `ModelEvent`, the `ModelClient` trait.
//! - [`error`]: `ModelError`, typed from the HTTP status to the user.

pub mod error;
pub mod types;

pub use error::ModelError;
pub use types::{ChatRequest, FinishReason, ModelClient, ModelEvent, ModelStream, ToolCallRequest, Usage};

use std::sync::Arc;

/// Hands out clients by `provider:model`. The agent asks it once per model
/// step, so a per-session `,model` switch or a `BeforeLlmCall` redirect takes
/// effect without rebuilding anything.
pub trait ModelProvider: Send + Sync + 'static {
    fn client(&self, spec: &str) -> Result<Arc<dyn ModelClient>, ModelError>;
}

/// One client for every spec: for library users with a single model, and tests.
pub struct SingleClient(pub Arc<dyn ModelClient>);

impl ModelProvider for SingleClient {
    fn client(&self, _spec: &str) -> Result<Arc<dyn ModelClient>, ModelError> {
        Ok(self.0.clone())
    }
}
