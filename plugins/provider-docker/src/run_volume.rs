//! [`RunVolume`]: the small tmpfs volume a container's server puts its
//! socket on, when the host reaches the server through a socket.
//!
//! The server needs a directory the host can reach and it can write. A
//! host directory mounted into the container would be one the container's
//! processes can fill without bound and leave setuid programs in (the
//! engine takes no `nosuid` on bind mounts). An engine volume of the local
//! driver's `tmpfs` type is none of that: a few KiB in size, mounted
//! `nosuid,nodev,noexec`, owned by the container's uid at mode 0700, under
//! the engine's root-only directory, and gone with its sandbox. The price:
//! only a root host can reach the socket on it, so other hosts reach their
//! servers through a published port ([`crate::ServerReach::for_engine`]).

use std::collections::HashMap;

use agentix::ProviderError;
use bollard::models::VolumeCreateOptions;
use bollard::query_parameters::RemoveVolumeOptions;
use bollard::Docker;

use crate::{engine_error, owner_label, LABEL_OWNER, LABEL_SANDBOX};

/// Room for a socket and nothing of note: writes past it fail `ENOSPC`.
pub const RUN_VOLUME_BYTES: u64 = 64 * 1024;

/// A sandbox's socket volume, made before its container.
#[derive(Debug, Clone)]
pub struct RunVolume {
    /// The engine's name for it.
    pub name: String,
    /// Where the engine mounts it on this machine (root-only).
    pub mountpoint: std::path::PathBuf,
}

impl RunVolume {
    /// Makes sandbox `id`'s volume, owned by `owner` (uid, gid) at mode
    /// 0700, or, owner unknown (the image names the user), at mode 1777.
    pub async fn create(
        docker: &Docker,
        id: &str,
        owner: Option<(u32, u32)>,
    ) -> Result<RunVolume, ProviderError> {
        let name = format!("agentix-run-{id}");
        let access = match owner {
            Some((uid, gid)) => format!("uid={uid},gid={gid},mode=0700"),
            None => "mode=1777".to_owned(),
        };
        let options = VolumeCreateOptions {
            name: Some(name.clone()),
            driver: Some("local".into()),
            driver_opts: Some(HashMap::from([
                ("type".to_owned(), "tmpfs".to_owned()),
                ("device".to_owned(), "tmpfs".to_owned()),
                (
                    "o".to_owned(),
                    format!("size={RUN_VOLUME_BYTES},{access},nosuid,nodev,noexec"),
                ),
            ])),
            labels: Some(HashMap::from([
                (LABEL_SANDBOX.to_owned(), id.to_owned()),
                (LABEL_OWNER.to_owned(), owner_label()),
            ])),
            ..Default::default()
        };
        let volume = docker
            .create_volume(options)
            .await
            .map_err(|e| engine_error(&e))?;
        Ok(RunVolume {
            name,
            mountpoint: volume.mountpoint.into(),
        })
    }
}

/// Removes volume `name`; one still in use or already gone is left to be.
pub async fn remove_volume(docker: &Docker, name: &str) {
    let options = RemoveVolumeOptions { force: true };
    if let Err(e) = docker.remove_volume(name, Some(options)).await {
        tracing::debug!(volume = name, "not removed: {e}");
    }
}
