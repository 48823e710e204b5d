//! Skills: instructions the agent loads when a task calls for them.
//!
//! A skill is a folder holding a `SKILL.md` (the Agent Skills format): YAML
//! front matter with a `name` and a one-line `description`, then a Markdown
//! body. Only the descriptions go into every system prompt
//! ([`prompt_section`]); the model reads a body on demand through the `skill`
//! tool ([`skill_tool`]), so many skills cost a line each, not a page each.
//!
//! Skills come from, in order of precedence (the first of a name wins,
//! ignoring case):
//! 1. `<workspace>/.agents/skills/<name>/SKILL.md`, the project's own;
//! 2. `<home>/.agents/skills/<name>/SKILL.md`, the user's, when the agent is
//!    given a home ([`skill_roots`]; the `bub` binary gives `$HOME`);
//! 3. the builtin set in the repository's `skills/` folder, compiled into the
//!    binary so it needs no files at run time.
//!
//! The workspace's skills are hostile input (a sandboxed command writes
//! them), so they are read as every workspace file is
//! ([`crate::environment::workspace_file`]): beneath the workspace (a skill,
//! `.agents` or `.agents/skills` linked out of it is not read), regular
//! files only, capped, at most [`MAX_SKILL_FOLDERS`] folders. The user's
//! folder is the admin's: its links are followed.
//!
//! Folders are read again on every call, so a skill written during a session
//! is visible at once. A skill that breaks the format rules (see
//! [`SkillError`]) is skipped with a warning naming the file and the reason; a
//! bad skill never stops the agent.

use crate::environment::workspace_file::{WorkspaceDir, WorkspaceFileError, off_runtime, read_anywhere};
use crate::tools::{Capability, Tool, ToolContext, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A usable skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    /// One line: runs of whitespace in the front matter are collapsed.
    pub description: String,
    /// The skill's folder, or `builtin:<name>` for a builtin skill.
    pub location: PathBuf,
    /// The Markdown after the front matter, trimmed, with `$SKILL_DIR` (and
    /// `${SKILL_DIR}`) replaced by the location.
    pub body: String,
    /// The optional flat `metadata` map (e.g. `channel: telegram`).
    pub metadata: BTreeMap<String, String>,
}

/// Why a `SKILL.md` was skipped.
#[derive(Debug, thiserror::Error)]
pub enum SkillError {
    #[error("cannot read SKILL.md: {0}")]
    Read(WorkspaceFileError),
    #[error("SKILL.md is {0} bytes; skills are limited to {MAX_SKILL_BYTES} bytes")]
    TooLarge(u64),
    #[error("SKILL.md must start with a `---` line opening the front matter")]
    NoFrontMatter,
    #[error("front matter is not closed: add a `---` line after it")]
    UnclosedFrontMatter,
    #[error("front matter is not valid YAML: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
    #[error("front matter has no `name`")]
    MissingName,
    #[error(
        "name `{0}` is not lowercase kebab-case (a-z, 0-9, single `-` between words) of at most {MAX_NAME_CHARS} characters"
    )]
    BadName(String),
    #[error("name `{name}` does not match its folder `{folder}`: rename one to match")]
    NameMismatch { name: String, folder: String },
    #[error("front matter has no non-empty `description`")]
    MissingDescription,
    #[error("description is {0} characters; the limit is {MAX_DESCRIPTION_CHARS}")]
    DescriptionTooLong(usize),
    #[error("metadata must be a flat map of strings to strings; `{0}` is not")]
    BadMetadata(String),
}

const MAX_NAME_CHARS: usize = 64;
const MAX_DESCRIPTION_CHARS: usize = 1024;
/// Skill files are read on every model step; a huge one is a mistake.
const MAX_SKILL_BYTES: u64 = 1024 * 1024;
const SKILL_FILE: &str = "SKILL.md";
/// Skill folders read in one root; a workspace with more is a mistake or
/// an attack on every step's time.
pub const MAX_SKILL_FOLDERS: usize = 128;

impl From<WorkspaceFileError> for SkillError {
    fn from(error: WorkspaceFileError) -> SkillError {
        match error {
            WorkspaceFileError::TooLarge { size, .. } => SkillError::TooLarge(size),
            error => SkillError::Read(error),
        }
    }
}

/// A folder of skill folders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkillRoot {
    /// `<workspace>/.agents/skills`, read beneath the workspace given here.
    Workspace(PathBuf),
    /// A folder the admin keeps (the user's `~/.agents/skills`): symlinks
    /// followed, files still regular, non-blocking and capped.
    Trusted(PathBuf),
}

/// The skills compiled into the binary: `(folder name, SKILL.md text)`.
const BUILTIN_SKILLS: &[(&str, &str)] = &[
    ("spill-reading", include_str!("../skills/spill-reading/SKILL.md")),
    ("tape-handoff", include_str!("../skills/tape-handoff/SKILL.md")),
];

/// The folders searched for skills, most important first:
/// `<workspace>/.agents/skills`, then `<user_home>/.agents/skills` when a
/// user's home is given (and it is not the same folder).
pub fn skill_roots(workspace: &Path, user_home: Option<&Path>) -> Vec<SkillRoot> {
    let mut roots = vec![SkillRoot::Workspace(workspace.to_path_buf())];
    if let Some(home) = user_home.filter(|home| *home != workspace) {
        roots.push(SkillRoot::Trusted(home.join(".agents").join("skills")));
    }
    roots
}

/// Every valid skill under `roots` plus the builtin set, sorted by name. When
/// names collide (ignoring case) the earlier root wins, and any root wins over
/// a builtin. Blocking: call it off the async runtime's threads.
pub fn discover(roots: &[SkillRoot]) -> Vec<Skill> {
    let mut found: BTreeMap<String, Skill> = BTreeMap::new();
    let candidates = roots.iter().flat_map(skills_in).chain(builtin_skills());
    for skill in candidates {
        found.entry(skill.name.to_lowercase()).or_insert(skill);
    }
    found.into_values().collect()
}

/// The `<available_skills>` block of the system prompt, one `- name:
/// description` line per skill, then the whole of each skill the step's
/// `prompt` names as `$<skill-name>` (its location and body, so the model
/// need not ask for it); empty when there are no skills.
pub fn prompt_section(skills: &[Skill], prompt: &str) -> String {
    if skills.is_empty() {
        return String::new();
    }
    let mut section = String::from("<available_skills>\n");
    for skill in skills {
        section.push_str(&format!("- {}: {}\n", skill.name, skill.description));
    }
    section.push_str("</available_skills>");
    let prompt = prompt.to_lowercase();
    for skill in skills.iter().filter(|skill| mentions(&prompt, &skill.name)) {
        section.push_str(&format!(
            "\n\n<skill name=\"{}\">\nlocation: {}\n\n{}\n</skill>",
            skill.name,
            skill.location.display(),
            skill.body
        ));
    }
    section
}

/// Whether `text` (lowercased) names the skill as `$name`, not as the start
/// of a longer name (`$deploy` is not `$deploy-staging`).
fn mentions(text: &str, name: &str) -> bool {
    let wanted = format!("${}", name.to_lowercase());
    text.match_indices(&wanted).any(|(at, _)| {
        let next = text[at + wanted.len()..].chars().next();
        !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    })
}

/// The skills a turn may use: every one, or only those the turn state's
/// `allowed_skills` names (a list of names, as a subagent is given).
pub fn allowed_by(skills: Vec<Skill>, state: &crate::tools::TurnState) -> Vec<Skill> {
    let Some(allowed) = state.get("allowed_skills") else { return skills };
    let Some(names) = allowed.as_array() else { return skills };
    let names: Vec<String> = names.iter().filter_map(|n| n.as_str().map(str::to_lowercase)).collect();
    skills.into_iter().filter(|skill| names.contains(&skill.name.to_lowercase())).collect()
}

/// List the available skills, or show one skill's instructions and location.
#[derive(Debug, Deserialize, JsonSchema)]
struct SkillArgs {
    /// The skill to show; leave out to list all skills.
    #[serde(default)]
    name: Option<String>,
}

/// The `skill` tool: with no name it lists `name: description` lines; with a
/// name it returns `location: …` and the skill's body; an unknown name gives
/// `(no such skill)`. Skills are discovered from the call's workspace (and
/// `user_home`, see [`skill_roots`]) each time.
pub fn skill_tool(user_home: Option<PathBuf>) -> Tool {
    Tool::typed("skill", move |args: SkillArgs, ctx: ToolContext| {
        let user_home = user_home.clone();
        async move {
            let roots = skill_roots(&ctx.workspace, user_home.as_deref());
            let skills = off_runtime(move || Ok(discover(&roots)))
                .await
                .map_err(|error| ToolError::failed(format!("skill discovery failed: {error}")))?;
            let skills = allowed_by(skills, &ctx.state);
            Ok::<_, ToolError>(match args.name {
                None => list_skills(&skills),
                Some(name) => show_skill(&skills, &name),
            })
        }
    })
    .with_capabilities([Capability::Read])
}

fn list_skills(skills: &[Skill]) -> String {
    if skills.is_empty() {
        return "(no skills)".to_string();
    }
    skills.iter().map(|skill| format!("{}: {}", skill.name, skill.description)).collect::<Vec<_>>().join("\n")
}

fn show_skill(skills: &[Skill], name: &str) -> String {
    let wanted = name.trim().to_lowercase();
    match skills.iter().find(|skill| skill.name == wanted) {
        Some(skill) => format!("location: {}\n\n{}", skill.location.display(), skill.body),
        None => "(no such skill)".to_string(),
    }
}

/// The valid skills directly under `root`, in folder-name order. A missing
/// root is normal (most workspaces have none) and is skipped quietly, as is
/// a folder without a `SKILL.md`.
fn skills_in(root: &SkillRoot) -> Vec<Skill> {
    let listed = match root {
        SkillRoot::Workspace(workspace) => workspace_skills(workspace),
        SkillRoot::Trusted(dir) => trusted_skills(dir),
    };
    let (dir, mut folders, read) = match listed {
        Ok(listed) => listed,
        Err(error) if absent(&error) => return Vec::new(),
        Err(error) => {
            tracing::warn!(root = ?root, reason = %error, "cannot read skills folder");
            return Vec::new();
        }
    };
    folders.sort();
    folders
        .into_iter()
        .filter_map(|name| {
            let folder = dir.join(&name);
            let text = match read(&name) {
                Err(error) if absent(&error) => return None,
                read => read,
            };
            let skill = text.map_err(SkillError::from).and_then(|bytes| parse_file(bytes, &name, folder.clone()));
            skill.inspect_err(|error| warn_skipped(&folder.join(SKILL_FILE), error)).ok()
        })
        .collect()
}

/// The folder names under a skills folder, and how to read `<name>/SKILL.md`.
type Listed = (PathBuf, Vec<String>, Box<dyn Fn(&str) -> Result<Vec<u8>, WorkspaceFileError>>);

/// `<workspace>/.agents/skills`, everything opened beneath the workspace.
fn workspace_skills(workspace: &Path) -> Result<Listed, WorkspaceFileError> {
    let root = WorkspaceDir::open(workspace)?;
    let skills = Path::new(".agents").join("skills");
    let names = root.list(&skills, MAX_SKILL_FOLDERS)?;
    let folders = names.into_iter().filter_map(|name| name.into_string().ok()).collect();
    let read = move |name: &str| root.read(&skills.join(name).join(SKILL_FILE), MAX_SKILL_BYTES);
    Ok((workspace.join(".agents").join("skills"), folders, Box::new(read)))
}

/// A folder the admin keeps, read as its user would.
fn trusted_skills(dir: &Path) -> Result<Listed, WorkspaceFileError> {
    let folders = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().into_string().ok())
        .take(MAX_SKILL_FOLDERS)
        .collect();
    let base = dir.to_path_buf();
    let read = move |name: &str| read_anywhere(&base.join(name).join(SKILL_FILE), MAX_SKILL_BYTES);
    Ok((dir.to_path_buf(), folders, Box::new(read)))
}

/// Nothing there: no folder, or an entry that is not a folder.
fn absent(error: &WorkspaceFileError) -> bool {
    match error {
        WorkspaceFileError::NotFound => true,
        WorkspaceFileError::Io(error) => {
            matches!(error.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory)
        }
        _ => false,
    }
}

/// Checks the bytes of `<folder>/SKILL.md`, found in folder `name`.
fn parse_file(bytes: Vec<u8>, name: &str, folder: PathBuf) -> Result<Skill, SkillError> {
    let text = String::from_utf8(bytes).map_err(|_| SkillError::Read(WorkspaceFileError::NotText))?;
    parse_skill(&text, name, folder)
}

/// Parsed once: they are compiled in, and the prompt lists them every step.
fn builtin_skills() -> Vec<Skill> {
    static PARSED: std::sync::OnceLock<Vec<Skill>> = std::sync::OnceLock::new();
    PARSED
        .get_or_init(|| {
            BUILTIN_SKILLS
                .iter()
                .filter_map(|(folder, text)| {
                    let location = PathBuf::from(format!("builtin:{folder}"));
                    parse_skill(text, folder, location.clone()).inspect_err(|error| warn_skipped(&location, error)).ok()
                })
                .collect()
        })
        .clone()
}

fn warn_skipped(path: &Path, error: &SkillError) {
    tracing::warn!(path = %path.display(), reason = %error, "skipping invalid skill");
}

#[derive(Debug, Deserialize)]
struct FrontMatter {
    name: Option<String>,
    description: Option<String>,
    #[serde(default)]
    metadata: Option<serde_yaml_ng::Mapping>,
}

/// Checks a `SKILL.md` text found in `folder_name`, located at `location`.
fn parse_skill(text: &str, folder_name: &str, location: PathBuf) -> Result<Skill, SkillError> {
    let (yaml, body) = split_front_matter(text)?;
    let front: FrontMatter = serde_yaml_ng::from_str(yaml)?;
    let name = front.name.ok_or(SkillError::MissingName)?;
    check_name(&name, folder_name)?;
    let description = check_description(front.description)?;
    let metadata = flat_metadata(front.metadata)?;
    let body = render_body(body, &location);
    Ok(Skill { name, description, location, body, metadata })
}

/// Splits `---\n<yaml>\n---\n<body>` (any line endings, optional BOM).
fn split_front_matter(text: &str) -> Result<(&str, &str), SkillError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let opening = lines.next().ok_or(SkillError::NoFrontMatter)?;
    if opening.trim_end() != "---" {
        return Err(SkillError::NoFrontMatter);
    }
    let yaml_start = opening.len();
    let mut offset = yaml_start;
    for line in lines {
        if line.trim_end() == "---" {
            return Ok((&text[yaml_start..offset], &text[offset + line.len()..]));
        }
        offset += line.len();
    }
    Err(SkillError::UnclosedFrontMatter)
}

fn check_name(name: &str, folder_name: &str) -> Result<(), SkillError> {
    if name.is_empty() {
        return Err(SkillError::MissingName);
    }
    if !is_kebab_case(name) || name.chars().count() > MAX_NAME_CHARS {
        return Err(SkillError::BadName(name.to_string()));
    }
    if name != folder_name {
        return Err(SkillError::NameMismatch { name: name.to_string(), folder: folder_name.to_string() });
    }
    Ok(())
}

/// `^[a-z0-9]+(-[a-z0-9]+)*$`
fn is_kebab_case(name: &str) -> bool {
    name.split('-').all(|word| !word.is_empty() && word.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()))
}

fn check_description(description: Option<String>) -> Result<String, SkillError> {
    let description = description.unwrap_or_default().split_whitespace().collect::<Vec<_>>().join(" ");
    if description.is_empty() {
        return Err(SkillError::MissingDescription);
    }
    let chars = description.chars().count();
    if chars > MAX_DESCRIPTION_CHARS {
        return Err(SkillError::DescriptionTooLong(chars));
    }
    Ok(description)
}

fn flat_metadata(metadata: Option<serde_yaml_ng::Mapping>) -> Result<BTreeMap<String, String>, SkillError> {
    let mut flat = BTreeMap::new();
    for (key, value) in metadata.unwrap_or_default() {
        match (key, value) {
            (serde_yaml_ng::Value::String(key), serde_yaml_ng::Value::String(value)) => {
                flat.insert(key, value);
            }
            (key, _) => {
                let key = key.as_str().map(str::to_string).unwrap_or_else(|| format!("{key:?}"));
                return Err(SkillError::BadMetadata(key));
            }
        }
    }
    Ok(flat)
}

fn render_body(body: &str, location: &Path) -> String {
    let dir = location.display().to_string();
    body.trim().replace("${SKILL_DIR}", &dir).replace("$SKILL_DIR", &dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tape::{InMemoryTapeStore, Tape, TapeName};
    use serde_json::json;
    use std::sync::Arc;
    use tempfile::TempDir;

    fn write_skill(root: &Path, folder: &str, text: &str) -> PathBuf {
        let dir = root.join(folder);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(SKILL_FILE), text).unwrap();
        dir
    }

    fn trusted(dir: &Path) -> SkillRoot {
        SkillRoot::Trusted(dir.to_path_buf())
    }

    /// `<folder>/SKILL.md` read and checked as a trusted root's.
    fn load(folder: &Path) -> Result<Skill, SkillError> {
        let name = folder.file_name().unwrap().to_str().unwrap();
        parse_file(read_anywhere(&folder.join(SKILL_FILE), MAX_SKILL_BYTES)?, name, folder.to_path_buf())
    }

    fn skill_md(name: &str, description: &str, body: &str) -> String {
        format!("---\nname: {name}\ndescription: {description}\n---\n{body}")
    }

    fn user_skills(skills: &[Skill]) -> Vec<&Skill> {
        skills.iter().filter(|skill| !skill.location.to_string_lossy().starts_with("builtin:")).collect()
    }

    fn names(skills: &[Skill]) -> Vec<String> {
        user_skills(skills).iter().map(|skill| skill.name.clone()).collect()
    }

    #[test]
    fn valid_skill_is_found_with_its_body_and_metadata() {
        let root = TempDir::new().unwrap();
        let dir = write_skill(
            root.path(),
            "deploy-app",
            "---\nname: deploy-app\ndescription: >\n  Deploys the app\n  to staging.\nmetadata:\n  channel: telegram\n---\n\nRun $SKILL_DIR/scripts/deploy.sh\n",
        );
        let skills = discover(&[trusted(root.path())]);
        let skill = user_skills(&skills)[0];
        assert_eq!(skill.name, "deploy-app");
        assert_eq!(skill.description, "Deploys the app to staging.");
        assert_eq!(skill.location, dir);
        assert_eq!(skill.body, format!("Run {}/scripts/deploy.sh", dir.display()));
        assert_eq!(skill.metadata["channel"], "telegram");
    }

    #[test]
    fn name_that_differs_from_its_folder_is_skipped() {
        let root = TempDir::new().unwrap();
        write_skill(root.path(), "deploy", &skill_md("deploy-app", "Deploys.", ""));
        assert!(names(&discover(&[trusted(root.path())])).is_empty());
        let error = load(&root.path().join("deploy")).unwrap_err();
        assert!(matches!(error, SkillError::NameMismatch { .. }), "{error}");
    }

    #[test]
    fn names_that_are_not_kebab_case_are_skipped() {
        let root = TempDir::new().unwrap();
        for folder in ["Deploy", "deploy_app", "-deploy", "deploy--app", "deploy-"] {
            write_skill(root.path(), folder, &skill_md(folder, "Deploys.", ""));
        }
        let long = "a".repeat(65);
        write_skill(root.path(), &long, &skill_md(&long, "Long.", ""));
        write_skill(root.path(), "deploy-2", &skill_md("deploy-2", "Fine.", ""));
        assert_eq!(names(&discover(&[trusted(root.path())])), ["deploy-2"]);
    }

    #[test]
    fn missing_or_empty_description_is_skipped() {
        let root = TempDir::new().unwrap();
        write_skill(root.path(), "quiet", "---\nname: quiet\n---\nbody");
        write_skill(root.path(), "blank", &skill_md("blank", "'  '", ""));
        assert!(names(&discover(&[trusted(root.path())])).is_empty());
    }

    #[test]
    fn description_over_the_limit_is_skipped() {
        let root = TempDir::new().unwrap();
        write_skill(root.path(), "wordy", &skill_md("wordy", &"w".repeat(1025), ""));
        assert!(names(&discover(&[trusted(root.path())])).is_empty());
    }

    #[test]
    fn broken_front_matter_and_nested_metadata_are_skipped() {
        let root = TempDir::new().unwrap();
        write_skill(root.path(), "no-front", "# just markdown");
        write_skill(root.path(), "unclosed", "---\nname: unclosed\ndescription: x\n");
        write_skill(root.path(), "bad-yaml", "---\nname: [bad-yaml\n---\n");
        write_skill(root.path(), "nested", "---\nname: nested\ndescription: x\nmetadata:\n  a:\n    b: c\n---\n");
        write_skill(root.path(), "numeric", "---\nname: numeric\ndescription: x\nmetadata:\n  priority: 1\n---\n");
        assert!(names(&discover(&[trusted(root.path())])).is_empty());
        assert!(matches!(
            load(&root.path().join("nested")),
            Err(SkillError::BadMetadata(key)) if key == "a"
        ));
    }

    #[test]
    fn folders_without_skill_md_and_missing_roots_are_ignored() {
        let root = TempDir::new().unwrap();
        std::fs::create_dir_all(root.path().join("notes")).unwrap();
        let missing = root.path().join("does-not-exist");
        assert!(names(&discover(&[trusted(root.path()), SkillRoot::Trusted(missing)])).is_empty());
    }

    /// The names of the skills found in a workspace prepared by `setup`.
    fn found_in(setup: impl FnOnce(&Path)) -> (TempDir, Vec<String>) {
        let workspace = TempDir::new().unwrap();
        setup(workspace.path());
        let skills = discover(&skill_roots(workspace.path(), None));
        let found = names(&skills);
        (workspace, found)
    }

    /// The workspace is hostile: a skill folder, `.agents` or
    /// `.agents/skills` linked out of it is not read; links inside are.
    #[test]
    fn workspace_skills_linked_out_of_the_workspace_are_not_read() {
        use std::os::unix::fs::symlink;
        let outside = TempDir::new().unwrap();
        let agents = outside.path().join(".agents");
        write_skill(&agents.join("skills"), "leak", &skill_md("leak", "From outside.", ""));
        let (_ws, found) = found_in(|ws| {
            std::fs::create_dir_all(ws.join(".agents/skills")).unwrap();
            symlink(agents.join("skills/leak"), ws.join(".agents/skills/leak")).unwrap();
        });
        assert!(found.is_empty(), "a skill folder linked out: {found:?}");
        let (_ws, found) = found_in(|ws| symlink(&agents, ws.join(".agents")).unwrap());
        assert!(found.is_empty(), ".agents linked out: {found:?}");
        let (_ws, found) = found_in(|ws| {
            std::fs::create_dir_all(ws.join(".agents")).unwrap();
            symlink(agents.join("skills"), ws.join(".agents/skills")).unwrap();
        });
        assert!(found.is_empty(), ".agents/skills linked out: {found:?}");
        let (ws, found) = found_in(|ws| {
            write_skill(&ws.join("tools"), "inside", &skill_md("inside", "Linked inside.", ""));
            std::fs::create_dir_all(ws.join(".agents/skills")).unwrap();
            symlink("../../tools/inside", ws.join(".agents/skills/inside")).unwrap();
        });
        assert_eq!(found, ["inside"], "a link inside the workspace works");
        let skills = discover(&skill_roots(ws.path(), None));
        assert_eq!(user_skills(&skills)[0].location, ws.path().join(".agents/skills/inside"));
    }

    #[test]
    fn crlf_front_matter_is_read() {
        let root = TempDir::new().unwrap();
        write_skill(
            root.path(),
            "windows",
            "---\r\nname: windows\r\ndescription: Written on Windows.\r\n---\r\nBody\r\n",
        );
        let skills = discover(&[trusted(root.path())]);
        assert_eq!(user_skills(&skills)[0].body, "Body");
    }

    #[test]
    fn workspace_skill_shadows_a_home_skill_of_the_same_name() {
        let workspace = TempDir::new().unwrap();
        let home = TempDir::new().unwrap();
        write_skill(workspace.path(), "deploy", &skill_md("deploy", "Project deploy.", ""));
        write_skill(home.path(), "deploy", &skill_md("deploy", "Personal deploy.", ""));
        write_skill(home.path(), "notes", &skill_md("notes", "Personal notes.", ""));
        let skills = discover(&[trusted(workspace.path()), trusted(home.path())]);
        let found: Vec<(&str, &str)> =
            user_skills(&skills).iter().map(|s| (s.name.as_str(), s.description.as_str())).collect();
        assert_eq!(found, [("deploy", "Project deploy."), ("notes", "Personal notes.")]);
    }

    #[test]
    fn user_skill_shadows_a_builtin_and_builtins_come_last() {
        let root = TempDir::new().unwrap();
        write_skill(root.path(), "tape-handoff", &skill_md("tape-handoff", "Mine.", ""));
        let skills = discover(&[trusted(root.path())]);
        let handoff = skills.iter().find(|s| s.name == "tape-handoff").unwrap();
        assert_eq!(handoff.description, "Mine.");
        let spill = skills.iter().find(|s| s.name == "spill-reading").unwrap();
        assert_eq!(spill.location, PathBuf::from("builtin:spill-reading"));
    }

    #[test]
    fn builtin_skills_are_all_valid() {
        let builtins = builtin_skills();
        assert_eq!(builtins.len(), BUILTIN_SKILLS.len());
        assert!(builtins.iter().all(|skill| !skill.body.is_empty()));
    }

    #[test]
    fn results_are_sorted_by_name() {
        let root = TempDir::new().unwrap();
        for name in ["zeta", "alpha", "mid"] {
            write_skill(root.path(), name, &skill_md(name, "x", ""));
        }
        let skills = discover(&[trusted(root.path())]);
        let all: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
        let mut sorted = all.clone();
        sorted.sort();
        assert_eq!(all, sorted);
    }

    #[test]
    fn skill_roots_start_with_the_workspace() {
        let roots = skill_roots(Path::new("/srv/project"), Some(Path::new("/home/me")));
        assert_eq!(roots, [SkillRoot::Workspace("/srv/project".into()), trusted(Path::new("/home/me/.agents/skills"))]);
        assert_eq!(skill_roots(Path::new("/home/me"), Some(Path::new("/home/me"))).len(), 1);
    }

    #[test]
    fn prompt_section_lists_one_line_per_skill() {
        let skill = |name: &str, description: &str| Skill {
            name: name.into(),
            description: description.into(),
            location: PathBuf::from(format!("builtin:{name}")),
            body: String::new(),
            metadata: BTreeMap::new(),
        };
        assert_eq!(
            prompt_section(&[skill("deploy", "Deploys."), skill("notes", "Takes notes.")], "hello"),
            "<available_skills>\n- deploy: Deploys.\n- notes: Takes notes.\n</available_skills>"
        );
        assert_eq!(prompt_section(&[], "$deploy"), "");
    }

    fn context(workspace: &Path) -> ToolContext {
        let tape = Tape::new(Arc::new(InMemoryTapeStore::new()), TapeName::new("skills-test").unwrap());
        ToolContext::detached(tape, workspace)
    }

    fn workspace_with_skill() -> TempDir {
        let workspace = TempDir::new().unwrap();
        write_skill(
            &workspace.path().join(".agents").join("skills"),
            "deploy",
            &skill_md("deploy", "Deploys the app.", "Run ./deploy.sh"),
        );
        workspace
    }

    #[tokio::test]
    async fn skill_tool_without_a_name_lists_skills() {
        let workspace = workspace_with_skill();
        let tool = skill_tool(None);
        assert_eq!(tool.name(), "skill");
        let listing = tool.call(json!({}), context(workspace.path())).await.unwrap();
        let listing = listing.as_str().unwrap();
        assert!(listing.lines().any(|line| line == "deploy: Deploys the app."), "{listing}");
        assert!(listing.lines().any(|line| line.starts_with("tape-handoff: ")), "{listing}");
    }

    #[tokio::test]
    async fn skill_tool_with_a_name_shows_location_and_body() {
        let workspace = workspace_with_skill();
        let shown = skill_tool(None).call(json!({"name": "Deploy"}), context(workspace.path())).await.unwrap();
        let location = workspace.path().join(".agents/skills/deploy");
        assert_eq!(shown, json!(format!("location: {}\n\nRun ./deploy.sh", location.display())));
    }

    #[tokio::test]
    async fn skill_tool_with_an_unknown_name_says_so() {
        let workspace = workspace_with_skill();
        let shown = skill_tool(None).call(json!({"name": "nope"}), context(workspace.path())).await.unwrap();
        assert_eq!(shown, json!("(no such skill)"));
    }

    /// A skill named as `$name` in the step's prompt is inlined whole; a
    /// longer name that starts the same is not that skill.
    #[test]
    fn a_skill_named_in_the_prompt_is_inlined() {
        let deploy = Skill {
            name: "deploy".into(),
            description: "Deploys.".into(),
            location: PathBuf::from("/skills/deploy"),
            body: "Run ./deploy.sh".into(),
            metadata: BTreeMap::new(),
        };
        let section = prompt_section(std::slice::from_ref(&deploy), "please $Deploy it, then tell me");
        assert!(
            section.ends_with(
                "</available_skills>\n\n<skill name=\"deploy\">\nlocation: /skills/deploy\n\nRun ./deploy.sh\n</skill>"
            ),
            "{section}"
        );
        for prompt in ["deploy it", "$deploy-staging", "cost $deploys"] {
            assert!(!prompt_section(std::slice::from_ref(&deploy), prompt).contains("<skill "), "{prompt}");
        }
    }

    /// With `allowed_skills` on the turn state, the skill tool (and the
    /// prompt, through the same filter) sees only those skills.
    #[tokio::test]
    async fn allowed_skills_limit_what_a_turn_sees() {
        let workspace = workspace_with_skill();
        let ctx = context(workspace.path());
        ctx.state.set("allowed_skills", json!(["tape-handoff"]));
        let listing = skill_tool(None).call(json!({}), ctx.clone()).await.unwrap();
        let listing = listing.as_str().unwrap().to_string();
        assert!(listing.starts_with("tape-handoff: ") && !listing.contains("deploy"), "{listing}");
        assert_eq!(skill_tool(None).call(json!({"name": "deploy"}), ctx).await.unwrap(), json!("(no such skill)"));
        let everything = discover(&skill_roots(workspace.path(), None));
        let all = allowed_by(everything.clone(), &crate::tools::TurnState::new());
        assert_eq!(all.len(), everything.len(), "no allowed_skills: every skill");
    }

    #[test]
    fn skill_tool_schema_has_an_optional_name() {
        let tool = skill_tool(None);
        assert_eq!(tool.parameters()["properties"]["name"]["type"], json!(["string", "null"]));
        assert!(tool.parameters().get("required").is_none());
        assert!(tool.description().starts_with("List the available skills"));
    }
}
