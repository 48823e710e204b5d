//! [`Tool`]: a named, described, schema-checked async function the model (or an
//! operator's comma command) can call.
//!
//! Every handler receives a [`ToolContext`] (the run's tape, turn state, run
//! id, event bus, workspace, and whether the call came from a command or from
//! code mode); a tool that needs none of it ignores the argument.
//!
//! Typed tools take one argument struct deriving `Deserialize` and `JsonSchema`;
//! its doc comments become the schema's descriptions and deserializing it is the
//! argument check:
//!
//! ```
//! use bub::tools::{Tool, ToolContext, ToolError};
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//!
//! /// Look up the status of an order.
//! #[derive(Deserialize, JsonSchema)]
//! struct LookupOrder {
//!     /// The order number, like `A123`.
//!     order_id: String,
//! }
//!
//! let tool = Tool::typed("order.lookup", |args: LookupOrder, _ctx: ToolContext| async move {
//!     Ok::<_, ToolError>(serde_json::json!({"order_id": args.order_id, "status": "shipped"}))
//! });
//! assert_eq!(tool.model_name(), "order_lookup");
//! assert_eq!(tool.description(), "Look up the status of an order.");
//! assert_eq!(tool.parameters()["required"][0], "order_id");
//! ```

use super::capability::{Capabilities, Capability};
use super::context::ToolContext;
use super::error::ToolError;
use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::future::Future;
use std::sync::Arc;

type Handler = Arc<dyn Fn(Value, ToolContext) -> BoxFuture<'static, Result<Value, ToolError>> + Send + Sync>;
type Renderer = Arc<dyn Fn(&Value) -> String + Send + Sync>;

/// A tool. Cheap to clone (one shared allocation): registries are copied
/// and filtered for every run.
#[derive(Clone)]
pub struct Tool {
    inner: Arc<ToolSpec>,
}

#[derive(Clone)]
struct ToolSpec {
    name: String,
    description: String,
    parameters: Value,
    output_schema: Option<Value>,
    agent_use: bool,
    preserve: bool,
    /// Its results reach the model whole, never spilled (see [`Tool::never_spilled`]).
    never_spilled: bool,
    /// `None`: undeclared, taken as [`Capabilities::ALL`].
    capabilities: Option<Capabilities>,
    /// Who added it as one of a set (see [`Tool::with_source`]).
    source: Option<Arc<str>>,
    handler: Handler,
    renderer: Renderer,
    /// [`Tool::definition`], built on first use and shared by every request
    /// after (a schema is copied into no request); cleared by the builders.
    definition: std::sync::OnceLock<Arc<Value>>,
}

impl std::fmt::Debug for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.inner.name)
            .field("agent_use", &self.inner.agent_use)
            .field("preserve", &self.inner.preserve)
            .field("capabilities", &self.capabilities())
            .field("source", &self.source())
            .finish_non_exhaustive()
    }
}

impl Tool {
    /// A tool over raw JSON arguments, with a hand-written schema.
    pub fn new<F, Fut>(name: impl Into<String>, description: impl Into<String>, parameters: Value, handler: F) -> Tool
    where
        F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        let handler = Arc::new(handler);
        let spec = ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters,
            output_schema: None,
            agent_use: true,
            preserve: false,
            never_spilled: false,
            capabilities: None,
            source: None,
            handler: Arc::new(move |args, ctx| Box::pin(handler(args, ctx))),
            renderer: Arc::new(default_render),
            definition: std::sync::OnceLock::new(),
        };
        Tool { inner: Arc::new(spec) }
    }

    /// A tool whose arguments are the struct `A`: its schema comes from
    /// `JsonSchema`, its description from the struct's doc comment (override
    /// with [`Tool::with_description`]), and arguments that do not deserialize
    /// into `A` come back to the model as an `invalid_input` error.
    pub fn typed<A, R, F, Fut>(name: impl Into<String>, handler: F) -> Tool
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        R: Serialize + JsonSchema + 'static,
        F: Fn(A, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, ToolError>> + Send + 'static,
    {
        let mut parameters = schema_value(schemars::schema_for!(A));
        let description = parameters
            .as_object_mut()
            .and_then(|schema| schema.remove("description"))
            .and_then(|d| d.as_str().map(str::to_string))
            .unwrap_or_default();
        let output_schema = schema_value(schemars::schema_for!(R));
        let handler = Arc::new(handler);
        let mut tool = Tool::new(name, description, parameters, move |args: Value, ctx| {
            let handler = handler.clone();
            async move {
                let args = if args.is_null() { json!({}) } else { args };
                let args: A = serde_json::from_value(args)
                    .map_err(|e| ToolError::invalid_input(format!("argument validation failed: {e}")))?;
                let result = handler(args, ctx).await?;
                serde_json::to_value(result).map_err(|e| ToolError::failed(format!("result is not JSON: {e}")))
            }
        });
        tool.spec_mut().output_schema = Some(output_schema);
        tool
    }

    pub fn with_description(mut self, description: impl Into<String>) -> Tool {
        self.spec_mut().description = description.into();
        self
    }

    /// Hides the tool from the model: only comma commands reach it.
    pub fn command_only(mut self) -> Tool {
        self.spec_mut().agent_use = false;
        self
    }

    /// Keeps the tool directly callable in code mode.
    pub fn preserved(mut self) -> Tool {
        self.spec_mut().preserve = true;
        self
    }

    /// Its results reach the model whole, however long: for a tool whose
    /// result is itself a bounded page of a spill (`spill.read`), which
    /// spilled again could never be read.
    pub fn never_spilled(mut self) -> Tool {
        self.spec_mut().never_spilled = true;
        self
    }

    /// Declares what the tool can do, for capability rules in policies
    /// (`denied_tools = ["cap:write"]`). Undeclared: everything.
    pub fn with_capabilities(mut self, capabilities: impl IntoIterator<Item = Capability>) -> Tool {
        self.spec_mut().capabilities = Some(Capabilities::of(capabilities));
        self
    }

    /// Marks the tool as one of the set `source` provides (an MCP server, a
    /// plugin), so that [`ToolRegistry::replace_source`](super::ToolRegistry::replace_source)
    /// can swap the whole set when its provider's list changes.
    pub fn with_source(mut self, source: &str) -> Tool {
        self.spec_mut().source = Some(Arc::from(source));
        self
    }

    /// The set it belongs to, when it was added as one (see [`Tool::with_source`]).
    pub fn source(&self) -> Option<&str> {
        self.inner.source.as_deref()
    }

    pub fn with_output_schema(mut self, schema: Value) -> Tool {
        self.spec_mut().output_schema = Some(schema);
        self
    }

    /// Replaces the default rendering (strings as they are, anything else JSON).
    pub fn with_renderer(mut self, renderer: impl Fn(&Value) -> String + Send + Sync + 'static) -> Tool {
        self.spec_mut().renderer = Arc::new(renderer);
        self
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn description(&self) -> &str {
        &self.inner.description
    }

    /// The first sentence of the description, on one line: what `,help`
    /// and command menus show.
    pub fn summary(&self) -> String {
        let flat = self.inner.description.split_whitespace().collect::<Vec<_>>().join(" ");
        match flat.find(". ") {
            Some(end) => flat[..=end].to_string(),
            None => flat,
        }
    }

    /// The JSON Schema of the arguments.
    pub fn parameters(&self) -> &Value {
        &self.inner.parameters
    }

    pub fn output_schema(&self) -> Option<&Value> {
        self.inner.output_schema.as_ref()
    }

    /// False for command-only tools.
    pub fn agent_use(&self) -> bool {
        self.inner.agent_use
    }

    pub fn preserve(&self) -> bool {
        self.inner.preserve
    }

    /// See [`Tool::never_spilled`].
    pub fn spills(&self) -> bool {
        !self.inner.never_spilled
    }

    /// What the tool can do: as declared, else [`Capabilities::ALL`].
    pub fn capabilities(&self) -> Capabilities {
        self.inner.capabilities.unwrap_or(Capabilities::ALL)
    }

    /// The name the model sees: dots become underscores.
    pub fn model_name(&self) -> String {
        model_name(&self.inner.name)
    }

    /// The OpenAI function-tool definition sent to the model.
    pub fn definition(&self) -> Arc<Value> {
        self.inner
            .definition
            .get_or_init(|| {
                Arc::new(json!({
                    "type": "function",
                    "function": {
                        "name": self.model_name(),
                        "description": self.inner.description,
                        "parameters": self.inner.parameters,
                    },
                }))
            })
            .clone()
    }

    /// The spec, to change while building (the cached definition is dropped).
    fn spec_mut(&mut self) -> &mut ToolSpec {
        let spec = Arc::make_mut(&mut self.inner);
        spec.definition = std::sync::OnceLock::new();
        spec
    }

    /// Runs the tool. Most callers go through the agent's executor instead, which
    /// adds the before/after events, rendering and spill.
    pub async fn call(&self, arguments: Value, context: ToolContext) -> Result<Value, ToolError> {
        (self.inner.handler)(arguments, context).await
    }

    /// The text the model reads for a result.
    pub fn render(&self, result: &Value) -> String {
        (self.inner.renderer)(result)
    }
}

/// The model-facing form of a tool name.
pub fn model_name(name: &str) -> String {
    name.replace('.', "_")
}

/// Strings as they are, everything else as JSON.
pub fn default_render(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// A schemars schema as a plain JSON Schema object, without the `$schema` and
/// `title` keys providers do not need.
fn schema_value(schema: schemars::Schema) -> Value {
    let mut value = serde_json::to_value(schema).unwrap_or_else(|_| json!({"type": "object"}));
    if let Some(object) = value.as_object_mut() {
        object.remove("$schema");
        object.remove("title");
        if object.get("type") == Some(&json!("object")) && !object.contains_key("properties") {
            object.insert("properties".into(), json!({}));
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition is built once and shared, and a builder called after
    /// it was built still changes what the model is sent.
    #[test]
    fn the_shared_definition_follows_the_builders() {
        let tool = Tool::new("fs.read", "Read a file", json!({"type": "object"}), |_, _| async { Ok(Value::Null) });
        let first = tool.definition();
        assert!(Arc::ptr_eq(&first, &tool.definition()));
        assert_eq!(first["function"]["name"], "fs_read");
        let renamed = tool.clone().with_description("Read a text file");
        assert_eq!(renamed.definition()["function"]["description"], "Read a text file");
        assert_eq!(tool.definition()["function"]["description"], "Read a file");
    }
}
