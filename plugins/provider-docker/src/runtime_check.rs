//! [`check_runtime`]: a sandbox that names a container runtime (gVisor's
//! `runsc`, say) gets it, or an error naming the ones the engine has,
//! before any container is made.

use agentix::{ProviderError, SandboxConfig};
use bollard::Docker;

use crate::engine_error;

/// The name `scripts/setup-gvisor` registers gVisor's `runsc` under, with
/// the arguments a sandbox needs (`--network=none --host-uds=all
/// --overlay2=none`): pass it to `SandboxConfig::runtime`.
pub const GVISOR_RUNTIME: &str = "agentix-runsc";

/// Refuses a runtime the engine does not know, naming the ones it does.
pub async fn check_runtime(docker: &Docker, config: &SandboxConfig) -> Result<(), ProviderError> {
    let Some(runtime) = &config.container.runtime else {
        return Ok(());
    };
    let info = docker.info().await.map_err(|e| engine_error(&e))?;
    let known: Vec<String> = info.runtimes.unwrap_or_default().into_keys().collect();
    if known.iter().any(|name| name == runtime) {
        return Ok(());
    }
    Err(ProviderError::Backend {
        what: format!("the engine has no container runtime named `{runtime}`"),
        reason: format!(
            "it knows {}; a runtime is registered under `runtimes` in the engine's \
             daemon.json (for gVisor as `{GVISOR_RUNTIME}`, run \
             plugins/provider-docker/scripts/setup-gvisor as root)",
            known.join(", ")
        ),
    })
}
