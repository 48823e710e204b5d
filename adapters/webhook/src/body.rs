//! Reading a request body without trusting its sender: at most `max_bytes`
//! (413), within a deadline (408), and within a byte budget shared by every
//! body being read at once (503), so neither one large body nor many slow
//! ones can take the gateway's memory. The signature is over the raw bytes,
//! so the body has to be read before the sender is known.

use axum::body::{Body, BodyDataStream, Bytes};
use axum::http::{HeaderMap, header};
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The most of a refused body that is read and discarded so its sender sees the answer.
const DRAIN_BYTES: u64 = 16 * 1024 * 1024;
/// How long a refused body may take to arrive before the connection is closed.
const DRAIN_TIME: Duration = Duration::from_secs(5);
/// Bytes of bodies being read at once, over every request of a channel.
const BUDGET_BYTES: usize = 64 * 1024 * 1024;
/// The budget is counted in KiB.
const UNIT: usize = 1024;

/// Why a body was not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    #[error("request body is larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the request body did not arrive within {0:?}; send it at once")]
    Timeout(Duration),
    #[error("too many request bodies are arriving at once; retry shortly")]
    Busy,
    #[error("could not read the request body: {0}")]
    Read(String),
}

/// How a channel reads bodies: the limits and the shared budget.
pub(crate) struct BodyReader {
    max_bytes: usize,
    timeout: Duration,
    budget: Arc<Semaphore>,
}

/// A body read in full, holding its share of the budget until dropped.
#[derive(Debug)]
pub(crate) struct ReadBody {
    pub bytes: Bytes,
    _budget: Option<OwnedSemaphorePermit>,
}

impl BodyReader {
    pub(crate) fn new(max_bytes: usize, timeout: Duration) -> BodyReader {
        let units = BUDGET_BYTES.max(max_bytes).div_ceil(UNIT).min(Semaphore::MAX_PERMITS);
        BodyReader { max_bytes, timeout, budget: Arc::new(Semaphore::new(units)) }
    }

    /// Reads the whole body, refusing it as soon as it is known to exceed the
    /// limit: from `Content-Length` before reading, and while reading otherwise.
    ///
    /// A refused body is still read to its end and thrown away (at most
    /// [`DRAIN_BYTES`], for at most [`DRAIN_TIME`]) before the 413 goes out, as
    /// nginx's lingering close does: most HTTP clients (Python's urllib and
    /// requests among them) write the whole body before reading, and a server
    /// that answered and closed early would leave them a reset connection
    /// instead of the answer. A client that sent `Expect: 100-continue` has not
    /// sent the body yet and is answered at once.
    pub(crate) async fn read(&self, headers: &HeaderMap, body: Body) -> Result<ReadBody, BodyError> {
        let declared = headers.get(header::CONTENT_LENGTH).and_then(|value| value.to_str().ok());
        let declared = declared.and_then(|value| value.trim().parse::<u64>().ok());
        let mut chunks = body.into_data_stream();
        if let Some(length) = declared
            && length > self.max_bytes as u64
        {
            if length <= DRAIN_BYTES && !expects_continue(headers) {
                drain(&mut chunks).await;
            }
            return Err(BodyError::TooLarge { limit: self.max_bytes });
        }
        match tokio::time::timeout(self.timeout, self.collect(&mut chunks)).await {
            Ok(read) => read,
            Err(_) => Err(BodyError::Timeout(self.timeout)),
        }
    }

    async fn collect(&self, chunks: &mut BodyDataStream) -> Result<ReadBody, BodyError> {
        let mut buffer = Vec::new();
        let mut held: Option<OwnedSemaphorePermit> = None;
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|err| BodyError::Read(err.to_string()))?;
            let length = buffer.len() + chunk.len();
            if length > self.max_bytes {
                drain(chunks).await;
                return Err(BodyError::TooLarge { limit: self.max_bytes });
            }
            let units = length.div_ceil(UNIT) as u32;
            let have = held.as_ref().map_or(0, |permit| permit.num_permits() as u32);
            if units > have {
                let more = self.budget.clone().try_acquire_many_owned(units - have).map_err(|_| BodyError::Busy)?;
                match &mut held {
                    Some(permit) => permit.merge(more),
                    None => held = Some(more),
                }
            }
            buffer.extend_from_slice(&chunk);
        }
        Ok(ReadBody { bytes: Bytes::from(buffer), _budget: held })
    }
}

fn expects_continue(headers: &HeaderMap) -> bool {
    headers.get(header::EXPECT).is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// Reads and drops what is left of a refused body, within [`DRAIN_BYTES`] and [`DRAIN_TIME`];
/// past either the connection is closed under the client, which is all a flood deserves.
async fn drain(chunks: &mut BodyDataStream) {
    let discard = async {
        let mut read = 0u64;
        while let Some(Ok(chunk)) = chunks.next().await {
            read += chunk.len() as u64;
            if read > DRAIN_BYTES {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, discard).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streamed(chunks: Vec<&'static [u8]>) -> Body {
        Body::from_stream(futures::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>)))
    }

    #[tokio::test]
    async fn bodies_read_at_once_share_one_budget_and_give_it_back() {
        let reader = BodyReader::new(BUDGET_BYTES, Duration::from_secs(5));
        let big: &'static [u8] = Box::leak(vec![b'x'; BUDGET_BYTES - UNIT].into_boxed_slice());
        let first = reader.read(&HeaderMap::new(), streamed(vec![big])).await.expect("within the budget");

        let over = reader.read(&HeaderMap::new(), streamed(vec![b"ab", &[b'y'; 2 * UNIT]])).await;
        assert!(matches!(over, Err(BodyError::Busy)), "{over:?}");
        let small = reader.read(&HeaderMap::new(), streamed(vec![b"{}"])).await;
        assert!(small.is_ok(), "one unit was left");

        drop((first, small));
        let after = reader.read(&HeaderMap::new(), streamed(vec![&[b'y'; 2 * UNIT]])).await;
        assert!(after.is_ok(), "the budget came back: {:?}", after.err());
    }
}
