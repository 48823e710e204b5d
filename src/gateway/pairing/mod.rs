//! Pairing: how a chat-platform bot comes to answer someone the config does
//! not name, without an admin editing the file.
//!
//! - A direct message from a sender the policy leaves to pairing
//!   ([`Admission::NeedsPairing`]) gets a one-time code and nothing else: no
//!   turn, no command, nothing on a tape; the code is resent at most every
//!   [`store::RESEND_AFTER`] however often they write.
//! - An addressed message in a group nobody approved leaves a pending code
//!   for the chat, silently (a bot added to a stranger's group says nothing
//!   there); the log and `bub pairing list` show it, and who asked. One
//!   sender leaves codes for a few groups at most, so one account cannot
//!   take everyone's room for codes (the bounds: [`store`]'s docs).
//! - An admin approves with `bub pairing approve CHANNEL CODE` (from another
//!   process, while the gateway runs), an operator with `,pairing approve
//!   CODE` ([`command::pairing_tool`]); the next message is admitted.
//! - When the approvals cannot be read, nobody is admitted by them: the
//!   message is refused and the error logged (fail closed).

pub mod code;
pub mod command;
pub mod store;

pub use store::{PairingRecord, PairingStore, Requested};

use super::{Inner, Message, admission, outcome, turn};
use crate::policy::{Admission, PairingSubject};
use bub_channel::OutcomeStatus;
use std::sync::Arc;

/// Admits `message` or gives it its outcome (refused, or a pairing code):
/// `Some` when it goes on through the pipeline.
pub(crate) async fn admit(inner: &Arc<Inner>, message: Message) -> Option<Message> {
    let inbound = &message.inbound;
    let subject = match message.policy.admission(&message.user, inbound.chat.kind, &inbound.chat.id) {
        Admission::Admitted => return Some(with_provenance(message, false)),
        Admission::Refused(denial) => {
            tracing::info!(channel = %inbound.channel, user = %message.user, %denial, "message refused");
            // Strangers get no reply in the chat; a waiting caller gets the reason.
            let result = outcome(OutcomeStatus::Refused, denial.to_string(), "");
            turn::conclude(inner, vec![message], result, false).await;
            return None;
        }
        Admission::NeedsPairing(subject) => subject,
    };
    let id = match subject {
        PairingSubject::User => inbound.sender.id.clone(),
        PairingSubject::Chat => inbound.chat.id.clone(),
    };
    match inner.pairing.is_approved(&inbound.channel, subject, &id).await {
        Ok(true) => return Some(with_provenance(message, subject == PairingSubject::User)),
        Ok(false) => {}
        Err(error) => {
            tracing::error!(%error, channel = %inbound.channel, user = %message.user, "cannot read pairing approvals; the message is refused");
            let result = outcome(OutcomeStatus::Refused, "the gateway cannot check who may talk to it right now", "");
            turn::conclude(inner, vec![message], result, false).await;
            return None;
        }
    }
    ask(inner, message, subject, id).await;
    None
}

/// `message`, marked with where its text comes from (`paired`: its sender
/// was admitted by a pairing approval).
fn with_provenance(mut message: Message, paired: bool) -> Message {
    let inbound = &message.inbound;
    message.provenance = message.policy.provenance(&message.user, inbound.chat.kind, paired, inbound.forwarded);
    message
}

/// Leaves (or finds) the pending code of an unapproved sender or group and
/// concludes the message: the code is the only reply, and only to a sender.
async fn ask(inner: &Arc<Inner>, message: Message, subject: PairingSubject, id: String) {
    let inbound = &message.inbound;
    let channel = inbound.channel.clone();
    if subject == PairingSubject::Chat && !admission::is_addressed(inbound, &message.policy) {
        let result = outcome(OutcomeStatus::Refused, format!("chat {id} is not approved on {channel}"), "");
        turn::conclude(inner, vec![message], result, false).await;
        return;
    }
    let display = match subject {
        PairingSubject::User => inbound.sender.display.clone(),
        PairingSubject::Chat => None,
    };
    let requested = inner.pairing.request(&channel, subject, &id, display.as_deref(), &inbound.sender.id).await;
    let (text, reply) = match requested {
        Ok(Requested::Approved) => {
            // Approved a moment ago by another process: the next message is answered.
            ("you are approved now: send your message again".to_string(), subject == PairingSubject::User)
        }
        Ok(Requested::Pending { code, notify }) => {
            let approve = format!("bub pairing approve {channel} {code}");
            match subject {
                PairingSubject::User => {
                    tracing::info!(%channel, user = %message.user, %code, "pairing requested: approve with `{approve}`");
                    (pairing_message(&code.to_string(), &approve), notify)
                }
                PairingSubject::Chat => {
                    tracing::info!(%channel, chat = %id, user = %message.user, %code,
                        "a group nobody approved addressed the bot: approve it with `{approve}`");
                    (format!("chat {id} waits for approval: {approve}"), false)
                }
            }
        }
        Ok(Requested::TooManyFromSender) => {
            tracing::warn!(%channel, chat = %id, user = %message.user, limit = store::MAX_GROUPS_PER_SENDER,
                "this sender already left pairing codes for other groups; this group gets none (approve or revoke them, or let them expire)");
            (format!("chat {id} is not approved on {channel}"), false)
        }
        Ok(Requested::TooMany) => {
            tracing::warn!(%channel, user = %message.user, limit = store::MAX_PENDING,
                "too many pairing codes are waiting on this channel; this sender gets none (approve or let them expire)");
            ("too many pairing requests are waiting; try again later".to_string(), false)
        }
        Err(error) => {
            tracing::error!(%error, %channel, user = %message.user, "cannot store a pairing request");
            ("the gateway cannot take pairing requests right now".to_string(), false)
        }
    };
    turn::conclude(inner, vec![message], outcome(OutcomeStatus::Refused, text, ""), reply).await;
}

/// What an unapproved sender reads.
fn pairing_message(code: &str, approve: &str) -> String {
    format!(
        "I only talk to people my admin has approved. Your pairing code is {code} (valid for an hour). \
         Send it to the admin, who approves it with `{approve}`; then write to me again."
    )
}
