//! bub: a chat-bot gateway for LLM agents, and the agent runtime it runs.
//!
//! # Layout
//! - [`tape`]: append-only session history — entries, stores (SQLite, memory),
//!   anchors, forks, context building, spill of oversized tool results.
//! - [`home`]: where bub keeps its files (`$BUB_HOME`).
//! - [`cli`]: the `bub` command line.

pub mod agent;
pub mod cli;
pub mod command;
pub mod home;
pub mod model;
pub mod skills;
pub mod tape;
pub mod tools;
