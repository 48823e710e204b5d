//! The Model Context Protocol: bub as an MCP server ([`serve`]: its tapes,
//! read-only, for other agents).

pub mod serve;
