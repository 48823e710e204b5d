//! Platform commands (`/tape_info@bot release`) as comma commands.
//!
//! Telegram and Discord allow command names of 1–32 characters of
//! `a-z 0-9 _` (Discord also `-`, which bub does not use). A tool's
//! platform name is its own name in lower case with `.` and `-` turned into
//! `_`: `tape.info` is `/tape_info`, `reasoning_effort` stays
//! `/reasoning_effort`. A tool whose name cannot be written so (too long,
//! other characters) has no platform command; it still runs as a comma
//! command. When two tools map to the same name, the first in the registry
//! has it.
//!
//! `/name args` then reads as `<prefix><tool> args`: the arguments are
//! passed on untouched, so they bind as the comma form's do.

/// The longest platform command name.
pub const MAX_PLATFORM_NAME: usize = 32;

/// A platform command typed in a chat: `/name` and the text after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlashCommand<'a> {
    /// Lower-cased, without the `/`.
    pub name: String,
    /// The trimmed rest of the message.
    pub args: &'a str,
}

/// `tool`'s platform command name, or `None` when it cannot have one.
pub fn platform_name(tool: &str) -> Option<String> {
    let name: String = tool.chars().map(|c| if c == '.' || c == '-' { '_' } else { c.to_ascii_lowercase() }).collect();
    is_platform_name(&name).then_some(name)
}

/// Whether `name` is a valid platform command name.
pub fn is_platform_name(name: &str) -> bool {
    (1..=MAX_PLATFORM_NAME).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Reads `/name args`. `None` for anything else, `/name@somebot` included:
/// the adapter removes its own bot's name, so one left is another bot's.
pub fn read_slash(text: &str) -> Option<SlashCommand<'_>> {
    let text = text.trim_start().strip_prefix('/')?;
    let (word, args) = match text.find(char::is_whitespace) {
        Some(end) => (&text[..end], text[end..].trim()),
        None => (text, ""),
    };
    let name = word.to_ascii_lowercase();
    is_platform_name(&name).then_some(SlashCommand { name, args })
}

/// The comma command `slash` stands for, when one of `tools` has its name.
pub fn to_comma_command<'a>(
    slash: &SlashCommand<'_>,
    tools: impl IntoIterator<Item = &'a str>,
    prefix: &str,
) -> Option<String> {
    let tool = tools.into_iter().find(|tool| platform_name(tool).as_deref() == Some(slash.name.as_str()))?;
    Some(if slash.args.is_empty() { format!("{prefix}{tool}") } else { format!("{prefix}{tool} {}", slash.args) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_become_platform_names() {
        assert_eq!(platform_name("tape.info").as_deref(), Some("tape_info"));
        assert_eq!(platform_name("reasoning_effort").as_deref(), Some("reasoning_effort"));
        assert_eq!(platform_name("Web-Fetch").as_deref(), Some("web_fetch"));
        assert_eq!(platform_name(&"x".repeat(33)), None, "too long");
        assert_eq!(platform_name("émoji"), None);
        assert_eq!(platform_name(""), None);
    }

    #[test]
    fn slash_commands_are_read_with_their_arguments() {
        let slash = read_slash("  /Tape_Search release notes ").unwrap();
        assert_eq!((slash.name.as_str(), slash.args), ("tape_search", "release notes"));
        assert_eq!(read_slash("/help").unwrap().args, "");
        assert_eq!(read_slash("/help@other_bot"), None, "another bot's");
        assert_eq!(read_slash("/etc/passwd is missing"), None);
        assert_eq!(read_slash("hello /help"), None);
        assert_eq!(read_slash("/"), None);
    }

    #[test]
    fn a_slash_command_is_the_comma_command_of_the_tool_with_its_name() {
        let tools = ["help", "tape.info", "tape.search", "reasoning_effort"];
        let read = |text| to_comma_command(&read_slash(text).unwrap(), tools, ",");
        assert_eq!(read("/tape_info").as_deref(), Some(",tape.info"));
        assert_eq!(read("/tape_search q limit=2").as_deref(), Some(",tape.search q limit=2"));
        assert_eq!(read("/reasoning_effort high").as_deref(), Some(",reasoning_effort high"));
        assert_eq!(read("/ls -la"), None, "not a tool: no shell fallback");
    }
}
