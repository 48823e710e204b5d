//! Files people send (photos, documents, voice notes): fetched through their
//! channel, saved into the session's workspace, described to the model.
//!
//! - **When.** A turn's files are fetched when the turn runs, never at
//!   arrival: only admitted messages reach a turn, so a stranger's file is
//!   never written, and a message dropped by the busy rule costs no
//!   download. A turn run again after a crash fetches them again into the
//!   same paths (the same message's files, the same bytes).
//! - **The cap.** The chat's `max_attachment_bytes` (policy): a larger file
//!   is not downloaded (refused from the size the platform announced, or cut
//!   off as soon as the download passes it), and the reply tells the chat
//!   which file, its size and the cap. A turn with nothing left (no text, no
//!   file kept) makes no model call.
//! - **Where.** `attachments/<message>/<name>` in the session's workspace,
//!   written through its environment (in a sandbox, without following a
//!   link). `<message>` is the platform's message id with `:` as `-`, so a
//!   file never overwrites another message's; `<name>` is the sender's name
//!   sanitised ([`safe_file_name`]): no path separators, no `..`, no
//!   control characters, no leading dot.
//! - **What the model reads.** The prompt names each file, its kind, media
//!   type, size and path (so the tools can open it), and the tape keeps that
//!   text; images of the types both APIs take also go to models that read
//!   images ([`crate::agent::PromptImages`]), never to the tape.

use super::Inner;
use crate::agent::{IMAGE_MEDIA_TYPES, PromptImage};
use bub_channel::{Attachment, FetchError, Inbound};
use std::collections::HashMap;
use std::sync::Arc;

pub use crate::policy::carried::ATTACHMENTS_DIR;
/// Longest saved file name, in characters (file systems take 255 bytes).
const MAX_NAME_CHARS: usize = 100;

/// What became of a turn's files.
#[derive(Default)]
pub(crate) struct ReceivedFiles {
    /// The prompt's lines about each message's files, by message id.
    pub notes: HashMap<String, Vec<String>>,
    /// What the chat is told about files that were not kept.
    pub refusals: Vec<String>,
    /// Saved images the model may be shown.
    pub images: Vec<PromptImage>,
    /// How many files were saved.
    pub saved: usize,
}

/// Fetches and saves the files of `messages` (one turn's, in `session`),
/// each at most `max_bytes`.
pub(crate) async fn receive(inner: &Inner, session: &str, messages: &[Inbound], max_bytes: u64) -> ReceivedFiles {
    let mut files = ReceivedFiles::default();
    for inbound in messages.iter().filter(|m| !m.attachments.is_empty()) {
        let names = saved_names(&inbound.attachments);
        let mut notes = Vec::new();
        for (attachment, name) in inbound.attachments.iter().zip(names) {
            let path = format!("{ATTACHMENTS_DIR}/{}/{name}", message_dir(&inbound.message_id));
            let described = describe(attachment, &name);
            match fetch_and_save(inner, session, inbound, attachment, &path, max_bytes).await {
                Ok(bytes) => {
                    files.saved += 1;
                    notes.push(crate::policy::carried::attachment_note(&described, &path));
                    let media_type = attachment.media_type.as_deref().unwrap_or_default();
                    if IMAGE_MEDIA_TYPES.contains(&media_type) {
                        files.images.push(PromptImage { media_type: media_type.to_string(), data: Arc::from(bytes) });
                    }
                }
                Err(refusal) => {
                    notes.push(format!("[file {described}, not downloaded: {}]", refusal.for_model(max_bytes)));
                    files.refusals.push(refusal.for_chat(&name, max_bytes));
                }
            }
        }
        files.notes.insert(inbound.message_id.clone(), notes);
    }
    files
}

/// The prompt's lines for files that were not fetched because their message
/// was recorded without a turn (unaddressed group messages kept as context,
/// messages dropped by the busy rule).
pub(crate) fn unfetched_notes(inbound: &Inbound) -> Vec<String> {
    let names = saved_names(&inbound.attachments);
    inbound
        .attachments
        .iter()
        .zip(names)
        .map(|(attachment, name)| {
            format!("[file {}, not downloaded: the message was not answered]", describe(attachment, &name))
        })
        .collect()
}

/// Why a file was not kept.
enum Refusal {
    TooLarge {
        size: u64,
    },
    /// Not fetched or not written; logged with the reason (which may name server paths).
    Failed,
}

impl Refusal {
    fn for_model(&self, max: u64) -> String {
        match self {
            Refusal::TooLarge { size } => {
                format!("{} is over this chat's limit of {}", human_size(*size), human_size(max))
            }
            Refusal::Failed => "it could not be fetched".to_string(),
        }
    }

    fn for_chat(&self, name: &str, max: u64) -> String {
        match self {
            Refusal::TooLarge { size } if max == 0 => {
                format!("⚠️ {name} ({}) was not downloaded: this chat takes no files.", human_size(*size))
            }
            Refusal::TooLarge { size } => format!(
                "⚠️ {name} is {}, over this chat's limit of {} for files; it was not downloaded.",
                human_size(*size),
                human_size(max)
            ),
            Refusal::Failed => format!("⚠️ {name} could not be downloaded; the gateway's log has the details."),
        }
    }
}

/// Fetches one file through its channel and writes it at `path` in the
/// session's workspace; the bytes written.
async fn fetch_and_save(
    inner: &Inner,
    session: &str,
    inbound: &Inbound,
    attachment: &Attachment,
    path: &str,
    max_bytes: u64,
) -> Result<Vec<u8>, Refusal> {
    let log = |error: &dyn std::fmt::Display| {
        tracing::warn!(session, message_id = %inbound.message_id, file = %attachment.name, %error, "a file was not kept");
    };
    if let Some(size) = attachment.size.filter(|size| *size > max_bytes) {
        return Err(Refusal::TooLarge { size });
    }
    let Some(channel) = inner.channels.get(&inbound.channel) else {
        log(&"the message's channel is not running");
        return Err(Refusal::Failed);
    };
    let bytes = match channel.fetch_attachment(attachment, max_bytes).await {
        Ok(bytes) => bytes,
        Err(FetchError::TooLarge { size, .. }) => return Err(Refusal::TooLarge { size }),
        Err(error) => {
            log(&error);
            return Err(Refusal::Failed);
        }
    };
    let Some(environments) = inner.agent.environments() else {
        log(&"the gateway's agent has no workspaces");
        return Err(Refusal::Failed);
    };
    let written = match environments.get(session, None).await {
        Ok(environment) => environment.write_bytes(path, &bytes).await.map(|_| ()),
        Err(error) => Err(error),
    };
    match written {
        Ok(()) => {
            tracing::info!(session, message_id = %inbound.message_id, path, bytes = bytes.len(), "file saved");
            Ok(bytes)
        }
        Err(error) => {
            log(&error);
            Err(Refusal::Failed)
        }
    }
}

/// `photo.jpg (image, image/jpeg, 88 KiB)`.
fn describe(attachment: &Attachment, name: &str) -> String {
    let mut facts = vec![attachment.kind.as_str().to_string()];
    facts.extend(attachment.media_type.clone());
    facts.extend(attachment.size.map(human_size));
    format!("{name} ({})", facts.join(", "))
}

/// The folder of one message's files: its platform id with `:` as `-` and
/// anything but letters, digits, `-` and `.` as `_`.
fn message_dir(message_id: &str) -> String {
    let dir: String = message_id
        .chars()
        .map(|c| match c {
            ':' => '-',
            c if c.is_ascii_alphanumeric() || c == '-' || c == '.' => c,
            _ => '_',
        })
        .collect();
    safe_file_name(&dir)
}

/// The names a message's files are saved under: sanitised, and unique within
/// the message (a repeated name gets its position in front: `2-photo.jpg`).
fn saved_names(attachments: &[Attachment]) -> Vec<String> {
    let mut names: Vec<String> = Vec::with_capacity(attachments.len());
    for (index, attachment) in attachments.iter().enumerate() {
        let name = safe_file_name(&attachment.name);
        let name = if names.contains(&name) { format!("{}-{name}", index + 1) } else { name };
        names.push(name);
    }
    names
}

/// A sender's file name made safe to create in a workspace and to show in a
/// prompt: only its last path component, control characters and characters
/// file systems or shells treat specially as `_`, no leading dots or spaces
/// (no `..`, no hidden file), at most 100 characters with
/// the extension kept; `file` when nothing is left.
pub fn safe_file_name(name: &str) -> String {
    let last = name.rsplit(['/', '\\']).next().unwrap_or_default();
    let cleaned: String = last
        .chars()
        .map(|c| if c.is_control() || "<>:\"|?*`$".contains(c) { '_' } else { c })
        .collect::<String>()
        .trim_start_matches(['.', ' '])
        .trim_end_matches(['.', ' '])
        .to_string();
    let cleaned = if cleaned.chars().count() > MAX_NAME_CHARS {
        let extension = cleaned.rsplit_once('.').map(|(_, ext)| ext).filter(|ext| ext.chars().count() <= 10);
        let keep = MAX_NAME_CHARS - extension.map_or(0, |ext| ext.chars().count() + 1);
        let stem: String = cleaned.chars().take(keep).collect();
        match extension {
            Some(extension) => format!("{stem}.{extension}"),
            None => stem,
        }
    } else {
        cleaned
    };
    if cleaned.is_empty() { "file".to_string() } else { cleaned }
}

/// `900 bytes`, `88.0 KiB`, `20.0 MiB`.
pub fn human_size(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let value = bytes as f64;
    if value < KIB {
        format!("{bytes} bytes")
    } else if value < KIB * KIB {
        format!("{:.1} KiB", value / KIB)
    } else if value < KIB * KIB * KIB {
        format!("{:.1} MiB", value / (KIB * KIB))
    } else {
        format!("{:.1} GiB", value / (KIB * KIB * KIB))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bub_channel::AttachmentKind;

    #[test]
    fn hostile_names_are_made_safe() {
        assert_eq!(safe_file_name("../../etc/passwd"), "passwd");
        assert_eq!(safe_file_name("..\\..\\boot.ini"), "boot.ini");
        assert_eq!(safe_file_name(".."), "file");
        assert_eq!(safe_file_name(".bashrc"), "bashrc", "no hidden files");
        assert_eq!(safe_file_name("a\nb\u{0}c.txt"), "a_b_c.txt");
        assert_eq!(safe_file_name("$(rm -rf ~)`x`.sh"), "_(rm -rf ~)_x_.sh");
        assert_eq!(safe_file_name(""), "file");
        assert_eq!(safe_file_name("Résumé 2026.pdf"), "Résumé 2026.pdf", "ordinary names stay");
        let long = format!("{}.tar.gz", "x".repeat(300));
        let short = safe_file_name(&long);
        assert_eq!(short.chars().count(), MAX_NAME_CHARS);
        assert!(short.ends_with(".gz"), "{short}");
    }

    #[test]
    fn names_are_unique_within_a_message_and_messages_get_their_own_folder() {
        let file = |name: &str| Attachment {
            kind: AttachmentKind::Document,
            name: name.into(),
            media_type: None,
            size: None,
            reference: "r".into(),
        };
        let names = saved_names(&[file("a.txt"), file("../a.txt"), file("b.txt")]);
        assert_eq!(names, ["a.txt", "2-a.txt", "b.txt"]);
        assert_eq!(message_dir("-100123:7"), "-100123-7");
        assert_eq!(message_dir("../x"), "_x", "no way out of attachments/");
    }

    #[test]
    fn sizes_read_like_people_write_them() {
        assert_eq!(human_size(900), "900 bytes");
        assert_eq!(human_size(90_000), "87.9 KiB");
        assert_eq!(human_size(20 * 1024 * 1024), "20.0 MiB");
    }
}
