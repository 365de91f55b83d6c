//! The typed handle `#[remote]` generates for each remote function.
//!
//! `#[agentix::remote] pub async fn run(input: String) -> Output` becomes a
//! constant `run: Remote<(String,), Output>`. Passing it to
//! `sandbox.remote(run, ("hello".to_string(),))` lets the compiler check the
//! argument tuple and the return type, while the wire only carries the name.
//! A function returning `impl Stream<Item = T>` becomes a [`RemoteStream`]
//! instead, which the host consumes with `sandbox.stream(..)`.

use std::fmt;
use std::marker::PhantomData;

/// A remote function taking the argument tuple `A` and returning `O`.
pub struct Remote<A, O> {
    name: &'static str,
    _signature: PhantomData<fn(A) -> O>,
}

impl<A, O> Remote<A, O> {
    /// A handle for the function registered under `name` (`module::path::fn`).
    #[doc(hidden)]
    pub const fn new(name: &'static str) -> Self {
        Remote {
            name,
            _signature: PhantomData,
        }
    }

    /// The wire name: `module_path!()` of the definition, `::`, the fn name.
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

impl<A, O> Clone for Remote<A, O> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A, O> Copy for Remote<A, O> {}

impl<A, O> fmt::Debug for Remote<A, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Remote({})", self.name)
    }
}

/// A streaming remote function taking the argument tuple `A` and yielding
/// items of type `T`; `#[remote]` makes one for a function returning
/// `impl Stream<Item = T>`.
pub struct RemoteStream<A, T> {
    name: &'static str,
    _signature: PhantomData<fn(A) -> T>,
}

impl<A, T> RemoteStream<A, T> {
    /// A handle for the streaming function registered under `name`.
    #[doc(hidden)]
    pub const fn new(name: &'static str) -> Self {
        RemoteStream {
            name,
            _signature: PhantomData,
        }
    }

    /// The wire name: `module_path!()` of the definition, `::`, the fn name.
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

impl<A, T> Clone for RemoteStream<A, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A, T> Copy for RemoteStream<A, T> {}

impl<A, T> fmt::Debug for RemoteStream<A, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RemoteStream({})", self.name)
    }
}

/// What a fallible remote function (`-> Result<T, E>`) returns on success.
///
/// `Err(e)` does not travel as a value: it becomes a
/// [`RemoteError`](crate::errors::RemoteError) of kind
/// `Raised` (see [`crate::raised`]).
pub trait Fallible {
    /// The success type that reaches the host.
    type Ok;
}

impl<T, E> Fallible for Result<T, E> {
    type Ok = T;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_copy_and_named() {
        const RUN: Remote<(String,), u32> = Remote::new("app::run");
        let copy = RUN;
        assert_eq!(copy.name(), RUN.name());
        assert_eq!(format!("{RUN:?}"), "Remote(app::run)");
    }
}
