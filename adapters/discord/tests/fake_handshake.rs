//! serenity 0.12 itself (no adapter) against the fake Discord: proves the fake's REST answers and gateway
//! protocol are what serenity expects, so adapter tests failing against it point at the adapter.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed step is a failed test, with its message"
)]

// The root's fake Discord (and the form reader it uses): this test drives a part of it.
#[allow(dead_code, unused_imports)]
#[path = "../../../tests/it/support/fake_discord.rs"]
mod fake_discord;
#[allow(dead_code)]
#[path = "../../../tests/it/support/multipart.rs"]
mod multipart;

use fake_discord::{BOT_ID, BOT_NAME, DiscordFault, FakeDiscord, TOKEN};
use serde_json::json;
use serenity::all::{
    ChannelId, Client, ClientBuilder, Context, CreateMessage, EditMessage, EventHandler, GatewayIntents, Http,
    HttpBuilder, LightMethod, Message, MessageId, MessageUpdateEvent, Ready, Request, Route,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Every wait is bounded by this, so a broken fake fails instead of hanging.
const WAIT: Duration = Duration::from_secs(20);
const USER: u64 = 300_000_000_000_000_001;
const DM_CHANNEL: u64 = 400_000_000_000_000_001;
const GUILD: u64 = 500_000_000_000_000_001;
const GUILD_CHANNEL: u64 = 600_000_000_000_000_001;

/// What the event handler saw.
#[derive(Debug)]
enum Seen {
    Ready(Box<Ready>),
    Message(Box<Message>),
    Update(Box<MessageUpdateEvent>),
}

struct Forward(mpsc::UnboundedSender<Seen>);

#[serenity::async_trait]
impl EventHandler for Forward {
    async fn ready(&self, _: Context, ready: Ready) {
        let _ = self.0.send(Seen::Ready(Box::new(ready)));
    }

    async fn message(&self, _: Context, message: Message) {
        let _ = self.0.send(Seen::Message(Box::new(message)));
    }

    async fn message_update(&self, _: Context, _: Option<Message>, _: Option<Message>, event: MessageUpdateEvent) {
        let _ = self.0.send(Seen::Update(Box::new(event)));
    }
}

fn http(fake: &FakeDiscord, token: &str) -> Http {
    HttpBuilder::new(token).proxy(fake.proxy_url()).ratelimiter_disabled(true).build()
}

/// A serenity client on the fake, started; its events arrive on the receiver.
async fn connect(
    fake: &FakeDiscord,
    token: &str,
    intents: GatewayIntents,
) -> (Arc<Http>, Events, tokio::task::JoinHandle<serenity::Result<()>>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut client: Client =
        ClientBuilder::new_with_http(http(fake, token), intents).event_handler(Forward(tx)).await.expect("client");
    let http = client.http.clone();
    let running = tokio::spawn(async move { client.start().await });
    (http, Events { rx, backlog: Vec::new() }, running)
}

/// The handler's events. serenity runs each handler call in a task of its own, so events can arrive out of
/// order: ones not yet asked for wait in a backlog.
struct Events {
    rx: mpsc::UnboundedReceiver<Seen>,
    backlog: Vec<Seen>,
}

impl Events {
    /// The first event (backlog included) `pick` accepts, within [`WAIT`].
    async fn next<T>(&mut self, pick: impl Fn(&Seen) -> Option<T>) -> T {
        if let Some(index) = self.backlog.iter().position(|seen| pick(seen).is_some()) {
            return pick(&self.backlog.remove(index)).expect("picked before");
        }
        let found = tokio::time::timeout(WAIT, async {
            while let Some(seen) = self.rx.recv().await {
                match pick(&seen) {
                    Some(found) => return Some(found),
                    None => self.backlog.push(seen),
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(found)) => found,
            _ => panic!("no expected event within {WAIT:?}; got {:?}", self.backlog),
        }
    }

    /// The first message (from anyone) with this content.
    async fn message(&mut self, content: &str) -> Message {
        self.next(|seen| match seen {
            Seen::Message(message) if message.content == content => Some((**message).clone()),
            _ => None,
        })
        .await
    }
}

fn intents() -> GatewayIntents {
    GatewayIntents::GUILD_MESSAGES | GatewayIntents::DIRECT_MESSAGES | GatewayIntents::MESSAGE_CONTENT
}

#[tokio::test(flavor = "multi_thread")]
async fn serenity_identifies_receives_sends_edits_types_and_resumes() {
    let fake = FakeDiscord::start().await;
    // said before any connection: queued, dispatched after READY
    let early = fake.user_says(GUILD_CHANNEL, Some(GUILD), USER, "early bird", json!({}));
    let (http, mut events, _running) = connect(&fake, TOKEN, intents()).await;

    let ready = events
        .next(|seen| match seen {
            Seen::Ready(ready) => Some(ready.clone()),
            _ => None,
        })
        .await;
    assert_eq!((ready.user.id.get(), ready.user.name.as_str(), ready.user.bot), (BOT_ID, BOT_NAME, true));
    assert_eq!(ready.application.id.get(), BOT_ID);
    let identify = fake.identifies().first().cloned().unwrap_or_default();
    assert_eq!(identify["intents"].as_u64(), Some(intents().bits()), "{identify}");

    let got = events.message("early bird").await;
    assert_eq!(got.id.get(), early);
    assert_eq!((got.author.id.get(), got.author.bot), (USER, false));
    assert_eq!((got.channel_id.get(), got.guild_id.map(|guild| guild.get())), (GUILD_CHANNEL, Some(GUILD)));
    assert!(got.member.is_some(), "guild messages carry the author's member");

    let asked = fake.user_says(DM_CHANNEL, None, USER, "hello bot", json!({"mentions": [fake.bot_user()]}));
    let got = events.message("hello bot").await;
    assert_eq!((got.id.get(), got.guild_id), (asked, None));
    assert!(got.mentions_user_id(BOT_ID), "extra fields are merged: {:?}", got.mentions);

    // REST: the current user, a message, a reply, an edit, typing
    let me = http.get_current_user().await.expect("current user");
    assert_eq!((me.id.get(), me.name.as_str()), (BOT_ID, BOT_NAME));
    let said = ChannelId::new(DM_CHANNEL).say(&http, "hi").await.expect("say");
    assert_eq!((said.author.id.get(), said.content.as_str()), (BOT_ID, "hi"));
    let reply =
        CreateMessage::new().content("a reply").reference_message((ChannelId::new(DM_CHANNEL), MessageId::new(asked)));
    let replied = ChannelId::new(DM_CHANNEL).send_message(&http, reply).await.expect("reply");
    assert_eq!(replied.referenced_message.as_ref().map(|message| message.id.get()), Some(asked));
    let sent = fake.sent();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!((sent[0].channel_id, sent[0].message_id, sent[0].content.as_str()), (DM_CHANNEL, said.id.get(), "hi"));
    assert_eq!((sent[0].reply_to, sent[1].reply_to), (None, Some(asked)));
    assert!(sent[1].message_id > sent[0].message_id && sent[0].message_id > asked, "ids count up");
    // like Discord, the bot's own messages come back over the gateway
    let echo = events.message("hi").await;
    assert_eq!((echo.id, echo.author.id.get()), (said.id, BOT_ID));

    let edited = ChannelId::new(DM_CHANNEL)
        .edit_message(&http, said.id, EditMessage::new().content("hi, edited"))
        .await
        .expect("edit");
    assert_eq!(edited.content, "hi, edited");
    assert!(edited.edited_timestamp.is_some());
    let edits = fake.edits();
    assert_eq!(edits.len(), 1);
    assert_eq!(
        (edits[0].channel_id, edits[0].message_id, edits[0].content.as_str()),
        (DM_CHANNEL, said.id.get(), "hi, edited")
    );
    let update = events
        .next(|seen| match seen {
            Seen::Update(update) => Some(update.clone()),
            _ => None,
        })
        .await;
    assert_eq!((update.id, update.content.as_deref()), (said.id, Some("hi, edited")));

    ChannelId::new(GUILD_CHANNEL).broadcast_typing(&http).await.expect("typing");
    assert_eq!(fake.typing(), vec![GUILD_CHANNEL]);

    // a dropped connection: serenity reconnects (resuming) and nothing said meanwhile is lost
    fake.disconnect_all();
    fake.user_says(GUILD_CHANNEL, Some(GUILD), USER, "after the drop", json!({}));
    let got = events.message("after the drop").await;
    assert_eq!(got.guild_id.map(|guild| guild.get()), Some(GUILD));
    fake.user_says(DM_CHANNEL, None, USER, "and later", json!({}));
    events.message("and later").await;
    assert_eq!(fake.identifies().len(), 1, "serenity resumed the session rather than identifying anew");

    let heartbeats = fake.wait_until(WAIT, |fake| fake.heartbeats() >= 1).await;
    assert!(heartbeats, "serenity heartbeats (and gets acks: it would reconnect otherwise)");
    let calls = fake.calls();
    let known = ["gateway", "current_user", "create_message", "edit_message", "typing"];
    assert!(calls.iter().all(|call| known.contains(&call.as_str())), "unexpected calls: {calls:?}");
    assert_eq!(calls.first().map(String::as_str), Some("gateway"), "serenity asks for the gateway URL first");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_token_gets_401_on_rest_and_4004_on_the_gateway() {
    let fake = FakeDiscord::start().await;
    let error = http(&fake, "wrong-token").get_current_user().await.expect_err("401");
    let serenity::Error::Http(serenity::http::HttpError::UnsuccessfulRequest(response)) = error else {
        panic!("an unsuccessful request, not {error:?}");
    };
    assert_eq!((response.status_code.as_u16(), response.error.message.as_str()), (401, "401: Unauthorized"));

    let (_, _, running) = connect(&fake, "wrong-token", intents()).await;
    let ended = tokio::time::timeout(WAIT, running).await.expect("the client stops").expect("joined");
    let error = ended.expect_err("invalid authentication");
    assert!(
        matches!(error, serenity::Error::Gateway(serenity::gateway::GatewayError::InvalidAuthentication)),
        "{error:?}"
    );
    assert_eq!(fake.identifies().len(), 1);
}

/// The status and Discord error code of a failed call.
fn failure<T: std::fmt::Debug>(result: serenity::Result<T>) -> (u16, isize) {
    match result {
        Err(serenity::Error::Http(serenity::http::HttpError::UnsuccessfulRequest(response))) => {
            (response.status_code.as_u16(), response.error.code)
        }
        other => panic!("an unsuccessful request, not {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn faults_and_bad_requests_come_back_as_discord_errors() {
    let fake = FakeDiscord::start().await;
    let http = http(&fake, TOKEN);
    let channel = ChannelId::new(DM_CHANNEL);

    fake.fail_next("create_message", DiscordFault::RateLimited { retry_after_seconds: 0.5, global: false }, 1);
    fake.fail_next("create_message", DiscordFault::ServerError, 1);
    fake.fail_next("create_message", DiscordFault::Forbidden, 1);
    // serenity keeps only the status of a 429 (its body has no `code`, so serenity reports -1)
    assert_eq!(failure(channel.say(&http, "one").await).0, 429);
    assert_eq!(failure(channel.say(&http, "one").await), (500, 0));
    assert_eq!(failure(channel.say(&http, "one").await), (403, 50001));
    channel.say(&http, "one").await.expect("faults are used up");
    fake.fail_next("typing", DiscordFault::RateLimited { retry_after_seconds: 1.0, global: true }, 1);
    assert_eq!(failure(channel.broadcast_typing(&http).await).0, 429);
    assert_eq!(fake.sent().len(), 1);
    assert!(fake.typing().is_empty(), "a failed typing call shows nothing");

    // Discord's own checks: unknown message to edit or reply to, a body that is not JSON
    let edit = channel.edit_message(&http, MessageId::new(42), EditMessage::new().content("x")).await;
    assert_eq!(failure(edit), (404, 10008));
    let reply = CreateMessage::new().content("re").reference_message((channel, MessageId::new(42)));
    assert_eq!(failure(channel.send_message(&http, reply).await), (400, 50035));
    let request = Request::new(Route::ChannelMessages { channel_id: channel }, LightMethod::Post)
        .body(Some(b"not json".to_vec()));
    assert_eq!(failure(http.request(request).await.map(|_| ())), (400, 50109));
    let request =
        Request::new(Route::ChannelMessages { channel_id: channel }, LightMethod::Post).body(Some(b"{}".to_vec()));
    assert_eq!(failure(http.request(request).await.map(|_| ())), (400, 50006));
    let someone_elses = fake.user_says(DM_CHANNEL, None, USER, "mine", json!({}));
    let edit = channel.edit_message(&http, MessageId::new(someone_elses), EditMessage::new().content("x")).await;
    assert_eq!(failure(edit), (403, 50005));

    let calls = fake.calls();
    assert_eq!(calls.iter().filter(|call| *call == "create_message").count(), 7, "{calls:?}");
    assert_eq!(calls.iter().filter(|call| *call == "typing").count(), 1, "{calls:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_message_content_intent_guild_messages_come_blank_unless_they_mention_the_bot() {
    let fake = FakeDiscord::start().await;
    fake.user_says(GUILD_CHANNEL, Some(GUILD), USER, "secret", json!({}));
    fake.user_says(GUILD_CHANNEL, Some(GUILD), USER, "hey bot", json!({"mentions": [fake.bot_user()]}));
    fake.user_says(DM_CHANNEL, None, USER, "a dm", json!({}));
    let intents = GatewayIntents::GUILD_MESSAGES | GatewayIntents::DIRECT_MESSAGES;
    let (_, mut events, _running) = connect(&fake, TOKEN, intents).await;

    let blank = events.message("").await;
    assert_eq!(blank.author.id.get(), USER);
    events.message("hey bot").await;
    events.message("a dm").await;
}
