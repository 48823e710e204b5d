//! The webhook route's reading of a request, after its signature check:
//! `bub_webhook::fuzzing::read_request`.
//!
//! The input is the body; when it starts with `?`, its first line is the
//! query string (`?mode=async`) and the rest the body.
//!
//! Invariants:
//! - a refused request is a 400, never a server error;
//! - an accepted one has non-blank ids and text, a thread id only when not
//!   empty, a thread only with a thread id, a display name only when not
//!   blank, nothing marked as the bot's, and is answered on the channel
//!   exactly in `async` mode;
//! - written back as the documented body, it reads as the same message.
#![no_main]

use bub_channel::{ChatKind, Delivery, Inbound};
use bub_webhook::fuzzing::read_request;
use libfuzzer_sys::fuzz_target;
use serde_json::json;

fuzz_target!(|data: &[u8]| {
    let (query, body) = match data.strip_prefix(b"?") {
        Some(rest) => {
            let (query, body) = rest.split_at(rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len()));
            let Ok(query) = std::str::from_utf8(query) else { return };
            (Some(query), body.strip_prefix(b"\n").unwrap_or(body))
        }
        None => (None, data),
    };
    let inbound = match read_request("hooks", query, body) {
        Ok(inbound) => inbound,
        Err((status, message)) => {
            assert_eq!(status, 400, "{message}");
            return;
        }
    };
    for (field, value) in
        [("message_id", &inbound.message_id), ("chat_id", &inbound.chat.id), ("sender_id", &inbound.sender.id)]
    {
        assert!(!value.trim().is_empty(), "blank {field}");
    }
    assert!(!inbound.text.trim().is_empty(), "blank text");
    assert_eq!(inbound.channel, "hooks");
    assert_ne!(inbound.chat.thread_id.as_deref(), Some(""));
    match inbound.chat.kind {
        ChatKind::Thread => assert!(inbound.chat.thread_id.is_some()),
        ChatKind::Group => assert!(inbound.chat.thread_id.is_none()),
        ChatKind::Direct => {}
    }
    assert!(inbound.sender.display.as_deref().is_none_or(|name| !name.trim().is_empty()));
    assert!(!inbound.sender.is_bot && !inbound.from_self && !inbound.addressing.reply_to_bot);
    let is_async = query.is_some_and(|q| q.split('&').find_map(|pair| pair.strip_prefix("mode=")) == Some("async"));
    assert_eq!(inbound.delivery == Delivery::Channel, is_async, "{query:?}");

    let again = read_request("hooks", query, written_back(&inbound).as_bytes()).expect("written back, it reads");
    assert_eq!(Inbound { received_at: inbound.received_at, ..again }, inbound);
});

/// The message as the documented request body.
fn written_back(inbound: &Inbound) -> String {
    json!({
        "message_id": inbound.message_id,
        "chat_id": inbound.chat.id,
        "sender_id": inbound.sender.id,
        "sender_name": inbound.sender.display,
        "text": inbound.text,
        "group": inbound.chat.kind.is_shared(),
        "mentions_bot": inbound.addressing.mention,
        "thread_id": inbound.chat.thread_id,
        "forwarded": inbound.forwarded,
    })
    .to_string()
}
