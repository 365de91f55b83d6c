//! [`load_image`]: `agentix build --image`, a bundle as an image of the
//! engine `DOCKER_HOST` names (no registry), for engines that cannot see
//! the bundle directory; the loading itself is the Docker provider's
//! (`agentix_provider_docker::bundle_upload`), which does the same by itself
//! for sandboxes reached through the engine's API.

use crate::assemble::Bundle;
use crate::build_error::BuildError;

/// Imports `bundle` into the engine `DOCKER_HOST` names (or the local one)
/// as the image `name` (`repo` or `repo:tag`).
pub fn load_image(bundle: &Bundle, name: &str) -> Result<(), BuildError> {
    let engine = |why: String| BuildError::Command {
        command: format!("import the bundle as {name}"),
        why: format!("the Docker engine: {why}"),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| BuildError::io("cannot start a runtime for", "the engine", e))?;
    runtime.block_on(async {
        let docker = bollard::Docker::connect_with_defaults().map_err(|e| engine(e.to_string()))?;
        agentix_provider_docker::bundle_upload::load_bundle_image(&docker, &bundle.dir, name)
            .await
            .map_err(|e| engine(e.to_string()))
    })
}
