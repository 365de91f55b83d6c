//! [`Outbox`]: frames for the server from code that cannot wait (a
//! namespace's `emit`), kept in order and bounded.
//!
//! The frame queue to the server is bounded (in bytes as well as frames
//! when it is a [`budgeted_channel`](crate::budgeted_channel)). When it is
//! full, a frame waits in the outbox, and so does every frame after it
//! until the outbox has drained (one task sends them, in order, waiting
//! for room), so a burst never reorders a namespace's events. Past
//! [`OUTBOX_LIMIT`] waiting frames the producer is far ahead of the pipe:
//! new frames are dropped with an error line (and counted) rather than
//! held without bound; callers that shed load earlier read
//! [`Outbox::waiting_bytes`]; code that would rather wait uses
//! [`Outbox::send`].

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use crate::budgeted_channel::BudgetedSender;
use crate::wire::Frame;

/// Frames that may wait in one outbox for room in the queue.
pub const OUTBOX_LIMIT: usize = 65_536;

struct Waiting {
    frames: VecDeque<Frame>,
    /// Their payload bytes ([`Frame::payload_len`]).
    bytes: usize,
    /// A task is sending the waiting frames.
    draining: bool,
}

impl Waiting {
    fn push_back(&mut self, frame: Frame) {
        self.bytes += frame.payload_len();
        self.frames.push_back(frame);
    }

    fn pop_front(&mut self) -> Option<Frame> {
        let frame = self.frames.pop_front()?;
        self.bytes -= frame.payload_len();
        Some(frame)
    }
}

/// One producer's frames to the server, in order; cheap to clone.
#[derive(Clone)]
pub struct Outbox {
    out: BudgetedSender<Frame>,
    waiting: Arc<Mutex<Waiting>>,
    /// Told when the waiting frames have all been sent.
    drained: Arc<tokio::sync::Notify>,
    dropped: Arc<AtomicU64>,
}

impl Outbox {
    /// An outbox in front of the queue `out`.
    pub fn new(out: impl Into<BudgetedSender<Frame>>) -> Self {
        Outbox {
            out: out.into(),
            waiting: Arc::new(Mutex::new(Waiting {
                frames: VecDeque::new(),
                bytes: 0,
                draining: false,
            })),
            drained: Arc::new(tokio::sync::Notify::new()),
            dropped: Arc::new(AtomicU64::new(0)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `frame` without waiting, behind every frame queued before it
    /// (call it inside a tokio runtime).
    pub fn push(&self, frame: Frame) {
        let mut waiting = self.lock();
        if waiting.frames.is_empty() {
            match self.out.try_send(frame) {
                Ok(()) => return,
                Err(mpsc::error::TrySendError::Closed(_)) => return,
                Err(mpsc::error::TrySendError::Full(frame)) => waiting.push_back(frame),
            }
        } else if waiting.frames.len() >= OUTBOX_LIMIT {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::error!(
                dropped,
                "{OUTBOX_LIMIT} frames wait for the server already; this one is dropped \
                 (emit less at once, or await `send`)"
            );
            return;
        } else {
            waiting.push_back(frame);
        }
        if !waiting.draining {
            waiting.draining = true;
            tokio::spawn(self.clone().drain());
        }
    }

    /// Frames waiting for room in the queue now.
    pub fn waiting(&self) -> usize {
        self.lock().frames.len()
    }

    /// Payload bytes of the frames waiting for room in the queue now.
    pub fn waiting_bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Whether at least `frames` frames or `bytes` payload bytes wait now
    /// (one look, for a caller that sheds load past either).
    pub fn waiting_past(&self, frames: usize, bytes: usize) -> bool {
        let waiting = self.lock();
        waiting.frames.len() >= frames || waiting.bytes >= bytes
    }

    /// Queues `frame` behind every frame queued before it, waiting while
    /// the queue is full.
    pub async fn send(&self, frame: Frame) {
        let waited = {
            let waiting = self.lock();
            !waiting.frames.is_empty()
        };
        if waited {
            // Behind the waiting frames, as `push` would put it; then wait
            // for them to be sent, so a loop of sends cannot outrun the pipe.
            self.push(frame);
            loop {
                let drained = self.drained.notified();
                if !self.lock().draining {
                    break;
                }
                drained.await;
            }
        } else {
            let _ = self.out.send(frame).await;
        }
    }

    /// Frames dropped because the outbox was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    async fn drain(self) {
        loop {
            let next = {
                let mut waiting = self.lock();
                match waiting.pop_front() {
                    Some(frame) => frame,
                    None => {
                        waiting.draining = false;
                        self.drained.notify_waiters();
                        return;
                    }
                }
            };
            if self.out.send(next).await.is_err() {
                let mut waiting = self.lock();
                waiting.frames.clear();
                waiting.bytes = 0;
                waiting.draining = false;
                self.drained.notify_waiters();
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(i: u64) -> Frame {
        Frame::SioEvent {
            path: "/p".into(),
            event: "n".into(),
            data: serde_json::json!(i).into(),
            attachments: Vec::new(),
        }
    }

    fn number(frame: Frame) -> u64 {
        match frame {
            Frame::SioEvent { data, .. } => data.to_value().as_u64().unwrap(),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_burst_past_the_queue_arrives_whole_and_in_order() {
        let (tx, mut rx) = mpsc::channel(8);
        let outbox = Outbox::new(tx);
        for i in 0..5_000 {
            outbox.push(event(i));
        }
        let reader = tokio::spawn(async move {
            let mut seen = Vec::new();
            while seen.len() < 5_001 {
                seen.push(number(rx.recv().await.unwrap()));
            }
            seen
        });
        // Waits for the 5,000 before it, which the reader takes.
        outbox.send(event(5_000)).await;
        assert_eq!(reader.await.unwrap(), (0..=5_000).collect::<Vec<_>>());
        assert_eq!(outbox.dropped(), 0);
        assert_eq!(outbox.waiting_bytes(), 0);
    }

    #[tokio::test]
    async fn past_its_limit_an_outbox_drops_and_counts_instead_of_growing() {
        let (tx, _rx) = mpsc::channel(1);
        let outbox = Outbox::new(tx);
        for i in 0..(OUTBOX_LIMIT as u64 + 11) {
            outbox.push(event(i));
        }
        assert_eq!(outbox.dropped(), 10);
        assert_eq!(outbox.lock().frames.len(), OUTBOX_LIMIT);
        // Frame 0 went into the queue; the next OUTBOX_LIMIT wait.
        let waiting: usize = (1..=OUTBOX_LIMIT as u64)
            .map(|i| event(i).payload_len())
            .sum();
        assert_eq!(outbox.waiting_bytes(), waiting);
        assert!(outbox.waiting_past(OUTBOX_LIMIT, usize::MAX));
        assert!(outbox.waiting_past(usize::MAX, waiting));
        assert!(!outbox.waiting_past(OUTBOX_LIMIT + 1, waiting + 1));
    }
}
