//! Overhead of the agent loop itself, with an in-process model that answers at
//! once and an in-memory tape store, so only bub's own work is measured.
//!
//! - `agent/step`: one run of one model step (no tools): fork, bootstrap check,
//!   context build, prompt render, events, recording, merge. Target: well
//!   under 1 ms.
//! - `agent/tool_step`: a run of two steps with one tool call in between.
//! - `agent/command`: one comma command (parse, bind, events, record, merge).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "measurement code: a setup step that fails leaves nothing to measure, and says why as it panics"
)]

use async_trait::async_trait;
use bub::agent::{Agent, RunOptions};
use bub::model::{
    ChatRequest, FinishReason, ModelClient, ModelError, ModelEvent, ModelStream, SingleClient, ToolCallRequest,
};
use bub::tools::Tool;
use criterion::{Criterion, criterion_group, criterion_main};
use futures::StreamExt;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Answers "ok" at once; when `tool_first` is set, every other call asks for `noop`.
struct InstantModel {
    tool_first: bool,
    next_is_tool: AtomicBool,
}

#[async_trait]
impl ModelClient for InstantModel {
    fn provider(&self) -> &str {
        "instant"
    }

    async fn stream(&self, _request: &ChatRequest) -> Result<ModelStream, ModelError> {
        let wants_tool = self.tool_first && !self.next_is_tool.fetch_xor(true, Ordering::Relaxed);
        let events = if wants_tool {
            vec![
                Ok(ModelEvent::ToolCall(ToolCallRequest {
                    id: "c".into(),
                    name: "noop".into(),
                    arguments: "{}".into(),
                })),
                Ok(ModelEvent::Finish(FinishReason::ToolCalls)),
            ]
        } else {
            vec![Ok(ModelEvent::TextDelta("ok".into())), Ok(ModelEvent::Finish(FinishReason::Stop))]
        };
        Ok(futures::stream::iter(events).boxed())
    }
}

fn agent(tool_first: bool) -> Agent {
    let model = InstantModel { tool_first, next_is_tool: AtomicBool::new(false) };
    Agent::builder()
        .model(Arc::new(SingleClient(Arc::new(model))), "instant:model")
        .tool(Tool::new("noop", "does nothing", json!({"type": "object"}), |_, _| async { Ok(json!("done")) }))
        .command_prefix(",")
        .system_prompt("You are a benchmark.")
        .build()
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut group = c.benchmark_group("agent");
    for (name, tool_first, prompt) in
        [("step", false, "hello"), ("tool_step", true, "use the tool"), ("command", false, ",noop")]
    {
        let agent = agent(tool_first);
        let mut turn = 0u64;
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter(|| {
                // A fresh tape per run: the first turn of a session, bootstrap anchor included.
                turn += 1;
                let options = RunOptions::new(format!("bench-{turn}"));
                let run = agent.run(prompt, options);
                async move {
                    let outcome = run.collect().await;
                    assert!(outcome.error.is_none(), "{:?}", outcome.error);
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
