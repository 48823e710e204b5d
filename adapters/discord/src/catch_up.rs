//! Catching up after a stop or a lost session: Discord does not deliver what
//! was written while a bot had no session (a new one starts from now; only a
//! RESUME gets what was missed), so after each READY the channel asks, for
//! each chat the gateway heard from in the last
//! [`WINDOW_DAYS`] days, for the messages after the newest one it stored, and
//! queues them like live ones. The gateway's deduplication drops any it
//! already has, so a message that arrived live meanwhile is not handled twice.
//!
//! Each shard catches up its own chats after its own READY: direct chats
//! are shard 0's, a guild's channels the guild's shard's (which server a
//! channel is in is asked of Discord once, see `threads`). A chat whose
//! server Discord cannot name is caught up by every shard that asks: the
//! gateway drops the copies.
//!
//! Limits: [`MAX_CHATS`] chats, newest first, and one page of [`PAGE`]
//! messages each (the oldest missed ones); a chat the gateway never heard from
//! before the stop (a first direct message, say) cannot be found this way.

use crate::Arrived;
use crate::shards::ShardRef;
use crate::threads::Threads;
use bub_channel::{ChatKind, ChatRef, InboundSink};
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

/// Catches up once for each new session (each READY) of `shard` announced on `sessions`.
pub(crate) async fn each_session(
    channel: String,
    shard: ShardRef,
    http: Arc<Http>,
    inbox: Arc<dyn InboundSink>,
    queue: mpsc::UnboundedSender<Arrived>,
    mut sessions: mpsc::UnboundedReceiver<()>,
) {
    let mut threads = Threads::new(http.clone());
    while sessions.recv().await.is_some() {
        // READYs that came while catching up need one more round, not one each.
        while sessions.try_recv().is_ok() {}
        run(&channel, shard, &http, &mut threads, &inbox, &queue).await;
    }
}

async fn run(
    channel: &str,
    shard: ShardRef,
    http: &Http,
    threads: &mut Threads,
    inbox: &Arc<dyn InboundSink>,
    queue: &mpsc::UnboundedSender<Arrived>,
) {
    let since = chrono::Utc::now() - chrono::Duration::days(WINDOW_DAYS);
    let chats = inbox.latest_per_chat(channel, since, MAX_CHATS).await;
    let mut caught_up = 0usize;
    for latest in chats {
        if !is_mine(shard, threads, &latest.chat).await {
            continue;
        }
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
        tracing::info!(%channel, shard = shard.id, messages = caught_up, "caught up on messages written while the bot had no session");
    }
}

/// Whether `chat`'s messages come to `shard` (see the module doc).
async fn is_mine(shard: ShardRef, threads: &mut Threads, chat: &ChatRef) -> bool {
    if shard.total == 1 {
        return true;
    }
    if chat.kind == ChatKind::Direct {
        return shard.receives(None);
    }
    // A thread is in its parent's server: `chat.id` is the parent.
    let Ok(id) = chat.id.parse::<u64>() else { return false };
    if id == 0 {
        return false;
    }
    match threads.guild(ChannelId::new(id)).await {
        Ok(guild) => shard.receives(guild),
        Err(error) => {
            tracing::debug!(chat = id, %error, "cannot ask Discord which server a chat is in; catching it up here too");
            true
        }
    }
}
