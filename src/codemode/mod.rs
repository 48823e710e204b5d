//! Code mode: the model calls bub's tools from Python it writes, instead of one
//! tool call per model round trip. Everything of code mode lives here.
//!
//! A turn in code mode shows the model only the preserved tools and `run_code`;
//! every other allowed tool becomes `await tools.<name>(**kwargs)` inside
//! that code, `<name>` its model name made a Python identifier
//! (`mcp_my-docs_get-page` → `mcp_my_docs_get_page`, see [`stub::code_names`]).
//! The model no longer sees those tools' JSON Schemas in the request, so it
//! needs another way to learn their signatures: a typed Python stub file whose
//! path goes into the system prompt.
//!
//! - [`tool`]: the `run_code` tool and the command-only `,code_mode` switch
//!   (its `code_mode_switch` event is [`crate::tools::switch`]'s).
//! - `session`: the seam the agent loop calls when a run starts — which tools
//!   the model is offered, the stub and prompt block, and how calls from code
//!   go back through the agent's tool events (handed over as a callback, so
//!   code mode never imports the agent). The session on the turn state holds
//!   that callback weakly and the run strongly, so a run never keeps itself
//!   alive through its own state.
//! - [`stub`]: renders that `.pyi` file from the tools' schemas and writes it
//!   under a path that stays stable while a session's tool set does.
//! - [`launch`]: [`RunCode`], starting the child in the session's environment
//!   (which only spawns it) and killing its process tree afterwards.
//! - [`runner`]: the child script (`child.py`) and the host side of its
//!   JSON-lines protocol; every tool call from the code runs on the host.
//!
//! Layering: `agent` → `codemode` → `tools`, `environment`; nothing here
//! imports the agent, and the environment knows nothing of code mode.

pub mod launch;
pub mod runner;
mod session;
pub mod stub;
pub mod tool;

pub use launch::RunCode;
pub(crate) use session::{CodeCall, CodeModeRun, ExecuteCall, Offered, offered_tools, prompt_block};
pub use tool::{RUN_CODE, code_mode_tool, run_code_tool};
