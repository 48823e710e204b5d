//! Editing the running gateway's config file (the admin console's policy
//! editor): read it with its version ([`LiveConfig::on_disk`]), check a new
//! text ([`LiveConfig::check_text`], in `live.rs`), and replace it
//! ([`LiveConfig::replace`]).
//!
//! Guarantees:
//! - A concurrent change is never overwritten silently: a replacement names
//!   the version ([`ConfigVersion`]) it was edited from, and if the file is
//!   another version now it is refused with what the file holds
//!   ([`EditError::Conflict`]). Two edits at once are ordered by a lock,
//!   which the watcher's reloads take too.
//! - An invalid text is refused before anything is written
//!   ([`EditError::Invalid`], `FILE:LINE:COL`); what is accepted is exactly
//!   what a reload would apply.
//! - The file is replaced atomically: a sibling written, synced and renamed
//!   over it, with the old file's mode (and, where the process may, its
//!   owner and group). A symlinked config stays a symlink: its target is
//!   replaced.
//! - The new config is applied at once, as a forced reload, and its outcome
//!   reaches the gateway's reload reporter as a watcher's reload would
//!   (command menus and MCP servers follow it). The watcher then sees the
//!   write, finds the running text, and does not apply it twice.
//! - A file broken on disk (saved by hand, refused by the reload) is shown
//!   with its error while the old config runs, and replacing it names the
//!   broken file's version like any other.
//!
//! The file's text holds the secrets written in it (tokens): it is handed
//! to whoever may edit the file, and kept out of `Debug` output.

use super::error::ConfigError;
use super::live::{LiveConfig, ReloadOutcome};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The version of a config file's text: the first 16 hex digits of its
/// SHA-256. Two texts with one version are the same text (a collision is
/// 1 in 2^64), so an edit names the text it started from by it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct ConfigVersion(String);

impl ConfigVersion {
    /// The version of `text`.
    pub fn of(text: &str) -> ConfigVersion {
        ConfigVersion(Sha256::digest(text.as_bytes()).iter().take(8).map(|b| format!("{b:02x}")).collect())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ConfigVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A config text and its version.
#[derive(Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ConfigText {
    pub text: String,
    pub version: ConfigVersion,
}

impl ConfigText {
    fn new(text: String) -> ConfigText {
        let version = ConfigVersion::of(&text);
        ConfigText { text, version }
    }
}

/// The version only: the text holds the secrets written in the file.
impl std::fmt::Debug for ConfigText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigText").field("version", &self.version).finish_non_exhaustive()
    }
}

/// What is wrong with a config text, for a form to show beside the text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ConfigProblem {
    /// The whole error, `FILE:LINE:COL: message`, as `bub policy check` says it.
    pub error: String,
    /// The message alone, without the file and position.
    pub message: String,
    /// 1-based, when the error points into the text.
    pub line: Option<usize>,
    /// 1-based, in characters, when the error points into the text.
    pub column: Option<usize>,
}

impl From<&ConfigError> for ConfigProblem {
    fn from(error: &ConfigError) -> ConfigProblem {
        let location = error.location();
        ConfigProblem {
            error: error.to_string(),
            message: error.message(),
            line: location.map(|(line, _)| line),
            column: location.map(|(_, column)| column),
        }
    }
}

/// The config file as it is on disk now, which may not be what runs:
/// somebody saved a file the reload refused, or saved one the watcher has
/// not applied yet.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct OnDisk {
    /// The file, as the gateway was given it.
    pub path: String,
    /// Its text and version: what a replacement names as `expected`.
    #[serde(flatten)]
    pub file: ConfigText,
    /// Why a reload would refuse it ([`LiveConfig::check_text`]); none when
    /// it would apply.
    pub problem: Option<ConfigProblem>,
    /// The version of the text in force; equal to `file.version` when the
    /// file is what runs.
    pub running: ConfigVersion,
}

/// Why an edit was not made. Nothing was written, except where said.
#[derive(thiserror::Error)]
pub enum EditError {
    /// The gateway runs without a config file (its embedded default).
    #[error("this gateway runs without a config file; there is nothing to edit")]
    NoFile,
    /// The file is no longer the version the edit started from: somebody
    /// changed it since. `text` is what it holds now, to edit again from.
    #[error(
        "the config file changed since it was read (it is version {current} now); edit its new text and apply again"
    )]
    Conflict { current: ConfigVersion, text: String },
    /// The new text would be refused by a reload; the error says where.
    #[error(transparent)]
    Invalid(ConfigError),
    /// The file could not be read or replaced; after a failure to replace
    /// it, the old file is still in place.
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// Without the texts: they hold the secrets written in the file.
impl std::fmt::Debug for EditError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EditError::NoFile => f.write_str("NoFile"),
            EditError::Conflict { current, .. } => {
                f.debug_struct("Conflict").field("current", current).finish_non_exhaustive()
            }
            EditError::Invalid(error) => f.debug_tuple("Invalid").field(error).finish(),
            EditError::Io { path, action, source } => {
                f.debug_struct("Io").field("path", path).field("action", action).field("source", source).finish()
            }
        }
    }
}

impl LiveConfig {
    /// The text in force and its version (the file's text when it was last
    /// applied). Cheap: no file is read.
    pub fn running(&self) -> Result<ConfigText, EditError> {
        let text = self.text.lock().clone();
        text.map(ConfigText::new).ok_or(EditError::NoFile)
    }

    /// The file as it is on disk now, its version, and whether a reload
    /// would apply it. Blocking (it reads the file): call it from
    /// `spawn_blocking` in async code.
    pub fn on_disk(&self) -> Result<OnDisk, EditError> {
        let path = self.path.as_deref().ok_or(EditError::NoFile)?;
        let file = ConfigText::new(read(path)?);
        let problem = self.check_text(&file.text).err().map(|error| ConfigProblem::from(&error));
        let running = self.running()?.version;
        Ok(OnDisk { path: path.display().to_string(), file, problem, running })
    }

    /// Replaces the config file with `text` and applies it, if the file is
    /// still the version `expected` (else [`EditError::Conflict`]) and the
    /// text passes [`LiveConfig::check_text`] (else
    /// [`EditError::Invalid`]; nothing is written). The file is replaced
    /// atomically (see the module's guarantees), then put in force as a
    /// forced reload would; the outcome is returned and reported to the
    /// gateway's reload reporter. An edit that fails after the file was
    /// replaced cannot happen: the text was checked first.
    ///
    /// Blocking (it reads, writes and syncs files, and waits for a reload
    /// or another edit in progress): call it from `spawn_blocking` in async
    /// code.
    pub fn replace(&self, text: &str, expected: &ConfigVersion) -> Result<ReloadOutcome, EditError> {
        let path = self.path.as_deref().ok_or(EditError::NoFile)?;
        let _changing = self.changing.lock();
        let now = read(path)?;
        let current = ConfigVersion::of(&now);
        if current != *expected {
            return Err(EditError::Conflict { current, text: now });
        }
        let config = self.check_text(text).map_err(EditError::Invalid)?;
        // A symlink's target is what is replaced: the link stays.
        let target = std::fs::canonicalize(path).map_err(io_error(path, "resolve"))?;
        write_atomically(&target, text)?;
        tracing::info!(path = %path.display(), version = %ConfigVersion::of(text), "config file replaced by an edit");
        let outcome = self.install(text.to_string(), config);
        self.report(outcome.clone());
        Ok(outcome)
    }
}

/// A unified diff from `old` (headed `running`) to `new` (headed `edited`),
/// with 3 lines of context; empty when they are the same.
pub fn unified_diff(old: &str, new: &str) -> String {
    similar::TextDiff::from_lines(old, new).unified_diff().context_radius(3).header("running", "edited").to_string()
}

fn read(path: &Path) -> Result<String, EditError> {
    std::fs::read_to_string(path).map_err(io_error(path, "read"))
}

fn io_error(path: &Path, action: &'static str) -> impl FnOnce(std::io::Error) -> EditError {
    let path = path.to_path_buf();
    move |source| EditError::Io { path, action, source }
}

/// Replaces `target` (not a symlink) with `text`: a new file beside it, with
/// its mode (and owner and group, where the process may set them), synced,
/// renamed over it, and the directory synced. On a failure before the
/// rename the new file is removed and `target` is untouched.
fn write_atomically(target: &Path, text: &str) -> Result<(), EditError> {
    let directory = match target.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let old = std::fs::metadata(target).map_err(io_error(target, "read the metadata of"))?;
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temporary = directory.join(format!(".{name}.{}.edit", uuid::Uuid::new_v4().simple()));
    // Owner-only until it has the old file's mode: the text holds secrets.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)
        .map_err(io_error(&temporary, "create"))?;
    let written = (|| {
        keep_owner(&file, &old, &temporary);
        file.set_permissions(old.permissions()).map_err(io_error(&temporary, "set the mode of"))?;
        file.write_all(text.as_bytes()).map_err(io_error(&temporary, "write"))?;
        file.sync_all().map_err(io_error(&temporary, "sync"))?;
        std::fs::rename(&temporary, target).map_err(io_error(target, "replace"))
    })();
    if let Err(error) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(error);
    }
    // The new file is in place; its name survives a power cut once the
    // directory is synced. A failure here does not undo the edit.
    if let Err(error) = std::fs::File::open(directory).and_then(|dir| dir.sync_all()) {
        tracing::warn!(directory = %directory.display(), %error, "cannot sync the config file's directory");
    }
    Ok(())
}

/// Gives the new file the old one's owner and group when they differ from
/// the process's: a process may give a file its own uid and any group it
/// belongs to (root any). What it may not set is left as created, and said.
fn keep_owner(file: &std::fs::File, old: &std::fs::Metadata, path: &Path) {
    let Ok(new) = file.metadata() else { return };
    if (new.uid(), new.gid()) == (old.uid(), old.gid()) {
        return;
    }
    if let Err(error) = std::os::unix::fs::fchown(file, Some(old.uid()), Some(old.gid())) {
        tracing::warn!(
            path = %path.display(),
            %error,
            uid = old.uid(),
            gid = old.gid(),
            "the edited config file keeps the gateway's owner and group, not the old file's"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const CONFIG: &str = "[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"s3cret\"]\n";

    fn with_busy(busy: &str) -> String {
        format!("{CONFIG}\n[channels.hooks.policy]\nbusy = \"{busy}\"\n")
    }

    #[test]
    fn a_version_is_sixteen_hex_digits_of_the_texts_sha256() {
        let version = ConfigVersion::of("");
        assert_eq!(version.as_str(), "e3b0c44298fc1c14");
        assert_ne!(ConfigVersion::of("a"), ConfigVersion::of("b"));
        assert_eq!(serde_json::to_string(&version).unwrap(), "\"e3b0c44298fc1c14\"");
    }

    #[test]
    fn the_diff_is_unified_with_three_lines_of_context() {
        let old = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
        let new = "1\n2\n3\n4\nfive\n6\n7\n8\n9\n";
        let diff = unified_diff(old, new);
        assert_eq!(diff, "--- running\n+++ edited\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n");
        assert_eq!(unified_diff(old, old), "");
    }

    #[test]
    fn a_problem_keeps_the_error_and_its_position() {
        let live = LiveConfig::fixed(crate::config::GatewayConfig::default_webhook("s".into()));
        let error = live.check_text(CONFIG).unwrap_err();
        assert_eq!(ConfigProblem::from(&error).message, "this gateway runs without a config file");
        let error = crate::config::GatewayConfig::parse("[http]\nlisten = 1\n", "bub.toml").unwrap_err();
        let problem = ConfigProblem::from(&error);
        assert_eq!((problem.line, problem.column), (Some(2), Some(10)));
        assert!(problem.error.starts_with("bub.toml:2:10: "), "{problem:?}");
    }

    #[test]
    fn a_config_without_a_file_cannot_be_edited() {
        let live = LiveConfig::fixed(crate::config::GatewayConfig::default_webhook("s".into()));
        assert!(matches!(live.on_disk(), Err(EditError::NoFile)));
        assert!(matches!(live.running(), Err(EditError::NoFile)));
        assert!(matches!(live.replace(CONFIG, &ConfigVersion::of("")), Err(EditError::NoFile)));
    }

    #[test]
    fn errors_and_texts_keep_the_file_out_of_debug_output() {
        let conflict = EditError::Conflict { current: ConfigVersion::of("x"), text: CONFIG.to_string() };
        assert!(!format!("{conflict:?}").contains("s3cret"));
        assert!(!format!("{:?}", ConfigText::new(CONFIG.to_string())).contains("s3cret"));
    }

    /// The edit reaches the reporter once: the watcher sees the write and
    /// finds the text in force. (Here and not in `tests/it`, where another
    /// module's SIGHUP would reload every watcher once more.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_edit_is_reported_once_and_the_watcher_does_not_apply_it_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bub.toml");
        std::fs::write(&path, with_busy("queue")).unwrap();
        let (live, mut outcomes) = LiveConfig::watch(&path, Vec::new()).unwrap();
        let version = live.on_disk().unwrap().file.version;
        let edited = with_busy("steer");
        let editing = live.clone();
        let outcome = tokio::task::spawn_blocking(move || editing.replace(&edited, &version)).await.unwrap().unwrap();
        assert_eq!(outcome, ReloadOutcome::Applied { needs_restart: vec![] });
        let reported = tokio::time::timeout(Duration::from_secs(5), outcomes.recv()).await.unwrap();
        assert_eq!(reported, Some(outcome));
        // The watcher's events come within its 200 ms coalescing; give it plenty.
        let again = tokio::time::timeout(Duration::from_millis(1500), outcomes.recv()).await;
        assert!(again.is_err(), "reported twice: {again:?}");
        assert_eq!(live.running().unwrap().version, ConfigVersion::of(&with_busy("steer")));
    }
}
