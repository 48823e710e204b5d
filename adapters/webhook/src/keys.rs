//! The channel's keys: the secrets that verify requests and the one that
//! signs callbacks. They are read from a [`KeySource`] on every request and
//! every callback, so a running channel can follow its configuration: a
//! secret removed by a reload stops verifying with the next request.

use bub_channel::Secret;
use std::sync::Arc;

/// The keys of one webhook channel at one moment ([`Secret`]s: `Debug` never shows them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookKeys {
    /// Any of these verifies a request; empty ones verify nothing.
    pub secrets: Vec<Secret>,
    /// Signs callback POSTs; `None`: the first of `secrets`.
    pub callback_secret: Option<Secret>,
}

impl WebhookKeys {
    /// The secrets a request may be signed with (empty ones left out, so a
    /// misconfigured empty secret never lets an unsigned caller in).
    pub(crate) fn verifying(&self) -> Vec<&str> {
        self.secrets.iter().map(Secret::expose).filter(|secret| !secret.is_empty()).collect()
    }

    /// The key callbacks are signed with: `callback_secret`, else the first secret.
    pub fn callback_secret(&self) -> Option<&str> {
        self.callback_secret.as_ref().or(self.secrets.first()).map(Secret::expose).filter(|secret| !secret.is_empty())
    }
}

/// The rule on a channel's configured secrets: at least one, and none
/// empty. [`WebhookChannel::new`](crate::WebhookChannel::new) applies it, and
/// so does bub's config at load (to say where in the file it is broken).
pub fn secrets_are_usable(secrets: &[Secret]) -> bool {
    !secrets.is_empty() && !secrets.iter().any(Secret::is_empty)
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
        let keys = WebhookKeys { secrets: vec![Secret::default(), "b".into()], callback_secret: None };
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
