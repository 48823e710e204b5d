//! What a platform that keeps unaddressed group messages from the bot
//! (Telegram's privacy mode) costs a config: a group chat the bot answers
//! keeps the messages that do not address it on the tape as context, and
//! addressing keywords are found in them; neither happens when the platform
//! never delivers them. Said as a warning at start, since only the
//! platform knows its setting.

use crate::config::{GatewayConfig, GroupPolicy};

impl GatewayConfig {
    /// The warning for `channel` when its platform hides unaddressed group
    /// messages (`why`: the platform's reason and fix, from the adapter)
    /// while this config answers group chats there; `None` when every
    /// group chat is `group_policy = "disabled"` (nothing is lost).
    pub fn hidden_group_messages_warning(&self, channel: &str, why: &str) -> Option<String> {
        let config = self.channels.get(channel)?;
        let mut policies = vec![self.effective(channel, "")];
        policies.extend(config.chats.keys().map(|chat| self.effective(channel, chat)));
        let answering: Vec<_> =
            policies.iter().filter(|policy| policy.group_policy.value != GroupPolicy::Disabled).collect();
        let first = answering.first()?;
        let mut keywords: Vec<&str> = Vec::new();
        for keyword in answering.iter().flat_map(|policy| policy.address_keywords.value.iter()) {
            if !keywords.contains(&keyword.as_str()) {
                keywords.push(keyword);
            }
        }
        let keywords = match keywords.as_slice() {
            [] => String::new(),
            words => format!(", and the addressing keywords ({}) never match", words.join(", ")),
        };
        Some(format!(
            "channel {channel}: {why}. In groups the bot then gets only commands, mentions and replies to it: \
             the messages that do not address it, which a group chat it answers keeps as context \
             (group_policy = \"{}\" in {}), never reach it{keywords}",
            first.group_policy.value,
            first.group_policy.origin("group_policy"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use crate::config::GatewayConfig;

    const WHY: &str = "privacy mode is on; turn it off";

    fn config(policy: &str) -> GatewayConfig {
        let text =
            format!("[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"s\"]\n[channels.hooks.policy]\n{policy}");
        GatewayConfig::parse(&text, "bub.toml").expect("a config")
    }

    #[test]
    fn answering_groups_on_a_platform_that_hides_messages_is_warned_about() {
        let warning = config("addressing = { keywords = [\"bub\"] }\n")
            .hidden_group_messages_warning("hooks", WHY)
            .expect("a warning");
        assert!(warning.starts_with("channel hooks: privacy mode is on; turn it off. In groups"), "{warning}");
        assert!(warning.contains("keeps as context") && warning.contains("keywords (bub) never match"), "{warning}");
    }

    #[test]
    fn no_warning_when_no_group_is_answered() {
        let closed = config("group_policy = \"disabled\"\n");
        assert_eq!(closed.hidden_group_messages_warning("hooks", WHY), None);
        assert_eq!(closed.hidden_group_messages_warning("nowhere", WHY), None);
    }
}
