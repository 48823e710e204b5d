//! Telegram update normalization: JSON → teloxide `Update` → `Inbound`, as
//! polling and the webhook route do (`bub_telegram::fuzzing::read_update`),
//! for the bot `@bub_bot` (id 42).
//!
//! Invariants:
//! - the inbound id is `<chat id>:<message id>` and gives the message id back;
//! - the text is not blank unless the message carries a file (a photo without
//!   a caption is a message), and every file has its `file_id`;
//! - a thread has a thread id, and only a thread does outside direct chats;
//! - a message is the bot's own exactly when its sender is the bot;
//! - the sender has a non-blank display name when known; replies go to the channel.
#![no_main]

use bub_channel::{ChatKind, Delivery};
use bub_telegram::fuzzing::{message_id_of, read_update};
use libfuzzer_sys::fuzz_target;

const ME: &[u8] = br#"{"id": 42, "is_bot": true, "first_name": "Bub", "username": "bub_bot",
    "can_join_groups": true, "can_read_all_group_messages": true, "supports_inline_queries": false,
    "can_connect_to_business": false, "has_main_web_app": false}"#;

fuzz_target!(|data: &[u8]| {
    let Ok(Some((message_id, inbound))) = read_update("tg", ME, data) else { return };
    assert_eq!(message_id_of(&inbound.message_id), Some(message_id), "{}", inbound.message_id);
    assert_eq!(inbound.message_id, format!("{}:{message_id}", inbound.chat.id));
    assert!(!inbound.text.trim().is_empty() || !inbound.attachments.is_empty(), "blank text and no file");
    for file in &inbound.attachments {
        assert!(!file.reference.trim().is_empty(), "a file without its file_id: {file:?}");
    }
    match inbound.chat.kind {
        ChatKind::Thread => assert!(inbound.chat.thread_id.is_some()),
        ChatKind::Group => assert!(inbound.chat.thread_id.is_none()),
        ChatKind::Direct => {}
    }
    assert_eq!(inbound.from_self, inbound.sender.id == "42" && inbound.sender.display.is_some());
    assert!(inbound.sender.display.as_deref().is_none_or(|name| !name.trim().is_empty()));
    assert_eq!(inbound.delivery, Delivery::Channel);
});
