//! Which model to call and how to reach it, from `BUB_*` variables.
//!
//! | variable | meaning |
//! |---|---|
//! | `BUB_MODEL` | the default model, `provider:model` |
//! | `BUB_<PROVIDER>_API_KEY`, `BUB_API_KEY` | the key (per provider wins) |
//! | `BUB_<PROVIDER>_API_BASE`, `BUB_API_BASE` | the API root (per provider wins) |
//! | `BUB_MODEL_TIMEOUT_SECONDS` | headers/first event and max silence, default 60 |
//! | `BUB_MAX_TOKENS` | default `max_tokens` of a request |
//! | `BUB_IMAGE_MODELS` | which models take images, over the family defaults (see [`super::images`]) |
//!
//! `<PROVIDER>` is the provider upper-cased, other characters than letters and
//! digits as `_` (`my-vllm` → `BUB_MY_VLLM_API_BASE`). Known providers have
//! default bases; any other name is an OpenAI-compatible server once its base
//! is set, which is how llama.cpp, vLLM or a company gateway are added without
//! code. Settings are read from an explicit variable list ([`ModelSettings::from_vars`])
//! so tests never touch the process environment. Every error is one line that
//! names the variable to set.

use super::anthropic::AnthropicClient;
use super::error::ModelError;
use super::openai::OpenAiClient;
use super::retry::{RetryPolicy, Retrying};
use super::spec::ModelSpec;
use super::types::ModelClient;
use bub_channel::Secret;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Which client speaks a provider's API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Api {
    OpenAi,
    Anthropic,
}

/// Providers that work with a key alone: (name, default base, API, key required).
const KNOWN_PROVIDERS: [(&str, &str, Api, bool); 4] = [
    ("openai", "https://api.openai.com/v1", Api::OpenAi, true),
    ("openrouter", "https://openrouter.ai/api/v1", Api::OpenAi, true),
    ("anthropic", "https://api.anthropic.com/v1", Api::Anthropic, true),
    ("ollama", "http://localhost:11434/v1", Api::OpenAi, false),
];

/// Model configuration, validated once; [`ModelSettings::client`] builds clients.
/// API keys are [`Secret`]s, so `Debug` never shows them.
#[derive(Debug, Clone, Default)]
pub struct ModelSettings {
    /// `BUB_MODEL`, unparsed: a bad value is reported when a model is needed.
    model: Option<String>,
    /// The `BUB_*` variables but the keys (bases are looked up per provider).
    vars: BTreeMap<String, String>,
    /// The `BUB_*_API_KEY` variables, looked up per provider.
    keys: BTreeMap<String, Secret>,
    /// Default `max_tokens` (`BUB_MAX_TOKENS`).
    pub max_tokens: Option<u32>,
    /// Retries and timeouts; `timeout` comes from `BUB_MODEL_TIMEOUT_SECONDS`.
    pub retry: RetryPolicy,
    /// Which models take images (`BUB_IMAGE_MODELS` over the family defaults).
    pub image_models: super::images::ImageModels,
    proxied_http: OnceLock<reqwest::Client>,
    direct_http: OnceLock<reqwest::Client>,
}

impl ModelSettings {
    /// Settings from `(name, value)` pairs; names not starting with `BUB_` and
    /// empty values are ignored.
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Result<ModelSettings, ModelError> {
        let vars: BTreeMap<String, String> = vars
            .into_iter()
            .filter(|(name, value)| name.starts_with("BUB_") && !value.trim().is_empty())
            .map(|(name, value)| (name, value.trim().to_string()))
            .collect();
        let mut retry = RetryPolicy::default();
        if let Some(value) = vars.get("BUB_MODEL_TIMEOUT_SECONDS") {
            retry.timeout = value
                .parse::<f64>()
                .ok()
                .filter(|secs| *secs > 0.0)
                .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
                .ok_or_else(|| invalid("BUB_MODEL_TIMEOUT_SECONDS", value, "a number of seconds above 0"))?;
        }
        let max_tokens = match vars.get("BUB_MAX_TOKENS") {
            None => None,
            Some(value) => Some(
                value
                    .parse::<u32>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| invalid("BUB_MAX_TOKENS", value, "a positive whole number"))?,
            ),
        };
        let image_models = match vars.get(super::images::IMAGE_MODELS_VAR) {
            Some(value) => super::images::ImageModels::parse(value)?,
            None => super::images::ImageModels::default(),
        };
        let (keys, vars): (BTreeMap<String, String>, BTreeMap<String, String>) =
            vars.into_iter().partition(|(name, _)| name.ends_with("_API_KEY"));
        let keys = keys.into_iter().map(|(name, key)| (name, Secret::from(key))).collect();
        Ok(ModelSettings {
            model: vars.get("BUB_MODEL").cloned(),
            vars,
            keys,
            max_tokens,
            retry,
            image_models,
            ..ModelSettings::default()
        })
    }

    /// The configured default model (`BUB_MODEL`).
    pub fn default_model(&self) -> Result<ModelSpec, ModelError> {
        match &self.model {
            Some(spec) => ModelSpec::parse(spec),
            None => Err(ModelError::NotConfigured(
                "no model configured: set BUB_MODEL to provider:model, e.g. openai:gpt-4o-mini".into(),
            )),
        }
    }

    /// A client for `spec` (`provider:model`), wrapped in [`Retrying`].
    pub fn client(&self, spec: &str) -> Result<Arc<dyn ModelClient>, ModelError> {
        let spec = ModelSpec::parse(spec)?;
        let endpoint = self.endpoint(&spec)?;
        let (provider, base, key) = (endpoint.provider, endpoint.base, endpoint.key);
        let http = endpoint.http;
        let inner: Arc<dyn ModelClient> = match endpoint.api {
            Api::OpenAi => Arc::new(
                OpenAiClient::new(provider, base, key.map(str::to_string), http)
                    .with_default_max_tokens(self.max_tokens),
            ),
            Api::Anthropic => Arc::new(
                AnthropicClient::new(provider, base, key.unwrap_or_default(), http)
                    .with_default_max_tokens(self.max_tokens),
            ),
        };
        tracing::debug!(%provider, base, api = ?endpoint.api, "model client configured");
        Ok(Arc::new(Retrying::new(inner, self.retry.clone())))
    }

    /// Where `spec`'s provider is reached and with which key, from the
    /// variables; the error names the variable to set.
    pub(super) fn endpoint<'a>(&'a self, spec: &'a ModelSpec) -> Result<Endpoint<'a>, ModelError> {
        let provider = spec.provider.as_str();
        let prefix = env_prefix(provider);
        let known = KNOWN_PROVIDERS.iter().find(|(name, ..)| *name == provider);
        let base_var = format!("BUB_{prefix}_API_BASE");
        let key_var = format!("BUB_{prefix}_API_KEY");
        let (base, base_source) = match (self.var(&base_var), self.var("BUB_API_BASE"), known) {
            (Some(base), _, _) => (base, base_var.as_str()),
            (None, Some(base), _) => (base, "BUB_API_BASE"),
            (None, None, Some((_, base, ..))) => (*base, "the default base"),
            (None, None, None) => return Err(unknown_provider(provider, &base_var)),
        };
        let url = reqwest::Url::parse(base)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https"))
            .ok_or_else(|| invalid(base_source, base, "an http(s) URL"))?;
        let key = self.var(&key_var).or_else(|| self.var("BUB_API_KEY"));
        let (api, key_required) = known.map_or((Api::OpenAi, false), |(_, _, api, required)| (*api, *required));
        if key_required && key.is_none() {
            return Err(ModelError::NotConfigured(format!(
                "no API key for {provider}: set {key_var} (or BUB_API_KEY)"
            )));
        }
        let http = self.http_for(&url)?;
        Ok(Endpoint { provider, base, key, key_variable: key_var, api, http })
    }

    fn var(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str).or_else(|| self.keys.get(name).map(Secret::expose))
    }

    /// One shared HTTP client per kind: loopback bases bypass proxy variables
    /// (a local server is never behind the company proxy), others honour them.
    fn http_for(&self, url: &reqwest::Url) -> Result<reqwest::Client, ModelError> {
        let direct = is_loopback(url);
        let cell = if direct { &self.direct_http } else { &self.proxied_http };
        if let Some(client) = cell.get() {
            return Ok(client.clone());
        }
        let mut builder = reqwest::Client::builder()
            .user_agent(concat!("bub/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(self.retry.timeout);
        if direct {
            builder = builder.no_proxy();
        }
        let client = builder.build().map_err(|error| {
            ModelError::NotConfigured(format!("cannot set up the HTTP client: {}", super::transport::describe(&error)))
        })?;
        Ok(cell.get_or_init(|| client).clone())
    }
}

/// Where a provider is reached ([`ModelSettings::endpoint`]).
pub(super) struct Endpoint<'a> {
    pub(super) provider: &'a str,
    /// The API root, as configured.
    pub(super) base: &'a str,
    pub(super) key: Option<&'a str>,
    /// `BUB_<PROVIDER>_API_KEY`: the variable to set when the key is refused.
    pub(super) key_variable: String,
    pub(super) api: Api,
    pub(super) http: reqwest::Client,
}

/// `my-vllm` → `MY_VLLM`.
fn env_prefix(provider: &str) -> String {
    provider
        .chars()
        .map(|c| match c.is_ascii_alphanumeric() {
            true => c.to_ascii_uppercase(),
            false => '_',
        })
        .collect()
}

fn is_loopback(url: &reqwest::Url) -> bool {
    match url.host_str() {
        Some("localhost") => true,
        Some(host) => host.trim_matches(|c| c == '[' || c == ']').parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()),
        None => false,
    }
}

fn unknown_provider(provider: &str, base_var: &str) -> ModelError {
    let known: Vec<&str> = KNOWN_PROVIDERS.iter().map(|(name, ..)| *name).collect();
    ModelError::NotConfigured(format!(
        "unknown model provider `{provider}`: known providers are {}; \
         for an OpenAI-compatible server set {base_var}",
        known.join(", ")
    ))
}

fn invalid(variable: &str, value: &str, expected: &str) -> ModelError {
    ModelError::NotConfigured(format!("{variable} must be {expected}, got `{value}`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(vars: &[(&str, &str)]) -> ModelSettings {
        ModelSettings::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string()))).unwrap()
    }

    #[test]
    fn variables_are_read_with_defaults() {
        let s = settings(&[("BUB_MODEL_TIMEOUT_SECONDS", "2.5"), ("BUB_MAX_TOKENS", "512")]);
        assert_eq!(s.retry.timeout, Duration::from_millis(2500));
        assert_eq!(s.max_tokens, Some(512));
        assert_eq!(settings(&[]).retry.timeout, Duration::from_secs(60));
        let bad = ModelSettings::from_vars([("BUB_MAX_TOKENS".into(), "lots".into())]);
        assert!(bad.unwrap_err().to_string().contains("BUB_MAX_TOKENS"));
    }

    #[test]
    fn known_providers_need_only_a_key_and_ollama_not_even_that() {
        let s = settings(&[("BUB_OPENROUTER_API_KEY", "k")]);
        assert_eq!(s.client("openrouter:a/b:free").unwrap().provider(), "openrouter");
        assert_eq!(settings(&[]).client("ollama:llama3:8b").unwrap().provider(), "ollama");
        let s = settings(&[("BUB_API_KEY", "k")]);
        assert_eq!(s.client("anthropic:claude").unwrap().provider(), "anthropic");
    }

    #[test]
    fn a_bad_base_names_its_variable() {
        let s = settings(&[("BUB_MY_VLLM_API_BASE", "not a url")]);
        let Err(error) = s.client("my-vllm:m") else { panic!("a bad base is refused") };
        let error = error.to_string();
        assert!(error.contains("BUB_MY_VLLM_API_BASE"), "{error}");
    }

    #[test]
    fn keys_are_not_printed() {
        let s = settings(&[("BUB_OPENAI_API_KEY", "sk-secret")]);
        assert!(!format!("{s:?}").contains("sk-secret"));
    }

    #[test]
    fn loopback_hosts_are_recognised() {
        let url = |u: &str| reqwest::Url::parse(u).unwrap();
        assert!(is_loopback(&url("http://127.0.0.1:8080/v1")));
        assert!(is_loopback(&url("http://localhost:11434/v1")));
        assert!(is_loopback(&url("http://[::1]:80/")));
        assert!(!is_loopback(&url("https://api.openai.com/v1")));
    }
}
