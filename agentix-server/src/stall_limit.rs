//! [`StallLimit`]: a connection that gives up on a peer which takes no
//! bytes for too long.
//!
//! Socket.IO's writer task, once a websocket is upgraded, awaits each write
//! to the peer with no deadline, and it owns half of the connection: when
//! a host stops reading, the heartbeat closes its session, but the writer
//! stays parked on the full socket, the connection is never dropped, and
//! the host's own sends then block for ever on a server that no longer
//! reads them. Wrapped in a [`StallLimit`], a write that makes no progress
//! for the limit fails, and from then on every read and write fails at
//! once: the writer's remaining sends fail, both halves end, and the
//! connection is closed.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::connection_writes::ConnectionWrites;

/// A connection whose writes fail once one has made no progress for the
/// limit; after that, the whole connection counts as gone.
pub(crate) struct StallLimit<S> {
    inner: S,
    limit: Duration,
    /// When the write waiting now first found the socket full.
    stalled_since: Option<Instant>,
    /// Wakes the waiting writer by the time the limit has passed. It is
    /// moved only when it would fire too late or has fired early, so a
    /// socket that fills and drains many times a second (a large transfer)
    /// costs no timer work per wait.
    timer: Pin<Box<Sleep>>,
    /// The peer took nothing for the limit.
    gone: bool,
    /// The reader waiting on the socket, woken when the peer counts as gone
    /// so that it ends too.
    reader: Option<Waker>,
    /// Bytes written so far, for those who watch the peer's pace.
    writes: ConnectionWrites,
}

impl<S> StallLimit<S> {
    /// Wraps `inner` (inside a tokio runtime): a write that makes no
    /// progress for `limit` ends the connection.
    pub(crate) fn new(inner: S, limit: Duration) -> Self {
        StallLimit {
            inner,
            limit,
            stalled_since: None,
            timer: Box::pin(tokio::time::sleep(limit)),
            gone: false,
            reader: None,
            writes: ConnectionWrites::default(),
        }
    }

    /// The count of bytes this connection writes.
    pub(crate) fn writes(&self) -> &ConnectionWrites {
        &self.writes
    }

    fn gone_error(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the peer took no bytes for {:?}", self.limit),
        )
    }

    /// What a write that returned `poll` means under the limit.
    fn check<T>(&mut self, poll: Poll<io::Result<T>>, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.stalled_since = None;
            return poll;
        }
        let deadline = *self.stalled_since.get_or_insert_with(Instant::now) + self.limit;
        loop {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let at = self.timer.deadline();
            if at <= now || at > deadline {
                self.timer.as_mut().reset(deadline);
            }
            if self.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            // It fired for an earlier wait: look at the clock again.
        }
        self.stalled_since = None;
        self.gone = true;
        if let Some(reader) = self.reader.take() {
            reader.wake();
        }
        tracing::debug!(
            "closing a connection whose peer took no bytes for {:?}",
            self.limit
        );
        Poll::Ready(Err(self.gone_error()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for StallLimit<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.gone {
            return Poll::Ready(Err(this.gone_error()));
        }
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        if poll.is_pending() {
            match &this.reader {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                _ => this.reader = Some(cx.waker().clone()),
            }
        }
        poll
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for StallLimit<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.gone {
            return Poll::Ready(Err(this.gone_error()));
        }
        let poll = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(written)) = poll {
            this.writes.add(written);
        }
        this.check(poll, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.gone {
            return Poll::Ready(Err(this.gone_error()));
        }
        let poll = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(written)) = poll {
            this.writes.add(written);
        }
        this.check(poll, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.gone {
            return Poll::Ready(Err(this.gone_error()));
        }
        let poll = Pin::new(&mut this.inner).poll_flush(cx);
        this.check(poll, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.gone {
            // Nothing more can reach the peer; dropping the connection
            // closes it.
            return Poll::Ready(Ok(()));
        }
        let poll = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.check(poll, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_peer_that_reads_nothing_ends_the_connection_both_ways() {
        let (ours, _theirs) = tokio::io::duplex(1024);
        let (mut read, mut write) =
            tokio::io::split(StallLimit::new(ours, Duration::from_millis(50)));
        let reading = tokio::spawn(async move { read.read(&mut [0; 16]).await });
        let err = tokio::time::timeout(Duration::from_secs(10), write.write_all(&[7; 4096]))
            .await
            .expect("a stalled write fails")
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        // The reader, parked on a socket that will never speak, ends too.
        let read = tokio::time::timeout(Duration::from_secs(10), reading)
            .await
            .expect("the reader is woken")
            .unwrap();
        assert_eq!(read.unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert!(write.write(&[1]).await.is_err());
    }

    #[tokio::test]
    async fn a_slow_reader_is_not_a_stall() {
        let (ours, mut theirs) = tokio::io::duplex(1024);
        let mut ours = StallLimit::new(ours, Duration::from_millis(200));
        let drain = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut chunk = [0; 256];
            loop {
                tokio::time::sleep(Duration::from_millis(20)).await;
                match theirs.read(&mut chunk).await {
                    Ok(0) | Err(_) => return got,
                    Ok(n) => got.extend_from_slice(&chunk[..n]),
                }
            }
        });
        // 8 KiB through a 1 KiB pipe read 256 bytes every 20 ms: about
        // 640 ms in all, each wait far below the limit.
        let data: Vec<u8> = (0..8192).map(|i| i as u8).collect();
        let writes = ours.writes().clone();
        ours.write_all(&data).await.unwrap();
        ours.shutdown().await.unwrap();
        drop(ours);
        assert_eq!(drain.await.unwrap(), data);
        assert_eq!(writes.total(), 8192, "every byte written is counted once");
    }
}
