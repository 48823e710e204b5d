//! The agent runtime: the loop that calls the model and runs its tools, with
//! everything recorded on the session's tape.
//!
//! - [`runtime`]: `Agent` and its builder (tools, prompt, model, store, bus).
//! - [`run`]: `Agent::run`, `RunOptions`, the loop (auto handoff, steering, `max_steps`).
//! - [`stream`]: `RunStream` and `StreamEvent`, what a run yields; [`failure`]: `FailureKind`, why a run failed.
//! - [`events`]: the typed loop events; `EventBus`, which they travel on, is
//!   defined in [`crate::tools::bus`] (tools emit on it too) and re-exported here.
//! - [`recorder`]: the first handler, writing events to the tape.
//! - [`compaction`]: summaries before the context fills the window (`auto_handoff/compaction`).
//! - [`images`]: images that come with a prompt, shown to models that take them.
//! - [`prompt`]: system prompt sections; `TurnState` is the tools' ([`crate::tools::state`]), re-exported here.
//! - [`tool_budget`]: past a budget of tokens, tools a source added (MCP
//!   servers) are offered with one line each and `tools.describe` loads
//!   their schemas on demand.
//! - `host`: what tools may ask of the agent ([`crate::tools::ToolHost`]);
//!   [`subagent`]: the `subagent` tool, the one tool that starts runs.
//! - Code mode is [`crate::codemode`]'s; the loop calls it when a run starts.
//!
//! # Example
//! ```
//! use bub::agent::{Agent, RunOptions, StreamEvent};
//! use bub::agent::events::{BeforeLlmCall, LlmCallDecision};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let agent = Agent::builder().system_prompt("You are terse.").build();
//! // A handler can answer without calling a model (a cache, a canned reply…).
//! agent.events().on_sync(|call: &mut BeforeLlmCall| {
//!     call.decision = Some(LlmCallDecision::Finish("Shipped on Monday.".into()));
//!     Ok(())
//! });
//! let outcome = agent.run("Where is order A123?", RunOptions::new("customer-42").model("any:model")).collect().await;
//! assert_eq!(outcome.text, "Shipped on Monday.");
//! assert!(outcome.error.is_none());
//! // The conversation is on the tape:
//! let context = agent.tape("customer-42").unwrap().context().await.unwrap();
//! assert_eq!(context.last().unwrap()["content"], "Shipped on Monday.");
//! # });
//! ```

mod commands;
pub mod compaction;
pub mod events;
mod execute;
pub mod failure;
pub(crate) mod host;
pub mod images;
pub mod prompt;
pub mod recorder;
pub mod run;
pub mod runtime;
mod settings;
mod steering;
pub mod stream;
pub mod subagent;
pub mod tool_budget;

pub use crate::tools::TurnState;
pub use crate::tools::bus::{AgentEvent, EventBus, HandlerError, HandlerId};
pub use compaction::{
    Compaction, CompactionError, CompactionOverrides, CompactionSettings, ContextEstimate, tape_compact_tool,
};
pub use failure::FailureKind;
pub use images::{IMAGE_MEDIA_TYPES, PromptImage, PromptImages};
pub use prompt::{PromptContext, SectionId, SystemPrompt, ToolSummary};
pub use run::{
    CUT_RETRIES, CarriedMeta, MessageMeta, OVERFLOW_ANCHOR, PinnedModel, RunCompaction, RunOptions, RunTools,
};
pub use runtime::{Agent, AgentBuilder, DEFAULT_MAX_STEPS};
pub use stream::{AnswerText, RunOutcome, RunStream, StreamEvent};
pub use subagent::subagent_tool;
pub use tool_budget::{DEFAULT_TOOL_SCHEMA_BUDGET, TOOLS_DESCRIBE};
