//! The bot's command menu (`setMyCommands`) and what privacy mode hides.
//! Which commands a menu lists and for whom is the gateway's decision;
//! this only says it to Telegram.

use crate::send::classify;
use bub_channel::{MenuCommand, MenuScope, SendError};
use teloxide_core::Bot;
use teloxide_core::payloads::SetMyCommandsSetters;
use teloxide_core::prelude::Requester;
use teloxide_core::types::{BotCommand, BotCommandScope, ChatId, Me, Recipient, UserId};

/// Sets the menu `scope` sees: `default`, `chat` or `chat_member`.
pub(crate) async fn set_commands(bot: &Bot, scope: &MenuScope, commands: &[MenuCommand]) -> Result<(), SendError> {
    let commands = commands.iter().map(|command| BotCommand::new(&command.name, &command.description));
    bot.set_my_commands(commands).scope(bot_scope(scope)?).await.map(|_| ()).map_err(classify)
}

fn bot_scope(scope: &MenuScope) -> Result<BotCommandScope, SendError> {
    let chat = |id: &str| {
        id.parse()
            .map(|id| Recipient::Id(ChatId(id)))
            .map_err(|_| SendError::Permanent(format!("{id:?} is not a Telegram chat id")))
    };
    Ok(match scope {
        MenuScope::Default => BotCommandScope::Default,
        MenuScope::Chat { chat_id } => BotCommandScope::Chat { chat_id: chat(chat_id)? },
        MenuScope::ChatMember { chat_id, user_id } => BotCommandScope::ChatMember {
            chat_id: chat(chat_id)?,
            user_id: user_id
                .parse()
                .map(UserId)
                .map_err(|_| SendError::Permanent(format!("{user_id:?} is not a Telegram user id")))?,
        },
    })
}

/// What privacy mode hides, when `getMe` says it is on.
pub(crate) fn privacy_mode(me: &Me) -> Option<String> {
    (!me.can_read_all_group_messages).then(|| {
        "Telegram's privacy mode is on for this bot (getMe: can_read_all_group_messages = false); turn it off \
         with @BotFather (/setprivacy, Disable, then remove and add the bot to each group again) or make the \
         bot an admin of the group"
            .to_string()
    })
}

/// `/name@bot args` without `@bot` when `bot` is this bot (any case):
/// Telegram's way of addressing one bot among several in a group.
pub(crate) fn without_own_name<'a>(text: &'a str, username: &str) -> std::borrow::Cow<'a, str> {
    let trimmed = text.trim_start();
    let end = trimmed.find(char::is_whitespace).unwrap_or(trimmed.len());
    let (word, rest) = trimmed.split_at(end);
    match word.strip_prefix('/').and_then(|word| word.split_once('@')) {
        Some((name, bot)) if !username.is_empty() && bot.eq_ignore_ascii_case(username) => {
            format!("/{name}{rest}").into()
        }
        _ => text.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_bots_name_is_removed_from_a_command() {
        assert_eq!(without_own_name("/tape_info@Bub_Bot x y", "bub_bot"), "/tape_info x y");
        assert_eq!(without_own_name("/help@bub_bot", "bub_bot"), "/help");
        assert_eq!(without_own_name("/help@other_bot", "bub_bot"), "/help@other_bot");
        assert_eq!(without_own_name("hi @bub_bot", "bub_bot"), "hi @bub_bot");
        assert_eq!(without_own_name("/help@bub_bot", ""), "/help@bub_bot");
    }

    #[test]
    fn scopes_are_telegrams() {
        let member = MenuScope::ChatMember { chat_id: "-100".into(), user_id: "7".into() };
        assert_eq!(
            bot_scope(&member).unwrap(),
            BotCommandScope::ChatMember { chat_id: Recipient::Id(ChatId(-100)), user_id: UserId(7) }
        );
        assert!(matches!(bot_scope(&MenuScope::Chat { chat_id: "x".into() }), Err(SendError::Permanent(_))));
    }
}
