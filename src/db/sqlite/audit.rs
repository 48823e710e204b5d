//! The admin audit log in SQLite: the statements behind
//! [`GatewayTables`](crate::db::GatewayTables)' audit methods. What a row
//! says is the admin console's; here it is stored and listed.

use super::SqliteDb;
use crate::db::DbError;
use crate::db::gateway::{AuditRow, NewAudit};
use rusqlite::params;

pub(super) async fn record(db: &SqliteDb, row: NewAudit) -> Result<i64, DbError> {
    db.write(Box::new(move |conn| {
        let NewAudit { at, admin, action, target, diff, version_before, version_after, outcome, detail } = &row;
        conn.prepare_cached(
            "INSERT INTO admin_audit \
                 (at, admin, action, target, diff, version_before, version_after, outcome, detail) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) RETURNING seq",
        )?
        .query_row(params![at, admin, action, target, diff, version_before, version_after, outcome, detail], |row| {
            row.get(0)
        })
    }))
    .await
}

pub(super) async fn list(db: &SqliteDb, before_seq: Option<i64>, limit: i64) -> Result<Vec<AuditRow>, DbError> {
    // SQLite reads a negative limit as none: the trait's is at most `limit` rows.
    let limit = limit.max(0);
    Ok(db
        .read(move |conn| -> rusqlite::Result<Vec<AuditRow>> {
            conn.prepare_cached(
                "SELECT seq, at, admin, action, target, diff, version_before, version_after, outcome, detail \
                 FROM admin_audit WHERE (?1 IS NULL OR seq < ?1) ORDER BY seq DESC LIMIT ?2",
            )?
            .query_map(params![before_seq, limit], |row| {
                Ok(AuditRow {
                    seq: row.get(0)?,
                    at: row.get(1)?,
                    admin: row.get(2)?,
                    action: row.get(3)?,
                    target: row.get(4)?,
                    diff: row.get(5)?,
                    version_before: row.get(6)?,
                    version_after: row.get(7)?,
                    outcome: row.get(8)?,
                    detail: row.get(9)?,
                })
            })?
            .collect()
        })
        .await??)
}
