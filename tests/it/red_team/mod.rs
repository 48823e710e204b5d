//! The red-team suite: every route by which a user without rights once
//! reached a shell, a tool or another chat, each pinned so it cannot come
//! back. Each module is one route; its tests drive the real agent (or the
//! real gateway binary against the fake platforms) the way an attacker
//! would, and assert what that attacker gets.
//!
//! - `model_tools`: a model call (or an injected prompt) naming a tool that is
//!   not for the model: `code_mode`, `model`, `quit`, `policy`.
//! - `subagent`: a subagent reaching another session, a tool its caller lacks,
//!   or a model the policy did not pick.
//! - `pairing`: a stranger reaching the agent (and a shell) with the shortest
//!   chat-platform config.
//! - `sandbox`: the shell of a chat bot reading the gateway's secrets,
//!   writing the host, reaching its port, forking or eating memory.
//! - `host_side`: the sandbox attacked from the host's side: the gateway's
//!   terminal, a killed gateway's leftovers, the config's folder, memory and
//!   processes of a whole tree.
//! - `disk`: a sandboxed command filling the disk the gateway's database
//!   lives on: the workspace's quota and the disk's reserve.
//! - `held`: routes that held (command-line tricks, symlinks), kept holding.
//! - `front_door`: the HTTP server's connection slots taken without a
//!   credential (slowloris from one or many addresses), starving health
//!   probes and signed webhooks.
//! - `own_address`: `web.fetch` aimed at the host's own public address,
//!   reaching whatever listens on `0.0.0.0` (the gateway too).
//! - `provenance`: text nobody vouched for (a stranger's message, a fetched
//!   page) steering the model into the shell.
//! - `mcp`: a denied MCP tool reached from the model, from code mode, from a
//!   subagent or from a non-operator's comma command; an undeclared MCP
//!   tool's answer steering the model into the shell.
//! - `workspace_files`: what a sandboxed command plants in the workspace
//!   (symlinks out, FIFOs, devices, hard links) read by the gateway as root.

mod agent;
// Unsafe only to play the attacker's part (setrlimit, ioctl on a pty); each block says why it is sound.
#[allow(unsafe_code)]
mod disk;
mod front_door;
mod held;
#[allow(unsafe_code)]
mod host_side;
mod mcp;
mod model_tools;
mod own_address;
// A stranger on Telegram: the route is a chat platform's.
#[cfg(feature = "telegram")]
mod pairing;
mod provenance;
mod sandbox;
mod subagent;
mod workspace_files;
