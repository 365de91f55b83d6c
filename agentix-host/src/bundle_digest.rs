//! [`bundle_digest`]: a bundle's identity as a SHA-256: its file's bytes,
//! or a bundle directory's manifest (`bundle.json`, which holds the digest
//! of every file in it).

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

/// The hex SHA-256 of the bundle at `path` (a program, or a bundle
/// directory through its manifest).
pub fn bundle_digest(path: &Path) -> std::io::Result<String> {
    let file = if path.is_dir() {
        path.join("bundle.json")
    } else {
        path.to_owned()
    };
    let mut reader = std::fs::File::open(file)?;
    let mut hasher = Sha256::new();
    let mut chunk = vec![0u8; 1 << 20];
    loop {
        let n = reader.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        hasher.update(&chunk[..n]);
    }
    Ok(format!("{:x}", hasher.finalize()))
}
