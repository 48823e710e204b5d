//! Tool errors. They go back to the model as the tool's result (the JSON of
//! `{kind, message, details}`), so the model can correct itself; they never end
//! a run.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolErrorKind {
    /// Arguments missing, malformed or not matching the schema.
    InvalidInput,
    /// The tool ran and failed.
    Tool,
    /// A handler (policy) refused the call.
    Denied,
    /// No tool of that name.
    NotFound,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolError {
    pub kind: ToolErrorKind,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

impl ToolError {
    pub fn new(kind: ToolErrorKind, message: impl Into<String>) -> ToolError {
        ToolError { kind, message: message.into(), details: None }
    }

    /// The tool ran and failed.
    pub fn failed(message: impl Into<String>) -> ToolError {
        ToolError::new(ToolErrorKind::Tool, message)
    }

    pub fn invalid_input(message: impl Into<String>) -> ToolError {
        ToolError::new(ToolErrorKind::InvalidInput, message)
    }

    pub fn denied(message: impl Into<String>) -> ToolError {
        ToolError::new(ToolErrorKind::Denied, message)
    }

    pub fn with_details(mut self, details: Value) -> ToolError {
        self.details = Some(details);
        self
    }

    /// What the model reads.
    pub fn to_value(&self) -> Value {
        let mut value = json!({"kind": self.kind, "message": self.message});
        if let Some(details) = &self.details {
            value["details"] = details.clone();
        }
        value
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind =
            serde_json::to_value(self.kind).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
        write!(f, "[{kind}] {}", self.message)
    }
}

impl std::error::Error for ToolError {}

impl From<crate::tape::TapeError> for ToolError {
    fn from(error: crate::tape::TapeError) -> ToolError {
        ToolError::failed(error.to_string())
    }
}

impl From<std::io::Error> for ToolError {
    fn from(error: std::io::Error) -> ToolError {
        ToolError::failed(error.to_string())
    }
}
