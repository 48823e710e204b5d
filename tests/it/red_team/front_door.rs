//! The HTTP front door, attacked without a credential: 1,100 connections
//! that each sent a header line every 3 s held every connection slot, so
//! `/healthz` answered 1 probe of 11 and a signed webhook timed out. Now one
//! address holds at most `max_connections_per_address`, the whole request
//! head has one deadline (a dribbled line does not extend it), and health
//! and readiness are answered while every slot is held.
//!
//! The attackers dribble from other loopback addresses (Linux routes all of
//! 127.0.0.0/8 to `lo`), the honest clients come from 127.0.0.1.

use crate::support::fake_model::FakeModel;
use crate::support::gateway::{GatewayProcess, client, signed_request};
use serde_json::json;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinHandle;

const SECRET: &str = "front-door-secret";
/// Slots of the gateway under attack (small, so the test is light).
const SLOTS: usize = 40;
/// Connections one address may hold.
const PER_ADDRESS: usize = 10;
/// The attackers' addresses: together they hold every slot.
const ATTACKERS: [Ipv4Addr; 4] = [
    Ipv4Addr::new(127, 0, 0, 2),
    Ipv4Addr::new(127, 0, 0, 3),
    Ipv4Addr::new(127, 0, 0, 4),
    Ipv4Addr::new(127, 0, 0, 5),
];
/// Upper bound for any one answer (debug binary, loaded machine).
const WAIT: Duration = Duration::from_secs(60);

/// A webhook gateway with `SLOTS` connections, `PER_ADDRESS` per address,
/// and `read_timeout` seconds for a request head.
async fn gateway(home: &std::path::Path, fake: &FakeModel, read_timeout: u32) -> GatewayProcess {
    let config = format!(
        "[http]\nread_timeout_seconds = {read_timeout}\nmax_connections = {SLOTS}\n\
         max_connections_per_address = {PER_ADDRESS}\n\n\
         [channels.webhook]\nkind = \"webhook\"\nsecrets = [\"{SECRET}\"]\n"
    );
    GatewayProcess::start_with_config(home, &fake.vars("openai:gpt-test"), &config).await
}

/// A TCP connection to `to` from the local address `from`.
async fn connect_from(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("a socket");
    socket.bind(SocketAddr::from((from, 0))).unwrap_or_else(|error| panic!("bind {from}: {error}"));
    socket.connect(to).await.unwrap_or_else(|error| panic!("connect from {from}: {error}"))
}

/// How a dribbling connection ended.
#[derive(Debug, PartialEq)]
enum Dribbled {
    /// The server closed it after this many header lines.
    Cut { lines: usize },
    /// It sent all its lines and was still open.
    Held,
}

/// A slowloris connection: the start of a webhook request, then one more
/// header line every `every`, never the blank line that ends the head.
fn dribble(mut stream: TcpStream, every: Duration, lines: usize) -> JoinHandle<Dribbled> {
    tokio::spawn(async move {
        if stream.write_all(b"POST /webhook/webhook HTTP/1.1\r\nHost: bub\r\n").await.is_err() {
            return Dribbled::Cut { lines: 0 };
        }
        let mut answer = [0u8; 512];
        for line in 0..lines {
            tokio::select! {
                // Any answer (a 408, a close, a reset) means the server let go of it.
                _ = stream.read(&mut answer) => return Dribbled::Cut { lines: line },
                () = tokio::time::sleep(every) => {
                    if stream.write_all(format!("X-Slow-{line}: a\r\n").as_bytes()).await.is_err() {
                        return Dribbled::Cut { lines: line };
                    }
                }
            }
        }
        Dribbled::Held
    })
}

/// `PER_ADDRESS` dribblers from each attacker address: every slot held.
async fn hold_every_slot(to: SocketAddr, every: Duration, lines: usize) -> Vec<JoinHandle<Dribbled>> {
    let mut held = Vec::new();
    for from in ATTACKERS {
        for _ in 0..PER_ADDRESS {
            held.push(dribble(connect_from(from, to).await, every, lines));
        }
    }
    assert_eq!(held.len(), SLOTS, "the attack is sized to the slots");
    held
}

/// Sends a complete `GET path` on `stream`; returns everything the server
/// sent until it closed the connection (a reset ends it too).
async fn get(stream: &mut TcpStream, path: &str) -> String {
    let request = format!("GET {path} HTTP/1.1\r\nHost: bub\r\nConnection: close\r\n\r\n");
    // A connection the server already closed may refuse the write: what it read is what counts.
    let _ = stream.write_all(request.as_bytes()).await;
    let mut received = Vec::new();
    let mut chunk = [0u8; 4096];
    let read = tokio::time::timeout(WAIT, async {
        while let Ok(n @ 1..) = stream.read(&mut chunk).await {
            received.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    let text = String::from_utf8_lossy(&received).into_owned();
    assert!(read.is_ok(), "no answer to GET {path} within {WAIT:?} (got {text:?})");
    text
}

/// A signed sync webhook `ping` from 127.0.0.1: (status, JSON answer).
async fn signed_webhook(to: SocketAddr, id: &str) -> (u16, serde_json::Value) {
    let body = json!({"message_id": id, "chat_id": "c1", "sender_id": "u1", "text": "ping"});
    let response = signed_request(&client(), to, "webhook", "sync", &body, SECRET).await.expect("the webhook request");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread")]
async fn one_address_cannot_take_every_slot_and_health_answers_while_all_are_held() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start_answering("pong").await;
    // A head deadline far past the test: nothing here is cut by it.
    let gateway = gateway(home.path(), &fake, 600).await;
    let every = Duration::from_secs(1);

    // One address: its connections past the cap are closed at once, unanswered.
    let mut first = Vec::new();
    for _ in 0..PER_ADDRESS {
        first.push(dribble(connect_from(ATTACKERS[0], gateway.addr).await, every, usize::MAX));
    }
    let mut over_the_cap = connect_from(ATTACKERS[0], gateway.addr).await;
    let answer = get(&mut over_the_cap, "/healthz").await;
    assert!(answer.is_empty(), "a connection past the per-address cap was served: {answer:?}");
    assert!(first.iter().all(|held| !held.is_finished()), "the connections within the cap are kept");

    // Every slot held, from several addresses.
    let mut held = first;
    for from in &ATTACKERS[1..] {
        for _ in 0..PER_ADDRESS {
            held.push(dribble(connect_from(*from, gateway.addr).await, every, usize::MAX));
        }
    }
    for path in ["/healthz", "/readyz", "/healthz"] {
        let mut probe = TcpStream::connect(gateway.addr).await.unwrap();
        let answer = get(&mut probe, path).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "GET {path} while every slot is held: {answer:?}");
    }

    // Anything else waits for a slot, as before: the webhook is answered once one frees.
    let webhook = tokio::spawn(signed_webhook(gateway.addr, "m1"));
    held.pop().expect("a dribbler").abort();
    let Ok(answered) = tokio::time::timeout(WAIT, webhook).await else {
        // Seen once in a full run of the test binary (not reproduced since): the gateway's log says where it waited.
        panic!("the webhook was not answered within {WAIT:?} of a slot freeing\n{}", gateway.stderr());
    };
    let (status, body) = answered.unwrap();
    assert_eq!((status, body["text"].as_str()), (200, Some("pong")), "{body}");
    assert!(held.iter().all(|held| !held.is_finished()), "the other attackers are still held");

    held.iter().for_each(JoinHandle::abort);
    assert!(gateway.stop().await);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_head_deadline_cuts_dribbling_connections_and_a_signed_webhook_gets_through() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start_answering("pong").await;
    let gateway = gateway(home.path(), &fake, 3).await;
    // A line every half second, for a minute: a deadline per read would never fire.
    let lines = 120;
    let held = hold_every_slot(gateway.addr, Duration::from_millis(500), lines).await;

    let (status, body) =
        tokio::time::timeout(WAIT, signed_webhook(gateway.addr, "m1")).await.expect("answered in time");
    assert_eq!((status, body["text"].as_str()), (200, Some("pong")), "{body}");
    for dribbler in held {
        let dribbled = dribbler.await.unwrap();
        assert!(matches!(dribbled, Dribbled::Cut { lines: cut } if cut < lines), "{dribbled:?}");
    }
    assert!(gateway.stop().await);
}
