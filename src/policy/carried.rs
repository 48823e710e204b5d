//! Text a tool's result carries from elsewhere keeps its origin.
//!
//! The provenance rule ([`super::provenance`]) looks at the context since the
//! last anchor. Two kinds of tools bring older or foreign text into that
//! context, and with it whatever instructions it holds:
//!
//! - a search of the tape's whole history (`tape.search`) repeats entries
//!   from before the anchor: each hit keeps the `provenance` of its entry;
//! - a file a sender sent, saved under [`ATTACHMENTS_DIR`], is that sender's
//!   text whenever a tool names it (`fs.read`, and any other tool whose
//!   `path` argument points there): its origin is the message it came with,
//!   found on the tape by the note the gateway wrote
//!   ([`attachment_note`]); a file there whose message is not on the tape
//!   (reset, archived) counts as a stranger's.
//!
//! When such a result is less trusted than an operator's or a named user's
//! text, a `provenance` event with its origin goes on the tape after it, so
//! the rule sees it in this turn and the next ones until an operator's anchor.
//!
//! Not followed: what the shell or code read or copied (a `cp` of a sender's
//! file to another name, a symlink to it), since bub cannot see inside a
//! command; in chats where strangers send files, keep `bash` and `run_code`
//! out of reach of untrusted contexts (the default) and of the model.

use super::provenance;
use crate::agent::events::{AfterToolCall, RunContext};
use crate::tape::provenance::{META_KEY, Provenance};
use crate::tape::{EntryKind, TapeError, TapeQuery};
use crate::tools::context::RepeatedEntries;
use std::path::{Component, Path};

/// The workspace folder the gateway saves senders' files under.
pub const ATTACHMENTS_DIR: &str = "attachments";

/// The note the message of a saved file carries: its path is how a later read
/// of the file finds where the file came from.
pub fn attachment_note(described: &str, path: &str) -> String {
    format!("[file {described}, {SAVED_AS} {path}]")
}

const SAVED_AS: &str = "saved in the workspace as";

/// After a model's (or its code's) call: marks the text it carried in.
pub(crate) async fn follow(event: &AfterToolCall) -> Result<(), TapeError> {
    if event.result.is_error() {
        return Ok(());
    }
    let run = &event.run;
    if let Some(repeated) = run.state.extension::<RepeatedEntries>() {
        let origins = repeated
            .take(&event.call.call_id)
            .into_iter()
            .filter_map(|meta| Provenance::from_meta(meta.get(META_KEY)?).filter(|p| !p.is_trusted()));
        if let Some(worst) = origins.max() {
            let reason = format!("{}, carried in by {}", worst.describe(), event.call.tool);
            provenance::untrusted_text_enters(run, worst, &format!("tool:{}", event.call.tool), reason).await?;
        }
    }
    let path = event.call.arguments.get("path").and_then(|p| p.as_str());
    let workspace = run.state.get_str("workspace");
    if let (Some(path), Some(workspace)) = (path, workspace)
        && let Some(folder) = attachment_folder(Path::new(&workspace), path)
    {
        let origin = attachment_origin(run, &folder).await?;
        if !origin.is_trusted() {
            let reason = format!("a file sent with {} ({path})", origin.describe());
            provenance::untrusted_text_enters(run, origin, &format!("file:{path}"), reason).await?;
        }
    }
    Ok(())
}

/// `attachments/<message>/` when `path` (relative to `workspace`, or
/// absolute inside it) lies in a message's folder of saved files.
fn attachment_folder(workspace: &Path, path: &str) -> Option<String> {
    let path = Path::new(path.trim());
    let relative = match path.strip_prefix(workspace) {
        Ok(inside) => inside,
        Err(_) if path.is_absolute() => {
            let canonical = workspace.canonicalize().ok()?;
            path.strip_prefix(canonical).ok()?
        }
        Err(_) => path,
    };
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    match parts.as_slice() {
        [top, message, _, ..] if *top == ATTACHMENTS_DIR => {
            Some(format!("{ATTACHMENTS_DIR}/{}/", message.to_string_lossy()))
        }
        _ => None,
    }
}

/// The origin of the files in `folder`: the least trusted message whose note
/// names it, or a stranger's when none does.
async fn attachment_origin(run: &RunContext, folder: &str) -> Result<Provenance, TapeError> {
    let query = TapeQuery::search(format!("{SAVED_AS} {folder}")).kinds([EntryKind::Message]);
    let messages = run.tape.read(&query).await?;
    let origins = messages.iter().filter_map(|m| Provenance::from_meta(m.meta.get(META_KEY)?));
    Ok(origins.max().unwrap_or(Provenance::Stranger))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_into_a_messages_folder_are_found_however_spelled() {
        let ws = Path::new("/work/ws");
        for path in [
            "attachments/m1/a.txt",
            "./attachments/m1/a.txt",
            "docs/../attachments/m1/sub/a.txt",
            "/work/ws/attachments/m1/a.txt",
        ] {
            assert_eq!(attachment_folder(ws, path).as_deref(), Some("attachments/m1/"), "{path}");
        }
        for path in
            ["attachments", "attachments/m1", "notes/attachments/m1/a.txt", "/etc/passwd", "../attachments/m1/a"]
        {
            assert_eq!(attachment_folder(ws, path), None, "{path}");
        }
    }
}
