//! The gateway config file: `GatewayConfig::parse`, then `validate_tools`
//! against the builtin tools, then every chat's effective policy.
//!
//! Invariants:
//! - an error names the file, and its `(line, column)`, when given, is a
//!   position inside the text (1-based; the column counts characters);
//! - a config that parses resolves, for every channel and chat it names, to a
//!   policy that can be described and that decides on every tool;
//! - the admin console's preview of a config against itself finds no one
//!   gaining or losing anything (`policy::access_diff`).
#![no_main]

use bub::config::{ConfigError, GatewayConfig, Layer};
use bub::tools::Capabilities;
use bub::tools::builtin::{self, ShellManager, WebFetchSettings};
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, LazyLock};

/// The builtin tools, with what each can do.
static TOOLS: LazyLock<Vec<(String, Capabilities)>> = LazyLock::new(|| {
    let shells = Arc::new(ShellManager::new());
    let mut tools = builtin::tools(shells.clone(), WebFetchSettings::default());
    tools.extend(builtin::session_tools(shells));
    tools.iter().map(|tool| (tool.name().to_string(), tool.capabilities())).collect()
});

static TOOL_NAMES: LazyLock<Vec<String>> = LazyLock::new(|| TOOLS.iter().map(|(name, _)| name.clone()).collect());

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let config = match GatewayConfig::parse(text, "bub.toml") {
        Ok(config) => config,
        Err(error) => return check_error(text, &error),
    };
    if let Err(error) = config.validate_tools(&TOOL_NAMES) {
        check_error(text, &error);
    }
    let mut chats = vec![("hooks".to_string(), "room-1".to_string())];
    for (layer, _) in config.layers() {
        match layer {
            Layer::Chat { channel, chat } => chats.push((channel, chat)),
            Layer::Channel(channel) => chats.push((channel, "some-chat".to_string())),
            Layer::BuiltIn | Layer::Agent | Layer::Defaults => {}
        }
    }
    let same = bub::policy::access_diff(&config, &config, &TOOLS);
    assert!(same.changes.is_empty(), "a config against itself: {:?}", same.changes);
    for (channel, chat) in chats {
        let policy = config.effective(&channel, &chat);
        let _ = policy.describe();
        for shared in [false, true] {
            let _ = policy.offered_tools(&TOOLS, shared);
        }
        for (tool, capabilities) in TOOLS.iter() {
            let _ = policy.tool_verdict(tool, *capabilities, Some("hooks:alice"), true, true);
            let _ = policy.untrusted_context_verdict(tool, *capabilities);
        }
    }
});

fn check_error(text: &str, error: &ConfigError) {
    let shown = error.to_string();
    assert!(shown.starts_with("bub.toml"), "{shown}");
    let Some((line, column)) = error.location() else { return };
    let lines: Vec<&str> = text.split('\n').collect();
    assert!(line >= 1 && line <= lines.len(), "line {line} of {} in {shown}", lines.len());
    let width = lines[line - 1].chars().count();
    assert!(column >= 1 && column <= width + 1, "column {column} of {width} in {shown}");
}
