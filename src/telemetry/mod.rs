//! The process's observability: what it tells the people who run it while it
//! runs.
//!
//! - [`logs`]: the log lines on stderr — which ones (`BUB_LOG`, a filter) and
//!   how they are written (`BUB_LOG_FORMAT`: text for a terminal, one JSON
//!   object a line for a log collector), as a `tracing` layer the binary
//!   composes with any other (traces) on one registry.
//!
//! Nothing here reads the environment: the command line does, and hands the
//! values in.

pub mod logs;
