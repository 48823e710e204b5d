//! Sharding, as Discord does it: IDENTIFY may carry `shard: [id, total]` (`[0, 1]` without it; an id not
//! below the total is closed with 4010 Invalid shard), any number of connections may be open at once, and
//! each session gets the dispatches of its shard only: a guild's events go to shard
//! `(guild_id >> 22) % total`, direct messages (no `guild_id`) to shard 0. `GET /gateway/bot` recommends
//! [`FakeDiscord::set_shards`] shards (1 by default). Dispatches made before any session of their shard was
//! ready wait for the first one (a convenience: Discord would drop them).
//!
//! For tests about who connects what, the fake records every session that went live with its connection
//! and shard ([`FakeDiscord::shard_sessions`]), which connections hold a session of which shard now
//! ([`FakeDiscord::live_shards`]), and every time a shard's session went live on one connection while
//! another connection still held a session of the same shard ([`FakeDiscord::shard_overlaps`]: a bot
//! that connected a shard twice at once).

use super::{FakeDiscord, State_, lock};
use serde_json::Value;
use std::collections::HashSet;
use std::time::Instant;

/// A session that went live (READY after IDENTIFY, or RESUMED) on a connection.
#[derive(Debug, Clone)]
pub struct ShardSession {
    /// The fake's number of the websocket (1, 2, … in the order they opened).
    pub connection: u64,
    pub shard: u64,
    pub total: u64,
    pub at: Instant,
}

/// Shard `shard` went live on `connection` while `other` still held a session of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardOverlap {
    pub shard: u64,
    pub connection: u64,
    pub other: u64,
}

#[derive(Default)]
pub(super) struct Shards {
    /// What `GET /gateway/bot` recommends; 1 until set.
    recommended: Option<u64>,
    sessions: Vec<ShardSession>,
    overlaps: Vec<ShardOverlap>,
    /// Shards (`[id, total]`) that have had a ready session.
    seen: HashSet<[u64; 2]>,
}

impl Shards {
    pub(super) fn recommended(&self) -> u64 {
        self.recommended.unwrap_or(1)
    }

    /// Whether no session that would get dispatch `d` was ever ready.
    pub(super) fn unseen(&self, d: &Value) -> bool {
        !self.seen.iter().any(|shard| routes_to(*shard, d))
    }
}

impl FakeDiscord {
    /// `GET /gateway/bot` recommends `count` shards from now on.
    pub fn set_shards(&self, count: u64) {
        lock(&self.shared).shards.recommended = Some(count.max(1));
    }

    /// Every session that went live, in order, with its connection and shard.
    pub fn shard_sessions(&self) -> Vec<ShardSession> {
        lock(&self.shared).shards.sessions.clone()
    }

    /// (shard, connection) of every connection holding a ready session now, by shard.
    pub fn live_shards(&self) -> Vec<(u64, u64)> {
        let state = lock(&self.shared);
        let mut live: Vec<(u64, u64)> = state
            .connections
            .iter()
            .filter_map(|(id, connection)| connection.session.as_ref().map(|session| (session.shard[0], *id)))
            .collect();
        live.sort_unstable();
        live
    }

    /// Every time a shard went live on a second connection at once (none, for a bot that behaves).
    pub fn shard_overlaps(&self) -> Vec<ShardOverlap> {
        lock(&self.shared).shards.overlaps.clone()
    }
}

/// The shard of `total` Discord sends dispatch `d` to.
pub fn shard_of(d: &Value, total: u64) -> u64 {
    let guild = d.get("guild_id").and_then(|guild| match guild {
        Value::String(text) => text.parse::<u64>().ok(),
        other => other.as_u64(),
    });
    guild.map_or(0, |guild| (guild >> 22) % total.max(1))
}

/// Whether a session of `shard` (`[id, total]`) gets dispatch `d`.
pub(super) fn routes_to(shard: [u64; 2], d: &Value) -> bool {
    shard_of(d, shard[1]) == shard[0]
}

/// The `[id, total]` an IDENTIFY asks for (`[0, 1]` without `shard`), or `None` when Discord would close
/// the connection with 4010 (not two numbers, a total of 0, an id not below the total).
pub(super) fn requested(d: &Value) -> Option<[u64; 2]> {
    let Some(shard) = d.get("shard").filter(|shard| !shard.is_null()) else {
        return Some([0, 1]);
    };
    let pair = shard.as_array().filter(|pair| pair.len() == 2)?;
    let (id, total) = (pair[0].as_u64()?, pair[1].as_u64()?);
    (id < total).then_some([id, total])
}

/// Records that a session of `shard` goes live on connection `id` (before it is set on it), and an overlap
/// with any other connection that holds a session of the same shard.
pub(super) fn going_live(state: &mut State_, id: u64, shard: [u64; 2]) {
    let others: Vec<u64> = state
        .connections
        .iter()
        .filter(|(other, connection)| {
            **other != id && connection.session.as_ref().is_some_and(|session| session.shard == shard)
        })
        .map(|(other, _)| *other)
        .collect();
    for other in others {
        state.shards.overlaps.push(ShardOverlap { shard: shard[0], connection: id, other });
    }
    state.shards.seen.insert(shard);
    state.shards.sessions.push(ShardSession { connection: id, shard: shard[0], total: shard[1], at: Instant::now() });
}
