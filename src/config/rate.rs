//! [`Rate`]: "how many per how long", written `20/min` in the config.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A budget of `count` events per `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    pub count: u32,
    pub period: Duration,
}

/// Why a rate did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid rate `{text}`: {reason}; write N/s, N/min or N/h (like `20/min`)")]
pub struct RateError {
    pub text: String,
    pub reason: &'static str,
}

impl Rate {
    pub fn new(count: u32, period: Duration) -> Rate {
        Rate { count, period }
    }

    /// The time one event costs on average (for token buckets).
    pub fn interval(&self) -> Duration {
        self.period / self.count.max(1)
    }
}

impl FromStr for Rate {
    type Err = RateError;

    fn from_str(text: &str) -> Result<Rate, RateError> {
        let error = |reason| RateError { text: text.to_string(), reason };
        let (count, unit) = text.split_once('/').ok_or_else(|| error("no `/`"))?;
        let count: u32 = count.trim().parse().map_err(|_| error("the count is not a whole number"))?;
        if count == 0 {
            return Err(error("the count must be at least 1"));
        }
        let period = match unit.trim() {
            "s" | "sec" | "second" => Duration::from_secs(1),
            "min" | "minute" => Duration::from_secs(60),
            "h" | "hour" => Duration::from_secs(3600),
            _ => return Err(error("the unit is not s, min or h")),
        };
        Ok(Rate { count, period })
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.period.as_secs() {
            1 => write!(f, "{}/s", self.count),
            60 => write!(f, "{}/min", self.count),
            3600 => write!(f, "{}/h", self.count),
            _ => write!(f, "{}/{}ms", self.count, self.period.as_millis()),
        }
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Rate, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_per_second_minute_and_hour() {
        assert_eq!("30/s".parse(), Ok(Rate::new(30, Duration::from_secs(1))));
        assert_eq!(" 20 / min ".parse(), Ok(Rate::new(20, Duration::from_secs(60))));
        assert_eq!("100/h".parse(), Ok(Rate::new(100, Duration::from_secs(3600))));
        assert_eq!(Rate::new(20, Duration::from_secs(60)).to_string(), "20/min");
        assert_eq!(Rate::new(4, Duration::from_secs(60)).interval(), Duration::from_secs(15));
    }

    #[test]
    fn bad_rates_say_what_is_wrong_and_how_to_write_one() {
        let error = "20 per minute".parse::<Rate>().unwrap_err();
        assert_eq!(error.to_string(), "invalid rate `20 per minute`: no `/`; write N/s, N/min or N/h (like `20/min`)");
        assert_eq!("x/s".parse::<Rate>().unwrap_err().reason, "the count is not a whole number");
        assert_eq!("0/s".parse::<Rate>().unwrap_err().reason, "the count must be at least 1");
        assert_eq!("5/day".parse::<Rate>().unwrap_err().reason, "the unit is not s, min or h");
    }
}
