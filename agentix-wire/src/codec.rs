//! Length-prefixed CBOR framing for the server <-> worker pipes.
//!
//! A frame on the pipe is a 4-byte big-endian length, then that many bytes
//! of body: a 4-byte big-endian envelope length, the envelope (CBOR of one
//! [`Frame`]) and the frame's tail. The tail holds the frame's payload (a
//! call's arguments, a result or a part, see [`crate::frame_bytes`]),
//! whose place in the envelope is left empty: it is written from where it
//! lies and read as a slice of the buffer the pipe filled. A frame whose
//! envelope does not decode is skipped (the length tells where the next one
//! starts); a length past the limit means the stream can no longer be
//! trusted, so the reader stops.

use std::io;

use bytes::{BufMut, Bytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::bulk_lane::BulkLane;
use crate::frame_bytes::FrameBytes;
use crate::wire::Frame;

/// Frames from this size on count as large buffers for the allocator's
/// trimming (see [`crate::process::tune_allocator`]).
const LARGE_FRAME: usize = crate::process::LARGE_BUFFER;

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

/// Writes whose tail is at least this long send the tail from where it
/// lies instead of copying it after the envelope.
const TAIL_IN_PLACE_FROM: usize = 32 << 10;

/// The payload a frame carries in its tail, if its kind has one.
fn tail_of(frame: &mut Frame) -> Option<&mut FrameBytes> {
    match frame {
        Frame::Call { args, .. } => Some(args),
        Frame::Result { value, .. } => Some(value),
        Frame::Part { bytes, .. } => Some(bytes),
        _ => None,
    }
}

/// Appends `frame`'s length prefix and envelope to `out` and returns its
/// tail: the bytes that must follow them on the pipe.
pub fn encode_head(mut frame: Frame, out: &mut Vec<u8>) -> Bytes {
    let tail = tail_of(&mut frame)
        .map(|payload| std::mem::take(&mut payload.0))
        .unwrap_or_default();
    let start = out.len();
    out.extend_from_slice(&[0; 8]);
    // Writing into a Vec cannot fail, and every Frame field is serialisable.
    ciborium::into_writer(&frame, &mut *out).expect("frames always encode");
    let envelope = (out.len() - start - 8) as u32;
    let body = (out.len() - start - 4 + tail.len()) as u32;
    out[start..start + 4].copy_from_slice(&body.to_be_bytes());
    out[start + 4..start + 8].copy_from_slice(&envelope.to_be_bytes());
    tail
}

/// Appends the whole of `frame`, length prefix, envelope and tail, to
/// `out`.
pub fn encode_into(frame: Frame, out: &mut Vec<u8>) {
    let tail = encode_head(frame, out);
    out.extend_from_slice(&tail);
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
    let frame = decode_body(body, |tail| Bytes::copy_from_slice(&body[tail]))?;
    Ok(Some((frame, 4 + len)))
}

/// Decodes a frame's body, its tail taken by `tail` (a copy, or a slice of
/// a shared buffer) from the range it occupies.
fn decode_body(
    body: &[u8],
    tail: impl FnOnce(std::ops::Range<usize>) -> Bytes,
) -> Result<Frame, FrameError> {
    let malformed = |why: String, envelope: &[u8]| FrameError::Malformed {
        why,
        call: call_id_of(envelope),
    };
    let envelope_len = match body.get(..4) {
        Some(prefix) => u32::from_be_bytes(prefix.try_into().expect("4 bytes")) as usize,
        None => return Err(malformed("no envelope length".into(), &[])),
    };
    let Some(envelope) = body.get(4..4 + envelope_len) else {
        let why = format!(
            "an envelope of {envelope_len} bytes in a body of {}",
            body.len()
        );
        return Err(malformed(why, &[]));
    };
    let mut frame: Frame = ciborium::from_reader(envelope)
        .map_err(|e| malformed(crate::cbor::decode_error_text(e), envelope))?;
    let tail_range = 4 + envelope_len..body.len();
    match tail_of(&mut frame) {
        Some(payload) => payload.0 = tail(tail_range),
        None if tail_range.is_empty() => {}
        None => {
            let why = format!(
                "a tail of {} bytes on a frame that has none",
                tail_range.len()
            );
            return Err(malformed(why, envelope));
        }
    }
    Ok(frame)
}

/// The `id` of a frame that did not decode as a [`Frame`], if its envelope
/// is at least CBOR of the frames' shape: `{variant: {"id": N, ..}}`.
fn call_id_of(envelope: &[u8]) -> Option<u64> {
    use ciborium::Value;
    let Ok(Value::Map(outer)) = ciborium::from_reader::<Value, _>(envelope) else {
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
        if len >= LARGE_FRAME {
            crate::process::note_large_buffer();
            // The buffer becomes the payload's: its tail is handed on as a
            // slice of it, not copied out.
            let body = Bytes::from(std::mem::take(&mut self.body));
            return decode_body(&body, |tail| body.slice(tail)).map(Some);
        }
        let frame = decode_body(&self.body, |tail| Bytes::copy_from_slice(&self.body[tail]));
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
    writer: W,
    mut rx: impl FrameQueue,
) -> io::Result<()> {
    let mut bulk = BulkLane::default();
    let mut out = PipeWriter {
        writer,
        buf: Vec::with_capacity(64 * 1024),
        round: 0,
    };
    let mut open = true;
    while open || !bulk.is_empty() {
        out.round = 0;
        if open && bulk.is_empty() {
            match rx.recv().await {
                Some(frame) => {
                    if let Some(frame) = bulk.route(frame) {
                        out.put(frame).await?;
                    }
                }
                None => open = false,
            }
        }
        // Batch whatever is already queued into one write.
        while open && out.round < ROUND_BYTES {
            match rx.try_recv() {
                Some(frame) => {
                    if let Some(frame) = bulk.route(frame) {
                        out.put(frame).await?;
                    }
                }
                None => break,
            }
        }
        if out.round < ROUND_BYTES {
            if let Some(frame) = bulk.pop() {
                out.put(frame).await?;
            }
        }
        out.write_buffered().await?;
    }
    out.writer.flush().await
}

/// Bytes a writer takes from its queue before it lets a waiting bulk part
/// go: one part's worth.
const ROUND_BYTES: usize = 1 << 20;

/// A pipe's writing end: small frames gathered into one write, large tails
/// written from where they lie.
struct PipeWriter<W> {
    writer: W,
    buf: Vec<u8>,
    /// Bytes put this round, written or still buffered.
    round: usize,
}

impl<W: AsyncWrite + Unpin> PipeWriter<W> {
    async fn put(&mut self, frame: Frame) -> io::Result<()> {
        let before = self.buf.len();
        let tail = encode_head(frame, &mut self.buf);
        self.round += self.buf.len() - before + tail.len();
        if tail.len() < TAIL_IN_PLACE_FROM {
            self.buf.extend_from_slice(&tail);
            return Ok(());
        }
        crate::process::note_large_buffer();
        self.write_buffered().await?;
        self.writer.write_all(&tail).await
    }

    async fn write_buffered(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        if self.buf.len() >= LARGE_FRAME {
            crate::process::note_large_buffer();
        }
        self.writer.write_all(&self.buf).await?;
        if keep_buffer(self.buf.len(), self.buf.capacity()) {
            self.buf.clear();
        } else {
            self.buf = Vec::with_capacity(64 * 1024);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: u64) -> Frame {
        Frame::Call {
            id,
            target: "app::run".into(),
            args: FrameBytes::from(vec![0x1e, 0, 255]),
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
        encode_into(call(1), &mut buf);
        encode_into(Frame::Cancel { id: 2 }, &mut buf);
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

    /// A frame around `envelope`, with no tail.
    fn framed(envelope: &[u8]) -> Vec<u8> {
        let mut buf = Vec::new();
        buf.extend_from_slice(&(envelope.len() as u32 + 4).to_be_bytes());
        buf.extend_from_slice(&(envelope.len() as u32).to_be_bytes());
        buf.extend_from_slice(envelope);
        buf
    }

    #[test]
    fn garbage_body_is_malformed_and_recoverable() {
        let err = decode(&[0, 0, 0, 3, 0xff, 0xfe, 0xfd], 1024).unwrap_err();
        assert!(err.is_recoverable(), "{err}");
        let err = decode(&framed(&[0xff, 0xfe, 0xfd]), 1024).unwrap_err();
        assert!(err.is_recoverable(), "{err}");
        // A valid CBOR value that is not a frame is malformed too.
        let body = crate::cbor::to_vec(&"hello").unwrap();
        assert!(matches!(
            decode(&framed(&body), 1024),
            Err(FrameError::Malformed { call: None, .. })
        ));
        // A reply whose value is not bytes still names its call.
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
        assert!(matches!(
            decode(&framed(&body), 1024),
            Err(FrameError::Malformed { call: Some(7), .. })
        ));
        // A tail on a frame that carries none, or an envelope longer than
        // its body, is malformed and costs only its frame.
        let mut buf = Vec::new();
        encode_into(Frame::Cancel { id: 4 }, &mut buf);
        buf.push(1);
        buf[3] += 1;
        encode_into(Frame::Cancel { id: 5 }, &mut buf);
        let err = decode(&buf, 1024).unwrap_err();
        assert!(
            matches!(err, FrameError::Malformed { call: Some(4), .. }),
            "{err}"
        );
        let mut buf = framed(&crate::cbor::to_vec(&"hello").unwrap());
        buf[7] += 1;
        assert!(decode(&buf, 1024).unwrap_err().is_recoverable());
    }

    #[test]
    fn a_payload_rides_after_the_envelope_and_is_read_as_a_slice() {
        let payload: Vec<u8> = (0..LARGE_FRAME + 5).map(|i| (i % 251) as u8).collect();
        let frame = Frame::Result {
            id: 3,
            value: FrameBytes::from(payload.clone()),
        };
        let mut buf = Vec::new();
        encode_into(frame.clone(), &mut buf);
        assert_eq!(&buf[buf.len() - payload.len()..], &payload[..], "the tail");
        let envelope = u32::from_be_bytes(buf[4..8].try_into().unwrap()) as usize;
        assert!(envelope < 64, "the envelope holds no payload: {envelope}");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let back = runtime
            .block_on(FrameReader::new(&buf[..], DEFAULT_MAX_FRAME).next())
            .unwrap()
            .unwrap();
        assert_eq!(back, frame);
    }

    #[tokio::test]
    async fn reader_skips_a_bad_frame_and_reports_truncation() {
        let mut buf = Vec::new();
        encode_into(call(1), &mut buf);
        buf.extend_from_slice(&[0, 0, 0, 2, 0xff, 0xff]);
        encode_into(call(3), &mut buf);
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
        encode_into(Frame::Cancel { id: 9 }, &mut buf);
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
                value: FrameBytes::from(vec![id as u8; 300_000 + id as usize]),
            })
            .collect();
        let mut bytes = Vec::new();
        for f in &frames {
            encode_into(f.clone(), &mut bytes);
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
