//! [`frame_channel`]: a queue of frames for a pipe, bounded in frames and
//! in payload bytes.
//!
//! A pipe's frames range from a few bytes to a megabyte. A queue counted
//! in frames alone is sized for the small ones and holds gigabytes of the
//! large; counted in bytes as well, a burst of large frames waits (or,
//! for [`FrameSender::try_send`], is refused) once the bytes are spent.
//! The bytes are a tokio semaphore's permits: a sender takes a frame's
//! worth before it queues the frame, the receiver gives them back as it
//! takes the frame off.

use std::sync::Arc;

use tokio::sync::{mpsc, Semaphore};

use crate::codec::FrameQueue;
use crate::wire::Frame;

/// A queue of at most `frames` frames and about `bytes` payload bytes
/// (one frame larger than `bytes` passes alone).
pub fn frame_channel(frames: usize, bytes: usize) -> (FrameSender, FrameReceiver) {
    let (tx, rx) = mpsc::channel(frames);
    let budget = Arc::new(ByteBudget::new(bytes));
    (
        FrameSender {
            tx,
            budget: Some(budget.clone()),
        },
        FrameReceiver { rx, budget },
    )
}

/// The bytes a queue may hold, as permits.
struct ByteBudget {
    permits: Semaphore,
    limit: u32,
}

impl ByteBudget {
    fn new(bytes: usize) -> Self {
        let limit = u32::try_from(bytes).unwrap_or(u32::MAX).max(1);
        ByteBudget {
            permits: Semaphore::new(limit as usize),
            limit,
        }
    }

    /// What `frame` costs: its payload, at most the whole budget, so that
    /// any frame can pass once the queue is empty.
    fn cost(&self, frame: &Frame) -> u32 {
        u32::try_from(frame.payload_len())
            .unwrap_or(u32::MAX)
            .min(self.limit)
    }

    fn give_back(&self, frame: &Frame) {
        self.permits.add_permits(self.cost(frame) as usize);
    }
}

/// The sending end of a [`frame_channel`]; cheap to clone.
#[derive(Clone)]
pub struct FrameSender {
    tx: mpsc::Sender<Frame>,
    /// `None` for a plain channel, bounded in frames only.
    budget: Option<Arc<ByteBudget>>,
}

impl From<mpsc::Sender<Frame>> for FrameSender {
    /// A sender bounded only by the channel's count of frames.
    fn from(tx: mpsc::Sender<Frame>) -> Self {
        FrameSender { tx, budget: None }
    }
}

impl FrameSender {
    /// Queues `frame` if the queue has room for it, in frames and in
    /// bytes; gives it back otherwise.
    // The frame comes back whole, as from `mpsc::Sender::try_send`, for the
    // caller to keep; boxing it would allocate on every full queue.
    #[allow(clippy::result_large_err)]
    pub fn try_send(&self, frame: Frame) -> Result<(), mpsc::error::TrySendError<Frame>> {
        let Some(budget) = &self.budget else {
            return self.tx.try_send(frame);
        };
        let Ok(permit) = budget.permits.try_acquire_many(budget.cost(&frame)) else {
            return Err(mpsc::error::TrySendError::Full(frame));
        };
        self.tx.try_send(frame)?;
        permit.forget();
        Ok(())
    }

    /// Queues `frame`, waiting for room in frames and in bytes; gives it
    /// back if the receiver is gone.
    pub async fn send(&self, frame: Frame) -> Result<(), mpsc::error::SendError<Frame>> {
        let Some(budget) = &self.budget else {
            return self.tx.send(frame).await;
        };
        // The semaphore is never closed.
        let Ok(permit) = budget.permits.acquire_many(budget.cost(&frame)).await else {
            return Err(mpsc::error::SendError(frame));
        };
        self.tx.send(frame).await?;
        permit.forget();
        Ok(())
    }
}

/// The receiving end of a [`frame_channel`].
pub struct FrameReceiver {
    rx: mpsc::Receiver<Frame>,
    budget: Arc<ByteBudget>,
}

impl FrameQueue for FrameReceiver {
    async fn recv(&mut self) -> Option<Frame> {
        let frame = self.rx.recv().await?;
        self.budget.give_back(&frame);
        Some(frame)
    }

    fn try_recv(&mut self) -> Option<Frame> {
        let frame = self.rx.try_recv().ok()?;
        self.budget.give_back(&frame);
        Some(frame)
    }

    fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(bytes: usize) -> Frame {
        Frame::SioEvent {
            path: String::new(),
            event: String::new(),
            data: serde_json::json!("x".repeat(bytes - 2)).into(),
        }
    }

    #[tokio::test]
    async fn large_frames_are_refused_once_the_bytes_are_spent_and_pass_once_taken() {
        let (tx, mut rx) = frame_channel(1_000, 10_000);
        for _ in 0..4 {
            tx.try_send(part(2_500)).unwrap();
        }
        assert!(matches!(
            tx.try_send(part(2_500)),
            Err(mpsc::error::TrySendError::Full(_))
        ));
        // Small frames still fit in what is left: nothing.
        assert!(tx.try_send(part(3)).is_err());
        rx.recv().await.unwrap();
        tx.try_send(part(2_500)).unwrap();
    }

    #[tokio::test]
    async fn a_frame_larger_than_the_budget_passes_alone() {
        let (tx, mut rx) = frame_channel(8, 1_000);
        tx.try_send(part(5_000)).unwrap();
        assert!(tx.try_send(part(10)).is_err());
        let waiting = tokio::spawn(async move {
            tx.send(part(5_000)).await.unwrap();
        });
        assert_eq!(rx.recv().await.unwrap().payload_len(), 5_000);
        waiting.await.unwrap();
        assert_eq!(rx.recv().await.unwrap().payload_len(), 5_000);
        assert!(rx.is_empty());
    }

    #[tokio::test]
    async fn a_plain_sender_counts_frames_only() {
        let (tx, mut rx) = mpsc::channel(2);
        let tx = FrameSender::from(tx);
        tx.try_send(part(1 << 20)).unwrap();
        tx.try_send(part(1 << 20)).unwrap();
        assert!(tx.try_send(part(3)).is_err());
        assert!(FrameQueue::recv(&mut rx).await.is_some());
    }
}
