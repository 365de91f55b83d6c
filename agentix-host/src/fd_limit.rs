//! [`raise_fd_limit`] and [`fd_limit`]: the process's limit on open files,
//! which a host running many sandboxes reaches first (a local sandbox holds
//! about four of the host's descriptors). A library changes no process
//! limit by itself: the application calls [`raise_fd_limit`] if it wants.

/// Descriptors a host holds per live local sandbox: its socket connection,
/// the server's pipes, its pidfd.
pub const FDS_PER_SANDBOX: u64 = 4;

/// The soft limit on open files now.
pub fn fd_limit() -> std::io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given.
    match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } {
        0 => Ok(limit.rlim_cur),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Raises the soft limit on open files to the hard limit (what an
/// unprivileged process may); returns the new soft limit. The common
/// default soft limit of 1024 holds about 250 local sandboxes.
pub fn raise_fd_limit() -> std::io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(limit.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_reaches_the_hard_limit_and_reads_back() {
        let raised = raise_fd_limit().unwrap();
        assert_eq!(fd_limit().unwrap(), raised);
        assert!(raised >= 1024);
    }
}
