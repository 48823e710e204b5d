//! The output of a sandboxed command, capped: the host reads at most
//! [`super::SandboxLimits::max_output_bytes`] of each of its pipes; and
//! noted: what the host says about the command's disk (`quota.rs`) comes
//! before and after it.
//!
//! The command itself is a [`LocalProcess`](crate::environment::LocalProcess):
//! the host's child is the sandbox's outer process (A in [`super::child`]),
//! which leads a process group holding the sandbox's PID 1 and, unless they
//! moved, everything below. A signal to the group reaches them all; if any
//! escaped the group, they still die with PID 1, which dies with A.

use parking_lot::Mutex;
use std::pin::Pin;
use std::sync::Arc;
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

/// What the host adds to a command's output: a line before it (why files
/// cannot grow), and one after it, when the command was stopped for the
/// disk (set in `note` before the kill, so it is there by the end of the
/// output).
pub(super) struct Noted<R> {
    before: Vec<u8>,
    inner: R,
    note: Arc<Mutex<Option<String>>>,
    after: Option<Vec<u8>>,
}

impl<R> Noted<R> {
    pub(super) fn new(before: Option<String>, inner: R, note: Arc<Mutex<Option<String>>>) -> Noted<R> {
        Noted { before: before.map(String::into_bytes).unwrap_or_default(), inner, note, after: None }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Noted<R> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if !this.before.is_empty() {
            let n = this.before.len().min(buf.remaining());
            buf.put_slice(&this.before[..n]);
            this.before.drain(..n);
            return Poll::Ready(Ok(()));
        }
        if this.after.is_none() {
            let before = buf.filled().len();
            ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
            if buf.filled().len() > before || buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            let note = this.note.lock().take();
            this.after = Some(note.map(String::into_bytes).unwrap_or_default());
        }
        let after = this.after.get_or_insert_with(Vec::new);
        let n = after.len().min(buf.remaining());
        buf.put_slice(&after[..n]);
        after.drain(..n);
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn notes_come_before_and_after_the_output() {
        let note = Arc::new(Mutex::new(Some("\nstopped\n".to_string())));
        let mut noted = Noted::new(Some("full\n".into()), &b"output"[..], note);
        let mut text = String::new();
        noted.read_to_string(&mut text).await.unwrap();
        assert_eq!(text, "full\noutput\nstopped\n");
        let mut plain = Noted::new(None, &b"output"[..], Arc::new(Mutex::new(None)));
        let mut text = String::new();
        plain.read_to_string(&mut text).await.unwrap();
        assert_eq!(text, "output");
    }

    #[tokio::test]
    async fn output_past_the_cap_is_cut_and_the_pipe_closed() {
        let mut capped = Capped::new(&b"0123456789"[..], 4);
        let mut text = String::new();
        capped.read_to_string(&mut text).await.unwrap();
        assert_eq!(text, "0123");
        assert!(capped.inner.is_none(), "the source is dropped");
    }
}
