//! A tape, read in pages by id range (a million entries open as fast as
//! ten: [`crate::admin::tape_view`]): `GET /tape` (a page, the newest
//! without `before`), `GET /tape/anchors` (anchors and compactions, newest
//! first), `GET /tape/search`, `GET /tape/export` (every entry as JSON lines).
//! The tape is named in the query (`name=hooks:room-1`): tape names hold
//! `:` and `/`.

use super::openapi::Document;
use super::{ApiError, ApiQuery};
use crate::admin::AdminState;
use crate::admin::auth::Admin;
use crate::admin::tape_view::{self, AnchorPage, SearchPage, TapePage};
use crate::tape::{TapeError, TapeName, TapeStore};
use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use std::sync::Arc;

pub(crate) fn routes(prefix: &str) -> Router<AdminState> {
    Router::new()
        .route(&format!("{prefix}/tape"), get(page))
        .route(&format!("{prefix}/tape/anchors"), get(anchors))
        .route(&format!("{prefix}/tape/search"), get(search))
        .route(&format!("{prefix}/tape/export"), get(export))
}

pub(crate) fn document(doc: &mut Document) {
    doc.op("get", "/tape", "tapePage", "A page of a tape, oldest entry first; the newest page without `before`.")
        .query::<PageQuery>()
        .ok::<TapePage>("The page.")
        .add();
    doc.op("get", "/tape/anchors", "tapeAnchors", "A tape's anchors (compactions marked), newest first.")
        .query::<PageQuery>()
        .ok::<AnchorPage>("The anchors.")
        .add();
    doc.op("get", "/tape/search", "tapeSearch", "Entries whose text holds `q`, newest first.")
        .describe("Searches a window of entries per call, walking back from `before`: `next_before` continues.")
        .query::<SearchQuery>()
        .ok::<SearchPage>("The hits in the window searched.")
        .add();
    doc.op("get", "/tape/export", "tapeExport", "The whole tape as JSON lines, one entry per line.")
        .query::<NameQuery>()
        .stream(200, "application/jsonl", "One entry per line, oldest first.")
        .add();
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PageQuery {
    /// The tape (`GET /chats` gives each session's).
    #[schemars(length(min = 1))]
    pub name: String,
    /// Entries with ids below this one (the previous page: its `first_id`).
    #[schemars(range(min = 1))]
    pub before: Option<u64>,
    /// At most this many (default 100, at most 500).
    #[schemars(range(min = 1, max = 500))]
    pub limit: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SearchQuery {
    #[schemars(length(min = 1))]
    pub name: String,
    /// The text to find (case-insensitive).
    #[schemars(length(min = 1))]
    pub q: String,
    #[schemars(range(min = 1))]
    pub before: Option<u64>,
    /// At most this many hits (default 50, at most 500).
    #[schemars(range(min = 1, max = 500))]
    pub limit: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NameQuery {
    #[schemars(length(min = 1))]
    pub name: String,
}

fn tape_of(state: &AdminState, name: &str) -> Result<(Arc<dyn TapeStore>, TapeName), ApiError> {
    // A name no tape can have names no tape: 404, as an unknown one.
    let tape = TapeName::new(name).map_err(|error| ApiError::not_found(error.to_string()))?;
    Ok((state.gateway().agent().store().clone(), tape))
}

fn limit(given: Option<usize>, default: usize) -> Result<usize, ApiError> {
    match given.unwrap_or(default) {
        limit @ 1..=500 => Ok(limit),
        _ => Err(ApiError::bad_request("limit is 1 to 500")),
    }
}

fn before(given: Option<u64>) -> Result<Option<u64>, ApiError> {
    match given {
        Some(0) => Err(ApiError::bad_request("before is at least 1")),
        other => Ok(other),
    }
}

fn tape_error(error: TapeError) -> ApiError {
    ApiError::internal(error)
}

async fn page(
    _: Admin,
    State(state): State<AdminState>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<Json<TapePage>, ApiError> {
    let (store, tape) = tape_of(&state, &query.name)?;
    let page = tape_view::page(store.as_ref(), &tape, before(query.before)?, limit(query.limit, 100)?).await;
    page.map(Json).map_err(tape_error)
}

async fn anchors(
    _: Admin,
    State(state): State<AdminState>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<Json<AnchorPage>, ApiError> {
    let (store, tape) = tape_of(&state, &query.name)?;
    let page = tape_view::anchors(store.as_ref(), &tape, before(query.before)?, limit(query.limit, 100)?).await;
    page.map(Json).map_err(tape_error)
}

async fn search(
    _: Admin,
    State(state): State<AdminState>,
    ApiQuery(query): ApiQuery<SearchQuery>,
) -> Result<Json<SearchPage>, ApiError> {
    let (store, tape) = tape_of(&state, &query.name)?;
    if query.q.trim().is_empty() {
        return Err(ApiError::bad_request("q is the text to find"));
    }
    let hits = tape_view::search(store.as_ref(), &tape, &query.q, before(query.before)?, limit(query.limit, 50)?).await;
    hits.map(Json).map_err(tape_error)
}

async fn export(
    _: Admin,
    State(state): State<AdminState>,
    ApiQuery(query): ApiQuery<NameQuery>,
) -> Result<Response, ApiError> {
    let (store, tape) = tape_of(&state, &query.name)?;
    let file = format!("{}.jsonl", tape.file_stem());
    let chunks = tape_view::export(store, tape).map(|chunk| chunk.map_err(std::io::Error::other));
    let disposition = format!("attachment; filename=\"{}\"", file.replace(['"', '\\'], "_"));
    Ok((
        [(header::CONTENT_TYPE, "application/jsonl".to_string()), (header::CONTENT_DISPOSITION, disposition)],
        Body::from_stream(chunks),
    )
        .into_response())
}
