//! `[admin]`: the admin console (`src/admin`), off unless the section is
//! written. Its tokens come from `token_file` (read at each load, so a
//! reload rotates them) and from the gateway's environment
//! (`BUB_ADMIN_TOKEN`, given to the gateway's builder); a console with no
//! token at all is refused when the gateway starts, never served open.
//!
//! ```toml
//! [admin]
//! token_file = "admin.tokens"   # one `NAME TOKEN` per line; a bare TOKEN is named `admin`
//! base_path = "/bub"            # the prefix a reverse proxy serves the gateway under
//! session_hours = 12            # how long a login lasts
//! ```

use super::error::{ConfigError, Source};
use bub_channel::Secret;
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;
use toml::Spanned;

/// The shortest token accepted: a guessable token would open the console.
pub const MIN_TOKEN_CHARS: usize = 16;

/// The console's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct AdminConfig {
    /// The tokens of `token_file`, each with the admin's name.
    pub tokens: Vec<AdminToken>,
    /// The path prefix a reverse proxy serves the gateway under (`/bub`);
    /// empty when the console is served at `/admin` as is.
    pub base_path: String,
    /// How long a login lasts (default 12 hours).
    pub session: Duration,
}

/// One admin's token: the name is what the audit log records.
#[derive(Debug, Clone, PartialEq)]
pub struct AdminToken {
    pub name: String,
    pub token: Secret,
}

impl AdminToken {
    /// A token as the environment gives it: `TOKEN` (named `admin`) or
    /// `NAME TOKEN`, checked as a line of a token file is.
    pub fn parse_line(line: &str) -> Result<AdminToken, String> {
        let mut words = line.split_whitespace();
        let (name, token) = match (words.next(), words.next(), words.next()) {
            (Some(token), None, _) => ("admin", token),
            (Some(name), Some(token), None) => (name, token),
            _ => return Err("write `NAME TOKEN` or a bare TOKEN".to_string()),
        };
        if name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || "_.@-".contains(c)) {
            return Err(format!("admin name `{name}`: use letters, digits, `_`, `.`, `@`, `-` (at most 64)"));
        }
        if token.chars().count() < MIN_TOKEN_CHARS {
            return Err(format!(
                "the token of `{name}` is shorter than {MIN_TOKEN_CHARS} characters: make one with \
                 `openssl rand -hex 32`"
            ));
        }
        Ok(AdminToken { name: name.to_string(), token: Secret::new(token) })
    }
}

/// `[admin]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdmin {
    token_file: Option<Spanned<PathBuf>>,
    base_path: Option<Spanned<String>>,
    session_hours: Option<Spanned<u64>>,
}

impl RawAdmin {
    /// Checks the section and reads its token file.
    pub(super) fn into_config(self, source: &Source) -> Result<AdminConfig, ConfigError> {
        let base_path = match &self.base_path {
            Some(path) => check_base_path(path.get_ref()).map_err(|why| source.error(Some(path.span()), why))?,
            None => String::new(),
        };
        let session = match &self.session_hours {
            Some(hours) if *hours.get_ref() == 0 || *hours.get_ref() > 24 * 30 => {
                return Err(source.error(Some(hours.span()), "session_hours must be between 1 and 720"));
            }
            Some(hours) => Duration::from_secs(hours.get_ref() * 3600),
            None => Duration::from_secs(12 * 3600),
        };
        let mut tokens: Vec<AdminToken> = Vec::new();
        if let Some(file) = &self.token_file {
            let failed = |why: String| source.error(Some(file.span()), format!("token_file: {why}"));
            let text = super::channel::secret_file::read_secret_file(&source.path, file.get_ref())
                .map_err(|(path, why)| failed(format!("{}: {why}", path.display())))?;
            let lines = text.lines().enumerate().map(|(n, line)| (n + 1, line.trim()));
            for (number, line) in lines.filter(|(_, line)| !line.is_empty() && !line.starts_with('#')) {
                let token = AdminToken::parse_line(line).map_err(|why| failed(format!("line {number}: {why}")))?;
                if tokens.iter().any(|known| known.name == token.name) {
                    return Err(failed(format!("line {number}: admin `{}` is named twice", token.name)));
                }
                tokens.push(token);
            }
        }
        Ok(AdminConfig { tokens, base_path, session })
    }
}

/// `/bub` or `/tools/bub`: absolute, no trailing slash, plain path segments.
/// `""` and `"/"` mean no prefix.
fn check_base_path(path: &str) -> Result<String, String> {
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return Ok(String::new());
    }
    if !trimmed.starts_with('/') {
        return Err(format!("base_path `{path}` must start with `/` (as `/bub`)"));
    }
    let plain = |segment: &str| {
        !segment.is_empty()
            && segment != "."
            && segment != ".."
            && segment.chars().all(|c| c.is_ascii_alphanumeric() || "-._~".contains(c))
    };
    if !trimmed[1..].split('/').all(plain) {
        return Err(format!(
            "base_path `{path}`: each segment is letters, digits, `-`, `.`, `_` or `~` (as `/bub` or `/tools/bub`)"
        ));
    }
    Ok(trimmed.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::file::tests::{MINIMAL, error, parse};

    #[test]
    fn tokens_are_read_from_the_file_with_their_names() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("admin.tokens"),
            "# the team\nalice 0123456789abcdef0\n\nbob  fedcba98765432100\n",
        )
        .unwrap();
        let text = format!("{MINIMAL}[admin]\ntoken_file = \"admin.tokens\"\nbase_path = \"/bub/\"\n");
        let config = crate::config::GatewayConfig::parse(&text, dir.path().join("bub.toml")).unwrap();
        let admin = config.admin.unwrap();
        let names: Vec<&str> = admin.tokens.iter().map(|token| token.name.as_str()).collect();
        assert_eq!(names, ["alice", "bob"]);
        assert_eq!(admin.tokens[1].token.expose(), "fedcba98765432100");
        assert_eq!(admin.base_path, "/bub");
        assert_eq!(admin.session, Duration::from_secs(12 * 3600));
        assert!(parse(MINIMAL).unwrap().admin.is_none(), "off unless written");
        assert!(parse(&format!("{MINIMAL}[admin]\n")).unwrap().admin.is_some());
    }

    #[test]
    fn a_short_token_a_bad_name_or_prefix_is_refused_where_it_is_written() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("short"), "alice 1234\n").unwrap();
        let text = format!("{MINIMAL}[admin]\ntoken_file = \"short\"\n");
        let refused = crate::config::GatewayConfig::parse(&text, dir.path().join("bub.toml")).unwrap_err().to_string();
        assert!(refused.contains("token_file: line 1: the token of `alice` is shorter than 16"), "{refused}");
        assert!(refused.contains("bub.toml:5:14: token_file"), "{refused}");
        let twice = "alice 0123456789abcdef0\nalice 0123456789abcdef1\n";
        std::fs::write(dir.path().join("twice"), twice).unwrap();
        let text = format!("{MINIMAL}[admin]\ntoken_file = \"twice\"\n");
        let refused = crate::config::GatewayConfig::parse(&text, dir.path().join("bub.toml")).unwrap_err().to_string();
        assert!(refused.contains("line 2: admin `alice` is named twice"), "{refused}");
        let message = error(&format!("{MINIMAL}[admin]\nbase_path = \"bub\"\n"));
        assert!(message.contains("must start with `/`"), "{message}");
        let message = error(&format!("{MINIMAL}[admin]\nbase_path = \"/a/../b\"\n"));
        assert!(message.contains("each segment"), "{message}");
        let message = error(&format!("{MINIMAL}[admin]\nsession_hours = 0\n"));
        assert!(message.contains("between 1 and 720"), "{message}");
        assert!(AdminToken::parse_line("a b c").is_err());
        assert_eq!(AdminToken::parse_line("0123456789abcdef0").unwrap().name, "admin");
    }
}
