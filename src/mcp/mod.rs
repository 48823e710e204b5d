//! MCP: bub as a client of Model Context Protocol servers, whose tools
//! become bub tools (`mcp.SERVER.TOOL`, `mcp_SERVER_TOOL` for the model)
//! under the same policy as every other tool.
//!
//! - [`connect`]: one session with a server — a program over stdio (its
//!   environment cleared, its process group ended on close), Streamable
//!   HTTP, or the pipes of a process an environment started.
//! - [`http`]: rmcp's Streamable HTTP client trait over reqwest 0.12.
//! - [`server`]: `McpServer`, one server supervised — start and call
//!   timeouts, restart with backoff, state, counts and metrics.
//! - [`tools`]: a server's tools as bub `Tool`s (names a model accepts).
//! - [`content`]: a `tools/call` result as a tool result (text, files
//!   saved in the workspace, structured content, `isError`).
//! - [`session`]: `SessionServer`, a server of scope `session`: one
//!   instance per session environment, its tools learnt from a probe.
//! - [`servers`]: `McpServers`, the gateway's set, kept in step with the
//!   config (`apply`) and with the agent's tools.
//! - [`command`]: `,mcp`, the servers' state from a chat.
//! - [`error`]: `McpError`, naming the server.
//! - [`serve`]: bub as an MCP server (`bub mcp serve`): its tapes,
//!   read-only, for other agents.
//!
//! Nothing here reads the process environment (a lookup is passed in) or
//! knows the gateway.

pub mod command;
pub mod connect;
pub mod content;
pub mod error;
pub mod http;
pub mod serve;
pub mod server;
pub mod servers;
pub mod session;
pub mod tools;

pub use connect::{Connection, EnvLookup, StdioCommand};
pub use error::{McpError, McpErrorKind};
pub use server::{Connector, McpServer, OnTools, ServerState, ServerStatus};
pub use servers::McpServers;
pub use session::SessionServer;
