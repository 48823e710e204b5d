//! The admin audit log in PostgreSQL: the statements behind
//! [`GatewayTables`](crate::db::GatewayTables)' audit methods, for
//! [`PgDb`]. What a row says is the admin console's; here it is stored and
//! listed. Each method is one statement.

use super::PgDb;
use crate::db::DbError;
use crate::db::gateway::{AuditRow, NewAudit};
use sqlx_core::query_as::query_as;
use sqlx_core::query_scalar::query_scalar;
use sqlx_postgres::Postgres;

pub(super) async fn record(db: &PgDb, row: NewAudit) -> Result<i64, DbError> {
    let NewAudit { at, admin, action, target, diff, version_before, version_after, outcome, detail } = row;
    Ok(query_scalar::<Postgres, i64>(
        "INSERT INTO admin_audit (at, admin, action, target, diff, version_before, version_after, outcome, detail) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING seq",
    )
    .bind(at)
    .bind(admin)
    .bind(action)
    .bind(target)
    .bind(diff)
    .bind(version_before)
    .bind(version_after)
    .bind(outcome)
    .bind(detail)
    .fetch_one(db.pool())
    .await?)
}

/// A row of `admin_audit` as [`list`] selects it.
type Listed = (
    i64,
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    String,
    Option<String>,
);

pub(super) async fn list(db: &PgDb, before_seq: Option<i64>, limit: i64) -> Result<Vec<AuditRow>, DbError> {
    // PostgreSQL refuses a negative limit; the trait reads it as 0, as SQLite's side does.
    let limit = limit.max(0);
    let rows = query_as::<Postgres, Listed>(
        "SELECT seq, at, admin, action, target, diff, version_before, version_after, outcome, detail \
         FROM admin_audit WHERE ($1::bigint IS NULL OR seq < $1) ORDER BY seq DESC LIMIT $2",
    )
    .bind(before_seq)
    .bind(limit)
    .fetch_all(db.pool())
    .await?;
    Ok(rows
        .into_iter()
        .map(|(seq, at, admin, action, target, diff, version_before, version_after, outcome, detail)| AuditRow {
            seq,
            at,
            admin,
            action,
            target,
            diff,
            version_before,
            version_after,
            outcome,
            detail,
        })
        .collect())
}
