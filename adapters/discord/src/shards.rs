//! One gateway connection per shard. Discord splits a bot's servers into
//! shards: a guild's events go to shard `(guild_id >> 22) % shards`, direct
//! messages to shard 0, and each shard is a websocket and a session of its
//! own. Here each shard is a serenity [`Client`](serenity::Client) of its
//! own (`Client::start_shard(id, total)`), so one shard can stop while the
//! others run: among gateway replicas, a shard moves from one process to
//! another ([`bub_channel::Channel::start_part`]).
//!
//! Each shard has its own event handler, queue to the gateway
//! (`hand_over`) and catch-up after its READYs, so a chat's messages, which
//! all come through one shard, keep their order.
//!
//! Discord lets a bot start `max_concurrency` sessions per 5 seconds (shards
//! whose id modulo `max_concurrency` match share one slot). serenity spaces
//! the shards of one client; across clients this process spaces them
//! ([`IdentifyGate`]), asking `GET /gateway/bot` once for the limit. Other
//! processes' shards are not counted: an IDENTIFY Discord refuses for it is
//! retried by serenity.

use crate::catch_up;
use crate::{BotUser, DiscordChannel, Handler, Receiver, START_TIMEOUT, hand_over, start_error, threads};
use bub_channel::{ChannelError, InboundSink};
use parking_lot::Mutex;
use serenity::all::GatewayIntents;
use serenity::gateway::ShardManager;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::Instrument;

/// Discord's window for session starts: `max_concurrency` per bucket each.
const IDENTIFY_WINDOW: Duration = Duration::from_secs(5);
/// How long a stop asks a shard to close before it gives up on it.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// Which shard of how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ShardRef {
    pub id: u32,
    pub total: u32,
}

impl ShardRef {
    /// Whether Discord sends this shard the events of `guild` (`None`:
    /// direct messages, which go to shard 0).
    pub(crate) fn receives(self, guild: Option<u64>) -> bool {
        let shard = guild.map_or(0, |guild| (guild >> 22) % u64::from(self.total.max(1)));
        shard == u64::from(self.id)
    }
}

/// A shard connected here.
pub(crate) struct Shard {
    manager: Arc<ShardManager>,
    /// Runs `Client::start_shard`: ends when the shard is shut down (or
    /// fails for good).
    connection: tokio::task::JoinHandle<()>,
    /// Gives what arrived to the gateway; ends once the shard's senders
    /// are gone (the client's handler, the catch-up).
    handing_over: tokio::task::JoinHandle<()>,
    /// Fetching what was missed before each new session.
    catch_up: tokio::task::JoinHandle<()>,
}

impl Shard {
    /// Closes the shard's websocket (a log-off: its session ends), then
    /// lets what it already queued reach the gateway; what it had not
    /// fetched yet, the next connection of the shard catches up.
    pub(crate) async fn stop(mut self, channel: &str, shard: u32) {
        self.catch_up.abort();
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            // A shard between two sessions (queued for a new IDENTIFY) is
            // not among the manager's runners, and `shutdown_all` misses it:
            // asked again until the connection has ended, it is caught once
            // it runs, so no connection of this shard outlives the stop.
            self.manager.shutdown_all().await;
            match tokio::time::timeout(Duration::from_millis(250), &mut self.connection).await {
                Ok(_) => break,
                Err(_) if Instant::now() < deadline => {}
                Err(_) => {
                    tracing::warn!(%channel, shard, "the Discord shard did not close within {STOP_TIMEOUT:?}; left behind");
                    self.connection.abort();
                    break;
                }
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), self.handing_over).await;
    }
}

/// When this process last started a session in each rate-limit bucket.
#[derive(Default)]
pub(crate) struct IdentifyGate {
    /// Sessions Discord lets the bot start per window and bucket, once asked.
    max_concurrency: Option<u32>,
    last: HashMap<u32, Instant>,
}

impl DiscordChannel {
    /// Connects shard `shard` and returns once Discord said READY on it, or
    /// fails with what to fix (a wrong token, an intent not enabled). The
    /// shard is among the running ones from the moment its connection
    /// starts, so a stop that comes meanwhile (even one that drops this
    /// call) closes it too.
    pub(crate) async fn connect(&self, shard: u32, inbox: Arc<dyn InboundSink>) -> Result<(), ChannelError> {
        let name = self.settings.name.clone();
        let total = self.settings.shards;
        let http = self.http();
        let me = tokio::time::timeout(START_TIMEOUT, http.get_current_user())
            .await
            .map_err(|_| self.fail(format!("Discord did not answer within {START_TIMEOUT:?}")))?
            .map_err(|error| self.fail(self.token_problem(error).to_string()))?;
        let bot = BotUser { id: me.id.get(), name: me.name.clone() };
        let (ready_tx, ready_rx) = oneshot::channel();
        let (messages, queue) = mpsc::unbounded_channel();
        let catch_up_queue = messages.clone();
        let (sessions, new_sessions) = mpsc::unbounded_channel();
        let handler = Handler {
            messages,
            ready: Mutex::new(Some(ready_tx)),
            sessions,
            answers: self.answers.clone(),
            channel: name.clone(),
        };
        let intents =
            GatewayIntents::GUILD_MESSAGES | GatewayIntents::DIRECT_MESSAGES | GatewayIntents::MESSAGE_CONTENT;
        let mut client = serenity::client::ClientBuilder::new_with_http(http, intents)
            .event_handler(handler)
            .await
            .map_err(|error| self.fail(format!("cannot set up the Discord client: {error}")))?;
        let (http, manager) = (client.http.clone(), client.shard_manager.clone());
        let client_http = http.clone();
        let receiver = Receiver {
            channel: name.clone(),
            bot,
            inbox: inbox.clone(),
            answers: self.answers.clone(),
            http: http.clone(),
        };
        // The shard's tasks live as long as its connection: a span of their own.
        let span = tracing::info_span!("discord.shard", channel = %name, shard);
        let handing_over = hand_over(receiver, queue, threads::Threads::new(http.clone()));
        let handing_over = tokio::spawn(handing_over.instrument(span.clone()));
        let catching_up = catch_up::each_session(
            name.clone(),
            ShardRef { id: shard, total },
            http,
            inbox,
            catch_up_queue,
            new_sessions,
        );
        let catch_up = tokio::spawn(catching_up.instrument(span.clone()));
        self.identify_slot(shard).await;
        let (ended_tx, ended_rx) = oneshot::channel();
        let task_name = name.clone();
        let connection = tokio::spawn(
            async move {
                let ended = client.start_shard(shard, total).await;
                // Before READY `connect` reports the failure; after it, only the log can.
                if let Err(returned) = ended_tx.send(ended)
                    && let Err(error) = returned
                {
                    tracing::error!(channel = %task_name, shard, reason = %start_error(&task_name, &error), "the Discord connection ended; no more messages arrive on this shard until a restart");
                }
            }
            .instrument(span),
        );
        let running = Shard { manager, connection, handing_over, catch_up };
        let raced = self.running.lock().insert(shard, running);
        self.stop_shards(raced.map(|raced| (shard, raced))).await;
        let failed = tokio::select! {
            ready = ready_rx => match ready {
                Ok(()) => None,
                Err(_) => Some("the Discord client stopped before it was ready".to_string()),
            },
            ended = ended_rx => Some(match ended {
                Ok(Err(error)) => start_error(&name, &error),
                _ => "the Discord connection ended before READY".to_string(),
            }),
            () = tokio::time::sleep(START_TIMEOUT) => Some(format!("Discord did not say READY within {START_TIMEOUT:?}")),
        };
        match failed {
            None => {
                // READY named the application (serenity keeps its id in the client's REST client):
                // the channel's own client answers commands with it.
                if let Some(id) = client_http.application_id() {
                    self.http.set_application_id(id);
                }
                Ok(())
            }
            Some(reason) => {
                let failed = self.running.lock().remove(&shard);
                self.stop_shards(failed.map(|failed| (shard, failed))).await;
                Err(self.fail(if total > 1 { format!("shard {shard} of {total}: {reason}") } else { reason }))
            }
        }
    }

    /// Waits until shard `shard` may start a session (see the module doc).
    /// One shard needs no spacing: serenity spaces its own new sessions.
    async fn identify_slot(&self, shard: u32) {
        if self.settings.shards == 1 {
            return;
        }
        let mut gate = self.identify.lock().await;
        let max_concurrency = match gate.max_concurrency {
            Some(known) => known,
            None => {
                let asked = self.max_concurrency().await;
                gate.max_concurrency = Some(asked);
                asked
            }
        };
        let bucket = shard % max_concurrency;
        if let Some(last) = gate.last.get(&bucket) {
            tokio::time::sleep_until(*last + IDENTIFY_WINDOW).await;
        }
        gate.last.insert(bucket, Instant::now());
    }

    /// How many sessions Discord lets the bot start at once (1 when it
    /// cannot say); logs when it recommends more shards than configured.
    async fn max_concurrency(&self) -> u32 {
        let name = &self.settings.name;
        match self.http.get_bot_gateway().await {
            Ok(gateway) => {
                if gateway.shards > self.settings.shards {
                    tracing::warn!(channel = %name, recommended = gateway.shards, configured = self.settings.shards, "Discord recommends more shards for this bot; raise channels.{name}.shards");
                }
                u32::try_from(gateway.session_start_limit.max_concurrency).unwrap_or(1).max(1)
            }
            Err(error) => {
                tracing::warn!(channel = %name, %error, "cannot ask Discord how many sessions may start at once; starting one per 5 s");
                1
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ShardRef;

    #[test]
    fn a_guild_goes_to_the_shard_of_its_id_and_direct_messages_to_shard_0() {
        // (guild >> 22) is the guild's creation time; 41771983423143937 >> 22 = 9959216934, even.
        let (even, odd) = (41_771_983_423_143_937u64, 41_771_983_423_143_937u64 + (1 << 22));
        let of_two = |id| ShardRef { id, total: 2 };
        assert!(of_two(0).receives(Some(even)) && !of_two(1).receives(Some(even)));
        assert!(of_two(1).receives(Some(odd)) && !of_two(0).receives(Some(odd)));
        assert!(of_two(0).receives(None) && !of_two(1).receives(None));
        assert!(ShardRef { id: 0, total: 1 }.receives(Some(odd)), "one shard gets everything");
    }
}
