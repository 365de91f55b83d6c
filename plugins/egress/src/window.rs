//! [`Window`]: one direction of a tunnel's flow control: a sender takes
//! room for each chunk before it sends it and waits when the window is
//! spent; the receiver's acknowledgements give the room back. An
//! acknowledgement of more than is in flight gives back only what is.

use std::sync::Mutex;

use tokio::sync::Semaphore;

use crate::protocol::WINDOW;

/// Bytes a direction may have unacknowledged.
pub struct Window {
    room: Semaphore,
    in_flight: Mutex<u64>,
}

impl Default for Window {
    fn default() -> Self {
        Window {
            room: Semaphore::new(WINDOW as usize),
            in_flight: Mutex::new(0),
        }
    }
}

impl Window {
    /// Waits for room for `bytes` (at most the whole window) and takes it;
    /// `false` once the window is closed.
    pub async fn take(&self, bytes: usize) -> bool {
        let bytes = bytes.min(WINDOW as usize) as u32;
        match self.room.acquire_many(bytes).await {
            Ok(permit) => {
                permit.forget();
                *self.in_flight() += u64::from(bytes);
                true
            }
            Err(_) => false,
        }
    }

    /// The receiver handled `bytes`: their room is free again.
    pub fn ack(&self, bytes: u64) {
        let mut in_flight = self.in_flight();
        let freed = bytes.min(*in_flight);
        *in_flight -= freed;
        self.room.add_permits(freed as usize);
    }

    /// Ends every wait: the tunnel is gone.
    pub fn close(&self) {
        self.room.close();
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, u64> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }
}
