//! [`WorkerContext`]: what one worker gives the plugin code it runs: the
//! namespaces it registered, and each plugin's own state, by type.
//!
//! The worker runtime makes one per worker and installs it on the runtime's
//! threads (and the thread that runs the bundle's setup), so a remote
//! function or a handler finds it with [`WorkerContext::current`]. A plugin
//! keeps what lives as long as its worker (an open namespace's handle, a
//! running endpoint, a table of uploads) in [`WorkerContext::state`], not in
//! a static: a process can hold several workers' contexts (tests do), and
//! a worker's state ends with it.

use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use crate::namespace::{NamespaceTable, RegisterError, SandboxNamespace, SandboxNamespaceHandle};
use agentix_wire::wire::Frame;

/// One worker's namespaces and plugin state. Cheap to clone.
#[derive(Clone)]
pub struct WorkerContext {
    inner: Arc<Inner>,
}

struct Inner {
    namespaces: NamespaceTable,
    state: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

thread_local! {
    /// The context of the worker whose runtime runs this thread.
    static CURRENT: RefCell<Option<WorkerContext>> = const { RefCell::new(None) };
}

impl WorkerContext {
    /// A context whose namespaces send their frames to `out`.
    pub fn new(out: mpsc::Sender<Frame>) -> Self {
        WorkerContext {
            inner: Arc::new(Inner {
                namespaces: NamespaceTable::new(out),
                state: Mutex::default(),
            }),
        }
    }

    /// The context of the worker running this code, if it runs in one.
    pub fn current() -> Option<WorkerContext> {
        CURRENT.with(|current| current.borrow().clone())
    }

    /// Makes this the context of code that runs on this thread.
    pub fn install(&self) {
        CURRENT.with(|current| *current.borrow_mut() = Some(self.clone()));
    }

    /// Registers `namespace` in this worker and tells the server to
    /// forward it.
    pub fn register(
        &self,
        namespace: SandboxNamespace,
    ) -> Result<SandboxNamespaceHandle, RegisterError> {
        self.inner.namespaces.register(namespace)
    }

    /// This worker's `T`, made with `T::default()` on first use: where a
    /// plugin keeps what lives as long as the worker.
    pub fn state<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        let mut state = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        let held = state
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(T::default()));
        Arc::clone(held)
            .downcast::<T>()
            .unwrap_or_else(|_| unreachable!("the entry of `T`'s type id holds a `T`"))
    }

    /// Called by the worker's frame loop: a host emitted `event` on `path`,
    /// its binary attachments `frames`.
    pub(crate) fn deliver(
        &self,
        path: &str,
        event: String,
        data: serde_json::Value,
        frames: Vec<bytes::Bytes>,
    ) {
        self.inner.namespaces.deliver(path, event, data, frames);
    }
}

/// Registers `namespace` in the worker running this code and tells the
/// server to forward it; `NoWorker` outside a worker.
pub fn register_namespace(
    namespace: SandboxNamespace,
) -> Result<SandboxNamespaceHandle, RegisterError> {
    WorkerContext::current()
        .ok_or(RegisterError::NoWorker)?
        .register(namespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Counter(std::sync::atomic::AtomicU32);

    #[test]
    fn each_worker_has_its_own_state_and_namespaces() {
        let (out_a, mut frames_a) = mpsc::channel(8);
        let (out_b, _frames_b) = mpsc::channel(8);
        let a = WorkerContext::new(out_a);
        let b = WorkerContext::new(out_b);
        a.state::<Counter>()
            .0
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        a.state::<Counter>()
            .0
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            a.state::<Counter>()
                .0
                .load(std::sync::atomic::Ordering::Relaxed),
            2
        );
        assert_eq!(
            b.state::<Counter>()
                .0
                .load(std::sync::atomic::Ordering::Relaxed),
            0
        );

        a.register(SandboxNamespace::new("/p")).unwrap();
        assert_eq!(
            a.register(SandboxNamespace::new("/p")).err(),
            Some(RegisterError::Duplicate("/p".into()))
        );
        b.register(SandboxNamespace::new("/p")).unwrap();
        assert!(
            matches!(frames_a.try_recv(), Ok(Frame::SioOpen { path }) if path == "/p"),
            "the server hears of the namespace"
        );
    }

    #[test]
    fn outside_a_worker_there_is_no_context_to_register_in() {
        std::thread::spawn(|| {
            assert!(WorkerContext::current().is_none());
            assert_eq!(
                register_namespace(SandboxNamespace::new("/p")).err(),
                Some(RegisterError::NoWorker)
            );
        })
        .join()
        .unwrap();
    }
}
