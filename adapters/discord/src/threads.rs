//! Which channels are threads, and of which parent, and which server each
//! channel is in. A message does not say (its `channel_id` is the thread's
//! own), so the channel is asked once (`GET /channels/{id}`: a thread has a
//! thread type and `parent_id`; a guild channel its `guild_id`) and the
//! answer remembered. Direct messages are never asked about.
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

/// What Discord said of a channel.
#[derive(Debug, Clone, Copy)]
struct Known {
    /// Its parent channel, when it is a thread.
    parent: Option<u64>,
    /// Its server; `None`: a direct message channel.
    guild: Option<u64>,
}

pub(crate) struct Threads {
    http: Arc<Http>,
    known: HashMap<u64, Known>,
}

impl Threads {
    pub(crate) fn new(http: Arc<Http>) -> Threads {
        Threads { http, known: HashMap::new() }
    }

    /// The parent channel of `channel` (of `guild`), when it is a thread.
    pub(crate) async fn parent(&mut self, channel: ChannelId, guild: Option<GuildId>) -> Option<u64> {
        guild?;
        match self.look_up(channel).await {
            Ok(known) => known.parent,
            Err(error) => {
                tracing::warn!(channel = channel.get(), %error, "cannot ask Discord whether a channel is a thread; its message is read as in a channel of its own");
                None
            }
        }
    }

    /// The server `channel` is in (`None`: a direct message channel), or
    /// why Discord cannot say.
    pub(crate) async fn guild(&mut self, channel: ChannelId) -> Result<Option<u64>, serenity::Error> {
        self.look_up(channel).await.map(|known| known.guild)
    }

    async fn look_up(&mut self, channel: ChannelId) -> Result<Known, serenity::Error> {
        if let Some(known) = self.known.get(&channel.get()) {
            return Ok(*known);
        }
        let known = match self.http.get_channel(channel).await?.guild() {
            Some(found) => Known {
                parent: match found.kind {
                    ChannelType::PublicThread | ChannelType::PrivateThread | ChannelType::NewsThread => {
                        found.parent_id.map(ChannelId::get)
                    }
                    _ => None,
                },
                guild: Some(found.guild_id.get()),
            },
            None => Known { parent: None, guild: None },
        };
        if self.known.len() >= REMEMBERED {
            self.known.clear();
        }
        self.known.insert(channel.get(), known);
        Ok(known)
    }
}
