//! A bare Engine.IO/Socket.IO speaker over a WebSocket, for sending the
//! server what no well-behaved client would.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

type Ws = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

/// A raw connection to one namespace, already past the handshake.
pub(crate) struct RawSocket {
    ws: Ws,
    ns: String,
}

/// A received event: its name, its payload (placeholders as they came) and
/// its binary attachments, in order.
pub(crate) struct RawEvent {
    pub(crate) name: String,
    pub(crate) payload: serde_json::Value,
    pub(crate) attachments: Vec<Vec<u8>>,
}

/// The placeholder a binary attachment takes in an event's JSON.
pub(crate) fn placeholder(num: usize) -> serde_json::Value {
    serde_json::json!({"_placeholder": true, "num": num})
}

impl RawSocket {
    /// Connects to the server at `addr` and joins `/rpc` with `token`.
    pub(crate) async fn connect(addr: &str, token: &str) -> Self {
        RawSocket::connect_ns(addr, token, "/rpc").await
    }

    /// Opens the websocket with `token` as its Bearer header and reads the
    /// Engine.IO open packet; no namespace joined yet.
    pub(crate) async fn open(addr: &str, token: &str, ns: &str) -> Self {
        RawSocket::try_open(addr, Some(token), ns)
            .await
            .expect("websocket connects")
    }

    /// Like [`RawSocket::open`], with any token or none; the server's
    /// refusal comes back as the handshake error.
    pub(crate) async fn try_open(
        addr: &str,
        token: Option<&str>,
        ns: &str,
    ) -> Result<Self, tokio_tungstenite::tungstenite::Error> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .expect("TCP connects");
        tcp.set_nodelay(true).expect("nodelay");
        let url = format!("ws://{addr}/socket.io/?EIO=4&transport=websocket");
        let mut request = url.into_client_request().expect("a websocket URL");
        if let Some(token) = token {
            let bearer = format!("Bearer {token}").parse().expect("a header value");
            request.headers_mut().insert("authorization", bearer);
        }
        let (ws, _) = tokio_tungstenite::client_async(request, tcp).await?;
        let mut raw = RawSocket {
            ws,
            ns: ns.to_owned(),
        };
        let open = raw.recv().await.expect("engine.io open packet");
        assert!(open.starts_with('0'), "not an open packet: {open}");
        Ok(raw)
    }

    /// Connects to the server at `addr` and joins namespace `ns` with `token`.
    pub(crate) async fn connect_ns(addr: &str, token: &str, ns: &str) -> Self {
        let mut raw = RawSocket::open(addr, token, ns).await;
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
        self.ws.send(Message::text(text)).await
    }

    /// Sends one binary frame as is.
    pub(crate) async fn send_binary(&mut self, bytes: Vec<u8>) {
        self.ws
            .send(Message::binary(bytes))
            .await
            .expect("frame sent");
    }

    /// The next text frame that is not a ping (pings are answered); `None`
    /// once the server closed the connection.
    pub(crate) async fn recv(&mut self) -> Option<String> {
        self.recv_within(Duration::from_secs(20)).await
    }

    /// [`RawSocket::recv`] for a listener that may hear nothing for a
    /// while: it waits up to `patience` for each frame.
    pub(crate) async fn recv_within(&mut self, patience: Duration) -> Option<String> {
        loop {
            match self.recv_message_within(patience).await? {
                Message::Text(t) => return Some(t.to_string()),
                Message::Binary(b) => {
                    panic!("a binary frame of {} bytes where text was due", b.len())
                }
                _ => {}
            }
        }
    }

    async fn recv_message(&mut self) -> Option<Message> {
        self.recv_message_within(Duration::from_secs(20)).await
    }

    async fn recv_message_within(&mut self, patience: Duration) -> Option<Message> {
        loop {
            let msg = tokio::time::timeout(patience, self.ws.next())
                .await
                .unwrap_or_else(|_| panic!("the server sends something within {patience:?}"));
            match msg {
                Some(Ok(Message::Text(t))) if t.as_str() == "2" => {
                    if self.try_send("3").await.is_err() {
                        return None;
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
                Some(Ok(m)) => return Some(m),
            }
        }
    }

    /// The next event on the namespace, with its attachments.
    pub(crate) async fn recv_binary_event(&mut self) -> Option<RawEvent> {
        let text = self.recv().await?;
        let (count, body) = if let Some(rest) = text.strip_prefix("45") {
            let (count, rest) = rest.split_once('-').expect("an attachment count");
            (count.parse::<usize>().expect("a count"), rest.to_owned())
        } else {
            let rest = text
                .strip_prefix("42")
                .unwrap_or_else(|| panic!("not an event: {text}"));
            (0, rest.to_owned())
        };
        let prefix = format!("{},", self.ns);
        let body = body
            .strip_prefix(&prefix)
            .unwrap_or_else(|| panic!("not an event on {}: {text}", self.ns));
        let value: serde_json::Value = serde_json::from_str(body).expect("event JSON");
        let mut attachments = Vec::with_capacity(count);
        while attachments.len() < count {
            match self.recv_message().await? {
                Message::Binary(b) => attachments.push(b.to_vec()),
                other => panic!("an attachment was due, got {other:?}"),
            }
        }
        Some(RawEvent {
            name: value[0].as_str().expect("event name").to_owned(),
            payload: value[1].clone(),
            attachments,
        })
    }

    /// The next event on the namespace as `(name, payload)`.
    pub(crate) async fn recv_event(&mut self) -> Option<(String, serde_json::Value)> {
        let event = self.recv_binary_event().await?;
        Some((event.name, event.payload))
    }

    /// Emits event `name` with a JSON payload on the namespace.
    pub(crate) async fn emit(&mut self, name: &str, payload: serde_json::Value) {
        let frame = format!("42{},{}", self.ns, serde_json::json!([name, payload]));
        self.send(&frame).await;
    }

    /// Emits event `name` whose JSON payload holds placeholders for
    /// `attachments`, sent after it as binary frames.
    pub(crate) async fn emit_binary(
        &mut self,
        name: &str,
        payload: serde_json::Value,
        attachments: Vec<Vec<u8>>,
    ) {
        let frame = format!(
            "45{}-{},{}",
            attachments.len(),
            self.ns,
            serde_json::json!([name, payload])
        );
        self.send(&frame).await;
        for bytes in attachments {
            self.send_binary(bytes).await;
        }
    }
}

/// `GET path` on the server at `addr`, with `Authorization: auth` if given;
/// returns the status code.
pub(crate) async fn http_status(addr: &str, path: &str, auth: Option<&str>) -> u16 {
    http_get(addr, path, auth).await.0
}

/// `GET path` on the server at `addr`, with `Authorization: auth` if given;
/// returns the status code and the body.
pub(crate) async fn http_get(addr: &str, path: &str, auth: Option<&str>) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(addr)
        .await
        .expect("TCP connects");
    let auth = auth
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n");
    tcp.write_all(request.as_bytes())
        .await
        .expect("request sent");
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut response))
        .await
        .expect("a response within 10 s")
        .expect("response read");
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}
