//! [`CallArgs`]: what a call's arguments may be written as.
//!
//! A remote function takes its arguments as a tuple `A`, which the compiler
//! checks at every call. Writing a one-argument call as a 1-tuple
//! (`("x".to_string(),)`) is noise, so a bare value stands for the tuple of
//! one, and every other shape is the tuple itself:
//!
//! ```
//! use agentix_wire::CallArgs;
//! // What `sandbox.remote(f, args)` makes of `args` for f's tuple `A`.
//! fn tuple<A>(args: impl CallArgs<A>) -> A {
//!     args.into_args()
//! }
//! // run(input: String): the bare value
//! assert_eq!(tuple::<(String,)>("input".to_string()), ("input".to_string(),));
//! // add(a: i64, b: i64): the tuple
//! assert_eq!(tuple::<(i64, i64)>((2, 3)), (2, 3));
//! // now(): the empty tuple
//! tuple::<()>(());
//! ```
//!
//! The two impls never overlap (a type is never the 1-tuple of itself), in
//! the way `From<T> for T` and `From<T> for Option<T>` coexist.

/// Arguments for a remote function whose argument tuple is `A`.
pub trait CallArgs<A> {
    /// The argument tuple.
    fn into_args(self) -> A;
}

impl<A> CallArgs<A> for A {
    fn into_args(self) -> A {
        self
    }
}

impl<T> CallArgs<(T,)> for T {
    fn into_args(self) -> (T,) {
        (self,)
    }
}
