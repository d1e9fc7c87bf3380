//! The connection to the server's `/v1/connect`: TCP (directly or through
//! an HTTP CONNECT proxy), TLS for https servers, then the WebSocket
//! upgrade with the bearer token — and the WebSocket's binary messages
//! adapted to the byte payloads the wire session reads and writes.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::ready;
use futures_util::{Sink, SinkExt, Stream, StreamExt};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{HeaderValue, StatusCode, header};
use tokio_tungstenite::tungstenite::{self, Message};

use crate::config::{ServerUrl, Token};
use crate::proxy::{Proxy, ProxyError};

/// How long connecting, TLS and the upgrade may take together.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// A byte stream to the server: TCP, or TLS over TCP.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// The upgraded connection.
pub type WebSocket = WebSocketStream<Box<dyn Io>>;

/// Why no WebSocket connection was made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot connect to {0}: {1}")]
    Tcp(String, io::Error),
    #[error("proxy {0}: {1}")]
    Proxy(String, ProxyError),
    #[error("TLS handshake with {0}: {1}")]
    Tls(String, io::Error),
    #[error("the server refused the connector token (rotated or deleted?)")]
    Unauthorized,
    #[error("the server answered HTTP {0} instead of upgrading {1}")]
    Status(u16, String),
    #[error("WebSocket handshake: {0}")]
    WebSocket(tungstenite::Error),
    #[error("no connection within {0:?}")]
    Timeout(Duration),
    #[error("invalid request: {0}")]
    Request(String),
}

/// Everything needed to connect a session.
pub struct Connector {
    pub server: ServerUrl,
    pub token: Token,
    pub proxy: Option<Proxy>,
    /// Present for https servers.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl Connector {
    /// Connects and upgrades, within [`CONNECT_TIMEOUT`].
    pub async fn connect(&self) -> Result<WebSocket, ConnectError> {
        tokio::time::timeout(CONNECT_TIMEOUT, self.connect_inner())
            .await
            .map_err(|_| ConnectError::Timeout(CONNECT_TIMEOUT))?
    }

    async fn connect_inner(&self) -> Result<WebSocket, ConnectError> {
        let server = &self.server;
        let tcp = match &self.proxy {
            None => {
                let to = format!("{}:{}", server.host, server.port);
                TcpStream::connect((server.host.as_str(), server.port))
                    .await
                    .map_err(|e| ConnectError::Tcp(to, e))?
            }
            Some(proxy) => {
                let mut tcp = TcpStream::connect((proxy.host.as_str(), proxy.port))
                    .await
                    .map_err(|e| ConnectError::Tcp(format!("the proxy {proxy}"), e))?;
                proxy
                    .connect(&mut tcp, &server.host, server.port)
                    .await
                    .map_err(|e| ConnectError::Proxy(proxy.to_string(), e))?;
                tcp
            }
        };
        let _ = tcp.set_nodelay(true);
        let io: Box<dyn Io> = match &self.tls {
            None => Box::new(tcp),
            Some(config) => {
                let name = ServerName::try_from(server.host.clone())
                    .map_err(|e| ConnectError::Request(e.to_string()))?;
                let tls = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(|e| ConnectError::Tls(server.display.clone(), e))?;
                Box::new(tls)
            }
        };
        let mut request = server
            .connect_url
            .as_str()
            .into_client_request()
            .map_err(|e| ConnectError::Request(e.to_string()))?;
        let bearer = HeaderValue::from_str(&format!("Bearer {}", self.token.secret()))
            .map_err(|_| ConnectError::Request("the token is not a valid header value".into()))?;
        let headers = request.headers_mut();
        headers.insert(header::AUTHORIZATION, bearer);
        headers.insert(
            header::USER_AGENT,
            HeaderValue::from_static(crate::USER_AGENT),
        );
        match tokio_tungstenite::client_async(request, io).await {
            Ok((ws, _response)) => Ok(ws),
            Err(tungstenite::Error::Http(response))
                if response.status() == StatusCode::UNAUTHORIZED =>
            {
                Err(ConnectError::Unauthorized)
            }
            Err(tungstenite::Error::Http(response)) => Err(ConnectError::Status(
                response.status().as_u16(),
                server.connect_url.clone(),
            )),
            Err(e) => Err(ConnectError::WebSocket(e)),
        }
    }
}

/// Why the WebSocket stopped carrying frames.
#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    #[error(transparent)]
    WebSocket(#[from] tungstenite::Error),
    #[error("the server sent a text message; only binary frames are expected")]
    Text,
}

/// Splits the WebSocket into the sink and the stream of binary payloads
/// that `Session::over_messages` takes. Pings are answered by tungstenite
/// while reading; a close ends the stream.
pub fn into_messages(
    ws: WebSocket,
) -> (
    impl Sink<Bytes, Error = tungstenite::Error> + Unpin + Send + 'static,
    impl Stream<Item = Result<Bytes, MessageError>> + Unpin + Send + 'static,
) {
    let (sink, stream) = ws.split();
    let sink =
        sink.with(|payload: Bytes| ready(Ok::<_, tungstenite::Error>(Message::Binary(payload))));
    let stream = stream.filter_map(|message| {
        ready(match message {
            Ok(Message::Binary(payload)) => Some(Ok(payload)),
            Ok(Message::Text(_)) => Some(Err(MessageError::Text)),
            Ok(Message::Ping(_) | Message::Pong(_) | Message::Close(_) | Message::Frame(_)) => None,
            Err(e) => Some(Err(MessageError::WebSocket(e))),
        })
    });
    (sink, stream)
}
