//! Comma commands inside a run: parse, bind the arguments to the tool's
//! schema, run the tool through the same events as a model call (with
//! `command = true`, so a policy can deny it), record a `command` event and
//! return the output as the run's text.
//!
//! A name that is no tool runs the whole line through `bash` — only when the
//! agent has a `bash` tool, and still through the events, so a policy that
//! denies `bash` denies the fallback too.

use super::events::{CommandFinished, ToolCall};
use super::execute::CallSite;
use super::failure::{FailureKind, RunFailure};
use super::stream::{Output, StreamEvent};
use crate::command::{CommandLine, bind_arguments, parse_command};
use crate::tools::ToolError;
use serde_json::json;
use std::time::Instant;

/// Runs the command in `text` and streams its output as one `Text` and one
/// `Final`, then an `Error` ([`FailureKind::Command`], its message the
/// output again) if it failed.
pub(crate) async fn run_command(site: &CallSite, text: &str, prefix: &str, out: &Output) -> Result<(), RunFailure> {
    let started = Instant::now();
    let (name, raw, outcome) = match parse_command(text, prefix) {
        Some(Ok(line)) => {
            let outcome = execute(site, &line).await?;
            (outcome.0, line.raw.clone(), outcome.1)
        }
        Some(Err(error)) => {
            let raw = text.trim().strip_prefix(prefix).unwrap_or(text).trim().to_string();
            let name = raw.split_whitespace().next().unwrap_or_default().to_string();
            (name, raw, Err(error.to_string()))
        }
        None => (String::new(), text.to_string(), Err("not a command".to_string())),
    };
    let (ok, output) = match outcome {
        Ok(output) => (true, output),
        Err(message) => (false, format!("error: {message}")),
    };
    site.agent
        .inner
        .events
        .emit(CommandFinished {
            run: site.run.clone(),
            raw,
            name,
            ok,
            elapsed_ms: started.elapsed().as_millis() as u64,
            output: output.clone(),
        })
        .await?;
    out.send(StreamEvent::Text(output.clone())).await;
    out.send(StreamEvent::Final { step: 0, text: output.clone() }).await;
    if !ok {
        // The output says what failed; the run fails too (`bub run` exits non-zero).
        out.send(StreamEvent::Error { kind: FailureKind::Command, message: output }).await;
    }
    Ok(())
}

/// The tool that ran and its output (or the error text).
async fn execute(
    site: &CallSite,
    line: &CommandLine,
) -> Result<(String, Result<String, String>), crate::tools::bus::HandlerError> {
    let (tool, arguments) = match site.tools.get(&line.name) {
        Some(tool) => match bind_arguments(line, tool.parameters()) {
            Ok(arguments) => (tool.name().to_string(), arguments),
            Err(error) => return Ok((tool.name().to_string(), Err(error.to_string()))),
        },
        None if site.tools.get("bash").is_some() => ("bash".to_string(), json!({"cmd": line.raw})),
        None => {
            let close = site.tools.suggest(&line.name);
            let hint = if close.is_empty() { String::new() } else { format!("; did you mean {}?", close.join(", ")) };
            return Ok((line.name.clone(), Err(format!("unknown command `{}`{hint}", line.name))));
        }
    };
    let call = ToolCall {
        tool: tool.clone(),
        call_id: "command".into(),
        arguments,
        command: true,
        code_mode: false,
        parent_call_id: None,
    };
    let result = site.execute(call, None).await?;
    let output = match result.value {
        Ok(_) => Ok(result.output),
        Err(error) => Err(command_error(&error)),
    };
    Ok((tool, output))
}

/// One line for an operator: the message, plus the output a failing shell
/// command printed.
fn command_error(error: &ToolError) -> String {
    let output = error.details.as_ref().and_then(|d| d.get("output")).and_then(|o| o.as_str()).unwrap_or_default();
    if output.trim().is_empty() { error.message.clone() } else { format!("{}\n{}", error.message, output.trim_end()) }
}
