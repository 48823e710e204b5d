//! The whole file ([`GatewayConfig`]): `[http]`, `[agent]`, `[telemetry]`, `[policy.defaults]`, `[mcp.NAME]`, `[admin]` and one
//! `[channels.NAME]` table per channel instance, each with an optional
//! `[channels.NAME.policy]` and `[channels.NAME.chats."ID".policy]`.
//!
//! Everything is checked once, at load: unknown keys (with a suggestion),
//! values of the wrong type, enum values (listing the allowed ones), rates,
//! tool globs, user names (`<channel>:<user id>` naming a configured channel),
//! the keys each channel kind needs. Tool patterns are checked against the
//! tools the agent really has with [`GatewayConfig::validate_tools`], because
//! only the binary knows them. Every error is `FILE:LINE:COL: message`.
//!
//! Secrets and tokens live in the file (mode 0600 is the admin's job); they
//! are [`Secret`]s so they never show up in logs or `Debug` output.

use super::admin::{AdminConfig, RawAdmin};
use super::agent::AgentConfig;
use super::channel::{ChannelConfig, ChannelKind, RawChannel, WebhookConfig, check_channel_name};
use super::error::{ConfigError, Source, closest, friendly_message};
use super::http::HttpConfig;
use super::layer::{Layer, PolicyLayer};
use super::mcp::{McpServerConfig, RawMcpServer};
use super::sandbox::SandboxConfig;
use super::store::StoreConfig;
use super::telemetry::TelemetryConfig;
use super::value::UserPattern;
use bub_channel::Secret;
use indexmap::IndexMap;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toml::Spanned;

/// The whole gateway config.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    pub http: HttpConfig,
    /// `[agent]`: the context window and compaction of the gateway's agent.
    pub agent: AgentConfig,
    /// `[sandbox]`: the sandbox's resource limits.
    pub sandbox: SandboxConfig,
    /// `[store]`: SQLite in the home, or a PostgreSQL database replicas share.
    pub store: StoreConfig,
    /// `[telemetry]`: OpenTelemetry traces (read at start; a reload keeps the first).
    pub telemetry: TelemetryConfig,
    /// `[policy.defaults]`: the first policy layer, for every channel and chat.
    pub defaults: PolicyLayer,
    /// Channel instances by name, in file order. The name is what `Inbound::channel`
    /// carries and what user names start with (`hooks:alice`).
    pub channels: IndexMap<String, ChannelConfig>,
    /// `[mcp.NAME]`: MCP servers whose tools the agent gets, by name, in file order.
    pub mcp: IndexMap<String, McpServerConfig>,
    /// `[admin]`: the admin console; `None` (no section): off.
    pub admin: Option<AdminConfig>,
    /// The file's text, for positions in later checks ([`GatewayConfig::validate_tools`]).
    source: Option<Arc<Source>>,
}

/// `[channels.NAME.chats."ID"]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatConfig {
    /// The third and last layer.
    #[serde(default)]
    pub policy: PolicyLayer,
}

// ---- the file as written, before the per-kind checks ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    http: HttpConfig,
    #[serde(default)]
    agent: AgentConfig,
    #[serde(default)]
    sandbox: SandboxConfig,
    #[serde(default)]
    store: StoreConfig,
    #[serde(default)]
    telemetry: TelemetryConfig,
    #[serde(default)]
    policy: RawPolicySection,
    #[serde(default)]
    channels: IndexMap<Spanned<String>, RawChannel>,
    #[serde(default)]
    mcp: IndexMap<Spanned<String>, RawMcpServer>,
    admin: Option<RawAdmin>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicySection {
    #[serde(default)]
    defaults: PolicyLayer,
}

impl GatewayConfig {
    /// Reads and checks a config file (tool patterns are checked separately,
    /// by [`GatewayConfig::validate_tools`]).
    pub fn load(path: impl AsRef<Path>) -> Result<GatewayConfig, ConfigError> {
        let path = path.as_ref();
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        GatewayConfig::parse(&text, path)
    }

    /// [`GatewayConfig::load`] plus [`GatewayConfig::validate_tools`]: what the
    /// gateway, hot reload and `bub policy check` use.
    pub fn load_checked(path: impl AsRef<Path>, known_tools: &[String]) -> Result<GatewayConfig, ConfigError> {
        let config = GatewayConfig::load(path)?;
        config.validate_tools(known_tools)?;
        Ok(config)
    }

    /// Parses and checks config text; `path` only names it in errors.
    pub fn parse(text: &str, path: impl AsRef<Path>) -> Result<GatewayConfig, ConfigError> {
        let source = Arc::new(Source { path: path.as_ref().to_path_buf(), text: text.to_string() });
        let raw: RawConfig =
            toml::from_str(text).map_err(|error| source.error(error.span(), friendly_message(error.message())))?;
        let mut channels = IndexMap::new();
        for (name, channel) in raw.channels {
            check_channel_name(&source, &name)?;
            let channel = channel.into_config(&source, name.get_ref())?;
            channels.insert(name.into_inner(), channel);
        }
        let mut mcp = IndexMap::new();
        for (name, server) in raw.mcp {
            let server = server.into_config(&source, &name)?;
            mcp.insert(name.into_inner(), server);
        }
        let admin = raw.admin.map(|admin| admin.into_config(&source)).transpose()?;
        let config = GatewayConfig {
            http: raw.http,
            agent: raw.agent,
            sandbox: raw.sandbox,
            store: raw.store,
            telemetry: raw.telemetry,
            defaults: raw.policy.defaults,
            channels,
            mcp,
            admin,
            source: Some(source),
        };
        config.check_layers()?;
        config.store.check().map_err(|message| config.error(None, message))?;
        Ok(config)
    }

    /// The config the gateway starts with when there is no file: one webhook
    /// channel named `webhook` with this secret, on 127.0.0.1:8080, replies on
    /// the request (no callback), and the built-in policy defaults.
    pub fn default_webhook(secret: String) -> GatewayConfig {
        let webhook = WebhookConfig::with_secret(Secret::new(secret));
        let channel = ChannelConfig {
            kind: ChannelKind::Webhook(webhook),
            policy: PolicyLayer::default(),
            chats: IndexMap::new(),
        };
        GatewayConfig {
            http: HttpConfig::default(),
            agent: AgentConfig::default(),
            sandbox: SandboxConfig::default(),
            store: StoreConfig::default(),
            telemetry: TelemetryConfig::default(),
            defaults: PolicyLayer::default(),
            channels: IndexMap::from([("webhook".to_string(), channel)]),
            mcp: IndexMap::new(),
            admin: None,
            source: None,
        }
    }

    /// The file this config came from, if any.
    pub fn path(&self) -> Option<&Path> {
        self.source.as_deref().map(|s| s.path.as_path())
    }

    /// Every policy layer with its place in the file (`policy.defaults`,
    /// `channels.hooks.policy`, `channels.hooks.chats."room-1".policy`).
    pub fn layers(&self) -> Vec<(Layer, &PolicyLayer)> {
        let mut layers = vec![(Layer::Defaults, &self.defaults)];
        for (name, channel) in &self.channels {
            layers.push((Layer::Channel(name.clone()), &channel.policy));
            for (chat, config) in &channel.chats {
                layers.push((Layer::Chat { channel: name.clone(), chat: chat.clone() }, &config.policy));
            }
        }
        layers
    }

    /// Checks that every tool pattern (`allowed_tools`, `denied_tools`,
    /// operators' `commands`) matches at least one of `known` (registry
    /// names): a pattern that matches nothing is a typo that would silently
    /// deny (or fail to deny) a tool.
    pub fn validate_tools(&self, known: &[String]) -> Result<(), ConfigError> {
        let mut candidates: Vec<String> = known.to_vec();
        // An MCP server's tools are known once it runs: any name under a
        // declared server passes (`mcp.github.*`, `mcp.github.create_issue`).
        for server in self.mcp.keys() {
            candidates.push(format!("mcp.{server}.*"));
        }
        let declared_server = |pattern: &str| {
            pattern
                .strip_prefix("mcp.")
                .and_then(|rest| rest.split_once('.'))
                .is_some_and(|(server, tool)| !tool.is_empty() && self.mcp.contains_key(server))
                || (pattern == "mcp.*" && !self.mcp.is_empty())
        };
        for name in known {
            if let Some((family, _)) = name.split_once('.') {
                let glob = format!("{family}.*");
                if !candidates.contains(&glob) {
                    candidates.push(glob);
                }
            }
        }
        for (_, layer) in self.layers() {
            let operator_commands =
                layer.operators.iter().flatten().flat_map(|op| op.get_ref().commands.iter().flatten());
            let patterns = layer
                .allowed_tools
                .iter()
                .flatten()
                .chain(layer.denied_tools.iter().flatten())
                .chain(layer.allow_with_untrusted_context.iter().flatten())
                .chain(operator_commands);
            for pattern in patterns {
                // A capability is checked when parsed; it may match no tool yet.
                if pattern.get_ref().capability().is_some()
                    || declared_server(pattern.get_ref().as_str())
                    || known.iter().any(|tool| pattern.get_ref().matches_name(tool))
                {
                    continue;
                }
                let text = pattern.get_ref().as_str();
                let hint = match closest(text, candidates.iter().map(String::as_str)) {
                    Some(close) => format!("; did you mean `{close}`?"),
                    None => "; no tool has such a name (see `bub tools`)".to_string(),
                };
                return Err(self.error(Some(pattern.span()), format!("unknown tool pattern `{text}`{hint}")));
            }
        }
        Ok(())
    }

    /// `FILE:LINE:COL: warning: message` for a place in the file (the
    /// position rendering of [`ConfigError`], for findings that are not errors).
    pub fn warning(&self, span: std::ops::Range<usize>, message: String) -> String {
        match &self.source {
            Some(source) => {
                let (line, column) = super::error::line_column(&source.text, span.start);
                format!("{}:{line}:{column}: warning: {message}", source.path.display())
            }
            None => format!("(built-in config): warning: {message}"),
        }
    }

    fn error(&self, span: Option<std::ops::Range<usize>>, message: String) -> ConfigError {
        match &self.source {
            Some(source) => source.error(span, message),
            None => ConfigError::Invalid { path: PathBuf::from("(built-in config)"), location: None, message },
        }
    }

    /// Checks across layers: users are well-formed and name configured
    /// channels, models parse.
    fn check_layers(&self) -> Result<(), ConfigError> {
        let channel_names: Vec<&str> = self.channels.keys().map(String::as_str).collect();
        for (_, layer) in self.layers() {
            let operators = layer.operators.iter().flatten().map(|op| (op.span(), &op.get_ref().user));
            let users = layer.allow_users.iter().flatten().map(|u| (u.span(), u.get_ref())).chain(operators);
            for (span, user) in users {
                if let Err(message) = UserPattern::new(user.as_str()) {
                    return Err(self.error(Some(span), message));
                }
                let Some(channel) = user.channel() else { continue };
                if !channel_names.contains(&channel) {
                    let hint = match closest(channel, channel_names.iter().copied()) {
                        Some(close) => format!("; did you mean `{close}`?"),
                        None => format!("; channels here: {}", channel_names.join(", ")),
                    };
                    return Err(self.error(Some(span), format!("user `{user}` names no channel `{channel}`{hint}")));
                }
            }
            if let Some(model) = &layer.model
                && let Err(error) = crate::model::ModelSpec::parse(model.get_ref())
            {
                return Err(self.error(Some(model.span()), format!("model: {error}")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The smallest valid file: one webhook channel. Also used by the
    /// channel kinds' tests (`config/channel/mod.rs`).
    pub(in crate::config) const MINIMAL: &str = "[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"s3cret\"]\n";

    pub(in crate::config) fn parse(text: &str) -> Result<GatewayConfig, ConfigError> {
        GatewayConfig::parse(text, "bub.toml")
    }

    /// The error `text` is refused with, as the user reads it.
    pub(in crate::config) fn error(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn a_minimal_webhook_config_parses_with_defaults() {
        let config = parse(MINIMAL).unwrap();
        assert_eq!(config.http.listen.to_string(), "127.0.0.1:8080");
        let ChannelKind::Webhook(hook) = &config.channels["hooks"].kind else { panic!("a webhook") };
        assert_eq!(hook.secrets, vec![Secret::new("s3cret")]);
        assert_eq!(hook.callback_secret().map(Secret::expose), Some("s3cret"));
        assert_eq!(format!("{:?}", hook.secrets), "[Secret(***)]", "secrets never print");
    }

    #[test]
    fn unknown_keys_point_at_the_key_with_a_suggestion() {
        let text = format!("{MINIMAL}\n[policy.defaults]\nallowed_tool = [\"*\"]\n");
        assert_eq!(error(&text), "bub.toml:6:1: unknown key `allowed_tool`; did you mean `allowed_tools`?");
        let text = "[http]\nlisten = \"127.0.0.1:80\"\nlisen = 1\n";
        assert_eq!(error(text), "bub.toml:3:1: unknown key `lisen`; did you mean `listen`?");
    }

    #[test]
    fn http_limits_default_and_must_be_above_zero() {
        let limits = parse(MINIMAL).unwrap().http.limits();
        assert_eq!(limits, crate::config::ServeLimits::default());
        let text = format!("[http]\nread_timeout_seconds = 2.5\nmax_connections = 8\n{MINIMAL}");
        let limits = parse(&text).unwrap().http.limits();
        assert_eq!((limits.read_timeout.as_millis(), limits.max_connections), (2500, 8));
        let text = format!("[http]\nread_timeout_seconds = 0\n{MINIMAL}");
        assert_eq!(error(&text), "bub.toml:2:24: 0 must be above 0");
        let text = format!("[http]\nmax_connections = 0\n{MINIMAL}");
        assert_eq!(error(&text), "bub.toml:2:19: 0 must be above 0");
        let text = format!("[http]\nmax_connections_per_address = 4\n{MINIMAL}");
        assert_eq!(parse(&text).unwrap().http.limits().max_connections_per_address, 4);
        let text = format!("[http]\nmax_connections = 8\nmax_connections_per_address = 0\n{MINIMAL}");
        assert_eq!(error(&text), "bub.toml:3:31: 0 must be above 0");
        let text = format!("[http]\nmax_connections_per_adress = 4\n{MINIMAL}");
        assert_eq!(
            error(&text),
            "bub.toml:2:1: unknown key `max_connections_per_adress`; did you mean `max_connections_per_address`?"
        );
    }

    #[test]
    fn toml_syntax_errors_have_a_position_too() {
        assert_eq!(error("[http\nlisten = 1\n"), "bub.toml:1:6: unclosed table, expected `]`");
        let text = format!("{MINIMAL}[channels.hooks]\nkind = \"webhook\"\n");
        assert_eq!(error(&text), "bub.toml:4:11: duplicate key");
    }

    #[test]
    fn bad_enum_values_list_the_allowed_ones() {
        let text = format!("{MINIMAL}[channels.hooks.policy]\nbusy = \"wait\"\n");
        assert_eq!(error(&text), "bub.toml:5:8: unknown value `wait`; expected one of steer, queue, drop");
        let text = format!("{MINIMAL}[channels.hooks.policy]\non_edit = \"answer\"\n");
        assert_eq!(error(&text), "bub.toml:5:11: unknown value `answer`; expected one of record, rerun");
        let text = "[channels.x]\nkind = \"slack\"\n";
        assert_eq!(error(text), "bub.toml:2:8: unknown value `slack`; expected one of webhook, telegram, discord");
    }

    #[test]
    fn rates_users_and_models_are_checked_where_they_are_written() {
        let text = format!("{MINIMAL}[policy.defaults]\nrate = {{ inbound_per_user = \"20/day\" }}\n");
        assert_eq!(
            error(&text),
            "bub.toml:5:29: invalid rate `20/day`: the unit is not s, min or h; write N/s, N/min or N/h (like `20/min`)"
        );
        let text = format!("{MINIMAL}[policy.defaults]\nallow_users = [\"hook:alice\"]\n");
        assert_eq!(error(&text), "bub.toml:5:16: user `hook:alice` names no channel `hook`; did you mean `hooks`?");
        let text = format!("{MINIMAL}[policy.defaults]\nallow_users = [\"alice\"]\n");
        assert!(
            error(&text).starts_with("bub.toml:5:16: user `alice` is not `<channel>:<user id>`"),
            "{}",
            error(&text)
        );
        let text = format!("{MINIMAL}[policy.defaults]\noperators = [{{ user = \"hooks:a\", comands = [] }}]\n");
        assert_eq!(error(&text), "bub.toml:5:14: unknown key `comands`; did you mean `commands`?");
        let text = format!("{MINIMAL}[policy.defaults]\nmodel = \"gpt-4o\"\n");
        assert!(error(&text).starts_with("bub.toml:5:9: model: "), "{}", error(&text));
    }

    #[test]
    fn tool_patterns_must_match_a_known_tool() {
        let known: Vec<String> = ["fs.read", "fs.write", "bash", "tape.info"].map(String::from).to_vec();
        let text =
            format!("{MINIMAL}[channels.hooks.chats.\"room-1\".policy]\ndenied_tools = [\"bash\", \"fs.reed\"]\n");
        let config = parse(&text).unwrap();
        let error = config.validate_tools(&known).unwrap_err();
        assert_eq!(error.to_string(), "bub.toml:5:25: unknown tool pattern `fs.reed`; did you mean `fs.read`?");
        let text = format!("{MINIMAL}[policy.defaults]\nallowed_tools = [\"fz.*\"]\n");
        let error = parse(&text).unwrap().validate_tools(&known).unwrap_err();
        assert_eq!(error.message(), "unknown tool pattern `fz.*`; did you mean `fs.*`?");
        let text =
            format!("{MINIMAL}[policy.defaults]\noperators = [{{ user = \"hooks:a\", commands = [\"zzz\"] }}]\n");
        let error = parse(&text).unwrap().validate_tools(&known).unwrap_err();
        assert_eq!(error.message(), "unknown tool pattern `zzz`; no tool has such a name (see `bub tools`)");
        let text = format!("{MINIMAL}[policy.defaults]\nallowed_tools = [\"*\", \"fs.*\", \"tape.{{info,search}}\"]\n");
        parse(&text).unwrap().validate_tools(&known).unwrap();
    }

    /// An MCP server's tools are listed once it runs, so any name under a
    /// declared server passes; a misspelt server does not.
    #[test]
    fn tool_patterns_may_name_the_tools_of_a_declared_mcp_server() {
        let known: Vec<String> = ["fs.read", "bash"].map(String::from).to_vec();
        let servers = "[mcp.github]\ncommand = \"gh-mcp\"\n";
        let text = format!(
            "{MINIMAL}{servers}[policy.defaults]\nallowed_tools = [\"mcp.github.*\", \"mcp.github.create_issue\", \"mcp.*\"]\n"
        );
        parse(&text).unwrap().validate_tools(&known).unwrap();
        let text = format!("{MINIMAL}{servers}[policy.defaults]\ndenied_tools = [\"mcp.gihtub.*\"]\n");
        let error = parse(&text).unwrap().validate_tools(&known).unwrap_err();
        assert_eq!(error.message(), "unknown tool pattern `mcp.gihtub.*`; did you mean `mcp.github.*`?");
        let text = format!("{MINIMAL}[policy.defaults]\ndenied_tools = [\"mcp.*\"]\n");
        assert!(parse(&text).unwrap().validate_tools(&known).is_err(), "no server is declared");
    }

    #[test]
    fn user_patterns_match_one_user_a_channel_or_everyone() {
        let user = |text| UserPattern::new(text).unwrap();
        assert!(user("tg:42").matches("tg:42") && !user("tg:42").matches("tg:421"));
        assert!(user("tg:*").matches("tg:7") && !user("tg:*").matches("hooks:7"));
        assert!(user("*").matches("hooks:alice"));
    }
}
