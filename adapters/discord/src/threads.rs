//! Which channels are threads, and of which parent. A message does not say
//! (its `channel_id` is the thread's own), so the channel is asked once
//! (`GET /channels/{id}`: a thread has a thread type and `parent_id`) and
//! the answer remembered. Direct messages are never asked about.
//!
//! When Discord cannot answer, the message is read as written in a channel
//! of its own (as before threads were folded: its own chat, which its own
//! policy and approval cover, closed by default), and the channel is asked
//! again with its next message.

use serenity::http::Http;
use serenity::model::channel::ChannelType;
use serenity::model::id::{ChannelId, GuildId};
use std::collections::HashMap;
use std::sync::Arc;

/// Channels remembered before the memory starts over.
const REMEMBERED: usize = 10_000;

pub(crate) struct Threads {
    http: Arc<Http>,
    /// Channel id → its parent when it is a thread, `None` when it is not one.
    known: HashMap<u64, Option<u64>>,
}

impl Threads {
    pub(crate) fn new(http: Arc<Http>) -> Threads {
        Threads { http, known: HashMap::new() }
    }

    /// The parent channel of `channel` (of `guild`), when it is a thread.
    pub(crate) async fn parent(&mut self, channel: ChannelId, guild: Option<GuildId>) -> Option<u64> {
        guild?;
        if let Some(known) = self.known.get(&channel.get()) {
            return *known;
        }
        let parent = match self.http.get_channel(channel).await {
            Ok(found) => found.guild().and_then(|found| match found.kind {
                ChannelType::PublicThread | ChannelType::PrivateThread | ChannelType::NewsThread => {
                    found.parent_id.map(ChannelId::get)
                }
                _ => None,
            }),
            Err(error) => {
                tracing::warn!(channel = channel.get(), %error, "cannot ask Discord whether a channel is a thread; its message is read as in a channel of its own");
                return None;
            }
        };
        if self.known.len() >= REMEMBERED {
            self.known.clear();
        }
        self.known.insert(channel.get(), parent);
        parent
    }
}
