//! What a config opens wider than the closed defaults, said as warnings
//! (`FILE:LINE:COL: warning: …`). A policy judgement about a valid file, so
//! it lives with the decisions: it asks the effective policy which tools a
//! chat would get, while `config/` only knows where in the file a value is.

use super::effective::SHARED_CHAT_GUARDED;
use crate::config::{DmPolicy, EnvironmentKind, GatewayConfig, GroupPolicy, Layer};
use crate::tools::{Capabilities, Capability};

impl GatewayConfig {
    /// Where this config opens access wider than its channels' closed
    /// defaults, one line each as `FILE:LINE:COL: warning: …`: operator
    /// rights or chat-platform access given to `*` or a whole channel, open
    /// direct messages or groups on a chat platform, the shell on the host.
    /// Nothing here is an error (an admin may mean it); `bub policy check`
    /// and the gateway's start print them so it is always seen.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        for (layer, policy) in self.layers() {
            let platforms = self.chat_platforms_under(&layer);
            for operator in policy.operators.iter().flatten() {
                let user = &operator.get_ref().user;
                if user.as_str() == "*" || user.as_str().ends_with(":*") {
                    let whom = match user.channel() {
                        Some(channel) => format!("everyone on {channel}"),
                        None => "everyone".to_string(),
                    };
                    let what = match &operator.get_ref().commands {
                        None => "every command, the shell included".to_string(),
                        Some(_) => "the commands listed".to_string(),
                    };
                    warnings.push(
                        self.warning(operator.span(), format!("operators: `{user}` makes {whom} an operator ({what})")),
                    );
                }
            }
            for user in policy.allow_users.iter().flatten() {
                let pattern = user.get_ref();
                let wide = pattern.as_str() == "*" || pattern.as_str().ends_with(":*");
                let on_platform = match pattern.channel() {
                    Some(channel) => platforms.iter().any(|p| p == channel),
                    None => !platforms.is_empty(),
                };
                if wide && on_platform {
                    warnings.push(self.warning(
                        user.span(),
                        format!(
                            "allow_users: `{pattern}` lets everyone who finds the bot on {} talk to it, \
                             without pairing{}",
                            platforms.join(", "),
                            self.tools_note(&platforms)
                        ),
                    ));
                }
            }
            if platforms.is_empty() {
                continue;
            }
            if let Some(dm) = policy.dm_policy.as_ref().filter(|dm| *dm.get_ref() == DmPolicy::Open) {
                warnings.push(self.warning(
                    dm.span(),
                    format!(
                        "dm_policy = \"open\": anyone who finds the bot on {} can talk to it in direct \
                         messages{}",
                        platforms.join(", "),
                        self.tools_note(&platforms)
                    ),
                ));
            }
            if let Some(group) = policy.group_policy.as_ref().filter(|g| *g.get_ref() == GroupPolicy::Open) {
                warnings.push(self.warning(
                    group.span(),
                    format!(
                        "group_policy = \"open\": every group the bot is added to on {} is answered",
                        platforms.join(", ")
                    ),
                ));
            }
            if let Some(environment) = policy.environment.as_ref().filter(|e| *e.get_ref() == EnvironmentKind::Local) {
                warnings.push(self.warning(
                    environment.span(),
                    format!(
                        "environment = \"local\": on {} the shell and code run on the host as the gateway's \
                         user, with its files, secrets and network",
                        platforms.join(", ")
                    ),
                ));
            }
            if let Some(network) = policy.sandbox_network.as_ref().filter(|n| *n.get_ref()) {
                warnings.push(self.warning(
                    network.span(),
                    format!(
                        "sandbox_network = true: the shell and code on {} may reach the network",
                        platforms.join(", ")
                    ),
                ));
            }
        }
        warnings
    }

    /// The chat-platform channels a layer applies to.
    fn chat_platforms_under(&self, layer: &Layer) -> Vec<String> {
        let platform = |name: &String| self.channels.get(name).is_some_and(|c| c.kind.is_chat_platform());
        match layer {
            Layer::BuiltIn | Layer::Agent | Layer::Defaults => {
                self.channels.keys().filter(|name| platform(name)).cloned().collect()
            }
            Layer::Channel(name) | Layer::Chat { channel: name, .. } => {
                if platform(name) {
                    vec![name.clone()]
                } else {
                    Vec::new()
                }
            }
        }
    }

    /// `, and use bash, fs.write…` when those channels' direct chats allow them.
    fn tools_note(&self, channels: &[String]) -> String {
        let mut risky: Vec<&str> = Vec::new();
        for channel in channels {
            let policy = self.effective(channel, "");
            for tool in SHARED_CHAT_GUARDED {
                let can = match *tool {
                    "fs.write" | "fs.edit" => Capability::Write,
                    _ => Capability::Exec,
                };
                let capabilities = Capabilities::of([can]);
                if policy.tool_verdict(tool, capabilities, None, false, false).allowed && !risky.contains(tool) {
                    risky.push(tool);
                }
            }
        }
        if risky.is_empty() { String::new() } else { format!(", and use {}", risky.join(", ")) }
    }
}
