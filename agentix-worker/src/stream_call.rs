//! Driving one streaming call in the worker: batches under a window.
//!
//! The worker pulls items from the function's stream while the window has
//! room, packs the ones that are ready into one `items` frame, and parks when
//! the window is full until the host's acks (relayed by the server) free
//! space. So a slow consumer slows the producer and the worker holds at most
//! one batch of a stream in memory.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;

use futures_util::{FutureExt, StreamExt};
use serde_bytes::ByteBuf;
use tokio::sync::{mpsc, Notify};

use crate::registry::ItemStream;
use agentix_wire::errors::{ErrorKind, RemoteError};
use agentix_wire::wire::{Frame, Window};

/// Most items in one `items` frame; bounds a frame's size and latency.
const MAX_BATCH_ITEMS: usize = 1024;
/// Most bytes of items in one `items` frame (one item may exceed it).
const MAX_BATCH_BYTES: usize = 256 << 10;

/// What the host has consumed of one stream, updated by `ack` frames.
#[derive(Default)]
pub(crate) struct Credit {
    items: AtomicU64,
    bytes: AtomicU64,
    freed: Notify,
}

impl Credit {
    /// Records an ack and wakes the producer if it waits for room.
    pub(crate) fn ack(&self, items: u64, bytes: u64) {
        // fetch_add wraps; credit is capped instead.
        let add = |counter: &AtomicU64, n: u64| {
            let _ = counter.fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                Some(c.saturating_add(n))
            });
        };
        add(&self.items, items);
        add(&self.bytes, bytes);
        self.freed.notify_one();
    }
}

/// Runs `items` for call `id` within `window`, sending `items` frames on
/// `out`; returns the frame that ends the call (`end` or `error`).
pub(crate) async fn drive(
    id: u64,
    target: &str,
    mut items: ItemStream,
    window: Window,
    credit: &Credit,
    out: &mpsc::Sender<Frame>,
) -> Frame {
    let mut sent_items = 0u64;
    let mut sent_bytes = 0u64;
    let mut batch: Vec<ByteBuf> = Vec::new();
    let mut batch_bytes = 0usize;
    loop {
        let room = |credit: &Credit| {
            // Saturating: credit past what was sent (a peer's bad ack) is
            // no reason to stop, nor to run unbounded.
            window.has_room(
                sent_items.saturating_sub(credit.items.load(Ordering::Acquire)),
                sent_bytes.saturating_sub(credit.bytes.load(Ordering::Acquire)),
            )
        };
        if !room(credit) {
            flush(id, &mut batch, &mut batch_bytes, out).await;
            loop {
                let freed = credit.freed.notified();
                if room(credit) {
                    break;
                }
                freed.await;
            }
        }
        let next = if batch.is_empty() {
            AssertUnwindSafe(items.next()).catch_unwind().await
        } else {
            // Take what is ready without waiting; flush before waiting.
            let polled = std::future::poll_fn(|cx| {
                Poll::Ready(std::panic::catch_unwind(AssertUnwindSafe(|| {
                    items.poll_next_unpin(cx)
                })))
            })
            .await;
            match polled {
                Ok(Poll::Pending) => {
                    flush(id, &mut batch, &mut batch_bytes, out).await;
                    continue;
                }
                Ok(Poll::Ready(next)) => Ok(next),
                Err(panic) => Err(panic),
            }
        };
        match next {
            Ok(Some(Ok(item))) => {
                sent_items = sent_items.saturating_add(1);
                sent_bytes = sent_bytes.saturating_add(item.len() as u64);
                batch_bytes += item.len();
                batch.push(ByteBuf::from(item));
                if batch.len() >= MAX_BATCH_ITEMS || batch_bytes >= MAX_BATCH_BYTES {
                    flush(id, &mut batch, &mut batch_bytes, out).await;
                }
            }
            Ok(Some(Err(error))) => {
                flush(id, &mut batch, &mut batch_bytes, out).await;
                return Frame::Error { id, error };
            }
            Ok(None) => {
                flush(id, &mut batch, &mut batch_bytes, out).await;
                return Frame::End { id };
            }
            Err(panic) => {
                flush(id, &mut batch, &mut batch_bytes, out).await;
                let error = RemoteError::from_panic(target, panic);
                return Frame::Error { id, error };
            }
        }
    }
}

async fn flush(
    id: u64,
    batch: &mut Vec<ByteBuf>,
    batch_bytes: &mut usize,
    out: &mpsc::Sender<Frame>,
) {
    if batch.is_empty() {
        return;
    }
    *batch_bytes = 0;
    let items = std::mem::take(batch);
    // A closed channel means the worker is stopping; the call ends with it.
    let _ = out.send(Frame::Items { id, items }).await;
}

/// The error for a call whose shape does not match the function's.
pub(crate) fn wrong_shape(target: &str, streaming_fn: bool) -> RemoteError {
    let (is, use_) = if streaming_fn {
        ("returns a stream", "Sandbox::stream")
    } else {
        ("returns one value", "Sandbox::remote")
    };
    RemoteError::new(
        ErrorKind::TypeMismatch,
        format!("`{target}` {is}; call it with `{use_}`"),
    )
}
