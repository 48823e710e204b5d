//! The agent loop: build the context, call the model, run the tools it asks
//! for, repeat until it answers; everything on the run's fork of the tape.
//!
//! Rules worth knowing:
//! - an empty prompt is an error and opens no tape;
//! - a context-overflow error hands off once (`auto_handoff/context_overflow`)
//!   and retries the prompt on the shortened context; a second one fails;
//! - messages steered in while the run goes on join before the next step, and
//!   keep the run going for one more step if they arrive after the last one;
//! - `max_steps` bounds the model calls of a run;
//! - a model failure ends the run with an `Error` event naming its kind and the
//!   provider's message, recorded on the tape: never an empty reply;
//! - an answer cut off mid-stream (dropped connection, silence past the
//!   timeout) is recorded as an error with its fragment, never as the
//!   answer; the run yields `Cut` and asks again ([`CUT_RETRIES`]), then fails.

use super::compaction::CompactionOverrides;
use super::events::*;
use super::execute::{CallSite, parse_arguments};
use super::failure::{FailureKind, RunFailure};
use super::prompt::{PromptContext, ToolSummary};
use super::runtime::Agent;
use super::steering::ActiveRun;
use super::stream::{Interruption, Output, RunStream, StreamEvent};
use super::tool_budget::{self, RunSchemaBudget};
use crate::codemode::{self, CodeModeRun};
use crate::message::RequestMessage;
use crate::model::{ChatRequest, ModelError, ModelEvent, ModelSpec, ToolCallRequest, Usage};
use crate::tools::ToolRegistry;
use crate::tools::TurnState;
use futures::StreamExt;
use serde_json::{Map, Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;
use tracing::Instrument;

/// How many times a step whose answer was cut off mid-stream (a retryable
/// failure after some of it arrived) is asked again before the run fails.
pub const CUT_RETRIES: usize = 1;

/// The anchor written when the context overflows.
pub const OVERFLOW_ANCHOR: &str = "auto_handoff/context_overflow";

/// The request fields of a model call: the run's options, plus the session's
/// `,reasoning_effort` (on the turn state) unless the options set their own.
fn request_options(options: &RunOptions, state: &TurnState) -> Map<String, Value> {
    let mut fields = options.options.clone();
    if let Some(effort) = state.get("reasoning_effort").filter(Value::is_string) {
        fields.entry("reasoning_effort").or_insert(effort);
    }
    fields
}

/// Options of one run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The tape (session) to continue.
    pub tape: String,
    /// `provider:model` for this run (else the session's `,model`, else the agent's default).
    pub model: Option<String>,
    pub state: TurnState,
    /// Merge the run's fork into the tape when it ends (false: discard it).
    pub merge_back: bool,
    /// Merge the fork of a run whose stream was dropped (default true: what it
    /// recorded stays, as when a user cancels in `bub chat`). False: a
    /// cancelled run leaves no trace, for a caller that will run the same
    /// prompt again (the gateway, after a stop abandoned the turn).
    pub keep_cancelled: bool,
    pub max_tokens: Option<u32>,
    /// Extra request fields for every model call of the run.
    pub options: Map<String, Value>,
    /// Only these tools (registry or model names); `None`: all.
    pub allowed_tools: Option<Vec<String>>,
    /// Overrides the agent's workspace.
    pub workspace: Option<PathBuf>,
    /// A prompt starting with the command prefix runs as a comma command
    /// (default true). False for prompts that did not come from a person,
    /// such as a subagent's: text the model wrote must never become a command.
    pub commands: bool,
    /// Compaction settings of this run over the agent's (the gateway sets
    /// the chat's `context_window` and its `[agent]` table here).
    pub compaction: CompactionOverrides,
    /// The tool-schema budget of this run in tokens (0: off), over its
    /// caller's (a subagent's) and the agent's; see [`super::tool_budget`].
    pub tool_schema_budget: Option<u64>,
}

impl RunOptions {
    pub fn new(tape: impl Into<String>) -> RunOptions {
        RunOptions {
            tape: tape.into(),
            model: None,
            state: TurnState::new(),
            merge_back: true,
            keep_cancelled: true,
            max_tokens: None,
            options: Map::new(),
            allowed_tools: None,
            workspace: None,
            commands: true,
            compaction: CompactionOverrides::default(),
            tool_schema_budget: None,
        }
    }

    /// This run's tool-schema budget in tokens (0: off), over the agent's.
    pub fn tool_schema_budget(mut self, tokens: u64) -> Self {
        self.tool_schema_budget = Some(tokens);
        self
    }

    /// The model's context window for this run, over the agent's setting
    /// and the family default.
    pub fn context_window(mut self, tokens: u64) -> Self {
        self.compaction.context_window = Some(tokens);
        self
    }

    pub fn model(mut self, spec: impl Into<String>) -> Self {
        self.model = Some(spec.into());
        self
    }

    pub fn state(mut self, state: TurnState) -> Self {
        self.state = state;
        self
    }

    pub fn discard(mut self) -> Self {
        self.merge_back = false;
        self
    }

    /// A cancelled run (its stream dropped) leaves no trace on the tape; see [`RunOptions::keep_cancelled`].
    pub fn discard_if_cancelled(mut self) -> Self {
        self.keep_cancelled = false;
        self
    }

    pub fn allowed_tools(mut self, tools: Vec<String>) -> Self {
        self.allowed_tools = Some(tools);
        self
    }

    pub fn workspace(mut self, workspace: impl Into<PathBuf>) -> Self {
        self.workspace = Some(workspace.into());
        self
    }

    /// The prompt is never a comma command, whatever it starts with; see [`RunOptions::commands`].
    pub fn no_commands(mut self) -> Self {
        self.commands = false;
        self
    }
}

/// The `provider:model` a run's caller chose for it ([`RunOptions::model`]),
/// kept on the turn state so a nested run (a subagent) cannot pick another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedModel(pub String);

/// A run's [`RunOptions::compaction`], kept on the turn state for `,tape.compact`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunCompaction(pub CompactionOverrides);

/// Extra `meta` for the user messages a run records (its prompt, and what is
/// steered in): a caller that knows where the text came from puts it here
/// (the gateway writes `provenance`), so the tape keeps it beside the text.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MessageMeta(pub serde_json::Map<String, Value>);

/// Extra `meta` for what a run writes that carries its context's text on:
/// the anchors its tools write (a handoff's summary, a reset), the model's
/// messages and calls, the tool results. A handler that finds the context's
/// text of doubtful origin puts it here (the policy writes `provenance`), so
/// that text keeps its origin past the next anchor and in `tape.search`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CarriedMeta(pub serde_json::Map<String, Value>);

/// The tools the model of the current run may call, by registry name, kept on
/// the turn state so a nested run (a subagent) gets at most these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunTools(pub Vec<String>);

/// Events buffered between the run task and a slow consumer.
const STREAM_BUFFER: usize = 256;

impl Agent {
    /// Starts a run and returns its stream of events. See [`RunStream`].
    pub fn run(&self, prompt: impl Into<String>, options: RunOptions) -> RunStream {
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let agent = self.clone();
        let prompt = prompt.into();
        let interruption = Interruption::default();
        let out = Output { tx, interruption: interruption.clone(), unfinished: Default::default() };
        // Open before this returns: a message steered right after `run` (a
        // line typed ahead) joins this run instead of queueing behind it
        // while later ones join, which would reorder them.
        let active = self.inner.steering.open(&options.tape);
        let run_id = new_run_id();
        // A child of the caller's span (the gateway's turn): the run's lines,
        // its model calls' and its tool calls' carry the turn's fields.
        let span = tracing::info_span!("run", tape = %options.tape, run_id = %run_id);
        if crate::telemetry::traces::exporting() {
            crate::telemetry::traces::set_name(&span, || "invoke_agent bub".to_string());
            crate::telemetry::traces::set_attribute(&span, "gen_ai.operation.name", "invoke_agent");
            crate::telemetry::traces::set_attribute(&span, "gen_ai.agent.name", "bub");
        }
        let task = tokio::spawn(
            async move {
                agent.drive(prompt, options, run_id, active, &out).await
                // `out` drops here, after the merge: the stream ends last.
            }
            .instrument(span),
        );
        RunStream { events: rx, interruption, task }
    }

    /// Runs to the end and merges the fork. Returns the steered messages a
    /// cancelled run had not read (see [`RunStream::cancel`]); a run that
    /// ends otherwise yields them as [`StreamEvent::Unread`].
    async fn drive(
        &self,
        prompt: String,
        options: RunOptions,
        run_id: String,
        active: ActiveRun,
        out: &Output,
    ) -> Vec<String> {
        if prompt.trim().is_empty() {
            return refuse(&active, out, FailureKind::InvalidInput, "empty prompt".into()).await;
        }
        let parent = match self.tape(&options.tape) {
            Ok(tape) => tape,
            Err(error) => return refuse(&active, out, FailureKind::InvalidInput, error.to_string()).await,
        };
        // Written inside the fork: a discarded or `temp/` run leaves no trace at all.
        let fork = parent.fork();
        let start = match super::settings::read(fork.tape()).await {
            Ok(start) => start,
            Err(error) => return refuse(&active, out, FailureKind::Tape, error.to_string()).await,
        };
        if !start.has_anchor
            && let Err(error) = fork.tape().write_bootstrap_anchor().await
        {
            return refuse(&active, out, FailureKind::Tape, error.to_string()).await;
        }
        let run = RunContext { run_id, tape: fork.tape().clone(), state: options.state.clone() };
        // Decided first, acted on after: the `select!` drops the run (and
        // with it the running tools) before the interruption is recorded.
        let finished = tokio::select! {
            result = self.run_on(&run, &active, prompt, &options, start, out) => Some(result),
            _ = out.cancelled() => None,
        };
        let (result, cancelled) = match finished {
            Some(result) => (result, false),
            None => {
                let reason = out.interruption.reason();
                tracing::info!(run_id = %run.run_id, tape = %options.tape, %reason, "run cancelled");
                if options.merge_back
                    && options.keep_cancelled
                    && let Err(error) = record_interruption(&run, &reason, &out.unfinished_text()).await
                {
                    tracing::error!(run_id = %run.run_id, %error, "cannot record the interruption");
                }
                (Ok(()), true)
            }
        };
        let unread = active.drain();
        drop(active);
        // A run cut short by its tape store (a read or write that failed: the
        // database restarting, a dropped connection) is not part of the
        // conversation: merging what its fork holds would land a prompt
        // without its answer, and a caller that runs the turn again would
        // land the prompt twice. It leaves no trace, like a refused run.
        let store_failed = matches!(&result, Err(failure) if failure.kind == FailureKind::Tape);
        let merged = if options.merge_back && (options.keep_cancelled || !cancelled) && !store_failed {
            fork.merge().await.map(Some)
        } else {
            fork.discard();
            Ok(None)
        };
        if let (Ok(Some(report)), false) = (&merged, cancelled) {
            self.check_compaction(&parent, &run, &options, report).await;
        }
        if let Err(failure) = result {
            tracing::warn!(run_id = %run.run_id, kind = %failure.kind, error = %failure.message, "run failed");
            out.send(StreamEvent::Error { kind: failure.kind, message: failure.message }).await;
        }
        if let Err(error) = merged {
            tracing::error!(run_id = %run.run_id, %error, "merging the run's tape failed");
            out.send(StreamEvent::Error { kind: FailureKind::Tape, message: error.to_string() }).await;
        }
        if cancelled {
            return unread;
        }
        if !unread.is_empty() {
            out.send(StreamEvent::Unread(unread)).await;
        }
        Vec::new()
    }

    /// Hands what the run left to the compaction check (model runs only: a
    /// comma command sets no model).
    async fn check_compaction(
        &self,
        parent: &crate::tape::Tape,
        run: &RunContext,
        options: &RunOptions,
        report: &crate::tape::MergeReport,
    ) {
        let Some(spec) = run.state.get_str("model") else { return };
        let system = run.state.extension::<super::settings::LastSystemPrompt>();
        let system = system.as_ref().and_then(|s| s.0.lock().clone());
        let end = super::compaction::RunEnd {
            tape: parent,
            spec: &spec,
            settings: self.inner.compactions.settings.with(&options.compaction),
            usage: run.state.extension::<LastCallUsage>().map(|u| u.0),
            appended: &report.appended,
            reset: report.reset,
            system: system.as_deref(),
        };
        self.after_run(end).await;
    }

    /// A run from its tools to its end: the call site, then either a comma
    /// command or the model's steps.
    async fn run_on(
        &self,
        run: &RunContext,
        active: &ActiveRun,
        prompt: String,
        options: &RunOptions,
        start: super::settings::RunStart,
        out: &Output,
    ) -> Result<(), RunFailure> {
        let all_tools = self.tools();
        let site = self.call_site(run, options, &all_tools).await?;
        if let Some(prefix) = self.inner.command_prefix.as_deref().filter(|_| options.commands)
            && crate::command::is_command(&prompt, prefix)
        {
            return self.run_as_command(site, all_tools, &prompt, prefix, out).await;
        }
        let turn = self.open_turn(site, active, prompt, options, start, out).await?;
        self.run_steps(&turn).await
    }

    /// Where the run's calls go: its allowed tools, the session's workspace and
    /// environment (kept on the turn state with the session id).
    async fn call_site(
        &self,
        run: &RunContext,
        options: &RunOptions,
        all_tools: &Arc<ToolRegistry>,
    ) -> Result<CallSite, RunFailure> {
        let tools = match &options.allowed_tools {
            Some(names) => {
                Arc::new(all_tools.only(names).map_err(|e| RunFailure::new(FailureKind::InvalidInput, e.to_string()))?)
            }
            None => all_tools.clone(),
        };
        let (workspace, environment) = match &self.inner.environments {
            Some(environments) => {
                let environment = environments
                    .get(&options.tape, options.workspace.clone())
                    .await
                    .map_err(|e| RunFailure::new(FailureKind::Environment, e.to_string()))?;
                run.state.insert_extension(environment.clone());
                (environment.workspace().to_path_buf(), Some(environment))
            }
            None => (options.workspace.clone().unwrap_or_else(|| self.inner.workspace.clone()), None),
        };
        if let Some(pinned) = &options.model {
            run.state.insert_extension(PinnedModel(pinned.clone()));
        }
        if options.compaction != CompactionOverrides::default() {
            run.state.insert_extension(RunCompaction(options.compaction));
        }
        run.state.set("session_id", json!(options.tape));
        run.state.set("workspace", json!(workspace.display().to_string()));
        Ok(CallSite { agent: self.clone(), run: run.clone(), tools, workspace, environment })
    }

    /// A comma command as the whole run: it may call any tool of the agent
    /// (policy still decides, through the events).
    async fn run_as_command(
        &self,
        site: CallSite,
        all_tools: Arc<ToolRegistry>,
        prompt: &str,
        prefix: &str,
        out: &Output,
    ) -> Result<(), RunFailure> {
        let allowed = site.tools.iter().map(|t| t.name().to_string()).collect();
        let started = RunStarted {
            run: site.run.clone(),
            model: String::new(),
            prompt: prompt.to_string(),
            allowed_tools: allowed,
        };
        self.inner.events.emit(started).await?;
        let commands = CallSite { tools: all_tools, ..site };
        super::commands::run_command(&commands, prompt, prefix, out).await
    }

    /// Settles what the model's steps work with — the offered tools (code mode
    /// decides), the model, the session's switches on the turn state — and
    /// announces the run.
    async fn open_turn<'a>(
        &self,
        site: CallSite,
        active: &'a ActiveRun,
        prompt: String,
        options: &'a RunOptions,
        start: super::settings::RunStart,
        out: &'a Output,
    ) -> Result<Turn<'a>, RunFailure> {
        let (run, switches) = (&site.run, start.switches);
        run.state.insert_extension(start.last_system);
        let offered = codemode::offered_tools(CodeModeRun {
            tools: site.tools.clone(),
            state: run.state.clone(),
            switched_on: switches.code_mode,
            codemode_dir: self.inner.codemode_dir.clone(),
            workspace: site.workspace.clone(),
            session: options.tape.clone(),
            execute: site.code_calls(),
        })
        .await
        .map_err(|e| RunFailure::new(FailureKind::CodeMode, format!("cannot write the code-mode stub: {e}")))?;
        let spec = self.model_spec(switches.model, options)?;
        let settings = self.inner.compactions.settings.with(&options.compaction);
        self.wait_if_compacting(&options.tape, &spec, &settings).await;
        run.state.set("model", json!(spec));
        run.state.insert_extension(RunTools(site.tools.model_tools().map(|t| t.name().to_string()).collect()));
        // A caller's own `reasoning_effort` on the turn state wins over the session's switch.
        if let Some(effort) = switches.reasoning_effort
            && run.state.get("reasoning_effort").is_none()
        {
            run.state.set("reasoning_effort", json!(effort));
        }
        let (offered, site) = self.budget_tools(offered, site, options);
        let run = &site.run;
        let allowed = offered.tools.model_tools().map(|t| t.name().to_string()).collect();
        self.inner
            .events
            .emit(RunStarted { run: run.clone(), model: spec.clone(), prompt: prompt.clone(), allowed_tools: allowed })
            .await?;
        Ok(Turn { site, offered, spec, prompt, active, options, out })
    }

    /// The turn's tools under the tool-schema budget (the run's own, else
    /// its caller's, else the agent's; see [`super::tool_budget`]): past
    /// it, `tools.describe` is offered and callable too.
    fn budget_tools(
        &self,
        mut offered: codemode::Offered,
        mut site: CallSite,
        options: &RunOptions,
    ) -> (codemode::Offered, CallSite) {
        let state = &site.run.state;
        let inherited = state.extension::<RunSchemaBudget>().map(|budget| budget.0);
        let budget = options.tool_schema_budget.or(inherited).unwrap_or(self.inner.tool_schema_budget);
        state.insert_extension(RunSchemaBudget(budget));
        (offered.tools, site.tools) = tool_budget::apply(offered.tools, site.tools, state, budget);
        (offered, site)
    }

    /// The model's steps, until it answers with nothing left to read, or
    /// `max_steps` model calls have not been enough.
    async fn run_steps(&self, turn: &Turn<'_>) -> Result<(), RunFailure> {
        let mut pending = vec![user_message(turn.prompt.clone())];
        let mut handed_off = false;
        for step in 1..=self.inner.max_steps {
            let started = Instant::now();
            pending.extend(turn.active.drain().into_iter().map(user_message));
            let step_prompt = pending.iter().filter_map(|m| m["content"].as_str()).collect::<Vec<_>>().join("\n");
            let run = turn.site.run.clone();
            self.inner.events.emit(StepStarted { run, step, messages: std::mem::take(&mut pending) }).await?;
            let answer = self.answer(turn, step, &step_prompt).await?;
            let finished = |status, error: Option<String>| StepFinished {
                run: turn.site.run.clone(),
                step,
                status,
                elapsed_ms: started.elapsed().as_millis() as u64,
                error,
            };
            match answer {
                Err(ModelFailure { error: ModelError::ContextOverflow { message, .. }, .. }) if !handed_off => {
                    handed_off = true;
                    self.inner.events.emit(finished(StepStatus::AutoHandoff, Some(message.clone()))).await?;
                    self.overflow_handoff(turn, &message).await?;
                    pending.push(user_message(turn.prompt.clone()));
                }
                Err(ModelFailure { error, partial }) => {
                    self.inner.events.emit(finished(StepStatus::Error, Some(error.to_string()))).await?;
                    let message = if partial.streamed {
                        format!("the model's answer was cut off: {error}")
                    } else {
                        error.to_string()
                    };
                    return Err(RunFailure::new(FailureKind::from(&error), message));
                }
                Ok(answer) if answer.calls.is_empty() => {
                    turn.out.send(StreamEvent::Final { step, text: answer.text }).await;
                    let more = turn.active.pending_or_close();
                    let status = if more { StepStatus::Continue } else { StepStatus::Ok };
                    self.inner.events.emit(finished(status, None)).await?;
                    if !more {
                        return Ok(());
                    }
                }
                Ok(answer) => {
                    let results = run_calls(&turn.site, &turn.offered.tools, &answer.calls, turn.out).await?;
                    let run = turn.site.run.clone();
                    self.inner.events.emit(ChatCompleted { run, step, calls: answer.calls, results }).await?;
                    turn.out.send(StreamEvent::Final { step, text: answer.text }).await;
                    self.inner.events.emit(finished(StepStatus::Continue, None)).await?;
                }
            }
        }
        Err(RunFailure::new(FailureKind::MaxSteps, format!("max_steps reached ({})", self.inner.max_steps)))
    }

    /// The context was refused as too long: a summary of all of it when the
    /// model gives one (the anchor `auto_handoff/context_overflow` with
    /// `{summary, covers}`), else the anchor alone with the reason.
    async fn overflow_handoff(&self, turn: &Turn<'_>, message: &str) -> Result<(), RunFailure> {
        let tape = &turn.site.run.tape;
        let settings = self.inner.compactions.settings.with(&turn.options.compaction);
        match self.compact_tape(tape, &turn.spec, &settings, super::compaction::Trigger::Overflow).await {
            Ok(Some(_)) => return Ok(()),
            Ok(None) => {}
            Err(error) => tracing::warn!(run_id = %turn.site.run.run_id, %error, "no summary for the overflow handoff"),
        }
        let reason = json!({"reason": "context_length_exceeded", "error": message});
        tape.handoff(OVERFLOW_ANCHOR, reason).await?;
        Ok(())
    }

    /// One step's answer: the model is asked again when its answer was cut
    /// off mid-stream by a retryable failure, up to [`CUT_RETRIES`] times.
    async fn answer(
        &self,
        turn: &Turn<'_>,
        step: usize,
        step_prompt: &str,
    ) -> Result<Result<ModelAnswer, ModelFailure>, RunFailure> {
        let run = &turn.site.run;
        let mut cuts_left = CUT_RETRIES;
        loop {
            let call = ModelStep {
                run,
                step,
                spec: &turn.spec,
                tools: &turn.offered.tools,
                prompt: step_prompt,
                options: turn.options,
            };
            match self.call_model(&call, turn.out).await? {
                Err(failure) if failure.partial.streamed => {
                    let retrying = cuts_left > 0 && failure.error.is_retryable();
                    tracing::warn!(run_id = %run.run_id, step, kind = failure.error.kind(), error = %failure.error, retrying, "the model's answer was cut off");
                    turn.out
                        .send(StreamEvent::Cut {
                            kind: FailureKind::from(&failure.error),
                            message: failure.error.to_string(),
                            partial: failure.partial.text.clone(),
                            retrying,
                        })
                        .await;
                    if !retrying {
                        return Ok(Err(failure));
                    }
                    cuts_left -= 1;
                }
                answer => return Ok(answer),
            }
        }
    }

    /// The run's model: the run's own, else the session's latest `,model`
    /// switch, else the agent's default.
    fn model_spec(&self, session_model: Option<String>, options: &RunOptions) -> Result<String, RunFailure> {
        if let Some(spec) = options.model.clone().or(session_model) {
            return Ok(spec);
        }
        self.inner.default_model.clone().ok_or_else(|| {
            RunFailure::new(
                FailureKind::NotConfigured,
                "no model configured: set BUB_MODEL to provider:model, e.g. openai:gpt-4o-mini",
            )
        })
    }

    /// One model call, streamed to `out`. `Ok(Err(_))` is a model failure, with
    /// what streamed before it (the loop decides what to do); `Err(_)` is a
    /// handler or tape failure.
    async fn call_model(
        &self,
        call: &ModelStep<'_>,
        out: &Output,
    ) -> Result<Result<ModelAnswer, ModelFailure>, RunFailure> {
        let (run, step) = (call.run, call.step);
        let request = self.request(call).await?;
        let before = self
            .inner
            .events
            .emit(BeforeLlmCall { run: run.clone(), step, spec: call.spec.to_string(), request, decision: None })
            .await?;
        let (spec, request) = (before.spec, before.request);
        let started = Instant::now();
        let mut answer = ModelAnswer::default();
        let result = match before.decision {
            Some(LlmCallDecision::Finish(text)) => {
                out.send(StreamEvent::Text(text.clone())).await;
                answer.text = text;
                Ok(())
            }
            None => self.stream_model(&spec, &request, &mut answer, out).await,
        };
        let after = AfterLlmCall {
            run: run.clone(),
            step,
            spec,
            request,
            text: answer.text.clone(),
            tool_calls: answer.calls.clone(),
            usage: answer.usage,
            error: result.clone().err(),
            elapsed: started.elapsed(),
        };
        if let Some(usage) = answer.usage {
            token_metrics(&usage);
            run.state.insert_extension(LastCallUsage(usage));
        }
        self.inner.events.emit(after).await?;
        out.recorded();
        Ok(match result {
            Ok(()) => Ok(answer),
            Err(error) => Err(ModelFailure { error, partial: answer }),
        })
    }

    /// The request of a model call: the system prompt (code mode's block
    /// included), the tape's context, the offered tools and the options.
    async fn request(&self, call: &ModelStep<'_>) -> Result<ChatRequest, RunFailure> {
        let (run, spec) = (call.run, call.spec);
        let visible: Vec<_> = call.tools.model_tools().collect();
        let definitions = tool_budget::definitions(visible.iter().copied(), &run.state);
        let prompt_context = PromptContext {
            prompt: call.prompt.to_string(),
            tools: visible
                .iter()
                .zip(&definitions)
                .map(|(t, (_, compact))| ToolSummary {
                    name: t.name().into(),
                    model_name: t.model_name(),
                    description: if *compact { t.summary() } else { t.description().into() },
                    compact: *compact,
                })
                .collect(),
            model: spec.to_string(),
            tape: run.tape.clone(),
            state: run.state.clone(),
        };
        let mut system = self.inner.system_prompt.render(&prompt_context).await;
        if let Some(block) = codemode::prompt_block(&run.state) {
            system = if system.is_empty() { block } else { format!("{system}\n\n{block}") };
        }
        let history: Vec<RequestMessage> = match &self.inner.context {
            Some(selector) => run.tape.context_with(selector).await?.into_iter().map(Into::into).collect(),
            None => run.tape.request_context().await?,
        };
        let mut messages = Vec::with_capacity(history.len() + 1);
        if !system.is_empty() {
            messages.push(json!({"role": "system", "content": system}).into());
        }
        messages.extend(history);
        if let Some(images) = run.state.extension::<super::images::PromptImages>()
            && self.inner.models.as_ref().is_some_and(|models| models.takes_images(spec))
        {
            images.attach(&mut messages);
        }
        Ok(ChatRequest {
            model: ModelSpec::parse(spec).map_or_else(|_| spec.to_string(), |spec| spec.model),
            messages,
            tools: definitions.into_iter().map(|(definition, _)| definition).collect(),
            max_tokens: call.options.max_tokens.or(self.inner.max_tokens),
            options: request_options(call.options, &run.state),
            cache_key: Some(cache_key(run.tape.name().as_str())),
        })
    }

    async fn stream_model(
        &self,
        spec: &str,
        request: &ChatRequest,
        answer: &mut ModelAnswer,
        out: &Output,
    ) -> Result<(), ModelError> {
        let models = self.inner.models.as_ref().ok_or_else(|| {
            ModelError::NotConfigured(
                "no model configured: set BUB_MODEL to provider:model, e.g. openai:gpt-4o-mini".into(),
            )
        })?;
        let client = models.client(spec)?;
        let mut stream = client.stream(request).await?;
        while let Some(item) = stream.next().await {
            match item? {
                ModelEvent::TextDelta(delta) => {
                    answer.streamed = true;
                    answer.text.push_str(&delta);
                    out.send(StreamEvent::Text(delta)).await;
                }
                ModelEvent::ReasoningDelta(delta) => {
                    answer.streamed = true;
                    out.send(StreamEvent::Reasoning(delta)).await;
                }
                ModelEvent::ToolCall(call) => {
                    answer.streamed = true;
                    answer.calls.push(call);
                }
                ModelEvent::Usage(usage) => {
                    answer.usage = Some(usage);
                    out.send(StreamEvent::Usage(usage)).await;
                }
                ModelEvent::Finish(_) => {}
            }
        }
        Ok(())
    }
}

/// The usage of the run's latest model call, for the compaction check.
struct LastCallUsage(Usage);

#[derive(Default)]
struct ModelAnswer {
    text: String,
    calls: Vec<ToolCallRequest>,
    usage: Option<Usage>,
    /// Some of the answer (text, reasoning or a call) arrived: a failure
    /// after this cut the answer off.
    streamed: bool,
}

/// What one model call of a step is made of.
struct ModelStep<'a> {
    run: &'a RunContext,
    step: usize,
    /// `provider:model`, before `BeforeLlmCall` handlers.
    spec: &'a str,
    /// What the model is offered.
    tools: &'a ToolRegistry,
    /// The step's new user text, for the system prompt's sections.
    prompt: &'a str,
    options: &'a RunOptions,
}

/// What the model's steps of one run work with.
struct Turn<'a> {
    /// Where calls go; its tools are the run's allowed tools.
    site: CallSite,
    /// What the model is offered (code mode may offer less); held to the
    /// run's end, since it keeps calls from code working (see [`codemode`]).
    offered: codemode::Offered,
    /// `provider:model`.
    spec: String,
    prompt: String,
    active: &'a ActiveRun,
    options: &'a RunOptions,
    out: &'a Output,
}

/// A user message of the model's context.
fn user_message(text: String) -> Value {
    json!({"role": "user", "content": text})
}

/// A run that cannot start: its error, then what was steered into it (the
/// inbox closed first, so nothing more arrives unread).
async fn refuse(active: &ActiveRun, out: &Output, kind: FailureKind, message: String) -> Vec<String> {
    let unread = active.close();
    out.send(StreamEvent::Error { kind, message }).await;
    if !unread.is_empty() {
        out.send(StreamEvent::Unread(unread)).await;
    }
    Vec::new()
}

/// A model call that failed, and what it had streamed before.
struct ModelFailure {
    error: ModelError,
    partial: ModelAnswer,
}

/// Runs a step's calls concurrently; results come back in call order.
/// `offered` is what the model was shown: a call naming anything else (a
/// command-only tool such as `code_mode`, a tool code mode keeps inside
/// `run_code`) is an unknown tool, even if the run could reach it otherwise.
async fn run_calls(
    site: &CallSite,
    offered: &ToolRegistry,
    calls: &[ToolCallRequest],
    out: &Output,
) -> Result<Vec<String>, RunFailure> {
    for call in calls {
        let event = StreamEvent::ToolCall {
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        };
        out.send(event).await;
    }
    let runs = calls.iter().map(|request| async move {
        let (arguments, mut preset) = match parse_arguments(&request.arguments) {
            Ok(arguments) => (arguments, None),
            Err(error) => (Value::String(request.arguments.clone()), Some(error)),
        };
        let tool = match offered.get(&request.name).filter(|tool| tool.agent_use()) {
            Some(tool) => tool.name().to_string(),
            None => {
                preset = Some(site.unknown_tool(&request.name, offered));
                request.name.clone()
            }
        };
        let call = ToolCall {
            tool,
            call_id: request.id.clone(),
            arguments,
            command: false,
            code_mode: false,
            parent_call_id: None,
        };
        site.execute(call, preset).await
    });
    let results = futures::future::join_all(runs).await;
    let mut outputs = Vec::with_capacity(results.len());
    for (request, result) in calls.iter().zip(results) {
        let result = result?;
        out.send(StreamEvent::ToolResult {
            call_id: request.id.clone(),
            name: request.name.clone(),
            output: result.output.clone(),
            is_error: result.is_error(),
        })
        .await;
        outputs.push(result.output);
    }
    Ok(outputs)
}

/// Writes on the run's tape that it was interrupted: a result for each call
/// left without one (the next context must pair every call with a result, and
/// the tape must not pretend the tool finished), then an `interrupted` error
/// with the text the step under way had streamed (`details.partial_text`).
async fn record_interruption(run: &RunContext, reason: &str, partial: &str) -> Result<(), crate::tape::TapeError> {
    use crate::tape::{EntryKind, NewEntry, TapeQuery};
    let message = format!("interrupted: {reason}");
    let recent = TapeQuery::all().kinds([EntryKind::ToolCall, EntryKind::ToolResult]).newest_first().limit(64);
    let last = run.tape.read(&recent).await?.into_iter().find(|entry| entry.in_context());
    let mut entries = Vec::new();
    if let Some(calls) = last.filter(|entry| entry.kind == EntryKind::ToolCall) {
        let count = calls.payload.get("calls").and_then(Value::as_array).map_or(0, Vec::len);
        let results = (0..count).map(|_| json!(format!("error: {message} before the tool finished"))).collect();
        entries.push(NewEntry::tool_result(results));
    }
    let details = (!partial.is_empty()).then(|| json!({"partial_text": partial}));
    entries.push(NewEntry::error("interrupted", message, details));
    let entries = entries.into_iter().map(|e| e.with_meta("run_id", json!(run.run_id))).collect();
    run.tape.append_all(entries).await.map(|_| ())
}

/// Counts a model call's tokens on `/metrics`: `bub_model_tokens_total`
/// with `kind` `input` (every prompt token, cached ones included), `cached`
/// (the part served from the provider's cache) and `output`.
pub(crate) fn token_metrics(usage: &crate::model::Usage) {
    metrics::counter!("bub_model_tokens_total", "kind" => "input").increment(usage.prompt_tokens);
    metrics::counter!("bub_model_tokens_total", "kind" => "cached").increment(usage.cached_tokens.unwrap_or(0));
    metrics::counter!("bub_model_tokens_total", "kind" => "output").increment(usage.completion_tokens);
}

/// The prompt-cache key of a session: a hash of its name (the provider
/// needs a stable key, not the chat's id). SHA-256, not `DefaultHasher`,
/// whose output may change between Rust releases: replicas and upgrades
/// keep sending the same key.
fn cache_key(session: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest: String = Sha256::digest(session.as_bytes()).iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("bub-{digest}")
}

/// `run-<UTC date and time with microseconds>Z`, unique enough per process and sortable.
fn new_run_id() -> String {
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("run-{}-{}", chrono::Utc::now().format("%Y%m%dT%H%M%S%6fZ"), &suffix[..6])
}
