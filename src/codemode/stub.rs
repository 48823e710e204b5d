//! The typed Python stub (`.pyi`) describing the tools code mode exposes.
//!
//! In code mode the model calls tools as `await tools.<model_name>(**kwargs)`
//! from Python, and no longer sees their JSON Schemas in the request. It reads
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
    /// The name code calls it by: `tools.<model_name>`.
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
/// `model_name`, whatever order they come in).
pub fn render_stub(tools: &[StubTool]) -> String {
    let mut sorted: Vec<&StubTool> = tools.iter().collect();
    sorted.sort_by(|a, b| {
        (&a.model_name, &a.description)
            .cmp(&(&b.model_name, &b.description))
            .then_with(|| a.parameters.to_string().cmp(&b.parameters.to_string()))
            .then_with(|| format!("{:?}", a.output_schema).cmp(&format!("{:?}", b.output_schema)))
    });
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
        scope: &mut Scope,
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
        scope: &mut Scope,
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
        scope: &mut Scope,
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
        scope: &mut Scope,
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

    fn union(&mut self, scope: &mut Scope, members: &Value, hint: &str, depth: usize) -> Vec<Atom> {
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
    fn reference(&mut self, scope: &mut Scope, reference: &Value, hint: &str, depth: usize) -> Vec<Atom> {
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

    fn forward(&mut self, scope: &mut Scope, index: usize) -> Vec<Atom> {
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

    fn array(&mut self, scope: &mut Scope, object: &Map<String, Value>, hint: &str, depth: usize) -> String {
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
        scope: &mut Scope,
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

// ---------------------------------------------------------------------------
// Functions
// ---------------------------------------------------------------------------

/// Python function names for the (sorted) tools: sanitised, unique, and not
/// shadowing the header.
fn function_names(tools: &[&StubTool]) -> Vec<String> {
    let mut taken: HashSet<String> = HEADER_NAMES.iter().map(|n| n.to_string()).collect();
    tools
        .iter()
        .map(|tool| {
            let base = python_name(&tool.model_name);
            let mut name = base.clone();
            let mut n = 2;
            while taken.contains(&name) {
                name = format!("{base}_{n}");
                n += 1;
            }
            taken.insert(name.clone());
            name
        })
        .collect()
}

/// Non-word characters become `_`; a leading digit or a keyword gets a `_`
/// prefix. ASCII only, so the result is an identifier in every Python 3.
fn python_name(name: &str) -> String {
    let name: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) || is_keyword(&name) {
        format!("_{name}")
    } else {
        name
    }
}

fn signature(name: &str, params: &Params, returns: &str) -> String {
    let parts = match params {
        Params::Keywords(fields, extra) => {
            let mut parts: Vec<String> = Vec::new();
            if !fields.is_empty() {
                parts.push("*".into());
            }
            parts.extend(fields.iter().map(parameter));
            parts.extend(extra.iter().map(|ty| format!("**kwargs: {ty}")));
            parts
        }
        Params::Unpack(class, _) => vec![format!("**kwargs: Unpack[{class}]")],
        Params::Opaque => vec!["**kwargs: Any".into()],
    };
    let line = format!("async def {name}({}) -> {returns}:", parts.join(", "));
    if line.len() <= MAX_SIGNATURE_WIDTH {
        return line;
    }
    let params: String = parts.iter().map(|part| format!("    {part},\n")).collect();
    format!("async def {name}(\n{params}) -> {returns}:")
}

/// `key: T`, or `key: T = default` for an optional one (`= None` when the
/// type admits it and the schema names no default, `= ...` otherwise).
fn parameter(field: &Field) -> String {
    if field.required {
        return format!("{}: {}", field.key, field.ty);
    }
    let default = match &field.default {
        Some(default) => default.as_str(),
        None if field.nullable => "None",
        None => "...",
    };
    format!("{}: {} = {default}", field.key, field.ty)
}

/// The description, the argument descriptions, and what the result is.
fn function_doc(tool: &StubTool, name: &str, params: &Params) -> String {
    let mut sections: Vec<String> = Vec::new();
    let summary = tool.description.trim();
    if !summary.is_empty() {
        sections.push(summary.to_string());
    }
    if name != tool.model_name {
        let own = py_str(&tool.model_name);
        sections.push(format!(
            "The tool's own name is {own}; if `tools.{name}` is missing, call `getattr(tools, {own})(...)`."
        ));
    }
    if let Params::Unpack(class, fields) = params {
        let example = fields.iter().map(|f| f.key.as_str()).find(|key| !is_parameter_name(key)).unwrap_or("name");
        sections.push(format!(
            "Takes the keys of `{class}` as keyword arguments; pass the ones that are not Python identifiers \
             as `**{{{}: ...}}`.",
            py_str(example)
        ));
    }
    let args = args_doc(params);
    if !args.is_empty() {
        sections.push(format!("Args:\n{}", indent(&args.join("\n"), "    ")));
    }
    if let Some(returns) = tool.output_schema.as_ref().and_then(description).map(str::trim).filter(|d| !d.is_empty()) {
        sections.push(format!("Returns:\n{}", indent(returns, "    ")));
    }
    sections.join("\n\n")
}

/// The lines of the `Args:` section.
fn args_doc(params: &Params) -> Vec<String> {
    match params {
        Params::Keywords(fields, extra) => {
            let mut lines: Vec<String> = fields.iter().filter_map(|f| arg_doc(f, false)).collect();
            if extra.is_some() {
                lines.push("**kwargs: Further arguments are accepted.".into());
            }
            lines
        }
        Params::Unpack(_, fields) => fields.iter().filter_map(|f| arg_doc(f, true)).collect(),
        Params::Opaque => Vec::new(),
    }
}

/// `key: description`, continuation lines indented. With `show_default`
/// (the signature cannot show it) the default is added.
fn arg_doc(field: &Field, show_default: bool) -> Option<String> {
    let mut doc = field.doc.as_deref().map(str::trim).unwrap_or_default().to_string();
    if show_default && let Some(default) = &field.default {
        doc = format!("{doc} (default: {default})").trim_start().to_string();
    }
    if doc.is_empty() {
        return None;
    }
    let (first, rest) = doc.split_once('\n').unwrap_or((&doc, ""));
    let mut line = format!("{}: {}", field.key, first.trim_end());
    if !rest.is_empty() {
        line.push('\n');
        line.push_str(&indent(rest, "    "));
    }
    Some(line)
}

fn indent(text: &str, prefix: &str) -> String {
    text.lines()
        .map(|line| if line.trim().is_empty() { String::new() } else { format!("{prefix}{line}") })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A docstring at `prefix` indentation, escaped so no description can end it
/// early or hold bytes Python rejects.
fn docstring(text: &str, prefix: &str) -> String {
    let text = escape_doc(text.trim());
    let mut lines = text.lines();
    let first = lines.next().unwrap_or_default();
    let rest: Vec<&str> = lines.collect();
    if rest.is_empty() {
        return format!("{prefix}\"\"\"{first}\"\"\"");
    }
    let body = indent(&rest.join("\n"), prefix);
    format!("{prefix}\"\"\"{first}\n{body}\n{prefix}\"\"\"")
}

/// Backslashes doubled, a quote escaped when another quote or the end
/// follows it (so no `"""` survives and none merges with the closing one),
/// control characters as `\xNN`, line endings normalised.
fn escape_doc(text: &str) -> String {
    let text = text.replace("\r\n", "\n").replace('\r', "\n");
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    for (i, &c) in chars.iter().enumerate() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' if chars.get(i + 1).is_none_or(|&next| next == '"' || next == '\n') => out.push_str("\\\""),
            '\n' | '\t' => out.push(c),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32 & 0xff)),
            c => out.push(c),
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Classes
// ---------------------------------------------------------------------------

fn class_block(name: &str, doc: Option<&str>, fields: &[Field]) -> String {
    let mut out = format!("class {name}(TypedDict):\n");
    if let Some(doc) = doc.filter(|d| !d.trim().is_empty()) {
        out.push_str(&docstring(doc, "    "));
        out.push_str("\n\n");
    }
    for field in fields {
        out.push_str(&format!("    {}: {}{}\n", field.key, annotation(field), trailing_comment(field)));
    }
    out
}

fn functional_block(name: &str, doc: Option<&str>, fields: &[Field]) -> String {
    let mut out = String::new();
    for line in doc.unwrap_or_default().trim().lines() {
        out.push_str(format!("# {}", comment_text(line)).trim_end());
        out.push('\n');
    }
    out.push_str(&format!("{name} = TypedDict(\n    {},\n    {{\n", py_str(name)));
    for field in fields {
        out.push_str(&format!("        {}: {},{}\n", py_str(&field.key), annotation(field), trailing_comment(field)));
    }
    out.push_str("    },\n)\n");
    out
}

fn annotation(field: &Field) -> String {
    if field.required { field.ty.clone() } else { format!("NotRequired[{}]", field.ty) }
}

/// `  # first line of the description`, or nothing.
fn trailing_comment(field: &Field) -> String {
    let text = field.doc.as_deref().and_then(|doc| doc.lines().map(str::trim).find(|l| !l.is_empty()));
    text.map(|text| format!("  # {}", comment_text(text))).unwrap_or_default()
}

fn comment_text(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect::<String>().trim().to_string()
}

// ---------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------

/// A union as Python: literal members folded into one `Literal[...]` where
/// the first of them stood; `Any` swallows everything.
fn render(atoms: &[Atom]) -> String {
    if atoms.is_empty() || atoms.iter().any(|a| *a == Atom::Ty("Any".into())) {
        return "Any".into();
    }
    let mut parts: Vec<String> = Vec::new();
    let mut literals: Vec<&str> = Vec::new();
    let mut slot = None;
    for atom in atoms {
        match atom {
            Atom::Ty(ty) => parts.push(ty.clone()),
            Atom::Lit(value) => {
                slot.get_or_insert_with(|| {
                    parts.push(String::new());
                    parts.len() - 1
                });
                literals.push(value);
            }
        }
    }
    if let Some(slot) = slot {
        parts[slot] = format!("Literal[{}]", literals.join(", "));
    }
    parts.join(" | ")
}

fn extend_unique(atoms: &mut Vec<Atom>, more: Vec<Atom>) {
    for atom in more {
        if !atoms.contains(&atom) {
            atoms.push(atom);
        }
    }
}

/// `enum`/`const` values as a union of literals; `Any` if one cannot be a
/// `Literal` member (floats, arrays, objects) or there are none.
fn literals(values: &[Value]) -> Vec<Atom> {
    let mut atoms = Vec::new();
    for value in values {
        let atom = match value {
            Value::Null => Atom::Ty("None".into()),
            Value::Bool(_) | Value::String(_) => Atom::Lit(py_literal(value)),
            Value::Number(n) if n.is_i64() || n.is_u64() => Atom::Lit(n.to_string()),
            _ => return any(),
        };
        extend_unique(&mut atoms, vec![atom]);
    }
    if atoms.is_empty() { any() } else { atoms }
}

/// A JSON value as a Python literal.
fn py_literal(value: &Value) -> String {
    match value {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => py_str(s),
        Value::Array(items) => format!("[{}]", items.iter().map(py_literal).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => {
            let items: Vec<String> = map.iter().map(|(k, v)| format!("{}: {}", py_str(k), py_literal(v))).collect();
            format!("{{{}}}", items.join(", "))
        }
    }
}

/// A double-quoted Python string literal.
fn py_str(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

// ---------------------------------------------------------------------------
// Names and schema helpers
// ---------------------------------------------------------------------------

/// `line_items` → `LineItems`, `OrderItem` stays; ASCII letters and digits only.
fn pascal(text: &str) -> String {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|part| !part.is_empty())
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map(|first| first.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
        })
        .collect()
}

fn class_ident(hint: &str) -> String {
    let name = pascal(hint);
    if name.is_empty() {
        "Object".into()
    } else if name.starts_with(|c: char| c.is_ascii_digit()) {
        format!("_{name}")
    } else {
        name
    }
}

fn is_keyword(name: &str) -> bool {
    KEYWORDS.contains(&name)
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Usable as `name=value` in a call.
fn is_parameter_name(name: &str) -> bool {
    is_identifier(name) && !is_keyword(name)
}

/// Usable as a key in class-syntax `TypedDict` (a `__key` would be mangled).
fn is_class_key(name: &str) -> bool {
    is_parameter_name(name) && !name.starts_with("__")
}

fn required_keys(object: &Map<String, Value>) -> HashSet<String> {
    let required = object.get("required").and_then(Value::as_array);
    required.into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect()
}

fn description(schema: &Value) -> Option<&str> {
    schema.get("description").and_then(Value::as_str)
}

fn title(schema: &Value) -> Option<String> {
    schema.get("title").and_then(Value::as_str).map(str::to_string)
}

fn unescape_pointer(segment: &str) -> String {
    segment.replace("~1", "/").replace("~0", "~")
}

/// The schema behind a chain of local `$ref`s (bounded, so a cycle ends).
fn follow_refs<'v>(root: &'v Value, mut schema: &'v Value) -> &'v Value {
    for _ in 0..MAX_DEPTH {
        let target =
            schema.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix('#')).and_then(|p| root.pointer(p));
        match target {
            Some(target) => schema = target,
            None => break,
        }
    }
    schema
}

/// Whether the schema renders as a class of its own (what a recursive
/// reference to it may name).
fn is_class_schema(schema: &Value) -> bool {
    let Some(object) = schema.as_object() else { return false };
    let plain = ["$ref", "const", "enum", "anyOf", "oneOf", "allOf"].iter().all(|k| !object.contains_key(*k));
    let object_type = object.get("type").is_none_or(|t| t == "object");
    let has_properties = object.get("properties").and_then(Value::as_object).is_some_and(|p| !p.is_empty());
    plain && object_type && has_properties
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{ToolContext, ToolError};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};
    use serde_json::json;
    use std::collections::HashMap;
    use std::process::Command;

    fn raw(name: &str, parameters: Value, output_schema: Option<Value>) -> StubTool {
        StubTool { model_name: name.into(), description: format!("The {name} tool."), parameters, output_schema }
    }

    /// A schema rendered as a result type: the type and the classes it needed.
    fn type_of(schema: Value) -> (String, Vec<String>) {
        let mut stub = Stub::new(&[]);
        let ty = stub.root_type(&schema, "FResult");
        (ty, stub.classes)
    }

    fn ty_of(schema: Value) -> String {
        type_of(schema).0
    }

    /// The `async def` line(s) for a tool with these parameters.
    fn signature_of(parameters: Value) -> String {
        let stub = render_stub(&[raw("f", parameters, None)]);
        let start = stub.find("async def f(").expect("function");
        let end = start + stub[start..].find(":\n").expect("end of signature");
        stub[start..end + 1].to_string()
    }

    #[test]
    fn primitives_and_unknowns() {
        assert_eq!(ty_of(json!({"type": "string", "format": "date-time"})), "str");
        assert_eq!(ty_of(json!({"type": "integer", "format": "uint32", "minimum": 0})), "int");
        assert_eq!(ty_of(json!({"type": "number"})), "float");
        assert_eq!(ty_of(json!({"type": "boolean"})), "bool");
        assert_eq!(ty_of(json!({"type": "null"})), "None");
        assert_eq!(ty_of(json!({})), "Any");
        assert_eq!(ty_of(json!(true)), "Any");
        assert_eq!(ty_of(json!({"type": "bytes"})), "Any");
        assert_eq!(ty_of(json!({"not": {"type": "string"}})), "Any");
    }

    #[test]
    fn unions_and_options() {
        assert_eq!(ty_of(json!({"anyOf": [{"type": "string"}, {"type": "null"}]})), "str | None");
        assert_eq!(ty_of(json!({"type": ["string", "null"]})), "str | None");
        assert_eq!(ty_of(json!({"type": ["integer", "string", "integer"]})), "int | str");
        assert_eq!(
            ty_of(json!({"oneOf": [{"type": "integer"}, {"type": "array", "items": {"type": "string"}}]})),
            "int | list[str]"
        );
        assert_eq!(ty_of(json!({"type": "string", "nullable": true})), "str | None");
        assert_eq!(ty_of(json!({"anyOf": [{"type": "string"}, {}]})), "Any");
        assert_eq!(ty_of(json!({"allOf": [{"type": "string"}]})), "str");
        assert_eq!(ty_of(json!({"allOf": [{"type": "string"}, {"minLength": 1}]})), "Any");
    }

    #[test]
    fn enums_and_consts_are_literals() {
        assert_eq!(ty_of(json!({"type": "string", "enum": ["low", "high"]})), r#"Literal["low", "high"]"#);
        assert_eq!(ty_of(json!({"const": 3})), "Literal[3]");
        assert_eq!(ty_of(json!({"enum": [true, "a\"b", -1]})), r#"Literal[True, "a\"b", -1]"#);
        assert_eq!(ty_of(json!({"enum": ["a", null, "b"]})), r#"Literal["a", "b"] | None"#);
        assert_eq!(ty_of(json!({"enum": [1.5]})), "Any");
        assert_eq!(ty_of(json!({"enum": []})), "Any");
        // schemars' form for unit variants with doc comments
        let variants = json!({"oneOf": [
            {"type": "string", "const": "low", "description": "Whenever."},
            {"type": "string", "const": "high", "description": "Now."},
            {"type": "null"},
        ]});
        assert_eq!(ty_of(variants), r#"Literal["low", "high"] | None"#);
    }

    #[test]
    fn arrays_tuples_and_dicts() {
        assert_eq!(ty_of(json!({"type": "array", "items": {"type": "integer"}})), "list[int]");
        assert_eq!(ty_of(json!({"type": "array"})), "list[Any]");
        let pair = json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]});
        assert_eq!(ty_of(pair), "tuple[str, int]");
        let draft7 = json!({"type": "array", "items": [{"type": "boolean"}, {"type": "null"}]});
        assert_eq!(ty_of(draft7), "tuple[bool, None]");
        assert_eq!(ty_of(json!({"type": "array", "prefixItems": []})), "tuple[()]");
        let counts = json!({"type": "object", "additionalProperties": {"type": "integer", "format": "int64"}});
        assert_eq!(ty_of(counts), "dict[str, int]");
        assert_eq!(ty_of(json!({"type": "object"})), "dict[str, Any]");
        assert_eq!(ty_of(json!({"type": "object", "properties": {}})), "dict[str, Any]");
    }

    #[test]
    fn refs_resolve_against_their_document() {
        let schema = json!({
            "type": "array",
            "items": {"$ref": "#/$defs/Level"},
            "$defs": {"Level": {"type": "string", "enum": ["debug", "info"]}},
        });
        assert_eq!(ty_of(schema), r#"list[Literal["debug", "info"]]"#);
        let old = json!({"$ref": "#/definitions/N", "definitions": {"N": {"type": "integer"}}});
        assert_eq!(ty_of(old), "int");
        assert_eq!(ty_of(json!({"$ref": "#/$defs/Missing"})), "Any");
        assert_eq!(ty_of(json!({"$ref": "https://example.com/schema.json"})), "Any");
        assert_eq!(ty_of(json!({"$ref": 7})), "Any");
    }

    #[test]
    fn objects_become_typed_dicts_with_not_required_keys() {
        let schema = json!({
            "type": "object",
            "description": "An order.",
            "properties": {
                "id": {"type": "string", "description": "The order id."},
                "note": {"type": ["string", "null"]},
            },
            "required": ["id"],
        });
        let (ty, classes) = type_of(schema);
        assert_eq!(ty, "FResult");
        assert_eq!(
            classes,
            vec![
                "class FResult(TypedDict):\n    \"\"\"An order.\"\"\"\n\n    id: str  # The order id.\n    note: NotRequired[str | None]\n"
            ]
        );
    }

    #[test]
    fn classes_are_named_from_title_or_context() {
        let schema = json!({
            "type": "object",
            "properties": {
                "shipping": {"type": "object", "title": "postal address", "properties": {"city": {"type": "string"}}},
                "billing_contact": {"type": "object", "properties": {"email": {"type": "string"}}},
            },
        });
        let (_, classes) = type_of(schema);
        assert!(classes[0].starts_with("class PostalAddress(TypedDict):"), "{classes:?}");
        assert!(classes[1].starts_with("class FResultBillingContact(TypedDict):"), "{classes:?}");
    }

    #[test]
    fn identical_shapes_are_reused_and_different_ones_renamed() {
        let address = json!({"type": "object", "title": "Address", "properties": {"city": {"type": "string"}}, "required": ["city"]});
        let other = json!({"type": "object", "title": "Address", "properties": {"zip": {"type": "string"}}});
        let tools = [
            raw("a", json!({"type": "object", "properties": {"to": address.clone()}}), Some(address.clone())),
            raw("b", json!({"type": "object", "properties": {"from": address}}), Some(other)),
        ];
        let stub = render_stub(&tools);
        assert_eq!(stub.matches("class Address(TypedDict):").count(), 1, "{stub}");
        assert!(stub.contains("class Address2(TypedDict):\n    zip: NotRequired[str]\n"), "{stub}");
        assert!(stub.contains("async def a(*, to: Address = ...) -> Address:"), "{stub}");
        assert!(
            stub.contains("async def b(*, from_: Address")
                || stub.contains("async def b(**kwargs: Unpack[BArgs]) -> Address2:"),
            "{stub}"
        );
    }

    #[test]
    fn keys_that_are_not_identifiers_use_the_functional_syntax() {
        let schema = json!({
            "type": "object",
            "properties": {
                "class": {"type": "string", "description": "CSS class."},
                "x-color": {"type": "integer"},
                "__private": {"type": "boolean"},
            },
            "required": ["class"],
        });
        let (ty, classes) = type_of(schema);
        assert_eq!(ty, "FResult");
        assert_eq!(
            classes[0],
            "FResult = TypedDict(\n    \"FResult\",\n    {\n        \"class\": str,  # CSS class.\n        \"x-color\": NotRequired[int],\n        \"__private\": NotRequired[bool],\n    },\n)\n"
        );
    }

    #[test]
    fn recursive_refs_become_forward_references() {
        let schema = json!({
            "$ref": "#/$defs/Node",
            "$defs": {"Node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                    "parent": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]},
                },
                "required": ["name"],
            }},
        });
        let (ty, classes) = type_of(schema);
        assert_eq!(ty, "Node");
        assert_eq!(
            classes,
            vec![
                "class Node(TypedDict):\n    name: str\n    children: NotRequired[list[Node]]\n    parent: NotRequired[Node | None]\n"
            ]
        );
    }

    #[test]
    fn recursion_in_the_functional_syntax_is_quoted() {
        let schema = json!({
            "type": "object",
            "properties": {"child-nodes": {"type": "array", "items": {"$ref": "#"}}},
        });
        let (ty, classes) = type_of(schema);
        assert_eq!(ty, "FResult");
        assert!(classes[0].contains("\"child-nodes\": NotRequired[\"list[FResult]\"],"), "{classes:?}");
    }

    #[test]
    fn recursion_through_something_that_is_no_class_is_any() {
        let schema = json!({
            "$ref": "#/$defs/Tree",
            "$defs": {"Tree": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"$ref": "#/$defs/Tree"}}]}},
        });
        assert_eq!(ty_of(schema), "str | list[Any]");
        assert_eq!(ty_of(json!({"$ref": "#/$defs/A", "$defs": {"A": {"$ref": "#/$defs/A"}}})), "Any");
    }

    #[test]
    fn parameters_required_first_with_python_defaults() {
        let parameters = json!({
            "type": "object",
            "properties": {
                "limit": {"type": "integer", "default": 10},
                "query": {"type": "string"},
                "mode": {"type": "string", "enum": ["fast", "exact"], "default": "fast"},
                "verbose": {"type": "boolean", "default": true},
                "since": {"type": ["string", "null"]},
                "page": {"type": "integer"},
                "filters": {"type": "object", "additionalProperties": {"type": "string"}, "default": {"a": "b\n"}},
            },
            "required": ["query"],
        });
        assert_eq!(
            signature_of(parameters),
            "async def f(\n    *,\n    query: str,\n    limit: int = 10,\n    mode: Literal[\"fast\", \"exact\"] = \"fast\",\n    verbose: bool = True,\n    since: str | None = None,\n    page: int = ...,\n    filters: dict[str, str] = {\"a\": \"b\\n\"},\n) -> Any:"
        );
    }

    #[test]
    fn parameter_shapes_without_plain_keywords() {
        assert_eq!(signature_of(json!({"type": "object", "properties": {}})), "async def f() -> Any:");
        assert_eq!(
            signature_of(json!({"type": "object", "properties": {}, "additionalProperties": false})),
            "async def f() -> Any:"
        );
        assert_eq!(signature_of(json!({"type": "object"})), "async def f(**kwargs: Any) -> Any:");
        assert_eq!(signature_of(json!({"anyOf": [{"type": "object"}]})), "async def f(**kwargs: Any) -> Any:");
        let extra = json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "integer"}, "required": ["a"]});
        assert_eq!(signature_of(extra), "async def f(*, a: str, **kwargs: int) -> Any:");
        let class = json!({"type": "object", "properties": {"class": {"type": "string", "description": "Which."}, "n": {"type": "integer", "default": 2}}});
        let stub = render_stub(&[raw("f", class, None)]);
        assert!(stub.contains("async def f(**kwargs: Unpack[FArgs]) -> Any:"), "{stub}");
        assert!(
            stub.contains(
                "FArgs = TypedDict(\n    \"FArgs\",\n    {\n        \"class\": NotRequired[str],  # Which.\n"
            ),
            "{stub}"
        );
        assert!(stub.contains("    Takes the keys of `FArgs` as keyword arguments; pass the ones that are not Python identifiers as `**{\"class\": ...}`.\n"), "{stub}");
        assert!(stub.contains("    Args:\n        class: Which.\n        n: (default: 2)\n"), "{stub}");
    }

    #[test]
    fn return_types_come_from_the_output_schema() {
        let stub = render_stub(&[
            raw("text", json!({"type": "object", "properties": {}}), Some(json!({"type": "string"}))),
            raw("unknown", json!({"type": "object", "properties": {}}), None),
            raw(
                "listing",
                json!({"type": "object", "properties": {}}),
                Some(json!({"type": "array", "items": {"type": "string"}, "description": "File names."})),
            ),
        ]);
        assert!(stub.contains("async def text() -> str:\n"), "{stub}");
        assert!(stub.contains("async def unknown() -> Any:\n"), "{stub}");
        assert!(stub.contains("async def listing() -> list[str]:\n    \"\"\"The listing tool.\n\n    Returns:\n        File names.\n    \"\"\"\n"), "{stub}");
    }

    #[test]
    fn function_names_are_sanitised_and_unique() {
        assert_eq!(python_name("web-search"), "web_search");
        assert_eq!(python_name("2fa_check"), "_2fa_check");
        assert_eq!(python_name("import"), "_import");
        assert_eq!(python_name("größe"), "gr__e");
        assert_eq!(python_name(""), "_");
        let tools = [raw("a-b", json!({}), None), raw("a_b", json!({}), None), raw("Any", json!({}), None)];
        let sorted: Vec<&StubTool> = tools.iter().collect();
        assert_eq!(function_names(&sorted), vec!["a_b", "a_b_2", "Any_2"]);
        let stub = render_stub(&tools);
        assert!(stub.contains("async def a_b(**kwargs: Any) -> Any:\n    \"\"\"The a-b tool.\n\n    The tool's own name is \"a-b\"; if `tools.a_b` is missing"), "{stub}");
    }

    #[test]
    fn docstrings_cannot_be_closed_early() {
        assert_eq!(docstring(r#"say "hi""#, ""), r#""""say "hi\"""""#);
        assert_eq!(docstring(r#"a """ b \ c"#, ""), r#""""a \"\"" b \\ c""""#);
        assert_eq!(docstring("nul\0 here\r\nnext", "  "), "  \"\"\"nul\\x00 here\n  next\n  \"\"\"");
    }

    #[test]
    fn rendering_is_deterministic_whatever_the_order() {
        let a = raw(
            "alpha",
            json!({"type": "object", "properties": {"x": {"type": "object", "properties": {"y": {"type": "integer"}}}}}),
            None,
        );
        let b = raw(
            "beta",
            json!({"type": "object", "properties": {"x": {"type": "object", "properties": {"z": {"type": "integer"}}}}}),
            None,
        );
        let forward = render_stub(&[a.clone(), b.clone()]);
        assert_eq!(forward, render_stub(&[b, a]));
        assert!(forward.find("async def alpha").unwrap() < forward.find("async def beta").unwrap());
    }

    #[test]
    fn stub_path_is_stable_per_session_and_tool_set() {
        let dir = Path::new("/home/u/.bub/codemode");
        let ws = Path::new("/work/project");
        let one = stub_path(dir, ws, "s1", "content");
        assert_eq!(one, stub_path(dir, ws, "s1", "content"));
        let name = one.file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with("tools-") && name.ends_with(".pyi") && name.len() == "tools-.pyi".len() + 12,
            "{name}"
        );
        let session_dir = one.parent().unwrap();
        assert_eq!(session_dir.parent().unwrap(), dir);
        assert_eq!(session_dir.file_name().unwrap().len(), 16);
        let changed = stub_path(dir, ws, "s1", "other content");
        assert_eq!(changed.parent(), one.parent());
        assert_ne!(changed, one);
        assert_ne!(stub_path(dir, ws, "s2", "content").parent(), one.parent());
        assert_ne!(stub_path(dir, Path::new("/work/other"), "s1", "content").parent(), one.parent());
        // the NUL separator keeps (workspace, session) pairs apart
        assert_ne!(
            stub_path(dir, Path::new("/a"), "b/c", "x").parent(),
            stub_path(dir, Path::new("/a/b"), "c", "x").parent()
        );
    }

    #[test]
    fn write_stub_writes_once_and_never_rewrites() {
        let home = tempfile::tempdir().expect("tempdir");
        let ws = Path::new("/work/project");
        let tools = vec![raw("a", json!({"type": "object", "properties": {}}), None)];
        let path = write_stub(home.path(), ws, "s", &tools).expect("write");
        assert_eq!(fs::read_to_string(&path).expect("read"), render_stub(&tools));
        fs::write(&path, "edited").expect("edit");
        assert_eq!(write_stub(home.path(), ws, "s", &tools).expect("again"), path);
        assert_eq!(fs::read_to_string(&path).expect("read"), "edited");
        let more = vec![tools[0].clone(), raw("b", json!({"type": "object", "properties": {}}), None)];
        let next = write_stub(home.path(), ws, "s", &more).expect("new tool set");
        assert_ne!(next, path);
        assert_eq!(next.parent(), path.parent());
        let files: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(files.len(), 2, "no temp files left: {files:?}");
    }

    #[test]
    fn odd_schemas_never_panic() {
        let odd = [
            json!(null),
            json!(false),
            json!(42),
            json!("string"),
            json!([]),
            json!({"type": 5}),
            json!({"type": [5, null]}),
            json!({"properties": 3}),
            json!({"type": "object", "properties": {"a": 1, "b": null}, "required": "a"}),
            json!({"items": 3}),
            json!({"anyOf": "x"}),
            json!({"anyOf": []}),
            json!({"enum": "x"}),
            json!({"$ref": "#"}),
            json!({"$ref": "#/"}),
            json!({"$ref": "#/$defs/a~1b", "$defs": {"a/b": {"type": "object", "properties": {"x": {"$ref": "#/$defs/a~1b"}}}}}),
            json!({"type": "object", "properties": {"": {}, "0": {}, "é": {}}}),
        ];
        for schema in odd {
            let stub = render_stub(&[raw("f", schema.clone(), Some(schema))]);
            assert!(stub.contains("async def f("));
        }
        let mut deep = json!({"type": "string"});
        for _ in 0..500 {
            deep = json!({"type": "array", "items": deep});
        }
        assert!(ty_of(deep).contains("list[Any]"));
    }

    // --- Python checks -----------------------------------------------------

    /// Runs python3 over the files: each must parse, and on 3.11+ (where
    /// `typing` has `NotRequired` and `Unpack`) execute. `None` without python3.
    fn python_check(files: &[PathBuf]) -> Option<Result<(), String>> {
        const SCRIPT: &str = "import ast, sys\n\
            for path in sys.argv[1:]:\n    \
                src = open(path, encoding='utf-8').read()\n    \
                ast.parse(src)\n    \
                if sys.version_info >= (3, 11):\n        \
                    exec(compile(src, path, 'exec'), {'__name__': 'stub'})\n";
        let output = match Command::new("python3").arg("-c").arg(SCRIPT).args(files).output() {
            Ok(output) => output,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(e) => return Some(Err(e.to_string())),
        };
        Some(if output.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&output.stderr).into_owned()) })
    }

    #[derive(Serialize, Deserialize, JsonSchema)]
    #[serde(rename_all = "snake_case")]
    enum Priority {
        Low,
        Normal,
        Urgent,
    }

    /// A postal address.
    #[derive(Serialize, Deserialize, JsonSchema)]
    struct Address {
        /// Street and number.
        street: String,
        city: String,
        zip: Option<String>,
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct LineItem {
        sku: String,
        quantity: u32,
    }

    fn three() -> u8 {
        3
    }

    /// Place an order for a customer.
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct PlaceOrder {
        /// The customer id, like "C42".
        customer_id: String,
        /// What to order.
        items: Vec<LineItem>,
        /// Where to ship; the customer's default address when absent.
        shipping: Option<Address>,
        priority: Option<Priority>,
        #[serde(default)]
        tags: Vec<String>,
        /// How often to retry payment.
        #[serde(default = "three")]
        retries: u8,
    }

    #[derive(Serialize, JsonSchema)]
    struct Label {
        #[serde(rename = "class")]
        class_: String,
        #[serde(rename = "x-color")]
        color: Option<String>,
    }

    /// The order as stored.
    #[derive(Serialize, JsonSchema)]
    struct Order {
        id: String,
        priority: Priority,
        shipping: Option<Address>,
        /// Stock left per SKU.
        stock: HashMap<String, i64>,
        label: Label,
    }

    /// Tag a record with a CSS-like class.
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct TagRecord {
        #[serde(rename = "class")]
        class_: String,
        note: Option<String>,
    }

    /// Search the catalogue.
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Search {
        query: String,
        #[serde(default)]
        limit: Option<u32>,
    }

    #[derive(Serialize, JsonSchema)]
    struct Hit {
        sku: String,
        score: f64,
        warehouse: Option<Address>,
    }

    fn realistic_tools() -> Vec<StubTool> {
        let hostile = Tool::new(
            "weird-tool.v2",
            "Says \"hi\"\\ and \"\"\" ends with a quote\"",
            json!({
                "type": "object",
                "properties": {
                    "class": {"type": "string", "default": "a\"b\n", "description": "Line one\nline \0two \"\"\""},
                    "lambda": {"enum": ["x", 1, true, null]},
                    "__dunder": {"type": "object", "properties": {"if": {"type": "string"}}},
                },
            }),
            |_, _| async { Ok(json!(null)) },
        )
        .with_output_schema(json!({"$ref": "#/$defs/T", "$defs": {"T": {
            "type": "object",
            "properties": {"next-node": {"$ref": "#/$defs/T"}, "v": {"const": "x"}},
        }}}));
        let tools = [
            Tool::typed("orders.place", |_: PlaceOrder, _: ToolContext| async {
                Err::<Order, _>(ToolError::failed("not called"))
            }),
            Tool::typed("records.tag", |_: TagRecord, _: ToolContext| async {
                Err::<String, _>(ToolError::failed("not called"))
            }),
            Tool::typed("catalogue.search", |_: Search, _: ToolContext| async {
                Err::<Vec<Hit>, _>(ToolError::failed("not called"))
            }),
            Tool::new("tape.info", "Show tape info.", json!({"type": "object", "properties": {}}), |_, _| async {
                Ok(json!({}))
            }),
            hostile,
        ];
        tools.iter().map(StubTool::from_tool).collect()
    }

    #[test]
    fn realistic_stub_is_valid_python() {
        let home = tempfile::tempdir().expect("tempdir");
        let tools = realistic_tools();
        let path = write_stub(home.path(), Path::new("/work/project"), "session", &tools).expect("write");
        let stub = fs::read_to_string(&path).expect("read");
        println!("{stub}");
        assert!(stub.contains("priority: Literal[\"low\", \"normal\", \"urgent\"] | None = None"), "{stub}");
        assert_eq!(stub.matches("class Address(TypedDict):").count(), 1, "{stub}");
        assert!(stub.contains("    stock: dict[str, int]  # Stock left per SKU.\n"), "{stub}");
        assert!(stub.contains("        \"class\": str,\n"), "{stub}");
        assert!(stub.contains("async def records_tag(**kwargs: Unpack[RecordsTagArgs]) -> str:"), "{stub}");
        assert!(stub.contains("-> list[Hit]:"), "{stub}");
        assert!(stub.contains("async def tape_info() -> Any:"), "{stub}");
        match python_check(&[path]) {
            None => println!("note: python3 not found; skipped checking the stub with python"),
            Some(result) => result.expect("stub parses and runs"),
        }
    }

    /// A random schema-like value, biased towards JSON Schema keywords and
    /// local refs so recursion, unions and odd keys all come up.
    fn random_schema(rng: &mut StdRng, depth: u32) -> Value {
        const KEYS: &[&str] = &[
            "type",
            "properties",
            "items",
            "prefixItems",
            "anyOf",
            "oneOf",
            "allOf",
            "enum",
            "const",
            "$ref",
            "$defs",
            "required",
            "additionalProperties",
            "default",
            "description",
            "title",
            "nullable",
            "a",
            "b",
            "class",
            "x-y",
            "__z",
        ];
        const TYPES: &[&str] = &["string", "integer", "number", "boolean", "null", "array", "object", "weird"];
        const REFS: &[&str] = &["#", "#/$defs/a", "#/$defs/b", "#/properties/a", "#/nope", "http://x"];
        if depth == 0 || rng.random_bool(0.25) {
            let leaves =
                [json!(null), json!(true), json!(1), json!(1.5), json!("x"), json!("\"\"\"\\"), json!([]), json!({})];
            return leaves[rng.random_range(0..leaves.len())].clone();
        }
        if rng.random_bool(0.15) {
            return Value::Array((0..rng.random_range(0..3)).map(|_| random_schema(rng, depth - 1)).collect());
        }
        let mut object = Map::new();
        for _ in 0..rng.random_range(1..5) {
            let key = KEYS[rng.random_range(0..KEYS.len())];
            let value = match key {
                "type" if rng.random_bool(0.8) => json!(TYPES[rng.random_range(0..TYPES.len())]),
                "$ref" => json!(REFS[rng.random_range(0..REFS.len())]),
                "required" => json!([KEYS[rng.random_range(0..KEYS.len())], "a", "class"]),
                "description" | "title" => json!(["Doc \"q\"", "", "x\ny", "__init__", "Any"][rng.random_range(0..5)]),
                _ => random_schema(rng, depth - 1),
            };
            object.insert(key.to_string(), value);
        }
        Value::Object(object)
    }

    #[test]
    fn random_schemas_render_valid_python() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut rng = StdRng::seed_from_u64(0x5eed);
        let mut files = Vec::new();
        for i in 0..200 {
            let tools: Vec<StubTool> = (0..3)
                .map(|t| raw(&format!("t{t}"), random_schema(&mut rng, 5), Some(random_schema(&mut rng, 5))))
                .collect();
            let path = dir.path().join(format!("stub{i}.pyi"));
            fs::write(&path, render_stub(&tools)).expect("write");
            files.push(path);
        }
        match python_check(&files) {
            None => println!("note: python3 not found; only checked that rendering does not panic"),
            Some(result) => result.expect("every random stub parses and runs"),
        }
    }
}
