//! Receiving that must run in one process at a time ([`Channel::exclusive_parts`]:
//! a polled Telegram token, Discord's shards) shared among replicas by lease:
//! `receiver:<channel>:<part>`. Each replica holds at most its fair share
//! (the parts over the replicas alive, rounded up), gives back what is above
//! it when replicas join, and takes up parts whose holder died once its
//! lease expired.
//!
//! A part runs in one replica at a time (a second poller of a Telegram
//! token ends the first one's polls with 409):
//! - it starts only under its lease, and stops before the lease is given
//!   back (above the fair share, or at the gateway's stop, which gives the
//!   leases back as soon as the channels stopped, not after the turns);
//! - a replica that cannot be sure the database still counts it alive (no
//!   heartbeat got through for nearly the lease time: a partition, a stalled
//!   database) stops its parts before the others may take them, and starts
//!   them again once a heartbeat gets through. A round's database calls end
//!   by that moment too.
//!
//! A process frozen past its lease (SIGSTOP, a paused VM) may still receive
//! once when it wakes, before it finds out: only the platform could refuse that.

use super::Replica;
use crate::db::replicas::Lease;
use bub_channel::{Channel, InboundSink};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// How often a replica looks at the parts: after a holder's death, a part
/// waits its lease time plus at most this. Also how long before its lease
/// could be taken a replica that lost touch with the database stops.
fn every(replica: &Replica) -> Duration {
    (replica.ttl / 5).clamp(Duration::from_millis(250), Duration::from_secs(2))
}

/// Runs until aborted (the gateway's stop, which stops the channel itself).
pub(super) async fn share(replica: Arc<Replica>, channel: Arc<dyn Channel>, inbox: Arc<dyn InboundSink>) {
    let mut running: BTreeSet<u32> = BTreeSet::new();
    let margin = every(&replica);
    // Until when this replica's parts are surely its own (see the module's doc).
    let surely_ours_until = || {
        let until = replica.alive_until();
        until.checked_sub(margin).unwrap_or(until)
    };
    loop {
        // The round is cut when the parts stop being surely this replica's,
        // a moment each heartbeat that gets through moves on: a round may be
        // slow (a Discord shard waits out the session-start limit) as long
        // as the database keeps counting this replica alive.
        let in_time = {
            let round = round(&replica, channel.as_ref(), &inbox, &mut running);
            tokio::pin!(round);
            loop {
                let safe_until = surely_ours_until();
                if tokio::time::Instant::now() >= safe_until {
                    break false;
                }
                tokio::select! {
                    () = &mut round => break true,
                    () = tokio::time::sleep_until(safe_until) => {}
                }
            }
        };
        if !in_time && !running.is_empty() {
            tracing::warn!(
                channel = %channel.name(),
                replica = %replica.id,
                "no heartbeat reached the database for nearly lease_seconds: this replica stops receiving \
                 before another may take its parts over, and starts again once a heartbeat gets through"
            );
            for part in std::mem::take(&mut running) {
                channel.stop_part(part).await;
                replica.note_receiving(&lease_name(channel.name(), part), false);
            }
        }
        // The next look; sooner if that is when the parts running here stop being surely this replica's.
        let mut next = tokio::time::Instant::now() + margin;
        if !running.is_empty() {
            next = next.min(surely_ours_until().max(tokio::time::Instant::now()));
        }
        tokio::time::sleep_until(next).await;
    }
}

/// One look at the parts: gives back those above the fair share, takes up free ones up to it.
/// A part is in `running` from the moment its lease is held until it is stopped.
async fn round(replica: &Replica, channel: &dyn Channel, inbox: &Arc<dyn InboundSink>, running: &mut BTreeSet<u32>) {
    let (name, parts) = (channel.name(), channel.exclusive_parts());
    let alive = match replica.tables.alive().await {
        Ok(alive) => u32::try_from(alive).unwrap_or(u32::MAX).max(1),
        Err(error) => {
            tracing::warn!(%error, channel = %name, "cannot count the replicas; keeping the parts held");
            return;
        }
    };
    let fair = parts.div_ceil(alive);
    while running.len() as u32 > fair {
        let Some(&part) = running.last() else { break };
        tracing::info!(channel = %name, part, "giving a receiving part back to spread the parts over the replicas");
        channel.stop_part(part).await;
        running.remove(&part);
        let lease = lease_name(name, part);
        replica.note_receiving(&lease, false);
        if let Err(error) = replica.tables.release(&lease, &replica.id).await {
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
        let lease = lease_name(name, part);
        match replica.tables.lease(&lease, &replica.id, "").await {
            Ok(Lease::Held { .. }) => {
                running.insert(part);
                replica.note_receiving(&lease, true);
                match channel.start_part(part, inbox.clone()).await {
                    Ok(()) => {
                        tracing::info!(channel = %name, part, parts, replica = %replica.id, "receiving this part here")
                    }
                    Err(error) => {
                        tracing::error!(%error, channel = %name, part, "cannot start receiving; another replica may try");
                        running.remove(&part);
                        replica.note_receiving(&lease, false);
                        let _ = replica.tables.release(&lease, &replica.id).await;
                    }
                }
            }
            Ok(Lease::Elsewhere) => {}
            Err(error) => tracing::warn!(%error, channel = %name, part, "cannot lease a receiving part"),
        }
    }
}

/// Gives back the leases of every part running here: called once the
/// channels stopped, so nothing here receives any more.
pub(super) async fn release_all(replica: &Replica) {
    let leases = std::mem::take(&mut *replica.receiving.lock());
    for lease in leases {
        if let Err(error) = replica.tables.release(&lease, &replica.id).await {
            tracing::warn!(%error, lease, "cannot give a receiving part back; it moves once its lease expires");
        }
    }
}

impl Replica {
    /// Records that the part under `lease` runs here (or no longer does).
    fn note_receiving(&self, lease: &str, running: bool) {
        let mut receiving = self.receiving.lock();
        if running {
            receiving.insert(lease.to_string());
        } else {
            receiving.remove(lease);
        }
    }
}

fn lease_name(channel: &str, part: u32) -> String {
    format!("receiver:{channel}:{part}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::DbError;
    use crate::db::gateway::OutboxRow;
    use crate::db::replicas::{ClaimedRow, ReplicaTables};
    use bub_channel::{ChannelError, Delivered, Inbound, LengthUnit, Limits, Outbound, ReplySink, SendError};
    use bub_channel::{SubmitError, Submitted};
    use parking_lot::Mutex;
    use std::collections::HashMap;

    /// Leases in memory among `alive` replicas, all of them alive.
    #[derive(Default)]
    struct Leases {
        alive: Mutex<i64>,
        held: Mutex<HashMap<String, String>>,
    }

    #[async_trait::async_trait]
    impl ReplicaTables for Leases {
        async fn register(&self, _: &str, _: &str, _: Duration, _: Option<&str>) -> Result<(), DbError> {
            Ok(())
        }
        async fn heartbeat(&self, _: &str, _: Duration) -> Result<bool, DbError> {
            Ok(true)
        }
        async fn retire(&self, _: &str) -> Result<(), DbError> {
            Ok(())
        }
        async fn lease(&self, name: &str, holder: &str, _: &str) -> Result<Lease, DbError> {
            let mut held = self.held.lock();
            match held.get(name) {
                Some(other) if other != holder => Ok(Lease::Elsewhere),
                _ => {
                    held.insert(name.to_string(), holder.to_string());
                    Ok(Lease::Held { moved_from: None })
                }
            }
        }
        async fn alive(&self) -> Result<i64, DbError> {
            Ok(*self.alive.lock())
        }
        async fn release(&self, name: &str, holder: &str) -> Result<(), DbError> {
            let mut held = self.held.lock();
            if held.get(name).is_some_and(|h| h == holder) {
                held.remove(name);
            }
            Ok(())
        }
        async fn holds(&self, name: &str, holder: &str) -> Result<bool, DbError> {
            Ok(self.held.lock().get(name).is_some_and(|h| h == holder))
        }
        async fn claim_session(&self, _: &str, _: &str, _: &[i64]) -> Result<Vec<ClaimedRow>, DbError> {
            Ok(Vec::new())
        }
        async fn wake_holders(&self) -> Result<(), DbError> {
            Ok(())
        }
        async fn watch_work(&self, _: Arc<tokio::sync::Notify>) -> Result<(), DbError> {
            Ok(())
        }
        async fn unclaimed_sessions(&self, _: &str, _: &[i64], _: i64) -> Result<Vec<String>, DbError> {
            Ok(Vec::new())
        }
        async fn claim_replies(&self, _: &str, _: i64) -> Result<Vec<OutboxRow>, DbError> {
            Ok(Vec::new())
        }
        async fn outcomes(&self, _: &[(String, String)]) -> Result<Vec<((String, String), String)>, DbError> {
            Ok(Vec::new())
        }
    }

    /// A channel of `parts` exclusive parts that records which run here.
    struct Parts {
        parts: u32,
        running: Mutex<BTreeSet<u32>>,
    }

    impl Parts {
        fn new(parts: u32) -> Arc<Parts> {
            Arc::new(Parts { parts, running: Mutex::default() })
        }
        fn running(&self) -> Vec<u32> {
            self.running.lock().iter().copied().collect()
        }
    }

    #[async_trait::async_trait]
    impl Channel for Parts {
        fn name(&self) -> &str {
            "tg"
        }
        fn limits(&self) -> Limits {
            Limits {
                max_message_chars: 100,
                length_unit: LengthUnit::Utf16,
                edits: false,
                debounce: false,
                typing: false,
            }
        }
        async fn start(&self, _: Arc<dyn InboundSink>) -> Result<(), ChannelError> {
            Ok(())
        }
        async fn send(&self, _: &Outbound) -> Result<Delivered, SendError> {
            Err(SendError::Permanent("receives only".into()))
        }
        fn exclusive_parts(&self) -> u32 {
            self.parts
        }
        async fn start_part(&self, part: u32, _: Arc<dyn InboundSink>) -> Result<(), ChannelError> {
            assert!(self.running.lock().insert(part), "part {part} started twice");
            Ok(())
        }
        async fn stop_part(&self, part: u32) {
            self.running.lock().remove(&part);
        }
    }

    struct Nowhere;

    #[async_trait::async_trait]
    impl InboundSink for Nowhere {
        async fn submit(&self, _: Inbound, _: Option<ReplySink>) -> Result<Submitted, SubmitError> {
            Ok(Submitted::Accepted)
        }
    }

    async fn replica(leases: &Arc<Leases>, home: &tempfile::TempDir, ttl: Duration) -> Replica {
        let home = crate::home::BubHome::at(home.path());
        Replica::register(leases.clone(), &home, ttl).await.unwrap()
    }

    #[tokio::test]
    async fn of_one_part_two_replicas_run_it_once() {
        let leases = Arc::new(Leases { alive: Mutex::new(2), ..Leases::default() });
        let homes = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        let inbox: Arc<dyn InboundSink> = Arc::new(Nowhere);
        let mut ran = Vec::new();
        for home in &homes {
            let (replica, channel) = (replica(&leases, home, Duration::from_secs(10)).await, Parts::new(1));
            round(&replica, channel.as_ref(), &inbox, &mut BTreeSet::new()).await;
            ran.push(channel.running());
        }
        assert_eq!(ran, [vec![0], vec![]], "the first to look runs it, the second finds it leased");
    }

    #[tokio::test]
    async fn a_replica_gives_back_the_parts_above_its_fair_share_when_another_joins() {
        let leases = Arc::new(Leases { alive: Mutex::new(1), ..Leases::default() });
        let home = tempfile::tempdir().unwrap();
        let (replica, channel) = (replica(&leases, &home, Duration::from_secs(10)).await, Parts::new(3));
        let inbox: Arc<dyn InboundSink> = Arc::new(Nowhere);
        let mut running = BTreeSet::new();
        round(&replica, channel.as_ref(), &inbox, &mut running).await;
        assert_eq!(channel.running(), [0, 1, 2], "alone, it runs every part");

        *leases.alive.lock() = 2;
        round(&replica, channel.as_ref(), &inbox, &mut running).await;
        assert_eq!(channel.running(), [0, 1], "two replicas: two parts of three (rounded up) each at most");
        assert_eq!(leases.held.lock().get("receiver:tg:2"), None, "the part given back is free");

        release_all(&replica).await;
        assert!(leases.held.lock().is_empty(), "at the stop every part goes back");
    }

    #[tokio::test(start_paused = true)]
    async fn a_replica_whose_heartbeat_does_not_get_through_stops_its_parts_before_its_lease_may_be_taken() {
        let ttl = Duration::from_secs(10);
        let leases = Arc::new(Leases { alive: Mutex::new(1), ..Leases::default() });
        let home = tempfile::tempdir().unwrap();
        let replica = Arc::new(replica(&leases, &home, ttl).await);
        let lease_until = replica.alive_until();
        let channel = Parts::new(1);
        // No heartbeat runs: the registration is the last sign of life the database got.
        let sharing = tokio::spawn(share(replica.clone(), channel.clone(), Arc::new(Nowhere)));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(channel.running(), [0]);

        tokio::time::sleep_until(lease_until - every(&replica) / 2).await;
        assert_eq!(channel.running(), Vec::<u32>::new(), "stopped a margin before the lease may be taken");

        replica.alive_at(tokio::time::Instant::now());
        tokio::time::sleep(every(&replica) + Duration::from_millis(10)).await;
        assert_eq!(channel.running(), [0], "a heartbeat got through: the part runs again");
        sharing.abort();
    }
}
