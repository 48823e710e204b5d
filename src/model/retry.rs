//! Retries and timeouts around any [`ModelClient`], written once.
//!
//! A call is retried only while nothing has reached the user: errors from
//! `stream()` itself or as the stream's first item. Once a token is out a retry
//! would repeat or contradict it, so later errors go to the caller as they are.
//! Waits grow exponentially with jitter ([`bub_channel::Backoff`], spreading replicas that hit the
//! same limit), never shorter than the provider's `Retry-After`, within a
//! maximum attempt count and a total time budget: a wait that would overrun
//! the budget is not started, the last error is returned instead.
//!
//! Timeouts live here too, so every client has them: the response headers and
//! the first event must arrive within [`RetryPolicy::timeout`] (a retryable
//! [`ModelError::Timeout`]), and so must every later event (a silent
//! connection ends the stream with `Timeout` rather than hanging the turn).

use super::error::ModelError;
use super::types::{ChatRequest, ModelClient, ModelEvent, ModelStream};
use crate::telemetry::traces;
use async_trait::async_trait;
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tracing::Instrument;

/// How hard to try. Defaults: 4 attempts, 0.5 s base delay doubling to at most
/// 8 s, 60 s budget, 60 s timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (1 = never retry).
    pub max_attempts: u32,
    /// The backoff cap of the first retry; doubles per retry.
    pub base_delay: Duration,
    /// The largest backoff cap (`Retry-After` may ask for more).
    pub max_delay: Duration,
    /// Total time for all attempts and waits of one call, before the first event.
    pub budget: Duration,
    /// Time allowed for the response headers and the first event, and the
    /// longest silence between two events.
    pub timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            budget: Duration::from_secs(60),
            timeout: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (1-based): the shared
    /// [`Backoff`](bub_channel::Backoff) from `base_delay` to `max_delay`,
    /// at least `retry_after`.
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        let wait = bub_channel::Backoff::new(self.base_delay, self.max_delay).delay(retry);
        wait.max(retry_after.unwrap_or(Duration::ZERO))
    }
}

/// A [`ModelClient`] that retries and times out the client it wraps.
#[derive(Clone)]
pub struct Retrying {
    inner: Arc<dyn ModelClient>,
    policy: RetryPolicy,
}

impl Retrying {
    pub fn new(inner: Arc<dyn ModelClient>, policy: RetryPolicy) -> Retrying {
        Retrying { inner, policy }
    }

    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// One attempt, up to and including the first event.
    async fn first_event(&self, request: &ChatRequest) -> Result<(ModelEvent, ModelStream), ModelError> {
        let attempt = async {
            let mut stream = self.inner.stream(request).await?;
            match stream.next().await {
                Some(Ok(event)) => Ok((event, stream)),
                Some(Err(error)) => Err(error),
                None => Err(ModelError::Protocol {
                    provider: self.provider().to_string(),
                    message: "stream ended before any event".into(),
                }),
            }
        };
        tokio::time::timeout(self.policy.timeout, attempt).await.unwrap_or_else(|_| Err(self.timeout_error()))
    }

    fn timeout_error(&self) -> ModelError {
        ModelError::Timeout { provider: self.provider().to_string(), after: self.policy.timeout }
    }

    /// The rest of a stream, each event within the timeout; ends after an error.
    fn with_idle_timeout(&self, stream: ModelStream) -> ModelStream {
        let timeout = self.policy.timeout;
        let provider = self.provider().to_string();
        futures::stream::unfold(Some(stream), move |stream| {
            let provider = provider.clone();
            async move {
                let mut stream = stream?;
                match tokio::time::timeout(timeout, stream.next()).await {
                    Ok(Some(Ok(event))) => Some((Ok(event), Some(stream))),
                    Ok(Some(Err(error))) => Some((Err(error), None)),
                    Ok(None) => None,
                    Err(_) => {
                        tracing::warn!(%provider, timeout_ms = timeout.as_millis() as u64, "model stream went silent");
                        let after = timeout;
                        Some((Err(ModelError::Timeout { provider, after }), None))
                    }
                }
            }
        })
        .boxed()
    }
}

#[async_trait]
impl ModelClient for Retrying {
    fn provider(&self) -> &str {
        self.inner.provider()
    }

    /// In a `model_call` span, which lasts until the stream ends and carries
    /// the GenAI attributes when traces are exported (see `traced`).
    async fn stream(&self, request: &ChatRequest) -> Result<ModelStream, ModelError> {
        let span = tracing::info_span!("model_call", provider = self.provider(), model = %request.model);
        if traces::exporting() {
            traces::set_name(&span, || format!("chat {}", request.model));
            traces::set_attribute(&span, "gen_ai.operation.name", "chat");
            traces::set_attribute(&span, "gen_ai.provider.name", self.provider().to_string());
            traces::set_attribute(&span, "gen_ai.request.model", request.model.clone());
            traces::capture(&span, "gen_ai.input.messages", || {
                serde_json::to_string(&request.messages).unwrap_or_default()
            });
        }
        match self.stream_with_retries(request).instrument(span.clone()).await {
            Ok(stream) if traces::exporting() => Ok(traced(stream, span)),
            Ok(stream) => Ok(stream),
            Err(error) => {
                traces::set_error(&span, error.kind());
                Err(error)
            }
        }
    }
}

/// `stream`, recording on `span` what passes: token usage, the finish
/// reason, an error's kind, and (with `capture_content`) the answer's text
/// and tool calls. The span ends when the stream is dropped.
fn traced(stream: ModelStream, span: tracing::Span) -> ModelStream {
    let mut answer = traces::capturing().then(String::new);
    let mut calls: Vec<super::types::ToolCallRequest> = Vec::new();
    stream
        .map(move |item| {
            match &item {
                Ok(ModelEvent::Usage(usage)) => {
                    traces::set_attribute(&span, "gen_ai.usage.input_tokens", usage.prompt_tokens as i64);
                    traces::set_attribute(&span, "gen_ai.usage.output_tokens", usage.completion_tokens as i64);
                    if let Some(cached) = usage.cached_tokens {
                        traces::set_attribute(&span, "gen_ai.usage.cache_read.input_tokens", cached as i64);
                    }
                }
                Ok(ModelEvent::Finish(reason)) => {
                    traces::set_strings(&span, "gen_ai.response.finish_reasons", [reason.name().to_string()]);
                    if let Some(text) = &answer {
                        let message = serde_json::json!([{"role": "assistant", "content": text, "tool_calls": calls}]);
                        traces::capture(&span, "gen_ai.output.messages", || message.to_string());
                    }
                }
                Ok(ModelEvent::TextDelta(delta)) => {
                    if let Some(text) = &mut answer {
                        text.push_str(delta);
                    }
                }
                Ok(ModelEvent::ToolCall(call)) if answer.is_some() => calls.push(call.clone()),
                Ok(_) => {}
                Err(error) => traces::set_error(&span, error.kind()),
            }
            item
        })
        .boxed()
}

impl Retrying {
    async fn stream_with_retries(&self, request: &ChatRequest) -> Result<ModelStream, ModelError> {
        let started = Instant::now();
        let mut attempt = 1;
        loop {
            let error = match self.first_event(request).await {
                Ok((first, rest)) => {
                    let first = futures::stream::once(async move { Ok(first) });
                    return Ok(first.chain(self.with_idle_timeout(rest)).boxed());
                }
                Err(error) => error,
            };
            if !error.is_retryable() || attempt >= self.policy.max_attempts {
                return Err(error);
            }
            let wait = self.policy.delay(attempt, error.retry_after());
            let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
            let provider = self.provider();
            if started.elapsed() + wait > self.policy.budget {
                tracing::warn!(provider, attempt, error_kind = error.kind(), wait_ms, %error,
                    "model call failed; the next wait would exceed the retry budget");
                return Err(error);
            }
            tracing::warn!(provider, attempt, error_kind = error.kind(), wait_ms, %error,
                "model call failed, retrying");
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// The items of one call, and whether it then goes silent.
    type Script = (Vec<Result<ModelEvent, ModelError>>, bool);

    /// Each call streams the next script.
    struct Scripted {
        calls: AtomicU32,
        scripts: Mutex<Vec<Script>>,
    }

    #[async_trait]
    impl ModelClient for Scripted {
        fn provider(&self) -> &str {
            "scripted"
        }

        async fn stream(&self, _request: &ChatRequest) -> Result<ModelStream, ModelError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let (items, hang) = self.scripts.lock().remove(0);
            let items = futures::stream::iter(items);
            Ok(match hang {
                true => items.chain(futures::stream::pending()).boxed(),
                false => items.boxed(),
            })
        }
    }

    fn retrying(scripts: Vec<(Vec<Result<ModelEvent, ModelError>>, bool)>) -> (Arc<Scripted>, Retrying) {
        let inner = Arc::new(Scripted { calls: AtomicU32::new(0), scripts: Mutex::new(scripts) });
        let policy = RetryPolicy {
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(1),
            timeout: Duration::from_millis(50),
            ..RetryPolicy::default()
        };
        (inner.clone(), Retrying::new(inner, policy))
    }

    fn server_error() -> ModelError {
        ModelError::Server { provider: "scripted".into(), status: 500, message: "boom".into() }
    }

    async fn collect(stream: ModelStream) -> Vec<Result<ModelEvent, ModelError>> {
        stream.collect().await
    }

    #[tokio::test]
    async fn an_error_after_the_first_event_is_passed_on_not_retried() {
        let text = ModelEvent::TextDelta("hi".into());
        let (inner, client) = retrying(vec![(vec![Ok(text.clone()), Err(server_error())], false)]);
        let items = collect(client.stream(&ChatRequest::default()).await.unwrap()).await;
        assert_eq!(items, vec![Ok(text), Err(server_error())]);
        assert_eq!(inner.calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn an_error_as_the_first_item_is_retried() {
        let finish = ModelEvent::Finish(crate::model::FinishReason::Stop);
        let (inner, client) = retrying(vec![(vec![Err(server_error())], false), (vec![Ok(finish.clone())], false)]);
        let items = collect(client.stream(&ChatRequest::default()).await.unwrap()).await;
        assert_eq!(items, vec![Ok(finish)]);
        assert_eq!(inner.calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn silence_between_events_ends_the_stream_with_a_timeout() {
        let text = ModelEvent::TextDelta("hi".into());
        let (_, client) = retrying(vec![(vec![Ok(text.clone())], true)]);
        let items = collect(client.stream(&ChatRequest::default()).await.unwrap()).await;
        assert_eq!(items.len(), 2);
        assert!(matches!(items[1], Err(ModelError::Timeout { .. })));
    }

    #[test]
    fn delays_stay_under_the_doubling_cap_and_honour_retry_after() {
        let policy = RetryPolicy::default();
        for _ in 0..50 {
            assert!(policy.delay(1, None) <= Duration::from_millis(500));
            assert!(policy.delay(3, None) <= Duration::from_secs(2));
            assert!(policy.delay(30, None) <= policy.max_delay);
        }
        let asked = Duration::from_secs(20);
        assert!(policy.delay(1, Some(asked)) >= asked);
    }
}
