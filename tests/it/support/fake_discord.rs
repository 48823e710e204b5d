//! A fake Discord (REST API and gateway) on loopback, for the real Discord adapter (serenity).
//!
//! **REST.** serenity, built with `HttpBuilder::new(token).proxy(fake.proxy_url()).ratelimiter_disabled(true)`,
//! replaces `https://discord.com` in every URL with the proxy, so all calls arrive here as plain HTTP under
//! `/api/v10/…`, with `Authorization: Bot <token>`. The fake serves:
//!
//! | call                                         | route name       | answer                                 |
//! |----------------------------------------------|------------------|----------------------------------------|
//! | `GET /api/v10/gateway`                       | `gateway`        | `{"url": "ws://127.0.0.1:PORT/gateway"}` (no token needed) |
//! | `GET /api/v10/gateway/bot`                   | `gateway_bot`    | the url, the recommended shards (1, or [`FakeDiscord::set_shards`]), a session start limit (`max_concurrency` 1) |
//! | `GET /api/v10/users/@me`                     | `current_user`   | the bot's user                          |
//! | `POST /api/v10/channels/{c}/messages`        | `create_message` | the new message (author: the bot); JSON, or multipart with `payload_json` and `files[n]` |
//! | `PATCH /api/v10/channels/{c}/messages/{m}`   | `edit_message`   | the edited message                      |
//! | `POST /api/v10/channels/{c}/typing`          | `typing`         | 204                                     |
//! | `GET /api/v10/channels/{c}`                  | `get_channel`    | the channel: a thread (type 11, `parent_id`), a guild text channel (type 0), or 404 code 10003 |
//!
//! Slash commands (the global command list, interactions and their answers through the interaction's token)
//! are in `fake_discord/interactions.rs`: [`FakeDiscord::user_runs_command`], [`FakeDiscord::interaction`].
//!
//! Attached files live on a CDN-like route of the same server, `GET /cdn/attachments/{c}/{a}/{name}`
//! (Discord's is `https://cdn.discordapp.com/attachments/…`; with `api_url` set to the fake, the adapter
//! may fetch from it): [`FakeDiscord::attachment`] makes one for [`FakeDiscord::user_says`]'s
//! `"attachments"`, and [`FakeDiscord::cdn_downloads`] lists what was fetched. It needs no token, like the CDN.
//!
//! Anything else is recorded as `"METHOD path"` and answered 404. A wrong token gets 401
//! `{"message": "401: Unauthorized", "code": 0}`; bodies are checked like Discord does (empty message: 400
//! code 50006; content over 2000 characters or a reply to an unknown message: 400 code 50035; editing an
//! unknown message: 404 code 10008, someone else's: 403 code 50005; `allowed_mentions` with an unknown `parse`
//! value, or `parse: ["users"]` beside a `users` list: 400 code 50035; a file over 10 MiB, a bot's upload limit
//! without boosts: 413 code 40005). Messages may be multipart (`payload_json` + `files[n]`). Content length is counted in Unicode code
//! points, as Discord does (it accepts 2000 emoji). Each message's `allowed_mentions` is recorded as sent.
//! [`FakeDiscord::fail_next`] makes the next calls of a route fail (429, slowmode 429 code 20016, 500, 403 codes
//! 50001/50013/50007, 404 code 10003); [`FakeDiscord::refuse_channel`] refuses every call about one channel.
//!
//! **Rate limits** (`fake_discord/buckets.rs`). Like Discord, the fake limits calls by itself: per channel and
//! route for `create_message` and `edit_message` (5 per 5 s) and globally (50 per second), with the
//! `X-RateLimit-*` headers on every answer of those routes, successful ones too, and Discord's 429 (body
//! `retry_after`, `global`; `Retry-After`, `X-RateLimit-Scope`) when one runs out. Those 429s are counted
//! ([`FakeDiscord::self_made_429s`]): each one a call the client could have held back.
//! [`FakeDiscord::answered`] lists every REST answer with its status and time (for load figures: 429s,
//! sends per channel per second).
//! [`FakeDiscord::hang_next`] holds back the answer to a call that took effect (as when the bot dies
//! before it hears back).
//! Each new message records whom Discord would notify of it ([`SentMessage::pinged`]).
//!
//! **Gateway** (v10, uncompressed JSON text frames; serenity connects to `<url>?v=10`). On connect the fake
//! sends HELLO (op 10). IDENTIFY (op 2) with the right token gets a READY dispatch (op 0, `s` counting up per
//! session), then every message queued while no session was ready; a wrong token closes with 4004. HEARTBEAT
//! (op 1) gets HEARTBEAT_ACK (op 11). RESUME (op 6) of a known session replays the dispatches the client
//! missed, then RESUMED; of an unknown one, INVALID_SESSION (op 9, `d: false`). Undecodable JSON closes with
//! 4002, an unknown opcode with 4001, a second IDENTIFY with 4005, other ops before IDENTIFY with 4003, an
//! IDENTIFY asking for a disallowed intent ([`FakeDiscord::disallow_intents`]) with 4014.
//!
//! **Shards** (`fake_discord/shards.rs`). Connections may each IDENTIFY with `shard: [id, total]`; each
//! session gets its shard's dispatches only (a guild's by `(guild_id >> 22) % total`, direct messages on
//! shard 0), and the fake records which connection had which shard when, and any shard live on two
//! connections at once ([`FakeDiscord::shard_overlaps`]).
//!
//! **A session's life** (`fake_discord/protocol.rs`). What is said while a session has no connection is kept
//! for a RESUME of it only; a new IDENTIFY starts from now, as on Discord (so only a resume that works gets
//! them; before the very first session, dispatches wait for it). A client closing with 1000/1001 ends its
//! session. The fake can send RECONNECT (op 7), INVALID_SESSION (op 9, `d` true or false), ask for a heartbeat
//! (op 1), close every connection with a code (4007 and 4009 end the sessions), and play a dead network path
//! ([`FakeDiscord::go_silent`]); a connection without heartbeats for 3 intervals is closed.
//!
//! A user edits a message with [`FakeDiscord::user_edits`] (MESSAGE_UPDATE with the whole message and its
//! `edited_timestamp`); [`FakeDiscord::embeds_update`] sends the partial MESSAGE_UPDATE Discord sends when it
//! adds a link preview (no content, no `edited_timestamp`); [`FakeDiscord::dispatch_again`] delivers a dispatch
//! a second time, as a replay can. [`FakeDiscord::thread`] makes a channel a thread of a parent channel: its
//! messages carry the thread's id as `channel_id` (and no parent, like Discord's), `GET /channels/{thread}`
//! tells the parent.
//!
//! Like Discord, the fake dispatches MESSAGE_CREATE for the bot's own messages too (and MESSAGE_UPDATE for
//! its edits), so an adapter must ignore its own messages; and it honours intents: guild messages need
//! GUILD_MESSAGES (1 << 9), direct ones DIRECT_MESSAGES (1 << 12), and without MESSAGE_CONTENT (1 << 15) a
//! guild message's content is blanked unless it mentions the bot or is the bot's.
//!
//! ```ignore
//! let discord = FakeDiscord::start().await;
//! discord.user_says(CHANNEL, Some(GUILD), USER, "hello", json!({"mentions": [discord.bot_user()]}));
//! assert!(discord.wait_until(Duration::from_secs(20), |fake| !fake.sent().is_empty()).await);
//! ```

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::stream::SplitSink;
use futures::{SinkExt, StreamExt};
use parking_lot::{Mutex, MutexGuard};
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

#[path = "fake_discord/buckets.rs"]
mod buckets;
#[path = "fake_discord/interactions.rs"]
mod interactions;
#[path = "fake_discord/protocol.rs"]
mod protocol;
#[path = "fake_discord/shards.rs"]
mod shards;

pub use buckets::{RateLimitHit, RateLimits};
pub use shards::shard_of;

// `super`: `tests/it/support`, or the crate root of a target that includes this file by path.
use super::multipart;

/// The token the fake accepts (REST `Authorization: Bot <TOKEN>`, IDENTIFY `d.token` with or without `Bot `).
pub const TOKEN: &str = "fake-discord-token";
/// The bot's user id (also its application id).
pub const BOT_ID: u64 = 900_000_000_000_000_001;
/// The bot's username.
pub const BOT_NAME: &str = "bub-test";
/// The heartbeat interval HELLO announces: short, so heartbeats happen within a test.
pub const HEARTBEAT_INTERVAL_MS: u64 = 2_000;

/// Ids of messages (the users' and the bot's) count up from here.
const FIRST_MESSAGE_ID: u64 = 1_000_000_000_000_000_000;
/// Discord's limit on a message's content, in characters.
const MAX_CONTENT_CHARS: usize = 2000;
/// Discord's upload limit for a bot in a server without boosts.
const MAX_FILE_BYTES: usize = 10 * 1024 * 1024;
/// Dispatches a session keeps for replay on RESUME.
const REPLAY_LOG: usize = 1000;
const GUILD_MESSAGES: u64 = 1 << 9;
const DIRECT_MESSAGES: u64 = 1 << 12;
const MESSAGE_CONTENT: u64 = 1 << 15;
/// Discord's message types: a plain message, and a reply.
const TYPE_DEFAULT: u64 = 0;
const TYPE_REPLY: u64 = 19;

/// A fault for the next calls of one route.
#[derive(Debug, Clone)]
pub enum DiscordFault {
    /// 429 `{"message": "You are being rate limited.", "retry_after", "global"}` with `Retry-After`
    /// (whole seconds, rounded up, as Discord sends it), `X-RateLimit-Scope` and, if global, `X-RateLimit-Global`.
    RateLimited { retry_after_seconds: f64, global: bool },
    /// 500 `{"message": "500: Internal Server Error", "code": 0}`.
    #[allow(dead_code)] // only adapters/discord/tests/fake_handshake.rs sends it
    ServerError,
    /// 403 `{"message": "Missing Access", "code": 50001}`.
    #[allow(dead_code)] // only adapters/discord/tests/fake_handshake.rs sends it
    Forbidden,
    /// 403 `{"message": "Missing Permissions", "code": 50013}`: the bot may see the channel, not post in it.
    MissingPermissions,
    /// 403 `{"message": "Cannot send messages to this user", "code": 50007}`: DMs closed or no shared server.
    CannotMessageUser,
    /// 404 `{"message": "Unknown Channel", "code": 10003}`: deleted, or never visible to the bot.
    UnknownChannel,
    /// 429 `{"message": "…slowmode rate limit.", "code": 20016, "retry_after"}`: the channel's slowmode.
    Slowmode { retry_after_seconds: f64 },
}

/// Files uploaded with a message: (file name, bytes).
pub type Files = Vec<(String, Vec<u8>)>;

/// A message the bot created (`create_message`).
#[derive(Debug, Clone)]
pub struct SentMessage {
    pub channel_id: u64,
    pub message_id: u64,
    pub content: String,
    /// `message_reference.message_id` as the bot asked for it.
    pub reply_to: Option<u64>,
    /// `allowed_mentions` exactly as the bot sent it (None: not sent, so Discord's default, which pings).
    pub allowed_mentions: Option<Value>,
    /// Files uploaded with the message: (file name, bytes).
    pub files: Files,
    /// Who Discord would notify of this message: see [`pinged`].
    pub pinged: Vec<u64>,
}

/// One `edit_message`.
#[derive(Debug, Clone)]
pub struct Edit {
    #[allow(dead_code)] // read by adapters/discord/tests/fake_handshake.rs only
    pub channel_id: u64,
    pub message_id: u64,
    pub content: String,
    /// `allowed_mentions` exactly as the bot sent it with the edit.
    pub allowed_mentions: Option<Value>,
}

/// What the fake sends down one websocket.
enum Frame {
    Text(String),
    Close(u16, &'static str),
}

/// A gateway session: created by IDENTIFY, kept across connections for RESUME.
struct Session {
    id: String,
    intents: u64,
    /// `[id, total]`, as IDENTIFY asked.
    shard: [u64; 2],
    seq: u64,
    /// The last dispatches sent, as (seq, frame), to replay on RESUME.
    log: VecDeque<(u64, String)>,
}

impl Session {
    /// Sends dispatch `t` (numbered) down `tx` and logs it.
    fn dispatch(&mut self, tx: &mpsc::UnboundedSender<Frame>, t: &str, d: Value) {
        let frame = self.record(t, d);
        let _ = tx.send(Frame::Text(frame));
    }

    /// Numbers dispatch `t` and logs it for a RESUME, without sending it (the session has no connection).
    fn record(&mut self, t: &str, d: Value) -> String {
        self.seq += 1;
        let frame = json!({"op": 0, "s": self.seq, "t": t, "d": d}).to_string();
        if self.log.len() == REPLAY_LOG {
            self.log.pop_front();
        }
        self.log.push_back((self.seq, frame.clone()));
        frame
    }
}

/// One websocket; `session` is set once READY or RESUMED went down it.
struct Connection {
    tx: mpsc::UnboundedSender<Frame>,
    session: Option<Session>,
    /// A dead network path ([`FakeDiscord::go_silent`]): what the client sends is lost, nothing more is sent.
    silent: bool,
    /// When the client's last heartbeat arrived (at first: when it connected).
    last_heartbeat: Instant,
    /// A heartbeat request (op 1 from the fake) waits for the client's heartbeat.
    heartbeat_requested: bool,
}

#[derive(Default)]
struct State_ {
    next_message_id: u64,
    next_connection: u64,
    next_session: u64,
    connections: HashMap<u64, Connection>,
    /// Sessions whose connection closed, by session id, for RESUME.
    detached: HashMap<String, Session>,
    /// Dispatches (t, d) made before the first session of their shard was ready (a convenience: Discord
    /// would drop them).
    pending: Vec<(String, Value)>,
    /// Which connection had which shard (`fake_discord/shards.rs`).
    shards: shards::Shards,
    /// Every message, by id, as Discord would return it.
    messages: HashMap<u64, Value>,
    /// Guild of each channel a guild message was seen in.
    channel_guilds: HashMap<u64, u64>,
    /// Threads, by id: (parent channel, guild). See [`FakeDiscord::thread`].
    threads: HashMap<u64, (u64, u64)>,
    sent: Vec<SentMessage>,
    edits: Vec<Edit>,
    typing: Vec<u64>,
    calls: Vec<String>,
    identifies: Vec<Value>,
    resumes: Vec<Value>,
    heartbeats: usize,
    faults: HashMap<String, VecDeque<DiscordFault>>,
    /// Intents the application may not ask for (privileged ones not enabled in the Developer Portal).
    disallowed_intents: u64,
    /// Heartbeat requests (op 1 from the fake) the client answered.
    heartbeat_requests_answered: usize,
    buckets: buckets::Buckets,
    /// Channels where every call fails with the fault (the bot lost its permissions, the channel is gone).
    refused_channels: HashMap<u64, DiscordFault>,
    /// Calls refused that way, as (route name, channel id).
    refused: Vec<(String, u64)>,
    /// 429s the fake made from its own buckets.
    self_limited: Vec<RateLimitHit>,
    /// (route, content): the next such call takes effect and is answered only after [`HANG`].
    hangs: Vec<(String, String)>,
    /// Attached files on the CDN route, by path.
    cdn: HashMap<String, Vec<u8>>,
    /// CDN paths fetched, in order.
    cdn_downloads: Vec<String>,
    /// Every REST answer, for load figures (see [`FakeDiscord::answered`]).
    answered: Vec<Answered>,
    /// Application commands and interactions (`fake_discord/interactions.rs`).
    interactions: interactions::Interactions,
}

/// How long a call picked by [`FakeDiscord::hang_next`] waits for its answer: longer than any test.
const HANG: Duration = Duration::from_secs(3600);

struct Shared {
    state: Mutex<State_>,
    addr: SocketAddr,
    /// What HELLO announces; a connection without a heartbeat for [`HEARTBEAT_TIMEOUTS`] of these is closed.
    heartbeat_interval: Duration,
}

/// The running fake; the server stops when it is dropped (or with the test's runtime).
pub struct FakeDiscord {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

fn lock(shared: &Shared) -> MutexGuard<'_, State_> {
    shared.state.lock()
}

impl Drop for FakeDiscord {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeDiscord {
    pub async fn start() -> FakeDiscord {
        FakeDiscord::start_with_heartbeat_interval(Duration::from_millis(HEARTBEAT_INTERVAL_MS)).await
    }

    /// A fake whose HELLO announces `interval` instead of [`HEARTBEAT_INTERVAL_MS`] (a long one: the
    /// client's own heartbeats do not come within a test, so one that comes answers the fake's request).
    pub async fn start_with_heartbeat_interval(interval: Duration) -> FakeDiscord {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the fake Discord");
        let addr = listener.local_addr().expect("fake Discord address");
        let state = State_ { next_message_id: FIRST_MESSAGE_ID, ..State_::default() };
        let shared = Arc::new(Shared { state: Mutex::new(state), addr, heartbeat_interval: interval });
        let app = Router::new()
            .route("/gateway", get(gateway))
            .route("/", get(gateway))
            .route("/cdn/{*path}", get(cdn))
            .fallback(rest)
            .layer(axum::middleware::from_fn_with_state(shared.clone(), note_answer))
            .with_state(shared.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeDiscord { addr, shared, server }
    }

    /// "http://127.0.0.1:PORT", for `HttpBuilder::proxy`.
    pub fn proxy_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A gateway config with one Discord channel `dc` on this fake, logging in with `token`,
    /// debouncing briefly and answering everyone (tests about the channel; who is answered by
    /// default is `tests/it/red_team/pairing.rs`'s).
    pub fn open_config(&self, token: &str) -> String {
        format!(
            "[policy.defaults]\ndebounce = {{ quiet_seconds = 0.1 }}\n\
             dm_policy = \"open\"\ngroup_policy = \"open\"\n\n\
             [channels.dc]\nkind = \"discord\"\ntoken = \"{token}\"\napi_url = \"{}\"\n",
            self.proxy_url()
        )
    }

    /// A message in a guild text channel (`guild_id` Some) or a DM channel (None) from user `author_id`,
    /// dispatched as MESSAGE_CREATE to every ready gateway session (or queued until one is); `extra` fields
    /// (a JSON object) are merged into the message, e.g. `"mentions": [bot_user()]` or `"referenced_message"`.
    /// Returns the message id.
    pub fn user_says(
        &self,
        channel_id: u64,
        guild_id: Option<u64>,
        author_id: u64,
        content: &str,
        extra: Value,
    ) -> u64 {
        let mut state = lock(&self.shared);
        let (id, mut message) = user_message(&mut state, channel_id, guild_id, author_id, content);
        if let (Some(message), Value::Object(extra)) = (message.as_object_mut(), extra) {
            message.extend(extra);
        }
        state.messages.insert(id, message.clone());
        broadcast(&mut state, "MESSAGE_CREATE", message);
        id
    }

    /// A message written while the bot was disconnected: kept in the channel's
    /// history (`GET /channels/{c}/messages`) but never dispatched, as Discord
    /// starts a new session from now. Returns the message id.
    pub fn written_while_offline(&self, channel_id: u64, guild_id: Option<u64>, author_id: u64, content: &str) -> u64 {
        let mut state = lock(&self.shared);
        let (id, message) = user_message(&mut state, channel_id, guild_id, author_id, content);
        state.messages.insert(id, message);
        id
    }

    /// An attached file with these bytes, served on the CDN route: the attachment object for
    /// `user_says(…, json!({"attachments": [..]}))`, with its real size.
    pub fn attachment(&self, channel_id: u64, filename: &str, content_type: Option<&str>, bytes: &[u8]) -> Value {
        let mut state = lock(&self.shared);
        let id = next_message_id(&mut state);
        // Discord keeps the name in the URL percent-encoded; the fake names the path by the id alone.
        let path = format!("attachments/{channel_id}/{id}/file");
        state.cdn.insert(path.clone(), bytes.to_vec());
        let url = format!("http://{}/cdn/{path}?ex=1&is=2&hm=3", self.addr);
        let mut attachment = json!({"id": id.to_string(), "filename": filename, "size": bytes.len(),
                                    "url": url, "proxy_url": url});
        if let Some(content_type) = content_type {
            attachment["content_type"] = json!(content_type);
        }
        attachment
    }

    /// The CDN paths fetched so far.
    pub fn cdn_downloads(&self) -> Vec<String> {
        lock(&self.shared).cdn_downloads.clone()
    }

    /// The bot's user object (e.g. for `"mentions": [bot_user()]`).
    pub fn bot_user(&self) -> Value {
        bot_user_json()
    }

    pub fn sent(&self) -> Vec<SentMessage> {
        lock(&self.shared).sent.clone()
    }

    pub fn edits(&self) -> Vec<Edit> {
        lock(&self.shared).edits.clone()
    }

    /// Channel ids typing was triggered in, in order.
    pub fn typing(&self) -> Vec<u64> {
        lock(&self.shared).typing.clone()
    }

    /// REST calls in order, failed ones included, by route name (`create_message`, `edit_message`, `typing`,
    /// `current_user`, `gateway`, `gateway_bot`), others as `"METHOD path"`.
    pub fn calls(&self) -> Vec<String> {
        lock(&self.shared).calls.clone()
    }

    /// The next `count` calls of `route` (a route name, see [`FakeDiscord::calls`]) fail with `fault`.
    pub fn fail_next(&self, route: &str, fault: DiscordFault, count: usize) {
        let mut state = lock(&self.shared);
        state.faults.entry(route.to_string()).or_default().extend(std::iter::repeat_n(fault, count));
    }

    /// From now on every call about `channel_id` fails with `fault`, as Discord refuses a channel the bot
    /// may not post in (50013), a user who takes no DMs (50007) or a deleted channel (10003).
    pub fn refuse_channel(&self, channel_id: u64, fault: DiscordFault) {
        lock(&self.shared).refused_channels.insert(channel_id, fault);
    }

    /// Calls [`FakeDiscord::refuse_channel`] refused, as (route name, channel id), in order.
    pub fn refused_calls(&self) -> Vec<(String, u64)> {
        lock(&self.shared).refused.clone()
    }

    /// Replaces the fake's own rate limits (see [`RateLimits`]; Discord's by default), with fresh buckets.
    pub fn set_rate_limits(&self, limits: RateLimits) {
        lock(&self.shared).buckets.set_limits(limits);
    }

    /// The 429s the fake answered from its own buckets, in order: each one a call the client could have
    /// held back (the headers said the bucket was empty).
    pub fn self_made_429s(&self) -> Vec<RateLimitHit> {
        lock(&self.shared).self_limited.clone()
    }

    /// The next call of `route` whose `content` is `content` takes effect, then its answer is held back for
    /// an hour: the bot's request is out when it is killed, and its result unknown to it.
    pub fn hang_next(&self, route: &str, content: &str) {
        lock(&self.shared).hangs.push((route.to_string(), content.to_string()));
    }

    /// IDENTIFY payloads received so far (their `d`), wrong tokens included.
    pub fn identifies(&self) -> Vec<Value> {
        lock(&self.shared).identifies.clone()
    }

    /// Heartbeats received so far (each was acknowledged).
    pub fn heartbeats(&self) -> usize {
        lock(&self.shared).heartbeats
    }

    /// Closes every gateway websocket with 4000 (Unknown error), so the client must reconnect; sessions stay
    /// resumable, and what is said until the client resumes is replayed to it then (and only then).
    pub fn disconnect_all(&self) {
        self.close_all(4000, "Unknown error");
    }

    /// Makes `thread_id` a public thread of channel `parent_id` in `guild_id`; say something in it with
    /// [`FakeDiscord::user_says`]`(thread_id, Some(guild_id), …)`.
    pub fn thread(&self, thread_id: u64, parent_id: u64, guild_id: u64) {
        let mut state = lock(&self.shared);
        state.threads.insert(thread_id, (parent_id, guild_id));
        state.channel_guilds.insert(thread_id, guild_id);
        state.channel_guilds.insert(parent_id, guild_id);
    }

    /// The user edits their message `message_id` to `content`: the stored message changes and MESSAGE_UPDATE
    /// is dispatched with the whole message and its `edited_timestamp`, as Discord does. Returns the dispatch's
    /// `d` (for [`FakeDiscord::dispatch_again`]).
    pub fn user_edits(&self, message_id: u64, content: &str) -> Value {
        let mut state = lock(&self.shared);
        let Some(mut message) = state.messages.get(&message_id).cloned() else {
            panic!("the fake knows no message {message_id}");
        };
        if let Some(fields) = message.as_object_mut() {
            fields.insert("content".to_string(), json!(content));
            fields.insert("edited_timestamp".to_string(), json!(now()));
        }
        state.messages.insert(message_id, message.clone());
        broadcast(&mut state, "MESSAGE_UPDATE", message.clone());
        message
    }

    /// The partial MESSAGE_UPDATE Discord sends when it adds a link preview to message `message_id`: its
    /// ids and `embeds` only (no content, author or `edited_timestamp`).
    pub fn embeds_update(&self, message_id: u64) {
        let mut state = lock(&self.shared);
        let Some(message) = state.messages.get(&message_id).cloned() else {
            panic!("the fake knows no message {message_id}");
        };
        let mut update = json!({
            "id": message["id"], "channel_id": message["channel_id"],
            "embeds": [{"type": "link", "url": "https://example.org/", "title": "Example"}],
        });
        if let (Some(guild), Some(fields)) = (message.get("guild_id"), update.as_object_mut()) {
            fields.insert("guild_id".to_string(), guild.clone());
        }
        broadcast(&mut state, "MESSAGE_UPDATE", update);
    }

    /// Dispatches `t` with `d` once more to every ready session (Discord may deliver an event twice).
    pub fn dispatch_again(&self, t: &str, d: Value) {
        broadcast(&mut lock(&self.shared), t, d);
    }

    /// Polls `done` every 20 ms until it holds or `timeout` passes; returns whether it held.
    pub async fn wait_until(&self, timeout: Duration, done: impl Fn(&FakeDiscord) -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while !done(self) {
            if tokio::time::Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }
}

// ---- JSON shapes ----

fn gateway_url(addr: SocketAddr) -> String {
    format!("ws://{addr}/gateway")
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, false)
}

/// `GET /cdn/{path}`: an attached file's bytes.
async fn cdn(State(shared): State<Arc<Shared>>, axum::extract::Path(path): axum::extract::Path<String>) -> Response {
    let mut state = lock(&shared);
    match state.cdn.get(&path).cloned() {
        Some(bytes) => {
            state.cdn_downloads.push(path);
            bytes.into_response()
        }
        None => (StatusCode::NOT_FOUND, "404: Not Found").into_response(),
    }
}

fn next_message_id(state: &mut State_) -> u64 {
    state.next_message_id += 1;
    state.next_message_id
}

/// A new message from user `author_id` in `channel_id` (of `guild_id`, if any), and its id.
fn user_message(
    state: &mut State_,
    channel_id: u64,
    guild_id: Option<u64>,
    author_id: u64,
    content: &str,
) -> (u64, Value) {
    let id = next_message_id(state);
    let author = user_json(author_id, &format!("user{author_id}"), false);
    let mut message = message_json(id, channel_id, author, content);
    if let Some(guild_id) = guild_id {
        state.channel_guilds.insert(channel_id, guild_id);
        set_guild(&mut message, guild_id);
    }
    (id, message)
}

fn user_json(id: u64, name: &str, bot: bool) -> Value {
    json!({
        "id": id.to_string(), "username": name, "discriminator": "0", "global_name": null,
        "avatar": null, "bot": bot, "public_flags": 0,
    })
}

fn bot_user_json() -> Value {
    user_json(BOT_ID, BOT_NAME, true)
}

/// The user `GET /users/@me` and READY describe.
fn current_user_json() -> Value {
    let mut user = bot_user_json();
    if let Some(fields) = user.as_object_mut() {
        fields.extend([
            ("verified".to_string(), json!(true)),
            ("mfa_enabled".to_string(), json!(false)),
            ("flags".to_string(), json!(0)),
            ("email".to_string(), Value::Null),
        ]);
    }
    user
}

fn message_json(id: u64, channel_id: u64, author: Value, content: &str) -> Value {
    json!({
        "id": id.to_string(), "channel_id": channel_id.to_string(), "author": author, "content": content,
        "timestamp": now(), "edited_timestamp": null, "tts": false, "mention_everyone": false,
        "mentions": [], "mention_roles": [], "attachments": [], "embeds": [], "components": [],
        "pinned": false, "type": TYPE_DEFAULT, "flags": 0,
    })
}

/// Marks a message as sent in `guild_id`, with the author's (partial) member, as gateway dispatches carry.
fn set_guild(message: &mut Value, guild_id: u64) {
    if let Some(fields) = message.as_object_mut() {
        fields.insert("guild_id".to_string(), json!(guild_id.to_string()));
        fields.insert(
            "member".to_string(),
            json!({
                "roles": [], "joined_at": "2024-01-01T00:00:00.000000+00:00", "deaf": false, "mute": false,
                "flags": 0, "nick": null, "pending": false, "premium_since": null, "avatar": null,
            }),
        );
    }
}

fn error_json(message: &str, code: u64) -> Value {
    json!({"message": message, "code": code})
}

// ---- the gateway ----

/// Sends dispatch `t` to every ready session of its shard, and logs it in every resumable one of its shard
/// without a connection (a RESUME replays it; a new IDENTIFY does not get it, as on Discord). Before the
/// first session of its shard ever, it is queued for that session instead.
fn broadcast(state: &mut State_, t: &str, d: Value) {
    for connection in state.connections.values_mut() {
        if let Some(session) = connection.session.as_mut()
            && shards::routes_to(session.shard, &d)
            && let Some(d) = visible(session.intents, t, &d)
        {
            session.dispatch(&connection.tx, t, d);
        }
    }
    for session in state.detached.values_mut() {
        if shards::routes_to(session.shard, &d)
            && let Some(d) = visible(session.intents, t, &d)
        {
            session.record(t, d);
        }
    }
    if state.shards.unseen(&d) {
        state.pending.push((t.to_string(), d));
    }
}

/// What a session with `intents` gets of dispatch `t`: message events need the guild or DM intent, and
/// without MESSAGE_CONTENT a guild message not from or mentioning the bot comes without its content.
fn visible(intents: u64, t: &str, d: &Value) -> Option<Value> {
    if !t.starts_with("MESSAGE_") {
        return Some(d.clone());
    }
    let in_guild = d.get("guild_id").is_some_and(|guild| !guild.is_null());
    let needed = if in_guild { GUILD_MESSAGES } else { DIRECT_MESSAGES };
    if intents & needed == 0 {
        return None;
    }
    let bot_id = BOT_ID.to_string();
    let is_bot = |user: &Value| user.get("id").and_then(Value::as_str) == Some(bot_id.as_str());
    let from_bot = d.get("author").is_some_and(is_bot);
    let mentions_bot = d.get("mentions").and_then(Value::as_array).is_some_and(|users| users.iter().any(is_bot));
    let mut d = d.clone();
    if in_guild
        && intents & MESSAGE_CONTENT == 0
        && !from_bot
        && !mentions_bot
        && let Some(fields) = d.as_object_mut()
    {
        fields.insert("content".to_string(), json!(""));
        for field in ["embeds", "attachments", "components"] {
            fields.insert(field.to_string(), json!([]));
        }
    }
    Some(d)
}

/// Makes `session` the ready session of connection `id`: sends `t` (READY or RESUMED), then whatever was
/// queued for its shard meanwhile. False if the connection is gone.
fn go_live(state: &mut State_, id: u64, mut session: Session, t: &str, d: Value) -> bool {
    if !state.connections.contains_key(&id) {
        state.detached.insert(session.id.clone(), session);
        return false;
    }
    shards::going_live(state, id, session.shard);
    let (mine, others) =
        std::mem::take(&mut state.pending).into_iter().partition(|(_, d)| shards::routes_to(session.shard, d));
    state.pending = others;
    let Some(connection) = state.connections.get_mut(&id) else {
        return false;
    };
    session.dispatch(&connection.tx, t, d);
    for (t, d) in mine {
        if let Some(d) = visible(session.intents, &t, &d) {
            session.dispatch(&connection.tx, &t, d);
        }
    }
    connection.session = Some(session);
    true
}

/// Keeps a closed connection's session for RESUME.
fn detach(state: &mut State_, connection: Connection) {
    if let Some(session) = connection.session {
        state.detached.insert(session.id.clone(), session);
    }
}

/// Closes connection `id` with `code`; returns false (stop reading it).
fn close(state: &mut State_, id: u64, code: u16, reason: &'static str) -> bool {
    if let Some(connection) = state.connections.remove(&id) {
        let _ = connection.tx.send(Frame::Close(code, reason));
        detach(state, connection);
    }
    false
}

fn token_ok(token: Option<&Value>) -> bool {
    let token = token.and_then(Value::as_str).unwrap_or_default();
    token.strip_prefix("Bot ").unwrap_or(token) == TOKEN
}

async fn gateway(State(shared): State<Arc<Shared>>, upgrade: WebSocketUpgrade) -> Response {
    upgrade.on_upgrade(move |socket| run_connection(shared, socket))
}

/// Serves one websocket: a writer task sends queued frames; this task reads the client's.
async fn run_connection(shared: Arc<Shared>, socket: WebSocket) {
    let (sink, mut stream) = socket.split();
    let (tx, rx) = mpsc::unbounded_channel();
    let id = {
        let mut state = lock(&shared);
        state.next_connection += 1;
        let id = state.next_connection;
        let connection = Connection {
            tx: tx.clone(),
            session: None,
            silent: false,
            last_heartbeat: Instant::now(),
            heartbeat_requested: false,
        };
        state.connections.insert(id, connection);
        id
    };
    let interval_ms = u64::try_from(shared.heartbeat_interval.as_millis()).unwrap_or(u64::MAX);
    let hello = json!({"op": 10, "d": {"heartbeat_interval": interval_ms}, "s": null, "t": null});
    let _ = tx.send(Frame::Text(hello.to_string()));
    drop(tx);
    let mut writer = tokio::spawn(write_frames(sink, rx));
    let reader = async {
        while let Some(Ok(message)) = stream.next().await {
            if !on_message(&shared, id, message) {
                break;
            }
        }
    };
    let writer_done = tokio::select! {
        _ = reader => false,
        _ = &mut writer => true,
        () = protocol::heartbeat_watchdog(&shared, id) => {
            // a dead path: no close frame gets through, the TCP connection just ends
            writer.abort();
            true
        }
    };
    {
        let mut state = lock(&shared);
        if let Some(connection) = state.connections.remove(&id) {
            detach(&mut state, connection);
        }
    }
    // The connection's sender is gone: the writer sends what is queued (a close frame, say) and ends.
    if !writer_done && tokio::time::timeout(Duration::from_secs(5), &mut writer).await.is_err() {
        writer.abort();
    }
}

async fn write_frames(mut sink: SplitSink<WebSocket, WsMessage>, mut rx: mpsc::UnboundedReceiver<Frame>) {
    while let Some(frame) = rx.recv().await {
        match frame {
            Frame::Text(text) => {
                if sink.send(WsMessage::Text(text.into())).await.is_err() {
                    return;
                }
            }
            Frame::Close(code, reason) => {
                let _ = sink.send(WsMessage::Close(Some(CloseFrame { code, reason: reason.into() }))).await;
                return;
            }
        }
    }
}

/// Handles one frame from the client; false to stop reading.
fn on_message(shared: &Shared, id: u64, message: WsMessage) -> bool {
    let mut state = lock(shared);
    if state.connections.get(&id).is_some_and(|connection| connection.silent) {
        return true;
    }
    match message {
        WsMessage::Text(text) => on_payload(&mut state, shared.addr, id, text.as_str()),
        WsMessage::Binary(_) => close(&mut state, id, 4002, "Decode error"),
        WsMessage::Close(frame) => protocol::client_closed(&mut state, id, frame.map(|frame| frame.code)),
        WsMessage::Ping(_) | WsMessage::Pong(_) => true,
    }
}

fn on_payload(state: &mut State_, addr: SocketAddr, id: u64, text: &str) -> bool {
    let Ok(payload) = serde_json::from_str::<Value>(text) else {
        return close(state, id, 4002, "Decode error");
    };
    let Some(connection) = state.connections.get(&id) else {
        return false;
    };
    let ready = connection.session.is_some();
    let d = payload.get("d").cloned().unwrap_or(Value::Null);
    match payload.get("op").and_then(Value::as_u64) {
        Some(1) => protocol::heartbeat(state, id),
        Some(2) if ready => close(state, id, 4005, "Already authenticated"),
        Some(2) => identify(state, addr, id, d),
        Some(6) => resume(state, id, &d),
        // presence update, voice state update, request guild members: accepted, ignored
        Some(3 | 4 | 8) if ready => true,
        Some(3 | 4 | 8) => close(state, id, 4003, "Not authenticated"),
        _ => close(state, id, 4001, "Unknown opcode"),
    }
}

fn identify(state: &mut State_, addr: SocketAddr, id: u64, d: Value) -> bool {
    state.identifies.push(d.clone());
    if !token_ok(d.get("token")) {
        return close(state, id, 4004, "Authentication failed");
    }
    let Some(intents) = d.get("intents").and_then(Value::as_u64) else {
        return close(state, id, 4013, "Invalid intent(s)");
    };
    if intents & state.disallowed_intents != 0 {
        return close(state, id, 4014, "Disallowed intent(s)");
    }
    let Some(shard) = shards::requested(&d) else {
        return close(state, id, 4010, "Invalid shard");
    };
    state.next_session += 1;
    let session_id = format!("fake-session-{}", state.next_session);
    let ready = json!({
        "v": 10, "user": current_user_json(), "guilds": [], "session_id": session_id,
        "resume_gateway_url": gateway_url(addr), "shard": shard,
        "application": {"id": BOT_ID.to_string(), "flags": 0},
        "private_channels": [], "presences": [], "relationships": [], "user_settings": {}, "_trace": [],
    });
    let session = Session { id: session_id, intents, shard, seq: 0, log: VecDeque::new() };
    go_live(state, id, session, "READY", ready)
}

/// RESUME of a known session replays what the client missed (after its `seq`) and answers RESUMED;
/// otherwise INVALID_SESSION (not resumable), after which the client identifies anew.
fn resume(state: &mut State_, id: u64, d: &Value) -> bool {
    state.resumes.push(d.clone());
    if !token_ok(d.get("token")) {
        return close(state, id, 4004, "Authentication failed");
    }
    let known =
        d.get("session_id").and_then(Value::as_str).and_then(|session_id| protocol::take_session(state, session_id));
    let Some(session) = known else {
        if let Some(connection) = state.connections.get(&id) {
            let invalid = json!({"op": 9, "d": false, "s": null, "t": null});
            let _ = connection.tx.send(Frame::Text(invalid.to_string()));
        }
        return true;
    };
    let Some(connection) = state.connections.get(&id) else {
        state.detached.insert(session.id.clone(), session);
        return false;
    };
    let seen = d.get("seq").and_then(Value::as_u64).unwrap_or(0);
    for (_, frame) in session.log.iter().filter(|(seq, _)| *seq > seen) {
        let _ = connection.tx.send(Frame::Text(frame.clone()));
    }
    go_live(state, id, session, "RESUMED", json!({}))
}

// ---- REST ----

/// The REST routes the fake serves.
enum Route {
    Gateway,
    GatewayBot,
    CurrentUser,
    CreateMessage {
        channel_id: u64,
    },
    EditMessage {
        channel_id: u64,
        message_id: u64,
    },
    Typing {
        channel_id: u64,
    },
    History {
        channel_id: u64,
    },
    GetChannel {
        channel_id: u64,
    },
    /// Application commands and answers to interactions (`fake_discord/interactions.rs`).
    Interactions(interactions::Call),
    Unknown,
}

impl Route {
    fn parse(method: &Method, path: &str) -> Route {
        let Some(rest) = path.strip_prefix("/api/v10/") else {
            return Route::Unknown;
        };
        let segments: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
        let id = |index: usize| segments.get(index).and_then(|segment| segment.parse::<u64>().ok());
        if let Some(call) = interactions::Call::parse(method, &segments) {
            return Route::Interactions(call);
        }
        match (method.as_str(), segments.as_slice()) {
            ("GET", ["gateway"]) => Route::Gateway,
            ("GET", ["gateway", "bot"]) => Route::GatewayBot,
            ("GET", ["users", "@me"]) => Route::CurrentUser,
            ("POST", ["channels", _, "messages"]) => {
                id(1).map_or(Route::Unknown, |channel_id| Route::CreateMessage { channel_id })
            }
            ("PATCH", ["channels", _, "messages", _]) => match (id(1), id(3)) {
                (Some(channel_id), Some(message_id)) => Route::EditMessage { channel_id, message_id },
                _ => Route::Unknown,
            },
            ("GET", ["channels", _, "messages"]) => {
                id(1).map_or(Route::Unknown, |channel_id| Route::History { channel_id })
            }
            ("GET", ["channels", _]) => id(1).map_or(Route::Unknown, |channel_id| Route::GetChannel { channel_id }),
            ("POST", ["channels", _, "typing"]) => {
                id(1).map_or(Route::Unknown, |channel_id| Route::Typing { channel_id })
            }
            _ => Route::Unknown,
        }
    }

    /// The channel a call is about, for the per-channel buckets.
    fn channel_id(&self) -> Option<u64> {
        match self {
            Route::CreateMessage { channel_id } | Route::EditMessage { channel_id, .. } => Some(*channel_id),
            Route::Typing { channel_id } | Route::History { channel_id } | Route::GetChannel { channel_id } => {
                Some(*channel_id)
            }
            Route::Gateway | Route::GatewayBot | Route::CurrentUser | Route::Interactions(_) | Route::Unknown => None,
        }
    }

    fn name(&self, method: &Method, path: &str) -> String {
        match self {
            Route::Gateway => "gateway".to_string(),
            Route::GatewayBot => "gateway_bot".to_string(),
            Route::CurrentUser => "current_user".to_string(),
            Route::CreateMessage { .. } => "create_message".to_string(),
            Route::EditMessage { .. } => "edit_message".to_string(),
            Route::Typing { .. } => "typing".to_string(),
            Route::History { .. } => "history".to_string(),
            Route::GetChannel { .. } => "get_channel".to_string(),
            Route::Interactions(call) => call.name().to_string(),
            Route::Unknown => format!("{method} {path}"),
        }
    }
}

fn respond(status: StatusCode, body: Value) -> Response {
    (status, Json(body)).into_response()
}

fn authorized(headers: &HeaderMap) -> bool {
    headers.get(AUTHORIZATION).and_then(|value| value.to_str().ok()) == Some(&format!("Bot {TOKEN}"))
}

async fn rest(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let response = rest_now(&shared, method.clone(), &uri, &headers, &body);
    let name = Route::parse(&method, uri.path()).name(&method, uri.path());
    let content = json_object(&body).and_then(|params| params.get("content").and_then(Value::as_str).map(String::from));
    let hang = {
        let mut state = lock(&shared);
        let picked = state.hangs.iter().position(|(r, c)| *r == name && Some(c) == content.as_ref());
        picked.map(|index| state.hangs.remove(index)).is_some()
    };
    if hang {
        tokio::time::sleep(HANG).await;
    }
    response
}

fn rest_now(shared: &Arc<Shared>, method: Method, uri: &Uri, headers: &HeaderMap, body: &Bytes) -> Response {
    let path = uri.path();
    let route = Route::parse(&method, path);
    let name = route.name(&method, path);
    let mut state = lock(shared);
    state.calls.push(name.clone());
    // GET /gateway is the one route Discord serves without a token.
    if !matches!(route, Route::Gateway) && !authorized(headers) {
        return respond(StatusCode::UNAUTHORIZED, error_json("401: Unauthorized", 0));
    }
    if let Some(fault) = state.faults.get_mut(&name).and_then(VecDeque::pop_front) {
        return fault_response(&fault);
    }
    if let Some(channel_id) = route.channel_id()
        && let Some(fault) = state.refused_channels.get(&channel_id).cloned()
    {
        state.refused.push((name, channel_id));
        return fault_response(&fault);
    }
    let bucket = match state.buckets.take(&name, route.channel_id()) {
        Ok(bucket) => bucket,
        Err(hit) => {
            let response = buckets::hit_response(&hit);
            state.self_limited.push(hit);
            return response;
        }
    };
    let content_type = headers.get(axum::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let mut response = answer(shared, &mut state, route, uri, content_type, body);
    if let Some(bucket) = bucket {
        buckets::add_headers(response.headers_mut(), &bucket);
    }
    response
}

/// The answer to an authorized call that no fault or bucket stopped.
fn answer(shared: &Shared, state: &mut State_, route: Route, uri: &Uri, content_type: &str, body: &[u8]) -> Response {
    match route {
        Route::Gateway => respond(StatusCode::OK, json!({"url": gateway_url(shared.addr)})),
        Route::GatewayBot => respond(
            StatusCode::OK,
            json!({
                "url": gateway_url(shared.addr), "shards": state.shards.recommended(),
                "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1},
            }),
        ),
        Route::CurrentUser => respond(StatusCode::OK, current_user_json()),
        Route::CreateMessage { channel_id } => match message_body(content_type, body) {
            Some((params, files)) => create_message(state, channel_id, &params, files),
            None => invalid_json(),
        },
        Route::EditMessage { channel_id, message_id } => match json_object(body) {
            Some(params) => edit_message(state, channel_id, message_id, &params),
            None => invalid_json(),
        },
        Route::Typing { channel_id } => {
            state.typing.push(channel_id);
            StatusCode::NO_CONTENT.into_response()
        }
        Route::History { channel_id } => history(state, channel_id, uri.query().unwrap_or_default()),
        Route::GetChannel { channel_id } => get_channel(state, channel_id),
        Route::Interactions(call) => interactions::answer(state, call, body),
        Route::Unknown => respond(StatusCode::NOT_FOUND, error_json("404: Not Found", 0)),
    }
}

/// `GET /channels/{c}/messages?after=ID&limit=N`: the channel's messages after
/// `after` (the oldest N of them), newest first, as Discord returns them.
fn history(state: &State_, channel_id: u64, query: &str) -> Response {
    let param = |name: &str| {
        query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .find(|(key, _)| *key == name)
            .map(|(_, v)| v.to_string())
    };
    let after: u64 = param("after").and_then(|v| v.parse().ok()).unwrap_or(0);
    let limit: usize = param("limit").and_then(|v| v.parse().ok()).unwrap_or(50).clamp(1, 100);
    let mut ids: Vec<u64> = state
        .messages
        .iter()
        .filter(|(id, message)| **id > after && snowflake(message.get("channel_id")) == Some(channel_id))
        .map(|(id, _)| *id)
        .collect();
    ids.sort_unstable();
    ids.truncate(limit);
    let page: Vec<Value> = ids.iter().rev().filter_map(|id| state.messages.get(id).cloned()).collect();
    respond(StatusCode::OK, Value::Array(page))
}

fn fault_response(fault: &DiscordFault) -> Response {
    match fault {
        DiscordFault::RateLimited { retry_after_seconds, global } => rate_limited(*retry_after_seconds, *global),
        DiscordFault::ServerError => {
            respond(StatusCode::INTERNAL_SERVER_ERROR, error_json("500: Internal Server Error", 0))
        }
        DiscordFault::Forbidden => respond(StatusCode::FORBIDDEN, error_json("Missing Access", 50001)),
        DiscordFault::MissingPermissions => respond(StatusCode::FORBIDDEN, error_json("Missing Permissions", 50013)),
        DiscordFault::CannotMessageUser => {
            respond(StatusCode::FORBIDDEN, error_json("Cannot send messages to this user", 50007))
        }
        DiscordFault::UnknownChannel => respond(StatusCode::NOT_FOUND, error_json("Unknown Channel", 10003)),
        DiscordFault::Slowmode { retry_after_seconds } => buckets::too_many(
            *retry_after_seconds,
            "user",
            Some(20016),
            "This action cannot be performed due to slowmode rate limit.",
        ),
    }
}

fn rate_limited(retry_after: f64, global: bool) -> Response {
    buckets::too_many(retry_after, if global { "global" } else { "user" }, None, "You are being rate limited.")
}

/// The body, if it is a JSON object.
fn json_object(body: &[u8]) -> Option<Value> {
    serde_json::from_slice::<Value>(body).ok().filter(Value::is_object)
}

/// A message's JSON and its files: a JSON body, or a multipart one with the
/// JSON in `payload_json` and the files in `files[n]`.
fn message_body(content_type: &str, body: &[u8]) -> Option<(Value, Files)> {
    let Some(boundary) = multipart::boundary(content_type) else {
        return json_object(body).map(|params| (params, Vec::new()));
    };
    let parts = multipart::parse(body, &boundary);
    let params = match parts.iter().find(|part| part.name == "payload_json") {
        Some(part) => json_object(&part.body)?,
        None => json!({}),
    };
    let files = parts
        .into_iter()
        .filter(|part| part.name.starts_with("files["))
        .map(|part| (part.filename.unwrap_or_default(), part.body))
        .collect();
    Some((params, files))
}

/// Discord's 400 for a body that is not JSON.
fn invalid_json() -> Response {
    respond(StatusCode::BAD_REQUEST, error_json("The request body contains invalid JSON.", 50109))
}

fn form_error(field: &str, code: &str, message: &str) -> Response {
    let errors = json!({ field: {"_errors": [{"code": code, "message": message}]} });
    respond(StatusCode::BAD_REQUEST, json!({"message": "Invalid Form Body", "code": 50035, "errors": errors}))
}

/// Checks new content like Discord: at most 2000 characters.
fn content_error(content: &str) -> Option<Response> {
    (content.chars().count() > MAX_CONTENT_CHARS).then(|| {
        form_error("content", "BASE_TYPE_MAX_LENGTH", &format!("Must be {MAX_CONTENT_CHARS} or fewer in length."))
    })
}

/// A snowflake given as a string or a number.
fn snowflake(value: Option<&Value>) -> Option<u64> {
    match value? {
        Value::String(text) => text.parse().ok(),
        other => other.as_u64(),
    }
}

fn has_items(params: &Value, field: &str) -> bool {
    params.get(field).and_then(Value::as_array).is_some_and(|items| !items.is_empty())
}

fn create_message(state: &mut State_, channel_id: u64, params: &Value, files: Files) -> Response {
    let content = params.get("content").and_then(Value::as_str).unwrap_or_default().to_string();
    if files.iter().any(|(_, bytes)| bytes.len() > MAX_FILE_BYTES) {
        return respond(StatusCode::PAYLOAD_TOO_LARGE, error_json("Request entity too large", 40005));
    }
    let other_parts = !files.is_empty()
        || ["embeds", "attachments", "sticker_ids", "components"].iter().any(|f| has_items(params, f));
    if content.is_empty() && !other_parts {
        return respond(StatusCode::BAD_REQUEST, error_json("Cannot send an empty message", 50006));
    }
    if let Some(error) = content_error(&content) {
        return error;
    }
    let allowed_mentions = match allowed_mentions(params) {
        Ok(allowed) => allowed,
        Err(error) => return *error,
    };
    let reference = params.get("message_reference").filter(|reference| !reference.is_null());
    let reply_to = reference.and_then(|reference| snowflake(reference.get("message_id")));
    let referenced = reply_to.and_then(|id| state.messages.get(&id).cloned());
    let must_exist = reference.and_then(|r| r.get("fail_if_not_exists")).and_then(Value::as_bool).unwrap_or(true);
    if reply_to.is_some() && referenced.is_none() && must_exist {
        return form_error("message_reference", "MESSAGE_REFERENCE_UNKNOWN_MESSAGE", "Unknown message");
    }
    let replied_author =
        referenced.as_ref().and_then(|message| snowflake(message.get("author").and_then(|author| author.get("id"))));
    let pinged = pinged(&content, allowed_mentions.as_ref(), replied_author);
    let id = next_message_id(state);
    let mut message = message_json(id, channel_id, bot_user_json(), &content);
    let attachments: Vec<Value> = files
        .iter()
        .enumerate()
        .map(|(n, (name, bytes))| {
            let url = format!("https://cdn.discordapp.com/attachments/{channel_id}/{id}/{name}");
            json!({"id": (id + n as u64).to_string(), "filename": name, "size": bytes.len(), "url": url, "proxy_url": url})
        })
        .collect();
    message["attachments"] = Value::Array(attachments);
    if let (Some(referenced), Some(fields)) = (referenced, message.as_object_mut()) {
        let reference = json!({
            "type": 0, "message_id": referenced.get("id").cloned().unwrap_or(Value::Null),
            "channel_id": referenced.get("channel_id").cloned().unwrap_or(Value::Null),
            "guild_id": referenced.get("guild_id").cloned().unwrap_or(Value::Null),
        });
        fields.insert("type".to_string(), json!(TYPE_REPLY));
        fields.insert("message_reference".to_string(), reference);
        fields.insert("referenced_message".to_string(), referenced);
    }
    state.messages.insert(id, message.clone());
    state.sent.push(SentMessage { channel_id, message_id: id, content, reply_to, allowed_mentions, files, pinged });
    dispatch_bot_message(state, "MESSAGE_CREATE", channel_id, message.clone());
    respond(StatusCode::OK, message)
}

fn edit_message(state: &mut State_, channel_id: u64, message_id: u64, params: &Value) -> Response {
    let Some(mut message) = state.messages.get(&message_id).cloned() else {
        return respond(StatusCode::NOT_FOUND, error_json("Unknown Message", 10008));
    };
    if snowflake(message.get("channel_id")) != Some(channel_id) {
        return respond(StatusCode::NOT_FOUND, error_json("Unknown Message", 10008));
    }
    if snowflake(message.get("author").and_then(|author| author.get("id"))) != Some(BOT_ID) {
        return respond(StatusCode::FORBIDDEN, error_json("Cannot edit a message authored by another user", 50005));
    }
    let old = message.get("content").and_then(Value::as_str).unwrap_or_default();
    let content = params.get("content").and_then(Value::as_str).unwrap_or(old).to_string();
    if let Some(error) = content_error(&content) {
        return error;
    }
    let allowed_mentions = match allowed_mentions(params) {
        Ok(allowed) => allowed,
        Err(error) => return *error,
    };
    if let Some(fields) = message.as_object_mut() {
        fields.insert("content".to_string(), json!(content));
        fields.insert("edited_timestamp".to_string(), json!(now()));
    }
    state.messages.insert(message_id, message.clone());
    state.edits.push(Edit { channel_id, message_id, content, allowed_mentions });
    dispatch_bot_message(state, "MESSAGE_UPDATE", channel_id, message.clone());
    respond(StatusCode::OK, message)
}

/// `allowed_mentions` of a create or an edit, checked like Discord: `parse` holds only "roles", "users" and
/// "everyone", and names "users" (or "roles") only when no `users` (`roles`) list is given (400, 50035).
fn allowed_mentions(params: &Value) -> Result<Option<Value>, Box<Response>> {
    let Some(allowed) = params.get("allowed_mentions").filter(|allowed| !allowed.is_null()) else {
        return Ok(None);
    };
    let parse: Vec<&str> = allowed
        .get("parse")
        .and_then(Value::as_array)
        .map_or_else(Vec::new, |parse| parse.iter().filter_map(Value::as_str).collect());
    let invalid =
        |message: &str| Box::new(form_error("allowed_mentions", "MESSAGE_ALLOWED_MENTIONS_PARSE_EXCLUSIVE", message));
    if let Some(unknown) = parse.iter().find(|kind| !["roles", "users", "everyone"].contains(kind)) {
        return Err(invalid(&format!("Value \"{unknown}\" is not a valid enum value.")));
    }
    for kind in ["users", "roles"] {
        if parse.contains(&kind) && has_items(allowed, kind) {
            return Err(invalid(&format!("parse:[\"{kind}\"] and {kind}: [ids] are mutually exclusive.")));
        }
    }
    Ok(Some(allowed.clone()))
}

/// The gateway's copy of a message the bot sent or edited (with the guild, if the channel is in one).
fn dispatch_bot_message(state: &mut State_, t: &str, channel_id: u64, mut message: Value) {
    if let Some(guild_id) = state.channel_guilds.get(&channel_id).copied() {
        set_guild(&mut message, guild_id);
    }
    broadcast(state, t, message);
}

// ---- allowed_mentions ----

/// The users `content` mentions (`<@id>` or `<@!id>`), in order, once each.
fn mentioned_users(content: &str) -> Vec<u64> {
    let mut users = Vec::new();
    for piece in content.split("<@").skip(1) {
        let piece = piece.strip_prefix('!').unwrap_or(piece);
        let Some((id, _)) = piece.split_once('>') else { continue };
        if let Ok(id) = id.parse::<u64>()
            && !users.contains(&id)
        {
            users.push(id);
        }
    }
    users
}

/// Who Discord notifies of a new message, as it decides: the users its content mentions that
/// `allowed_mentions` lets through (every one without the object; with it, all of them if `parse`
/// holds "users", else those listed in `users`), and the author of the message it replies to when
/// `replied_user` is true (the default without the object).
fn pinged(content: &str, allowed: Option<&Value>, replied_author: Option<u64>) -> Vec<u64> {
    let mut pinged: Vec<u64> = match allowed {
        None => mentioned_users(content),
        Some(allowed) => {
            let parse_users =
                allowed.get("parse").and_then(Value::as_array).is_some_and(|p| p.iter().any(|v| v == "users"));
            let listed: Vec<u64> = allowed
                .get("users")
                .and_then(Value::as_array)
                .map(|users| users.iter().filter_map(|user| snowflake(Some(user))).collect())
                .unwrap_or_default();
            mentioned_users(content).into_iter().filter(|user| parse_users || listed.contains(user)).collect()
        }
    };
    let replied_user = allowed.is_none_or(|allowed| allowed.get("replied_user").and_then(Value::as_bool) == Some(true));
    if let Some(author) = replied_author.filter(|author| replied_user && !pinged.contains(author)) {
        pinged.push(author);
    }
    pinged
}

// ---- channels and threads ----

/// `GET /channels/{c}`: a thread the test made ([`FakeDiscord::thread`]), a guild text channel a message was
/// seen in, or Discord's 404 Unknown Channel.
fn get_channel(state: &State_, channel_id: u64) -> Response {
    if let Some((parent_id, guild_id)) = state.threads.get(&channel_id) {
        return respond(
            StatusCode::OK,
            json!({
                "id": channel_id.to_string(), "type": 11, "guild_id": guild_id.to_string(),
                "parent_id": parent_id.to_string(), "name": format!("thread-{channel_id}"),
                "owner_id": "1", "flags": 0, "rate_limit_per_user": 0, "message_count": 0, "member_count": 1,
                "thread_metadata": {
                    "archived": false, "auto_archive_duration": 1440, "archive_timestamp": now(), "locked": false,
                },
            }),
        );
    }
    match state.channel_guilds.get(&channel_id) {
        Some(guild_id) => respond(
            StatusCode::OK,
            json!({
                "id": channel_id.to_string(), "type": 0, "guild_id": guild_id.to_string(),
                "name": format!("channel-{channel_id}"), "position": 0, "permission_overwrites": [],
                "parent_id": null, "nsfw": false, "topic": null, "last_message_id": null,
                "rate_limit_per_user": 0, "flags": 0,
            }),
        ),
        None => respond(StatusCode::NOT_FOUND, error_json("Unknown Channel", 10003)),
    }
}

// ---- What REST calls were answered, when (for load benchmarks) ----

/// One REST call the fake answered.
#[derive(Debug, Clone)]
pub struct Answered {
    /// The route name (see [`FakeDiscord::calls`]).
    pub route: String,
    /// The channel in the path, if any.
    #[allow(dead_code)] // read by benches/channel_load.rs only
    pub channel_id: Option<u64>,
    /// The HTTP status answered (429 when rate limited).
    pub status: u16,
    /// When the answer was ready.
    pub at: std::time::Instant,
}

impl FakeDiscord {
    /// Every REST call answered so far, in order, with its status and time.
    pub fn answered(&self) -> Vec<Answered> {
        lock(&self.shared).answered.clone()
    }
}

/// Records each REST answer (route, channel, status, time) after the handler made it.
async fn note_answer(
    State(shared): State<Arc<Shared>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_string());
    let response = next.run(request).await;
    if path.starts_with("/api/") {
        let route = Route::parse(&method, &path);
        let answered = Answered {
            route: route.name(&method, &path),
            channel_id: route.channel_id(),
            status: response.status().as_u16(),
            at: std::time::Instant::now(),
        };
        lock(&shared).answered.push(answered);
    }
    response
}
