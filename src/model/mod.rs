//! Model clients: streaming chat completions with tool calls.
//!
//! - [`types`]: `ChatRequest`, `ModelEvent`, the `ModelClient` trait. The
//!   messages a request carries, and token counting, are [`crate::message`]'s.
//! - [`error`]: `ModelError`, typed from the HTTP status to the user.
//! - [`spec`]: `provider:model` names.
//! - [`config`]: `ModelSettings` from `BUB_*` variables; builds clients.
//! - [`listing`]: `GET /models`, a check of a provider and its key that
//!   costs no tokens (`bub doctor`).
//! - [`images`]: which models take images (by family, `BUB_IMAGE_MODELS` over it).
//! - [`openai`]: the OpenAI-compatible Chat Completions client.
//! - [`anthropic`]: the Anthropic Messages client.
//! - [`window`]: context windows by model family, and the configured override.
//! - [`retry`]: `Retrying`, retries with backoff and the timeouts, around any client.
//! - `sse` and `transport` (private): event-stream framing and status mapping
//!   shared by both clients.

pub mod anthropic;
pub mod config;
pub mod error;
pub mod images;
pub mod listing;
pub mod openai;
pub mod retry;
pub mod spec;
mod sse;
mod transport;
pub mod types;
pub mod window;

pub use anthropic::AnthropicClient;
pub use config::ModelSettings;
pub use error::ModelError;
pub use listing::ModelListing;
pub use openai::OpenAiClient;
pub use retry::{RetryPolicy, Retrying};
pub use spec::ModelSpec;
pub use types::{ChatRequest, FinishReason, ModelClient, ModelEvent, ModelStream, ToolCallRequest, Usage};

use std::sync::Arc;

/// Hands out clients by `provider:model`. The agent asks it once per model
/// step, so a per-session `,model` switch or a `BeforeLlmCall` redirect takes
/// effect without rebuilding anything.
pub trait ModelProvider: Send + Sync + 'static {
    fn client(&self, spec: &str) -> Result<Arc<dyn ModelClient>, ModelError>;

    /// Whether the model `spec` reads images in its prompt (see [`images`]);
    /// by default its family decides.
    fn takes_images(&self, spec: &str) -> bool {
        images::ImageModels::default().takes_images(spec)
    }
}

/// One client for every spec: for library users with a single model, and tests.
pub struct SingleClient(pub Arc<dyn ModelClient>);

impl ModelProvider for SingleClient {
    fn client(&self, _spec: &str) -> Result<Arc<dyn ModelClient>, ModelError> {
        Ok(self.0.clone())
    }
}

impl ModelProvider for ModelSettings {
    fn client(&self, spec: &str) -> Result<Arc<dyn ModelClient>, ModelError> {
        ModelSettings::client(self, spec)
    }

    fn takes_images(&self, spec: &str) -> bool {
        self.image_models.takes_images(spec)
    }
}
