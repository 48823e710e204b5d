//! [`PairingStore`]: pending codes and approvals, in the bub database, so an
//! approval made by `bub pairing approve` (another process) or by an
//! operator survives restarts and is seen by the running gateway at once
//! (admission reads it for every message that needs it).
//!
//! The rules (a code's lifetime, when it is sent again, how many may wait)
//! are decided here; the statements that apply them in one transaction are
//! the database backend's ([`GatewayTables`]).
//!
//! # How many codes may wait
//!
//! Each source holds few codes, so one attacker cannot take everyone's room:
//! a sender has one code of their own (a row per user), a group one (a row
//! per chat, whoever addresses the bot there), and one sender may leave
//! codes for at most [`MAX_GROUPS_PER_SENDER`] groups — adding the bot to
//! sixty groups and mentioning it in each leaves three codes, not sixty.
//! Past that the group stays silent as before, and the log names the sender.
//!
//! The channel as a whole holds at most [`MAX_PENDING`] codes, a bound for
//! the table and for the codes sent, not a share: reaching it takes hundreds
//! of accounts. Past it new requests are refused, not older codes evicted: a
//! code already given out may be on its way to the admin, and evicting it
//! would let a flood of new accounts void every honest code in turn; a
//! refusal is logged and goes away as codes expire (an hour) or are approved.

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
pub const MAX_PENDING: i64 = 1000;
/// Pending group codes one sender may have asked for (by addressing the bot
/// in groups nobody approved); their own direct-message code is apart.
pub const MAX_GROUPS_PER_SENDER: i64 = 3;

/// What [`PairingStore::request`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requested {
    /// The sender (or chat) is approved already (another process approved it).
    Approved,
    /// A pending code; `notify`: send it now (it is new, or last sent a while ago).
    Pending { code: Code, notify: bool },
    /// [`MAX_PENDING`] codes are waiting on this channel; nothing was stored.
    TooMany,
    /// The sender left codes for [`MAX_GROUPS_PER_SENDER`] groups already;
    /// nothing was stored.
    TooManyFromSender,
}

/// One row, as `bub pairing list` and `,pairing list` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
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
    /// The sender whose message asked for the code (for a group, who
    /// addressed the bot there); none on rows older than this field.
    pub requested_by: Option<String>,
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
    /// its code expired), unless [`MAX_PENDING`] others are waiting or, for
    /// a chat, `sender` left codes for [`MAX_GROUPS_PER_SENDER`] groups.
    pub async fn request(
        &self,
        channel: &str,
        subject: PairingSubject,
        id: &str,
        display: Option<&str>,
        sender: &str,
    ) -> StoreResult<Requested> {
        let now = Utc::now();
        let request = PairingRequest {
            channel: channel.to_string(),
            subject: subject_name(subject),
            id: id.to_string(),
            display: display.map(str::to_string),
            requested_by: sender.to_string(),
            now: timestamp(now),
            expired_before: timestamp(now - CODE_LIFETIME),
            resend_before: timestamp(now - RESEND_AFTER),
            max_pending: MAX_PENDING,
            max_groups_per_sender: MAX_GROUPS_PER_SENDER,
            new_code: new_stored_code,
        };
        Ok(match self.tables.request_pairing(request).await.map_err(failed("request pairing"))? {
            PairingRequested::Approved => Requested::Approved,
            PairingRequested::Pending { code, notify } => Requested::Pending { code: Code::from_stored(code), notify },
            PairingRequested::TooMany => Requested::TooMany,
            PairingRequested::TooManyFromSender => Requested::TooManyFromSender,
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
                requested_by: row.requested_by,
                approved_at: row.approved_at,
                approved_by: row.approved_by,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Durability;

    async fn store() -> (PairingStore, crate::db::HomeStore, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let location = crate::db::StoreLocation::Sqlite(dir.path().join("bub.db"));
        let db = crate::db::open(&location, Durability::Normal).await.unwrap();
        (PairingStore::new(db.clone()), db, dir)
    }

    fn pending(requested: Requested) -> bool {
        matches!(requested, Requested::Pending { .. })
    }

    #[tokio::test]
    async fn one_sender_leaves_codes_for_a_few_groups_and_everyone_else_keeps_their_room() {
        let (store, db, _dir) = store().await;
        let group = |n: usize| format!("-100{n}");
        for n in 0..MAX_GROUPS_PER_SENDER as usize {
            assert!(pending(store.request("tg", PairingSubject::Chat, &group(n), None, "666").await.unwrap()));
        }
        let over = store.request("tg", PairingSubject::Chat, &group(99), None, "666").await.unwrap();
        assert_eq!(over, Requested::TooManyFromSender);
        let again = store.request("tg", PairingSubject::Chat, &group(0), None, "666").await.unwrap();
        assert!(matches!(again, Requested::Pending { notify: false, .. }), "a group it asked for keeps its code");
        let own = store.request("tg", PairingSubject::User, "666", None, "666").await.unwrap();
        assert!(pending(own), "the sender's own code is apart from its groups'");
        let other = store.request("tg", PairingSubject::Chat, &group(99), None, "1002").await.unwrap();
        assert!(pending(other), "another sender asks for the same group");
        let elsewhere = store.request("dc", PairingSubject::Chat, "5", None, "666").await.unwrap();
        assert!(pending(elsewhere), "counted per channel");

        let listed = store.list(Some("tg")).await.unwrap();
        let asked: Vec<_> = listed.iter().filter(|r| r.subject == "chat").map(|r| r.requested_by.as_deref()).collect();
        assert_eq!(asked.iter().filter(|by| **by == Some("666")).count(), MAX_GROUPS_PER_SENDER as usize);
        // An approved group no longer counts: the sender may ask for another.
        let code = listed.iter().find(|r| r.id == group(0)).and_then(|r| r.code.clone()).unwrap();
        store.approve("tg", &code, "admin").await.unwrap();
        assert!(pending(store.request("tg", PairingSubject::Chat, &group(100), None, "666").await.unwrap()));
        db.close().await;
    }
}
