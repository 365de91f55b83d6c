//! [`budgeted_channel`]: a queue bounded in items and in payload bytes.
//!
//! What crosses a pipe or a socket ranges from a few bytes to a megabyte.
//! A queue counted in items alone is sized for the small ones and holds
//! gigabytes of the large; counted in bytes as well, a burst of large
//! items waits (or, for [`BudgetedSender::try_send`], is refused) once the
//! bytes are spent. The bytes are a tokio semaphore's permits: a sender
//! takes an item's worth before it queues the item, the receiver gives
//! them back as it takes the item off. The worker's frame queue and the
//! server's queue of events for its hosts are both built on it.

use std::sync::Arc;

use tokio::sync::{mpsc, Semaphore};

use crate::codec::FrameQueue;
use crate::wire::Frame;

/// What an item costs a [`budgeted_channel`] while it waits.
pub trait PayloadLen {
    /// Its payload bytes, give or take a few fixed fields.
    fn payload_len(&self) -> usize;
}

impl PayloadLen for Frame {
    fn payload_len(&self) -> usize {
        Frame::payload_len(self)
    }
}

/// A queue of at most `items` items and about `bytes` payload bytes (one
/// item larger than `bytes` passes alone).
pub fn budgeted_channel<T: PayloadLen>(
    items: usize,
    bytes: usize,
) -> (BudgetedSender<T>, BudgetedReceiver<T>) {
    let (tx, rx) = mpsc::channel(items);
    let budget = Arc::new(ByteBudget::new(bytes));
    (
        BudgetedSender {
            tx,
            budget: Some(budget.clone()),
        },
        BudgetedReceiver { rx, budget },
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

    /// What `item` costs: its payload, at most the whole budget, so that
    /// any item can pass once the queue is empty.
    fn cost(&self, item: &impl PayloadLen) -> u32 {
        u32::try_from(item.payload_len())
            .unwrap_or(u32::MAX)
            .min(self.limit)
    }

    fn give_back(&self, item: &impl PayloadLen) {
        self.permits.add_permits(self.cost(item) as usize);
    }
}

/// The sending end of a [`budgeted_channel`]; cheap to clone.
pub struct BudgetedSender<T> {
    tx: mpsc::Sender<T>,
    /// `None` for a plain channel, bounded in items only.
    budget: Option<Arc<ByteBudget>>,
}

impl<T> Clone for BudgetedSender<T> {
    fn clone(&self) -> Self {
        BudgetedSender {
            tx: self.tx.clone(),
            budget: self.budget.clone(),
        }
    }
}

impl<T> From<mpsc::Sender<T>> for BudgetedSender<T> {
    /// A sender bounded only by the channel's count of items.
    fn from(tx: mpsc::Sender<T>) -> Self {
        BudgetedSender { tx, budget: None }
    }
}

impl<T: PayloadLen> BudgetedSender<T> {
    /// Queues `item` if the queue has room for it, in items and in bytes;
    /// gives it back otherwise.
    // The item comes back whole, as from `mpsc::Sender::try_send`, for the
    // caller to keep; boxing it would allocate on every full queue.
    #[allow(clippy::result_large_err)]
    pub fn try_send(&self, item: T) -> Result<(), mpsc::error::TrySendError<T>> {
        let Some(budget) = &self.budget else {
            return self.tx.try_send(item);
        };
        let Ok(permit) = budget.permits.try_acquire_many(budget.cost(&item)) else {
            return Err(mpsc::error::TrySendError::Full(item));
        };
        self.tx.try_send(item)?;
        permit.forget();
        Ok(())
    }

    /// Queues `item`, waiting for room in items and in bytes; gives it
    /// back if the receiver is gone.
    pub async fn send(&self, item: T) -> Result<(), mpsc::error::SendError<T>> {
        let Some(budget) = &self.budget else {
            return self.tx.send(item).await;
        };
        // The semaphore is never closed.
        let Ok(permit) = budget.permits.acquire_many(budget.cost(&item)).await else {
            return Err(mpsc::error::SendError(item));
        };
        self.tx.send(item).await?;
        permit.forget();
        Ok(())
    }
}

/// The receiving end of a [`budgeted_channel`].
pub struct BudgetedReceiver<T> {
    rx: mpsc::Receiver<T>,
    budget: Arc<ByteBudget>,
}

impl<T: PayloadLen> BudgetedReceiver<T> {
    /// The next item; `None` once every sender is gone.
    pub async fn recv(&mut self) -> Option<T> {
        let item = self.rx.recv().await?;
        self.budget.give_back(&item);
        Some(item)
    }

    /// An item that is already queued, if any.
    pub fn try_recv(&mut self) -> Option<T> {
        let item = self.rx.try_recv().ok()?;
        self.budget.give_back(&item);
        Some(item)
    }
}

impl FrameQueue for BudgetedReceiver<Frame> {
    async fn recv(&mut self) -> Option<Frame> {
        BudgetedReceiver::recv(self).await
    }

    fn try_recv(&mut self) -> Option<Frame> {
        BudgetedReceiver::try_recv(self)
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
            attachments: Vec::new(),
        }
    }

    #[tokio::test]
    async fn large_frames_are_refused_once_the_bytes_are_spent_and_pass_once_taken() {
        let (tx, mut rx) = budgeted_channel::<Frame>(1_000, 10_000);
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
        let (tx, mut rx) = budgeted_channel::<Frame>(8, 1_000);
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
        let tx = BudgetedSender::from(tx);
        tx.try_send(part(1 << 20)).unwrap();
        tx.try_send(part(1 << 20)).unwrap();
        assert!(tx.try_send(part(3)).is_err());
        assert!(FrameQueue::recv(&mut rx).await.is_some());
    }
}
