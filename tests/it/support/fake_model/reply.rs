//! The script of one request: what the fake model answers, or how it fails.

use serde_json::Value;
use std::time::Duration;

/// A tool call the fake model makes.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeCall {
    /// The call id; `call_<position>` when not given.
    pub id: Option<String>,
    pub name: String,
    pub arguments: Value,
}

impl From<(&str, Value)> for FakeCall {
    fn from((name, arguments): (&str, Value)) -> FakeCall {
        FakeCall { id: None, name: name.into(), arguments }
    }
}

impl From<(&str, &str, Value)> for FakeCall {
    /// `(id, name, arguments)`.
    fn from((id, name, arguments): (&str, &str, Value)) -> FakeCall {
        FakeCall { id: Some(id.into()), name: name.into(), arguments }
    }
}

/// What the model says (or does wrong) for one request.
#[derive(Debug, Clone)]
pub struct Reply {
    pub(super) script: Script,
    /// Wait before the first event (before the status for failures).
    pub(super) delay: Option<Duration>,
    /// For a cut stream: silence before the connection drops.
    pub(super) stall: Option<Duration>,
    /// A wait before each frame after the first: a model that writes slowly.
    pub(super) pace: Option<Duration>,
}

#[derive(Debug, Clone)]
pub(super) enum Script {
    /// A complete streamed answer.
    Answer(Answer),
    /// The answer's text deltas, then the connection drops.
    Cut(Answer),
    /// An HTTP error response.
    Fail(Failure),
}

#[derive(Debug, Clone, Default)]
pub(super) struct Answer {
    pub(super) text: String,
    pub(super) reasoning: String,
    pub(super) calls: Vec<FakeCall>,
    /// (prompt, completion, cached)
    pub(super) usage: Option<(u64, u64, Option<u64>)>,
    /// OpenAI finish reason; the default is `tool_calls` with calls, else `stop`.
    pub(super) finish: Option<String>,
}

#[derive(Debug, Clone)]
pub(super) struct Failure {
    pub(super) status: u16,
    pub(super) message: String,
    pub(super) code: Option<String>,
    pub(super) retry_after: Option<u64>,
}

impl Reply {
    fn answer(answer: Answer) -> Reply {
        Reply { script: Script::Answer(answer), delay: None, stall: None, pace: None }
    }

    /// A text answer, streamed in small deltas.
    pub fn text(text: &str) -> Reply {
        Reply::answer(Answer { text: text.into(), ..Answer::default() })
    }

    /// Tool calls: `("fs_read", json!({…}))` or `("my_id", "fs_read", json!({…}))`.
    pub fn tool_calls<C: Into<FakeCall>>(calls: Vec<C>) -> Reply {
        Reply::answer(Answer { calls: calls.into_iter().map(Into::into).collect(), ..Answer::default() })
    }

    /// HTTP `status` with an error body carrying `message`.
    pub fn error(status: u16, message: &str) -> Reply {
        Reply {
            script: Script::Fail(Failure { status, message: message.into(), code: None, retry_after: None }),
            delay: None,
            stall: None,
            pace: None,
        }
    }

    /// 429 with `Retry-After: <secs>` and an OpenAI-style error body.
    pub fn rate_limited(retry_after_secs: u64) -> Reply {
        let mut reply = Reply::error(429, "Rate limit reached for requests");
        if let Script::Fail(failure) = &mut reply.script {
            failure.retry_after = Some(retry_after_secs);
            failure.code = Some("rate_limit_exceeded".into());
        }
        reply
    }

    /// A 5xx with a server-error body.
    pub fn server_error(status: u16) -> Reply {
        Reply::error(status, "The server had an error while processing your request")
    }

    /// 400: the prompt does not fit the model's context window.
    pub fn context_overflow() -> Reply {
        let mut reply = Reply::error(
            400,
            "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
        );
        if let Script::Fail(failure) = &mut reply.script {
            failure.code = Some("context_length_exceeded".into());
        }
        reply
    }

    /// Streams `partial` as text deltas, then drops the connection (no `[DONE]`).
    pub fn cut_mid_stream(partial: &str) -> Reply {
        Reply {
            script: Script::Cut(Answer { text: partial.into(), ..Answer::default() }),
            delay: None,
            stall: None,
            pace: None,
        }
    }

    /// Streams `partial` as text deltas, then says nothing for `silence`
    /// (longer than the client's timeout, in the tests that use it) before
    /// the connection drops.
    pub fn stall_mid_stream(partial: &str, silence: Duration) -> Reply {
        Reply { stall: Some(silence), ..Reply::cut_mid_stream(partial) }
    }

    /// `inner`, with its first event (or its error status) sent after `delay`.
    pub fn slow_first_token(delay: Duration, inner: Reply) -> Reply {
        Reply { delay: Some(delay), ..inner }
    }

    /// `inner`, each of its stream's frames (3-character text deltas) sent `pace` after the one before.
    /// (Live replies on a chat platform are what a paced stream shows.)
    #[cfg(any(feature = "telegram", feature = "discord"))]
    pub fn paced(pace: Duration, inner: Reply) -> Reply {
        Reply { pace: Some(pace), ..inner }
    }

    fn map_answer(mut self, change: impl FnOnce(&mut Answer)) -> Reply {
        if let Script::Answer(answer) | Script::Cut(answer) = &mut self.script {
            change(answer);
        }
        self
    }

    /// Text before the tool calls (ignored by failures).
    pub fn with_text(self, text: &str) -> Reply {
        self.map_answer(|a| a.text = text.into())
    }

    /// Reasoning deltas streamed before the text.
    pub fn with_reasoning(self, reasoning: &str) -> Reply {
        self.map_answer(|a| a.reasoning = reasoning.into())
    }

    /// Reports token usage (total = prompt + completion).
    pub fn with_usage(self, prompt: u64, completion: u64) -> Reply {
        self.map_answer(|a| a.usage = Some((prompt, completion, a.usage.and_then(|u| u.2))))
    }

    /// Reports `cached` of the prompt tokens as served from cache (needs usage).
    pub fn with_cached_tokens(self, cached: u64) -> Reply {
        self.map_answer(|a| {
            let (prompt, completion, _) = a.usage.unwrap_or_default();
            a.usage = Some((prompt, completion, Some(cached)));
        })
    }

    /// The OpenAI finish reason to send (`length`, `content_filter`, …);
    /// mapped to the Anthropic stop reason on `/v1/messages`.
    pub fn with_finish_reason(self, reason: &str) -> Reply {
        self.map_answer(|a| a.finish = Some(reason.into()))
    }
}
