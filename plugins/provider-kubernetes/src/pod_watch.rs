//! [`PodWatch`]: one watch of the API server for all of a provider's pods
//! in its namespace, shared by every sandbox: each sandbox follows its own
//! pod through a [`tokio::sync::watch`] channel instead of holding a watch
//! (a long-lived HTTP connection to the API server) of its own — a
//! thousand sandboxes, one connection.
//!
//! The watch lists first and then watches from the list's resource
//! version, again after any break, so a pod deleted while the connection
//! was down is seen as gone. It runs while someone follows a pod and stops
//! when no one does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::Api;
use tokio::sync::watch;

/// What is known of one pod: nothing until it is seen, then the pod as it
/// was last seen, or that it is gone.
#[derive(Debug, Clone, Default)]
pub enum PodState {
    /// Not seen yet.
    #[default]
    Unseen,
    /// As the API server last reported it.
    Seen(Box<Pod>),
    /// Deleted.
    Gone,
}

type Followers = HashMap<String, watch::Sender<PodState>>;

/// The shared watch of one namespace's pods of one label selector.
#[derive(Clone)]
pub struct PodWatch {
    pods: Api<Pod>,
    selector: String,
    followers: Arc<Mutex<Followers>>,
    running: Arc<Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

impl PodWatch {
    /// A watch of `pods` carrying the labels `selector` (started on first
    /// use).
    pub fn new(pods: Api<Pod>, selector: &str) -> PodWatch {
        PodWatch {
            pods,
            selector: selector.to_owned(),
            followers: Arc::default(),
            running: Arc::default(),
        }
    }

    /// Follows pod `name`: what the watch learns of it from now on. Call
    /// it before the pod is made, so nothing of it is missed.
    pub fn follow(&self, name: &str) -> watch::Receiver<PodState> {
        let receiver = {
            let mut followers = self.followers.lock().unwrap();
            match followers.get(name) {
                Some(sender) => sender.subscribe(),
                None => {
                    let (sender, receiver) = watch::channel(PodState::Unseen);
                    followers.insert(name.to_owned(), sender);
                    receiver
                }
            }
        };
        let mut running = self.running.lock().unwrap();
        if running.as_ref().is_none_or(|task| task.is_finished()) {
            *running = Some(tokio::spawn(self.clone().run()));
        }
        receiver
    }

    /// Lists, then watches from the list's version, until no one follows
    /// any pod.
    async fn run(self) {
        let mut failures = 0u32;
        loop {
            if self.should_stop() {
                return;
            }
            let listed = self
                .pods
                .list(&ListParams::default().labels(&self.selector))
                .await;
            let version = match listed {
                Ok(list) => {
                    failures = 0;
                    self.resync(list.items);
                    list.metadata.resource_version.unwrap_or_else(|| "0".into())
                }
                Err(error) => {
                    failures += 1;
                    tracing::debug!(%error, "cannot list the sandboxes' pods");
                    tokio::time::sleep(Duration::from_millis(200) * failures.min(25)).await;
                    continue;
                }
            };
            let params = WatchParams::default().labels(&self.selector).timeout(290);
            let stream = match self.pods.watch(&params, &version).await {
                Ok(stream) => stream,
                Err(error) => {
                    failures += 1;
                    tracing::debug!(%error, "cannot watch the sandboxes' pods");
                    tokio::time::sleep(Duration::from_millis(200) * failures.min(25)).await;
                    continue;
                }
            };
            let mut stream = stream.boxed();
            while let Some(event) = stream.next().await {
                match event {
                    Ok(WatchEvent::Added(pod) | WatchEvent::Modified(pod)) => {
                        let name = pod.metadata.name.clone().unwrap_or_default();
                        self.tell(&name, PodState::Seen(Box::new(pod)));
                    }
                    Ok(WatchEvent::Deleted(pod)) => {
                        let name = pod.metadata.name.clone().unwrap_or_default();
                        self.tell(&name, PodState::Gone);
                    }
                    Ok(WatchEvent::Bookmark(_)) => {}
                    // Too old a version, or a broken stream: list again.
                    Ok(WatchEvent::Error(_)) | Err(_) => break,
                }
                if self.should_stop() {
                    return;
                }
            }
        }
    }

    /// What a fresh list says: each followed pod as listed, or gone if it
    /// was seen before and is not listed now.
    fn resync(&self, pods: Vec<Pod>) {
        let mut listed: HashMap<String, Pod> = pods
            .into_iter()
            .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
            .collect();
        let followers = self.followers.lock().unwrap();
        for (name, sender) in followers.iter() {
            match listed.remove(name) {
                Some(pod) => {
                    sender.send_replace(PodState::Seen(Box::new(pod)));
                }
                None if matches!(*sender.borrow(), PodState::Seen(_)) => {
                    sender.send_replace(PodState::Gone);
                }
                None => {}
            }
        }
    }

    fn tell(&self, name: &str, state: PodState) {
        if let Some(sender) = self.followers.lock().unwrap().get(name) {
            sender.send_replace(state);
        }
    }

    /// Forgets pods no one follows; true, with the task marked stopped,
    /// when none is left. Decided under the task's lock, so a pod followed
    /// meanwhile either is seen here or starts a new task.
    fn should_stop(&self) -> bool {
        let mut running = self.running.lock().unwrap();
        let mut followers = self.followers.lock().unwrap();
        followers.retain(|_, sender| sender.receiver_count() > 0);
        if followers.is_empty() {
            *running = None;
            return true;
        }
        false
    }
}
