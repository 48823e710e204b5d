//! The child side: what runs between `fork` and `exec`, inside
//! `Command::pre_exec`, to put the command into its sandbox.
//!
//! The gateway is a multithreaded tokio process with mimalloc, so after the
//! fork only async-signal-safe work is allowed: raw syscalls (through
//! `libc`) over data the host prepared in a [`Blueprint`]. Nothing here
//! allocates, locks or formats; a failing step writes `(step, errno)` to the
//! report pipe and returns the errno, which `std` hands back as the spawn's
//! error, so a sandbox that cannot be built never runs the command.
//!
//! Three processes, each forked with a raw `clone` (no `atfork` handlers):
//! - **A**, the process `std` forked (its pid is the one the host waits for
//!   and signals, and its process group holds everything below). It starts
//!   a session of its own (no controlling terminal: a command cannot reach
//!   the terminal the gateway was started from, nor type into it), drops
//!   its supplementary groups (when root), enters a new user namespace whose
//!   id maps a short-lived helper forked before writes from the parent
//!   namespace (a process may not map ids other than its own from inside),
//!   then unshares mount, PID, network, IPC and UTS namespaces. It forks B,
//!   closes every descriptor and waits, exiting as B exits (or dying of the
//!   host's signal, which takes B with it through B's parent-death signal).
//!   A itself has a parent-death signal (`SIGKILL`): a SIGKILLed or crashed
//!   gateway takes A, so B, so everything inside, with it. The kernel sends
//!   it when the *thread* that forked A ends, which is why sandboxes are
//!   forked from threads that live as long as the gateway (`spawner.rs`).
//!   Setting ids inside a user namespace would reset it, but A and B keep
//!   theirs; C drops its own, and needs none (it dies with B). Before it
//!   forks anything, A moves itself into the session's cgroup (`cgroup.rs`).
//! - **B**, PID 1 of the new PID namespace: builds the file system (the
//!   blueprint's steps: a tmpfs root, read-only binds, the workspace, a fresh
//!   `/tmp`, `/dev`, `/proc`, then the host's root detached), brings up its
//!   own loopback, forks C, closes every descriptor and reaps until C exits.
//!   When B exits, the kernel kills everything left in the namespace, so
//!   nothing a command starts survives it, `setsid` or not.
//! - **C**: drops to the unprivileged inside uid and gid (which lose every
//!   capability at `exec`), sets `no_new_privs` and the rlimits, marks
//!   inherited descriptors close-on-exec, installs the seccomp filter and
//!   returns to `std`, which execs the command.

use super::plan::{Blueprint, INSIDE_ID, Op};
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::RawFd;
use std::ptr;

/// The per-spawn part: the pipes and the working directory.
#[derive(Debug)]
pub struct Wiring {
    /// Write end of the report pipe (`step`, `errno` as two little-endian u32).
    pub report: RawFd,
    /// The pipe through which A tells the id-map helper that it has unshared.
    pub sync_read: RawFd,
    pub sync_write: RawFd,
    /// The working directory, the same path inside as on the host.
    pub cwd: CString,
    /// The gateway's pid: A's parent, whose death A must not outlive.
    pub gateway: libc::pid_t,
    /// `RLIMIT_FSIZE` of this spawn: the blueprint's, or less when the
    /// workspace's quota or the disk's reserve leave less (`quota.rs`).
    pub max_file_bytes: u64,
}

/// A step of the setup that is not one of the blueprint's operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Step {
    Groups = 0x8000_0000,
    Fork,
    UserNamespace,
    IdMaps,
    Namespaces,
    Hostname,
    Loopback,
    WorkingDirectory,
    Ids,
    NoNewPrivileges,
    Limits,
    Descriptors,
    Seccomp,
    Session,
    Parent,
    Cgroup,
}

impl Step {
    const ALL: [Step; 16] = [
        Step::Groups,
        Step::Fork,
        Step::UserNamespace,
        Step::IdMaps,
        Step::Namespaces,
        Step::Hostname,
        Step::Loopback,
        Step::WorkingDirectory,
        Step::Ids,
        Step::NoNewPrivileges,
        Step::Limits,
        Step::Descriptors,
        Step::Seccomp,
        Step::Session,
        Step::Parent,
        Step::Cgroup,
    ];

    /// What a reported step code was about.
    pub fn describe(code: u32, blueprint: &Blueprint) -> String {
        if let Some(op) = usize::try_from(code).ok().and_then(|i| blueprint.ops.get(i)) {
            return op.describe();
        }
        let Some(step) = Step::ALL.iter().find(|s| **s as u32 == code) else {
            return format!("setup step {code}");
        };
        match step {
            Step::Groups => "dropping supplementary groups",
            Step::Fork => "forking inside the sandbox",
            Step::UserNamespace => "creating a user namespace (see `bub::environment::sandbox::probe`)",
            Step::IdMaps => "writing the user namespace's uid and gid maps",
            Step::Namespaces => "creating mount, PID, network, IPC and UTS namespaces",
            Step::Hostname => "setting the sandbox's host name",
            Step::Loopback => "bringing up the sandbox's loopback interface",
            Step::WorkingDirectory => "changing into the working directory",
            Step::Ids => "switching to the unprivileged sandbox user",
            Step::NoNewPrivileges => "setting no_new_privs",
            Step::Limits => "setting resource limits",
            Step::Descriptors => "closing inherited file descriptors",
            Step::Seccomp => "installing the seccomp filter",
            Step::Session => "starting a session without a controlling terminal",
            Step::Parent => "tying the sandbox's life to the gateway's",
            Step::Cgroup => "joining the session's cgroup",
        }
        .to_string()
    }
}

/// Enters the sandbox; see the module docs. Returns only in C (to exec) or
/// with the error of a failed step.
///
/// # Safety
/// Must be called in a freshly forked child (`pre_exec`) and nowhere else:
/// it forks, unshares, mounts and exits processes.
pub unsafe fn enter(blueprint: &Blueprint, wiring: &Wiring) -> io::Result<()> {
    // SAFETY: the caller guarantees a forked, single-threaded child; every call
    // below is a raw syscall on memory the host prepared.
    unsafe {
        reset_signals();
        // A session of its own, so no controlling terminal: the gateway's
        // (when started from a shell) is not reachable through /dev/tty.
        // Also a process group led by A, which the host signals.
        step(wiring, Step::Session as u32, libc::setsid() as libc::c_long)?;
        // Dies with the gateway, SIGKILLed or crashed (the forking thread
        // lives as long as the gateway: `spawner.rs`). A gateway already
        // gone before this line has made A a child of another process.
        step(wiring, Step::Parent as u32, libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) as _)?;
        if libc::getppid() != wiring.gateway {
            step(wiring, Step::Parent as u32, fail_with(libc::ESRCH))?;
        }
        // Into the session's cgroup before anything is forked, so the whole
        // tree is counted (as root of the host's namespace, which may).
        for procs in &blueprint.cgroup_procs {
            step(wiring, Step::Cgroup as u32, join_cgroup(procs))?;
        }
        if blueprint.outer_root {
            step(wiring, Step::Groups as u32, libc::syscall(libc::SYS_setgroups, 0, ptr::null::<libc::gid_t>()))?;
        }
        let mapper = step(wiring, Step::Fork as u32, raw_fork())?;
        if mapper == 0 {
            write_id_maps(blueprint, wiring);
        }
        libc::close(wiring.sync_read);
        step(wiring, Step::UserNamespace as u32, libc::unshare(libc::CLONE_NEWUSER) as libc::c_long)?;
        libc::write(wiring.sync_write, b"1".as_ptr().cast(), 1);
        libc::close(wiring.sync_write);
        let status = wait_for(mapper as libc::pid_t);
        if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
            // The helper reported its own failure.
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        // A and B keep capabilities in the new namespace and never exec: not
        // dumpable, so nothing inside can ptrace them (C's exec resets it).
        libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong);
        let mut namespaces = libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
        if !blueprint.network {
            namespaces |= libc::CLONE_NEWNET;
        }
        step(wiring, Step::Namespaces as u32, libc::unshare(namespaces) as libc::c_long)?;
        // B cannot see A (outside its PID namespace) to check that A is still
        // its parent once B asked to die with it; A's end of this pipe tells
        // instead: it closes when A dies.
        let mut alive = [-1 as libc::c_int; 2];
        step(wiring, Step::Parent as u32, libc::pipe2(alive.as_mut_ptr(), libc::O_CLOEXEC) as libc::c_long)?;
        let init = step(wiring, Step::Fork as u32, raw_fork())?;
        if init != 0 {
            close_all_but(alive[1] as libc::c_uint);
            exit_as(wait_for(init as libc::pid_t));
        }

        // B: PID 1 of the sandbox; its death ends everything inside.
        libc::close(alive[1]);
        step(wiring, Step::Parent as u32, libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) as _)?;
        if parent_gone(alive[0]) {
            step(wiring, Step::Parent as u32, fail_with(libc::ESRCH))?;
        }
        libc::close(alive[0]);
        for (index, op) in blueprint.ops.iter().enumerate() {
            step(wiring, index as u32, apply(op))?;
        }
        let name = c"bub-sandbox";
        step(wiring, Step::Hostname as u32, libc::sethostname(name.as_ptr(), name.count_bytes()) as libc::c_long)?;
        if !blueprint.network {
            step(wiring, Step::Loopback as u32, loopback_up())?;
        }
        step(wiring, Step::WorkingDirectory as u32, libc::chdir(wiring.cwd.as_ptr()) as libc::c_long)?;
        let command = step(wiring, Step::Fork as u32, raw_fork())?;
        if command != 0 {
            close_from(0);
            reap_until(command as libc::pid_t);
        }

        // C: the command.
        libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong, 0, 0, 0);
        let id = INSIDE_ID as libc::c_long;
        step(wiring, Step::Ids as u32, libc::syscall(libc::SYS_setresgid, id, id, id))?;
        step(wiring, Step::Ids as u32, libc::syscall(libc::SYS_setresuid, id, id, id))?;
        step(wiring, Step::NoNewPrivileges as u32, libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) as libc::c_long)?;
        let limits = &blueprint.limits;
        for (resource, soft, hard) in [
            (libc::RLIMIT_AS, limits.memory_bytes, limits.memory_bytes),
            (libc::RLIMIT_NPROC, limits.max_processes, limits.max_processes),
            (libc::RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds.saturating_add(5)),
            (libc::RLIMIT_FSIZE, wiring.max_file_bytes, wiring.max_file_bytes),
            (libc::RLIMIT_NOFILE, limits.open_files, limits.open_files),
            (libc::RLIMIT_CORE, 0, 0),
        ] {
            step(wiring, Step::Limits as u32, lower_limit(resource, soft, hard))?;
        }
        step(wiring, Step::Descriptors as u32, cloexec_from(3))?;
        for filter in &blueprint.filters {
            let program = libc::sock_fprog { len: filter.len() as libc::c_ushort, filter: filter.as_ptr() as *mut _ };
            let installed = libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, 0, &raw const program);
            step(wiring, Step::Seccomp as u32, installed)?;
        }
        Ok(())
    }
}

/// The id-map helper (forked from A before it unshares, so it stays in the
/// parent user namespace): waits for A's word, writes A's maps, exits.
unsafe fn write_id_maps(blueprint: &Blueprint, wiring: &Wiring) -> ! {
    // SAFETY: raw syscalls on stack buffers and the blueprint's bytes.
    unsafe {
        libc::close(wiring.sync_write);
        let mut byte = 0u8;
        if libc::read(wiring.sync_read, (&raw mut byte).cast(), 1) != 1 {
            libc::_exit(2);
        }
        let parent = libc::getppid();
        let files: [(&[u8], &[u8]); 3] =
            [(b"setgroups", b"deny"), (b"uid_map", &blueprint.uid_map), (b"gid_map", &blueprint.gid_map)];
        for (file, content) in files {
            let mut path = [0u8; 64];
            let Some(path) = proc_path(&mut path, parent, file) else { libc::_exit(3) };
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            let written = if fd < 0 { -1 } else { libc::write(fd, content.as_ptr().cast(), content.len()) };
            if written != content.len() as isize {
                report(wiring, Step::IdMaps as u32, errno());
                libc::_exit(1);
            }
            libc::close(fd);
        }
        libc::_exit(0)
    }
}

/// `/proc/<pid>/<file>` as a C string in `buffer`.
fn proc_path<'a>(buffer: &'a mut [u8; 64], pid: libc::pid_t, file: &[u8]) -> Option<&'a CStr> {
    let mut digits = [0u8; 12];
    let mut n = u32::try_from(pid).ok()?;
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut len = 0;
    for part in [b"/proc/".as_slice(), &digits[start..], b"/", file] {
        buffer.get_mut(len..len + part.len())?.copy_from_slice(part);
        len += part.len();
    }
    *buffer.get_mut(len)? = 0;
    CStr::from_bytes_with_nul(&buffer[..=len]).ok()
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;

/// Runs one blueprint step; a negative return means `errno` says why.
unsafe fn apply(op: &Op) -> libc::c_long {
    let tolerate_existing = |result: libc::c_int| {
        if result == 0 || errno() == libc::EEXIST { 0 } else { -1 }
    };
    // SAFETY: raw syscalls on the blueprint's C strings.
    unsafe {
        match op {
            Op::MakePrivate => {
                libc::mount(ptr::null(), c"/".as_ptr(), ptr::null(), libc::MS_REC | libc::MS_PRIVATE, ptr::null())
                    as libc::c_long
            }
            Op::Mkdir(path) => tolerate_existing(libc::mkdir(path.as_ptr(), 0o755)),
            Op::Touch(path) => {
                let fd = libc::open(path.as_ptr(), libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC, 0o644);
                if fd >= 0 {
                    libc::close(fd);
                    0
                } else {
                    -1
                }
            }
            Op::Symlink { target, link } => tolerate_existing(libc::symlink(target.as_ptr(), link.as_ptr())),
            Op::Tmpfs { target, options, flags } => {
                libc::mount(c"tmpfs".as_ptr(), target.as_ptr(), c"tmpfs".as_ptr(), *flags, options.as_ptr().cast())
                    as libc::c_long
            }
            Op::Proc(target) => libc::mount(
                c"proc".as_ptr(),
                target.as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                ptr::null(),
            ) as libc::c_long,
            Op::Bind { source, target, recursive } => {
                let flags = libc::MS_BIND | if *recursive { libc::MS_REC } else { 0 };
                libc::mount(source.as_ptr(), target.as_ptr(), ptr::null(), flags, ptr::null()) as libc::c_long
            }
            Op::ReadOnly { target, recursive } => set_attributes(
                target,
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                *recursive,
                libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
            ),
            Op::NoSuid(target) => {
                set_attributes(target, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, false, libc::MS_NOSUID | libc::MS_NODEV)
            }
            Op::PivotRoot { new_root, put_old } => {
                libc::syscall(libc::SYS_pivot_root, new_root.as_ptr(), put_old.as_ptr())
            }
            Op::Chdir(path) => libc::chdir(path.as_ptr()) as libc::c_long,
            Op::Detach(path) => libc::umount2(path.as_ptr(), libc::MNT_DETACH) as libc::c_long,
            Op::Rmdir(path) => libc::rmdir(path.as_ptr()) as libc::c_long,
        }
    }
}

/// Sets mount attributes with `mount_setattr` (Linux 5.12+, recursive and
/// blind to the flags the kernel locks on mounts from a more privileged
/// namespace); before 5.12, a remount that keeps the flags it finds.
unsafe fn set_attributes(target: &CStr, attributes: u64, recursive: bool, fallback: libc::c_ulong) -> libc::c_long {
    let attr = MountAttr { attr_set: attributes, attr_clr: 0, propagation: 0, userns_fd: 0 };
    let flags = if recursive { libc::AT_RECURSIVE } else { 0 };
    // SAFETY: raw syscalls on a C string and stack structs.
    unsafe {
        let result = libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            target.as_ptr(),
            flags,
            &raw const attr,
            std::mem::size_of::<MountAttr>(),
        );
        if result == 0 || errno() != libc::ENOSYS {
            return result;
        }
        // glibc answers statvfs from statfs's f_flags (Linux 2.6.36+), no file read.
        let mut stat: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(target.as_ptr(), &mut stat) != 0 {
            return -1;
        }
        let keep = (stat.f_flag as libc::c_ulong)
            & (libc::MS_RDONLY
                | libc::MS_NOSUID
                | libc::MS_NODEV
                | libc::MS_NOEXEC
                | libc::MS_NOATIME
                | libc::MS_NODIRATIME
                | libc::MS_RELATIME);
        libc::mount(
            ptr::null(),
            target.as_ptr(),
            ptr::null(),
            libc::MS_REMOUNT | libc::MS_BIND | keep | fallback,
            ptr::null(),
        ) as libc::c_long
    }
}

/// `struct ifreq` for the flags ioctls (40 bytes on every Linux ABI bub builds for).
#[repr(C)]
struct InterfaceFlags {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// `ip link set lo up` in the new network namespace.
unsafe fn loopback_up() -> libc::c_long {
    // SAFETY: raw socket and ioctl calls on a stack struct.
    unsafe {
        let socket = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if socket < 0 {
            return -1;
        }
        let mut request = InterfaceFlags { name: [0; 16], flags: 0, _pad: [0; 22] };
        request.name[..2].copy_from_slice(b"lo");
        let mut result = libc::ioctl(socket, libc::SIOCGIFFLAGS as _, &raw mut request);
        if result == 0 {
            request.flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            result = libc::ioctl(socket, libc::SIOCSIFFLAGS as _, &raw const request);
        }
        let saved = errno();
        libc::close(socket);
        set_errno(saved);
        result as libc::c_long
    }
}

/// Lowers a limit to at most the values given (never above the current hard limit).
// rlim_t is not u64 on every target, hence conversions that are no-ops here.
#[allow(clippy::useless_conversion, clippy::unnecessary_fallible_conversions)]
unsafe fn lower_limit(resource: libc::__rlimit_resource_t, soft: u64, hard: u64) -> libc::c_long {
    // SAFETY: getrlimit/setrlimit on a stack struct.
    unsafe {
        let mut current = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        if libc::getrlimit(resource, &mut current) != 0 {
            return -1;
        }
        let hard = hard.min(u64::from(current.rlim_max));
        let clamp = |value: u64| libc::rlim_t::try_from(value).unwrap_or(current.rlim_max);
        let limit = libc::rlimit { rlim_cur: clamp(soft.min(hard)), rlim_max: clamp(hard) };
        libc::setrlimit(resource, &limit) as libc::c_long
    }
}

/// A `fork` that runs no `atfork` handlers: only the kernel's part.
unsafe fn raw_fork() -> libc::c_long {
    // SAFETY: clone with SIGCHLD and no other flags is fork.
    unsafe {
        #[cfg(target_arch = "s390x")]
        {
            libc::syscall(libc::SYS_clone, 0usize, libc::SIGCHLD as libc::c_ulong)
        }
        #[cfg(not(target_arch = "s390x"))]
        {
            libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_ulong, 0usize, 0usize, 0usize, 0usize)
        }
    }
}

/// Default dispositions for every signal: A and B never exec, and the
/// gateway's handlers (tokio's SIGCHLD, SIGTERM for shutdown) must not run in them.
unsafe fn reset_signals() {
    for signal in 1..32 {
        if signal != libc::SIGKILL && signal != libc::SIGSTOP {
            // SAFETY: signal(2) with SIG_DFL.
            unsafe { libc::signal(signal, libc::SIG_DFL) };
        }
    }
}

unsafe fn wait_for(pid: libc::pid_t) -> libc::c_int {
    let mut status = 0;
    // SAFETY: waitpid on a child of this process.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
        if errno() != libc::EINTR {
            return 127 << 8;
        }
    }
    status
}

/// Exits the way `status` says its child ended: with its code, or of its signal.
unsafe fn exit_as(status: libc::c_int) -> ! {
    // SAFETY: raw exit and kill of this very process.
    unsafe {
        if libc::WIFSIGNALED(status) {
            let signal = libc::WTERMSIG(status);
            libc::signal(signal, libc::SIG_DFL);
            libc::kill(libc::getpid(), signal);
            libc::_exit(128 + signal);
        }
        libc::_exit(libc::WEXITSTATUS(status))
    }
}

/// PID 1's loop: reaps every orphan until `command` exits, then exits with
/// its code (128 + its signal), which ends the namespace.
unsafe fn reap_until(command: libc::pid_t) -> ! {
    loop {
        let mut status = 0;
        // SAFETY: waitpid and _exit.
        unsafe {
            let pid = libc::waitpid(-1, &mut status, 0);
            if pid == command {
                if libc::WIFSIGNALED(status) {
                    libc::_exit(128 + libc::WTERMSIG(status));
                }
                libc::_exit(libc::WEXITSTATUS(status));
            }
            if pid < 0 && errno() != libc::EINTR {
                libc::_exit(127);
            }
        }
    }
}

/// Moves this process into the cgroup whose `cgroup.procs` is `procs`
/// ("0" is the writer itself, in v1 and v2 alike).
unsafe fn join_cgroup(procs: &CStr) -> libc::c_long {
    // SAFETY: open, write and close on a C string and a static byte.
    unsafe {
        let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return -1;
        }
        let written = libc::write(fd, b"0".as_ptr().cast(), 1);
        let saved = errno();
        libc::close(fd);
        set_errno(saved);
        if written == 1 { 0 } else { -1 }
    }
}

/// Closes every descriptor but `keep`.
unsafe fn close_all_but(keep: libc::c_uint) {
    // SAFETY: close_range, else close on each possible descriptor.
    unsafe {
        if keep > 0 && libc::syscall(libc::SYS_close_range, 0, keep - 1, 0) != 0 {
            for fd in 0..keep {
                libc::close(fd as libc::c_int);
            }
        }
        close_from(keep.saturating_add(1));
    }
}

/// Whether the write end of `pipe` was closed everywhere (its holder died).
unsafe fn parent_gone(pipe: libc::c_int) -> bool {
    let mut poll = libc::pollfd { fd: pipe, events: libc::POLLIN, revents: 0 };
    // SAFETY: poll on a stack struct, without waiting.
    unsafe { libc::poll(&mut poll, 1, 0) != 0 && poll.revents & libc::POLLHUP != 0 }
}

/// A failed result with `errno` set to `error`, for a check that is not a syscall.
fn fail_with(error: libc::c_int) -> libc::c_long {
    set_errno(error);
    -1
}

/// Closes every descriptor from `first` on.
unsafe fn close_from(first: libc::c_uint) {
    // SAFETY: close_range, else close on each possible descriptor.
    unsafe {
        if libc::syscall(libc::SYS_close_range, first, libc::c_uint::MAX, 0) != 0 {
            for fd in first..65536 {
                libc::close(fd as libc::c_int);
            }
        }
    }
}

/// Marks every descriptor from `first` on close-on-exec (std's error pipe
/// still works until the exec).
unsafe fn cloexec_from(first: libc::c_uint) -> libc::c_long {
    // SAFETY: close_range, else fcntl on each possible descriptor.
    unsafe {
        if libc::syscall(libc::SYS_close_range, first, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC) == 0 {
            return 0;
        }
        for fd in first..65536 {
            libc::fcntl(fd as libc::c_int, libc::F_SETFD, libc::FD_CLOEXEC);
        }
        0
    }
}

/// Turns a syscall's result into `Ok` or, after reporting `code`, the errno.
unsafe fn step(wiring: &Wiring, code: u32, result: libc::c_long) -> io::Result<libc::c_long> {
    if result >= 0 {
        return Ok(result);
    }
    let error = errno();
    // SAFETY: a write to the report pipe.
    unsafe { report(wiring, code, error) };
    Err(io::Error::from_raw_os_error(error))
}

unsafe fn report(wiring: &Wiring, code: u32, error: libc::c_int) {
    let mut message = [0u8; 8];
    message[..4].copy_from_slice(&code.to_le_bytes());
    message[4..].copy_from_slice(&(error as u32).to_le_bytes());
    // SAFETY: a write of a stack buffer.
    unsafe { libc::write(wiring.report, message.as_ptr().cast(), message.len()) };
}

fn errno() -> libc::c_int {
    io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

fn set_errno(value: libc::c_int) {
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() = value };
}

/// Decodes a report: the step code and the errno.
pub fn decode_report(bytes: &[u8]) -> Option<(u32, i32)> {
    let code = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?);
    let error = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?);
    Some((code, error as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_paths_are_built_without_allocating() {
        let mut buffer = [0u8; 64];
        assert_eq!(proc_path(&mut buffer, 4242, b"uid_map").unwrap().to_bytes(), b"/proc/4242/uid_map");
        assert_eq!(proc_path(&mut buffer, 0, b"gid_map").unwrap().to_bytes(), b"/proc/0/gid_map");
        assert!(proc_path(&mut buffer, 1, &[b'x'; 60]).is_none(), "too long for the buffer");
    }

    #[test]
    fn reports_round_trip() {
        let mut message = [0u8; 8];
        message[..4].copy_from_slice(&(Step::Loopback as u32).to_le_bytes());
        message[4..].copy_from_slice(&(libc::EPERM as u32).to_le_bytes());
        assert_eq!(decode_report(&message), Some((Step::Loopback as u32, libc::EPERM)));
        assert_eq!(decode_report(&message[..5]), None);
    }
}
