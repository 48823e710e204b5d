//! Replies on Discord: create, edit, typing, files as attachments, and what
//! their failures mean to the gateway's scheduler.
//!
//! Discord renders Markdown itself, so text goes as written. A reply threads
//! to the first message it answers (still sent, unthreaded, when that message
//! was deleted meanwhile). It pings exactly the people it mentions
//! ([`Outbound::mentions`](bub_channel::Outbound), `<@id>` on a line of their
//! own in front of the text) and nobody else: no `@everyone`, roles or users
//! from the model's text, not even the author of the message it replies to.
//! serenity's rate limiter keeps to Discord's per-route buckets and waits out
//! a 429 itself (its `Retry-After`); a 429 that still comes back is passed
//! on as a pause.

use bub_channel::{ChatRef, OutboundFile, RateScope, SendError, SenderRef};
use serenity::builder::{CreateAllowedMentions, CreateAttachment, CreateMessage, EditMessage};
use serenity::http::{Http, HttpError};
use serenity::model::channel::MessageReference;
use serenity::model::id::{ChannelId, MessageId, UserId};
use std::time::Duration;

/// The largest upload of a bot in a server without boosts (Discord: 10 MiB).
pub const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;

/// Sends `text` to `chat` with `mentions` in front, as a reply to the first
/// of `reply_to`; the new message's id.
pub(crate) async fn send_text(
    http: &Http,
    chat: &ChatRef,
    text: &str,
    reply_to: &[String],
    mentions: &[SenderRef],
) -> Result<u64, SendError> {
    let message = CreateMessage::new().content(content(text, mentions));
    create(http, chat, message, reply_to, mentions).await
}

/// Sends `file` as a message with one attachment (multipart: `files[0]` and
/// `payload_json`), its caption as the content; the new message's id.
pub(crate) async fn send_file(http: &Http, file: &OutboundFile) -> Result<u64, SendError> {
    let mut message = CreateMessage::new().add_file(CreateAttachment::bytes(file.bytes.clone(), file.name.clone()));
    if let Some(caption) = &file.caption {
        message = message.content(caption);
    }
    create(http, &file.chat, message, &file.reply_to, &[]).await
}

/// Creates `message` in `chat`, pinging only `mentions`, as a reply to [`bub_channel::thread_to`]'s pick of `reply_to`.
async fn create(
    http: &Http,
    chat: &ChatRef,
    message: CreateMessage,
    reply_to: &[String],
    mentions: &[SenderRef],
) -> Result<u64, SendError> {
    let channel = channel_id(chat)?;
    let mut message = message.allowed_mentions(pings(mentions));
    if let Some(id) = bub_channel::thread_to(reply_to).and_then(|id| id.parse::<u64>().ok()).filter(|id| *id != 0) {
        let mut reference = MessageReference::from((channel, MessageId::new(id)));
        reference.fail_if_not_exists = Some(false);
        message = message.reference_message(reference);
    }
    let sent = channel.send_message(http, message).await.map_err(classify)?;
    Ok(sent.id.get())
}

/// Replaces the text of message `message_id` in `chat`, `mentions` kept in front.
pub(crate) async fn edit_text(
    http: &Http,
    chat: &ChatRef,
    message_id: &str,
    text: &str,
    mentions: &[SenderRef],
) -> Result<(), SendError> {
    let channel = channel_id(chat)?;
    let id = message_id
        .parse::<u64>()
        .ok()
        .filter(|id| *id != 0)
        .ok_or_else(|| SendError::Permanent(format!("{message_id:?} is not a Discord message id")))?;
    let edit = EditMessage::new().content(content(text, mentions)).allowed_mentions(pings(mentions));
    channel.edit_message(http, MessageId::new(id), edit).await.map(|_| ()).map_err(classify)
}

/// Shows "bub is typing…" in `chat` for about ten seconds.
pub(crate) async fn typing(http: &Http, chat: &ChatRef) -> Result<(), SendError> {
    channel_id(chat)?.broadcast_typing(http).await.map_err(classify)
}

/// The people a message mentions: Discord users by id (an id that is not one is left out).
fn users(mentions: &[SenderRef]) -> Vec<UserId> {
    mentions.iter().filter_map(|sender| sender.id.parse::<u64>().ok()).filter(|id| *id != 0).map(UserId::new).collect()
}

/// `text` after a line mentioning `mentions`.
pub(crate) fn content(text: &str, mentions: &[SenderRef]) -> String {
    let users = users(mentions);
    if users.is_empty() {
        return text.to_string();
    }
    let named: Vec<String> = users.iter().map(|user| format!("<@{user}>")).collect();
    format!("{}\n{text}", named.join(", "))
}

/// Pings exactly `mentions`: nobody the text happens to name, no role, no
/// `@everyone`, not the author of the message replied to.
pub(crate) fn pings(mentions: &[SenderRef]) -> CreateAllowedMentions {
    CreateAllowedMentions::new().users(users(mentions)).empty_roles().everyone(false).replied_user(false)
}

/// Where to write in `chat`: its thread (a channel of its own on Discord), else the chat.
fn channel_id(chat: &ChatRef) -> Result<ChannelId, SendError> {
    let here = chat.thread_id.as_deref().unwrap_or(&chat.id);
    here.parse::<u64>()
        .ok()
        .filter(|id| *id != 0)
        .map(ChannelId::new)
        .ok_or_else(|| SendError::Permanent(format!("{here:?} is not a Discord channel id")))
}

/// Discord's JSON error code for "slowmode rate limit" (a 429 for one channel).
const SLOWMODE: isize = 20016;

/// Wait (429, slowmode), retry (network, 5xx) or give up (a bad request, and every other 4xx: missing
/// access 50001 or permissions 50013, a user who takes no DMs 50007, an unknown channel 10003 or message).
/// Giving up fails this reply only; the next one is tried afresh.
pub(crate) fn classify(error: serenity::Error) -> SendError {
    match error {
        serenity::Error::Http(HttpError::UnsuccessfulRequest(response)) => {
            let status = response.status_code.as_u16();
            let what = format!("Discord answered {status}: {}", response.error.message);
            match status {
                // serenity keeps neither the body's `retry_after` nor the headers of an error: a second,
                // then the scheduler asks again. Slowmode holds one channel; other 429s may be global.
                429 if response.error.code == SLOWMODE => {
                    SendError::RateLimited { retry_after: Duration::from_secs(1), scope: RateScope::Chat }
                }
                429 => SendError::RateLimited { retry_after: Duration::from_secs(1), scope: RateScope::Channel },
                500..=599 => SendError::Transient(what),
                _ => SendError::Permanent(what),
            }
        }
        serenity::Error::Http(HttpError::Request(error)) => {
            SendError::Transient(format!("cannot reach Discord: {error}"))
        }
        serenity::Error::Io(error) => SendError::Transient(format!("I/O error talking to Discord: {error}")),
        other => SendError::Permanent(format!("Discord refused the message: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions_head_the_text_and_are_the_only_pings() {
        let mentions = [
            SenderRef { id: "300".into(), display: Some("Bob".into()), is_bot: false },
            SenderRef { id: "not-an-id".into(), display: None, is_bot: false },
        ];
        assert_eq!(content("**ok**", &mentions), "<@300>\n**ok**");
        assert_eq!(content("**ok**", &[]), "**ok**");
        let allowed = serde_json::to_value(pings(&mentions)).unwrap();
        assert_eq!(allowed, serde_json::json!({"parse": [], "users": ["300"], "roles": [], "replied_user": false}));
    }
}
