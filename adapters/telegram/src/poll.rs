//! Long polling: `getUpdates` in a loop, each message handed to the gateway,
//! and the offset moved past an update only once the gateway has it.
//!
//! Telegram forgets an update when a later `getUpdates` asks for an offset
//! past it, so confirming only what the gateway stored (or refused for good)
//! means a crash between the two re-delivers the update, and the gateway's
//! deduplication by message id drops the copy: nothing is lost or doubled.
//! While the gateway cannot take messages (it is stopping, its database is
//! unreachable), polling waits and asks again from the same offset.

use crate::inbound::update_to_inbound;
use bub_channel::InboundSink;
use std::sync::Arc;
use std::time::Duration;
use teloxide_core::payloads::GetUpdatesSetters;
use teloxide_core::prelude::Requester;
use teloxide_core::types::Me;
use teloxide_core::{ApiError, Bot, RequestError};
use tokio::sync::watch;

/// How long one `getUpdates` waits for news; under teloxide's 17 s client timeout.
pub(crate) const POLL_SECONDS: u32 = 10;
/// The first pause after a failed poll; it doubles up to [`MAX_PAUSE`], jittered ([`bub_channel::Backoff`]).
const FIRST_PAUSE: Duration = Duration::from_millis(500);
const MAX_PAUSE: Duration = Duration::from_secs(30);

pub(crate) struct Poller {
    pub channel: String,
    pub bot: Bot,
    pub me: Me,
    pub inbox: Arc<dyn InboundSink>,
    /// Becomes true when the channel stops.
    pub stop: watch::Receiver<bool>,
}

impl Poller {
    pub(crate) async fn run(mut self) {
        let mut offset: i32 = 0;
        let mut failures: u32 = 0;
        loop {
            // Stopped while handing a message over: no further poll, not even one the select below would drop.
            if *self.stop.borrow() {
                return;
            }
            let request =
                self.bot.get_updates().offset(offset).timeout(POLL_SECONDS).allowed_updates(crate::READ_UPDATES);
            let polled = tokio::select! {
                polled = request.into_future() => polled,
                _ = self.stop.wait_for(|stopped| *stopped) => return,
            };
            let updates = match polled {
                Ok(updates) => updates,
                Err(error) => {
                    failures += 1;
                    self.report(&error, failures);
                    if self.pause(failures).await {
                        return;
                    }
                    continue;
                }
            };
            failures = 0;
            for update in updates {
                if let Some(inbound) = update_to_inbound(&self.channel, &self.me, &update)
                    && !self.hand_over(inbound).await
                {
                    // Not taken: ask for it again (same offset) after a pause.
                    if self.pause(1).await {
                        return;
                    }
                    break;
                }
                offset = offset.max(update.id.0 as i32 + 1);
            }
        }
    }

    /// Gives one message to the gateway; false when it could not take it now.
    async fn hand_over(&self, inbound: bub_channel::Inbound) -> bool {
        let id = inbound.message_id.clone();
        match self.inbox.submit(inbound, None).await {
            Err(error) if error.try_again_later() => {
                tracing::warn!(channel = %self.channel, message_id = %id, %error, "gateway cannot take the message yet");
                false
            }
            _ => true,
        }
    }

    fn report(&self, error: &RequestError, failures: u32) {
        match error {
            RequestError::Api(ApiError::TerminatedByOtherGetUpdates) => tracing::error!(
                channel = %self.channel,
                "another process is polling this bot's updates (two gateways with one token?); retrying"
            ),
            RequestError::Api(ApiError::InvalidToken) => {
                tracing::error!(channel = %self.channel, "Telegram rejects the bot token; check channels.{}.token", self.channel)
            }
            // A poll timing out now and then is the network, not news.
            _ if failures < 3 => tracing::debug!(channel = %self.channel, %error, "polling Telegram failed; retrying"),
            _ => tracing::warn!(channel = %self.channel, %error, failures, "polling Telegram keeps failing; retrying"),
        }
    }

    /// Waits before the next poll; true when the channel stopped meanwhile.
    async fn pause(&mut self, failures: u32) -> bool {
        let pause = bub_channel::Backoff::new(FIRST_PAUSE, MAX_PAUSE).delay(failures);
        tokio::select! {
            _ = tokio::time::sleep(pause) => false,
            _ = self.stop.wait_for(|stopped| *stopped) => true,
        }
    }
}
