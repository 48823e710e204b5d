//! Which models take images: a default by model family, and the operator's
//! word over it (`BUB_IMAGE_MODELS`).
//!
//! A model that takes images gets a picture people send as image content
//! (OpenAI-compatible `image_url` parts, Anthropic image blocks); any other
//! model gets the picture's path only. Sending images to a text-only model
//! fails the call, so an unknown model counts as text-only: an operator
//! names the vision models of a local server (`BUB_IMAGE_MODELS="ollama:llava*"`).
//!
//! `BUB_IMAGE_MODELS` is a comma-separated list of `provider:model` patterns
//! (`*` matches anything); a pattern starting with `!` names models that do
//! not take images. The last pattern that matches decides; when none does,
//! the family does.

use super::error::ModelError;
use super::spec::ModelSpec;

/// The variable that overrides the defaults.
pub const IMAGE_MODELS_VAR: &str = "BUB_IMAGE_MODELS";

/// Parts of model ids of families that read images (GPT-4o/4.1/5, o-series,
/// Claude 3 and 4, Gemini, and open vision models).
const VISION_MARKERS: [&str; 19] = [
    "gpt-4o",
    "gpt-4.1",
    "gpt-4-turbo",
    "gpt-4-vision",
    "gpt-5",
    "claude-3",
    "claude-sonnet-4",
    "claude-opus-4",
    "claude-haiku-4",
    "gemini",
    "vision",
    "-vl",
    "llava",
    "pixtral",
    "llama-4",
    "gemma-3",
    "gemma3",
    "minicpm-v",
    "moondream",
];
/// Variants of those families that take no images (speech, embeddings, the small reasoning models).
const TEXT_ONLY_MARKERS: [&str; 6] = ["-audio", "-tts", "-transcribe", "-realtime", "embedding", "-mini-2024"];

/// Whether `spec`'s family reads images, by its model id.
pub fn family_takes_images(spec: &ModelSpec) -> bool {
    // `openrouter:openai/gpt-4o` is gpt-4o.
    let model = spec.model.rsplit('/').next().unwrap_or_default().to_ascii_lowercase();
    if TEXT_ONLY_MARKERS.iter().any(|marker| model.contains(marker)) {
        return false;
    }
    let o_series = ["o1", "o3", "o4"].iter().any(|o| model == *o || model.starts_with(&format!("{o}-")))
        && !matches!(model.as_str(), "o1-mini" | "o3-mini")
        && !model.starts_with("o1-mini-")
        && !model.starts_with("o3-mini-");
    o_series || VISION_MARKERS.iter().any(|marker| model.contains(marker))
}

/// The operator's list of image models, over the family defaults.
#[derive(Debug, Clone, Default)]
pub struct ImageModels {
    /// (takes images, pattern), in the order written.
    rules: Vec<(bool, globset::GlobMatcher)>,
}

impl ImageModels {
    /// The rules of a `BUB_IMAGE_MODELS` value; an invalid pattern is an error naming the variable.
    pub fn parse(value: &str) -> Result<ImageModels, ModelError> {
        let mut rules = Vec::new();
        for item in value.split(',').map(str::trim).filter(|item| !item.is_empty()) {
            let (takes, pattern) = match item.strip_prefix('!') {
                Some(pattern) => (false, pattern.trim()),
                None => (true, item),
            };
            let invalid = || {
                ModelError::NotConfigured(format!(
                    "{IMAGE_MODELS_VAR}: {item:?} is not a provider:model pattern (e.g. ollama:llava* or !openai:gpt-4o-mini)"
                ))
            };
            if !pattern.contains(':') {
                return Err(invalid());
            }
            let glob = globset::GlobBuilder::new(&pattern.to_ascii_lowercase())
                .literal_separator(false)
                .build()
                .map_err(|_| invalid())?;
            rules.push((takes, glob.compile_matcher()));
        }
        Ok(ImageModels { rules })
    }

    /// Whether `spec` (`provider:model`) takes images: the last rule that
    /// matches, else its family; an unparsable spec does not.
    pub fn takes_images(&self, spec: &str) -> bool {
        let Ok(parsed) = ModelSpec::parse(spec) else { return false };
        let name = parsed.to_string().to_ascii_lowercase();
        match self.rules.iter().rev().find(|(_, glob)| glob.is_match(&name)) {
            Some((takes, _)) => *takes,
            None => family_takes_images(&parsed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn family(spec: &str) -> bool {
        family_takes_images(&ModelSpec::parse(spec).unwrap())
    }

    #[test]
    fn vision_families_take_images_and_others_do_not() {
        for spec in [
            "openai:gpt-4o",
            "openai:gpt-4o-mini",
            "openai:gpt-4.1-nano",
            "openai:o3",
            "openai:gpt-5",
            "anthropic:claude-3-5-sonnet-latest",
            "anthropic:claude-sonnet-4-5",
            "openrouter:google/gemini-2.5-pro",
            "ollama:llava:13b",
            "vllm:Qwen/Qwen2.5-VL-7B-Instruct",
        ] {
            assert!(family(spec), "{spec}");
        }
        for spec in [
            "openai:gpt-3.5-turbo",
            "openai:o1-mini",
            "openai:o3-mini",
            "openai:gpt-4o-audio-preview",
            "openai:text-embedding-3-small",
            "anthropic:claude-2.1",
            "ollama:llama3:8b",
            "openai:gpt-test",
        ] {
            assert!(!family(spec), "{spec}");
        }
    }

    #[test]
    fn the_operators_list_overrides_the_family_and_the_last_match_wins() {
        let models = ImageModels::parse("ollama:llava*, openai:gpt-test, !openai:gpt-4o*, openai:gpt-4o-mini").unwrap();
        assert!(models.takes_images("ollama:llava:13b"));
        assert!(models.takes_images("openai:gpt-test"));
        assert!(!models.takes_images("openai:gpt-4o"), "named text-only");
        assert!(models.takes_images("openai:gpt-4o-mini"), "a later rule wins");
        assert!(models.takes_images("anthropic:claude-3-haiku"), "no rule: the family");
        assert!(!models.takes_images("not a spec"));
        let error = ImageModels::parse("llava").unwrap_err().to_string();
        assert!(error.contains("BUB_IMAGE_MODELS") && error.contains("llava"), "{error}");
    }
}
