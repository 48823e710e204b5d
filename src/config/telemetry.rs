//! `[telemetry]`: OpenTelemetry traces, exported over OTLP/HTTP when an
//! endpoint is set (see `bub::telemetry::traces` for what is exported).
//!
//! The standard variables configure the same things and win over the file,
//! as every OpenTelemetry SDK lets its environment configure it:
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the full URL) or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` appended) over `endpoint`,
//! `OTEL_SERVICE_NAME` over `service_name`, `OTEL_TRACES_SAMPLER` over
//! `sample_ratio`, `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` over
//! `capture_content`; `OTEL_SDK_DISABLED=true` turns traces off.
//!
//! Read once at start, before the gateway runs: a reload does not change it
//! (a change needs a restart).

use serde::Deserialize;
use serde::de::{self, Deserializer};

/// `[telemetry]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP base URL (`http://collector:4318`);
    /// spans are posted to `<endpoint>/v1/traces`. Unset: no export.
    #[serde(default, deserialize_with = "http_url")]
    pub endpoint: Option<String>,
    /// `service.name` of the spans. Default `bub`.
    #[serde(default, deserialize_with = "service_name")]
    pub service_name: Option<String>,
    /// Record prompts, replies, tool arguments and tool results on spans.
    /// Default false: spans carry ids, names and counts only.
    #[serde(default)]
    pub capture_content: bool,
    /// The share of new traces recorded, 0 to 1 (a caller's sampled flag
    /// is followed). Default 1: every trace.
    #[serde(default, deserialize_with = "ratio")]
    pub sample_ratio: Option<f64>,
}

fn http_url<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    let text = String::deserialize(deserializer)?;
    bub_channel::rules::http_url(&text).map_err(|error| de::Error::custom(format!("endpoint `{text}`: {error}")))?;
    Ok(Some(text.trim_end_matches('/').to_string()))
}

fn service_name<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    let text = String::deserialize(deserializer)?;
    if text.trim().is_empty() {
        return Err(de::Error::custom("service_name must not be empty"));
    }
    Ok(Some(text))
}

fn ratio<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<f64>, D::Error> {
    let value = f64::deserialize(deserializer)?;
    if !(0.0..=1.0).contains(&value) {
        return Err(de::Error::custom(format!("sample_ratio {value} must be between 0 and 1")));
    }
    Ok(Some(value))
}

#[cfg(test)]
mod tests {
    use crate::config::GatewayConfig;
    use crate::config::file::tests::MINIMAL as CHANNEL;

    #[test]
    fn the_table_is_read_and_checked_with_its_position() {
        let text = format!("[telemetry]\nendpoint = \"http://collector:4318/\"\ncapture_content = true\n{CHANNEL}");
        let config = GatewayConfig::parse(&text, "bub.toml").unwrap();
        assert_eq!(config.telemetry.endpoint.as_deref(), Some("http://collector:4318"));
        assert!(config.telemetry.capture_content);
        let error = GatewayConfig::parse(&format!("[telemetry]\nendpoint = \"collector\"\n{CHANNEL}"), "bub.toml")
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("bub.toml:2:"), "{error}");
        let error = GatewayConfig::parse(&format!("[telemetry]\nsample_ratio = 2.0\n{CHANNEL}"), "bub.toml")
            .unwrap_err()
            .to_string();
        assert!(error.contains("between 0 and 1"), "{error}");
    }
}
