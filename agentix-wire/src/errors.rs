//! The in-band error value every call can end with.
//!
//! A call ends with exactly one value or one [`RemoteError`]. The same struct
//! travels in worker frames, in `/rpc` events and reaches the user, so nothing
//! is lost in translation: `kind` says which rule was broken, `type_name` the
//! concrete error type (the user's own type for [`ErrorKind::Raised`]),
//! `message` what happened and `details` whatever helps to fix it.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::text_cut::cut_text;

/// Longest `message` or `details` an error carries to a host; more is cut,
/// saying so.
pub const MAX_ERROR_TEXT: usize = 64 << 10;
/// Largest `data` (as JSON) an error carries to a host; larger is left out,
/// saying so.
pub const MAX_ERROR_DATA: usize = 1 << 20;

/// Which rule a failed call broke; match on this, not on messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ErrorKind {
    /// No remote function with that name is linked into the worker.
    UnknownTarget,
    /// The arguments were not valid CBOR (or their attachment was missing).
    BadArguments,
    /// The arguments or the return value decoded, but not to the expected types.
    TypeMismatch,
    /// The remote function returned `Err(e)`; `type_name` is the type of `e`.
    Raised,
    /// The remote function panicked; the worker keeps serving.
    Panic,
    /// The call was cancelled before it finished.
    Cancelled,
    /// The call timed out.
    Timeout,
    /// The worker process died while the call was in flight.
    WorkerExited,
    /// The worker process could not be started or died before it was ready.
    WorkerStartFailed,
    /// The worker keeps dying; the server stopped restarting it.
    Degraded,
    /// The server could not be reached.
    ServerUnreachable,
    /// The server process exited.
    ServerExited,
    /// The connection to the server was lost mid-call.
    ConnectionLost,
    /// The server rejected the sandbox token.
    AuthRejected,
    /// The arguments or the value are larger than the message limit.
    PayloadTooLarge,
    /// A peer broke the wire protocol (malformed event or frame).
    Protocol,
    /// The server lost track of the call (the part of it that holds calls
    /// restarted); the call was cancelled in the worker and can be sent again.
    CallLost,
    /// A kind this version does not know (sent by a newer peer).
    #[serde(other)]
    Unknown,
}

impl ErrorKind {
    /// The kind's name, also used as `type_name` for runtime errors.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::UnknownTarget => "UnknownTarget",
            ErrorKind::BadArguments => "BadArguments",
            ErrorKind::TypeMismatch => "TypeMismatch",
            ErrorKind::Raised => "Raised",
            ErrorKind::Panic => "Panic",
            ErrorKind::Cancelled => "Cancelled",
            ErrorKind::Timeout => "Timeout",
            ErrorKind::WorkerExited => "WorkerExited",
            ErrorKind::WorkerStartFailed => "WorkerStartFailed",
            ErrorKind::Degraded => "Degraded",
            ErrorKind::ServerUnreachable => "ServerUnreachable",
            ErrorKind::ServerExited => "ServerExited",
            ErrorKind::ConnectionLost => "ConnectionLost",
            ErrorKind::AuthRejected => "AuthRejected",
            ErrorKind::PayloadTooLarge => "PayloadTooLarge",
            ErrorKind::Protocol => "Protocol",
            ErrorKind::CallLost => "CallLost",
            ErrorKind::Unknown => "Unknown",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a remote call failed, as the host sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteError {
    /// Which rule was broken.
    pub kind: ErrorKind,
    /// The concrete error type: the user's type for `Raised`, else the kind.
    #[serde(rename = "type")]
    pub type_name: String,
    /// What happened, for a human.
    pub message: String,
    /// Extra context: close matches, exit status, the worker's stderr tail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<String>,
    /// The raised error's own fields, when its type is `Serialize`; read them
    /// back with [`RemoteError::data_as`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
}

impl RemoteError {
    /// This error as one socket message carries it: message and details
    /// cut to [`MAX_ERROR_TEXT`], data past [`MAX_ERROR_DATA`] left out
    /// (the details say so). A sandbox's error of any size then reaches
    /// its host, and costs it little.
    pub fn bounded(mut self) -> Self {
        cut_text(&mut self.message, MAX_ERROR_TEXT);
        if let Some(details) = &mut self.details {
            cut_text(details, MAX_ERROR_TEXT);
        }
        let too_large = |data: &serde_json::Value| {
            serde_json::to_string(data).map_or(true, |json| json.len() > MAX_ERROR_DATA)
        };
        if self.data.as_ref().is_some_and(too_large) {
            self.data = None;
            let note = format!(
                "its data (over {} MiB of JSON) was left out",
                MAX_ERROR_DATA >> 20
            );
            self.details = Some(match self.details.take() {
                Some(details) => format!("{details}; {note}"),
                None => note,
            });
        }
        self
    }

    /// The `Panic` error for a panic (with its payload) while running `target`.
    pub fn from_panic(target: &str, panic: Box<dyn std::any::Any + Send>) -> Self {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-string panic payload".to_owned());
        RemoteError::new(ErrorKind::Panic, format!("`{target}` panicked: {what}"))
    }

    /// A runtime error of `kind`; its `type_name` is the kind's name.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        RemoteError {
            kind,
            type_name: kind.as_str().to_owned(),
            message: message.into(),
            details: None,
            data: None,
        }
    }

    /// The error a remote function returned as `Err(e)`.
    pub fn raised(type_name: impl Into<String>, message: impl Into<String>) -> Self {
        RemoteError {
            kind: ErrorKind::Raised,
            type_name: type_name.into(),
            message: message.into(),
            details: None,
            data: None,
        }
    }

    /// The same error with `details` attached.
    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        let details = details.into();
        self.details = (!details.is_empty()).then_some(details);
        self
    }

    /// The same error carrying the raised error's fields.
    pub fn with_data(mut self, data: Option<serde_json::Value>) -> Self {
        self.data = data;
        self
    }

    /// The raised error as its own type `T`: `err.data_as::<FileError>()`
    /// gives back the sandbox's `FileError` with its kind and path. Fails
    /// saying why when the error carried no fields (its type is not
    /// `Serialize`, or it is not a raised error) or they are not a `T`.
    pub fn data_as<T: serde::de::DeserializeOwned>(&self) -> Result<T, DataError> {
        let data = self.data.clone().ok_or_else(|| DataError::NoData {
            type_name: self.type_name.clone(),
        })?;
        serde_json::from_value(data).map_err(|e| DataError::Mismatch {
            type_name: self.type_name.clone(),
            wanted: std::any::type_name::<T>(),
            why: e.to_string(),
        })
    }
}

/// Why [`RemoteError::data_as`] could not give the error's fields as a type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DataError {
    /// The error carried no fields: its type is not `Serialize`, or it is
    /// not an error the remote function returned.
    #[error("the error `{type_name}` carried no fields (is its type Serialize?)")]
    NoData {
        /// The error's type, as the sandbox named it.
        type_name: String,
    },
    /// The fields are not those of the type asked for.
    #[error(
        "the fields of the error `{type_name}` are not a `{}`: {why}",
        short_type_name(wanted)
    )]
    Mismatch {
        /// The error's type, as the sandbox named it.
        type_name: String,
        /// The type asked for.
        wanted: &'static str,
        /// What did not decode.
        why: String,
    },
}

/// `alloc::vec::Vec<alloc::string::String>` as a person writes it:
/// `Vec<String>`.
fn short_type_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut word = String::new();
    for c in name.chars() {
        if c.is_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
        } else {
            out.push_str(word.rsplit("::").next().unwrap_or(&word));
            word.clear();
            out.push(c);
        }
    }
    out.push_str(word.rsplit("::").next().unwrap_or(&word));
    out
}

impl fmt::Display for RemoteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.kind == ErrorKind::Raised {
            write!(f, "{}: {}", self.type_name, self.message)?;
        } else {
            write!(f, "{}: {}", self.kind, self.message)?;
        }
        if let Some(details) = &self.details {
            write!(f, "\n{details}")?;
        }
        Ok(())
    }
}

impl std::error::Error for RemoteError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_kinds_from_newer_peers_decode_as_unknown() {
        let json = r#"{"kind":"SomethingNew","type":"X","message":"m"}"#;
        let err: RemoteError = serde_json::from_str(json).unwrap();
        assert_eq!(err.kind, ErrorKind::Unknown);
        assert_eq!(err.type_name, "X");
        assert_eq!(err.details, None);
    }

    #[test]
    fn type_names_lose_their_module_paths() {
        assert_eq!(
            short_type_name("alloc::vec::Vec<alloc::string::String>"),
            "Vec<String>"
        );
        assert_eq!(short_type_name("(u64, my::Thing)"), "(u64, Thing)");
    }

    #[test]
    fn display_names_the_user_type_for_raised_errors() {
        let err = RemoteError::raised("app::Oops", "no luck").with_details("ctx");
        assert_eq!(err.to_string(), "app::Oops: no luck\nctx");
        let err = RemoteError::new(ErrorKind::Panic, "boom");
        assert_eq!(err.to_string(), "Panic: boom");
    }
}
