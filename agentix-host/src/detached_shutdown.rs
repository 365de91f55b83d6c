//! [`shutdown_detached`]: a sandbox's deletion on a thread and a Tokio
//! runtime of its own, for providers whose deletion is async requests (an
//! engine's, an API server's): a handle dropped while the caller's runtime
//! shuts down must still remove what it started.

use std::future::Future;

use futures_util::future::BoxFuture;

/// Runs the future `deletion` makes on a new thread named `thread`, on a
/// current-thread runtime of its own; the returned future resolves when it
/// is done (at once if no thread could be started).
pub fn shutdown_detached<F, Fut>(thread: &str, deletion: F) -> BoxFuture<'static, ()>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name(thread.to_owned())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(runtime) = runtime {
                runtime.block_on(deletion());
            }
            let _ = done_tx.send(());
        });
    Box::pin(async move {
        if spawned.is_ok() {
            let _ = done_rx.await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_deletion_runs_on_its_own_thread_and_is_awaited() {
        let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = ran.clone();
        let caller = std::thread::current().id();
        let done = shutdown_detached("test-rm", move || async move {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            assert_ne!(std::thread::current().id(), caller);
            assert_eq!(std::thread::current().name(), Some("test-rm"));
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        done.await;
        assert!(ran.load(std::sync::atomic::Ordering::SeqCst));
    }
}
