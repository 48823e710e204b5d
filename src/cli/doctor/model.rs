//! The models the gateway would call: `BUB_MODEL` and every `model` a
//! policy layer names, each asked for its provider's model list with the
//! configured key (no prompt is sent, no token paid for).

use super::{Finding, NETWORK_TIMEOUT};
use crate::config::GatewayConfig;
use crate::model::{ModelError, ModelSettings};
use chrono::{DateTime, Utc};

/// Where the clock check reads the time: a server's name and how far the
/// local clock was from its `Date` header (local minus server).
pub(crate) struct ClockReading {
    pub source: String,
    pub skew: chrono::TimeDelta,
}

pub(crate) async fn check(
    vars: &[(String, String)],
    config: Option<&GatewayConfig>,
) -> (Vec<Finding>, Option<ClockReading>) {
    let settings = match ModelSettings::from_vars(vars.to_vec()) {
        Ok(settings) => settings,
        Err(error) => return (vec![Finding::fail("model", error.to_string(), "correct the variable it names")], None),
    };
    let mut specs: Vec<String> = settings.default_model().map(|spec| spec.to_string()).into_iter().collect();
    for (_, layer) in config.map(GatewayConfig::layers).unwrap_or_default() {
        if let Some(model) = &layer.model
            && !specs.contains(model.get_ref())
        {
            specs.push(model.get_ref().clone());
        }
    }
    if specs.is_empty() {
        let fix = "set BUB_MODEL to provider:model (e.g. openai:gpt-4o-mini) and its key, BUB_<PROVIDER>_API_KEY";
        return (vec![Finding::fail("model", "no model configured: the gateway could not answer", fix)], None);
    }
    let checks = specs.iter().map(|spec| one(&settings, spec));
    let results = futures::future::join_all(checks).await;
    let clock = results
        .iter()
        .find_map(|(_, reading)| reading.as_ref())
        .map(|reading| ClockReading { source: reading.source.clone(), skew: reading.skew });
    (results.into_iter().map(|(finding, _)| finding).collect(), clock)
}

async fn one(settings: &ModelSettings, spec: &str) -> (Finding, Option<ClockReading>) {
    let check = format!("model {spec}");
    let listing = match settings.list_models(spec, NETWORK_TIMEOUT).await {
        Ok(listing) => listing,
        Err(error) => return (Finding::fail(check, "not configured", error.to_string()), None),
    };
    let reading =
        listing.date.map(|date: DateTime<Utc>| ClockReading { source: listing.url.clone(), skew: Utc::now() - date });
    let url = &listing.url;
    let model = spec.split_once(':').map_or(spec, |(_, model)| model);
    let finding = match listing.answer {
        Ok(ids) if ids.is_empty() || ids.iter().any(|id| id == model) => {
            Finding::ok(check, format!("{url} answers with the key; it lists {} models", ids.len()))
        }
        Ok(ids) => Finding::warn(
            check,
            format!("{url} answers with the key, but `{model}` is not among the {} models it lists", ids.len()),
            "check the model's name in BUB_MODEL or the policy's `model`",
        ),
        Err(error @ ModelError::Auth { .. }) => Finding::fail(
            check,
            error.to_string(),
            format!(
                "the API key is refused: set {} (or BUB_API_KEY) to a key the provider accepts",
                listing.key_variable
            ),
        ),
        Err(ModelError::BadRequest { status: 404 | 405, .. }) => Finding::warn(
            check,
            format!("{url} has no model list (not every OpenAI-compatible server has one): the key was not checked"),
            "check the model by `bub run hello`",
        ),
        Err(error @ (ModelError::Connection { .. } | ModelError::Timeout { .. })) => Finding::fail(
            check,
            error.to_string(),
            format!("check the network and the API base ({url} without /models: BUB_<PROVIDER>_API_BASE)"),
        ),
        Err(error) => Finding::fail(check, error.to_string(), "see the provider's message"),
    };
    (finding, reading)
}
