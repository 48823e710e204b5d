//! Messages as the gateway sees them, whatever the platform.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What kind of conversation a chat is. Groups answer only when addressed;
/// direct chats always are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatKind {
    Direct,
    Group,
    /// A thread or forum topic inside a group: its own session by default.
    Thread,
}

impl ChatKind {
    /// Several people may read and write here.
    pub fn is_shared(self) -> bool {
        !matches!(self, ChatKind::Direct)
    }
}

/// A chat on one platform.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChatRef {
    /// The platform's chat id, as text.
    pub id: String,
    pub kind: ChatKind,
    /// The thread or topic inside the chat, when the message is in one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
}

/// Who wrote a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SenderRef {
    /// The platform's user id, as text (policies name users `<channel>:<id>`).
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<String>,
    #[serde(default)]
    pub is_bot: bool,
}

/// How a message addressed the bot, as the platform shows it. Keywords are
/// policy and are matched by the gateway, not here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Addressing {
    /// The message mentions the bot (`@bot`, a mention entity).
    #[serde(default)]
    pub mention: bool,
    /// The message replies to one of the bot's messages.
    #[serde(default)]
    pub reply_to_bot: bool,
}

/// Where the reply to an inbound message goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Delivery {
    /// Through the channel's [`Channel::send`](crate::Channel::send) (a chat, a callback URL).
    #[default]
    Channel,
    /// To the caller that submitted it, through its [`ReplySink`](crate::ReplySink);
    /// the outcome is kept for a caller that asks again with the same message id.
    Caller,
}

/// One message received by a channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inbound {
    /// The channel instance's configured name (`[channels.<name>]`).
    pub channel: String,
    pub chat: ChatRef,
    pub sender: SenderRef,
    /// The platform's id of this message; with `channel` it identifies the
    /// message for deduplication.
    pub message_id: String,
    /// May be empty when the message carries files (a photo without a caption).
    pub text: String,
    /// Files sent with the message (a photo, a document, a voice note);
    /// absent from messages stored before there were any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<crate::Attachment>,
    #[serde(default)]
    pub addressing: Addressing,
    /// Written by this bot itself (platforms echo the bot's own messages).
    #[serde(default)]
    pub from_self: bool,
    /// Forwards someone else's message: its author is not its sender, so its
    /// text is untrusted whoever sent it (see the gateway's provenance rule).
    #[serde(default)]
    pub forwarded: bool,
    #[serde(default)]
    pub delivery: Delivery,
    pub received_at: DateTime<Utc>,
    /// Set when this is an edit of message `message_id` (sent earlier): its
    /// `text` replaces that message's. The gateway decides what an edit
    /// does (see its `edit` module); adapters only report it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edit: Option<Edit>,
    /// The caller's W3C trace context, when the platform request carried one
    /// (a webhook's `traceparent` header): the gateway's trace of this
    /// message continues it. Kept with the message, so a turn run after a
    /// restart still joins the caller's trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceContext>,
}

/// A W3C Trace Context as a caller sent it: the `traceparent` header and
/// the optional `tracestate`, as text. Adapters copy them and only bound
/// their size; the gateway parses them (an invalid one starts a new trace).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceContext {
    traceparent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tracestate: Option<String>,
}

impl TraceContext {
    /// Longest `traceparent` kept: version 00's is 55 characters; later
    /// versions may append fields.
    pub const MAX_TRACEPARENT_BYTES: usize = 128;
    /// Longest `tracestate` kept (the W3C limit is 512 characters); a longer
    /// one is dropped, the `traceparent` kept.
    pub const MAX_TRACESTATE_BYTES: usize = 512;

    /// The context from the two headers' values; `None` when there is no
    /// `traceparent` or it is blank or too long.
    pub fn new(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<TraceContext> {
        let traceparent = traceparent
            .map(str::trim)
            .filter(|value| !value.is_empty() && value.len() <= TraceContext::MAX_TRACEPARENT_BYTES)?;
        let tracestate = tracestate
            .map(str::trim)
            .filter(|value| !value.is_empty() && value.len() <= TraceContext::MAX_TRACESTATE_BYTES);
        Some(TraceContext { traceparent: traceparent.to_string(), tracestate: tracestate.map(str::to_string) })
    }

    /// The `traceparent` value.
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate` value, if one was sent.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }
}

/// Which edit of a message an [`Inbound`] is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Edit {
    /// Tells this edit from the message's other edits, and is the same when
    /// the platform delivers this edit again (Telegram: the edit date and the
    /// update id; Discord: `edited_timestamp`). An id: its limits are
    /// [`crate::check`]'s.
    pub version: String,
}

impl Inbound {
    /// What identifies this inbound among a channel's: the platform message
    /// id, and for an edit the id with the edit's version
    /// (`<message id>/edit/<version>`). The gateway deduplicates, answers
    /// and keys replies by it, so an edit is handled once, apart from its
    /// message.
    pub fn key(&self) -> std::borrow::Cow<'_, str> {
        match &self.edit {
            None => std::borrow::Cow::Borrowed(&self.message_id),
            Some(edit) => std::borrow::Cow::Owned(format!("{}/edit/{}", self.message_id, edit.version)),
        }
    }
}

/// The message a reply answering `reply_to` (oldest first) is threaded to
/// on platforms that thread: the first, so a burst merged into one turn is
/// answered under the message that opened it. One rule for every adapter.
pub fn thread_to(reply_to: &[String]) -> Option<&str> {
    reply_to.first().map(String::as_str)
}

/// A reply to send on a channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outbound {
    pub chat: ChatRef,
    /// Text within the channel's [`Limits::max_message_chars`](crate::Limits)
    /// (the gateway splits longer replies).
    pub text: String,
    /// The inbound message ids this answers, oldest first; a platform that
    /// threads replies threads it to [`thread_to`]'s pick.
    pub reply_to: Vec<String>,
    /// Stable across retries and restarts: a receiver that sees it twice may drop the second.
    pub idempotency_key: String,
    /// The session this reply belongs to.
    pub session: String,
    /// People the reply addresses by name, besides the writer of the message it
    /// threads to: the gateway names the other writers of a burst from several
    /// people, so each of them sees the answer. An adapter renders them on a
    /// line of their own in front of the text, as its platform mentions a user
    /// (and pings only them); on edits too ([`Channel::edit`](crate::Channel::edit)),
    /// so they stay. At most [`mention_room`] characters of the platform's limit.
    /// Empty in replies stored before mentions existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mentions: Vec<SenderRef>,
}

/// The most characters of a name a mention shows ([`SenderRef::mention_name`]).
pub const MENTION_NAME_CHARS: usize = 32;

/// The most characters an adapter's rendering of `mentions` may take in front
/// of a message's text (the gateway splits replies that far under the
/// platform's limit), counted as UTF-16 units like the platforms count (never
/// fewer than characters): per person, the [`SenderRef::mention_name`], the
/// id and a separator; and the line break after them.
pub fn mention_room(mentions: &[SenderRef]) -> usize {
    if mentions.is_empty() {
        return 0;
    }
    let units = |text: &str| text.encode_utf16().count();
    let each = |sender: &SenderRef| units(&sender.id) + units(&sender.mention_name()) + 5;
    mentions.iter().map(each).sum::<usize>() + 1
}

impl SenderRef {
    /// How a mention shows this person where the platform shows a name: the
    /// display name (its first [`MENTION_NAME_CHARS`] characters), or the id
    /// when there is none.
    pub fn mention_name(&self) -> String {
        match self.display.as_deref().map(str::trim).filter(|name| !name.is_empty()) {
            Some(name) => name.chars().take(MENTION_NAME_CHARS).collect(),
            None => self.id.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sender(id: &str, display: Option<&str>) -> SenderRef {
        SenderRef { id: id.into(), display: display.map(str::to_string), is_bot: false }
    }

    #[test]
    fn mentions_show_a_short_name_or_the_id() {
        assert_eq!(sender("7", Some("  Ada ")).mention_name(), "Ada");
        assert_eq!(sender("7", Some(" ")).mention_name(), "7");
        assert_eq!(sender("7", None).mention_name(), "7");
        let long = "é".repeat(100);
        assert_eq!(sender("7", Some(&long)).mention_name().chars().count(), MENTION_NAME_CHARS);
    }

    #[test]
    fn mention_room_covers_a_name_and_an_id_each() {
        assert_eq!(mention_room(&[]), 0);
        let two = [sender("123", Some("Ada")), sender("45", Some("🦀"))];
        // "<@123>, <@45>\n" is 14; "Ada, 🦀\n" is 8 units.
        assert_eq!(mention_room(&two), (3 + 3 + 5) + (2 + 2 + 5) + 1);
    }

    #[test]
    fn outbox_rows_stored_before_mentions_still_decode() {
        let old =
            r#"{"chat":{"id":"1","kind":"group"},"text":"hi","reply_to":["5"],"idempotency_key":"k","session":"s"}"#;
        let outbound: Outbound = serde_json::from_str(old).expect("an old row decodes");
        assert!(outbound.mentions.is_empty());
        let json = serde_json::to_string(&outbound).expect("encodes");
        assert!(!json.contains("mentions"), "{json}");
    }
}

/// A file to send on a channel ([`Channel::send_file`](crate::Channel::send_file)):
/// one message holding the file, with an optional caption.
#[derive(Clone, PartialEq, Eq)]
pub struct OutboundFile {
    pub chat: ChatRef,
    /// The name the chat shows (no directories).
    pub name: String,
    /// The file's media type (`image/png`, `application/pdf`); platforms show
    /// some types inline (Telegram sends small images as photos).
    pub media_type: String,
    pub bytes: Vec<u8>,
    /// Text shown with the file, within the platform's caption limit.
    pub caption: Option<String>,
    /// The inbound message ids this answers, oldest first (threaded like a
    /// reply: see [`thread_to`]).
    pub reply_to: Vec<String>,
    /// Stable across retries and restarts: the same file of the same reply keeps its key.
    pub idempotency_key: String,
    /// The session this file belongs to.
    pub session: String,
}

impl OutboundFile {
    /// Its media type is an image.
    pub fn is_image(&self) -> bool {
        self.media_type.starts_with("image/")
    }
}

/// Without the bytes: a file's debug print names its size, not its content.
impl std::fmt::Debug for OutboundFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboundFile")
            .field("chat", &self.chat)
            .field("name", &self.name)
            .field("media_type", &self.media_type)
            .field("bytes", &self.bytes.len())
            .field("caption", &self.caption)
            .field("reply_to", &self.reply_to)
            .field("idempotency_key", &self.idempotency_key)
            .field("session", &self.session)
            .finish()
    }
}
