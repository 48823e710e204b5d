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
    /// A path that must be hidden lies in a directory the sandbox shows and
    /// holds something the sandbox needs (the config directly in `/etc`):
    /// covering it would break the sandbox, showing it would show secrets.
    #[error(
        "{} holds the gateway's config or data and must be hidden from the sandbox, yet the sandbox needs {} \
         there. Move the config and the files beside it into a folder of its own, such as /etc/bub/ (and \
         BUB_HOME into one of its own, such as /var/lib/bub)",
        .hidden.display(),
        .needed.display()
    )]
    HidesNeeded { hidden: PathBuf, needed: PathBuf },
    /// A path holds a NUL byte and cannot be passed to the kernel.
    #[error("the path {} holds a NUL byte", .0.display())]
    Nul(PathBuf),
}
