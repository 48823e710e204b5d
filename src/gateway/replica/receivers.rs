//! Receiving that must run in one process at a time ([`Channel::exclusive_parts`]:
//! a polled Telegram token, Discord's shards) shared among replicas by lease:
//! `receiver:<channel>:<part>`. Each replica holds at most its fair share
//! (the parts over the replicas alive, rounded up), gives back what is above
//! it when replicas join, and takes up parts whose holder died once its
//! lease expired.

use super::Replica;
use crate::db::replicas::Lease;
use bub_channel::{Channel, InboundSink};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// How often a replica looks at the parts: after a holder's death, a part
/// waits its lease time plus at most this.
fn every(replica: &Replica) -> Duration {
    (replica.ttl / 5).clamp(Duration::from_millis(250), Duration::from_secs(2))
}

/// Runs until aborted (the gateway's stop, which stops the channel itself).
pub(super) async fn share(replica: Arc<Replica>, channel: Arc<dyn Channel>, inbox: Arc<dyn InboundSink>) {
    let parts = channel.exclusive_parts();
    let name = channel.name().to_string();
    let mut running: BTreeSet<u32> = BTreeSet::new();
    loop {
        let alive = match replica.tables.alive().await {
            Ok(alive) => u32::try_from(alive).unwrap_or(u32::MAX).max(1),
            Err(error) => {
                tracing::warn!(%error, channel = %name, "cannot count the replicas; keeping the parts held");
                tokio::time::sleep(every(&replica)).await;
                continue;
            }
        };
        let fair = parts.div_ceil(alive);
        while running.len() as u32 > fair {
            let Some(part) = running.pop_last() else { break };
            tracing::info!(channel = %name, part, "giving a receiving part back to spread the parts over the replicas");
            channel.stop_part(part).await;
            if let Err(error) = replica.tables.release(&lease_name(&name, part), &replica.id).await {
                tracing::warn!(%error, channel = %name, part, "cannot release the part; it moves once its lease expires");
            }
        }
        for part in 0..parts {
            if running.len() as u32 >= fair {
                break;
            }
            if running.contains(&part) {
                continue;
            }
            let lease_name = lease_name(&name, part);
            match replica.tables.lease(&lease_name, &replica.id, "").await {
                Ok(Lease::Held { .. }) => match channel.start_part(part, inbox.clone()).await {
                    Ok(()) => {
                        tracing::info!(channel = %name, part, parts, replica = %replica.id, "receiving this part here");
                        running.insert(part);
                    }
                    Err(error) => {
                        tracing::error!(%error, channel = %name, part, "cannot start receiving; another replica may try");
                        let _ = replica.tables.release(&lease_name, &replica.id).await;
                    }
                },
                Ok(Lease::Elsewhere) => {}
                Err(error) => tracing::warn!(%error, channel = %name, part, "cannot lease a receiving part"),
            }
        }
        tokio::time::sleep(every(&replica)).await;
    }
}

fn lease_name(channel: &str, part: u32) -> String {
    format!("receiver:{channel}:{part}")
}
