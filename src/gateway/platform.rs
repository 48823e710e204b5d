//! Platform commands, on channels whose platform has them
//! ([`Channel::slash_commands`]: Telegram, Discord):
//!
//! - `/start` and `/help` are answered here, without the model: a welcome
//!   and the commands this user may run in this chat (`/help` alone lists
//!   them), from [`EffectivePolicy::command_menu`]. They come after
//!   admission like any message: a stranger still gets a pairing code.
//! - `/name args` becomes the comma command of the tool `name` stands for
//!   ([`crate::command::platform`]) and goes on as one, to the same
//!   operator check and the same refusal. A `/name` no tool has is text.
//! - The platform's command menu follows what each user may run: the
//!   default menu (what anyone the policy does not name may run in a direct
//!   chat) is set at start and after a reload changes it; a chat whose
//!   menu differs gets its own, and a user whose menu differs from their
//!   chat's gets theirs (Telegram's chat and chat-member scopes), when they
//!   write. What was set is remembered, so a menu is sent once per change,
//!   through the outbound budgets. A menu narrowed while the gateway was
//!   down is corrected when it next changes: menus are a guide, and every
//!   command is checked again when it runs.
//!
//! [`Channel::slash_commands`]: bub_channel::Channel::slash_commands
//! [`EffectivePolicy::command_menu`]: crate::policy::EffectivePolicy::command_menu

use super::{Inner, Message, outcome, turn};
use crate::command::platform::{read_slash, to_comma_command};
use crate::config::GatewayConfig;
use crate::policy::EffectivePolicy;
use bub_channel::{ChatKind, MenuCommand, MenuScope, OutcomeStatus};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tracing::Instrument;

/// Users whose menu was checked are forgotten past this many (they are
/// checked again when they next write).
const CHECKED_USERS: usize = 10_000;

/// Reads a platform command in `message`: `None` when it was answered here
/// (`/start`, `/help`), else the message, its text the comma command it
/// stands for when it is one.
pub(crate) async fn read(inner: &Arc<Inner>, mut message: Message) -> Option<Message> {
    if !inner.channels.get(&message.inbound.channel).is_some_and(|channel| channel.slash_commands()) {
        return Some(message);
    }
    inner.menus.follow(inner, &message);
    let Some(slash) = read_slash(&message.inbound.text) else { return Some(message) };
    if matches!(slash.name.as_str(), "start" | "help") {
        let text = answer(inner, &message, slash.name == "start");
        tracing::info!(session = %message.session, user = %message.user, command = %slash.name, "platform command answered");
        let result = outcome(OutcomeStatus::Replied, text, &message.session);
        turn::conclude(inner, vec![message], result, true).await;
        return None;
    }
    let tools = inner.agent.tools();
    if let Some(prefix) = inner.agent.command_prefix()
        && let Some(command) = to_comma_command(&slash, tools.iter().map(|tool| tool.name()), prefix)
    {
        message.inbound.text = command;
    }
    Some(message)
}

/// The welcome (`/start`) or the list of commands (`/help`).
fn answer(inner: &Inner, message: &Message, welcome: bool) -> String {
    let menu = menu_for(inner, &message.policy, &message.user, message.inbound.chat.kind);
    let mut lines = Vec::new();
    if welcome {
        lines.push(match message.inbound.chat.kind {
            ChatKind::Direct => "Hello! Write to me and I will answer.".to_string(),
            _ => "Hello! Mention me or reply to one of my messages and I will answer.".to_string(),
        });
        lines.push(String::new());
    }
    lines.push("Commands you can use here:".to_string());
    lines.extend(menu.iter().map(|command| format!("/{} — {}", command.name, command.description)));
    if let Some(prefix) = inner.agent.command_prefix()
        && menu.len() > 1
    {
        lines.push(String::new());
        lines.push(format!(
            "Arguments follow the command (/name value key=value); the same commands run as {prefix}name."
        ));
    }
    lines.join("\n")
}

/// The menu of `user` in a chat of `kind` under `policy`; empty of
/// commands (only `/help`) where commands are off.
fn menu_for(inner: &Inner, policy: &EffectivePolicy, user: &str, kind: ChatKind) -> Vec<MenuCommand> {
    let tools = inner.agent.tools();
    match inner.agent.command_prefix() {
        Some(_) => policy.command_menu(tools.iter(), user, kind.is_shared()),
        None => policy.command_menu(std::iter::empty(), user, kind.is_shared()),
    }
}

/// The command menus set on the platforms, and the users already checked.
#[derive(Default)]
pub(crate) struct Menus {
    state: Mutex<MenuState>,
}

#[derive(Default)]
struct MenuState {
    /// The config the checks were made under: a new one checks everyone again.
    config: Option<Arc<GatewayConfig>>,
    /// What each scope of each channel shows, as set by this gateway.
    shown: HashMap<(String, MenuScope), Vec<MenuCommand>>,
    /// (channel, chat, user) whose menu is in step with the config.
    checked: HashSet<(String, String, String)>,
}

/// A menu to send: (channel, scope, menu).
type MenuChange = (String, MenuScope, Vec<MenuCommand>);

impl MenuState {
    /// Follows `config` when it is not the one followed so far: every user
    /// is checked again, and the changed default menus are returned. `None`
    /// when `config` is already followed.
    fn adopt(&mut self, inner: &Inner, config: &Arc<GatewayConfig>) -> Option<Vec<MenuChange>> {
        if self.config.as_ref().is_some_and(|seen| Arc::ptr_eq(seen, config)) {
            return None;
        }
        self.config = Some(config.clone());
        self.checked.clear();
        let mut changes = Vec::new();
        for (name, channel) in inner.channels.iter().filter(|(_, channel)| channel.slash_commands()) {
            let menu = default_menu(inner, config, name, channel.menus_per_chat());
            if self.change(name, &MenuScope::Default, &menu, &[]) {
                changes.push((name.clone(), MenuScope::Default, menu));
            }
        }
        Some(changes)
    }

    /// What `scope` shows: its own menu, else the one it falls back to.
    fn showing(&self, channel: &str, scope: &MenuScope, fallback: &[MenuCommand]) -> Vec<MenuCommand> {
        self.shown.get(&(channel.to_string(), scope.clone())).cloned().unwrap_or_else(|| fallback.to_vec())
    }

    /// Records `menu` for `scope` when it differs from what the scope shows;
    /// true when it must be sent.
    fn change(&mut self, channel: &str, scope: &MenuScope, menu: &[MenuCommand], fallback: &[MenuCommand]) -> bool {
        if self.showing(channel, scope, fallback) == menu {
            return false;
        }
        self.shown.insert((channel.to_string(), scope.clone()), menu.to_vec());
        true
    }
}

impl Menus {
    /// Sets the default menu of every channel with platform commands.
    pub(crate) fn start(&self, inner: &Arc<Inner>) {
        // Nothing is shown yet: every default menu differs from it.
        self.follow_config(inner);
    }

    /// Brings the menus `message`'s chat and sender see in step with the
    /// policy, once per user and config.
    fn follow(&self, inner: &Arc<Inner>, message: &Message) {
        let inbound = &message.inbound;
        let channel = inbound.channel.as_str();
        let key = (channel.to_string(), inbound.chat.id.clone(), message.user.clone());
        let config = inner.config.current();
        let mut state = self.state.lock();
        let per_chat = inner.channels.get(channel).is_some_and(|channel| channel.menus_per_chat());
        let adopted = state.adopt(inner, &config);
        let fresh = adopted.is_some();
        let mut changes = adopted.unwrap_or_default();
        if !per_chat || (!fresh && state.checked.contains(&key)) {
            drop(state);
            send_all(inner, changes);
            return;
        }
        if state.checked.len() >= CHECKED_USERS {
            state.checked.clear();
        }
        state.checked.insert(key);
        let default = state.showing(channel, &MenuScope::Default, &[]);
        let chat = MenuScope::Chat { chat_id: inbound.chat.id.clone() };
        let mine = menu_for(inner, &message.policy, &message.user, inbound.chat.kind);
        if inbound.chat.kind == ChatKind::Direct {
            // A direct chat has one user: the chat's menu is theirs.
            if state.change(channel, &chat, &mine, &default) {
                changes.push((channel.to_string(), chat, mine));
            }
        } else {
            let anyone = menu_for(inner, &message.policy, "", inbound.chat.kind);
            if state.change(channel, &chat, &anyone, &default) {
                changes.push((channel.to_string(), chat.clone(), anyone));
            }
            let chat_menu = state.showing(channel, &chat, &default);
            let member = MenuScope::ChatMember { chat_id: inbound.chat.id.clone(), user_id: inbound.sender.id.clone() };
            if state.change(channel, &member, &mine, &chat_menu) {
                changes.push((channel.to_string(), member, mine));
            }
        }
        drop(state);
        send_all(inner, changes);
    }

    /// Puts every channel's default menu in step with the config now in
    /// force, when the menus follow an older one (after a reload: users'
    /// own menus follow as they next write).
    pub(crate) fn follow_config(&self, inner: &Arc<Inner>) {
        let config = inner.config.current();
        let mut state = self.state.lock();
        let changes = state.adopt(inner, &config).unwrap_or_default();
        drop(state);
        send_all(inner, changes);
    }

    /// `menu` did not reach `scope`: it is not what the scope shows.
    fn forget(&self, channel: &str, scope: &MenuScope, menu: &[MenuCommand]) {
        let mut state = self.state.lock();
        let key = (channel.to_string(), scope.clone());
        if state.shown.get(&key).is_some_and(|shown| shown == menu) {
            state.shown.remove(&key);
        }
    }
}

/// The default menu of `channel`: on a platform with a menu per chat, what
/// anyone the policy does not name may run in a direct chat; on one with a
/// single menu for everyone, every command someone may run on the channel
/// ([`GatewayConfig::channel_wide_menu`]).
fn default_menu(inner: &Inner, config: &GatewayConfig, channel: &str, per_chat: bool) -> Vec<MenuCommand> {
    if per_chat {
        return menu_for(inner, &config.effective(channel, ""), "", ChatKind::Direct);
    }
    match inner.agent.command_prefix() {
        Some(_) => config.channel_wide_menu(channel, inner.agent.tools().iter()),
        None => config.channel_wide_menu(channel, std::iter::empty()),
    }
}

fn send_all(inner: &Arc<Inner>, changes: Vec<MenuChange>) {
    for (channel, scope, menu) in changes {
        send(inner, &channel, scope, menu);
    }
}

/// Sends a menu in the background, through the outbound scheduler.
fn send(inner: &Arc<Inner>, channel: &str, scope: MenuScope, menu: Vec<MenuCommand>) {
    let inner = inner.clone();
    let channel = channel.to_string();
    let sending = async move {
        match inner.outbound().set_commands(&channel, &scope, &menu).await {
            Ok(()) => tracing::info!(channel = %channel, ?scope, commands = menu.len(), "command menu set"),
            Err(error) => {
                tracing::warn!(%error, channel = %channel, ?scope, "cannot set the command menu");
                inner.menus.forget(&channel, &scope, &menu);
            }
        }
    };
    tokio::spawn(sending.in_current_span());
}

/// A warning for every channel whose platform hides the unaddressed group
/// messages the policy keeps as context (see [`crate::policy::privacy`]).
pub(crate) fn hidden_group_messages_warnings(inner: &Inner) -> Vec<String> {
    let config = inner.config.current();
    let mut names: Vec<&String> = inner.channels.keys().collect();
    names.sort();
    names
        .into_iter()
        .filter_map(|name| config.hidden_group_messages_warning(name, &inner.channels[name].hidden_group_messages()?))
        .collect()
}
