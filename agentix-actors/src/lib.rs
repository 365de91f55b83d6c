//! The kernel's actor building blocks: what the server's tree, the host's
//! sandboxes and plugins compose their actors from. Actors only; the wire
//! format is `agentix-wire`, the worker runtime `agentix-worker`, tracing
//! `agentix-trace`.
//!
//! Layout:
//! - [`supervision`]: how a parent hears that a child ended, and the address
//!   of a child it replaces; [`restart_policy`]: when a supervisor restarts
//!   a child, as a pure value.
//! - [`actor_home`]: where an actor runs, with or without an actix `System`.
//! - [`protocol`]: typed namespace protocols, declared once for both halves
//!   (`namespace_protocol!`), and the messages a namespace's actors handle;
//!   [`namespace_messages`]: the untyped form of those messages.
//! - [`event_lane`]: a namespace's events, handled one at a time in order;
//!   [`event_route`]: a namespace's events to an actor, in order, bounded.

pub mod actor_home;
pub mod event_lane;
pub mod event_route;
pub mod namespace_messages;
pub mod protocol;
pub mod restart_policy;
pub mod supervision;
