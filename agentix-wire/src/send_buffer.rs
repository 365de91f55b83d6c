//! The send buffer of a socket between host and server.
//!
//! A call's 1 MiB part is one websocket frame, and tungstenite keeps what
//! the socket did not take in its write buffer, moving the rest to the
//! front after every partial write. With the kernel's default send buffer
//! (about 200 KiB) a frame went out in five or six writes, and the moves
//! cost more CPU than the frame's one copy into the kernel. A send buffer
//! that holds a whole frame takes it in one write; the kernel holds only
//! what is in flight, so an idle connection costs nothing more.

use std::os::fd::AsFd;

use crate::part::SPLIT_ABOVE;

/// The send buffer asked for: two frames of the largest size. The kernel
/// caps it at `net.core.wmem_max` (a lower cap only means more writes).
pub const SEND_BUFFER_BYTES: usize = 2 * SPLIT_ABOVE;

/// Asks for a [`SEND_BUFFER_BYTES`] send buffer on `socket`; a refusal is
/// only logged, as the socket works with any buffer.
pub fn widen_send_buffer(socket: &impl AsFd) {
    if let Err(e) = socket2::SockRef::from(socket).set_send_buffer_size(SEND_BUFFER_BYTES) {
        tracing::debug!("send buffer left at the kernel's default: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_gets_the_buffer_the_kernel_allows() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        widen_send_buffer(&a);
        let after = socket2::SockRef::from(&a).send_buffer_size().unwrap();
        let cap = std::fs::read_to_string("/proc/sys/net/core/wmem_max")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        // Linux doubles what it is asked for, to leave room for its own
        // bookkeeping.
        assert_eq!(after, 2 * SEND_BUFFER_BYTES.min(cap));
    }
}
