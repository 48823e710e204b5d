//! `[mcp.NAME]`: the MCP servers whose tools the agent gets, as
//! `mcp.NAME.TOOL` (see `bub::mcp`). One table per server:
//!
//! ```toml
//! [mcp.github]                      # a local server over stdio
//! command = "npx"
//! args = ["-y", "@modelcontextprotocol/server-github"]
//! env = { GITHUB_TOKEN = { env = "GITHUB_TOKEN" } }
//! capabilities = ["read", "network"]          # what its tools can do
//! tools = { create_issue = ["write", "network"] }
//!
//! [mcp.docs]                        # a remote server over Streamable HTTP
//! url = "https://docs.example.com/mcp"
//! headers = { Authorization = { file = "secrets/docs", prefix = "Bearer " } }
//! required = true                   # /readyz waits for it
//! ```
//!
//! Values of `env` and `headers` are secrets: written as a string, read from
//! a variable of the gateway's environment (`{ env = "NAME" }`, read when the
//! server starts) or from a file (`{ file = "PATH" }`, read at each load like
//! the channels' `_file` keys, relative to the config's folder), with an
//! optional `prefix`. They are [`Secret`]s: never printed, never in `Debug`.
//!
//! A tool's capabilities, for the policy's `cap:` rules and the group-chat
//! and provenance rules, are its entry in `tools`, else the server's
//! `capabilities`, else every capability: an undeclared MCP tool is on the
//! closed side of every rule.
//!
//! A reload compares each table with the running one: a server whose table
//! changed (a rotated secret file included) is restarted, one removed is
//! stopped, one added is started, the others are left alone.

use super::error::{ConfigError, Source};
use super::value::Seconds;
use crate::tools::capability::{Capabilities, Capability};
use bub_channel::Secret;
use bub_channel::rules::{UrlError, http_url};
use indexmap::IndexMap;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

/// How long a server may take to start and list its tools, unless `start_timeout_seconds` says.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one tool call may take, unless `call_timeout_seconds` says.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// Server names are parts of tool names (`mcp.NAME.TOOL`, `mcp_NAME_TOOL` for
/// the model, which allows 64 characters in all): short words.
pub const MAX_SERVER_NAME: usize = 24;

/// One `[mcp.NAME]` table, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServerConfig {
    pub transport: McpTransport,
    pub scope: McpScope,
    /// `/readyz` answers ready only once this server is up (default false:
    /// a server's state shows there but never holds the gateway back).
    pub required: bool,
    pub start_timeout: Duration,
    pub call_timeout: Duration,
    /// What every tool of the server can do, unless `tools` says (`None`: undeclared).
    pub capabilities: Option<Capabilities>,
    /// What a named tool can do (the server's own tool name, without `mcp.NAME.`).
    pub tool_capabilities: IndexMap<String, Capabilities>,
}

/// How bub reaches a server.
#[derive(Debug, Clone, PartialEq)]
pub enum McpTransport {
    /// A program bub starts, speaking MCP on its stdin and stdout. It gets
    /// `PATH`, `HOME`, `LANG` and `TMPDIR` of the gateway and its `env`,
    /// never the rest of the gateway's environment (its model keys).
    Stdio { command: String, args: Vec<String>, env: IndexMap<String, SecretValue>, cwd: Option<PathBuf> },
    /// A server at an http(s) URL, spoken to over Streamable HTTP.
    Http { url: String, headers: IndexMap<String, SecretValue> },
}

/// Where a server runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum McpScope {
    /// One for the whole gateway, started with it.
    #[default]
    Gateway,
    /// One per session environment, started in it (inside the session's
    /// sandbox when it has one, with its workspace as working directory) and
    /// stopped with it. Stdio servers only.
    Session,
}

/// A value of `env` or `headers`.
#[derive(Debug, Clone, PartialEq)]
pub enum SecretValue {
    /// Written in the file, or read from a file at load.
    Value(Secret),
    /// `{ env = "NAME" }`: the gateway's variable, read when the server starts.
    Env { variable: String, prefix: String },
}

impl SecretValue {
    /// The value, reading a variable through `lookup` (the process
    /// environment, in the binary); the error names the variable.
    pub fn resolve(&self, lookup: impl Fn(&str) -> Option<String>) -> Result<Secret, String> {
        match self {
            SecretValue::Value(secret) => Ok(secret.clone()),
            SecretValue::Env { variable, prefix } => match lookup(variable) {
                Some(value) if !value.is_empty() => Ok(Secret::new(format!("{prefix}{value}"))),
                _ => Err(format!("the environment variable {variable} is not set")),
            },
        }
    }
}

impl McpServerConfig {
    /// What `tool` (the server's name for it) can do: its `tools` entry, else
    /// the server's `capabilities`, else everything.
    pub fn capabilities_of(&self, tool: &str) -> Capabilities {
        self.tool_capabilities.get(tool).copied().or(self.capabilities).unwrap_or(Capabilities::ALL)
    }
}

// ---- the table as written ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMcpServer {
    command: Option<Spanned<String>>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: IndexMap<Spanned<String>, RawSecret>,
    cwd: Option<PathBuf>,
    url: Option<Spanned<String>>,
    #[serde(default)]
    headers: IndexMap<Spanned<String>, RawSecret>,
    #[serde(default)]
    scope: McpScope,
    #[serde(default)]
    required: bool,
    start_timeout_seconds: Option<Spanned<Seconds>>,
    call_timeout_seconds: Option<Spanned<Seconds>>,
    capabilities: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    tools: IndexMap<String, Spanned<Vec<Spanned<String>>>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawSecret {
    Text(String),
    From(RawSecretSource),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSecretSource {
    env: Option<String>,
    file: Option<PathBuf>,
    #[serde(default)]
    prefix: String,
}

impl RawMcpServer {
    /// The checked table of server `name`; errors point at the key.
    pub(super) fn into_config(self, source: &Source, name: &Spanned<String>) -> Result<McpServerConfig, ConfigError> {
        check_server_name(source, name)?;
        let error = |span: std::ops::Range<usize>, message: String| source.error(Some(span), message);
        let server = name.get_ref();
        let transport = match (self.command, self.url) {
            (Some(command), None) => {
                if command.get_ref().trim().is_empty() {
                    return Err(error(command.span(), format!("mcp server `{server}`: `command` is empty")));
                }
                if !self.headers.is_empty() {
                    return Err(error(
                        name.span(),
                        format!(
                            "mcp server `{server}`: `headers` are for `url` servers; a `command` server takes `env`"
                        ),
                    ));
                }
                McpTransport::Stdio {
                    command: command.into_inner(),
                    args: self.args,
                    env: secrets(source, server, "env", self.env)?,
                    cwd: self.cwd,
                }
            }
            (None, Some(url)) => {
                match http_url(url.get_ref()) {
                    Ok(_) => {}
                    Err(UrlError::NotHttp) => {
                        return Err(error(url.span(), format!("`{}` is not an http(s) URL", url.get_ref())));
                    }
                    Err(UrlError::NotAUrl(why)) => {
                        return Err(error(url.span(), format!("`{}` is not a URL: {why}", url.get_ref())));
                    }
                }
                if !self.args.is_empty() || !self.env.is_empty() || self.cwd.is_some() {
                    return Err(error(
                        url.span(),
                        format!("mcp server `{server}`: `args`, `env` and `cwd` are for `command` servers"),
                    ));
                }
                if self.scope == McpScope::Session {
                    return Err(error(
                        url.span(),
                        format!(
                            "mcp server `{server}`: scope = \"session\" starts a program in each session; \
                             a `url` server is not started by bub"
                        ),
                    ));
                }
                McpTransport::Http { url: url.into_inner(), headers: secrets(source, server, "headers", self.headers)? }
            }
            (Some(_), Some(url)) => {
                return Err(error(url.span(), format!("mcp server `{server}`: set `command` or `url`, not both")));
            }
            (None, None) => {
                return Err(error(
                    name.span(),
                    format!("mcp server `{server}` needs `command` (a local program) or `url` (a remote server)"),
                ));
            }
        };
        if self.scope == McpScope::Session && self.required {
            return Err(error(
                name.span(),
                format!(
                    "mcp server `{server}`: `required` holds readiness back until the server is up, and a \
                     scope = \"session\" server is only up inside sessions: drop one of the two"
                ),
            ));
        }
        let timeout = |value: Option<Spanned<Seconds>>, default: Duration| match value {
            None => Ok(default),
            Some(value) if value.get_ref().0 <= 0.0 => {
                Err(error(value.span(), format!("{} must be above 0", value.get_ref())))
            }
            Some(value) => Ok(value.get_ref().duration()),
        };
        let mut tool_capabilities = IndexMap::new();
        for (tool, list) in self.tools {
            tool_capabilities.insert(tool, capabilities(source, list)?);
        }
        Ok(McpServerConfig {
            transport,
            scope: self.scope,
            required: self.required,
            start_timeout: timeout(self.start_timeout_seconds, DEFAULT_START_TIMEOUT)?,
            call_timeout: timeout(self.call_timeout_seconds, DEFAULT_CALL_TIMEOUT)?,
            capabilities: self.capabilities.map(|list| capabilities(source, list)).transpose()?,
            tool_capabilities,
        })
    }
}

/// Server names are plain short words: they become parts of tool names.
fn check_server_name(source: &Source, name: &Spanned<String>) -> Result<(), ConfigError> {
    let text = name.get_ref();
    let plain = !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !plain || text.len() > MAX_SERVER_NAME {
        return Err(source.error(
            Some(name.span()),
            format!(
                "mcp server name `{text}`: use letters, digits, `_` or `-`, at most {MAX_SERVER_NAME} characters \
                 (it becomes part of its tools' names, `mcp.{text}.TOOL`)"
            ),
        ));
    }
    Ok(())
}

fn capabilities(source: &Source, list: Spanned<Vec<Spanned<String>>>) -> Result<Capabilities, ConfigError> {
    let mut found = Vec::new();
    for name in list.into_inner() {
        match Capability::from_name(name.get_ref()) {
            Some(capability) => found.push(capability),
            None => {
                let every: Vec<&str> = Capability::EVERY.iter().map(|c| c.name()).collect();
                return Err(source.error(
                    Some(name.span()),
                    format!("unknown capability `{}`; expected one of {}", name.get_ref(), every.join(", ")),
                ));
            }
        }
    }
    Ok(Capabilities::of(found))
}

fn secrets(
    source: &Source,
    server: &str,
    key: &str,
    raw: IndexMap<Spanned<String>, RawSecret>,
) -> Result<IndexMap<String, SecretValue>, ConfigError> {
    let mut values = IndexMap::new();
    for (name, value) in raw {
        let span = name.span();
        let failed = |why: String| {
            source.error(Some(span.clone()), format!("mcp server `{server}`: {key}.{}: {why}", name.get_ref()))
        };
        let value = match value {
            RawSecret::Text(text) => SecretValue::Value(Secret::new(text)),
            RawSecret::From(RawSecretSource { env: Some(variable), file: None, prefix }) => {
                if variable.is_empty() {
                    return Err(failed("`env` names no variable".into()));
                }
                SecretValue::Env { variable, prefix }
            }
            RawSecret::From(RawSecretSource { env: None, file: Some(file), prefix }) => {
                let text = read_secret_file(&source.path, &file).map_err(failed)?;
                SecretValue::Value(Secret::new(format!("{prefix}{text}")))
            }
            RawSecret::From(_) => {
                return Err(failed("write a string, `{ env = \"VARIABLE\" }` or `{ file = \"PATH\" }`".into()));
            }
        };
        values.insert(name.into_inner(), value);
    }
    Ok(values)
}

/// The first line of the secret file `path` (from the config's folder when relative).
fn read_secret_file(config: &Path, path: &Path) -> Result<String, String> {
    let text = super::channel::secret_file::read_secret_file(config, path)
        .map_err(|(file, why)| format!("{}: {why}", file.display()))?;
    Ok(text.lines().map(str::trim).find(|line| !line.is_empty()).unwrap_or_default().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::file::tests::{MINIMAL, error, parse};

    #[test]
    fn stdio_and_http_servers_parse_with_defaults_and_hidden_secrets() {
        let text = format!(
            "{MINIMAL}[mcp.github]\ncommand = \"npx\"\nargs = [\"-y\", \"server\"]\n\
             env = {{ TOKEN = {{ env = \"GH\" }}, MODE = \"fast\" }}\ncapabilities = [\"read\", \"network\"]\n\
             tools = {{ create_issue = [\"write\", \"network\"] }}\n\
             [mcp.docs]\nurl = \"https://docs.example.com/mcp\"\nheaders = {{ Authorization = \"Bearer xyz\" }}\n\
             required = true\ncall_timeout_seconds = 5\n"
        );
        let config = parse(&text).unwrap();
        let github = &config.mcp["github"];
        let McpTransport::Stdio { command, args, env, .. } = &github.transport else { panic!("stdio") };
        assert_eq!((command.as_str(), args.len()), ("npx", 2));
        assert_eq!(env["TOKEN"], SecretValue::Env { variable: "GH".into(), prefix: String::new() });
        assert_eq!(env["TOKEN"].resolve(|_| Some("t0k".into())).unwrap().expose(), "t0k");
        assert_eq!(env["TOKEN"].resolve(|_| None).unwrap_err(), "the environment variable GH is not set");
        assert_eq!((github.start_timeout, github.call_timeout), (DEFAULT_START_TIMEOUT, DEFAULT_CALL_TIMEOUT));
        assert_eq!(github.capabilities_of("search").to_string(), "read, network");
        assert_eq!(github.capabilities_of("create_issue").to_string(), "write, network");
        let docs = &config.mcp["docs"];
        assert!(docs.required);
        assert_eq!(docs.call_timeout, Duration::from_secs(5));
        assert_eq!(docs.capabilities_of("anything"), Capabilities::ALL);
        assert!(!format!("{config:?}").contains("xyz"), "header values never print");
    }

    #[test]
    fn mistakes_are_refused_at_their_key() {
        let server = |body: &str| error(&format!("{MINIMAL}[mcp.s]\n{body}\n"));
        assert_eq!(
            server("args = []"),
            "bub.toml:4:6: mcp server `s` needs `command` (a local program) or `url` (a remote server)"
        );
        assert_eq!(
            server("command = \"x\"\nurl = \"http://h/\""),
            "bub.toml:6:7: mcp server `s`: set `command` or `url`, not both"
        );
        assert_eq!(server("url = \"ftp://h/\""), "bub.toml:5:7: `ftp://h/` is not an http(s) URL");
        assert_eq!(
            server("command = \"x\"\ncapabilities = [\"root\"]"),
            "bub.toml:6:17: unknown capability `root`; expected one of read, write, exec, network, session"
        );
        assert_eq!(
            server("url = \"http://h/\"\nscope = \"session\"").split(':').nth(3).unwrap().trim(),
            "mcp server `s`"
        );
        assert_eq!(server("command = \"x\"\ncall_timeout_seconds = 0"), "bub.toml:6:24: 0 must be above 0");
        assert!(server("command = \"x\"\nscope = \"session\"\nrequired = true").contains("drop one of the two"));
        assert_eq!(
            server("command = \"x\"\nenv = { K = { file = \"/nonexistent/k\" } }").split(": ").nth(1).unwrap(),
            "mcp server `s`"
        );
        assert_eq!(
            server("command = \"x\"\ncomand = 1"),
            "bub.toml:6:1: unknown key `comand`; did you mean `command`?"
        );
        let text = format!("{MINIMAL}[mcp.\"a.b\"]\ncommand = \"x\"\n");
        assert!(error(&text).starts_with("bub.toml:4:6: mcp server name `a.b`: use letters"), "{}", error(&text));
    }

    #[test]
    fn a_secret_file_is_read_at_load_with_its_prefix() {
        let folder = tempfile::tempdir().unwrap();
        std::fs::write(folder.path().join("docs"), "s3cr3t\n").unwrap();
        let text = format!(
            "{MINIMAL}[mcp.docs]\nurl = \"http://127.0.0.1:9/mcp\"\n\
             headers = {{ Authorization = {{ file = \"docs\", prefix = \"Bearer \" }} }}\n"
        );
        let config = GatewayConfig::parse(&text, folder.path().join("bub.toml")).unwrap();
        let McpTransport::Http { headers, .. } = &config.mcp["docs"].transport else { panic!("http") };
        assert_eq!(headers["Authorization"].resolve(|_| None).unwrap().expose(), "Bearer s3cr3t");
    }

    use crate::config::GatewayConfig;
}
