//! The gateway's tables behave alike on every backend: each case below runs
//! on SQLite and on PostgreSQL, through the stores the gateway uses
//! ([`GatewayStore`], its [`PairingStore`](bub::gateway::pairing::PairingStore))
//! and, where a case needs a clock or caps of its own, through the
//! [`GatewayTables`] trait beneath them.

use crate::support;

use bub::db::gateway::{AuditRow, NewAudit, PairingApproval, PairingRequest, PairingRequested};
use bub::db::{GatewayTables, PgTapeStore, SqliteTapeStore};
use bub::gateway::outbound::{LiveMessage, LiveMessages};
use bub::gateway::pairing::Requested;
use bub::gateway::pairing::store::{ApproveError, MAX_GROUPS_PER_SENDER};
use bub::gateway::store::{GatewayStore, PendingReply, Received};
use bub::policy::PairingSubject;
use bub_channel::{ChatKind, ChatRef, Delivery, Edit, Inbound, Outbound, Outcome, OutcomeStatus, SenderRef};
use chrono::{DateTime, Duration, Utc};
use std::sync::Arc;
use tempfile::TempDir;

/// One database's gateway tables, as the store and as the trait.
struct Db {
    store: GatewayStore,
    tables: Arc<dyn GatewayTables>,
    _dir: TempDir,
}

async fn sqlite() -> Db {
    let dir = tempfile::tempdir().expect("tempdir");
    let tapes = SqliteTapeStore::open(dir.path().join("bub.db")).await.expect("open sqlite store");
    let tables: Arc<dyn GatewayTables> = tapes.into();
    Db { store: GatewayStore::new(tables.clone()), tables, _dir: dir }
}

async fn postgres() -> Db {
    let url = support::postgres::fresh_database().await;
    let tapes = PgTapeStore::connect(&url).await.expect("open postgres store");
    let tables: Arc<dyn GatewayTables> = tapes.into();
    Db { store: GatewayStore::new(tables.clone()), tables, _dir: tempfile::tempdir().expect("tempdir") }
}

/// Every case (an async fn taking a [`Db`]) as a test on SQLite and one on
/// PostgreSQL, in modules `sqlite` and `postgres`.
macro_rules! on_every_database {
    ($($case:ident),* $(,)?) => {
        mod sqlite { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $case() { super::$case(super::sqlite().await).await } )* }
        mod postgres { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $case() { super::$case(super::postgres().await).await } )* }
    };
}

fn chat(id: &str, thread: Option<&str>) -> ChatRef {
    ChatRef { id: id.into(), kind: ChatKind::Group, thread_id: thread.map(str::to_string) }
}

fn inbound_in(channel: &str, chat: ChatRef, message_id: &str, text: &str) -> Inbound {
    Inbound {
        channel: channel.into(),
        chat,
        sender: SenderRef { id: "7".into(), display: Some("Ann".into()), is_bot: false },
        message_id: message_id.into(),
        text: text.into(),
        attachments: Vec::new(),
        addressing: Default::default(),
        from_self: false,
        forwarded: false,
        delivery: Delivery::Channel,
        received_at: Utc::now(),
        edit: None,
        trace: None,
    }
}

fn inbound(message_id: &str, text: &str) -> Inbound {
    inbound_in("tg", chat("100", None), message_id, text)
}

fn edit_of(message: &Inbound, version: &str, text: &str) -> Inbound {
    Inbound { text: text.into(), edit: Some(Edit { version: version.into() }), ..message.clone() }
}

fn outcome(text: &str) -> Outcome {
    Outcome { status: OutcomeStatus::Replied, text: text.into(), session: "tg:100".into() }
}

fn reply(key: &str, text: &str) -> PendingReply {
    PendingReply {
        channel: "tg".into(),
        outbound: Outbound {
            chat: chat("100", None),
            text: text.into(),
            reply_to: vec!["1".into()],
            idempotency_key: key.into(),
            session: "tg:100".into(),
            mentions: Vec::new(),
        },
        sent: Vec::new(),
    }
}

async fn stored(db: &Db, message: &Inbound) -> i64 {
    match db.store.receive(message, "tg:100").await.unwrap() {
        Received::New(seq) => seq,
        other => panic!("{} was stored before: {other:?}", message.key()),
    }
}

fn pending_texts(replies: &[PendingReply]) -> Vec<(&str, &str)> {
    replies.iter().map(|r| (r.outbound.idempotency_key.as_str(), r.outbound.text.as_str())).collect()
}

async fn a_message_is_stored_once_per_channel_and_id_and_a_duplicate_reports_the_first_outcome(db: Db) {
    let first = inbound("1", "hello");
    let seq = stored(&db, &first).await;
    let again = db.store.receive(&first, "tg:100").await.unwrap();
    assert_eq!(again, Received::Duplicate(None), "no outcome while it runs");

    let elsewhere = inbound_in("dc", chat("100", None), "1", "hello");
    assert!(matches!(db.store.receive(&elsewhere, "dc:100").await.unwrap(), Received::New(_)), "ids are per channel");
    let edited = edit_of(&first, "v1", "hello, edited");
    assert!(matches!(db.store.receive(&edited, "tg:100").await.unwrap(), Received::New(_)), "an edit has its own key");

    db.store.finish(&[seq], &outcome("hi"), &[]).await.unwrap();
    let resent = Inbound { text: "something else".into(), ..first.clone() };
    assert_eq!(db.store.receive(&resent, "tg:100").await.unwrap(), Received::Duplicate(Some(outcome("hi"))));
    assert_eq!(db.store.outcome("tg", "1").await.unwrap(), Some(outcome("hi")));
    assert_eq!(db.store.original("tg", "1").await.unwrap().map(|m| m.text), Some("hello".into()), "the first is kept");
    assert_eq!(db.store.original("tg", "2").await.unwrap(), None);
    db.store.ping().await.unwrap();
}

/// Replicas handed the same message at once (a platform's retry while the
/// first delivery is stored) store it once.
async fn the_same_message_received_at_once_by_many_tasks_is_stored_once(db: Db) {
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let store = db.store.clone();
        tasks.spawn(async move { store.receive(&inbound("1", "hello"), "tg:100").await });
    }
    let answers = tasks.join_all().await.into_iter().map(Result::unwrap).collect::<Vec<_>>();
    assert_eq!(answers.iter().filter(|a| matches!(a, Received::New(_))).count(), 1, "{answers:?}");
    assert_eq!(answers.iter().filter(|a| **a == Received::Duplicate(None)).count(), 19);
    assert_eq!(db.store.unfinished().await.unwrap().len(), 1);
}

async fn finish_stores_outcomes_and_replies_together_and_a_reply_key_is_queued_once(db: Db) {
    let (a, b) = (stored(&db, &inbound("1", "one")).await, stored(&db, &inbound("2", "two")).await);
    db.store.finish(&[a, b], &outcome("both"), &[reply("r1", "answer")]).await.unwrap();
    assert_eq!(db.store.outcome("tg", "1").await.unwrap(), Some(outcome("both")));
    assert_eq!(db.store.outcome("tg", "2").await.unwrap(), Some(outcome("both")));
    assert!(db.store.unfinished().await.unwrap().is_empty());

    // A turn run again after a crash queues the same key: the first reply stays.
    let c = stored(&db, &inbound("3", "three")).await;
    db.store.finish(&[c], &outcome("again"), &[reply("r1", "answer, run again"), reply("r2", "more")]).await.unwrap();
    let pending = db.store.undelivered().await.unwrap();
    assert_eq!(pending_texts(&pending), vec![("r1", "answer"), ("r2", "more")]);
    assert_eq!(pending[0].channel, "tg");

    db.store.delivered("r1", &["p1".into()]).await.unwrap();
    assert_eq!(pending_texts(&db.store.undelivered().await.unwrap()), vec![("r2", "more")]);
    db.store.undeliverable("r2", "chat not found").await.unwrap();
    assert!(db.store.undelivered().await.unwrap().is_empty());
}

async fn unfinished_messages_and_undelivered_replies_come_back_oldest_first(db: Db) {
    let a = stored(&db, &inbound("1", "one")).await;
    let b = stored(&db, &inbound("2", "two")).await;
    let c = stored(&db, &inbound("3", "three")).await;
    db.store.start_turn(&[b], "tg:100", "turn-1").await.unwrap();
    db.store.finish(&[a], &outcome("done"), &[]).await.unwrap();

    let edited = edit_of(&inbound("3", "three"), "v1", "three, edited");
    db.store.replace_waiting(c, &edited).await.unwrap();
    db.store.replace_waiting(a, &edit_of(&inbound("1", "one"), "v1", "too late")).await.unwrap();
    assert_eq!(db.store.original("tg", "1").await.unwrap().map(|m| m.text), Some("one".into()), "a is done");

    let unfinished = db.store.unfinished().await.unwrap();
    let seen: Vec<_> = unfinished.iter().map(|u| (u.seq, u.inbound.text.as_str(), u.turn.as_deref())).collect();
    assert_eq!(seen, vec![(b, "two", Some("turn-1")), (c, "three, edited", None)]);
    assert_eq!(unfinished[0].session.as_deref(), Some("tg:100"));

    let d = stored(&db, &inbound("4", "four")).await;
    let replies: Vec<_> = ["k3", "k1", "k2"].iter().map(|k| reply(k, k)).collect();
    db.store.finish(&[b], &outcome("b"), &replies).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    db.store.finish(&[d], &outcome("d"), &[reply("k0", "k0")]).await.unwrap();
    let keys: Vec<_> = db.store.undelivered().await.unwrap().into_iter().map(|r| r.outbound.idempotency_key).collect();
    assert_eq!(keys, ["k3", "k1", "k2", "k0"], "a turn's replies in their order, then the next turn's");
}

async fn parts_delivered_before_a_stop_are_kept_with_the_pending_reply(db: Db) {
    let seq = stored(&db, &inbound("1", "one")).await;
    db.store.finish(&[seq], &outcome("long"), &[reply("r1", "part one, part two, part three")]).await.unwrap();
    db.store.parts_delivered("r1", &["p1".into(), "p2".into()]).await.unwrap();
    let pending = db.store.undelivered().await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].sent, ["p1", "p2"]);

    db.store.delivered("r1", &["p1".into(), "p2".into(), "p3".into()]).await.unwrap();
    db.store.parts_delivered("r1", &["late".into()]).await.unwrap();
    assert!(db.store.undelivered().await.unwrap().is_empty(), "a delivered reply stays delivered");
}

async fn a_file_delivered_under_its_key_is_not_sent_again(db: Db) {
    let file = serde_json::json!({"name": "report.pdf", "size": 3});
    assert_eq!(db.store.begin_file("f1", "tg", "tg:100", &file).await.unwrap(), None, "send it");
    assert_eq!(db.store.begin_file("f1", "tg", "tg:100", &file).await.unwrap(), None, "cut by a crash: send again");
    db.store.file_delivered("f1", "msg-9").await.unwrap();
    assert_eq!(db.store.begin_file("f1", "tg", "tg:100", &file).await.unwrap(), Some("msg-9".into()));

    assert_eq!(db.store.begin_file("f2", "tg", "tg:100", &file).await.unwrap(), None);
    db.store.file_not_sent("f2", "too large").await.unwrap();
    assert_eq!(db.store.begin_file("f2", "tg", "tg:100", &file).await.unwrap(), None, "a failed file may go again");
    db.store.file_delivered("f2", "msg-10").await.unwrap();
    assert_eq!(db.store.begin_file("f2", "tg", "tg:100", &file).await.unwrap(), Some("msg-10".into()));
}

fn live(message_id: &str, text: &str) -> LiveMessage {
    LiveMessage { channel: "tg".into(), chat: chat("100", Some("5")), message_id: message_id.into(), text: text.into() }
}

async fn a_live_message_is_kept_until_its_reply_is_final(db: Db) {
    db.store.remember("r1", &live("m1", "Looking")).await.unwrap();
    db.store.remember("r1", &live("m2", "Looking it up")).await.unwrap();
    assert_eq!(db.store.live_message("r1").await.unwrap(), Some(live("m2", "Looking it up")), "the newest is kept");
    // What a model streamed may hold any character.
    db.store.remember("r2", &live("m3", "odd \u{0} text")).await.unwrap();
    db.store.remember("r3", &live("m4", "kept")).await.unwrap();

    let seq = stored(&db, &inbound("1", "one")).await;
    db.store.finish(&[seq], &outcome("done"), &[reply("r1", "done"), reply("r2", "x")]).await.unwrap();
    assert!(db.store.live_message("r1").await.unwrap().is_some(), "pending: a restart edits it");
    db.store.delivered("r1", &["m2".into()]).await.unwrap();
    assert_eq!(db.store.live_message("r1").await.unwrap(), None, "delivered: forgotten");
    db.store.undeliverable("r2", "blocked").await.unwrap();
    assert_eq!(db.store.live_message("r2").await.unwrap(), None, "given up: forgotten");

    assert_eq!(db.store.forget_live_before(Utc::now() - Duration::days(7)).await.unwrap(), 0);
    assert_eq!(db.store.live_message("r3").await.unwrap(), Some(live("m4", "kept")));
    assert_eq!(db.store.forget_live_before(Utc::now() + Duration::seconds(1)).await.unwrap(), 1);
    assert_eq!(db.store.live_message("r3").await.unwrap(), None);
}

async fn latest_per_chat_lists_each_chats_newest_message_newest_first_without_edits(db: Db) {
    let since = Utc::now() - Duration::hours(1);
    let a1 = inbound_in("tg", chat("A", None), "1", "first in A");
    let b2 = inbound_in("tg", chat("B", None), "2", "B, whose text holds \u{0}");
    let a3 = inbound_in("tg", chat("A", Some("t")), "3", "A's thread");
    let a4 = inbound_in("tg", chat("A", None), "4", "newest in A");
    let other = inbound_in("dc", chat("C", None), "5", "another channel");
    for message in [&a1, &b2, &a3, &a4, &other] {
        stored(&db, message).await;
    }
    stored(&db, &edit_of(&b2, "v1", "an edit is not a newer message")).await;

    let latest = |limit| db.store.latest_per_chat("tg", since, limit);
    let seen: Vec<_> =
        latest(10).await.unwrap().into_iter().map(|m| (m.chat.id, m.chat.thread_id, m.message_id)).collect();
    assert_eq!(
        seen,
        vec![
            ("A".into(), None, "4".into()),
            ("A".into(), Some("t".into()), "3".into()),
            ("B".into(), None, "2".into())
        ]
    );
    assert_eq!(latest(2).await.unwrap().len(), 2);
    let later = db.store.latest_per_chat("tg", Utc::now() + Duration::seconds(1), 10).await.unwrap();
    assert!(later.is_empty(), "nothing received since");
}

async fn chats_lists_each_session_with_its_newest_message_and_counts_newest_first(db: Db) {
    let receive = |message: Inbound, session: &'static str| {
        let store = &db.store;
        async move {
            match store.receive(&message, session).await.unwrap() {
                Received::New(seq) => seq,
                other => panic!("{} was stored before: {other:?}", message.key()),
            }
        }
    };
    let a1 = receive(inbound_in("tg", chat("A", None), "1", "first in A"), "tg:A").await;
    receive(inbound_in("tg", chat("B", None), "2", "in B"), "tg:B").await;
    receive(inbound_in("tg", chat("A", Some("t")), "3", "A's thread"), "tg:A:t").await;
    receive(inbound_in("dc", chat("C", None), "4", "another channel"), "dc:C").await;
    let a5 = receive(inbound_in("tg", chat("A", None), "5", "newest in A"), "tg:A").await;
    db.store.finish(&[a1], &outcome("done"), &[]).await.unwrap();
    db.store.start_turn(&[a5], "tg:A", "turn-1").await.unwrap();

    let listed: Vec<_> = db
        .tables
        .chats(None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|row| {
            let message: Inbound = serde_json::from_str(&row.inbound).unwrap();
            (row.channel, row.session, message.message_id, row.messages, row.unfinished)
        })
        .collect();
    let expected = |rows: &[(&str, &str, &str, i64, i64)]| -> Vec<(String, String, String, i64, i64)> {
        rows.iter().map(|&(c, s, m, n, u)| (c.into(), s.into(), m.into(), n, u)).collect()
    };
    assert_eq!(
        listed,
        expected(&[
            ("tg", "tg:A", "5", 2, 1),
            ("dc", "dc:C", "4", 1, 1),
            ("tg", "tg:A:t", "3", 1, 1),
            ("tg", "tg:B", "2", 1, 1),
        ])
    );
    let tg: Vec<_> = db.tables.chats(Some("tg"), 2).await.unwrap().into_iter().map(|row| row.session).collect();
    assert_eq!(tg, vec!["tg:A".to_string(), "tg:A:t".to_string()], "one channel, at most two");
    assert!(db.tables.chats(Some("nope"), 10).await.unwrap().is_empty());
    let newest = &db.tables.chats(None, 1).await.unwrap()[0];
    assert!(newest.last_received_at.starts_with("20"), "{newest:?}");
}

fn is_pending(requested: &Requested) -> bool {
    matches!(requested, Requested::Pending { .. })
}

async fn a_code_is_requested_approved_listed_and_revoked(db: Db) {
    let pairing = db.store.pairing();
    let Requested::Pending { code, notify: true } =
        pairing.request("tg", PairingSubject::User, "42", Some("Ann"), "42").await.unwrap()
    else {
        panic!("a new sender gets a code to send")
    };
    let again = pairing.request("tg", PairingSubject::User, "42", Some("Ann"), "42").await.unwrap();
    assert_eq!(again, Requested::Pending { code: code.clone(), notify: false }, "same code, not sent again yet");
    assert!(!pairing.is_approved("tg", PairingSubject::User, "42").await.unwrap());

    let listed = pairing.list(None).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].state.as_str(), listed[0].code.clone()), ("pending", Some(code.to_string())));
    assert_eq!(listed[0].requested_by.as_deref(), Some("42"));

    let typed = code.to_string().to_lowercase();
    let approved = pairing.approve("tg", &typed, "admin").await.unwrap();
    assert_eq!(
        (approved.subject, approved.id.as_str(), approved.display.as_deref()),
        (PairingSubject::User, "42", Some("Ann"))
    );
    assert!(pairing.is_approved("tg", PairingSubject::User, "42").await.unwrap());
    assert!(!pairing.is_approved("tg", PairingSubject::Chat, "42").await.unwrap(), "a user, not a chat");
    assert!(!pairing.is_approved("dc", PairingSubject::User, "42").await.unwrap(), "on this channel only");
    assert_eq!(pairing.request("tg", PairingSubject::User, "42", None, "42").await.unwrap(), Requested::Approved);
    assert!(matches!(pairing.approve("tg", &typed, "admin").await, Err(ApproveError::Unknown { .. })), "used up");
    let listed = pairing.list(Some("tg")).await.unwrap();
    assert_eq!((listed[0].state.as_str(), listed[0].code.as_deref()), ("approved", None));
    assert_eq!(listed[0].approved_by.as_deref(), Some("admin"));
    assert!(pairing.list(Some("dc")).await.unwrap().is_empty());

    assert_eq!(pairing.revoke("tg", "42").await.unwrap(), 1);
    assert!(!pairing.is_approved("tg", PairingSubject::User, "42").await.unwrap());
    assert!(pairing.list(None).await.unwrap().is_empty());
    assert_eq!(pairing.revoke("tg", "42").await.unwrap(), 0);
}

fn at(time: DateTime<Utc>) -> String {
    time.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// A fresh code, as the gateway stores them.
fn random_code() -> String {
    bub::gateway::pairing::code::new_code().stored().to_string()
}

/// A request of `subject` `id` by `by` at `now`, with an hour's codes, sent
/// again after ten minutes, and the caps given.
fn request_at(now: DateTime<Utc>, subject: &'static str, id: &str, by: &str, caps: (i64, i64)) -> PairingRequest {
    PairingRequest {
        channel: "tg".into(),
        subject,
        id: id.into(),
        display: None,
        requested_by: by.into(),
        now: at(now),
        expired_before: at(now - Duration::hours(1)),
        resend_before: at(now - Duration::minutes(10)),
        max_pending: caps.0,
        max_groups_per_sender: caps.1,
        new_code: random_code,
    }
}

const ROOMY: (i64, i64) = (1000, 3);

fn code_of(requested: PairingRequested) -> String {
    match requested {
        PairingRequested::Pending { code, .. } => code,
        other => panic!("expected a pending code, got {other:?}"),
    }
}

async fn an_expired_code_cannot_be_approved_and_the_sender_gets_a_new_one(db: Db) {
    let t0 = Utc::now() - Duration::hours(3);
    let old = code_of(db.tables.request_pairing(request_at(t0, "user", "42", "42", ROOMY)).await.unwrap());
    let resent = db.tables.request_pairing(request_at(t0 + Duration::minutes(11), "user", "42", "42", ROOMY)).await;
    assert_eq!(resent.unwrap(), PairingRequested::Pending { code: old.clone(), notify: true }, "sent again");
    let soon = db.tables.request_pairing(request_at(t0 + Duration::minutes(12), "user", "42", "42", ROOMY)).await;
    assert_eq!(soon.unwrap(), PairingRequested::Pending { code: old.clone(), notify: false });

    let (now, expired_before) = (at(t0 + Duration::hours(2)), at(t0 + Duration::hours(1)));
    let approval = db.tables.approve_pairing("tg", &old, "admin", &now, &expired_before).await.unwrap();
    assert_eq!(approval, PairingApproval::Expired);
    assert!(db.tables.list_pairing(Some("tg"), &expired_before).await.unwrap().is_empty(), "expired: not listed");

    let later = t0 + Duration::hours(2);
    let new = db.tables.request_pairing(request_at(later, "user", "42", "42", ROOMY)).await.unwrap();
    assert!(matches!(new, PairingRequested::Pending { notify: true, .. }), "{new:?}");
    let (now, expired_before) = (at(later), at(later - Duration::hours(1)));
    let approval = db.tables.approve_pairing("tg", &code_of(new), "admin", &now, &expired_before).await.unwrap();
    assert!(matches!(approval, PairingApproval::Approved { .. }), "{approval:?}");
    assert!(db.tables.is_approved("tg", "user", "42").await.unwrap());
    let unknown = db.tables.approve_pairing("tg", "NOSUCHCD", "admin", &now, &expired_before).await.unwrap();
    assert_eq!(unknown, PairingApproval::Unknown);
}

/// Ported from the unit test of `gateway::pairing::store`.
async fn one_sender_leaves_codes_for_a_few_groups_and_everyone_else_keeps_their_room(db: Db) {
    let store = db.store.pairing();
    let group = |n: usize| format!("-100{n}");
    for n in 0..MAX_GROUPS_PER_SENDER as usize {
        assert!(is_pending(&store.request("tg", PairingSubject::Chat, &group(n), None, "666").await.unwrap()));
    }
    let over = store.request("tg", PairingSubject::Chat, &group(99), None, "666").await.unwrap();
    assert_eq!(over, Requested::TooManyFromSender);
    let again = store.request("tg", PairingSubject::Chat, &group(0), None, "666").await.unwrap();
    assert!(matches!(again, Requested::Pending { notify: false, .. }), "a group it asked for keeps its code");
    let own = store.request("tg", PairingSubject::User, "666", None, "666").await.unwrap();
    assert!(is_pending(&own), "the sender's own code is apart from its groups'");
    let other = store.request("tg", PairingSubject::Chat, &group(99), None, "1002").await.unwrap();
    assert!(is_pending(&other), "another sender asks for the same group");
    let elsewhere = store.request("dc", PairingSubject::Chat, "5", None, "666").await.unwrap();
    assert!(is_pending(&elsewhere), "counted per channel");

    let listed = store.list(Some("tg")).await.unwrap();
    let asked: Vec<_> = listed.iter().filter(|r| r.subject == "chat").map(|r| r.requested_by.as_deref()).collect();
    assert_eq!(asked.iter().filter(|by| **by == Some("666")).count(), MAX_GROUPS_PER_SENDER as usize);
    // An approved group no longer counts: the sender may ask for another.
    let code = listed.iter().find(|r| r.id == group(0)).and_then(|r| r.code.clone()).unwrap();
    store.approve("tg", &code, "admin").await.unwrap();
    assert!(is_pending(&store.request("tg", PairingSubject::Chat, &group(100), None, "666").await.unwrap()));
}

async fn a_full_channel_refuses_new_codes_until_one_expires(db: Db) {
    let t0 = Utc::now() - Duration::hours(3);
    let caps = (3, 3);
    for user in ["1", "2", "3"] {
        code_of(db.tables.request_pairing(request_at(t0, "user", user, user, caps)).await.unwrap());
    }
    let refused = db.tables.request_pairing(request_at(t0, "user", "4", "4", caps)).await.unwrap();
    assert_eq!(refused, PairingRequested::TooMany, "no code is evicted for a new one");
    let kept = db.tables.request_pairing(request_at(t0, "user", "1", "1", caps)).await.unwrap();
    assert!(matches!(kept, PairingRequested::Pending { notify: false, .. }), "a waiting code is still answered");
    let mut elsewhere = request_at(t0, "user", "4", "4", caps);
    elsewhere.channel = "dc".into();
    code_of(db.tables.request_pairing(elsewhere).await.unwrap());

    let later = t0 + Duration::hours(2);
    code_of(db.tables.request_pairing(request_at(later, "user", "4", "4", caps)).await.unwrap());
    let listed = db.tables.list_pairing(Some("tg"), &at(later - Duration::hours(1))).await.unwrap();
    assert_eq!(listed.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["4"], "the expired codes went");
}

/// Two codes only: every draw meets one of them once both are taken.
fn two_codes() -> String {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    ["AAAAAAAA", "BBBBBBBB"][NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 2].into()
}

fn always_a() -> String {
    "AAAAAAAA".into()
}

async fn a_code_another_row_holds_is_drawn_again_and_never_shared(db: Db) {
    let now = Utc::now();
    let first = PairingRequest { new_code: always_a, ..request_at(now, "user", "1", "1", ROOMY) };
    assert_eq!(code_of(db.tables.request_pairing(first).await.unwrap()), "AAAAAAAA");
    let second = PairingRequest { new_code: two_codes, ..request_at(now, "user", "2", "2", ROOMY) };
    assert_eq!(code_of(db.tables.request_pairing(second).await.unwrap()), "BBBBBBBB");
    let third = PairingRequest { new_code: two_codes, ..request_at(now, "user", "3", "3", ROOMY) };
    assert!(db.tables.request_pairing(third).await.is_err(), "no code left: the request fails, nothing is shared");

    let expired_before = at(now - Duration::hours(1));
    let listed = db.tables.list_pairing(Some("tg"), &expired_before).await.unwrap();
    assert_eq!(listed.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["1", "2"]);
    let approval = db.tables.approve_pairing("tg", "BBBBBBBB", "admin", &at(now), &expired_before).await.unwrap();
    assert!(matches!(approval, PairingApproval::Approved { ref id, .. } if id == "2"), "{approval:?}");
}

/// Many requests at once (many replicas, many connections on PostgreSQL)
/// never pass the channel's cap nor a sender's.
async fn concurrent_requests_never_pass_the_caps(db: Db) {
    let now = Utc::now();
    let caps = (5, 2);
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..40 {
        let tables = db.tables.clone();
        tasks.spawn(async move { tables.request_pairing(request_at(now, "user", &n.to_string(), "x", caps)).await });
    }
    let answers = tasks.join_all().await.into_iter().map(Result::unwrap).collect::<Vec<_>>();
    let pending = answers.iter().filter(|a| matches!(a, PairingRequested::Pending { .. })).count();
    assert_eq!(pending, 5, "{answers:?}");
    assert_eq!(answers.iter().filter(|a| **a == PairingRequested::TooMany).count(), 35);

    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..20 {
        let tables = db.tables.clone();
        let request = PairingRequest { channel: "dc".into(), ..request_at(now, "chat", &format!("-{n}"), "666", caps) };
        tasks.spawn(async move { tables.request_pairing(request).await });
    }
    let answers = tasks.join_all().await.into_iter().map(Result::unwrap).collect::<Vec<_>>();
    let pending = answers.iter().filter(|a| matches!(a, PairingRequested::Pending { .. })).count();
    assert_eq!(pending, 2, "{answers:?}");
    let listed = db.tables.list_pairing(None, &at(now - Duration::hours(1))).await.unwrap();
    assert_eq!(listed.len(), 7, "5 on tg, 2 on dc");
}

fn audit_entry(n: usize) -> NewAudit {
    NewAudit {
        at: format!("2026-01-01T00:00:{n:02}Z"),
        admin: if n.is_multiple_of(2) { "ann" } else { "bob" }.into(),
        action: "config.apply".into(),
        target: None,
        diff: Some(format!("--- running\n+++ edited\n@@ -1 +1 @@\n-busy = \"queue\"\n+busy = \"steer\" # {n}\n")),
        version_before: Some(format!("{n:016x}")),
        version_after: Some(format!("{:016x}", n + 1)),
        outcome: "applied".into(),
        detail: None,
    }
}

/// What a stored row should read back as.
fn as_row(seq: i64, entry: NewAudit) -> AuditRow {
    let NewAudit { at, admin, action, target, diff, version_before, version_after, outcome, detail } = entry;
    AuditRow { seq, at, admin, action, target, diff, version_before, version_after, outcome, detail }
}

async fn audit_rows_are_recorded_and_listed_newest_first(db: Db) {
    assert_eq!(db.tables.audit(None, 10).await.unwrap(), [], "an empty log");
    let applied = audit_entry(1);
    let first = db.tables.record_audit(applied.clone()).await.unwrap();
    let refused = NewAudit {
        action: "pairing.refuse".into(),
        target: Some("tg ABCD2345".into()),
        diff: None,
        version_before: None,
        version_after: None,
        outcome: "rejected".into(),
        detail: Some("no pending code ABCD2345 on tg".into()),
        ..audit_entry(2)
    };
    let second = db.tables.record_audit(refused.clone()).await.unwrap();
    let restart =
        NewAudit { outcome: "needs_restart".into(), detail: Some("http, channels.more".into()), ..audit_entry(3) };
    let third = db.tables.record_audit(restart.clone()).await.unwrap();
    assert!(first < second && second < third, "{first} {second} {third}");
    assert_eq!(
        db.tables.audit(None, 10).await.unwrap(),
        [as_row(third, restart), as_row(second, refused), as_row(first, applied)]
    );
}

async fn the_audit_log_is_read_a_page_at_a_time(db: Db) {
    let mut seqs = Vec::new();
    for n in 0..7 {
        seqs.push(db.tables.record_audit(audit_entry(n)).await.unwrap());
    }
    let mut pages = Vec::new();
    let mut before = None;
    loop {
        let page = db.tables.audit(before, 3).await.unwrap();
        let Some(last) = page.last() else { break };
        before = Some(last.seq);
        pages.push(page.iter().map(|row| row.seq).collect::<Vec<_>>());
    }
    seqs.reverse();
    let expected: Vec<Vec<i64>> = seqs.chunks(3).map(<[i64]>::to_vec).collect();
    assert_eq!(pages, expected, "pages of 3, newest first, none twice");
    assert_eq!(db.tables.audit(Some(seqs[5]), 10).await.unwrap().len(), 1, "only the oldest is before the second");
    assert_eq!(db.tables.audit(None, 0).await.unwrap(), [], "a limit of 0 reads nothing");
    assert_eq!(db.tables.audit(None, -1).await.unwrap(), [], "nor does a negative one");
}

on_every_database!(
    a_message_is_stored_once_per_channel_and_id_and_a_duplicate_reports_the_first_outcome,
    the_same_message_received_at_once_by_many_tasks_is_stored_once,
    finish_stores_outcomes_and_replies_together_and_a_reply_key_is_queued_once,
    unfinished_messages_and_undelivered_replies_come_back_oldest_first,
    parts_delivered_before_a_stop_are_kept_with_the_pending_reply,
    a_file_delivered_under_its_key_is_not_sent_again,
    a_live_message_is_kept_until_its_reply_is_final,
    latest_per_chat_lists_each_chats_newest_message_newest_first_without_edits,
    chats_lists_each_session_with_its_newest_message_and_counts_newest_first,
    a_code_is_requested_approved_listed_and_revoked,
    an_expired_code_cannot_be_approved_and_the_sender_gets_a_new_one,
    one_sender_leaves_codes_for_a_few_groups_and_everyone_else_keeps_their_room,
    a_full_channel_refuses_new_codes_until_one_expires,
    a_code_another_row_holds_is_drawn_again_and_never_shared,
    concurrent_requests_never_pass_the_caps,
    audit_rows_are_recorded_and_listed_newest_first,
    the_audit_log_is_read_a_page_at_a_time,
);
