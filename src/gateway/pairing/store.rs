//! [`PairingStore`]: pending codes and approvals, in the bub database, so an
//! approval made by `bub pairing approve` (another process) or by an
//! operator survives restarts and is seen by the running gateway at once
//! (admission reads it for every message that needs it).

use super::code::{Code, new_code};
use crate::gateway::store::{StoreError, StoreResult, failed, now};
use crate::policy::PairingSubject;
use crate::tape::SqliteTapeStore;
use chrono::{DateTime, Duration, Utc};
use rusqlite::{OptionalExtension, params};
use serde::Serialize;

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
    db: SqliteTapeStore,
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

impl PairingStore {
    pub fn new(db: SqliteTapeStore) -> PairingStore {
        PairingStore { db }
    }

    /// Is this user (or chat) of `channel` approved?
    pub async fn is_approved(&self, channel: &str, subject: PairingSubject, id: &str) -> StoreResult<bool> {
        let (channel, id) = (channel.to_string(), id.to_string());
        let found = self
            .db
            .on_reader(move |conn| {
                conn.prepare_cached(
                    "SELECT 1 FROM gateway_pairing \
                     WHERE channel = ?1 AND subject = ?2 AND id = ?3 AND state = 'approved'",
                )?
                .query_row(params![channel, subject_name(subject), id], |_| Ok(()))
                .optional()
            })
            .await
            .map_err(failed("read pairing"))?
            .map_err(failed("read pairing"))?;
        Ok(found.is_some())
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
        let (channel, id, display) = (channel.to_string(), id.to_string(), display.map(str::to_string));
        self.db
            .write(Box::new(move |conn| {
                let now = Utc::now();
                let (stamp, expired_before) = (timestamp(now), timestamp(now - CODE_LIFETIME));
                let existing: Option<(String, Option<String>, String, Option<String>)> = conn
                    .prepare_cached(
                        "SELECT state, code, requested_at, notified_at FROM gateway_pairing \
                         WHERE channel = ?1 AND subject = ?2 AND id = ?3",
                    )?
                    .query_row(params![channel, subject_name(subject), id], |row| {
                        Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
                    })
                    .optional()?;
                match existing {
                    Some((state, _, _, _)) if state == "approved" => return Ok(Requested::Approved),
                    Some((_, Some(code), requested_at, notified_at)) if requested_at > expired_before => {
                        let resend = timestamp(now - RESEND_AFTER);
                        let notify = notified_at.is_none_or(|at| at < resend);
                        if notify {
                            conn.prepare_cached(
                                "UPDATE gateway_pairing SET notified_at = ?4 \
                                 WHERE channel = ?1 AND subject = ?2 AND id = ?3",
                            )?
                            .execute(params![channel, subject_name(subject), id, stamp])?;
                        }
                        return Ok(Requested::Pending { code: Code::from_stored(code), notify });
                    }
                    _ => {}
                }
                // Expired codes of the channel go; then there must be room.
                conn.prepare_cached(
                    "DELETE FROM gateway_pairing WHERE channel = ?1 AND state = 'pending' AND requested_at <= ?2",
                )?
                .execute(params![channel, expired_before])?;
                let pending: i64 = conn
                    .prepare_cached("SELECT count(*) FROM gateway_pairing WHERE channel = ?1 AND state = 'pending'")?
                    .query_row(params![channel], |row| row.get(0))?;
                if pending >= MAX_PENDING {
                    return Ok(Requested::TooMany);
                }
                let mut insert = conn.prepare_cached(
                    "INSERT INTO gateway_pairing (channel, subject, id, display, state, code, requested_at, notified_at) \
                     VALUES (?1, ?2, ?3, ?4, 'pending', ?5, ?6, ?6) \
                     ON CONFLICT (channel, subject, id) DO UPDATE SET code = ?5, requested_at = ?6, \
                         notified_at = ?6, display = ?4",
                )?;
                // A code taken by another pending row (1 in 2^40) is drawn again.
                let mut attempts = 0;
                loop {
                    let code = new_code();
                    match insert.execute(params![channel, subject_name(subject), id, display, code.stored(), stamp]) {
                        Ok(_) => return Ok(Requested::Pending { code, notify: true }),
                        Err(rusqlite::Error::SqliteFailure(e, _))
                            if e.code == rusqlite::ErrorCode::ConstraintViolation && attempts < 8 =>
                        {
                            attempts += 1;
                        }
                        Err(error) => return Err(error),
                    }
                }
            }))
            .await
            .map_err(failed("request pairing"))
    }

    /// Approves the pending code `code` (any case, dash or not) of `channel`.
    pub async fn approve(&self, channel: &str, code: &str, by: &str) -> Result<Approved, ApproveError> {
        let code = Code::parse(code);
        let (channel_name, stored, by) = (channel.to_string(), code.stored().to_string(), by.to_string());
        let found = self
            .db
            .write(Box::new(move |conn| {
                let row: Option<(String, String, Option<String>, String)> = conn
                    .prepare_cached(
                        "SELECT subject, id, display, requested_at FROM gateway_pairing \
                         WHERE channel = ?1 AND code = ?2 AND state = 'pending'",
                    )?
                    .query_row(params![channel_name, stored], |row| {
                        Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
                    })
                    .optional()?;
                let Some((subject, id, display, requested_at)) = row else { return Ok(None) };
                if requested_at <= timestamp(Utc::now() - CODE_LIFETIME) {
                    return Ok(Some(Err(())));
                }
                conn.prepare_cached(
                    "UPDATE gateway_pairing SET state = 'approved', code = NULL, approved_at = ?4, approved_by = ?5 \
                     WHERE channel = ?1 AND subject = ?2 AND id = ?3",
                )?
                .execute(params![channel_name, subject, id, now(), by])?;
                Ok(Some(Ok(Approved { subject: subject_from(&subject), id, display })))
            }))
            .await
            .map_err(failed("approve pairing"))?;
        match found {
            Some(Ok(approved)) => Ok(approved),
            Some(Err(())) => Err(ApproveError::Expired { code: code.to_string() }),
            None => Err(ApproveError::Unknown { channel: channel.to_string(), code: code.to_string() }),
        }
    }

    /// Removes the approval (or the pending code) of user or chat `id` on
    /// `channel`; how many rows went.
    pub async fn revoke(&self, channel: &str, id: &str) -> StoreResult<usize> {
        let (channel, id) = (channel.to_string(), id.to_string());
        self.db
            .write(Box::new(move |conn| {
                conn.prepare_cached("DELETE FROM gateway_pairing WHERE channel = ?1 AND id = ?2")?
                    .execute(params![channel, id])
            }))
            .await
            .map_err(failed("revoke pairing"))
    }

    /// Approved rows and pending codes that have not expired, of one channel
    /// or all, oldest first.
    pub async fn list(&self, channel: Option<&str>) -> StoreResult<Vec<PairingRecord>> {
        let channel = channel.map(str::to_string);
        let expired_before = timestamp(Utc::now() - CODE_LIFETIME);
        self.db
            .on_reader(move |conn| -> StoreResult<Vec<PairingRecord>> {
                let read = failed("list pairing");
                let mut select = conn
                    .prepare_cached(
                        "SELECT channel, subject, id, display, state, code, requested_at, approved_at, approved_by \
                         FROM gateway_pairing WHERE (?1 IS NULL OR channel = ?1) \
                             AND (state = 'approved' OR requested_at > ?2) \
                         ORDER BY requested_at",
                    )
                    .map_err(&read)?;
                let rows = select
                    .query_map(params![channel, expired_before], |row| {
                        Ok(PairingRecord {
                            channel: row.get(0)?,
                            subject: row.get(1)?,
                            id: row.get(2)?,
                            display: row.get(3)?,
                            state: row.get(4)?,
                            code: row.get::<_, Option<String>>(5)?.map(|c| Code::from_stored(c).to_string()),
                            requested_at: row.get(6)?,
                            approved_at: row.get(7)?,
                            approved_by: row.get(8)?,
                        })
                    })
                    .map_err(&read)?;
                rows.collect::<Result<Vec<_>, _>>().map_err(read)
            })
            .await
            .map_err(failed("list pairing"))?
    }
}
