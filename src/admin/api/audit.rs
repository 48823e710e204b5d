//! `GET /audit`: the changes admins applied from the console, newest first
//! (who, when, what, the diff, the outcome), paged by sequence number.

use super::openapi::Document;
use super::{ApiError, ApiQuery};
use crate::admin::AdminState;
use crate::admin::auth::Admin;
use crate::db::gateway::AuditRow;
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub(crate) fn routes(prefix: &str) -> Router<AdminState> {
    Router::new().route(&format!("{prefix}/audit"), get(audit))
}

pub(crate) fn document(doc: &mut Document) {
    doc.op("get", "/audit", "audit", "The audit log, newest first.")
        .query::<AuditQuery>()
        .ok::<AuditPage>("A page of the log.")
        .add();
}

/// A page of the audit log.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuditQuery {
    /// Only rows older than this sequence number (the last `seq` of the previous page).
    #[schemars(range(min = 1))]
    pub before: Option<i64>,
    /// At most this many rows (default 50, at most 500).
    #[schemars(range(min = 1, max = 500))]
    pub limit: Option<i64>,
}

/// Rows of the audit log, newest first.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct AuditPage {
    pub entries: Vec<AuditRow>,
}

async fn audit(
    _: Admin,
    State(state): State<AdminState>,
    ApiQuery(query): ApiQuery<AuditQuery>,
) -> Result<Json<AuditPage>, ApiError> {
    let limit = query.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) || query.before.is_some_and(|before| before < 1) {
        return Err(ApiError::bad_request("limit is 1 to 500, before at least 1"));
    }
    let entries = state.gateway().store().tables().audit(query.before, limit).await.map_err(ApiError::internal)?;
    Ok(Json(AuditPage { entries }))
}

/// Records a change `admin` made that is not a config edit (a pairing's
/// approval or refusal) in the audit log, as applied.
pub(crate) async fn record(state: &AdminState, admin: &str, action: &str, target: String) -> Result<i64, ApiError> {
    let row = crate::db::gateway::NewAudit {
        at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        admin: admin.to_string(),
        action: action.to_string(),
        target: Some(target),
        diff: None,
        version_before: None,
        version_after: None,
        outcome: "applied".to_string(),
        detail: None,
    };
    state.gateway().store().tables().record_audit(row).await.map_err(ApiError::internal)
}
