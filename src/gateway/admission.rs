//! The pure decisions of the inbound pipeline: is a group message addressed to
//! the bot, which session does a message belong to, and what prompt a batch of
//! messages becomes. Everything here is a function of the message and the
//! chat's policy, so it is tested without a gateway.

use crate::config::SessionScope;
use crate::policy::EffectivePolicy;
use bub_channel::{ChatKind, Inbound};

/// The name a policy gives a user: `<channel>:<user id>`.
pub fn user_name(inbound: &Inbound) -> String {
    format!("{}:{}", inbound.channel, inbound.sender.id)
}

/// Direct chats are always addressed; in shared chats the policy decides
/// (mention, reply to the bot, keyword).
pub fn is_addressed(inbound: &Inbound, policy: &EffectivePolicy) -> bool {
    inbound.chat.kind == ChatKind::Direct
        || policy.is_addressed(&inbound.text, inbound.addressing.mention, inbound.addressing.reply_to_bot)
}

/// The session (tape and environment) a message belongs to:
/// `<channel>:<chat>`, plus `:<thread>` for threads under [`SessionScope::Thread`],
/// or `:<sender>` in shared chats under [`SessionScope::Sender`].
pub fn session_id(inbound: &Inbound, scope: SessionScope) -> String {
    let base = format!("{}:{}", inbound.channel, inbound.chat.id);
    match scope {
        SessionScope::Chat => base,
        SessionScope::Thread => match &inbound.chat.thread_id {
            Some(thread) => format!("{base}:{thread}"),
            None => base,
        },
        SessionScope::Sender if inbound.chat.kind.is_shared() => format!("{base}:{}", inbound.sender.id),
        SessionScope::Sender => base,
    }
}

/// The prompt for a batch of messages: their texts, one per line; in shared
/// chats each line names its writer so the model knows who said what.
pub fn compose_prompt<'a>(messages: impl IntoIterator<Item = &'a Inbound>) -> String {
    let mut lines = Vec::new();
    for inbound in messages {
        if inbound.chat.kind.is_shared() {
            lines.push(format!("{}: {}", display_name(inbound), inbound.text));
        } else {
            lines.push(inbound.text.clone());
        }
    }
    lines.join("\n")
}

/// How a message's writer is shown to the model.
pub fn display_name(inbound: &Inbound) -> String {
    inbound.sender.display.clone().filter(|name| !name.trim().is_empty()).unwrap_or_else(|| inbound.sender.id.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bub_channel::{Addressing, ChatRef, Delivery, SenderRef};

    fn message(kind: ChatKind, text: &str) -> Inbound {
        Inbound {
            channel: "team".into(),
            chat: ChatRef { id: "c1".into(), kind, thread_id: None },
            sender: SenderRef { id: "u7".into(), display: Some("Ada".into()), is_bot: false },
            message_id: "m1".into(),
            text: text.into(),
            addressing: Addressing::default(),
            from_self: false,
            forwarded: false,
            delivery: Delivery::Channel,
            received_at: chrono::Utc::now(),
        }
    }

    #[test]
    fn sessions_follow_the_scope() {
        let mut inbound = message(ChatKind::Thread, "x");
        inbound.chat.thread_id = Some("t9".into());
        assert_eq!(session_id(&inbound, SessionScope::Thread), "team:c1:t9");
        assert_eq!(session_id(&inbound, SessionScope::Chat), "team:c1");
        assert_eq!(session_id(&inbound, SessionScope::Sender), "team:c1:u7");
        assert_eq!(session_id(&message(ChatKind::Direct, "x"), SessionScope::Sender), "team:c1");
    }

    #[test]
    fn group_prompts_name_the_writer() {
        let a = message(ChatKind::Group, "first");
        let mut b = message(ChatKind::Group, "second");
        b.sender.display = None;
        assert_eq!(compose_prompt([&a, &b]), "Ada: first\nu7: second");
        assert_eq!(compose_prompt([&message(ChatKind::Direct, "hello")]), "hello");
    }
}
