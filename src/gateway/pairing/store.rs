//! [`PairingStore`]: pending codes and approvals, in the bub database, so an
//! approval made by `bub pairing approve` (another process) or by an
//! operator survives restarts and is seen by the running gateway at once
//! (admission reads it for every message that needs it).
//!
//! The rules (a code's lifetime, when it is sent again, how many may wait)
//! are decided here; the statements that apply them in one transaction are
//! the database backend's ([`GatewayTables`]).

use super::code::{Code, new_code};
use crate::db::GatewayTables;
use crate::db::gateway::{PairingApproval, PairingRequest, PairingRequested};
use crate::gateway::store::{StoreError, StoreResult, failed, now};
use crate::policy::PairingSubject;
use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use std::sync::Arc;

/// How long a code may be used.
pub const CODE_LIFETIME: Duration = Duration::hours(1);
/// How often a sender who keeps writing is sent their code again.
pub const RESEND_AFTER: Duration = Duration::minutes(10);
/// Pending codes a channel holds at most: past it, new senders get no code
/// (a flood of strangers must not fill the table or the bot's outbox).
pub const MAX_PENDING: i64 = 50;

/// What [`PairingStore::request`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requested {
    /// The sender (or chat) is approved already (another process approved it).
    Approved,
    /// A pending code; `notify`: send it now (it is new, or last sent a while ago).
    Pending { code: Code, notify: bool },
    /// [`MAX_PENDING`] codes are waiting on this channel; nothing was stored.
    TooMany,
}

/// One row, as `bub pairing list` and `,pairing list` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PairingRecord {
    pub channel: String,
    /// `user` or `chat`.
    pub subject: String,
    pub id: String,
    pub display: Option<String>,
    /// `pending` or `approved`.
    pub state: String,
    /// Pending only, as `ABCD-EFGH`.
    pub code: Option<String>,
    pub requested_at: String,
    pub approved_at: Option<String>,
    pub approved_by: Option<String>,
}

/// Why an approval did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ApproveError {
    #[error("no pending pairing code {code} on channel {channel} (see `bub pairing list`)")]
    Unknown { channel: String, code: String },
    #[error("pairing code {code} expired; the sender gets a new one when they write again")]
    Expired { code: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The approval that [`PairingStore::approve`] made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approved {
    pub subject: PairingSubject,
    pub id: String,
    pub display: Option<String>,
}

/// The pairing table of a bub database.
#[derive(Clone)]
pub struct PairingStore {
    tables: Arc<dyn GatewayTables>,
}

pub(crate) fn subject_name(subject: PairingSubject) -> &'static str {
    match subject {
        PairingSubject::User => "user",
        PairingSubject::Chat => "chat",
    }
}

fn subject_from(name: &str) -> PairingSubject {
    if name == "chat" { PairingSubject::Chat } else { PairingSubject::User }
}

fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// A new code, in the form the table keeps.
fn new_stored_code() -> String {
    new_code().stored().to_string()
}

impl PairingStore {
    /// The pairing table of the database `db` (see [`GatewayStore::new`](crate::gateway::store::GatewayStore::new)).
    pub fn new(db: impl Into<Arc<dyn GatewayTables>>) -> PairingStore {
        PairingStore { tables: db.into() }
    }

    /// Is this user (or chat) of `channel` approved?
    pub async fn is_approved(&self, channel: &str, subject: PairingSubject, id: &str) -> StoreResult<bool> {
        self.tables.is_approved(channel, subject_name(subject), id).await.map_err(failed("read pairing"))
    }

    /// The pending code of this user (or chat), created if it has none (or
    /// its code expired), unless [`MAX_PENDING`] others are waiting.
    pub async fn request(
        &self,
        channel: &str,
        subject: PairingSubject,
        id: &str,
        display: Option<&str>,
    ) -> StoreResult<Requested> {
        let now = Utc::now();
        let request = PairingRequest {
            channel: channel.to_string(),
            subject: subject_name(subject),
            id: id.to_string(),
            display: display.map(str::to_string),
            now: timestamp(now),
            expired_before: timestamp(now - CODE_LIFETIME),
            resend_before: timestamp(now - RESEND_AFTER),
            max_pending: MAX_PENDING,
            new_code: new_stored_code,
        };
        Ok(match self.tables.request_pairing(request).await.map_err(failed("request pairing"))? {
            PairingRequested::Approved => Requested::Approved,
            PairingRequested::Pending { code, notify } => Requested::Pending { code: Code::from_stored(code), notify },
            PairingRequested::TooMany => Requested::TooMany,
        })
    }

    /// Approves the pending code `code` (any case, dash or not) of `channel`.
    pub async fn approve(&self, channel: &str, code: &str, by: &str) -> Result<Approved, ApproveError> {
        let code = Code::parse(code);
        let expired_before = timestamp(Utc::now() - CODE_LIFETIME);
        let approval = self
            .tables
            .approve_pairing(channel, code.stored(), by, &now(), &expired_before)
            .await
            .map_err(failed("approve pairing"))?;
        match approval {
            PairingApproval::Approved { subject, id, display } => {
                Ok(Approved { subject: subject_from(&subject), id, display })
            }
            PairingApproval::Expired => Err(ApproveError::Expired { code: code.to_string() }),
            PairingApproval::Unknown => {
                Err(ApproveError::Unknown { channel: channel.to_string(), code: code.to_string() })
            }
        }
    }

    /// Removes the approval (or the pending code) of user or chat `id` on
    /// `channel`; how many rows went.
    pub async fn revoke(&self, channel: &str, id: &str) -> StoreResult<usize> {
        self.tables.revoke_pairing(channel, id).await.map_err(failed("revoke pairing"))
    }

    /// Approved rows and pending codes that have not expired, of one channel
    /// or all, oldest first.
    pub async fn list(&self, channel: Option<&str>) -> StoreResult<Vec<PairingRecord>> {
        let expired_before = timestamp(Utc::now() - CODE_LIFETIME);
        let rows = self.tables.list_pairing(channel, &expired_before).await.map_err(failed("list pairing"))?;
        Ok(rows
            .into_iter()
            .map(|row| PairingRecord {
                channel: row.channel,
                subject: row.subject,
                id: row.id,
                display: row.display,
                state: row.state,
                code: row.code.map(|c| Code::from_stored(c).to_string()),
                requested_at: row.requested_at,
                approved_at: row.approved_at,
                approved_by: row.approved_by,
            })
            .collect())
    }
}
