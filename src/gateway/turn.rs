//! One turn: the agent answers a batch of messages of one session, the
//! outcome and reply are stored together, and the reply is delivered.

use super::admission;
use super::outbound::LiveReply;
use super::store::PendingReply;
use super::typing::Typing;
use super::{Inner, Message, outcome};
use crate::agent::{AnswerText, FailureKind, RunOptions, StreamEvent, TurnState};
use crate::policy::SessionPolicy;
use crate::tape::NewEntry;
use crate::tools::Capabilities;
use bub_channel::{Delivery, Outbound, Outcome, OutcomeStatus};
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;
use tracing::Instrument;

/// Put in a turn's state so the gateway's `RunStarted` handler marks the
/// turn's fork with the messages it answers (see [`super::TURN_EVENT`]).
pub(crate) struct TurnMarker {
    pub turn: String,
    pub messages: Vec<String>,
}

impl TurnMarker {
    pub(crate) fn to_json(&self) -> Value {
        json!({"turn": self.turn, "messages": self.messages})
    }
}

/// A running turn, shared with its session's worker so messages steered into
/// it become part of it (and share its outcome).
pub(crate) struct TurnShare {
    id: String,
    session: String,
    members: Mutex<Vec<Message>>,
}

impl TurnShare {
    /// Where the turn's text comes from: its least trusted message's.
    pub(crate) fn provenance(&self) -> crate::tape::Provenance {
        let members = self.members.lock();
        crate::tape::provenance::least_trusted(members.iter().map(|m| m.provenance))
    }

    /// Adds steered messages to the turn.
    pub(crate) async fn join(&self, inner: &Arc<Inner>, messages: Vec<Message>) {
        let seqs: Vec<i64> = messages.iter().map(|m| m.seq).collect();
        if let Err(error) = inner.store.start_turn(&seqs, &self.session, &self.id).await {
            tracing::error!(%error, session = %self.session, "cannot record steered messages");
        }
        self.members.lock().extend(messages);
    }
}

/// The idempotency key of the reply to a batch: stable across restarts, and
/// apart for each edit answered again (it names the inbound's key).
pub(crate) fn reply_key(first: &Message) -> String {
    format!("reply:{}:{}", first.inbound.channel, first.inbound.key())
}

/// Starts a turn for `batch` (not empty); the receiver resolves when it ended.
/// "typing…" is shown from here (before the task runs, so a hint the batch
/// held passes to the turn without a gap) until the reply goes out.
pub(crate) fn start(inner: &Arc<Inner>, session: &str, batch: Vec<Message>) -> (Arc<TurnShare>, oneshot::Receiver<()>) {
    let typing = match batch.last() {
        Some(last) if batch.iter().any(|m| m.inbound.delivery == Delivery::Channel) => {
            inner.show_typing(&last.inbound.channel, &last.inbound.chat)
        }
        _ => None,
    };
    let share = Arc::new(TurnShare {
        id: uuid::Uuid::new_v4().simple().to_string(),
        session: session.to_string(),
        members: Mutex::new(batch),
    });
    let (done_tx, done_rx) = oneshot::channel();
    let task = {
        let inner = inner.clone();
        let share = share.clone();
        async move {
            run(&inner, &share, typing).await;
            let _ = done_tx.send(());
        }
    };
    if !inner.running.spawn(task) {
        // Stopping: the messages stay in the inbox for the next start, and
        // dropping them now answers their waiting callers (503, send again).
        tracing::info!(session = %session, "gateway stopping; the turn runs at the next start");
        share.members.lock().clear();
    }
    (share, done_rx)
}

/// What a turn needs from its messages, read under one lock before it runs
/// (messages steered in later join only the answer's delivery).
struct TurnInput {
    prompt: String,
    /// The turn is one comma command (run as typed; its message's files are not fetched).
    command: bool,
    /// The messages as they were when the turn started (their files are fetched from these).
    messages: Vec<bub_channel::Inbound>,
    /// The platform ids of the messages (what the reply answers).
    ids: Vec<String>,
    /// Their inbound keys (what the turn's marker names; see [`bub_channel::Inbound::key`]).
    keys: Vec<String>,
    policy: Arc<crate::policy::EffectivePolicy>,
    user: String,
    chat: bub_channel::ChatRef,
    channel: String,
    provenance: crate::tape::Provenance,
    /// Whether any message wants its answer through the channel (not only a waiting caller).
    wants_channel: bool,
    /// The idempotency key of the reply (see [`reply_key`]).
    reply_key: String,
    /// Who the reply names (see [`admission::reply_mentions`]).
    mentions: Vec<bub_channel::SenderRef>,
    /// Where the turn's span hangs: under its first message's.
    trace: crate::telemetry::traces::TraceLink,
}

impl TurnInput {
    /// `None` when the turn has no messages (a stop cleared them).
    fn read(inner: &Inner, share: &TurnShare) -> Option<TurnInput> {
        let members = share.members.lock();
        let (first, last) = (members.first()?, members.last()?);
        let command = match (members.as_slice(), inner.agent.command_prefix()) {
            ([only], Some(prefix)) => crate::command::is_command(&only.inbound.text, prefix),
            _ => false,
        };
        let prompt = match command {
            // A command runs as typed: no writer's name in front of the prefix.
            true => first.inbound.text.clone(),
            false => admission::compose_prompt(members.iter().map(|m| &m.inbound)),
        };
        Some(TurnInput {
            prompt,
            command,
            messages: members.iter().map(|m| m.inbound.clone()).collect(),
            ids: members.iter().map(|m| m.inbound.message_id.clone()).collect(),
            keys: members.iter().map(|m| m.inbound.key().into_owned()).collect(),
            policy: last.policy.clone(),
            user: last.user.clone(),
            chat: last.inbound.chat.clone(),
            channel: last.inbound.channel.clone(),
            provenance: crate::tape::provenance::least_trusted(members.iter().map(|m| m.provenance)),
            wants_channel: members.iter().any(|m| m.inbound.delivery == Delivery::Channel),
            reply_key: reply_key(first),
            mentions: admission::reply_mentions(members.iter().map(|m| &m.inbound)),
            trace: first.trace.clone(),
        })
    }
}

async fn run(inner: &Arc<Inner>, share: &TurnShare, typing: Option<Typing>) {
    let started = Instant::now();
    // No write here: the turn's marker on the tape names its messages, which
    // is how a restart knows whether the turn landed.
    let Some(input) = TurnInput::read(inner, share) else { return };
    let span = tracing::info_span!(
        "turn",
        session = %share.session,
        turn = %share.id,
        channel = %input.channel,
        chat = %input.chat.id
    );
    input.trace.adopt(&span);
    // Instrumented, not entered: a guard held across an await leaks the span
    // into every task its thread polls meanwhile (other turns' logs).
    run_input(inner, share, typing, input, started).instrument(span).await
}

async fn run_input(
    inner: &Arc<Inner>,
    share: &TurnShare,
    typing: Option<Typing>,
    mut input: TurnInput,
    started: Instant,
) {
    confine(inner, &share.session, &input.policy).await;
    let files = take_files(inner, &share.session, &mut input).await;
    let notice = match files.refusals.is_empty() {
        true => String::new(),
        false => format!("{}\n\n", files.refusals.join("\n")),
    };
    if !input.command && files.saved == 0 && input.messages.iter().all(|m| m.text.trim().is_empty()) {
        // Only files, none kept: the chat reads why, and no model is asked about nothing.
        let members = std::mem::take(&mut *share.members.lock());
        let result = outcome(OutcomeStatus::Refused, notice.trim_end(), &share.session);
        conclude(inner, members, result, true).await;
        return;
    }
    let live = live_reply(inner, share, &input).await;
    let channel = input.channel.clone();
    let Some((text, failure)) = answer_landed(inner, share, &input, files.images, live.as_ref(), &notice).await else {
        // The session is another replica's now: its outcome is that one's
        // to store (callers still waiting here are told to ask again).
        share.members.lock().clear();
        return;
    };
    let text = format!("{notice}{text}");
    metrics::histogram!("bub_turn_seconds", "channel" => channel.clone()).record(started.elapsed().as_secs_f64());
    if let Some((kind, _)) = &failure {
        crate::telemetry::traces::set_error(&tracing::Span::current(), format!("{kind:?}"));
    }
    let result = turn_outcome(share, text, failure);
    let status = status_name(result.status);
    tracing::debug!(status, elapsed_ms = started.elapsed().as_millis() as u64, "turn answered");
    metrics::counter!("bub_turns_total", "channel" => channel, "status" => status).increment(1);
    drop(typing);
    let members = std::mem::take(&mut *share.members.lock());
    conclude_with(inner, members, result, true, live).await;
}

/// Fetches and saves the turn's files (not a command's) and puts what became
/// of them into its prompt.
async fn take_files(inner: &Inner, session: &str, input: &mut TurnInput) -> super::attachments::ReceivedFiles {
    if input.command || input.messages.iter().all(|m| m.attachments.is_empty()) {
        return super::attachments::ReceivedFiles::default();
    }
    let cap = input.policy.max_attachment_bytes.value;
    let files = super::attachments::receive(inner, session, &input.messages, cap).await;
    input.prompt = admission::compose_prompt_with_files(
        input.messages.iter().map(|m| (m, files.notes.get(&m.message_id).map_or(&[][..], Vec::as_slice))),
    );
    files
}

/// Notes where the session's shell and code run under `policy`; when that
/// changed, the session's open environment (made for the old policy) is closed.
async fn confine(inner: &Inner, session: &str, policy: &crate::policy::EffectivePolicy) {
    let changed = inner.confinement.set(session, super::confinement::EnvironmentChoice::of(policy));
    if changed && let Some(environments) = inner.agent.environments() {
        let closed = environments.close_session(session).await;
        tracing::info!(session = %session, closed, "the policy changed where the shell runs; the next command starts afresh");
    }
}

/// The run's options: the policy's tools, model and context window,
/// `[agent]`'s compaction and tool-schema budget, and the turn's state
/// (policy, marker, provenance, and the chat its tools may send files to).
fn run_options(inner: &Arc<Inner>, share: &TurnShare, input: &TurnInput) -> RunOptions {
    let policy = &input.policy;
    let state = TurnState::new();
    SessionPolicy { policy: policy.clone(), user: input.user.clone(), chat_kind: input.chat.kind }.install(&state);
    state.insert_extension(TurnMarker { turn: share.id.clone(), messages: input.keys.clone() });
    state.insert_extension(crate::agent::MessageMeta(input.provenance.meta()));
    if input.wants_channel {
        let files = super::files::TurnFiles::new(
            inner,
            input.channel.clone(),
            input.chat.clone(),
            input.ids.clone(),
            input.reply_key.clone(),
            share.session.clone(),
        );
        state.insert_extension(crate::tools::TurnChat(Arc::new(files)));
    }
    let tools: Vec<(String, Capabilities)> =
        inner.agent.tools().iter().map(|tool| (tool.name().to_string(), tool.capabilities())).collect();
    // A turn abandoned by a stop leaves no trace, so the next start runs it again.
    let mut options = RunOptions::new(share.session.clone())
        .discard_if_cancelled()
        .state(state)
        .allowed_tools(policy.offered_tools(&tools, input.chat.kind.is_shared()));
    if let Some(model) = &policy.model.value {
        options = options.model(model.clone());
    }
    let agent = inner.config.current().agent;
    options.compaction = crate::agent::CompactionOverrides {
        context_window: policy.context_window.value,
        compact_at: agent.compact_at,
        keep_recent_tokens: agent.keep_recent_tokens,
    };
    options.tool_schema_budget = agent.tool_schema_budget;
    options
}

/// The reply edited in place as the answer streams, where the channel can
/// edit messages and one is wanted there.
async fn live_reply(inner: &Inner, share: &TurnShare, input: &TurnInput) -> Option<LiveReply> {
    match inner.channels.get(&input.channel) {
        Some(target) if input.wants_channel && target.limits().edits => {
            let template = Outbound {
                chat: input.chat.clone(),
                text: String::new(),
                reply_to: input.ids.clone(),
                idempotency_key: input.reply_key.clone(),
                session: share.session.clone(),
                mentions: input.mentions.clone(),
            };
            Some(super::outbound::delivery::kept_live_reply(inner, &input.channel, &template).await)
        }
        _ => None,
    }
}

/// How many times a turn its tape store cut short is run again.
const STORE_RERUNS: u32 = 4;

/// Runs the turn ([`answer`]). A run its tape store cut short (the database
/// restarting, a connection dropped) leaves nothing on the tape, unless the
/// failure was the reply to its merge and the merge went through: once the
/// tape tells which, a run that landed stands and one that did not runs
/// again, a few times, after a pause. The session's next turn waits
/// meanwhile, so a blip of the database costs a turn seconds, not its
/// answer nor its order. `None`: among replicas, the session was taken
/// over meanwhile (this one was taken for dead), and the turn is left to
/// its new holder.
async fn answer_landed(
    inner: &Arc<Inner>,
    share: &TurnShare,
    input: &TurnInput,
    images: Vec<crate::agent::PromptImage>,
    live: Option<&LiveReply>,
    notice: &str,
) -> Option<(String, Option<(FailureKind, String)>)> {
    let mut reruns = 0;
    loop {
        if inner.replica.get().is_some_and(|replica| replica.is_fenced()) {
            tracing::info!(session = %share.session, turn = %share.id, "this replica was taken for dead; the turn is left to the session's next holder");
            return None;
        }
        let options = run_options(inner, share, input);
        if !images.is_empty() {
            let images = crate::agent::PromptImages { prompt: input.prompt.clone(), images: images.clone() };
            options.state.insert_extension(images);
        }
        let (text, failure) = answer(inner, share, input.prompt.clone(), options, live, notice).await;
        let Some((FailureKind::Tape, error)) = &failure else { return Some((text, failure)) };
        if reruns == STORE_RERUNS {
            return Some((text, failure));
        }
        reruns += 1;
        tracing::warn!(session = %share.session, turn = %share.id, %error, "the tape store cut the turn short; checking whether it landed");
        match landing(inner, share).await {
            Landing::Landed => return Some((text, None)),
            Landing::Moved => return None,
            Landing::Unknown => return Some((text, failure)),
            Landing::NotLanded => {}
        }
        tracing::info!(session = %share.session, turn = %share.id, rerun = reruns, "the turn did not land; running it again");
        for member in share.members.lock().iter() {
            if let Some(sink) = &member.sink {
                sink.restart(text.as_str(), "the tape store failed; running the turn again".to_string());
            }
        }
    }
}

/// What the tape says of a turn its store cut short.
enum Landing {
    /// Its fork merged: its answer stands.
    Landed,
    /// Nothing of it is on the tape, and its session is still this replica's.
    NotLanded,
    /// Among replicas: the session is no longer this one's (running it
    /// again here could land it beside the new holder's run).
    Moved,
    /// The tape could not be read within [`super::store::STORE_PATIENCE`].
    Unknown,
}

async fn landing(inner: &Arc<Inner>, share: &TurnShare) -> Landing {
    let deadline = tokio::time::Instant::now() + super::store::STORE_PATIENCE;
    let mut pause = std::time::Duration::from_millis(250);
    loop {
        tokio::time::sleep(pause).await;
        let checked = match super::recovery::turn_landed(inner, &share.session, &share.id).await {
            Ok(true) => return Landing::Landed,
            Ok(false) => match inner.replica.get() {
                Some(replica) => replica.still_holds(&share.session).await.map_err(|e| e.to_string()),
                None => Ok(true),
            },
            Err(error) => Err(error.to_string()),
        };
        match checked {
            Ok(true) => return Landing::NotLanded,
            Ok(false) => {
                tracing::warn!(session = %share.session, turn = %share.id, "the session is no longer this replica's; the turn is left to its holder");
                return Landing::Moved;
            }
            Err(error) if tokio::time::Instant::now() + pause < deadline => {
                tracing::warn!(session = %share.session, turn = %share.id, %error, "cannot tell yet whether the turn landed");
                pause = (pause * 2).min(std::time::Duration::from_secs(5));
            }
            Err(error) => {
                tracing::error!(session = %share.session, turn = %share.id, %error, "cannot tell whether the turn landed; it fails");
                return Landing::Unknown;
            }
        }
    }
}

/// Runs the agent and streams its answer to the waiting callers (the turn's
/// members as they are at each event: steered ones included) and the live
/// reply. Returns the text and the run's first failure.
async fn answer(
    inner: &Inner,
    share: &TurnShare,
    prompt: String,
    options: RunOptions,
    live: Option<&LiveReply>,
    notice: &str,
) -> (String, Option<(FailureKind, String)>) {
    let mut stream = inner.agent.run(prompt, options);
    let mut text = AnswerText::default();
    let mut failure: Option<(FailureKind, String)> = None;
    while let Some(event) = stream.next_event().await {
        let changed = text.apply(&event);
        match event {
            StreamEvent::Text(delta) => {
                for member in share.members.lock().iter() {
                    if let Some(sink) = &member.sink {
                        sink.delta(delta.clone());
                    }
                }
            }
            StreamEvent::Cut { kind, message, retrying: true, .. } => {
                tracing::warn!(session = %share.session, turn = %share.id, %kind, error = %message, "the answer was cut off; asking again");
                for member in share.members.lock().iter() {
                    if let Some(sink) = &member.sink {
                        sink.restart(text.as_str(), format!("the answer was cut off ({kind}); asking again"));
                    }
                }
                if let Some(live) = live {
                    live.update(format!("{notice}{}{ASKING_AGAIN}", text.as_str()));
                }
                continue;
            }
            StreamEvent::Error { kind, message } if failure.is_none() => failure = Some((kind, message)),
            _ => {}
        }
        if changed && let Some(live) = live {
            live.update(format!("{notice}{}", text.as_str()));
        }
    }
    (text.into_string(), failure)
}

/// The turn's outcome: the answer, or what failed after what was said.
fn turn_outcome(share: &TurnShare, text: String, failure: Option<(FailureKind, String)>) -> Outcome {
    match failure {
        // A failed command's output is its reply, and says what failed.
        Some((FailureKind::Command, _)) => outcome(OutcomeStatus::Failed, text, &share.session),
        Some((kind, message)) => {
            metrics::counter!("bub_turn_errors_total", "kind" => kind.as_str()).increment(1);
            tracing::error!(session = %share.session, turn = %share.id, %kind, error = %message, "turn failed");
            // What was said before the failure stays, and the chat reads that it failed.
            let failed = failure_text(kind, &message, &share.id);
            let text = if text.trim().is_empty() { failed } else { format!("{}\n\n{failed}", text.trim_end()) };
            outcome(OutcomeStatus::Failed, text, &share.session)
        }
        None => outcome(OutcomeStatus::Replied, text, &share.session),
    }
}

/// Shown after the text so far while a cut-off answer is asked again.
const ASKING_AGAIN: &str = "\n\n⏳ (the answer was cut off; asking the model again…)";

/// What the chat reads when a turn failed. The model's and the input's
/// errors say what to change and are shown as they are; the host's (the
/// workspace, the tape store, code mode's files, a failing handler, anything
/// unknown) carry server paths and I/O details, so the chat reads what
/// failed and where to look — the gateway's log, under the same turn id,
/// has the detail.
fn failure_text(kind: FailureKind, message: &str, turn: &str) -> String {
    use FailureKind::*;
    let what = match kind {
        NotConfigured => return format!("⚠️ {message}"),
        RateLimited | Auth | ContextOverflow | BadRequest | Server | Timeout | Connection | Cut | Protocol
        | InvalidInput | MaxSteps | Command => return format!("⚠️ The turn failed ({kind}): {message}"),
        Environment => "the session's workspace could not be opened",
        Tape => "the session's tape could not be read or written",
        CodeMode => "code mode could not be prepared for this session",
        Handler => "a gateway hook failed",
    };
    format!("⚠️ The turn failed ({kind}): {what}; the gateway's log has the details (turn {turn}).")
}

pub(crate) fn status_name(status: OutcomeStatus) -> &'static str {
    match status {
        OutcomeStatus::Replied => "replied",
        OutcomeStatus::Recorded => "recorded",
        OutcomeStatus::Refused => "refused",
        OutcomeStatus::Dropped => "dropped",
        OutcomeStatus::Failed => "failed",
    }
}

/// Gives `messages` their outcome: stored with the reply (when `reply` and
/// the messages want one through the channel), told to waiting callers, then
/// the reply is delivered.
pub(crate) async fn conclude(inner: &Arc<Inner>, messages: Vec<Message>, result: Outcome, reply: bool) {
    conclude_with(inner, messages, result, reply, None).await
}

async fn conclude_with(
    inner: &Arc<Inner>,
    messages: Vec<Message>,
    result: Outcome,
    reply: bool,
    live: Option<LiveReply>,
) {
    let Some(first) = messages.first() else { return };
    let last = messages.last().unwrap_or(first);
    let replies: Vec<PendingReply> = if reply
        && !result.text.trim().is_empty()
        && messages.iter().any(|m| m.inbound.delivery == Delivery::Channel)
    {
        vec![PendingReply {
            channel: last.inbound.channel.clone(),
            outbound: Outbound {
                chat: last.inbound.chat.clone(),
                text: result.text.clone(),
                reply_to: messages.iter().map(|m| m.inbound.message_id.clone()).collect(),
                idempotency_key: reply_key(first),
                session: result.session.clone(),
                mentions: admission::reply_mentions(messages.iter().map(|m| &m.inbound)),
            },
            sent: Vec::new(),
        }]
    } else {
        Vec::new()
    };
    // Waiting callers hear before the outcome is stored: a turn's reply is on
    // the tape already (a restart that finds its marker rebuilds the outcome
    // from it), and a repeat of the message meanwhile gets the outcome from
    // `told` instead of "still running". Channel replies wait for the store:
    // the outbox row is what makes them exactly-once.
    let waiting: Vec<&Message> = messages.iter().filter(|m| m.sink.is_some()).collect();
    inner.told.insert(waiting.iter().map(|m| &m.inbound), &result);
    for message in &waiting {
        if let Some(sink) = &message.sink {
            sink.done(result.clone()).await;
            record_reply_time(message, "caller");
        }
    }
    let seqs: Vec<i64> = messages.iter().map(|m| m.seq).collect();
    // Patiently: the session's next turn waits until this one has its
    // outcome (handed to a later sweep or restart, these messages would be
    // answered after the ones queued behind them).
    let stored =
        super::store::patiently("store a turn's outcome", || inner.store.finish(&seqs, &result, &replies)).await;
    if let Some(replica) = inner.replica.get() {
        replica.finished(&seqs);
    }
    inner.told.remove(waiting.iter().map(|m| &m.inbound));
    if let Err(error) = stored {
        // Without its outbox row a reply sent now would be sent again by the
        // restart that handles these messages: it waits for that restart.
        tracing::error!(%error, "cannot store the outcome; the messages and their reply are handled again after a restart");
        return;
    }
    let mut live = live;
    let mut reached_the_chat = false;
    for reply in replies {
        reached_the_chat |= super::outbound::delivery::deliver_reply(inner, reply, live.take()).await;
    }
    if reached_the_chat {
        for message in messages.iter().filter(|m| m.inbound.delivery == Delivery::Channel) {
            record_reply_time(message, "chat");
        }
    }
}

/// `bub_reply_seconds`: from a message's arrival to its answer reaching the
/// waiting caller or the chat — what a user waits, debounce and queue
/// included. Messages resumed after a restart are left out (they arrived
/// before it).
fn record_reply_time(message: &Message, to: &'static str) {
    if message.recovered {
        return;
    }
    let waited = (chrono::Utc::now() - message.inbound.received_at).to_std().unwrap_or_default();
    metrics::histogram!("bub_reply_seconds", "channel" => message.inbound.channel.clone(), "to" => to)
        .record(waited.as_secs_f64());
}

/// Keeps an unaddressed group message on the tape as context, unanswered.
pub(crate) async fn record_inactive(inner: &Arc<Inner>, session: &str, message: Message) {
    let result = match record_on_tape(inner, session, &message).await {
        Ok(()) => outcome(OutcomeStatus::Recorded, "", session),
        Err(_) => {
            // The error may name server paths: the log has it, the caller reads what failed.
            let text = "⚠️ The message could not be recorded on the session's tape; the gateway's log has the details.";
            outcome(OutcomeStatus::Failed, text, session)
        }
    };
    conclude(inner, vec![message], result, false).await;
}

/// Appends a message to its session's tape without a turn (marked inactive);
/// a failure is logged here.
pub(crate) async fn record_on_tape(
    inner: &Arc<Inner>,
    session: &str,
    message: &Message,
) -> Result<(), crate::tape::TapeError> {
    append_inactive(inner, session, message).await.inspect_err(|error| {
        tracing::error!(%error, session, message_id = %message.inbound.message_id, "cannot record a message on the tape");
    })
}

/// The entry's `message_id` is the inbound's key: for an edit (see
/// `super::edit`) the edited message's id and the edit's version, and the
/// entry says `edit_of` that message.
async fn append_inactive(inner: &Arc<Inner>, session: &str, message: &Message) -> Result<(), crate::tape::TapeError> {
    let key = message.inbound.key();
    let files = super::attachments::unfetched_notes(&message.inbound);
    let mut entry =
        NewEntry::chat("user", admission::compose_prompt_with_files([(&message.inbound, files.as_slice())]))
            .with_meta("inactive", json!(true))
            .with_meta(crate::tape::provenance::META_KEY, json!(message.provenance.as_str()))
            .with_meta("message_id", json!(key));
    if message.inbound.edit.is_some() {
        entry = entry.with_meta("edit_of", json!(message.inbound.message_id));
    }
    let tape = inner.agent.tape(session)?;
    if message.recovered && already_recorded(&tape, &key).await? {
        return Ok(());
    }
    tape.ensure_bootstrap_anchor().await?;
    tape.append(entry).await.map(|_| ())
}

/// How far back a restart looks for a message recorded before the crash.
const RECORDED_SEARCH: usize = 64;

/// Whether a message recorded without a turn is already on the tape (the
/// gateway stopped between recording it and storing its outcome).
async fn already_recorded(tape: &crate::tape::Tape, message_id: &str) -> Result<bool, crate::tape::TapeError> {
    let query =
        crate::tape::TapeQuery::all().kinds([crate::tape::EntryKind::Message]).newest_first().limit(RECORDED_SEARCH);
    let recent = tape.read(&query).await?;
    Ok(recent.iter().any(|entry| {
        entry.meta.get("inactive") == Some(&json!(true)) && entry.meta.get("message_id") == Some(&json!(message_id))
    }))
}

#[cfg(test)]
mod tests {
    use super::failure_text;
    use crate::agent::FailureKind;

    #[test]
    fn host_failures_reach_the_chat_without_their_details() {
        let error = "/home/bub/workspaces/webhook%3Ac1: File name too long (os error 36)";
        let text = failure_text(FailureKind::Environment, error, "t1");
        assert_eq!(
            text,
            "⚠️ The turn failed (environment): the session's workspace could not be opened; \
             the gateway's log has the details (turn t1)."
        );
        for kind in [FailureKind::Tape, FailureKind::CodeMode, FailureKind::Handler] {
            let text = failure_text(kind, error, "t1");
            assert!(!text.contains('/') && !text.contains("os error"), "{kind}: {text}");
        }
        assert_eq!(
            failure_text(FailureKind::RateLimited, "retry in 3 s", "t1"),
            "⚠️ The turn failed (rate_limited): retry in 3 s"
        );
        assert_eq!(failure_text(FailureKind::NotConfigured, "set BUB_MODEL", "t1"), "⚠️ set BUB_MODEL");
    }
}
