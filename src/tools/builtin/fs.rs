//! File tools: `fs.read`, `fs.write`, `fs.edit`, over UTF-8 text files.
//!
//! Files are read and written through the session's environment, and every
//! path is resolved by it: relative paths start at the workspace, `~` is the
//! home directory, absolute paths are taken as they are — unless the
//! environment is confined to its workspace, which then refuses any path that
//! leaves it. Errors name the resolved path, so the model can see where it
//! actually looked.

use crate::environment::workspace_file::WorkspaceFileError;
use crate::environment::{Environment, EnvironmentError};
use crate::tools::{Capability, Tool, ToolContext, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use crate::environment::PathError;

impl From<PathError> for ToolError {
    fn from(error: PathError) -> ToolError {
        ToolError::invalid_input(error.to_string())
    }
}

/// Resolves a path the model gave against `workspace` (unconfined until the
/// file tools run through the session environment; see
/// [`crate::environment::path`]).
pub fn resolve_path(workspace: &Path, path: &str) -> Result<PathBuf, PathError> {
    crate::environment::path::resolve_path(workspace, path, false)
}

/// A window of a file's lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinePage {
    pub text: String,
    /// Index of the first line shown (0-based).
    pub start: usize,
    /// Index after the last line shown.
    pub end: usize,
    pub total: usize,
    /// Whether an offset or a limit was asked for; only then the footer shows.
    pub paginated: bool,
}

/// Lines `offset..offset+limit` of `text` (lines split on `\n`, a `\r` before
/// it dropped), clamped to the text.
pub fn page_lines(text: &str, offset: usize, limit: Option<usize>) -> LinePage {
    let lines: Vec<&str> = text.lines().collect();
    let total = lines.len();
    let start = offset.min(total);
    let end = limit.map_or(total, |limit| start.saturating_add(limit).min(total));
    LinePage { text: lines[start..end].join("\n"), start, end, total, paginated: offset > 0 || limit.is_some() }
}

impl fmt::Display for LinePage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)?;
        if !self.paginated {
            return Ok(());
        }
        if !self.text.is_empty() {
            f.write_str("\n")?;
        }
        if self.start == self.end {
            return write!(f, "[no lines at offset {}: the file has {} lines]", self.start, self.total);
        }
        write!(f, "[lines {}-{} of {}", self.start + 1, self.end, self.total)?;
        match self.end < self.total {
            true => write!(f, "; continue with offset={}]", self.end),
            false => f.write_str("; end of file]"),
        }
    }
}

/// Why an edit was not made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    #[error("`old` is empty; give the exact text to replace")]
    EmptyOld,
    #[error("start={start} is past the end: the file has {lines} lines")]
    StartPastEnd { start: usize, lines: usize },
    #[error("`old` was not found from line {start} on")]
    NotFound { start: usize },
}

/// Replaces every occurrence of `old` in `text` from line `start` (0-based) on.
/// Returns the new text and how many occurrences were replaced.
pub fn edit_from_line(text: &str, old: &str, new: &str, start: usize) -> Result<(String, usize), EditError> {
    if old.is_empty() {
        return Err(EditError::EmptyOld);
    }
    let split = match start {
        0 => 0,
        _ => text
            .match_indices('\n')
            .nth(start - 1)
            .map(|(i, _)| i + 1)
            .ok_or(EditError::StartPastEnd { start, lines: text.lines().count() })?,
    };
    let (head, tail) = text.split_at(split);
    let count = tail.matches(old).count();
    if count == 0 {
        return Err(EditError::NotFound { start });
    }
    Ok((format!("{head}{}", tail.replace(old, new)), count))
}

async fn read_text(ctx: &ToolContext, environment: &dyn Environment, path: &Path) -> Result<String, ToolError> {
    let read = environment.read_text(&path.to_string_lossy()).await;
    read.map_err(|error| file_error(ctx, "read", path, error))
}

async fn write_text(
    ctx: &ToolContext,
    environment: &dyn Environment,
    path: &Path,
    text: &str,
) -> Result<(), ToolError> {
    let written = environment.write_text(&path.to_string_lossy(), text).await;
    written.map(|_| ()).map_err(|error| file_error(ctx, "write", path, error))
}

/// The model reads what failed and where; a file refused as a trap (a link
/// out, a FIFO, a device, a hard link, too big) is logged too.
fn file_error(ctx: &ToolContext, action: &str, path: &Path, error: EnvironmentError) -> ToolError {
    if let EnvironmentError::FileAccess { source, .. } = &error
        && source.is_refusal()
    {
        let (session, path) = (ctx.tape.name(), path.display());
        tracing::warn!(%session, %path, action, reason = %source, "file refused");
    }
    match error {
        EnvironmentError::Path(error) => ToolError::invalid_input(error.to_string()),
        EnvironmentError::File { source, .. } if source.kind() == std::io::ErrorKind::InvalidData => {
            ToolError::failed(format!("cannot {action} {}: it is not UTF-8 text", path.display()))
        }
        EnvironmentError::File { source, .. } => {
            ToolError::failed(format!("cannot {action} {}: {source}", path.display()))
        }
        EnvironmentError::FileAccess { source: WorkspaceFileError::TooLarge { size, max }, .. } => {
            ToolError::failed(format!(
                "cannot {action} {}: the file is {size} bytes, over the {max} bytes read whole; read a part of it \
                 with the shell (`sed -n`, `head`, `tail`)",
                path.display()
            ))
        }
        EnvironmentError::FileAccess { source, .. } => {
            ToolError::failed(format!("cannot {action} {}: {source}", path.display()))
        }
        other => ToolError::failed(format!("cannot {action} {}: {other}", path.display())),
    }
}

/// Resolves through the call's environment (which may confine it).
fn resolve(ctx: &ToolContext, path: &str) -> Result<(Arc<dyn Environment>, PathBuf), ToolError> {
    let environment = ctx.environment()?;
    let resolved = environment.resolve_path(path).map_err(|error| file_error(ctx, "use", Path::new(path), error))?;
    Ok((environment, resolved))
}

/// Read a UTF-8 text file. Relative paths start at the workspace. For long
/// files read a window with `offset` (0-based line) and `limit` (lines); the
/// reply then ends with the line range and the total line count.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct FsReadArgs {
    /// File to read: relative to the workspace, absolute, or starting with `~/`.
    pub path: String,
    /// First line to return, 0-based.
    #[serde(default)]
    pub offset: usize,
    /// Most lines to return. Default: to the end of the file.
    #[serde(default)]
    pub limit: Option<usize>,
}

/// `fs.read`: line-paginated text read.
pub fn fs_read_tool() -> Tool {
    Tool::typed("fs.read", |args: FsReadArgs, ctx: ToolContext| async move {
        let (environment, path) = resolve(&ctx, &args.path)?;
        tracing::debug!(tool = "fs.read", session = %ctx.tape.name(), path = %path.display(), "read");
        let text = read_text(&ctx, environment.as_ref(), &path).await?;
        Ok::<_, ToolError>(page_lines(&text, args.offset, args.limit).to_string())
    })
    .preserved()
    .with_capabilities([Capability::Read])
}

/// Write a UTF-8 text file, replacing it if it exists and creating missing
/// parent directories. Returns the path written.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct FsWriteArgs {
    /// File to write: relative to the workspace, absolute, or starting with `~/`.
    pub path: String,
    /// The complete new content of the file.
    pub content: String,
}

/// `fs.write`: whole-file write.
pub fn fs_write_tool() -> Tool {
    Tool::typed(
        "fs.write",
        |args: FsWriteArgs, ctx: ToolContext| async move {
            let (environment, path) = resolve(&ctx, &args.path)?;
            tracing::debug!(tool = "fs.write", session = %ctx.tape.name(), path = %path.display(), bytes = args.content.len(), "write");
            write_text(&ctx, environment.as_ref(), &path, &args.content).await?;
            Ok::<_, ToolError>(format!("wrote: {}", path.display()))
        },
    )
    .preserved()
    .with_capabilities([Capability::Write])
}

/// Replace text in a UTF-8 file: every occurrence of `old` from line `start`
/// on becomes `new`. Fails, changing nothing, when `old` does not occur there.
/// Include enough surrounding text in `old` to hit only what you mean.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct FsEditArgs {
    /// File to edit: relative to the workspace, absolute, or starting with `~/`.
    pub path: String,
    /// Exact text to replace (whitespace and line breaks included).
    pub old: String,
    /// Replacement text.
    pub new: String,
    /// First line (0-based) where replacing may happen; earlier lines are left alone.
    #[serde(default)]
    pub start: usize,
}

/// `fs.edit`: replace-all from a line on.
pub fn fs_edit_tool() -> Tool {
    Tool::typed("fs.edit", |args: FsEditArgs, ctx: ToolContext| async move {
        let (environment, path) = resolve(&ctx, &args.path)?;
        let text = read_text(&ctx, environment.as_ref(), &path).await?;
        let (edited, count) =
            edit_from_line(&text, &args.old, &args.new, args.start).map_err(|error| {
                ToolError::failed(format!("cannot edit {}: {error}", path.display()))
            })?;
        write_text(&ctx, environment.as_ref(), &path, &edited).await?;
        tracing::debug!(tool = "fs.edit", session = %ctx.tape.name(), path = %path.display(), replacements = count, "edit");
        let plural = if count == 1 { "" } else { "s" };
        Ok::<_, ToolError>(format!(
            "edited {}: {count} replacement{plural}",
            path.display()
        ))
    })
    .preserved()
    .with_capabilities([Capability::Write])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_against_the_workspace_home_or_themselves() {
        let ws = Path::new("/ws");
        assert_eq!(resolve_path(ws, "a/b.txt").unwrap(), Path::new("/ws/a/b.txt"));
        assert_eq!(resolve_path(ws, "/etc/hosts").unwrap(), Path::new("/etc/hosts"));
        assert_eq!(resolve_path(ws, "~user/x").unwrap(), Path::new("/ws/~user/x"));
        assert_eq!(resolve_path(ws, " "), Err(PathError::Empty));
        if let Some(home) = std::env::home_dir() {
            assert_eq!(resolve_path(ws, "~/notes.md").unwrap(), home.join("notes.md"));
            assert_eq!(resolve_path(ws, "~").unwrap(), home);
        }
    }

    #[test]
    fn pages_report_their_range_and_the_total() {
        let text = "a\nb\nc\nd\ne\n";
        assert_eq!(page_lines(text, 0, None).to_string(), "a\nb\nc\nd\ne");
        assert_eq!(page_lines(text, 1, Some(2)).to_string(), "b\nc\n[lines 2-3 of 5; continue with offset=3]");
        assert_eq!(page_lines(text, 3, None).to_string(), "d\ne\n[lines 4-5 of 5; end of file]");
        assert_eq!(page_lines(text, 9, Some(2)).to_string(), "[no lines at offset 5: the file has 5 lines]");
        assert_eq!(page_lines("x\r\ny", 0, Some(1)).text, "x");
    }

    #[test]
    fn edits_replace_every_occurrence_from_the_start_line_only() {
        let text = "foo\nfoo bar\nfoo\n";
        assert_eq!(edit_from_line(text, "foo", "baz", 1), Ok(("foo\nbaz bar\nbaz\n".to_string(), 2)));
        assert_eq!(edit_from_line(text, "foo", "x", 0).map(|(_, n)| n), Ok(3));
        assert_eq!(edit_from_line(text, "nope", "x", 0), Err(EditError::NotFound { start: 0 }));
        assert_eq!(edit_from_line(text, "foo", "x", 9), Err(EditError::StartPastEnd { start: 9, lines: 3 }));
        assert_eq!(edit_from_line(text, "", "x", 0), Err(EditError::EmptyOld));
        // the line after the last newline exists (it is empty): no match there
        assert_eq!(edit_from_line(text, "foo", "x", 3), Err(EditError::NotFound { start: 3 }));
    }
}
