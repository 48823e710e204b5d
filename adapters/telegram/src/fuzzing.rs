//! Update normalization, for the fuzz targets in `fuzz/`. Not part of the
//! API: it may change with them.

use bub_channel::Inbound;
use teloxide_core::types::{Me, Update};

/// An update as polling and the webhook route read it (`me` is the bot's
/// `getMe` result): `None` when it carries no message for the agent, else the
/// Telegram message id and the message as the gateway sees it.
pub fn read_update(channel: &str, me: &[u8], update: &[u8]) -> Result<Option<(i32, Inbound)>, String> {
    let me: Me = serde_json::from_slice(me).map_err(|error| format!("getMe: {error}"))?;
    let update: Update = serde_json::from_slice(update).map_err(|error| format!("update: {error}"))?;
    let Some(message) = crate::inbound::message_of(&update) else { return Ok(None) };
    Ok(crate::inbound::update_to_inbound(channel, &me, &update).map(|inbound| (message.id.0, inbound)))
}

/// The Telegram message id inside an inbound id, as replies read it.
pub fn message_id_of(inbound_id: &str) -> Option<i32> {
    crate::inbound::message_id_of(inbound_id)
}
