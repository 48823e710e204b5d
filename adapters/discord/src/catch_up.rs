//! Catching up after a stop or a lost session: Discord does not deliver what
//! was written while a bot had no session (a new one starts from now; only a
//! RESUME gets what was missed), so after each READY the channel asks, for
//! each chat the gateway heard from in the last
//! [`WINDOW_DAYS`] days, for the messages after the newest one it stored, and
//! queues them like live ones. The gateway's deduplication drops any it
//! already has, so a message that arrived live meanwhile is not handled twice.
//!
//! Limits: [`MAX_CHATS`] chats, newest first, and one page of [`PAGE`]
//! messages each (the oldest missed ones); a chat the gateway never heard from
//! before the stop (a first direct message, say) cannot be found this way.

use crate::Arrived;
use bub_channel::InboundSink;
use serenity::builder::GetMessages;
use serenity::http::Http;
use serenity::model::id::{ChannelId, MessageId};
use std::sync::Arc;
use tokio::sync::mpsc;

/// How far back chats count as active.
const WINDOW_DAYS: i64 = 7;
/// Chats caught up at most, the most recently active first.
const MAX_CHATS: usize = 100;
/// Discord's largest page of messages.
const PAGE: u8 = 100;

/// Catches up once for each new session (each READY) announced on `sessions`.
pub(crate) async fn each_session(
    channel: String,
    http: Arc<Http>,
    inbox: Arc<dyn InboundSink>,
    queue: mpsc::UnboundedSender<Arrived>,
    mut sessions: mpsc::UnboundedReceiver<()>,
) {
    while sessions.recv().await.is_some() {
        // READYs that came while catching up need one more round, not one each.
        while sessions.try_recv().is_ok() {}
        run(&channel, &http, &inbox, &queue).await;
    }
}

async fn run(channel: &str, http: &Http, inbox: &Arc<dyn InboundSink>, queue: &mpsc::UnboundedSender<Arrived>) {
    let since = chrono::Utc::now() - chrono::Duration::days(WINDOW_DAYS);
    let chats = inbox.latest_per_chat(channel, since, MAX_CHATS).await;
    let mut caught_up = 0usize;
    for latest in chats {
        // A thread's messages are in the thread's own channel.
        let here = latest.chat.thread_id.as_deref().unwrap_or(&latest.chat.id);
        let (Ok(chat), Ok(after)) = (here.parse::<u64>(), latest.message_id.parse::<u64>()) else { continue };
        if chat == 0 || after == 0 {
            continue;
        }
        let page = GetMessages::new().after(MessageId::new(after)).limit(PAGE);
        match ChannelId::new(chat).messages(http, page).await {
            Ok(missed) => {
                if missed.len() == usize::from(PAGE) {
                    tracing::warn!(%channel, chat, "more than {PAGE} messages were missed in this chat; only the first {PAGE} are caught up");
                }
                caught_up += missed.len();
                for message in missed {
                    let _ = queue.send(Arrived::Created(Box::new(message)));
                }
            }
            Err(error) => tracing::warn!(%channel, chat, %error, "cannot fetch the messages missed in this chat"),
        }
    }
    if caught_up > 0 {
        tracing::info!(%channel, messages = caught_up, "caught up on messages written while the bot had no session");
    }
}
