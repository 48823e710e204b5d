//! [`Secret`]: a key or token that bub uses but never shows. Every field
//! that holds one (webhook HMAC keys, bot tokens, model API keys) is a
//! `Secret`, so a `#[derive(Debug)]` on the struct around it is safe and no
//! type needs a hand-written redacting `Debug`.

use serde::Deserialize;
use std::fmt;

/// What a [`Secret`] prints as, wherever it is formatted.
pub const REDACTED: &str = "Secret(***)";

/// A password-like value: compared and used, never printed. `Debug` prints
/// [`REDACTED`]; there is no `Display`. In a config file it is a plain
/// string (`#[serde(transparent)]`).
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value itself, for the code that signs or authenticates with it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// True when there is nothing in it.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// True when there is nothing in it but whitespace (a token that cannot
    /// authenticate anything).
    pub fn is_blank(&self) -> bool {
        self.0.trim().is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Secret {
        Secret(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Secret {
        Secret(value.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    #[allow(dead_code)]
    struct Settings {
        name: String,
        token: Secret,
        keys: Vec<Secret>,
        spare: Option<Secret>,
    }

    #[test]
    fn debug_of_a_struct_holding_secrets_never_shows_them() {
        let settings = Settings {
            name: "tg".into(),
            token: Secret::new("123:token-value"),
            keys: vec!["hmac-key-1".into(), Secret::from(String::from("hmac-key-2"))],
            spare: Some("spare-key".into()),
        };
        for shown in [format!("{settings:?}"), format!("{settings:#?}")] {
            for secret in ["123:token-value", "hmac-key-1", "hmac-key-2", "spare-key"] {
                assert!(!shown.contains(secret), "{secret} shown in {shown}");
            }
            assert!(shown.contains("tg") && shown.contains(REDACTED), "{shown}");
        }
        assert_eq!(settings.token.expose(), "123:token-value");
    }

    #[test]
    fn a_secret_reads_as_a_plain_string() {
        #[derive(Deserialize)]
        struct File {
            key: Secret,
        }
        let file: File = serde_json::from_str(r#"{"key": " "}"#).unwrap();
        assert_eq!(file.key.expose(), " ");
        assert!(file.key.is_blank() && !file.key.is_empty());
    }
}
