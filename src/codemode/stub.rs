//! The typed Python stub (`.pyi`) describing the tools code mode exposes.
//!
//! In code mode the model calls tools as `await tools.<name>(**kwargs)`
//! from Python (`<name>` from [`code_names`]), and no longer sees their JSON Schemas in the request. It reads
//! Python signatures more reliably than JSON Schema anyway, so bub renders the
//! schemas as one `async def` per tool, `TypedDict`s for object shapes and
//! `Literal`s for enums, writes that to a file, and names the file in the
//! system prompt: the model opens it only when it needs a signature.
//!
//! The path is `<codemode_dir>/<sha256(workspace NUL session)[..16]>/tools-<sha256(content)[..12]>.pyi`
//! (see [`stub_path`]): the same for a session as long as its tool set does not
//! change, so the system prompt (and the provider's prompt cache) stays stable,
//! while a changed tool set gets a new file instead of silently changing one an
//! earlier turn already read. Rendering is deterministic for that reason.
//!
//! The JSON Schema → Python mapping is best effort and never fails: whatever it
//! does not recognise becomes `Any`. The file documents the tools for the
//! model; the code runner never imports it.

use crate::tools::Tool;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

/// Python's hard keywords: neither a function, a keyword argument nor a
/// class-syntax `TypedDict` key may be one.
const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del",
    "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal",
    "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
];

/// Names the stub's header binds; nothing generated may shadow them.
const HEADER_NAMES: &[&str] = &["annotations", "Any", "Literal", "NotRequired", "TypedDict", "Unpack", "ToolError"];

/// Signatures longer than this are split one parameter per line.
const MAX_SIGNATURE_WIDTH: usize = 100;

/// How deep a schema may nest before the rest of it becomes `Any`; keeps a
/// hostile or generated schema from exhausting the stack.
const MAX_DEPTH: usize = 48;

const MODULE_DOC: &str = r#""""Tools callable from `run_code`: one async function per tool.

This file describes them; it is not meant to be imported. In the code passed to
`run_code`, call a tool through the `tools` namespace that is already in scope:

    result = await tools.some_tool(path="notes.txt", limit=10)

- Call each tool by its function name below: a tool whose own name is not a
  Python identifier (`mcp_my-docs_get-page`) is `tools.mcp_my_docs_get_page`.
- Keyword arguments only; positional arguments are rejected. Pass an argument
  whose name is not a Python identifier (or is a keyword) as `**{"class": "x"}`.
- Always `await` the call. Top-level `await` works: do not wrap the code in
  `asyncio.run()` or a main function.
- Run independent calls concurrently with `asyncio.gather` (`import asyncio`):
  `a, b = await asyncio.gather(tools.x(), tools.y())`.
- Results are structured values (dicts, lists, strings, numbers) shaped like the
  return annotations below, not formatted text: index and loop over them. Only
  what the code prints comes back from `run_code`, so print what you need.
- A failing tool raises `ToolError` (an `Exception`) carrying the tool's error
  message; catch it to recover, or let it propagate to end the run with it.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict, Unpack


class ToolError(Exception):
    """A tool call failed; the message is the tool's error."""
"#;

/// One function of the stub.
#[derive(Debug, Clone, PartialEq)]
pub struct StubTool {
    /// The tool's model name; code calls it by [`code_names`]'s identifier
    /// for it, the same unless this is not one.
    pub model_name: String,
    pub description: String,
    /// The JSON Schema of the arguments.
    pub parameters: Value,
    /// The JSON Schema of the result; `Any` when absent.
    pub output_schema: Option<Value>,
}

impl StubTool {
    pub fn from_tool(tool: &Tool) -> StubTool {
        StubTool {
            model_name: tool.model_name(),
            description: tool.description().to_string(),
            parameters: tool.parameters().clone(),
            output_schema: tool.output_schema().cloned(),
        }
    }
}

/// The whole `.pyi` text, deterministic for the same tools (sorted by
/// `model_name`, whatever order they come in). Each function is named as
/// [`code_names`] says.
pub fn render_stub(tools: &[StubTool]) -> String {
    let sorted: Vec<&StubTool> = stub_order(tools).into_iter().map(|i| &tools[i]).collect();
    let names = function_names(&sorted);
    let mut stub = Stub::new(&names);
    let functions: Vec<String> = sorted.iter().zip(&names).map(|(tool, name)| stub.function(tool, name)).collect();
    let mut out = MODULE_DOC.to_string();
    for block in stub.classes.iter().chain(&functions) {
        out.push_str("\n\n");
        out.push_str(block);
    }
    out
}

/// The Python identifier code calls each tool by (`tools.<name>`), in the
/// order given: the name of its function in [`render_stub`]'s stub. A model
/// name that is an identifier stays as it is; `mcp_my-docs_get-page` becomes
/// `mcp_my_docs_get_page`, numbered (`_2`) when another tool has that name.
/// Depends only on the set of tools, not their order, so the names stay the
/// same as long as the tool set does.
pub fn code_names(tools: &[StubTool]) -> Vec<String> {
    let order = stub_order(tools);
    let sorted: Vec<&StubTool> = order.iter().map(|&i| &tools[i]).collect();
    let mut names = vec![String::new(); tools.len()];
    for (index, name) in order.into_iter().zip(function_names(&sorted)) {
        names[index] = name;
    }
    names
}

/// The indices of `tools` in stub order: by model name, then by everything
/// else, so any input order gives the same stub.
fn stub_order(tools: &[StubTool]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..tools.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&tools[a], &tools[b]);
        (&a.model_name, &a.description)
            .cmp(&(&b.model_name, &b.description))
            .then_with(|| a.parameters.to_string().cmp(&b.parameters.to_string()))
            .then_with(|| format!("{:?}", a.output_schema).cmp(&format!("{:?}", b.output_schema)))
    });
    order
}

/// `<codemode_dir>/<sha256(workspace + "\0" + session)[..16]>/tools-<sha256(content)[..12]>.pyi`
pub fn stub_path(codemode_dir: &Path, workspace: &Path, session: &str, content: &str) -> PathBuf {
    let mut key = workspace.as_os_str().as_encoded_bytes().to_vec();
    key.push(0);
    key.extend_from_slice(session.as_bytes());
    let session_dir = &sha256_hex(&key)[..16];
    let file = format!("tools-{}.pyi", &sha256_hex(content.as_bytes())[..12]);
    codemode_dir.join(session_dir).join(file)
}

/// Writes the stub atomically (a temp file in the same directory, then a
/// rename) only if it does not exist yet; returns its path. The content hash
/// is in the name, so an existing file already holds this content, and two
/// racing writers rename identical bytes.
pub fn write_stub(codemode_dir: &Path, workspace: &Path, session: &str, tools: &[StubTool]) -> io::Result<PathBuf> {
    let content = render_stub(tools);
    let path = stub_path(codemode_dir, workspace, session, &content);
    if path.try_exists()? {
        return Ok(path);
    }
    fs::create_dir_all(path.parent().unwrap_or(codemode_dir))?;
    write_atomically(&path, content.as_bytes())?;
    Ok(path)
}

fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temp = path.with_file_name(format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple()));
    let result = (|| {
        let mut file = fs::File::create_new(&temp)?;
        file.write_all(bytes)?;
        // Durable before it becomes visible: an existing file is never rewritten,
        // so a torn one would stay torn.
        file.sync_all()?;
        fs::rename(&temp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

// ---------------------------------------------------------------------------
// Rendering state
// ---------------------------------------------------------------------------

/// Everything a render shares across tools: the `TypedDict`s emitted so far
/// (so identical shapes are reused) and the module-level names taken.
struct Stub {
    /// Rendered class blocks, each after the classes it mentions (except
    /// recursive references, which are forward references).
    classes: Vec<String>,
    by_shape: HashMap<Vec<(String, String, bool)>, String>,
    /// Every module-level name: header names, functions, classes.
    taken: HashSet<String>,
    /// Class names handed out, including ones reserved for a recursive
    /// reference whose class is not emitted yet.
    class_names: HashSet<String>,
    defined: HashSet<String>,
}

/// The schema document `$ref`s resolve against, and the refs being expanded
/// (the recursion guard).
struct Scope<'a> {
    root: &'a Value,
    open: Vec<OpenRef>,
}

struct OpenRef {
    pointer: String,
    hint: String,
    /// Set once the target refers back to itself: its class must get this name.
    name: Option<String>,
}

impl<'a> Scope<'a> {
    fn new(root: &'a Value) -> Scope<'a> {
        Scope { root, open: Vec::new() }
    }
}

/// One member of a union: a type, or a value that joins the union's single
/// `Literal[...]`.
#[derive(Debug, Clone, PartialEq)]
enum Atom {
    Ty(String),
    Lit(String),
}

fn any() -> Vec<Atom> {
    vec![Atom::Ty("Any".into())]
}

fn ty(name: &str) -> Vec<Atom> {
    vec![Atom::Ty(name.to_string())]
}

/// A TypedDict key or a parameter.
#[derive(Clone)]
struct Field {
    key: String,
    ty: String,
    /// Whether the type admits `None` (so `= None` is an honest default).
    nullable: bool,
    required: bool,
    default: Option<String>,
    doc: Option<String>,
}

/// How a function takes its arguments.
enum Params {
    /// `*, a: int, b: str = "x"`, plus `**kwargs: T` when extra keys are allowed.
    Keywords(Vec<Field>, Option<String>),
    /// `**kwargs: Unpack[Args]`, for keys that cannot be Python parameters.
    Unpack(String, Vec<Field>),
    /// `**kwargs: Any`, for a parameter schema that is not a plain object.
    Opaque,
}

impl Stub {
    fn new(function_names: &[String]) -> Stub {
        let taken = HEADER_NAMES.iter().map(|n| n.to_string()).chain(function_names.iter().cloned()).collect();
        Stub {
            classes: Vec::new(),
            by_shape: HashMap::new(),
            taken,
            class_names: HashSet::new(),
            defined: HashSet::new(),
        }
    }

    /// The `async def` block of one tool.
    fn function(&mut self, tool: &StubTool, name: &str) -> String {
        let hint = pascal(name);
        let params = self.params(&tool.parameters, &hint);
        let returns = match &tool.output_schema {
            Some(schema) => self.root_type(schema, &format!("{hint}Result")),
            None => "Any".to_string(),
        };
        let mut out = signature(name, &params, &returns);
        out.push('\n');
        let doc = function_doc(tool, name, &params);
        out.push_str(&if doc.is_empty() { "    ...".to_string() } else { docstring(&doc, "    ") });
        out.push('\n');
        out
    }

    /// The type of a whole schema document (a result), with its own `$defs`.
    /// The root is an open ref, so a schema that refers to itself (`"#"`)
    /// becomes a class named after the function.
    fn root_type(&mut self, root: &Value, hint: &str) -> String {
        let mut scope = Scope::new(root);
        scope.open.push(OpenRef { pointer: String::new(), hint: hint.to_string(), name: None });
        let atoms = self.schema(&mut scope, root, hint, 0, Some(0));
        if let Some(name) = scope.open.pop().and_then(|open| open.name) {
            self.placeholder(name);
        }
        render(&atoms)
    }

    fn params(&mut self, root: &Value, hint: &str) -> Params {
        let mut scope = Scope::new(root);
        let Some(object) = follow_refs(root, root).as_object() else { return Params::Opaque };
        let object_type = object.get("type").is_none_or(|t| t == "object");
        let combinator = ["$ref", "anyOf", "oneOf", "allOf", "enum", "const"].iter().any(|k| object.contains_key(*k));
        if !object_type || combinator {
            return Params::Opaque;
        }
        let Some(properties) = object.get("properties").and_then(Value::as_object) else {
            return if object.get("additionalProperties") == Some(&Value::Bool(false)) {
                Params::Keywords(Vec::new(), None)
            } else {
                Params::Opaque
            };
        };
        let required = required_keys(object);
        let mut fields: Vec<Field> = properties
            .iter()
            .map(|(key, schema)| self.field(&mut scope, key, schema, required.contains(key), hint, 1))
            .collect();
        if !fields.iter().all(|f| is_parameter_name(&f.key)) {
            let class = self.class(&format!("{hint}Args"), None, fields.clone(), None);
            return Params::Unpack(class, fields);
        }
        // Stable: required first, each group in schema order.
        fields.sort_by_key(|f| !f.required);
        let extra = match object.get("additionalProperties") {
            Some(schema @ Value::Object(_)) => Some(render(&self.schema(&mut scope, schema, hint, 1, None))),
            Some(Value::Bool(true)) => Some("Any".to_string()),
            _ => None,
        };
        Params::Keywords(fields, extra)
    }

    /// A property of an object: its type, whether it is required, its default
    /// and description.
    fn field(
        &mut self,
        scope: &mut Scope<'_>,
        key: &str,
        schema: &Value,
        required: bool,
        hint: &str,
        depth: usize,
    ) -> Field {
        let atoms = self.schema(scope, schema, &format!("{hint}{}", pascal(key)), depth, None);
        let ty = render(&atoms);
        let nullable = ty == "Any" || atoms.contains(&Atom::Ty("None".into()));
        let doc = description(schema).or_else(|| description(follow_refs(scope.root, schema)));
        let default = schema.get("default").map(py_literal);
        Field { key: key.to_string(), ty, nullable, required, default, doc: doc.map(str::to_string) }
    }

    /// The union a schema stands for. `pending` is the open ref this schema is
    /// the direct target of, if any: an object class rendered for it takes the
    /// name a recursive reference may already have used.
    fn schema(
        &mut self,
        scope: &mut Scope<'_>,
        schema: &Value,
        hint: &str,
        depth: usize,
        pending: Option<usize>,
    ) -> Vec<Atom> {
        let Some(object) = schema.as_object() else { return any() };
        if depth > MAX_DEPTH {
            return any();
        }
        if let Some(reference) = object.get("$ref") {
            return self.reference(scope, reference, hint, depth);
        }
        if let Some(value) = object.get("const") {
            return literals(std::slice::from_ref(value));
        }
        if let Some(values) = object.get("enum") {
            return values.as_array().map_or_else(any, |values| literals(values));
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(members) = object.get(key) {
                return self.union(scope, members, hint, depth);
            }
        }
        if let Some(members) = object.get("allOf") {
            return match members.as_array().map(Vec::as_slice) {
                Some([only]) => self.schema(scope, only, hint, depth + 1, None),
                _ => any(),
            };
        }
        let mut atoms = self.by_type(scope, object, hint, depth, pending);
        if object.get("nullable") == Some(&Value::Bool(true)) {
            extend_unique(&mut atoms, ty("None"));
        }
        atoms
    }

    /// The union the `type` keyword stands for (a name or a list of names);
    /// without one, `properties` or `items` imply it.
    fn by_type(
        &mut self,
        scope: &mut Scope<'_>,
        object: &Map<String, Value>,
        hint: &str,
        depth: usize,
        pending: Option<usize>,
    ) -> Vec<Atom> {
        match object.get("type") {
            Some(Value::String(name)) => self.typed(scope, object, name, hint, depth, pending),
            Some(Value::Array(names)) => {
                let mut atoms = Vec::new();
                for name in names {
                    let member = match name.as_str() {
                        Some(name) => self.typed(scope, object, name, hint, depth, None),
                        None => any(),
                    };
                    extend_unique(&mut atoms, member);
                }
                atoms
            }
            None if object.contains_key("properties") => self.typed(scope, object, "object", hint, depth, pending),
            None if object.contains_key("items") || object.contains_key("prefixItems") => {
                self.typed(scope, object, "array", hint, depth, None)
            }
            _ => any(),
        }
    }

    fn typed(
        &mut self,
        scope: &mut Scope<'_>,
        object: &Map<String, Value>,
        name: &str,
        hint: &str,
        depth: usize,
        pending: Option<usize>,
    ) -> Vec<Atom> {
        match name {
            "string" => ty("str"),
            "integer" => ty("int"),
            "number" => ty("float"),
            "boolean" => ty("bool"),
            "null" => ty("None"),
            "array" => ty(&self.array(scope, object, hint, depth)),
            "object" => ty(&self.object(scope, object, hint, depth, pending)),
            _ => any(),
        }
    }

    fn union(&mut self, scope: &mut Scope<'_>, members: &Value, hint: &str, depth: usize) -> Vec<Atom> {
        let Some(members) = members.as_array().filter(|m| !m.is_empty()) else { return any() };
        let mut atoms = Vec::new();
        for member in members {
            let member = self.schema(scope, member, hint, depth + 1, None);
            extend_unique(&mut atoms, member);
        }
        atoms
    }

    /// `#/$defs/X`, `#/definitions/X`, any local JSON pointer. A ref already
    /// being expanded is recursion: it names the class the outer expansion is
    /// building (a forward reference), or `Any` when that is no class.
    fn reference(&mut self, scope: &mut Scope<'_>, reference: &Value, hint: &str, depth: usize) -> Vec<Atom> {
        let Some(pointer) = reference.as_str().and_then(|r| r.strip_prefix('#')) else { return any() };
        if let Some(index) = scope.open.iter().position(|open| open.pointer == pointer) {
            return self.forward(scope, index);
        }
        let root = scope.root;
        let Some(target) = root.pointer(pointer) else { return any() };
        let hint = title(target)
            .or_else(|| pointer.rsplit('/').next().map(unescape_pointer))
            .filter(|name| !pascal(name).is_empty())
            .unwrap_or_else(|| hint.to_string());
        scope.open.push(OpenRef { pointer: pointer.to_string(), hint: hint.clone(), name: None });
        let index = scope.open.len() - 1;
        let atoms = self.schema(scope, target, &hint, depth + 1, Some(index));
        if let Some(name) = scope.open.pop().and_then(|open| open.name) {
            self.placeholder(name);
        }
        atoms
    }

    fn forward(&mut self, scope: &mut Scope<'_>, index: usize) -> Vec<Atom> {
        let root = scope.root;
        if !root.pointer(&scope.open[index].pointer).is_some_and(is_class_schema) {
            return any();
        }
        if scope.open[index].name.is_none() {
            let hint = scope.open[index].hint.clone();
            scope.open[index].name = Some(self.reserve(&hint));
        }
        ty(scope.open[index].name.as_deref().unwrap_or("Any"))
    }

    fn array(&mut self, scope: &mut Scope<'_>, object: &Map<String, Value>, hint: &str, depth: usize) -> String {
        let tuple = object.get("prefixItems").or_else(|| object.get("items").filter(|items| items.is_array()));
        if let Some(Value::Array(items)) = tuple {
            if items.is_empty() {
                return "tuple[()]".to_string();
            }
            let items: Vec<String> = items
                .iter()
                .enumerate()
                .map(|(i, item)| render(&self.schema(scope, item, &format!("{hint}Item{i}"), depth + 1, None)))
                .collect();
            return format!("tuple[{}]", items.join(", "));
        }
        let item = match object.get("items") {
            Some(item @ Value::Object(_)) => render(&self.schema(scope, item, &format!("{hint}Item"), depth + 1, None)),
            _ => "Any".to_string(),
        };
        format!("list[{item}]")
    }

    /// A `TypedDict` for an object with properties, else `dict[str, T]`.
    fn object(
        &mut self,
        scope: &mut Scope<'_>,
        object: &Map<String, Value>,
        hint: &str,
        depth: usize,
        pending: Option<usize>,
    ) -> String {
        let Some(properties) = object.get("properties").and_then(Value::as_object).filter(|p| !p.is_empty()) else {
            let value = match object.get("additionalProperties") {
                Some(value @ Value::Object(_)) => {
                    render(&self.schema(scope, value, &format!("{hint}Value"), depth + 1, None))
                }
                _ => "Any".to_string(),
            };
            return format!("dict[str, {value}]");
        };
        let hint = object.get("title").and_then(Value::as_str).filter(|t| !pascal(t).is_empty()).unwrap_or(hint);
        let required = required_keys(object);
        let fields: Vec<Field> = properties
            .iter()
            .map(|(key, schema)| self.field(scope, key, schema, required.contains(key), hint, depth + 1))
            .collect();
        let forced = pending.and_then(|index| scope.open[index].name.clone());
        let doc = object.get("description").and_then(Value::as_str).map(str::to_string);
        self.class(hint, doc, fields, forced)
    }

    /// The name of the class with these fields: an existing one of the same
    /// shape, or a new one (class syntax when every key allows it, the
    /// functional `TypedDict("Name", {...})` syntax otherwise).
    fn class(&mut self, hint: &str, doc: Option<String>, fields: Vec<Field>, forced: Option<String>) -> String {
        let shape: Vec<(String, String, bool)> =
            fields.iter().map(|f| (f.key.clone(), f.ty.clone(), f.required)).collect();
        if forced.is_none()
            && let Some(name) = self.by_shape.get(&shape)
        {
            return name.clone();
        }
        let name = forced.unwrap_or_else(|| self.reserve(hint));
        self.by_shape.entry(shape).or_insert_with(|| name.clone());
        let block = if fields.iter().all(|f| is_class_key(&f.key)) {
            class_block(&name, doc.as_deref(), &fields)
        } else {
            let fields: Vec<Field> = fields
                .into_iter()
                .map(|f| Field { ty: if self.mentions_undefined(&f.ty) { py_str(&f.ty) } else { f.ty }, ..f })
                .collect();
            functional_block(&name, doc.as_deref(), &fields)
        };
        self.defined.insert(name.clone());
        self.classes.push(block);
        name
    }

    /// Binds a name a recursive reference used when no class got emitted
    /// under it (the schema nested too deep), so the stub still imports.
    fn placeholder(&mut self, name: String) {
        if !self.defined.contains(&name) {
            self.classes.push(format!("{name} = dict[str, Any]\n"));
            self.defined.insert(name);
        }
    }

    /// A fresh class name from a hint: PascalCase, an identifier, not taken.
    fn reserve(&mut self, hint: &str) -> String {
        let base = class_ident(hint);
        let mut name = base.clone();
        let mut n = 2;
        while self.taken.contains(&name) || is_keyword(&name) {
            name = format!("{base}{n}");
            n += 1;
        }
        self.taken.insert(name.clone());
        self.class_names.insert(name.clone());
        name
    }

    /// Whether a type expression names a class not emitted yet: in the
    /// functional syntax the value is evaluated, so it must be quoted.
    fn mentions_undefined(&self, ty: &str) -> bool {
        ty.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .any(|word| self.class_names.contains(word) && !self.defined.contains(word))
    }
}

mod python;
use python::*;

#[cfg(test)]
mod mcp_tests;
#[cfg(test)]
mod tests;
