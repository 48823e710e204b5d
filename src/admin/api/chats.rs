//! `GET /chats`: the sessions of every channel (or one), newest activity
//! first, each with its chat, its tape, its counts and its state; `GET
//! /chats/policy`: the policy in force in one chat, each key with the layer
//! that set it.

use super::openapi::Document;
use super::{ApiError, ApiQuery};
use crate::admin::AdminState;
use crate::admin::auth::Admin;
use crate::gateway::chats::ChatSummary;
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub(crate) fn routes(prefix: &str) -> Router<AdminState> {
    Router::new().route(&format!("{prefix}/chats"), get(chats)).route(&format!("{prefix}/chats/policy"), get(policy))
}

pub(crate) fn document(doc: &mut Document) {
    doc.op("get", "/chats", "chats", "Sessions of chats, newest activity first.")
        .query::<ChatsQuery>()
        .ok::<Chats>("The sessions.")
        .add();
    doc.op("get", "/chats/policy", "chatPolicy", "The policy in force in one chat.")
        .query::<ChatPolicyQuery>()
        .ok::<ChatPolicy>("Each key, its value and the layer that set it.")
        .add();
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ChatsQuery {
    /// Only this channel's.
    pub channel: Option<String>,
    /// At most this many (default 200, at most 1000).
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<u32>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Chats {
    pub chats: Vec<ChatView>,
}

/// A session and its state.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ChatView {
    #[serde(flatten)]
    pub chat: ChatSummary,
    /// `busy` (messages queued or in a turn) or `idle`.
    pub state: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ChatPolicyQuery {
    pub channel: String,
    pub chat: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ChatPolicy {
    /// As `,policy show` says it in that chat.
    pub policy: String,
}

async fn chats(
    _: Admin,
    State(state): State<AdminState>,
    ApiQuery(query): ApiQuery<ChatsQuery>,
) -> Result<Json<Chats>, ApiError> {
    let limit = query.limit.unwrap_or(200);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request("limit is 1 to 1000"));
    }
    let tables = state.gateway().store().tables().clone();
    let rows = crate::gateway::chats::list(tables.as_ref(), query.channel.as_deref(), limit)
        .await
        .map_err(ApiError::internal)?;
    let chats = rows
        .into_iter()
        .map(|chat| {
            let state = if chat.unfinished > 0 { "busy" } else { "idle" };
            ChatView { chat, state: state.to_string() }
        })
        .collect();
    Ok(Json(Chats { chats }))
}

async fn policy(
    _: Admin,
    State(state): State<AdminState>,
    ApiQuery(query): ApiQuery<ChatPolicyQuery>,
) -> Result<Json<ChatPolicy>, ApiError> {
    let config = state.config();
    if !config.channels.contains_key(&query.channel) {
        return Err(ApiError::not_found(format!("no channel `{}` in the config", query.channel)));
    }
    Ok(Json(ChatPolicy { policy: config.effective(&query.channel, &query.chat).describe() }))
}
