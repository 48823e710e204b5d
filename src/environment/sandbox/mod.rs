//! A sandboxed session environment: `bash`, `run_code` and everything they
//! start run in Linux namespaces that show the session its workspace and the
//! system read-only, and nothing of the gateway (`$BUB_HOME`, its database,
//! config, secrets, other sessions' workspaces, its network ports).
//!
//! [`SandboxProvider::new`] probes the kernel and builds one trial sandbox;
//! it fails with a [`SandboxError`] instead of ever falling back to the host,
//! and so does every spawn whose sandbox cannot be built. [`probe`] reports
//! which kernel features work and what to enable for each missing one.
//!
//! ```no_run
//! # async fn gateway(bub_home: std::path::PathBuf) -> Result<(), Box<dyn std::error::Error>> {
//! use bub::environment::sandbox::{SandboxProvider, SandboxSettings};
//! use std::sync::Arc;
//! let settings = SandboxSettings { hidden: vec![bub_home.clone()], ..SandboxSettings::default() };
//! // Fails (SandboxError) where no sandbox can be built: refuse to start, do not fall back.
//! let provider = Arc::new(SandboxProvider::new(settings).await?);
//! let environments = bub::environment::Environments::new(
//!     provider,
//!     bub_home.join("workspaces"),
//!     bub::environment::sessions::DEFAULT_IDLE,
//! );
//! # let _ = environments; Ok(()) }
//! ```
//!
//! # What a sandboxed process gets
//! - the workspace read-write at its host path, as its working directory
//!   (when the gateway is root, the workspace is given to uid 65534, the
//!   sandbox's uid outside);
//! - `/usr`, `/bin`, `/sbin`, `/lib*`, `/etc`, the Python installation and
//!   [`SandboxSettings::read_only`] read-only, nosuid, nodev; nothing else of
//!   the host, and [`SandboxSettings::hidden`] paths covered where they lie
//!   inside those;
//! - a fresh `/tmp` and `/dev/shm` (tmpfs), its own `/proc`, a `/dev` with
//!   `null`, `zero`, `full`, `random`, `urandom` and `tty`;
//! - a session of its own without a controlling terminal (`setsid`; stdin
//!   is a pipe), so it cannot reach the terminal the gateway was started
//!   from;
//! - uid and gid 1000 inside (mapped to the gateway's uid, or to 65534 when
//!   the gateway is root, so `RLIMIT_NPROC` applies), no capabilities after
//!   exec, `no_new_privs`, no supplementary groups of root;
//! - a seccomp filter that refuses new namespaces, mounts, the keyring,
//!   `bpf`, `perf_event_open`, `userfaultfd`, `io_uring`, module loading
//!   and typing into a terminal (`TIOCSTI`, `TIOCLINUX`) (`seccomp.rs`);
//! - its own network namespace with only a loopback unless
//!   [`SandboxSettings::network`];
//! - rlimits on address space, processes, CPU time, file size and open files
//!   ([`SandboxLimits`]), and its stdout and stderr cut after
//!   [`SandboxLimits::max_output_bytes`];
//! - a quota on what the workspace holds and a reserve of free disk the
//!   gateway keeps ([`SandboxLimits::workspace_bytes`],
//!   [`SandboxLimits::disk_reserve_bytes`]), measured before and while each
//!   command runs (`quota.rs`: a bounded guarantee, not an exact one);
//! - a cgroup per session, where the host has one to give, capping the
//!   memory and processes of the session's whole tree (`cgroup.rs`;
//!   [`SandboxProvider::report`] says whether it holds);
//! - only `PATH`, `HOME`, `TMPDIR`, `LANG`, `USER` and the spawn's own
//!   variables: none of the gateway's environment (tokens, API keys).
//!
//! Each spawn is its own PID namespace: its PID 1 dies with the host's child,
//! and the kernel kills everything left in the namespace, so
//! [`crate::environment::Process::signal`] and
//! [`crate::environment::Environment::close`] reach the whole tree even when
//! something inside left the process group. The host's child dies with
//! the gateway (a parent-death signal), so a SIGKILLed or crashed gateway
//! leaves nothing running either.
//!
//! # Why this design
//! No helper binary and no system package: the sandbox is built by the
//! gateway's own child between `fork` and `exec` (`Command::pre_exec`),
//! with raw syscalls only (see `child.rs` for the three processes involved
//! and why each exists). The options weighed:
//! - *hakoniwa* builds containers well, but runs ordinary allocating Rust in
//!   the forked child of a multithreaded tokio process (a deadlock waiting to
//!   happen with a global allocator lock held by another thread at fork
//!   time), brings its own `Child` outside tokio's reaper, and its seccomp
//!   links the system libseccomp.
//! - *re-executing a helper* needs a binary to exec: the `bub` binary is not
//!   there when bub is used as a library or from its tests.
//! - *`pre_exec`* keeps tokio's `Child`, its async pipes and its reaper, and
//!   the process group the shell tools already signal; the price is that the
//!   child code must be async-signal-safe, which `child.rs` keeps to by
//!   walking a list of C strings (`plan.rs`) prepared on the host.
//!
//! The seccomp filter is compiled by `seccompiler` (pure Rust; hakoniwa's
//! seccomp would link the system libseccomp). Landlock is probed but not
//! used: the mount namespace already makes everything outside the workspace
//! invisible or read-only, which is stronger than Landlock's rules. On hosts
//! without user namespaces the provider refuses to start; it does not
//! degrade to Landlock alone.
//!
//! # Layout
//! - `settings.rs`: [`SandboxSettings`], [`SandboxLimits`].
//! - `probe.rs`: [`probe`], [`ProbeReport`], [`Feature`].
//! - `plan.rs`: the blueprint: every mount as data, made on the host.
//! - `child.rs`: the child side, between fork and exec.
//! - `environment.rs`: [`SandboxEnvironment`].
//! - `process.rs`: capped output (the process itself is a
//!   [`LocalProcess`](crate::environment::LocalProcess) leading its group).
//! - `python.rs`: resolving the interpreter past shims.
//! - `seccomp.rs`: the syscall filter.
//! - `cgroup.rs`: the memory and process caps of a session's whole tree.
//! - `quota.rs`: the workspace's quota and the disk's reserve.
//! - `spawner.rs`: the long-lived threads every sandbox is forked from.
//! - `error.rs`: [`SandboxError`].

mod cgroup;
mod child;
mod environment;
mod error;
mod plan;
mod probe;
mod process;
mod python;
mod quota;
mod seccomp;
mod settings;
mod spawner;

pub use environment::SandboxEnvironment;
pub use error::SandboxError;
pub use probe::{Feature, ProbeReport, names as feature_names, probe};
pub use python::{Python, resolve as resolve_python};
pub use settings::{SandboxLimits, SandboxSettings};

use super::{Environment, EnvironmentError, EnvironmentProvider, Program, SpawnOptions};
use async_trait::async_trait;
use plan::Exposed;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Makes a [`SandboxEnvironment`] per session. Construction is the check:
/// a provider exists only where sandboxes can be built.
#[derive(Debug, Clone)]
pub struct SandboxProvider {
    settings: SandboxSettings,
    python: Option<Python>,
    /// Where sessions' cgroups are made, or why there are none.
    cgroups: Result<Arc<cgroup::Cgroups>, String>,
    report: ProbeReport,
}

impl SandboxProvider {
    /// Probes the kernel, resolves the interpreter and runs one command in a
    /// trial sandbox. Fails with [`SandboxError::Unavailable`] when a needed
    /// kernel feature is missing, [`SandboxError::Python`] when a configured
    /// interpreter cannot be used, and the trial's error when building a
    /// sandbox fails here for another reason.
    pub async fn new(settings: SandboxSettings) -> Result<SandboxProvider, SandboxError> {
        let network = settings.network;
        let mut report = tokio::task::spawn_blocking(probe::probe)
            .await
            .map_err(|e| SandboxError::Setup { step: "probing the kernel".into(), source: std::io::Error::other(e) })?;
        let missing = report.missing().any(|feature| !(network && feature.name == probe::names::NETWORK_NAMESPACES));
        if missing {
            return Err(SandboxError::Unavailable(report));
        }
        let configured = settings.python.clone();
        // The blocking closures that log do it in the caller's span.
        let span = tracing::Span::current();
        let python = tokio::task::spawn_blocking(move || {
            span.in_scope(|| match configured {
                Some(python) => python::resolve(&python).map(Some),
                None => Ok(python::resolve(Path::new("python3"))
                    .inspect_err(|error| tracing::warn!(%error, "code mode will not find python3 in the sandbox"))
                    .ok()),
            })
        })
        .await
        .map_err(|e| SandboxError::Setup { step: "resolving Python".into(), source: std::io::Error::other(e) })??;
        let span = tracing::Span::current();
        let cgroups = tokio::task::spawn_blocking(move || span.in_scope(cgroup::shared))
            .await
            .map_err(|e| SandboxError::Setup { step: "finding cgroups".into(), source: std::io::Error::other(e) })?;
        if let Err(why) = &cgroups {
            tracing::warn!(%why, "no cgroup caps a session's whole tree; only per-process limits hold");
        }
        let version = cgroups.as_ref().map(|c| c.version).map_err(Clone::clone);
        report.features.push(probe::session_limits(&version, &settings.limits));
        report.features.push(probe::workspace_quota(&settings.limits));
        let provider = SandboxProvider { settings, python, cgroups, report };
        provider.check().await?;
        Ok(provider)
    }

    /// What the probe found at construction, and how a session's tree is
    /// capped here: for the start-up output.
    pub fn report(&self) -> &ProbeReport {
        &self.report
    }

    /// The settings every environment of this provider gets.
    pub fn settings(&self) -> &SandboxSettings {
        &self.settings
    }

    /// Runs `exit 0` in a sandbox around a scratch workspace, so a host that
    /// cannot build one is found at start-up, not on a user's first command.
    pub async fn check(&self) -> Result<(), SandboxError> {
        static TRIALS: AtomicU64 = AtomicU64::new(0);
        // Scratch removed at once, in the system's temp dir (`TMPDIR`): part
        // of trying a spawn, like reading `PATH`, not a bub setting.
        let scratch = std::env::temp_dir().join(format!(
            "bub-sandbox-check-{}-{}",
            std::process::id(),
            TRIALS.fetch_add(1, Ordering::Relaxed)
        ));
        let result = self.trial(&scratch).await;
        let _ = std::fs::remove_dir_all(&scratch);
        result
    }

    async fn trial(&self, scratch: &Path) -> Result<(), SandboxError> {
        let environment = self.prepare(scratch.to_path_buf()).await?;
        let failed = |reason: String| SandboxError::Setup {
            step: "running a trial command".into(),
            source: std::io::Error::other(reason),
        };
        let mut process = environment.start(&Program::Shell("exit 0".into()), &SpawnOptions::default()).await.map_err(
            |(_, failure)| match failure {
                environment::SpawnFailure::Sandbox(error) => error,
                environment::SpawnFailure::Environment(error) => failed(error.to_string()),
                environment::SpawnFailure::Io(error) => failed(error.to_string()),
            },
        )?;
        use super::Process;
        let code = process.wait().await.map_err(|e| failed(e.to_string()))?;
        if code != 0 {
            return Err(failed(format!("`exit 0` exited with {code}")));
        }
        Ok(())
    }

    /// [`SandboxProvider::environment`] off the runtime's threads (it walks
    /// the workspace to give it to the sandbox's uid when the gateway is root).
    async fn prepare(&self, workspace: PathBuf) -> Result<SandboxEnvironment, SandboxError> {
        let (provider, span) = (self.clone(), tracing::Span::current());
        let prepared = tokio::task::spawn_blocking(move || span.in_scope(|| provider.environment(workspace)));
        prepared.await.map_err(|e| SandboxError::Setup {
            step: "preparing the workspace".into(),
            source: std::io::Error::other(e),
        })?
    }

    /// The sandbox of a session working in `workspace` (created if missing).
    /// Blocking: it may walk the workspace (see the module docs).
    pub fn environment(&self, workspace: impl Into<PathBuf>) -> Result<SandboxEnvironment, SandboxError> {
        let workspace = workspace.into();
        let workspace_error = |source| SandboxError::Workspace { path: workspace.clone(), source };
        std::fs::create_dir_all(&workspace).map_err(workspace_error)?;
        let workspace = workspace.canonicalize().map_err(workspace_error)?;
        let mut exposed = Exposed { read_only: self.settings.read_only.clone(), ..Exposed::default() };
        if let Some(python) = &self.python {
            exposed.needed.extend(python.prefixes.iter().cloned());
            exposed.needed.push(python.executable.clone());
        }
        let mut blueprint = plan::blueprint(&workspace, &self.settings, &exposed)?;
        let cgroup = match &self.cgroups {
            Ok(cgroups) => Some(cgroups.session(&self.settings.limits)?),
            Err(_) => None,
        };
        if let Some(cgroup) = &cgroup {
            blueprint.cgroup_procs = cgroup.procs()?;
        }
        let (interpreter, dir) = match &self.python {
            Some(python) => (python.executable.to_string_lossy().into_owned(), python.executable.parent()),
            None => ("python3".to_string(), None),
        };
        SandboxEnvironment::new(workspace, interpreter, dir, blueprint, cgroup)
    }
}

#[async_trait]
impl EnvironmentProvider for SandboxProvider {
    async fn provide(&self, session: &str, workspace: PathBuf) -> Result<Arc<dyn Environment>, EnvironmentError> {
        let environment = self.prepare(workspace).await.map_err(|error| EnvironmentError::Spawn {
            command: format!("the sandbox of session {session}"),
            source: std::io::Error::other(error),
        })?;
        Ok(Arc::new(environment))
    }
}
