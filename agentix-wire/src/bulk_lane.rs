//! [`BulkLane`]: the frames of large payloads, which a pipe writer sends
//! one at a time between everything else.
//!
//! [`crate::codec::write_frames`] writes small frames as soon as they are
//! queued and takes one frame from this lane only when none is waiting, so
//! a 1 MiB part is the most a small frame ever waits behind. A payload's
//! parts and the frame that ends it stay in order. The lane keeps the order
//! they were queued in: the server queues a call's parts all at once, so the
//! worker collects one payload at a time; a
//! worker's results may interleave, and the server keeps parts per call.

use std::collections::{HashMap, VecDeque};

use crate::wire::Frame;

/// Frames of large payloads waiting for the pipe, oldest first.
#[derive(Default)]
pub(crate) struct BulkLane {
    frames: VecDeque<Frame>,
    /// How many queued frames each call id has.
    queued: HashMap<u64, usize>,
}

impl BulkLane {
    /// Queues `frame` if it belongs here, else hands it back to be written
    /// at once. Parts belong here, and so does whatever follows a call's
    /// queued parts (its last piece). A cancel or an error ends its call, so
    /// the rest of that call's payload is dropped before it goes out.
    pub(crate) fn route(&mut self, frame: Frame) -> Option<Frame> {
        match frame {
            Frame::Part { id, .. } => {
                self.push(id, frame);
                None
            }
            Frame::Cancel { id } | Frame::Error { id, .. } if self.queued.contains_key(&id) => {
                self.frames.retain(|f| frame_id(f) != Some(id));
                self.queued.remove(&id);
                Some(frame)
            }
            Frame::Call { id, .. } | Frame::Result { id, .. } if self.queued.contains_key(&id) => {
                self.push(id, frame);
                None
            }
            frame => Some(frame),
        }
    }

    /// The next frame to write, if any.
    pub(crate) fn pop(&mut self) -> Option<Frame> {
        let frame = self.frames.pop_front()?;
        if let Some(id) = frame_id(&frame) {
            if let Some(n) = self.queued.get_mut(&id) {
                *n -= 1;
                if *n == 0 {
                    self.queued.remove(&id);
                }
            }
        }
        Some(frame)
    }

    /// Whether nothing waits here.
    pub(crate) fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    fn push(&mut self, id: u64, frame: Frame) {
        *self.queued.entry(id).or_default() += 1;
        self.frames.push_back(frame);
    }
}

fn frame_id(frame: &Frame) -> Option<u64> {
    match frame {
        Frame::Part { id, .. } | Frame::Call { id, .. } | Frame::Result { id, .. } => Some(*id),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame_bytes::FrameBytes;

    fn part(id: u64) -> Frame {
        Frame::Part {
            id,
            total: 3,
            bytes: FrameBytes(bytes::Bytes::from_static(b"ab")),
        }
    }

    fn result(id: u64) -> Frame {
        Frame::Result {
            id,
            value: FrameBytes::from(b"c".to_vec()),
        }
    }

    #[test]
    fn small_frames_pass_and_a_payload_stays_in_order() {
        let mut lane = BulkLane::default();
        assert!(lane.route(part(1)).is_none());
        assert!(lane.route(part(1)).is_none());
        // Another call's result is not held behind call 1's parts.
        assert_eq!(lane.route(result(2)), Some(result(2)));
        // Call 1's own result follows its parts.
        assert!(lane.route(result(1)).is_none());
        assert_eq!(lane.pop(), Some(part(1)));
        assert_eq!(lane.pop(), Some(part(1)));
        assert_eq!(lane.pop(), Some(result(1)));
        assert!(lane.is_empty());
        // With its parts gone, call 1 has nothing to wait behind.
        assert_eq!(lane.route(result(1)), Some(result(1)));
    }

    #[test]
    fn a_cancel_drops_the_rest_of_its_payload() {
        let mut lane = BulkLane::default();
        lane.route(part(1));
        lane.route(part(2));
        lane.route(part(1));
        let cancel = Frame::Cancel { id: 1 };
        assert_eq!(lane.route(cancel.clone()), Some(cancel));
        assert_eq!(lane.pop(), Some(part(2)));
        assert!(lane.pop().is_none());
        assert_eq!(lane.route(result(1)), Some(result(1)));
    }
}
