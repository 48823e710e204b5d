//! Builds the configured channel adapters. The one place that knows which
//! adapter serves which `kind`.

use crate::policy::{ChannelKind, GatewayConfig};
use bub_channel::{Channel, ChannelError};
use std::sync::Arc;

/// One adapter per `[channels.<name>]`, in file order.
pub fn from_config(config: &GatewayConfig) -> Result<Vec<Arc<dyn Channel>>, ChannelError> {
    let mut channels: Vec<Arc<dyn Channel>> = Vec::new();
    for (name, channel) in &config.channels {
        match &channel.kind {
            ChannelKind::Webhook(settings) => {
                let secrets = settings.secrets.iter().map(|secret| secret.expose().to_string()).collect();
                let mut webhook = bub_webhook::WebhookSettings::new(name.clone(), secrets);
                webhook.callback_url = settings.callback_url.clone();
                webhook.callback_secret = settings.callback_secret.as_ref().map(|secret| secret.expose().to_string());
                webhook.body_timeout = config.http.limits().read_timeout;
                if let Some(timeout) = settings.reply_timeout {
                    webhook.reply_timeout = timeout.duration();
                }
                channels.push(Arc::new(bub_webhook::WebhookChannel::new(webhook)?));
            }
            ChannelKind::Telegram(bot) => {
                let webhook = bot.webhook_url.clone().map(|url| bub_telegram::TelegramWebhook {
                    url,
                    secret: bot.webhook_secret.as_ref().map(|secret| secret.expose().to_string()).unwrap_or_default(),
                });
                channels.push(Arc::new(bub_telegram::TelegramChannel::new(bub_telegram::TelegramSettings {
                    name: name.clone(),
                    token: bot.token.expose().to_string(),
                    api_url: bot.api_url.clone(),
                    webhook,
                })?));
            }
            ChannelKind::Discord(bot) => {
                channels.push(Arc::new(bub_discord::DiscordChannel::new(bub_discord::DiscordSettings {
                    name: name.clone(),
                    token: bot.token.expose().to_string(),
                    api_url: bot.api_url.clone(),
                })?));
            }
        }
    }
    Ok(channels)
}
