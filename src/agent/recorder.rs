//! The tape recorder: the first handler on every agent's bus. It turns loop
//! events into tape entries, each tagged with `meta.run_id`:
//!
//! | event | entries |
//! |---|---|
//! | `RunStarted` | event `loop.start {model, prompt, allowed_tools}` |
//! | `StepStarted` | event `loop.step.start {step}`, then the step's user messages (with the run's [`MessageMeta`](super::MessageMeta)) |
//! | `AfterLlmCall` | the system prompt (only when it differs from the last one on the tape), the assistant text, the tool calls, event `run {status, provider, model, usage, elapsed_ms}`; on failure no text or calls but an `error` entry, whose `details` keep what streamed before a cut (`{cut, partial_text, partial_tool_calls}`) |
//! | `ChatCompleted` | one `tool_result` entry, results in call order |
//! | `StepFinished` | event `loop.step {step, status, elapsed_ms, error?}` |
//! | `CommandFinished` | event `command {raw, name, status, elapsed_ms, output}` |
//! | `AfterToolCall` from code (`call.code_mode`) | one `tool_call` entry (the call, OpenAI shape) and one `tool_result` entry (its structured result, or the error `{kind, message, details?}` with `meta.is_error`), both with `meta.code_mode = true`, `meta.call_id`, `meta.parent_call_id` (the `run_code` call) and hidden from the model's context |
//!
//! Because it is registered first, what it records is what happened before
//! any other handler could react.
//!
//! Calls made from code land between the `run_code` call and its result, so a
//! chat context could not hold them (a tool call must be followed by its own
//! results); they are there for an audit and `bub tape show`, not the model,
//! which reads only what the code printed. Their ids (`<run_code id>/code-<n>`)
//! pair each call with its result even when the code ran them at once.

use super::events::*;
use super::settings::LastSystemPrompt;
use crate::model::ModelSpec;
use crate::tape::{EntryKind, NewEntry, TapeQuery};
use crate::tools::bus::{EventBus, HandlerError};
use serde_json::{Value, json};

/// Registers the recorder's handlers on `bus`.
pub fn register(bus: &EventBus) {
    bus.on(|event: RunStarted| async move {
        let data = json!({"model": event.model, "prompt": event.prompt, "allowed_tools": event.allowed_tools});
        write(&event.run, vec![NewEntry::event("loop.start", data)]).await?;
        Ok(event)
    });
    bus.on(|event: StepStarted| async move {
        let mut entries = vec![NewEntry::event("loop.step.start", json!({"step": event.step}))];
        let extra = event.run.state.extension::<super::run::MessageMeta>();
        for message in &event.messages {
            let mut entry = NewEntry::message(message.clone())?;
            if let Some(extra) = &extra {
                for (key, value) in &extra.0 {
                    entry = entry.with_meta(key.clone(), value.clone());
                }
            }
            entries.push(entry);
        }
        write(&event.run, entries).await?;
        Ok(event)
    });
    bus.on(|event: AfterLlmCall| async move {
        write(&event.run, carried(&event.run, llm_call_entries(&event).await?)).await?;
        Ok(event)
    });
    bus.on(|event: ChatCompleted| async move {
        if !event.results.is_empty() {
            let results = event.results.iter().cloned().map(Value::String).collect();
            write(&event.run, carried(&event.run, vec![NewEntry::tool_result(results)])).await?;
        }
        Ok(event)
    });
    bus.on(|event: StepFinished| async move {
        let mut data = json!({"step": event.step, "status": event.status, "elapsed_ms": event.elapsed_ms});
        if let Some(error) = &event.error {
            data["error"] = json!(error);
        }
        write(&event.run, vec![NewEntry::event("loop.step", data)]).await?;
        Ok(event)
    });
    bus.on(|event: CommandFinished| async move {
        let data = json!({
            "raw": event.raw,
            "name": event.name,
            "status": if event.ok { "ok" } else { "error" },
            "elapsed_ms": event.elapsed_ms,
            "output": event.output,
        });
        write(&event.run, vec![NewEntry::event("command", data)]).await?;
        Ok(event)
    });
    bus.on(|event: AfterToolCall| async move {
        if event.call.code_mode {
            write(&event.run, code_call_entries(&event)).await?;
        }
        Ok(event)
    });
}

/// `entries` with the run's [`CarriedMeta`](super::CarriedMeta), where the
/// entry does not say otherwise: the model's words and the tools' results
/// of a run whose context held untrusted text carry its origin.
fn carried(run: &RunContext, entries: Vec<NewEntry>) -> Vec<NewEntry> {
    let Some(carried) = run.state.extension::<super::CarriedMeta>() else { return entries };
    entries
        .into_iter()
        .map(|mut entry| {
            if matches!(entry.kind, EntryKind::Message | EntryKind::ToolCall | EntryKind::ToolResult) {
                for (key, value) in &carried.0 {
                    if !entry.meta.contains_key(key) {
                        entry = entry.with_meta(key.clone(), value.clone());
                    }
                }
            }
            entry
        })
        .collect()
}

/// The call and result of one tool call made from code (see the module docs).
fn code_call_entries(event: &AfterToolCall) -> Vec<NewEntry> {
    let call = &event.call;
    let request = crate::model::ToolCallRequest {
        id: call.call_id.clone(),
        name: crate::tools::model_name(&call.tool),
        arguments: call.arguments.to_string(),
    };
    let mark = |entry: NewEntry| {
        entry
            .with_meta("code_mode", json!(true))
            .with_meta("call_id", json!(call.call_id))
            .with_meta("parent_call_id", json!(call.parent_call_id))
            .hidden_from_context()
    };
    let result = match &event.result.value {
        Ok(value) => NewEntry::tool_result(vec![value.clone()]),
        Err(error) => NewEntry::tool_result(vec![error.to_value()]).with_meta("is_error", json!(true)),
    };
    vec![mark(NewEntry::tool_call(vec![request.to_openai()])), mark(result)]
}

async fn llm_call_entries(event: &AfterLlmCall) -> Result<Vec<NewEntry>, HandlerError> {
    let mut entries = Vec::new();
    let system = event
        .request
        .messages
        .first()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("system"))
        .and_then(|m| m.get("content")?.as_str())
        .unwrap_or_default();
    if !system.is_empty() {
        let changed = match event.run.state.extension::<LastSystemPrompt>() {
            // Seeded when the run started: no read per step.
            Some(last) => {
                let mut last = last.0.lock();
                let changed = last.as_deref() != Some(system);
                if changed {
                    *last = Some(system.to_string());
                }
                changed
            }
            None => {
                let query = TapeQuery::all().kinds([EntryKind::System]).newest_first().limit(1);
                let last = event.run.tape.read(&query).await?;
                last.first().and_then(|e| e.payload.get("content")).and_then(Value::as_str) != Some(system)
            }
        };
        if changed {
            entries.push(NewEntry::system(system));
        }
    }
    // A failed call's text and calls are a fragment, not what the model
    // said: they go in the error entry, out of every later context.
    if event.error.is_none() && !event.text.is_empty() {
        entries.push(NewEntry::chat("assistant", event.text.clone()));
    }
    if event.error.is_none() && !event.tool_calls.is_empty() {
        entries.push(NewEntry::tool_call(event.tool_calls.iter().map(|c| c.to_openai()).collect()));
    }
    let (provider, model) = match ModelSpec::parse(&event.spec) {
        Ok(spec) => (spec.provider, spec.model),
        Err(_) => (String::new(), event.spec.clone()),
    };
    let mut run = json!({
        "status": if event.error.is_some() { "error" } else { "ok" },
        "provider": provider,
        "model": model,
        "elapsed_ms": event.elapsed.as_millis() as u64,
    });
    if let Some(usage) = &event.usage {
        run["usage"] = serde_json::to_value(usage)?;
    }
    entries.push(NewEntry::event("run", run));
    if let Some(error) = &event.error {
        entries.push(NewEntry::error(error.kind(), error.to_string(), cut_fragment(event)));
    }
    Ok(entries)
}

/// What a call that failed mid-stream had sent: `{cut: true, partial_text,
/// partial_tool_calls}`; `None` when nothing had arrived.
fn cut_fragment(event: &AfterLlmCall) -> Option<Value> {
    if event.text.is_empty() && event.tool_calls.is_empty() {
        return None;
    }
    let calls: Vec<Value> = event.tool_calls.iter().map(|c| c.to_openai()).collect();
    Some(json!({"cut": true, "partial_text": event.text, "partial_tool_calls": calls}))
}

async fn write(run: &RunContext, entries: Vec<NewEntry>) -> Result<(), HandlerError> {
    let entries = entries.into_iter().map(|e| e.with_meta("run_id", json!(run.run_id))).collect();
    run.tape.append_all(entries).await?;
    Ok(())
}
