//! Outcomes told to waiting callers before their store commits.
//!
//! A turn's reply is on the tape before its outcome is stored, so the gateway
//! tells waiting callers first (see `turn::conclude`). In that moment a
//! repeat of the message must get the outcome, not "still running", and a
//! stop must wait until the outcomes are stored: this map serves both.

use bub_channel::{Inbound, Outcome};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::Duration;

/// Told outcomes by channel and message id, until stored.
#[derive(Default)]
pub(crate) struct ToldOutcomes {
    told: Mutex<HashMap<(String, String), Outcome>>,
    /// Woken when the last told outcome is stored.
    settled: tokio::sync::Notify,
}

fn key(inbound: &Inbound) -> (String, String) {
    (inbound.channel.clone(), inbound.message_id.clone())
}

impl ToldOutcomes {
    /// `outcome` is being told to the callers of `messages`.
    pub(crate) fn insert<'a>(&self, messages: impl IntoIterator<Item = &'a Inbound>, outcome: &Outcome) {
        let mut told = self.told.lock();
        for inbound in messages {
            told.insert(key(inbound), outcome.clone());
        }
    }

    /// The outcomes of `messages` are stored.
    pub(crate) fn remove<'a>(&self, messages: impl IntoIterator<Item = &'a Inbound>) {
        let mut told = self.told.lock();
        for inbound in messages {
            told.remove(&key(inbound));
        }
        if told.is_empty() {
            self.settled.notify_waiters();
        }
    }

    /// The outcome told for a message not stored yet.
    pub(crate) fn get(&self, channel: &str, message_id: &str) -> Option<Outcome> {
        let told = self.told.lock();
        told.get(&(channel.to_string(), message_id.to_string())).cloned()
    }

    /// Returns once every outcome told so far is stored (or after `limit`):
    /// a stop waits for them, so a caller that has its reply finds its
    /// message done after a restart.
    pub(crate) async fn settled(&self, limit: Duration) {
        let _ = tokio::time::timeout(limit, async {
            loop {
                let notified = self.settled.notified();
                if self.told.lock().is_empty() {
                    return;
                }
                notified.await;
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bub_channel::{Addressing, ChatKind, ChatRef, Delivery, OutcomeStatus, SenderRef};

    fn inbound(id: &str) -> Inbound {
        Inbound {
            channel: "hooks".into(),
            chat: ChatRef { id: "c1".into(), kind: ChatKind::Direct, thread_id: None },
            sender: SenderRef { id: "u1".into(), display: None, is_bot: false },
            message_id: id.into(),
            text: "hi".into(),
            attachments: Vec::new(),
            addressing: Addressing::default(),
            from_self: false,
            forwarded: false,
            delivery: Delivery::Channel,
            received_at: chrono::Utc::now(),
            edit: None,
            trace: None,
        }
    }

    /// A told outcome is found until stored, and a stop waiting for it
    /// returns as soon as it is.
    #[tokio::test]
    async fn told_outcomes_are_found_until_stored_and_a_stop_waits_for_them() {
        let told = std::sync::Arc::new(ToldOutcomes::default());
        let outcome = Outcome { status: OutcomeStatus::Replied, text: "hello".into(), session: "s".into() };
        let m1 = inbound("m1");
        told.insert([&m1], &outcome);
        assert_eq!(told.get("hooks", "m1"), Some(outcome));
        let waiting = tokio::spawn({
            let told = told.clone();
            async move { told.settled(Duration::from_secs(30)).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "the stop did not wait");
        told.remove([&m1]);
        tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("the stop still waits").unwrap();
        assert_eq!(told.get("hooks", "m1"), None);
    }
}
