//! The pairing table in SQLite: the statements behind
//! [`GatewayTables`](crate::db::GatewayTables)' pairing methods. What a
//! code is and how long it lives are `gateway::pairing`'s; they arrive here
//! as the request's parameters.

use super::SqliteDb;
use crate::db::DbError;
use crate::db::gateway::{PairingApproval, PairingRequest, PairingRequested, PairingRow};
use rusqlite::{OptionalExtension, params};

/// Draws of a new code that may meet a code another pending row holds
/// (1 in 2^40 each) before the request fails.
const CODE_ATTEMPTS: usize = 8;

pub(super) async fn is_approved(db: &SqliteDb, channel: &str, subject: &str, id: &str) -> Result<bool, DbError> {
    let (channel, subject, id) = (channel.to_string(), subject.to_string(), id.to_string());
    let found = db
        .read(move |conn| {
            conn.prepare_cached(
                "SELECT 1 FROM gateway_pairing \
                 WHERE channel = ?1 AND subject = ?2 AND id = ?3 AND state = 'approved'",
            )?
            .query_row(params![channel, subject, id], |_| Ok(()))
            .optional()
        })
        .await??;
    Ok(found.is_some())
}

pub(super) async fn request(db: &SqliteDb, request: PairingRequest) -> Result<PairingRequested, DbError> {
    db.write(Box::new(move |conn| {
        let PairingRequest {
            channel,
            subject,
            id,
            display,
            requested_by,
            now,
            expired_before,
            resend_before,
            max_pending,
            max_groups_per_sender,
            new_code,
        } = &request;
        let existing: Option<(String, Option<String>, String, Option<String>)> = conn
            .prepare_cached(
                "SELECT state, code, requested_at, notified_at FROM gateway_pairing \
                 WHERE channel = ?1 AND subject = ?2 AND id = ?3",
            )?
            .query_row(params![channel, subject, id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))
            .optional()?;
        match existing {
            Some((state, _, _, _)) if state == "approved" => return Ok(PairingRequested::Approved),
            Some((_, Some(code), requested_at, notified_at)) if requested_at > *expired_before => {
                let notify = notified_at.is_none_or(|at| at < *resend_before);
                if notify {
                    conn.prepare_cached(
                        "UPDATE gateway_pairing SET notified_at = ?4 \
                         WHERE channel = ?1 AND subject = ?2 AND id = ?3",
                    )?
                    .execute(params![channel, subject, id, now])?;
                }
                return Ok(PairingRequested::Pending { code, notify });
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
        if pending >= *max_pending {
            return Ok(PairingRequested::TooMany);
        }
        if *subject == "chat" {
            let asked: i64 = conn
                .prepare_cached(
                    "SELECT count(*) FROM gateway_pairing \
                     WHERE channel = ?1 AND subject = 'chat' AND state = 'pending' AND requested_by = ?2",
                )?
                .query_row(params![channel, requested_by], |row| row.get(0))?;
            if asked >= *max_groups_per_sender {
                return Ok(PairingRequested::TooManyFromSender);
            }
        }
        let mut insert = conn.prepare_cached(
            "INSERT INTO gateway_pairing \
                 (channel, subject, id, display, state, code, requested_at, notified_at, requested_by) \
             VALUES (?1, ?2, ?3, ?4, 'pending', ?5, ?6, ?6, ?7) \
             ON CONFLICT (channel, subject, id) DO UPDATE SET code = ?5, requested_at = ?6, \
                 notified_at = ?6, display = ?4, requested_by = ?7",
        )?;
        // A code taken by another pending row is drawn again.
        let mut attempts = 0;
        loop {
            let code = new_code();
            match insert.execute(params![channel, subject, id, display, code, now, requested_by]) {
                Ok(_) => return Ok(PairingRequested::Pending { code, notify: true }),
                Err(rusqlite::Error::SqliteFailure(e, _))
                    if e.code == rusqlite::ErrorCode::ConstraintViolation && attempts < CODE_ATTEMPTS =>
                {
                    attempts += 1;
                }
                Err(error) => return Err(error),
            }
        }
    }))
    .await
}

pub(super) async fn approve(
    db: &SqliteDb,
    channel: &str,
    code: &str,
    by: &str,
    now: &str,
    expired_before: &str,
) -> Result<PairingApproval, DbError> {
    let (channel, code, by, now, expired_before) =
        (channel.to_string(), code.to_string(), by.to_string(), now.to_string(), expired_before.to_string());
    db.write(Box::new(move |conn| {
        let row: Option<(String, String, Option<String>, String)> = conn
            .prepare_cached(
                "SELECT subject, id, display, requested_at FROM gateway_pairing \
                 WHERE channel = ?1 AND code = ?2 AND state = 'pending'",
            )?
            .query_row(params![channel, code], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))
            .optional()?;
        let Some((subject, id, display, requested_at)) = row else { return Ok(PairingApproval::Unknown) };
        if requested_at <= expired_before {
            return Ok(PairingApproval::Expired);
        }
        conn.prepare_cached(
            "UPDATE gateway_pairing SET state = 'approved', code = NULL, approved_at = ?4, approved_by = ?5 \
             WHERE channel = ?1 AND subject = ?2 AND id = ?3",
        )?
        .execute(params![channel, subject, id, now, by])?;
        Ok(PairingApproval::Approved { subject, id, display })
    }))
    .await
}

pub(super) async fn revoke(db: &SqliteDb, channel: &str, id: &str) -> Result<usize, DbError> {
    let (channel, id) = (channel.to_string(), id.to_string());
    db.write(Box::new(move |conn| {
        conn.prepare_cached("DELETE FROM gateway_pairing WHERE channel = ?1 AND id = ?2")?.execute(params![channel, id])
    }))
    .await
}

pub(super) async fn list(
    db: &SqliteDb,
    channel: Option<&str>,
    expired_before: &str,
) -> Result<Vec<PairingRow>, DbError> {
    let (channel, expired_before) = (channel.map(str::to_string), expired_before.to_string());
    Ok(db
        .read(move |conn| -> rusqlite::Result<Vec<PairingRow>> {
            conn.prepare_cached(
                "SELECT channel, subject, id, display, state, code, requested_at, approved_at, approved_by, \
                     requested_by \
                 FROM gateway_pairing WHERE (?1 IS NULL OR channel = ?1) \
                     AND (state = 'approved' OR requested_at > ?2) \
                 ORDER BY requested_at",
            )?
            .query_map(params![channel, expired_before], |row| {
                Ok(PairingRow {
                    channel: row.get(0)?,
                    subject: row.get(1)?,
                    id: row.get(2)?,
                    display: row.get(3)?,
                    state: row.get(4)?,
                    code: row.get(5)?,
                    requested_at: row.get(6)?,
                    approved_at: row.get(7)?,
                    approved_by: row.get(8)?,
                    requested_by: row.get(9)?,
                })
            })?
            .collect()
        })
        .await??)
}
