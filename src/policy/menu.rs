//! The commands a user may run in a chat, as a platform's command menu and
//! `/help` list them: the tools that rule 1 (operators) and the tool rules
//! let run as comma commands there, by their platform names
//! ([`crate::command::platform`]). The menu is a guide: running a command
//! is decided again, by the same rules, when it is typed.

use super::effective::EffectivePolicy;
use crate::command::platform::platform_name;
use crate::config::GatewayConfig;
use crate::tools::Tool;
use bub_channel::MenuCommand;

/// Telegram lists at most 100 commands in one menu.
pub const MAX_MENU_COMMANDS: usize = 100;
/// Telegram's limit on a command's description, in characters (Discord's is
/// 100: its adapter shortens them further).
pub const MAX_DESCRIPTION_CHARS: usize = 256;
/// What `/help` does, the first entry of every menu.
pub const HELP_DESCRIPTION: &str = "List the commands you can use here";
/// Names the gateway answers itself: no tool can be reached by them.
pub const GATEWAY_COMMANDS: &[&str] = &["start", "help"];

impl EffectivePolicy {
    /// The menu of `user` (`<channel>:<id>`; empty for someone no policy
    /// names) in a chat of this policy: `/help`, then each of `tools` they
    /// may run as a command, in the registry's order, at most
    /// [`MAX_MENU_COMMANDS`].
    pub fn command_menu<'a>(
        &self,
        tools: impl IntoIterator<Item = &'a Tool>,
        user: &str,
        shared_chat: bool,
    ) -> Vec<MenuCommand> {
        let mut menu = vec![MenuCommand { name: "help".into(), description: HELP_DESCRIPTION.into() }];
        for tool in tools {
            if menu.len() >= MAX_MENU_COMMANDS {
                break;
            }
            let Some(name) = platform_name(tool.name()) else { continue };
            if GATEWAY_COMMANDS.contains(&name.as_str()) || menu.iter().any(|entry| entry.name == name) {
                continue;
            }
            if self.tool_verdict(tool.name(), tool.capabilities(), Some(user), shared_chat, true).allowed {
                menu.push(MenuCommand { name, description: description(tool) });
            }
        }
        menu
    }
}

impl GatewayConfig {
    /// The one menu of a platform that shows the same list to everyone
    /// (Discord's application commands): every command somebody may run
    /// somewhere on `channel` — anyone the policy does not name, and each
    /// operator it names, in the channel's policy and in each chat's, in
    /// direct and in shared chats — in the registry's order, at most
    /// [`MAX_MENU_COMMANDS`]. Who may run one is still decided when it is
    /// typed: a stranger who picks an operator's command gets the refusal.
    pub fn channel_wide_menu<'a>(&self, channel: &str, tools: impl IntoIterator<Item = &'a Tool>) -> Vec<MenuCommand> {
        let tools: Vec<&Tool> = tools.into_iter().collect();
        let chats: Vec<String> =
            self.channels.get(channel).map(|config| config.chats.keys().cloned().collect()).unwrap_or_default();
        let mut menu: Vec<MenuCommand> = Vec::new();
        for chat in std::iter::once(String::new()).chain(chats) {
            let policy = self.effective(channel, &chat);
            let operators = policy.operators.value.iter().flatten().map(|operator| operator.user.as_str().to_string());
            for user in std::iter::once(String::new()).chain(operators) {
                for shared_chat in [false, true] {
                    for command in policy.command_menu(tools.iter().copied(), &user, shared_chat) {
                        if !menu.contains(&command) {
                            menu.push(command);
                        }
                    }
                }
            }
        }
        // In the registry's order, as each single menu is.
        let position = |name: &str| tools.iter().position(|tool| platform_name(tool.name()).as_deref() == Some(name));
        menu.sort_by_key(|command| (command.name != "help", position(&command.name)));
        menu.truncate(MAX_MENU_COMMANDS);
        menu
    }
}

/// The tool's first sentence, within 1–[`MAX_DESCRIPTION_CHARS`] characters.
fn description(tool: &Tool) -> String {
    let summary = tool.summary();
    let summary = summary.trim_end_matches('.').trim();
    if summary.is_empty() {
        return format!("Run {}", tool.name());
    }
    if summary.chars().count() <= MAX_DESCRIPTION_CHARS {
        return summary.to_string();
    }
    let mut cut: String = summary.chars().take(MAX_DESCRIPTION_CHARS - 1).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use crate::config::GatewayConfig;
    use crate::tools::{Capability, Tool};
    use serde_json::json;

    fn tool(name: &str, description: &str, capability: Capability) -> Tool {
        Tool::new(name, description, json!({"type": "object"}), |_, _| async { Ok(json!("ok")) })
            .with_capabilities([capability])
    }

    fn tools() -> Vec<Tool> {
        vec![
            tool("help", "List the comma commands available here.", Capability::Read),
            tool("tape.info", "Show this session's tape. More text.", Capability::Read),
            tool("bash", "Run a shell command.", Capability::Exec),
            tool("start", "A tool the gateway's /start hides.", Capability::Read),
            tool("weird name", "No platform name.", Capability::Read),
            tool("long", &"x".repeat(400), Capability::Read),
        ]
    }

    fn names(menu: &[bub_channel::MenuCommand]) -> Vec<&str> {
        menu.iter().map(|entry| entry.name.as_str()).collect()
    }

    #[test]
    fn the_menu_lists_what_the_user_may_run_by_platform_name() {
        let config = GatewayConfig::parse(
            "[channels.tg]\nkind = \"webhook\"\nsecrets = [\"s\"]\n[channels.tg.policy]\noperators = [\"tg:1\"]\n",
            "bub.toml",
        )
        .expect("a config");
        let policy = config.effective("tg", "c1");
        let tools = tools();
        assert_eq!(names(&policy.command_menu(&tools, "tg:1", false)), ["help", "tape_info", "bash", "long"]);
        assert_eq!(
            names(&policy.command_menu(&tools, "tg:2", false)),
            ["help", "tape_info"],
            "not an operator: the read-only commands"
        );
        assert_eq!(
            names(&policy.command_menu(&tools, "tg:1", true)),
            ["help", "tape_info", "long"],
            "no shell in groups"
        );
        let menu = policy.command_menu(&tools, "tg:1", false);
        assert_eq!(menu[1].description, "Show this session's tape");
        assert_eq!(menu[3].description.chars().count(), super::MAX_DESCRIPTION_CHARS);
    }

    #[test]
    fn a_menu_for_everyone_holds_what_anyone_or_any_operator_may_run_on_the_channel() {
        let config = GatewayConfig::parse(
            "[channels.dc]\nkind = \"webhook\"\nsecrets = [\"s\"]\n[channels.dc.policy]\n\
             operators = [{ user = \"dc:1\", commands = [\"tape.*\"] }]\n\
             [channels.dc.chats.\"ops\".policy]\noperators = [\"dc:2\"]\n",
            "bub.toml",
        )
        .expect("a config");
        let tools = tools();
        let menu = config.channel_wide_menu("dc", &tools);
        assert_eq!(names(&menu), ["help", "tape_info", "bash", "long"], "dc:2 may run bash in chat ops");
        assert_eq!(menu.iter().filter(|entry| entry.name == "tape_info").count(), 1, "once each");
        let closed = GatewayConfig::parse("[channels.dc]\nkind = \"webhook\"\nsecrets = [\"s\"]\n", "bub.toml")
            .expect("a config");
        assert_eq!(names(&closed.channel_wide_menu("dc", &tools)), ["help", "tape_info"], "no operators: read-only");
    }

    #[test]
    fn without_operators_everyone_gets_the_read_only_commands() {
        let config = GatewayConfig::parse("[channels.tg]\nkind = \"webhook\"\nsecrets = [\"s\"]\n", "bub.toml")
            .expect("a config");
        let menu = config.effective("tg", "c1").command_menu(&tools(), "", false);
        assert_eq!(names(&menu), ["help", "tape_info"]);
    }
}
