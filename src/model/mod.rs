//! Model clients: streaming chat completions with tool calls.
//!
//! - [`types`]: `ChatRequest`, `ModelEvent`, the `ModelClient` trait.
//! - [`error`]: `ModelError`, typed from the HTTP status to the user.
//! - [`spec`]: `provider:model` names.
//! - [`config`]: `ModelSettings` from `BUB_*` variables; builds clients.
//! - [`openai`]: the OpenAI-compatible Chat Completions client.
//! - [`anthropic`]: the Anthropic Messages client.
//! - [`retry`]: `Retrying`, retries with backoff and the timeouts, around any client.
//! - `sse` and `http` (private): event-stream framing and status mapping
//!   shared by both clients.

pub mod anthropic;
pub mod config;
pub mod error;
mod http;
pub mod openai;
pub mod retry;
pub mod spec;
mod sse;
pub mod types;

pub use anthropic::AnthropicClient;
pub use config::ModelSettings;
pub use error::ModelError;
pub use openai::OpenAiClient;
pub use retry::{RetryPolicy, Retrying};
pub use spec::ModelSpec;
pub use types::{
    ChatRequest, FinishReason, ModelClient, ModelEvent, ModelStream, ToolCallRequest, Usage,
};
