//! [`random_hex`]: sandbox ids and tokens, from the kernel's randomness.

use std::io::Read;

/// `bytes` random bytes from the kernel, hex-encoded. Panics when the
/// kernel has no randomness to give: no safe token can be made then.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf));
    if let Err(e) = read {
        panic!("cannot read /dev/urandom for a sandbox token: {e}");
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}
