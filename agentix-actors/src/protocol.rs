//! Typed namespace protocols: a plugin declares, once and in a crate both
//! sides link, the events and requests each side of its namespace may send,
//! with their payload and reply types. Both halves then handle and send
//! only those types; a wrong payload does not compile, and no plugin code
//! names an event as a string or touches a JSON value.
//!
//! ```
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! pub struct Configure { pub level: u32 }
//! #[derive(Serialize, Deserialize)]
//! pub struct Progress { pub done: u64 }
//! #[derive(Serialize, Deserialize)]
//! pub struct Fetch { pub url: String }
//! #[derive(Serialize, Deserialize)]
//! pub struct Fetched { pub status: u16 }
//!
//! agentix_actors::namespace_protocol! {
//!     /// What the sandbox half and the host half of `/my-plugin` say.
//!     pub struct MyPlugin = "/my-plugin";
//!     to_sandbox { events [Configure] requests [] }
//!     to_host { events [Progress] requests [Fetch => Fetched] }
//! }
//! # use agentix_actors::protocol::{Event, Protocol, Request, ToHost};
//! assert_eq!(MyPlugin::PATH, "/my-plugin");
//! assert_eq!(<Progress as Event<MyPlugin, ToHost>>::NAME, "Progress");
//! assert_eq!(<Fetch as Request<MyPlugin, ToHost>>::NAME, "Fetch");
//! ```
//!
//! An event's wire name is its type's name unless the declaration says
//! otherwise (`Fetch as "fetch" => Fetched`), which keeps a protocol
//! readable by clients that predate it. On the wire nothing changes: an
//! event is `<name> <payload>`, a request `<name> {request_id, data}`, its
//! reply `<name>:result {request_id, data}` or `<name>:error {request_id,
//! error: {type, message}}`, and a caller that stops waiting sends
//! `<name>:cancel {request_id}` (see [`agentix_wire::request_envelope`]).
//!
//! Either half may be an actix actor: it handles a [`Received`] per event
//! type and an [`Asked`] per request type, where `N` is that half's typed
//! handle (so a handler can send back). The handles and builders live on
//! each side: the sandbox's in `agentix_worker::sandbox_half`, the host's in
//! `agentix-host`.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::namespace_messages::NamespaceFault;

/// A plugin namespace's protocol: its path; the messages each way are
/// declared by [`Event`] and [`Request`] implementations for it.
pub trait Protocol: Send + Sync + 'static {
    /// The namespace's path, like `/my-plugin`.
    const PATH: &'static str;
}

/// Which way a message goes: [`ToHost`] or [`ToSandbox`].
pub trait Direction: Send + Sync + 'static + sealed::Sealed {}

/// Sent by the sandbox half, handled by the host half.
#[derive(Debug, Clone, Copy)]
pub enum ToHost {}
/// Sent by the host half, handled by the sandbox half.
#[derive(Debug, Clone, Copy)]
pub enum ToSandbox {}

impl Direction for ToHost {}
impl Direction for ToSandbox {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::ToHost {}
    impl Sealed for super::ToSandbox {}
}

/// A payload type that protocol `P` lets flow in direction `D` as an event.
pub trait Event<P: Protocol, D: Direction>: Serialize + DeserializeOwned + Send + 'static {
    /// Its name on the wire.
    const NAME: &'static str;
}

/// A payload type that protocol `P` lets flow in direction `D` as a
/// request, answered with a [`Request::Reply`].
pub trait Request<P: Protocol, D: Direction>:
    Serialize + DeserializeOwned + Send + 'static
{
    /// Its name on the wire.
    const NAME: &'static str;
    /// What the other half answers it with.
    type Reply: Serialize + DeserializeOwned + Send + 'static;
}

/// One half's typed handle on a namespace: what its actor messages carry.
pub trait NamespaceEnd: Clone + Send + Unpin + 'static {
    /// The protocol spoken.
    type Protocol: Protocol;
    /// The direction of what this half receives.
    type Receives: Direction;
}

/// An event the other half sent, for an actor that handles events of type
/// `E` on the namespace `N` is a handle of.
#[derive(Debug)]
pub struct Received<N, E> {
    /// This half's handle, to send back on.
    pub ns: N,
    /// The event's payload.
    pub event: E,
}

impl<N, E> actix::Message for Received<N, E>
where
    N: NamespaceEnd,
    E: Event<N::Protocol, N::Receives>,
{
    type Result = ();
}

/// A request the other half made, for an actor that answers requests of
/// type `R`: its `Ok` is sent back as the reply, its `Err` as the error.
#[derive(Debug)]
pub struct Asked<N, R> {
    /// This half's handle, to send on while answering.
    pub ns: N,
    /// The request's body.
    pub request: R,
    /// Fires when the asking half stops waiting (its timeout passed, its
    /// future was dropped, it went away): no reply is sent after it, so the
    /// handler can drop its work.
    pub cancelled: CancellationToken,
}

impl<N, R> actix::Message for Asked<N, R>
where
    N: NamespaceEnd,
    R: Request<N::Protocol, N::Receives>,
{
    type Result = Result<R::Reply, NamespaceFault>;
}

/// A reply and the work that follows it once it is sent, in the same task:
/// for a request whose answer opens something (a stream's head, then its
/// body). See the host half's `answer_then`.
pub struct ReplyThen<T> {
    /// The reply, or the fault sent instead.
    pub reply: Result<T, NamespaceFault>,
    /// What runs after the reply has gone out.
    pub then: Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
}

impl<T> ReplyThen<T> {
    /// `reply` with nothing after it.
    pub fn reply(reply: Result<T, NamespaceFault>) -> Self {
        ReplyThen { reply, then: None }
    }

    /// The same reply, with `work` to run once it is sent.
    pub fn then(mut self, work: impl std::future::Future<Output = ()> + Send + 'static) -> Self {
        self.then = Some(Box::pin(work));
        self
    }
}

/// Ties a builder or handle to its protocol without owning one (and
/// without making it less `Send` or `Sync`).
pub type ProtocolMarker<P> = PhantomData<fn() -> P>;

/// Declares a plugin namespace's protocol: its path, and the events and
/// requests (with reply types) each way. See [the module](crate::protocol).
///
/// ```text
/// namespace_protocol! {
///     /// Docs for the protocol type.
///     pub struct Name = "/path";
///     to_sandbox { events [A, B as "b"] requests [Ask => Answer] }
///     to_host { events [C] requests [Fetch as "fetch" => Fetched] }
/// }
/// ```
#[macro_export]
macro_rules! namespace_protocol {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident = $path:literal;
        to_sandbox {
            events [$($down_event:ty $(as $down_event_name:literal)?),* $(,)?]
            requests [$($down_request:ty $(as $down_request_name:literal)? => $down_reply:ty),* $(,)?]
        }
        to_host {
            events [$($up_event:ty $(as $up_event_name:literal)?),* $(,)?]
            requests [$($up_request:ty $(as $up_request_name:literal)? => $up_reply:ty),* $(,)?]
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy)]
        $vis enum $name {}

        impl $crate::protocol::Protocol for $name {
            const PATH: &'static str = $path;
        }
        $(
            impl $crate::protocol::Event<$name, $crate::protocol::ToSandbox> for $down_event {
                const NAME: &'static str =
                    $crate::namespace_protocol!(@name $down_event $(, $down_event_name)?);
            }
        )*
        $(
            impl $crate::protocol::Request<$name, $crate::protocol::ToSandbox> for $down_request {
                const NAME: &'static str =
                    $crate::namespace_protocol!(@name $down_request $(, $down_request_name)?);
                type Reply = $down_reply;
            }
        )*
        $(
            impl $crate::protocol::Event<$name, $crate::protocol::ToHost> for $up_event {
                const NAME: &'static str =
                    $crate::namespace_protocol!(@name $up_event $(, $up_event_name)?);
            }
        )*
        $(
            impl $crate::protocol::Request<$name, $crate::protocol::ToHost> for $up_request {
                const NAME: &'static str =
                    $crate::namespace_protocol!(@name $up_request $(, $up_request_name)?);
                type Reply = $up_reply;
            }
        )*
    };
    (@name $ty:ty, $wire:literal) => { $wire };
    (@name $ty:ty) => { stringify!($ty) };
}

/// The error type of a request whose body is not the protocol's type.
pub const BAD_REQUEST: &str = "BadRequest";

/// Event `name`'s payload on `path` as `T`, or `None`, logged, if it is
/// not one (the event is dropped).
pub fn read_event<T: DeserializeOwned>(
    path: &str,
    name: &str,
    data: serde_json::Value,
) -> Option<T> {
    serde_json::from_value(data)
        .map_err(|e| {
            tracing::warn!(
                path,
                event = name,
                "event dropped: its payload is not the protocol's type: {e}"
            )
        })
        .ok()
}

/// Request `name`'s body as `T`, or the [`BAD_REQUEST`] fault saying why
/// not, which is the asker's answer.
pub fn read_body<T: DeserializeOwned>(
    name: &str,
    body: serde_json::Value,
) -> Result<T, NamespaceFault> {
    serde_json::from_value(body).map_err(|e| {
        NamespaceFault::new(
            BAD_REQUEST,
            format!("the body of `{name}` is not the protocol's type: {e}"),
        )
    })
}

/// Hands `message` to `actor`'s mailbox now, in the caller's order, and
/// returns what waits for room when the mailbox is full (a future that is
/// finished at once otherwise): the typed halves' `on_actor`. The handling
/// itself is not awaited: the actor takes its mailbox in order, and a
/// handler that returns a future keeps that order with
/// `actix::AtomicResponse`.
pub fn hand_to_actor<M>(
    actor: &actix::Recipient<M>,
    message: M,
    path: &'static str,
    name: &'static str,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
where
    M: actix::Message + Send + 'static,
    M::Result: Send,
{
    match actor.try_send(message) {
        Ok(()) => Box::pin(std::future::ready(())),
        Err(actix::dev::SendError::Full(message)) => {
            let waiting = actor.send(message);
            Box::pin(async move {
                if waiting.await.is_err() {
                    tracing::error!(path, event = name, "event dropped: its actor has stopped");
                }
            })
        }
        Err(actix::dev::SendError::Closed(_)) => {
            tracing::error!(path, event = name, "event dropped: its actor has stopped");
            Box::pin(std::future::ready(()))
        }
    }
}

/// The fault a request gets when the actor that answers `name` on `path`
/// has stopped.
pub fn actor_stopped(name: &str, path: &str) -> NamespaceFault {
    NamespaceFault::new(
        "Unavailable",
        format!("the actor answering `{name}` on {path} has stopped"),
    )
}

/// A typed reply as the JSON sent back.
pub fn reply_value<T: Serialize>(reply: T) -> Result<serde_json::Value, NamespaceFault> {
    serde_json::to_value(reply).map_err(|e| NamespaceFault::new("SerializeError", e.to_string()))
}

/// A typed request's reply from the JSON the other half sent.
pub fn read_reply<T: DeserializeOwned>(
    name: &str,
    reply: serde_json::Value,
) -> Result<T, agentix_wire::request_envelope::RemoteSioError> {
    serde_json::from_value(reply).map_err(|e| {
        agentix_wire::request_envelope::RemoteSioError::Malformed(format!(
            "the reply to `{name}` is not the protocol's reply type: {e}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Serialize, Deserialize)]
    struct Ping;
    #[derive(Serialize, Deserialize)]
    struct Pong(u32);
    #[derive(Serialize, Deserialize)]
    struct Note(String);

    crate::namespace_protocol! {
        /// A protocol for the test.
        struct Echoes = "/echoes";
        to_sandbox { events [Note as "note"] requests [Ping => Pong] }
        to_host { events [Note] requests [] }
    }

    #[test]
    fn names_come_from_the_types_unless_the_declaration_gives_one() {
        assert_eq!(Echoes::PATH, "/echoes");
        assert_eq!(<Note as Event<Echoes, ToSandbox>>::NAME, "note");
        assert_eq!(<Note as Event<Echoes, ToHost>>::NAME, "Note");
        assert_eq!(<Ping as Request<Echoes, ToSandbox>>::NAME, "Ping");
    }

    #[test]
    fn a_reply_that_is_not_the_reply_type_is_a_malformed_reply() {
        let err = read_reply::<u32>("Ping", serde_json::json!("seven")).unwrap_err();
        assert!(
            matches!(&err, agentix_wire::request_envelope::RemoteSioError::Malformed(m) if m.contains("`Ping`")),
            "{err}"
        );
        assert_eq!(read_reply::<u32>("Ping", serde_json::json!(7)), Ok(7));
    }
}
