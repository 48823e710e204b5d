//! Events: handlers that observe, rewrite, replace and deny — for model calls
//! and commands alike — and user-defined events emitted from tools.

use crate::support;

use bub::agent::events::{
    AfterToolCall, BeforeLlmCall, BeforeToolCall, LlmCallDecision, StepFinished, ToolCallDecision,
};
use bub::agent::{AgentEvent, RunOptions, StreamEvent};
use bub::tools::{Tool, ToolContext, ToolError};
use parking_lot::Mutex;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use support::scripted_agent;

fn counter_tool(calls: Arc<Mutex<Vec<Value>>>) -> Tool {
    Tool::new("orders.refund", "Refund an order", json!({"type": "object"}), move |args: Value, _| {
        let calls = calls.clone();
        async move {
            calls.lock().push(args);
            Ok(json!("refunded"))
        }
    })
}

fn tool_outputs(events: &[StreamEvent]) -> Vec<(String, bool)> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolResult { output, is_error, .. } => Some((output.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_denied_model_call_never_reaches_the_tool() {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let (agent, model, _store) = scripted_agent(vec![counter_tool(calls.clone())]).await;
    agent.events().on_sync(|event: &mut BeforeToolCall| {
        if event.call.tool == "orders.refund" {
            event.decision = Some(ToolCallDecision::Deny("refunds need a human".into()));
        }
        Ok(())
    });
    model.tool_calls(&[("orders_refund", json!({"id": "A1"}))]);
    model.text("I cannot refund that.");
    let outcome = agent.run("refund A1", RunOptions::new("chat")).collect().await;
    assert!(calls.lock().is_empty());
    let outputs = tool_outputs(&outcome.events);
    assert!(outputs[0].1);
    assert!(
        outputs[0].0.contains("\"kind\":\"denied\"") && outputs[0].0.contains("refunds need a human"),
        "{}",
        outputs[0].0
    );
}

#[tokio::test]
async fn handlers_can_rewrite_arguments_replace_results_and_rewrite_outputs() {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let (agent, model, _store) = scripted_agent(vec![counter_tool(calls.clone())]).await;
    agent.events().on_sync(|event: &mut BeforeToolCall| {
        event.call.arguments["audited"] = json!(true);
        Ok(())
    });
    agent.events().on_sync(|event: &mut BeforeToolCall| {
        if event.call.arguments["id"] == "cached" {
            event.decision = Some(ToolCallDecision::Replace(json!("from cache")));
        }
        Ok(())
    });
    agent.events().on(|mut event: AfterToolCall| async move {
        event.result.output = format!("{} (checked)", event.result.output);
        Ok(event)
    });
    model.tool_calls(&[("orders_refund", json!({"id": "A1"})), ("orders_refund", json!({"id": "cached"}))]);
    model.text("done");
    let outcome = agent.run("refund", RunOptions::new("chat")).collect().await;
    assert_eq!(*calls.lock(), vec![json!({"id": "A1", "audited": true})]);
    let outputs: Vec<String> = tool_outputs(&outcome.events).into_iter().map(|o| o.0).collect();
    assert_eq!(outputs, vec!["refunded (checked)", "from cache (checked)"]);
}

#[tokio::test]
async fn a_before_llm_call_handler_can_answer_without_the_model() {
    let (agent, model, _store) = scripted_agent(vec![]).await;
    agent.events().on_sync(|event: &mut BeforeLlmCall| {
        assert_eq!(event.spec, "scripted:test");
        event.decision = Some(LlmCallDecision::Finish("canned".into()));
        Ok(())
    });
    let outcome = agent.run("hi", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.text, "canned");
    assert!(model.requests().is_empty());
}

#[tokio::test]
async fn a_before_llm_call_handler_can_rewrite_the_request() {
    let (agent, model, _store) = scripted_agent(vec![]).await;
    agent.events().on_sync(|event: &mut BeforeLlmCall| {
        event.request.max_tokens = Some(42);
        Ok(())
    });
    model.text("ok");
    agent.run("hi", RunOptions::new("chat")).collect().await;
    assert_eq!(model.requests()[0].max_tokens, Some(42));
}

#[tokio::test]
async fn a_failing_handler_fails_the_run_with_its_message() {
    let (agent, model, _store) = scripted_agent(vec![]).await;
    agent.events().on_sync(|_: &mut BeforeLlmCall| Err("budget exhausted for today".into()));
    model.text("never");
    let outcome = agent.run("hi", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.error, Some((bub::agent::FailureKind::Handler, "budget exhausted for today".to_string())));
}

#[derive(Debug)]
struct RefundRequested {
    order: String,
    approved: Option<bool>,
}

impl AgentEvent for RefundRequested {
    fn event_name(&self) -> &'static str {
        "refund_requested"
    }
    fn stopped(&self) -> bool {
        self.approved.is_some()
    }
}

/// Ask for a refund.
#[derive(Deserialize, JsonSchema)]
struct RefundArgs {
    order: String,
}

#[tokio::test]
async fn tools_emit_user_defined_events_that_handlers_decide() {
    let tool = Tool::typed("refund", |args: RefundArgs, ctx: ToolContext| async move {
        let events = ctx.events.ok_or_else(|| ToolError::failed("no bus"))?;
        let decided = events
            .emit(RefundRequested { order: args.order, approved: None })
            .await
            .map_err(|e| ToolError::failed(e.to_string()))?;
        Ok(format!("approved: {}", decided.approved.unwrap_or(false)))
    });
    let (agent, model, _store) = scripted_agent(vec![tool]).await;
    agent.events().on_sync(|event: &mut RefundRequested| {
        event.approved = Some(event.order.starts_with('A'));
        Ok(())
    });
    model.tool_calls(&[("refund", json!({"order": "A7"}))]);
    model.text("ok");
    let outcome = agent.run("refund A7", RunOptions::new("chat")).collect().await;
    assert_eq!(tool_outputs(&outcome.events)[0].0, "approved: true");
}

#[tokio::test]
async fn observers_see_loop_events_in_order() {
    let (agent, model, _store) = scripted_agent(vec![]).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    agent.events().on_any(move |event| log.lock().push(event.event_name()));
    let steps = Arc::new(Mutex::new(Vec::new()));
    let statuses = steps.clone();
    agent.events().on_sync(move |event: &mut StepFinished| {
        statuses.lock().push(event.status);
        Ok(())
    });
    model.text("hi");
    agent.run("hello", RunOptions::new("chat")).collect().await;
    assert_eq!(*seen.lock(), vec!["run_started", "step_started", "before_llm_call", "after_llm_call", "step_finished"]);
    assert_eq!(*steps.lock(), vec![bub::agent::events::StepStatus::Ok]);
}

#[tokio::test]
async fn prompt_sections_render_per_step_and_empty_ones_are_skipped() {
    let (agent, model, _store) = scripted_agent(vec![counter_tool(Arc::new(Mutex::new(Vec::new())))]).await;
    agent.system_prompt().add(|ctx| async move {
        Some(format!("Tools: {}.", ctx.tools.iter().map(|t| t.model_name.as_str()).collect::<Vec<_>>().join(", ")))
    });
    agent.system_prompt().add(|_| async { None });
    let who = agent.system_prompt().add(|ctx| async move { ctx.state.get_str("user").map(|u| format!("User: {u}.")) });
    model.text("a");
    model.text("b");
    let state = bub::agent::TurnState::new();
    state.set("user", json!("Ada"));
    agent.run("hi", RunOptions::new("chat").state(state)).collect().await;
    agent.system_prompt().remove(who);
    agent.run("again", RunOptions::new("chat")).collect().await;
    let requests = model.requests();
    assert_eq!(requests[0].messages[0]["content"], "You are a test agent.\n\nTools: orders_refund.\n\nUser: Ada.");
    assert_eq!(requests[1].messages[0]["content"], "You are a test agent.\n\nTools: orders_refund.");
}
