//! [`Agent`]: tools, system prompt, model, tape store and event bus, shared by
//! every run it starts. Build one with [`Agent::builder`].

use super::prompt::SystemPrompt;
use super::recorder;
use super::steering::Steering;
use crate::environment::Environments;
use crate::model::ModelProvider;
use crate::tape::{ContextSelector, InMemoryTapeStore, Tape, TapeError, TapeName, TapeSettings, TapeStore};
use crate::tools::bus::EventBus;
use crate::tools::{NameTaken, Tool, ToolRegistry};
use parking_lot::RwLock;
use std::path::PathBuf;
use std::sync::Arc;

/// The default limit on model calls per run: a safety net against loops.
pub const DEFAULT_MAX_STEPS: usize = 100;

/// An agent. Cheap to clone: clones share tools, prompt, bus and store.
#[derive(Clone)]
pub struct Agent {
    pub(crate) inner: Arc<AgentInner>,
}

pub(crate) struct AgentInner {
    pub store: Arc<dyn TapeStore>,
    /// Swapped whole, never changed in place: a run keeps the snapshot it
    /// took, so a change lands between turns.
    pub tools: RwLock<Arc<ToolRegistry>>,
    pub system_prompt: SystemPrompt,
    pub events: EventBus,
    pub models: Option<Arc<dyn ModelProvider>>,
    pub default_model: Option<String>,
    pub max_steps: usize,
    pub max_tokens: Option<u32>,
    /// `None`: the default mapping (which reads only the kinds it maps).
    pub context: Option<ContextSelector>,
    pub command_prefix: Option<String>,
    pub tape_settings: TapeSettings,
    pub workspace: PathBuf,
    pub environments: Option<Arc<Environments>>,
    pub codemode_dir: PathBuf,
    pub steering: Steering,
    pub compactions: super::compaction::Compactions,
    /// See [`AgentBuilder::tool_schema_budget`].
    pub tool_schema_budget: u64,
}

/// Builds an [`Agent`].
pub struct AgentBuilder {
    store: Arc<dyn TapeStore>,
    tools: ToolRegistry,
    system_prompt: SystemPrompt,
    models: Option<Arc<dyn ModelProvider>>,
    default_model: Option<String>,
    max_steps: usize,
    max_tokens: Option<u32>,
    context: Option<ContextSelector>,
    command_prefix: Option<String>,
    tape_settings: TapeSettings,
    workspace: PathBuf,
    environments: Option<Arc<Environments>>,
    codemode_dir: PathBuf,
    compaction: super::compaction::CompactionSettings,
    tool_schema_budget: u64,
}

impl Agent {
    /// An agent with an in-memory store, no tools, no model and commands off.
    /// It writes no file it was not told where to put: runs work in `.` (the
    /// process's directory at the time, unless [`AgentBuilder::workspace`],
    /// the run's options or [`AgentBuilder::environments`] say otherwise), tape
    /// archives are refused until [`AgentBuilder::tape_settings`] names a
    /// directory, and code mode until [`AgentBuilder::codemode_dir`] does.
    pub fn builder() -> AgentBuilder {
        AgentBuilder {
            store: Arc::new(InMemoryTapeStore::new()),
            tools: ToolRegistry::new(),
            system_prompt: SystemPrompt::new(),
            models: None,
            default_model: None,
            max_steps: DEFAULT_MAX_STEPS,
            max_tokens: None,
            context: None,
            command_prefix: None,
            tape_settings: TapeSettings::default(),
            workspace: PathBuf::from("."),
            environments: None,
            codemode_dir: PathBuf::new(),
            compaction: Default::default(),
            tool_schema_budget: super::tool_budget::DEFAULT_TOOL_SCHEMA_BUDGET,
        }
    }

    /// The bus: register handlers here (the tape recorder is already first).
    pub fn events(&self) -> &EventBus {
        &self.inner.events
    }

    /// The compaction settings (see [`super::compaction`]).
    pub fn compaction(&self) -> &super::compaction::CompactionSettings {
        &self.inner.compactions.settings
    }

    pub fn system_prompt(&self) -> &SystemPrompt {
        &self.inner.system_prompt
    }

    /// A snapshot of the tools: what a run starting now would offer. Later
    /// changes do not reach it.
    pub fn tools(&self) -> Arc<ToolRegistry> {
        self.inner.tools.read().clone()
    }

    /// Adds or replaces a tool for future runs.
    pub fn add_tool(&self, tool: Tool) {
        let Ok(()) = self.change_tools(|tools| {
            tools.insert(tool);
            Ok::<(), std::convert::Infallible>(())
        });
    }

    /// Replaces the tools `source` provided before with `tools`, for future
    /// runs (see [`ToolRegistry::replace_source`]): what a tool provider
    /// whose list changed (an MCP server) calls. A run going on keeps the
    /// tools it started with, so the change lands between turns, never in
    /// the middle of one. An empty `tools` removes the source's tools.
    pub fn replace_tools(&self, source: &str, tools: Vec<Tool>) -> Result<(), NameTaken> {
        self.change_tools(|registry| registry.replace_source(source, tools))
    }

    /// Copy on write: the runs holding the old snapshot keep it whole.
    fn change_tools<E>(&self, change: impl FnOnce(&mut ToolRegistry) -> Result<(), E>) -> Result<(), E> {
        let mut current = self.inner.tools.write();
        let mut next = ToolRegistry::clone(&current);
        change(&mut next)?;
        *current = Arc::new(next);
        Ok(())
    }

    pub fn store(&self) -> &Arc<dyn TapeStore> {
        &self.inner.store
    }

    /// The `provider:model` used when a run names none.
    pub fn default_model(&self) -> Option<&str> {
        self.inner.default_model.as_deref()
    }

    pub fn command_prefix(&self) -> Option<&str> {
        self.inner.command_prefix.as_deref()
    }

    pub fn workspace(&self) -> &PathBuf {
        &self.inner.workspace
    }

    /// The per-session environments, when the agent manages them.
    pub fn environments(&self) -> Option<&Arc<Environments>> {
        self.inner.environments.as_ref()
    }

    /// A tape of this agent's store, for use outside runs (writes go straight
    /// to the store).
    pub fn tape(&self, name: &str) -> Result<Tape, TapeError> {
        Ok(Tape::new(self.inner.store.clone(), TapeName::new(name)?).with_settings(self.inner.tape_settings.clone()))
    }

    /// Hands `message` to the run going on for `tape`, before its next model
    /// step. Returns false when no run is active there (start one instead).
    pub fn steer(&self, tape: &str, message: impl Into<String>) -> bool {
        self.inner.steering.steer(tape, message.into())
    }
}

impl AgentBuilder {
    pub fn store(mut self, store: Arc<dyn TapeStore>) -> Self {
        self.store = store;
        self
    }

    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.insert(tool);
        self
    }

    pub fn tools(mut self, tools: impl IntoIterator<Item = Tool>) -> Self {
        for tool in tools {
            self.tools.insert(tool);
        }
        self
    }

    /// Appends a fixed system prompt section (more, dynamic ones via
    /// [`Agent::system_prompt`]).
    pub fn system_prompt(self, text: impl Into<String>) -> Self {
        self.system_prompt.add_text(text);
        self
    }

    /// Where model clients come from, and the default `provider:model`.
    pub fn model(mut self, models: Arc<dyn ModelProvider>, default_model: impl Into<String>) -> Self {
        self.models = Some(models);
        self.default_model = Some(default_model.into());
        self
    }

    /// Where model clients come from, without a default model.
    pub fn models(mut self, models: Arc<dyn ModelProvider>) -> Self {
        self.models = Some(models);
        self
    }

    pub fn max_steps(mut self, max_steps: usize) -> Self {
        self.max_steps = max_steps.max(1);
        self
    }

    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    pub fn context(mut self, selector: ContextSelector) -> Self {
        self.context = Some(selector);
        self
    }

    /// Enables comma commands with this prefix (`,`).
    pub fn command_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.command_prefix = Some(prefix.into());
        self
    }

    pub fn tape_settings(mut self, settings: TapeSettings) -> Self {
        self.tape_settings = settings;
        self
    }

    /// The default workspace of runs (shell and file tools work there).
    pub fn workspace(mut self, workspace: impl Into<PathBuf>) -> Self {
        self.workspace = workspace.into();
        self
    }

    /// Gives every session its own environment (see [`Environments`]); runs
    /// then work in the session's environment and workspace unless their
    /// options name a workspace.
    pub fn environments(mut self, environments: Arc<Environments>) -> Self {
        self.environments = Some(environments);
        self
    }

    /// Where code-mode stubs are written (no default: code mode fails to
    /// start without one; the `bub` binary sets `<home>/codemode`).
    pub fn codemode_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.codemode_dir = dir.into();
        self
    }

    /// When and how much to compact a session's context (see
    /// [`super::compaction`]); the default compacts at 0.75 of the model's
    /// family window.
    pub fn compaction(mut self, settings: super::compaction::CompactionSettings) -> Self {
        self.compaction = settings;
        self
    }

    /// Past this many estimated tokens of tool definitions, a turn offers
    /// the tools a source added (MCP servers) with one line each and
    /// `tools.describe` (see [`super::tool_budget`]); 0 turns it off.
    /// Default [`super::DEFAULT_TOOL_SCHEMA_BUDGET`]; a run's options may
    /// set their own.
    pub fn tool_schema_budget(mut self, tokens: u64) -> Self {
        self.tool_schema_budget = tokens;
        self
    }

    pub fn build(self) -> Agent {
        let events = EventBus::new();
        recorder::register(&events);
        Agent {
            inner: Arc::new(AgentInner {
                store: self.store,
                tools: RwLock::new(Arc::new(self.tools)),
                system_prompt: self.system_prompt,
                events,
                models: self.models,
                default_model: self.default_model,
                max_steps: self.max_steps,
                max_tokens: self.max_tokens,
                context: self.context,
                command_prefix: self.command_prefix,
                tape_settings: self.tape_settings,
                workspace: self.workspace,
                environments: self.environments,
                codemode_dir: self.codemode_dir,
                steering: Steering::default(),
                compactions: super::compaction::Compactions::new(self.compaction),
                tool_schema_budget: self.tool_schema_budget,
            }),
        }
    }
}
