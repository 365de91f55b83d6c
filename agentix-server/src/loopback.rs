//! Bringing up `lo` in a fresh network namespace.
//!
//! A new network namespace has a loopback interface that is down: nothing
//! inside, not even the sandbox's own 127.0.0.1 services (abridge's
//! endpoint, the egress proxy), would work. Raising it needs the
//! namespace's `CAP_NET_ADMIN`, which only the launcher's last step holds,
//! before it runs the server.

use std::io;
use std::os::fd::AsRawFd;

use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};

nix::ioctl_read_bad!(
    /// Reads an interface's flags.
    get_flags, libc::SIOCGIFFLAGS, libc::ifreq);
nix::ioctl_write_ptr_bad!(
    /// Sets an interface's flags.
    set_flags, libc::SIOCSIFFLAGS, libc::ifreq);

/// Sets `lo` up in the calling process's network namespace.
pub(crate) fn bring_up_loopback() -> io::Result<()> {
    let sock = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    // SAFETY: an all-zero ifreq is a valid request; the name fits with its NUL.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: the request names an interface and has room for its flags.
    unsafe { get_flags(sock.as_raw_fd(), &mut request) }?;
    // SAFETY: the union's flags member is what SIOCGIFFLAGS filled.
    unsafe {
        request.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    }
    // SAFETY: the same request, with the flags to set.
    unsafe { set_flags(sock.as_raw_fd(), &request) }?;
    Ok(())
}
