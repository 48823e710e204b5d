//! Log lines follow their turns (issue 30): two chats' turns overlap on a
//! multi-threaded runtime, and every line each of them writes — the turn's
//! own, the agent run's, the model call's, the tool call's — carries its own
//! session and channel in its spans, never the other chat's.
//!
//! The test installs the process's global tracing subscriber (a subscriber
//! set for the test's thread alone would not see the runtime's worker
//! threads): it must stay the only test of this binary that installs one.
//! Other tests' gateways log into it too, so it keeps only the lines that
//! name one of its two chats (their words are in their channels, sessions,
//! model calls and tool calls, and nowhere else).

use crate::support;

use async_trait::async_trait;
use bub::config::GatewayConfig;
use bub::gateway::Gateway;
use bub::model::{
    ChatRequest, FinishReason, ModelClient, ModelError, ModelEvent, ModelStream, Retrying, SingleClient,
    ToolCallRequest,
};
use futures::StreamExt;
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::io::Write;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use support::gateway::{client, signed_request};

const SECRET: &str = "spans-secret";
/// How long the held model waits for the other chat's request: the turns
/// must overlap, or the test proves nothing.
const OVERLAP_TIMEOUT: Duration = Duration::from_secs(30);

/// One of the two chats: a webhook channel of its own, one chat on it, and
/// the word its model call and tool call name. No word is part of another.
struct Chat {
    channel: &'static str,
    chat: &'static str,
    word: &'static str,
}

const ALPHA: Chat = Chat { channel: "spanalpha", chat: "chat-spanalpha", word: "spanalpha" };
const BRAVO: Chat = Chat { channel: "spanbravo", chat: "chat-spanbravo", word: "spanbravo" };

impl Chat {
    fn session(&self) -> String {
        format!("{}:{}", self.channel, self.chat)
    }
}

/// Every line the global subscriber wrote, as `fmt` writes it (no colours):
/// the span scope (`turn{session=… channel=…}:run{…}:model_call{…}:`), the
/// target, the message and the event's fields.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    /// `fmt` writes each line whole: one naming neither chat is another
    /// test's, dropped.
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let names = |word: &str| bytes.windows(word.len()).any(|w| w == word.as_bytes());
        if names(ALPHA.word) || names(BRAVO.word) {
            self.0.lock().extend_from_slice(bytes);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines(&self) -> Vec<String> {
        let bytes = self.0.lock().clone();
        String::from_utf8_lossy(&bytes).lines().map(str::to_string).collect()
    }
}

/// Installs the capturing subscriber once for this binary: bub's lines and
/// this module's, at debug.
fn capture() -> &'static Captured {
    static CAPTURED: OnceLock<Captured> = OnceLock::new();
    CAPTURED.get_or_init(|| {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(format!("bub=debug,{}=debug", module_path!())))
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber of this binary");
        captured
    })
}

/// A model that holds each chat's first request until the other chat's has
/// arrived too (so the two turns are under way at once), then asks for the
/// `say` tool with the chat's word; after the tool's result it answers
/// `said <word>`. It logs each request with the chat's word: a line of the
/// model call, as a provider client's own would be.
struct HeldModel {
    both_asked: tokio::sync::Barrier,
}

#[async_trait]
impl ModelClient for HeldModel {
    fn provider(&self) -> &str {
        "held"
    }

    async fn stream(&self, request: &ChatRequest) -> Result<ModelStream, ModelError> {
        let text: String = request.messages.iter().map(|m| m.to_value().to_string()).collect();
        let word = [ALPHA.word, BRAVO.word].into_iter().find(|w| text.contains(&format!("say {w}"))).unwrap_or("none");
        let answered = request.messages.iter().any(|m| m["role"] == "tool");
        tracing::info!(word = %word, answered, "held model asked");
        let events = match answered {
            true => vec![ModelEvent::TextDelta(format!("said {word}")), ModelEvent::Finish(FinishReason::Stop)],
            false => {
                if tokio::time::timeout(OVERLAP_TIMEOUT, self.both_asked.wait()).await.is_err() {
                    let message = format!("the other chat's turn never asked the model while {word}'s waited");
                    return Err(ModelError::Protocol { provider: "held".into(), message });
                }
                let call = ToolCallRequest {
                    id: format!("call-{word}"),
                    name: "say".into(),
                    arguments: json!({"word": word}).to_string(),
                };
                vec![ModelEvent::ToolCall(call), ModelEvent::Finish(FinishReason::ToolCalls)]
            }
        };
        Ok(futures::stream::iter(events.into_iter().map(Ok)).boxed())
    }
}

/// A tool that logs the word it was given and returns it.
fn say_tool() -> bub::tools::Tool {
    bub::tools::Tool::new(
        "say",
        "says a word",
        json!({"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}),
        |args: Value, _| async move {
            let word = args["word"].as_str().unwrap_or_default().to_string();
            tracing::info!(word = %word, "say tool ran");
            Ok(json!(word))
        },
    )
    .with_capabilities([])
}

fn config() -> GatewayConfig {
    let text = format!(
        "[http]\nlisten = \"127.0.0.1:0\"\n\n\
         [channels.{a}]\nkind = \"webhook\"\nsecrets = [\"{SECRET}\"]\n\n\
         [channels.{b}]\nkind = \"webhook\"\nsecrets = [\"{SECRET}\"]\n",
        a = ALPHA.channel,
        b = BRAVO.channel,
    );
    GatewayConfig::parse(&text, "spans.toml").expect("a valid config")
}

async fn ask(addr: std::net::SocketAddr, chat: &Chat) -> Value {
    let body =
        json!({"message_id": "m1", "chat_id": chat.chat, "sender_id": "u1", "text": format!("say {}", chat.word)});
    let response = signed_request(&client(), addr, chat.channel, "sync", &body, SECRET).await.expect("webhook request");
    assert_eq!(response.status(), 200);
    response.json().await.expect("a JSON outcome")
}

/// What the lines say of one chat's turn, each line found in the spans it
/// belongs to.
#[derive(Debug, Default, PartialEq)]
struct Seen {
    /// Lines of its model calls.
    model_calls: usize,
    /// Lines of its tool call.
    tool_calls: usize,
    /// Lines saying its turn was answered.
    turn_ends: usize,
}

/// Checks every line that names `chat` (by its word, session or channel)
/// against `other`: none names both. A line of `chat`'s model call or tool
/// call (its word is in the event's own fields) lies in `chat`'s turn, run
/// and model or tool call spans.
fn seen(lines: &[String], chat: &Chat, other: &Chat) -> Seen {
    // `fmt` writes a span's fields in the order they were declared.
    let turn = format!("turn{{session={} ", chat.session());
    let channel = format!(" channel={} chat=", chat.channel);
    let run = format!(":run{{tape={} ", chat.session());
    let mut seen = Seen::default();
    for line in lines.iter().filter(|line| line.contains(chat.word)) {
        assert!(!line.contains(other.word), "a line of both chats' turns:\n{line}");
        let says = |what: &str| line.contains(&format!("{what} word={}", chat.word));
        let in_turn = line.contains(&turn) && line.contains(&channel);
        if says("held model asked") {
            assert!(in_turn && line.contains(&run), "a model call's line outside its turn's run:\n{line}");
            assert!(line.contains(":model_call{"), "a model call's line outside its span:\n{line}");
            seen.model_calls += 1;
        } else if says("say tool ran") {
            assert!(in_turn && line.contains(&run), "a tool call's line outside its turn's run:\n{line}");
            assert!(line.contains(":tool_call{tool=say "), "a tool call's line outside its span:\n{line}");
            seen.tool_calls += 1;
        } else if line.contains("turn answered") && in_turn {
            seen.turn_ends += 1;
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_line_of_two_overlapping_turns_carries_its_own_session_and_channel() {
    let captured = capture();
    let home = tempfile::tempdir().unwrap();
    let gateway = Gateway::builder(home.path()).open().await.expect("open the gateway");
    let model = HeldModel { both_asked: tokio::sync::Barrier::new(2) };
    let retrying = Retrying::new(Arc::new(model), support::fake_model::quick_retry());
    let agent = gateway
        .agent_builder()
        .model(Arc::new(SingleClient(Arc::new(retrying))), "held:test")
        .tools(vec![say_tool()])
        .build();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = gateway
        .config(config())
        .start(agent, async move {
            let _ = stopped.await;
        })
        .await
        .expect("start the gateway");
    let addr = running.local_addr();

    let (alpha, bravo) = tokio::join!(ask(addr, &ALPHA), ask(addr, &BRAVO));
    assert_eq!(alpha["text"], "said spanalpha", "{alpha}");
    assert_eq!(bravo["text"], "said spanbravo", "{bravo}");
    let _ = stop.send(());
    running.wait().await;

    let lines = captured.lines();
    let all = lines.join("\n");
    let turn_ends = lines.iter().filter(|line| line.contains("turn answered")).count();
    assert_eq!(turn_ends, 2, "one line of each turn's end:\n{all}");
    // Two model calls (the tool call, the answer), one tool call, one turn's end: each in its own spans.
    let expected = Seen { model_calls: 2, tool_calls: 1, turn_ends: 1 };
    assert_eq!(seen(&lines, &ALPHA, &BRAVO), expected, "alpha's lines:\n{all}");
    assert_eq!(seen(&lines, &BRAVO, &ALPHA), expected, "bravo's lines:\n{all}");
}
