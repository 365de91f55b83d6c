//! [`bundle_volume`]: a bundle image's content in a volume, made once per
//! bundle digest, for engines that cannot see a bundle directory.
//!
//! The engine copies an image's files into an empty named volume when a
//! container that mounts the volume at that path is created; a container is
//! created for that alone, and removed.

use std::collections::HashMap;

use agentix::ProviderError;
use bollard::models::{ContainerCreateBody, HostConfig, VolumeCreateOptions};
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions};
use bollard::Docker;

use agentix_bundle_format::{LABEL_DIGEST, LABEL_ENTRY, LABEL_TARGET, MOUNT};

use crate::container_spec::BundleEntry;
use crate::engine_error;

/// Bundle image `image`'s entry program and target, and the volume holding
/// its files, made if missing.
pub async fn bundle_volume(
    docker: &Docker,
    image: &str,
) -> Result<(BundleEntry, crate::container_spec::BundleSource), ProviderError> {
    let not_bundle = |why: String| ProviderError::BadBundle {
        path: image.to_owned(),
        reason: format!("{why}; make a bundle image with `agentix build --image {image}`"),
    };
    let inspected = docker
        .inspect_image(image)
        .await
        .map_err(|e| not_bundle(format!("the engine has no image `{image}` ({e})")))?;
    let labels: HashMap<String, String> =
        inspected.config.and_then(|c| c.labels).unwrap_or_default();
    let label = |key: &str| {
        labels
            .get(key)
            .cloned()
            .ok_or_else(|| not_bundle(format!("`{image}` has no {key} label")))
    };
    let (entry, target, digest) = (
        label(LABEL_ENTRY)?,
        label(LABEL_TARGET)?,
        label(LABEL_DIGEST)?,
    );
    let volume = format!("agentix-bundle-{}", &digest[..digest.len().min(16)]);
    if docker.inspect_volume(&volume).await.is_err() {
        fill(docker, image, &volume, &entry, &digest).await?;
    }
    Ok((
        BundleEntry { entry, target },
        crate::container_spec::BundleSource::Volume(volume),
    ))
}

async fn fill(
    docker: &Docker,
    image: &str,
    volume: &str,
    entry: &str,
    digest: &str,
) -> Result<(), ProviderError> {
    let options = VolumeCreateOptions {
        name: Some(volume.to_owned()),
        labels: Some(HashMap::from([(
            LABEL_DIGEST.to_owned(),
            digest.to_owned(),
        )])),
        ..Default::default()
    };
    docker
        .create_volume(options)
        .await
        .map_err(|e| engine_error(&e))?;
    let body = ContainerCreateBody {
        image: Some(image.to_owned()),
        // Never started: creating it is what copies the files.
        cmd: Some(vec![format!("{MOUNT}/{entry}")]),
        host_config: Some(HostConfig {
            binds: Some(vec![format!("{volume}:{MOUNT}")]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let filler = docker
        .create_container(None::<CreateContainerOptions>, body)
        .await
        .map_err(|e| engine_error(&e))?;
    let options = RemoveContainerOptions {
        force: true,
        ..Default::default()
    };
    let _ = docker.remove_container(&filler.id, Some(options)).await;
    Ok(())
}
