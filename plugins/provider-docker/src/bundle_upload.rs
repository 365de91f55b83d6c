//! [`load_bundle_image`]: a bundle directory of this machine loaded into
//! the engine as an image (no registry), for engines that cannot see this
//! machine's files: `agentix build --image` uses it, and the provider does
//! the same by itself for a sandbox reached through the engine's API
//! ([`ServerReach::EngineStream`](crate::ServerReach::EngineStream)), whose
//! engine may be on another machine.
//!
//! The image holds the bundle at `/agentix` and nothing else; its labels
//! carry what a provider needs without reading the files: the entry, the
//! target and the bundle's digest. [`crate::bundle_volume`] turns it into
//! the volume sandboxes mount.

use std::path::Path;

use agentix::ProviderError;
use agentix_bundle_format::{Manifest, LABEL_DIGEST, LABEL_ENTRY, LABEL_TARGET};
use bollard::query_parameters::CreateImageOptions;
use bollard::Docker;
use futures_util::StreamExt;

use crate::engine_error;

/// Loads the bundle directory `dir` into the engine as the image `name`
/// (`repo` or `repo:tag`).
pub async fn load_bundle_image(
    docker: &Docker,
    dir: &Path,
    name: &str,
) -> Result<(), ProviderError> {
    let manifest = manifest_of(dir)?;
    let archive = {
        let owned = dir.to_owned();
        tokio::task::spawn_blocking(move || tar_of(&owned))
            .await
            .map_err(|e| ProviderError::Backend {
                what: "archive the bundle".into(),
                reason: e.to_string(),
            })?
            .map_err(|e| ProviderError::Io {
                what: format!("cannot archive the bundle {}", dir.display()),
                source: e,
            })?
    };
    let (repo, tag) = match name.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo, tag),
        _ => (name, "latest"),
    };
    let options = CreateImageOptions {
        from_src: Some("-".into()),
        repo: Some(repo.to_owned()),
        tag: Some(tag.to_owned()),
        changes: vec![
            format!("LABEL {LABEL_ENTRY}={}", manifest.entry),
            format!("LABEL {LABEL_TARGET}={}", manifest.target),
            format!("LABEL {LABEL_DIGEST}={}", manifest.digest()),
        ],
        ..Default::default()
    };
    let mut progress = docker.create_image(
        Some(options),
        Some(bollard::body_full(archive.into())),
        None,
    );
    while let Some(step) = progress.next().await {
        step.map_err(|e| engine_error(&e))?;
    }
    Ok(())
}

/// The image of the bundle directory `dir` on the engine, loaded now
/// unless the engine has it already: `agentix-bundle:<digest>`, so one
/// bundle is sent once.
pub async fn bundle_image_of(docker: &Docker, dir: &Path) -> Result<String, ProviderError> {
    let digest = manifest_of(dir)?.digest();
    let name = format!("agentix-bundle:{}", &digest[..digest.len().min(32)]);
    if docker.inspect_image(&name).await.is_err() {
        load_bundle_image(docker, dir, &name).await?;
    }
    Ok(name)
}

fn manifest_of(dir: &Path) -> Result<Manifest, ProviderError> {
    Manifest::read(dir).map_err(|reason| ProviderError::BadBundle {
        path: dir.display().to_string(),
        reason,
    })
}

/// The bundle directory as a tar archive whose paths start at `agentix/`.
fn tar_of(dir: &Path) -> std::io::Result<Vec<u8>> {
    let mut archive = tar::Builder::new(Vec::new());
    archive.follow_symlinks(false);
    archive.append_dir_all("agentix", dir)?;
    archive.into_inner()
}
