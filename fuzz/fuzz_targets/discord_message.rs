//! Discord message normalization: a MESSAGE_CREATE payload's `d` → serenity
//! `Message` → `Inbound` (`bub_discord::fuzzing::read_message`), for the bot
//! user 900 named `bub`.
//!
//! Invariants:
//! - the text is not blank, and the bot's mention (`<@900>`, `<@!900>`) reads
//!   as `@bub`: none is left in it, and a message that had one mentions the bot;
//! - a message is the bot's own exactly when its author is the bot;
//! - guild messages are groups, others direct; no thread ids (a Discord thread is a channel);
//! - ids are non-zero snowflakes.
#![no_main]

use bub_channel::{ChatKind, Delivery};
use bub_discord::fuzzing::read_message;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(Some(inbound)) = read_message("dc", 900, "bub", data) else { return };
    assert!(!inbound.text.trim().is_empty(), "blank text");
    for form in ["<@900>", "<@!900>"] {
        assert!(!inbound.text.contains(form), "{form} left in {:?}", inbound.text);
    }
    let content = serde_json::from_slice::<serde_json::Value>(data).ok();
    let content = content.as_ref().and_then(|d| d.get("content")).and_then(|c| c.as_str()).unwrap_or_default();
    if content.contains("<@900>") || content.contains("<@!900>") {
        assert!(inbound.addressing.mention, "{content:?} mentions the bot");
    }
    assert_eq!(inbound.from_self, inbound.sender.id == "900");
    assert!(matches!(inbound.chat.kind, ChatKind::Direct | ChatKind::Group));
    assert_eq!(inbound.chat.thread_id, None);
    for id in [&inbound.message_id, &inbound.chat.id, &inbound.sender.id] {
        assert!(id.parse::<u64>().is_ok_and(|id| id != 0), "{id:?}");
    }
    assert_eq!(inbound.delivery, Delivery::Channel);
});
