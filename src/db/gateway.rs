//! What the gateway's stores need from a database: the inbox, the outbox (of
//! replies, and of files sent by tools), the live messages, the pairing
//! table and the admin console's audit log, as one trait each backend
//! implements ([`GatewayTables`]).
//!
//! The statements are the backend's (SQLite's `json_extract`, PostgreSQL's
//! `FOR UPDATE SKIP LOCKED` are not the same SQL); what the rows mean, and the
//! guarantees the pipeline builds on, are `gateway::store`'s and
//! `gateway::pairing`'s, which encode and decode the JSON kept in the rows
//! and hold a `dyn GatewayTables`. So this layer knows nothing of inbound
//! messages or replies: messages, outcomes and replies cross it as JSON text,
//! times as RFC 3339 text (fixed width, so text order is time order).

use super::{DbError, Flush};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Serialize;

/// An inbound message to store (see [`GatewayTables::insert_inbound`]).
#[derive(Debug, Clone)]
pub struct NewInbound {
    pub channel: String,
    /// The platform's message id: unique per channel.
    pub message_id: String,
    /// The message, as JSON.
    pub inbound: String,
    pub session: String,
    pub received_at: String,
}

/// A stored inbound message that has no outcome yet.
#[derive(Debug, Clone)]
pub struct InboxRow {
    pub seq: i64,
    /// The message, as JSON.
    pub inbound: String,
    pub turn: Option<String>,
    pub session: Option<String>,
}

/// One session as the chat list shows it (see [`GatewayTables::chats`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatRow {
    /// The channel of the session's newest message.
    pub channel: String,
    /// The session id (`gateway::admission::session_id`), which names its tape.
    pub session: String,
    /// The session's newest stored message (an edit included), as JSON.
    pub inbound: String,
    /// When that message was stored (RFC 3339, as stored).
    pub last_received_at: String,
    /// Messages stored for the session (each edit counts as one).
    pub messages: i64,
    /// Those without an outcome yet (queued or running).
    pub unfinished: i64,
}

/// A reply to queue in the outbox.
#[derive(Debug, Clone)]
pub struct NewReply {
    /// The idempotency key: one row per reply, whatever happens.
    pub key: String,
    pub channel: String,
    /// The reply, as JSON.
    pub outbound: String,
}

/// A reply still pending in the outbox.
#[derive(Debug, Clone)]
pub struct OutboxRow {
    pub channel: String,
    /// The reply, as JSON.
    pub outbound: String,
    /// The platform ids of the parts already delivered, as a JSON array.
    pub platform_ids: Option<String>,
}

/// The live message of a reply (see [`GatewayTables::remember_live`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveRow {
    pub channel: String,
    /// The chat, as JSON.
    pub chat: String,
    /// The platform's message id.
    pub message_id: String,
    /// What the message showed when it was sent.
    pub text: String,
}

/// What became of a reply (see [`GatewayTables::set_reply_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyState {
    Delivered,
    Failed,
}

impl ReplyState {
    /// As stored in `gateway_outbox.state`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplyState::Delivered => "delivered",
            ReplyState::Failed => "failed",
        }
    }
}

/// A file about to be sent to a chat (see [`GatewayTables::begin_file`]).
#[derive(Debug, Clone)]
pub struct NewFile {
    /// The idempotency key: one row per file of a turn, whatever happens.
    pub key: String,
    pub channel: String,
    pub session: String,
    /// Its name, path, size and media type, as JSON.
    pub file: String,
    pub at: String,
}

/// A pairing request: the sender (or chat) and the rules to apply, all in one
/// transaction (see [`GatewayTables::request_pairing`]).
#[derive(Debug, Clone)]
pub struct PairingRequest {
    pub channel: String,
    /// `user` or `chat`.
    pub subject: &'static str,
    pub id: String,
    pub display: Option<String>,
    /// The sender whose message asks: the user itself, or who addressed
    /// the bot in the group.
    pub requested_by: String,
    /// Now, as stored.
    pub now: String,
    /// Codes requested at or before this have expired.
    pub expired_before: String,
    /// A pending code last sent before this is sent again.
    pub resend_before: String,
    /// Pending codes a channel holds at most.
    pub max_pending: i64,
    /// Pending group codes one sender may have asked for.
    pub max_groups_per_sender: i64,
    /// Draws a new code (in its stored form).
    pub new_code: fn() -> String,
}

/// What [`GatewayTables::request_pairing`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PairingRequested {
    /// Approved already.
    Approved,
    /// A pending code (stored form); `notify`: send it now.
    Pending { code: String, notify: bool },
    /// The channel holds `max_pending` codes; nothing was stored.
    TooMany,
    /// The sender asked for `max_groups_per_sender` group codes already;
    /// nothing was stored.
    TooManyFromSender,
}

/// What [`GatewayTables::approve_pairing`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PairingApproval {
    /// The code's row is approved now.
    Approved { subject: String, id: String, display: Option<String> },
    /// The code is pending but expired; nothing changed.
    Expired,
    /// No pending row has this code.
    Unknown,
}

/// One pairing row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairingRow {
    pub channel: String,
    pub subject: String,
    pub id: String,
    pub display: Option<String>,
    pub state: String,
    /// The code of a pending row, stored form.
    pub code: Option<String>,
    pub requested_at: String,
    /// Who asked (see [`PairingRequest::requested_by`]); none on rows from before it was kept.
    pub requested_by: Option<String>,
    pub approved_at: Option<String>,
    pub approved_by: Option<String>,
}

/// A change an admin applied from the console, for the audit log (see
/// [`GatewayTables::record_audit`]). The values are the console's: this
/// layer stores them as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAudit {
    /// When, RFC 3339.
    pub at: String,
    /// The admin's name (the name of the token they logged in with).
    pub admin: String,
    /// `config.apply`, `pairing.approve`, `pairing.refuse`.
    pub action: String,
    /// What the action was on, where the action alone does not say (a
    /// pairing's channel and code).
    pub target: Option<String>,
    /// `config.apply`: the unified diff from the running config to the text applied.
    pub diff: Option<String>,
    /// `config.apply`: the config file's version before the change.
    pub version_before: Option<String>,
    /// `config.apply`: the version of the text applied.
    pub version_after: Option<String>,
    /// `applied`, `needs_restart` or `rejected`.
    pub outcome: String,
    /// `needs_restart`: the sections; `rejected`: the error.
    pub detail: Option<String>,
}

/// One row of the audit log: a [`NewAudit`] as stored, with its sequence
/// number (insertion order; a page of the log ends at one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct AuditRow {
    pub seq: i64,
    /// When, RFC 3339.
    pub at: String,
    /// The admin's name.
    pub admin: String,
    /// `config.apply`, `pairing.approve`, `pairing.refuse`.
    pub action: String,
    /// What the action was on (a pairing's channel and code), if said.
    pub target: Option<String>,
    /// `config.apply`: the unified diff applied.
    pub diff: Option<String>,
    /// `config.apply`: the config file's version before.
    pub version_before: Option<String>,
    /// `config.apply`: the config file's version after.
    pub version_after: Option<String>,
    /// `applied`, `needs_restart` or `rejected`.
    pub outcome: String,
    /// `needs_restart`: the sections; `rejected`: the error.
    pub detail: Option<String>,
}

/// The gateway's tables in one database. Every method is one transaction
/// (or one consistent read); `Ok` means committed. Implemented by
/// [`SqliteDb`](super::SqliteDb) and [`PgDb`](super::PgDb).
#[async_trait]
pub trait GatewayTables: Send + Sync {
    /// Stores a message unless its channel already stored its message id;
    /// its sequence number when it was stored now. Synced to disk as
    /// `flush` says.
    async fn insert_inbound(&self, message: NewInbound, flush: Flush) -> Result<Option<i64>, DbError>;

    /// The stored message (JSON) `message_id` of `channel`, whatever its state.
    async fn inbound(&self, channel: &str, message_id: &str) -> Result<Option<String>, DbError>;

    /// Replaces the stored message (JSON) of row `seq`, unless it has its
    /// outcome already.
    async fn replace_inbound(&self, seq: i64, inbound: &str) -> Result<(), DbError>;

    /// The outcome (JSON) of a stored message, once it has one.
    async fn outcome(&self, channel: &str, message_id: &str) -> Result<Option<String>, DbError>;

    /// Marks the messages `seqs` as running in `turn` of `session`.
    async fn start_turn(&self, seqs: &[i64], session: &str, turn: &str) -> Result<(), DbError>;

    /// Gives the messages `seqs` their outcome (JSON) and queues `replies`
    /// (a key already queued is kept as it is), in one transaction, synced
    /// to disk as `flush` says.
    async fn finish(
        &self,
        seqs: &[i64],
        outcome: &str,
        replies: Vec<NewReply>,
        at: &str,
        flush: Flush,
    ) -> Result<(), DbError>;

    /// Records the parts of a pending reply already delivered.
    async fn parts_delivered(&self, key: &str, platform_ids: &str) -> Result<(), DbError>;

    /// Gives a reply its final state and forgets its live message (see
    /// [`GatewayTables::remember_live`]), in one transaction.
    async fn set_reply_state(
        &self,
        key: &str,
        state: ReplyState,
        platform_ids: Option<&str>,
        error: Option<&str>,
        at: &str,
    ) -> Result<(), DbError>;

    /// In one transaction: the platform id of file `key` when it was
    /// delivered already; otherwise the row is stored (or, after a failure,
    /// stored again) as being sent, and `None` says to send it.
    async fn begin_file(&self, file: NewFile) -> Result<Option<String>, DbError>;

    /// Gives a file its final state (delivered with its platform id, or failed).
    async fn set_file_state(
        &self,
        key: &str,
        state: ReplyState,
        platform_id: Option<&str>,
        error: Option<&str>,
        at: &str,
    ) -> Result<(), DbError>;

    /// Keeps `row` as the live message of the reply keyed `key` (replacing
    /// the one kept before, if any), sent at `at`.
    async fn remember_live(&self, key: &str, row: LiveRow, at: &str) -> Result<(), DbError>;

    /// The live message kept for the reply keyed `key`.
    async fn live(&self, key: &str) -> Result<Option<LiveRow>, DbError>;

    /// Forgets the live messages sent before `before`; how many went.
    async fn forget_live_before(&self, before: &str) -> Result<usize, DbError>;

    /// The newest message (JSON) of each chat of `channel` (each thread of a
    /// chat apart) received at or after `since`, newest first, at most
    /// `limit`; edits (`$.edit` set) do not count.
    async fn latest_per_chat(&self, channel: &str, since: &str, limit: i64) -> Result<Vec<String>, DbError>;

    /// The sessions of `channel` (or of every channel) that have stored
    /// messages, the one with the newest message first, at most `limit`:
    /// each with its newest message, its message count and its unfinished
    /// count. Reads an index, never the whole inbox's rows
    /// (`migrations/*/…_inbox_sessions.sql` say how each backend does it).
    /// Rows stored without a session (none since sessions are stored with
    /// the message) are left out.
    async fn chats(&self, channel: Option<&str>, limit: i64) -> Result<Vec<ChatRow>, DbError>;

    /// Messages without an outcome, oldest first.
    async fn unfinished(&self) -> Result<Vec<InboxRow>, DbError>;

    /// Pending replies, oldest first.
    async fn undelivered(&self) -> Result<Vec<OutboxRow>, DbError>;

    /// The database answers a read of the outbox.
    async fn ping(&self) -> Result<(), DbError>;

    /// Whether `subject` `id` of `channel` is approved.
    async fn is_approved(&self, channel: &str, subject: &str, id: &str) -> Result<bool, DbError>;

    /// In one transaction: an approved row answers `Approved`; a pending
    /// code that has not expired is kept (its `notified_at` moved to now
    /// when it was last sent before `resend_before`: `notify`); otherwise
    /// the channel's expired codes go and, unless `max_pending` remain (or,
    /// for a group, the sender already asked for `max_groups_per_sender`
    /// group codes), a new code is stored (drawn again when another row
    /// holds it).
    async fn request_pairing(&self, request: PairingRequest) -> Result<PairingRequested, DbError>;

    /// In one transaction: the pending row of `channel` with `code` becomes
    /// approved (by `by`, at `now`), unless it was requested at or before
    /// `expired_before`.
    async fn approve_pairing(
        &self,
        channel: &str,
        code: &str,
        by: &str,
        now: &str,
        expired_before: &str,
    ) -> Result<PairingApproval, DbError>;

    /// Removes the rows of `id` on `channel`; how many went.
    async fn revoke_pairing(&self, channel: &str, id: &str) -> Result<usize, DbError>;

    /// Approved rows and pending ones requested after `expired_before`, of
    /// one channel or all, oldest first.
    async fn list_pairing(&self, channel: Option<&str>, expired_before: &str) -> Result<Vec<PairingRow>, DbError>;

    /// Adds `row` to the admin audit log; its sequence number (greater than
    /// every one before it).
    async fn record_audit(&self, row: NewAudit) -> Result<i64, DbError>;

    /// The audit log newest first, at most `limit` rows: the newest ones, or
    /// with `before_seq` those before it (the next page starts below the
    /// last `seq` shown). A negative `limit` reads nothing.
    async fn audit(&self, before_seq: Option<i64>, limit: i64) -> Result<Vec<AuditRow>, DbError>;
}
