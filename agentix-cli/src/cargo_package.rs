//! The cargo side of a build: compiling the bundle binary in release, and
//! the system tools its dependencies declare in their Cargo metadata:
//!
//! ```toml
//! [package.metadata.agentix]
//! tools = ["bash"]
//! ```
//!
//! Linking `agentix-bash` is what brings `bash` into a bundle: the tools of
//! every package in the bundle's dependency tree are collected.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::build_error::BuildError;

/// Which cargo package, and which of its binaries, a bundle is built from.
#[derive(Debug, Clone, Default)]
pub struct PackageRef {
    /// `Cargo.toml` of the package or its workspace; the current directory's by default.
    pub manifest_path: Option<PathBuf>,
    /// The package (`-p`); the manifest's own package by default.
    pub package: Option<String>,
}

impl PackageRef {
    fn cargo(&self, subcommand: &str) -> Command {
        let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        cmd.arg(subcommand);
        if let Some(path) = &self.manifest_path {
            cmd.arg("--manifest-path").arg(path);
        }
        cmd
    }
}

/// What cargo says about the package: its name, version and the tools its
/// dependency tree declares (tool -> the package that declared it).
#[derive(Debug, Clone)]
pub struct PackageFacts {
    /// The package name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Its binaries' names.
    pub binaries: Vec<String>,
    /// Declared tools, each with the first package that declared it.
    pub tools: BTreeMap<String, String>,
}

/// Reads `cargo metadata` for `package`.
pub fn facts(package: &PackageRef) -> Result<PackageFacts, BuildError> {
    let mut cmd = package.cargo("metadata");
    cmd.args(["--format-version", "1"]);
    let output = run(cmd)?;
    let meta: Value = serde_json::from_slice(&output).map_err(|e| BuildError::Command {
        command: "cargo metadata".into(),
        why: format!("unreadable output: {e}"),
    })?;
    let packages: HashMap<&str, &Value> = meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p["id"].as_str()?, p)))
        .collect();
    let root_id = match &package.package {
        Some(name) => packages
            .iter()
            .find(|(_, p)| p["name"] == name.as_str())
            .map(|(id, _)| (*id).to_owned()),
        None => meta["resolve"]["root"].as_str().map(str::to_owned),
    }
    .ok_or_else(|| BuildError::Command {
        command: "cargo metadata".into(),
        why: match &package.package {
            Some(name) => format!("no package `{name}` in this workspace"),
            None => "this is a virtual workspace: name the package with --package".into(),
        },
    })?;
    let root = packages[root_id.as_str()];

    // The dependency tree of the root, from the resolve graph.
    let deps: HashMap<&str, Vec<&str>> = meta["resolve"]["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| {
            let deps = n["dependencies"]
                .as_array()?
                .iter()
                .filter_map(Value::as_str);
            Some((n["id"].as_str()?, deps.collect()))
        })
        .collect();
    let mut seen = BTreeSet::new();
    let mut todo = vec![root_id.as_str()];
    while let Some(id) = todo.pop() {
        if seen.insert(id) {
            todo.extend(deps.get(id).into_iter().flatten().copied());
        }
    }
    let mut tools = BTreeMap::new();
    for id in seen {
        let Some(p) = packages.get(id) else { continue };
        for tool in p["metadata"]["agentix"]["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            tools
                .entry(tool.to_owned())
                .or_insert_with(|| p["name"].as_str().unwrap_or("?").to_owned());
        }
    }
    let binaries = root["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| {
            t["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "bin"))
        })
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect();
    Ok(PackageFacts {
        name: root["name"].as_str().unwrap_or_default().to_owned(),
        version: root["version"].as_str().unwrap_or_default().to_owned(),
        binaries,
        tools,
    })
}

/// Builds binary `bin` of `package` in release; returns its path. Cargo's
/// progress goes to stderr as usual.
pub fn build_release(package: &PackageRef, name: &str, bin: &str) -> Result<PathBuf, BuildError> {
    let mut cmd = package.cargo("build");
    cmd.args(["--release", "--message-format=json-render-diagnostics"])
        .args(["-p", name, "--bin", bin])
        .stderr(Stdio::inherit());
    let output = run(cmd)?;
    String::from_utf8_lossy(&output)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == bin)
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| BuildError::Command {
            command: format!("cargo build --release -p {name} --bin {bin}"),
            why: "it reported no executable".into(),
        })
}

/// The first executable file named `tool` on `PATH`.
pub fn find_on_path(tool: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(tool))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The target triple this machine's `rustc` builds for.
pub fn host_target() -> Result<String, BuildError> {
    let mut cmd = Command::new(std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()));
    cmd.arg("-vV");
    let out = run(cmd)?;
    String::from_utf8_lossy(&out)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .ok_or_else(|| BuildError::Command {
            command: "rustc -vV".into(),
            why: "no host line".into(),
        })
}

fn run(mut cmd: Command) -> Result<Vec<u8>, BuildError> {
    let shown = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    let output = cmd.output().map_err(|e| BuildError::Command {
        command: shown.clone(),
        why: e.to_string(),
    })?;
    if !output.status.success() {
        return Err(BuildError::Command {
            command: shown,
            why: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(output.stdout)
}

/// `path` made absolute against the current directory.
pub fn absolute(path: &Path) -> PathBuf {
    std::env::current_dir()
        .map(|d| d.join(path))
        .unwrap_or_else(|_| path.to_owned())
}
