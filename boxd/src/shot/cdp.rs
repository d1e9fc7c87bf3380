//! A minimal client of the Chrome DevTools Protocol over one WebSocket (the
//! browser's, with flattened sessions): commands answered in order of their
//! ids, events queued until someone asks for them.
//!
//! Written by hand on `tokio-tungstenite` (already in the workspace) because
//! a shot needs a handful of commands (`Target.*`, `Page.navigate`,
//! `Emulation.setDeviceMetricsOverride`, `Page.captureScreenshot`), while the
//! CDP crates (chromiumoxide, headless_chrome) are large, generate the whole
//! protocol, and bring their own runtimes or browser downloads into boxd.

use serde_json::{Value, json};
use std::collections::VecDeque;
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

/// The largest message taken: a base64 screenshot of the biggest file a shot
/// may send, and some.
const MAX_MESSAGE: usize = 300 << 20;
/// The most events kept unread (the oldest go first).
const MAX_EVENTS: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum CdpError {
    #[error("{0:?} is not a ws:// DevTools address")]
    Address(String),
    #[error("cannot connect to the browser's DevTools at {0}: {1}")]
    Connect(String, #[source] std::io::Error),
    #[error("the browser's DevTools WebSocket failed: {0}")]
    WebSocket(#[from] tokio_tungstenite::tungstenite::Error),
    #[error("the browser closed its DevTools connection")]
    Closed,
    #[error("the browser answered {method} with an error: {message}")]
    Command { method: String, message: String },
    #[error("the browser sent a message that is not JSON: {0}")]
    Garbled(#[from] serde_json::Error),
}

/// A DevTools connection.
pub struct Cdp {
    ws: WebSocketStream<TcpStream>,
    next_id: u64,
    events: VecDeque<Value>,
}

impl Cdp {
    /// Connects to `ws://host:port/devtools/...` (the browser's address, as
    /// it prints it).
    pub async fn connect(url: &str) -> Result<Self, CdpError> {
        let rest = url
            .strip_prefix("ws://")
            .ok_or_else(|| CdpError::Address(url.to_owned()))?;
        let authority = rest.split('/').next().unwrap_or_default();
        let tcp = TcpStream::connect(authority)
            .await
            .map_err(|e| CdpError::Connect(authority.to_owned(), e))?;
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_MESSAGE))
            .max_frame_size(Some(MAX_MESSAGE));
        let (ws, _) = tokio_tungstenite::client_async_with_config(url, tcp, Some(config)).await?;
        Ok(Self {
            ws,
            next_id: 1,
            events: VecDeque::new(),
        })
    }

    /// Sends a command (to a page's `session`, or to the browser) and waits
    /// for its result; events that come meanwhile are queued.
    pub async fn call(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, CdpError> {
        use futures_util::SinkExt;
        let id = self.next_id;
        self.next_id += 1;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = Value::from(session);
        }
        self.ws.send(Message::text(message.to_string())).await?;
        loop {
            let mut message = self.receive().await?;
            if message.get("id").and_then(Value::as_u64) == Some(id) {
                if let Some(error) = message.get("error") {
                    let text = error
                        .get("message")
                        .and_then(Value::as_str)
                        .map_or_else(|| error.to_string(), str::to_owned);
                    return Err(CdpError::Command {
                        method: method.to_owned(),
                        message: text,
                    });
                }
                return Ok(message
                    .get_mut("result")
                    .map(Value::take)
                    .unwrap_or(Value::Null));
            }
            self.queue(message);
        }
    }

    /// Drops the events received so far.
    pub fn forget_events(&mut self) {
        self.events.clear();
    }

    /// The next event `method` of `session` whose params `matches` (queued
    /// or yet to come); other events stay queued.
    pub async fn event(
        &mut self,
        session: &str,
        method: &str,
        matches: impl Fn(&Value) -> bool,
    ) -> Result<Value, CdpError> {
        let is = |m: &Value| {
            m.get("method").and_then(Value::as_str) == Some(method)
                && m.get("sessionId").and_then(Value::as_str) == Some(session)
                && matches(m.get("params").unwrap_or(&Value::Null))
        };
        if let Some(at) = self.events.iter().position(is) {
            return Ok(self.events.remove(at).unwrap_or(Value::Null));
        }
        loop {
            let message = self.receive().await?;
            if is(&message) {
                return Ok(message);
            }
            self.queue(message);
        }
    }

    fn queue(&mut self, message: Value) {
        if message.get("method").is_some() {
            if self.events.len() == MAX_EVENTS {
                self.events.pop_front();
            }
            self.events.push_back(message);
        }
    }

    async fn receive(&mut self) -> Result<Value, CdpError> {
        use futures_util::StreamExt;
        loop {
            match self.ws.next().await {
                Some(Ok(Message::Text(text))) => return Ok(serde_json::from_str(&text)?),
                Some(Ok(Message::Binary(bytes))) => return Ok(serde_json::from_slice(&bytes)?),
                Some(Ok(Message::Close(_))) | None => return Err(CdpError::Closed),
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e.into()),
            }
        }
    }
}
