//! [`ProviderError`]: why a provider could not create or delete a sandbox,
//! and [`last_lines`], the part of a dead server's output it quotes.

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
    /// The kernel refused the sandbox's isolation (no unprivileged user
    /// namespaces, say); `Isolation::None` runs it as a plain process tree.
    #[error("the sandbox cannot be isolated here: {reason}")]
    IsolationRefused {
        /// Why, and what to do about it.
        reason: String,
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
