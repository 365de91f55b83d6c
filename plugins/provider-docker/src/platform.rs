//! [`check_platform`]: a bundle runs only where its architecture is: the
//! configured platform's, or else the image's (which, for an engine on
//! another machine, need not be this machine's).

use agentix::{ProviderError, SandboxConfig};
use agentix_bundle_format::engine_arch;
use bollard::Docker;

use crate::engine_error;

/// Refuses a bundle built for `target` when the container would run
/// another architecture; a missing image is a clear error here too.
pub async fn check_platform(
    docker: &Docker,
    target: &str,
    config: &SandboxConfig,
) -> Result<(), ProviderError> {
    let settings = &config.container;
    let bundle_arch = engine_arch(target);
    let mismatch = |what: String, arch: &str| ProviderError::BadBundle {
        path: config.bundle.display().to_string(),
        reason: format!(
            "it is built for {target} ({bundle_arch}), and {what} is {arch}: build the bundle \
             on a machine of {arch}, or run it on {bundle_arch}"
        ),
    };
    if let Some(platform) = &settings.platform {
        // `os/arch[/variant]`, as the engine writes it.
        let arch = platform.split('/').nth(1).unwrap_or(platform);
        return match arch == bundle_arch {
            true => Ok(()),
            false => Err(mismatch(format!("the platform `{platform}`"), arch)),
        };
    }
    let Some(image) = &settings.image else {
        return Ok(());
    };
    let inspected = docker.inspect_image(image).await.map_err(|e| match &e {
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        } => missing_image(image, &e),
        _ => engine_error(&e),
    })?;
    match inspected.architecture {
        Some(arch) if !arch.is_empty() && arch != bundle_arch => {
            Err(mismatch(format!("the image `{image}`"), &arch))
        }
        _ => Ok(()),
    }
}

/// The error for an image the engine does not have.
pub fn missing_image(image: &str, e: &bollard::errors::Error) -> ProviderError {
    ProviderError::Backend {
        what: format!("the image `{image}` is not in the engine"),
        reason: format!(
            "{e}; images are built locally (no registry): `docker import` a rootfs tarball, \
             or `docker build` from a local context"
        ),
    }
}
