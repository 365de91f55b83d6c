//! A bare Engine.IO/Socket.IO speaker over a WebSocket, for sending the
//! server what no well-behaved client would.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A raw connection to one namespace, already past the handshake.
pub(crate) struct RawSocket {
    ws: Ws,
    ns: String,
}

impl RawSocket {
    /// Connects to the server at `addr` and joins `/rpc` with `token`.
    pub(crate) async fn connect(addr: &str, token: &str) -> Self {
        RawSocket::connect_ns(addr, token, "/rpc").await
    }

    /// Connects to the server at `addr` and joins namespace `ns` with `token`.
    pub(crate) async fn connect_ns(addr: &str, token: &str, ns: &str) -> Self {
        let url = format!("ws://{addr}/socket.io/?EIO=4&transport=websocket");
        let (ws, _) = tokio_tungstenite::connect_async(url)
            .await
            .expect("websocket connects");
        let mut raw = RawSocket {
            ws,
            ns: ns.to_owned(),
        };
        let open = raw.recv().await.expect("engine.io open packet");
        assert!(open.starts_with('0'), "not an open packet: {open}");
        raw.send(&format!("40{ns},{}", serde_json::json!({ "token": token })))
            .await;
        let joined = raw.recv().await.expect("namespace connect reply");
        assert!(
            joined.starts_with(&format!("40{ns},")),
            "join refused: {joined}"
        );
        raw
    }

    /// Sends one text frame as is.
    pub(crate) async fn send(&mut self, text: &str) {
        self.try_send(text).await.expect("frame sent");
    }

    /// Sends one text frame as is; fails if the server closed the connection.
    pub(crate) async fn try_send(
        &mut self,
        text: &str,
    ) -> Result<(), tokio_tungstenite::tungstenite::Error> {
        self.ws.send(Message::Text(text.to_owned())).await
    }

    /// The next text frame that is not a ping (pings are answered); `None`
    /// once the server closed the connection.
    pub(crate) async fn recv(&mut self) -> Option<String> {
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(20), self.ws.next())
                .await
                .expect("the server answers within 20 s");
            match msg {
                Some(Ok(Message::Text(t))) if t == "2" => self.send("3").await,
                Some(Ok(Message::Text(t))) => return Some(t),
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
                Some(Ok(_)) => {}
            }
        }
    }

    /// The next event on the namespace as `(name, payload)`.
    pub(crate) async fn recv_event(&mut self) -> Option<(String, serde_json::Value)> {
        let text = self.recv().await?;
        let prefix = format!("42{},", self.ns);
        let body = text
            .strip_prefix(&prefix)
            .unwrap_or_else(|| panic!("not an event on {}: {text}", self.ns));
        let value: serde_json::Value = serde_json::from_str(body).expect("event JSON");
        let name = value[0].as_str().expect("event name").to_owned();
        Some((name, value[1].clone()))
    }

    /// Emits event `name` with a JSON payload on the namespace.
    pub(crate) async fn emit(&mut self, name: &str, payload: serde_json::Value) {
        let frame = format!("42{},{}", self.ns, serde_json::json!([name, payload]));
        self.send(&frame).await;
    }
}
