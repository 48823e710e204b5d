//! TEMPORARY STUB — replaced by the policy module (branch `policy`).
#![allow(dead_code, missing_docs)]
use bub_channel::ChatKind;
use indexmap::IndexMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Denial(pub String);
impl std::fmt::Display for Denial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
#[derive(Debug, Clone)]
pub struct HttpSettings {
    pub listen: SocketAddr,
}
#[derive(Debug, Clone)]
pub struct WebhookChannelSettings {
    pub secrets: Vec<String>,
    pub callback_url: Option<String>,
    pub callback_secret: Option<String>,
}
#[derive(Debug, Clone)]
pub enum ChannelKind {
    Webhook(WebhookChannelSettings),
}
#[derive(Debug, Clone)]
pub struct ChannelConfig {
    pub kind: ChannelKind,
}
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    pub http: HttpSettings,
    pub channels: IndexMap<String, ChannelConfig>,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionScope {
    Chat,
    Thread,
    Sender,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusyRule {
    Steer,
    Queue,
    Drop,
}
#[derive(Debug, Clone)]
pub struct AddressingRule {
    pub mention: bool,
    pub reply: bool,
    pub keywords: Vec<String>,
}
#[derive(Debug, Clone)]
pub struct DebounceRule {
    pub quiet: Duration,
    pub max_wait: Duration,
    pub active_window: Duration,
    pub enabled: Option<bool>,
}
#[derive(Debug, Clone, Copy)]
pub struct Rate {
    pub count: u32,
    pub per: Duration,
}
#[derive(Debug, Clone, Default)]
pub struct RateLimits {
    pub inbound_per_user: Option<Rate>,
    pub outbound_per_chat: Option<Rate>,
    pub outbound_per_channel: Option<Rate>,
}
#[derive(Debug, Clone)]
pub struct EffectivePolicy {
    pub addressing: AddressingRule,
    pub session_scope: SessionScope,
    pub busy: BusyRule,
    pub debounce: DebounceRule,
    pub rate: RateLimits,
    pub model: Option<String>,
    pub confine_fs: bool,
}
impl EffectivePolicy {
    pub fn admits_user(&self, _user: &str) -> Result<(), Denial> {
        Ok(())
    }
    pub fn admits_chat(&self, _chat: &str) -> Result<(), Denial> {
        Ok(())
    }
    pub fn may_run_command(&self, _user: &str, _command: &str) -> Result<(), Denial> {
        Ok(())
    }
    pub fn offered_tools(&self, all: &[String], _shared: bool) -> Vec<String> {
        all.to_vec()
    }
}
impl GatewayConfig {
    pub fn effective(&self, _channel: &str, _chat: &str) -> EffectivePolicy {
        EffectivePolicy {
            addressing: AddressingRule { mention: true, reply: true, keywords: vec![] },
            session_scope: SessionScope::Thread,
            busy: BusyRule::Queue,
            debounce: DebounceRule {
                quiet: Duration::from_secs(1),
                max_wait: Duration::from_secs(10),
                active_window: Duration::from_secs(60),
                enabled: None,
            },
            rate: RateLimits::default(),
            model: None,
            confine_fs: false,
        }
    }
    pub fn load(_path: &std::path::Path) -> Result<GatewayConfig, Denial> {
        Err(Denial("config files need the policy module".into()))
    }
    pub fn default_webhook(secret: String) -> GatewayConfig {
        let mut channels = IndexMap::new();
        channels.insert(
            "webhook".to_string(),
            ChannelConfig {
                kind: ChannelKind::Webhook(WebhookChannelSettings {
                    secrets: vec![secret],
                    callback_url: None,
                    callback_secret: None,
                }),
            },
        );
        GatewayConfig { http: HttpSettings { listen: "127.0.0.1:8080".parse().unwrap() }, channels }
    }
}
pub struct SessionPolicy {
    pub policy: Arc<EffectivePolicy>,
    pub user: String,
    pub chat_kind: ChatKind,
}
pub struct LiveConfig {
    current: std::sync::RwLock<Arc<GatewayConfig>>,
}
impl LiveConfig {
    pub fn fixed(config: GatewayConfig) -> Arc<LiveConfig> {
        Arc::new(LiveConfig { current: std::sync::RwLock::new(Arc::new(config)) })
    }
    pub fn current(&self) -> Arc<GatewayConfig> {
        self.current.read().unwrap().clone()
    }
}
pub fn enforce(_agent: &crate::agent::Agent) {}
pub fn policy_tool() -> Option<crate::tools::Tool> {
    None
}
