//! Code mode: the model writes Python that calls bub's tools; the tool calls run on the host.

pub mod runner;
