//! The agent SDK in one file: an order assistant with one typed tool, a
//! system prompt, a handler that guards the tool, and a tape on disk so the
//! conversation continues across runs.
//!
//! ```sh
//! BUB_MODEL=openai:gpt-4o-mini BUB_OPENAI_API_KEY=... cargo run --example order_assistant -- "Where is order A123?"
//! ```

use bub::agent::events::{BeforeToolCall, ToolCallDecision};
use bub::agent::{Agent, RunOptions, StreamEvent};
use bub::db::SqliteTapeStore;
use bub::model::ModelSettings;
use bub::tools::{Tool, ToolContext, ToolError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::sync::Arc;

/// Look up the status of an order.
#[derive(Deserialize, JsonSchema)]
struct LookupOrder {
    /// The order number, like `A123`.
    order_id: String,
}

#[derive(Serialize, JsonSchema)]
struct OrderStatus {
    order_id: String,
    status: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let prompt = std::env::args().nth(1).unwrap_or_else(|| "Where is order A123?".to_string());
    let models = ModelSettings::from_vars(std::env::vars())?;
    let model = models.default_model()?.to_string();

    let lookup = Tool::typed("orders.lookup", |args: LookupOrder, _ctx: ToolContext| async move {
        // Replace this with a call to your order service.
        Ok::<_, ToolError>(OrderStatus { order_id: args.order_id, status: "shipped".into() })
    });
    let agent = Agent::builder()
        .store(Arc::new(SqliteTapeStore::open("sessions.db").await?))
        .model(Arc::new(models), model)
        .tool(lookup)
        .system_prompt("You are an order assistant. Reply directly to the user.")
        .system_prompt("Use orders_lookup to check order status before answering.")
        .build();

    // Handlers see every tool call, from the model or a comma command.
    agent.events().on_sync(|event: &mut BeforeToolCall| {
        if event.call.arguments.get("order_id").and_then(|id| id.as_str()).is_none_or(str::is_empty) {
            event.decision = Some(ToolCallDecision::Deny("order_id is required".into()));
        }
        Ok(())
    });

    let mut run = agent.run(prompt, RunOptions::new("customer-42"));
    while let Some(event) = run.next_event().await {
        match event {
            StreamEvent::Text(delta) => {
                print!("{delta}");
                std::io::stdout().flush()?;
            }
            StreamEvent::Error { message, .. } => anyhow::bail!(message),
            _ => {}
        }
    }
    println!();
    Ok(())
}
