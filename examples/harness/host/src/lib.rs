//! What the harness example's two programs share: finding the bundle.

use std::process::Command;

use agentix::SandboxConfig;

/// The bundle binary's package.
const BUNDLE_PACKAGE: &str = "harness-bundle";

/// The config for a sandbox of the harness bundle, which is built into the
/// same target directory as this program. Run by `cargo run`, it builds the
/// bundle first (at once when it is fresh), so one command runs the
/// example and the bundle is never older than its code.
pub fn bundle_config() -> Result<SandboxConfig, Box<dyn std::error::Error + Send + Sync>> {
    // Cargo names itself to the programs it runs.
    if let Some(cargo) = std::env::var_os("CARGO") {
        let mut build = Command::new(cargo);
        build.args(["build", "--quiet", "-p", BUNDLE_PACKAGE]);
        if !cfg!(debug_assertions) {
            build.arg("--release");
        }
        let status = build.status()?;
        if !status.success() {
            return Err(format!("`cargo build -p {BUNDLE_PACKAGE}` failed ({status})").into());
        }
    }
    Ok(SandboxConfig::beside_current_exe(BUNDLE_PACKAGE)?)
}
