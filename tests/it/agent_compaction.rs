//! Proactive compaction: long chats stay under the model's window, nothing
//! said is lost from the tape, and a failed or interrupted compaction leaves
//! a valid tape and is tried again.

use crate::support;

use async_trait::async_trait;
use bub::agent::{Agent, CompactionSettings, RunOptions};
use bub::message::tokens::TokenCounter;
use bub::model::{ChatRequest, FinishReason, ModelClient, ModelError, ModelEvent, ModelStream, SingleClient, Usage};
use bub::tape::{
    COMPACTION_ANCHOR, Entry, EntryKind, InMemoryTapeStore, NewEntry, TapeName, TapeQuery, TapeResult, TapeStats,
    TapeStore, TapeSummary,
};
use futures::StreamExt;
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

const WINDOW: u64 = 2_000;

/// A model with a window: a request over it is refused as too long (as
/// providers do); a summary request (its system prompt is the compaction
/// prompt) gets a summary naming the lines it saw; a turn gets `ok <n>`.
#[derive(Default)]
struct WindowModel {
    requests: Mutex<Vec<ChatRequest>>,
    largest: AtomicUsize,
    overflows: AtomicUsize,
    summaries: AtomicUsize,
    /// Summary calls to refuse with a 429 before answering.
    refuse_summaries: AtomicUsize,
    /// The summary to answer with, whatever `max_tokens` said (as a model
    /// or proxy that ignores it).
    summary_text: Mutex<Option<String>>,
}

fn request_tokens(request: &ChatRequest) -> u64 {
    let counter = TokenCounter::estimate();
    request.messages.iter().map(|m| counter.count_message(m.as_object().unwrap())).sum()
}

fn is_summary_call(request: &ChatRequest) -> bool {
    request.messages[0]["content"].as_str().is_some_and(|s| s.starts_with("You are compacting"))
}

#[async_trait]
impl ModelClient for WindowModel {
    fn provider(&self) -> &str {
        "test"
    }

    async fn stream(&self, request: &ChatRequest) -> Result<ModelStream, ModelError> {
        let tokens = request_tokens(request);
        self.largest.fetch_max(tokens as usize, Ordering::SeqCst);
        self.requests.lock().push(request.clone());
        if tokens > WINDOW {
            self.overflows.fetch_add(1, Ordering::SeqCst);
            return Err(ModelError::ContextOverflow { provider: "test".into(), message: format!("{tokens} tokens") });
        }
        let text = if is_summary_call(request) {
            if self.refuse_summaries.load(Ordering::SeqCst) > 0 {
                self.refuse_summaries.fetch_sub(1, Ordering::SeqCst);
                return Err(ModelError::RateLimited {
                    provider: "test".into(),
                    message: "slow down".into(),
                    retry_after: None,
                });
            }
            let n = self.summaries.fetch_add(1, Ordering::SeqCst);
            let scripted = self.summary_text.lock().clone();
            scripted.unwrap_or_else(|| format!("Summary {n}: the team talked about the numbered turns."))
        } else {
            format!("ok {}", self.requests.lock().len())
        };
        let usage = Usage {
            prompt_tokens: tokens,
            completion_tokens: 4,
            total_tokens: tokens + 4,
            cached_tokens: Some(tokens / 2),
        };
        let events = vec![
            Ok(ModelEvent::TextDelta(text)),
            Ok(ModelEvent::Usage(usage)),
            Ok(ModelEvent::Finish(FinishReason::Stop)),
        ];
        Ok(futures::stream::iter(events).boxed())
    }
}

fn agent(store: Arc<dyn TapeStore>, model: Arc<WindowModel>) -> Agent {
    let settings = CompactionSettings { context_window: Some(WINDOW), ..CompactionSettings::default() };
    Agent::builder()
        .store(store)
        .model(Arc::new(SingleClient(model)), "test:tiny")
        .system_prompt("You are a test agent.")
        .compaction(settings)
        .build()
}

async fn turn(agent: &Agent, text: &str) {
    let outcome = agent.run(text, RunOptions::new("chat")).collect().await;
    assert!(outcome.error.is_none(), "{text}: {:?}", outcome.error);
    agent.settle().await;
}

fn prompt(i: usize) -> String {
    let word = if i == 3 { "pelican" } else { "note" };
    format!("turn {i}: please remember the {word} about item {i} for the weekly report, thanks")
}

#[tokio::test]
async fn three_thousand_turns_never_overflow_and_turn_three_stays_findable() {
    let store: Arc<dyn TapeStore> = Arc::new(InMemoryTapeStore::new());
    let model = Arc::new(WindowModel::default());
    let agent = agent(store.clone(), model.clone());
    for i in 1..=3_000 {
        turn(&agent, &prompt(i)).await;
    }
    assert_eq!(model.overflows.load(Ordering::SeqCst), 0, "no request passed the window");
    assert!(model.largest.load(Ordering::SeqCst) as u64 <= WINDOW);
    let tape = agent.tape("chat").unwrap();
    let anchors = tape.read(&TapeQuery::all().kinds([EntryKind::Anchor])).await.unwrap();
    assert!(anchors.iter().all(|a| a.name() != Some(bub::agent::OVERFLOW_ANCHOR)));
    let compactions = anchors.iter().filter(|a| a.name() == Some(COMPACTION_ANCHOR)).count();
    assert!(compactions > 20, "{compactions} compactions over 3,000 turns");

    // The last turn's request: system prompt, the summary, recent turns verbatim, the new turn.
    let requests = model.requests.lock().clone();
    let last = requests.iter().rev().find(|r| !is_summary_call(r)).unwrap();
    let note = last.messages[1]["content"].as_str().unwrap();
    assert!(note.starts_with("[Anchor created: auto_handoff/compaction]"), "{note}");
    assert!(note.contains("Summary"), "{note}");
    let users: Vec<&str> =
        last.messages.iter().filter(|m| m["role"] == "user").filter_map(|m| m["content"].as_str()).collect();
    assert!(users.len() >= 2, "recent turns are kept verbatim: {users:?}");
    assert_eq!(*users.last().unwrap(), prompt(3_000));
    let expected: Vec<String> = (3_001 - users.len()..=3_000).map(prompt).collect();
    assert_eq!(users, expected, "the kept turns are the latest ones, in order");

    // Turn 3 is still on the tape, found by a search.
    let hits = tape.read(&TapeQuery::search("pelican")).await.unwrap();
    assert!(hits.iter().any(|e| e.payload["content"] == prompt(3)), "{hits:?}");
    // Every user message is on the tape once, in order.
    let said: Vec<String> = tape
        .read(&TapeQuery::all().kinds([EntryKind::Message]))
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.payload["role"] == "user")
        .map(|e| e.payload["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(said, (1..=3_000).map(prompt).collect::<Vec<_>>());
    // Late requests are no bigger than early ones once the window is reached.
    let late = requests.iter().rev().filter(|r| !is_summary_call(r)).take(100).map(request_tokens).max().unwrap();
    assert!(late <= WINDOW, "{late}");
}

#[tokio::test]
async fn a_refused_summary_is_recorded_and_tried_after_the_next_turn() {
    let store: Arc<dyn TapeStore> = Arc::new(InMemoryTapeStore::new());
    let model = Arc::new(WindowModel::default());
    model.refuse_summaries.store(1, Ordering::SeqCst);
    let agent = agent(store.clone(), model.clone());
    let tape = agent.tape("chat").unwrap();
    let mut i = 0;
    while tape.last_event_data("compaction.failed").await.unwrap().is_none() {
        i += 1;
        assert!(i < 200, "no compaction was attempted");
        turn(&agent, &prompt(i)).await;
    }
    let failed = tape.last_event_data("compaction.failed").await.unwrap().unwrap();
    assert!(failed["error"].as_str().unwrap().contains("slow down"), "{failed}");
    assert!(tape.info().await.unwrap().last_compaction.is_none(), "no anchor after a failed summary");
    turn(&agent, &prompt(i + 1)).await;
    let info = tape.info().await.unwrap();
    assert!(info.last_compaction.is_some(), "the next turn's end compacted: {info}");
    let said: Vec<String> = tape
        .read(&TapeQuery::all().kinds([EntryKind::Message]))
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.payload["role"] == "user")
        .map(|e| e.payload["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(said, (1..=i + 1).map(prompt).collect::<Vec<_>>(), "nothing lost or reordered");
    // The summary's usage is on the tape.
    let summary = tape.last_event_data("compaction.summary").await.unwrap().unwrap();
    assert!(summary["usage"]["prompt_tokens"].as_u64().unwrap() > 0, "{summary}");
}

#[tokio::test]
async fn a_summary_longer_than_asked_is_cut_to_its_budget_and_the_cut_is_recorded() {
    let store: Arc<dyn TapeStore> = Arc::new(InMemoryTapeStore::new());
    let model = Arc::new(WindowModel::default());
    let overlong = "Decision: the team keeps item 7 on the weekly report. ".repeat(400);
    *model.summary_text.lock() = Some(overlong.clone());
    let agent = agent(store, model.clone());
    let tape = agent.tape("chat").unwrap();
    let mut i = 0;
    while tape.info().await.unwrap().last_compaction.is_none() {
        i += 1;
        assert!(i < 200, "no compaction");
        turn(&agent, &prompt(i)).await;
    }
    let requests = model.requests.lock().clone();
    let asked = requests.iter().find(|r| is_summary_call(r)).unwrap().max_tokens.unwrap() as u64;
    let counter = TokenCounter::for_model("test:tiny");
    let anchors = tape.read(&TapeQuery::all().kinds([EntryKind::Anchor]).named(COMPACTION_ANCHOR)).await.unwrap();
    let summary = anchors[0].payload["state"]["summary"].as_str().unwrap();
    assert!(counter.count(summary) <= asked, "{} tokens, {asked} asked for", counter.count(summary));
    assert!(counter.count(summary) > asked / 2, "cut near the budget, not far below it");
    assert!(summary.ends_with("on the weekly report."), "cut at a sentence's end: {summary}");
    let event = tape.last_event_data("compaction.summary").await.unwrap().unwrap();
    assert_eq!(event["summary"], summary);
    assert_eq!(event["max_tokens"], asked);
    assert_eq!(event["cut_from_tokens"], counter.count(overlong.trim()));
    // The next turn reads the cut summary and fits the window.
    turn(&agent, &prompt(i + 1)).await;
    assert_eq!(model.overflows.load(Ordering::SeqCst), 0);
}

/// An in-memory store with two probes: once `armed`, it fails the next
/// append holding a compaction anchor (as a crash between the summary event
/// and the anchor would leave the tape); it counts the reads of a
/// last-anchor scope (a context: each reads and decodes every entry since
/// the anchor).
#[derive(Default)]
struct ProbedStore {
    inner: InMemoryTapeStore,
    armed: AtomicBool,
    context_reads: AtomicUsize,
}

#[async_trait]
impl TapeStore for ProbedStore {
    async fn append(&self, tape: &TapeName, entries: Vec<NewEntry>) -> TapeResult<Vec<Entry>> {
        let anchor = entries.iter().any(|e| e.kind == EntryKind::Anchor && e.payload["name"] == COMPACTION_ANCHOR);
        if anchor && self.armed.swap(false, Ordering::SeqCst) {
            return Err(bub::tape::TapeError::StoreContract { tape: tape.clone(), message: "crashed".into() });
        }
        self.inner.append(tape, entries).await
    }
    async fn read(&self, tape: &TapeName, query: &TapeQuery) -> TapeResult<Vec<Entry>> {
        if query.scope == bub::tape::Scope::LastAnchor {
            self.context_reads.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.read(tape, query).await
    }
    async fn stats(&self, tape: &TapeName) -> TapeResult<TapeStats> {
        self.inner.stats(tape).await
    }
    async fn list(&self) -> TapeResult<Vec<TapeSummary>> {
        self.inner.list().await
    }
    async fn reset(&self, tape: &TapeName) -> TapeResult<()> {
        self.inner.reset(tape).await
    }
    fn location(&self) -> String {
        "probed".into()
    }
}

#[tokio::test]
async fn a_crash_between_summary_and_anchor_leaves_a_valid_tape_and_the_summary_is_reused() {
    let store = Arc::new(ProbedStore::default());
    let model = Arc::new(WindowModel::default());
    let settings = CompactionSettings { auto: false, context_window: Some(WINDOW), ..CompactionSettings::default() };
    let agent = Agent::builder()
        .store(store.clone())
        .model(Arc::new(SingleClient(model.clone())), "test:tiny")
        .compaction(settings)
        .build();
    for i in 1..=30 {
        turn(&agent, &prompt(i)).await;
    }
    let tape = agent.tape("chat").unwrap();
    let before = tape.context().await.unwrap();
    store.armed.store(true, Ordering::SeqCst);
    assert!(agent.compact("chat", None).await.is_err(), "the anchor's append failed");
    // The summary is on the tape, the context is what it was.
    assert!(tape.last_event_data("compaction.summary").await.unwrap().is_some());
    assert_eq!(tape.context().await.unwrap(), before);
    let summaries = model.summaries.load(Ordering::SeqCst);
    let done = agent.compact("chat", None).await.unwrap().expect("a compaction");
    assert!(done.reused, "the written summary is used again");
    assert_eq!(model.summaries.load(Ordering::SeqCst), summaries, "no second summary call");
    let context = tape.context().await.unwrap();
    assert!(context[0]["content"].as_str().unwrap().contains(&done.summary));
    assert!(context.len() < before.len());
    assert_eq!(context.last(), before.last(), "the latest turn is kept verbatim");
}

#[tokio::test]
async fn consecutive_turns_send_the_same_prefix_and_cached_tokens_reach_the_tape() {
    let store: Arc<dyn TapeStore> = Arc::new(InMemoryTapeStore::new());
    let model = Arc::new(WindowModel::default());
    let agent = agent(store.clone(), model.clone());
    for i in 1..=5 {
        turn(&agent, &prompt(i)).await;
    }
    let requests = model.requests.lock().clone();
    assert_eq!(requests.len(), 5, "no compaction in five short turns");
    for pair in requests.windows(2) {
        let before = serde_json::to_string(&pair[0].messages).unwrap();
        let after = serde_json::to_string(&pair[1].messages).unwrap();
        let open = &before[..before.len() - 1]; // without the closing bracket
        assert!(after.starts_with(open), "the next request repeats the last one byte for byte, then adds");
        assert_eq!(pair[0].cache_key, pair[1].cache_key);
        assert_eq!(pair[0].tools, pair[1].tools);
    }
    assert!(requests[0].cache_key.as_deref().is_some_and(|k| k.starts_with("bub-") && !k.contains("chat")));
    let run = agent.tape("chat").unwrap().last_event_data("run").await.unwrap().unwrap();
    assert!(run["usage"]["cached_tokens"].as_u64().unwrap() > 0, "{run}");
}

#[tokio::test]
async fn a_turn_reads_its_context_once_and_counts_only_what_it_appended() {
    let store = Arc::new(ProbedStore::default());
    let model = Arc::new(WindowModel::default());
    let agent = agent(store.clone(), model.clone());
    turn(&agent, &prompt(1)).await;
    for i in 2..=6 {
        let before = store.context_reads.load(Ordering::SeqCst);
        turn(&agent, &prompt(i)).await;
        let reads = store.context_reads.load(Ordering::SeqCst) - before;
        assert_eq!(reads, 1, "turn {i}: the model's context only; the compaction check adds up the new entries");
    }
}

/// The agent `bub run` builds (every builtin tool, the default system
/// prompt), against the fake model server, with `BUB_CONTEXT_WINDOW=window`.
struct RealAgent {
    setup: bub::setup::Setup,
    fake: support::fake_model::FakeModel,
    workspace: tempfile::TempDir,
    _home: tempfile::TempDir,
}

const SESSION: &str = "cli-local";

impl RealAgent {
    async fn start(window: u64) -> RealAgent {
        use support::fake_model::{FakeModel, Reply};
        let fake = FakeModel::start().await;
        // Every request nobody scripted is a summary call (turns are scripted).
        fake.answer_all(Reply::text(&realistic_summary()));
        let (home, workspace) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(workspace.path().join("notes.md"), deployment_notes()).unwrap();
        let bub_home = bub::home::BubHome::at(home.path());
        let store =
            Arc::new(bub::db::HomeStore::from(bub::db::SqliteTapeStore::open(bub_home.database()).await.unwrap()));
        let mut vars = fake.vars("openai:gpt-test");
        vars.push(("BUB_CONTEXT_WINDOW".into(), window.to_string()));
        let setup = bub::setup::Setup::build(&bub_home, workspace.path().to_path_buf(), store, vars).unwrap();
        RealAgent { setup, fake, workspace, _home: home }
    }

    /// Turn `i` as a user of a small local model has it: a question of a
    /// few lines, every third turn a file read, an answer of a paragraph.
    async fn turn(&self, i: usize) {
        use support::fake_model::Reply;
        if i.is_multiple_of(3) {
            self.fake.push(Reply::tool_calls(vec![("fs_read", serde_json::json!({"path": "notes.md"}))]));
        }
        self.fake.push(Reply::text(&realistic_answer(i)));
        let options = RunOptions::new(SESSION).workspace(self.workspace.path());
        let outcome = self.setup.agent.run(realistic_question(i), options).collect().await;
        assert!(outcome.error.is_none(), "turn {i}: {:?}", outcome.error);
        self.setup.agent.settle().await;
    }

    /// The `compaction.warning` events on the session's tape.
    async fn warnings(&self) -> Vec<Entry> {
        let tape = self.setup.agent.tape(SESSION).unwrap();
        tape.read(&TapeQuery::all().kinds([EntryKind::Event]).named("compaction.warning")).await.unwrap()
    }

    fn summary_calls(&self) -> usize {
        self.fake.requests().iter().filter(|r| is_summary_body(r)).count()
    }

    /// Runs `turns` turns; the turns after which a summary was asked for.
    async fn turns_compacted_after(&self, turns: usize) -> Vec<usize> {
        let mut compacted = Vec::new();
        for i in 1..=turns {
            let before = self.summary_calls();
            self.turn(i).await;
            if self.summary_calls() > before {
                compacted.push(i);
            }
        }
        compacted
    }
}

fn is_summary_body(request: &serde_json::Value) -> bool {
    request["messages"][0]["content"].as_str().is_some_and(|s| s.starts_with("You are compacting"))
}

fn realistic_question(i: usize) -> String {
    format!(
        "Turn {i}: could you look at the deployment notes for service-{i} and tell me whether the retry budget \
         of {} seconds still holds after we moved the queue to the new cluster? Keep it short, please.",
        i * 3
    )
}

fn realistic_answer(i: usize) -> String {
    format!(
        "For service-{i} the retry budget of {} seconds still holds: the new cluster keeps the same visibility \
         timeout, and the consumer acknowledges after the write, so a retry never doubles a job. Two things to \
         watch: the dead-letter queue now fills after five attempts instead of three, and the alert on queue age \
         still points at the old dashboard. I would update the alert first; the rest can wait for the next \
         release.",
        i * 3
    )
}

fn deployment_notes() -> String {
    (1..=12)
        .map(|n| format!("- step {n}: drain the old queue, check the consumer lag, then switch the DNS entry.\n"))
        .collect()
}

fn realistic_summary() -> String {
    "Decisions: retry budgets hold after the queue moved; update the queue-age alert first. Open tasks: point \
     the alert at the new dashboard. Names: service-N, notes.md."
        .to_string()
}

/// The gaps, in turns, between consecutive compactions.
fn gaps(compacted: &[usize]) -> Vec<usize> {
    compacted.windows(2).map(|pair| pair[1] - pair[0]).collect()
}

/// The floors these tests hold, with the real tool set (about 3,900 tokens
/// of system prompt and tool schemas) and turns of about 280 tokens: on 8k at
/// least 4 turns between two summary calls (6 today); on 32k at least 20 (49
/// today), none in the first 40; on 4k, where the fixed part is past
/// `compact_at`, at least 3 (a quarter of the window is the conversation's
/// floor). Before the fixed part came off the budget: 8k compacted after
/// every turn or every other from turn 9 on, 4k after every turn.
#[tokio::test]
async fn an_8k_window_with_every_builtin_tool_compacts_every_few_turns_not_every_turn() {
    let agent = RealAgent::start(8_000).await;
    let compacted = agent.turns_compacted_after(40).await;
    assert!(compacted.len() >= 2, "40 turns on 8k compact more than once: {compacted:?}");
    assert!(gaps(&compacted).iter().all(|gap| *gap >= 4), "at least 4 turns between compactions: {compacted:?}");
    assert!(agent.warnings().await.is_empty(), "room for several turns: no warning");
    agent.setup.shutdown().await;
}

#[tokio::test]
async fn a_32k_window_compacts_after_dozens_of_turns() {
    let agent = RealAgent::start(32_768).await;
    let compacted = agent.turns_compacted_after(130).await;
    assert!(compacted.len() >= 2, "130 turns on 32k compact more than once: {compacted:?}");
    assert!(compacted[0] > 40, "the first 40 turns fit: {compacted:?}");
    assert!(gaps(&compacted).iter().all(|gap| *gap >= 20), "at least 20 turns between compactions: {compacted:?}");
    agent.setup.shutdown().await;
}

#[tokio::test]
async fn a_4k_window_does_not_compact_after_every_turn() {
    let agent = RealAgent::start(4_096).await;
    let compacted = agent.turns_compacted_after(30).await;
    assert!(compacted.len() >= 2, "30 turns on 4k compact more than once: {compacted:?}");
    assert!(gaps(&compacted).iter().all(|gap| *gap >= 3), "at least 3 turns between compactions: {compacted:?}");
    // The fixed part leaves no room for several turns: said once, not at every compaction.
    let warnings = agent.warnings().await;
    assert_eq!(warnings.len(), 1, "one warning for {} compactions: {warnings:?}", compacted.len());
    let info = agent.setup.agent.run(",tape.info", RunOptions::new(SESSION)).collect().await.text;
    let line =
        info.lines().find(|l| l.starts_with("context_window: 4096 (compacts at ")).unwrap_or_else(|| panic!("{info}"));
    assert!(line.contains("; system prompt and tool schemas: "), "{info}");
    let warning = info.lines().find(|l| l.starts_with("compaction_warning: ")).unwrap_or_else(|| panic!("{info}"));
    assert!(warning.starts_with("compaction_warning: compaction leaves room for about "), "{warning}");
    assert!(warning.contains("of the 4096-token window"), "{warning}");
    agent.setup.shutdown().await;
}
