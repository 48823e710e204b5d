//! Discord message normalization: a MESSAGE_CREATE payload's `d` → serenity
//! `Message` → `Inbound` (`bub_discord::fuzzing::read_message`), for the bot
//! user 900 named `bub`.
//!
//! Invariants:
//! - the text is not blank unless the message carries a file (a file alone is
//!   a message; its name and URL are kept), and the bot's mention (`<@900>`, `<@!900>`) reads
//!   as `@bub`: none is left in it, and a message that had one mentions the bot;
//! - a message is the bot's own exactly when its author is the bot;
//! - guild messages are groups, others direct; no thread ids (a Discord thread is a channel);
//! - ids are non-zero snowflakes.
//!
//! Skipped: a non-ASCII string of an image hash's length (32 bytes, or 34
//! starting with `a_`). serenity 0.12's `ImageHash::from_str` slices it by
//! bytes and panics; only Discord's own payloads reach it, and bub cannot
//! guard serenity's gateway.
#![no_main]

use bub_channel::{ChatKind, Delivery};
use bub_discord::fuzzing::read_message;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    if has_non_ascii_image_hash(data) {
        return;
    }
    let Ok(Some(inbound)) = read_message("dc", 900, "bub", data) else { return };
    assert!(!inbound.text.trim().is_empty() || !inbound.attachments.is_empty(), "blank text and no file");
    for file in &inbound.attachments {
        assert!(!file.reference.trim().is_empty(), "a file without its URL: {file:?}");
    }
    for form in ["<@900>", "<@!900>"] {
        assert!(!inbound.text.contains(form), "{form} left in {:?}", inbound.text);
    }
    let json = serde_json::from_slice::<Value>(data).ok();
    let content = json.as_ref().and_then(|d| d.get("content")).and_then(Value::as_str).unwrap_or_default();
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

/// Whether some string literal in `json` (duplicate keys' values too, which
/// serenity reads before refusing them) would make serenity's `ImageHash` parser panic.
fn has_non_ascii_image_hash(json: &[u8]) -> bool {
    let mut rest = json;
    while let Some(start) = rest.iter().position(|&b| b == b'"') {
        let body = &rest[start + 1..];
        let mut len = 0;
        while len < body.len() && body[len] != b'"' {
            len += if body[len] == b'\\' { 2 } else { 1 };
        }
        let end = (start + len + 2).min(rest.len());
        if let Ok(text) = serde_json::from_slice::<String>(&rest[start..end])
            && !text.is_ascii()
            && (text.len() == 32 || (text.len() == 34 && text.starts_with("a_")))
        {
            return true;
        }
        rest = &rest[end..];
    }
    false
}
