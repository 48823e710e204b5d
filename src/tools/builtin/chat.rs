//! `chat.send_file`: a file from the session's workspace, sent to the chat
//! the turn answers (Telegram: a photo or a document; Discord: an attachment).
//!
//! The path must stay inside the workspace whatever the session's file
//! confinement says: what leaves for a chat is the workspace's, never the
//! host's. It is resolved like the confined `fs.*` tools resolve paths, then
//! opened beneath the workspace ([`crate::environment::workspace_file`]), so
//! a sandboxed command can neither swap in a link out of the workspace after
//! the check nor send a FIFO, a device or a hard link to a file outside. A file over the
//! channel's upload limit is refused before it is read: nothing is sent.
//!
//! Capability `read`: the tool reads the workspace and shows a file to the
//! chat that is already talking to the agent — no more than `fs.read` and a
//! reply can show, and less (only inside the workspace). Sending goes
//! through the gateway's [`TurnChat`], which outside a gateway turn does not
//! exist: the tool then says there is no chat to send to.

use crate::environment::path::{Beneath, resolve_beneath};
use crate::environment::workspace_file::{WorkspaceDir, WorkspaceFileError, off_runtime};
use crate::tools::{Capability, ChatFile, Tool, ToolContext, ToolError, TurnChat};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What the model reads when the tool runs outside a chat.
pub const NO_CHAT: &str =
    "there is no chat to send to: chat.send_file works in a turn of the gateway (Telegram, Discord), not here";

/// Send a file from the workspace to this chat, as its own message. JPEG, PNG
/// and WebP images show inline; other files come as documents. Files over the
/// chat platform's upload limit are refused and nothing is sent.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ChatSendFileArgs {
    /// The file, relative to the workspace (it must be inside it).
    pub path: String,
    /// A short text shown with the file (Telegram takes at most 1024 characters).
    #[serde(default)]
    pub caption: Option<String>,
}

/// What was sent, as recorded on the tape.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FileSent {
    /// The file's name as the chat shows it.
    pub sent: String,
    /// Where it was read, relative to the workspace.
    pub path: String,
    pub bytes: u64,
    pub media_type: String,
    /// The platform's id of the message holding the file.
    pub message_id: String,
    /// Sent by an earlier run of this turn (before a restart), not again now.
    pub earlier: bool,
}

/// `chat.send_file`.
pub fn chat_send_file_tool() -> Tool {
    Tool::typed("chat.send_file", |args: ChatSendFileArgs, ctx: ToolContext| async move { send_file(args, ctx).await })
        .with_capabilities([Capability::Read])
}

async fn send_file(args: ChatSendFileArgs, ctx: ToolContext) -> Result<FileSent, ToolError> {
    let Some(TurnChat(chat)) = ctx.state.extension::<TurnChat>().as_deref().cloned() else {
        return Err(ToolError::failed(NO_CHAT));
    };
    let Some(limit) = chat.max_file_bytes() else {
        return Err(ToolError::failed("this chat's channel cannot send files"));
    };
    let environment = ctx.environment()?;
    let Beneath { root, relative, .. } = resolve_beneath(environment.workspace(), &args.path)?;
    let name = relative
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .ok_or_else(|| ToolError::invalid_input(format!("{:?} is not a file", args.path)))?;
    let shown = relative.display().to_string();
    let bytes = off_runtime(move || WorkspaceDir::open(&root)?.read(&relative, limit)).await.map_err(|error| {
        if error.is_refusal() {
            tracing::warn!(tool = "chat.send_file", session = %ctx.tape.name(), path = %shown, reason = %error, "file refused");
        }
        read_error(&shown, error)
    })?;
    let media_type = mime_guess::from_path(&name).first_or_octet_stream().essence_str().to_string();
    let size = bytes.len() as u64;
    tracing::debug!(tool = "chat.send_file", session = %ctx.tape.name(), path = %shown, bytes = size, "send");
    let file = ChatFile {
        name: name.clone(),
        path: shown.clone(),
        media_type: media_type.clone(),
        bytes,
        caption: args.caption,
    };
    let sent = chat.send_file(file).await?;
    Ok(FileSent {
        sent: name,
        path: shown,
        bytes: size,
        media_type,
        message_id: sent.message_id,
        earlier: sent.earlier,
    })
}

/// What the model reads when the file was not read: why, and that
/// nothing was sent.
fn read_error(path: &str, error: WorkspaceFileError) -> ToolError {
    match error {
        WorkspaceFileError::TooLarge { size, max } => ToolError::failed(format!(
            "{path} was not sent: the file is {size} bytes; at most {max} can be sent here; nothing reached the chat"
        )),
        WorkspaceFileError::NotFound => {
            ToolError::failed(format!("{path} was not sent: no such file in the workspace"))
        }
        error => ToolError::failed(format!("{path} was not sent: {error}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn paths_that_leave_the_workspace_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("secret.txt");
        std::fs::write(&outside, "token").unwrap();
        let workspace = dir.path().join("ws");
        std::fs::create_dir_all(workspace.join("out")).unwrap();
        std::os::unix::fs::symlink(&outside, workspace.join("link.txt")).unwrap();
        for path in ["../secret.txt", outside.to_str().unwrap(), "~/x", "link.txt", "out/../../secret.txt"] {
            let refused = ToolError::from(resolve_beneath(&workspace, path).unwrap_err());
            assert!(refused.message.contains("leaves the workspace"), "{path}: {refused:?}");
        }
        let beneath = resolve_beneath(&workspace, "out/./report.pdf").unwrap();
        assert_eq!(beneath.relative, Path::new("out/report.pdf"));
    }
}
