//! Which traces the binary exports: `[telemetry]` of the gateway's config
//! and the standard OpenTelemetry variables, resolved into
//! [`TraceSettings`] before the subscriber is installed (`main.rs`).
//!
//! The variables win over the file (an SDK is configured by its
//! environment): `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is) or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` appended) over `endpoint`,
//! `OTEL_SERVICE_NAME` over `service_name`, `OTEL_TRACES_SAMPLER` (read by
//! the SDK) over `sample_ratio`, `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`
//! over `capture_content`; `OTEL_SDK_DISABLED=true` exports nothing.
//! `bub gateway` reads its config file's table; `bub run` and `bub chat`
//! export when the variables say so; other commands never do.

use super::{BubSubcommand, Cli};
use crate::config::TelemetryConfig;
use crate::telemetry::traces::TraceSettings;

/// What `cli` asks for, from the process environment and, for the gateway,
/// its config file (a file that does not load exports nothing from it: the
/// gateway reports the file's error as it starts).
pub fn trace_settings(cli: &Cli) -> Option<TraceSettings> {
    let file = match &cli.subcommand {
        BubSubcommand::Gateway { config, .. } => {
            let home = super::env::home(cli.home.clone());
            let path = config.clone().or_else(|| Some(home.config_file()).filter(|path| path.exists()));
            path.and_then(|path| crate::config::GatewayConfig::load(path).ok()).map(|config| config.telemetry)
        }
        BubSubcommand::Run { .. } | BubSubcommand::Chat { .. } => None,
        _ => return None,
    };
    resolve(&file.unwrap_or_default(), super::env::var)
}

/// The settings from the file's table and the variables `var` reads;
/// `None` when no endpoint is set, or the SDK is disabled.
fn resolve(file: &TelemetryConfig, var: impl Fn(&str) -> Option<String>) -> Option<TraceSettings> {
    let yes = |name: &str| var(name).is_some_and(|value| value.eq_ignore_ascii_case("true"));
    if yes("OTEL_SDK_DISABLED") {
        return None;
    }
    let endpoint = match (var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), var("OTEL_EXPORTER_OTLP_ENDPOINT")) {
        (Some(traces), _) => traces,
        (None, Some(base)) => format!("{}/v1/traces", base.trim_end_matches('/')),
        (None, None) => format!("{}/v1/traces", file.endpoint.as_deref()?),
    };
    let capture_content = match var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT") {
        Some(_) => yes("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"),
        None => file.capture_content,
    };
    Some(TraceSettings {
        endpoint,
        service_name: var("OTEL_SERVICE_NAME").or_else(|| file.service_name.clone()).unwrap_or_else(|| "bub".into()),
        capture_content,
        sample_ratio: file.sample_ratio.filter(|_| var("OTEL_TRACES_SAMPLER").is_none()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |name| pairs.iter().find(|(key, _)| key == name).map(|(_, value)| value.clone())
    }

    #[test]
    fn nothing_is_exported_without_an_endpoint() {
        assert_eq!(resolve(&TelemetryConfig::default(), vars(&[("OTEL_SERVICE_NAME", "x")])), None);
    }

    #[test]
    fn the_variables_win_over_the_file() {
        let file = TelemetryConfig {
            endpoint: Some("http://file:4318".into()),
            service_name: Some("from-file".into()),
            capture_content: true,
            sample_ratio: Some(0.5),
        };
        let from_file = resolve(&file, vars(&[])).unwrap();
        assert_eq!(from_file.endpoint, "http://file:4318/v1/traces");
        assert_eq!((from_file.service_name.as_str(), from_file.capture_content), ("from-file", true));
        assert_eq!(from_file.sample_ratio, Some(0.5));
        let env = vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318/"),
            ("OTEL_SERVICE_NAME", "from-env"),
            ("OTEL_TRACES_SAMPLER", "always_on"),
            ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "false"),
        ]);
        let from_env = resolve(&file, env).unwrap();
        assert_eq!(from_env.endpoint, "http://env:4318/v1/traces");
        assert_eq!((from_env.service_name.as_str(), from_env.capture_content), ("from-env", false));
        assert_eq!(from_env.sample_ratio, None, "the SDK reads OTEL_TRACES_SAMPLER");
        let traces_url = vars(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:1/custom")]);
        assert_eq!(resolve(&TelemetryConfig::default(), traces_url).unwrap().endpoint, "http://t:1/custom");
        assert_eq!(resolve(&file, vars(&[("OTEL_SDK_DISABLED", "true")])), None);
    }
}
