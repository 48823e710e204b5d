//! `provider:model` — how a user names a model (`BUB_MODEL`, `,model`).
//!
//! The split is at the FIRST colon because model ids contain colons of their
//! own (`openrouter:vendor/model:free`, `ollama:llama3:8b`), provider names never.

use super::error::ModelError;
use std::fmt;
use std::str::FromStr;

/// A parsed `provider:model`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModelSpec {
    /// Lower-case provider name (`openai`, `anthropic`, `openrouter`, …).
    pub provider: String,
    /// The model id at the provider, as given.
    pub model: String,
}

impl ModelSpec {
    pub fn parse(spec: &str) -> Result<ModelSpec, ModelError> {
        let spec = spec.trim();
        let invalid = || {
            ModelError::NotConfigured(format!(
                "invalid model `{spec}`: expected provider:model, e.g. openai:gpt-4o-mini"
            ))
        };
        let (provider, model) = spec.split_once(':').ok_or_else(invalid)?;
        let (provider, model) = (provider.trim(), model.trim());
        if provider.is_empty() || model.is_empty() {
            return Err(invalid());
        }
        Ok(ModelSpec { provider: provider.to_lowercase(), model: model.to_string() })
    }
}

impl FromStr for ModelSpec {
    type Err = ModelError;

    fn from_str(spec: &str) -> Result<ModelSpec, ModelError> {
        ModelSpec::parse(spec)
    }
}

impl fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.provider, self.model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_is_at_the_first_colon() {
        let spec = ModelSpec::parse("openrouter:vendor/model:free").unwrap();
        assert_eq!(spec.provider, "openrouter");
        assert_eq!(spec.model, "vendor/model:free");
        assert_eq!(spec.to_string(), "openrouter:vendor/model:free");
    }

    #[test]
    fn missing_parts_show_the_expected_form() {
        for bad in ["gpt-4o", ":gpt-4o", "openai:", "", " : "] {
            let error = ModelSpec::parse(bad).unwrap_err();
            assert_eq!(error.kind(), "not_configured", "{bad}");
            assert!(error.to_string().contains("provider:model"), "{bad}");
        }
    }
}
