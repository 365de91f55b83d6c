//! The files plugin through a real sandbox: round trips, listings, errors
//! with their OS kind and path, atomic uploads, and a 256 MiB file both ways
//! with flat memory.

mod support;

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agentix::{Blob, ErrorKind, RemoteError, Sandbox, SandboxConfig};
use agentix_files::transfer::{self, TransferError};
use agentix_files::{EntryType, FileError, FileErrorKind};
use support::{bundle_path, rss_kib, sandbox_with, scratch_dir, worker_pid_from_health};

/// A sandbox whose files root is the temp dir, where the tests' scratch
/// directories are.
async fn sandbox() -> Sandbox {
    // The tests hand the sandbox files the host made, and read back what
    // it wrote, as a host's own user shares its files: a plain process tree.
    let config = SandboxConfig::new(bundle_path())
        .files_root(std::env::temp_dir())
        .isolation(agentix::Isolation::None)
        .run_as(agentix::RunAs::HostUser);
    sandbox_with(config).await
}

fn p(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

fn file_error(err: RemoteError) -> FileError {
    assert_eq!(err.kind, ErrorKind::Raised, "{err}");
    err.data_as()
        .unwrap_or_else(|e| panic!("no FileError in {err:?}: {e}"))
}

#[tokio::test]
async fn small_files_round_trip_and_listings_describe_them() {
    let sb = sandbox().await;
    let dir = scratch_dir("files-small");
    let nested = dir.join("a/b");
    sb.remote(agentix_files::mkdir, (p(&nested), true))
        .await
        .unwrap();
    let target = nested.join("hello.bin");
    let content: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    let stat = sb
        .remote(
            agentix_files::upload,
            (p(&target), Blob::from(content.clone())),
        )
        .await
        .unwrap();
    assert_eq!((stat.name.as_str(), stat.size), ("hello.bin", 70_000));
    assert_eq!(stat.entry_type, EntryType::File);
    assert_eq!(std::fs::read(&target).unwrap(), content, "on disk");
    assert_eq!(
        transfer::download_bytes(&sb, &p(&target)).await.unwrap(),
        content
    );

    std::os::unix::fs::symlink(&target, nested.join("link")).unwrap();
    std::fs::create_dir(nested.join("sub")).unwrap();
    let entries = sb.remote(agentix_files::list, (p(&nested),)).await.unwrap();
    let summary: Vec<(&str, EntryType)> = entries
        .iter()
        .map(|e| (e.name.as_str(), e.entry_type))
        .collect();
    assert_eq!(
        summary,
        [
            ("hello.bin", EntryType::File),
            ("link", EntryType::Symlink),
            ("sub", EntryType::Dir)
        ]
    );
    let file = &entries[0];
    assert_eq!(file.size, 70_000);
    let meta = std::fs::metadata(&target).unwrap();
    use std::os::unix::fs::MetadataExt as _;
    assert_eq!(file.mode, meta.mode() & 0o7777);
    assert_eq!(file.mtime_ms / 1000, meta.mtime());

    // An empty file is a file too.
    let empty = dir.join("empty");
    sb.remote(agentix_files::upload, (p(&empty), Blob::new()))
        .await
        .unwrap();
    assert!(transfer::download_bytes(&sb, &p(&empty))
        .await
        .unwrap()
        .is_empty());

    sb.remote(agentix_files::remove, (p(&dir.join("a")), true))
        .await
        .unwrap();
    assert!(!dir.join("a").exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn errors_carry_the_os_kind_and_the_path() {
    let sb = sandbox().await;
    let dir = scratch_dir("files-errors");
    let missing = p(&dir.join("missing"));
    let file = dir.join("file");
    std::fs::write(&file, b"x").unwrap();
    std::fs::create_dir(dir.join("full")).unwrap();
    std::fs::write(dir.join("full/inside"), b"y").unwrap();

    let e = file_error(
        sb.remote(agentix_files::stat, (missing.clone(),))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (e.kind, e.path.as_str()),
        (FileErrorKind::NotFound, missing.as_str())
    );
    assert!(e.message.contains(&missing), "{}", e.message);

    let e = file_error(
        sb.remote(agentix_files::list, (p(&file),))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.kind, e.path), (FileErrorKind::NotADirectory, p(&file)));

    let e = file_error(
        sb.remote(agentix_files::remove, (p(&dir.join("full")), false))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.kind, FileErrorKind::DirectoryNotEmpty);
    assert!(dir.join("full/inside").exists());

    let e = file_error(
        sb.remote(agentix_files::mkdir, (p(&dir), false))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.kind, FileErrorKind::AlreadyExists);

    let e = file_error(
        sb.remote(agentix_files::upload, (p(&dir), Blob::from(vec![1])))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.kind, e.path), (FileErrorKind::IsADirectory, p(&dir)));

    let into_missing = dir.join("no/such/dir/f");
    let e = file_error(
        sb.remote(
            agentix_files::upload,
            (p(&into_missing), Blob::from(vec![1])),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.kind, FileErrorKind::NotFound);
    assert_eq!(
        e.path,
        p(&dir.join("no/such/dir")),
        "names the missing directory"
    );

    // Downloads fail as the stream's first item, and the helpers say where.
    match transfer::download_bytes(&sb, &missing).await {
        Err(TransferError::File(e)) => assert_eq!(e.kind, FileErrorKind::NotFound),
        other => panic!("expected a FileError, got {other:?}"),
    }
    match transfer::download_bytes(&sb, &p(&dir)).await {
        Err(TransferError::File(e)) => assert_eq!(e.kind, FileErrorKind::IsADirectory),
        other => panic!("expected a FileError, got {other:?}"),
    }
    match transfer::upload_from(&sb, dir.join("no-local-file"), &missing).await {
        Err(TransferError::Local { path, source }) => {
            assert_eq!(path, dir.join("no-local-file"));
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("expected a local error, got {other:?}"),
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn an_upload_replaces_its_target_only_when_complete() {
    let sb = sandbox().await;
    let dir = scratch_dir("files-atomic");
    let target = dir.join("data");
    std::fs::write(&target, b"old content").unwrap();
    let hidden = || {
        std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect::<Vec<_>>()
    };

    // Half an upload: the target keeps its old content; abort leaves nothing.
    let id = open_with_first_chunk(&sb, &target, 1000).await;
    assert_eq!(std::fs::read(&target).unwrap(), b"old content");
    assert_eq!(hidden().len(), 1, "the chunk went to a temporary file");
    sb.remote(agentix_files::upload_abort, (id,)).await.unwrap();
    assert!(hidden().is_empty(), "abort removes the temporary file");
    assert_eq!(std::fs::read(&target).unwrap(), b"old content");

    // A commit that did not get every byte is refused and changes nothing.
    let id = open_with_first_chunk(&sb, &target, 10).await;
    let e = file_error(
        sb.remote(agentix_files::upload_commit, (id, 20))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.kind, FileErrorKind::InvalidInput);
    assert!(
        e.message
            .contains("got 10 bytes in 1 ranges, not bytes 0..20 each once"),
        "{}",
        e.message
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"old content");
    assert!(hidden().is_empty());
    let e = file_error(
        sb.remote(agentix_files::upload_chunk, (id, 10, Blob::from(vec![1])))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.kind, FileErrorKind::InvalidInput, "the upload is over");

    // A big upload cancelled midway leaves the target as it was.
    let local = dir.join("local-big");
    write_pattern(&local, 64 << 20);
    let target_name = p(&target);
    // Dropped as soon as its first bytes reached the temporary file.
    tokio::select! {
        done = transfer::upload_from(&sb, &local, &target_name) => {
            panic!("the upload finished before it could be cancelled: {done:?}")
        }
        () = async {
            while !hidden_has_bytes(&dir) {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        } => {}
    }
    assert_eq!(std::fs::read(&target).unwrap(), b"old content");

    // Chunks in any order, then a commit: the new content, whole, with the
    // replaced file's permissions.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).unwrap();
    let id = sb
        .remote(agentix_files::upload_open, (p(&target), None))
        .await
        .unwrap();
    for (offset, part) in [(6, "world"), (0, "hello ")] {
        sb.remote(
            agentix_files::upload_chunk,
            (id, offset, Blob::from(part.as_bytes().to_vec())),
        )
        .await
        .unwrap();
    }
    let stat = sb
        .remote(agentix_files::upload_commit, (id, 11))
        .await
        .unwrap();
    assert_eq!((stat.size, stat.mode), (11, 0o640));
    assert_eq!(std::fs::read(&target).unwrap(), b"hello world");
    let _ = std::fs::remove_dir_all(dir);
}

/// Starts an upload to `target` and sends its first `len` bytes; returns
/// the upload's id.
async fn open_with_first_chunk(sb: &Sandbox, target: &Path, len: usize) -> u64 {
    let id = sb
        .remote(agentix_files::upload_open, (p(target), None))
        .await
        .unwrap();
    sb.remote(
        agentix_files::upload_chunk,
        (id, 0, Blob::from(vec![9u8; len])),
    )
    .await
    .unwrap();
    id
}

/// Whether a hidden (temporary) file in `dir` has any bytes yet.
fn hidden_has_bytes(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .any(|e| e.metadata().is_ok_and(|m| m.len() > 0))
}

/// Writes `size` bytes of a position-dependent pattern to `path`.
fn write_pattern(path: &Path, size: usize) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut block = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        for word in block.chunks_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            word.copy_from_slice(&state.to_le_bytes()[..word.len()]);
        }
        let n = left.min(block.len());
        out.write_all(&block[..n]).unwrap();
        left -= n;
    }
    out.flush().unwrap();
}

/// Whether two files hold the same bytes, compared a block at a time.
fn same_bytes(a: &Path, b: &Path) -> bool {
    let (mut a, mut b) = (
        std::fs::File::open(a).unwrap(),
        std::fs::File::open(b).unwrap(),
    );
    let (mut x, mut y) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = read_full(&mut a, &mut x);
        let m = read_full(&mut b, &mut y);
        if n != m || x[..n] != y[..m] {
            return false;
        }
        if n == 0 {
            return true;
        }
    }
}

fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]).unwrap() {
            0 => break,
            k => n += k,
        }
    }
    n
}

/// Samples the peak RSS growth of `pid` over `base` until `stop` is set.
fn watch_rss(pid: u32, stop: Arc<AtomicBool>) -> (Arc<AtomicU64>, std::thread::JoinHandle<()>) {
    let peak = Arc::new(AtomicU64::new(rss_kib(pid)));
    let sampled = peak.clone();
    let handle = std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            sampled.fetch_max(rss_kib(pid), Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    (peak, handle)
}

async fn transfer_both_ways(sb: &Sandbox, local: &Path, remote: &str, back: &Path) {
    let stat = transfer::upload_from(sb, local, remote).await.unwrap();
    assert_eq!(stat.size, std::fs::metadata(local).unwrap().len());
    let n = transfer::download_to(sb, remote, back).await.unwrap();
    assert_eq!(n, stat.size);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_256_mib_file_goes_both_ways_byte_exact_with_flat_memory() {
    let sb = sandbox().await;
    let dir = scratch_dir("files-big");
    let local = dir.join("big.bin");
    let remote = dir.join("in-sandbox/big.bin");
    let back = dir.join("back.bin");
    std::fs::create_dir(dir.join("in-sandbox")).unwrap();
    write_pattern(&local, 256 << 20);

    let worker = worker_pid_from_health(&sb).await;
    let server = sb.server_pid().expect("a local sandbox");
    let host = std::process::id();
    let (worker_before, host_before) = (rss_kib(worker), rss_kib(host));
    let server_before = rss_kib(server);
    let stop = Arc::new(AtomicBool::new(false));
    let (worker_peak, w) = watch_rss(worker, stop.clone());
    let (host_peak, h) = watch_rss(host, stop.clone());
    transfer_both_ways(&sb, &local, &p(&remote), &back).await;
    stop.store(true, Ordering::Relaxed);
    w.join().unwrap();
    h.join().unwrap();

    assert!(same_bytes(&local, &remote), "the sandbox's copy differs");
    assert!(same_bytes(&local, &back), "the downloaded copy differs");
    let worker_growth = worker_peak
        .load(Ordering::Relaxed)
        .saturating_sub(worker_before);
    let host_growth = host_peak
        .load(Ordering::Relaxed)
        .saturating_sub(host_before);
    eprintln!("worker grew {worker_growth} KiB, host grew {host_growth} KiB");
    assert!(
        worker_growth < 64 << 10,
        "worker grew {worker_growth} KiB for 256 MiB"
    );
    assert!(
        host_growth < 64 << 10,
        "host grew {host_growth} KiB for 256 MiB"
    );

    // Once the transfer is over, the sandbox hands the message buffers back
    // (about 15 MiB would stay without the allocator's idle trimming; what
    // remains is the connection's own state).
    let before = server_before + worker_before;
    let mut after = 0;
    let settled = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            after = rss_kib(server) + rss_kib(worker);
            if after < before + (12 << 10) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    eprintln!(
        "server + worker kept {} KiB after the transfer",
        after.saturating_sub(before)
    );
    assert!(
        settled.is_ok(),
        "server + worker kept {} KiB after the transfer",
        after.saturating_sub(before)
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn an_uploaded_file_keeps_its_local_mode() {
    use std::os::unix::fs::PermissionsExt as _;
    let sb = sandbox().await;
    let dir = scratch_dir("files-mode");
    let local = dir.join("tool.sh");
    std::fs::write(&local, "#!/bin/sh\necho ran\n").unwrap();
    std::fs::set_permissions(&local, std::fs::Permissions::from_mode(0o750)).unwrap();
    let remote = dir.join("copy.sh");
    let stat = transfer::upload_from(&sb, &local, &p(&remote))
        .await
        .unwrap();
    assert_eq!(stat.mode, 0o750);
    // Multi-chunk uploads from memory take the same path.
    let big: Vec<u8> = (0..3 * agentix_files::CHUNK + 17)
        .map(|i| (i % 251) as u8)
        .collect();
    let remote_big = dir.join("big");
    transfer::upload_bytes(&sb, &big, &p(&remote_big))
        .await
        .unwrap();
    assert_eq!(std::fs::read(&remote_big).unwrap(), big);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_killed_workers_temporary_uploads_are_removed_by_the_next_worker() {
    let sb = sandbox().await;
    let dir = scratch_dir("leftover-uploads");
    let target = dir.join("big.bin");
    open_with_first_chunk(&sb, &target, 1000).await;
    let hidden = || {
        std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".agentix-upload-"))
            .count()
    };
    assert_eq!(hidden(), 1, "the upload in progress has its temporary file");
    let pid = worker_pid_from_health(&sb).await;
    agentix_wire::process::signal_pid(pid, libc::SIGKILL);
    support::wait_until("a new worker", Duration::from_secs(20), || {
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
    })
    .await;
    // The next worker cleans up before it takes this call.
    sb.remote(agentix_files::stat, (p(&dir),)).await.unwrap();
    assert_eq!(
        hidden(),
        0,
        "the killed worker's temporary file is still there"
    );
    assert!(!target.exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_files_root_keeps_every_path_inside_the_sandbox() {
    // The default root: the sandbox's own directory.
    let sb = sandbox_with(SandboxConfig::new(bundle_path())).await;
    let home = sb.local_dir().unwrap().to_path_buf();
    let outside = scratch_dir("outside-root");
    std::fs::write(outside.join("secret"), b"host data").unwrap();
    std::os::unix::fs::symlink(&outside, home.join("escape")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", home.join("hostname")).unwrap();
    let denied = |err: RemoteError| {
        let e = file_error(err);
        assert_eq!(e.kind, FileErrorKind::PermissionDenied, "{e:?}");
    };
    // Absolute paths outside, `..`, and symlinks that lead out are refused.
    denied(
        sb.remote(agentix_files::stat, ("/etc/passwd".into(),))
            .await
            .unwrap_err(),
    );
    denied(
        sb.remote(agentix_files::list, ("/".into(),))
            .await
            .unwrap_err(),
    );
    let up = format!(
        "../{}/secret",
        outside.file_name().unwrap().to_string_lossy()
    );
    denied(sb.remote(agentix_files::stat, (up,)).await.unwrap_err());
    denied(
        sb.remote(agentix_files::stat, ("escape/secret".into(),))
            .await
            .unwrap_err(),
    );
    let read = transfer::download_bytes(&sb, "escape/secret").await;
    assert!(
        matches!(read, Err(TransferError::File(ref e)) if e.kind == FileErrorKind::PermissionDenied),
        "{read:?}"
    );
    let read = transfer::download_bytes(&sb, "hostname").await;
    assert!(
        matches!(read, Err(TransferError::File(ref e)) if e.kind == FileErrorKind::PermissionDenied),
        "a symlink to /etc/hostname was followed: {read:?}"
    );
    denied(
        sb.remote(
            agentix_files::upload,
            ("escape/planted".into(), Blob::from(b"x".to_vec())),
        )
        .await
        .unwrap_err(),
    );
    denied(
        sb.remote(agentix_files::remove, ("escape/secret".into(), false))
            .await
            .unwrap_err(),
    );
    denied(
        sb.remote(agentix_files::mkdir, ("/tmp/made-outside".into(), false))
            .await
            .unwrap_err(),
    );
    assert_eq!(std::fs::read(outside.join("secret")).unwrap(), b"host data");
    assert!(!outside.join("planted").exists());
    // The root itself is not removed.
    denied(
        sb.remote(agentix_files::remove, (".".into(), true))
            .await
            .unwrap_err(),
    );
    assert!(home.is_dir());

    // Inside it, relative and absolute paths name the same files, and the
    // symlink itself is listed (not followed).
    let stat = sb
        .remote(
            agentix_files::upload,
            ("note.txt".into(), Blob::from(b"hi".to_vec())),
        )
        .await
        .unwrap();
    assert_eq!(stat.size, 2);
    assert_eq!(std::fs::read(home.join("note.txt")).unwrap(), b"hi");
    let absolute = p(&home.join("note.txt"));
    assert_eq!(
        transfer::download_bytes(&sb, &absolute).await.unwrap(),
        b"hi"
    );
    let listed = sb.remote(agentix_files::list, (".".into(),)).await.unwrap();
    let escape = listed.iter().find(|e| e.name == "escape").expect("listed");
    assert_eq!(escape.entry_type, EntryType::Symlink);
    let _ = std::fs::remove_dir_all(outside);
}
