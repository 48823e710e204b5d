//! Files a turn's tools send to its chat (`chat.send_file`): the gateway's
//! [`ChatOutlet`], put in the turn's state as a [`TurnChat`].
//!
//! - Every file goes through the outbound scheduler (budgets, 429 pauses,
//!   retries), after the replies already going to its chat.
//! - Nothing doubled: each file has a key that a run of the same turn after a
//!   restart computes again — the turn's reply key, the SHA-256 of the bytes,
//!   and how many times this run sent those bytes before — recorded in the
//!   store before it is sent and marked delivered with the platform's id. A
//!   file found delivered is not sent again; the tool reads which message
//!   holds it. Only a crash between the upload and its record (the platform's
//!   answer lost) can send a file twice, as with replies.
//! - The upload runs among the gateway's deliveries, not in the turn's task,
//!   so a turn abandoned by a stop does not cut an upload in flight.

use super::Inner;
use crate::tools::{ChatFile, ChatOutlet, SentFile, ToolError};
use async_trait::async_trait;
use bub_channel::{ChatRef, OutboundFile};
use parking_lot::Mutex;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Arc;

/// One turn's chat, for the files its tools send.
pub(crate) struct TurnFiles {
    inner: Arc<Inner>,
    channel: String,
    chat: ChatRef,
    /// The messages the turn answers: files thread to the last one.
    reply_to: Vec<String>,
    /// The turn's reply key (stable across restarts).
    reply_key: String,
    session: String,
    /// How many times this run sent each digest.
    sent: Mutex<HashMap<String, usize>>,
}

impl TurnFiles {
    pub(crate) fn new(
        inner: &Arc<Inner>,
        channel: String,
        chat: ChatRef,
        reply_to: Vec<String>,
        reply_key: String,
        session: String,
    ) -> TurnFiles {
        TurnFiles { inner: inner.clone(), channel, chat, reply_to, reply_key, session, sent: Mutex::default() }
    }

    /// The idempotency key of the next file with these bytes.
    fn key(&self, bytes: &[u8]) -> String {
        let digest: String = Sha256::digest(bytes).iter().take(16).map(|b| format!("{b:02x}")).collect();
        let mut sent = self.sent.lock();
        let count = sent.entry(digest.clone()).or_default();
        let before = *count;
        *count += 1;
        format!("{}:file:{digest}:{before}", self.reply_key)
    }
}

#[async_trait]
impl ChatOutlet for TurnFiles {
    fn max_file_bytes(&self) -> Option<u64> {
        self.inner.channels.get(&self.channel)?.max_file_bytes()
    }

    async fn send_file(&self, file: ChatFile) -> Result<SentFile, ToolError> {
        let key = self.key(&file.bytes);
        let described =
            json!({"name": file.name, "path": file.path, "bytes": file.bytes.len(), "media_type": file.media_type});
        match self.inner.store.begin_file(&key, &self.channel, &self.session, &described).await {
            Ok(Some(message_id)) => {
                tracing::info!(session = %self.session, key = %key, file = %file.name, "file delivered before a restart; not sent again");
                return Ok(SentFile { message_id, earlier: true });
            }
            Ok(None) => {}
            Err(error) => {
                tracing::error!(%error, key = %key, "cannot record a file before sending it");
                return Err(ToolError::failed(format!(
                    "{} was not sent: the gateway could not record it (its log has the details)",
                    file.name
                )));
            }
        }
        let outbound = OutboundFile {
            chat: self.chat.clone(),
            name: file.name,
            media_type: file.media_type,
            bytes: file.bytes,
            caption: file.caption,
            reply_to: self.reply_to.clone(),
            idempotency_key: key.clone(),
            session: self.session.clone(),
        };
        super::outbound::delivery::deliver_file(&self.inner, &self.channel, outbound).await
    }
}
