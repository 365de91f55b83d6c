//! The [`Provider`] trait: where sandboxes come from.
//!
//! Object-safe, so a harness can pick a provider at run time
//! (`Box<dyn Provider>`). A provider outside this crate builds its handles
//! with [`Sandbox::from_parts`] and keeps them in a
//! [`SandboxRegistry`](crate::SandboxRegistry) for `list`, `get` and
//! `delete`.

use futures_util::future::BoxFuture;

use crate::config::SandboxConfig;
use crate::sandbox::Sandbox;

/// Why a provider could not create or delete a sandbox.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The bundle binary does not exist or cannot be run.
    #[error("bundle `{path}` cannot be used: {reason}")]
    BadBundle {
        /// The configured bundle path.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The server process did not start listening.
    #[error("the sandbox server did not start: {reason}{}", tail_suffix(.output))]
    ServerStartFailed {
        /// What happened.
        reason: String,
        /// The last lines the server printed.
        output: String,
    },
    /// No linked provider has that name.
    #[error("no provider is named `{name}` (linked: {known}); a provider crate is linked with agentix::link_plugins!")]
    UnknownProvider {
        /// The name asked for.
        name: String,
        /// The names there are.
        known: String,
    },
    /// Two linked providers registered one name.
    #[error("two providers are named `{name}`: one from {first}, one from {second}")]
    DuplicateProvider {
        /// The name.
        name: String,
        /// Where the first was registered.
        first: &'static str,
        /// Where the second was.
        second: &'static str,
    },
    /// The provider has no live sandbox of that id.
    #[error("no sandbox `{id}` is running here")]
    NotFound {
        /// The id asked for.
        id: String,
    },
    /// Something the provider relies on failed (an engine, an API).
    #[error("{what}: {reason}")]
    Backend {
        /// What was being done.
        what: String,
        /// What went wrong.
        reason: String,
    },
    /// An operating-system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// The last lines of `text` a start failure shows: what a server printed
/// just before it died.
pub fn last_lines(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

fn tail_suffix(output: &str) -> String {
    if output.is_empty() {
        String::new()
    } else {
        format!("\nlast server output:\n{output}")
    }
}

/// A sandbox as a provider lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxInfo {
    /// Its id, as [`Sandbox::id`] gives it.
    pub id: String,
    /// `host:port` of its server.
    pub addr: String,
}

/// Creates, finds and deletes sandboxes.
pub trait Provider: Send + Sync {
    /// Starts a sandbox for `config` and returns its owning handle: the
    /// sandbox lives until that handle is deleted or dropped (on every path
    /// out of the caller's scope: return, `?`, panic), or until
    /// [`Provider::delete`] is called with its id. The one method a
    /// provider must write to start sandboxes.
    fn create(&self, config: SandboxConfig) -> BoxFuture<'_, Result<Sandbox, ProviderError>>;

    /// Exactly [`Provider::create`], under the name the Python API gives
    /// its scoped form (`async with provider.session(..) as sandbox`): in
    /// Rust the owning handle's drop already ends the sandbox with the
    /// scope, so there is nothing to choose between the two.
    fn session(&self, config: SandboxConfig) -> BoxFuture<'_, Result<Sandbox, ProviderError>> {
        self.create(config)
    }

    /// The sandboxes this provider started that still live.
    fn list(&self) -> Vec<SandboxInfo>;

    /// A second handle on live sandbox `id`; dropping it leaves the sandbox
    /// running (its first handle still owns it).
    fn get(&self, id: &str) -> Option<Sandbox>;

    /// Deletes live sandbox `id` and waits until it is gone.
    fn delete<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), ProviderError>>;
}
