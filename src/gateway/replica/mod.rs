//! Several gateway replicas on one PostgreSQL database.
//!
//! Every replica receives (a load balancer spreads webhook requests; a
//! Telegram token is polled by one replica at a time), and every message is
//! stored in the shared inbox first, as on one process. What changes is who
//! runs it:
//!
//! - **A session is leased to one replica** (`session:<id>` in
//!   `gateway_leases`, valid while its holder's heartbeat is: see
//!   `db::replicas`), so a chat's turns run one at a time, in the order
//!   its messages were stored, wherever they arrived. Leases stick while the
//!   holder lives (its workspace is there).
//! - **The holder claims the rows**: a replica that receives a message for
//!   a session it holds (or can take) claims that session's unclaimed rows,
//!   oldest first, under a per-session lock, and hands them to its session
//!   worker as a single process would. A message for a session held
//!   elsewhere stays unclaimed, and the holders are woken (`NOTIFY`): the
//!   holder's sweep (`upkeep`) claims it.
//!   Claims are `FOR UPDATE SKIP LOCKED`.
//! - **A caller waiting on the request** (`?mode=sync`, `sse`) whose turn
//!   runs on another replica is answered from the stored outcome
//!   (`waiters`).
//! - **A replica that dies** stops heartbeating; `lease_seconds` later its
//!   leases are void and its claimed rows orphaned: the next sweep of any
//!   replica leases the session, finds on the tape the turns that landed
//!   (their replies are rebuilt, as after a restart) and runs the rest.
//!   Pending replies it stored are claimed and delivered by another. A
//!   turn's outcome is stored only while its rows are still claimed by the
//!   replica that ran it, so a replica taken for dead that wakes up cannot
//!   answer twice; it finds it was fenced (another took its work over) and
//!   stops at once (no grace for its turns: another may run them already),
//!   and a turn of it that finds its session gone leaves it to the new
//!   holder. Its tape appends are refused once its registration expired,
//!   so a turn that wakes after the takeover adds nothing (only one whose
//!   merge is in flight at the very moment of expiry can land beside the
//!   new holder's run; outcome and reply are still stored once).
//! - **The database failing for a moment** (a restart, a failover, dropped
//!   connections) costs no registration when it is shorter than the lease
//!   less a heartbeat period (six per lease; a heartbeat that hangs in the
//!   pool's reconnect is tried again beside it), and a longer one stops
//!   nobody unless another replica took work over meanwhile. A turn cut
//!   short by it leaves nothing on the tape and runs again once the tape
//!   says it did not land; its outcome and its deliveries' records are
//!   written patiently. Either way the session's next turn waits, so turns
//!   stay in order.
//! - **Receiving that one process at a time may do** (a polled Telegram
//!   token, Discord shards) is leased too, `receiver:<channel>:<part>`, at
//!   most a fair share per replica; a replica gives its parts up as soon as
//!   its channels stop, and stops them itself when it cannot be sure it is
//!   still counted alive (`receivers`).
//! - **Workspaces**: each replica keeps session workspaces in its home's
//!   `workspaces/`. Mounted from one shared volume on every replica, a
//!   session that moves finds its files; otherwise the new replica starts a
//!   fresh workspace and says so in the chat (each volume has an id, kept
//!   in `workspaces/.bub-volume`, recorded with the lease).

mod receivers;
mod upkeep;
mod waiters;

use super::store::Unfinished;
use super::{Inner, Message, recovery, session};
use crate::db::replicas::{Lease, ReplicaTables};
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// Session locks: a stripe per hash, so a replica never claims one
/// session's rows twice at once, without a map that grows with sessions.
const STRIPES: usize = 64;

/// This process's part among the replicas.
pub(crate) struct Replica {
    tables: Arc<dyn ReplicaTables>,
    /// This incarnation (new at every start).
    pub id: String,
    /// The id of the volume that holds this replica's workspaces.
    volume: String,
    pub ttl: Duration,
    /// Rows this replica claimed and has not finished: its sweep leaves them.
    in_hand: Mutex<HashSet<i64>>,
    /// Messages received here whose rows are not claimed yet (their sinks,
    /// the policy they were admitted under).
    arrived: Mutex<HashMap<i64, Message>>,
    /// Sessions whose lease this incarnation holds: it cannot lose one
    /// while alive, so a hit needs no round trip.
    held: Mutex<HashSet<String>>,
    locks: Vec<tokio::sync::Mutex<()>>,
    waiters: waiters::Waiters,
    /// Set when this incarnation was fenced (another replica took its work over): the gateway stops.
    pub fenced: tokio::sync::watch::Sender<bool>,
    /// Until when the database surely counts this incarnation alive: when
    /// its last heartbeat that got through (or its registration) was sent,
    /// plus the lease time. Past it, others may take its leases.
    alive_until: Mutex<tokio::time::Instant>,
    /// The receiving parts running here, by lease name (see `receivers`).
    receiving: Mutex<BTreeSet<String>>,
    /// The sweep and the receiving shares: stopped first at a stop.
    claiming: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Runs until the very end of a stop, so the leases hold while turns finish.
    heartbeat: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Replica {
    /// Registers a new incarnation of the replica whose home is `home`
    /// (its previous incarnation, if the home names one, is dead now).
    pub(crate) async fn register(
        tables: Arc<dyn ReplicaTables>,
        home: &crate::home::BubHome,
        ttl: Duration,
    ) -> Result<Replica, String> {
        let id = format!("{}-{}", hostname(), uuid::Uuid::new_v4().simple());
        let marker = home.root().join("replica");
        let previous = std::fs::read_to_string(&marker).ok().map(|text| text.trim().to_string());
        let host = format!("{} pid {}", hostname(), std::process::id());
        let asked = tokio::time::Instant::now();
        tables
            .register(&id, &host, ttl, previous.as_deref().filter(|p| !p.is_empty()))
            .await
            .map_err(|error| format!("cannot register this replica: {error}"))?;
        if let Err(error) = std::fs::write(&marker, &id) {
            tracing::warn!(%error, path = %marker.display(), "cannot remember this replica's id; a restart waits for its leases to expire");
        }
        let volume = volume_id(&home.workspaces_dir())?;
        tracing::info!(replica = %id, %volume, ttl_seconds = ttl.as_secs(), "registered as a replica");
        Ok(Replica {
            tables,
            id,
            volume,
            ttl,
            in_hand: Mutex::default(),
            arrived: Mutex::default(),
            held: Mutex::default(),
            locks: (0..STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
            waiters: waiters::Waiters::default(),
            fenced: tokio::sync::watch::channel(false).0,
            alive_until: Mutex::new(asked + ttl),
            receiving: Mutex::default(),
            claiming: Mutex::default(),
            heartbeat: Mutex::default(),
        })
    }

    fn lock(&self, session: &str) -> &tokio::sync::Mutex<()> {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        session.hash(&mut hasher);
        &self.locks[(hasher.finish() as usize) % STRIPES]
    }

    /// A message stored here: run here if its session is (or can be) leased
    /// here, else left to the session's holder, its caller answered from the
    /// stored outcome.
    pub(crate) async fn arrived(&self, inner: &Arc<Inner>, message: Message) {
        let session = message.session.clone();
        let _claiming = self.lock(&session).lock().await;
        let (seq, key) = (message.seq, (message.inbound.channel.clone(), message.inbound.message_id.clone()));
        match self.lease(inner, &session, Some(&message)).await {
            Ok(true) => {
                self.arrived.lock().insert(seq, message);
                self.claim_and_dispatch(inner, &session).await;
            }
            Ok(false) => {
                if let Some(sink) = message.sink {
                    self.waiters.wait(key, sink);
                }
                if let Err(error) = self.tables.wake_holders().await {
                    tracing::warn!(%error, session, "cannot wake the session's holder; its sweep finds the message");
                }
            }
            Err(error) => {
                // Stored: whoever can lease the session claims it at its next sweep.
                tracing::warn!(%error, session, "cannot lease the session; its message waits for a sweep");
                if let Some(sink) = message.sink {
                    self.waiters.wait(key, sink);
                }
            }
        }
        // Not claimed by this call (another sweep holds it, say): its caller
        // hears from the outcome.
        if let Some(message) = self.arrived.lock().remove(&seq)
            && let Some(sink) = message.sink
        {
            self.waiters.wait((message.inbound.channel, message.inbound.message_id), sink);
        }
    }

    /// Whether this replica holds `session`'s lease (taking it if free).
    /// A session taken from a replica on another volume is told that its
    /// workspace starts fresh here (`message`: where to say it).
    async fn lease(&self, inner: &Arc<Inner>, session: &str, message: Option<&Message>) -> Result<bool, String> {
        if self.held.lock().contains(session) {
            return Ok(true);
        }
        let name = format!("session:{session}");
        match self.tables.lease(&name, &self.id, &self.volume).await.map_err(|e| e.to_string())? {
            Lease::Held { moved_from } => {
                self.held.lock().insert(session.to_string());
                if let Some(volume) = moved_from {
                    tracing::warn!(session, from_volume = %volume, "took over a session whose workspace was on another volume");
                    if let Some(message) = message {
                        upkeep::tell_workspace_moved(inner, message).await;
                    }
                }
                Ok(true)
            }
            Lease::Elsewhere => Ok(false),
        }
    }

    /// Claims `session`'s rows nobody runs and hands them on, oldest first:
    /// those a dead replica had claimed (or this one, whose work on them
    /// was lost) go through the restart's check (their turn may be on the
    /// tape), the others to the session's worker. When the tape cannot be
    /// read for that check, nothing is handed on (a later row must not run
    /// before an earlier one): the rows are let go for the next sweep.
    /// Called with the session's lock held.
    async fn claim_and_dispatch(&self, inner: &Arc<Inner>, session: &str) {
        let in_hand: Vec<i64> = self.in_hand.lock().iter().copied().collect();
        let claimed = match self.tables.claim_session(session, &self.id, &in_hand).await {
            Ok(claimed) => claimed,
            Err(error) => {
                tracing::warn!(%error, session, "cannot claim the session's messages; the next sweep tries again");
                return;
            }
        };
        if claimed.is_empty() {
            return;
        }
        let seqs: Vec<i64> = claimed.iter().map(|c| c.row.seq).collect();
        self.in_hand.lock().extend(seqs.iter().copied());
        let mut orphaned = Vec::new();
        let mut fresh = Vec::new();
        for claimed in claimed {
            let local = self.arrived.lock().remove(&claimed.row.seq);
            match (local, claimed.orphaned) {
                (Some(message), false) => fresh.push(message),
                (local, orphaned_row) => {
                    // A caller waiting here hears from the stored outcome.
                    if let Some(Message { sink: Some(sink), inbound, .. }) = local {
                        self.waiters.wait((inbound.channel, inbound.message_id), sink);
                    }
                    match Unfinished::from_row(claimed.row) {
                        Ok(row) if orphaned_row => orphaned.push(row),
                        Ok(row) => fresh.push(recovery::message(inner, row, false)),
                        Err(error) => {
                            tracing::error!(%error, session, "a stored message cannot be read; it is skipped")
                        }
                    }
                }
            }
        }
        if !orphaned.is_empty() {
            tracing::info!(
                session,
                messages = orphaned.len(),
                "taking over messages nobody runs (a replica stopped, or a store failure cut their turn)"
            );
            match recovery::resume_session(inner, session, orphaned).await {
                Ok(again) => fresh.extend(again.into_iter().map(|row| recovery::message(inner, row, true))),
                Err(error) => {
                    tracing::warn!(%error, session, "cannot read the session's tape to tell which turns landed; the next sweep tries again");
                    for message in fresh {
                        if let Some(sink) = message.sink {
                            self.waiters.wait((message.inbound.channel, message.inbound.message_id), sink);
                        }
                    }
                    self.finished(&seqs);
                    return;
                }
            }
        }
        // In the order they were stored, whoever claimed them before.
        fresh.sort_by_key(|message| message.seq);
        for message in fresh {
            session::dispatch(inner, message).await;
        }
    }

    /// Whether this incarnation was fenced: another replica took its work over, and it stops.
    pub(crate) fn is_fenced(&self) -> bool {
        *self.fenced.borrow()
    }

    /// Whether this incarnation still holds `session`'s lease, asked of the
    /// database: one cut off from it for longer than the lease may have
    /// lost the session without knowing yet.
    pub(crate) async fn still_holds(&self, session: &str) -> Result<bool, crate::db::DbError> {
        self.tables.holds(&format!("session:{session}"), &self.id).await
    }

    /// `seqs` have their outcome (or could not be given one: the sweep
    /// takes them up again).
    pub(crate) fn finished(&self, seqs: &[i64]) {
        let mut in_hand = self.in_hand.lock();
        for seq in seqs {
            in_hand.remove(seq);
        }
    }

    /// Shares the receiving of `channel` (of [`Channel::exclusive_parts`]
    /// parts) with the other replicas; the task runs until aborted.
    pub(crate) fn share_receiving(
        self: &Arc<Self>,
        channel: Arc<dyn bub_channel::Channel>,
        inbox: Arc<dyn bub_channel::InboundSink>,
    ) {
        let span = tracing::info_span!("replica.receiving", replica = %self.id, channel = %channel.name());
        let task = tokio::spawn(receivers::share(self.clone(), channel, inbox).instrument(span));
        self.claiming.lock().push(task);
    }

    /// Starts the heartbeat and the sweep.
    pub(crate) fn start(self: &Arc<Self>, inner: &Arc<Inner>) {
        let (heartbeat, claiming) = upkeep::start(inner, self);
        *self.heartbeat.lock() = Some(heartbeat);
        self.claiming.lock().extend(claiming);
    }

    /// The start of a stop: nothing more is claimed or taken up.
    pub(crate) fn stop_claiming(&self) {
        for task in std::mem::take(&mut *self.claiming.lock()) {
            task.abort();
        }
    }

    /// A heartbeat sent at `sent` got through: alive until `sent` plus the lease time.
    fn alive_at(&self, sent: tokio::time::Instant) {
        let mut until = self.alive_until.lock();
        *until = (*until).max(sent + self.ttl);
    }

    /// See [`Replica::alive_until`](Replica#structfield.alive_until).
    fn alive_until(&self) -> tokio::time::Instant {
        *self.alive_until.lock()
    }

    /// Once the channels stopped (nothing here receives any more): the
    /// receiving parts' leases are free, so another replica starts them at
    /// once rather than after the turns still running here.
    pub(crate) async fn release_receiving(&self) {
        receivers::release_all(self).await;
    }

    /// The end of a stop: dead now, leases free for the others at once.
    pub(crate) async fn retire(&self) -> Result<(), crate::db::DbError> {
        self.stop_claiming();
        if let Some(heartbeat) = self.heartbeat.lock().take() {
            heartbeat.abort();
        }
        self.tables.retire(&self.id).await
    }
}

/// The replica's name in ids and logs.
/// (A pod's name in Kubernetes: it is the pod's host name.)
fn hostname() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    name.map(|name| name.trim().to_string()).filter(|name| !name.is_empty()).unwrap_or_else(|| "bub".to_string())
}

/// The id of the volume `workspaces` is on: read from its `.bub-volume`,
/// made on first use. Replicas that mount one shared volume share it.
fn volume_id(workspaces: &Path) -> Result<String, String> {
    let file = workspaces.join(".bub-volume");
    let cannot = |error: std::io::Error| format!("{}: {error}", file.display());
    std::fs::create_dir_all(workspaces).map_err(cannot)?;
    match std::fs::read_to_string(&file) {
        Ok(id) if !id.trim().is_empty() => return Ok(id.trim().to_string()),
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(cannot(error)),
    }
    let id = uuid::Uuid::new_v4().simple().to_string();
    use std::io::Write;
    match std::fs::OpenOptions::new().write(true).create_new(true).open(&file) {
        Ok(mut created) => {
            created.write_all(id.as_bytes()).map_err(cannot)?;
            Ok(id)
        }
        // Another replica on the same volume made it first.
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            std::thread::sleep(Duration::from_millis(50));
            Ok(std::fs::read_to_string(&file).map_err(cannot)?.trim().to_string())
        }
        Err(error) => Err(cannot(error)),
    }
}
