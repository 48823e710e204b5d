//! [`EffectivePolicy`]: the policy of one chat, every key resolved through
//! the layers (built-in default → `policy.defaults` → channel → chat) and
//! remembering which layer set it, so `,policy show` and `,policy explain`
//! can say where a value comes from and where to change it.
//!
//! # Who is answered ([`EffectivePolicy::admission`])
//! - Direct chats are decided by the sender: a user `allow_users` or
//!   `operators` name is answered; anyone else as `dm_policy` says —
//!   `pairing` (default on chat platforms: a one-time code, answered once an
//!   admin or operator approved it), `allowlist` (ignored) or `open` (default
//!   on webhooks: anyone, unless `allow_users` is set).
//! - Group chats and threads are decided by the chat, then the sender: the
//!   chat must be in `allow_chats` or approved (`group_policy = "allowlist"`,
//!   default on chat platforms), or any chat when `group_policy = "open"`
//!   (default on webhooks; `allow_chats`, when set, still limits it), never
//!   with `"disabled"`; inside, when `allow_users` is set, only the users it
//!   or `operators` name.
//!
//! # Tool rules, in the order they are applied
//! 1. Everyone admitted may run the read-only [`READ_ONLY_COMMANDS`] as
//!    comma commands, whether or not `operators` are named; any other comma
//!    command (`as_command`, the shell fallback included) needs its user to
//!    be an operator allowed that command
//!    ([`EffectivePolicy::may_run_command`]).
//! 2. A tool matched by `denied_tools` is denied (deny wins over allow).
//! 3. A tool matched by no pattern of `allowed_tools` is denied
//!    (built-in default: `["*"]`).
//! 4. In shared chats (groups, threads), tools that can run processes or
//!    write files (capability `exec` or `write`: the shell, `fs.write`,
//!    `fs.edit`, `run_code`, and any undeclared tool) are denied unless
//!    `allowed_tools` lists them **by their exact name** (in any layer that is
//!    in effect): a glob such as `*`, `fs.*` or `bash*`, or `cap:exec`, never
//!    opens them, so "allow everything" in defaults cannot hand a shell to a
//!    group by accident. Direct chats follow rules 1–3 only.
//!
//! Patterns are names, globs or capabilities (`cap:write`): `denied_tools =
//! ["cap:write"]` denies every tool that can write, those added later too.

use crate::config::{
    BusyRule, DmPolicy, EditRule, EnvironmentKind, GatewayConfig, GroupPolicy, Layer, Operator, PolicyLayer, Rate,
    Seconds, SessionScope, ToolPattern, UserPattern,
};
use crate::tape::Provenance;
use crate::tools::{Capabilities, Capability};
use bub_channel::ChatKind;
use std::fmt;

/// The commands everyone admitted may run, operators or not: they read this
/// session's tape and policy, and change nothing.
pub const READ_ONLY_COMMANDS: &[&str] = &["help", "tape.info", "tape.anchors", "tape.search", "policy"];

/// The builtin tools a shared chat gets only when a policy names them
/// exactly (rule 4: they can `exec` or `write`).
pub const SHARED_CHAT_GUARDED: &[&str] = &["bash", "bash.output", "bash.kill", "fs.write", "fs.edit", "run_code"];

/// Capabilities denied while untrusted text is in the context ([`super::provenance`]).
fn untrusted_sensitive() -> Capabilities {
    Capabilities::of([Capability::Exec, Capability::Write, Capability::Network])
}

/// Capabilities a shared chat gets only by a tool's exact name (rule 4).
fn guarded_in_shared_chats() -> Capabilities {
    Capabilities::of([Capability::Exec, Capability::Write])
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

/// Whether a message is answered ([`EffectivePolicy::admission`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    Admitted,
    Refused(Denial),
    /// Answered once this sender (a direct chat) or this chat (a group) is
    /// approved through pairing; until then the sender of a direct message
    /// gets a pairing code and nothing else, and a group is not answered.
    NeedsPairing(PairingSubject),
}

/// What pairing approves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PairingSubject {
    /// A user, for direct messages.
    User,
    /// A group chat (and its threads).
    Chat,
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

/// The built-in `max_attachment_bytes`: 20 MiB, the most Telegram's Bot API
/// hands out (`getFile`).
pub const DEFAULT_MAX_ATTACHMENT_BYTES: u64 = 20 * 1024 * 1024;

/// The policy in force in one chat of one channel.
#[derive(Debug, Clone, PartialEq)]
pub struct EffectivePolicy {
    pub channel: String,
    pub chat_id: String,
    /// Who may talk to the bot (`None`: anyone).
    pub allow_users: Sourced<Option<Vec<UserPattern>>>,
    /// Which chats the bot answers in (`None`: any).
    pub allow_chats: Sourced<Option<Vec<String>>>,
    /// Who may run comma commands beyond the [`READ_ONLY_COMMANDS`], which
    /// everyone admitted may run (`None`: nobody).
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
    /// What an edit does after its message's turn started (default: `record`).
    pub on_edit: Sourced<EditRule>,
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
    /// The model's context window in tokens, from this chat's policy or
    /// `[agent]`; `None`: the model family's known window (see
    /// `model::window`), or `BUB_CONTEXT_WINDOW`.
    pub context_window: Sourced<Option<u64>>,
    /// File tools and `cwd` stay inside the session's workspace (default true:
    /// a chat's agent should not wander the host unless the admin says so).
    pub confine_fs: Sourced<bool>,
    /// Direct messages from users no list names (default: `pairing` on chat
    /// platforms, `open` on webhooks).
    pub dm_policy: Sourced<DmPolicy>,
    /// Which groups are answered (default: `allowlist` on chat platforms,
    /// `open` on webhooks).
    pub group_policy: Sourced<GroupPolicy>,
    /// Where the shell and code run (default: `sandbox` on chat platforms,
    /// `local` on webhooks).
    pub environment: Sourced<EnvironmentKind>,
    /// The sandbox may reach the network (default false).
    pub sandbox_network: Sourced<bool>,
    /// Tools that can exec, write or reach the network and still run while
    /// untrusted text is in the context (default none; see [`super::provenance`]).
    pub allow_with_untrusted_context: Sourced<Vec<ToolPattern>>,
    /// The largest file people may send here that is downloaded into the
    /// session's workspace (default [`DEFAULT_MAX_ATTACHMENT_BYTES`]; 0: no
    /// files at all). A larger one is not downloaded, and the chat is told.
    pub max_attachment_bytes: Sourced<u64>,
    /// A chat platform (anyone may write), not a webhook (senders hold its secret).
    pub chat_platform: bool,
}

/// ` (the capability rule `cap:write`)` when a capability pattern decided.
fn by_capability(pattern: &ToolPattern) -> String {
    match pattern.capability() {
        Some(capability) => format!(" (a capability rule: it can {capability})"),
        None => String::new(),
    }
}

/// The built-in `allowed_tools = ["*"]`, compiled once.
#[expect(clippy::expect_used, reason = "`*` is a constant and a valid glob")]
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
        // A channel that is not configured gets the closed side.
        let platform = self.channels.get(channel).is_none_or(|c| c.kind.is_chat_platform());
        let (dm, group, environment) = match platform {
            true => (DmPolicy::Pairing, GroupPolicy::Allowlist, EnvironmentKind::Sandbox),
            false => (DmPolicy::Open, GroupPolicy::Open, EnvironmentKind::Local),
        };
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
            on_edit: resolve(l, EditRule::default(), |p| p.on_edit),
            debounce_enabled: resolve(l, None, |p| p.debounce.as_ref()?.enabled.map(Some)),
            debounce_quiet: resolve(l, Seconds(1.0), |p| p.debounce.as_ref()?.quiet_seconds),
            debounce_max_wait: resolve(l, Seconds(10.0), |p| p.debounce.as_ref()?.max_wait_seconds),
            debounce_active_window: resolve(l, Seconds(60.0), |p| p.debounce.as_ref()?.active_window_seconds),
            inbound_per_user: resolve(l, None, |p| p.rate.as_ref()?.inbound_per_user.map(Some)),
            outbound_per_chat: resolve(l, None, |p| p.rate.as_ref()?.outbound_per_chat.map(Some)),
            outbound_per_channel: resolve(l, None, |p| p.rate.as_ref()?.outbound_per_channel.map(Some)),
            model: resolve(l, None, |p| p.model.as_ref().map(|m| Some(m.get_ref().clone()))),
            context_window: match (resolve(l, None, |p| p.context_window.map(Some)), self.agent.context_window) {
                (Sourced { layer: Layer::BuiltIn, .. }, Some(window)) => {
                    Sourced { value: Some(window), layer: Layer::Agent }
                }
                (window, _) => window,
            },
            confine_fs: resolve(l, true, |p| p.confine_fs),
            dm_policy: resolve(l, dm, |p| p.dm_policy.as_ref().map(|v| *v.get_ref())),
            group_policy: resolve(l, group, |p| p.group_policy.as_ref().map(|v| *v.get_ref())),
            environment: resolve(l, environment, |p| p.environment.as_ref().map(|v| *v.get_ref())),
            sandbox_network: resolve(l, false, |p| p.sandbox_network.as_ref().map(|v| *v.get_ref())),
            allow_with_untrusted_context: resolve(l, Vec::new(), |p| patterns(&p.allow_with_untrusted_context)),
            max_attachment_bytes: resolve(l, DEFAULT_MAX_ATTACHMENT_BYTES, |p| p.max_attachment_bytes),
            chat_platform: platform,
        }
    }
}

impl EffectivePolicy {
    /// The most specific layer of this chat, where an admin would add an
    /// exception: `channels.hooks.chats."room-1".policy`.
    pub fn chat_layer(&self) -> Layer {
        Layer::Chat { channel: self.channel.clone(), chat: self.chat_id.clone() }
    }

    /// Is `user` named by `allow_users` (unset: nobody is named by it)?
    fn names_user(&self, user: &str) -> bool {
        self.allow_users.value.as_ref().is_some_and(|users| users.iter().any(|u| u.matches(user)))
    }

    /// Is `user` one of the `operators` (for some command at least)?
    pub fn is_operator(&self, user: &str) -> bool {
        self.operators.value.as_ref().is_some_and(|operators| operators.iter().any(|op| op.user.matches(user)))
    }

    /// Is `user` (`<channel>:<id>`) writing in chat `chat_id` answered? See
    /// the module docs for the rules; pairing approvals are the caller's to
    /// look up when the answer is [`Admission::NeedsPairing`].
    pub fn admission(&self, user: &str, chat_kind: ChatKind, chat_id: &str) -> Admission {
        let named = self.names_user(user) || self.is_operator(user);
        if !chat_kind.is_shared() {
            if named {
                return Admission::Admitted;
            }
            let origin = self.dm_policy.origin("dm_policy");
            return match self.dm_policy.value {
                DmPolicy::Open if self.allow_users.value.is_none() => Admission::Admitted,
                DmPolicy::Pairing => Admission::NeedsPairing(PairingSubject::User),
                DmPolicy::Open => Admission::Refused(Denial::new(format!(
                    "{user} may not talk to the bot here: not in {}",
                    self.allow_users.origin("allow_users")
                ))),
                DmPolicy::Allowlist => Admission::Refused(Denial::new(format!(
                    "{user} may not talk to the bot in direct messages here: not named in {} or {} \
                     (dm_policy = \"allowlist\" in {origin})",
                    self.allow_users.origin("allow_users"),
                    self.operators.origin("operators"),
                ))),
            };
        }
        if self.allow_users.value.is_some() && !named {
            return Admission::Refused(Denial::new(format!(
                "{user} may not talk to the bot here: not in {}",
                self.allow_users.origin("allow_users")
            )));
        }
        let listed = self.allow_chats.value.as_ref().map(|chats| chats.iter().any(|c| c == chat_id || c == "*"));
        match (self.group_policy.value, listed) {
            (GroupPolicy::Disabled, _) => Admission::Refused(Denial::new(format!(
                "the bot does not answer in group chats here (group_policy = \"disabled\" in {})",
                self.group_policy.origin("group_policy")
            ))),
            (_, Some(true)) | (GroupPolicy::Open, None) => Admission::Admitted,
            (GroupPolicy::Allowlist, _) => Admission::NeedsPairing(PairingSubject::Chat),
            (GroupPolicy::Open, Some(false)) => Admission::Refused(Denial::new(format!(
                "the bot does not answer in chat {chat_id}: not in {}",
                self.allow_chats.origin("allow_chats")
            ))),
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
    /// fallback), which can do `capabilities`? Only the operators rule; the
    /// tool rules come on top.
    pub fn may_run_command(&self, user: &str, command: &str, capabilities: Capabilities) -> Result<(), Denial> {
        if READ_ONLY_COMMANDS.contains(&command) {
            return Ok(());
        }
        let origin = self.operators.origin("operators");
        let Some(operators) = &self.operators.value else {
            return Err(Denial::new(format!(
                "no operators are named here, so commands are limited to {} (name operators in {}.operators \
                 to run others)",
                READ_ONLY_COMMANDS.join(", "),
                self.chat_layer()
            )));
        };
        let mine: Vec<&Operator> = operators.iter().filter(|op| op.user.matches(user)).collect();
        if mine.is_empty() {
            let who = if user.is_empty() { "this user" } else { user };
            return Err(Denial::new(format!(
                "{who} is not an operator here: commands other than {} are limited to {origin}",
                READ_ONLY_COMMANDS.join(", ")
            )));
        }
        let allowed = |op: &&Operator| match &op.commands {
            None => true,
            Some(patterns) => patterns.iter().any(|p| p.get_ref().matches(command, capabilities)),
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

    /// May `tool`, which can do `capabilities`, run? `user` is who asked (for
    /// commands), `shared_chat` is a group or thread, `as_command` a comma
    /// command. See the module docs for the rules and their order.
    pub fn tool_verdict(
        &self,
        tool: &str,
        capabilities: Capabilities,
        user: Option<&str>,
        shared_chat: bool,
        as_command: bool,
    ) -> Verdict {
        if as_command && let Err(denial) = self.may_run_command(user.unwrap_or_default(), tool, capabilities) {
            return Verdict::deny(denial.message);
        }
        if let Some(pattern) = self.denied_tools.value.iter().find(|p| p.matches(tool, capabilities)) {
            let origin = self.denied_tools.origin("denied_tools");
            return Verdict::deny(format!(
                "{tool} is denied here by `{pattern}` in {origin}{}",
                by_capability(pattern)
            ));
        }
        let origin = self.allowed_tools.origin("allowed_tools");
        let allowing: Vec<&ToolPattern> =
            self.allowed_tools.value.iter().filter(|p| p.matches(tool, capabilities)).collect();
        let Some(first) = allowing.first() else {
            return Verdict::deny(format!("{tool} is not allowed here: no pattern in {origin} matches it"));
        };
        if shared_chat && capabilities.intersects(guarded_in_shared_chats()) {
            let guarded: Vec<&str> =
                capabilities.iter().filter(|c| guarded_in_shared_chats().contains(*c)).map(Capability::name).collect();
            return match allowing.iter().find(|p| p.is_exact()) {
                Some(exact) => {
                    Verdict::allow(format!("{tool} is allowed in group chats here by `{exact}` in {origin}"))
                }
                None => Verdict::deny(format!(
                    "{tool} is denied in group chats here: it can {} and no policy allows it by name \
                     (add \"{tool}\" to {}.allowed_tools)",
                    guarded.join(" and "),
                    self.chat_layer()
                )),
            };
        }
        Verdict::allow(format!("{tool} is allowed here by `{first}` in {origin}{}", by_capability(first)))
    }

    /// Where a message of `user` in a chat of `chat_kind` comes from, for
    /// the provenance rule: `paired` when pairing admitted them. Webhook
    /// senders proved themselves with the channel's secret.
    pub fn provenance(&self, user: &str, chat_kind: ChatKind, paired: bool, forwarded: bool) -> Provenance {
        if forwarded {
            Provenance::Forwarded
        } else if self.is_operator(user) {
            Provenance::Operator
        } else if self.names_user(user) || (paired && !chat_kind.is_shared()) || !self.chat_platform {
            Provenance::User
        } else {
            Provenance::Stranger
        }
    }

    /// While untrusted text is in the context: may `tool` (which can do
    /// `capabilities`) still run? `Ok` with no rule when the rule does not
    /// apply (the tool cannot exec, write or reach the network).
    pub fn untrusted_context_verdict(&self, tool: &str, capabilities: Capabilities) -> Option<Verdict> {
        if !capabilities.intersects(untrusted_sensitive()) {
            return None;
        }
        let origin = self.allow_with_untrusted_context.origin("allow_with_untrusted_context");
        Some(match self.allow_with_untrusted_context.value.iter().find(|p| p.matches(tool, capabilities)) {
            Some(pattern) => {
                Verdict::allow(format!("{tool} may run with untrusted text in the context by `{pattern}` in {origin}"))
            }
            None => {
                let can: Vec<&str> =
                    capabilities.iter().filter(|c| untrusted_sensitive().contains(*c)).map(Capability::name).collect();
                Verdict::deny(format!(
                    "{tool} can {} and is denied while untrusted text is in the context (add \"{tool}\" to \
                     {}.allow_with_untrusted_context to allow it)",
                    can.join(" and "),
                    self.chat_layer()
                ))
            }
        })
    }

    /// The tools the model may see here, in the order given: `(name, capabilities)`.
    pub fn offered_tools(&self, tools: &[(String, Capabilities)], shared_chat: bool) -> Vec<String> {
        tools
            .iter()
            .filter(|(name, capabilities)| self.tool_verdict(name, *capabilities, None, shared_chat, false).allowed)
            .map(|(name, _)| name.clone())
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
            ("operators", opt(&operators, "nobody (read-only commands only)"), &self.operators.layer),
            ("allowed_tools", list(&self.allowed_tools.value), &self.allowed_tools.layer),
            ("denied_tools", list(&self.denied_tools.value), &self.denied_tools.layer),
            ("addressing.mention", self.address_by_mention.value.to_string(), &self.address_by_mention.layer),
            ("addressing.reply", self.address_by_reply.value.to_string(), &self.address_by_reply.layer),
            ("addressing.keywords", list(&self.address_keywords.value), &self.address_keywords.layer),
            ("session_scope", self.session_scope.value.to_string(), &self.session_scope.layer),
            ("busy", self.busy.value.to_string(), &self.busy.layer),
            ("on_edit", self.on_edit.value.to_string(), &self.on_edit.layer),
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
            ("context_window", opt(&self.context_window.value, "the model's known window"), &self.context_window.layer),
            ("confine_fs", self.confine_fs.value.to_string(), &self.confine_fs.layer),
            ("dm_policy", self.dm_policy.value.to_string(), &self.dm_policy.layer),
            ("group_policy", self.group_policy.value.to_string(), &self.group_policy.layer),
            ("environment", self.environment.value.to_string(), &self.environment.layer),
            ("sandbox_network", self.sandbox_network.value.to_string(), &self.sandbox_network.layer),
            (
                "allow_with_untrusted_context",
                list(&self.allow_with_untrusted_context.value),
                &self.allow_with_untrusted_context.layer,
            ),
            ("max_attachment_bytes", self.max_attachment_bytes.value.to_string(), &self.max_attachment_bytes.layer),
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
on_edit = "rerun"

[channels.hooks.chats."room-2".policy]
allowed_tools = ["fs.*", "bash*"]
"#;

    /// What the builtin tools of these tests declare.
    fn caps(tool: &str) -> Capabilities {
        let capability = match tool {
            "bash" | "bash.output" | "bash.kill" | "run_code" => Capability::Exec,
            "fs.write" | "fs.edit" => Capability::Write,
            "web.fetch" => Capability::Network,
            "tape.reset" | "tape.handoff" | "code_mode" | "model" => Capability::Session,
            _ => Capability::Read,
        };
        Capabilities::of([capability])
    }

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
        assert_eq!(policy.on_edit.value, EditRule::Rerun, "on_edit is set per chat like the others");
        assert_eq!(elsewhere.on_edit, Sourced { value: EditRule::Record, layer: Layer::BuiltIn });
        let unknown = config().effective("nope", "x");
        assert_eq!(unknown.denied_tools.layer, Layer::Defaults);
    }

    #[test]
    fn shell_writes_and_run_code_are_denied_in_groups_unless_named_exactly() {
        let config = config();
        let plain = config.effective("hooks", "room-9");
        for tool in SHARED_CHAT_GUARDED {
            assert!(!plain.tool_verdict(tool, caps(tool), None, true, false).allowed, "{tool} in a group");
            assert!(plain.tool_verdict(tool, caps(tool), None, false, false).allowed, "{tool} in a direct chat");
        }
        assert_eq!(
            plain.tool_verdict("bash", caps("bash"), None, true, false).rule,
            "bash is denied in group chats here: it can exec and no policy allows it by name \
             (add \"bash\" to channels.hooks.chats.\"room-9\".policy.allowed_tools)"
        );
        let named = config.effective("hooks", "room-1");
        let verdict = named.tool_verdict("bash", caps("bash"), None, true, false);
        assert!(verdict.allowed);
        assert_eq!(
            verdict.rule,
            "bash is allowed in group chats here by `bash` in channels.hooks.chats.\"room-1\".policy.allowed_tools"
        );
        assert!(
            !named.tool_verdict("fs.write", caps("fs.write"), None, true, false).allowed,
            "naming bash opens only bash"
        );
        let globbed = config.effective("hooks", "room-2");
        assert!(
            !globbed.tool_verdict("bash", caps("bash"), None, true, false).allowed,
            "`bash*` is a glob, not a name"
        );
        assert!(
            !globbed.tool_verdict("fs.write", caps("fs.write"), None, true, false).allowed,
            "`fs.*` is a glob, not a name"
        );
        assert!(globbed.tool_verdict("fs.read", caps("fs.read"), None, true, false).allowed);
    }

    #[test]
    fn denied_tools_win_over_allowed_tools_and_unmatched_tools_are_denied() {
        let config = config();
        let policy = config.effective("hooks", "room-1");
        let verdict = policy.tool_verdict("tape.reset", caps("tape.reset"), None, false, false);
        assert_eq!(
            verdict,
            Verdict {
                allowed: false,
                rule: "tape.reset is denied here by `tape.reset` in channels.hooks.policy.denied_tools".into()
            }
        );
        let narrow = config.effective("hooks", "room-2");
        assert_eq!(
            narrow.tool_verdict("tape.info", caps("tape.info"), None, false, false).rule,
            "tape.info is not allowed here: no pattern in channels.hooks.chats.\"room-2\".policy.allowed_tools matches it"
        );
        let all: Vec<(String, Capabilities)> = ["bash", "fs.read", "fs.write", "tape.info", "tape.reset", "web.fetch"]
            .map(|name| (name.to_string(), caps(name)))
            .into();
        assert_eq!(policy.offered_tools(&all, true), ["bash", "fs.read", "tape.info", "web.fetch"]);
        assert_eq!(policy.offered_tools(&all, false), ["bash", "fs.read", "fs.write", "tape.info", "web.fetch"]);
    }

    #[test]
    fn capability_rules_cover_every_tool_that_declares_the_capability() {
        let text = "[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"s\"]\n[channels.hooks.policy]\n\
                    denied_tools = [\"cap:write\"]\noperators = [{ user = \"hooks:ro\", commands = [\"cap:read\"] }]\n";
        let policy = GatewayConfig::parse(text, "bub.toml").unwrap().effective("hooks", "c");
        let verdict = policy.tool_verdict("fs.edit", caps("fs.edit"), None, false, false);
        assert_eq!(
            verdict.rule,
            "fs.edit is denied here by `cap:write` in channels.hooks.policy.denied_tools (a capability rule: it can write)"
        );
        assert!(!policy.tool_verdict("mcp.new_tool", Capabilities::ALL, None, false, false).allowed, "undeclared");
        assert!(policy.tool_verdict("fs.read", caps("fs.read"), None, false, false).allowed);
        assert_eq!(policy.may_run_command("hooks:ro", "tape.search", caps("tape.search")), Ok(()));
        assert!(policy.may_run_command("hooks:ro", "bash", caps("bash")).is_err());
        let verdict = policy.tool_verdict("mcp.new_tool", Capabilities::ALL, None, true, false);
        assert!(!verdict.allowed);
    }

    #[test]
    fn commands_are_limited_to_operators_and_their_commands() {
        let policy = config().effective("hooks", "room-1");
        assert_eq!(policy.may_run_command("hooks:alice", "bash", caps("bash")), Ok(()));
        assert_eq!(policy.may_run_command("hooks:bob", "tape.info", caps("tape.info")), Ok(()));
        assert_eq!(
            policy.may_run_command("hooks:bob", "bash", caps("bash")).unwrap_err().message,
            "hooks:bob may not run the bash command here: their commands in channels.hooks.policy.operators are \
             `tape.*`, `help`"
        );
        assert_eq!(
            policy.may_run_command("hooks:eve", "tape.handoff", caps("tape.handoff")).unwrap_err().message,
            "hooks:eve is not an operator here: commands other than help, tape.info, tape.anchors, tape.search, \
             policy are limited to channels.hooks.policy.operators"
        );
        // Naming operators takes no read-only command from anyone else.
        for command in READ_ONLY_COMMANDS {
            assert_eq!(policy.may_run_command("hooks:eve", command, caps(command)), Ok(()), "{command}");
        }
        assert!(!policy.tool_verdict("bash", caps("bash"), Some("hooks:eve"), false, true).allowed);
        assert!(
            policy.tool_verdict("help", caps("help"), Some("hooks:eve"), false, false).allowed,
            "model calls need no operator"
        );
        let unnamed = GatewayConfig::default_webhook("s".into()).effective("webhook", "c");
        for command in READ_ONLY_COMMANDS {
            assert_eq!(unnamed.may_run_command("webhook:anyone", command, caps(command)), Ok(()), "{command}");
        }
        for command in ["bash", "tape.reset", "tape.handoff", "code_mode", "model", "fs.write", "ls"] {
            let denial = unnamed.may_run_command("webhook:anyone", command, caps(command)).unwrap_err();
            assert!(denial.message.starts_with("no operators are named here"), "{command}: {denial}");
        }
    }

    #[cfg(feature = "telegram")]
    fn admitted(policy: &EffectivePolicy, user: &str, kind: ChatKind, chat: &str) -> Admission {
        policy.admission(user, kind, chat)
    }

    #[test]
    #[cfg(feature = "telegram")]
    fn allowlists_admit_listed_users_and_chats_only() {
        let text = "[policy.defaults]\nallow_users = [\"hooks:alice\", \"tg:*\"]\nallow_chats = [\"1\"]\n\
                    [channels.hooks]\nkind = \"webhook\"\nsecrets = [\"s\"]\n\
                    [channels.tg]\nkind = \"telegram\"\ntoken = \"t\"\n";
        let policy = GatewayConfig::parse(text, "bub.toml").unwrap().effective("hooks", "1");
        assert_eq!(admitted(&policy, "hooks:alice", ChatKind::Group, "1"), Admission::Admitted);
        assert_eq!(admitted(&policy, "tg:99", ChatKind::Direct, "1"), Admission::Admitted);
        let Admission::Refused(denial) = admitted(&policy, "hooks:bob", ChatKind::Direct, "1") else {
            panic!("bob is not named")
        };
        assert_eq!(denial.to_string(), "hooks:bob may not talk to the bot here: not in policy.defaults.allow_users");
        assert!(matches!(admitted(&policy, "hooks:alice", ChatKind::Group, "2"), Admission::Refused(_)));
        let open = GatewayConfig::default_webhook("s".into()).effective("webhook", "c");
        assert_eq!(admitted(&open, "webhook:x", ChatKind::Direct, "c"), Admission::Admitted);
        assert_eq!(admitted(&open, "webhook:x", ChatKind::Group, "c"), Admission::Admitted);
    }

    /// The shortest bot config is closed: strangers pair in direct chats and
    /// groups are answered only once approved; named users and operators
    /// need no pairing.
    #[test]
    #[cfg(feature = "telegram")]
    fn chat_platforms_pair_strangers_and_answer_only_approved_groups() {
        let text = "[channels.tg]\nkind = \"telegram\"\ntoken = \"t\"\n";
        let policy = GatewayConfig::parse(text, "bub.toml").unwrap().effective("tg", "42");
        assert_eq!(policy.dm_policy.value, DmPolicy::Pairing);
        assert_eq!(policy.environment.value, EnvironmentKind::Sandbox);
        assert_eq!(admitted(&policy, "tg:42", ChatKind::Direct, "42"), Admission::NeedsPairing(PairingSubject::User));
        assert_eq!(admitted(&policy, "tg:7", ChatKind::Group, "-100"), Admission::NeedsPairing(PairingSubject::Chat));
        let text = "[channels.tg]\nkind = \"telegram\"\ntoken = \"t\"\n[channels.tg.policy]\n\
                    operators = [\"tg:1\"]\nallow_chats = [\"-100\"]\ndm_policy = \"allowlist\"\n";
        let policy = GatewayConfig::parse(text, "bub.toml").unwrap().effective("tg", "1");
        assert_eq!(admitted(&policy, "tg:1", ChatKind::Direct, "1"), Admission::Admitted, "an operator is named");
        assert_eq!(admitted(&policy, "tg:7", ChatKind::Group, "-100"), Admission::Admitted, "a listed group");
        let Admission::Refused(denial) = admitted(&policy, "tg:7", ChatKind::Direct, "7") else { panic!() };
        assert!(denial.message.contains("dm_policy = \"allowlist\" in channels.tg.policy.dm_policy"), "{denial}");
        let text = "[channels.tg]\nkind = \"telegram\"\ntoken = \"t\"\n[channels.tg.policy]\n\
                    dm_policy = \"open\"\ngroup_policy = \"disabled\"\nallow_chats = [\"-100\"]\n";
        let policy = GatewayConfig::parse(text, "bub.toml").unwrap().effective("tg", "-100");
        assert_eq!(admitted(&policy, "tg:7", ChatKind::Direct, "7"), Admission::Admitted);
        assert!(matches!(admitted(&policy, "tg:7", ChatKind::Group, "-100"), Admission::Refused(_)));
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
