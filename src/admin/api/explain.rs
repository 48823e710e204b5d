//! `POST /explain`: `,policy explain TOOL USER` for any chat of any
//! channel, from the config in force, with the verdicts the gateway would
//! reach (the same `EffectivePolicy::tool_verdict`).

use super::openapi::Document;
use super::{ApiError, ApiJson};
use crate::admin::AdminState;
use crate::admin::auth::Admin;
use crate::policy::{Explanation, Verdict};
use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub(crate) fn routes(prefix: &str) -> Router<AdminState> {
    Router::new().route(&format!("{prefix}/explain"), post(explain))
}

pub(crate) fn document(doc: &mut Document) {
    doc.op("post", "/explain", "explain", "Whether a tool may run for a user in a chat, and the rule that decides.")
        .describe("What `,policy explain TOOL USER` says in that chat, from the config in force.")
        .body::<ExplainRequest>()
        .ok::<ExplainResponse>("The verdicts.")
        .add();
}

/// A tool, a user and a chat to explain.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({
    "channel": "hooks", "chat": "room-1", "kind": "direct", "tool": "bash", "user": "hooks:dana"
}))]
pub(crate) struct ExplainRequest {
    /// A channel of the config (`hooks`).
    pub channel: String,
    /// The chat's id on that channel (a chat the config does not name gets the channel's policy).
    pub chat: String,
    /// `direct` (a one-to-one chat) or `group` (a group chat or thread: rule 4 applies).
    pub kind: ChatKindName,
    /// The tool, by registry or model name (`bash`, `fs.write`, `fs_write`).
    pub tool: String,
    /// The user, `<channel>:<user id>` (`hooks:alice`).
    pub user: String,
}

/// A chat's kind, as the rules tell them apart.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ChatKindName {
    Direct,
    Group,
}

/// The verdicts, and the sentence `,policy explain` would say.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ExplainResponse {
    /// The tool's registry name.
    pub tool: String,
    /// What the tool can do (`read`, `write`, `exec`, `network`).
    pub capabilities: Vec<String>,
    pub model_call: VerdictView,
    pub command: VerdictView,
    /// For tools that can exec, write or reach the network: a model call while untrusted text is in the context.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub with_untrusted_context: Option<VerdictView>,
    /// As `,policy explain` words it.
    pub text: String,
}

/// Allowed or not, and the rule that decided.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct VerdictView {
    pub allowed: bool,
    pub rule: String,
}

impl From<&Verdict> for VerdictView {
    fn from(verdict: &Verdict) -> VerdictView {
        VerdictView { allowed: verdict.allowed, rule: verdict.rule.clone() }
    }
}

async fn explain(
    _: Admin,
    State(state): State<AdminState>,
    ApiJson(request): ApiJson<ExplainRequest>,
) -> Result<Json<ExplainResponse>, ApiError> {
    let config = state.config();
    if !config.channels.contains_key(&request.channel) {
        let names: Vec<&str> = config.channels.keys().map(String::as_str).collect();
        return Err(ApiError::invalid(format!(
            "no channel `{}`; the channels are {}",
            request.channel,
            names.join(", ")
        )));
    }
    if !request.user.starts_with(&format!("{}:", request.channel)) || request.user.len() <= request.channel.len() + 1 {
        return Err(ApiError::invalid(format!("write the user as `{}:<user id>`", request.channel)));
    }
    let tools = state.gateway().agent().tools();
    let Some(tool) = tools.get(request.tool.trim()) else {
        let suggestions = tools.suggest(request.tool.trim());
        let hint =
            if suggestions.is_empty() { String::new() } else { format!("; did you mean {}?", suggestions.join(", ")) };
        return Err(ApiError::invalid(format!("no tool `{}`{hint}", request.tool)));
    };
    let policy = config.effective(&request.channel, &request.chat);
    let shared = matches!(request.kind, ChatKindName::Group);
    let explanation = Explanation::of(&policy, tool.name(), tool.capabilities(), &request.user, shared);
    Ok(Json(ExplainResponse {
        tool: explanation.tool.clone(),
        capabilities: explanation.capabilities.iter().map(|capability| capability.to_string()).collect(),
        model_call: (&explanation.model_call).into(),
        command: (&explanation.command).into(),
        with_untrusted_context: explanation.with_untrusted_context.as_ref().map(VerdictView::from),
        text: explanation.describe(None),
    }))
}
