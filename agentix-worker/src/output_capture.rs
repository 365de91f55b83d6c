//! [`OutputCapture`]: the worker reads its own stdout and stderr, so that a
//! line it prints and a record it logs right after reach the host, and the
//! sandbox log file, in the order they were made, and nothing is lost when
//! the worker dies.
//!
//! The server gives the worker pipes as fds 1 and 2 and their read ends as
//! [`WORKER_STDOUT_FD`] and [`WORKER_STDERR_FD`]. Every `tracing` record
//! first takes what is waiting in those pipes (one `poll` when nothing is),
//! turns it into records and queues them ahead of itself; a thread takes
//! the rest as it comes. Whatever one thread printed before it logged is in
//! the pipe by then, so its lines and records keep their order, and the
//! side channel numbers them in that order.
//!
//! Output is only *peeked* (`tee`) when it becomes records; it leaves the
//! pipe once the side channel has written those records to the server
//! ([`OutputPipes::consume`]). The server keeps its own copy of the read
//! ends and reads what is left once the worker has died: a worker killed
//! between a print and its forwarding loses nothing (a line forwarded in
//! the microseconds before the kill may arrive twice).
//!
//! Output is read at the descriptor level, so `println!`, C code and child
//! processes that inherit stdout are all caught. A line is cut at
//! [`MAX_LINE`] bytes, and a last line with no newline is sent once nothing
//! more has come for [`PARTIAL_AFTER`].

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use agentix_wire::log_record::{LogRecord, TARGET_STDERR, TARGET_STDOUT};
use agentix_wire::wire::{WORKER_STDERR_FD, WORKER_STDOUT_FD};

/// Longest line sent as one record; longer ones are cut.
pub const MAX_LINE: usize = 64 << 10;
/// How long a line without its newline waits for the rest.
pub const PARTIAL_AFTER: Duration = Duration::from_millis(100);
/// Most bytes peeked at once: a pipe's capacity (see `process::pipe`).
const PEEK_BYTES: usize = 1 << 20;

/// A captured line and the bytes of the pipe it came from.
pub struct OutputLine {
    /// The line, as a record.
    pub record: LogRecord,
    /// 0 for stdout, 1 for stderr.
    pub stream: usize,
    /// How many bytes of that pipe it covers (its newline included).
    pub bytes: usize,
}

/// Where captured lines go: the side channel's queue.
pub type LineSink = Box<dyn Fn(OutputLine) + Send + Sync>;

/// The two pipes' fronts: what has been peeked and not yet consumed.
pub struct OutputPipes {
    front: Mutex<[Front; 2]>,
    /// Where consumed and re-peeked bytes are spliced to, uncopied.
    null: OwnedFd,
    /// Signalled when bytes are consumed, for the capture thread, which
    /// would otherwise see the unconsumed bytes as new input forever.
    consumed: Condvar,
}

struct Front {
    fd: OwnedFd,
    /// A pipe to `tee` into: peeking copies without consuming.
    scratch: (OwnedFd, OwnedFd),
    /// Bytes at the front of the pipe already peeked.
    peeked: usize,
}

impl OutputPipes {
    /// Takes the read ends the server gave, if it did.
    pub fn open() -> Option<Arc<OutputPipes>> {
        let front = |fd| -> Option<Front> {
            let fd = take_fd(fd)?;
            let scratch = agentix_wire::process::pipe().ok()?;
            // SAFETY: fcntl on a descriptor we own, with integer arguments.
            unsafe {
                libc::fcntl(
                    scratch.1.as_raw_fd(),
                    libc::F_SETPIPE_SZ,
                    PEEK_BYTES as libc::c_int,
                );
                let flags = libc::fcntl(scratch.0.as_raw_fd(), libc::F_GETFL);
                libc::fcntl(
                    scratch.0.as_raw_fd(),
                    libc::F_SETFL,
                    flags | libc::O_NONBLOCK,
                );
            }
            Some(Front {
                fd,
                scratch,
                peeked: 0,
            })
        };
        let null = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .ok()?;
        Some(Arc::new(OutputPipes {
            front: Mutex::new([front(WORKER_STDOUT_FD)?, front(WORKER_STDERR_FD)?]),
            null: null.into(),
            consumed: Condvar::new(),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, [Front; 2]> {
        self.front.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Removes `bytes[i]` bytes from the front of pipe `i`: their lines
    /// have reached the server.
    pub fn consume(&self, bytes: [usize; 2]) {
        if bytes == [0, 0] {
            return;
        }
        let mut fronts = self.lock();
        for (front, left) in fronts.iter_mut().zip(bytes) {
            front.peeked = front.peeked.saturating_sub(left);
            discard(front.fd.as_raw_fd(), self.null.as_raw_fd(), left);
        }
        self.consumed.notify_all();
    }

    /// Appends to `out[i]` the bytes of pipe `i` not peeked before.
    fn peek_new(&self, out: &mut [Vec<u8>; 2]) {
        let mut fronts = self.lock();
        for (front, out) in fronts.iter_mut().zip(out.iter_mut()) {
            // SAFETY: tee between two pipes we own, non-blocking.
            let teed = unsafe {
                libc::tee(
                    front.fd.as_raw_fd(),
                    front.scratch.1.as_raw_fd(),
                    PEEK_BYTES,
                    libc::SPLICE_F_NONBLOCK,
                )
            };
            if teed <= 0 {
                continue;
            }
            let teed = teed as usize;
            // The front was seen before: drop it from the copy, uncopied.
            let seen = front.peeked.min(teed);
            discard(front.scratch.0.as_raw_fd(), self.null.as_raw_fd(), seen);
            if teed == seen {
                continue;
            }
            let start = out.len();
            out.resize(start + teed - seen, 0);
            let mut got = 0;
            while start + got < out.len() {
                // SAFETY: reading into `out` past what was already read.
                let n = unsafe {
                    libc::read(
                        front.scratch.0.as_raw_fd(),
                        out[start + got..].as_mut_ptr().cast(),
                        out.len() - start - got,
                    )
                };
                if n <= 0 {
                    break;
                }
                got += n as usize;
            }
            out.truncate(start + got);
            front.peeked = seen + got;
        }
    }

    /// The read ends, for `poll`.
    fn raw_fds(&self) -> [libc::c_int; 2] {
        let fronts = self.lock();
        [fronts[0].fd.as_raw_fd(), fronts[1].fd.as_raw_fd()]
    }

    /// Waits until something is consumed, or `limit` passed.
    fn wait_consumed(&self, limit: Duration) {
        let fronts = self.lock();
        let _ = self.consumed.wait_timeout(fronts, limit);
    }
}

/// The worker's captured stdout and stderr, turned into records.
pub struct OutputCapture {
    pipes: Arc<OutputPipes>,
    /// The line each stream has begun; held while lines are queued, so
    /// that lines and records keep their order.
    pending: Mutex<[Vec<u8>; 2]>,
    sink: LineSink,
    worker_id: String,
}

impl OutputCapture {
    /// Starts capturing from `pipes`; lines go to `sink`.
    pub fn start(
        pipes: Arc<OutputPipes>,
        sink: LineSink,
        worker_id: String,
    ) -> Option<Arc<OutputCapture>> {
        let capture = Arc::new(OutputCapture {
            pipes,
            pending: Mutex::new([Vec::new(), Vec::new()]),
            sink,
            worker_id,
        });
        let reader = capture.clone();
        std::thread::Builder::new()
            .name("agentix-output".into())
            .spawn(move || reader.run())
            .ok()?;
        Some(capture)
    }

    /// Queues every complete line waiting in the pipes, ahead of whatever
    /// the caller queues next.
    pub fn drain(&self) {
        let mut pending = self.lock();
        if poll(&self.pipes.raw_fds(), 0) > 0 {
            self.take_lines(&mut pending, false);
        }
    }

    fn lock(&self) -> MutexGuard<'_, [Vec<u8>; 2]> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The capture thread: waits for output and queues it; sends a line
    /// left without its newline once the stream has been quiet a while.
    fn run(self: Arc<Self>) {
        let mut fds = self.pipes.raw_fds();
        let mut hung_up = [false; 2];
        loop {
            let partial = self.lock().iter().any(|p| !p.is_empty());
            let wait = match partial {
                true => PARTIAL_AFTER.as_millis() as libc::c_int,
                false => -1,
            };
            // Waits without the lock, so loggers can drain meanwhile.
            let woke = poll_hup(&fds, wait, &mut hung_up);
            if woke < 0 {
                return;
            }
            let mut pending = self.lock();
            // A stream with no writer left and nothing in it is done.
            let ended = hung_up.iter().any(|&h| h);
            let new = self.take_lines(&mut pending, woke == 0 || ended);
            drop(pending);
            for (fd, hup) in fds.iter_mut().zip(hung_up) {
                if hup {
                    *fd = -1;
                }
            }
            if fds.iter().all(|&fd| fd < 0) {
                return;
            }
            if woke > 0 && !new && !ended {
                // Only bytes already queued and not yet consumed: wait for
                // the side channel rather than spin on them.
                self.pipes.wait_consumed(Duration::from_millis(5));
            }
        }
    }

    /// Peeks new output and queues its complete lines (with
    /// `flush_partial`, unfinished ones too); whether there was any.
    fn take_lines(&self, pending: &mut [Vec<u8>; 2], flush_partial: bool) -> bool {
        let before = [pending[0].len(), pending[1].len()];
        self.pipes.peek_new(pending);
        let new = pending[0].len() > before[0] || pending[1].len() > before[1];
        for (stream, bytes) in pending.iter_mut().enumerate() {
            let mut start = 0;
            while let Some(end) = bytes[start..].iter().position(|&b| b == b'\n') {
                self.send(stream, &bytes[start..start + end], end + 1);
                start += end + 1;
            }
            while bytes.len() - start >= MAX_LINE {
                self.send(stream, &bytes[start..start + MAX_LINE], MAX_LINE);
                start += MAX_LINE;
            }
            if flush_partial && start < bytes.len() {
                self.send(stream, &bytes[start..], bytes.len() - start);
                start = bytes.len();
            }
            bytes.drain(..start);
        }
        new
    }

    fn send(&self, stream: usize, line: &[u8], bytes: usize) {
        let (level, target) = match stream {
            0 => ("INFO", TARGET_STDOUT),
            _ => ("WARN", TARGET_STDERR),
        };
        let text = String::from_utf8_lossy(line);
        let text = text.strip_suffix('\r').unwrap_or(&text).to_owned();
        let mut record = LogRecord::now(level, target, text);
        record.worker_id.clone_from(&self.worker_id);
        (self.sink)(OutputLine {
            record,
            stream,
            bytes,
        });
    }
}

/// Drops `bytes` bytes from the front of pipe `from` into `null`,
/// without copying them.
fn discard(from: libc::c_int, null: libc::c_int, mut bytes: usize) {
    while bytes > 0 {
        // SAFETY: splice from a pipe we own to /dev/null, no offsets.
        let n = unsafe {
            libc::splice(
                from,
                std::ptr::null_mut(),
                null,
                std::ptr::null_mut(),
                bytes,
                0,
            )
        };
        if n <= 0 {
            return;
        }
        bytes -= n as usize;
    }
}

/// `poll` for input on `fds` (a negative one is skipped): how many are
/// ready (input, or every writer gone), 0 on timeout, -1 on failure; each
/// stream's `revents` in `hung_up` says which have no writer left.
fn poll_hup(fds: &[libc::c_int; 2], wait_ms: libc::c_int, hung_up: &mut [bool; 2]) -> libc::c_int {
    let mut set = fds.map(|fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    });
    loop {
        // SAFETY: `set` is a valid array of two pollfd.
        let n = unsafe { libc::poll(set.as_mut_ptr(), 2, wait_ms) };
        if n >= 0 {
            for (p, hup) in set.iter().zip(hung_up.iter_mut()) {
                *hup = p.revents & libc::POLLHUP != 0 && p.revents & libc::POLLIN == 0;
            }
            return n;
        }
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return -1;
        }
    }
}

/// [`poll_hup`], for a caller that only asks whether anything is waiting.
fn poll(fds: &[libc::c_int; 2], wait_ms: libc::c_int) -> libc::c_int {
    poll_hup(fds, wait_ms, &mut [false; 2])
}

/// Takes `fd` if it is open, closed on exec so that the processes the
/// worker starts do not hold it. It stays blocking: the server shares it,
/// and a consume only reads bytes known to be there.
fn take_fd(fd: libc::c_int) -> Option<OwnedFd> {
    // SAFETY: fcntl only reads and sets this descriptor's flags.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) < 0 {
            return None;
        }
        // The server handed this descriptor to this process alone to read
        // while it lives.
        Some(OwnedFd::from_raw_fd(fd))
    }
}
