//! Telegram messages as [`Inbound`] values.
//!
//! - Message ids are unique only inside their chat on Telegram, so an inbound
//!   id is `<chat id>:<message id>`; replies parse the message id back out.
//! - Private chats are direct; groups and supergroups are groups, and a
//!   message in a forum topic is a thread of its group (its own session).
//! - A message addresses the bot when it mentions it (`@bot` entity, a text
//!   mention of the bot user, or a `/command@bot`), or replies to one of its
//!   messages. Keywords are the gateway's business. `/command@bot` loses
//!   `@bot` (the gateway reads `/command`); another bot's stays, and so is
//!   no command here.
//! - A photo, document, voice note, audio file or video is an attachment
//!   (its `file_id` the reference, fetched with `getFile` when the gateway
//!   asks); its caption is the message's text, and without one the text is
//!   empty. A photo is its largest size. A message with neither text nor a
//!   file (a sticker, a poll) has nothing for the agent and is skipped.
//! - A message the gateway could not take ([`Inbound::check`]: a sender name
//!   with a control character, say) is logged and skipped the same way.
//! - An `edited_message` update is the message again with its new text,
//!   marked as an edit ([`Edit`]) whose version is the edit date and the
//!   update id: a redelivered update is the same edit, two edits within one
//!   second are not. What an edit does is the gateway's business. Channel
//!   posts (and so their edits) are not read.

use bub_channel::{Addressing, Attachment, AttachmentKind, ChatKind, ChatRef, Delivery, Edit, Inbound, SenderRef};
use teloxide_core::types::{
    FileMeta, Me, Message, MessageEntity, MessageEntityKind, MessageEntityRef, Update, UpdateKind, User,
};

/// `<chat id>:<message id>`, the inbound id of a Telegram message.
pub(crate) fn inbound_id(chat_id: i64, message_id: i32) -> String {
    format!("{chat_id}:{message_id}")
}

/// The Telegram message id inside an inbound id made by [`inbound_id`].
pub(crate) fn message_id_of(inbound_id: &str) -> Option<i32> {
    inbound_id.rsplit_once(':').and_then(|(_, id)| id.parse().ok())
}

/// The message of an update bub reads: a new message, or an edited one.
pub(crate) fn message_of(update: &Update) -> Option<&Message> {
    match &update.kind {
        UpdateKind::Message(message) | UpdateKind::EditedMessage(message) => Some(message),
        _ => None,
    }
}

/// The update's message as the gateway sees it (an edit marked as one), or
/// `None` when it carries none for the agent (see [`to_inbound`]).
pub(crate) fn update_to_inbound(channel: &str, me: &Me, update: &Update) -> Option<Inbound> {
    let message = message_of(update)?;
    let mut inbound = to_inbound(channel, me, message)?;
    if let UpdateKind::EditedMessage(_) = &update.kind {
        let date = message.edit_date().map_or(0, |date| date.timestamp());
        inbound.edit = Some(Edit { version: format!("{date}-{}", update.id.0) });
    }
    Some(inbound)
}

/// The message as the gateway sees it, or `None` when it has no text for the
/// agent or breaks the limits of [`bub_channel::check`] (logged, and skipped
/// like a sticker: its update is still confirmed, so it is not offered again).
pub(crate) fn to_inbound(channel: &str, me: &Me, message: &Message) -> Option<Inbound> {
    let inbound = translate(channel, me, message)?;
    match inbound.check() {
        Ok(()) => Some(inbound),
        Err(invalid) => {
            tracing::warn!(
                channel,
                chat = message.chat.id.0,
                message = message.id.0,
                field = %invalid.field,
                error = %invalid,
                "skipped a Telegram message the gateway cannot take"
            );
            None
        }
    }
}

fn translate(channel: &str, me: &Me, message: &Message) -> Option<Inbound> {
    let attachments = attachments(message);
    let (text, entities) = match message.text() {
        Some(text) => (text, message.entities()),
        None => (message.caption().unwrap_or_default(), message.caption_entities()),
    };
    let entities = parse_entities(text, entities.unwrap_or_default());
    if text.trim().is_empty() && attachments.is_empty() {
        return None;
    }
    let chat = &message.chat;
    let thread_id = message.thread_id.filter(|_| message.is_topic_message).map(|thread| thread.0.0.to_string());
    let kind = match (chat.is_private(), &thread_id) {
        (true, _) => ChatKind::Direct,
        (false, Some(_)) => ChatKind::Thread,
        (false, None) => ChatKind::Group,
    };
    let sender = message.from.as_ref();
    Some(Inbound {
        channel: channel.to_string(),
        chat: ChatRef { id: chat.id.0.to_string(), kind, thread_id },
        sender: SenderRef {
            id: sender.map_or_else(|| chat.id.0.to_string(), |user| user.id.0.to_string()),
            display: sender.map(display_name),
            is_bot: sender.is_some_and(|user| user.is_bot),
        },
        message_id: inbound_id(chat.id.0, message.id.0),
        text: crate::menu::without_own_name(text, me.user.username.as_deref().unwrap_or_default()).into_owned(),
        attachments,
        addressing: Addressing {
            mention: entities.iter().any(|entity| mentions(me, entity)),
            reply_to_bot: message
                .reply_to_message()
                .and_then(|replied| replied.from.as_ref())
                .is_some_and(|author| author.id == me.user.id),
        },
        from_self: sender.is_some_and(|user| user.id == me.user.id),
        forwarded: message.forward_origin().is_some(),
        delivery: Delivery::Channel,
        received_at: chrono::Utc::now(),
        edit: None,
        trace: None,
    })
}

/// The file a message carries, if any (a Telegram message has at most one).
fn attachments(message: &Message) -> Vec<Attachment> {
    let file = |kind, file: &FileMeta, name: Option<&String>, fallback: &str, media_type: Option<String>| Attachment {
        kind,
        name: name.cloned().unwrap_or_else(|| fallback.to_string()),
        media_type,
        // Telegram leaves the size out at times (teloxide reads u32::MAX then).
        size: (file.size != u32::MAX).then_some(u64::from(file.size)),
        reference: file.id.0.clone(),
    };
    fn mime(mime: Option<&impl ToString>) -> Option<String> {
        mime.map(|m| m.to_string().split(';').next().unwrap_or_default().trim().to_string())
    }
    if let Some(largest) = message.photo().and_then(|sizes| sizes.iter().max_by_key(|s| s.width * s.height)) {
        // Telegram re-encodes photos as JPEG.
        return vec![file(AttachmentKind::Image, &largest.file, None, "photo.jpg", Some("image/jpeg".into()))];
    }
    if let Some(document) = message.document() {
        let media_type = mime(document.mime_type.as_ref());
        let kind = match &media_type {
            Some(media_type) if media_type.starts_with("image/") => AttachmentKind::Image,
            _ => AttachmentKind::Document,
        };
        return vec![file(kind, &document.file, document.file_name.as_ref(), "document", media_type)];
    }
    if let Some(voice) = message.voice() {
        let media_type = mime(voice.mime_type.as_ref()).or_else(|| Some("audio/ogg".into()));
        return vec![file(AttachmentKind::Voice, &voice.file, None, "voice.ogg", media_type)];
    }
    if let Some(audio) = message.audio() {
        let media_type = mime(audio.mime_type.as_ref());
        return vec![file(AttachmentKind::Audio, &audio.file, audio.file_name.as_ref(), "audio", media_type)];
    }
    if let Some(video) = message.video() {
        let media_type = mime(video.mime_type.as_ref());
        return vec![file(AttachmentKind::Video, &video.file, video.file_name.as_ref(), "video.mp4", media_type)];
    }
    Vec::new()
}

/// The entities of `text` with byte offsets. When one does not start and end
/// on a character of the text (Telegram counts in UTF-16 units), the update is
/// malformed and is read without entities: teloxide's parser would panic.
fn parse_entities<'a>(text: &'a str, entities: &'a [MessageEntity]) -> Vec<MessageEntityRef<'a>> {
    let mut boundaries = vec![0];
    boundaries.extend(text.chars().scan(0, |units, c| {
        *units += c.len_utf16();
        Some(*units)
    }));
    let on_boundary = |offset: usize| boundaries.binary_search(&offset).is_ok();
    let fit = entities.iter().all(|e| on_boundary(e.offset) && e.offset.checked_add(e.length).is_some_and(on_boundary));
    if fit { MessageEntityRef::parse(text, entities) } else { Vec::new() }
}

/// "Ada Lovelace", else "@ada", else the numeric id.
fn display_name(user: &User) -> String {
    let full = user.full_name();
    if !full.trim().is_empty() {
        return full;
    }
    match &user.username {
        Some(username) => format!("@{username}"),
        None => user.id.0.to_string(),
    }
}

fn mentions(me: &Me, entity: &MessageEntityRef<'_>) -> bool {
    let username = me.user.username.as_deref().unwrap_or_default();
    match entity.kind() {
        MessageEntityKind::Mention => entity
            .text()
            .strip_prefix('@')
            .is_some_and(|name| !username.is_empty() && name.eq_ignore_ascii_case(username)),
        MessageEntityKind::TextMention { user } => user.id == me.user.id,
        MessageEntityKind::BotCommand => entity
            .text()
            .split_once('@')
            .is_some_and(|(_, name)| !username.is_empty() && name.eq_ignore_ascii_case(username)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn me() -> Me {
        serde_json::from_value(json!({
            "id": 42, "is_bot": true, "first_name": "Bub", "username": "bub_bot",
            "can_join_groups": true, "can_read_all_group_messages": true, "supports_inline_queries": false,
            "can_connect_to_business": false, "has_main_web_app": false
        }))
        .expect("a Me")
    }

    fn message(fields: Value) -> Message {
        let mut base = json!({
            "message_id": 7, "date": 1_700_000_000,
            "chat": {"id": 1001, "type": "private", "first_name": "Ada"},
            "from": {"id": 1001, "is_bot": false, "first_name": "Ada", "last_name": "Lovelace"},
            "text": "hello"
        });
        for (key, value) in fields.as_object().expect("an object") {
            base[key] = value.clone();
        }
        serde_json::from_value(base).expect("a Message")
    }

    fn group() -> Value {
        json!({"id": -100_123, "type": "supergroup", "title": "team", "is_forum": true})
    }

    #[test]
    fn a_private_message_is_direct_and_named_by_chat_and_message_id() {
        let inbound = to_inbound("tg", &me(), &message(json!({}))).expect("text");
        assert_eq!(inbound.chat, ChatRef { id: "1001".into(), kind: ChatKind::Direct, thread_id: None });
        assert_eq!(inbound.message_id, "1001:7");
        assert_eq!(message_id_of(&inbound.message_id), Some(7));
        assert_eq!(inbound.sender.display.as_deref(), Some("Ada Lovelace"));
        assert_eq!((inbound.sender.id.as_str(), inbound.from_self), ("1001", false));
        assert_eq!(inbound.addressing, Addressing::default());
    }

    #[test]
    fn group_messages_are_addressed_by_mention_text_mention_command_or_reply() {
        let plain = message(json!({"chat": group(), "text": "just talking"}));
        let inbound = to_inbound("tg", &me(), &plain).unwrap();
        assert_eq!(inbound.chat.kind, ChatKind::Group);
        assert!(!inbound.addressing.mention && !inbound.addressing.reply_to_bot);

        let mention = message(json!({"chat": group(), "text": "hey @Bub_Bot look",
            "entities": [{"type": "mention", "offset": 4, "length": 8}]}));
        assert!(to_inbound("tg", &me(), &mention).unwrap().addressing.mention);

        let other = message(json!({"chat": group(), "text": "hey @someone",
            "entities": [{"type": "mention", "offset": 4, "length": 8}]}));
        assert!(!to_inbound("tg", &me(), &other).unwrap().addressing.mention);

        let text_mention = message(json!({"chat": group(), "text": "Bub, look",
            "entities": [{"type": "text_mention", "offset": 0, "length": 3,
                          "user": {"id": 42, "is_bot": true, "first_name": "Bub"}}]}));
        assert!(to_inbound("tg", &me(), &text_mention).unwrap().addressing.mention);

        let command = message(json!({"chat": group(), "text": "/help@bub_bot",
            "entities": [{"type": "bot_command", "offset": 0, "length": 13}]}));
        assert!(to_inbound("tg", &me(), &command).unwrap().addressing.mention);

        let reply = message(json!({"chat": group(), "text": "and this?", "reply_to_message": {
            "message_id": 6, "date": 1_700_000_000, "chat": group(), "text": "earlier answer",
            "from": {"id": 42, "is_bot": true, "first_name": "Bub", "username": "bub_bot"}}}));
        assert!(to_inbound("tg", &me(), &reply).unwrap().addressing.reply_to_bot);
    }

    /// A message without `text` (a photo, a document…) with `fields`.
    fn media(fields: Value) -> Message {
        let mut base = json!({
            "message_id": 7, "date": 1_700_000_000,
            "chat": {"id": 1001, "type": "private", "first_name": "Ada"},
            "from": {"id": 1001, "is_bot": false, "first_name": "Ada"},
        });
        for (key, value) in fields.as_object().expect("an object") {
            base[key] = value.clone();
        }
        serde_json::from_value(base).expect("a Message")
    }

    #[test]
    fn a_forum_topic_is_a_thread_and_captions_count_as_text() {
        let topic = message(json!({"chat": group(), "message_thread_id": 5, "is_topic_message": true}));
        let inbound = to_inbound("tg", &me(), &topic).unwrap();
        assert_eq!(inbound.chat.kind, ChatKind::Thread);
        assert_eq!(inbound.chat.thread_id.as_deref(), Some("5"));

        let sizes = json!([{"file_id": "small", "file_unique_id": "u1", "width": 90, "height": 60, "file_size": 900},
                           {"file_id": "large", "file_unique_id": "u2", "width": 1280, "height": 853, "file_size": 90_000}]);
        let photo = media(json!({"caption": "what is this?", "photo": sizes}));
        let inbound = to_inbound("tg", &me(), &photo).unwrap();
        assert_eq!(inbound.text, "what is this?");
        let expected = Attachment {
            kind: AttachmentKind::Image,
            name: "photo.jpg".into(),
            media_type: Some("image/jpeg".into()),
            size: Some(90_000),
            reference: "large".into(),
        };
        assert_eq!(inbound.attachments, vec![expected], "the largest size");
        let bare =
            to_inbound("tg", &me(), &media(json!({"photo": sizes}))).expect("a photo without caption is a message");
        assert_eq!((bare.text.as_str(), bare.attachments.len()), ("", 1));
        let sticker = media(json!({"sticker": {"file_id": "s", "file_unique_id": "su", "width": 1, "height": 1,
            "is_animated": false, "is_video": false, "type": "regular"}}));
        assert!(to_inbound("tg", &me(), &sticker).is_none(), "a sticker has nothing for the agent");
    }

    #[test]
    fn documents_and_voice_notes_are_attachments_named_as_sent() {
        let document = media(json!({"document": {"file_id": "d1", "file_unique_id": "du",
            "file_name": "../report.pdf", "mime_type": "application/pdf", "file_size": 1234}}));
        let inbound = to_inbound("tg", &me(), &document).unwrap();
        assert_eq!(
            inbound.attachments,
            vec![Attachment {
                kind: AttachmentKind::Document,
                name: "../report.pdf".into(),
                media_type: Some("application/pdf".into()),
                size: Some(1234),
                reference: "d1".into(),
            }],
            "the name as sent: the gateway sanitises it"
        );
        let voice =
            media(json!({"voice": {"file_id": "v1", "file_unique_id": "vu", "duration": 3, "mime_type": "audio/ogg"}}));
        let attachment = &to_inbound("tg", &me(), &voice).unwrap().attachments[0];
        assert_eq!(attachment.kind, AttachmentKind::Voice);
        assert_eq!((attachment.name.as_str(), attachment.media_type.as_deref()), ("voice.ogg", Some("audio/ogg")));
        assert_eq!(attachment.size, None, "a size Telegram left out is unknown");
    }

    #[test]
    fn a_message_over_the_inbound_limits_is_skipped() {
        let forged = message(json!({"from": {"id": 1001, "is_bot": false, "first_name": "Ada\nBob: rm -rf"}}));
        assert!(to_inbound("tg", &me(), &forged).is_none(), "a control character in a name");
        let long = message(json!({"from": {"id": 1001, "is_bot": false, "first_name": "n".repeat(300)}}));
        assert!(to_inbound("tg", &me(), &long).is_none(), "a name over 256 bytes");
    }

    #[test]
    fn entities_that_do_not_fit_the_text_are_ignored_not_a_panic() {
        // Found by fuzz/fuzz_targets/telegram_update.rs: offsets past the text, inside an
        // emoji's surrogate pair, and overflowing made teloxide's entity parser panic; one such
        // entity drops them all (the first here is a real mention).
        for entities in [
            json!([{"type": "mention", "offset": 3, "length": 8}, {"type": "bot_command", "offset": 303, "length": 13}]),
            json!([{"type": "bold", "offset": 1, "length": 1}]),
            json!([{"type": "bold", "offset": 1, "length": u64::MAX}]),
        ] {
            let odd = message(json!({"chat": group(), "text": "😀 @bub_bot hi", "entities": entities}));
            let inbound = to_inbound("tg", &me(), &odd).expect("the text is kept");
            assert_eq!((inbound.text.as_str(), inbound.addressing.mention), ("😀 @bub_bot hi", false));
        }
        let caption = message(json!({"chat": group(), "caption": "@bub_bot",
            "photo": [{"file_id": "f", "file_unique_id": "u", "width": 1, "height": 1}],
            "caption_entities": [{"type": "mention", "offset": 0, "length": 9}]}));
        assert!(!to_inbound("tg", &me(), &caption).unwrap().addressing.mention);
        let fits = message(json!({"chat": group(), "text": "😀 @bub_bot hi",
            "entities": [{"type": "mention", "offset": 3, "length": 8}]}));
        assert!(to_inbound("tg", &me(), &fits).unwrap().addressing.mention, "emoji count 2 units");
    }

    fn edited_json_as_new() -> Value {
        json!({"update_id": 0, "message": {
            "message_id": 8, "date": 1_700_000_000, "chat": {"id": 1001, "type": "private", "first_name": "Ada"},
            "from": {"id": 1001, "is_bot": false, "first_name": "Ada"}, "text": "new"
        }})
    }

    #[test]
    fn an_edited_message_update_is_an_edit_versioned_by_date_and_update() {
        let edited = json!({
            "message_id": 7, "date": 1_700_000_000, "edit_date": 1_700_000_100,
            "chat": {"id": 1001, "type": "private", "first_name": "Ada"},
            "from": {"id": 1001, "is_bot": false, "first_name": "Ada"}, "text": "hello again"
        });
        // From text, as updates arrive (teloxide's `Update` cannot borrow its keys from a `Value`).
        let update: Update =
            serde_json::from_str(&json!({"update_id": 55, "edited_message": edited}).to_string()).unwrap();
        assert!(matches!(update.kind, UpdateKind::EditedMessage(_)), "{:?}", update.kind);
        let inbound = update_to_inbound("tg", &me(), &update).expect("an edit");
        assert_eq!((inbound.message_id.as_str(), inbound.text.as_str()), ("1001:7", "hello again"));
        assert_eq!(inbound.edit.map(|edit| edit.version).as_deref(), Some("1700000100-55"));
        let mut new = edited_json_as_new();
        new["update_id"] = json!(56);
        let new: Update = serde_json::from_str(&new.to_string()).unwrap();
        assert!(update_to_inbound("tg", &me(), &new).unwrap().edit.is_none());
    }

    #[test]
    fn the_bots_own_messages_are_marked() {
        let own = message(json!({"from": {"id": 42, "is_bot": true, "first_name": "Bub"}}));
        let inbound = to_inbound("tg", &me(), &own).unwrap();
        assert!(inbound.from_self && inbound.sender.is_bot);
    }
}
