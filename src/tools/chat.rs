//! [`TurnChat`]: the chat a turn answers, as tools may reach it.
//!
//! Tools never see the gateway. A gateway turn puts a [`TurnChat`] in its
//! [`TurnState`](super::TurnState) (an extension), holding the gateway's own
//! [`ChatOutlet`]; a tool that sends to the chat (`chat.send_file`) takes it
//! from there. Outside the gateway (`bub run`, tests) there is none, and such
//! a tool says there is no chat to send to.
//!
//! What the outlet guarantees is the gateway's: sending goes through its
//! outbound scheduler (budgets, rate-limit pauses, retries), and a turn run
//! again after a crash does not send the same file twice.

use super::ToolError;
use async_trait::async_trait;
use std::sync::Arc;

/// A file a tool sends to the turn's chat.
#[derive(Clone, PartialEq, Eq)]
pub struct ChatFile {
    /// The name the chat shows (no directories).
    pub name: String,
    /// Where it was read, relative to the workspace (for the tape).
    pub path: String,
    /// Its media type, from its name (`image/png`; `application/octet-stream` when unknown).
    pub media_type: String,
    pub bytes: Vec<u8>,
    /// Text shown with the file.
    pub caption: Option<String>,
}

impl std::fmt::Debug for ChatFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatFile")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("media_type", &self.media_type)
            .field("bytes", &self.bytes.len())
            .field("caption", &self.caption)
            .finish()
    }
}

/// A file that reached the chat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentFile {
    /// The platform's id of the message holding it.
    pub message_id: String,
    /// It had been sent by an earlier run of this turn (before a restart),
    /// so it was not sent again.
    pub earlier: bool,
}

/// The gateway's side of a turn's chat (implemented in `gateway/`).
#[async_trait]
pub trait ChatOutlet: Send + Sync {
    /// The largest file the chat's channel sends, in bytes; `None`: it sends no files.
    fn max_file_bytes(&self) -> Option<u64>;

    /// Sends `file` as one message of its own, or fails (too big, refused by
    /// the platform, the gateway stopping) with what the model should read.
    async fn send_file(&self, file: ChatFile) -> Result<SentFile, ToolError>;
}

/// The turn's chat, as a [`TurnState`](super::TurnState) extension.
#[derive(Clone)]
pub struct TurnChat(pub Arc<dyn ChatOutlet>);
