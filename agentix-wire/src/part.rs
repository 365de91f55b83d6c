//! Payloads past [`SPLIT_ABOVE`] cross every hop as parts.
//!
//! A call's arguments or result of 64 MiB, sent as one message, holds every
//! message behind it on the same websocket or pipe until its last byte is
//! through: a small call's reply waited hundreds of milliseconds behind a
//! large transfer. So the sender cuts such a payload into [`PART_BYTES`]
//! pieces and sends each as a message of its own (`call:part` events on
//! the websocket, [`Frame::Part`](crate::wire::Frame::Part) frames on the
//! pipes), then the call or result itself with the last piece. Other
//! messages go out between the pieces, so nothing waits for more than one
//! piece.
//!
//! A receiver keeps the parts per call in a [`PartTable`], within a byte
//! budget, and hands the pieces on as they came: the server never joins
//! them, and the worker (a call's arguments) and the host (its result)
//! decode the payload from the pieces themselves ([`PiecesReader`]).

use std::collections::HashMap;

use bytes::Bytes;

/// Largest part of a payload in one message (and of an attachment in one
/// binary frame).
pub const PART_BYTES: usize = 1 << 20;

/// Largest websocket message either end accepts, text or binary. Binary
/// messages stay under [`SPLIT_ABOVE`] (larger payloads go in parts), so
/// this bounds text: a peer's JSON event is refused on its frame header,
/// before its bytes are buffered, however large the whole-message limit
/// (`max_message_bytes`) is.
pub const MAX_SOCKET_MESSAGE_BYTES: usize = 16 << 20;

/// Bytes asked of a websocket per read, at both ends. The websocket crate
/// zero-fills that much of its buffer before every read (its reads go
/// through `Read::read`, which may not be handed uninitialised memory), and
/// it reads once more after each message to find the socket empty: at
/// 128 KiB, a small call's reply cost a quarter of a megabyte of memset at
/// each end. At 16 KiB the zeroing is an eighth of that, and a 1 MiB part
/// still comes in 64 reads.
pub const SOCKET_READ_BYTES: usize = 16 << 10;

/// Payloads up to this size travel whole: a file chunk of exactly 1 MiB
/// plus its CBOR envelope is one message, not a part and a crumb.
pub const SPLIT_ABOVE: usize = PART_BYTES + PART_BYTES / 4;

/// The pieces `payload` travels in: itself when it is at most
/// [`SPLIT_ABOVE`] bytes, else [`PART_BYTES`] slices of it (no copy).
pub fn split(payload: Bytes) -> Vec<Bytes> {
    if payload.len() <= SPLIT_ABOVE {
        return vec![payload];
    }
    let mut pieces = Vec::with_capacity(payload.len().div_ceil(PART_BYTES));
    let mut rest = payload;
    while rest.len() > PART_BYTES {
        pieces.push(rest.split_to(PART_BYTES));
    }
    pieces.push(rest);
    pieces
}

/// The parts of one payload received so far, in order: kept as they came
/// ([`Partial::push`]), or only counted when the receiver hands each on at
/// once ([`Partial::pass`]).
#[derive(Debug, Default)]
pub struct Partial {
    total: usize,
    pieces: Vec<Bytes>,
    /// Parts received, kept or passed on.
    parts: usize,
    len: usize,
}

impl Partial {
    /// Adds a part of a payload announced as `total` bytes; errors when the
    /// announcement changes or the parts would exceed it.
    pub fn push(&mut self, total: usize, bytes: Bytes) -> Result<(), String> {
        self.count(total, bytes.len())?;
        self.pieces.push(bytes);
        Ok(())
    }

    /// Checks and counts a part like [`Partial::push`], then hands it back
    /// to be passed on instead of keeping it.
    pub fn pass(&mut self, total: usize, bytes: Bytes) -> Result<Bytes, String> {
        self.count(total, bytes.len())?;
        Ok(bytes)
    }

    fn count(&mut self, total: usize, len: usize) -> Result<(), String> {
        if self.parts == 0 {
            self.total = total;
        } else if total != self.total {
            return Err(format!(
                "a part announced {total} bytes in all, an earlier one {}",
                self.total
            ));
        }
        if self.len + len > self.total {
            return Err(format!(
                "the parts exceed the {} bytes they announced",
                self.total
            ));
        }
        self.len += len;
        self.parts += 1;
        Ok(())
    }

    /// Bytes received so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no part arrived yet.
    pub fn is_empty(&self) -> bool {
        self.parts == 0
    }

    /// Every piece kept, then `last`, once all parts add up to the
    /// announced total.
    pub fn finish(mut self, last: Bytes) -> Result<Vec<Bytes>, String> {
        if self.parts > 0 && self.len + last.len() != self.total {
            return Err(format!(
                "the payload announced {} bytes but its parts hold {}",
                self.total,
                self.len + last.len()
            ));
        }
        self.pieces.push(last);
        Ok(self.pieces)
    }
}

/// The payloads being received in parts, by call id, within a byte budget.
///
/// Where parts arrive from a peer (the server from a host, the host from
/// the server, the worker from the server) this is what bounds what the
/// peer can make the receiver hold: `max_bytes` over all payloads at once.
#[derive(Debug)]
pub struct PartTable {
    max_bytes: usize,
    held: usize,
    calls: HashMap<u64, Slot>,
}

/// What a table keeps for one call.
#[derive(Debug)]
enum Slot {
    /// Parts so far.
    Collecting(Partial),
    /// A part was refused or lost: the call fails when its last piece comes.
    Refused,
}

impl PartTable {
    /// A table that holds at most `max_bytes` of parts at a time.
    pub fn new(max_bytes: usize) -> Self {
        PartTable {
            max_bytes,
            held: 0,
            calls: HashMap::new(),
        }
    }

    /// Adds a part of call `id`'s payload of `total` bytes. On an error the
    /// call's parts are dropped and the call is refused: its last piece then
    /// fails in [`PartTable::finish`] too, since it arrives without them.
    pub fn push(&mut self, id: u64, total: u64, bytes: Bytes) -> Result<(), String> {
        let total = usize::try_from(total).unwrap_or(usize::MAX);
        let len = bytes.len();
        let pushed = if total > self.max_bytes {
            Err(format!(
                "a payload of {total} bytes is past the {}-byte limit",
                self.max_bytes
            ))
        } else if self.held + len > self.max_bytes {
            Err(format!(
                "parts of payloads in flight would pass the {}-byte limit",
                self.max_bytes
            ))
        } else {
            match self
                .calls
                .entry(id)
                .or_insert(Slot::Collecting(Partial::default()))
            {
                Slot::Collecting(partial) => partial.push(total, bytes),
                Slot::Refused => Err(format!("an earlier part of call {id} was refused")),
            }
        };
        match pushed {
            Ok(()) => self.held += len,
            Err(_) => self.refuse(id),
        }
        pushed
    }

    /// Drops call `id`'s parts and fails its last piece when it arrives: a
    /// part of it was lost (refused, or unreadable).
    pub fn refuse(&mut self, id: u64) {
        self.discard(id);
        self.calls.insert(id, Slot::Refused);
    }

    /// Call `id`'s whole payload: its parts, then `last`.
    pub fn finish(&mut self, id: u64, last: Bytes) -> Result<Vec<Bytes>, String> {
        match self.calls.remove(&id) {
            None => Ok(vec![last]),
            Some(Slot::Refused) => Err(format!("a part of call {id} was refused")),
            Some(Slot::Collecting(partial)) => {
                self.held -= partial.len();
                partial.finish(last)
            }
        }
    }

    /// Drops whatever arrived for `id` (its call ended).
    pub fn discard(&mut self, id: u64) {
        if let Some(Slot::Collecting(partial)) = self.calls.remove(&id) {
            self.held -= partial.len();
        }
    }

    /// Bytes held over all payloads.
    pub fn held(&self) -> usize {
        self.held
    }
}

/// `pieces` as one buffer (no copy when there is one piece).
pub fn join(mut pieces: Vec<Bytes>) -> Bytes {
    if pieces.len() == 1 {
        return pieces.pop().expect("one piece");
    }
    let mut joined = bytes::BytesMut::with_capacity(pieces.iter().map(Bytes::len).sum());
    for piece in pieces {
        joined.extend_from_slice(&piece);
    }
    joined.freeze()
}

/// Reads `pieces` one after another as one stream of bytes, so a payload
/// received in parts can be decoded without first being copied into one
/// buffer.
pub struct PiecesReader<'a> {
    pieces: &'a [Bytes],
    /// How far into `pieces[0]` reading has come.
    offset: usize,
}

impl<'a> PiecesReader<'a> {
    /// A reader at the start of `pieces`.
    pub fn new(pieces: &'a [Bytes]) -> Self {
        PiecesReader { pieces, offset: 0 }
    }
}

impl std::io::Read for PiecesReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while let Some((piece, rest)) = self.pieces.split_first() {
            let left = &piece[self.offset..];
            if left.is_empty() {
                self.pieces = rest;
                self.offset = 0;
                continue;
            }
            let n = left.len().min(buf.len());
            buf[..n].copy_from_slice(&left[..n]);
            self.offset += n;
            return Ok(n);
        }
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_passed_on_are_counted_and_checked_like_parts_kept() {
        let mut partial = Partial::default();
        let passed = partial.pass(6, Bytes::from_static(b"ab")).unwrap();
        assert_eq!(&passed[..], b"ab");
        assert!(!partial.is_empty());
        assert_eq!(partial.len(), 2);
        assert!(partial.pass(7, Bytes::from_static(b"c")).is_err());
        assert!(partial.pass(6, Bytes::from_static(b"cdefg")).is_err());
        partial.pass(6, Bytes::from_static(b"cd")).unwrap();
        // Only the last piece is left to hand on, and it must complete the total.
        assert_eq!(
            partial.finish(Bytes::from_static(b"ef")).unwrap(),
            vec![Bytes::from_static(b"ef")]
        );
        let mut short = Partial::default();
        short.pass(6, Bytes::from_static(b"ab")).unwrap();
        assert!(short.finish(Bytes::from_static(b"c")).is_err());
    }

    #[test]
    fn a_reader_over_pieces_reads_them_as_one_payload() {
        use std::io::Read;
        let payload: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let pieces: Vec<Bytes> = [0, 1, 4096, 0, 5000, 903]
            .iter()
            .scan(0, |at, &len| {
                let piece = Bytes::copy_from_slice(&payload[*at..*at + len]);
                *at += len;
                Some(piece)
            })
            .collect();
        let mut back = Vec::new();
        let mut reader = PiecesReader::new(&pieces);
        let mut buf = [0u8; 777];
        loop {
            let n = reader.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            back.extend_from_slice(&buf[..n]);
        }
        assert_eq!(back, payload);
        assert_eq!(reader.read(&mut buf).unwrap(), 0, "stays at its end");
    }

    #[test]
    fn small_payloads_travel_whole_and_large_ones_in_parts() {
        assert_eq!(split(Bytes::new()).len(), 1);
        assert_eq!(split(Bytes::from(vec![1; SPLIT_ABOVE])).len(), 1);
        let payload: Bytes = (0..(PART_BYTES * 3 + 7))
            .map(|i| (i % 253) as u8)
            .collect::<Vec<_>>()
            .into();
        let pieces = split(payload.clone());
        assert_eq!(
            pieces.iter().map(Bytes::len).collect::<Vec<_>>(),
            [PART_BYTES, PART_BYTES, PART_BYTES, 7]
        );
        assert_eq!(pieces.concat(), payload);
    }

    #[test]
    fn the_table_joins_parts_and_refuses_what_does_not_add_up() {
        let payload: Vec<u8> = (0..(PART_BYTES * 2 + 3)).map(|i| i as u8).collect();
        let total = payload.len() as u64;
        let mut pieces = split(Bytes::from(payload.clone()));
        let last = pieces.pop().unwrap();
        let mut t = PartTable::new(usize::MAX);
        for p in pieces {
            t.push(9, total, p).unwrap();
        }
        assert_eq!(join(t.finish(9, last).unwrap()), payload);
        assert_eq!(t.held(), 0);
        // Nothing left over: a call without parts is its last piece.
        assert_eq!(join(t.finish(9, Bytes::from_static(b"x")).unwrap()), "x");

        // Parts past their announced total, or a total that changes.
        assert!(t.push(1, 4, Bytes::from_static(b"12345")).is_err());
        assert!(t.finish(1, Bytes::from_static(b"")).is_err());
        t.push(2, 10, Bytes::from_static(b"12")).unwrap();
        assert!(t.push(2, 11, Bytes::from_static(b"34")).is_err());
        assert!(t.finish(2, Bytes::new()).is_err());
        // Parts that do not add up to the total.
        t.push(3, 10, Bytes::from_static(b"1234")).unwrap();
        assert!(t.finish(3, Bytes::from_static(b"5")).is_err());
        // A cancelled call's parts are dropped.
        t.push(4, 4, Bytes::from_static(b"ab")).unwrap();
        t.discard(4);
        assert_eq!(t.held(), 0);
        assert_eq!(join(t.finish(4, Bytes::from_static(b"cd")).unwrap()), "cd");
    }

    #[test]
    fn a_part_frame_of_a_whole_part_round_trips() {
        let frame = crate::wire::Frame::Part {
            id: 1,
            total: PART_BYTES as u64 + 1,
            bytes: crate::frame_bytes::FrameBytes(Bytes::from(vec![0x1e; PART_BYTES])),
        };
        let mut buf = Vec::new();
        crate::codec::encode_into(frame.clone(), &mut buf);
        let (back, used) = crate::codec::decode(&buf, usize::MAX).unwrap().unwrap();
        assert_eq!((back, used), (frame, buf.len()));
    }

    #[test]
    fn the_table_holds_no_more_than_its_budget() {
        let mut t = PartTable::new(10);
        assert!(t.push(1, 11, Bytes::from_static(b"1")).is_err());
        t.push(2, 8, Bytes::from_static(b"123456")).unwrap();
        t.push(3, 8, Bytes::from_static(b"12345")).unwrap_err();
        assert_eq!(t.held(), 6);
        assert!(t.finish(3, Bytes::from_static(b"5678")).is_err());
        assert_eq!(
            join(t.finish(2, Bytes::from_static(b"78")).unwrap()),
            "12345678"
        );
        assert_eq!(t.held(), 0);
    }
}
