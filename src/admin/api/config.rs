//! The policy editor's API: the config file as text (`GET /config`), a
//! check (`POST /config/check`: the same checks as a reload, which are
//! `bub policy check`'s plus the reload's own rule), a preview (`POST
//! /config/preview`: the diff against the running config and who gains or
//! loses what, [`crate::policy::diff`]) and an apply (`POST /config/apply`:
//! the file replaced atomically if it is still the version the edit started
//! from, then reloaded; recorded in the audit log).

use super::openapi::Document;
use super::{ApiError, ApiJson};
use crate::admin::AdminState;
use crate::admin::auth::{Admin, Change};
use crate::config::edit::{ConfigProblem, ConfigVersion, EditError, OnDisk, unified_diff};
use crate::config::{GatewayConfig, ReloadOutcome};
use crate::db::gateway::NewAudit;
use crate::policy::{AccessChange, AccessDiff, access_diff};
use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The largest config text taken (a config is a few KiB).
const MAX_TEXT: usize = 1024 * 1024;

pub(crate) fn routes(prefix: &str) -> Router<AdminState> {
    Router::new()
        .route(&format!("{prefix}/config"), get(read))
        .route(&format!("{prefix}/config/check"), post(check))
        .route(&format!("{prefix}/config/preview"), post(preview))
        .route(&format!("{prefix}/config/apply"), post(apply))
}

pub(crate) fn document(doc: &mut Document) {
    doc.op("get", "/config", "configRead", "The config file as it is on disk, its version, and whether it loads.")
        .describe("When `problem` is set the file on disk is broken and the previous config still runs: edit this text to repair it.")
        .ok::<OnDisk>("The file.")
        .add();
    doc.op("post", "/config/check", "configCheck", "Check a config text as a reload would.")
        .body::<TextRequest>()
        .ok::<Checked>("The problems (none: it would apply) and what it opens wider than the defaults.")
        .add();
    doc.op("post", "/config/preview", "configPreview", "What applying a config text would change.")
        .body::<TextRequest>()
        .ok::<Preview>("The diff against the running config, and who gains or loses what.")
        .add();
    doc.op("post", "/config/apply", "configApply", "Replace the config file and reload it.")
        .describe("Refused with 409 when the file is no longer `version` (someone changed it meanwhile), 422 when the text is invalid; nothing is written then.")
        .change()
        .body::<ApplyRequest>()
        .ok::<Applied>("The file was replaced; the reload's result.")
        .json::<super::ErrorBody>(409, "The file changed since `version`: `detail` holds its `version` and `text`.")
        .add();
}

/// A config text.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TextRequest {
    pub text: String,
}

/// A config text and the version of the file it was edited from.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApplyRequest {
    pub text: String,
    /// `GET /config`'s `version` when the edit started.
    pub version: String,
}

/// What a check found.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Checked {
    /// No problem: a reload would apply it.
    pub ok: bool,
    /// The first problem (a config is checked until its first error).
    pub problems: Vec<ConfigProblem>,
    /// Where it opens access wider than the closed defaults (`FILE:LINE:COL: warning: …`).
    pub warnings: Vec<String>,
}

/// What applying a text would change.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Preview {
    #[serde(flatten)]
    pub checked: Checked,
    /// A unified diff from the running config to the text.
    pub diff: String,
    /// For each channel, chat and user it affects, what each gains or loses.
    pub changes: Vec<AccessChange>,
    /// Whether anyone gains anything.
    pub widens: bool,
}

/// An applied edit.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Applied {
    /// The file's version now.
    pub version: ConfigVersion,
    /// Whether the reload put it in force.
    pub applied: bool,
    /// Sections whose change needs a restart (`http`, `channels.NAME`).
    pub needs_restart: Vec<String>,
    /// Why the reload refused it, if it did.
    pub error: Option<String>,
    /// The audit log's row.
    pub audit_seq: i64,
}

/// Runs `work` on the live config on a blocking thread (it reads files).
async fn blocking<T: Send + 'static>(
    state: &AdminState,
    work: impl FnOnce(&crate::config::LiveConfig) -> T + Send + 'static,
) -> Result<T, ApiError> {
    let live = state.live().clone();
    tokio::task::spawn_blocking(move || work(&live)).await.map_err(ApiError::internal)
}

fn edit_error(error: EditError) -> ApiError {
    match error {
        EditError::NoFile => ApiError::not_found(error.to_string()),
        EditError::Conflict { current, text } => ApiError::conflict(
            "the config file changed since you opened it (someone else saved it): your text is kept; load theirs, \
             merge, and apply again",
        )
        .with_detail(serde_json::json!({"version": current, "text": text})),
        EditError::Invalid(error) => {
            let problem = ConfigProblem::from(&error);
            ApiError::invalid(problem.error.clone()).with_detail(serde_json::json!({"problems": [problem]}))
        }
        EditError::Io { .. } => ApiError::internal(error),
    }
}

fn too_long(text: &str) -> Result<(), ApiError> {
    if text.len() > MAX_TEXT {
        return Err(ApiError::invalid(format!("the text is {} bytes: a config is at most {MAX_TEXT}", text.len())));
    }
    Ok(())
}

async fn read(_: Admin, State(state): State<AdminState>) -> Result<Json<OnDisk>, ApiError> {
    blocking(&state, |live| live.on_disk()).await?.map(Json).map_err(edit_error)
}

/// The check of `text`, and the config when it passes.
async fn checked(state: &AdminState, text: String) -> Result<(Checked, Option<GatewayConfig>), ApiError> {
    too_long(&text)?;
    let result = blocking(state, move |live| live.check_text(&text)).await?;
    Ok(match result {
        Ok(config) => (Checked { ok: true, problems: Vec::new(), warnings: config.warnings() }, Some(config)),
        Err(error) => (Checked { ok: false, problems: vec![ConfigProblem::from(&error)], warnings: Vec::new() }, None),
    })
}

async fn check(
    _: Admin,
    State(state): State<AdminState>,
    ApiJson(request): ApiJson<TextRequest>,
) -> Result<Json<Checked>, ApiError> {
    Ok(Json(checked(&state, request.text).await?.0))
}

async fn preview(
    _: Admin,
    State(state): State<AdminState>,
    ApiJson(request): ApiJson<TextRequest>,
) -> Result<Json<Preview>, ApiError> {
    let running = state.live().running().map_err(edit_error)?;
    let diff = unified_diff(&running.text, &request.text);
    let (checked, config) = checked(&state, request.text).await?;
    let access = match config {
        Some(new) => {
            let tools: Vec<_> = state
                .gateway()
                .agent()
                .tools()
                .iter()
                .map(|tool| (tool.name().to_string(), tool.capabilities()))
                .collect();
            // Every subject's policy resolved twice: work for a blocking thread on a large config.
            let running = state.config();
            tokio::task::spawn_blocking(move || access_diff(&running, &new, &tools))
                .await
                .map_err(ApiError::internal)?
        }
        None => AccessDiff { changes: Vec::new() },
    };
    let widens = access.widens();
    let changes = access.changes;
    Ok(Json(Preview { checked, diff, changes, widens }))
}

async fn apply(
    Change(admin): Change,
    State(state): State<AdminState>,
    ApiJson(request): ApiJson<ApplyRequest>,
) -> Result<Json<Applied>, ApiError> {
    too_long(&request.text)?;
    let before = state.live().running().map_err(edit_error)?;
    let diff = unified_diff(&before.text, &request.text);
    let version = ConfigVersion::of(&request.text);
    let (text, expected) = (request.text, request.version);
    let outcome = blocking(&state, move |live| {
        let expected: ConfigVersion =
            serde_json::from_value(serde_json::Value::String(expected)).unwrap_or_else(|_| ConfigVersion::of(""));
        live.replace(&text, &expected)
    })
    .await?
    .map_err(edit_error)?;
    let (applied, needs_restart, error) = match outcome {
        ReloadOutcome::Applied { needs_restart } => (true, needs_restart, None),
        ReloadOutcome::Rejected(error) => (false, Vec::new(), Some(error)),
    };
    let (word, detail) = match (&error, needs_restart.is_empty()) {
        (Some(error), _) => ("rejected", Some(error.clone())),
        (None, true) => ("applied", None),
        (None, false) => ("needs_restart", Some(needs_restart.join(", "))),
    };
    let row = NewAudit {
        at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        admin: admin.name.clone(),
        action: "config.apply".to_string(),
        target: None,
        diff: Some(diff),
        version_before: Some(before.version.to_string()),
        version_after: Some(version.to_string()),
        outcome: word.to_string(),
        detail,
    };
    let audit_seq = state.gateway().store().tables().record_audit(row).await.map_err(ApiError::internal)?;
    tracing::info!(admin = %admin.name, %version, outcome = word, "config applied from the admin console");
    Ok(Json(Applied { version, applied, needs_restart, error, audit_seq }))
}
