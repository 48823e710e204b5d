//! "typing…" in a chat while the bot owes it an answer.
//!
//! A hint is shown from the moment an answer is certain — a message that
//! addresses the bot entered its session's batch, before the debounce's quiet
//! spell ends — until the turn's reply goes out. Whoever owes the chat an
//! answer holds a [`Typing`] guard (a session's pending batch, its turn, the
//! turns of other sessions in the same chat); the chat gets ONE hint however
//! many guards there are: the first guard starts renewing it every
//! [`REPEAT`] (Telegram shows the status about five seconds), the last one
//! dropped stops it.
//!
//! Every renewal asks the [`OutboundScheduler::typing`]: a hint is sent only
//! when the channel's budget has spare room now and the chat is not paused by
//! a 429, and is skipped otherwise (tried again after [`RETRY`], never
//! queued), so hints never hold up a reply and never push the bot over its
//! budget. Failures are logged at debug level by the scheduler.

use super::outbound::OutboundScheduler;
use bub_channel::ChatRef;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::AbortHandle;
use tracing::Instrument;

/// How often a shown status is renewed.
const REPEAT: Duration = Duration::from_secs(4);
/// How soon a skipped or failed hint is tried again (no platform call is made
/// while the budget has no spare room, so trying costs nothing).
const RETRY: Duration = Duration::from_secs(1);

/// The chats shown "typing…", by channel and chat.
pub(crate) struct TypingHints {
    scheduler: Arc<OutboundScheduler>,
    shown: Mutex<HashMap<(String, ChatRef), Shown>>,
}

/// One chat's hint: how many guards hold it, and the task renewing it.
struct Shown {
    holders: usize,
    renewing: AbortHandle,
}

impl TypingHints {
    pub(crate) fn new(scheduler: Arc<OutboundScheduler>) -> Arc<TypingHints> {
        Arc::new(TypingHints { scheduler, shown: Mutex::default() })
    }

    /// Shows "typing…" in `chat` on `channel` until the guard is dropped (at
    /// once, unless another guard shows it already). Needs a tokio runtime.
    pub(crate) fn show(self: &Arc<TypingHints>, channel: &str, chat: &ChatRef) -> Typing {
        let key = (channel.to_string(), chat.clone());
        let mut shown = self.shown.lock();
        match shown.get_mut(&key) {
            Some(hint) => hint.holders += 1,
            None => {
                let renewing = renew(self.scheduler.clone(), key.0.clone(), key.1.clone());
                let task = tokio::spawn(renewing.in_current_span());
                shown.insert(key.clone(), Shown { holders: 1, renewing: task.abort_handle() });
            }
        }
        Typing { hints: self.clone(), key }
    }

    fn release(&self, key: &(String, ChatRef)) {
        let mut shown = self.shown.lock();
        if let Some(hint) = shown.get_mut(key) {
            hint.holders -= 1;
            if hint.holders == 0 {
                hint.renewing.abort();
                shown.remove(key);
            }
        }
    }
}

async fn renew(scheduler: Arc<OutboundScheduler>, channel: String, chat: ChatRef) {
    loop {
        let shown = scheduler.typing(&channel, &chat).await;
        tokio::time::sleep(if shown { REPEAT } else { RETRY }).await;
    }
}

/// Keeps "typing…" shown in a chat until dropped.
pub(crate) struct Typing {
    hints: Arc<TypingHints>,
    key: (String, ChatRef),
}

impl Drop for Typing {
    fn drop(&mut self) {
        self.hints.release(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use bub_channel::{Channel, ChannelError, ChatKind, Delivered, InboundSink, Limits, Outbound, SendError};

    /// Counts `typing` calls.
    #[derive(Default)]
    struct Counting(std::sync::atomic::AtomicUsize);

    #[async_trait]
    impl Channel for Counting {
        fn name(&self) -> &str {
            "c"
        }
        fn limits(&self) -> Limits {
            Limits {
                max_message_chars: 100,
                edits: false,
                debounce: false,
                typing: true,
                length_unit: bub_channel::LengthUnit::Utf16,
            }
        }
        async fn start(&self, _inbox: Arc<dyn InboundSink>) -> Result<(), ChannelError> {
            Ok(())
        }
        async fn send(&self, _outbound: &Outbound) -> Result<Delivered, SendError> {
            Ok(Delivered { message_id: "1".into() })
        }
        async fn typing(&self, _chat: &ChatRef) -> Result<(), SendError> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn one_hint_per_chat_however_many_hold_it_until_the_last_lets_go() {
        let channel = Arc::new(Counting::default());
        let scheduler = OutboundScheduler::new();
        scheduler.register(channel.clone(), Default::default());
        let hints = TypingHints::new(scheduler);
        let chat = ChatRef { id: "1".into(), kind: ChatKind::Group, thread_id: None };
        let calls = || channel.0.load(std::sync::atomic::Ordering::SeqCst);

        let batch = hints.show("c", &chat);
        tokio::time::sleep(Duration::from_millis(10)).await;
        let turn = hints.show("c", &chat);
        drop(batch);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(calls(), 1, "the turn took over the batch's hint without a second call");
        tokio::time::sleep(REPEAT).await;
        assert_eq!(calls(), 2, "renewed");
        drop(turn);
        tokio::time::sleep(REPEAT * 3).await;
        assert_eq!(calls(), 2, "stopped with the last guard");
        assert!(hints.shown.lock().is_empty());
    }
}
