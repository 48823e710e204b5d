//! The [`Blueprint`] of a session's sandbox: every mount, id map and limit,
//! computed once on the host (where allocating and failing are fine) as a
//! flat list of C strings the child only has to walk.

use super::error::SandboxError;
use super::settings::{SandboxLimits, SandboxSettings};
use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The uid and gid the sandboxed command runs as, inside its user namespace.
pub const INSIDE_ID: u32 = 1000;
/// The host uid and gid the inside id maps to when the gateway runs as root:
/// `nobody`, so rlimits apply (the kernel exempts uid 0 from `RLIMIT_NPROC`)
/// and the command owns nothing of the host.
pub const ROOT_OUTER_ID: u32 = 65534;

/// Where the host's root is reachable between the pivot and its detachment.
const OLD_ROOT: &str = "/.oldroot";
/// The host directory the sandbox's root tmpfs is mounted on before the pivot
/// (any existing directory works; the mount is private to the sandbox).
pub const BASE: &str = "/tmp";

/// The system directories every sandbox sees read-only (when they exist).
pub const SYSTEM_DIRS: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"];

/// Device nodes bound from the host's `/dev`.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// One step of the child's setup. Paths are inside the new root unless said.
#[derive(Debug)]
pub enum Op {
    /// `mount --make-rprivate /`: nothing done here reaches the host.
    MakePrivate,
    /// A directory (parents are separate steps); an existing one is fine.
    Mkdir(CString),
    /// An empty file to bind a file onto; an existing one is fine.
    Touch(CString),
    Symlink {
        target: CString,
        link: CString,
    },
    Tmpfs {
        target: CString,
        options: CString,
        flags: libc::c_ulong,
    },
    Proc(CString),
    Bind {
        source: CString,
        target: CString,
        recursive: bool,
    },
    /// Read-only, nosuid, nodev (with `recursive`, every mount below too).
    ReadOnly {
        target: CString,
        recursive: bool,
    },
    /// nosuid and nodev, still writable.
    NoSuid(CString),
    PivotRoot {
        new_root: CString,
        put_old: CString,
    },
    Chdir(CString),
    Detach(CString),
    Rmdir(CString),
}

impl Op {
    /// What the step was about, for an error message.
    pub fn describe(&self) -> String {
        let s = |c: &CString| c.to_string_lossy().into_owned();
        match self {
            Op::MakePrivate => "making the mounts private".into(),
            Op::Mkdir(p) => format!("creating the directory {}", s(p)),
            Op::Touch(p) => format!("creating the mount point {}", s(p)),
            Op::Symlink { link, .. } => format!("creating the symlink {}", s(link)),
            Op::Tmpfs { target, .. } => format!("mounting a tmpfs on {}", s(target)),
            Op::Proc(p) => format!("mounting proc on {} (a container that masks /proc paths refuses this)", s(p)),
            Op::Bind { source, target, .. } => format!("binding {} on {}", s(source), s(target)),
            Op::ReadOnly { target, .. } => format!("making {} read-only", s(target)),
            Op::NoSuid(p) => format!("making {} nosuid", s(p)),
            Op::PivotRoot { new_root, .. } => format!("pivoting the root to {}", s(new_root)),
            Op::Chdir(p) => format!("changing into {}", s(p)),
            Op::Detach(p) => format!("detaching {}", s(p)),
            Op::Rmdir(p) => format!("removing {}", s(p)),
        }
    }
}

/// Everything the child needs, prepared on the host.
#[derive(Debug)]
pub struct Blueprint {
    pub ops: Vec<Op>,
    /// The host uid and gid the inside id maps to.
    pub outer_id: u32,
    /// Whether the gateway is root (and drops its supplementary groups in the child).
    pub outer_root: bool,
    /// `"<inside> <outer> 1\n"` for `/proc/<pid>/uid_map`.
    pub uid_map: Vec<u8>,
    /// The same for `gid_map`.
    pub gid_map: Vec<u8>,
    pub network: bool,
    pub limits: SandboxLimits,
    /// The seccomp filters C installs before exec (see `seccomp.rs`).
    pub filters: Vec<seccompiler::BpfProgram>,
    /// The session cgroup's `cgroup.procs` files A writes itself into (one
    /// per hierarchy; none where there is no cgroup: `cgroup.rs`).
    pub cgroup_procs: Vec<CString>,
}

/// Shells a command may run in (the first that exists is used): the
/// sandbox needs them, so no hidden path may cover them.
const SHELLS: &[&str] = &["/bin/bash", "/bin/sh"];

/// Host paths the sandbox shows read-only besides the system directories.
#[derive(Debug, Clone, Default)]
pub struct Exposed {
    /// Shown unless hidden: a hidden path wins over them.
    pub read_only: Vec<PathBuf>,
    /// Needed (the Python installation and executable): directories are
    /// shown even inside a hidden path that is not itself shown, and a
    /// hidden path that must be covered may not hold any of them.
    pub needed: Vec<PathBuf>,
}

/// The blueprint of a sandbox around `workspace` (canonical) per `settings`,
/// showing `exposed` read-only on top of the system directories.
pub fn blueprint(workspace: &Path, settings: &SandboxSettings, exposed: &Exposed) -> Result<Blueprint, SandboxError> {
    let outer_root = rustix::process::geteuid().is_root();
    let outer_id = if outer_root { ROOT_OUTER_ID } else { rustix::process::geteuid().as_raw() };
    let outer_gid = if outer_root { ROOT_OUTER_ID } else { rustix::process::getegid().as_raw() };
    // As root, root stays mapped too: the setup (PID 1 before it forks the
    // command) creates files in its own tmpfs, which the kernel refuses to an
    // unmapped fsuid, and walks root-only directories to the workspace. The
    // command then drops to INSIDE_ID, losing every capability, and has no
    // way back to uid 0: no_new_privs, and nested namespaces map only its own.
    let root_line = if outer_root { "0 0 1\n" } else { "" };
    let uid_map = format!("{root_line}{INSIDE_ID} {outer_id} 1\n").into_bytes();
    let gid_map = format!("{root_line}{INSIDE_ID} {outer_gid} 1\n").into_bytes();
    let hidden: Vec<PathBuf> = settings.hidden.iter().filter_map(|p| p.canonicalize().ok()).collect();
    let is_hidden = |path: &Path| hidden.iter().any(|h| path.starts_with(h));
    let needed: Vec<PathBuf> = SYSTEM_DIRS
        .iter()
        .chain(SHELLS)
        .map(PathBuf::from)
        .chain(exposed.needed.iter().cloned())
        .filter_map(|path| path.canonicalize().ok())
        .collect();

    let mut plan = Plan::default();
    plan.push(Op::MakePrivate);
    plan.push(Op::Tmpfs {
        target: c(BASE)?,
        options: c("mode=0755,size=1m")?,
        flags: libc::MS_NOSUID | libc::MS_NODEV,
    });
    plan.push(Op::Mkdir(c(&format!("{BASE}{OLD_ROOT}"))?));
    plan.push(Op::PivotRoot { new_root: c(BASE)?, put_old: c(&format!("{BASE}{OLD_ROOT}"))? });
    plan.push(Op::Chdir(c("/")?));

    // The system and whatever else is shown, read-only; a source inside one
    // already shown comes with it. What is needed is shown even inside a
    // hidden path (nothing else of that path is); an extra is not.
    let mut sources: Vec<PathBuf> = Vec::new();
    let needed_dirs =
        SYSTEM_DIRS.iter().map(PathBuf::from).chain(exposed.needed.iter().filter(|p| p.is_dir()).cloned());
    let shown = needed_dirs.map(|dir| (dir, true)).chain(exposed.read_only.iter().map(|dir| (dir.clone(), false)));
    for (dir, is_needed) in shown {
        let Ok(metadata) = std::fs::symlink_metadata(&dir) else { continue };
        if metadata.file_type().is_symlink() && SYSTEM_DIRS.iter().any(|s| Path::new(s) == dir) {
            // /bin → usr/bin on merged-/usr systems: the same link inside.
            if let Ok(target) = std::fs::read_link(&dir) {
                plan.symlink(&target, &dir)?;
            }
            continue;
        }
        let Ok(canonical) = dir.canonicalize() else { continue };
        if (!is_needed && is_hidden(&canonical)) || sources.iter().any(|s| canonical.starts_with(s)) {
            continue;
        }
        sources.retain(|s| !s.starts_with(&canonical));
        sources.push(canonical);
    }
    // A fresh /tmp, a minimal /dev, a /proc of the sandbox's own PID namespace,
    // first, so that what is shown below /tmp lands on the fresh one.
    let tmp_options = |mode: &str| c(&format!("mode={mode},size={}", settings.limits.tmp_bytes.max(4096)));
    plan.mount_point(Path::new("/tmp"), true)?;
    plan.push(Op::Tmpfs { target: c("/tmp")?, options: tmp_options("1777")?, flags: libc::MS_NOSUID | libc::MS_NODEV });
    plan.mount_point(Path::new("/dev"), true)?;
    plan.push(Op::Tmpfs { target: c("/dev")?, options: c("mode=0755,size=64k")?, flags: libc::MS_NOSUID });
    for device in DEVICES {
        let path = Path::new("/dev").join(device);
        if path.exists() {
            plan.push(Op::Touch(cp(&path)?));
            plan.push(Op::Bind { source: old(&path)?, target: cp(&path)?, recursive: false });
        }
    }
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        plan.symlink(Path::new(target), &Path::new("/dev").join(link))?;
    }
    plan.mount_point(Path::new("/dev/shm"), true)?;
    plan.push(Op::Tmpfs {
        target: c("/dev/shm")?,
        options: tmp_options("1777")?,
        flags: libc::MS_NOSUID | libc::MS_NODEV,
    });
    plan.mount_point(Path::new("/proc"), true)?;
    plan.push(Op::Proc(c("/proc")?));

    sources.sort_by_key(|s| s.components().count());
    for source in &sources {
        plan.mount_point(source, source.is_dir())?;
        plan.push(Op::Bind { source: old(source)?, target: cp(source)?, recursive: true });
        plan.push(Op::ReadOnly { target: cp(source)?, recursive: true });
    }

    // Hidden paths inside what is shown are covered, unless covering one
    // would cover what the sandbox needs: then no sandbox is built at all.
    let mut masks = Vec::new();
    for path in hidden.iter().filter(|h| sources.iter().any(|s| h.starts_with(s))) {
        if let Some(inside) = needed.iter().find(|n| n.starts_with(path)) {
            return Err(SandboxError::HidesNeeded { hidden: path.clone(), needed: inside.clone() });
        }
        if path.is_dir() {
            plan.push(Op::Tmpfs {
                target: cp(path)?,
                options: c("mode=0755,size=4k")?,
                flags: libc::MS_NOSUID | libc::MS_NODEV,
            });
            masks.push(cp(path)?);
        } else {
            plan.push(Op::Bind { source: old(Path::new("/dev/null"))?, target: cp(path)?, recursive: false });
            plan.push(Op::ReadOnly { target: cp(path)?, recursive: false });
        }
    }

    // The workspace, read-write, at the same path as on the host.
    let metadata = std::fs::metadata(workspace)
        .map_err(|source| SandboxError::Workspace { path: workspace.to_path_buf(), source })?;
    if !workspace.is_absolute() || !metadata.is_dir() {
        let source = std::io::Error::other("not an absolute directory");
        return Err(SandboxError::Workspace { path: workspace.to_path_buf(), source });
    }
    plan.mount_point(workspace, true)?;
    plan.push(Op::Bind { source: old(workspace)?, target: cp(workspace)?, recursive: false });
    plan.push(Op::NoSuid(cp(workspace)?));

    // The host's root goes away; what is left of the skeleton becomes read-only.
    plan.push(Op::Detach(c(OLD_ROOT)?));
    plan.push(Op::Rmdir(c(OLD_ROOT)?));
    for mask in masks {
        plan.push(Op::ReadOnly { target: mask, recursive: false });
    }
    plan.push(Op::ReadOnly { target: c("/dev")?, recursive: false });
    plan.push(Op::ReadOnly { target: c("/")?, recursive: false });

    Ok(Blueprint {
        ops: plan.ops,
        outer_id,
        outer_root,
        uid_map,
        gid_map,
        network: settings.network,
        limits: settings.limits,
        filters: super::seccomp::filters()?,
        cgroup_procs: Vec::new(),
    })
}

#[derive(Default)]
struct Plan {
    ops: Vec<Op>,
    made: Vec<PathBuf>,
}

impl Plan {
    fn push(&mut self, op: Op) {
        self.ops.push(op);
    }

    /// Creates `path`'s parents (once each) and `path` itself, a directory
    /// or an empty file.
    fn mount_point(&mut self, path: &Path, dir: bool) -> Result<(), SandboxError> {
        let mut ancestors: Vec<&Path> = path.ancestors().skip(1).filter(|a| a.parent().is_some()).collect();
        ancestors.reverse();
        for ancestor in ancestors {
            if !self.made.iter().any(|m| m == ancestor) {
                self.ops.push(Op::Mkdir(cp(ancestor)?));
                self.made.push(ancestor.to_path_buf());
            }
        }
        if dir {
            if !self.made.iter().any(|m| m == path) {
                self.ops.push(Op::Mkdir(cp(path)?));
                self.made.push(path.to_path_buf());
            }
        } else {
            self.ops.push(Op::Touch(cp(path)?));
        }
        Ok(())
    }

    fn symlink(&mut self, target: &Path, link: &Path) -> Result<(), SandboxError> {
        self.ops.push(Op::Symlink { target: cp(target)?, link: cp(link)? });
        Ok(())
    }
}

fn c(text: &str) -> Result<CString, SandboxError> {
    CString::new(text).map_err(|_| SandboxError::Nul(PathBuf::from(text)))
}

/// A path as a C string.
pub fn cp(path: &Path) -> Result<CString, SandboxError> {
    os(path.as_os_str()).ok_or_else(|| SandboxError::Nul(path.to_path_buf()))
}

fn os(text: &OsStr) -> Option<CString> {
    CString::new(text.as_bytes()).ok()
}

/// A host path as seen between the pivot and the detachment.
fn old(path: &Path) -> Result<CString, SandboxError> {
    let mut bytes = OLD_ROOT.as_bytes().to_vec();
    bytes.extend_from_slice(path.as_os_str().as_bytes());
    CString::new(bytes).map_err(|_| SandboxError::Nul(path.to_path_buf()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(blueprint: &Blueprint) -> Vec<String> {
        blueprint
            .ops
            .iter()
            .filter_map(|op| match op {
                Op::Bind { target, .. } => Some(target.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_workspace_is_bound_last_and_nothing_of_its_parents_is() {
        let home = tempfile::tempdir().unwrap();
        let workspace = home.path().join("workspaces/telegram%3A1");
        std::fs::create_dir_all(&workspace).unwrap();
        std::fs::write(home.path().join("bub.toml"), "secret").unwrap();
        let workspace = workspace.canonicalize().unwrap();
        let settings = SandboxSettings { hidden: vec![home.path().to_path_buf()], ..SandboxSettings::default() };
        let blueprint = blueprint(&workspace, &settings, &Exposed::default()).unwrap();
        let binds = targets(&blueprint);
        assert_eq!(binds.iter().filter(|t| t.starts_with(home.path().to_str().unwrap())).count(), 1, "{binds:?}");
        assert!(binds.contains(&workspace.to_string_lossy().into_owned()));
        assert!(binds.iter().any(|t| t == "/usr"), "{binds:?}");
        assert!(
            matches!(blueprint.ops.last(), Some(Op::ReadOnly { target, recursive: false }) if target.as_bytes() == b"/")
        );
    }

    #[test]
    fn a_hidden_path_inside_a_shown_directory_is_covered() {
        let shown = tempfile::tempdir().unwrap();
        let secret = shown.path().join("bub");
        std::fs::create_dir_all(&secret).unwrap();
        std::fs::write(shown.path().join("token"), "t").unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let settings =
            SandboxSettings { hidden: vec![secret.clone(), shown.path().join("token")], ..SandboxSettings::default() };
        let exposed = Exposed { read_only: vec![shown.path().to_path_buf()], ..Exposed::default() };
        let blueprint = blueprint(&workspace.path().canonicalize().unwrap(), &settings, &exposed).unwrap();
        let secret = secret.canonicalize().unwrap();
        let covered = blueprint
            .ops
            .iter()
            .any(|op| matches!(op, Op::Tmpfs { target, .. } if target.as_bytes() == secret.as_os_str().as_bytes()));
        assert!(covered, "{:?}", blueprint.ops);
        let token = shown.path().canonicalize().unwrap().join("token");
        assert!(targets(&blueprint).contains(&token.to_string_lossy().into_owned()));
    }

    #[test]
    fn a_hidden_folder_that_holds_what_the_sandbox_needs_is_refused() {
        let workspace = tempfile::tempdir().unwrap();
        let workspace = workspace.path().canonicalize().unwrap();
        let hiding = |folder: &str| {
            let settings = SandboxSettings { hidden: vec![PathBuf::from(folder)], ..SandboxSettings::default() };
            blueprint(&workspace, &settings, &Exposed::default())
        };
        for folder in ["/etc", "/usr/bin"] {
            let refused = hiding(folder);
            assert!(matches!(refused, Err(SandboxError::HidesNeeded { .. })), "{folder}: {refused:?}");
        }
        // Nothing of `/` is shown but what the sandbox needs: a config there has no visible neighbours.
        assert!(hiding("/").is_ok());
    }

    #[test]
    fn what_is_needed_stays_shown_inside_a_hidden_folder_and_an_extra_does_not() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path().canonicalize().unwrap();
        let (python, extra) = (home.join("pyenv/3.12"), home.join("extra"));
        std::fs::create_dir_all(&python).unwrap();
        std::fs::create_dir_all(&extra).unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let settings = SandboxSettings { hidden: vec![home.clone()], ..SandboxSettings::default() };
        let exposed = Exposed { read_only: vec![extra.clone()], needed: vec![python.clone()] };
        let blueprint = blueprint(&workspace.path().canonicalize().unwrap(), &settings, &exposed).unwrap();
        let binds = targets(&blueprint);
        assert!(binds.contains(&python.to_string_lossy().into_owned()), "{binds:?}");
        assert!(!binds.contains(&extra.to_string_lossy().into_owned()), "{binds:?}");
    }
}
