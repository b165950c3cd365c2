//! A write deadline for admin connections: a write that makes no progress for `timeout` fails
//! with `TimedOut`, so hyper drops the connection and its slot (`ADMIN_CONNECTIONS_MAX`).
//!
//! hyper bounds the wait for a request head (`header_read_timeout`) but not a write: a client
//! that pipelines requests and never reads the answers would otherwise keep its connection, and
//! 1024 of them would leave `/healthz`, `/readyz` and `/metrics` unanswered (found by an audit;
//! the ingress has the same bound, `server.read_timeout`, checklist item 8).

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// `inner` whose writes (and flushes) fail with `io::ErrorKind::TimedOut` once one has been
/// pending, with no byte taken, for `timeout`. Reads pass through unchanged.
pub(super) struct WriteDeadline<T> {
    inner: T,
    timeout: Duration,
    /// Armed when a write first returns `Pending`; disarmed by any progress.
    deadline: Option<Pin<Box<Sleep>>>,
}

impl<T> WriteDeadline<T> {
    pub(super) fn new(inner: T, timeout: Duration) -> Self {
        WriteDeadline { inner, timeout, deadline: None }
    }

    /// After a pending write: starts the deadline if not running, and fails once it passed.
    fn pending<R>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        let timeout = self.timeout;
        let deadline = self.deadline.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => {
                let message = format!("the client took no answer bytes for {timeout:?}");
                Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, message)))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn progressed<R>(&mut self, ready: io::Result<R>) -> Poll<io::Result<R>> {
        self.deadline = None;
        Poll::Ready(ready)
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteDeadline<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Ready(r) => self.progressed(r),
            Poll::Pending => self.pending(cx),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(r) => self.progressed(r),
            Poll::Pending => self.pending(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Ready(r) => self.progressed(r),
            Poll::Pending => self.pending(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_shutdown(cx) {
            Poll::Ready(r) => self.progressed(r),
            Poll::Pending => self.pending(cx),
        }
    }
}
