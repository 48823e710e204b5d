//! [`probe`]: which kernel features the sandbox can use on this host, and
//! for each missing one what to enable.

use super::settings::SandboxLimits;
use std::fmt;
use std::os::unix::process::CommandExt;

/// One kernel feature and whether it works here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feature {
    pub name: &'static str,
    pub available: bool,
    /// The sandbox cannot be built without it.
    pub required: bool,
    /// What was found (an ABI version, what bub uses it for).
    pub detail: String,
    /// When missing: what to enable or install, as a sentence.
    pub remedy: Option<String>,
}

/// What [`probe`] found, feature by feature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeReport {
    pub features: Vec<Feature>,
}

impl ProbeReport {
    /// True when every required feature works.
    pub fn is_ready(&self) -> bool {
        self.features.iter().all(|f| f.available || !f.required)
    }

    /// The required features that do not work.
    pub fn missing(&self) -> impl Iterator<Item = &Feature> {
        self.features.iter().filter(|f| f.required && !f.available)
    }

    /// The feature called `name`.
    pub fn feature(&self, name: &str) -> Option<&Feature> {
        self.features.iter().find(|f| f.name == name)
    }
}

impl fmt::Display for ProbeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for feature in &self.features {
            let mark = match (feature.available, feature.required) {
                (true, _) => "ok",
                (false, true) => "MISSING",
                (false, false) => "absent",
            };
            write!(f, "- {}: {mark} ({})", feature.name, feature.detail)?;
            if let (false, Some(remedy)) = (feature.available, &feature.remedy) {
                write!(f, ". {remedy}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// Names of the features in a [`ProbeReport`].
pub mod names {
    pub const USER_NAMESPACES: &str = "user namespaces";
    pub const MOUNT_NAMESPACES: &str = "mount namespaces";
    pub const PID_NAMESPACES: &str = "PID namespaces";
    pub const NETWORK_NAMESPACES: &str = "network namespaces";
    pub const MOUNT_SETATTR: &str = "mount_setattr";
    pub const RLIMITS: &str = "rlimits";
    pub const LANDLOCK: &str = "Landlock";
    pub const SECCOMP: &str = "seccomp";
    pub const SESSION_LIMITS: &str = "session limits";
    pub const WORKSPACE_QUOTA: &str = "workspace quota";
}

/// The workspace's quota and the disk's reserve (`quota.rs`), which hold
/// everywhere, and how far.
pub(super) fn workspace_quota(limits: &SandboxLimits) -> Feature {
    const MIB: u64 = 1024 * 1024;
    Feature {
        name: names::WORKSPACE_QUOTA,
        available: true,
        required: false,
        detail: format!(
            "{} MiB per workspace, {} MiB of its disk kept for the gateway; measured before and every {} ms while \
             a command runs, which may pass them by what it writes meanwhile",
            limits.workspace_bytes / MIB,
            limits.disk_reserve_bytes / MIB,
            super::quota::WATCH_EVERY.as_millis()
        ),
        remedy: None,
    }
}

/// Whether a session's whole tree is capped (a cgroup, `cgroup.rs`) or only
/// each process and each `/tmp`, and at what.
pub(super) fn session_limits(found: &Result<super::cgroup::Version, String>, limits: &SandboxLimits) -> Feature {
    const MIB: u64 = 1024 * 1024;
    let (memory, processes) = (limits.session_memory_bytes / MIB, limits.session_processes);
    let (per_process, tmp) = (limits.memory_bytes / MIB, limits.tmp_bytes / MIB);
    let (available, detail) = match found {
        Ok(version) => {
            let version = match version {
                super::cgroup::Version::V1 => "cgroup v1",
                super::cgroup::Version::V2 => "cgroup v2",
            };
            (true, format!("{version}: each session's whole tree is capped at {memory} MiB and {processes} processes"))
        }
        Err(why) => (
            false,
            format!(
                "no cgroup to cap a session's whole tree ({why}); what holds: {per_process} MiB per process, \
                 {} processes per command, {tmp} MiB for each /tmp and /dev/shm",
                limits.max_processes
            ),
        ),
    };
    Feature {
        name: names::SESSION_LIMITS,
        available,
        required: false,
        detail,
        remedy: Some(
            "Delegate the memory and pids controllers of cgroup v2 to the gateway (systemd: Delegate=yes in its \
             unit), or run it as root where the v1 memory and pids hierarchies are mounted"
                .into(),
        ),
    }
}

/// Tests, each in a throwaway child, the kernel features the sandbox builds
/// on. Cheap (a few forks); safe to call at start-up or from a health check.
pub fn probe() -> ProbeReport {
    let user = unshares(libc::CLONE_NEWUSER);
    let with_user = |flag| user && unshares(libc::CLONE_NEWUSER | flag);
    let namespace = |name, flag, what: &str| Feature {
        name,
        available: with_user(flag),
        required: true,
        detail: what.to_string(),
        remedy: Some(if user {
            format!(
                "Enable {name} in the kernel (CONFIG_{}_NS), or allow unshare in the container's seccomp profile",
                short(name)
            )
        } else {
            "Needs user namespaces first".to_string()
        }),
    };
    let landlock = landlock_abi();
    let root = rustix::process::geteuid().is_root();
    let features = vec![
        Feature {
            name: names::USER_NAMESPACES,
            available: user,
            required: true,
            detail: "an unprivileged uid inside, mapped to the gateway's uid (or nobody, when it is root)".into(),
            remedy: Some(user_namespace_remedy()),
        },
        namespace(
            names::MOUNT_NAMESPACES,
            libc::CLONE_NEWNS,
            "the file system view: tmpfs root, read-only binds, workspace",
        ),
        namespace(names::PID_NAMESPACES, libc::CLONE_NEWPID, "a PID 1 per spawn, whose death kills the whole tree"),
        namespace(
            names::NETWORK_NAMESPACES,
            libc::CLONE_NEWNET,
            "no network but an own loopback (needed unless network = true)",
        ),
        Feature {
            name: names::MOUNT_SETATTR,
            available: mount_setattr_exists(),
            required: false,
            detail: "recursive read-only binds (Linux 5.12+); older kernels get a remount of the top mount only".into(),
            remedy: Some("Upgrade to Linux 5.12 or later so mounts below /etc and /usr are read-only too".into()),
        },
        Feature {
            name: names::RLIMITS,
            available: true,
            required: true,
            detail: if root {
                "memory, processes, CPU, file size; the gateway is root, so sandboxes run as uid 65534 outside, where RLIMIT_NPROC applies".into()
            } else {
                "memory, processes, CPU, file size".into()
            },
            remedy: None,
        },
        Feature {
            name: names::LANDLOCK,
            available: landlock.is_some(),
            required: false,
            detail: match landlock {
                Some(abi) => format!("ABI {abi}; not used: the mount namespace already hides the host"),
                None => "not used: the mount namespace hides the host".into(),
            },
            remedy: Some("Boot with `lsm=landlock,…` (CONFIG_SECURITY_LANDLOCK) to have it available".into()),
        },
        Feature {
            name: names::SECCOMP,
            available: seccomp_exists(),
            required: true,
            detail: "a filter refusing namespaces, mounts, keyring, bpf, io_uring, module loading and TIOCSTI inside"
                .into(),
            remedy: Some("Enable CONFIG_SECCOMP and CONFIG_SECCOMP_FILTER in the kernel".into()),
        },
    ];
    ProbeReport { features }
}

fn short(name: &str) -> &'static str {
    match name {
        names::MOUNT_NAMESPACES => "MNT",
        names::PID_NAMESPACES => "PID",
        names::NETWORK_NAMESPACES => "NET",
        _ => "USER",
    }
}

/// Whether a child may unshare `flags`.
fn unshares(flags: libc::c_int) -> bool {
    let mut command = std::process::Command::new("/bin/sh");
    command.args(["-c", "exit 0"]).stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
    // SAFETY: unshare is a raw syscall, fine between fork and exec.
    unsafe {
        command.pre_exec(move || if libc::unshare(flags) == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) });
    }
    command.status().is_ok_and(|status| status.success())
}

/// The sentence that says why user namespaces may be off here.
fn user_namespace_remedy() -> String {
    let read = |path: &str| std::fs::read_to_string(path).ok().map(|s| s.trim().to_string());
    if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return "Set the sysctl user.max_user_namespaces to a positive number (it is 0)".into();
    }
    if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return "Set the sysctl kernel.unprivileged_userns_clone=1 (Debian and older Ubuntu kernels turn it off)"
            .into();
    }
    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        return "Ubuntu 23.10+ restricts them through AppArmor: set kernel.apparmor_restrict_unprivileged_userns=0, or give the bub binary an AppArmor profile with the `userns,` rule".into();
    }
    if std::path::Path::new("/.dockerenv").exists() || read("/proc/1/cgroup").is_some_and(|c| c.contains("docker")) {
        return "Docker's default seccomp profile refuses unshare: run the container with a profile that allows it (or --security-opt seccomp=unconfined)".into();
    }
    "Enable CONFIG_USER_NS in the kernel (and check that no LSM or seccomp policy refuses unshare(CLONE_NEWUSER))"
        .into()
}

/// The Landlock ABI version, if Landlock is enabled.
fn landlock_abi() -> Option<i64> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: the version query takes no ruleset and returns an integer.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    (version > 0).then_some(version)
}

/// True unless the kernel lacks `mount_setattr` (Linux before 5.12).
fn mount_setattr_exists() -> bool {
    // SAFETY: invalid arguments on purpose: the kernel answers EBADF or EINVAL when it knows the call.
    let result = unsafe { libc::syscall(libc::SYS_mount_setattr, -1, c"".as_ptr(), 0, std::ptr::null::<u8>(), 0usize) };
    result == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOSYS)
}

fn seccomp_exists() -> bool {
    // SAFETY: PR_GET_SECCOMP only reads this thread's mode.
    unsafe { libc::prctl(libc::PR_GET_SECCOMP) >= 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_host_has_what_the_sandbox_needs() {
        let report = probe();
        assert!(report.is_ready(), "{report}");
        assert!(report.feature(names::USER_NAMESPACES).is_some_and(|f| f.available));
    }

    #[test]
    fn a_missing_feature_is_printed_with_its_remedy() {
        let report = ProbeReport {
            features: vec![Feature {
                name: names::USER_NAMESPACES,
                available: false,
                required: true,
                detail: "uids".into(),
                remedy: Some("Turn it on".into()),
            }],
        };
        assert!(!report.is_ready());
        assert_eq!(report.to_string(), "- user namespaces: MISSING (uids). Turn it on\n");
        assert_eq!(report.missing().count(), 1);
    }
}
