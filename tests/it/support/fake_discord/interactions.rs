//! Application commands and interactions in the fake Discord: the slash-command menu the bot registers, a user
//! running one (INTERACTION_CREATE), and the bot's answer through the interaction's token.
//!
//! | call                                                      | route name             | answer |
//! |-----------------------------------------------------------|------------------------|--------|
//! | `PUT /applications/{app}/commands`                        | `set_commands`         | the list, with ids (a bulk overwrite) |
//! | `POST /interactions/{id}/{token}/callback`                | `interaction_callback` | 204    |
//! | `PATCH /webhooks/{app}/{token}/messages/@original` or `/{m}` | `edit_interaction_message` | the edited message |
//! | `POST /webhooks/{app}/{token}`                            | `followup_message`     | the new message |
//! | `GET /oauth2/applications/@me`                            | `application_info`     | the application (its id is the bot's) |
//!
//! Checked like Discord: a command's name is 1–32 lowercase letters, digits, `-` or `_`, its description
//! 1–100 characters, at most 100 commands, names unique (400 code 50035); an interaction is answered once
//! (40060 "already acknowledged") and within 3 seconds (10062 "Unknown interaction" after); its token then
//! works for followups and edits until it expires ([`FakeDiscord::expire_tokens_once_acknowledged`]: 401
//! code 50027 "Invalid Webhook Token"); before the first answer there is no message to edit or follow (404 10008 /
//! 10015). A deferred answer (type 5) shows "bub-test is thinking…": a message with the LOADING flag that
//! the first edit of `@original` fills. Messages made this way are dispatched (MESSAGE_CREATE/UPDATE) with
//! the bot as author, like others of the bot's.

use super::{
    FakeDiscord, State_, allowed_mentions, bot_user_json, content_error, dispatch_bot_message, error_json, form_error,
    lock, message_json, next_message_id, respond, set_guild, user_json,
};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

/// How long Discord waits for an interaction's first answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(3);
/// Discord's limits on a command list.
const MAX_COMMANDS: usize = 100;
const MAX_NAME_CHARS: usize = 32;
const MAX_DESCRIPTION_CHARS: usize = 100;
/// Interaction callback types: a message now, or "thinking…" and the message later.
const CHANNEL_MESSAGE: u64 = 4;
const DEFERRED_CHANNEL_MESSAGE: u64 = 5;
/// Message flags: "thinking…" (a deferred answer not yet given).
const LOADING: u64 = 1 << 7;
/// The message type of an answer to a slash command.
const TYPE_CHAT_INPUT_COMMAND: u64 = 20;

/// What the user saw of one interaction.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InteractionView {
    /// Callback bodies in order (the first one counts; later ones were refused).
    pub callbacks: Vec<Value>,
    /// The answer's current text: `Some("")` while "thinking…".
    pub original: Option<String>,
    /// Whether the answer still shows "thinking…".
    pub thinking: bool,
    /// Followup messages' current texts, in order.
    pub followups: Vec<String>,
    /// Edits of the answer or its followups, counted.
    pub edits: usize,
}

impl InteractionView {
    /// Whether the answer shows text (not "thinking…", not nothing).
    pub fn original_filled(&self) -> bool {
        self.original.is_some() && !self.thinking
    }
}

/// One interaction a user started.
struct Live {
    id: u64,
    channel_id: u64,
    user_id: u64,
    created: Instant,
    expired: bool,
    original: Option<u64>,
    followups: Vec<u64>,
    view: InteractionView,
}

/// The fake's application commands and interactions.
#[derive(Default)]
pub(super) struct Interactions {
    /// The last command list the bot registered, and how many times it did.
    commands: Option<Vec<Value>>,
    registrations: usize,
    /// By token.
    live: HashMap<String, Live>,
    /// Tokens stop working right after the acknowledgment ([`FakeDiscord::expire_tokens_once_acknowledged`]).
    expire_when_acknowledged: bool,
}

/// An interaction route.
pub(super) enum Call {
    ApplicationInfo,
    SetCommands { application_id: u64 },
    Callback { interaction_id: u64, token: String },
    EditMessage { application_id: u64, token: String, message_id: Option<u64> },
    Followup { application_id: u64, token: String },
}

impl Call {
    /// The route of `METHOD /api/v10/{segments}`, if it is an interaction route.
    pub(super) fn parse(method: &Method, segments: &[&str]) -> Option<Call> {
        let id = |segment: &str| segment.parse::<u64>().ok();
        match (method.as_str(), segments) {
            ("GET", ["oauth2", "applications", "@me"]) => Some(Call::ApplicationInfo),
            ("PUT", ["applications", app, "commands"]) => Some(Call::SetCommands { application_id: id(app)? }),
            ("POST", ["interactions", interaction, token, "callback"]) => {
                Some(Call::Callback { interaction_id: id(interaction)?, token: token.to_string() })
            }
            ("PATCH", ["webhooks", app, token, "messages", message]) => Some(Call::EditMessage {
                application_id: id(app)?,
                token: token.to_string(),
                message_id: if *message == "@original" { None } else { Some(id(message)?) },
            }),
            ("POST", ["webhooks", app, token]) => {
                Some(Call::Followup { application_id: id(app)?, token: token.to_string() })
            }
            _ => None,
        }
    }

    pub(super) fn name(&self) -> &'static str {
        match self {
            Call::ApplicationInfo => "application_info",
            Call::SetCommands { .. } => "set_commands",
            Call::Callback { .. } => "interaction_callback",
            Call::EditMessage { .. } => "edit_interaction_message",
            Call::Followup { .. } => "followup_message",
        }
    }
}

/// The answer to an authorized interaction call.
pub(super) fn answer(state: &mut State_, call: Call, body: &[u8]) -> Response {
    if let Call::ApplicationInfo = call {
        return respond(StatusCode::OK, application_json());
    }
    let params: Option<Value> = serde_json::from_slice(body).ok();
    let Some(params) = params else {
        return respond(StatusCode::BAD_REQUEST, error_json("400: Bad Request", 50109));
    };
    match call {
        Call::ApplicationInfo => respond(StatusCode::OK, application_json()),
        Call::SetCommands { application_id } if application_id != super::BOT_ID => unknown_application(),
        Call::SetCommands { .. } => set_commands(state, &params),
        Call::Callback { interaction_id, token } => callback(state, interaction_id, &token, &params),
        Call::EditMessage { application_id, .. } | Call::Followup { application_id, .. }
            if application_id != super::BOT_ID =>
        {
            unknown_application()
        }
        Call::EditMessage { token, message_id, .. } => edit(state, &token, message_id, &params),
        Call::Followup { token, .. } => followup(state, &token, &params),
    }
}

/// The bot's application, as `GET /oauth2/applications/@me` returns it.
fn application_json() -> Value {
    json!({
        "id": super::BOT_ID.to_string(), "name": super::BOT_NAME, "icon": null, "description": "",
        "bot_public": true, "bot_require_code_grant": false, "owner": null, "verify_key": "00", "team": null,
        "flags": 0,
    })
}

fn unknown_application() -> Response {
    respond(StatusCode::NOT_FOUND, error_json("Unknown Application", 10002))
}

/// Why a command's name is not one Discord takes: 1–32 lowercase letters, digits, `-` or `_`.
fn bad_name(name: &str) -> bool {
    let count = name.chars().count();
    !(1..=MAX_NAME_CHARS).contains(&count)
        || !name.chars().all(|c| c == '-' || c == '_' || c.is_ascii_digit() || (c.is_alphabetic() && !c.is_uppercase()))
}

fn bad_description(value: Option<&Value>) -> bool {
    let count = value.and_then(Value::as_str).map_or(0, |text| text.chars().count());
    !(1..=MAX_DESCRIPTION_CHARS).contains(&count)
}

/// `PUT /applications/{app}/commands`: replaces the global command list.
fn set_commands(state: &mut State_, params: &Value) -> Response {
    let Some(commands) = params.as_array() else {
        return form_error("_root", "ARRAY_TYPE_CONVERT", "Only iterables may be used in a ListType");
    };
    if commands.len() > MAX_COMMANDS {
        return form_error("_root", "BASE_TYPE_MAX_LENGTH", "Must be 100 or fewer in length.");
    }
    let mut names = Vec::new();
    for (index, command) in commands.iter().enumerate() {
        let name = command.get("name").and_then(Value::as_str).unwrap_or_default();
        if bad_name(name) {
            return form_error(&format!("{index}.name"), "APPLICATION_COMMAND_INVALID_NAME", "Command name is invalid");
        }
        if names.contains(&name) {
            return form_error(&format!("{index}.name"), "APPLICATION_COMMANDS_DUPLICATE_NAME", "duplicate name");
        }
        names.push(name);
        if bad_description(command.get("description")) {
            return form_error(
                &format!("{index}.description"),
                "BASE_TYPE_BAD_LENGTH",
                "Must be between 1 and 100 in length.",
            );
        }
        if !matches!(command.get("type").and_then(Value::as_u64), None | Some(1)) {
            return form_error(&format!("{index}.type"), "BASE_TYPE_CHOICES", "Value must be one of (1, 2, 3).");
        }
        for (n, option) in command.get("options").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let name = option.get("name").and_then(Value::as_str).unwrap_or_default();
            let kind = option.get("type").and_then(Value::as_u64).unwrap_or(0);
            if bad_name(name) || bad_description(option.get("description")) || !(1..=11).contains(&kind) {
                return form_error(
                    &format!("{index}.options.{n}"),
                    "APPLICATION_COMMAND_OPTION_INVALID",
                    "invalid option",
                );
            }
        }
    }
    let registered: Vec<Value> = commands
        .iter()
        .map(|command| {
            let mut command = command.clone();
            command["id"] = json!(next_message_id(state).to_string());
            command["application_id"] = json!(super::BOT_ID.to_string());
            command["version"] = json!("1");
            command["type"] = json!(1);
            command
        })
        .collect();
    state.interactions.commands = Some(registered.clone());
    state.interactions.registrations += 1;
    respond(StatusCode::OK, Value::Array(registered))
}

fn unknown_interaction() -> Response {
    respond(StatusCode::NOT_FOUND, error_json("Unknown interaction", 10062))
}

fn invalid_token() -> Response {
    respond(StatusCode::UNAUTHORIZED, error_json("Invalid Webhook Token", 50027))
}

/// `POST /interactions/{id}/{token}/callback`: the first answer, once, within 3 seconds.
fn callback(state: &mut State_, interaction_id: u64, token: &str, params: &Value) -> Response {
    let Some(live) = state.interactions.live.get_mut(token).filter(|live| live.id == interaction_id) else {
        return unknown_interaction();
    };
    live.view.callbacks.push(params.clone());
    if live.original.is_some() {
        return respond(StatusCode::BAD_REQUEST, error_json("Interaction has already been acknowledged.", 40060));
    }
    if live.expired || live.created.elapsed() > ANSWER_WITHIN {
        return unknown_interaction();
    }
    let kind = params.get("type").and_then(Value::as_u64).unwrap_or(0);
    let content = params.pointer("/data/content").and_then(Value::as_str).unwrap_or_default().to_string();
    match kind {
        DEFERRED_CHANNEL_MESSAGE => {}
        CHANNEL_MESSAGE if content.is_empty() => {
            return respond(StatusCode::BAD_REQUEST, error_json("Cannot send an empty message", 50006));
        }
        CHANNEL_MESSAGE => {
            if let Some(error) = content_error(&content) {
                return error;
            }
        }
        _ => return form_error("type", "BASE_TYPE_CHOICES", "Value must be one of (1, 4, 5, 6, 7, 8, 9, 10, 12)."),
    }
    let (channel_id, thinking, metadata) = (live.channel_id, kind == DEFERRED_CHANNEL_MESSAGE, metadata(live));
    live.expired = state.interactions.expire_when_acknowledged;
    let id = next_message_id(state);
    let mut message = message_json(id, channel_id, bot_user_json(), &content);
    message["type"] = json!(TYPE_CHAT_INPUT_COMMAND);
    message["flags"] = json!(if thinking { LOADING } else { 0 });
    message["interaction_metadata"] = metadata;
    if let Some(live) = state.interactions.live.get_mut(token) {
        live.original = Some(id);
        live.view.original = Some(content);
        live.view.thinking = thinking;
    }
    state.messages.insert(id, message.clone());
    dispatch_bot_message(state, "MESSAGE_CREATE", channel_id, message);
    StatusCode::NO_CONTENT.into_response()
}

/// What a message made through an interaction says of it.
fn metadata(live: &Live) -> Value {
    json!({
        "id": live.id.to_string(), "type": 2, "authorizing_integration_owners": {},
        "user": user_json(live.user_id, &format!("user{}", live.user_id), false),
        "original_response_message_id": live.original.map(|id| id.to_string()),
    })
}

/// The live interaction of `token`, or Discord's answer for a token that no longer works.
fn usable<'a>(state: &'a mut State_, token: &str) -> Result<&'a mut Live, Box<Response>> {
    match state.interactions.live.get_mut(token) {
        Some(live) if !live.expired => Ok(live),
        _ => Err(Box::new(invalid_token())),
    }
}

/// `PATCH /webhooks/{app}/{token}/messages/{@original|id}`.
fn edit(state: &mut State_, token: &str, message_id: Option<u64>, params: &Value) -> Response {
    let live = match usable(state, token) {
        Ok(live) => live,
        Err(response) => return *response,
    };
    let target = match message_id {
        None => live.original,
        Some(id) => (live.original == Some(id) || live.followups.contains(&id)).then_some(id),
    };
    let Some(target) = target else {
        return respond(StatusCode::NOT_FOUND, error_json("Unknown Message", 10008));
    };
    let content = params.get("content").and_then(Value::as_str).map(String::from);
    if let Some(error) = content.as_deref().and_then(content_error) {
        return error;
    }
    if let Err(error) = allowed_mentions(params) {
        return *error;
    }
    let is_original = live.original == Some(target);
    let followup = live.followups.iter().position(|id| *id == target);
    live.view.edits += 1;
    if let Some(content) = &content {
        if is_original {
            live.view.original = Some(content.clone());
            live.view.thinking = false;
        } else if let Some(index) = followup {
            live.view.followups[index] = content.clone();
        }
    }
    let channel_id = live.channel_id;
    let Some(mut message) = state.messages.get(&target).cloned() else {
        return respond(StatusCode::NOT_FOUND, error_json("Unknown Message", 10008));
    };
    if let Some(content) = content {
        message["content"] = json!(content);
    }
    message["flags"] = json!(0);
    message["edited_timestamp"] = json!(super::now());
    state.messages.insert(target, message.clone());
    dispatch_bot_message(state, "MESSAGE_UPDATE", channel_id, message.clone());
    respond(StatusCode::OK, message)
}

/// `POST /webhooks/{app}/{token}`: another message answering the interaction.
fn followup(state: &mut State_, token: &str, params: &Value) -> Response {
    let live = match usable(state, token) {
        Ok(live) => live,
        Err(response) => return *response,
    };
    if live.original.is_none() {
        return respond(StatusCode::NOT_FOUND, error_json("Unknown Webhook", 10015));
    }
    let content = params.get("content").and_then(Value::as_str).unwrap_or_default().to_string();
    if content.is_empty() {
        return respond(StatusCode::BAD_REQUEST, error_json("Cannot send an empty message", 50006));
    }
    if let Some(error) = content_error(&content) {
        return error;
    }
    if let Err(error) = allowed_mentions(params) {
        return *error;
    }
    let (channel_id, metadata) = (live.channel_id, metadata(live));
    let id = next_message_id(state);
    if let Some(live) = state.interactions.live.get_mut(token) {
        live.followups.push(id);
        live.view.followups.push(content.clone());
    }
    let mut message = message_json(id, channel_id, bot_user_json(), &content);
    message["interaction_metadata"] = metadata;
    state.messages.insert(id, message.clone());
    dispatch_bot_message(state, "MESSAGE_CREATE", channel_id, message.clone());
    respond(StatusCode::OK, message)
}

impl FakeDiscord {
    /// User `user_id` runs `/name` (with `args` as its one string option `args`, if given) in `channel_id`
    /// (of `guild_id`, or a DM): INTERACTION_CREATE to every ready session. The command must be registered
    /// (Discord shows no other). Returns the interaction's id.
    pub fn user_runs_command(
        &self,
        channel_id: u64,
        guild_id: Option<u64>,
        user_id: u64,
        name: &str,
        args: Option<&str>,
    ) -> u64 {
        let mut state = lock(&self.shared);
        let command = state
            .interactions
            .commands
            .iter()
            .flatten()
            .find(|command| command.get("name").and_then(Value::as_str) == Some(name))
            .cloned()
            .unwrap_or_else(|| panic!("/{name} is not a registered command, so no user can run it"));
        let id = next_message_id(&mut state);
        let token = format!("interaction-token-{id}");
        let user = user_json(user_id, &format!("user{user_id}"), false);
        let options: Vec<Value> =
            args.map(|args| json!({"name": "args", "type": 3, "value": args})).into_iter().collect();
        let mut interaction = json!({
            "id": id.to_string(), "application_id": super::BOT_ID.to_string(), "type": 2, "token": token,
            "version": 1,
            "data": {"id": command["id"].clone(), "name": name, "type": 1, "options": options},
            "channel_id": channel_id.to_string(),
            "channel": {"id": channel_id.to_string(), "type": if guild_id.is_some() { 0 } else { 1 }},
            "app_permissions": "0", "locale": "en-US", "entitlements": [],
            "authorizing_integration_owners": {}, "context": if guild_id.is_some() { 0 } else { 1 },
            "attachment_size_limit": 10_485_760,
        });
        match guild_id {
            Some(guild_id) => {
                state.channel_guilds.insert(channel_id, guild_id);
                set_guild(&mut interaction, guild_id);
                interaction["member"]["user"] = user;
                interaction["member"]["permissions"] = json!("0");
                interaction["guild_locale"] = json!("en-US");
            }
            None => interaction["user"] = user,
        }
        let live = Live {
            id,
            channel_id,
            user_id,
            created: Instant::now(),
            expired: false,
            original: None,
            followups: Vec::new(),
            view: InteractionView::default(),
        };
        state.interactions.live.insert(token, live);
        super::broadcast(&mut state, "INTERACTION_CREATE", interaction);
        id
    }

    /// The command list the bot last registered (`PUT /applications/{app}/commands`), if it did.
    pub fn commands(&self) -> Option<Vec<Value>> {
        lock(&self.shared).interactions.commands.clone()
    }

    /// The registered commands' names, in order (empty before any registration).
    pub fn command_names(&self) -> Vec<String> {
        let commands = self.commands().unwrap_or_default();
        commands.iter().filter_map(|command| command.get("name").and_then(Value::as_str).map(String::from)).collect()
    }

    /// How many times the bot registered its command list.
    pub fn command_registrations(&self) -> usize {
        lock(&self.shared).interactions.registrations
    }

    /// What the user saw of interaction `id`.
    pub fn interaction(&self, id: u64) -> Option<InteractionView> {
        let state = lock(&self.shared);
        state.interactions.live.values().find(|live| live.id == id).map(|live| live.view.clone())
    }

    /// From now on each interaction's token stops working once it is acknowledged, as if the turn took
    /// longer than Discord's 15 minutes.
    pub fn expire_tokens_once_acknowledged(&self) {
        lock(&self.shared).interactions.expire_when_acknowledged = true;
    }
}
