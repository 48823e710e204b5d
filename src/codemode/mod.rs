//! Code mode: the model calls bub's tools from Python it writes, instead of one
//! tool call per model round trip.
//!
//! A turn in code mode shows the model only the preserved tools and `run_code`;
//! every other allowed tool becomes `await tools.<model_name>(**kwargs)` inside
//! that code. The model no longer sees those tools' JSON Schemas in the request,
//! so it needs another way to learn their signatures: a typed Python stub file
//! whose path goes into the system prompt.
//!
//! - [`stub`]: renders that `.pyi` file from the tools' schemas and writes it
//!   under a path that stays stable while a session's tool set does.
//! - [`runner`]: the child script and the host side of its JSON-lines
//!   protocol; every tool call from the code runs on the host.

pub mod runner;
pub mod stub;
