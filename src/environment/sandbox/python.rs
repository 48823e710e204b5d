//! The interpreter code mode runs inside the sandbox, resolved once on the
//! host: `python3` on `PATH` may be a pyenv shim (a shell script that needs
//! `$PYENV_ROOT`) or a symlink, so the sandbox asks the interpreter itself for
//! its real executable and installation prefixes and shows those read-only.

use super::error::SandboxError;
use std::path::{Path, PathBuf};

/// A resolved interpreter: what to exec and what to make visible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Python {
    /// The real executable (no shims, no symlinks).
    pub executable: PathBuf,
    /// The directories it needs: its prefix, base prefix and executable's directory.
    pub prefixes: Vec<PathBuf>,
}

const ASK: &str = "import os, sys\n\
                   print(os.path.realpath(sys.executable))\n\
                   print(os.path.realpath(sys.prefix))\n\
                   print(os.path.realpath(sys.base_prefix))";

/// Resolves `python` (a path or a name on `PATH`) by running it once on the host.
pub fn resolve(python: &Path) -> Result<Python, SandboxError> {
    let failed = |reason: String| SandboxError::Python { python: python.to_path_buf(), reason };
    let output = std::process::Command::new(python)
        .args(["-I", "-c", ASK])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| failed(format!("cannot run it: {e}")))?;
    if !output.status.success() {
        return Err(failed(format!("it failed: {}", String::from_utf8_lossy(&output.stderr).trim())));
    }
    let text = String::from_utf8(output.stdout).map_err(|_| failed("its paths are not UTF-8".into()))?;
    let mut lines = text.lines().map(PathBuf::from);
    let executable = lines.next().filter(|p| p.is_absolute()).ok_or_else(|| failed("it named no executable".into()))?;
    let mut prefixes: Vec<PathBuf> = lines.filter(|p| p.is_absolute() && p.is_dir()).collect();
    if let Some(dir) = executable.parent() {
        prefixes.push(dir.to_path_buf());
    }
    prefixes.dedup();
    Ok(Python { executable, prefixes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python3_resolves_to_a_real_executable_inside_its_prefix() {
        let python = resolve(Path::new("python3")).expect("python3 is installed");
        assert!(python.executable.is_file(), "{python:?}");
        assert_eq!(python.executable.canonicalize().unwrap(), python.executable, "no symlink left");
        assert!(python.prefixes.iter().any(|p| python.executable.starts_with(p)), "{python:?}");
    }

    #[test]
    fn a_missing_interpreter_is_a_typed_error() {
        let error = resolve(Path::new("/nonexistent/python3")).unwrap_err();
        assert!(matches!(error, SandboxError::Python { .. }), "{error}");
    }
}
