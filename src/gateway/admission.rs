//! The pure decisions of the inbound pipeline: is a group message addressed to
//! the bot, which session does a message belong to, and what prompt a batch of
//! messages becomes. Everything here is a function of the message and the
//! chat's policy, so it is tested without a gateway.

use crate::config::SessionScope;
use crate::policy::EffectivePolicy;
use bub_channel::{ChatKind, Inbound, SenderRef};

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
/// chats each line names its writer so the model knows who said what. An
/// edit answered or recorded after its message's turn says so (`(edited)`),
/// so the model reads it as a correction of what it answered before.
pub fn compose_prompt<'a>(messages: impl IntoIterator<Item = &'a Inbound>) -> String {
    compose_prompt_with_files(messages.into_iter().map(|inbound| (inbound, &[][..])))
}

/// [`compose_prompt`], each message followed by the lines that describe its
/// files (see `gateway::attachments`); a message with files and no text is only
/// those lines.
pub fn compose_prompt_with_files<'a>(messages: impl IntoIterator<Item = (&'a Inbound, &'a [String])>) -> String {
    let mut lines = Vec::new();
    for (inbound, files) in messages {
        let texts = Some(&inbound.text).filter(|text| !text.trim().is_empty() || files.is_empty());
        for line in texts.into_iter().chain(files) {
            lines.push(match (inbound.chat.kind.is_shared(), inbound.edit.is_some()) {
                (true, false) => format!("{}: {line}", display_name(inbound)),
                (true, true) => format!("{} (edited): {line}", display_name(inbound)),
                (false, false) => line.clone(),
                (false, true) => format!("(edited) {line}"),
            });
        }
    }
    lines.join("\n")
}

/// The most people one reply mentions: a burst from more writers names the
/// first ones (the reply still threads to the first message).
pub const MAX_REPLY_MENTIONS: usize = 10;

/// Who the reply to a batch of messages (oldest first) names so each writer
/// sees it: the reply threads to the first message, so its writer sees it
/// there; every other distinct writer (bots left out) is mentioned, in the
/// order they wrote. A burst from one person mentions nobody.
pub fn reply_mentions<'a>(messages: impl IntoIterator<Item = &'a Inbound>) -> Vec<SenderRef> {
    let mut messages = messages.into_iter();
    let Some(first) = messages.next() else { return Vec::new() };
    let mut mentions: Vec<SenderRef> = Vec::new();
    for inbound in messages {
        let sender = &inbound.sender;
        let known = sender.id == first.sender.id || mentions.iter().any(|m| m.id == sender.id);
        if !known && !sender.is_bot && mentions.len() < MAX_REPLY_MENTIONS {
            mentions.push(sender.clone());
        }
    }
    mentions
}

/// How a message's writer is shown to the model.
pub fn display_name(inbound: &Inbound) -> String {
    inbound.sender.display.clone().filter(|name| !name.trim().is_empty()).unwrap_or_else(|| inbound.sender.id.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bub_channel::{Addressing, ChatRef, Delivery};

    fn message(kind: ChatKind, text: &str) -> Inbound {
        Inbound {
            channel: "team".into(),
            chat: ChatRef { id: "c1".into(), kind, thread_id: None },
            sender: SenderRef { id: "u7".into(), display: Some("Ada".into()), is_bot: false },
            message_id: "m1".into(),
            text: text.into(),
            attachments: Vec::new(),
            addressing: Addressing::default(),
            from_self: false,
            forwarded: false,
            delivery: Delivery::Channel,
            received_at: chrono::Utc::now(),
            edit: None,
            trace: None,
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

    fn from(id: &str, text: &str) -> Inbound {
        let mut inbound = message(ChatKind::Group, text);
        inbound.sender.id = id.into();
        inbound
    }

    #[test]
    fn a_burst_from_several_writers_mentions_each_but_the_first() {
        let burst = [from("u1", "a"), from("u2", "b"), from("u1", "c"), from("u3", "d"), from("u2", "e")];
        let ids: Vec<String> = reply_mentions(&burst).into_iter().map(|m| m.id).collect();
        assert_eq!(ids, ["u2", "u3"], "each other writer once, in the order they wrote");
        assert!(reply_mentions(&[from("u1", "a"), from("u1", "b")]).is_empty(), "one writer: nobody");
        assert!(reply_mentions(&[]).is_empty());
        let mut bot = from("b9", "beep");
        bot.sender.is_bot = true;
        assert!(reply_mentions(&[from("u1", "a"), bot]).is_empty(), "bots are not mentioned");
        let crowd: Vec<Inbound> = (0..30).map(|i| from(&format!("u{i}"), "hi")).collect();
        assert_eq!(reply_mentions(&crowd).len(), MAX_REPLY_MENTIONS);
    }

    #[test]
    fn group_prompts_name_the_writer() {
        let a = message(ChatKind::Group, "first");
        let mut b = message(ChatKind::Group, "second");
        b.sender.display = None;
        assert_eq!(compose_prompt([&a, &b]), "Ada: first\nu7: second");
        assert_eq!(compose_prompt([&message(ChatKind::Direct, "hello")]), "hello");
    }

    #[test]
    fn files_follow_their_message_and_a_file_alone_is_its_lines() {
        let files = vec!["[file photo.jpg (image), saved in the workspace as attachments/m1/photo.jpg]".to_string()];
        let caption = message(ChatKind::Group, "look");
        let bare = message(ChatKind::Direct, "");
        assert_eq!(compose_prompt_with_files([(&caption, files.as_slice())]), format!("Ada: look\nAda: {}", files[0]));
        assert_eq!(compose_prompt_with_files([(&bare, files.as_slice())]), files[0]);
    }

    #[test]
    fn an_edit_reads_as_one() {
        let mut direct = message(ChatKind::Direct, "3 + 3?");
        direct.edit = Some(bub_channel::Edit { version: "v2".into() });
        assert_eq!(compose_prompt([&direct]), "(edited) 3 + 3?");
        let mut group = message(ChatKind::Group, "3 + 3?");
        group.edit = direct.edit.clone();
        assert_eq!(compose_prompt([&group]), "Ada (edited): 3 + 3?");
    }
}
