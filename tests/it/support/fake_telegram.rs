//! A fake Telegram Bot API on loopback, for the real Telegram adapter.
//!
//! It serves `POST /bot<token>/<method>` for the methods bub uses (`getMe`,
//! `deleteWebhook`, `getUpdates`, `sendMessage`, `editMessageText`,
//! `sendChatAction`, `getFile`, `setMyCommands`, and the multipart uploads `sendPhoto` and `sendDocument`) and file
//! downloads (`GET /file/bot<token>/<path>`), answering in the Bot API's envelope
//! (`{"ok": true, "result": …}` or `{"ok": false, "error_code", "description",
//! "parameters"?}`). Tests queue what users write ([`FakeTelegram::user_says`],
//! [`FakeTelegram::push_message`], files with [`FakeTelegram::user_sends_photo`] and
//! [`FakeTelegram::user_sends_document`]), read what the bot did ([`FakeTelegram::sent`],
//! [`FakeTelegram::edits`], [`FakeTelegram::actions`], [`FakeTelegram::files`]) and inject faults for the
//! next calls of a method ([`FakeTelegram::fail_next`]), or hold the answer to
//! a call that took effect ([`FakeTelegram::hang_next`], as when the bot dies
//! before it hears back). Like Telegram, an edit to the text a message
//! already shows is refused: "message is not modified". A user edits a message
//! with [`FakeTelegram::user_edits`] (an `edited_message` update).
//!
//! Uploads are checked like Telegram does: a request over 50 MB gets 413
//! "Request Entity Too Large", a photo over 10 MB 400 "PHOTO_SAVE_FILE_INVALID",
//! a caption over 1024 characters 400 "message caption is too long".
//!
//! Files behave like the Bot API's: `getFile` answers a `file_path` for a
//! known `file_id` and refuses files over 20 MB ("file is too big"); the file
//! is then downloaded from `/file/bot<token>/<file_path>`
//! ([`FakeTelegram::downloads`] counts them).
//!
//! `getUpdates` behaves like Telegram's: updates below the requested offset
//! are forgotten for good (an update handed out is kept until a later poll's
//! offset confirms it, so a poller that dies before confirming loses nothing),
//! and a poll with nothing new waits (at most 2 s, well under teloxide's 17 s
//! client timeout) before answering an empty list. Like Telegram, one token
//! has one poll at a time: a `getUpdates` arriving while another still waits
//! ends the waiting one with 409 "Conflict: terminated by other getUpdates
//! request" (counted in [`FakeTelegram::poll_conflicts`]; a poll whose client
//! hung up no longer waits). [`FakeTelegram::polls_at`] says when each poll arrived.
//!
//! Flood control is off unless asked for: with [`FakeTelegram::enforce_limits`]
//! (e.g. [`TelegramLimits::platform`]) posts into chats over Telegram's limits
//! get 429 with `retry_after`, counted in [`FakeTelegram::flood_refusals`]. For
//! load figures the fake keeps every post's time ([`FakeTelegram::posted`]) and
//! when `getUpdates` first returned each user message ([`FakeTelegram::handed_out`]).
//!
//! ```ignore
//! let telegram = FakeTelegram::start().await;
//! telegram.user_says(1001, "hello");
//! let sent = telegram.wait_for_sent(1, Duration::from_secs(60)).await;
//! assert_eq!(sent[0].text, "…");
//! ```

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use parking_lot::{Mutex, MutexGuard};
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

// `super`: `tests/it/support`, or the crate root of a target that includes this file by path.
use super::multipart;

/// The token the fake accepts; any other gets 401 Unauthorized.
pub const TOKEN: &str = "123456:fake-telegram-token";
/// The bot's user id and username.
pub const BOT_ID: i64 = 4242;
pub const BOT_USERNAME: &str = "bub_test_bot";

/// A fault for the next calls of one method.
#[derive(Debug, Clone)]
pub enum TelegramFault {
    /// 429 with `parameters.retry_after` in seconds.
    RetryAfter(u64),
    /// 400 with this description (e.g. "Bad Request: can't parse entities: …").
    BadRequest(String),
}

/// How long a call picked by [`FakeTelegram::hang_next`] waits for its answer: longer than any test.
const HANG: Duration = Duration::from_secs(3600);

/// A message the bot sent (`sendMessage`).
#[derive(Debug, Clone)]
pub struct SentMessage {
    pub chat_id: i64,
    pub message_id: i64,
    pub text: String,
    pub parse_mode: Option<String>,
    pub reply_to: Option<i64>,
}

/// A file the bot uploaded (`sendPhoto` or `sendDocument`).
#[derive(Debug, Clone)]
pub struct SentFile {
    /// `sendPhoto` or `sendDocument`.
    pub method: String,
    pub chat_id: i64,
    pub message_id: i64,
    pub file_name: String,
    pub bytes: Vec<u8>,
    pub caption: Option<String>,
    pub reply_to: Option<i64>,
}

/// Telegram's limits on uploads by a bot.
const MAX_UPLOAD_BYTES: usize = 50_000_000;
const MAX_PHOTO_BYTES: usize = 10_000_000;
const MAX_CAPTION_CHARS: usize = 1024;

/// One `setMyCommands`: the scope as sent (`{"type": "default"}` when none)
/// and the (command, description) pairs.
#[derive(Debug, Clone)]
pub struct MenuSet {
    pub scope: Value,
    pub commands: Vec<(String, String)>,
}

impl MenuSet {
    /// The scope's `type`: `default`, `chat`, `chat_member`, …
    pub fn scope_type(&self) -> &str {
        self.scope["type"].as_str().unwrap_or_default()
    }

    /// The command names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.commands.iter().map(|(name, _)| name.as_str()).collect()
    }
}

/// One `editMessageText`.
#[derive(Debug, Clone)]
pub struct Edit {
    pub chat_id: i64,
    pub message_id: i64,
    pub text: String,
}

#[derive(Default)]
struct State_ {
    updates: VecDeque<Value>,
    /// Every update ever queued, for [`FakeTelegram::redeliver_all`].
    delivered: Vec<Value>,
    next_update_id: i64,
    next_user_message_id: i64,
    next_bot_message_id: HashMap<i64, i64>,
    sent: Vec<SentMessage>,
    edits: Vec<Edit>,
    files: Vec<SentFile>,
    actions: Vec<(i64, String)>,
    calls: Vec<String>,
    offsets: Vec<i64>,
    faults: HashMap<String, VecDeque<TelegramFault>>,
    /// (method, text): the next such call takes effect and is answered only after [`HANG`].
    hangs: Vec<(String, String)>,
    /// Set by `setWebhook`, cleared by `deleteWebhook`; `getUpdates` fails meanwhile.
    webhook: Option<(String, String)>,
    /// Files users sent, by `file_id`: (file path, bytes).
    user_files: HashMap<String, (String, Vec<u8>)>,
    /// The file paths downloaded, in order.
    downloads: Vec<String>,
    /// The users' messages as last sent or edited, by (chat id, message id), for [`FakeTelegram::user_edits`].
    user_messages: HashMap<(i64, i64), Value>,
    menus: Vec<MenuSet>,
    /// Privacy mode on: `getMe` says `can_read_all_group_messages = false`.
    privacy_mode: bool,
    /// Telegram's flood limits, when enforced, and what they saw.
    flood: Flood,
    /// The `getUpdates` calls: who waits, who was overtaken.
    polls: Polls,
}

/// What the fake knows of the `getUpdates` calls.
#[derive(Default)]
struct Polls {
    /// Bumped by each call: a waiting poll whose number is not the latest was overtaken.
    latest: u64,
    /// Polls ended with 409 because another arrived while they waited.
    conflicts: usize,
    /// When each call arrived.
    arrived: Vec<Instant>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State_>,
    changed: Notify,
}

/// The running fake; stops with the test's runtime.
pub struct FakeTelegram {
    pub addr: std::net::SocketAddr,
    shared: Arc<Shared>,
}

fn lock(shared: &Shared) -> MutexGuard<'_, State_> {
    shared.state.lock()
}

impl FakeTelegram {
    pub async fn start() -> FakeTelegram {
        let shared = Arc::new(Shared::default());
        {
            let mut state = lock(&shared);
            state.next_update_id = 1;
            state.next_user_message_id = 1;
        }
        let app = Router::new()
            .route("/{bot}/{method}", post(handle))
            .route("/file/{bot}/{*path}", get(download))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the fake Telegram");
        let addr = listener.local_addr().expect("fake Telegram address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeTelegram { addr, shared }
    }

    /// The `api_url` to configure.
    pub fn api_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A private message from user `chat_id` (in a private chat the chat id is the user's id).
    pub fn user_says(&self, chat_id: i64, text: &str) -> i64 {
        let chat = json!({"id": chat_id, "type": "private", "first_name": format!("User{chat_id}")});
        self.push_message(chat, chat_id, text, json!({}))
    }

    /// A message in `chat` from user `from`; `extra` fields are merged into the message.
    /// Returns its message id.
    pub fn push_message(&self, chat: Value, from: i64, text: &str, extra: Value) -> i64 {
        let update = self.update(chat, from, text, extra);
        self.queue(update)
    }

    /// Queues an update for `getUpdates`; its message's id.
    fn queue(&self, update: Value) -> i64 {
        let message_id = update["message"]["message_id"].as_i64().unwrap_or_default();
        let mut state = lock(&self.shared);
        state.delivered.push(update.clone());
        state.updates.push_back(update);
        drop(state);
        self.shared.changed.notify_waiters();
        message_id
    }

    /// Keeps `bytes` as a file users can send; its `file_id`.
    pub fn add_file(&self, bytes: &[u8]) -> String {
        let mut state = lock(&self.shared);
        let id = format!("file-{}", state.user_files.len() + 1);
        let path = format!("documents/{id}.bin");
        state.user_files.insert(id.clone(), (path, bytes.to_vec()));
        id
    }

    /// A message with a file and no text (`fields`: `photo`, `document`, `voice`, `caption`…);
    /// its message id.
    pub fn push_media(&self, chat: Value, from: i64, fields: Value) -> i64 {
        let mut update = self.update(chat, from, "", fields);
        if let Some(message) = update["message"].as_object_mut() {
            message.remove("text");
        }
        self.queue(update)
    }

    /// A photo (`bytes`, in two sizes as Telegram sends them) from user `chat_id` in their
    /// private chat, with an optional caption; its message id.
    pub fn user_sends_photo(&self, chat_id: i64, caption: Option<&str>, bytes: &[u8]) -> i64 {
        let thumbnail = self.add_file(b"tiny");
        let full = self.add_file(bytes);
        let mut fields = json!({"photo": [
            {"file_id": thumbnail, "file_unique_id": "t", "width": 90, "height": 60, "file_size": 4},
            {"file_id": full, "file_unique_id": "f", "width": 1280, "height": 853, "file_size": bytes.len()},
        ]});
        if let Some(caption) = caption {
            fields["caption"] = json!(caption);
        }
        self.push_media(Self::private_chat(chat_id), chat_id, fields)
    }

    /// A document from user `chat_id` in their private chat; its message id.
    pub fn user_sends_document(&self, chat_id: i64, file_name: &str, mime_type: &str, bytes: &[u8]) -> i64 {
        let file_id = self.add_file(bytes);
        let document = json!({"file_id": file_id, "file_unique_id": "d", "file_name": file_name,
                              "mime_type": mime_type, "file_size": bytes.len()});
        self.push_media(Self::private_chat(chat_id), chat_id, json!({"document": document}))
    }

    fn private_chat(chat_id: i64) -> Value {
        json!({"id": chat_id, "type": "private", "first_name": format!("User{chat_id}")})
    }

    /// The file paths downloaded so far.
    pub fn downloads(&self) -> Vec<String> {
        lock(&self.shared).downloads.clone()
    }

    /// An update carrying a new message, as Telegram would send it, without queuing it
    /// (for webhook mode, where the test POSTs it itself).
    pub fn update(&self, chat: Value, from: i64, text: &str, extra: Value) -> Value {
        let mut state = lock(&self.shared);
        let message_id = state.next_user_message_id;
        state.next_user_message_id += 1;
        let mut message = json!({
            "message_id": message_id,
            "date": chrono::Utc::now().timestamp(),
            "chat": chat,
            "from": {"id": from, "is_bot": false, "first_name": format!("User{from}")},
            "text": text,
        });
        if let (Some(message), Some(extra)) = (message.as_object_mut(), extra.as_object()) {
            message.extend(extra.clone());
        }
        let chat_id = message["chat"]["id"].as_i64().unwrap_or_default();
        state.user_messages.insert((chat_id, message_id), message.clone());
        let update_id = state.next_update_id;
        state.next_update_id += 1;
        json!({"update_id": update_id, "message": message})
    }

    /// The user edits their message `message_id` in `chat_id` to `text`: queues an `edited_message`
    /// update like Telegram's (the whole message with its new text, no entities unless `extra` has
    /// them, and `edit_date`). Returns the update, e.g. to queue it again with [`FakeTelegram::push_update`].
    pub fn user_edits(&self, chat_id: i64, message_id: i64, text: &str, extra: Value) -> Value {
        let update = {
            let mut state = lock(&self.shared);
            let mut message = state
                .user_messages
                .get(&(chat_id, message_id))
                .cloned()
                .unwrap_or_else(|| panic!("the fake knows no user message {message_id} in chat {chat_id}"));
            if let Some(fields) = message.as_object_mut() {
                fields.remove("entities");
                fields.insert("text".into(), json!(text));
                fields.insert("edit_date".into(), json!(chrono::Utc::now().timestamp()));
                if let Some(extra) = extra.as_object() {
                    fields.extend(extra.clone());
                }
            }
            state.user_messages.insert((chat_id, message_id), message.clone());
            let update_id = state.next_update_id;
            state.next_update_id += 1;
            json!({"update_id": update_id, "edited_message": message})
        };
        self.push_update(update.clone());
        update
    }

    /// Queues `update` for `getUpdates` (a second time, if it was before: Telegram redelivers an
    /// update the bot did not confirm).
    pub fn push_update(&self, update: Value) {
        let mut state = lock(&self.shared);
        state.delivered.push(update.clone());
        state.updates.push_back(update);
        drop(state);
        self.shared.changed.notify_waiters();
    }

    /// Turns the bot's privacy mode on or off, as BotFather's /setprivacy does:
    /// `getMe` reports it. (The fake still delivers every message.)
    pub fn set_privacy_mode(&self, on: bool) {
        lock(&self.shared).privacy_mode = on;
    }

    /// Every accepted `setMyCommands`, in order.
    pub fn menus(&self) -> Vec<MenuSet> {
        lock(&self.shared).menus.clone()
    }

    /// The webhook set with `setWebhook` (url, secret token), if any.
    pub fn webhook(&self) -> Option<(String, String)> {
        lock(&self.shared).webhook.clone()
    }

    /// Queues again every update sent so far, as Telegram does when the bot
    /// crashed before confirming them (the next poll asks for an old offset).
    pub fn redeliver_all(&self) {
        let mut state = lock(&self.shared);
        let seen = state.delivered.clone();
        state.updates = seen.into_iter().collect();
        drop(state);
        self.shared.changed.notify_waiters();
    }

    /// The next `count` calls of `method` fail with `fault`.
    pub fn fail_next(&self, method: &str, fault: TelegramFault, count: usize) {
        let mut state = lock(&self.shared);
        let queue = state.faults.entry(method.to_string()).or_default();
        queue.extend(std::iter::repeat_n(fault, count));
    }

    /// The next call of `method` with this `text` takes effect, then its answer is held
    /// back for an hour: the bot's request is out when it is killed, and its result unknown to it.
    pub fn hang_next(&self, method: &str, text: &str) {
        lock(&self.shared).hangs.push((method.to_string(), text.to_string()));
    }

    pub fn sent(&self) -> Vec<SentMessage> {
        lock(&self.shared).sent.clone()
    }

    pub fn edits(&self) -> Vec<Edit> {
        lock(&self.shared).edits.clone()
    }

    /// The files uploaded by `sendPhoto` and `sendDocument`, in order.
    pub fn files(&self) -> Vec<SentFile> {
        lock(&self.shared).files.clone()
    }

    /// `sendChatAction` calls: (chat id, action).
    pub fn actions(&self) -> Vec<(i64, String)> {
        lock(&self.shared).actions.clone()
    }

    /// Every method called, in order (faults included).
    pub fn calls(&self) -> Vec<String> {
        lock(&self.shared).calls.clone()
    }

    /// The offsets `getUpdates` was asked for, in order.
    pub fn offsets(&self) -> Vec<i64> {
        lock(&self.shared).offsets.clone()
    }

    /// How many polls were ended with 409 "terminated by other getUpdates
    /// request": each is a moment when two processes polled the token at once.
    pub fn poll_conflicts(&self) -> usize {
        lock(&self.shared).polls.conflicts
    }

    /// When each `getUpdates` arrived, in order.
    pub fn polls_at(&self) -> Vec<Instant> {
        lock(&self.shared).polls.arrived.clone()
    }

    /// Waits until at least `count` messages were sent; returns them all.
    pub async fn wait_for_sent(&self, count: usize, timeout: Duration) -> Vec<SentMessage> {
        self.wait_until(timeout, |fake| fake.sent().len() >= count).await;
        self.sent()
    }

    /// Polls `done` every 20 ms until it holds or `timeout` passes; returns whether it held.
    pub async fn wait_until(&self, timeout: Duration, done: impl Fn(&FakeTelegram) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        while !done(self) {
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }
}

/// The text fields of a `multipart/form-data` body, as a JSON object of
/// strings, and its file parts.
fn form(body: &[u8], boundary: &str) -> (Value, Vec<multipart::Part>) {
    let mut fields = serde_json::Map::new();
    let mut files = Vec::new();
    for part in multipart::parse(body, boundary) {
        match part.filename {
            Some(_) => files.push(part),
            None => {
                fields.insert(part.name.clone(), Value::String(part.text()));
            }
        }
    }
    (Value::Object(fields), files)
}

/// The length Telegram checks against 4096: UTF-16 units of the text, after
/// tags are removed and entities decoded when it is HTML.
fn visible_units(text: &str, html: bool) -> usize {
    if !html {
        return text.encode_utf16().count();
    }
    let mut visible = String::new();
    let mut in_tag = false;
    for c in text.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            _ if !in_tag => visible.push(c),
            _ => {}
        }
    }
    let decoded = visible.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&amp;", "&");
    decoded.encode_utf16().count()
}

/// The Bot API methods the fake knows, as the docs spell them.
const METHODS: [&str; 11] = [
    "getMe",
    "deleteWebhook",
    "setWebhook",
    "getUpdates",
    "sendMessage",
    "editMessageText",
    "sendChatAction",
    "sendPhoto",
    "sendDocument",
    "getFile",
    "setMyCommands",
];

/// The largest file the Bot API hands out with `getFile`.
const MAX_GET_FILE_BYTES: usize = 20 * 1024 * 1024;

fn ok(result: Value) -> Response {
    Json(json!({"ok": true, "result": result})).into_response()
}

fn error(status: u16, description: &str, parameters: Option<Value>) -> Response {
    let mut body = json!({"ok": false, "error_code": status, "description": description});
    if let Some(parameters) = parameters {
        body["parameters"] = parameters;
    }
    let status = axum::http::StatusCode::from_u16(status).unwrap_or(axum::http::StatusCode::BAD_REQUEST);
    (status, Json(body)).into_response()
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    Path((bot, method)): Path<(String, String)>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if bot != format!("bot{TOKEN}") {
        return error(401, "Unauthorized", None);
    }
    let content_type = headers.get(axum::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    // teloxide sends methods that may carry a file (uploads, setWebhook's certificate) as multipart forms.
    let (params, uploads) = match multipart::boundary(content_type) {
        Some(boundary) => form(&body, &boundary),
        None => (serde_json::from_slice(&body).unwrap_or(json!({})), Vec::new()),
    };
    if body.len() > MAX_UPLOAD_BYTES {
        return error(413, "Request Entity Too Large", None);
    }
    // Telegram matches method names ignoring case (teloxide sends `GetMe`); calls are kept by their documented name.
    let method =
        METHODS.iter().find(|known| known.eq_ignore_ascii_case(&method)).map_or(method, |known| known.to_string());
    let fault = {
        let mut state = lock(&shared);
        state.calls.push(method.clone());
        state.faults.get_mut(&method).and_then(VecDeque::pop_front)
    };
    match fault {
        Some(TelegramFault::RetryAfter(seconds)) => {
            let description = format!("Too Many Requests: retry after {seconds}");
            return error(429, &description, Some(json!({"retry_after": seconds})));
        }
        Some(TelegramFault::BadRequest(description)) => return error(400, &description, None),
        None => {}
    }
    if let Some(refused) = flood_check(&shared, &method, &params) {
        return refused;
    }
    let response = match method.as_str() {
        "getMe" => ok(json!({
            "id": BOT_ID, "is_bot": true, "first_name": "Bub", "username": BOT_USERNAME,
            "can_join_groups": true, "can_read_all_group_messages": !lock(&shared).privacy_mode,
            "supports_inline_queries": false, "can_connect_to_business": false, "has_main_web_app": false
        })),
        "setMyCommands" => set_my_commands(&shared, &params),
        "deleteWebhook" => {
            lock(&shared).webhook = None;
            ok(json!(true))
        }
        "setWebhook" => {
            let url = params["url"].as_str().unwrap_or_default().to_string();
            let secret = params["secret_token"].as_str().unwrap_or_default().to_string();
            lock(&shared).webhook = Some((url, secret));
            ok(json!(true))
        }
        "getUpdates" if lock(&shared).webhook.is_some() => error(
            409,
            "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first",
            None,
        ),
        "getUpdates" => get_updates(&shared, &params).await,
        "sendMessage" => send_message(&shared, &params),
        "editMessageText" => edit_message_text(&shared, &params),
        "sendPhoto" | "sendDocument" => send_file(&shared, &method, &params, uploads),
        "getFile" => get_file(&shared, &params),
        "sendChatAction" => {
            let chat = params["chat_id"].as_i64().unwrap_or_default();
            let action = params["action"].as_str().unwrap_or_default().to_string();
            lock(&shared).actions.push((chat, action));
            ok(json!(true))
        }
        other => error(404, &format!("Not Found: method {other}"), None),
    };
    let text = params["text"].as_str().unwrap_or_default();
    let hang = {
        let mut state = lock(&shared);
        let picked = state.hangs.iter().position(|(m, t)| *m == method && t == text);
        picked.map(|index| state.hangs.remove(index)).is_some()
    };
    if hang {
        tokio::time::sleep(HANG).await;
    }
    response
}

fn get_file(shared: &Shared, params: &Value) -> Response {
    let id = params["file_id"].as_str().unwrap_or_default();
    let state = lock(shared);
    match state.user_files.get(id) {
        None => error(400, "Bad Request: invalid file_id", None),
        Some((_, bytes)) if bytes.len() > MAX_GET_FILE_BYTES => error(400, "Bad Request: file is too big", None),
        Some((path, bytes)) => {
            ok(json!({"file_id": id, "file_unique_id": "u", "file_size": bytes.len(), "file_path": path}))
        }
    }
}

/// `GET /file/bot<token>/<file_path>`: the bytes of a file `getFile` described.
async fn download(State(shared): State<Arc<Shared>>, Path((bot, path)): Path<(String, String)>) -> Response {
    if bot != format!("bot{TOKEN}") {
        return error(401, "Unauthorized", None);
    }
    let mut state = lock(&shared);
    let bytes = state.user_files.values().find(|(known, _)| *known == path).map(|(_, bytes)| bytes.clone());
    match bytes {
        Some(bytes) => {
            state.downloads.push(path);
            bytes.into_response()
        }
        None => error(404, "Not Found", None),
    }
}

async fn get_updates(shared: &Shared, params: &Value) -> Response {
    let mut offset = params["offset"].as_i64().unwrap_or(0);
    let wait = Duration::from_secs(params["timeout"].as_u64().unwrap_or(0).min(2));
    let ticket = {
        let mut state = lock(shared);
        state.offsets.push(offset);
        state.polls.arrived.push(Instant::now());
        state.polls.latest += 1;
        state.polls.latest
    };
    // Wakes a poll this one overtakes.
    shared.changed.notify_waiters();
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let changed = shared.changed.notified();
        {
            let mut state = lock(shared);
            if state.polls.latest != ticket {
                state.polls.conflicts += 1;
                let description =
                    "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running";
                return error(409, description, None);
            }
            // Asking for an offset confirms, and forgets, everything before it;
            // offset 0 (a fresh start) gets whatever is unconfirmed.
            if offset == 0 {
                offset = state.updates.front().and_then(|u| u["update_id"].as_i64()).unwrap_or(0);
            }
            while state.updates.front().is_some_and(|u| u["update_id"].as_i64().unwrap_or(0) < offset) {
                state.updates.pop_front();
            }
            if !state.updates.is_empty() {
                note_handed_out(&mut state);
                return ok(Value::Array(state.updates.iter().cloned().collect()));
            }
        }
        if tokio::time::timeout_at(deadline, changed).await.is_err() {
            return ok(json!([]));
        }
    }
}

fn bot_message(state: &mut State_, chat_id: i64, text: &str, chat_type: &str) -> Value {
    let next = state.next_bot_message_id.entry(chat_id).or_insert(1000);
    let message_id = *next;
    *next += 1;
    json!({
        "message_id": message_id,
        "date": chrono::Utc::now().timestamp(),
        "chat": {"id": chat_id, "type": chat_type, "title": "chat", "first_name": "User"},
        "from": {"id": BOT_ID, "is_bot": true, "first_name": "Bub", "username": BOT_USERNAME},
        "text": text,
    })
}

fn send_message(shared: &Shared, params: &Value) -> Response {
    let Some(chat_id) = params["chat_id"].as_i64() else {
        return error(400, "Bad Request: chat_id is empty", None);
    };
    let text = params["text"].as_str().unwrap_or_default().to_string();
    if text.is_empty() {
        return error(400, "Bad Request: message text is empty", None);
    }
    if visible_units(&text, params["parse_mode"].as_str() == Some("HTML")) > 4096 {
        return error(400, "Bad Request: message is too long", None);
    }
    let mut state = lock(shared);
    let chat_type = if chat_id > 0 { "private" } else { "supergroup" };
    let message = bot_message(&mut state, chat_id, &text, chat_type);
    state.sent.push(SentMessage {
        chat_id,
        message_id: message["message_id"].as_i64().unwrap_or_default(),
        text,
        parse_mode: params["parse_mode"].as_str().map(str::to_string),
        reply_to: params["reply_parameters"]["message_id"].as_i64(),
    });
    ok(message)
}

/// A number sent as a form field (text) or in JSON.
fn int(value: &Value) -> Option<i64> {
    value.as_i64().or_else(|| value.as_str()?.parse().ok())
}

/// `sendPhoto` / `sendDocument` with the file uploaded in the form field of
/// the method's media (`photo`, `document`), given directly or as `attach://<name>`.
fn send_file(shared: &Shared, method: &str, params: &Value, uploads: Vec<multipart::Part>) -> Response {
    let Some(chat_id) = int(&params["chat_id"]) else {
        return error(400, "Bad Request: chat_id is empty", None);
    };
    let field = if method == "sendPhoto" { "photo" } else { "document" };
    let attached =
        params[field].as_str().and_then(|value| value.strip_prefix("attach://")).unwrap_or(field).to_string();
    let Some(upload) = uploads.into_iter().find(|part| part.name == attached) else {
        return error(400, &format!("Bad Request: there is no {field} in the request"), None);
    };
    if method == "sendPhoto" && upload.body.len() > MAX_PHOTO_BYTES {
        return error(400, "Bad Request: PHOTO_SAVE_FILE_INVALID", None);
    }
    let caption = params["caption"].as_str().map(str::to_string);
    if caption.as_deref().is_some_and(|caption| caption.encode_utf16().count() > MAX_CAPTION_CHARS) {
        return error(400, "Bad Request: message caption is too long", None);
    }
    let mut state = lock(shared);
    let chat_type = if chat_id > 0 { "private" } else { "supergroup" };
    let mut message = bot_message(&mut state, chat_id, "", chat_type);
    let message_id = message["message_id"].as_i64().unwrap_or_default();
    let file_name = upload.filename.clone().unwrap_or_default();
    let meta = json!({"file_id": format!("file-{message_id}"), "file_unique_id": format!("u{message_id}"), "file_size": upload.body.len()});
    if let Some(fields) = message.as_object_mut() {
        fields.remove("text");
        if method == "sendPhoto" {
            let mut size = meta;
            size["width"] = json!(100);
            size["height"] = json!(100);
            fields.insert("photo".into(), json!([size]));
        } else {
            let mut document = meta;
            document["file_name"] = json!(file_name);
            fields.insert("document".into(), document);
        }
        if let Some(caption) = &caption {
            fields.insert("caption".into(), json!(caption));
        }
    }
    state.files.push(SentFile {
        method: method.to_string(),
        chat_id,
        message_id,
        file_name,
        bytes: upload.body,
        caption,
        reply_to: params["reply_parameters"]
            .as_str()
            .and_then(|text| serde_json::from_str::<Value>(text).ok())
            .or_else(|| Some(params["reply_parameters"].clone()))
            .and_then(|reply| int(&reply["message_id"])),
    });
    ok(message)
}

/// Telegram's rules: at most 100 commands, names 1–32 of `a-z 0-9 _`,
/// descriptions 1–256 characters; a scope naming a chat needs its id.
fn set_my_commands(shared: &Shared, params: &Value) -> Response {
    let Some(list) = params["commands"].as_array() else {
        return error(400, "Bad Request: commands must be an array", None);
    };
    if list.len() > 100 {
        return error(400, "Bad Request: too many commands", None);
    }
    let mut commands = Vec::new();
    for command in list {
        let name = command["command"].as_str().unwrap_or_default();
        let description = command["description"].as_str().unwrap_or_default();
        let valid_name = (1..=32).contains(&name.len())
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid_name {
            return error(400, "Bad Request: BOT_COMMAND_INVALID", None);
        }
        if !(1..=256).contains(&description.chars().count()) {
            return error(400, "Bad Request: BOT_COMMAND_DESCRIPTION_INVALID", None);
        }
        commands.push((name.to_string(), description.to_string()));
    }
    let scope = if params["scope"].is_object() { params["scope"].clone() } else { json!({"type": "default"}) };
    let needs_chat = matches!(scope["type"].as_str(), Some("chat" | "chat_administrators" | "chat_member"));
    if needs_chat && scope["chat_id"].is_null() {
        return error(400, "Bad Request: chat_id is empty", None);
    }
    if scope["type"] == "chat_member" && scope["user_id"].as_i64().is_none() {
        return error(400, "Bad Request: user_id is empty", None);
    }
    lock(shared).menus.push(MenuSet { scope, commands });
    ok(json!(true))
}

fn edit_message_text(shared: &Shared, params: &Value) -> Response {
    let (Some(chat_id), Some(message_id)) = (params["chat_id"].as_i64(), params["message_id"].as_i64()) else {
        return error(400, "Bad Request: message to edit not found", None);
    };
    let text = params["text"].as_str().unwrap_or_default().to_string();
    if visible_units(&text, params["parse_mode"].as_str() == Some("HTML")) > 4096 {
        return error(400, "Bad Request: MESSAGE_TOO_LONG", None);
    }
    let mut state = lock(shared);
    let Some(sent) = state.sent.iter().find(|sent| sent.chat_id == chat_id && sent.message_id == message_id) else {
        return error(400, "Bad Request: message to edit not found", None);
    };
    let last_edit = state.edits.iter().rev().find(|edit| edit.chat_id == chat_id && edit.message_id == message_id);
    let current = last_edit.map_or(&sent.text, |edit| &edit.text);
    if *current == text {
        let description = "Bad Request: message is not modified: specified new message content and reply markup \
                           are exactly the same as a current content and reply markup of the message";
        return error(400, description, None);
    }
    state.edits.push(Edit { chat_id, message_id, text: text.clone() });
    ok(json!({
        "message_id": message_id,
        "date": chrono::Utc::now().timestamp(),
        "edit_date": chrono::Utc::now().timestamp(),
        "chat": {"id": chat_id, "type": if chat_id > 0 { "private" } else { "supergroup" }, "title": "chat", "first_name": "User"},
        "from": {"id": BOT_ID, "is_bot": true, "first_name": "Bub", "username": BOT_USERNAME},
        "text": text,
    }))
}

// ---- Flood limits (off unless a test or bench turns them on) ----

/// A token bucket: up to `capacity` calls at once, refilled at `per_second`.
#[derive(Debug, Clone, Copy)]
pub struct Bucket {
    pub capacity: f64,
    pub per_second: f64,
}

/// The limits Telegram's flood control applies to what a bot posts into chats
/// (messages, edits and media; not chat actions). The Bot API FAQ asks for no
/// more than about one message per second in a chat, 20 per minute in a group,
/// and 30 per second overall; beyond them Telegram answers 429 with
/// `parameters.retry_after`.
#[derive(Debug, Clone, Copy)]
pub struct TelegramLimits {
    /// Any one chat.
    pub per_chat: Bucket,
    /// Any one group, supergroup or channel (negative chat ids), on top of `per_chat`.
    pub per_group: Bucket,
    /// The bot across all chats.
    pub overall: Bucket,
}

impl TelegramLimits {
    /// The FAQ's numbers: 1/s per chat with a burst of 3, 20/min per group, 30/s overall.
    pub fn platform() -> TelegramLimits {
        TelegramLimits {
            per_chat: Bucket { capacity: 3.0, per_second: 1.0 },
            per_group: Bucket { capacity: 20.0, per_second: 20.0 / 60.0 },
            overall: Bucket { capacity: 30.0, per_second: 30.0 },
        }
    }
}

/// 429s the fake's flood limits answered, by the limit that needed the longest wait.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FloodRefusals {
    pub per_chat: usize,
    pub per_group: usize,
    pub overall: usize,
}

impl FloodRefusals {
    pub fn total(&self) -> usize {
        self.per_chat + self.per_group + self.overall
    }
}

/// A post into a chat the flood limits let through (also recorded with limits off).
#[derive(Debug, Clone)]
pub struct Posted {
    #[allow(dead_code)] // read by benches/channel_load.rs only
    pub chat_id: i64,
    /// The method as called (e.g. `sendMessage`, `editMessageText`).
    pub method: String,
    pub at: Instant,
}

/// A user's message as first returned by `getUpdates` (for benches/channel_load.rs).
#[allow(dead_code)]
#[derive(Debug, Clone, Copy)]
pub struct HandedOut {
    pub chat_id: i64,
    pub message_id: i64,
    pub at: Instant,
}

/// A bucket's level at a moment.
#[derive(Debug, Clone, Copy)]
struct Level {
    tokens: f64,
    at: Instant,
}

impl Level {
    /// The level at `now`, refilled since `at`.
    fn refilled(self, bucket: Bucket, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        (self.tokens + elapsed * bucket.per_second).min(bucket.capacity)
    }
}

#[derive(Default)]
struct Flood {
    limits: Option<TelegramLimits>,
    chats: HashMap<i64, Level>,
    groups: HashMap<i64, Level>,
    overall: Option<Level>,
    refusals: FloodRefusals,
    posted: Vec<Posted>,
    handed_out: HashMap<(i64, i64), Instant>,
}

impl FakeTelegram {
    /// From now on, posts over `limits` get Telegram's 429 ("Too Many Requests:
    /// retry after N", `parameters.retry_after` N whole seconds).
    pub fn enforce_limits(&self, limits: TelegramLimits) {
        lock(&self.shared).flood.limits = Some(limits);
    }

    /// The 429s the flood limits answered so far.
    pub fn flood_refusals(&self) -> FloodRefusals {
        lock(&self.shared).flood.refusals
    }

    /// Every post into a chat that was let through, in order, with its time.
    pub fn posted(&self) -> Vec<Posted> {
        lock(&self.shared).flood.posted.clone()
    }

    /// Each user message `getUpdates` returned, with when it first did.
    #[allow(dead_code)] // benches/channel_load.rs's
    pub fn handed_out(&self) -> Vec<HandedOut> {
        let state = lock(&self.shared);
        let mut out: Vec<HandedOut> = state
            .flood
            .handed_out
            .iter()
            .map(|(&(chat_id, message_id), &at)| HandedOut { chat_id, message_id, at })
            .collect();
        out.sort_by_key(|handed| handed.at);
        out
    }
}

/// A chat id given as a number or a string (form fields are strings).
fn chat_id_param(params: &Value) -> Option<i64> {
    let value = &params["chat_id"];
    value.as_i64().or_else(|| value.as_str()?.parse().ok())
}

/// Methods that put something into a chat: what flood control counts.
fn posts_into_chat(method: &str) -> bool {
    let method = method.to_ascii_lowercase();
    (method.starts_with("send") && method != "sendchataction") || method.starts_with("edit")
}

/// Takes one call from `level` (created full) or says how long until there is room.
fn take(level: Option<Level>, bucket: Bucket, now: Instant) -> Result<Level, Duration> {
    let tokens = level.map_or(bucket.capacity, |level| level.refilled(bucket, now));
    if tokens >= 1.0 {
        Ok(Level { tokens: tokens - 1.0, at: now })
    } else {
        Err(Duration::from_secs_f64((1.0 - tokens) / bucket.per_second.max(f64::MIN_POSITIVE)))
    }
}

/// Applies the flood limits to a post; the 429 to answer when one ran out.
/// Records every post let through (with the time), limits on or off.
fn flood_check(shared: &Shared, method: &str, params: &Value) -> Option<Response> {
    if !posts_into_chat(method) {
        return None;
    }
    let chat_id = chat_id_param(params)?;
    let now = Instant::now();
    let mut state = lock(shared);
    let flood = &mut state.flood;
    if let Some(limits) = flood.limits {
        let chat = take(flood.chats.get(&chat_id).copied(), limits.per_chat, now);
        let group = (chat_id < 0).then(|| take(flood.groups.get(&chat_id).copied(), limits.per_group, now)).transpose();
        let overall = take(flood.overall, limits.overall, now);
        match (chat, group, overall) {
            (Ok(chat), Ok(group), Ok(overall)) => {
                flood.chats.insert(chat_id, chat);
                if let Some(group) = group {
                    flood.groups.insert(chat_id, group);
                }
                flood.overall = Some(overall);
            }
            (chat, group, overall) => {
                let waits = [chat.err(), group.err(), overall.err()];
                let (scope, wait) = waits
                    .iter()
                    .enumerate()
                    .filter_map(|(scope, wait)| Some((scope, (*wait)?)))
                    .max_by_key(|(_, wait)| *wait)
                    .unwrap_or((2, Duration::ZERO));
                match scope {
                    0 => flood.refusals.per_chat += 1,
                    1 => flood.refusals.per_group += 1,
                    _ => flood.refusals.overall += 1,
                }
                // Telegram says whole seconds, at least one.
                let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
                let description = format!("Too Many Requests: retry after {seconds}");
                return Some(error(429, &description, Some(json!({"retry_after": seconds}))));
            }
        }
    }
    flood.posted.push(Posted { chat_id, method: method.to_string(), at: now });
    None
}

/// Notes when each queued user message was first returned by `getUpdates`.
fn note_handed_out(state: &mut State_) {
    let now = Instant::now();
    for update in &state.updates {
        let message = &update["message"];
        if let (Some(chat_id), Some(message_id)) = (message["chat"]["id"].as_i64(), message["message_id"].as_i64()) {
            state.flood.handed_out.entry((chat_id, message_id)).or_insert(now);
        }
    }
}
