//! "typing…" in the chat while a turn works on its answer.
//!
//! Telegram shows the status for about five seconds, so it is sent again
//! every [`REPEAT`] until the turn ends (the guard is dropped). It is a hint,
//! not a message: failures are logged at debug level and never retried
//! early, and a platform's "slow down" only delays the next one.

use bub_channel::{Channel, ChatRef, SendError};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::AbortHandle;

/// How often the status is renewed.
const REPEAT: Duration = Duration::from_secs(4);

/// Shows "typing…" in a chat until dropped.
pub(crate) struct Typing(AbortHandle);

impl Typing {
    pub(crate) fn start(channel: Arc<dyn Channel>, chat: ChatRef) -> Typing {
        let task = tokio::spawn(async move {
            loop {
                let pause = match channel.typing(&chat).await {
                    Ok(()) => REPEAT,
                    Err(SendError::RateLimited { retry_after, .. }) => retry_after.max(REPEAT),
                    Err(error) => {
                        tracing::debug!(channel = %channel.name(), chat = %chat.id, %error, "typing status not shown");
                        REPEAT
                    }
                };
                tokio::time::sleep(pause).await;
            }
        });
        Typing(task.abort_handle())
    }
}

impl Drop for Typing {
    fn drop(&mut self) {
        self.0.abort();
    }
}
