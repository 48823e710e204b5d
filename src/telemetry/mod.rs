//! What bub tells its operators about itself while it runs, beyond `/metrics`:
//! its traces, exported to a tracing backend over OpenTelemetry.
//!
//! - [`traces`]: opt-in OTLP export of the gateway's spans (one trace per
//!   inbound message, the GenAI attributes of each model call), and the
//!   helpers the rest of bub records span attributes with; all of them do
//!   nothing when no endpoint is configured.
//!
//! Nothing here reads the environment or the config file: the `bub` binary
//! resolves the settings (`cli`) and installs the layer (`main.rs`).

pub mod traces;
