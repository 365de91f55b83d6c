//! Turning off Nagle's algorithm on the Socket.IO client's TCP connection.
//!
//! The async Socket.IO client (through `tokio-tungstenite`'s `connect_async`)
//! leaves Nagle on and offers no way to change it. A call emitted right after
//! another small frame (a pong, a cancel) is then held back until the server
//! acknowledges the first, and the server's delayed ACK makes that 40 ms: it
//! was measured as 43 ms on the first call of every sandbox. So after
//! connecting, Agentix finds its own sockets connected to the server's address
//! and sets `TCP_NODELAY` on them; other connections to that address from
//! this process only gain from it.

use std::mem::{size_of, MaybeUninit};
use std::net::SocketAddr;

/// Sets `TCP_NODELAY` on every TCP socket of this process connected to `peer`.
pub(crate) fn disable_nagle_towards(peer: SocketAddr) {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    for entry in entries.flatten() {
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if peer_of(fd) == Some(peer) {
            let one: libc::c_int = 1;
            // SAFETY: setsockopt reads `one` for its stated size; a fd that
            // was closed or reused meanwhile makes it fail harmlessly.
            unsafe {
                libc::setsockopt(
                    fd,
                    libc::IPPROTO_TCP,
                    libc::TCP_NODELAY,
                    (&one as *const libc::c_int).cast(),
                    size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
    }
}

fn peer_of(fd: i32) -> Option<SocketAddr> {
    let mut storage = MaybeUninit::<libc::sockaddr_storage>::zeroed();
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: getpeername writes at most `len` bytes into `storage`.
    let rc = unsafe { libc::getpeername(fd, storage.as_mut_ptr().cast(), &mut len) };
    if rc != 0 {
        return None;
    }
    // SAFETY: zero-initialised and (partly) filled in by the kernel.
    let storage = unsafe { storage.assume_init() };
    match storage.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the family says this is a sockaddr_in.
            let sin: libc::sockaddr_in =
                unsafe { std::ptr::read((&storage as *const libc::sockaddr_storage).cast()) };
            let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddr::from((ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this is a sockaddr_in6.
            let sin6: libc::sockaddr_in6 =
                unsafe { std::ptr::read((&storage as *const libc::sockaddr_storage).cast()) };
            let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::from((ip, u16::from_be(sin6.sin6_port))))
        }
        _ => None,
    }
}
