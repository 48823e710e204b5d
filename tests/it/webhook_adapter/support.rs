//! A fake gateway inbox, a loopback server for the channel's routes and a
//! signing HTTP client.

use async_trait::async_trait;
use bub_channel::{Channel, Inbound, InboundSink, Outcome, OutcomeStatus, ReplySink, SubmitError, Submitted};
use bub_webhook::{SIGNATURE_HEADER, TIMESTAMP_HEADER, WebhookChannel, WebhookSettings, sign};
use parking_lot::Mutex;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub const SECRET: &str = "first-secret";
pub const ROTATED_SECRET: &str = "second-secret";
pub const NAME: &str = "hook";

/// What the fake gateway does with the next submissions.
#[derive(Clone)]
pub enum Script {
    /// Accept, then stream these deltas and the outcome to the caller's sink.
    Reply { deltas: Vec<String>, outcome: Outcome },
    /// Say the message was seen before.
    Duplicate(Option<Outcome>),
    /// Refuse the message.
    Fail(SubmitError),
    /// Accept, then drop the sink without an outcome (gateway shutting down).
    CloseWithoutDone,
    /// Accept, stream these deltas, then drop the sink without an outcome.
    DeltasThenClose(Vec<String>),
    /// Accept and keep the sink open without ever finishing (a turn that runs long).
    Hold,
    /// Accept, stream these deltas, then keep the sink open without finishing.
    DeltasThenHold(Vec<String>),
}

/// Records what was submitted and answers as scripted.
pub struct FakeInbox {
    script: Mutex<Script>,
    submitted: Mutex<Vec<(Inbound, bool)>>,
    held: Mutex<Vec<ReplySink>>,
}

impl FakeInbox {
    pub fn new(script: Script) -> Arc<FakeInbox> {
        Arc::new(FakeInbox {
            script: Mutex::new(script),
            submitted: Mutex::new(Vec::new()),
            held: Mutex::new(Vec::new()),
        })
    }

    pub fn replying(deltas: &[&str], text: &str) -> Arc<FakeInbox> {
        FakeInbox::new(Script::Reply { deltas: deltas.iter().map(|d| d.to_string()).collect(), outcome: outcome(text) })
    }

    /// Every submission, with whether it came with a reply sink.
    pub fn submitted(&self) -> Vec<(Inbound, bool)> {
        self.submitted.lock().clone()
    }
}

pub fn outcome(text: &str) -> Outcome {
    Outcome { status: OutcomeStatus::Replied, text: text.to_string(), session: format!("{NAME}:chat-1") }
}

#[async_trait]
impl InboundSink for FakeInbox {
    async fn submit(&self, inbound: Inbound, replies: Option<ReplySink>) -> Result<Submitted, SubmitError> {
        self.submitted.lock().push((inbound, replies.is_some()));
        let script = self.script.lock().clone();
        match script {
            Script::Reply { deltas, outcome } => {
                if let Some(sink) = replies {
                    tokio::spawn(async move {
                        for delta in deltas {
                            sink.delta(delta);
                        }
                        sink.done(outcome).await;
                    });
                }
                Ok(Submitted::Accepted)
            }
            Script::Duplicate(outcome) => Ok(Submitted::Duplicate(outcome)),
            Script::Fail(error) => Err(error),
            Script::CloseWithoutDone => {
                drop(replies);
                Ok(Submitted::Accepted)
            }
            Script::Hold => {
                self.held.lock().extend(replies);
                Ok(Submitted::Accepted)
            }
            Script::DeltasThenHold(deltas) => {
                if let Some(sink) = replies {
                    for delta in deltas {
                        sink.delta(delta);
                    }
                    self.held.lock().push(sink);
                }
                Ok(Submitted::Accepted)
            }
            Script::DeltasThenClose(deltas) => {
                if let Some(sink) = replies {
                    tokio::spawn(async move {
                        for delta in deltas {
                            sink.delta(delta);
                        }
                    });
                }
                Ok(Submitted::Accepted)
            }
        }
    }
}

pub fn settings() -> WebhookSettings {
    WebhookSettings::new(NAME, vec![SECRET.to_string(), ROTATED_SECRET.to_string()])
}

/// A channel serving its routes on a loopback port; started with `inbox` if given.
pub struct Served {
    pub channel: Arc<WebhookChannel>,
    pub addr: SocketAddr,
}

pub async fn serve(settings: WebhookSettings, inbox: Option<Arc<FakeInbox>>) -> Served {
    let channel = Arc::new(WebhookChannel::new(settings).unwrap());
    let router = channel.routes().expect("webhook channels serve routes");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    if let Some(inbox) = inbox {
        channel.start(inbox).await.unwrap();
    }
    Served { channel, addr }
}

impl Served {
    pub fn url(&self, query: &str) -> String {
        format!("http://{}/webhook/{NAME}{query}", self.addr)
    }

    /// POSTs `body` signed with `secret` at the current time.
    pub async fn post_signed(&self, query: &str, body: &str, secret: &str) -> reqwest::Response {
        let timestamp = chrono::Utc::now().timestamp();
        self.post_signed_at(query, body.as_bytes().to_vec(), secret, timestamp).await
    }

    pub async fn post_signed_at(&self, query: &str, body: Vec<u8>, secret: &str, timestamp: i64) -> reqwest::Response {
        let signature = sign(secret, timestamp, &body);
        client()
            .post(self.url(query))
            .header("content-type", "application/json")
            .header(TIMESTAMP_HEADER, timestamp.to_string())
            .header(SIGNATURE_HEADER, signature)
            .body(body)
            .send()
            .await
            .unwrap()
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(60)).build().unwrap()
}

pub fn message(message_id: &str, text: &str) -> String {
    serde_json::json!({
        "message_id": message_id,
        "chat_id": "chat-1",
        "sender_id": "user-1",
        "sender_name": "Ada",
        "text": text,
    })
    .to_string()
}

/// The JSON body of a response, with its status.
pub async fn json(response: reqwest::Response) -> (u16, serde_json::Value) {
    let status = response.status().as_u16();
    let body = response.json().await.unwrap();
    (status, body)
}
