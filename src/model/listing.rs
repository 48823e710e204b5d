//! `GET <base>/models` ([`ModelSettings::list_models`]): whether a provider
//! answers with the configured key, and what its clock says, for `bub
//! doctor`. It sends no prompt and costs no tokens; OpenAI, Anthropic,
//! OpenRouter, Ollama, vLLM and llama.cpp all serve the list.

use super::config::{Api, ModelSettings};
use super::error::ModelError;
use super::spec::ModelSpec;
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::time::Duration;

/// What a provider answered to `GET <base>/models`.
#[derive(Debug)]
pub struct ModelListing {
    /// The model ids it lists; the error is typed as a chat call's would be
    /// (a refused key is [`ModelError::Auth`]).
    pub answer: Result<Vec<String>, ModelError>,
    /// The answer's `Date` header: the provider's clock, whenever it
    /// answered at all (a refusal has one too).
    pub date: Option<DateTime<Utc>>,
    /// The variable the key is read from (`BUB_OPENAI_API_KEY`), for the
    /// message that says what to set.
    pub key_variable: String,
    /// Where it asked: `<base>/models`.
    pub url: String,
}

impl ModelSettings {
    /// Asks `spec`'s provider for its models, giving it `timeout` to answer.
    /// Not retried: a caller that checks wants to know what happens now.
    pub async fn list_models(&self, spec: &str, timeout: Duration) -> Result<ModelListing, ModelError> {
        let spec = ModelSpec::parse(spec)?;
        let endpoint = self.endpoint(&spec)?;
        let url = format!("{}/models", endpoint.base.trim_end_matches('/'));
        let mut request = endpoint.http.get(&url).timeout(timeout);
        request = match (endpoint.api, endpoint.key) {
            (Api::OpenAi, Some(key)) => request.bearer_auth(key),
            (Api::OpenAi, None) => request,
            (Api::Anthropic, key) => request
                .header("x-api-key", key.unwrap_or_default())
                .header("anthropic-version", super::anthropic::ANTHROPIC_VERSION),
        };
        let provider = endpoint.provider;
        let key_variable = endpoint.key_variable.clone();
        let response = match request.send().await {
            Ok(response) => response,
            Err(error) => {
                let provider = provider.to_string();
                let answer = Err(match error.is_timeout() {
                    true => ModelError::Timeout { provider, after: timeout },
                    false => ModelError::Connection { provider, message: super::transport::describe(&error) },
                });
                return Ok(ModelListing { answer, date: None, key_variable, url });
            }
        };
        let date = response
            .headers()
            .get(reqwest::header::DATE)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| DateTime::parse_from_rfc2822(value).ok())
            .map(|date| date.with_timezone(&Utc));
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        let answer = match status.is_success() {
            true => model_ids(&body).ok_or_else(|| ModelError::Protocol {
                provider: provider.to_string(),
                message: format!("{url} did not answer a list of models"),
            }),
            false => Err(super::transport::status_error(provider, status.as_u16(), None, &body)),
        };
        Ok(ModelListing { answer, date, key_variable, url })
    }
}

/// The ids of `{"data": [{"id": …}, …]}` (OpenAI's shape, which Anthropic
/// and the OpenAI-compatible servers share).
fn model_ids(body: &str) -> Option<Vec<String>> {
    let payload: Value = serde_json::from_str(body).ok()?;
    let data = payload.get("data")?.as_array()?;
    Some(data.iter().filter_map(|model| model.get("id")?.as_str().map(str::to_string)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_come_from_the_data_list() {
        let body = r#"{"object":"list","data":[{"id":"gpt-4o","object":"model"},{"id":"o3"}]}"#;
        assert_eq!(model_ids(body), Some(vec!["gpt-4o".to_string(), "o3".to_string()]));
        assert_eq!(model_ids(r#"{"models":[]}"#), None);
        assert_eq!(model_ids("not json"), None);
    }
}
