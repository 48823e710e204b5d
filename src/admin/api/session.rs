//! `GET /session`: who is asking, the CSRF token the page's changes carry,
//! and which gateway replica answers.

use super::openapi::Document;
use crate::admin::AdminState;
use crate::admin::auth::{Admin, Via};
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use schemars::JsonSchema;
use serde::Serialize;

pub(crate) fn routes(prefix: &str) -> Router<AdminState> {
    Router::new().route(&format!("{prefix}/session"), get(session))
}

pub(crate) fn document(doc: &mut Document) {
    doc.op("get", "/session", "session", "Who is logged in, and the CSRF token for changes.")
        .ok::<Session>("The admin and this gateway.")
        .add();
}

/// The admin asking and the gateway answering.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Session {
    /// The admin's name, as the audit log records it.
    pub admin: String,
    /// How the admin is recognised: `session` (the cookie) or `bearer`.
    pub via: String,
    /// With the cookie: the `X-Bub-Csrf` header every change must carry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub csrf: Option<String>,
    /// This gateway: its replica id among replicas on PostgreSQL, else `single`.
    pub replica: String,
    /// bub's version.
    pub version: String,
    /// The console's path as the browser sees it (`/admin`, `/bub/admin`).
    pub base: String,
}

async fn session(admin: Admin, State(state): State<AdminState>) -> Json<Session> {
    let (via, csrf) = match admin.via {
        Via::Cookie { csrf } => ("session", Some(csrf)),
        Via::Bearer => ("bearer", None),
    };
    Json(Session {
        admin: admin.name,
        via: via.to_string(),
        csrf,
        replica: state.gateway().replica_id().unwrap_or_else(|| "single".to_string()),
        version: env!("CARGO_PKG_VERSION").to_string(),
        base: state.base().to_string(),
    })
}
