//! `GET /channels`: each channel of the config in force, its kind, the
//! policy a chat it does not name gets (as `,policy show` says it, each
//! value with the layer that set it), and the chats it names with theirs.

use super::ApiError;
use super::openapi::Document;
use crate::admin::AdminState;
use crate::admin::auth::Admin;
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use schemars::JsonSchema;
use serde::Serialize;

pub(crate) fn routes(prefix: &str) -> Router<AdminState> {
    Router::new().route(&format!("{prefix}/channels"), get(channels))
}

pub(crate) fn document(doc: &mut Document) {
    doc.op("get", "/channels", "channels", "The channels, their policies and the chats the config names.")
        .ok::<Channels>("The channels, in file order.")
        .add();
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Channels {
    pub channels: Vec<ChannelView>,
    /// Where the config opens access wider than the closed defaults.
    pub warnings: Vec<String>,
}

/// One channel.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ChannelView {
    pub name: String,
    /// `webhook`, `telegram` or `discord`.
    pub kind: String,
    /// The policy of a chat the config does not name, each key with the layer that set it.
    pub policy: String,
    /// The chats the config names, each with its policy.
    pub chats: Vec<ConfiguredChat>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ConfiguredChat {
    pub chat_id: String,
    pub policy: String,
}

async fn channels(_: Admin, State(state): State<AdminState>) -> Result<Json<Channels>, ApiError> {
    let config = state.config();
    let channels = config
        .channels
        .iter()
        .map(|(name, channel)| ChannelView {
            name: name.clone(),
            kind: channel.kind.name().to_string(),
            // A chat id no config names: the channel's own layer and the defaults.
            policy: config.effective(name, "\u{0}").describe().replace('\u{0}', "*"),
            chats: channel
                .chats
                .keys()
                .map(|chat| ConfiguredChat { chat_id: chat.clone(), policy: config.effective(name, chat).describe() })
                .collect(),
        })
        .collect();
    Ok(Json(Channels { channels, warnings: config.warnings() }))
}
