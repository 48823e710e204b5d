//! The chat list of the admin console: the sessions of the gateway's inbox
//! ([`GatewayTables::chats`]) as channel, chat, thread and the tape to open.
//!
//! A session is keyed as [`admission::session_id`](super::admission::session_id)
//! makes it (`<channel>:<chat>`, plus `:<thread>` or `:<sender>` as the
//! chat's `session_scope` says), and its tape is named after it verbatim: a
//! turn runs on `RunOptions::new(session)` and a message recorded without a
//! turn goes to `agent.tape(session)`. So the session id is the tape name
//! the console opens.

use crate::db::gateway::ChatRow;
use crate::db::{DbError, GatewayTables};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

/// What kind of conversation a chat is (as `bub_channel::ChatKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ChatKindView {
    Direct,
    Group,
    /// A thread or forum topic inside a group.
    Thread,
    /// A stored message that does not say (written by another version of bub).
    Unknown,
}

/// One session of one chat, newest activity first in a list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ChatSummary {
    /// The channel's configured name.
    pub channel: String,
    /// The platform's chat id.
    pub chat_id: String,
    pub chat_kind: ChatKindView,
    /// What the chat is called, when the messages say: the other person's
    /// display name in a direct chat. Platforms do not send a group's
    /// title with its messages, so groups have none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The thread or topic, when the session is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread: Option<String>,
    /// Who wrote the newest message: display name, else platform id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_sender: Option<String>,
    /// The session id.
    pub session: String,
    /// The name of the session's tape (the session id: see the module docs).
    pub tape: String,
    /// When the newest message was stored (RFC 3339, UTC).
    pub last_activity: String,
    /// Messages stored for the session (each edit counts as one).
    pub messages: u64,
    /// Those still queued or running.
    pub unfinished: u64,
}

/// The newest `limit` sessions of `channel` (or of every channel), newest
/// activity first. `limit` is at least 1.
pub async fn list(tables: &dyn GatewayTables, channel: Option<&str>, limit: u32) -> Result<Vec<ChatSummary>, DbError> {
    let rows = tables.chats(channel, i64::from(limit.max(1))).await?;
    Ok(rows.into_iter().map(summarize).collect())
}

/// A row as the console shows it. The message is read leniently, field by
/// field: a row another version of bub wrote still lists, with what it has.
pub fn summarize(row: ChatRow) -> ChatSummary {
    let message: Value = serde_json::from_str(&row.inbound).unwrap_or(Value::Null);
    let text = |pointer: &str| message.pointer(pointer).and_then(Value::as_str).map(str::to_string);
    let chat_kind = match text("/chat/kind").as_deref() {
        Some("direct") => ChatKindView::Direct,
        Some("group") => ChatKindView::Group,
        Some("thread") => ChatKindView::Thread,
        _ => ChatKindView::Unknown,
    };
    let sender = text("/sender/display").filter(|name| !name.trim().is_empty()).or_else(|| text("/sender/id"));
    let from_self = message.get("from_self").and_then(Value::as_bool).unwrap_or(false);
    let title = match chat_kind {
        ChatKindView::Direct if !from_self => sender.clone(),
        _ => None,
    };
    ChatSummary {
        chat_id: text("/chat/id").unwrap_or_default(),
        chat_kind,
        title,
        thread: text("/chat/thread_id"),
        last_sender: sender,
        tape: row.session.clone(),
        session: row.session,
        channel: row.channel,
        last_activity: row.last_received_at,
        messages: u64::try_from(row.messages).unwrap_or(0),
        unfinished: u64::try_from(row.unfinished).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SessionScope;
    use bub_channel::{ChatKind, ChatRef, Delivery, Inbound, SenderRef};

    fn inbound(kind: ChatKind, thread: Option<&str>, display: Option<&str>) -> Inbound {
        Inbound {
            channel: "tg".into(),
            chat: ChatRef { id: "-100".into(), kind, thread_id: thread.map(str::to_string) },
            sender: SenderRef { id: "7".into(), display: display.map(str::to_string), is_bot: false },
            message_id: "1".into(),
            text: "hi".into(),
            attachments: Vec::new(),
            addressing: Default::default(),
            from_self: false,
            forwarded: false,
            delivery: Delivery::Channel,
            received_at: chrono::Utc::now(),
            edit: None,
            trace: None,
        }
    }

    fn row(message: &Inbound, scope: SessionScope) -> ChatRow {
        ChatRow {
            channel: message.channel.clone(),
            session: crate::gateway::admission::session_id(message, scope),
            inbound: serde_json::to_string(message).unwrap(),
            last_received_at: "2026-01-02T03:04:05.000000Z".into(),
            messages: 12,
            unfinished: 2,
        }
    }

    #[test]
    fn a_thread_lists_as_its_chat_and_thread_and_opens_the_sessions_tape() {
        let message = inbound(ChatKind::Thread, Some("42"), Some("Ann"));
        let summary = summarize(row(&message, SessionScope::Thread));
        assert_eq!(summary.session, "tg:-100:42");
        assert_eq!(summary.tape, summary.session);
        assert_eq!((summary.chat_id.as_str(), summary.thread.as_deref()), ("-100", Some("42")));
        assert_eq!(summary.chat_kind, ChatKindView::Thread);
        assert_eq!(summary.title, None, "a group's title is not in its messages");
        assert_eq!(summary.last_sender.as_deref(), Some("Ann"));
        assert_eq!((summary.messages, summary.unfinished), (12, 2));
    }

    #[test]
    fn a_direct_chat_is_titled_after_the_other_person() {
        let summary = summarize(row(&inbound(ChatKind::Direct, None, Some("Ann")), SessionScope::Chat));
        assert_eq!(summary.title.as_deref(), Some("Ann"));
        let summary = summarize(row(&inbound(ChatKind::Direct, None, None), SessionScope::Chat));
        assert_eq!(summary.title.as_deref(), Some("7"), "without a display name, the platform id");
    }

    #[test]
    fn a_row_that_is_not_a_message_still_lists_with_its_session() {
        let summary = summarize(ChatRow {
            channel: "tg".into(),
            session: "tg:5".into(),
            inbound: "not json".into(),
            last_received_at: "2026-01-02T03:04:05.000000Z".into(),
            messages: 1,
            unfinished: 0,
        });
        assert_eq!((summary.session.as_str(), summary.chat_kind), ("tg:5", ChatKindView::Unknown));
        assert_eq!(summary.chat_id, "");
    }

    #[test]
    fn the_summary_has_a_schema_for_the_api() {
        let schema = serde_json::to_value(schemars::schema_for!(ChatSummary)).unwrap();
        assert!(schema.pointer("/properties/tape").is_some(), "{schema}");
    }
}
