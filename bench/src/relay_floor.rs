//! The floor of a sequential echo's path: its bytes through three
//! processes that do nothing else.
//!
//! A small echo crosses three processes: the host writes the call to the
//! server's Unix socket, the server writes it to the worker's pipe, and the
//! answer comes back the same way. Each crossing wakes a process that was
//! asleep, and on a virtual machine a wake-up and the sleep before it cost
//! more CPU than the little work each process does. This section runs that
//! path with plain relays: this binary started again in two roles, a
//! middle one that waits in epoll on both of its ends as the server does,
//! and a last one that blocks on its pipe as the worker does, passing
//! messages of a small echo's sizes. Their CPU per round trip is what the
//! echo's CPU figures (`echo_cpu_*_us`) are measured against: what no
//! server, worker or host on this machine can go below.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use crate::cpu_time::{CpuTimes, Per};
use crate::report::Report;

/// The role of the middle process (the server's place).
const RELAY_ROLE: &str = "relay-floor-middle";
/// The role of the last process (the worker's place).
const ECHO_ROLE: &str = "relay-floor-last";

/// Bytes of each message, as a small echo sends them: the host's call,
/// the server's frame to the worker, the worker's result, the server's
/// reply to the host.
const CALL: usize = 139;
const TO_LAST: usize = 73;
const FROM_LAST: usize = 36;
const REPLY: usize = 83;

/// Round trips timed, after as many again to warm up.
const ROUND_TRIPS: usize = 20_000;

/// Runs this process as one of the section's relays when the command line
/// names one of their roles, and exits; returns otherwise.
pub(crate) fn run_role() {
    match std::env::args().nth(1).as_deref() {
        Some(RELAY_ROLE) => std::process::exit(middle()),
        Some(ECHO_ROLE) => std::process::exit(last()),
        _ => {}
    }
}

/// Times the round trips and reports each process's CPU per round trip as
/// `relay_floor_cpu_{host,server,worker}_us`, beside the p50.
pub(crate) fn relay_floor(report: &mut Report) {
    let (mut socket, theirs) = UnixStream::pair().expect("a socket pair");
    let me = std::env::current_exe().expect("the bench knows its own path");
    let theirs_out = theirs.try_clone().expect("a second descriptor");
    let mut middle = Command::new(me)
        .arg(RELAY_ROLE)
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::from(OwnedFd::from(theirs_out)))
        .spawn()
        .expect("the middle relay starts");
    let mut message = [0u8; 4096];
    let round_trip = |socket: &mut UnixStream, message: &mut [u8]| {
        socket.write_all(&message[..CALL]).expect("the relay reads");
        socket
            .read_exact(&mut message[..REPLY])
            .expect("the relay answers");
    };
    for _ in 0..ROUND_TRIPS {
        round_trip(&mut socket, &mut message);
    }
    let last = last_pid(middle.id());
    let cpu = CpuTimes::start(middle.id(), last);
    let mut times = Vec::with_capacity(ROUND_TRIPS);
    for _ in 0..ROUND_TRIPS {
        let t = Instant::now();
        round_trip(&mut socket, &mut message);
        times.push(t.elapsed());
    }
    cpu.report(
        report,
        "relay_floor",
        "per round trip of the echo's bytes through plain relays (the floor of echo_cpu_*)",
        Per::Call,
        ROUND_TRIPS as f64,
    );
    times.sort();
    report.add(
        "relay_floor_p50_us",
        "the echo's bytes through three plain processes and back (the floor of echo_p50_us), p50",
        "µs",
        crate::us(times[times.len() / 2]),
    );
    drop(socket);
    let _ = middle.wait();
}

/// The pid of the middle relay's one child, the last relay.
fn last_pid(middle: u32) -> u32 {
    let children = std::fs::read_to_string(format!("/proc/{middle}/task/{middle}/children"))
        .expect("the middle relay's children");
    children
        .split_whitespace()
        .next()
        .and_then(|pid| pid.parse().ok())
        .expect("the middle relay started the last one")
}

/// The middle relay: the socket on stdin and stdout, the last relay on a pair of
/// pipes, both waited on with epoll as the server waits; returns the exit
/// code.
fn middle() -> i32 {
    let me = std::env::current_exe().expect("own path");
    let mut last = Command::new(me)
        .arg(ECHO_ROLE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the last relay starts");
    let to_last = last.stdin.take().expect("piped");
    let from_last = last.stdout.take().expect("piped");
    let code = pump(to_last, from_last);
    // The last relay's stdin closed with `pump`: it ends.
    let _ = last.wait();
    code
}

/// Relays between the socket (stdin and stdout) and the last relay until
/// either end closes.
fn pump(mut to_last: ChildStdin, mut from_last: ChildStdout) -> i32 {
    let mut socket = unbuffered(std::io::stdin().as_fd());
    let mut socket_out = unbuffered(std::io::stdout().as_fd());
    // SAFETY: plain epoll calls on descriptors this process holds open.
    let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(epoll >= 0, "epoll_create1");
    for fd in [0, from_last.as_raw_fd()] {
        let mut event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: as above.
        let added = unsafe { libc::epoll_ctl(epoll, libc::EPOLL_CTL_ADD, fd, &mut event) };
        assert_eq!(added, 0, "epoll_ctl");
    }
    let mut buf = [0u8; 65536];
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 8];
    loop {
        // SAFETY: `events` has room for the 8 events asked for.
        let n = unsafe { libc::epoll_wait(epoll, events.as_mut_ptr(), 8, -1) };
        for event in events.iter().take(n.max(0) as usize) {
            if event.u64 == 0 {
                match socket.read(&mut buf) {
                    Ok(0) | Err(_) => return 0,
                    Ok(_) => to_last.write_all(&buf[..TO_LAST]).expect("the last relay"),
                }
            } else {
                match from_last.read(&mut buf) {
                    Ok(0) | Err(_) => return 0,
                    Ok(_) => {
                        if socket_out.write_all(&buf[..REPLY]).is_err() {
                            return 0;
                        }
                    }
                }
            }
        }
    }
}

/// A file on a duplicate of `fd`: reads and writes straight to the
/// descriptor, with none of std's stdin or stdout buffering.
fn unbuffered(fd: BorrowedFd<'_>) -> File {
    File::from(fd.try_clone_to_owned().expect("a duplicate descriptor"))
}

/// The last relay: blocks on its pipe and answers every message.
fn last() -> i32 {
    let mut input = unbuffered(std::io::stdin().as_fd());
    let mut output = unbuffered(std::io::stdout().as_fd());
    let mut buf = [0u8; 65536];
    loop {
        match input.read(&mut buf) {
            Ok(0) | Err(_) => return 0,
            Ok(_) => {
                if output.write_all(&buf[..FROM_LAST]).is_err() {
                    return 1;
                }
            }
        }
    }
}
