//! The fake gateway's side of the connection's life, as Discord runs it: heartbeats it asks for (op 1) and
//! expects, RECONNECT (op 7), INVALID_SESSION (op 9), close codes, sessions taken over by a RESUME, and a
//! dead network path (a "zombie" connection) that Discord closes once heartbeats stop arriving.
//!
//! What is said while a session has no connection is logged in it and replayed only to a RESUME of it; a
//! new IDENTIFY starts from now (that is Discord's behaviour, and what makes a resume worth testing).

use super::{Connection, FakeDiscord, Frame, Session, State_, detach, lock};
use serde_json::json;
use std::time::Duration;
use tokio::time::Instant;

/// A connection whose heartbeats stop for this many intervals is closed.
pub const HEARTBEAT_TIMEOUTS: u32 = 3;

/// Close codes after which Discord does not let the session resume: 4007 (invalid seq) and 4009 (session
/// timed out) say "start a new session".
const NOT_RESUMABLE: [u16; 2] = [4007, 4009];

impl FakeDiscord {
    /// Closes every gateway websocket with `code` (e.g. 4000 Unknown error, 4007 Invalid seq, 4009 Session
    /// timed out). After 4007 and 4009 the sessions are gone (a RESUME gets INVALID_SESSION); after other
    /// codes they stay resumable.
    pub fn close_all(&self, code: u16, reason: &'static str) {
        let mut state = lock(&self.shared);
        let connections: Vec<Connection> = state.connections.drain().map(|(_, connection)| connection).collect();
        for mut connection in connections {
            let _ = connection.tx.send(Frame::Close(code, reason));
            if NOT_RESUMABLE.contains(&code) {
                connection.session = None;
            }
            detach(&mut state, connection);
        }
    }

    /// Sends RECONNECT (op 7) down every ready connection: the client should reconnect and RESUME. The
    /// sessions stop getting dispatches on the old connections at once (what is said meanwhile is replayed
    /// to the RESUME).
    pub fn request_reconnect(&self) {
        let mut state = lock(&self.shared);
        for session in take_ready(&mut state, &json!({"op": 7, "d": null, "s": null, "t": null}).to_string()) {
            state.detached.insert(session.id.clone(), session);
        }
    }

    /// Sends INVALID_SESSION (op 9) with `d: resumable` down every ready connection. Resumable: the client
    /// should reconnect and RESUME. Not: the sessions are gone, the client must IDENTIFY anew (and does not
    /// get what was said in between).
    pub fn invalidate_sessions(&self, resumable: bool) {
        let mut state = lock(&self.shared);
        let frame = json!({"op": 9, "d": resumable, "s": null, "t": null}).to_string();
        for session in take_ready(&mut state, &frame) {
            if resumable {
                state.detached.insert(session.id.clone(), session);
            }
        }
    }

    /// Asks every connection for a heartbeat now (op 1 from the gateway); the client must answer at once.
    pub fn request_heartbeat(&self) {
        let mut state = lock(&self.shared);
        let request = json!({"op": 1, "d": null, "s": null, "t": null}).to_string();
        for connection in state.connections.values_mut().filter(|connection| !connection.silent) {
            connection.heartbeat_requested = true;
            let _ = connection.tx.send(Frame::Text(request.clone()));
        }
    }

    /// Heartbeat requests ([`FakeDiscord::request_heartbeat`]) the client answered.
    pub fn heartbeat_requests_answered(&self) -> usize {
        lock(&self.shared).heartbeat_requests_answered
    }

    /// The network path to every connected client dies (a zombie connection): what the client sends is lost
    /// (heartbeats get no ACK), nothing more reaches it, and the TCP connection stays open until the fake
    /// closes it for missing heartbeats ([`HEARTBEAT_TIMEOUTS`] intervals). The sessions stay resumable.
    pub fn go_silent(&self) {
        let mut state = lock(&self.shared);
        let mut sessions = Vec::new();
        for connection in state.connections.values_mut() {
            connection.silent = true;
            sessions.extend(connection.session.take());
        }
        for session in sessions {
            state.detached.insert(session.id.clone(), session);
        }
    }

    /// From now on an IDENTIFY asking for any of `intents` is closed with 4014 (Disallowed intent(s)), as
    /// Discord does when a privileged intent (MESSAGE_CONTENT, 1 << 15) is not enabled in the Developer Portal.
    pub fn disallow_intents(&self, intents: u64) {
        lock(&self.shared).disallowed_intents |= intents;
    }

    /// RESUME payloads received so far (their `d`).
    pub fn resumes(&self) -> Vec<serde_json::Value> {
        lock(&self.shared).resumes.clone()
    }
}

/// Sends `frame` down every connection with a ready session and takes the sessions off them.
fn take_ready(state: &mut State_, frame: &str) -> Vec<Session> {
    let mut sessions = Vec::new();
    for connection in state.connections.values_mut() {
        if let Some(session) = connection.session.take() {
            let _ = connection.tx.send(Frame::Text(frame.to_string()));
            sessions.push(session);
        }
    }
    sessions
}

/// HEARTBEAT (op 1) from the client: acknowledged (op 11); it answers a request if one was made.
pub(super) fn heartbeat(state: &mut State_, id: u64) -> bool {
    state.heartbeats += 1;
    let Some(connection) = state.connections.get_mut(&id) else {
        return false;
    };
    connection.last_heartbeat = Instant::now();
    let answered = std::mem::take(&mut connection.heartbeat_requested);
    let _ = connection.tx.send(Frame::Text(json!({"op": 11, "d": null, "s": null, "t": null}).to_string()));
    if answered {
        state.heartbeat_requests_answered += 1;
    }
    true
}

/// The client closed connection `id`: with 1000 or 1001 it logged off and its session ends (Discord does
/// not let it resume); otherwise the session stays resumable. False: stop reading.
pub(super) fn client_closed(state: &mut State_, id: u64, code: Option<u16>) -> bool {
    if let Some(mut connection) = state.connections.remove(&id) {
        if matches!(code, Some(1000 | 1001)) {
            connection.session = None;
        }
        detach(state, connection);
    }
    false
}

/// The session a RESUME names: one without a connection, or one still on another connection (the client
/// gave that one up; Discord hands the session over and the old connection gets nothing more).
pub(super) fn take_session(state: &mut State_, session_id: &str) -> Option<Session> {
    if let Some(session) = state.detached.remove(session_id) {
        return Some(session);
    }
    state
        .connections
        .values_mut()
        .find(|connection| connection.session.as_ref().is_some_and(|session| session.id == session_id))
        .and_then(|connection| connection.session.take())
}

/// Ends when connection `id` has had no heartbeat for [`HEARTBEAT_TIMEOUTS`] intervals (counted, and its
/// session kept resumable); never ends while heartbeats come.
pub(super) async fn heartbeat_watchdog(shared: &super::Shared, id: u64) {
    let timeout = shared.heartbeat_interval * HEARTBEAT_TIMEOUTS;
    let tick = (shared.heartbeat_interval / 4).max(Duration::from_millis(50));
    loop {
        tokio::time::sleep(tick).await;
        let mut state = lock(shared);
        let Some(connection) = state.connections.get(&id) else {
            // closed meanwhile: the reader or writer ends the connection
            break;
        };
        if connection.last_heartbeat.elapsed() > timeout {
            if let Some(connection) = state.connections.remove(&id) {
                detach(&mut state, connection);
            }
            return;
        }
    }
    std::future::pending().await
}
