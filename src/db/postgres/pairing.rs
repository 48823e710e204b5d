//! The pairing table in PostgreSQL: the statements behind
//! [`GatewayTables`](crate::db::GatewayTables)' pairing methods, for
//! [`PgDb`]. What a code is and how long it lives are `gateway::pairing`'s;
//! they arrive here as the request's parameters.
//!
//! # Why a request takes an advisory lock
//! A request counts the channel's pending codes, then inserts one. Row locks
//! cannot guard that: the rows that would push the count past
//! `max_pending` do not exist yet, and under read committed two replicas
//! could both count `max_pending - 1` and both insert. So a request first
//! takes a transaction-level advisory lock on its channel
//! (`pg_advisory_xact_lock(PAIRING_LOCK_CLASS, hashtext(channel))`, held
//! until it commits): requests of one channel follow each other, each
//! statement sees what the one before committed, and neither cap
//! (`max_pending`, `max_groups_per_sender`) is ever passed. Two channels
//! whose names hash alike merely wait for each other. The same lock makes a
//! code drawn here unique by a look-up before the insert (a unique violation
//! would abort the transaction, not let it draw again as SQLite does).
//! Approvals, revocations and reads take no lock: they never add a code.

use super::PgDb;
use super::gateway::count;
use crate::db::DbError;
use crate::db::gateway::{PairingApproval, PairingRequest, PairingRequested, PairingRow};
use sqlx_core::query::query;
use sqlx_core::query_as::query_as;
use sqlx_core::query_scalar::query_scalar;
use sqlx_postgres::{PgConnection, Postgres};

/// Draws of a new code that may meet a code another pending row holds
/// (1 in 2^40 each) before the last one is tried as it is (and the request
/// fails if it is taken too).
const CODE_ATTEMPTS: usize = 8;

/// The first key of the pairing requests' advisory locks (the second is
/// the channel's hash): `bubp` in ASCII. Locks keyed by two 32-bit values
/// never meet those keyed by one 64-bit value, whatever else bub locks.
const PAIRING_LOCK_CLASS: i32 = 0x6275_6270;

pub(super) async fn is_approved(db: &PgDb, channel: &str, subject: &str, id: &str) -> Result<bool, DbError> {
    Ok(query_scalar::<Postgres, bool>(
        "SELECT EXISTS (SELECT 1 FROM gateway_pairing \
         WHERE channel = $1 AND subject = $2 AND id = $3 AND state = 'approved')",
    )
    .bind(channel)
    .bind(subject)
    .bind(id)
    .fetch_one(db.pool())
    .await?)
}

pub(super) async fn request(db: &PgDb, request: PairingRequest) -> Result<PairingRequested, DbError> {
    let mut transaction = db.pool().begin().await?;
    query::<Postgres>("SELECT pg_advisory_xact_lock($1, hashtext($2))")
        .bind(PAIRING_LOCK_CLASS)
        .bind(&request.channel)
        .execute(&mut *transaction)
        .await?;
    let requested = request_locked(&mut transaction, &request).await?;
    // Expired codes deleted on the way commit whatever the answer, as on SQLite.
    transaction.commit().await?;
    Ok(requested)
}

/// [`request`] once the channel's lock is held.
async fn request_locked(conn: &mut PgConnection, request: &PairingRequest) -> Result<PairingRequested, DbError> {
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
    } = request;
    let existing = query_as::<Postgres, (String, Option<String>, String, Option<String>)>(
        "SELECT state, code, requested_at, notified_at FROM gateway_pairing \
         WHERE channel = $1 AND subject = $2 AND id = $3",
    )
    .bind(channel)
    .bind(subject)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    match existing {
        Some((state, _, _, _)) if state == "approved" => return Ok(PairingRequested::Approved),
        Some((_, Some(code), requested_at, notified_at)) if requested_at > *expired_before => {
            let notify = notified_at.is_none_or(|at| at < *resend_before);
            if notify {
                query::<Postgres>(
                    "UPDATE gateway_pairing SET notified_at = $4 WHERE channel = $1 AND subject = $2 AND id = $3",
                )
                .bind(channel)
                .bind(subject)
                .bind(id)
                .bind(now)
                .execute(&mut *conn)
                .await?;
            }
            return Ok(PairingRequested::Pending { code, notify });
        }
        _ => {}
    }
    // Expired codes of the channel go; then there must be room.
    query::<Postgres>("DELETE FROM gateway_pairing WHERE channel = $1 AND state = 'pending' AND requested_at <= $2")
        .bind(channel)
        .bind(expired_before)
        .execute(&mut *conn)
        .await?;
    let pending =
        query_scalar::<Postgres, i64>("SELECT count(*) FROM gateway_pairing WHERE channel = $1 AND state = 'pending'")
            .bind(channel)
            .fetch_one(&mut *conn)
            .await?;
    if pending >= *max_pending {
        return Ok(PairingRequested::TooMany);
    }
    if *subject == "chat" {
        let asked = query_scalar::<Postgres, i64>(
            "SELECT count(*) FROM gateway_pairing \
             WHERE channel = $1 AND subject = 'chat' AND state = 'pending' AND requested_by = $2",
        )
        .bind(channel)
        .bind(requested_by)
        .fetch_one(&mut *conn)
        .await?;
        if asked >= *max_groups_per_sender {
            return Ok(PairingRequested::TooManyFromSender);
        }
    }
    // A code another row of the channel holds is drawn again.
    let mut code = new_code();
    for _ in 0..CODE_ATTEMPTS {
        let taken = query_scalar::<Postgres, bool>(
            "SELECT EXISTS (SELECT 1 FROM gateway_pairing WHERE channel = $1 AND code = $2)",
        )
        .bind(channel)
        .bind(&code)
        .fetch_one(&mut *conn)
        .await?;
        if !taken {
            break;
        }
        code = new_code();
    }
    query::<Postgres>(
        "INSERT INTO gateway_pairing \
             (channel, subject, id, display, state, code, requested_at, notified_at, requested_by) \
         VALUES ($1, $2, $3, $4, 'pending', $5, $6, $6, $7) \
         ON CONFLICT (channel, subject, id) DO UPDATE SET code = EXCLUDED.code, \
             requested_at = EXCLUDED.requested_at, notified_at = EXCLUDED.notified_at, \
             display = EXCLUDED.display, requested_by = EXCLUDED.requested_by",
    )
    .bind(channel)
    .bind(subject)
    .bind(id)
    .bind(display)
    .bind(&code)
    .bind(now)
    .bind(requested_by)
    .execute(&mut *conn)
    .await?;
    Ok(PairingRequested::Pending { code, notify: true })
}

pub(super) async fn approve(
    db: &PgDb,
    channel: &str,
    code: &str,
    by: &str,
    now: &str,
    expired_before: &str,
) -> Result<PairingApproval, DbError> {
    let mut transaction = db.pool().begin().await?;
    // Locked: of two approvals of one code, the second finds the row
    // approved (its code gone) once the first commits, and answers Unknown.
    let row = query_as::<Postgres, (String, String, Option<String>, String)>(
        "SELECT subject, id, display, requested_at FROM gateway_pairing \
         WHERE channel = $1 AND code = $2 AND state = 'pending' FOR UPDATE",
    )
    .bind(channel)
    .bind(code)
    .fetch_optional(&mut *transaction)
    .await?;
    let Some((subject, id, display, requested_at)) = row else { return Ok(PairingApproval::Unknown) };
    if requested_at.as_str() <= expired_before {
        return Ok(PairingApproval::Expired);
    }
    query::<Postgres>(
        "UPDATE gateway_pairing SET state = 'approved', code = NULL, approved_at = $4, approved_by = $5 \
         WHERE channel = $1 AND subject = $2 AND id = $3",
    )
    .bind(channel)
    .bind(&subject)
    .bind(&id)
    .bind(now)
    .bind(by)
    .execute(&mut *transaction)
    .await?;
    transaction.commit().await?;
    Ok(PairingApproval::Approved { subject, id, display })
}

pub(super) async fn revoke(db: &PgDb, channel: &str, id: &str) -> Result<usize, DbError> {
    let done = query::<Postgres>("DELETE FROM gateway_pairing WHERE channel = $1 AND id = $2")
        .bind(channel)
        .bind(id)
        .execute(db.pool())
        .await?;
    Ok(count(done.rows_affected()))
}

/// A row of `gateway_pairing` as [`list`] selects it.
type Listed = (
    String,
    String,
    String,
    Option<String>,
    String,
    Option<String>,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
);

pub(super) async fn list(db: &PgDb, channel: Option<&str>, expired_before: &str) -> Result<Vec<PairingRow>, DbError> {
    let rows = query_as::<Postgres, Listed>(
        "SELECT channel, subject, id, display, state, code, requested_at, approved_at, approved_by, requested_by \
         FROM gateway_pairing WHERE ($1::text IS NULL OR channel = $1) \
             AND (state = 'approved' OR requested_at > $2) \
         ORDER BY requested_at, channel, subject, id",
    )
    .bind(channel)
    .bind(expired_before)
    .fetch_all(db.pool())
    .await?;
    Ok(rows
        .into_iter()
        .map(|(channel, subject, id, display, state, code, requested_at, approved_at, approved_by, requested_by)| {
            PairingRow {
                channel,
                subject,
                id,
                display,
                state,
                code,
                requested_at,
                requested_by,
                approved_at,
                approved_by,
            }
        })
        .collect())
}
