//! The syscall filter every sandboxed command gets: a short deny list,
//! compiled on the host by `seccompiler` (pure Rust, no libseccomp) and
//! installed by the child just before `exec`.
//!
//! Everything is allowed except what a command has no business doing and
//! what has been the door of kernel exploits from unprivileged namespaces:
//! new namespaces (`unshare`, `setns`, `clone` with a `CLONE_NEW*` flag) and
//! mounts, the keyring, `bpf`, `perf_event_open`, `userfaultfd`, `io_uring`,
//! module and kexec loading, file handles, swap, reboot, `syslog`, port I/O,
//! and the `ioctl`s that type into a terminal or drive a console (`TIOCSTI`,
//! `TIOCLINUX`). They fail with `EPERM`. `clone3` fails with `ENOSYS`: its flags sit behind
//! a pointer a filter cannot read, and libc then falls back to `clone`,
//! whose flags it can.

use super::error::SandboxError;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};
use std::collections::BTreeMap;

/// Syscalls refused outright.
const DENIED: &[libc::c_long] = &[
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_syslog,
    libc::SYS_acct,
    libc::SYS_quotactl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
];

/// `clone` flags that make a namespace.
const NAMESPACE_FLAGS: &[libc::c_int] = &[
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWNS,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWCGROUP,
];

/// `ioctl` requests refused: `TIOCSTI` types into a terminal (a command
/// that reached the gateway's terminal would type commands for the shell
/// that reads it next), `TIOCLINUX` reads and writes a Linux console.
/// Compared on the low 32 bits, all the kernel reads of the request.
const DENIED_IOCTLS: &[libc::c_ulong] = &[libc::TIOCSTI as libc::c_ulong, libc::TIOCLINUX as libc::c_ulong];

/// The argument of `clone` that holds its flags.
const CLONE_FLAGS_ARG: u8 = if cfg!(target_arch = "s390x") { 1 } else { 0 };

/// The filters, in the order the child installs them.
// Syscall numbers are c_long, i64 only on 64-bit targets.
#[allow(clippy::useless_conversion)]
pub fn filters() -> Result<Vec<BpfProgram>, SandboxError> {
    let failed = |error: seccompiler::BackendError| SandboxError::Setup {
        step: "compiling the seccomp filter".into(),
        source: std::io::Error::other(error.to_string()),
    };
    let arch = std::env::consts::ARCH.try_into().map_err(failed)?;
    let mut denied: BTreeMap<i64, Vec<SeccompRule>> = DENIED.iter().map(|nr| (i64::from(*nr), Vec::new())).collect();
    let clone_rules = NAMESPACE_FLAGS
        .iter()
        .map(|flag| {
            let flag = u64::from(flag.unsigned_abs());
            let condition =
                SeccompCondition::new(CLONE_FLAGS_ARG, SeccompCmpArgLen::Dword, SeccompCmpOp::MaskedEq(flag), flag)?;
            SeccompRule::new(vec![condition])
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(failed)?;
    denied.insert(i64::from(libc::SYS_clone), clone_rules);
    let ioctl_rules = DENIED_IOCTLS
        .iter()
        .map(|request| {
            let request = u64::from(*request);
            SeccompRule::new(vec![SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, request)?])
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(failed)?;
    denied.insert(i64::from(libc::SYS_ioctl), ioctl_rules);
    let eperm = SeccompFilter::new(denied, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), arch)
        .map_err(failed)?;
    let clone3 = [(i64::from(libc::SYS_clone3), Vec::new())].into_iter().collect();
    let enosys = SeccompFilter::new(clone3, SeccompAction::Allow, SeccompAction::Errno(libc::ENOSYS as u32), arch)
        .map_err(failed)?;
    [eperm, enosys].into_iter().map(|filter| BpfProgram::try_from(filter).map_err(failed)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filters_compile_for_this_architecture() {
        let filters = filters().expect("compiles");
        assert_eq!(filters.len(), 2);
        assert!(filters.iter().all(|f| !f.is_empty() && f.len() < u16::MAX as usize));
    }
}
