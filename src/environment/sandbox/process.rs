//! The output of a sandboxed command, capped: the host reads at most
//! [`super::SandboxLimits::max_output_bytes`] of each of its pipes.
//!
//! The command itself is a [`LocalProcess`](crate::environment::LocalProcess):
//! the host's child is the sandbox's outer process (A in [`super::child`]),
//! which leads a process group holding the sandbox's PID 1 and, unless they
//! moved, everything below. A signal to the group reaches them all; if any
//! escaped the group, they still die with PID 1, which dies with A.

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, ReadBuf};

/// Reads at most `left` bytes, then closes the pipe: a command that keeps
/// writing gets `EPIPE` instead of filling the host's memory.
pub(super) struct Capped<R> {
    inner: Option<R>,
    left: u64,
}

impl<R> Capped<R> {
    pub(super) fn new(inner: R, limit: u64) -> Capped<R> {
        Capped { inner: Some(inner), left: limit }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Capped<R> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let Some(inner) = this.inner.as_mut() else { return Poll::Ready(Ok(())) };
        if this.left == 0 {
            this.inner = None;
            return Poll::Ready(Ok(()));
        }
        let read = if buf.remaining() as u64 <= this.left {
            let before = buf.filled().len();
            ready!(Pin::new(inner).poll_read(cx, buf))?;
            buf.filled().len() - before
        } else {
            let mut scratch = [0u8; 8192];
            let len = usize::try_from(this.left).unwrap_or(usize::MAX).min(scratch.len());
            let mut small = ReadBuf::new(&mut scratch[..len]);
            ready!(Pin::new(inner).poll_read(cx, &mut small))?;
            buf.put_slice(small.filled());
            small.filled().len()
        };
        this.left = this.left.saturating_sub(read as u64);
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn output_past_the_cap_is_cut_and_the_pipe_closed() {
        let mut capped = Capped::new(&b"0123456789"[..], 4);
        let mut text = String::new();
        capped.read_to_string(&mut text).await.unwrap();
        assert_eq!(text, "0123");
        assert!(capped.inner.is_none(), "the source is dropped");
    }
}
