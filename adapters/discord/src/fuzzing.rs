//! Message normalization, for the fuzz targets in `fuzz/`. Not part of the
//! API: it may change with them.

use crate::inbound::{BotUser, to_inbound};
use bub_channel::Inbound;
use serenity::model::channel::Message;

/// A MESSAGE_CREATE event's message (its `d`), read as serenity reads it,
/// then as the gateway sees it, for the bot user `bot_id` named `bot_name`.
pub fn read_message(channel: &str, bot_id: u64, bot_name: &str, message: &[u8]) -> Result<Option<Inbound>, String> {
    let message: Message = serenity::json::from_slice(message).map_err(|error| error.to_string())?;
    let bot = BotUser { id: bot_id, name: bot_name.to_string() };
    Ok(to_inbound(channel, &bot, &message, None))
}
