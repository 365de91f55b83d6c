//! A scripted Socket.IO server, for tests whose server must misbehave.

use std::future::Future;

use futures_util::SinkExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// A fake server's side of one connection.
pub(crate) type Ws = WebSocketStream<TcpStream>;

/// Starts a server on 127.0.0.1 that completes the Engine.IO handshake of
/// every connection (pings too rare to matter) and then hands the
/// websocket to `script`; returns its address.
pub(crate) async fn start<F, Fut>(script: F) -> String
where
    F: Fn(Ws) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let script = script.clone();
            tokio::spawn(async move {
                let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
                let open = serde_json::json!({"sid": "fakefakefakefake", "upgrades": [],
                    "pingInterval": 300_000, "pingTimeout": 300_000, "maxPayload": 1_000_000});
                ws.send(Message::text(format!("0{open}"))).await.unwrap();
                script(ws).await;
            });
        }
    });
    addr
}

/// Accepts the namespace connect `text` is, if it is one; returns whether.
pub(crate) async fn accept_join(ws: &mut Ws, text: &str) -> bool {
    let Some(rest) = text.strip_prefix("40") else {
        return false;
    };
    let ns = rest.split(',').next().unwrap_or("/");
    let _ = ws
        .send(Message::text(format!("40{ns},{{\"sid\":\"x\"}}")))
        .await;
    true
}
