//! [`McpError`]: what went wrong with a server, always naming it.

use crate::tools::ToolError;
use std::fmt;

/// Why a server could not start or answer. Its text names the server, so
/// a tool error or a start-up line says which one failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("mcp server `{server}`: {message}")]
pub struct McpError {
    pub server: String,
    pub kind: McpErrorKind,
    pub message: String,
}

/// The kinds a caller may act on (a status line, a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpErrorKind {
    /// Its table could not be turned into a connection (a variable unset, a bad header).
    Config,
    /// It did not start: the program failed, the handshake failed or timed out.
    Start,
    /// A call took longer than `call_timeout`.
    Timeout,
    /// It is not running (crashed, restarting, stopped) or went away during the call.
    Down,
    /// It answered something that is not MCP, or an MCP error.
    Protocol,
}

impl McpErrorKind {
    /// The label of `bub_mcp_calls_total{status}` for a call failing so.
    pub fn label(self) -> &'static str {
        match self {
            McpErrorKind::Config | McpErrorKind::Start | McpErrorKind::Down => "down",
            McpErrorKind::Timeout => "timeout",
            McpErrorKind::Protocol => "protocol_error",
        }
    }
}

impl McpError {
    pub fn new(server: &str, kind: McpErrorKind, message: impl Into<String>) -> McpError {
        McpError { server: server.to_string(), kind, message: message.into() }
    }
}

impl From<McpError> for ToolError {
    fn from(error: McpError) -> ToolError {
        ToolError::failed(error.to_string())
    }
}

/// The last lines a server wrote on stderr, appended to a message.
pub(crate) struct StderrLines<'a>(pub &'a [String]);

impl fmt::Display for StderrLines<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return Ok(());
        }
        write!(f, "; its last lines on stderr: {}", self.0.join(" | "))
    }
}
