//! [`ContainerUser`]: which user a sandbox's container runs as, and who
//! owns its socket volume.
//!
//! The config's `container.user` decides when set. Otherwise
//! `SandboxConfig::run_as` does: by default each container runs as an
//! unprivileged uid of its own, whatever the host runs as, so code in it is
//! no root of the machine's (the engine remaps no users) and cannot read or
//! signal other sandboxes' processes; `RunAs::HostUser` keeps the image's
//! own user.

use agentix::SandboxConfig;

/// The user a container runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerUser {
    /// The engine's `User` (`uid:gid` or a name); `None` is the image's.
    pub user: Option<String>,
    /// The numeric uid and gid, when known: they own the socket volume.
    pub owner: Option<(u32, u32)>,
    /// Whether the container gets a `/tmp` of its own (mode 1777): a uid
    /// chosen here owns nothing of the image, which may lack `/tmp` too.
    pub own_tmp: bool,
}

impl ContainerUser {
    /// The user sandbox `id`'s container runs as under `config`.
    pub fn for_sandbox(config: &SandboxConfig, id: &str) -> ContainerUser {
        if let Some(user) = &config.container.user {
            return ContainerUser {
                user: Some(user.clone()),
                owner: numeric_owner(user),
                own_tmp: false,
            };
        }
        match config.run_as.container_uid_for(id) {
            Some(uid) => ContainerUser {
                user: Some(format!("{uid}:{uid}")),
                owner: Some((uid, uid)),
                own_tmp: true,
            },
            None => ContainerUser {
                user: None,
                owner: None,
                own_tmp: false,
            },
        }
    }
}

/// `uid` or `uid:gid` as numbers (the gid is the uid's when not given);
/// `None` for names, which only the image can resolve.
fn numeric_owner(user: &str) -> Option<(u32, u32)> {
    let (uid, gid) = match user.split_once(':') {
        Some((uid, gid)) => (uid.parse().ok()?, gid.parse().ok()?),
        None => {
            let uid = user.parse().ok()?;
            (uid, uid)
        }
    };
    Some((uid, gid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_users_own_the_volume_and_names_leave_it_open() {
        assert_eq!(numeric_owner("1000"), Some((1000, 1000)));
        assert_eq!(numeric_owner("1000:50"), Some((1000, 50)));
        assert_eq!(numeric_owner("app"), None);
        assert_eq!(numeric_owner("1000:staff"), None);
        let mut config = SandboxConfig::new("/b").run_as(agentix::RunAs::Uid(4242));
        let chosen = ContainerUser::for_sandbox(&config, "x");
        assert_eq!(chosen.user.as_deref(), Some("4242:4242"));
        assert!(chosen.own_tmp);
        config.container.user = Some("0".into());
        let named = ContainerUser::for_sandbox(&config, "x");
        assert_eq!((named.owner, named.own_tmp), (Some((0, 0)), false));
    }
}
