//! [`EndReport`]: how a sandbox that its provider watches from afar (a
//! container through its engine, a pod through the API server) ended, once
//! the provider learns it: what its
//! [`SandboxResources::ended`](crate::SandboxResources::ended) and
//! `ended_now` read.

use agentix_wire::errors::RemoteError;
use futures_util::future::BoxFuture;
use tokio::sync::watch;

/// The end of one sandbox, in the provider's words once known.
pub struct EndReport {
    ended: watch::Receiver<Option<String>>,
    describe: fn(&str) -> RemoteError,
}

impl EndReport {
    /// A report that `describe` turns into the error calls end with; the
    /// provider sends how the sandbox ended on the returned sender.
    pub fn new(describe: fn(&str) -> RemoteError) -> (watch::Sender<Option<String>>, EndReport) {
        let (tx, ended) = watch::channel(None);
        (tx, EndReport { ended, describe })
    }

    /// Resolves, with that error, once the sandbox has ended ("unknown" if
    /// the provider stopped watching without a word).
    pub fn ended(&self) -> BoxFuture<'static, RemoteError> {
        let (mut ended, describe) = (self.ended.clone(), self.describe);
        Box::pin(async move {
            let how = match ended.wait_for(Option::is_some).await {
                Ok(how) => how.clone().unwrap_or_default(),
                Err(_) => "unknown".into(),
            };
            describe(&how)
        })
    }

    /// That error, if the sandbox has already ended.
    pub fn ended_now(&self) -> Option<RemoteError> {
        let how = self.ended.borrow().clone()?;
        Some((self.describe)(&how))
    }

    /// How it ended, if it has.
    pub fn how(&self) -> Option<String> {
        self.ended.borrow().clone()
    }
}
