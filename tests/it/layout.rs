//! `src/lib.rs` tells the truth about the code: its `# Dependencies` list is
//! exactly the import graph between the top-level modules of `src/`, that
//! graph has no cycle, and its `# Layout` names each top-level module once.
//!
//! The graph is read the way `crate::` paths are written: every `crate::X`
//! in a module's files (comments removed), `use crate::{X, Y::…}` groups
//! over several lines included, is an arrow from the module to `X`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

/// An arrow `from → to` between top-level modules.
type Arrow = (String, String);

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level modules: every file and folder of `src/` but the crate roots.
fn top_level_modules() -> BTreeSet<String> {
    fs::read_dir(src())
        .expect("src/ is readable")
        .map(|entry| entry.expect("src/ lists").file_name().to_string_lossy().into_owned())
        .filter(|name| name != "lib.rs" && name != "main.rs")
        .map(|name| name.strip_suffix(".rs").map_or(name.clone(), str::to_owned))
        .collect()
}

/// The `.rs` files of `module`: `src/<module>.rs` and everything under `src/<module>/`.
fn files_of(module: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let file = src().join(format!("{module}.rs"));
    if file.is_file() {
        files.push(file);
    }
    let mut folders = vec![src().join(module)];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = fs::read_dir(&folder) else { continue };
        for entry in entries {
            let path = entry.expect("a folder of src/ lists").path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// `text` without `// …` and `/* … */` comments (doc comments included: a
/// link in a doc is not an import).
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("//") {
            rest = after.find('\n').map_or("", |end| &after[end..]);
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.find("*/").map_or("", |end| &after[end + 2..]);
        } else {
            let next = rest.chars().next().expect("rest is not empty");
            out.push(next);
            rest = &rest[next.len_utf8()..];
        }
    }
    out
}

/// The leading identifier of `text` after any whitespace.
fn leading_word(text: &str) -> Option<&str> {
    let text = text.trim_start();
    let end = text.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(text.len());
    (end > 0).then(|| &text[..end])
}

/// The first path segment of every `crate::…` in `code`: `crate::tape::Tape`
/// gives `tape`, `crate::{agent::Agent, tape}` gives `agent` and `tape`.
fn crate_references(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let after = &code[at + "crate::".len()..];
        let Some(group) = after.strip_prefix('{') else {
            found.extend(leading_word(after).map(str::to_owned));
            continue;
        };
        // The top-level items of the group, each up to a comma outside any inner braces.
        let mut depth = 0usize;
        let mut item = String::new();
        for c in group.chars() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    found.extend(leading_word(&item).map(str::to_owned));
                    item.clear();
                    continue;
                }
                _ => {}
            }
            item.push(c);
        }
        found.extend(leading_word(&item).map(str::to_owned));
    }
    found
}

/// The arrows the code has, each with the files behind it.
fn code_graph() -> BTreeMap<Arrow, Vec<String>> {
    let modules = top_level_modules();
    let mut arrows: BTreeMap<Arrow, Vec<String>> = BTreeMap::new();
    for module in &modules {
        for file in files_of(module) {
            let text = fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            for target in crate_references(&strip_comments(&text)) {
                if modules.contains(&target) && target != *module {
                    let shown = file.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap_or(&file).display().to_string();
                    arrows.entry((module.clone(), target)).or_default().push(shown);
                }
            }
        }
    }
    arrows
}

/// The `//!` lines of `src/lib.rs` under the heading `# {heading}`, up to the next heading.
fn lib_section(heading: &str) -> Vec<String> {
    let lib = fs::read_to_string(src().join("lib.rs")).expect("src/lib.rs is readable");
    let docs =
        lib.lines().map_while(|line| line.strip_prefix("//!")).map(|line| line.strip_prefix(' ').unwrap_or(line));
    docs.skip_while(|line| *line != format!("# {heading}"))
        .skip(1)
        .take_while(|line| !line.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// The items of a section's lists: each `- …` line with its indented
/// continuation lines.
fn list_items(section: &[String]) -> Vec<String> {
    let mut items: Vec<String> = Vec::new();
    let mut in_item = false;
    for line in section {
        if let Some(item) = line.strip_prefix("- ") {
            items.push(item.to_owned());
            in_item = true;
        } else if in_item && line.starts_with("  ") {
            let last = items.last_mut().expect("an item is open");
            last.push(' ');
            last.push_str(line.trim());
        } else {
            in_item = false;
        }
    }
    items
}

/// The names in backticks in `text`, brackets of a doc link removed.
fn backticked(text: &str) -> Vec<String> {
    text.split('`').skip(1).step_by(2).map(str::to_owned).collect()
}

/// The `# Dependencies` list of `src/lib.rs`, in its order: each module and
/// the modules it imports (`- `tape` → `message``, `- `message` → none`).
fn documented_dependencies() -> Vec<(String, Vec<String>)> {
    let items = list_items(&lib_section("Dependencies"));
    assert!(!items.is_empty(), "src/lib.rs has no `# Dependencies` list (`- `module` → `imported`, …`)");
    items
        .iter()
        .map(|item| {
            let (from, to) = item
                .split_once('→')
                .unwrap_or_else(|| panic!("src/lib.rs, # Dependencies: `- {item}` has no `→` (write `→ none`)"));
            let from = backticked(from);
            let [module] = from.as_slice() else {
                panic!("src/lib.rs, # Dependencies: `- {item}` should name one module before `→`")
            };
            (module.clone(), backticked(to))
        })
        .collect()
}

/// A cycle of `arrows`, if there is one, as the modules along it.
fn find_cycle(arrows: &BTreeSet<Arrow>) -> Option<Vec<String>> {
    fn visit(
        module: &str,
        arrows: &BTreeSet<Arrow>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|m| m == module) {
            let mut cycle = path[start..].to_vec();
            cycle.push(module.to_owned());
            return Some(cycle);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_owned());
        for (_, to) in arrows.iter().filter(|(from, _)| from == module) {
            if let Some(cycle) = visit(to, arrows, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(module.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    arrows.iter().find_map(|(from, _)| visit(from, arrows, &mut Vec::new(), &mut done))
}

#[test]
fn no_top_level_modules_import_each_other_even_through_others() {
    let arrows: BTreeSet<Arrow> = code_graph().into_keys().collect();
    if let Some(cycle) = find_cycle(&arrows) {
        panic!("the top-level modules of src/ import each other in a cycle: {}", cycle.join(" → "));
    }
}

#[test]
fn the_dependencies_in_lib_rs_are_the_imports_of_src() {
    let modules = top_level_modules();
    let documented = documented_dependencies();
    let mut problems = String::new();

    // Each module once, its imports only from modules listed before it (so the list has no cycle).
    let mut listed = BTreeSet::new();
    let mut doc_arrows = BTreeSet::new();
    for (module, imports) in &documented {
        if !modules.contains(module) {
            writeln!(problems, "`{module}` is listed but src/ has no such top-level module").unwrap();
        }
        for import in imports {
            if !listed.contains(import) {
                writeln!(problems, "`{module}` → `{import}`: `{import}` must be listed before `{module}` (bottom up)")
                    .unwrap();
            }
            if !doc_arrows.insert((module.clone(), import.clone())) {
                writeln!(problems, "`{module}` → `{import}` is named twice").unwrap();
            }
        }
        if !listed.insert(module.clone()) {
            writeln!(problems, "`{module}` is listed twice").unwrap();
        }
    }
    for module in modules.difference(&listed) {
        writeln!(problems, "the module `{module}` is missing from the list").unwrap();
    }

    let code = code_graph();
    for ((from, to), files) in &code {
        if !doc_arrows.contains(&(from.clone(), to.clone())) {
            writeln!(problems, "missing from the doc: `{from}` → `{to}`, imported by {}", files.join(", ")).unwrap();
        }
    }
    for (from, to) in &doc_arrows {
        if !code.contains_key(&(from.clone(), to.clone())) {
            writeln!(problems, "missing from the code: `{from}` → `{to}` (nothing in `{from}` names `crate::{to}`)")
                .unwrap();
        }
    }
    assert!(problems.is_empty(), "src/lib.rs's `# Dependencies` and the imports of src/ disagree:\n{problems}");
}

#[test]
fn the_layout_in_lib_rs_names_each_top_level_module_once() {
    let section = lib_section("Layout");
    let named: Vec<String> = section
        .iter()
        .filter_map(|line| line.strip_prefix("- [`"))
        .filter_map(|rest| rest.split_once("`]").map(|(name, _)| name.to_owned()))
        .collect();
    let unique: BTreeSet<String> = named.iter().cloned().collect();
    assert_eq!(named.len(), unique.len(), "a module is named twice in src/lib.rs's `# Layout`: {named:?}");
    assert_eq!(unique, top_level_modules(), "src/lib.rs's `# Layout` and the top-level modules of src/ differ");
}

#[test]
fn imports_are_read_from_paths_and_groups_not_comments() {
    let code = "use crate::tape::Tape; // crate::gateway\n/* crate::db */ use crate::{\n    agent::Agent,\n    \
                model::{self, ModelSpec},\n    tools,\n};\nlet x = crate::home::Home::at(p);";
    let found = crate_references(&strip_comments(code));
    assert_eq!(found, ["agent", "home", "model", "tape", "tools"].map(str::to_owned).into());
}
