//! [`EffectivePolicy`]: the policy of one chat, every key resolved through
//! the layers (built-in default → `policy.defaults` → channel → chat) and
//! remembering which layer set it, so `,policy show` and `,policy explain`
//! can say where a value comes from and where to change it.
//!
//! # Tool rules, in the order they are applied
//! 1. A comma command (`as_command`) needs its user to be an operator allowed
//!    that command ([`EffectivePolicy::may_run_command`]).
//! 2. A tool matched by `denied_tools` is denied (deny wins over allow).
//! 3. A tool matched by no pattern of `allowed_tools` is denied
//!    (built-in default: `["*"]`).
//! 4. In shared chats (groups, threads), the shell (`bash`, `bash.output`,
//!    `bash.kill`), file writes (`fs.write`, `fs.edit`) and `run_code` are
//!    denied unless `allowed_tools` lists them **by their exact name** (in
//!    any layer that is in effect): a glob such as `*`, `fs.*` or `bash*` never
//!    opens them, so "allow everything" in defaults cannot hand a shell to a
//!    group by accident. Direct chats follow rules 1–3 only.

use super::config::{BusyRule, GatewayConfig, Operator, PolicyLayer, Seconds, SessionScope, UserPattern};
use super::pattern::ToolPattern;
use super::rate::Rate;
use std::fmt;

/// Tools a shared chat gets only when a policy names them exactly (rule 4).
pub const SHARED_CHAT_GUARDED: &[&str] = &["bash", "bash.output", "bash.kill", "fs.write", "fs.edit", "run_code"];

/// Where a value was set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layer {
    /// Nothing set it: bub's built-in default.
    BuiltIn,
    /// `[policy.defaults]`.
    Defaults,
    /// `[channels.NAME.policy]`.
    Channel(String),
    /// `[channels.NAME.chats."ID".policy]`.
    Chat { channel: String, chat: String },
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Layer::BuiltIn => f.write_str("built-in default"),
            Layer::Defaults => f.write_str("policy.defaults"),
            Layer::Channel(channel) => write!(f, "channels.{channel}.policy"),
            Layer::Chat { channel, chat } => write!(f, "channels.{channel}.chats.{chat:?}.policy"),
        }
    }
}

/// A resolved value and the layer that set it.
#[derive(Debug, Clone, PartialEq)]
pub struct Sourced<T> {
    pub value: T,
    pub layer: Layer,
}

impl<T> Sourced<T> {
    /// Where `key` was set, as an admin would look for it:
    /// `channels.hooks.policy.denied_tools`, or `the built-in default`.
    pub fn origin(&self, key: &str) -> String {
        match self.layer {
            Layer::BuiltIn => "the built-in default".to_string(),
            ref layer => format!("{layer}.{key}"),
        }
    }
}

/// A refusal, worded for the person who was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Denial {
    pub message: String,
}

impl Denial {
    fn new(message: String) -> Denial {
        Denial { message }
    }
}

/// Whether a tool may run, and the sentence that says which rule decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    pub rule: String,
}

impl Verdict {
    fn allow(rule: String) -> Verdict {
        Verdict { allowed: true, rule }
    }
    fn deny(rule: String) -> Verdict {
        Verdict { allowed: false, rule }
    }
}

/// The policy in force in one chat of one channel.
#[derive(Debug, Clone, PartialEq)]
pub struct EffectivePolicy {
    pub channel: String,
    pub chat_id: String,
    /// Who may talk to the bot (`None`: anyone).
    pub allow_users: Sourced<Option<Vec<UserPattern>>>,
    /// Which chats the bot answers in (`None`: any).
    pub allow_chats: Sourced<Option<Vec<String>>>,
    /// Who may run comma commands (`None`: anyone admitted).
    pub operators: Sourced<Option<Vec<Operator>>>,
    /// Built-in default `["*"]`.
    pub allowed_tools: Sourced<Vec<ToolPattern>>,
    /// Built-in default `[]`.
    pub denied_tools: Sourced<Vec<ToolPattern>>,
    /// A group message mentioning the bot is addressed (default true).
    pub address_by_mention: Sourced<bool>,
    /// A reply to one of the bot's messages is addressed (default true).
    pub address_by_reply: Sourced<bool>,
    /// A group message containing one of these words is addressed (default none).
    pub address_keywords: Sourced<Vec<String>>,
    pub session_scope: Sourced<SessionScope>,
    pub busy: Sourced<BusyRule>,
    /// `None`: the channel decides (bursty platforms debounce, webhooks do not).
    pub debounce_enabled: Sourced<Option<bool>>,
    /// A turn starts after this long without a new message (default 1 s).
    pub debounce_quiet: Sourced<Seconds>,
    /// … or after this long since the first message, at the latest (default 10 s).
    pub debounce_max_wait: Sourced<Seconds>,
    /// Debounce only while the chat was active this recently (default 60 s).
    pub debounce_active_window: Sourced<Seconds>,
    /// `None`: no policy limit (platform limits still apply).
    pub inbound_per_user: Sourced<Option<Rate>>,
    pub outbound_per_chat: Sourced<Option<Rate>>,
    pub outbound_per_channel: Sourced<Option<Rate>>,
    /// `provider:model`; `None`: the agent's default.
    pub model: Sourced<Option<String>>,
    /// File tools and `cwd` stay inside the session's workspace (default true:
    /// a chat's agent should not wander the host unless the admin says so).
    pub confine_fs: Sourced<bool>,
}

/// The built-in `allowed_tools = ["*"]`, compiled once.
fn any_tool() -> ToolPattern {
    static ANY: std::sync::OnceLock<ToolPattern> = std::sync::OnceLock::new();
    ANY.get_or_init(|| ToolPattern::new("*").expect("`*` is a valid glob")).clone()
}

/// The layers that apply to one chat, lowest first.
fn applicable(config: &GatewayConfig, channel: &str, chat_id: &str) -> Vec<(Layer, PolicyLayer)> {
    let mut layers = vec![(Layer::Defaults, config.defaults.clone())];
    if let Some(channel_config) = config.channels.get(channel) {
        layers.push((Layer::Channel(channel.to_string()), channel_config.policy.clone()));
        if let Some(chat) = channel_config.chats.get(chat_id) {
            let layer = Layer::Chat { channel: channel.to_string(), chat: chat_id.to_string() };
            layers.push((layer, chat.policy.clone()));
        }
    }
    layers
}

/// The value of the highest layer that sets it, else `default`.
fn resolve<T>(layers: &[(Layer, PolicyLayer)], default: T, get: impl Fn(&PolicyLayer) -> Option<T>) -> Sourced<T> {
    layers
        .iter()
        .rev()
        .find_map(|(layer, policy)| get(policy).map(|value| Sourced { value, layer: layer.clone() }))
        .unwrap_or(Sourced { value: default, layer: Layer::BuiltIn })
}

impl GatewayConfig {
    /// The policy of `chat_id` on `channel`. An unknown channel or chat gets
    /// the layers that exist (at least `policy.defaults`).
    pub fn effective(&self, channel: &str, chat_id: &str) -> EffectivePolicy {
        let layers = applicable(self, channel, chat_id);
        let l = layers.as_slice();
        let patterns = |list: &Option<Vec<toml::Spanned<ToolPattern>>>| {
            list.as_ref().map(|list| list.iter().map(|p| p.get_ref().clone()).collect::<Vec<_>>())
        };
        EffectivePolicy {
            channel: channel.to_string(),
            chat_id: chat_id.to_string(),
            allow_users: resolve(l, None, |p| {
                p.allow_users.as_ref().map(|users| Some(users.iter().map(|u| u.get_ref().clone()).collect()))
            }),
            allow_chats: resolve(l, None, |p| p.allow_chats.clone().map(Some)),
            operators: resolve(l, None, |p| {
                p.operators.as_ref().map(|ops| Some(ops.iter().map(|o| o.get_ref().clone()).collect()))
            }),
            allowed_tools: resolve(l, vec![any_tool()], |p| patterns(&p.allowed_tools)),
            denied_tools: resolve(l, Vec::new(), |p| patterns(&p.denied_tools)),
            address_by_mention: resolve(l, true, |p| p.addressing.as_ref()?.mention),
            address_by_reply: resolve(l, true, |p| p.addressing.as_ref()?.reply),
            address_keywords: resolve(l, Vec::new(), |p| p.addressing.as_ref()?.keywords.clone()),
            session_scope: resolve(l, SessionScope::default(), |p| p.session_scope),
            busy: resolve(l, BusyRule::default(), |p| p.busy),
            debounce_enabled: resolve(l, None, |p| p.debounce.as_ref()?.enabled.map(Some)),
            debounce_quiet: resolve(l, Seconds(1.0), |p| p.debounce.as_ref()?.quiet_seconds),
            debounce_max_wait: resolve(l, Seconds(10.0), |p| p.debounce.as_ref()?.max_wait_seconds),
            debounce_active_window: resolve(l, Seconds(60.0), |p| p.debounce.as_ref()?.active_window_seconds),
            inbound_per_user: resolve(l, None, |p| p.rate.as_ref()?.inbound_per_user.map(Some)),
            outbound_per_chat: resolve(l, None, |p| p.rate.as_ref()?.outbound_per_chat.map(Some)),
            outbound_per_channel: resolve(l, None, |p| p.rate.as_ref()?.outbound_per_channel.map(Some)),
            model: resolve(l, None, |p| p.model.as_ref().map(|m| Some(m.get_ref().clone()))),
            confine_fs: resolve(l, true, |p| p.confine_fs),
        }
    }
}

impl EffectivePolicy {
    /// The most specific layer of this chat, where an admin would add an
    /// exception: `channels.hooks.chats."room-1".policy`.
    pub fn chat_layer(&self) -> Layer {
        Layer::Chat { channel: self.channel.clone(), chat: self.chat_id.clone() }
    }

    /// May `user` (`<channel>:<id>`) talk to the bot here?
    pub fn admits_user(&self, user: &str) -> Result<(), Denial> {
        match &self.allow_users.value {
            Some(users) if !users.iter().any(|u| u.matches(user)) => Err(Denial::new(format!(
                "{user} may not talk to the bot here: not in {}",
                self.allow_users.origin("allow_users")
            ))),
            _ => Ok(()),
        }
    }

    /// Does the bot answer in this chat at all?
    pub fn admits_chat(&self, chat_id: &str) -> Result<(), Denial> {
        match &self.allow_chats.value {
            Some(chats) if !chats.iter().any(|c| c == chat_id || c == "*") => Err(Denial::new(format!(
                "the bot does not answer in chat {chat_id}: not in {}",
                self.allow_chats.origin("allow_chats")
            ))),
            _ => Ok(()),
        }
    }

    /// Is a group message addressed to the bot? Direct chats always are; this
    /// is for shared ones. Keywords match whole words, ignoring case.
    pub fn is_addressed(&self, text: &str, mention: bool, reply_to_bot: bool) -> bool {
        if (mention && self.address_by_mention.value) || (reply_to_bot && self.address_by_reply.value) {
            return true;
        }
        let words: Vec<String> =
            text.split(|c: char| !c.is_alphanumeric() && c != '_').map(str::to_lowercase).collect();
        self.address_keywords.value.iter().any(|k| words.contains(&k.to_lowercase()))
    }

    /// May `user` run the command tool `command` (`bash` for the shell
    /// fallback)? Only the operators rule; the tool rules come on top.
    pub fn may_run_command(&self, user: &str, command: &str) -> Result<(), Denial> {
        let Some(operators) = &self.operators.value else { return Ok(()) };
        let origin = self.operators.origin("operators");
        let mine: Vec<&Operator> = operators.iter().filter(|op| op.user.matches(user)).collect();
        if mine.is_empty() {
            let who = if user.is_empty() { "this user" } else { user };
            return Err(Denial::new(format!("{who} is not an operator here: commands are limited to {origin}")));
        }
        let allowed = |op: &&Operator| match &op.commands {
            None => true,
            Some(patterns) => patterns.iter().any(|p| p.get_ref().matches(command)),
        };
        if mine.iter().any(allowed) {
            return Ok(());
        }
        let theirs: Vec<String> =
            mine.iter().flat_map(|op| op.commands.iter().flatten().map(|p| format!("`{}`", p.get_ref()))).collect();
        Err(Denial::new(format!(
            "{user} may not run the {command} command here: their commands in {origin} are {}",
            theirs.join(", ")
        )))
    }

    /// May `tool` run? `user` is who asked (for commands), `shared_chat` is a
    /// group or thread, `as_command` a comma command. See the module docs for
    /// the rules and their order.
    pub fn tool_verdict(&self, tool: &str, user: Option<&str>, shared_chat: bool, as_command: bool) -> Verdict {
        if as_command && let Err(denial) = self.may_run_command(user.unwrap_or_default(), tool) {
            return Verdict::deny(denial.message);
        }
        if let Some(pattern) = self.denied_tools.value.iter().find(|p| p.matches(tool)) {
            let origin = self.denied_tools.origin("denied_tools");
            return Verdict::deny(format!("{tool} is denied here by `{pattern}` in {origin}"));
        }
        let origin = self.allowed_tools.origin("allowed_tools");
        let allowing: Vec<&ToolPattern> = self.allowed_tools.value.iter().filter(|p| p.matches(tool)).collect();
        let Some(first) = allowing.first() else {
            return Verdict::deny(format!("{tool} is not allowed here: no pattern in {origin} matches it"));
        };
        if shared_chat && SHARED_CHAT_GUARDED.contains(&tool) {
            return match allowing.iter().find(|p| p.is_exact()) {
                Some(exact) => {
                    Verdict::allow(format!("{tool} is allowed in group chats here by `{exact}` in {origin}"))
                }
                None => Verdict::deny(format!(
                    "{tool} is denied in group chats here: no policy allows it by name \
                     (add \"{tool}\" to {}.allowed_tools)",
                    self.chat_layer()
                )),
            };
        }
        Verdict::allow(format!("{tool} is allowed here by `{first}` in {origin}"))
    }

    /// The tools the model may see here, in the order given.
    pub fn offered_tools(&self, all_tool_names: &[String], shared_chat: bool) -> Vec<String> {
        all_tool_names
            .iter()
            .filter(|name| self.tool_verdict(name, None, shared_chat, false).allowed)
            .cloned()
            .collect()
    }

    /// Every key with its value and the layer that set it, one per line, for
    /// `,policy show`.
    pub fn describe(&self) -> String {
        fn list<T: fmt::Display>(items: &[T]) -> String {
            let items: Vec<String> = items.iter().map(|i| format!("{:?}", i.to_string())).collect();
            format!("[{}]", items.join(", "))
        }
        fn opt<T: fmt::Display>(value: &Option<T>, none: &str) -> String {
            value.as_ref().map_or(none.to_string(), T::to_string)
        }
        let operators = self.operators.value.as_ref().map(|ops| {
            let ops: Vec<String> = ops
                .iter()
                .map(|op| match &op.commands {
                    None => op.user.to_string(),
                    Some(c) => {
                        let c: Vec<&ToolPattern> = c.iter().map(|p| p.get_ref()).collect();
                        format!("{} {}", op.user, list(&c))
                    }
                })
                .collect();
            ops.join("; ")
        });
        let rows: Vec<(&str, String, &Layer)> = vec![
            ("allow_users", self.allow_users.value.as_deref().map_or("anyone".into(), list), &self.allow_users.layer),
            ("allow_chats", self.allow_chats.value.as_deref().map_or("any".into(), list), &self.allow_chats.layer),
            ("operators", opt(&operators, "anyone admitted"), &self.operators.layer),
            ("allowed_tools", list(&self.allowed_tools.value), &self.allowed_tools.layer),
            ("denied_tools", list(&self.denied_tools.value), &self.denied_tools.layer),
            ("addressing.mention", self.address_by_mention.value.to_string(), &self.address_by_mention.layer),
            ("addressing.reply", self.address_by_reply.value.to_string(), &self.address_by_reply.layer),
            ("addressing.keywords", list(&self.address_keywords.value), &self.address_keywords.layer),
            ("session_scope", self.session_scope.value.to_string(), &self.session_scope.layer),
            ("busy", self.busy.value.to_string(), &self.busy.layer),
            ("debounce.enabled", opt(&self.debounce_enabled.value, "channel decides"), &self.debounce_enabled.layer),
            ("debounce.quiet_seconds", self.debounce_quiet.value.0.to_string(), &self.debounce_quiet.layer),
            ("debounce.max_wait_seconds", self.debounce_max_wait.value.0.to_string(), &self.debounce_max_wait.layer),
            (
                "debounce.active_window_seconds",
                self.debounce_active_window.value.0.to_string(),
                &self.debounce_active_window.layer,
            ),
            ("rate.inbound_per_user", opt(&self.inbound_per_user.value, "unlimited"), &self.inbound_per_user.layer),
            ("rate.outbound_per_chat", opt(&self.outbound_per_chat.value, "unlimited"), &self.outbound_per_chat.layer),
            (
                "rate.outbound_per_channel",
                opt(&self.outbound_per_channel.value, "unlimited"),
                &self.outbound_per_channel.layer,
            ),
            ("model", opt(&self.model.value, "agent default"), &self.model.layer),
            ("confine_fs", self.confine_fs.value.to_string(), &self.confine_fs.layer),
        ];
        let mut lines = vec![format!("policy for chat {:?} on channel {}:", self.chat_id, self.channel)];
        for (key, value, layer) in rows {
            lines.push(format!("  {key} = {value}  ({layer})"));
        }
        lines.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[policy.defaults]
allowed_tools = ["*"]
denied_tools = ["web.fetch"]
busy = "steer"
rate = { inbound_per_user = "20/min", outbound_per_chat = "30/min" }

[channels.hooks]
kind = "webhook"
secrets = ["s"]

[channels.hooks.policy]
denied_tools = ["tape.reset"]
rate = { outbound_per_chat = "5/s" }
operators = ["hooks:alice", { user = "hooks:bob", commands = ["tape.*", "help"] }]

[channels.hooks.chats."room-1".policy]
allowed_tools = ["*", "bash"]
busy = "drop"

[channels.hooks.chats."room-2".policy]
allowed_tools = ["fs.*", "bash*"]
"#;

    fn config() -> GatewayConfig {
        GatewayConfig::parse(FILE, "bub.toml").unwrap()
    }

    #[test]
    fn layers_merge_defaults_then_channel_then_chat_and_lists_replace() {
        let policy = config().effective("hooks", "room-1");
        assert_eq!(policy.busy.value, BusyRule::Drop);
        assert_eq!(policy.busy.origin("busy"), "channels.hooks.chats.\"room-1\".policy.busy");
        let denied: Vec<&str> = policy.denied_tools.value.iter().map(ToolPattern::as_str).collect();
        assert_eq!(denied, ["tape.reset"], "the channel's list replaces the defaults' list");
        assert_eq!(policy.denied_tools.origin("denied_tools"), "channels.hooks.policy.denied_tools");
        // table keys merge one by one
        assert_eq!(policy.inbound_per_user.value.map(|r| r.to_string()).as_deref(), Some("20/min"));
        assert_eq!(policy.inbound_per_user.layer, Layer::Defaults);
        assert_eq!(policy.outbound_per_chat.value.map(|r| r.to_string()).as_deref(), Some("5/s"));
        assert_eq!(policy.session_scope, Sourced { value: SessionScope::Thread, layer: Layer::BuiltIn });
        assert!(policy.confine_fs.value);

        let elsewhere = config().effective("hooks", "room-9");
        assert_eq!(elsewhere.busy.value, BusyRule::Steer);
        assert_eq!(elsewhere.busy.layer, Layer::Defaults);
        let unknown = config().effective("nope", "x");
        assert_eq!(unknown.denied_tools.layer, Layer::Defaults);
    }

    #[test]
    fn shell_writes_and_run_code_are_denied_in_groups_unless_named_exactly() {
        let config = config();
        let plain = config.effective("hooks", "room-9");
        for tool in SHARED_CHAT_GUARDED {
            assert!(!plain.tool_verdict(tool, None, true, false).allowed, "{tool} in a group");
            assert!(plain.tool_verdict(tool, None, false, false).allowed, "{tool} in a direct chat");
        }
        assert_eq!(
            plain.tool_verdict("bash", None, true, false).rule,
            "bash is denied in group chats here: no policy allows it by name \
             (add \"bash\" to channels.hooks.chats.\"room-9\".policy.allowed_tools)"
        );
        let named = config.effective("hooks", "room-1");
        let verdict = named.tool_verdict("bash", None, true, false);
        assert!(verdict.allowed);
        assert_eq!(
            verdict.rule,
            "bash is allowed in group chats here by `bash` in channels.hooks.chats.\"room-1\".policy.allowed_tools"
        );
        assert!(!named.tool_verdict("fs.write", None, true, false).allowed, "naming bash opens only bash");
        let globbed = config.effective("hooks", "room-2");
        assert!(!globbed.tool_verdict("bash", None, true, false).allowed, "`bash*` is a glob, not a name");
        assert!(!globbed.tool_verdict("fs.write", None, true, false).allowed, "`fs.*` is a glob, not a name");
        assert!(globbed.tool_verdict("fs.read", None, true, false).allowed);
    }

    #[test]
    fn denied_tools_win_over_allowed_tools_and_unmatched_tools_are_denied() {
        let config = config();
        let policy = config.effective("hooks", "room-1");
        let verdict = policy.tool_verdict("tape.reset", None, false, false);
        assert_eq!(
            verdict,
            Verdict {
                allowed: false,
                rule: "tape.reset is denied here by `tape.reset` in channels.hooks.policy.denied_tools".into()
            }
        );
        let narrow = config.effective("hooks", "room-2");
        assert_eq!(
            narrow.tool_verdict("tape.info", None, false, false).rule,
            "tape.info is not allowed here: no pattern in channels.hooks.chats.\"room-2\".policy.allowed_tools matches it"
        );
        let all: Vec<String> =
            ["bash", "fs.read", "fs.write", "tape.info", "tape.reset", "web.fetch"].map(String::from).into();
        assert_eq!(policy.offered_tools(&all, true), ["bash", "fs.read", "tape.info", "web.fetch"]);
        assert_eq!(policy.offered_tools(&all, false), ["bash", "fs.read", "fs.write", "tape.info", "web.fetch"]);
    }

    #[test]
    fn commands_are_limited_to_operators_and_their_commands() {
        let policy = config().effective("hooks", "room-1");
        assert_eq!(policy.may_run_command("hooks:alice", "bash"), Ok(()));
        assert_eq!(policy.may_run_command("hooks:bob", "tape.info"), Ok(()));
        assert_eq!(
            policy.may_run_command("hooks:bob", "bash").unwrap_err().message,
            "hooks:bob may not run the bash command here: their commands in channels.hooks.policy.operators are \
             `tape.*`, `help`"
        );
        assert_eq!(
            policy.may_run_command("hooks:eve", "help").unwrap_err().message,
            "hooks:eve is not an operator here: commands are limited to channels.hooks.policy.operators"
        );
        let verdict = policy.tool_verdict("help", Some("hooks:eve"), false, true);
        assert!(!verdict.allowed);
        assert!(policy.tool_verdict("help", Some("hooks:eve"), false, false).allowed, "model calls need no operator");
        let open = GatewayConfig::default_webhook("s".into()).effective("webhook", "c");
        assert_eq!(open.may_run_command("webhook:anyone", "bash"), Ok(()));
    }

    #[test]
    fn allowlists_admit_listed_users_and_chats_only() {
        let text = "[policy.defaults]\nallow_users = [\"hooks:alice\", \"tg:*\"]\nallow_chats = [\"1\"]\n\
                    [channels.hooks]\nkind = \"webhook\"\nsecrets = [\"s\"]\n\
                    [channels.tg]\nkind = \"telegram\"\ntoken = \"t\"\n";
        let policy = GatewayConfig::parse(text, "bub.toml").unwrap().effective("hooks", "1");
        assert_eq!(policy.admits_user("hooks:alice"), Ok(()));
        assert_eq!(policy.admits_user("tg:99"), Ok(()));
        assert_eq!(
            policy.admits_user("hooks:bob").unwrap_err().to_string(),
            "hooks:bob may not talk to the bot here: not in policy.defaults.allow_users"
        );
        assert_eq!(policy.admits_chat("1"), Ok(()));
        assert!(policy.admits_chat("2").is_err());
        let open = GatewayConfig::default_webhook("s".into()).effective("webhook", "c");
        assert_eq!(open.admits_user("webhook:x"), Ok(()));
        assert_eq!(open.admits_chat("c"), Ok(()));
    }

    #[test]
    fn keywords_address_a_group_message_as_whole_words() {
        let text = "[policy.defaults]\naddressing = { mention = false, keywords = [\"Bub\"] }\n\
                    [channels.hooks]\nkind = \"webhook\"\nsecrets = [\"s\"]\n";
        let policy = GatewayConfig::parse(text, "bub.toml").unwrap().effective("hooks", "1");
        assert!(policy.is_addressed("hey bub, status?", false, false));
        assert!(!policy.is_addressed("bubble tea", false, false));
        assert!(!policy.is_addressed("hi", true, false), "mentions switched off");
        assert!(policy.is_addressed("hi", false, true));
    }

    #[test]
    fn describe_names_the_layer_of_every_key() {
        let text = config().effective("hooks", "room-1").describe();
        assert!(text.contains("  busy = drop  (channels.hooks.chats.\"room-1\".policy)"), "{text}");
        assert!(text.contains("  denied_tools = [\"tape.reset\"]  (channels.hooks.policy)"), "{text}");
        assert!(text.contains("  session_scope = thread  (built-in default)"), "{text}");
        assert!(text.contains("  rate.inbound_per_user = 20/min  (policy.defaults)"), "{text}");
    }
}
