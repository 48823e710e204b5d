//! The pure decisions of the inbound pipeline: is a group message addressed to
//! the bot, which session does a message belong to, and what prompt a batch of
//! messages becomes. Everything here is a function of the message and the
//! chat's policy, so it is tested without a gateway.

use crate::policy::{AddressingRule, SessionScope};
use bub_channel::{ChatKind, Inbound};

/// The name a policy gives a user: `<channel>:<user id>`.
pub fn user_name(inbound: &Inbound) -> String {
    format!("{}:{}", inbound.channel, inbound.sender.id)
}

/// Direct chats are always addressed; in groups a message is addressed when
/// it mentions the bot, replies to it, or contains a keyword as a whole word
/// (case-insensitive), as far as the policy counts each.
pub fn is_addressed(inbound: &Inbound, rule: &AddressingRule) -> bool {
    if inbound.chat.kind == ChatKind::Direct {
        return true;
    }
    if rule.mention && inbound.addressing.mention || rule.reply && inbound.addressing.reply_to_bot {
        return true;
    }
    let text = inbound.text.to_lowercase();
    rule.keywords.iter().any(|keyword| contains_word(&text, &keyword.to_lowercase()))
}

fn contains_word(text: &str, word: &str) -> bool {
    if word.is_empty() {
        return false;
    }
    let is_word_char = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(is_word_char) && !after.is_some_and(is_word_char)
    })
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
            delivery: Delivery::Channel,
            received_at: chrono::Utc::now(),
        }
    }

    fn rule(keywords: &[&str]) -> AddressingRule {
        AddressingRule { mention: true, reply: true, keywords: keywords.iter().map(|k| k.to_string()).collect() }
    }

    #[test]
    fn direct_messages_are_always_addressed() {
        assert!(is_addressed(&message(ChatKind::Direct, "hi"), &rule(&[])));
    }

    #[test]
    fn group_messages_need_a_mention_reply_or_keyword() {
        let plain = message(ChatKind::Group, "lunch anyone?");
        assert!(!is_addressed(&plain, &rule(&["bub"])));
        let mut mention = plain.clone();
        mention.addressing.mention = true;
        assert!(is_addressed(&mention, &rule(&[])));
        let mut reply = plain.clone();
        reply.addressing.reply_to_bot = true;
        assert!(is_addressed(&reply, &rule(&[])));
        assert!(!is_addressed(&reply, &AddressingRule { reply: false, ..rule(&[]) }));
        assert!(is_addressed(&message(ChatKind::Group, "Bub, deploy it"), &rule(&["bub"])));
        assert!(!is_addressed(&message(ChatKind::Group, "the bubble tea"), &rule(&["bub"])));
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
