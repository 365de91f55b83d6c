//! [`join_namespace`]: one Socket.IO client joined to one namespace of a
//! sandbox server, for everything but `/rpc` (`/log`, `/trace`, plugins).
//!
//! It returns only once the server has accepted the namespace, not as soon
//! as the socket is up: an event the server emits before that reaches nobody.

use std::sync::{Arc, Mutex};

use agentix_actors::errors::{ErrorKind, RemoteError};
use futures_util::FutureExt;
use rust_socketio::asynchronous::{Client, ClientBuilder};
use rust_socketio::{Payload, TransportType};
use serde_json::json;

use crate::connection::{ConnectionSettings, Endpoint};

/// Joins `path` on `endpoint`; `configure` adds the event handlers.
pub(crate) async fn join_namespace(
    endpoint: &Endpoint,
    settings: ConnectionSettings,
    path: &str,
    configure: impl FnOnce(ClientBuilder) -> ClientBuilder,
) -> Result<Client, RemoteError> {
    let (open_tx, open_rx) = tokio::sync::oneshot::channel::<()>();
    let open_tx = Arc::new(Mutex::new(Some(open_tx)));
    let on_open = move |_: Payload, _: Client| {
        if let Some(tx) = open_tx.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = tx.send(());
        }
        async {}.boxed()
    };
    let url = format!("http://{}/", endpoint.addr);
    let builder = ClientBuilder::new(url.clone())
        .namespace(path)
        .auth(json!({ "token": endpoint.token }))
        .transport_type(TransportType::Websocket)
        .reconnect(false)
        .on("open", on_open);
    let connect = configure(builder).connect();
    let deadline = tokio::time::Instant::now() + settings.connect_timeout;
    let unreachable = |why: String| RemoteError::new(ErrorKind::ServerUnreachable, why);
    let client = match tokio::time::timeout_at(deadline, connect).await {
        Ok(Ok(client)) => client,
        Ok(Err(e)) => return Err(unreachable(format!("cannot join {path} at {url}: {e}"))),
        Err(_) => {
            return Err(unreachable(format!(
                "{path} at {url} did not answer within {:?}",
                settings.connect_timeout
            )))
        }
    };
    match tokio::time::timeout_at(deadline, open_rx).await {
        Ok(Ok(())) => {
            if let Ok(peer) = endpoint.addr.parse() {
                crate::nodelay::disable_nagle_towards(peer);
            }
            Ok(client)
        }
        _ => {
            let _ = client.disconnect().await;
            Err(unreachable(format!(
                "{path} at {url} was not accepted within {:?}",
                settings.connect_timeout
            )))
        }
    }
}
