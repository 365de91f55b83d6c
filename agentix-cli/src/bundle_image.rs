//! [`load_image`]: a bundle as an image of the local engine (no registry),
//! for engines that cannot see the bundle directory (a remote
//! `DOCKER_HOST`): `DockerProvider` fills a volume from it once per bundle.
//!
//! The image holds the bundle at `/agentix` and nothing else; its labels
//! carry what a provider needs without reading the files: the entry, the
//! target and the bundle's digest.

use std::path::Path;

use agentix_bundle_format::{LABEL_DIGEST, LABEL_ENTRY, LABEL_TARGET};
use bollard::query_parameters::CreateImageOptions;
use futures_util::StreamExt;

use crate::assemble::Bundle;
use crate::build_error::BuildError;

/// Imports `bundle` into the engine `DOCKER_HOST` names (or the local one)
/// as the image `name` (`repo` or `repo:tag`).
pub fn load_image(bundle: &Bundle, name: &str) -> Result<(), BuildError> {
    let tar = tar_of(&bundle.dir)?;
    let (repo, tag) = match name.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo, tag),
        _ => (name, "latest"),
    };
    let changes = vec![
        format!("LABEL {LABEL_ENTRY}={}", bundle.manifest.entry),
        format!("LABEL {LABEL_TARGET}={}", bundle.manifest.target),
        format!("LABEL {LABEL_DIGEST}={}", bundle.manifest.digest()),
    ];
    let options = CreateImageOptions {
        from_src: Some("-".into()),
        repo: Some(repo.to_owned()),
        tag: Some(tag.to_owned()),
        changes,
        ..Default::default()
    };
    let engine = |e: bollard::errors::Error| BuildError::Command {
        command: format!("import the bundle as {name}"),
        why: format!("the Docker engine: {e}"),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| BuildError::io("cannot start a runtime for", "the engine", e))?;
    runtime.block_on(async {
        let docker = bollard::Docker::connect_with_defaults().map_err(engine)?;
        let body = bollard::body_full(tar.into());
        let mut progress = docker.create_image(Some(options), Some(body), None);
        while let Some(step) = progress.next().await {
            step.map_err(engine)?;
        }
        Ok(())
    })
}

/// The bundle directory as a tar archive whose paths start at `agentix/`.
fn tar_of(dir: &Path) -> Result<Vec<u8>, BuildError> {
    let mut archive = tar::Builder::new(Vec::new());
    archive.follow_symlinks(false);
    archive
        .append_dir_all("agentix", dir)
        .map_err(|e| BuildError::io("cannot archive", dir, e))?;
    archive
        .into_inner()
        .map_err(|e| BuildError::io("cannot archive", dir, e))
}
