//! The bundle format, defined once for what makes bundles (`agentix build`)
//! and what runs them (container providers): where a bundle is mounted,
//! its manifest (`bundle.json`) and digests, and the labels of a bundle
//! image.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Where a bundle is mounted inside a sandbox: programs look for their
/// loader and libraries under it.
pub const MOUNT: &str = "/agentix";

/// The manifest's format version; a provider refuses one it does not know.
pub const ABI: u32 = 1;

/// The manifest's file name, at the bundle's root.
pub const MANIFEST_FILE: &str = "bundle.json";

/// Bundle-image label: the entry program, relative to [`MOUNT`].
pub const LABEL_ENTRY: &str = "agentix.bundle.entry";
/// Bundle-image label: the target triple the bundle was built for.
pub const LABEL_TARGET: &str = "agentix.bundle.target";
/// Bundle-image label: the bundle's digest ([`Manifest::digest`]).
pub const LABEL_DIGEST: &str = "agentix.bundle.digest";

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

    /// The manifest of the bundle directory `dir`, or why it is not one
    /// this version can run.
    pub fn read(dir: &Path) -> Result<Manifest, String> {
        let text = std::fs::read(dir.join(MANIFEST_FILE)).map_err(|e| {
            format!(
                "it holds no readable {MANIFEST_FILE} ({e}); a bundle directory is made with \
                 `agentix build`"
            )
        })?;
        let manifest: Manifest = serde_json::from_slice(&text)
            .map_err(|e| format!("its {MANIFEST_FILE} is not a bundle manifest: {e}"))?;
        if manifest.abi != ABI {
            return Err(format!(
                "its {MANIFEST_FILE} has abi {}, this version knows abi {ABI}",
                manifest.abi
            ));
        }
        check_target(&manifest.target)?;
        Ok(manifest)
    }
}

/// Whether programs built for `target` run on this machine's architecture.
pub fn check_target(target: &str) -> Result<(), String> {
    let arch = std::env::consts::ARCH;
    match target.starts_with(arch) {
        true => Ok(()),
        false => Err(format!(
            "it was built for {target}, and this machine is {arch}"
        )),
    }
}

/// The name container engines give the architecture of `target`
/// (`amd64` for `x86_64-unknown-linux-gnu`), or its own first part for one
/// this list does not know.
pub fn engine_arch(target: &str) -> &str {
    let arch = target.split('-').next().unwrap_or(target);
    match arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "i686" | "i586" => "386",
        "powerpc64le" => "ppc64le",
        "riscv64gc" => "riscv64",
        "armv7" => "arm",
        other => other,
    }
}

/// SHA-256 of the file at `path`, in hex.
pub fn file_digest(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)?;
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_map_to_the_engines_architecture_names() {
        assert_eq!(engine_arch("x86_64-unknown-linux-gnu"), "amd64");
        assert_eq!(engine_arch("aarch64-unknown-linux-musl"), "arm64");
        assert_eq!(engine_arch("s390x-unknown-linux-gnu"), "s390x");
    }

    #[test]
    fn a_manifest_reads_back_and_refuses_other_abis_and_architectures() {
        let dir = std::env::temp_dir().join(format!("agentix-format-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut m = Manifest {
            abi: ABI,
            name: "b".into(),
            version: "1".into(),
            target: format!("{}-unknown-linux-gnu", std::env::consts::ARCH),
            entry: "bin/b".into(),
            tools: vec![],
            files: BTreeMap::new(),
        };
        std::fs::write(dir.join(MANIFEST_FILE), m.to_json()).unwrap();
        assert_eq!(Manifest::read(&dir).unwrap(), m);
        m.abi = 9;
        std::fs::write(dir.join(MANIFEST_FILE), m.to_json()).unwrap();
        assert!(Manifest::read(&dir).unwrap_err().contains("abi 9"));
        m.abi = ABI;
        m.target = "sparc64-unknown-linux-gnu".into();
        std::fs::write(dir.join(MANIFEST_FILE), m.to_json()).unwrap();
        assert!(Manifest::read(&dir).unwrap_err().contains("sparc64"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(Manifest::read(&dir).unwrap_err().contains("agentix build"));
    }
}
