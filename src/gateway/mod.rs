//! The gateway: messages come in from channels, become prompts or comma
//! commands, run on their session's tape and environment under the channel's
//! policy, and the replies go back out.
//!
//! The path of one message, in order:
//! 1. [`Gateway::submit`] (the channels' [`InboundSink`]): a message whose
//!    ids break the limits of [`bub_channel::check`] is refused (the adapters
//!    check on arrival too), the bot's own messages are dropped, the sender's inbound rate is checked, and the
//!    message is stored in the durable inbox ([`store`]) — deduplicated by
//!    channel and platform message id — before the channel acknowledges it.
//! 2. Admission ([`admission`], [`pairing`]): who is answered in direct and
//!    group chats, with pairing for senders and groups the config leaves to
//!    it (a code, and nothing else, until approved); comma commands are
//!    recognised and need the sender to be an operator for that command
//!    (where none are named, only the read-only ones run);
//!    group text that does not address the bot is recorded on the tape as
//!    inactive context, not answered.
//!    Platform commands (`/start`, `/help`, `/tape_info@bot`) are read
//!    right after admission (`platform`).
//! 3. The session's worker (`session`): bursts are debounced, one turn runs
//!    at a time, and a message arriving mid-turn steers it, queues behind it or
//!    is dropped with a notice, as the policy says. Commands bypass both.
//!    "typing…" (`typing`) shows from the moment a message that addresses
//!    the bot enters a batch until its turn's reply is sent.
//!    An edit of a message (`edit`) replaces the text of a message still waiting
//!    there; after its turn it is recorded or answered again (`on_edit`).
//! 4. The turn (`turn`): the agent runs with the tools the policy offers and
//!    the policy's model; a waiting caller hears the reply as soon as the turn
//!    is on the tape (`told` covers the moment until its outcome is stored);
//!    a channel reply is stored in the outbox with the messages' outcome in one
//!    transaction, then sent through the [`outbound`] scheduler.
//! 5. On start, `recovery` finishes what a crash interrupted: turns already
//!    on the tape get their reply, the others run again; undelivered replies go out.
//!
//! - `files`: the files a turn's tools send to its chat (`chat.send_file`),
//!   through the scheduler, recorded so a rerun after a crash sends none twice.
//! - [`split`]: splitting long replies under a platform's limit.
//! - [`chats`]: the sessions of the inbox as the admin console lists them
//!   (channel, chat, thread, activity, and the tape each one opens).
//! - [`attachments`]: files people send, saved into the session's workspace when
//!   their turn runs (within the chat's `max_attachment_bytes`) and named to
//!   the model; images shown to models that read them.
//!
//! [`Gateway::builder`] starts one in the order that is safe (home lock,
//! database, policy, config, sandboxes, channels, HTTP server, resume) and
//! stops it gracefully: the `bub` binary and embedding programs both use it.

pub mod admission;
pub mod attachments;
mod builder;
pub mod channels;
pub mod chats;
pub mod confinement;
mod edit;
mod files;
mod limiter;
pub mod outbound;
pub mod pairing;
mod platform;
mod recovery;
mod replica;
mod running;
mod session;
pub mod split;
pub mod store;
mod told;
mod turn;
mod typing;

use crate::agent::Agent;
use crate::agent::events::{AfterLlmCall, AfterToolCall, RunStarted};
use crate::config::LiveConfig;
use crate::policy::EffectivePolicy;
use crate::telemetry::traces::TraceLink;
use bub_channel::{
    Channel, ChannelError, Inbound, InboundField, InboundSink, InvalidInbound, Outcome, OutcomeStatus, Problem,
    ReplySink, SubmitError, Submitted,
};
pub use builder::{GatewayBuilder, HttpPart, Notice, OpenGateway, RunningGateway, StartError};
use confinement::PolicyConfinement;
use outbound::OutboundScheduler;
use session::Sessions;
use std::collections::HashMap;
use std::sync::Arc;
use store::{GatewayStore, Received};
use tracing::Instrument;

/// The gateway's event on a turn's tape: which inbound messages the turn
/// answers. Written inside the turn's fork, so it lands with the turn or not
/// at all; a restart looks for it to know whether a turn already happened.
pub const TURN_EVENT: &str = "gateway.turn";

/// How long a stop waits for the platform calls in flight (a callback POST)
/// to answer, so their deliveries are recorded: longer than the webhook
/// callback's request timeout (30 s) and Telegram's client timeout, so only a
/// call that has timed out already is cut.
pub const DELIVERY_DRAIN: std::time::Duration = std::time::Duration::from_secs(40);

/// One stored inbound message on its way through the pipeline.
pub(crate) struct Message {
    pub seq: i64,
    pub inbound: Inbound,
    /// The caller waiting for the outcome (webhook `sync`/`sse`), if any.
    pub sink: Option<ReplySink>,
    pub policy: Arc<EffectivePolicy>,
    /// `<channel>:<sender id>`.
    pub user: String,
    /// The session it belongs to, resolved once when it arrived.
    pub session: String,
    /// Picked up again after a restart: it may already be on the tape.
    pub recovered: bool,
    /// Where its text comes from, decided at admission (until then the
    /// closed side: a stranger's).
    pub provenance: crate::tape::Provenance,
    /// Its place in its trace (its `admission` span, or after a restart the
    /// caller's context): its turn's span hangs under it.
    pub trace: TraceLink,
}

/// Where a stored message's turn hangs when it runs again after a restart:
/// under the caller's trace context, if the channel received one.
pub(crate) fn caller_trace(inbound: &Inbound) -> TraceLink {
    match &inbound.trace {
        Some(context) => TraceLink::from_w3c(context.traceparent(), context.tracestate()),
        None => TraceLink::default(),
    }
}

/// The running gateway. Cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub agent: Agent,
    pub store: GatewayStore,
    pub pairing: pairing::PairingStore,
    pub config: Arc<LiveConfig>,
    pub channels: HashMap<String, Arc<dyn Channel>>,
    pub scheduler: Arc<OutboundScheduler>,
    /// "typing…" in the chats that are owed an answer.
    pub typing: Arc<typing::TypingHints>,
    pub sessions: Sessions,
    pub confinement: Arc<PolicyConfinement>,
    /// Messages waiting in sessions for a turn (debounce batches and queues).
    pub waiting: std::sync::atomic::AtomicI64,
    /// Effective policies of the config in force, by channel and chat.
    policies: parking_lot::Mutex<PolicyCache>,
    /// The platforms' command menus as set (see `platform`).
    menus: platform::Menus,
    /// Where operators wrote last (channel, chat id → chat, session), newest last,
    /// so the gateway can tell them about a refused config.
    operator_chats: parking_lot::Mutex<indexmap::IndexMap<(String, String), (bub_channel::ChatRef, String)>>,
    limiter: limiter::InboundLimiter,
    /// Outcomes told to waiting callers whose store has not committed yet.
    pub told: told::ToldOutcomes,
    /// Turns in flight, for a bounded stop.
    pub running: Arc<running::RunningTasks>,
    /// Replies being delivered, stopped after the turns (see [`running`]).
    pub deliveries: Arc<running::RunningTasks>,
    /// The config whose outbound budgets the scheduler has.
    budgets_from: parking_lot::Mutex<Option<Arc<crate::config::GatewayConfig>>>,
    /// This process's part among replicas sharing a PostgreSQL database.
    replica: std::sync::OnceLock<Arc<replica::Replica>>,
    /// The config's MCP servers, when the builder started them.
    mcp: std::sync::OnceLock<crate::mcp::McpServers>,
}

impl Gateway {
    /// A gateway over these channels; nothing runs until [`Gateway::start`].
    /// `confinement` must be the provider of the agent's environments, so
    /// each session's files are confined as its policy says. Most programs
    /// want [`Gateway::builder`], which also locks the home, serves HTTP and
    /// stops gracefully.
    pub fn new(
        agent: Agent,
        store: GatewayStore,
        config: Arc<LiveConfig>,
        channels: impl IntoIterator<Item = Arc<dyn Channel>>,
        confinement: Arc<PolicyConfinement>,
    ) -> Gateway {
        let channels: HashMap<String, Arc<dyn Channel>> =
            channels.into_iter().map(|channel| (channel.name().to_string(), channel)).collect();
        let scheduler = OutboundScheduler::new();
        let inner = Arc::new(Inner {
            agent,
            pairing: store.pairing(),
            store,
            config,
            channels,
            typing: typing::TypingHints::new(scheduler.clone()),
            scheduler,
            sessions: Sessions::default(),
            told: told::ToldOutcomes::default(),
            running: Arc::default(),
            deliveries: Arc::default(),
            budgets_from: parking_lot::Mutex::new(None),
            confinement,
            waiting: Default::default(),
            operator_chats: Default::default(),
            policies: Default::default(),
            menus: Default::default(),
            limiter: limiter::InboundLimiter::default(),
            replica: Default::default(),
            mcp: Default::default(),
        });
        record_turns(&inner.agent);
        observe(&inner.agent);
        Gateway { inner }
    }

    /// HTTP routes of the channels that receive over HTTP (webhooks).
    pub fn routes(&self) -> axum::Router {
        let mut router = axum::Router::new();
        for channel in self.inner.channels.values() {
            if let Some(routes) = channel.routes() {
                router = router.merge(routes);
            }
        }
        router
    }

    /// Resumes what a previous run left unfinished, then starts every channel.
    /// A channel that cannot start is an error: the gateway should stop.
    pub async fn start(&self) -> Result<(), ChannelError> {
        for channel in self.inner.channels.values() {
            self.inner.scheduler.register(channel.clone(), Default::default());
        }
        // Budgets from the config in force (and again after each reload).
        self.inner.outbound();
        recovery::resume(&self.inner).await.map_err(|error| ChannelError::new("gateway", error.to_string()))?;
        if let Some(replica) = self.inner.replica.get() {
            replica.start(&self.inner);
        }
        let inbox: Arc<dyn InboundSink> = Arc::new(self.clone());
        let mut names: Vec<_> = self.inner.channels.keys().cloned().collect();
        names.sort();
        for name in names {
            let channel = &self.inner.channels[&name];
            // Among replicas, what one process at a time may receive goes by lease.
            if let Some(replica) = self.inner.replica.get()
                && channel.exclusive_parts() > 0
            {
                replica.share_receiving(channel.clone(), inbox.clone());
                tracing::info!(channel = %name, parts = channel.exclusive_parts(), "channel shares its receiving with the other replicas");
                continue;
            }
            channel.start(inbox.clone()).await?;
            tracing::info!(channel = %name, "channel started");
        }
        self.inner.menus.start(&self.inner);
        Ok(())
    }

    /// Stops the channels (no new messages; among replicas, the receiving
    /// parts this one ran go to another at once), lets the turns in flight finish
    /// for up to `grace` and abandons the rest (no new turn starts meanwhile;
    /// the next start runs what was abandoned or never started, and callers
    /// still waiting are answered 503 at once). Then replies stop going out:
    /// a platform call already made (a callback POST) is finished and its
    /// delivery recorded, for [`DELIVERY_DRAIN`] at most, and the rest of
    /// every reply is left to the next start. Last, waits (5 s at most) until
    /// the outcomes already told to callers are stored.
    pub async fn stop(&self, grace: std::time::Duration) {
        // Among replicas: no new work is claimed, no receiving part taken up.
        if let Some(replica) = self.inner.replica.get() {
            replica.stop_claiming();
        }
        for channel in self.inner.channels.values() {
            channel.stop().await;
        }
        if let Some(replica) = self.inner.replica.get() {
            replica.release_receiving().await;
        }
        let abandoned = self.inner.running.stop(grace).await;
        if abandoned > 0 {
            tracing::warn!(
                abandoned,
                ?grace,
                "turns still running at the end of the stop's grace; the next start runs them again"
            );
        }
        self.inner.scheduler.stop();
        let cut = self.inner.deliveries.stop(DELIVERY_DRAIN).await;
        if cut > 0 {
            tracing::warn!(
                cut,
                drain = ?DELIVERY_DRAIN,
                "replies still being sent at the end of the stop; the next start may send them again"
            );
        }
        self.inner.told.settled(std::time::Duration::from_secs(5)).await;
        self.retire().await;
    }

    /// Among replicas: this one's heartbeat and sweep stop and its leases
    /// are given up, so the others take its sessions over at once.
    async fn retire(&self) {
        let Some(replica) = self.inner.replica.get() else { return };
        if let Err(error) = replica.retire().await {
            tracing::warn!(%error, "cannot give this replica's leases up; the others wait for them to expire");
        }
    }

    /// Sends `text` to the chats where operators wrote most recently (best
    /// effort: a notice is not stored in the outbox).
    pub async fn notify_operators(&self, text: &str) {
        let chats: Vec<_> = {
            let chats = self.inner.operator_chats.lock();
            chats
                .iter()
                .map(|((channel, _), (chat, session))| (channel.clone(), chat.clone(), session.clone()))
                .collect()
        };
        if chats.is_empty() {
            tracing::warn!("no operator has written yet; the notice is only logged");
        }
        for (channel, chat, session) in chats {
            let notice = bub_channel::Outbound {
                chat,
                text: text.to_string(),
                reply_to: Vec::new(),
                idempotency_key: format!("notice:{}", uuid::Uuid::new_v4().simple()),
                session,
                mentions: Vec::new(),
            };
            if let Err(error) = self.inner.outbound().send_final(&channel, notice).await {
                tracing::warn!(%error, channel = %channel, "cannot tell an operator");
            }
        }
    }

    /// The durable store (for readiness checks).
    pub fn store(&self) -> &GatewayStore {
        &self.inner.store
    }

    /// Where a started channel's platform setting hides what the policy
    /// relies on (Telegram's privacy mode while groups are answered), one
    /// warning each, saying how to fix it.
    pub fn channel_warnings(&self) -> Vec<String> {
        platform::hidden_group_messages_warnings(&self.inner)
    }

    /// Among replicas: whether this one stopped because its registration
    /// expired (it was taken for dead and its work taken over): it must be
    /// restarted, and `bub gateway` exits with an error.
    pub fn lost_registration(&self) -> bool {
        self.inner.replica.get().is_some_and(|replica| replica.is_fenced())
    }

    /// The channels, by name.
    pub fn channel_names(&self) -> Vec<String> {
        self.inner.channels.keys().cloned().collect()
    }

    /// The config in force and its reload (the admin console edits it).
    pub(crate) fn live_config(&self) -> &Arc<LiveConfig> {
        &self.inner.config
    }

    /// The gateway's agent (its tools, tapes and sessions).
    pub(crate) fn agent(&self) -> &Agent {
        &self.inner.agent
    }

    /// Pairing requests and approvals.
    pub(crate) fn pairing(&self) -> &pairing::PairingStore {
        &self.inner.pairing
    }

    /// This replica's id among replicas on PostgreSQL; `None` alone on SQLite.
    pub(crate) fn replica_id(&self) -> Option<String> {
        self.inner.replica.get().map(|replica| replica.id.clone())
    }
}

#[async_trait::async_trait]
impl InboundSink for Gateway {
    async fn latest_per_chat(
        &self,
        channel: &str,
        since: chrono::DateTime<chrono::Utc>,
        limit: usize,
    ) -> Vec<bub_channel::LatestMessage> {
        match self.inner.store.latest_per_chat(channel, since, limit).await {
            Ok(latest) => latest,
            Err(error) => {
                tracing::error!(%error, channel, "cannot read where chats left off; missed messages are not caught up");
                Vec::new()
            }
        }
    }

    /// In an `admission` span: the first of the message's trace, under the
    /// caller's span when the channel received a trace context.
    async fn submit(&self, inbound: Inbound, sink: Option<ReplySink>) -> Result<Submitted, SubmitError> {
        let span = tracing::info_span!("admission", channel = %inbound.channel);
        caller_trace(&inbound).adopt(&span);
        self.submit_in_span(inbound, sink).instrument(span).await
    }
}

impl Gateway {
    async fn submit_in_span(&self, inbound: Inbound, sink: Option<ReplySink>) -> Result<Submitted, SubmitError> {
        let inner = &self.inner;
        if !inner.channels.contains_key(&inbound.channel) {
            return Err(InvalidInbound { field: InboundField::Channel, problem: Problem::UnknownChannel }.into());
        }
        // The adapters check on arrival; this is the gateway's own guard, so
        // no id that cannot become a session's name is ever stored.
        if let Err(invalid) = inbound.check() {
            tracing::warn!(channel = %inbound.channel, field = %invalid.field, error = %invalid, "refused an invalid message");
            return Err(invalid.into());
        }
        let policy = inner.policy(&inbound.channel, &inbound.chat.id);
        let user = admission::user_name(&inbound);
        let channel_name = inbound.channel.clone();
        if inbound.from_self {
            tracing::debug!(channel = %inbound.channel, "dropped the bot's own message");
            if let Some(sink) = sink {
                sink.done(outcome(OutcomeStatus::Dropped, "the bot's own message", "")).await;
            }
            return Ok(Submitted::Accepted);
        }
        if let Some(rate) = policy.inbound_per_user.value
            && let Err(retry_after) = inner.limiter.check(&inbound.channel, &user, rate)
        {
            metrics::counter!("bub_inbound_rate_limited_total", "channel" => inbound.channel.clone()).increment(1);
            return Err(SubmitError::RateLimited { retry_after });
        }
        // An edit is handled as its stored message with the new text (see `edit`).
        let inbound = match edit::taken(&inner.store, inbound).await {
            Ok(Some(inbound)) => inbound,
            Ok(None) => return Ok(Submitted::Accepted),
            Err(error) => {
                tracing::error!(%error, channel = %channel_name, "cannot read the message an edit edits");
                return Err(SubmitError::Unavailable(error.to_string()));
            }
        };
        let session = admission::session_id(&inbound, policy.session_scope.value);
        let seq = match inner.store.receive(&inbound, &session).await {
            Ok(Received::New(seq)) => seq,
            Ok(Received::Duplicate(outcome)) => {
                // Told to its caller a moment ago, stored a moment from now.
                let outcome = outcome.or_else(|| inner.told.get(&inbound.channel, &inbound.message_id));
                return Ok(Submitted::Duplicate(outcome));
            }
            Err(error) => {
                tracing::error!(%error, channel = %inbound.channel, "cannot store an inbound message");
                return Err(SubmitError::Unavailable(error.to_string()));
            }
        };
        metrics::counter!("bub_inbound_messages_total", "channel" => inbound.channel.clone()).increment(1);
        // From the channel's receipt to the durable store (the moment it may acknowledge).
        let storing = (chrono::Utc::now() - inbound.received_at).to_std().unwrap_or_default();
        metrics::histogram!("bub_inbound_store_seconds", "channel" => inbound.channel.clone())
            .record(storing.as_secs_f64());
        let provenance = crate::tape::Provenance::Stranger;
        let trace = TraceLink::of(&tracing::Span::current());
        let message = Message { seq, inbound, sink, policy, user, session, recovered: false, provenance, trace };
        match inner.replica.get() {
            Some(replica) => replica.arrived(inner, message).await,
            None => session::dispatch(inner, message).await,
        }
        Ok(Submitted::Accepted)
    }
}

/// Resolving a chat's policy compiles its tool patterns: done once per chat
/// and config, not per message.
#[derive(Default)]
struct PolicyCache {
    config: Option<Arc<crate::config::GatewayConfig>>,
    chats: HashMap<(String, String), Arc<EffectivePolicy>>,
}

/// Chats kept in the cache before it starts over (a resolved policy with its
/// compiled patterns is several KB: the cache must not grow with the chats).
const POLICY_CACHE_CHATS: usize = 1024;

impl Inner {
    /// The outbound scheduler, with the budgets of the config in force: a
    /// reload that changes a rate (for a channel, or one chat) applies to the
    /// next send.
    pub(crate) fn outbound(&self) -> &OutboundScheduler {
        let config = self.config.current();
        let mut applied = self.budgets_from.lock();
        if !applied.as_ref().is_some_and(|done| Arc::ptr_eq(done, &config)) {
            for channel in self.channels.keys() {
                let (budget, own_chat_rates) = limiter::outbound_budgets(&config, channel);
                self.scheduler.set_budget(channel, budget, own_chat_rates);
            }
            *applied = Some(config);
        }
        &self.scheduler
    }

    /// Shows "typing…" in `chat` until the guard is dropped, where the
    /// channel can show it (see [`typing`]).
    pub(crate) fn show_typing(&self, channel: &str, chat: &bub_channel::ChatRef) -> Option<typing::Typing> {
        let target = self.channels.get(channel)?;
        if !target.limits().typing {
            return None;
        }
        // The hints spend the budgets of the config in force.
        self.outbound();
        Some(self.typing.show(channel, chat))
    }

    /// The policy in force for `chat` on `channel`.
    pub(crate) fn policy(&self, channel: &str, chat: &str) -> Arc<EffectivePolicy> {
        let config = self.config.current();
        let mut cache = self.policies.lock();
        if !cache.config.as_ref().is_some_and(|cached| Arc::ptr_eq(cached, &config))
            || cache.chats.len() >= POLICY_CACHE_CHATS
        {
            cache.chats.clear();
            cache.config = Some(config.clone());
        }
        cache
            .chats
            .entry((channel.to_string(), chat.to_string()))
            .or_insert_with(|| Arc::new(config.effective(channel, chat)))
            .clone()
    }

    /// Remembers where an operator wrote (the last 16 chats).
    pub(crate) fn note_operator_chat(&self, message: &Message) {
        let is_operator = message
            .policy
            .operators
            .value
            .as_ref()
            .is_some_and(|operators| operators.iter().any(|operator| operator.user.matches(&message.user)));
        if !is_operator {
            return;
        }
        let mut chats = self.operator_chats.lock();
        let key = (message.inbound.channel.clone(), message.inbound.chat.id.clone());
        chats.shift_remove(&key);
        chats.insert(key, (message.inbound.chat.clone(), message.session.clone()));
        while chats.len() > 16 {
            chats.shift_remove_index(0);
        }
    }
}

pub(crate) fn outcome(status: OutcomeStatus, text: impl Into<String>, session: &str) -> Outcome {
    Outcome { status, text: text.into(), session: session.to_string() }
}

/// Marks each turn's fork with the inbound messages it answers (see [`TURN_EVENT`]).
fn record_turns(agent: &Agent) {
    agent.events().on(|event: RunStarted| async move {
        if let Some(marker) = event.run.state.extension::<turn::TurnMarker>() {
            event.run.tape.append_event(TURN_EVENT, marker.to_json()).await?;
        }
        Ok(event)
    });
}

/// Model latency and tool calls, for `/metrics`.
fn observe(agent: &Agent) {
    agent.events().on_sync(|event: &mut AfterLlmCall| {
        let status = match &event.error {
            Some(error) => error.kind().to_string(),
            None => "ok".to_string(),
        };
        metrics::histogram!("bub_model_call_seconds", "status" => status).record(event.elapsed.as_secs_f64());
        Ok(())
    });
    agent.events().on_sync(|event: &mut AfterToolCall| {
        let status = if event.result.is_error() { "error" } else { "ok" };
        metrics::counter!("bub_tool_calls_total", "tool" => event.call.tool.clone(), "status" => status).increment(1);
        Ok(())
    });
}
