//! [`CallArgs`]: what a call's arguments may be written as.
//!
//! A remote function takes its arguments as a tuple `A`, which the compiler
//! checks at every call. Writing a one-argument call as a 1-tuple
//! (`("x".to_string(),)`) is noise, so a bare value stands for the tuple of
//! one, and every other shape is the tuple itself:
//!
//! ```ignore
//! sandbox.remote(app::run, "input".to_string()).await?;  // run(input: String)
//! sandbox.remote(app::add, (2, 3)).await?;              // add(a: i64, b: i64)
//! sandbox.remote(app::now, ()).await?;                  // now()
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
