//! The errors of the multiplexer: why a session ended, why an open failed,
//! why a control message could not go or come, and what a stream's I/O
//! errors carry.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use crate::codec::CodecError;
use crate::frame::{FrameError, FrameType, code};
use crate::hello::HelloError;

/// A configuration whose limits contradict each other.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid session configuration: {0}")]
pub struct ConfigError(pub &'static str);

/// Why a session ended (or could not start).
#[derive(Debug, Clone, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("hello: {0}")]
    Hello(#[from] HelloError),
    #[error("the peer sent a malformed frame: {0}")]
    Frame(#[from] FrameError),
    #[error("the peer broke the protocol: {0}")]
    Protocol(#[from] ProtocolError),
    #[error("nothing came from the peer for {0:?}: it is gone")]
    Timeout(Duration),
    #[error("the peer stopped reading: {0} bytes are queued for it")]
    Stalled(usize),
    #[error("the peer closed the connection{}", goaway.as_ref().map(|r| format!(" (after GOAWAY: {r})")).unwrap_or_default())]
    PeerClosed { goaway: Option<String> },
    #[error("transport: {0}")]
    Transport(Arc<io::Error>),
    #[error("the session is closed")]
    Closed,
}

impl From<CodecError> for SessionError {
    fn from(e: CodecError) -> Self {
        match e {
            CodecError::Frame(e) => Self::Frame(e),
            CodecError::TruncatedAtEof(_) => Self::Transport(Arc::new(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                e.to_string(),
            ))),
            CodecError::Io(e) => Self::Transport(Arc::new(e)),
        }
    }
}

/// A well-formed frame the peer should not have sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("expected a hello as the first frame, got {0:?}")]
    NoHello(FrameType),
    #[error("stream {stream} sent {len} bytes with only {credit} bytes of credit")]
    FlowControl { stream: u32, len: u32, credit: u32 },
    #[error("credit on stream {stream} overflows the send window")]
    CreditOverflow { stream: u32 },
    #[error("stream {stream} was opened with an id the peer may not use")]
    BadStreamId { stream: u32 },
    #[error("{kind:?} for stream {stream}, which was never opened")]
    UnknownStream { stream: u32, kind: FrameType },
    #[error("{kind:?} on stream {stream} after it ended")]
    AfterEnd { stream: u32, kind: FrameType },
    #[error("unexpected {kind:?} on stream {stream}")]
    Unexpected { stream: u32, kind: FrameType },
    #[error("more than {0} control messages waiting to be read")]
    ControlOverflow(usize),
    #[error("received data exceeds the session memory budget of {0} bytes")]
    MemoryBudget(usize),
}

/// Why [`Session::open`](super::Session::open) gave no stream.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OpenError {
    #[error("refused ({code}): {reason}")]
    Refused { code: u16, reason: String },
    #[error("invalid target: {0}")]
    InvalidTarget(FrameError),
    #[error("{0} streams are open, the most this session allows")]
    TooManyStreams(usize),
    #[error("the session is draining (GOAWAY): no new streams")]
    GoingAway,
    #[error("stream ids are exhausted: open a new session")]
    IdsExhausted,
    #[error(transparent)]
    Session(SessionError),
}

impl OpenError {
    /// The `OPEN_ERR`-style code of this error, for passing it on.
    pub fn code(&self) -> u16 {
        match self {
            Self::Refused { code, .. } => *code,
            Self::InvalidTarget(_) => code::BAD_REQUEST,
            Self::TooManyStreams(_) => code::TOO_MANY_STREAMS,
            Self::GoingAway | Self::IdsExhausted | Self::Session(_) => code::UNAVAILABLE,
        }
    }
}

/// Why a control message could not be sent or read.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ControlError {
    #[error("the control message does not serialize: {0}")]
    Encode(String),
    #[error("a control message of {len} bytes exceeds the frame maximum of {max}")]
    TooLarge { len: usize, max: usize },
    #[error("the control message is not of the expected type: {0}")]
    Decode(String),
    #[error(transparent)]
    Session(SessionError),
}

/// What a stream's `io::Error`s carry (`get_ref()` and downcast to read it).
/// Kinds: a peer reset is `ConnectionReset`, a local one `ConnectionAborted`,
/// a write after shutdown `BrokenPipe`, an ended session `ConnectionAborted`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StreamError {
    #[error("stream reset by the peer: {0}")]
    ResetByPeer(String),
    #[error("stream reset locally: {0}")]
    ResetLocally(String),
    #[error("write after shutdown")]
    WriteAfterShutdown,
    #[error("session ended: {0}")]
    SessionEnded(SessionError),
}

impl From<StreamError> for io::Error {
    fn from(e: StreamError) -> Self {
        let kind = match e {
            StreamError::ResetByPeer(_) => io::ErrorKind::ConnectionReset,
            StreamError::ResetLocally(_) | StreamError::SessionEnded(_) => {
                io::ErrorKind::ConnectionAborted
            }
            StreamError::WriteAfterShutdown => io::ErrorKind::BrokenPipe,
        };
        io::Error::new(kind, e)
    }
}
