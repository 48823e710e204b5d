//! The contract between bub's gateway and its channel adapters.
//!
//! An adapter turns platform events into [`Inbound`] values, hands them to the
//! gateway's [`InboundSink`], and renders [`Outbound`] replies on its platform
//! through [`Channel::send`] / [`Channel::edit`] (and files through
//! [`Channel::send_file`]). It never sees the agent, the
//! tape or the policy: who may talk, what is a command and which tools run are
//! decided once, in the gateway, so no adapter can get authorization wrong.
//!
//! # Layout
//! - [`attachment`]: [`Attachment`], a file sent with a message, and [`FetchError`].
//! - [`backoff`]: [`Backoff`], the wait before a retry (one jitter for every retry loop).
//! - [`message`]: [`Inbound`] (and its [`Edit`] and [`TraceContext`]), [`ChatRef`], [`SenderRef`], [`Outbound`], [`OutboundFile`], [`Delivery`].
//! - [`check`]: the limits of each [`Inbound`] field ([`Inbound::check`],
//!   [`InvalidInbound`]), enforced by adapters on arrival and by the gateway.
//! - [`channel`]: the [`Channel`] trait, [`Limits`] and send errors.
//! - [`command`]: [`MenuCommand`] and [`MenuScope`], a platform's command menu.
//! - [`reply`]: [`InboundSink`] (the gateway side) and [`ReplySink`], the
//!   per-message stream of a reply to a caller that waits for it (webhook `sync`/`sse`).
//! - [`rules`]: rules on settings that adapters share ([`rules::http_url`]).
//! - [`secret`]: [`Secret`], a key or token that is used but never printed.

#![forbid(unsafe_code)]

pub mod attachment;
pub mod backoff;
pub mod channel;
pub mod check;
pub mod command;
pub mod message;
pub mod reply;
pub mod rules;
pub mod secret;

pub use attachment::{Attachment, AttachmentKind, CappedBytes, FetchError};
pub use backoff::Backoff;
pub use channel::{Channel, ChannelError, CredentialProblem, Delivered, LengthUnit, Limits, RateScope, SendError};
pub use check::{
    InboundField, InvalidInbound, MAX_ATTACHMENTS, MAX_CHANNEL_BYTES, MAX_DISPLAY_BYTES, MAX_ID_BYTES, MAX_TEXT_BYTES,
    Problem,
};
pub use command::{MenuCommand, MenuScope};
pub use message::{
    Addressing, ChatKind, ChatRef, Delivery, Edit, Inbound, MENTION_NAME_CHARS, Outbound, OutboundFile, SenderRef,
    TraceContext, mention_room, thread_to,
};
pub use reply::{
    InboundSink, LatestMessage, Outcome, OutcomeStatus, ReplyEvent, ReplyReceiver, ReplySink, SubmitError, Submitted,
    retry_after_seconds,
};
pub use secret::Secret;
