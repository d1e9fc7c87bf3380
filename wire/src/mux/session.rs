//! The session handle: the hello, opening and accepting streams, control
//! messages, `GOAWAY`, closing, and how the session ended.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::poll_fn;
use futures_util::{Sink, SinkExt, Stream as FuturesStream, StreamExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncWrite};

use super::config::{BeforeHello, Config, Role};
use super::driver::Driver;
use super::error::{ControlError, OpenError, ProtocolError, SessionError};
use super::state::{Shared, Stats};
use super::stream::{Handle, Stream};
use crate::codec::{self, CodecError, MessageSink, MessageSource};
use crate::frame::Frame;
use crate::hello::{Hello, HelloError, negotiate};

/// One end of a multiplexed session. Cheap to clone; when the last clone is
/// dropped the session says `GOAWAY`, refuses new streams and closes once
/// its open streams are done.
#[derive(Clone)]
pub struct Session {
    handle: Arc<SessionHandle>,
}

struct SessionHandle {
    shared: Arc<Shared>,
}

impl Drop for SessionHandle {
    fn drop(&mut self) {
        self.shared.lock().handles_gone();
    }
}

/// A stream the peer opened, to accept or refuse. Dropping it refuses it
/// with 503.
pub struct Incoming {
    shared: Arc<Shared>,
    id: u32,
    target: String,
    answered: bool,
}

impl Session {
    /// Exchanges hellos over a frame source and sink, and returns the
    /// session with the [`Driver`] that must run for it to work (spawn
    /// `driver.run()` on any executor with a tokio time driver). Fails when
    /// the configuration is invalid, the peer's first frame is not a valid
    /// hello (frames before it are skipped as `config.before_hello` says), no
    /// version is common, or nothing comes within the liveness timeout.
    pub async fn handshake<R, W>(
        source: R,
        sink: W,
        role: Role,
        config: Config,
        hello: Hello,
    ) -> Result<(Session, Driver<R, W>), SessionError>
    where
        R: FuturesStream<Item = Result<Frame, CodecError>> + Unpin,
        W: Sink<Frame, Error = CodecError> + Unpin,
    {
        Self::handshake_after(source, sink, role, config, hello, None).await
    }

    /// [`Session::handshake`], or, when the peer's hello came already
    /// (`received`: it arrived on the previous session over the same pipe),
    /// only sends this side's hello in answer.
    pub async fn handshake_after<R, W>(
        mut source: R,
        mut sink: W,
        role: Role,
        config: Config,
        hello: Hello,
        received: Option<Hello>,
    ) -> Result<(Session, Driver<R, W>), SessionError>
    where
        R: FuturesStream<Item = Result<Frame, CodecError>> + Unpin,
        W: Sink<Frame, Error = CodecError> + Unpin,
    {
        config.validate()?;
        hello.validate()?;
        let payload = serde_json::to_vec(&hello)
            .map_err(|_| HelloError::Invalid("the hello does not serialize"))?;
        if payload.len() > config.max_frame_size {
            return Err(HelloError::Invalid("the hello is larger than a frame").into());
        }
        let payload = Bytes::from(payload);
        let timeout = config.liveness_timeout;
        let before = config.before_hello;
        let peer = tokio::time::timeout(timeout, async {
            let peer = match received {
                Some(peer) => {
                    send_hello(&mut sink, &payload).await?;
                    return Ok(peer);
                }
                None => {
                    let (_, peer) = tokio::try_join!(
                        send_hello(&mut sink, &payload),
                        receive_hello(&mut source, before)
                    )?;
                    peer
                }
            };
            Ok::<_, SessionError>(peer)
        })
        .await
        .map_err(|_| SessionError::Timeout(timeout))??;
        let version = negotiate(&hello, &peer)?;
        let shared = Arc::new(Shared::new(config, role, peer, version));
        let session = Session {
            handle: Arc::new(SessionHandle {
                shared: shared.clone(),
            }),
        };
        Ok((session, Driver::new(shared, source, sink)))
    }

    /// A session over a byte stream (length-prefixed frames), its driver
    /// spawned on the current tokio runtime.
    pub async fn over_io<T>(
        io: T,
        role: Role,
        config: Config,
        hello: Hello,
    ) -> Result<Session, SessionError>
    where
        T: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (source, sink) = codec::framed_io(io, config.max_frame_size);
        let (session, driver) = Self::handshake(source, sink, role, config, hello).await?;
        tokio::spawn(driver.run());
        Ok(session)
    }

    /// [`Session::over_io`] answering a hello that came already (see
    /// [`Session::handshake_after`]).
    pub async fn over_io_after<T>(
        io: T,
        role: Role,
        config: Config,
        hello: Hello,
        received: Option<Hello>,
    ) -> Result<Session, SessionError>
    where
        T: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (source, sink) = codec::framed_io(io, config.max_frame_size);
        let (session, driver) =
            Self::handshake_after(source, sink, role, config, hello, received).await?;
        tokio::spawn(driver.run());
        Ok(session)
    }

    /// A session over binary messages, one frame each (a WebSocket's sink
    /// and stream of binary payloads), its driver spawned on the current
    /// tokio runtime.
    pub async fn over_messages<Si, St, E1, E2>(
        sink: Si,
        stream: St,
        role: Role,
        config: Config,
        hello: Hello,
    ) -> Result<Session, SessionError>
    where
        Si: Sink<Bytes, Error = E1> + Unpin + Send + 'static,
        St: FuturesStream<Item = Result<Bytes, E2>> + Unpin + Send + 'static,
        E1: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
        E2: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
    {
        let (session, driver) =
            Self::over_local_messages(sink, stream, role, config, hello).await?;
        tokio::spawn(driver);
        Ok(session)
    }

    /// [`Session::over_messages`] for a sink and stream that must stay on the
    /// task that owns them (actix-ws's are not `Send`): the caller runs the
    /// returned driver there (it ends with the session), and may hand the
    /// `Session` itself to any task. No task or channel between the messages
    /// and the session.
    pub async fn over_local_messages<Si, St, E1, E2>(
        sink: Si,
        stream: St,
        role: Role,
        config: Config,
        hello: Hello,
    ) -> Result<
        (
            Session,
            impl std::future::Future<Output = Result<(), SessionError>> + use<Si, St, E1, E2>,
        ),
        SessionError,
    >
    where
        Si: Sink<Bytes, Error = E1> + Unpin + 'static,
        St: FuturesStream<Item = Result<Bytes, E2>> + Unpin + 'static,
        E1: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
        E2: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
    {
        let max = config.max_frame_size;
        let (session, driver) = Self::handshake(
            MessageSource::new(stream, max),
            MessageSink::new(sink, max),
            role,
            config,
            hello,
        )
        .await?;
        Ok((session, driver.run()))
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.handle.shared
    }

    /// Opens a stream to `target` and waits for the peer to accept it.
    /// Dropping the future before the answer resets the stream once it
    /// comes (so a timeout around it is fine).
    pub async fn open(&self, target: &str) -> Result<Stream, OpenError> {
        let shared = self.shared();
        let id = shared.lock().start_open(target)?;
        let handle = Handle::new(shared.clone(), id, target.to_owned());
        poll_fn(|cx| shared.lock().poll_open(id, cx)).await?;
        Ok(Stream::new(handle))
    }

    /// The next stream the peer opened; `None` once the session has ended or
    /// is draining (`GOAWAY` either way) and nothing is left to accept.
    /// Cancel-safe (usable in `select!`): nothing is taken unless returned.
    pub async fn accept(&self) -> Option<Incoming> {
        let shared = self.shared();
        let (id, target) = poll_fn(|cx| shared.lock().poll_accept(cx)).await?;
        Some(Incoming {
            shared: shared.clone(),
            id,
            target,
            answered: false,
        })
    }

    /// Sends a typed control message (JSON on stream 0), after everything
    /// sent before it; waits while the transport queue is full. Cancelled
    /// while waiting, it sends nothing.
    pub async fn send_control<T: Serialize + ?Sized>(
        &self,
        message: &T,
    ) -> Result<(), ControlError> {
        let payload =
            serde_json::to_vec(message).map_err(|e| ControlError::Encode(e.to_string()))?;
        let max = self.shared().config.max_frame_size;
        if payload.len() > max {
            return Err(ControlError::TooLarge {
                len: payload.len(),
                max,
            });
        }
        if payload.is_empty() {
            return Err(ControlError::Encode("empty message".into()));
        }
        let mut payload = Some(Bytes::from(payload));
        poll_fn(|cx| self.shared().lock().poll_send_control(cx, &mut payload))
            .await
            .map_err(ControlError::Session)
    }

    /// The next control message from the peer, as `T`; `None` once the
    /// session has ended. A message that is not a `T` is consumed and
    /// returned as [`ControlError::Decode`]. Cancel-safe.
    pub async fn recv_control<T: DeserializeOwned>(&self) -> Option<Result<T, ControlError>> {
        let payload = poll_fn(|cx| self.shared().lock().poll_recv_control(cx)).await?;
        Some(serde_json::from_slice(&payload).map_err(|e| ControlError::Decode(e.to_string())))
    }

    /// Starts draining: sends `GOAWAY`, after which neither side opens new
    /// streams; open ones finish, then the session closes.
    pub fn goaway(&self, reason: &str) {
        self.shared().lock().goaway(reason);
    }

    /// Sends `GOAWAY`, flushes what is queued and closes the transport now;
    /// open streams fail.
    pub fn close(&self) {
        self.shared().lock().close();
    }

    /// Ends the session at once without a word to the peer: nothing queued
    /// is sent, nothing more is read, open streams fail, and the transport is
    /// closed. For a pipe whose peer is gone or replaced (a box's port, where
    /// the next connection would read a goodbye meant for this one).
    pub fn abandon(&self) {
        self.shared().lock().finish(Err(SessionError::Closed));
    }

    /// Waits for the session to end: `Ok` when it closed or drained cleanly.
    pub async fn closed(&self) -> Result<(), SessionError> {
        poll_fn(|cx| self.shared().lock().poll_end(cx)).await
    }

    /// Whether the session has ended.
    pub fn is_closed(&self) -> bool {
        self.shared().lock().is_ended()
    }

    /// The peer's hello.
    pub fn peer(&self) -> &Hello {
        &self.shared().peer
    }

    /// The negotiated protocol version.
    pub fn version(&self) -> u32 {
        self.shared().version
    }

    pub fn role(&self) -> Role {
        self.shared().role
    }

    pub fn config(&self) -> &Config {
        &self.shared().config
    }

    /// The reason of the peer's `GOAWAY`, if it sent one.
    pub fn peer_goaway(&self) -> Option<String> {
        self.shared().lock().peer_goaway()
    }

    pub fn stats(&self) -> Stats {
        self.shared().lock().stats()
    }
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("role", &self.role())
            .field("version", &self.version())
            .field("peer", &self.peer().software)
            .finish()
    }
}

impl Incoming {
    /// The stream id on the wire.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The target the peer asked for (`exec`, `tcp:db.internal:5432`, ...).
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Accepts the stream (sends `OPEN_OK`).
    pub fn accept(mut self) -> Stream {
        self.answered = true;
        self.shared.lock().accept_incoming(self.id);
        Stream::new(Handle::new(
            self.shared.clone(),
            self.id,
            std::mem::take(&mut self.target),
        ))
    }

    /// Refuses the stream (sends `OPEN_ERR`). A code outside 400..=599
    /// becomes 503; the reason is cut to 1024 bytes.
    pub fn refuse(mut self, code: u16, reason: &str) {
        self.answered = true;
        self.shared.lock().refuse_incoming(self.id, code, reason);
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        if !self.answered {
            self.shared.lock().drop_handle(self.id);
        }
    }
}

impl fmt::Debug for Incoming {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Incoming")
            .field("id", &self.id)
            .field("target", &self.target)
            .finish()
    }
}

/// Sends this side's hello.
async fn send_hello<W>(sink: &mut W, payload: &Bytes) -> Result<(), SessionError>
where
    W: Sink<Frame, Error = CodecError> + Unpin,
{
    sink.send(Frame::Control {
        payload: payload.clone(),
    })
    .await
    .map_err(SessionError::from)
}

/// The peer's hello, after the frames before it that `before` lets pass.
async fn receive_hello<R>(source: &mut R, before: BeforeHello) -> Result<Hello, SessionError>
where
    R: FuturesStream<Item = Result<Frame, CodecError>> + Unpin,
{
    loop {
        match source.next().await {
            None => return Err(SessionError::PeerClosed { goaway: None }),
            Some(Err(e)) => return Err(SessionError::from(e)),
            Some(Ok(Frame::Control { payload })) => return Ok(Hello::from_json(&payload)?),
            Some(Ok(_)) if before == BeforeHello::Skip => {}
            Some(Ok(other)) => return Err(ProtocolError::NoHello(other.frame_type()).into()),
        }
    }
}
