//! Slash commands: the gateway's menu as the application's command list,
//! and a command someone ran as a message for the gateway.
//!
//! Discord shows one list of commands to everyone, in every server and DM
//! of the bot (so [`bub_channel::Channel::menus_per_chat`] is false): the
//! gateway sends its channel-wide menu as [`MenuScope::Default`], and it
//! replaces the global list in one call (`PUT /applications/{id}/commands`,
//! a bulk overwrite: a command no longer in the menu disappears). Narrower
//! scopes are not Discord's and are ignored. Each command takes one
//! optional text option, `args`: what a user would type after `/name`.
//! Discord holds a description to 100 characters, so longer ones are cut.
//!
//! A command someone ran is the message `/name args`, addressed to the bot,
//! its id the interaction's (a snowflake, as message ids are), in the chat
//! it was run in, as a message there would be (`inbound`): the gateway
//! reads it as the comma command `name` maps to, and decides whether that
//! user may run it there.

use crate::inbound::{BotUser, chat_ref, display_name};
use bub_channel::{Addressing, Delivery, Inbound, MenuCommand, MenuScope, SendError, SenderRef};
use serenity::builder::{CreateCommand, CreateCommandOption};
use serenity::http::Http;
use serenity::model::application::{CommandDataOptionValue, CommandInteraction, CommandOptionType};

/// Discord's limit on a command's (and an option's) description.
pub(crate) const MAX_DESCRIPTION_CHARS: usize = 100;
/// The one option of every command: the text after its name.
pub(crate) const ARGS_OPTION: &str = "args";
const ARGS_DESCRIPTION: &str = "What follows the command, as you would type it after /name";

/// Sets the command list everyone sees: `commands` for [`MenuScope::Default`];
/// other scopes do not exist on Discord.
pub(crate) async fn set_commands(http: &Http, scope: &MenuScope, commands: &[MenuCommand]) -> Result<(), SendError> {
    if *scope != MenuScope::Default {
        return Ok(());
    }
    let commands: Vec<CreateCommand> = commands.iter().map(application_command).collect();
    http.create_global_commands(&commands).await.map(|_| ()).map_err(crate::send::classify)
}

fn application_command(command: &MenuCommand) -> CreateCommand {
    let args = CreateCommandOption::new(CommandOptionType::String, ARGS_OPTION, ARGS_DESCRIPTION).required(false);
    CreateCommand::new(&command.name).description(shortened(&command.description)).add_option(args)
}

/// `text` within Discord's 100 characters, cut with `…` when longer.
fn shortened(text: &str) -> String {
    if text.chars().count() <= MAX_DESCRIPTION_CHARS {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(MAX_DESCRIPTION_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// The command as the message `/name args`, or `None` when the gateway
/// could not take it ([`Inbound::check`], logged). `parent` as for a
/// message in the same channel.
pub(crate) fn to_inbound(
    channel: &str,
    bot: &BotUser,
    command: &CommandInteraction,
    parent: Option<u64>,
) -> Option<Inbound> {
    let inbound = Inbound {
        channel: channel.to_string(),
        chat: chat_ref(command.channel_id.get(), command.guild_id.is_some(), parent),
        sender: SenderRef {
            id: command.user.id.get().to_string(),
            display: Some(display_name(&command.user)),
            is_bot: command.user.bot,
        },
        message_id: command.id.get().to_string(),
        text: text(command),
        attachments: Vec::new(),
        addressing: Addressing { mention: true, reply_to_bot: false },
        from_self: command.user.id.get() == bot.id,
        forwarded: false,
        delivery: Delivery::Channel,
        received_at: chrono::Utc::now(),
        edit: None,
        trace: None,
    };
    match inbound.check() {
        Ok(()) => Some(inbound),
        Err(invalid) => {
            tracing::warn!(channel, interaction = command.id.get(), field = %invalid.field, error = %invalid, "skipped a Discord command the gateway cannot take");
            None
        }
    }
}

/// `/name`, then the `args` option as typed, then any other option as
/// `key=value` (a command registered elsewhere, with options of its own).
fn text(command: &CommandInteraction) -> String {
    let mut text = format!("/{}", command.data.name);
    for option in &command.data.options {
        let value = match &option.value {
            CommandDataOptionValue::String(value) => value.clone(),
            CommandDataOptionValue::Integer(value) => value.to_string(),
            CommandDataOptionValue::Number(value) => value.to_string(),
            CommandDataOptionValue::Boolean(value) => value.to_string(),
            _ => continue,
        };
        if option.name == ARGS_OPTION {
            text.push(' ');
            text.push_str(value.trim());
        } else {
            text.push_str(&format!(" {}={}", option.name, quoted(&value)));
        }
    }
    text
}

/// `value` as one argument: as it is, or in double quotes when it holds
/// spaces or quotes.
fn quoted(value: &str) -> String {
    if !value.is_empty() && !value.contains(|c: char| c.is_whitespace() || c == '"' || c == '\'' || c == '\\') {
        return value.to_string();
    }
    format!("{value:?}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn command(options: serde_json::Value, guild: bool) -> CommandInteraction {
        let user = json!({"id": "11", "username": "ada", "discriminator": "0", "global_name": "Ada", "avatar": null});
        let mut interaction = json!({
            "id": "7001", "application_id": "900", "type": 2, "token": "t", "version": 1,
            "data": {"id": "1", "name": "tape_info", "type": 1, "options": options},
            "channel_id": "77", "locale": "en-US", "entitlements": [], "attachment_size_limit": 1024,
        });
        if guild {
            interaction["guild_id"] = json!("5");
            interaction["member"] = json!({"user": user, "roles": [], "joined_at": null, "deaf": false,
                                           "mute": false, "flags": 0});
        } else {
            interaction["user"] = user;
        }
        serde_json::from_value(interaction).expect("a command interaction")
    }

    #[test]
    fn a_command_is_the_message_slash_name_args_addressed_to_the_bot() {
        let bot = BotUser { id: 900, name: "bub".into() };
        let ran = command(json!([{"name": "args", "type": 3, "value": " release "}]), true);
        let inbound = to_inbound("dc", &bot, &ran, None).expect("a message");
        assert_eq!(inbound.text, "/tape_info release");
        assert_eq!((inbound.message_id.as_str(), inbound.sender.id.as_str()), ("7001", "11"));
        assert_eq!(inbound.sender.display.as_deref(), Some("Ada"));
        assert_eq!(inbound.chat.kind, bub_channel::ChatKind::Group);
        assert!(inbound.addressing.mention && !inbound.from_self);

        let direct = to_inbound("dc", &bot, &command(json!([]), false), None).expect("a message");
        assert_eq!((direct.text.as_str(), direct.chat.kind), ("/tape_info", bub_channel::ChatKind::Direct));
        let other = command(json!([{"name": "note", "type": 3, "value": "two words"}]), false);
        assert_eq!(to_inbound("dc", &bot, &other, None).unwrap().text, "/tape_info note=\"two words\"");
    }

    #[test]
    fn descriptions_are_cut_to_discords_hundred_characters() {
        let long = "x".repeat(150);
        assert_eq!(shortened(&long).chars().count(), MAX_DESCRIPTION_CHARS);
        assert!(shortened(&long).ends_with('…'));
        assert_eq!(shortened("List the commands"), "List the commands");
        let body = serde_json::to_value(application_command(&MenuCommand { name: "help".into(), description: long }))
            .expect("json");
        assert_eq!(body["options"][0]["name"], "args");
        assert_eq!(body["options"][0]["type"], 3);
    }
}
