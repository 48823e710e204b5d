//! [`SandboxError`]: why a sandbox cannot be built or a command cannot start in it.

use super::probe::ProbeReport;
use std::path::PathBuf;

/// Why a sandbox cannot be built. Every variant means no command ran: the
/// sandbox fails closed and never falls back to the host.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A kernel feature the sandbox needs is missing; the report says which
    /// and what to enable.
    #[error("the sandbox cannot run on this host:\n{0}")]
    Unavailable(ProbeReport),
    /// A step of building the sandbox failed in the child (a mount, a
    /// namespace, the id maps…).
    #[error("building the sandbox failed while {step}: {source}")]
    Setup { step: String, source: std::io::Error },
    /// The configured Python interpreter cannot be resolved on the host.
    #[error("the Python interpreter {python:?} cannot be used in the sandbox: {reason}")]
    Python { python: PathBuf, reason: String },
    /// The workspace is not an absolute directory that can be prepared.
    #[error("the workspace {}: {source}", .path.display())]
    Workspace { path: PathBuf, source: std::io::Error },
    /// A path holds a NUL byte and cannot be passed to the kernel.
    #[error("the path {} holds a NUL byte", .0.display())]
    Nul(PathBuf),
}
