//! A platform's own commands: the menu a chat app shows (`/tape_info`,
//! Telegram's `setMyCommands`, Discord's application commands) and who a
//! menu is for. Which commands exist and who may run them is the gateway's
//! decision; an adapter only shows the list it is given.

use serde::{Deserialize, Serialize};

/// One entry of a platform's command menu.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MenuCommand {
    /// The platform's name for it: 1–32 of `a-z 0-9 _` (Telegram's and
    /// Discord's rule), without the leading `/`.
    pub name: String,
    /// One line, 1–256 characters.
    pub description: String,
}

/// Who sees a command menu. The most specific scope that was set wins.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MenuScope {
    /// Everyone, in every chat, unless a narrower menu was set.
    Default,
    /// Everyone in one chat (for a direct chat: its one user).
    Chat { chat_id: String },
    /// One user inside one group chat.
    ChatMember { chat_id: String, user_id: String },
}
