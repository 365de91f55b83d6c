//! Length-prefixed CBOR framing for the server <-> worker pipes.
//!
//! A frame on the pipe is a 4-byte big-endian length followed by that many
//! bytes of CBOR encoding one [`Frame`]. A frame whose CBOR does not decode is
//! skipped (the length tells where the next one starts); a length past the
//! limit means the stream can no longer be trusted, so the reader stops.

use std::io;

use bytes::BufMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::bulk_lane::BulkLane;
use crate::wire::Frame;

/// Frames from this size on count as large buffers for the allocator's
/// trimming (see [`crate::process::tune_allocator`]).
const LARGE_FRAME: usize = 256 << 10;

/// Largest frame buffer a reader or writer keeps for the next frame: a
/// part and its envelope fit.
const KEPT_BODY_UP_TO: usize = 4 << 20;

/// Default upper bound on one frame's CBOR body: a 256 MiB payload (the
/// default message limit) and room for its envelope.
pub const DEFAULT_MAX_FRAME: usize = (256 << 20) + (1 << 20);

/// Why reading a frame failed.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The length prefix is larger than the limit; the stream is unusable.
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    Oversized {
        /// Announced length.
        len: usize,
        /// Configured limit.
        max: usize,
    },
    /// The body is not a valid frame; the stream stays usable.
    #[error("malformed frame: {why}")]
    Malformed {
        /// What did not decode.
        why: String,
        /// The call id the frame names, if one could be read: its call
        /// must end, since this may have been its last frame.
        call: Option<u64>,
    },
    /// The stream ended in the middle of a frame.
    #[error("stream ended inside a frame ({got} of {want} bytes)")]
    Truncated {
        /// Bytes received.
        got: usize,
        /// Bytes announced.
        want: usize,
    },
    /// The pipe failed.
    #[error("pipe error: {0}")]
    Io(#[from] io::Error),
}

impl FrameError {
    /// Whether the reader can go on to the next frame after this error.
    pub fn is_recoverable(&self) -> bool {
        matches!(self, FrameError::Malformed { .. })
    }
}

/// Appends `frame`, length prefix included, to `out`.
pub fn encode_into(frame: &Frame, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    // Writing into a Vec cannot fail, and every Frame field is serialisable.
    ciborium::into_writer(frame, &mut *out).expect("frames always encode");
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

/// Decodes one frame from the front of `buf`.
///
/// Returns `Ok(None)` when `buf` holds less than one whole frame, else the
/// frame and the number of bytes it used.
pub fn decode(buf: &[u8], max: usize) -> Result<Option<(Frame, usize)>, FrameError> {
    let Some(prefix) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes(prefix.try_into().expect("4 bytes")) as usize;
    if len > max {
        return Err(FrameError::Oversized { len, max });
    }
    let Some(body) = buf.get(4..4 + len) else {
        return Ok(None);
    };
    Ok(Some((decode_body(body)?, 4 + len)))
}

fn decode_body(body: &[u8]) -> Result<Frame, FrameError> {
    ciborium::from_reader(body).map_err(|e| FrameError::Malformed {
        why: crate::cbor::decode_error_text(e),
        call: call_id_of(body),
    })
}

/// The `id` of a frame that did not decode as a [`Frame`], if its body is
/// at least CBOR of the frames' shape: `{variant: {"id": N, ..}}`.
fn call_id_of(body: &[u8]) -> Option<u64> {
    use ciborium::Value;
    let Ok(Value::Map(outer)) = ciborium::from_reader::<Value, _>(body) else {
        return None;
    };
    let [(_, Value::Map(fields))] = outer.as_slice() else {
        return None;
    };
    fields.iter().find_map(|(k, v)| match (k, v) {
        (Value::Text(k), Value::Integer(id)) if k == "id" => u64::try_from(*id).ok(),
        _ => None,
    })
}

/// Whether a reader or writer keeps its buffer after a frame (or write) of
/// `used` bytes. Large frames reuse one buffer while they flow, since a
/// fresh one is faulted in page by page; the first small one after them
/// gives it back, so an idle pipe end holds nothing large.
fn keep_buffer(used: usize, capacity: usize) -> bool {
    let small_after_large = used < LARGE_FRAME && capacity >= LARGE_FRAME;
    !small_after_large && capacity <= KEPT_BODY_UP_TO
}

/// Reads frames from a pipe.
///
/// [`FrameReader::next`] is cancel-safe: every byte read is recorded in the
/// reader before the next await, so a `select!` that drops the future
/// mid-frame (the worker's and the server's loops do, whenever another branch
/// fires first) resumes where it left off instead of losing the bytes and
/// reading the rest of a body as a length prefix.
pub struct FrameReader<R> {
    inner: BufReader<R>,
    max: usize,
    prefix: [u8; 4],
    prefix_got: usize,
    /// The body's announced length, once the prefix is complete.
    body_len: Option<usize>,
    /// The body read so far: its length is the reader's progress.
    body: Vec<u8>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Wraps `reader`, refusing frames larger than `max` bytes.
    pub fn new(reader: R, max: usize) -> Self {
        FrameReader {
            inner: BufReader::with_capacity(64 * 1024, reader),
            max,
            prefix: [0; 4],
            prefix_got: 0,
            body_len: None,
            body: Vec::new(),
        }
    }

    /// The next frame, or `Ok(None)` at a clean end of stream.
    pub async fn next(&mut self) -> Result<Option<Frame>, FrameError> {
        while self.prefix_got < 4 {
            let n = self.inner.read(&mut self.prefix[self.prefix_got..]).await?;
            if n == 0 {
                return if self.prefix_got == 0 {
                    Ok(None)
                } else {
                    Err(FrameError::Truncated {
                        got: self.prefix_got,
                        want: 4,
                    })
                };
            }
            self.prefix_got += n;
        }
        let len = match self.body_len {
            Some(len) => len,
            None => {
                let len = u32::from_be_bytes(self.prefix) as usize;
                if len > self.max {
                    return Err(FrameError::Oversized { len, max: self.max });
                }
                self.body.clear();
                // Room, not zeroes: the pipe's bytes go straight into the
                // spare capacity (zeroing a 1 MiB body first was a pass
                // over it of its own).
                self.body.reserve(len);
                self.body_len = Some(len);
                len
            }
        };
        while self.body.len() < len {
            // Cancel-safe: `read_buf` records what it read in `body` before
            // it returns, and reads nothing when it does not complete.
            let want = len - self.body.len();
            let mut room = (&mut self.body).limit(want);
            let n = self.inner.read_buf(&mut room).await?;
            if n == 0 {
                return Err(FrameError::Truncated {
                    got: self.body.len(),
                    want: len,
                });
            }
        }
        self.prefix_got = 0;
        self.body_len = None;
        let frame = decode_body(&self.body);
        if len >= LARGE_FRAME {
            crate::process::note_large_buffer();
        }
        if !keep_buffer(len, self.body.capacity()) {
            self.body = Vec::new();
        }
        frame.map(Some)
    }
}

/// A queue of frames waiting for the pipe: a bounded channel where the
/// producer can wait (worker), an unbounded one where it cannot (an actor).
pub trait FrameQueue {
    /// The next frame; `None` once every sender is gone.
    fn recv(&mut self) -> impl std::future::Future<Output = Option<Frame>> + Send;
    /// A frame that is already queued, if any.
    fn try_recv(&mut self) -> Option<Frame>;
    /// Whether nothing is queued right now.
    fn is_empty(&self) -> bool;
}

impl FrameQueue for mpsc::Receiver<Frame> {
    fn recv(&mut self) -> impl std::future::Future<Output = Option<Frame>> + Send {
        mpsc::Receiver::recv(self)
    }
    fn try_recv(&mut self) -> Option<Frame> {
        mpsc::Receiver::try_recv(self).ok()
    }
    fn is_empty(&self) -> bool {
        mpsc::Receiver::is_empty(self)
    }
}

impl FrameQueue for mpsc::UnboundedReceiver<Frame> {
    fn recv(&mut self) -> impl std::future::Future<Output = Option<Frame>> + Send {
        mpsc::UnboundedReceiver::recv(self)
    }
    fn try_recv(&mut self) -> Option<Frame> {
        mpsc::UnboundedReceiver::try_recv(self).ok()
    }
    fn is_empty(&self) -> bool {
        mpsc::UnboundedReceiver::is_empty(self)
    }
}

/// Writes every frame from `rx` to `writer`, batching while more are queued.
///
/// Parts of large payloads wait in a [`BulkLane`] and go out one per write,
/// after whatever small frames are queued: a large transfer never holds a
/// small call's frames back by more than one part.
///
/// Ends when all senders are gone or the pipe fails; the error is returned.
pub async fn write_frames<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut rx: impl FrameQueue,
) -> io::Result<()> {
    let mut bulk = BulkLane::default();
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut open = true;
    while open || !bulk.is_empty() {
        buf.clear();
        if open && bulk.is_empty() {
            match rx.recv().await {
                Some(frame) => {
                    if let Some(frame) = bulk.route(frame) {
                        encode_into(&frame, &mut buf);
                    }
                }
                None => open = false,
            }
        }
        // Batch whatever is already queued into one write.
        while open && buf.len() < 1 << 20 {
            match rx.try_recv() {
                Some(frame) => {
                    if let Some(frame) = bulk.route(frame) {
                        encode_into(&frame, &mut buf);
                    }
                }
                None => break,
            }
        }
        if buf.len() < 1 << 20 {
            if let Some(frame) = bulk.pop() {
                encode_into(&frame, &mut buf);
            }
        }
        if buf.is_empty() {
            continue;
        }
        if buf.len() >= LARGE_FRAME {
            crate::process::note_large_buffer();
        }
        writer.write_all(&buf).await?;
        if !keep_buffer(buf.len(), buf.capacity()) {
            buf = Vec::with_capacity(64 * 1024);
        }
    }
    writer.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_bytes::ByteBuf;

    fn call(id: u64) -> Frame {
        Frame::Call {
            id,
            target: "app::run".into(),
            args: ByteBuf::from(vec![0x1e, 0, 255]),
            stream: None,
            trace: None,
        }
    }

    #[test]
    fn a_buffer_is_kept_while_large_frames_flow_and_given_back_after() {
        let part = 1 << 20;
        assert!(keep_buffer(part, part), "large frames reuse the buffer");
        assert!(keep_buffer(100, 64 << 10), "a small buffer stays");
        assert!(!keep_buffer(100, part), "a small frame after large ones");
        assert!(!keep_buffer(8 << 20, 8 << 20), "past the largest kept");
    }

    #[test]
    fn round_trip_and_partial_input() {
        let mut buf = Vec::new();
        encode_into(&call(1), &mut buf);
        encode_into(&Frame::Cancel { id: 2 }, &mut buf);
        let (first, used) = decode(&buf, DEFAULT_MAX_FRAME).unwrap().unwrap();
        assert_eq!(first, call(1));
        let (second, used2) = decode(&buf[used..], DEFAULT_MAX_FRAME).unwrap().unwrap();
        assert_eq!(second, Frame::Cancel { id: 2 });
        assert_eq!(used + used2, buf.len());
        // Every strict prefix of a frame is "not yet", never an error.
        for cut in 0..used {
            assert!(decode(&buf[..cut], DEFAULT_MAX_FRAME).unwrap().is_none());
        }
    }

    #[test]
    fn oversized_prefix_is_refused_before_reading_the_body() {
        let buf = [0xff, 0xff, 0xff, 0xff, 1, 2, 3];
        let err = decode(&buf, 1024).unwrap_err();
        assert!(matches!(
            err,
            FrameError::Oversized {
                len: 0xffff_ffff,
                max: 1024
            }
        ));
        assert!(!err.is_recoverable());
    }

    #[test]
    fn garbage_body_is_malformed_and_recoverable() {
        let mut buf = vec![0, 0, 0, 3, 0xff, 0xfe, 0xfd];
        let err = decode(&buf, 1024).unwrap_err();
        assert!(err.is_recoverable(), "{err}");
        // A valid CBOR value that is not a frame is malformed too.
        buf.clear();
        let body = crate::cbor::to_vec(&"hello").unwrap();
        buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
        buf.extend_from_slice(&body);
        assert!(matches!(
            decode(&buf, 1024),
            Err(FrameError::Malformed { call: None, .. })
        ));
        // A reply whose value is not bytes still names its call.
        buf.clear();
        let bad = ciborium::Value::Map(vec![(
            ciborium::Value::Text("result".into()),
            ciborium::Value::Map(vec![
                (
                    ciborium::Value::Text("id".into()),
                    ciborium::Value::Integer(7.into()),
                ),
                (
                    ciborium::Value::Text("value".into()),
                    ciborium::Value::Text("no".into()),
                ),
            ]),
        )]);
        let body = crate::cbor::to_vec(&bad).unwrap();
        buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
        buf.extend_from_slice(&body);
        assert!(matches!(
            decode(&buf, 1024),
            Err(FrameError::Malformed { call: Some(7), .. })
        ));
    }

    #[tokio::test]
    async fn reader_skips_a_bad_frame_and_reports_truncation() {
        let mut buf = Vec::new();
        encode_into(&call(1), &mut buf);
        buf.extend_from_slice(&[0, 0, 0, 2, 0xff, 0xff]);
        encode_into(&call(3), &mut buf);
        buf.extend_from_slice(&[0, 0, 0, 10, 1, 2]);
        let mut reader = FrameReader::new(&buf[..], 1024);
        assert_eq!(reader.next().await.unwrap(), Some(call(1)));
        assert!(reader.next().await.unwrap_err().is_recoverable());
        assert_eq!(reader.next().await.unwrap(), Some(call(3)));
        assert!(matches!(
            reader.next().await,
            Err(FrameError::Truncated { got: 2, want: 10 })
        ));
    }

    #[tokio::test]
    async fn reader_ends_cleanly_at_a_frame_boundary() {
        let mut buf = Vec::new();
        encode_into(&Frame::Cancel { id: 9 }, &mut buf);
        let mut reader = FrameReader::new(&buf[..], 1024);
        assert_eq!(reader.next().await.unwrap(), Some(Frame::Cancel { id: 9 }));
        assert!(reader.next().await.unwrap().is_none());
        let mut reader = FrameReader::new(&buf[..2], 1024);
        assert!(matches!(
            reader.next().await,
            Err(FrameError::Truncated { got: 2, want: 4 })
        ));
    }

    #[tokio::test]
    async fn a_reader_dropped_mid_frame_resumes_without_losing_bytes() {
        // Large frames trickle through a small pipe while the read is raced
        // against a timer, so nearly every `next` is dropped half way.
        let frames: Vec<Frame> = (0..20)
            .map(|id| Frame::Result {
                id,
                value: ByteBuf::from(vec![id as u8; 300_000 + id as usize]),
            })
            .collect();
        let mut bytes = Vec::new();
        for f in &frames {
            encode_into(f, &mut bytes);
        }
        let (mut a, b) = tokio::io::duplex(4096);
        let feeder = tokio::spawn(async move {
            for piece in bytes.chunks(1500) {
                a.write_all(piece).await.unwrap();
                tokio::task::yield_now().await;
            }
        });
        let mut reader = FrameReader::new(b, DEFAULT_MAX_FRAME);
        let (mut got, mut dropped) = (Vec::new(), 0);
        while got.len() < frames.len() {
            let tick = tokio::time::sleep(std::time::Duration::from_micros(50));
            tokio::select! {
                frame = reader.next() => got.push(frame.unwrap().unwrap()),
                () = tick => dropped += 1,
            }
        }
        feeder.await.unwrap();
        assert!(dropped > 0, "the race never dropped a read");
        assert_eq!(got, frames);
    }

    #[tokio::test]
    async fn writer_output_reads_back_in_order() {
        let (tx, rx) = mpsc::channel(8);
        let (a, b) = tokio::io::duplex(1 << 16);
        let writer = tokio::spawn(write_frames(a, rx));
        for id in 0..100 {
            tx.send(call(id)).await.unwrap();
        }
        drop(tx);
        let mut reader = FrameReader::new(b, 1024);
        for id in 0..100 {
            assert_eq!(reader.next().await.unwrap(), Some(call(id)));
        }
        writer.await.unwrap().unwrap();
        assert!(reader.next().await.unwrap().is_none());
    }
}
