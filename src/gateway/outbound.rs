//! TEMPORARY STUB — replaced by the outbound scheduler (branch `outbound`).
#![allow(dead_code, missing_docs)]
use bub_channel::{Channel, ChatRef, Delivered, Outbound, SendError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Debug, thiserror::Error)]
pub enum OutboundError {
    #[error("{0}")]
    Send(#[from] SendError),
    #[error("no channel {0}")]
    UnknownChannel(String),
}
#[derive(Default, Clone)]
pub struct Budget {
    pub per_channel: Option<governor::Quota>,
    pub per_chat: Option<governor::Quota>,
}
#[derive(Default)]
pub struct OutboundScheduler {
    channels: Mutex<HashMap<String, Arc<dyn Channel>>>,
}
impl OutboundScheduler {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }
    pub fn register(&self, channel: Arc<dyn Channel>, _budget: Budget) {
        self.channels.lock().unwrap().insert(channel.name().to_string(), channel);
    }
    pub async fn send_final(&self, channel: &str, outbound: Outbound) -> Result<Vec<Delivered>, OutboundError> {
        let ch = self.channels.lock().unwrap().get(channel).cloned();
        let ch = ch.ok_or_else(|| OutboundError::UnknownChannel(channel.into()))?;
        Ok(vec![ch.send(&outbound).await?])
    }
    pub fn live(self: &Arc<Self>, channel: &str, chat: ChatRef, key: String, session: String) -> LiveReply {
        LiveReply { scheduler: self.clone(), channel: channel.into(), chat, key, session }
    }
}
pub struct LiveReply {
    scheduler: Arc<OutboundScheduler>,
    channel: String,
    chat: ChatRef,
    key: String,
    session: String,
}
impl LiveReply {
    pub fn update(&self, _text: &str) {}
    pub async fn finish(self, text: &str) -> Result<Vec<Delivered>, OutboundError> {
        let outbound = Outbound {
            chat: self.chat,
            text: text.into(),
            reply_to: vec![],
            idempotency_key: self.key,
            session: self.session,
        };
        self.scheduler.send_final(&self.channel, outbound).await
    }
}
