//! Edited messages (Telegram `edited_message`, Discord `MESSAGE_UPDATE` whose
//! content changed): an adapter reports an edit as an [`Inbound`] with
//! [`Inbound::edit`] set; what it does is decided here and in the session's
//! worker, once for every platform.
//!
//! - **Taken from its message** ([`taken`]): the gateway handles the stored
//!   message it edits with only the text (and whether the text mentions the
//!   bot) replaced. Sender, chat, `forwarded` and delivery stay the
//!   original's, so an edit never makes a message more trusted than it was
//!   (provenance is decided from them at admission, as for the message). An
//!   edit of a message the gateway never stored (written before the bot was
//!   there, or skipped as empty), or whose sender or chat is not its
//!   message's, is ignored.
//! - **Once**: it is stored and deduplicated like a message, by its key
//!   ([`Inbound::key`]: the message id and the edit's version), so an edit
//!   delivered twice is handled once, and a crash before its outcome handles
//!   it again after the restart. It goes through the same admission (a
//!   stranger's edit gets what their message got).
//! - **Before its turn** (the message still waits in its session's debounce
//!   batch or queue): the edit replaces the text, in memory and in the stored
//!   inbox row ([`apply`]), so the turn, or a restart, uses the new text only.
//! - **After its turn started** the chat's `on_edit` policy decides:
//!   `record` (the default) keeps it on the tape as context (`(edited) …`,
//!   see below); `rerun` answers the edited message again in a turn of its own
//!   (as a new message would be: debounced, queued behind a running turn; its
//!   reply is threaded to the message and keyed by the edit, so it is a second
//!   reply, sent once). In a group, an edit that does not address the bot is
//!   only recorded.
//! - An edit never becomes a comma command: an edited text that is one is
//!   only recorded (commands are checked when they are sent, not edited in).
//!
//! On the tape, a recorded edit is a `message` entry (role `user`) whose
//! text is the prompt line of the edit (`(edited) <text>`, or `<name>
//! (edited): <text>` in shared chats), with meta `inactive: true`,
//! `provenance`, `message_id: <message id>/edit/<version>` and `edit_of:
//! <message id>`; the model sees it as context of the next turn.

use super::store::{GatewayStore, StoreResult};
use super::{Inner, Message, outcome, turn};
use crate::tape::provenance::least_trusted;
use bub_channel::{Addressing, Inbound, OutcomeStatus};
use std::sync::Arc;

/// The edit as the gateway handles it: its stored message with the edit's
/// text. `None` when there is nothing to edit (logged); a message that is
/// not an edit is returned as it is.
pub(crate) async fn taken(store: &GatewayStore, edit: Inbound) -> StoreResult<Option<Inbound>> {
    let Some(version) = edit.edit.clone() else { return Ok(Some(edit)) };
    let Some(original) = store.original(&edit.channel, &edit.message_id).await? else {
        tracing::debug!(channel = %edit.channel, message_id = %edit.message_id, "an edit of a message the gateway never received; ignored");
        return Ok(None);
    };
    if original.sender.id != edit.sender.id || original.chat.id != edit.chat.id {
        tracing::warn!(channel = %edit.channel, message_id = %edit.message_id, "an edit from another sender or chat than its message's; ignored");
        return Ok(None);
    }
    Ok(Some(Inbound {
        text: edit.text,
        addressing: Addressing {
            mention: edit.addressing.mention,
            reply_to_bot: original.addressing.reply_to_bot || edit.addressing.reply_to_bot,
        },
        edit: Some(version),
        received_at: edit.received_at,
        // The edit's request is the one being traced now.
        trace: edit.trace.or_else(|| original.trace.clone()),
        ..original
    }))
}

/// Whether `edit` edits `waiting`.
pub(crate) fn edits(edit: &Inbound, waiting: &Inbound) -> bool {
    edit.channel == waiting.channel && edit.message_id == waiting.message_id
}

/// Gives `waiting`, a message of `session` that waits for its turn, the text
/// of `edit` (stored, so a restart runs the new text), and concludes the edit.
pub(crate) async fn apply(inner: &Arc<Inner>, session: &str, waiting: &mut Message, edit: Message) {
    let mut inbound = waiting.inbound.clone();
    inbound.text = edit.inbound.text.clone();
    inbound.addressing.mention |= edit.inbound.addressing.mention;
    if let Err(error) = inner.store.replace_waiting(waiting.seq, &inbound).await {
        tracing::error!(%error, session, message_id = %inbound.message_id, "cannot store an edited text; the turn uses it, a restart would not");
    }
    tracing::info!(session, message_id = %inbound.message_id, "an edit replaced the text of a message waiting for its turn");
    waiting.inbound = inbound;
    waiting.provenance = least_trusted([waiting.provenance, edit.provenance]);
    let result =
        outcome(OutcomeStatus::Recorded, "the edit replaced the text of its message, not answered yet", session);
    turn::conclude(inner, vec![edit], result, false).await;
}
