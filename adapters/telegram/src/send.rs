//! Replies on Telegram: `sendMessage`, `editMessageText`, `sendChatAction`,
//! files by `sendPhoto` / `sendDocument`, and what their failures mean to the
//! gateway's scheduler.
//!
//! Text is sent as Telegram HTML rendered from the model's Markdown. If
//! Telegram still refuses to parse it ("can't parse entities"), the same
//! text goes again as plain text: a reply with raw asterisks beats no reply.
//! A reply threads to the first message it answers, and is sent even when
//! that message was deleted meanwhile. The people it mentions
//! ([`Outbound::mentions`](bub_channel::Outbound)) head it, on a line of their
//! own, as text mentions (`<a href="tg://user?id=…">name</a>`, or the same as
//! an entity when the text goes plain): Telegram notifies them.

use crate::inbound::message_id_of;
use crate::markdown::{push_escaped, to_telegram_html, visible_len};
use bub_channel::{ChatRef, OutboundFile, RateScope, SendError, SenderRef};
use teloxide_core::payloads::{
    EditMessageTextSetters, SendChatActionSetters, SendDocumentSetters, SendMessageSetters, SendPhotoSetters,
};
use teloxide_core::prelude::Requester;
use teloxide_core::types::{
    ChatAction, ChatId, InputFile, LinkPreviewOptions, MessageEntity, MessageId, ParseMode, ReplyParameters, ThreadId,
    UserId,
};
use teloxide_core::{ApiError, Bot, RequestError};

/// A message's text as it goes to Telegram: Telegram HTML (`entities` empty),
/// or plain text with the entities of its mentions.
struct Body {
    text: String,
    html: bool,
    entities: Vec<MessageEntity>,
}

/// Sends `text` to `chat` with `mentions` in front, threaded to the first of
/// `reply_to`; the sent message's id.
pub(crate) async fn send_text(
    bot: &Bot,
    chat: &ChatRef,
    text: &str,
    reply_to: &[String],
    mentions: &[SenderRef],
) -> Result<i32, SendError> {
    let chat_id = chat_id(chat)?;
    let thread = thread_id(chat)?;
    let reply = reply_parameters(reply_to);
    let request = |body: Body| {
        let mut request = bot.send_message(chat_id, body.text).link_preview_options(no_preview());
        if body.html {
            request = request.parse_mode(ParseMode::Html);
        } else if !body.entities.is_empty() {
            request = request.entities(body.entities);
        }
        if let Some(thread) = thread {
            request = request.message_thread_id(thread);
        }
        if let Some(reply) = reply.clone() {
            request = request.reply_parameters(reply);
        }
        request
    };
    let sent = html_or_plain(text, mentions, request).await;
    sent.map(|message| message.id.0).map_err(classify)
}

/// The largest photo `sendPhoto` takes (Telegram: "at most 10 MB"); bigger
/// images go as documents.
pub const MAX_PHOTO_BYTES: u64 = 10_000_000;
/// The largest file a bot may upload (Telegram: "up to 50 MB").
pub const MAX_FILE_BYTES: u64 = 50_000_000;

/// The images Telegram shows as photos; other images (GIF, SVG, …) would lose
/// what they are if re-encoded, so they go as documents.
const PHOTO_TYPES: [&str; 3] = ["image/jpeg", "image/png", "image/webp"];

/// Sends `file` to its chat as a multipart upload: small JPEG, PNG and WebP
/// images by `sendPhoto` (shown inline), everything else by `sendDocument`;
/// the sent message's id. The caption is plain text (no parse mode): it is
/// the model's short note, and a refused entity must not cost the file.
pub(crate) async fn send_file(bot: &Bot, file: &OutboundFile) -> Result<i32, SendError> {
    let chat_id = chat_id(&file.chat)?;
    let thread = thread_id(&file.chat)?;
    let reply = reply_parameters(&file.reply_to);
    let input = InputFile::memory(file.bytes.clone()).file_name(file.name.clone());
    // `sendPhoto` and `sendDocument` take the same options through different setter traits.
    macro_rules! with_options {
        ($request:expr) => {{
            let mut request = $request;
            if let Some(caption) = &file.caption {
                request = request.caption(caption.clone());
            }
            if let Some(thread) = thread {
                request = request.message_thread_id(thread);
            }
            if let Some(reply) = reply {
                request = request.reply_parameters(reply);
            }
            request.await
        }};
    }
    let sent = if as_photo(file) {
        with_options!(bot.send_photo(chat_id, input))
    } else {
        with_options!(bot.send_document(chat_id, input))
    };
    sent.map(|message| message.id.0).map_err(classify)
}

/// Whether `file` goes by `sendPhoto`.
fn as_photo(file: &OutboundFile) -> bool {
    PHOTO_TYPES.contains(&file.media_type.as_str()) && file.bytes.len() as u64 <= MAX_PHOTO_BYTES
}

/// Threads to [`bub_channel::thread_to`]'s pick of `reply_to`, and sends even if that message was deleted meanwhile.
fn reply_parameters(reply_to: &[String]) -> Option<ReplyParameters> {
    bub_channel::thread_to(reply_to)
        .and_then(message_id_of)
        .map(|id| ReplyParameters::new(MessageId(id)).allow_sending_without_reply())
}

/// Replaces the text of message `message_id` in `chat`, `mentions` kept in front.
pub(crate) async fn edit_text(
    bot: &Bot,
    chat: &ChatRef,
    message_id: &str,
    text: &str,
    mentions: &[SenderRef],
) -> Result<(), SendError> {
    let chat_id = chat_id(chat)?;
    let id: i32 =
        message_id.parse().map_err(|_| SendError::Permanent(format!("{message_id:?} is not a Telegram message id")))?;
    let request = |body: Body| {
        let request = bot.edit_message_text(chat_id, MessageId(id), body.text).link_preview_options(no_preview());
        if body.html {
            request.parse_mode(ParseMode::Html)
        } else if !body.entities.is_empty() {
            request.entities(body.entities)
        } else {
            request
        }
    };
    match html_or_plain(text, mentions, request).await {
        Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => Ok(()),
        Err(error) => Err(classify(error)),
    }
}

/// Sends `text` (after `mentions`) through `request`: as Telegram HTML, else
/// as plain text when rendering made it too long or Telegram refuses the entities.
async fn html_or_plain<T, R>(text: &str, mentions: &[SenderRef], request: impl Fn(Body) -> R) -> Result<T, RequestError>
where
    R: std::future::IntoFuture<Output = Result<T, RequestError>>,
{
    let Some(html) = rendered(text, mentions) else { return request(plain(text, mentions)).await };
    match request(Body { text: html, html: true, entities: Vec::new() }).await {
        Err(RequestError::Api(ApiError::CantParseEntities(reason))) => {
            tracing::warn!(%reason, "Telegram refused the rendered HTML; sending plain text");
            request(plain(text, mentions)).await
        }
        other => other,
    }
}

/// `text` as Telegram HTML after its mentions, unless rendering made it longer
/// than Telegram takes (a wide table grows when its cells are spaced out): the
/// gateway split the text itself to fit, mentions included, so the plain text
/// always does.
fn rendered(text: &str, mentions: &[SenderRef]) -> Option<String> {
    let mut html = String::new();
    for (index, sender) in mentions.iter().enumerate() {
        if index > 0 {
            html.push_str(", ");
        }
        match user_id(sender) {
            Some(id) => {
                html.push_str(&format!("<a href=\"tg://user?id={}\">", id.0));
                push_escaped(&mut html, &sender.mention_name());
                html.push_str("</a>");
            }
            None => push_escaped(&mut html, &sender.mention_name()),
        }
    }
    if !mentions.is_empty() {
        html.push('\n');
    }
    html.push_str(&to_telegram_html(text));
    (visible_len(&html) <= crate::MAX_MESSAGE_CHARS).then_some(html)
}

/// `text` as plain text after its mentions, which are text mentions by entity.
fn plain(text: &str, mentions: &[SenderRef]) -> Body {
    let mut body = String::new();
    let mut entities = Vec::new();
    for (index, sender) in mentions.iter().enumerate() {
        if index > 0 {
            body.push_str(", ");
        }
        let name = sender.mention_name();
        if let Some(id) = user_id(sender) {
            // Telegram counts entity offsets in UTF-16 units.
            entities.push(MessageEntity::text_mention_id(id, body.encode_utf16().count(), name.encode_utf16().count()));
        }
        body.push_str(&name);
    }
    if !mentions.is_empty() {
        body.push('\n');
    }
    body.push_str(text);
    Body { text: body, html: false, entities }
}

/// The Telegram user a mention names; `None` for an id that is not one (shown as a name only).
fn user_id(sender: &SenderRef) -> Option<UserId> {
    sender.id.parse().ok().map(UserId)
}

/// Shows "typing…" in `chat` for about five seconds (or until the next message).
pub(crate) async fn typing(bot: &Bot, chat: &ChatRef) -> Result<(), SendError> {
    let mut request = bot.send_chat_action(chat_id(chat)?, ChatAction::Typing);
    if let Some(thread) = thread_id(chat)? {
        request = request.message_thread_id(thread);
    }
    request.await.map(|_| ()).map_err(classify)
}

/// Links in replies stay links: a preview card under every answer is noise.
fn no_preview() -> LinkPreviewOptions {
    LinkPreviewOptions {
        is_disabled: true,
        url: None,
        prefer_small_media: false,
        prefer_large_media: false,
        show_above_text: false,
    }
}

fn chat_id(chat: &ChatRef) -> Result<ChatId, SendError> {
    chat.id.parse().map(ChatId).map_err(|_| SendError::Permanent(format!("{:?} is not a Telegram chat id", chat.id)))
}

fn thread_id(chat: &ChatRef) -> Result<Option<ThreadId>, SendError> {
    chat.thread_id
        .as_deref()
        .map(|id| {
            id.parse()
                .map(|id| ThreadId(MessageId(id)))
                .map_err(|_| SendError::Permanent(format!("{id:?} is not a Telegram topic id")))
        })
        .transpose()
}

/// What a failed Bot API call means for the scheduler: wait (429), retry
/// (network, a Telegram 5xx, a non-JSON answer from a proxy) or give up.
pub(crate) fn classify(error: RequestError) -> SendError {
    match error {
        RequestError::RetryAfter(seconds) => {
            SendError::RateLimited { retry_after: seconds.duration(), scope: RateScope::Chat }
        }
        RequestError::Network(error) => SendError::Transient(format!("cannot reach Telegram: {error}")),
        RequestError::InvalidJson { raw, .. } => {
            let start: String = raw.chars().take(120).collect();
            SendError::Transient(format!("Telegram (or a proxy) answered something that is not the Bot API: {start}"))
        }
        RequestError::Io(error) => SendError::Transient(format!("I/O error talking to Telegram: {error}")),
        RequestError::MigrateToChatId(to) => SendError::Permanent(format!(
            "the group became the supergroup {to}; messages to the old chat id are refused"
        )),
        RequestError::Api(ApiError::Unknown(description)) if is_server_error(&description) => {
            SendError::Transient(format!("Telegram: {description}"))
        }
        RequestError::Api(error) => SendError::Permanent(format!("Telegram refused the message: {error}")),
    }
}

/// Telegram's descriptions of its own 5xx answers (teloxide keeps no status code).
fn is_server_error(description: &str) -> bool {
    ["Internal Server Error", "Bad Gateway", "Service Unavailable", "Gateway Timeout", "Too Many Requests"]
        .iter()
        .any(|known| description.contains(known))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use teloxide_core::types::Seconds;

    #[test]
    fn text_that_rendering_would_push_over_the_limit_goes_plain() {
        assert_eq!(rendered("**hi**", &[]).as_deref(), Some("<b>hi</b>"));
        let row = "|a|b|c|d|e|f|g|h|\n";
        let table = format!("{}{}{}", row, "|-|-|-|-|-|-|-|-|\n", row.repeat(220));
        assert!(table.chars().count() <= crate::MAX_MESSAGE_CHARS, "{}", table.chars().count());
        assert!(visible_len(&to_telegram_html(&table)) > crate::MAX_MESSAGE_CHARS, "the table grows when rendered");
        assert_eq!(rendered(&table, &[]), None);
    }

    fn sender(id: &str, display: &str) -> SenderRef {
        SenderRef { id: id.into(), display: Some(display.into()), is_bot: false }
    }

    #[test]
    fn mentions_head_the_reply_as_text_mentions_on_a_line_of_their_own() {
        let mentions = [sender("8", "Bob <3"), sender("not-a-user", "Cy")];
        let html = rendered("**ok**", &mentions);
        assert_eq!(html.as_deref(), Some("<a href=\"tg://user?id=8\">Bob &lt;3</a>, Cy\n<b>ok</b>"));
        let body = plain("**ok**", &[sender("9", "Ann"), sender("8", "🦀 Bob")]);
        assert_eq!(body.text, "Ann, 🦀 Bob\n**ok**");
        let spans: Vec<(usize, usize)> = body.entities.iter().map(|e| (e.offset, e.length)).collect();
        assert_eq!(spans, [(0, 3), (5, 6)], "offsets and lengths in UTF-16 units");
    }

    #[test]
    fn small_common_images_go_as_photos_and_everything_else_as_documents() {
        let file = |media_type: &str, len: usize| OutboundFile {
            chat: ChatRef { id: "1".into(), kind: bub_channel::ChatKind::Direct, thread_id: None },
            name: "f".into(),
            media_type: media_type.into(),
            bytes: vec![0; len],
            caption: None,
            reply_to: Vec::new(),
            idempotency_key: "k".into(),
            session: "s".into(),
        };
        assert!(as_photo(&file("image/png", 10)));
        assert!(as_photo(&file("image/jpeg", MAX_PHOTO_BYTES as usize)));
        assert!(!as_photo(&file("image/jpeg", MAX_PHOTO_BYTES as usize + 1)), "too big for a photo");
        assert!(!as_photo(&file("image/gif", 10)), "a GIF would lose its animation");
        assert!(!as_photo(&file("application/pdf", 10)));
    }

    #[test]
    fn failures_are_sorted_into_wait_retry_and_give_up() {
        let rate = classify(RequestError::RetryAfter(Seconds::from_seconds(7)));
        assert_eq!(rate, SendError::RateLimited { retry_after: Duration::from_secs(7), scope: RateScope::Chat });
        assert!(matches!(
            classify(RequestError::Api(ApiError::Unknown("Bad Gateway".into()))),
            SendError::Transient(_)
        ));
        assert!(matches!(classify(RequestError::Api(ApiError::BotBlocked)), SendError::Permanent(_)));
        assert!(matches!(classify(RequestError::Api(ApiError::ChatNotFound)), SendError::Permanent(_)));
        let html = RequestError::InvalidJson {
            source: std::sync::Arc::new(serde_json::from_str::<u8>("<").unwrap_err()),
            raw: "<html>502</html>".into(),
        };
        assert!(matches!(classify(html), SendError::Transient(_)));
    }
}
