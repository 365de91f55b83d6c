//! [`QuietUnixStream`]: a Unix stream socket that the peer's reads do not
//! wake.
//!
//! Linux wakes everyone waiting on a Unix stream socket for "writable"
//! each time its peer reads from it, whether or not the socket was ever
//! full. A tokio `UnixStream` waits for reading and writing at once, so
//! every message the peer took woke this side's runtime from its sleep to
//! find nothing to do: one wasted wake-up per call at the host and one at
//! the server, in a call that needs only two real ones. This stream
//! waits for reading only. A write is tried at once; only one that finds
//! the socket full registers a second descriptor for the same socket, for
//! writing, until a write goes through again without waiting.

use std::io::{self, IoSlice, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// A Unix stream registered with the runtime for reading only.
#[derive(Debug)]
pub struct QuietUnixStream {
    stream: AsyncFd<UnixStream>,
    /// A duplicate of the socket's descriptor, registered for writing
    /// while a write waits for room.
    waiting_write: Option<AsyncFd<OwnedFd>>,
}

impl QuietUnixStream {
    /// Wraps `stream` (made non-blocking here); must be called within a
    /// tokio runtime.
    pub fn new(stream: UnixStream) -> io::Result<Self> {
        stream.set_nonblocking(true)?;
        // SAFETY: the stream owns its descriptor, which stays open and the
        // same until the AsyncFd drops it.
        let stream = unsafe { AsyncFd::register_with_interest(stream, Interest::READABLE) }?;
        Ok(QuietUnixStream {
            stream,
            waiting_write: None,
        })
    }

    /// Takes over a tokio `UnixStream`.
    pub fn from_tokio(stream: tokio::net::UnixStream) -> io::Result<Self> {
        QuietUnixStream::new(stream.into_std()?)
    }

    /// Runs `write` until the socket takes some bytes, waiting for room
    /// when it is full.
    fn poll_write_with(
        &mut self,
        cx: &mut Context<'_>,
        mut write: impl FnMut(&UnixStream) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        if self.waiting_write.is_none() {
            match write(self.stream.get_ref()) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                done => return Poll::Ready(done),
            }
            // Registered after the refusal: the registration reports the
            // socket's state at once, so room made in between is not missed.
            let dup = self.stream.get_ref().as_fd().try_clone_to_owned()?;
            // SAFETY: as in `new`, the OwnedFd owns the duplicate.
            let waiting = unsafe { AsyncFd::register_with_interest(dup, Interest::WRITABLE) }?;
            self.waiting_write = Some(waiting);
        }
        let waiting = self.waiting_write.as_ref().expect("registered above");
        loop {
            let mut guard = ready!(waiting.poll_write_ready(cx))?;
            if let Ok(done) = guard.try_io(|_| write(self.stream.get_ref())) {
                // Room again: stop listening for it, or every read of the
                // peer would wake this side once more.
                self.waiting_write = None;
                return Poll::Ready(done);
            }
        }
    }
}

impl AsFd for QuietUnixStream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream.get_ref().as_fd()
    }
}

impl AsyncRead for QuietUnixStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            let mut guard = ready!(this.stream.poll_read_ready(cx))?;
            // SAFETY: the kernel only writes into the unfilled part, and
            // `assume_init` covers exactly the bytes it reports.
            let (room, room_len) = {
                let unfilled = unsafe { buf.unfilled_mut() };
                (unfilled.as_mut_ptr(), unfilled.len())
            };
            let read = guard.try_io(|inner| {
                // SAFETY: a valid pointer and length into `buf`'s spare room.
                let n =
                    unsafe { libc::recv(inner.get_ref().as_raw_fd(), room.cast(), room_len, 0) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match read {
                Ok(Ok(n)) => {
                    // SAFETY: recv wrote these `n` bytes.
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for QuietUnixStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        // std's socket writes pass MSG_NOSIGNAL: a gone peer is an error,
        // never a SIGPIPE.
        self.get_mut()
            .poll_write_with(cx, |mut stream| stream.write(buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .poll_write_with(cx, |mut stream| stream.write_vectored(bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Nothing is buffered here.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.stream.get_ref().shutdown(std::net::Shutdown::Write))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn bytes_cross_both_ways_and_a_full_socket_waits_for_room() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut a = QuietUnixStream::new(a).unwrap();
        let mut b = QuietUnixStream::new(b).unwrap();
        // Far more than any socket buffer: the writer must wait for the
        // reader several times, and every byte must arrive in order.
        let sent: Vec<u8> = (0..(8usize << 20)).map(|i| (i % 251) as u8).collect();
        let expected = sent.clone();
        let writer = tokio::spawn(async move {
            a.write_all(&sent).await.unwrap();
            a.shutdown().await.unwrap();
            a
        });
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.unwrap();
        assert_eq!(got.len(), expected.len());
        assert!(got == expected, "bytes differ");
        let mut a = writer.await.unwrap();
        b.write_all(b"back").await.unwrap();
        let mut back = [0u8; 4];
        a.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"back");
    }

    #[tokio::test]
    async fn a_write_to_a_closed_peer_is_an_error_not_a_signal() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut a = QuietUnixStream::new(a).unwrap();
        drop(b);
        let err = a.write_all(b"anyone?").await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
        let mut buf = [0u8; 8];
        assert_eq!(a.read(&mut buf).await.unwrap(), 0, "end of stream");
    }

    /// Voluntary context switches of thread `tid` of this process so far.
    fn sleeps_of(tid: i32) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// How often a runtime thread holding one end of a socket, and waiting
    /// to read from it, wakes while the peer reads 100 messages it sent.
    fn wakes_while_the_peer_reads(quiet: bool) -> u64 {
        use std::io::Read;
        use std::time::Duration;
        let (a, mut b) = UnixStream::pair().unwrap();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let runtime = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let mut buf = [0u8; 1];
                if quiet {
                    let mut a = QuietUnixStream::new(a).unwrap();
                    for _ in 0..100 {
                        a.write_all(b"x").await.unwrap();
                    }
                    ready_tx.send(unsafe { libc::gettid() }).unwrap();
                    a.read(&mut buf).await.unwrap()
                } else {
                    a.set_nonblocking(true).unwrap();
                    let mut a = tokio::net::UnixStream::from_std(a).unwrap();
                    for _ in 0..100 {
                        a.write_all(b"x").await.unwrap();
                    }
                    ready_tx.send(unsafe { libc::gettid() }).unwrap();
                    a.read(&mut buf).await.unwrap()
                }
            })
        });
        let tid = ready_rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let before = sleeps_of(tid);
        let mut byte = [0u8; 1];
        for _ in 0..100 {
            // One message per read, each freeing its own buffer.
            b.read_exact(&mut byte).unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(50));
        let wakes = sleeps_of(tid) - before;
        std::io::Write::write_all(&mut b, b"y").unwrap();
        assert_eq!(runtime.join().unwrap(), 1);
        wakes
    }

    #[test]
    fn the_peers_reads_leave_this_side_asleep() {
        // The kernel's behaviour this type exists for: a stream that also
        // waits for writing is woken by each read of its peer.
        let plain = wakes_while_the_peer_reads(false);
        assert!(plain >= 50, "a plain tokio stream woke {plain} times");
        let quiet = wakes_while_the_peer_reads(true);
        assert!(quiet <= 5, "woke {quiet} times for the peer's reads");
    }
}
