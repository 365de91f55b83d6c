//! The subcommands of `agentix`, one per file, and what several share:
//! finding a sandbox by its marker ([`known_sandboxes`]) and what its
//! processes use ([`process_usage`]); the recorded snapshots
//! ([`snapshots`]), which `ps` lists and `reap` removes.

pub(crate) mod build;
pub(crate) mod call;
pub(crate) mod exec;
pub(crate) mod known_sandboxes;
pub(crate) mod listing;
pub(crate) mod logs;
pub(crate) mod pause;
pub(crate) mod process_usage;
pub(crate) mod ps;
pub(crate) mod reap;
pub(crate) mod serve;
pub(crate) mod snapshots;
