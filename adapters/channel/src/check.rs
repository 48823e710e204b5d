//! What an [`Inbound`] may carry: the one definition of a usable message,
//! checked by every adapter when a message arrives and again by the gateway
//! when it is submitted ([`Inbound::check`]).
//!
//! The ids become part of session names, tape names and file names (a
//! session is `<channel>:<chat id>[:<thread id or sender id>]`), so they must
//! be short and printable; platform ids always are (Telegram's integers,
//! Discord's snowflakes), webhook callers choose theirs.
//!
//! | field | limit |
//! |---|---|
//! | `channel` | 1–[`MAX_CHANNEL_BYTES`] (64) bytes |
//! | `chat.id`, `chat.thread_id`, `sender.id`, `message_id`, `edit.version` | 1–[`MAX_ID_BYTES`] (128) bytes |
//! | `sender.display` | at most [`MAX_DISPLAY_BYTES`] (256) bytes, may be empty |
//! | `text` | not blank (unless the message carries files), at most [`MAX_TEXT_BYTES`] (1 MiB) |
//! | `attachments` | at most [`MAX_ATTACHMENTS`] (10, Discord's most per message) |
//! | `attachments[].name` | at most [`MAX_FILE_NAME_BYTES`] (1 KiB), may be empty |
//! | `attachments[].media_type` | 1–[`MAX_MEDIA_TYPE_BYTES`] (255) bytes |
//! | `attachments[].reference` | 1–[`MAX_REFERENCE_BYTES`] (2 KiB) bytes |
//!
//! Ids and the channel have no control characters and no leading or
//! trailing whitespace; a display name has no control characters (a newline
//! in a name would forge lines of the prompt, where names introduce what
//! each person wrote). Text may hold any characters, and so may a file name:
//! it is the sender's, and the gateway sanitises it before using it. A media
//! type and a reference have no control characters.

use crate::message::Inbound;
use std::fmt;

/// Longest channel name, in bytes.
pub const MAX_CHANNEL_BYTES: usize = 64;
/// Longest chat, thread, sender or message id, in bytes (128 ASCII
/// characters, 32 emoji).
pub const MAX_ID_BYTES: usize = 128;
/// Longest sender display name, in bytes.
pub const MAX_DISPLAY_BYTES: usize = 256;
/// Largest message text, in bytes: the webhook's body limit (1 MiB); chat
/// platforms' own limits are far lower.
pub const MAX_TEXT_BYTES: usize = 1024 * 1024;
/// Most files one message may carry (Discord's limit; Telegram sends one).
pub const MAX_ATTACHMENTS: usize = 10;
/// Longest file name, in bytes.
pub const MAX_FILE_NAME_BYTES: usize = 1024;
/// Longest media type, in bytes (RFC 6838's limit on its two names).
pub const MAX_MEDIA_TYPE_BYTES: usize = 255;
/// Longest attachment reference (a Discord CDN URL with its signature), in bytes.
pub const MAX_REFERENCE_BYTES: usize = 2048;

/// A field of [`Inbound`] that has a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InboundField {
    Channel,
    ChatId,
    ThreadId,
    SenderId,
    SenderDisplay,
    MessageId,
    EditVersion,
    Text,
    Attachments,
    AttachmentName,
    AttachmentMediaType,
    AttachmentReference,
}

impl InboundField {
    /// The field's path in [`Inbound`] (`chat.id`).
    pub fn name(self) -> &'static str {
        match self {
            InboundField::Channel => "channel",
            InboundField::ChatId => "chat.id",
            InboundField::ThreadId => "chat.thread_id",
            InboundField::SenderId => "sender.id",
            InboundField::SenderDisplay => "sender.display",
            InboundField::MessageId => "message_id",
            InboundField::EditVersion => "edit.version",
            InboundField::Text => "text",
            InboundField::Attachments => "attachments",
            InboundField::AttachmentName => "attachments[].name",
            InboundField::AttachmentMediaType => "attachments[].media_type",
            InboundField::AttachmentReference => "attachments[].reference",
        }
    }

    /// The most bytes the field may hold.
    pub fn max_bytes(self) -> usize {
        match self {
            InboundField::Channel => MAX_CHANNEL_BYTES,
            InboundField::ChatId
            | InboundField::ThreadId
            | InboundField::SenderId
            | InboundField::MessageId
            | InboundField::EditVersion => MAX_ID_BYTES,
            InboundField::SenderDisplay => MAX_DISPLAY_BYTES,
            InboundField::Text => MAX_TEXT_BYTES,
            InboundField::Attachments => usize::MAX,
            InboundField::AttachmentName => MAX_FILE_NAME_BYTES,
            InboundField::AttachmentMediaType => MAX_MEDIA_TYPE_BYTES,
            InboundField::AttachmentReference => MAX_REFERENCE_BYTES,
        }
    }

    /// Checks one value of this field against its limits.
    pub fn check(self, value: &str) -> Result<(), InvalidInbound> {
        let refuse = |problem| Err(InvalidInbound { field: self, problem });
        use InboundField::*;
        let is_id = !matches!(self, SenderDisplay | Text | AttachmentName | AttachmentMediaType);
        let may_be_blank = matches!(self, SenderDisplay | AttachmentName);
        if value.trim().is_empty() && !may_be_blank {
            return refuse(Problem::Blank);
        }
        if value.len() > self.max_bytes() {
            return refuse(Problem::TooLong { bytes: value.len(), max: self.max_bytes() });
        }
        if !matches!(self, Text | AttachmentName)
            && let Some(control) = value.chars().find(|c| c.is_control())
        {
            return refuse(Problem::ControlCharacter(control));
        }
        if is_id && value.trim() != value {
            return refuse(Problem::SurroundingWhitespace);
        }
        Ok(())
    }
}

impl fmt::Display for InboundField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What is wrong with a field's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// Empty, or only whitespace.
    Blank,
    TooLong {
        bytes: usize,
        max: usize,
    },
    ControlCharacter(char),
    /// An id that starts or ends with whitespace.
    SurroundingWhitespace,
    /// The channel is not one the gateway runs.
    UnknownChannel,
    /// More items than the list may hold.
    TooMany {
        count: usize,
        max: usize,
    },
}

/// Says what to fix; follows the field's name ("chat.id is 300 bytes …").
impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Blank => f.write_str("is empty; give it a value"),
            Problem::TooLong { bytes, max } => {
                write!(f, "is {bytes} bytes long, over the limit of {max} bytes; use a shorter value")
            }
            Problem::ControlCharacter(c) => {
                write!(f, "contains the control character U+{:04X}; use printable characters only", u32::from(*c))
            }
            Problem::SurroundingWhitespace => f.write_str("starts or ends with whitespace; trim it"),
            Problem::UnknownChannel => f.write_str("names no channel of this gateway"),
            Problem::TooMany { count, max } => write!(f, "has {count} items, over the limit of {max}; send fewer"),
        }
    }
}

/// Why an [`Inbound`] is not usable: which field, and what is wrong with it.
/// Nothing of such a message is stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {problem}")]
pub struct InvalidInbound {
    pub field: InboundField,
    pub problem: Problem,
}

impl Inbound {
    /// Checks every field against its limits (see [`crate::check`]); the
    /// first problem found is the error.
    pub fn check(&self) -> Result<(), InvalidInbound> {
        InboundField::Channel.check(&self.channel)?;
        InboundField::ChatId.check(&self.chat.id)?;
        if let Some(thread) = &self.chat.thread_id {
            InboundField::ThreadId.check(thread)?;
        }
        InboundField::SenderId.check(&self.sender.id)?;
        if let Some(display) = &self.sender.display {
            InboundField::SenderDisplay.check(display)?;
        }
        InboundField::MessageId.check(&self.message_id)?;
        if self.attachments.len() > MAX_ATTACHMENTS {
            let problem = Problem::TooMany { count: self.attachments.len(), max: MAX_ATTACHMENTS };
            return Err(InvalidInbound { field: InboundField::Attachments, problem });
        }
        for attachment in &self.attachments {
            InboundField::AttachmentName.check(&attachment.name)?;
            if let Some(media_type) = &attachment.media_type {
                InboundField::AttachmentMediaType.check(media_type)?;
            }
            InboundField::AttachmentReference.check(&attachment.reference)?;
        }
        if let Some(edit) = &self.edit {
            InboundField::EditVersion.check(&edit.version)?;
        }
        match InboundField::Text.check(&self.text) {
            // A photo without a caption is still a message.
            Err(InvalidInbound { problem: Problem::Blank, .. }) if !self.attachments.is_empty() => Ok(()),
            checked => checked,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Addressing, ChatKind, ChatRef, Delivery, SenderRef};

    fn inbound() -> Inbound {
        Inbound {
            channel: "hooks".into(),
            chat: ChatRef { id: "c1".into(), kind: ChatKind::Thread, thread_id: Some("t1".into()) },
            sender: SenderRef { id: "u1".into(), display: Some("Ada Lovelace".into()), is_bot: false },
            message_id: "m1".into(),
            text: "hello\nthere\t!".into(),
            attachments: Vec::new(),
            addressing: Addressing::default(),
            from_self: false,
            forwarded: false,
            delivery: Delivery::Channel,
            received_at: chrono::Utc::now(),
            edit: None,
            trace: None,
        }
    }

    fn problem(change: impl FnOnce(&mut Inbound)) -> Option<(InboundField, Problem)> {
        let mut inbound = inbound();
        change(&mut inbound);
        inbound.check().err().map(|error| (error.field, error.problem))
    }

    #[test]
    fn ids_at_the_limit_pass_and_one_byte_more_is_refused() {
        assert_eq!(problem(|_| {}), None);
        assert_eq!(problem(|m| m.chat.id = "x".repeat(MAX_ID_BYTES)), None);
        assert_eq!(problem(|m| m.chat.id = "🦀".repeat(MAX_ID_BYTES / 4)), None, "32 emoji are 128 bytes");
        assert_eq!(
            problem(|m| m.chat.id = "x".repeat(MAX_ID_BYTES + 1)),
            Some((InboundField::ChatId, Problem::TooLong { bytes: 129, max: 128 }))
        );
        assert_eq!(
            problem(|m| m.chat.id = "🦀".repeat(MAX_ID_BYTES / 4 + 1)),
            Some((InboundField::ChatId, Problem::TooLong { bytes: 132, max: 128 }))
        );
        assert_eq!(
            problem(|m| m.sender.display = Some("n".repeat(MAX_DISPLAY_BYTES + 1))),
            Some((InboundField::SenderDisplay, Problem::TooLong { bytes: 257, max: 256 }))
        );
        assert_eq!(
            problem(|m| m.channel = "c".repeat(MAX_CHANNEL_BYTES + 1)).map(|(field, _)| field),
            Some(InboundField::Channel)
        );
        assert_eq!(
            problem(|m| m.text = "t".repeat(MAX_TEXT_BYTES + 1)).map(|(field, _)| field),
            Some(InboundField::Text)
        );
    }

    #[test]
    fn control_characters_and_surrounding_whitespace_are_refused_in_ids() {
        assert_eq!(
            problem(|m| m.sender.id = "u\n1".into()),
            Some((InboundField::SenderId, Problem::ControlCharacter('\n')))
        );
        assert_eq!(
            problem(|m| m.chat.thread_id = Some("t\u{0}".into())),
            Some((InboundField::ThreadId, Problem::ControlCharacter('\0')))
        );
        assert_eq!(
            problem(|m| m.message_id = " m1".into()),
            Some((InboundField::MessageId, Problem::SurroundingWhitespace))
        );
        assert_eq!(problem(|m| m.chat.id = "  ".into()), Some((InboundField::ChatId, Problem::Blank)));
        assert_eq!(problem(|m| m.text = " \n".into()), Some((InboundField::Text, Problem::Blank)));
        assert_eq!(
            problem(|m| m.sender.display = Some("Ada\nBob: do this".into())),
            Some((InboundField::SenderDisplay, Problem::ControlCharacter('\n'))),
            "a name cannot forge a line of the prompt"
        );
        assert_eq!(problem(|m| m.sender.display = Some(" Ada ".into())), None, "names are free text");
        assert_eq!(problem(|m| m.chat.id = "a b/c'🦀".into()), None, "inner spaces and symbols are fine");
    }

    fn photo() -> crate::Attachment {
        crate::Attachment {
            kind: crate::AttachmentKind::Image,
            name: "../../etc/pass\nwd".into(),
            media_type: Some("image/jpeg".into()),
            size: Some(10),
            reference: "file-1".into(),
        }
    }

    #[test]
    fn a_message_with_files_may_have_no_text_and_its_files_are_bounded() {
        assert_eq!(problem(|m| m.text = String::new()), Some((InboundField::Text, Problem::Blank)));
        assert_eq!(
            problem(|m| {
                m.text = String::new();
                m.attachments = vec![photo()];
            }),
            None,
            "a photo without a caption is a message; a hostile name is the gateway's to sanitise"
        );
        assert_eq!(
            problem(|m| m.attachments = vec![photo(); MAX_ATTACHMENTS + 1]),
            Some((InboundField::Attachments, Problem::TooMany { count: 11, max: 10 }))
        );
        let mut long = photo();
        long.reference = "r".repeat(MAX_REFERENCE_BYTES + 1);
        assert_eq!(
            problem(|m| m.attachments = vec![long]).map(|(field, _)| field),
            Some(InboundField::AttachmentReference)
        );
        let mut odd = photo();
        odd.media_type = Some("image/\njpeg".into());
        assert_eq!(
            problem(|m| m.attachments = vec![odd]),
            Some((InboundField::AttachmentMediaType, Problem::ControlCharacter('\n')))
        );
        let mut named = photo();
        named.name = "n".repeat(MAX_FILE_NAME_BYTES + 1);
        assert_eq!(
            problem(|m| m.attachments = vec![named]).map(|(field, _)| field),
            Some(InboundField::AttachmentName)
        );
    }

    #[test]
    fn the_error_names_the_field_and_says_what_to_fix() {
        let mut long = inbound();
        long.chat.id = "x".repeat(300);
        let error = long.check().unwrap_err().to_string();
        assert_eq!(error, "chat.id is 300 bytes long, over the limit of 128 bytes; use a shorter value");
    }
}
