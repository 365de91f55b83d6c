//! Property tests for the frame codec: any byte sequence is handled without
//! a panic, and any sequence of frames survives encoding and arbitrary
//! chunking of the pipe.

use std::pin::Pin;
use std::task::{Context, Poll};

use agentix_wire::codec::{self, FrameError, FrameReader};
use agentix_wire::errors::{ErrorKind, RemoteError};
use agentix_wire::frame_bytes::FrameBytes;
use agentix_wire::wire::{Frame, Window};
use proptest::prelude::*;
use serde_bytes::ByteBuf;
use tokio::io::{AsyncRead, ReadBuf};

/// Hands out `data` in chunks of the given sizes (cycled), like a pipe would.
struct Chunked {
    data: Vec<u8>,
    at: usize,
    sizes: Vec<usize>,
    turn: usize,
}

impl AsyncRead for Chunked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let size = self.sizes[self.turn % self.sizes.len()].max(1);
        self.turn += 1;
        let n = size.min(buf.remaining()).min(self.data.len() - self.at);
        let at = self.at;
        buf.put_slice(&self.data[at..at + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

fn bytes() -> impl Strategy<Value = ByteBuf> {
    proptest::collection::vec(any::<u8>(), 0..300).prop_map(ByteBuf::from)
}

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        (
            any::<u64>(),
            "[a-z:_]{0,40}",
            bytes(),
            any::<Option<(u64, u64)>>()
        )
            .prop_map(|(id, target, args, window)| Frame::Call {
                id,
                target,
                args: FrameBytes::from(args.into_vec()),
                stream: window.map(|(items, bytes)| Window { items, bytes }),
                trace: None,
            }),
        any::<u64>().prop_map(|id| Frame::Cancel { id }),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(id, items, bytes)| Frame::Ack {
            id,
            items,
            bytes
        }),
        (any::<u64>(), proptest::collection::vec(bytes(), 0..20))
            .prop_map(|(id, items)| Frame::Items { id, items }),
        any::<u64>().prop_map(|id| Frame::End { id }),
        (any::<u64>(), bytes()).prop_map(|(id, value)| Frame::Result {
            id,
            value: FrameBytes::from(value.into_vec())
        }),
        (any::<u64>(), ".{0,80}").prop_map(|(id, message)| Frame::Error {
            id,
            error: RemoteError::new(ErrorKind::Raised, message),
        }),
        (any::<u64>(), any::<u64>(), bytes()).prop_map(|(id, total, b)| Frame::Part {
            id,
            total,
            bytes: FrameBytes(b.into_vec().into()),
        }),
        any::<u64>().prop_map(|seq| Frame::Ping { seq }),
        any::<u64>().prop_map(|seq| Frame::Pong { seq }),
    ]
}

fn read_all(data: Vec<u8>, sizes: Vec<usize>, max: usize) -> Vec<Result<Frame, String>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut reader = FrameReader::new(
            Chunked {
                data,
                at: 0,
                sizes,
                turn: 0,
            },
            max,
        );
        let mut out = Vec::new();
        loop {
            match reader.next().await {
                Ok(Some(f)) => out.push(Ok(f)),
                Ok(None) => break,
                Err(e) if e.is_recoverable() => out.push(Err(e.to_string())),
                Err(e) => {
                    out.push(Err(e.to_string()));
                    break;
                }
            }
        }
        out
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn frames_survive_any_chunking(
        frames in proptest::collection::vec(frame(), 0..12),
        sizes in proptest::collection::vec(1usize..64, 1..8),
    ) {
        let mut data = Vec::new();
        for f in &frames {
            codec::encode_into(f.clone(), &mut data);
        }
        let got = read_all(data, sizes, codec::DEFAULT_MAX_FRAME);
        let want: Vec<Result<Frame, String>> = frames.into_iter().map(Ok).collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn any_bytes_decode_without_panicking(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        match codec::decode(&data, 1 << 16) {
            Ok(Some((_, used))) => prop_assert!(used <= data.len()),
            Ok(None) => {}
            Err(FrameError::Oversized { len, max }) => prop_assert!(len > max),
            Err(_) => {}
        }
        // The streaming reader ends on garbage too, with at most one result per frame.
        let results = read_all(data.clone(), vec![7], 1 << 16);
        prop_assert!(results.len() <= data.len() / 4 + 1);
    }

    #[test]
    fn a_corrupted_body_costs_only_its_own_frame(
        frames in proptest::collection::vec(frame(), 2..6),
        victim in any::<prop::sample::Index>(),
        noise in any::<u8>(),
        at in 4usize..9,
    ) {
        // Overwrite a byte of one frame's envelope length, or the first of
        // its envelope: at most that frame is lost or altered, every other
        // frame arrives intact and in order.
        let victim = victim.index(frames.len());
        let mut data = Vec::new();
        let mut victim_body = 0;
        for (i, f) in frames.iter().enumerate() {
            if i == victim {
                victim_body = data.len() + at;
            }
            codec::encode_into(f.clone(), &mut data);
        }
        data[victim_body] = noise;
        let got = read_all(data, vec![13], codec::DEFAULT_MAX_FRAME);
        prop_assert_eq!(got.len(), frames.len());
        for (i, (g, f)) in got.iter().zip(&frames).enumerate() {
            if i != victim {
                prop_assert_eq!(g.as_ref().ok(), Some(f));
            }
        }
    }
}
