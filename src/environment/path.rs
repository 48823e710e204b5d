//! Resolving the paths tools are given, with optional confinement to the
//! workspace.
//!
//! Unconfined: `~` and `~/…` expand to the home directory, relative paths join
//! the workspace, absolute paths stay. Confined: `~` is refused, and the result
//! must lie inside the workspace after `..` is folded and symlinks are followed
//! (for the longest part of the path that exists), so `../x`, `/etc/passwd` and
//! a symlink pointing out are all refused with an error naming the path.

use std::path::{Component, Path, PathBuf};

/// Why a path cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("the path is empty")]
    Empty,
    #[error("cannot expand `~` in {0:?}: no home directory is known")]
    NoHome(String),
    #[error("{path:?} leaves the workspace {}: only paths inside it are allowed here", .workspace.display())]
    OutsideWorkspace { path: String, workspace: PathBuf },
}

/// A path inside the workspace, for opening beneath it
/// ([`crate::environment::workspace_file`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Beneath {
    /// The workspace's real path (symlinks resolved).
    pub root: PathBuf,
    /// The path as confined [`resolve_path`] resolves it: inside `root`.
    pub resolved: PathBuf,
    /// `resolved` relative to `root`.
    pub relative: PathBuf,
}

/// Confined [`resolve_path`], split into the workspace and the path inside
/// it. The check is made on paths and so can be raced: the open that
/// follows must still be beneath `root`.
pub fn resolve_beneath(workspace: &Path, path: &str) -> Result<Beneath, PathError> {
    let resolved = resolve_path(workspace, path, true)?;
    let root = canonical_or_lexical(workspace);
    match resolved.strip_prefix(&root) {
        Ok(relative) => Ok(Beneath { relative: relative.to_path_buf(), resolved: resolved.clone(), root }),
        Err(_) => Err(PathError::OutsideWorkspace { path: path.to_string(), workspace: workspace.to_path_buf() }),
    }
}

/// Resolves `path` against `workspace`; see the module docs.
pub fn resolve_path(workspace: &Path, path: &str, confined: bool) -> Result<PathBuf, PathError> {
    if path.trim().is_empty() {
        return Err(PathError::Empty);
    }
    let outside = || PathError::OutsideWorkspace { path: path.to_string(), workspace: workspace.to_path_buf() };
    // `~` means what it means to the shell beside these tools: the process's
    // home, read at the moment of use, like `PATH` when spawning.
    let home = || std::env::home_dir().ok_or_else(|| PathError::NoHome(path.to_string()));
    let joined = if path == "~" || path.starts_with("~/") {
        if confined {
            return Err(outside());
        }
        let home = home()?;
        match path.strip_prefix("~/") {
            Some(rest) => home.join(rest),
            None => home,
        }
    } else {
        workspace.join(path)
    };
    if !confined {
        return Ok(joined);
    }
    let root = canonical_or_lexical(workspace);
    let resolved = canonical_or_lexical(&joined);
    if resolved.starts_with(&root) { Ok(resolved) } else { Err(outside()) }
}

/// The path with symlinks resolved for its longest existing prefix and `..`
/// folded lexically for the rest (which does not exist yet, so holds no links).
fn canonical_or_lexical(path: &Path) -> PathBuf {
    let folded = fold(path);
    let mut existing = folded.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(canonical) = existing.canonicalize() {
            return rest.iter().rev().fold(canonical, |acc, part| acc.join(part));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            _ => return folded,
        }
    }
}

/// Folds `.` and `..` without touching the file system.
fn fold(path: &Path) -> PathBuf {
    let mut folded = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                folded.pop();
            }
            other => folded.push(other.as_os_str()),
        }
    }
    folded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unconfined_paths_join_the_workspace_or_stay_absolute() {
        let ws = Path::new("/work/space");
        assert_eq!(resolve_path(ws, "a/b.txt", false).unwrap(), PathBuf::from("/work/space/a/b.txt"));
        assert_eq!(resolve_path(ws, "/etc/hosts", false).unwrap(), PathBuf::from("/etc/hosts"));
        assert_eq!(resolve_path(ws, "  ", false), Err(PathError::Empty));
    }

    #[test]
    fn confinement_refuses_parent_absolute_home_and_symlink_escapes() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        std::os::unix::fs::symlink("/etc", ws.join("sneaky")).unwrap();
        std::os::unix::fs::symlink(ws.join("sub"), ws.join("inside")).unwrap();
        for escape in ["../x", "sub/../../x", "/etc/passwd", "~/.ssh/id_rsa", "sneaky/passwd", "sneaky"] {
            let error = resolve_path(&ws, escape, true).unwrap_err();
            assert!(matches!(error, PathError::OutsideWorkspace { .. }), "{escape}: {error}");
            assert!(error.to_string().contains(escape), "names the path: {error}");
        }
        let canonical = ws.canonicalize().unwrap();
        assert_eq!(resolve_path(&ws, "sub/new.txt", true).unwrap(), canonical.join("sub/new.txt"));
        assert_eq!(resolve_path(&ws, "inside/f", true).unwrap(), canonical.join("sub/f"));
        assert_eq!(resolve_path(&ws, "sub/../ok.txt", true).unwrap(), canonical.join("ok.txt"));
        let beneath = resolve_beneath(&ws, "inside/f").unwrap();
        assert_eq!((beneath.root, beneath.relative), (canonical.clone(), PathBuf::from("sub/f")));
        assert!(resolve_beneath(&ws, "sneaky/passwd").is_err());
        let absolute_inside = canonical.join("sub/a.txt");
        assert_eq!(resolve_path(&ws, absolute_inside.to_str().unwrap(), true).unwrap(), absolute_inside);
    }
}
