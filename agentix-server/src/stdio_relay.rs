//! [`run`]: the bundle's `relay` role, which joins its stdin and stdout to
//! the sandbox server's Unix socket.
//!
//! A host that reaches a container's engine only through the engine's API
//! (an engine on another machine) cannot dial the server's socket: it asks
//! the engine to run `BUNDLE relay PATH` in the container instead, and the
//! exec's attached stream carries the connection's bytes both ways. The
//! engine's own connection (TLS, SSH) protects them; nothing is published.
//! Blocking copies on two threads: one connection per process, nothing to
//! schedule.

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;

/// Relays between stdio and the socket the one argument names (`PATH` or
/// `unix:PATH`) until the socket's side ends; returns the exit code.
pub fn run(args: Vec<std::ffi::OsString>) -> i32 {
    let [path] = args.as_slice() else {
        eprintln!("usage: BUNDLE relay SOCKET_PATH");
        return 2;
    };
    let path = path.to_string_lossy();
    let path = path.strip_prefix("unix:").unwrap_or(&path);
    let socket = match UnixStream::connect(path) {
        Ok(socket) => socket,
        Err(e) => {
            eprintln!("agentix relay: cannot connect to {path}: {e}");
            return 1;
        }
    };
    let Ok(mut to_server) = socket.try_clone() else {
        eprintln!("agentix relay: cannot share the socket between its two directions");
        return 1;
    };
    // The host's bytes in; their end (the host closed) ends the write half,
    // and the server, seeing it, closes the connection.
    std::thread::spawn(move || {
        let _ = copy_flushing(&mut std::io::stdin().lock(), &mut to_server);
        let _ = to_server.shutdown(Shutdown::Write);
    });
    let mut from_server = socket;
    match copy_flushing(&mut from_server, &mut std::io::stdout().lock()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("agentix relay: {e}");
            1
        }
    }
}

/// Copies `from` to `to` until `from` ends, flushing after every read: a
/// small frame must not wait in a buffer for more.
fn copy_flushing(from: &mut impl Read, to: &mut impl Write) -> std::io::Result<()> {
    let mut buf = vec![0; 256 << 10];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
        to.flush()?;
    }
}
