//! The values the file is written in that are more than a string or a
//! number: [`Seconds`], [`UserPattern`] (`tg:42`, `tg:*`, `*`) and
//! [`Operator`] (a user, and optionally the commands they may run).

use super::pattern::ToolPattern;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::fmt;
use toml::Spanned;

/// A duration in seconds: finite, not negative.
#[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd, Serialize)]
#[serde(transparent)]
pub struct Seconds(pub f64);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Seconds {
    pub fn duration(self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.0)
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Seconds, D::Error> {
        let value = f64::deserialize(deserializer)?;
        if !value.is_finite() || value < 0.0 {
            return Err(de::Error::custom(format!("{value} is not a number of seconds (0 or more)")));
        }
        Ok(Seconds(value))
    }
}

/// A user name in a policy: `<channel>:<user id>`, `<channel>:*` (everyone on
/// that channel) or `*` (everyone).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UserPattern(String);

impl UserPattern {
    pub fn new(text: &str) -> Result<UserPattern, String> {
        let text = text.trim();
        if text == "*" {
            return Ok(UserPattern(text.to_string()));
        }
        match text.split_once(':') {
            Some((channel, id)) if !channel.is_empty() && !id.is_empty() => Ok(UserPattern(text.to_string())),
            _ => Err(format!("user `{text}` is not `<channel>:<user id>` (like `tg:42`), `<channel>:*` or `*`")),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The channel part, `None` for `*`.
    pub fn channel(&self) -> Option<&str> {
        self.0.split_once(':').map(|(channel, _)| channel)
    }

    pub fn matches(&self, user: &str) -> bool {
        match self.0.strip_suffix('*') {
            _ if self.0 == user => true,
            Some("") => true,
            Some(prefix) if prefix.ends_with(':') => user.starts_with(prefix),
            _ => false,
        }
    }
}

impl fmt::Display for UserPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Lenient: the form is checked after parsing ([`GatewayConfig::parse`](super::GatewayConfig::parse)), where
/// the error can point at the element rather than at its whole list.
impl<'de> Deserialize<'de> for UserPattern {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<UserPattern, D::Error> {
        Ok(UserPattern(String::deserialize(deserializer)?.trim().to_string()))
    }
}

/// Who may run comma commands: a user, and optionally which commands (globs
/// over tool names). Written `"tg:42"` or `{ user = "tg:42", commands = ["tape.*"] }`.
#[derive(Debug, Clone, PartialEq)]
pub struct Operator {
    pub user: UserPattern,
    /// `None`: every command.
    pub commands: Option<Vec<Spanned<ToolPattern>>>,
}

impl<'de> Deserialize<'de> for Operator {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Operator, D::Error> {
        struct OperatorVisitor;
        const KEYS: &[&str] = &["user", "commands"];
        impl<'de> Visitor<'de> for OperatorVisitor {
            type Value = Operator;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a user (`tg:42`) or a table `{ user = \"tg:42\", commands = [\"tape.*\"] }`")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Operator, E> {
                Ok(Operator { user: UserPattern(text.trim().to_string()), commands: None })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Operator, A::Error> {
                let (mut user, mut commands) = (None, None);
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "user" => user = Some(map.next_value::<UserPattern>()?),
                        "commands" => commands = Some(map.next_value::<Vec<Spanned<ToolPattern>>>()?),
                        other => return Err(de::Error::unknown_field(other, KEYS)),
                    }
                }
                let user = user.ok_or_else(|| de::Error::missing_field("user"))?;
                Ok(Operator { user, commands })
            }
        }
        deserializer.deserialize_any(OperatorVisitor)
    }
}
