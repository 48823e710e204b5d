//! Server-sent events: the framing both providers stream in, and the driver
//! that turns a response body into a [`ModelStream`].
//!
//! The decoder follows the WHATWG event-stream rules that matter for model
//! APIs: lines end in LF, CRLF or CR (even split across network chunks),
//! `data:` lines of one event are joined with `\n`, `:` lines are comments
//! (keep-alives), a blank line dispatches the event, and a partial event at the
//! end of the body is dropped. Providers differ only in what the data means,
//! which is an [`EventParser`].
//!
//! The driver guarantees the contract of [`ModelStream`]: a body that ends
//! before the provider said it was done is an error item, never a silent end.

use super::error::ModelError;
use super::types::{ModelEvent, ModelStream};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use std::collections::VecDeque;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SseEvent {
    /// The `event:` field, when the server named the event.
    pub event: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

/// Incremental event-stream decoder: feed it bytes as they arrive.
#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    /// Bytes of the current, not yet terminated line.
    line: Vec<u8>,
    /// The previous chunk ended in CR: a leading LF belongs to that line end.
    after_cr: bool,
    event: Option<String>,
    data: Vec<String>,
}

impl SseDecoder {
    /// Consumes a chunk, returning the events it completed.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        for &byte in chunk {
            let after_cr = std::mem::take(&mut self.after_cr);
            match byte {
                b'\n' if after_cr => {}
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(event) = self.line_done(&String::from_utf8_lossy(&line)) {
                        events.push(event);
                    }
                }
                _ => self.line.push(byte),
            }
        }
        events
    }

    fn line_done(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            if self.data.is_empty() {
                self.event = None;
                return None;
            }
            return Some(SseEvent { event: self.event.take(), data: std::mem::take(&mut self.data).join("\n") });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => self.data.push(value.to_string()),
            "event" => self.event = Some(value.to_string()),
            _ => {} // `id`, `retry` and unknown fields mean nothing to a model stream
        }
        None
    }
}

/// What a provider's parser says after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    Continue,
    /// The provider said the answer is complete; the rest of the body is ignored.
    Done,
}

/// Gives meaning to a provider's events.
pub(crate) trait EventParser: Send + 'static {
    /// Handles one event, queueing the model events it completes.
    fn on_event(&mut self, event: SseEvent, out: &mut VecDeque<ModelEvent>) -> Result<Progress, ModelError>;

    /// The body ended without [`Progress::Done`]: finish if the provider's
    /// protocol allows it, else say what is missing.
    fn on_end(&mut self, out: &mut VecDeque<ModelEvent>) -> Result<(), ModelError>;
}

type Body<C> = BoxStream<'static, Result<C, reqwest::Error>>;

struct Driver<C, P> {
    provider: String,
    body: Body<C>,
    decoder: SseDecoder,
    parser: P,
    queue: VecDeque<ModelEvent>,
    failure: Option<ModelError>,
    finished: bool,
    emitted: bool,
}

/// Streams the model events of an SSE response body through `parser`.
pub(crate) fn drive<B, C, P>(provider: &str, body: B, parser: P) -> ModelStream
where
    B: Stream<Item = Result<C, reqwest::Error>> + Send + 'static,
    C: AsRef<[u8]> + Send + 'static,
    P: EventParser,
{
    let driver = Driver {
        provider: provider.to_string(),
        body: body.boxed(),
        decoder: SseDecoder::default(),
        parser,
        queue: VecDeque::new(),
        failure: None,
        finished: false,
        emitted: false,
    };
    futures::stream::unfold(driver, |mut d| async move {
        loop {
            if let Some(event) = d.queue.pop_front() {
                d.emitted = true;
                return Some((Ok(event), d));
            }
            if let Some(failure) = d.failure.take() {
                return Some((Err(failure), d));
            }
            if d.finished {
                return None;
            }
            d.pull().await;
        }
    })
    .boxed()
}

impl<C, P> Driver<C, P>
where
    C: AsRef<[u8]> + Send + 'static,
    P: EventParser,
{
    /// Reads one chunk of the body and parses the events it completes.
    async fn pull(&mut self) {
        match self.body.next().await {
            Some(Ok(chunk)) => {
                for event in self.decoder.feed(chunk.as_ref()) {
                    match self.parser.on_event(event, &mut self.queue) {
                        Ok(Progress::Continue) => {}
                        Ok(Progress::Done) => {
                            self.finished = true;
                            return;
                        }
                        Err(error) => return self.fail(error),
                    }
                }
            }
            Some(Err(error)) => {
                let lost = super::transport::describe(&error);
                let error = if self.emitted || !self.queue.is_empty() {
                    ModelError::Cut { provider: self.provider.clone(), message: format!("connection lost ({lost})") }
                } else {
                    ModelError::Connection { provider: self.provider.clone(), message: lost }
                };
                self.fail(error);
            }
            None => {
                self.finished = true;
                if let Err(error) = self.parser.on_end(&mut self.queue) {
                    self.fail(error);
                }
            }
        }
    }

    fn fail(&mut self, error: ModelError) {
        tracing::debug!(provider = %self.provider, kind = error.kind(), %error, "model stream failed");
        self.failure = Some(error);
        self.finished = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    #[test]
    fn events_are_split_on_blank_lines_with_any_line_ending() {
        let mut d = SseDecoder::default();
        let events = d.feed(b"data: a\n\ndata: b\r\n\r\ndata: c\r\rdata:d\n\n");
        assert_eq!(data(&events), ["a", "b", "c", "d"]);
    }

    #[test]
    fn multi_line_data_is_joined_and_comments_are_skipped() {
        let mut d = SseDecoder::default();
        let events = d.feed(b": keep-alive\nevent: delta\ndata: {\"a\":\ndata: 1}\n\n");
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].event.as_deref(), Some("delta"));
        assert_eq!(events[0].data, "{\"a\":\n1}");
    }

    #[test]
    fn chunks_may_split_lines_crlf_pairs_and_utf8_characters() {
        let mut d = SseDecoder::default();
        let mut events = Vec::new();
        for byte in "data: héllo\n\n".as_bytes() {
            events.extend(d.feed(&[*byte]));
        }
        assert_eq!(data(&events), ["héllo"]);
        assert!(d.feed(b"data: x\r").is_empty());
        assert!(d.feed(b"\n").is_empty(), "the LF of a split CRLF is no blank line");
        assert_eq!(data(&d.feed(b"\r\n")), ["x"]);
    }

    #[test]
    fn an_unterminated_event_is_not_dispatched() {
        let mut d = SseDecoder::default();
        assert!(d.feed(b"data: partial").is_empty());
        assert!(d.feed(b"\n").is_empty());
    }
}
