//! How many tokens a model reads: its context window.
//!
//! The agent compacts a session's context before it fills the window (see
//! [`crate::agent::compaction`]), so it must know the window of the model it
//! calls. Known families have defaults here; a deployment sets its own with
//! `[agent] context_window`, the policy's `context_window` where a policy pins
//! a model, or `BUB_CONTEXT_WINDOW`. A model no rule knows gets
//! [`UNKNOWN_MODEL_WINDOW`]: small enough that compaction starts early rather
//! than never (a model with a bigger window only compacts sooner than needed).

/// The window of a model no rule knows.
pub const UNKNOWN_MODEL_WINDOW: u64 = 32_768;

/// Families that are not OpenAI's, by name prefix (after any `vendor/` part):
/// the first match wins.
const FAMILIES: [(&str, u64); 12] = [
    ("claude-", 200_000),
    ("gemini-1.5", 2_097_152),
    ("gemini-", 1_048_576),
    ("llama-3", 131_072),
    ("llama3", 131_072),
    ("mistral-large", 131_072),
    ("mistral", 32_768),
    ("mixtral", 32_768),
    ("qwen3", 131_072),
    ("qwen", 32_768),
    ("deepseek", 131_072),
    ("grok", 131_072),
];

/// The context window of `model` (the provider's model id, or
/// `provider:model`), from the family defaults; `None` when no rule knows it.
///
/// ```
/// use bub::model::window::known_window;
/// assert_eq!(known_window("anthropic:claude-sonnet-4-5"), Some(200_000));
/// assert_eq!(known_window("openai:gpt-4o-mini"), Some(128_000));
/// assert_eq!(known_window("openrouter:meta-llama/llama-3.1-70b"), Some(131_072));
/// assert_eq!(known_window("my-vllm:house-model"), None);
/// ```
pub fn known_window(model: &str) -> Option<u64> {
    let id = model.split_once(':').map_or(model, |(_, id)| id);
    let id = id.rsplit('/').next().unwrap_or(id).to_ascii_lowercase();
    if let Some(size) = tiktoken_rs::model::get_context_size(&id) {
        return Some(size as u64);
    }
    FAMILIES.iter().find(|(prefix, _)| id.starts_with(prefix)).map(|(_, size)| *size)
}

/// The window of `model`: `configured` when set, else [`known_window`], else
/// [`UNKNOWN_MODEL_WINDOW`].
pub fn window_of(model: &str, configured: Option<u64>) -> u64 {
    configured.filter(|n| *n > 0).or_else(|| known_window(model)).unwrap_or(UNKNOWN_MODEL_WINDOW)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_window_wins_over_the_family() {
        assert_eq!(window_of("openai:gpt-4o", Some(8_000)), 8_000);
        assert_eq!(window_of("openai:gpt-4o", None), 128_000);
        assert_eq!(window_of("local:whatever", None), UNKNOWN_MODEL_WINDOW);
        assert_eq!(window_of("local:whatever", Some(0)), UNKNOWN_MODEL_WINDOW);
    }

    #[test]
    fn vendor_prefixes_and_case_do_not_hide_the_family() {
        assert_eq!(known_window("openrouter:anthropic/Claude-3.5-Sonnet"), Some(200_000));
        assert_eq!(known_window("gemini-2.5-pro"), Some(1_048_576));
        assert_eq!(known_window("ollama:qwen3:32b"), Some(131_072));
    }
}
