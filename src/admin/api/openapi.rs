//! The API's OpenAPI 3.1 document, built from the same types the handlers
//! take and return: each request and response type derives
//! [`schemars::JsonSchema`] (JSON Schema 2020-12, which OpenAPI 3.1 uses as
//! is), and each handler module lists its operations ([`Document::op`]).
//! One schema crate for tools and API alike; the operations are a small
//! table next to the routes they describe.
//!
//! The error responses every operation can give are added by [`Op::add`]:
//! 401, 429 and 500 (authenticated operations), 403 (changes: CSRF), 404, and
//! 400/413/415/422 where a query or body is read: 400 when it does not fit
//! the document, 422 when it fits but bub cannot take it. `schemathesis`
//! checks the served API against this document
//! (`tests/it/admin_api_schema.rs`): a request that fits must not get a
//! 400, one that does not must get a 4xx, every answer must be documented.

use super::ErrorBody;
use schemars::generate::{Contract, SchemaSettings};
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Map, Value, json};

/// The document being built.
pub(crate) struct Document {
    /// Request types, as they are deserialized.
    requests: SchemaGenerator,
    /// Response types, as they are serialized.
    responses: SchemaGenerator,
    paths: Map<String, Value>,
}

fn generator(contract: Contract) -> SchemaGenerator {
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = "/components/schemas".into();
    settings.meta_schema = None;
    settings.contract = contract;
    settings.into_generator()
}

impl Document {
    pub(crate) fn new() -> Document {
        Document {
            requests: generator(Contract::Deserialize),
            responses: generator(Contract::Serialize),
            paths: Map::new(),
        }
    }

    /// Starts an operation: `method` in lower case, `path` under the API
    /// (`/chats/{channel}`), a unique `id`, one line of summary.
    pub(crate) fn op(&mut self, method: &'static str, path: &str, id: &str, summary: &str) -> Op<'_> {
        let op = json!({"operationId": id, "summary": summary, "responses": {}});
        let Value::Object(op) = op else { unreachable!("a literal object") };
        Op { doc: self, method, path: path.to_string(), op, public: false, change: false, reads_input: false }
    }

    /// The whole document, the API served at `server` (`/admin/api`).
    pub(crate) fn finish(mut self, server: &str) -> Value {
        let mut schemas = self.requests.take_definitions(true);
        for (name, schema) in self.responses.take_definitions(true) {
            schemas.entry(name).or_insert(schema);
        }
        json!({
            "openapi": "3.1.0",
            "info": {
                "title": "bub admin API",
                "version": env!("CARGO_PKG_VERSION"),
                "description": "The admin console's API. Authenticate with an admin token as \
                    `Authorization: Bearer TOKEN` (scripts), or with the console's session cookie \
                    (then every change carries the `X-Bub-Csrf` header from `GET /session`)."
            },
            "servers": [{"url": server}],
            "security": [{"bearer": []}, {"session": []}],
            "paths": self.paths,
            "components": {
                "schemas": schemas,
                "securitySchemes": {
                    "bearer": {"type": "http", "scheme": "bearer", "description": "An admin token."},
                    "session": {"type": "apiKey", "in": "cookie", "name": super::super::auth::COOKIE}
                }
            }
        })
    }
}

/// One operation being described; [`Op::add`] puts it in the document.
pub(crate) struct Op<'a> {
    doc: &'a mut Document,
    method: &'static str,
    path: String,
    op: Map<String, Value>,
    public: bool,
    change: bool,
    reads_input: bool,
}

impl Op<'_> {
    /// A longer description.
    pub(crate) fn describe(mut self, text: &str) -> Self {
        self.op.insert("description".into(), json!(text));
        self
    }

    /// Served without authentication.
    pub(crate) fn public(mut self) -> Self {
        self.public = true;
        self.op.insert("security".into(), json!([]));
        self
    }

    /// A change: with the session cookie it needs the CSRF header.
    pub(crate) fn change(mut self) -> Self {
        self.change = true;
        self
    }

    fn parameters(&mut self) -> &mut Vec<Value> {
        let parameters = self.op.entry("parameters").or_insert_with(|| json!([]));
        match parameters {
            Value::Array(parameters) => parameters,
            _ => unreachable!("parameters is an array"),
        }
    }

    /// The query parameters: the properties of `T` (a struct).
    pub(crate) fn query<T: JsonSchema>(mut self) -> Self {
        self.reads_input = true;
        let schema = self.doc.requests.root_schema_for::<T>();
        let required: Vec<String> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|names| names.iter().filter_map(Value::as_str).map(String::from).collect())
            .unwrap_or_default();
        let properties = schema.get("properties").and_then(Value::as_object).cloned().unwrap_or_default();
        for (name, mut property) in properties {
            let description = property.as_object_mut().and_then(|object| object.remove("description"));
            let mut parameter =
                json!({"name": name, "in": "query", "required": required.contains(&name), "schema": property});
            if let Some(description) = description {
                parameter["description"] = description;
            }
            self.parameters().push(parameter);
        }
        self
    }

    /// A JSON body of type `T`.
    pub(crate) fn body<T: JsonSchema>(mut self) -> Self {
        self.reads_input = true;
        let schema = self.doc.requests.subschema_for::<T>();
        let body = json!({"required": true, "content": {"application/json": {"schema": schema}}});
        self.op.insert("requestBody".into(), body);
        self
    }

    /// A JSON response of type `T` with `status`.
    pub(crate) fn json<T: JsonSchema>(self, status: u16, description: &str) -> Self {
        let schema = self.doc.responses.subschema_for::<T>();
        self.response(status, description, Some(("application/json", schema.to_value())))
    }

    /// `200` with a JSON `T`.
    pub(crate) fn ok<T: JsonSchema>(self, description: &str) -> Self {
        self.json::<T>(200, description)
    }

    /// A response that is not JSON (`application/jsonl`, `text/event-stream`).
    pub(crate) fn stream(self, status: u16, media: &str, description: &str) -> Self {
        self.response(status, description, Some((media, json!({"type": "string"}))))
    }

    /// A `text/event-stream` of events named `event`, each one's data a JSON
    /// `T`: the schema describes one event (`event`, `data`), the data's
    /// own schema as its `contentSchema`, as schemathesis checks each event.
    pub(crate) fn events<T: JsonSchema>(self, status: u16, event: &str, description: &str) -> Self {
        let data = self.doc.responses.subschema_for::<T>().to_value();
        let schema = json!({
            "type": "object",
            "required": ["event", "data"],
            "properties": {
                "event": {"const": event},
                "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": data}
            }
        });
        self.response(status, description, Some(("text/event-stream", schema)))
    }

    /// An OpenAPI link from the `status` answer (added before) to the
    /// operation `to`, its body made of runtime expressions
    /// (`$response.body#/requests/0/code`): how one call feeds the next, for
    /// a client and for schemathesis's stateful phase.
    pub(crate) fn link(mut self, status: u16, name: &str, to: &str, body: Value) -> Self {
        let response = self.op.get_mut("responses").and_then(|responses| responses.get_mut(status.to_string()));
        if let Some(Value::Object(response)) = response {
            let links = response.entry("links").or_insert_with(|| json!({}));
            links[name] = json!({"operationId": to, "requestBody": body});
        }
        self
    }

    fn response(mut self, status: u16, description: &str, content: Option<(&str, Value)>) -> Self {
        let mut response = json!({"description": description});
        if let Some((media, schema)) = content {
            let mut content = Map::new();
            content.insert(media.to_string(), json!({"schema": schema}));
            response["content"] = Value::Object(content);
        }
        if let Some(Value::Object(responses)) = self.op.get_mut("responses") {
            responses.insert(status.to_string(), response);
        }
        self
    }

    /// Puts the operation in the document, with the error responses it can give.
    pub(crate) fn add(mut self) {
        let errors: &[(u16, &str, bool)] = &[
            (400, "The query or body is malformed or does not fit this document.", self.reads_input),
            (401, "No admin token or session, or a wrong one.", !self.public),
            (403, "A change without the CSRF header, or from another site.", self.change),
            (404, "Not found (or the console is off).", true),
            (413, "The body is too large.", self.op.contains_key("requestBody")),
            (415, "The body is not `application/json`.", self.op.contains_key("requestBody")),
            (
                422,
                "The body fits this document but names what bub does not have (a channel, a tool), or is an invalid config.",
                self.op.contains_key("requestBody"),
            ),
            (429, "Too many failed attempts from this address: wait the `Retry-After` seconds.", !self.public),
            (500, "Something inside bub failed (the database, a file): the gateway's log says what.", !self.public),
        ];
        for (status, description, applies) in errors {
            let taken = self.op.get("responses").is_some_and(|r| r.get(status.to_string()).is_some());
            if *applies && !taken {
                self = self.json::<ErrorBody>(*status, description);
            }
        }
        let Op { doc, method, path, op, .. } = self;
        let item = doc.paths.entry(path).or_insert_with(|| json!({}));
        item[method] = Value::Object(op);
    }
}
