//! The process's observability: what it tells the people who run it while it
//! runs, beyond `/metrics`.
//!
//! - [`logs`]: the log lines on stderr — which ones (`BUB_LOG`, a filter) and
//!   how they are written (`BUB_LOG_FORMAT`: text for a terminal, one JSON
//!   object a line for a log collector), as a `tracing` layer the binary
//!   composes with the traces' on one registry.
//! - [`traces`]: opt-in OTLP export of the gateway's spans (one trace per
//!   inbound message, the GenAI attributes of each model call), and the
//!   helpers the rest of bub records span attributes with; all of them do
//!   nothing when no endpoint is configured.
//!
//! Nothing here reads the environment or the config file: the `bub` binary
//! resolves the settings (`cli`) and installs the layers (`main.rs`).

pub mod logs;
pub mod traces;
