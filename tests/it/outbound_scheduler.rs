//! The outbound scheduler against a fake channel that records every call and
//! fails on script. Time is paused: waits are exact, and a test that waits
//! minutes runs in milliseconds.

use async_trait::async_trait;
use bub::gateway::outbound::{
    Budget, LiveMessage, LiveMessages, OutboundConfig, OutboundError, OutboundScheduler, REPLACED_MARKER,
};
use bub::gateway::split::split_message;
use bub_channel::{
    Channel, ChannelError, ChatKind, ChatRef, Delivered, InboundSink, LengthUnit, Limits, Outbound, OutboundFile,
    RateScope, SendError, SenderRef,
};
use governor::Quota;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    Edit,
    /// A file (its name as the call's text).
    File,
    Typing,
}

/// The fake's upload limit.
const MAX_FILE_BYTES: u64 = 100;

/// One call that reached the platform (successful or not).
#[derive(Debug, Clone)]
struct Call {
    kind: Kind,
    chat: String,
    /// The idempotency key (sends only).
    key: Option<String>,
    message_id: String,
    text: String,
    /// The people the message was sent (or edited) mentioning.
    mentions: Vec<String>,
    at: Instant,
    ok: bool,
}

/// A platform that records calls and fails the next calls to a chat as scripted.
struct FakeChannel {
    name: String,
    limits: Limits,
    calls: Mutex<Vec<Call>>,
    /// Per chat, the outcome of its next calls: `Some(error)` fails, `None` succeeds.
    script: Mutex<HashMap<String, VecDeque<Option<SendError>>>>,
    /// Every call fails with this, after the script.
    always: Mutex<Option<SendError>>,
    next_id: Mutex<u64>,
}

impl FakeChannel {
    fn new(name: &str, max_message_chars: usize, edits: bool) -> Arc<FakeChannel> {
        Arc::new(FakeChannel {
            name: name.to_owned(),
            limits: Limits { max_message_chars, length_unit: LengthUnit::Utf16, edits, debounce: true, typing: false },
            calls: Mutex::new(Vec::new()),
            script: Mutex::new(HashMap::new()),
            always: Mutex::new(None),
            next_id: Mutex::new(0),
        })
    }

    fn script(&self, chat: &str, outcomes: impl IntoIterator<Item = Option<SendError>>) {
        self.script.lock().entry(chat.to_owned()).or_default().extend(outcomes);
    }

    fn fail_always(&self, error: SendError) {
        *self.always.lock() = Some(error);
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().clone()
    }

    /// Calls that succeeded.
    fn delivered(&self) -> Vec<Call> {
        self.calls().into_iter().filter(|call| call.ok).collect()
    }

    fn delivered_to(&self, chat: &str) -> Vec<Call> {
        self.delivered().into_iter().filter(|call| call.chat == chat).collect()
    }

    /// The text each message shows now, by message id, in the order sent.
    fn visible(&self) -> Vec<(String, String)> {
        let mut shown: Vec<(String, String)> = Vec::new();
        for call in self.delivered() {
            match call.kind {
                Kind::Send => shown.push((call.message_id, call.text)),
                Kind::Edit => {
                    let message =
                        shown.iter_mut().find(|(id, _)| *id == call.message_id).expect("edit of a sent message");
                    message.1 = call.text;
                }
                Kind::File => {}
                Kind::Typing => {}
            }
        }
        shown
    }

    fn outcome(&self, chat: &str) -> Result<(), SendError> {
        let scripted = self.script.lock().get_mut(chat).and_then(VecDeque::pop_front);
        match scripted {
            Some(Some(error)) => Err(error),
            Some(None) => Ok(()),
            None => self.always.lock().clone().map_or(Ok(()), Err),
        }
    }

    fn record(&self, kind: Kind, chat: &ChatRef, key: Option<&str>, message_id: String, text: &str, ok: bool) {
        self.record_mentioning(kind, chat, key, message_id, text, &[], ok)
    }

    /// Records a call; its text and mentions must fit the limit together, as a platform counts them.
    #[allow(clippy::too_many_arguments)]
    fn record_mentioning(
        &self,
        kind: Kind,
        chat: &ChatRef,
        key: Option<&str>,
        message_id: String,
        text: &str,
        mentions: &[SenderRef],
        ok: bool,
    ) {
        let room = bub_channel::mention_room(mentions);
        assert!(text.chars().count() + room <= self.limits.max_message_chars, "over the limit: {text:?}");
        let call = Call {
            kind,
            chat: chat.id.clone(),
            key: key.map(str::to_owned),
            message_id,
            text: text.to_owned(),
            mentions: mentions.iter().map(|sender| sender.id.clone()).collect(),
            at: Instant::now(),
            ok,
        };
        self.calls.lock().push(call);
    }

    fn typing_calls(&self) -> Vec<Call> {
        self.calls().into_iter().filter(|call| call.kind == Kind::Typing).collect()
    }
}

#[async_trait]
impl Channel for FakeChannel {
    fn name(&self) -> &str {
        &self.name
    }

    fn limits(&self) -> Limits {
        self.limits
    }

    async fn start(&self, _inbox: Arc<dyn InboundSink>) -> Result<(), ChannelError> {
        Ok(())
    }

    async fn send(&self, outbound: &Outbound) -> Result<Delivered, SendError> {
        // A real platform call waits on the network; let other tasks run meanwhile.
        tokio::task::yield_now().await;
        let outcome = self.outcome(&outbound.chat.id);
        let message_id = {
            let mut next = self.next_id.lock();
            *next += 1;
            format!("m{next}")
        };
        let key = Some(outbound.idempotency_key.as_str());
        let (chat, text, mentions) = (&outbound.chat, &outbound.text, &outbound.mentions);
        self.record_mentioning(Kind::Send, chat, key, message_id.clone(), text, mentions, outcome.is_ok());
        outcome.map(|()| Delivered { message_id })
    }

    async fn edit(
        &self,
        chat: &ChatRef,
        message_id: &str,
        text: &str,
        mentions: &[SenderRef],
    ) -> Result<(), SendError> {
        tokio::task::yield_now().await;
        let outcome = self.outcome(&chat.id);
        self.record_mentioning(Kind::Edit, chat, None, message_id.to_owned(), text, mentions, outcome.is_ok());
        outcome
    }

    async fn typing(&self, chat: &ChatRef) -> Result<(), SendError> {
        tokio::task::yield_now().await;
        let outcome = self.outcome(&chat.id);
        self.record(Kind::Typing, chat, None, String::new(), "", outcome.is_ok());
        outcome
    }

    fn max_file_bytes(&self) -> Option<u64> {
        Some(MAX_FILE_BYTES)
    }

    async fn send_file(&self, file: &OutboundFile) -> Result<Delivered, SendError> {
        assert!(file.bytes.len() as u64 <= MAX_FILE_BYTES, "a file over the limit reached the platform");
        tokio::task::yield_now().await;
        let outcome = self.outcome(&file.chat.id);
        let message_id = format!("file-{}", file.name);
        let key = Some(file.idempotency_key.as_str());
        self.record(Kind::File, &file.chat, key, message_id.clone(), &file.name, outcome.is_ok());
        outcome.map(|()| Delivered { message_id })
    }
}

fn file(chat_id: &str, name: &str, len: usize) -> OutboundFile {
    OutboundFile {
        chat: chat(chat_id),
        name: name.to_owned(),
        media_type: "application/octet-stream".to_owned(),
        bytes: vec![7; len],
        caption: None,
        reply_to: vec!["in-1".to_owned()],
        idempotency_key: format!("reply:{name}:file"),
        session: format!("fake:{chat_id}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_file_over_the_channels_limit_is_refused_before_any_call() {
    let fake = FakeChannel::new("fake", 100, true);
    let scheduler = scheduler_with(&fake, Budget::default());
    let refused = scheduler.send_file("fake", &file("a", "big.bin", 101)).await.unwrap_err();
    assert!(matches!(refused, OutboundError::FileRefused { bytes: 101, limit: Some(100), .. }), "{refused:?}");
    assert_eq!(
        refused.to_string(),
        "big.bin is 101 bytes; channel fake sends files of at most 100 bytes, so nothing was sent"
    );
    assert!(fake.calls().is_empty(), "nothing reached the platform: {:?}", fake.calls());
}

#[tokio::test(start_paused = true)]
async fn a_rate_limited_file_waits_out_the_pause_and_goes_once_with_its_key() {
    let fake = FakeChannel::new("fake", 100, true);
    fake.script("a", [rate_limited(5, RateScope::Chat), Some(SendError::Transient("502".into()))]);
    let scheduler = scheduler_with(&fake, Budget::default());
    let start = Instant::now();
    let sent = scheduler.send_file("fake", &file("a", "plot.png", 100)).await.unwrap();
    assert_eq!(sent.message_id, "file-plot.png");
    let delivered = fake.delivered_to("a");
    assert_eq!(delivered.len(), 1, "delivered once: {delivered:?}");
    assert!(delivered[0].at - start >= Duration::from_secs(5), "sent during the 429 pause");
    let keys: Vec<_> = fake.calls().iter().map(|call| call.key.clone().unwrap_or_default()).collect();
    assert_eq!(keys, vec!["reply:plot.png:file"; 3], "every attempt carries the file's key");
}

fn chat(id: &str) -> ChatRef {
    ChatRef { id: id.to_owned(), kind: ChatKind::Direct, thread_id: None }
}

fn outbound(chat_id: &str, key: &str, text: &str) -> Outbound {
    Outbound {
        chat: chat(chat_id),
        text: text.to_owned(),
        reply_to: vec!["in-1".to_owned()],
        idempotency_key: key.to_owned(),
        session: format!("fake:{chat_id}"),
        mentions: Vec::new(),
    }
}

fn scheduler_with(fake: &Arc<FakeChannel>, budget: Budget) -> Arc<OutboundScheduler> {
    let scheduler = OutboundScheduler::new();
    scheduler.register(fake.clone(), budget);
    scheduler
}

fn rate_limited(seconds: u64, scope: RateScope) -> Option<SendError> {
    Some(SendError::RateLimited { retry_after: Duration::from_secs(seconds), scope })
}

fn per_seconds(seconds: u64) -> Quota {
    Quota::with_period(Duration::from_secs(seconds)).expect("non-zero period").allow_burst(NonZeroU32::MIN)
}

/// Lets spawned tasks run until the fake has seen `count` calls, without letting paused time advance.
async fn until_calls(fake: &FakeChannel, count: usize) {
    while fake.calls().len() < count {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn chat_rate_limit_delays_that_chat_and_not_others() {
    let fake = FakeChannel::new("fake", 100, true);
    fake.script("a", [rate_limited(5, RateScope::Chat)]);
    let scheduler = scheduler_with(&fake, Budget::default());
    let start = Instant::now();

    let first = tokio::spawn({
        let scheduler = scheduler.clone();
        async move { scheduler.send_final("fake", outbound("a", "a1", "first to a")).await }
    });
    until_calls(&fake, 1).await;
    let second = tokio::spawn({
        let scheduler = scheduler.clone();
        async move { scheduler.send_final("fake", outbound("a", "a2", "second to a")).await }
    });
    let other = scheduler.send_final("fake", outbound("b", "b1", "to b")).await.unwrap();
    assert_eq!(other.len(), 1);
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();

    let to_b = fake.delivered_to("b");
    assert!(to_b[0].at - start < Duration::from_secs(5), "b waited for a's pause");
    let to_a = fake.delivered_to("a");
    assert_eq!(to_a.len(), 2);
    for call in &to_a {
        assert!(call.at - start >= Duration::from_secs(5), "{:?} sent during the pause", call.text);
    }
    // The retry reuses the key of the rate-limited attempt.
    let keys: Vec<_> = fake.calls().iter().filter(|c| c.chat == "a").map(|c| c.key.clone().unwrap()).collect();
    assert_eq!(keys.iter().filter(|k| *k == "a1").count(), 2);
}

#[tokio::test(start_paused = true)]
async fn channel_rate_limit_pauses_every_chat() {
    let fake = FakeChannel::new("fake", 100, true);
    fake.script("a", [rate_limited(3, RateScope::Channel)]);
    let scheduler = scheduler_with(&fake, Budget::default());
    let start = Instant::now();

    let first = tokio::spawn({
        let scheduler = scheduler.clone();
        async move { scheduler.send_final("fake", outbound("a", "a1", "to a")).await }
    });
    until_calls(&fake, 1).await;
    scheduler.send_final("fake", outbound("b", "b1", "to b")).await.unwrap();
    first.await.unwrap().unwrap();

    let delivered = fake.delivered();
    assert_eq!(delivered.len(), 2);
    for call in delivered {
        assert!(call.at - start >= Duration::from_secs(3), "{} sent during the channel pause", call.chat);
    }
}

#[tokio::test(start_paused = true)]
async fn transient_errors_are_retried_and_each_part_is_delivered_once() {
    let fake = FakeChannel::new("fake", 20, true);
    let transient = || Some(SendError::Transient("502".into()));
    fake.script("a", [transient(), transient(), None, transient(), None, None]);
    let scheduler = scheduler_with(&fake, Budget::default());

    let text = "one two three four five six seven eight nine ten";
    let delivered = scheduler.send_final("fake", outbound("a", "k", text)).await.unwrap();

    let parts = split_message(text, 20);
    assert_eq!(parts.len(), 3);
    let ok = fake.delivered();
    assert_eq!(ok.iter().map(|c| c.text.clone()).collect::<Vec<_>>(), parts);
    assert_eq!(ok.iter().map(|c| c.key.clone().unwrap()).collect::<Vec<_>>(), ["k", "k#1", "k#2"]);
    assert_eq!(
        delivered.iter().map(|d| d.message_id.clone()).collect::<Vec<_>>(),
        ok.iter().map(|c| c.message_id.clone()).collect::<Vec<_>>()
    );
    // Retries carry the same key as the failed attempt.
    let attempts: Vec<_> = fake.calls().iter().map(|c| c.key.clone().unwrap()).collect();
    assert_eq!(attempts, ["k", "k", "k", "k#1", "k#1", "k#2"]);
}

#[tokio::test(start_paused = true)]
async fn transient_errors_give_up_after_the_configured_time() {
    let fake = FakeChannel::new("fake", 100, true);
    fake.fail_always(SendError::Transient("connection reset".into()));
    let config = OutboundConfig { give_up_after: Duration::from_secs(60), ..OutboundConfig::default() };
    let scheduler = OutboundScheduler::with_config(config);
    scheduler.register(fake.clone(), Budget::default());
    let start = Instant::now();

    let error = scheduler.send_final("fake", outbound("a", "k", "hello")).await.unwrap_err();

    assert!(matches!(error, OutboundError::GaveUp { attempts, .. } if attempts > 3), "{error:?}");
    assert!(Instant::now() - start <= Duration::from_secs(60));
    assert!(fake.calls().len() > 3);
}

#[tokio::test(start_paused = true)]
async fn a_permanent_error_is_returned_without_retrying() {
    let fake = FakeChannel::new("fake", 10, true);
    fake.script("a", [None, Some(SendError::Permanent("chat not found".into()))]);
    let scheduler = scheduler_with(&fake, Budget::default());

    let error = scheduler.send_final("fake", outbound("a", "k", "first part second part")).await.unwrap_err();

    match &error {
        OutboundError::Permanent { part, source, .. } => {
            assert_eq!(*part, 1);
            assert_eq!(*source, SendError::Permanent("chat not found".into()));
        }
        other => panic!("expected a permanent error, got {other:?}"),
    }
    assert_eq!(error.delivered().len(), 1, "the first part was delivered");
    assert_eq!(fake.calls().len(), 2, "no retry after a permanent error");
}

#[tokio::test]
async fn an_unknown_channel_is_an_error() {
    let scheduler = OutboundScheduler::new();
    let error = scheduler.send_final("nowhere", outbound("a", "k", "hi")).await.unwrap_err();
    assert!(matches!(error, OutboundError::UnknownChannel(name) if name == "nowhere"));
    let live = scheduler.live("nowhere", chat("a"), "k", "s");
    live.update("hi");
    assert!(matches!(live.finish("hi").await, Err(OutboundError::UnknownChannel(_))));
}

#[tokio::test(start_paused = true)]
async fn long_text_is_split_under_the_limit_in_order_with_code_blocks_intact() {
    let fake = FakeChannel::new("fake", 120, true);
    let scheduler = scheduler_with(&fake, Budget::default());
    let code: String = (0..12).map(|i| format!("    let value_{i} = compute({i});\n")).collect();
    let text = format!(
        "Here is the plan, in a few words that take some room.\n\n```rust\nfn main() {{\n{code}}}\n```\n\nAnd that is all there is to it."
    );

    let delivered = scheduler.send_final("fake", outbound("a", "k", &text)).await.unwrap();

    let texts: Vec<String> = fake.delivered().into_iter().map(|c| c.text).collect();
    assert_eq!(texts, split_message(&text, 120));
    assert!(texts.len() >= 3, "{texts:#?}");
    assert_eq!(delivered.len(), texts.len());
    for part in &texts {
        let fences = part.lines().filter(|line| line.starts_with("```")).count();
        assert_eq!(fences % 2, 0, "unbalanced fences in {part:?}");
    }
    for i in 0..12 {
        let line = format!("    let value_{i} = compute({i});");
        assert_eq!(texts.iter().filter(|part| part.lines().any(|l| l == line)).count(), 1, "{line}");
    }
}

#[tokio::test(start_paused = true)]
async fn per_chat_budget_delays_finals_but_never_drops_them() {
    let fake = FakeChannel::new("fake", 100, true);
    let scheduler = scheduler_with(&fake, Budget { per_chat: Some(per_seconds(2)), per_channel: None });
    let start = Instant::now();

    let sends = (0..5).map(|i| {
        let scheduler = scheduler.clone();
        tokio::spawn(async move {
            scheduler.send_final("fake", outbound("a", &format!("k{i}"), &format!("reply {i}"))).await
        })
    });
    let sends: Vec<_> = sends.collect();
    scheduler.send_final("fake", outbound("b", "b", "other chat")).await.unwrap();
    for send in sends {
        send.await.unwrap().unwrap();
    }

    let to_a = fake.delivered_to("a");
    assert_eq!(to_a.len(), 5, "every final is delivered");
    for pair in to_a.windows(2) {
        assert!(pair[1].at - pair[0].at >= Duration::from_secs(2), "budget not honoured: {pair:?}");
    }
    assert!(fake.delivered_to("b")[0].at - start < Duration::from_secs(2), "another chat waited");
}

#[tokio::test(start_paused = true)]
async fn per_channel_budget_spaces_sends_across_chats() {
    let fake = FakeChannel::new("fake", 100, true);
    let scheduler = scheduler_with(&fake, Budget { per_chat: None, per_channel: Some(per_seconds(1)) });

    let sends: Vec<_> = ["a", "b", "c"]
        .into_iter()
        .map(|id| {
            let scheduler = scheduler.clone();
            tokio::spawn(async move { scheduler.send_final("fake", outbound(id, id, "hello")).await })
        })
        .collect();
    for send in sends {
        send.await.unwrap().unwrap();
    }

    let delivered = fake.delivered();
    assert_eq!(delivered.len(), 3);
    assert!(delivered[2].at - delivered[0].at >= Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn many_rapid_live_updates_become_few_edits_and_the_final_text_is_exact() {
    let fake = FakeChannel::new("fake", 200, true);
    let scheduler = scheduler_with(&fake, Budget::default());
    let live = scheduler.live("fake", chat("a"), "k", "fake:a");

    let mut text = String::new();
    for i in 0..50 {
        text.push_str(&format!("word{i} "));
        live.update(text.clone());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let streamed = fake.delivered();
    let final_text = format!("{text}\n\n{}", "and the long ending. ".repeat(20));
    let delivered = live.finish(final_text.clone()).await.unwrap();

    assert_eq!(streamed.iter().filter(|c| c.kind == Kind::Send).count(), 1, "one live message");
    let edits = streamed.iter().filter(|c| c.kind == Kind::Edit).count();
    assert!((2..=7).contains(&edits), "50 updates over 5 s at one edit per second gave {edits} edits");
    // The live message shows the first part; the rest follow as new messages.
    let parts = split_message(&final_text, 200);
    assert!(parts.len() >= 2);
    let visible: Vec<String> = fake.visible().into_iter().map(|(_, text)| text).collect();
    assert_eq!(visible, parts);
    assert_eq!(delivered.len(), parts.len());
    assert_eq!(delivered[0].message_id, streamed[0].message_id);
    let keys: Vec<_> = fake.delivered().iter().filter_map(|c| c.key.clone()).collect();
    let expected: Vec<String> = (0..parts.len()).map(|i| if i == 0 { "k".into() } else { format!("k#{i}") }).collect();
    assert_eq!(keys, expected);
}

#[tokio::test(start_paused = true)]
async fn under_a_tight_budget_live_edits_are_dropped_but_the_final_is_delivered() {
    let fake = FakeChannel::new("fake", 200, true);
    let scheduler = scheduler_with(&fake, Budget { per_chat: Some(per_seconds(10)), per_channel: None });
    let live = scheduler.live("fake", chat("a"), "k", "fake:a");

    let mut text = String::new();
    for i in 0..30 {
        text.push_str(&format!("w{i} "));
        live.update(text.clone());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let streamed = fake.delivered().len();
    let finish_called = Instant::now();
    live.finish("the final answer").await.unwrap();

    // 15 s of updates under one message per 10 s: the first send and at most one edit got through.
    assert!((1..=2).contains(&streamed), "{streamed} live calls under the budget");
    let last = fake.delivered().pop().unwrap();
    assert_eq!(last.kind, Kind::Edit);
    assert_eq!(last.text, "the final answer");
    // The final edit waited for the next budget slot, not behind queued intermediate edits.
    assert!(last.at - finish_called <= Duration::from_secs(10));
    assert_eq!(fake.visible().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_live_update_during_a_rate_limit_pause_is_dropped_and_the_final_waits() {
    let fake = FakeChannel::new("fake", 200, true);
    // The first live send works; the first edit hits a 429 for 30 s.
    fake.script("a", [None, rate_limited(30, RateScope::Chat)]);
    let scheduler = scheduler_with(&fake, Budget::default());
    let live = scheduler.live("fake", chat("a"), "k", "fake:a");
    let start = Instant::now();

    for i in 0..10 {
        live.update(format!("draft {i}"));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    live.finish("done").await.unwrap();

    let calls = fake.calls();
    assert_eq!(calls.len(), 3, "send, the rate-limited edit, then only the final edit: {calls:#?}");
    assert!(calls[2].at - start >= Duration::from_secs(30));
    assert_eq!(fake.visible(), vec![(calls[0].message_id.clone(), "done".to_owned())]);
}

#[tokio::test(start_paused = true)]
async fn a_channel_without_edits_gets_only_the_final_messages() {
    let fake = FakeChannel::new("fake", 50, false);
    let scheduler = scheduler_with(&fake, Budget::default());
    let live = scheduler.live("fake", chat("a"), "k", "fake:a");

    for i in 0..20 {
        live.update(format!("partial text {i}"));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(fake.calls().is_empty(), "no intermediate messages");
    let final_text = "The final answer is long enough that it needs more than one message here.";
    let delivered = live.finish(final_text).await.unwrap();

    let calls = fake.calls();
    assert!(calls.iter().all(|c| c.kind == Kind::Send));
    assert_eq!(calls.iter().map(|c| c.text.clone()).collect::<Vec<_>>(), split_message(final_text, 50));
    assert_eq!(delivered.len(), calls.len());
}

#[tokio::test(start_paused = true)]
async fn a_short_streamed_reply_is_one_send_and_no_edit() {
    let fake = FakeChannel::new("fake", 100, true);
    let scheduler = scheduler_with(&fake, Budget::default());
    let live = scheduler.live("fake", chat("a"), "k", "fake:a");
    for text in ["ech", "echo:", "echo: hel", "echo: hello", "echo: hello the", "echo: hello there"] {
        live.update(text);
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    assert!(fake.calls().is_empty(), "no fragment was sent: {:?}", fake.calls());
    live.finish("echo: hello there").await.unwrap();

    let calls = fake.calls();
    assert_eq!(calls.len(), 1, "one platform call: {calls:?}");
    assert_eq!((calls[0].kind, calls[0].text.as_str()), (Kind::Send, "echo: hello there"));
}

#[tokio::test(start_paused = true)]
async fn the_first_live_message_waits_for_a_sentence_and_ends_at_a_word_boundary() {
    let fake = FakeChannel::new("fake", 500, true);
    let scheduler = scheduler_with(&fake, Budget::default());
    let live = scheduler.live("fake", chat("a"), "k", "fake:a");
    let answer = "Streaming replies grow in place, one edit per second, and the first message waits \
                  until it says something: this one is long enough to be shown before it ends.";
    // Three characters every 20 ms, as models stream.
    let chars: Vec<char> = answer.chars().collect();
    for end in (3..=chars.len()).step_by(3) {
        live.update(chars[..end].iter().collect::<String>());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let first = fake.calls().first().cloned().expect("a first message before the end");
    live.finish(answer).await.unwrap();

    assert_eq!(first.kind, Kind::Send);
    let min = OutboundConfig::default().live_first_chars;
    assert!(first.text.chars().count() >= min, "at least {min} characters: {:?}", first.text);
    assert!(answer.starts_with(&format!("{} ", first.text)), "whole words only: {:?}", first.text);
    assert_eq!(fake.visible(), vec![(first.message_id, answer.to_owned())], "one message, grown to the answer");
}

#[tokio::test(start_paused = true)]
async fn a_short_first_text_shows_once_the_wait_has_passed() {
    let fake = FakeChannel::new("fake", 100, true);
    let scheduler = scheduler_with(&fake, Budget::default());
    let live = scheduler.live("fake", chat("a"), "k", "fake:a");
    let wait = OutboundConfig::default().live_first_wait;
    live.update("Looking it up…");
    tokio::time::sleep(wait / 2).await;
    assert!(fake.calls().is_empty(), "still waiting for more text");
    tokio::time::sleep(wait).await;
    let shown: Vec<String> = fake.visible().into_iter().map(|(_, text)| text).collect();
    assert_eq!(shown, ["Looking it up…"], "a slow answer still shows progress, whole");
    live.finish("Looking it up… found it.").await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_text_ready_at_once_is_one_send_per_part_and_no_edit() {
    let fake = FakeChannel::new("fake", 100, true);
    let scheduler = scheduler_with(&fake, Budget::default());
    let live = scheduler.live("fake", chat("a"), "k", "fake:a");
    // A command's output: the whole text in one update, the finish a moment later.
    let output = (1..=60).map(|n| n.to_string()).collect::<Vec<_>>().join("\n");
    live.update(output.clone());
    tokio::time::sleep(Duration::from_millis(30)).await;
    live.finish(output.clone()).await.unwrap();

    let calls = fake.calls();
    assert!(calls.iter().all(|call| call.kind == Kind::Send), "no edit: {calls:#?}");
    let texts: Vec<String> = calls.into_iter().map(|call| call.text).collect();
    assert_eq!(texts, split_message(&output, 100), "split only at the limit");
}

#[tokio::test(start_paused = true)]
async fn a_text_ready_at_once_still_shows_once_the_wait_has_passed() {
    let fake = FakeChannel::new("fake", 200, true);
    let scheduler = scheduler_with(&fake, Budget::default());
    let live = scheduler.live("fake", chat("a"), "k", "fake:a");
    let wait = OutboundConfig::default().live_first_wait;
    // A note before a long tool call: whole at once, then nothing for a while.
    let note =
        "Let me look through the whole repository for the place where that setting is read; this takes a moment.";
    live.update(note);
    tokio::time::sleep(wait / 2).await;
    assert!(fake.calls().is_empty(), "it may still be the whole reply: {:?}", fake.calls());
    tokio::time::sleep(wait).await;
    assert_eq!(fake.calls().len(), 1, "shown once the wait passed: {:?}", fake.calls());
    let answer = format!("{note} Found it.");
    live.finish(answer.clone()).await.unwrap();
    assert_eq!(fake.visible().into_iter().map(|(_, text)| text).collect::<Vec<_>>(), [answer]);
}

#[tokio::test(start_paused = true)]
async fn edits_of_a_live_message_keep_the_interval_the_final_one_included() {
    let fake = FakeChannel::new("fake", 2000, true);
    let scheduler = scheduler_with(&fake, Budget::default());
    let interval = OutboundConfig::default().live_edit_interval;
    let live = scheduler.live("fake", chat("a"), "k", "fake:a");
    let answer = "A model streaming briskly: three characters every twenty milliseconds. ".repeat(8);
    let chars: Vec<char> = answer.chars().collect();
    for end in (3..=chars.len()).step_by(3) {
        live.update(chars[..end].iter().collect::<String>());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let finish_called = Instant::now();
    live.finish(answer.clone()).await.unwrap();

    let calls = fake.calls();
    assert_eq!(calls.iter().filter(|call| call.kind == Kind::Send).count(), 1, "{calls:#?}");
    assert!(calls.iter().filter(|call| call.kind == Kind::Edit).count() >= 3, "{calls:#?}");
    for pair in calls.windows(2) {
        assert!(
            pair[1].at - pair[0].at >= interval,
            "edited {:?} after the call before: {calls:#?}",
            pair[1].at - pair[0].at
        );
    }
    let last = calls.last().unwrap();
    assert_eq!(last.text, answer);
    assert!(last.at - finish_called <= interval, "the final edit waited at most one interval");
}

/// The live messages a restart would find, kept in memory.
#[derive(Default)]
struct KeptLive(Mutex<HashMap<String, LiveMessage>>);

#[async_trait]
impl LiveMessages for KeptLive {
    async fn remember(&self, key: &str, message: &LiveMessage) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.0.lock().insert(key.to_owned(), message.clone());
        Ok(())
    }
}

impl KeptLive {
    fn get(&self, key: &str) -> Option<LiveMessage> {
        self.0.lock().get(key).cloned()
    }
}

#[tokio::test(start_paused = true)]
async fn a_reply_run_again_after_a_restart_finishes_the_message_sent_before() {
    let fake = FakeChannel::new("fake", 100, true);
    let kept = Arc::new(KeptLive::default());
    let before = scheduler_with(&fake, Budget::default());
    let live = before.live("fake", chat("a"), "k", "fake:a").remembered_in(kept.clone());
    live.update("The first words of the answer, ");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let message = kept.get("k").expect("the live message is kept as soon as it is sent");
    assert_eq!((message.channel.as_str(), &message.chat), ("fake", &chat("a")));
    assert_eq!(message.text, "The first words of the answer, ");
    // The process dies: the reply is abandoned mid-stream.
    drop(live);
    drop(before);

    let after = scheduler_with(&fake, Budget::default());
    let live = after.live("fake", chat("a"), "k", "fake:a").remembered_in(kept.clone()).resuming(&message);
    live.update("The first words of the answer, again and");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let final_text = "The first words of the answer, again and whole.";
    let delivered = live.finish(final_text).await.unwrap();

    let sends = fake.calls().into_iter().filter(|call| call.kind == Kind::Send).count();
    assert_eq!(sends, 1, "no second message: {:?}", fake.calls());
    assert_eq!(fake.visible(), vec![(message.message_id.clone(), final_text.to_owned())]);
    assert_eq!(delivered, vec![Delivered { message_id: message.message_id }]);
}

#[tokio::test(start_paused = true)]
async fn a_reply_sent_whole_keeps_its_first_part_and_a_resend_finishes_it() {
    let fake = FakeChannel::new("fake", 100, true);
    let kept = Arc::new(KeptLive::default());
    let scheduler = scheduler_with(&fake, Budget::default());
    let text = "short answer";
    scheduler.live("fake", chat("a"), "k", "fake:a").remembered_in(kept.clone()).finish(text).await.unwrap();
    let message = kept.get("k").expect("the first part is kept");
    // A crash before the outbox recorded it: the next start delivers it again.
    let again = scheduler.live("fake", chat("a"), "k", "fake:a").resuming(&message).finish(text).await.unwrap();

    assert_eq!(again, vec![Delivered { message_id: message.message_id.clone() }]);
    let calls = fake.calls();
    assert_eq!(calls.iter().filter(|call| call.kind == Kind::Send).count(), 1, "sent once: {calls:?}");
    assert_eq!(fake.visible(), vec![(message.message_id, text.to_owned())]);
}

#[tokio::test(start_paused = true)]
async fn a_refused_final_edit_marks_the_old_message_and_sends_the_whole_reply_anew() {
    let fake = FakeChannel::new("fake", 100, true);
    let kept = Arc::new(KeptLive::default());
    let scheduler = scheduler_with(&fake, Budget::default());
    let live = scheduler.live("fake", chat("a"), "k", "fake:a").remembered_in(kept.clone());
    live.update("the");
    tokio::time::sleep(Duration::from_millis(100)).await;
    live.update("the start");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(fake.delivered().len(), 1, "the live message is up");
    let old = fake.delivered()[0].message_id.clone();
    // The final edit is refused for good (the message is too old to edit, say).
    fake.script("a", [Some(SendError::Permanent("message can't be edited".into()))]);

    let final_text = "the start, and the end of the answer. ".repeat(4);
    let delivered = live.finish(final_text.clone()).await.expect("the reply still arrives");

    let parts = split_message(&final_text, 100);
    let visible = fake.visible();
    assert_eq!(visible[0], (old, REPLACED_MARKER.to_owned()), "the old message points below");
    let texts: Vec<String> = visible.iter().skip(1).map(|(_, text)| text.clone()).collect();
    assert_eq!(texts, parts, "the whole answer, as new messages");
    let sent: Vec<Call> = fake.delivered().into_iter().filter(|c| c.kind == Kind::Send).skip(1).collect();
    assert_eq!(sent[0].key.as_deref(), Some("k#resent"), "under a key of its own");
    assert_eq!(delivered.len(), parts.len());
    let kept_id = kept.get("k").map(|m| m.message_id);
    assert_eq!(kept_id, Some(sent[0].message_id.clone()), "a restart finishes the new one");
}

#[tokio::test(start_paused = true)]
async fn a_live_reply_finished_before_any_update_is_sent_as_a_final() {
    let fake = FakeChannel::new("fake", 100, true);
    let scheduler = scheduler_with(&fake, Budget::default());
    let live = scheduler.live("fake", chat("a"), "k", "fake:a").reply_to(vec!["in-7".into()]);

    let delivered = live.finish("short answer").await.unwrap();

    assert_eq!(delivered.len(), 1);
    let calls = fake.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        (calls[0].kind, calls[0].text.as_str(), calls[0].key.as_deref()),
        (Kind::Send, "short answer", Some("k"))
    );
}

/// A recorder that keeps every metric by `name{label=value,...}`.
#[derive(Default)]
struct TestRecorder {
    counters: Mutex<HashMap<String, Arc<std::sync::atomic::AtomicU64>>>,
    gauges: Mutex<HashMap<String, Arc<std::sync::atomic::AtomicU64>>>,
    histograms: Mutex<HashMap<String, Arc<Samples>>>,
}

#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl metrics::HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().push(value);
    }
}

fn metric_name(key: &metrics::Key) -> String {
    let mut labels: Vec<String> = key.labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
    labels.sort();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl TestRecorder {
    fn counter(&self, name: &str) -> u64 {
        let counters = self.counters.lock();
        counters.get(name).map_or(0, |c| c.load(std::sync::atomic::Ordering::Relaxed))
    }

    fn gauge(&self, name: &str) -> Option<f64> {
        let gauges = self.gauges.lock();
        gauges.get(name).map(|g| f64::from_bits(g.load(std::sync::atomic::Ordering::Relaxed)))
    }

    fn samples(&self, name: &str) -> usize {
        self.histograms.lock().get(name).map_or(0, |h| h.0.lock().len())
    }
}

impl metrics::Recorder for TestRecorder {
    fn describe_counter(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn describe_gauge(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn describe_histogram(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}

    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        let counter = self.counters.lock().entry(metric_name(key)).or_default().clone();
        metrics::Counter::from_arc(counter)
    }

    fn register_gauge(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        let gauge = self.gauges.lock().entry(metric_name(key)).or_default().clone();
        metrics::Gauge::from_arc(gauge)
    }

    fn register_histogram(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Histogram {
        let histogram = self.histograms.lock().entry(metric_name(key)).or_default().clone();
        metrics::Histogram::from_arc(histogram)
    }
}

#[test]
fn sends_edits_drops_errors_and_waits_are_counted() {
    let recorder = TestRecorder::default();
    // A current-thread runtime runs every task on this thread, where the local recorder is installed.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let fake = FakeChannel::new("metered", 200, true);
            fake.script("a", [None, rate_limited(5, RateScope::Chat)]);
            let scheduler = scheduler_with(&fake, Budget::default());
            let live = scheduler.live("metered", chat("a"), "k", "metered:a");
            for i in 0..10 {
                live.update(format!("draft {i}"));
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            live.finish("done").await.unwrap();
            scheduler.send_final("metered", outbound("b", "b", "hello")).await.unwrap();
        })
    });

    assert_eq!(recorder.counter("bub_outbound_messages_total{channel=metered,kind=send}"), 2);
    assert!(recorder.counter("bub_outbound_messages_total{channel=metered,kind=edit}") >= 2);
    assert_eq!(recorder.counter("bub_outbound_errors_total{channel=metered,kind=rate_limited}"), 1);
    assert!(recorder.counter("bub_outbound_edits_dropped_total{channel=metered}") >= 2);
    assert_eq!(recorder.gauge("bub_outbound_queue_depth{channel=metered}"), Some(0.0));
    assert!(recorder.samples("bub_outbound_rate_limit_wait_seconds{channel=metered}") >= 2);
}

#[tokio::test(start_paused = true)]
async fn the_parts_of_two_replies_to_one_chat_do_not_interleave() {
    let fake = FakeChannel::new("fake", 12, true);
    let scheduler = scheduler_with(&fake, Budget::default());
    let reply = |word: &str| [word; 5].join(" ");

    let sends: Vec<_> = ["aaaaaaaaaa", "bbbbbbbbbb"]
        .into_iter()
        .map(|word| {
            let scheduler = scheduler.clone();
            let text = reply(word);
            tokio::spawn(async move { scheduler.send_final("fake", outbound("a", word, &text)).await })
        })
        .collect();
    for send in sends {
        assert_eq!(send.await.unwrap().unwrap().len(), 5);
    }

    let order: String = fake.delivered().iter().map(|c| c.text.chars().next().unwrap()).collect();
    assert!(order == "aaaaabbbbb" || order == "bbbbbaaaaa", "parts interleaved: {order}");
}

/// A chat whose policy sets its own per-chat rate is held to that rate (a
/// slower one here, or none at all), other chats keep the channel's, and a
/// changed budget (a policy reload) applies to the next send.
#[tokio::test(start_paused = true)]
async fn chats_with_their_own_rate_are_held_to_it_and_a_new_budget_applies() {
    let fake = FakeChannel::new("fake", 100, true);
    let usual = Budget { per_chat: Some(per_seconds(2)), per_channel: None };
    let scheduler = scheduler_with(&fake, usual);
    let own =
        std::collections::HashMap::from([("slow".to_string(), Some(per_seconds(10))), ("free".to_string(), None)]);
    scheduler.set_budget("fake", usual, own);
    let start = Instant::now();

    let chats: Vec<_> = ["slow", "free", "usual"]
        .into_iter()
        .map(|id| {
            let scheduler = scheduler.clone();
            tokio::spawn(async move {
                for i in 0..3 {
                    scheduler.send_final("fake", outbound(id, &format!("{id}{i}"), "hello")).await.unwrap();
                }
            })
        })
        .collect();
    for chat in chats {
        chat.await.unwrap();
    }
    let gaps = |chat: &str| -> Vec<Duration> {
        fake.delivered_to(chat).windows(2).map(|pair| pair[1].at - pair[0].at).collect()
    };
    assert!(gaps("slow").iter().all(|gap| *gap >= Duration::from_secs(10)), "slow: {:?}", gaps("slow"));
    assert!(fake.delivered_to("free").iter().all(|d| d.at - start < Duration::from_secs(1)), "free chat waited");
    assert!(
        gaps("usual").iter().all(|gap| *gap >= Duration::from_secs(2) && *gap < Duration::from_secs(10)),
        "usual: {:?}",
        gaps("usual")
    );

    // A reload: one send a minute for every chat, the overrides gone.
    scheduler.set_budget(
        "fake",
        Budget { per_chat: Some(per_seconds(60)), per_channel: None },
        std::collections::HashMap::new(),
    );
    for i in 0..2 {
        scheduler.send_final("fake", outbound("free", &format!("after{i}"), "hello")).await.unwrap();
    }
    let after = fake.delivered_to("free");
    let last_two = &after[after.len() - 2..];
    assert!(last_two[1].at - last_two[0].at >= Duration::from_secs(60), "the new budget did not apply");
}

#[tokio::test(start_paused = true)]
async fn a_stop_ends_sends_at_their_next_wait_and_names_the_parts_delivered() {
    let fake = FakeChannel::new("fake", 20, true);
    // Part 0 goes through, part 1 fails for a moment: the stop comes during its backoff.
    fake.script("a", [None, Some(SendError::Transient("502".into()))]);
    let scheduler = scheduler_with(&fake, Budget::default());
    let text = "one two three four five six seven eight nine ten";
    assert_eq!(split_message(text, 20).len(), 3);

    let sending = tokio::spawn({
        let scheduler = scheduler.clone();
        async move { scheduler.send_final("fake", outbound("a", "k", text)).await }
    });
    until_calls(&fake, 2).await;
    scheduler.stop();
    let error = sending.await.unwrap().unwrap_err();
    assert!(matches!(error, OutboundError::Stopped { part: 1, .. }), "{error:?}");
    assert_eq!(error.delivered().len(), 1, "part 0 was delivered");
    let later = scheduler.send_final("fake", outbound("b", "other", "hello")).await.unwrap_err();
    assert!(matches!(later, OutboundError::Stopped { part: 0, .. }), "{later:?}");
    assert_eq!(fake.calls().len(), 2, "nothing is attempted once stopped");

    // The next start sends the rest of the reply, and only the rest.
    let next = scheduler_with(&fake, Budget::default());
    let all = next.send_final_after("fake", outbound("a", "k", text), error.delivered().to_vec()).await.unwrap();
    let keys: Vec<String> = fake.delivered().iter().map(|c| c.key.clone().unwrap()).collect();
    assert_eq!(keys, ["k", "k#1", "k#2"], "each part delivered once");
    assert_eq!(all.len(), 3);
    assert_eq!(all[0].message_id, error.delivered()[0].message_id);
}

#[tokio::test]
async fn the_outbox_keeps_the_parts_a_stop_left_delivered() {
    use bub::gateway::store::{GatewayStore, PendingReply};
    use bub_channel::{Outcome, OutcomeStatus};
    let dir = tempfile::tempdir().unwrap();
    let store = GatewayStore::new(bub::db::SqliteTapeStore::open(dir.path().join("bub.db")).await.unwrap());
    let reply = PendingReply { channel: "fake".into(), outbound: outbound("a", "k", "text"), sent: Vec::new() };
    let outcome = Outcome { status: OutcomeStatus::Replied, text: "text".into(), session: "fake:a".into() };
    store.finish(&[], &outcome, &[reply]).await.unwrap();
    store.parts_delivered("k", &["m1".to_string()]).await.unwrap();
    let pending = store.undelivered().await.unwrap();
    assert_eq!(pending.len(), 1, "still pending");
    assert_eq!(pending[0].sent, ["m1"]);
    store.delivered("k", &["m1".to_string(), "m2".to_string()]).await.unwrap();
    assert!(store.undelivered().await.unwrap().is_empty());
}

fn per_minute(count: u32) -> Quota {
    Quota::per_minute(NonZeroU32::new(count).expect("non-zero"))
}

#[tokio::test(start_paused = true)]
async fn typing_takes_only_spare_budget_and_gives_way_to_a_waiting_reply() {
    let fake = FakeChannel::new("fake", 100, true);
    // At most 4 calls in any minute; hints may use half: 2 at once, then one every 30 s.
    let budget = Budget { per_channel: Some(per_minute(4)), per_chat: Some(per_seconds(10)) };
    let scheduler = scheduler_with(&fake, budget);
    let start = Instant::now();

    assert!(scheduler.typing("fake", &chat("a")).await);
    scheduler.send_final("fake", outbound("b", "b1", "one")).await.unwrap();
    // b's second reply waits for b's own budget; the channel still has room for two.
    let waiting = tokio::spawn({
        let scheduler = scheduler.clone();
        async move { scheduler.send_final("fake", outbound("b", "b2", "two")).await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!waiting.is_finished());
    assert!(!scheduler.typing("fake", &chat("c")).await, "a reply waits: the hint gives way");
    waiting.await.unwrap().unwrap();
    assert!(scheduler.typing("fake", &chat("c")).await, "nothing waits: spare room again");
    assert!(!scheduler.typing("fake", &chat("d")).await, "the hints' half is spent");
    scheduler.send_final("fake", outbound("d", "d1", "three")).await.unwrap();

    assert_eq!(fake.typing_calls().len(), 2, "only the hints with spare room reached the platform");
    let second = fake.delivered_to("b");
    assert_eq!(second[1].at - start, Duration::from_secs(10), "b's reply went at its budget's first room");
    // Four calls spent the channel's minute: d's reply waits until the first of them is a minute old.
    assert_eq!(fake.delivered_to("d")[0].at - start, Duration::from_secs(60));
}

#[tokio::test(start_paused = true)]
async fn typing_waits_out_a_429_pause_and_its_own_429_pauses_the_chat() {
    let fake = FakeChannel::new("fake", 100, true);
    fake.script("a", [rate_limited(10, RateScope::Chat)]);
    let scheduler = scheduler_with(&fake, Budget::default());
    let start = Instant::now();

    assert!(!scheduler.typing("fake", &chat("a")).await, "refused with a 429");
    assert!(!scheduler.typing("fake", &chat("a")).await, "skipped during the pause");
    assert!(scheduler.typing("fake", &chat("b")).await, "other chats are not paused");
    scheduler.send_final("fake", outbound("a", "a1", "after the pause")).await.unwrap();
    assert_eq!(fake.typing_calls().iter().filter(|call| call.chat == "a").count(), 1, "no hint into the pause");
    assert!(fake.delivered_to("a")[0].at - start >= Duration::from_secs(10), "the reply honoured the typing's 429");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(scheduler.typing("fake", &chat("a")).await, "shown again after the pause");
}

#[tokio::test(start_paused = true)]
async fn mentions_head_only_the_first_part_and_every_part_fits_with_them() {
    let fake = FakeChannel::new("fake", 60, true);
    let scheduler = scheduler_with(&fake, Budget::default());
    let bob = SenderRef { id: "8".into(), display: Some("Bob".into()), is_bot: false };
    let text = (0..40).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
    let reply = Outbound { mentions: vec![bob.clone()], ..outbound("a", "k", &text) };

    scheduler.send_final("fake", reply.clone()).await.unwrap();
    let parts = fake.delivered_to("a");
    assert!(parts.len() >= 3, "{parts:?}");
    assert_eq!(parts[0].mentions, ["8"], "the first part names Bob");
    assert!(parts[1..].iter().all(|part| part.mentions.is_empty()), "the others do not repeat it");
    let words: Vec<String> = parts.iter().flat_map(|part| part.text.split(' ').map(str::to_owned)).collect();
    assert_eq!(words.join(" "), text);

    // Live: the live message and its final edit keep the mention.
    let fake = FakeChannel::new("live", 400, true);
    let scheduler = scheduler_with(&fake, Budget::default());
    let live = scheduler.live("live", chat("a"), "k2", "s").mentioning(vec![bob]);
    // Long enough (a sentence), and still growing, for the live message to be sent before the end.
    let opening = "Hello, this first sentence is long enough for the live message to be sent at once.";
    live.update(format!("{opening} And"));
    tokio::time::sleep(Duration::from_millis(50)).await;
    live.update(format!("{opening} And there"));
    until_calls(&fake, 1).await;
    live.finish(format!("{opening} And there.")).await.unwrap();
    let calls = fake.delivered_to("a");
    assert_eq!(calls.iter().map(|call| call.kind).collect::<Vec<_>>(), [Kind::Send, Kind::Edit]);
    assert!(calls.iter().all(|call| call.mentions == ["8"]), "{calls:?}");
}
