//! Builds the configured channel adapters. The one place that knows which
//! adapter serves which `kind`, and that names the optional ones (the Cargo
//! features `telegram` and `discord`; the config refuses a kind that is not
//! built in).
//!
//! Connection keys are read once, at start, except a webhook channel's
//! secrets: the adapter reads them from the live config on every request
//! and callback, so a reload that removes a secret takes effect at once.

use crate::config::{ChannelKind, LiveConfig, WebhookConfig};
use bub_channel::{Channel, ChannelError, InboundField};
use std::sync::Arc;

/// One adapter per `[channels.<name>]` of the config in force, in file order.
pub fn from_config(live: &Arc<LiveConfig>) -> Result<Vec<Arc<dyn Channel>>, ChannelError> {
    let config = live.current();
    let mut channels: Vec<Arc<dyn Channel>> = Vec::new();
    for (name, channel) in &config.channels {
        // Every message carries the name: it must be one a message may carry.
        InboundField::Channel.check(name).map_err(|invalid| ChannelError::new(name.clone(), invalid.to_string()))?;
        match &channel.kind {
            ChannelKind::Webhook(settings) => {
                let started = webhook_keys(settings);
                let mut webhook = bub_webhook::WebhookSettings::new(name.clone(), Vec::new());
                webhook.secrets = started.secrets.clone();
                webhook.callback_url = settings.callback_url.clone();
                webhook.callback_secret = settings.callback_secret.clone();
                webhook.body_timeout = config.http.limits().read_timeout;
                if let Some(timeout) = settings.reply_timeout {
                    webhook.reply_timeout = timeout.duration();
                }
                let keys: bub_webhook::KeySource = {
                    let (live, name) = (live.clone(), name.clone());
                    Arc::new(move || match live.current().channels.get(&name).map(|channel| &channel.kind) {
                        Some(ChannelKind::Webhook(now)) => webhook_keys(now),
                        // A reload never removes a running channel nor changes its kind.
                        _ => started.clone(),
                    })
                };
                channels.push(Arc::new(bub_webhook::WebhookChannel::with_keys(webhook, keys)?));
            }
            #[cfg(feature = "telegram")]
            ChannelKind::Telegram(bot) => {
                let webhook = bot.webhook_url.clone().map(|url| bub_telegram::TelegramWebhook {
                    url,
                    secret: bot.webhook_secret.clone().unwrap_or_default(),
                });
                channels.push(Arc::new(bub_telegram::TelegramChannel::new(bub_telegram::TelegramSettings {
                    name: name.clone(),
                    token: bot.token.clone(),
                    api_url: bot.api_url.clone(),
                    webhook,
                })?));
            }
            #[cfg(feature = "discord")]
            ChannelKind::Discord(bot) => {
                channels.push(Arc::new(bub_discord::DiscordChannel::new(bub_discord::DiscordSettings {
                    name: name.clone(),
                    token: bot.token.clone(),
                    api_url: bot.api_url.clone(),
                    shards: bot.shards,
                })?));
            }
            // A kind whose feature this build leaves out: the config refused
            // it where the file names it, so this is never reached.
            #[cfg(not(all(feature = "telegram", feature = "discord")))]
            other => {
                let message = format!("kind `{}` is not built into this bub", other.name());
                return Err(ChannelError::new(name.clone(), message));
            }
        }
    }
    Ok(channels)
}

fn webhook_keys(settings: &WebhookConfig) -> bub_webhook::WebhookKeys {
    bub_webhook::WebhookKeys { secrets: settings.secrets.clone(), callback_secret: settings.callback_secret.clone() }
}
