//! Assembles the agent the `bub` binary runs: the builtin tools, the default
//! system prompt (instructions, workspace `AGENTS.md`, the tool and skill
//! lists), the model from `BUB_*` variables and the SQLite tape store in the
//! home. Library users build their own [`Agent`] instead.
//!
//! The variables are given, never read from the process: the binary reads
//! them (`cli/env.rs`), tests pass their own. Variables used (the model
//! ones by [`ModelSettings`]): `BUB_COMMAND_PREFIX` (default `,`), `BUB_MAX_STEPS` (default 100),
//! `BUB_SPILL_THRESHOLD` (estimated tokens, default 4096, 0 = no new spills),
//! `BUB_CONFINE_FS` (`true`: file tools and `cwd` may not leave the workspace),
//! `BUB_CONTEXT_WINDOW` (tokens, over the model family's window), `BUB_COMPACT_AT`
//! (default 0.75: compact when the context passes this part of the window),
//! `BUB_KEEP_RECENT_TOKENS` (default a third of the conversation's room below
//! `compact_at`, see [`agent::compaction::Budget`]: recent turns kept verbatim
//! after a compaction's summary),
//! `BUB_ENVIRONMENT_IDLE_SECONDS` (default 1800: a session's environment, and
//! what it runs, is closed after this long without a turn),
//! `BUB_TOOL_SCHEMA_BUDGET` (estimated tokens of the offered tool definitions,
//! default [`agent::DEFAULT_TOOL_SCHEMA_BUDGET`], 0 = no budget: past it the
//! tools of MCP servers are offered with one line each and `tools_describe`,
//! see [`agent::tool_budget`]; the gateway's `[agent] tool_schema_budget`
//! wins over it), `HOME` (the
//! user's skills in `$HOME/.agents/skills`).
//!
//! The workspace's `AGENTS.md` (at most [`MAX_AGENTS_MD_BYTES`]) and skills
//! are read as untrusted input: beneath the workspace, regular files only
//! (see [`crate::environment::workspace_file`]).
//!
//! Each session runs in its own [`LocalEnvironment`](crate::environment::LocalEnvironment):
//! in the workspace a run names (`bub run` gives the current directory), else
//! in `<home>/workspaces/<session>`.

use crate::agent::{self, Agent, ToolSummary};
use crate::codemode;
use crate::command::CommandPrefix;
use crate::db::{Durability, HomeStore, StoreLocation};
use crate::environment::sessions::DEFAULT_IDLE;
use crate::environment::workspace_file::{WorkspaceDir, WorkspaceFileError, off_runtime};
use crate::environment::{EnvironmentProvider, Environments, LocalProvider};
use crate::home::BubHome;
use crate::model::ModelSettings;
use crate::skills::{self, Skill};
use crate::tape::{SpillSettings, TapeSettings, TapeStore};
use crate::tools::Tool;
use crate::tools::builtin::{self, ShellManager, WebFetchSettings};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// What bub tells every model before anything else.
pub const DEFAULT_INSTRUCTIONS: &str = "\
You are bub, an agent working for a team through a chat. Use your tools to act \
and to check facts before you answer; answer plainly and briefly.
Context: the conversation is kept on a tape. When it grows long, its older part \
is replaced in your context by a summary (an `auto_handoff/compaction` note); the \
entries themselves stay on the tape, so search them with `tape_search` when you \
need what was said exactly. You can also write a `tape_handoff` with a summary \
yourself when a phase of work ends; the context then restarts from it.
Tool results that are too long are spilled: you get a preview and a handle to \
page through with `spill_read`.";

/// The workspace's instructions to the model, in every system prompt.
const AGENTS_MD: &str = "AGENTS.md";
/// `AGENTS.md` goes into every request: a bigger one is a mistake (or an
/// attack on the bill) and is left out, with a warning.
pub const MAX_AGENTS_MD_BYTES: u64 = 256 * 1024;

/// How long shutdown waits for compactions under way.
const SETTLE_AT_SHUTDOWN: Duration = Duration::from_secs(30);

/// A configuration value that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("{variable}={value:?}: {reason}")]
    Variable { variable: &'static str, value: String, reason: String },
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
    #[error(transparent)]
    Tape(#[from] crate::tape::TapeError),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
}

/// Where the store is: `BUB_DATABASE_URL` (from `vars`) when set, else the
/// `[store]` of `config_file` (the gateway's `--config`, else the home's
/// `bub.toml` when it exists), else the home's SQLite file.
pub fn store_location(
    home: &BubHome,
    config_file: Option<&Path>,
    vars: &[(String, String)],
) -> Result<StoreLocation, SetupError> {
    let from_env = vars.iter().find(|(name, value)| name == "BUB_DATABASE_URL" && !value.trim().is_empty());
    if let Some((_, url)) = from_env {
        return postgres_url("BUB_DATABASE_URL", url.trim());
    }
    let home_file = home.config_file();
    let file = config_file.or_else(|| home_file.exists().then_some(home_file.as_path()));
    if let Some(file) = file {
        let store = crate::config::StoreConfig::read_from(file)?;
        let url = store.url().map_err(|message| crate::config::ConfigError::Invalid {
            path: file.to_path_buf(),
            location: None,
            message,
        })?;
        if let Some(url) = url {
            return postgres_url("[store] url", url.expose());
        }
    }
    Ok(StoreLocation::Sqlite(home.database()))
}

/// `url` if it names a PostgreSQL database; else what one looks like.
fn postgres_url(variable: &'static str, url: &str) -> Result<StoreLocation, SetupError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(StoreLocation::Postgres(url.to_string()));
    }
    let shown = url.split_once("://").map_or("(no scheme)", |(scheme, _)| scheme).to_string();
    Err(SetupError::Variable {
        variable,
        value: shown,
        reason: "must be a PostgreSQL URL, postgres://user:password@host:port/database (unset: the SQLite file in \
                 BUB_HOME)"
            .into(),
    })
}

/// Everything a `bub` command needs to run the agent.
pub struct Setup {
    pub agent: Agent,
    pub shells: Arc<ShellManager>,
    pub store: Arc<HomeStore>,
    pub environments: Arc<Environments>,
}

impl Setup {
    /// Opens the store (see [`store_location`]) and builds the agent from `vars`.
    pub async fn open(home: &BubHome, workspace: PathBuf, vars: Vec<(String, String)>) -> Result<Setup, SetupError> {
        let location = store_location(home, None, &vars)?;
        let store = Arc::new(crate::db::open(&location, Durability::default()).await?);
        Setup::build(home, workspace, store, vars)
    }

    /// Builds the agent from explicit variables (tests pass their own).
    pub fn build(
        home: &BubHome,
        workspace: PathBuf,
        store: Arc<HomeStore>,
        vars: Vec<(String, String)>,
    ) -> Result<Setup, SetupError> {
        Setup::build_with(home, workspace, store, vars, None)
    }

    /// [`Setup::build`] with the sessions' environments made by `provider`
    /// (the gateway's confines each session as its chat's policy says);
    /// `None`: local environments, confined when `BUB_CONFINE_FS` says so.
    pub fn build_with(
        home: &BubHome,
        workspace: PathBuf,
        store: Arc<HomeStore>,
        vars: Vec<(String, String)>,
        provider: Option<Arc<dyn EnvironmentProvider>>,
    ) -> Result<Setup, SetupError> {
        let var = |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let models = ModelSettings::from_vars(vars.clone())?;
        let prefix = match var("BUB_COMMAND_PREFIX") {
            Some(value) => CommandPrefix::new(&value).map_err(|e| SetupError::Variable {
                variable: "BUB_COMMAND_PREFIX",
                value,
                reason: e.to_string(),
            })?,
            None => CommandPrefix::default(),
        };
        let max_steps = parse_var(&var, "BUB_MAX_STEPS", crate::agent::DEFAULT_MAX_STEPS)?;
        let threshold_tokens = parse_var(&var, "BUB_SPILL_THRESHOLD", SpillSettings::default().threshold_tokens)?;
        let user_home = var("HOME").filter(|home| !home.trim().is_empty()).map(PathBuf::from);
        let shells = Arc::new(ShellManager::new());
        let confined = match var("BUB_CONFINE_FS").as_deref().map(str::trim) {
            None | Some("" | "0" | "false" | "no") => false,
            Some("1" | "true" | "yes") => true,
            Some(other) => {
                return Err(SetupError::Variable {
                    variable: "BUB_CONFINE_FS",
                    value: other.to_string(),
                    reason: "must be true or false".into(),
                });
            }
        };
        let compaction = compaction_settings(&var)?;
        let idle = parse_var(&var, "BUB_ENVIRONMENT_IDLE_SECONDS", DEFAULT_IDLE.as_secs() as usize)?;
        let schema_budget =
            parse_var(&var, "BUB_TOOL_SCHEMA_BUDGET", agent::DEFAULT_TOOL_SCHEMA_BUDGET as usize)? as u64;
        let environments = Arc::new(Environments::new(
            provider.unwrap_or_else(|| Arc::new(LocalProvider { confined })),
            home.workspaces_dir(),
            Duration::from_secs(idle as u64),
        ));
        if tokio::runtime::Handle::try_current().is_ok() {
            environments.sweep_idle(Duration::from_secs(60));
        }

        let mut builder = Agent::builder()
            .store(store.clone() as Arc<dyn TapeStore>)
            .tools(agent_tools(&shells, user_home.clone()))
            .compaction(compaction)
            .tool_schema_budget(schema_budget)
            .environments(environments.clone())
            .command_prefix(prefix.as_ref())
            .max_steps(max_steps)
            .workspace(workspace)
            .codemode_dir(home.codemode_dir())
            .tape_settings(TapeSettings { archive_dir: home.archive_dir(), spill: SpillSettings { threshold_tokens } })
            .system_prompt(DEFAULT_INSTRUCTIONS);
        if let Some(max_tokens) = models.max_tokens {
            builder = builder.max_tokens(max_tokens);
        }
        builder = match models.default_model() {
            Ok(spec) => builder.model(Arc::new(models), spec.to_string()),
            // No model: commands still work, prompts get a reply naming BUB_MODEL.
            Err(_) => builder.models(Arc::new(models)),
        };
        let agent = builder.build();
        add_prompt_sections(&agent, user_home);
        Ok(Setup { agent, shells, store, environments })
    }
}

/// The tools [`Setup`]'s agent has.
fn agent_tools(shells: &Arc<ShellManager>, user_home: Option<PathBuf>) -> Vec<Tool> {
    let mut tools = builtin::tools(shells.clone(), WebFetchSettings::default());
    tools.extend(builtin::session_tools(shells.clone()));
    tools.extend([
        codemode::code_mode_tool(),
        agent::subagent_tool(),
        agent::tape_compact_tool(),
        codemode::run_code_tool(),
        skills::skill_tool(user_home),
    ]);
    tools
}

/// The names of the tools [`Setup`]'s agent has, without opening a store or
/// building the agent: what a gateway config's tool patterns are checked
/// against offline (`bub policy check`, `bub doctor`).
pub fn tool_names() -> Vec<String> {
    agent_tools(&Arc::new(ShellManager::new()), None).iter().map(|tool| tool.name().to_string()).collect()
}

/// `BUB_CONTEXT_WINDOW`, `BUB_COMPACT_AT` and `BUB_KEEP_RECENT_TOKENS`.
fn compaction_settings(var: &impl Fn(&str) -> Option<String>) -> Result<agent::CompactionSettings, SetupError> {
    let mut settings = agent::CompactionSettings::default();
    let tokens = |name: &'static str| -> Result<Option<u64>, SetupError> {
        let Some(value) = var(name).filter(|v| !v.trim().is_empty()) else { return Ok(None) };
        match value.trim().parse::<u64>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err(SetupError::Variable {
                variable: name,
                value,
                reason: "must be a whole number of tokens above 0".into(),
            }),
        }
    };
    settings.context_window = tokens("BUB_CONTEXT_WINDOW")?;
    settings.keep_recent_tokens = tokens("BUB_KEEP_RECENT_TOKENS")?;
    if let Some(value) = var("BUB_COMPACT_AT").filter(|v| !v.trim().is_empty()) {
        settings.compact_at = match value.trim().parse::<f64>() {
            Ok(at) if at > 0.0 && at <= 1.0 => at,
            _ => {
                return Err(SetupError::Variable {
                    variable: "BUB_COMPACT_AT",
                    value,
                    reason: "must be a fraction of the context window above 0 and at most 1, e.g. 0.75".into(),
                });
            }
        };
    }
    Ok(settings)
}

fn parse_var(var: &impl Fn(&str) -> Option<String>, name: &'static str, default: usize) -> Result<usize, SetupError> {
    match var(name) {
        None => Ok(default),
        Some(value) => value.trim().parse().map_err(|_| SetupError::Variable {
            variable: name,
            value,
            reason: "must be a whole number".into(),
        }),
    }
}

/// Workspace `AGENTS.md`, then the tools and skills of the step: all re-read
/// every step, so edits take effect on the next one. The workspace is
/// hostile input ([`crate::environment::workspace_file`]): `AGENTS.md` and
/// the skills are read beneath it, capped, and off the runtime's threads,
/// together in one blocking hop per step (a hop for each cost more than the
/// reads and grew the blocking pool under load, each thread with its own
/// allocator heap), so the three parts are one section.
fn add_prompt_sections(agent: &Agent, user_home: Option<PathBuf>) {
    agent.system_prompt().add(move |ctx| {
        let user_home = user_home.clone();
        async move {
            let workspace = ctx.state.get_str("workspace").map(PathBuf::from);
            let (agents, skills) = match workspace {
                Some(workspace) => read_workspace(workspace, user_home, ctx.tape.name().to_string()).await,
                None => (None, Vec::new()),
            };
            let skills = skills::allowed_by(skills, &ctx.state);
            let parts = [agents, tools_section(&ctx.tools), Some(skills::prompt_section(&skills, &ctx.prompt))];
            let parts: Vec<String> = parts.into_iter().flatten().filter(|part| !part.trim().is_empty()).collect();
            Some(parts.join("\n\n"))
        }
    });
}

/// `AGENTS.md` (trimmed) and the skills of `workspace` and the user's home,
/// in one blocking hop; what cannot be read is left out, with a warning.
async fn read_workspace(
    workspace: PathBuf,
    user_home: Option<PathBuf>,
    session: String,
) -> (Option<String>, Vec<Skill>) {
    let roots = skills::skill_roots(&workspace, user_home.as_deref());
    let (path, name) = (workspace.clone(), session.clone());
    let read = off_runtime(move || Ok((agents_md(&workspace, &session), skills::discover(&roots)))).await;
    read.unwrap_or_else(|error| {
        let path = path.display();
        tracing::warn!(session = name, %path, reason = %error, "the workspace's AGENTS.md and skills were not read");
        (None, skills::discover(&[]))
    })
}

/// The workspace's `AGENTS.md`, at most [`MAX_AGENTS_MD_BYTES`]: `None`
/// when there is none, or when it is refused (a link out of the workspace,
/// a FIFO, a device, a hard link, too big), which is logged.
fn agents_md(workspace: &Path, session: &str) -> Option<String> {
    let read = WorkspaceDir::open(workspace).and_then(|dir| dir.read_text(Path::new(AGENTS_MD), MAX_AGENTS_MD_BYTES));
    match read {
        Ok(text) => Some(text.trim().to_string()),
        Err(WorkspaceFileError::NotFound) => None,
        Err(error) => {
            let path = workspace.join(AGENTS_MD);
            tracing::warn!(session, path = %path.display(), reason = %error, "AGENTS.md not read");
            None
        }
    }
}

/// `<available_tools>`: a line per tool the model can call this step; the
/// tools offered compact (past the tool-schema budget, whose one line the
/// model already has) are only counted, with what to do before calling one.
fn tools_section(tools: &[ToolSummary]) -> Option<String> {
    if tools.is_empty() {
        return None;
    }
    let mut lines: Vec<String> = tools
        .iter()
        .filter(|t| !t.compact)
        .map(|t| format!("- {}: {}", t.model_name, t.description.lines().next().unwrap_or_default()))
        .collect();
    let compact = tools.iter().filter(|t| t.compact).count();
    if compact > 0 {
        lines.push(format!(
            "- and {compact} more tools offered with one line and no parameters: call `tools_describe` with their \
             names before calling them"
        ));
    }
    Some(format!("<available_tools>\n{}\n</available_tools>", lines.join("\n")))
}

impl Setup {
    /// Stops what the sessions left running and closes the database.
    pub async fn shutdown(&self) {
        // A summary being written is waited for (it was paid for), a while.
        if tokio::time::timeout(SETTLE_AT_SHUTDOWN, self.agent.settle()).await.is_err() {
            tracing::warn!("a compaction was still running at shutdown; the next turn tries it again");
        }
        self.shells.kill_all().await;
        self.environments.close_all().await;
        self.store.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// bub's own tools pass under the default tool-schema budget with room
    /// to spare, so the budget only ever compacts what servers add.
    #[test]
    fn the_default_schema_budget_leaves_the_builtins_whole() {
        let tools = agent_tools(&Arc::new(ShellManager::new()), None);
        let builtins = agent::tool_budget::definitions_tokens(tools.iter().filter(|t| t.agent_use()));
        println!("{} builtin tools: {builtins} estimated tokens", tools.len());
        assert!(builtins * 2 <= agent::DEFAULT_TOOL_SCHEMA_BUDGET, "{builtins}");
    }

    /// The prompt's tool list does not send the compact tools' lines again:
    /// the model has them in their definitions.
    #[test]
    fn the_tool_list_counts_the_compact_tools_instead_of_listing_them() {
        let summary = |name: &str, description: &str, compact| ToolSummary {
            name: name.replace('_', "."),
            model_name: name.into(),
            description: description.into(),
            compact,
        };
        let tools = [
            summary("bash", "Run a shell command.\nMore.", false),
            summary("mcp_docs_search", "Search the docs.", true),
            summary("mcp_docs_get", "Get a page.", true),
        ];
        let section = tools_section(&tools).unwrap();
        assert!(section.contains("- bash: Run a shell command.\n"), "{section}");
        assert!(!section.contains("mcp_docs") && !section.contains("Search the docs"), "{section}");
        assert!(section.contains("- and 2 more tools offered with one line"), "{section}");
    }
}
