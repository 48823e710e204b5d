//! Pairing requests: `GET /pairing` lists the pending codes and the
//! approvals; `POST /pairing/approve` approves a code, `POST
//! /pairing/refuse` removes a pending code or an approval — what `bub
//! pairing` and `,pairing` do, recorded in the audit log with the admin's name.

use super::openapi::Document;
use super::{ApiError, ApiJson};
use crate::admin::AdminState;
use crate::admin::auth::{Admin, Change};
use crate::gateway::pairing::PairingRecord;
use crate::gateway::pairing::store::{ApproveError, subject_name};
use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

pub(crate) fn routes(prefix: &str) -> Router<AdminState> {
    Router::new()
        .route(&format!("{prefix}/pairing"), get(list))
        .route(&format!("{prefix}/pairing/approve"), post(approve))
        .route(&format!("{prefix}/pairing/refuse"), post(refuse))
}

pub(crate) fn document(doc: &mut Document) {
    doc.op("get", "/pairing", "pairingList", "Pending pairing codes and approvals, oldest first.")
        .ok::<PairingList>("The requests.")
        .link(
            200,
            "approveFirst",
            "pairingApprove",
            json!({"channel": "$response.body#/requests/0/channel", "code": "$response.body#/requests/0/code"}),
        )
        .add();
    doc.op("post", "/pairing/approve", "pairingApprove", "Approve a pending pairing code.")
        .change()
        .body::<ApproveRequest>()
        .ok::<PairingRecord>("The user or chat approved.")
        .add();
    doc.op("post", "/pairing/refuse", "pairingRefuse", "Refuse a pending code, or revoke an approval.")
        .change()
        .body::<RefuseRequest>()
        .ok::<Refused>("How many rows went.")
        .add();
}

/// Pairing rows.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct PairingList {
    pub requests: Vec<PairingRecord>,
}

/// A code to approve.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({"channel": "hooks", "code": "ABCD-EFGH"}))]
pub(crate) struct ApproveRequest {
    pub channel: String,
    /// As the sender was given it (any case, with or without the dash).
    pub code: String,
}

/// A user or chat whose code or approval goes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({"channel": "hooks", "id": "42"}))]
pub(crate) struct RefuseRequest {
    pub channel: String,
    /// The platform's user or chat id.
    pub id: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Refused {
    /// Rows removed (0: there was nothing to refuse).
    pub removed: usize,
}

async fn list(_: Admin, State(state): State<AdminState>) -> Result<Json<PairingList>, ApiError> {
    let rows = state.gateway().pairing().list(None).await.map_err(ApiError::internal)?;
    Ok(Json(PairingList { requests: rows }))
}

async fn approve(
    Change(admin): Change,
    State(state): State<AdminState>,
    ApiJson(request): ApiJson<ApproveRequest>,
) -> Result<Json<PairingRecord>, ApiError> {
    known_channel(&state, &request.channel)?;
    let by = format!("admin:{}", admin.name);
    let approved = match state.gateway().pairing().approve(&request.channel, &request.code, &by).await {
        Ok(approved) => approved,
        Err(error @ (ApproveError::Unknown { .. } | ApproveError::Expired { .. })) => {
            return Err(ApiError::not_found(error.to_string()));
        }
        Err(ApproveError::Store(error)) => return Err(ApiError::internal(error)),
    };
    tracing::info!(admin = %admin.name, channel = %request.channel, id = %approved.id, "pairing approved from the console");
    let target =
        format!("{} {} {} (code {})", request.channel, subject_name(approved.subject), approved.id, request.code);
    super::audit::record(&state, &admin.name, "pairing.approve", target).await?;
    let rows = state.gateway().pairing().list(Some(&request.channel)).await.map_err(ApiError::internal)?;
    let row = rows.into_iter().find(|row| row.id == approved.id && row.state == "approved");
    row.map(Json).ok_or_else(|| ApiError::internal("the approval is not listed"))
}

async fn refuse(
    Change(admin): Change,
    State(state): State<AdminState>,
    ApiJson(request): ApiJson<RefuseRequest>,
) -> Result<Json<Refused>, ApiError> {
    known_channel(&state, &request.channel)?;
    let removed = state.gateway().pairing().revoke(&request.channel, &request.id).await.map_err(ApiError::internal)?;
    tracing::info!(admin = %admin.name, channel = %request.channel, id = %request.id, removed, "pairing refused from the console");
    if removed > 0 {
        super::audit::record(&state, &admin.name, "pairing.refuse", format!("{} {}", request.channel, request.id))
            .await?;
    }
    Ok(Json(Refused { removed }))
}

fn known_channel(state: &AdminState, channel: &str) -> Result<(), ApiError> {
    if state.config().channels.contains_key(channel) {
        return Ok(());
    }
    Err(ApiError::invalid(format!("no channel `{channel}` in the config")))
}
