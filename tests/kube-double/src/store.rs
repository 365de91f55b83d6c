//! [`Store`]: the double's objects (pods, Secrets, events, network
//! policies) as the API server keeps them — JSON, with the metadata it
//! fills in (uid, resource version, creation time) — and the changes a
//! watch sees.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};
use tokio::sync::broadcast;

use crate::selectors::{fields_match, labels_match};

/// The kinds of object the double serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `pods`.
    Pods,
    /// `secrets`.
    Secrets,
    /// `events`.
    Events,
    /// `networkpolicies` of `networking.k8s.io`.
    NetworkPolicies,
    /// `sandboxes` of `agents.x-k8s.io` (agent-sandbox).
    AgentSandboxes,
}

impl Kind {
    /// The kind of a list of these.
    pub fn list_kind(self) -> &'static str {
        match self {
            Kind::Pods => "PodList",
            Kind::Secrets => "SecretList",
            Kind::Events => "EventList",
            Kind::NetworkPolicies => "NetworkPolicyList",
            Kind::AgentSandboxes => "SandboxList",
        }
    }

    /// The group and version the kind is served under.
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::NetworkPolicies => "networking.k8s.io/v1",
            Kind::AgentSandboxes => "agents.x-k8s.io/v1beta1",
            _ => "v1",
        }
    }
}

/// One change a watch sees.
#[derive(Debug, Clone)]
pub struct Change {
    /// The kind of the object.
    pub kind: Kind,
    /// Its namespace.
    pub namespace: String,
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub kind_of_change: &'static str,
    /// The object after the change.
    pub object: Value,
}

/// Why a request on the store failed: the HTTP status and the message.
pub type Refusal = (u16, String);

/// The objects, shared by every request.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Mutex<Objects>>,
    changes: broadcast::Sender<Change>,
}

struct Objects {
    by_key: BTreeMap<(Kind, String, String), Value>,
    version: u64,
}

impl Default for Store {
    fn default() -> Self {
        Store {
            inner: Arc::new(Mutex::new(Objects {
                by_key: BTreeMap::new(),
                version: 1,
            })),
            changes: broadcast::channel(4096).0,
        }
    }
}

impl Store {
    /// The changes from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    /// Stores `object` as a new `kind` in `namespace`; returns it as
    /// stored.
    pub fn create(&self, kind: Kind, namespace: &str, mut object: Value) -> Result<Value, Refusal> {
        let name = object["metadata"]["name"]
            .as_str()
            .map(str::to_owned)
            .ok_or((422, "metadata.name: Required value".to_owned()))?;
        let mut inner = self.inner.lock().unwrap();
        let key = (kind, namespace.to_owned(), name.clone());
        if inner.by_key.contains_key(&key) {
            return Err((409, format!("{kind:?} \"{name}\" already exists")));
        }
        inner.version += 1;
        let version = inner.version;
        let metadata = &mut object["metadata"];
        metadata["namespace"] = json!(namespace);
        metadata["uid"] = json!(format!("uid-{version:08}-{name}"));
        metadata["resourceVersion"] = json!(version.to_string());
        metadata["creationTimestamp"] = json!(now_rfc3339());
        inner.by_key.insert(key, object.clone());
        drop(inner);
        self.announce(kind, namespace, "ADDED", &object);
        Ok(object)
    }

    /// The `kind` named `name` in `namespace`.
    pub fn get(&self, kind: Kind, namespace: &str, name: &str) -> Option<Value> {
        let inner = self.inner.lock().unwrap();
        inner
            .by_key
            .get(&(kind, namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// The objects of `kind` in `namespace` that match both selectors.
    pub fn list(&self, kind: Kind, namespace: &str, labels: &str, fields: &str) -> Vec<Value> {
        let inner = self.inner.lock().unwrap();
        inner
            .by_key
            .iter()
            .filter(|((k, ns, _), _)| *k == kind && ns == namespace)
            .map(|(_, object)| object)
            .filter(|object| matches(object, labels, fields))
            .cloned()
            .collect()
    }

    /// The resource version now.
    pub fn version(&self) -> u64 {
        self.inner.lock().unwrap().version
    }

    /// Removes the `kind` named `name`; returns it.
    pub fn delete(&self, kind: Kind, namespace: &str, name: &str) -> Option<Value> {
        let removed = {
            let mut inner = self.inner.lock().unwrap();
            inner
                .by_key
                .remove(&(kind, namespace.to_owned(), name.to_owned()))
        };
        if let Some(object) = &removed {
            self.announce(kind, namespace, "DELETED", object);
        }
        removed
    }

    /// Changes pod `name` with `change` (a kubelet's status update); false
    /// if it is gone.
    pub fn update_pod(&self, namespace: &str, name: &str, change: impl FnOnce(&mut Pod)) -> bool {
        let updated = {
            let mut inner = self.inner.lock().unwrap();
            inner.version += 1;
            let version = inner.version;
            let key = (Kind::Pods, namespace.to_owned(), name.to_owned());
            let Some(stored) = inner.by_key.get_mut(&key) else {
                return false;
            };
            let Ok(mut pod) = serde_json::from_value::<Pod>(stored.clone()) else {
                return false;
            };
            change(&mut pod);
            pod.metadata.resource_version = Some(version.to_string());
            let Ok(value) = serde_json::to_value(&pod) else {
                return false;
            };
            *stored = value.clone();
            value
        };
        self.announce(Kind::Pods, namespace, "MODIFIED", &updated);
        true
    }

    /// Records an event about object `involved` (a pod) of `namespace`.
    pub fn record_event(&self, namespace: &str, involved: &str, reason: &str, message: &str) {
        let name = format!("{involved}.{}", self.version() + 1);
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name},
            "involvedObject": {"kind": "Pod", "name": involved, "namespace": namespace},
            "reason": reason,
            "message": message,
            "type": if reason.starts_with("Failed") { "Warning" } else { "Normal" },
            "source": {"component": "kube-double"},
        });
        let _ = self.create(Kind::Events, namespace, event);
    }

    fn announce(&self, kind: Kind, namespace: &str, kind_of_change: &'static str, object: &Value) {
        let _ = self.changes.send(Change {
            kind,
            namespace: namespace.to_owned(),
            kind_of_change,
            object: object.clone(),
        });
    }
}

/// Whether `object` matches the label and field selectors.
pub fn matches(object: &Value, labels: &str, fields: &str) -> bool {
    let object_labels: Option<BTreeMap<String, String>> =
        serde_json::from_value(object["metadata"]["labels"].clone()).ok();
    let field = |path: &[&str]| {
        path.iter()
            .fold(object, |v, key| &v[*key])
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    let name = field(&["metadata", "name"]);
    let namespace = field(&["metadata", "namespace"]);
    let involved = field(&["involvedObject", "name"]);
    let phase = field(&["status", "phase"]);
    labels_match(labels, object_labels.as_ref())
        && fields_match(
            fields,
            &[
                ("metadata.name", &name),
                ("metadata.namespace", &namespace),
                ("involvedObject.name", &involved),
                ("status.phase", &phase),
            ],
        )
}

/// Now, as the API server writes times (RFC 3339).
pub fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}
