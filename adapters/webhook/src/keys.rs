//! The channel's keys: the secrets that verify requests and the one that
//! signs callbacks. They are read from a [`KeySource`] on every request and
//! every callback, so a running channel can follow its configuration: a
//! secret removed by a reload stops verifying with the next request.

use std::fmt;
use std::sync::Arc;

/// The keys of one webhook channel at one moment.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookKeys {
    /// Any of these verifies a request; empty ones verify nothing.
    pub secrets: Vec<String>,
    /// Signs callback POSTs; `None`: the first of `secrets`.
    pub callback_secret: Option<String>,
}

impl WebhookKeys {
    /// The secrets a request may be signed with (empty ones left out, so a
    /// misconfigured empty secret never lets an unsigned caller in).
    pub(crate) fn verifying(&self) -> Vec<&str> {
        self.secrets.iter().map(String::as_str).filter(|secret| !secret.is_empty()).collect()
    }

    /// The key callbacks are signed with: `callback_secret`, else the first secret.
    pub fn callback_secret(&self) -> Option<&str> {
        self.callback_secret.as_deref().or(self.secrets.first().map(String::as_str)).filter(|secret| !secret.is_empty())
    }
}

/// Secrets stay out of logs.
impl fmt::Debug for WebhookKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookKeys")
            .field("secrets", &format_args!("[{} redacted]", self.secrets.len()))
            .field("callback_secret", &self.callback_secret.as_ref().map(|_| "redacted"))
            .finish()
    }
}

/// Where a running channel reads its keys (see [`WebhookChannel::with_keys`](crate::WebhookChannel::with_keys)).
/// Called once per request and per callback: it should be cheap.
pub type KeySource = Arc<dyn Fn() -> WebhookKeys + Send + Sync>;

/// A source that always gives `keys`.
pub(crate) fn fixed(keys: WebhookKeys) -> KeySource {
    Arc::new(move || keys.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_secrets_never_verify_and_callbacks_fall_back_to_the_first_secret() {
        let keys = WebhookKeys { secrets: vec![String::new(), "b".into()], callback_secret: None };
        assert_eq!(keys.verifying(), ["b"]);
        assert_eq!(keys.callback_secret(), None, "the first secret is empty: nothing to sign with");
        let keys = WebhookKeys { secrets: vec!["a".into(), "b".into()], callback_secret: None };
        assert_eq!(keys.callback_secret(), Some("a"));
        let keys = WebhookKeys { callback_secret: Some("c".into()), ..keys };
        assert_eq!(keys.callback_secret(), Some("c"));
        let shown = format!("{keys:?}");
        assert!(!shown.contains("\"a\"") && !shown.contains("\"c\""), "{shown}");
    }
}
