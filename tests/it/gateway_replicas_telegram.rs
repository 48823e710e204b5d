//! Several `bub gateway` replicas on one PostgreSQL database sharing one
//! Telegram bot (real processes, the fake Bot API, the fake model).
//!
//! Polling: Telegram allows one `getUpdates` at a time per token (a second
//! ends the first with 409), so the replicas take turns by lease: one polls,
//! a killed poller is replaced once its lease expires, a stopped one hands
//! over at once, and no update is lost or answered twice on the way. The
//! fake counts every overlap of two polls as a 409. Webhook: every replica
//! receives.

use crate::support;

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};
use support::fake_model::{FakeModel, Reply};
use support::fake_telegram::{FakeTelegram, SentMessage, TOKEN};
use support::gateway::{GatewayProcess, client};
use support::postgres::DatabaseLink;
use tempfile::TempDir;

/// Answers arrive within this (debug binaries, a loaded 2-core machine).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// What a replica logs when it starts polling the bot.
const POLLING_HERE: &str = "receiving this part here";

/// The notice a chat gets when its session moves to a replica on another
/// workspace volume (each test replica has a home of its own).
const MOVED_NOTICE: &str = "Note: this chat is now served by another gateway replica";

/// Each test runs two or three gateways and measures how fast they hand
/// over: one test at a time, so they do not slow each other down.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One Telegram channel `tg` on the fake (polling unless `extra` sets a
/// webhook), answering everyone, with leases of `lease_seconds`.
fn config(telegram: &FakeTelegram, lease_seconds: u64, extra: &str) -> String {
    format!(
        "[store]\nlease_seconds = {lease_seconds}\n\n\
         [policy.defaults]\ndebounce = {{ quiet_seconds = 0.1 }}\n\
         dm_policy = \"open\"\ngroup_policy = \"open\"\n\n\
         [channels.tg]\nkind = \"telegram\"\ntoken = \"{TOKEN}\"\napi_url = \"{}\"\n{extra}",
        telegram.api_url()
    )
}

async fn replica(home: &Path, url: &str, fake: &FakeModel, config_text: &str) -> GatewayProcess {
    let mut env = fake.vars("openai:gpt-test");
    env.push(("BUB_DATABASE_URL".into(), url.into()));
    GatewayProcess::start_with_config(home, &env, config_text).await
}

/// How many times each replica started polling (from its log).
fn polling_starts(replicas: &[&GatewayProcess]) -> Vec<usize> {
    replicas.iter().map(|replica| replica.stderr().matches(POLLING_HERE).count()).collect()
}

/// Waits until one of `replicas` polls; its index.
async fn wait_for_poller(replicas: &[&GatewayProcess]) -> usize {
    let deadline = Instant::now() + ANSWER_TIMEOUT;
    loop {
        if let Some(index) = polling_starts(replicas).iter().position(|starts| *starts > 0) {
            return index;
        }
        assert!(Instant::now() < deadline, "no replica started polling:\n{}", logs(replicas));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn logs(replicas: &[&GatewayProcess]) -> String {
    replicas.iter().enumerate().map(|(n, replica)| format!("--- replica {n}:\n{}\n", replica.stderr())).collect()
}

/// The bot's replies (the moved-workspace notice aside), by the user message they answer.
fn replies(telegram: &FakeTelegram) -> BTreeMap<i64, Vec<SentMessage>> {
    let mut replies: BTreeMap<i64, Vec<SentMessage>> = BTreeMap::new();
    for sent in telegram.sent() {
        if !sent.text.starts_with(MOVED_NOTICE) {
            replies.entry(sent.reply_to.unwrap_or_default()).or_default().push(sent);
        }
    }
    replies
}

/// Waits until every one of `asked` has a reply; then checks each has exactly one.
async fn each_answered_once(telegram: &FakeTelegram, asked: &[i64], replicas: &[&GatewayProcess]) {
    let all = telegram.wait_until(ANSWER_TIMEOUT, |fake| asked.iter().all(|id| replies(fake).contains_key(id))).await;
    let replies = replies(telegram);
    assert!(all, "not every message was answered: asked {asked:?}, replies {replies:?}\n{}", logs(replicas));
    // A second reply would come from a turn run twice: give it time to show.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let replies = self::replies(telegram);
    for id in asked {
        assert_eq!(replies[id].len(), 1, "message {id} answered more than once: {:?}", replies[id]);
    }
    assert_eq!(replies.len(), asked.len(), "replies to messages nobody sent: {replies:?}");
}

/// The first poll that arrived after `since`: when it came, waiting up to `timeout`.
async fn first_poll_after(telegram: &FakeTelegram, since: Instant, timeout: Duration) -> Option<Instant> {
    telegram.wait_until(timeout, |fake| fake.polls_at().iter().any(|at| *at > since)).await;
    telegram.polls_at().into_iter().find(|at| *at > since)
}

fn homes(count: usize) -> Vec<TempDir> {
    (0..count).map(|_| tempfile::tempdir().unwrap()).collect()
}

/// Two replicas, one bot: only one polls (the fair share of one part over
/// two replicas is one, and the lease makes it one in all); a message is
/// answered once. The poller is SIGKILLed: the other takes polling over
/// once the lease expired, and what users wrote before, during and after
/// the failover is answered, each message once, with no two polls at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_poller_is_replaced_within_the_lease_and_nothing_is_lost_or_doubled() {
    let _alone = ONE_AT_A_TIME.lock().await;
    const LEASE: Duration = Duration::from_secs(2);
    let url = support::postgres::fresh_database().await;
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start_answering("answered").await;
    let config_text = config(&telegram, LEASE.as_secs(), "");
    let homes = homes(2);
    let a = replica(homes[0].path(), &url, &fake, &config_text).await;
    let b = replica(homes[1].path(), &url, &fake, &config_text).await;

    let poller = wait_for_poller(&[&a, &b]).await;
    // Several lease periods: the other replica had every chance to start polling too.
    tokio::time::sleep(3 * LEASE).await;
    let starts = polling_starts(&[&a, &b]);
    assert_eq!(starts.iter().sum::<usize>(), 1, "exactly one replica polls: {starts:?}\n{}", logs(&[&a, &b]));
    let mut asked = vec![telegram.user_says(1001, "before 1"), telegram.user_says(1002, "before 2")];
    each_answered_once(&telegram, &asked, &[&a, &b]).await;
    assert_eq!(telegram.poll_conflicts(), 0, "two polls overlapped:\n{}", logs(&[&a, &b]));

    // The poller dies; users keep writing, to chats it served and to new
    // ones. (One chat each: the debounce would merge messages of one chat
    // sent together into one turn with one reply.)
    let (mut killed, survivor) = if poller == 0 { (a, b) } else { (b, a) };
    asked.push(telegram.user_says(1001, "just before the kill"));
    killed.kill_hard();
    let killed_at = Instant::now();
    asked.push(telegram.user_says(1003, "during the failover 1"));
    asked.push(telegram.user_says(1004, "during the failover 2"));
    let taken_over = first_poll_after(&telegram, killed_at, ANSWER_TIMEOUT).await;
    let failover = taken_over.map(|at| at - killed_at);
    asked.push(telegram.user_says(1002, "after the failover"));
    each_answered_once(&telegram, &asked, &[&killed, &survivor]).await;
    let answered_after = killed_at.elapsed();

    eprintln!("failover after SIGKILL: first poll {failover:?} after the kill (lease {LEASE:?})");
    let failover = failover.expect("nobody polled after the kill");
    assert!(failover < LEASE + Duration::from_secs(5), "the takeover took {failover:?} with a lease of {LEASE:?}");
    assert!(survivor.stderr().contains(POLLING_HERE), "the survivor polls now:\n{}", survivor.stderr());
    assert_eq!(telegram.poll_conflicts(), 0, "two polls overlapped:\n{}", logs(&[&killed, &survivor]));
    eprintln!("every message answered {answered_after:?} after the kill");
    assert!(survivor.stop().await, "the survivor stops cleanly");
}

/// A poller stopped with SIGTERM gives its lease back as soon as it no
/// longer polls, not once its last turn is done: with a lease of 10 s and a
/// turn of 8 s running, the other replica polls within a couple of seconds;
/// the turn still gets its reply, and a message sent meanwhile is answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poller_stopped_cleanly_hands_over_at_once() {
    let _alone = ONE_AT_A_TIME.lock().await;
    const LEASE: Duration = Duration::from_secs(10);
    const TURN: Duration = Duration::from_secs(8);
    let url = support::postgres::fresh_database().await;
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start_answering("answered").await;
    let config_text = config(&telegram, LEASE.as_secs(), "");
    let homes = homes(2);
    let a = replica(homes[0].path(), &url, &fake, &config_text).await;
    let b = replica(homes[1].path(), &url, &fake, &config_text).await;
    let poller = wait_for_poller(&[&a, &b]).await;
    let mut asked = vec![telegram.user_says(1001, "first")];
    each_answered_once(&telegram, &asked, &[&a, &b]).await;
    fake.push(Reply::slow_first_token(TURN, Reply::text("slowly")));
    asked.push(telegram.user_says(1004, "a slow question"));
    let turn_running = fake.request_count() >= 2;
    assert!(
        turn_running || telegram.wait_until(ANSWER_TIMEOUT, |_| fake.request_count() >= 2).await,
        "the slow turn never started"
    );

    let (stopped, survivor) = if poller == 0 { (a, b) } else { (b, a) };
    let stopped_log = stopped.stderr_path.clone();
    let stop_at = Instant::now();
    let stopping = tokio::spawn(stopped.stop());
    asked.push(telegram.user_says(1002, "while it stops"));
    // The survivor's first poll: the stopped one polls no more once its channel stopped.
    let deadline = Instant::now() + ANSWER_TIMEOUT;
    while !survivor.stderr().contains(POLLING_HERE) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let handover = stop_at.elapsed();
    assert!(stopping.await.unwrap(), "the poller stops cleanly on SIGTERM");
    let stopped_text = std::fs::read_to_string(&stopped_log).unwrap_or_default();
    eprintln!("handover after SIGTERM: the other replica polls {handover:?} after the signal (lease {LEASE:?})");
    assert!(
        handover < LEASE / 2,
        "the handover took {handover:?} with a lease of {LEASE:?}:\n--- stopped:\n{stopped_text}\n--- survivor:\n{}",
        survivor.stderr()
    );
    asked.push(telegram.user_says(1003, "after the handover"));
    each_answered_once(&telegram, &asked, &[&survivor]).await;
    assert_eq!(telegram.poll_conflicts(), 0, "two polls overlapped:\n{stopped_text}\n{}", survivor.stderr());
    assert!(survivor.stop().await);
}

/// The poller loses the database (a partition: its heartbeat cannot get
/// through) but not Telegram: it stops polling before its lease could be
/// taken, and the other replica polls once it is, so no two polls overlap.
/// A message sent meanwhile is answered by the other replica, once. Back in
/// touch, the cut-off replica finds it was taken for dead (fenced) and stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poller_cut_off_from_the_database_stops_polling_before_another_takes_over() {
    let _alone = ONE_AT_A_TIME.lock().await;
    const LEASE: Duration = Duration::from_secs(2);
    let url = support::postgres::fresh_database().await;
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start_answering("answered").await;
    let config_text = config(&telegram, LEASE.as_secs(), "");
    let homes = homes(2);
    let link = DatabaseLink::to(&url).await;
    let cut_off = replica(homes[0].path(), &link.url, &fake, &config_text).await;
    wait_for_poller(&[&cut_off]).await;
    let other = replica(homes[1].path(), &url, &fake, &config_text).await;
    let mut asked = vec![telegram.user_says(1001, "before")];
    each_answered_once(&telegram, &asked, &[&cut_off, &other]).await;

    link.cut();
    let cut_at = Instant::now();
    asked.push(telegram.user_says(1002, "during the partition"));
    let deadline = Instant::now() + ANSWER_TIMEOUT;
    while !other.stderr().contains(POLLING_HERE) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let takeover = cut_at.elapsed();
    eprintln!("takeover after a partition: the other replica polls {takeover:?} after the cut (lease {LEASE:?})");
    assert!(other.stderr().contains(POLLING_HERE), "the other replica never polled:\n{}", logs(&[&cut_off, &other]));
    asked.push(telegram.user_says(1003, "after the takeover"));
    each_answered_once(&telegram, &asked, &[&cut_off, &other]).await;
    assert_eq!(telegram.poll_conflicts(), 0, "two polls overlapped:\n{}", logs(&[&cut_off, &other]));
    assert!(
        cut_off.stderr().contains("stops receiving"),
        "the cut-off replica said why it stopped:\n{}",
        cut_off.stderr()
    );

    link.mend();
    let fenced =
        telegram.wait_until(ANSWER_TIMEOUT, |_| cut_off.stderr().contains("this replica was taken for dead")).await;
    assert!(fenced, "back in touch, the cut-off replica stops:\n{}", cut_off.stderr());
    assert_eq!(polling_starts(&[&cut_off]), [1], "and does not poll again");
    assert_eq!(telegram.poll_conflicts(), 0, "two polls overlapped:\n{}", logs(&[&cut_off, &other]));
    assert!(other.stop().await);
}

/// Webhook mode: Telegram POSTs to whichever replica the load balancer
/// picks, so every replica receives (none polls), and an update sent to
/// both (Telegram retrying through the balancer) is answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_webhook_mode_every_replica_receives_and_each_update_is_answered_once() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let url = support::postgres::fresh_database().await;
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start_answering("answered").await;
    let hook = "webhook_url = \"https://bot.example.com/telegram/tg\"\nwebhook_secret = \"s3cret_token-1\"\n";
    let config_text = config(&telegram, 2, hook);
    let homes = homes(2);
    let a = replica(homes[0].path(), &url, &fake, &config_text).await;
    let b = replica(homes[1].path(), &url, &fake, &config_text).await;

    let post = |replica: &GatewayProcess, update: &Value| {
        let request = client()
            .post(format!("{}/telegram/tg", replica.base_url()))
            .header(bub_telegram::SECRET_HEADER, "s3cret_token-1")
            .json(update);
        async move { request.send().await.expect("the replica answers").status().as_u16() }
    };
    // Two rounds over four chats: the second reaches each chat through the
    // replica that did not run its first turn. (Messages of one chat sent
    // together would be one turn: the debounce merges them.)
    let mut asked = Vec::new();
    for round in 0..2 {
        for n in 0..4 {
            let chat = 1001 + n;
            let text = format!("round {round} in chat {chat}");
            let update =
                telegram.update(json!({"id": chat, "type": "private", "first_name": "Ada"}), chat, &text, json!({}));
            asked.push(update["message"]["message_id"].as_i64().unwrap());
            let (first, second) = if (n + round) % 2 == 0 { (&a, &b) } else { (&b, &a) };
            assert_eq!(post(first, &update).await, 200, "a replica took {text:?}:\n{}", logs(&[&a, &b]));
            if n == 3 {
                assert_eq!(post(second, &update).await, 200, "the same update again, through the other replica");
            }
        }
        each_answered_once(&telegram, &asked, &[&a, &b]).await;
    }
    assert!(!telegram.calls().iter().any(|call| call == "getUpdates"), "nobody polls in webhook mode");
    assert_eq!(polling_starts(&[&a, &b]), [0, 0], "webhook receiving is not leased");
    assert!(a.stop().await && b.stop().await);
}
