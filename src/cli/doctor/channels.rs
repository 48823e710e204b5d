//! Each channel's credentials, as its adapter checks them
//! ([`bub_channel::Channel::check_credentials`]): the adapters are built
//! from the config by the gateway's own code, so a test fake's `api_url`
//! and a proxy work here as they do there.

use super::config::Checked;
use super::{Finding, NETWORK_TIMEOUT};
use crate::config::LiveConfig;

pub(crate) async fn check(checked: Option<&Checked>) -> Vec<Finding> {
    let Some(checked) = checked else {
        return vec![Finding::warn("channels", "not checked: the config does not load", "fix the config first")];
    };
    if checked.secret_pending {
        return vec![Finding::ok(
            "channel webhook",
            "webhook: the first start generates its secret (or set BUB_WEBHOOK_SECRET)",
        )];
    }
    let channels = match crate::gateway::channels::from_config(&LiveConfig::fixed(checked.config.clone())) {
        Ok(channels) => channels,
        Err(error) => {
            return vec![Finding::fail(format!("channel {}", error.channel), error.message, "see the message")];
        }
    };
    let checks = channels.iter().map(|channel| async move {
        let name = channel.name().to_string();
        let kind = checked.config.channels.get(&name).map_or("?", |config| config.kind.name());
        let check = format!("channel {name}");
        match tokio::time::timeout(NETWORK_TIMEOUT, channel.check_credentials()).await {
            Ok(Ok(found)) => Finding::ok(check, format!("{kind}: {found}")),
            Ok(Err(problem)) => {
                // The built-in webhook's secret comes from the environment, not from a file.
                let fix = match checked.file {
                    None => "set BUB_WEBHOOK_SECRET (or the webhook.secret file in BUB_HOME) to a new random secret: `openssl rand -hex 32`".to_string(),
                    Some(_) => problem.fix,
                };
                Finding::fail(check, format!("{kind}: {}", problem.problem), fix)
            }
            Err(_) => Finding::fail(
                check,
                format!("{kind}: no answer within {NETWORK_TIMEOUT:?}"),
                format!("check the network, or channels.{name}.api_url"),
            ),
        }
    });
    futures::future::join_all(checks).await
}
