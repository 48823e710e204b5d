//! The local clock against a server's: signed webhook requests carry their
//! time, and one further than the replay window from this clock is refused.

use super::Finding;
use super::model::ClockReading;

/// Skew worth a warning: more than a `Date` header's second of resolution
/// and the time of a request explain.
const WARN_BEYOND_SECONDS: i64 = 5;

pub(crate) fn check(reading: Option<ClockReading>) -> Finding {
    let Some(reading) = reading else {
        return Finding::warn(
            "clock",
            "not checked: no server answered with a Date header",
            "make the model check pass (the clock is compared with its answer), or check NTP yourself",
        );
    };
    let window = bub_webhook::DEFAULT_REPLAY_WINDOW.as_secs();
    let skew = reading.skew.num_seconds();
    let direction = if skew >= 0 { "ahead of" } else { "behind" };
    let detail = format!("{} s {direction} the Date of {}", skew.unsigned_abs(), reading.source);
    let fix = "synchronise the clock with NTP (systemd-timesyncd: `timedatectl set-ntp true`, or chrony)";
    if skew.unsigned_abs() > window {
        Finding::fail("clock", format!("{detail}: signed webhook requests are refused beyond {window} s"), fix)
    } else if skew.abs() > WARN_BEYOND_SECONDS {
        Finding::warn("clock", format!("{detail} (signed webhook requests are refused beyond {window} s)"), fix)
    } else {
        Finding::ok("clock", detail)
    }
}
