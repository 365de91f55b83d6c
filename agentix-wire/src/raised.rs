//! How a remote fn's `Err(e)` becomes a [`RemoteError`] of kind `Raised`.
//!
//! Every error keeps its type name and its `{:#}` display. An error type that
//! is also `Serialize` keeps its fields too (in [`RemoteError::data`]), so the
//! host can match on them instead of parsing a message. Telling the two apart
//! needs the concrete type, which only the `#[remote]` expansion sees; it
//! calls `(&&Raised(&e)).into_remote_error()`: method resolution tries the
//! receiver `&&Raised` first, where only [`RaiseWithData`] (for
//! `E: Serialize`) is implemented, then `&Raised`, where [`RaisePlain`] is.

use std::fmt::Display;

use serde::Serialize;

use crate::errors::RemoteError;

/// A borrowed error on its way to the host.
pub struct Raised<'a, E>(pub &'a E);

/// The conversion for errors whose fields can travel.
pub trait RaiseWithData {
    /// The wire form, with the error's fields as data.
    fn into_remote_error(self) -> RemoteError;
}

/// The conversion for every other error: type name and message only.
pub trait RaisePlain {
    /// The wire form, without data.
    fn into_remote_error(self) -> RemoteError;
}

impl<E: Display + Serialize> RaiseWithData for &&Raised<'_, E> {
    fn into_remote_error(self) -> RemoteError {
        plain(self.0).with_data(serde_json::to_value(self.0).ok())
    }
}

impl<E: Display> RaisePlain for &Raised<'_, E> {
    fn into_remote_error(self) -> RemoteError {
        plain(self.0)
    }
}

fn plain<E: Display>(e: &E) -> RemoteError {
    RemoteError::raised(std::any::type_name::<E>(), format!("{e:#}"))
}

#[cfg(test)]
mod tests {
    use std::fmt;

    use super::*;
    use crate::errors::ErrorKind;

    #[derive(Debug, Serialize, serde::Deserialize, PartialEq)]
    struct NotFound {
        path: String,
    }
    impl fmt::Display for NotFound {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{} is missing", self.path)
        }
    }

    struct Opaque;
    impl fmt::Display for Opaque {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("opaque")
        }
    }

    #[test]
    fn serializable_errors_keep_their_fields() {
        let e = NotFound { path: "/x".into() };
        let err = (&&Raised(&e)).into_remote_error();
        assert_eq!(err.kind, ErrorKind::Raised);
        assert_eq!(err.message, "/x is missing");
        assert!(err.type_name.ends_with("NotFound"), "{}", err.type_name);
        assert_eq!(err.data_as::<NotFound>(), Ok(e));
        // Fields of another shape say so.
        let wrong = err.data_as::<u32>().unwrap_err();
        assert!(
            matches!(wrong, crate::errors::DataError::Mismatch { .. }),
            "{wrong}"
        );
    }

    #[test]
    #[allow(clippy::needless_borrow)] // the expansion's exact form, on purpose
    fn other_errors_travel_as_name_and_message() {
        let err = (&&Raised(&Opaque)).into_remote_error();
        assert_eq!(err.message, "opaque");
        assert_eq!(err.data, None);
        let none = err.data_as::<NotFound>().unwrap_err();
        assert!(
            matches!(none, crate::errors::DataError::NoData { .. }),
            "{none}"
        );
    }
}
