//! Python text: function signatures and docstrings, TypedDict blocks, type
//! expressions, literals and names.

use super::*;

// ---------------------------------------------------------------------------
// Functions
// ---------------------------------------------------------------------------

/// Python function names for the (sorted) tools: identifiers, unique, and
/// not shadowing the header. A model name that already is an identifier
/// keeps it; the others are sanitised (`mcp_my-docs_get-page` →
/// `mcp_my_docs_get_page`) and numbered (`_2`, `_3`) when that name is taken,
/// so two tools never end up under one name and the one whose name it is
/// never loses it to another's spelling.
pub(super) fn function_names(tools: &[&StubTool]) -> Vec<String> {
    let mut taken: HashSet<String> = HEADER_NAMES.iter().map(|n| n.to_string()).collect();
    let mut names: Vec<Option<String>> = vec![None; tools.len()];
    for (slot, tool) in names.iter_mut().zip(tools) {
        if python_name(&tool.model_name) == tool.model_name && taken.insert(tool.model_name.clone()) {
            *slot = Some(tool.model_name.clone());
        }
    }
    names
        .into_iter()
        .zip(tools)
        .map(|(name, tool)| {
            name.unwrap_or_else(|| {
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
        })
        .collect()
}

/// Non-word characters become `_`; a leading digit or a keyword gets a `_`
/// prefix, a dunder name (`__init__`, which `tools` itself has) a `tool`
/// prefix. ASCII only, so the result is an identifier in every Python 3.
pub(super) fn python_name(name: &str) -> String {
    let name: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) || is_keyword(&name) {
        format!("_{name}")
    } else if name.len() > 4 && name.starts_with("__") && name.ends_with("__") {
        format!("tool{name}")
    } else {
        name
    }
}

pub(super) fn signature(name: &str, params: &Params, returns: &str) -> String {
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
pub(super) fn parameter(field: &Field) -> String {
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
pub(super) fn function_doc(tool: &StubTool, name: &str, params: &Params) -> String {
    let mut sections: Vec<String> = Vec::new();
    let summary = tool.description.trim();
    if !summary.is_empty() {
        sections.push(summary.to_string());
    }
    if name != tool.model_name {
        let own = py_str(&tool.model_name);
        let base = python_name(&tool.model_name);
        let other = if base == name { String::new() } else { format!("; `tools.{base}` is not this tool") };
        sections.push(format!("Call it as `tools.{name}`: the tool's own name is {own}{other}."));
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
pub(super) fn args_doc(params: &Params) -> Vec<String> {
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
pub(super) fn arg_doc(field: &Field, show_default: bool) -> Option<String> {
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

pub(super) fn indent(text: &str, prefix: &str) -> String {
    text.lines()
        .map(|line| if line.trim().is_empty() { String::new() } else { format!("{prefix}{line}") })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A docstring at `prefix` indentation, escaped so no description can end it
/// early or hold bytes Python rejects.
pub(super) fn docstring(text: &str, prefix: &str) -> String {
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
pub(super) fn escape_doc(text: &str) -> String {
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

pub(super) fn class_block(name: &str, doc: Option<&str>, fields: &[Field]) -> String {
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

pub(super) fn functional_block(name: &str, doc: Option<&str>, fields: &[Field]) -> String {
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

pub(super) fn annotation(field: &Field) -> String {
    if field.required { field.ty.clone() } else { format!("NotRequired[{}]", field.ty) }
}

/// `  # first line of the description`, or nothing.
pub(super) fn trailing_comment(field: &Field) -> String {
    let text = field.doc.as_deref().and_then(|doc| doc.lines().map(str::trim).find(|l| !l.is_empty()));
    text.map(|text| format!("  # {}", comment_text(text))).unwrap_or_default()
}

pub(super) fn comment_text(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect::<String>().trim().to_string()
}

// ---------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------

/// A union as Python: literal members folded into one `Literal[...]` where
/// the first of them stood; `Any` swallows everything.
pub(super) fn render(atoms: &[Atom]) -> String {
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

pub(super) fn extend_unique(atoms: &mut Vec<Atom>, more: Vec<Atom>) {
    for atom in more {
        if !atoms.contains(&atom) {
            atoms.push(atom);
        }
    }
}

/// `enum`/`const` values as a union of literals; `Any` if one cannot be a
/// `Literal` member (floats, arrays, objects) or there are none.
pub(super) fn literals(values: &[Value]) -> Vec<Atom> {
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
pub(super) fn py_literal(value: &Value) -> String {
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
pub(super) fn py_str(text: &str) -> String {
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
pub(super) fn pascal(text: &str) -> String {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|part| !part.is_empty())
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map(|first| first.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
        })
        .collect()
}

pub(super) fn class_ident(hint: &str) -> String {
    let name = pascal(hint);
    if name.is_empty() {
        "Object".into()
    } else if name.starts_with(|c: char| c.is_ascii_digit()) {
        format!("_{name}")
    } else {
        name
    }
}

pub(super) fn is_keyword(name: &str) -> bool {
    KEYWORDS.contains(&name)
}

pub(super) fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Usable as `name=value` in a call.
pub(super) fn is_parameter_name(name: &str) -> bool {
    is_identifier(name) && !is_keyword(name)
}

/// Usable as a key in class-syntax `TypedDict` (a `__key` would be mangled).
pub(super) fn is_class_key(name: &str) -> bool {
    is_parameter_name(name) && !name.starts_with("__")
}

pub(super) fn required_keys(object: &Map<String, Value>) -> HashSet<String> {
    let required = object.get("required").and_then(Value::as_array);
    required.into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect()
}

pub(super) fn description(schema: &Value) -> Option<&str> {
    schema.get("description").and_then(Value::as_str)
}

pub(super) fn title(schema: &Value) -> Option<String> {
    schema.get("title").and_then(Value::as_str).map(str::to_string)
}

pub(super) fn unescape_pointer(segment: &str) -> String {
    segment.replace("~1", "/").replace("~0", "~")
}

/// The schema behind a chain of local `$ref`s (bounded, so a cycle ends).
pub(super) fn follow_refs<'v>(root: &'v Value, mut schema: &'v Value) -> &'v Value {
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
pub(super) fn is_class_schema(schema: &Value) -> bool {
    let Some(object) = schema.as_object() else { return false };
    let plain = ["$ref", "const", "enum", "anyOf", "oneOf", "allOf"].iter().all(|k| !object.contains_key(*k));
    let object_type = object.get("type").is_none_or(|t| t == "object");
    let has_properties = object.get("properties").and_then(Value::as_object).is_some_and(|p| !p.is_empty());
    plain && object_type && has_properties
}
