//! The sandbox token check shared by the HTTP gate and Socket.IO connects,
//! and the connect middleware that applies it to every namespace.

use std::sync::Arc;

use serde_json::Value;
use socketioxide::extract::TryData;

/// The token hosts must present; `None` accepts everyone (only with
/// `--insecure-no-auth`).
#[derive(Clone)]
pub(crate) struct Token(Option<Arc<Expected>>);

/// The token as a keyed digest: comparing digests of equal length takes
/// the same time whatever was presented, and reveals nothing of the
/// token's length or content (the key is random per process).
struct Expected {
    key: std::collections::hash_map::RandomState,
    digest: u64,
}

impl Expected {
    fn digest(&self, text: &str) -> u64 {
        use std::hash::BuildHasher;
        self.key.hash_one(text)
    }
}

/// Why a request was turned away.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AuthError {
    /// No token was presented.
    #[error("auth rejected: no sandbox token presented")]
    Missing,
    /// A token was presented but it is not this sandbox's.
    #[error("auth rejected: wrong sandbox token")]
    Wrong,
}

impl Token {
    /// Requires `token` when it is `Some`.
    pub(crate) fn new(token: Option<String>) -> Self {
        Token(token.map(|token| {
            let key = std::collections::hash_map::RandomState::new();
            let mut expected = Expected { key, digest: 0 };
            expected.digest = expected.digest(&token);
            Arc::new(expected)
        }))
    }

    /// Accepts `presented` if it is the token, in time independent of the
    /// token.
    pub(crate) fn check(&self, presented: Option<&str>) -> Result<(), AuthError> {
        let Some(expected) = &self.0 else {
            return Ok(());
        };
        let presented = presented.ok_or(AuthError::Missing)?;
        if expected.digest(presented) == expected.digest {
            Ok(())
        } else {
            Err(AuthError::Wrong)
        }
    }
}

/// Socket.IO connect middleware: the namespace's handlers and its connect
/// ack only follow a valid token.
pub(crate) fn auth_middleware(
    token: Token,
) -> impl FnOnce(TryData<Value>) -> std::future::Ready<Result<(), AuthError>>
       + Clone
       + Send
       + Sync
       + 'static {
    move |TryData(auth): TryData<Value>| {
        let presented = auth.ok();
        let presented = presented
            .as_ref()
            .and_then(|a| a.get("token"))
            .and_then(Value::as_str);
        std::future::ready(token.check(presented))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_token_passes() {
        let t = Token::new(Some("s3cret".into()));
        assert!(t.check(Some("s3cret")).is_ok());
        assert!(matches!(t.check(Some("s3cre")), Err(AuthError::Wrong)));
        assert!(matches!(t.check(Some("s3cret!")), Err(AuthError::Wrong)));
        assert!(matches!(t.check(None), Err(AuthError::Missing)));
        assert!(Token::new(None).check(None).is_ok());
    }
}
