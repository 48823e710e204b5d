//! `chat.send_file`: a file from the session's workspace, sent to the chat
//! the turn answers (Telegram: a photo or a document; Discord: an attachment).
//!
//! The path must stay inside the workspace whatever the session's file
//! confinement says: what leaves for a chat is the workspace's, never the
//! host's. It is resolved like the confined `fs.*` tools resolve paths, then
//! opened beneath the workspace with symlinks refused (`openat2`), so a
//! sandboxed command cannot swap a link in after the check. A file over the
//! channel's upload limit is refused before it is read: nothing is sent.
//!
//! Capability `read`: the tool reads the workspace and shows a file to the
//! chat that is already talking to the agent — no more than `fs.read` and a
//! reply can show, and less (only inside the workspace). Sending goes
//! through the gateway's [`TurnChat`], which outside a gateway turn does not
//! exist: the tool then says there is no chat to send to.

use crate::environment::PathError;
use crate::environment::path::resolve_path;
use crate::environment::sandbox::files::read_bytes;
use crate::tools::{Capability, ChatFile, Tool, ToolContext, ToolError, TurnChat};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

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
    let (root, relative) = inside_workspace(environment.workspace(), &args.path)?;
    let name = relative
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .ok_or_else(|| ToolError::invalid_input(format!("{:?} is not a file", args.path)))?;
    let shown = relative.display().to_string();
    let read = {
        let relative = relative.clone();
        tokio::task::spawn_blocking(move || read_bytes(&root, &relative, limit))
    };
    let bytes = read
        .await
        .map_err(|error| ToolError::failed(format!("cannot read {shown}: {error}")))?
        .map_err(|error| read_error(&shown, error))?;
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

/// The workspace's real path and `path` relative to it, refusing any path
/// that leaves it (`..`, absolute, `~`, a symlink pointing out).
fn inside_workspace(workspace: &Path, path: &str) -> Result<(PathBuf, PathBuf), ToolError> {
    let root = workspace
        .canonicalize()
        .map_err(|error| ToolError::failed(format!("cannot open the workspace {}: {error}", workspace.display())))?;
    let resolved = resolve_path(&root, path, true)?;
    let relative = resolved.strip_prefix(&root).map(Path::to_path_buf).map_err(|_| {
        ToolError::from(PathError::OutsideWorkspace { path: path.to_string(), workspace: root.clone() })
    })?;
    Ok((root, relative))
}

fn read_error(path: &str, error: std::io::Error) -> ToolError {
    match error.kind() {
        std::io::ErrorKind::FileTooLarge => {
            ToolError::failed(format!("{path} was not sent: {error}; nothing reached the chat"))
        }
        std::io::ErrorKind::NotFound => {
            ToolError::failed(format!("{path} was not sent: no such file in the workspace"))
        }
        _ => ToolError::failed(format!("{path} was not sent: cannot read it ({error})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_leave_the_workspace_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("secret.txt");
        std::fs::write(&outside, "token").unwrap();
        let workspace = dir.path().join("ws");
        std::fs::create_dir_all(workspace.join("out")).unwrap();
        std::os::unix::fs::symlink(&outside, workspace.join("link.txt")).unwrap();
        for path in ["../secret.txt", outside.to_str().unwrap(), "~/x", "link.txt", "out/../../secret.txt"] {
            let refused = inside_workspace(&workspace, path).unwrap_err();
            assert!(refused.message.contains("leaves the workspace"), "{path}: {refused:?}");
        }
        let (_, relative) = inside_workspace(&workspace, "out/./report.pdf").unwrap();
        assert_eq!(relative, Path::new("out/report.pdf"));
    }
}
