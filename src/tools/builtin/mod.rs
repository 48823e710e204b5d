//! The builtin tools, one module per family. Each module exposes `*_tool`
//! constructors returning [`Tool`]s whose argument structs' doc comments are
//! what the model reads.
//!
//! - [`shell`]: `bash`, `bash.output`, `bash.kill`, and the [`ShellManager`]
//!   that owns background shells per session.
//! - [`fs`]: `fs.read`, `fs.write`, `fs.edit`; paths go through [`fs::resolve_path`].
//! - [`tape`]: `tape.info`, `tape.search`, `tape.anchors`, `tape.handoff`, `tape.reset`.
//! - [`spill`]: `spill.read`, paging through oversized results.
//! - [`web`]: `web.fetch`, with SSRF checks set by [`WebFetchSettings`].
//! - [`chat`]: `chat.send_file`, a workspace file sent to the turn's chat
//!   (through the gateway's [`TurnChat`](crate::tools::TurnChat)).
//! - [`session`]: command-only `help`, `model`, `reasoning_effort`, `quit`.
//!
//! Not here: `subagent` starts runs, so the agent provides it
//! (`bub::agent::subagent_tool`); code mode's `run_code` and `code_mode`
//! live with the rest of code mode in `bub::codemode`.
//!
//! Preserved tools (kept directly callable in code mode) are the ones code
//! needs as primitives: shell, files and `spill.read`; their constructors
//! mark them.

pub mod chat;
pub mod fs;
pub mod session;
pub mod shell;
pub mod spill;
pub mod tape;
pub mod web;

pub use shell::ShellManager;
pub use web::WebFetchSettings;

use crate::tools::Tool;
use std::sync::Arc;

/// Every builtin tool, sharing `shells` for the bash family.
pub fn tools(shells: Arc<ShellManager>, web: WebFetchSettings) -> Vec<Tool> {
    vec![
        shell::bash_tool(shells.clone()),
        shell::bash_output_tool(shells.clone()),
        shell::bash_kill_tool(shells),
        fs::fs_read_tool(),
        fs::fs_write_tool(),
        fs::fs_edit_tool(),
        tape::tape_info_tool(),
        tape::tape_search_tool(),
        tape::tape_anchors_tool(),
        tape::tape_handoff_tool(),
        tape::tape_reset_tool(),
        spill::spill_read_tool(),
        web::web_fetch_tool(web),
        chat::chat_send_file_tool(),
    ]
}

/// The command-only session tools; `quit` kills the session's shells. Code
/// mode's switch (`bub::codemode::code_mode_tool`) is registered beside them.
pub fn session_tools(shells: Arc<ShellManager>) -> Vec<Tool> {
    vec![session::help_tool(), session::model_tool(), session::reasoning_effort_tool(), session::quit_tool(shells)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_file_and_spill_tools_are_preserved_and_names_are_unique() {
        let tools = tools(Arc::new(ShellManager::new()), WebFetchSettings::default());
        let preserved: Vec<&str> = tools.iter().filter(|t| t.preserve()).map(Tool::name).collect();
        assert_eq!(preserved, ["bash", "bash.output", "bash.kill", "fs.read", "fs.write", "fs.edit", "spill.read"]);
        let mut names: Vec<String> = tools.iter().map(Tool::model_name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 14);
    }
}
