//! [`Manifest`]: what a bundle holds, for providers and for checking it.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::build_error::BuildError;

/// The manifest's format version; a provider refuses one it does not know.
pub const ABI: u32 = 1;

/// `bundle.json`: the bundle's identity, entry point, tools and files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`ABI`] of the bundle's layout.
    pub abi: u32,
    /// The bundle binary's name.
    pub name: String,
    /// The version of the package it was built from.
    pub version: String,
    /// The target triple the programs are built for.
    pub target: String,
    /// The program to run, relative to the bundle (`bin/<name>`).
    pub entry: String,
    /// The system tools it carries, by name (each is `bin/<tool>`).
    pub tools: Vec<String>,
    /// SHA-256 of every file, by path relative to the bundle.
    pub files: BTreeMap<String, String>,
}

impl Manifest {
    /// The bundle's digest: SHA-256 of its manifest, which names every
    /// file's digest.
    pub fn digest(&self) -> String {
        hex(&Sha256::digest(self.to_json().as_bytes()))
    }

    /// The manifest as written to `bundle.json`.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a manifest always serialises")
    }
}

/// SHA-256 of the file at `path`, in hex.
pub fn file_digest(path: &Path) -> Result<String, BuildError> {
    let mut file = std::fs::File::open(path).map_err(|e| BuildError::io("cannot read", path, e))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(|e| BuildError::io("cannot read", path, e))?;
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
