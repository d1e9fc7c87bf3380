//! The driver of a session: one future that reads frames into the shared
//! state, writes queued frames to the transport, and keeps the liveness
//! clock (a `PING` every interval; the session ends when the peer is silent
//! for the timeout).

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::poll_fn;
use futures_util::{Sink, SinkExt, Stream, StreamExt};
use tokio::time::Instant;

use super::error::SessionError;
use super::state::{Outbound, Shared};
use crate::codec::CodecError;
use crate::frame::{Frame, clip_reason};

/// Frames moved to the transport per flush.
const BATCH: usize = 64;

/// How long the driver tries to say why it ended the session, or to close
/// the transport, before giving up.
const GOODBYE: Duration = Duration::from_secs(1);

/// Moves a session's frames; see [`Session::handshake`](super::Session::handshake).
/// Dropping it (or never running it) ends the session.
pub struct Driver<R, W> {
    shared: Arc<Shared>,
    source: R,
    sink: W,
}

impl<R, W> Driver<R, W>
where
    R: Stream<Item = Result<Frame, CodecError>> + Unpin,
    W: Sink<Frame, Error = CodecError> + Unpin,
{
    pub(crate) fn new(shared: Arc<Shared>, source: R, sink: W) -> Self {
        Self {
            shared,
            source,
            sink,
        }
    }

    /// Runs the session until it ends; `Ok` when it closed or drained
    /// cleanly. Everyone waiting on the session learns the same result.
    pub async fn run(mut self) -> Result<(), SessionError> {
        let shared = self.shared.clone();
        let result = tokio::select! {
            r = read_loop(&shared, &mut self.source) => r.map(|()| false),
            r = write_loop(&shared, &mut self.sink) => r.map(|()| true),
            r = liveness_loop(&shared) => r.map(|()| false),
        };
        let sink_closed = matches!(result, Ok(true));
        let result = result.map(|_| ());
        shared.lock().finish(result.clone());
        match &result {
            Ok(()) => tracing::debug!(software = %shared.peer.software, "wire session ended"),
            Err(e) => {
                tracing::debug!(software = %shared.peer.software, error = %e, "wire session failed")
            }
        }
        let goodbye = match &result {
            Err(e @ (SessionError::Frame(_) | SessionError::Protocol(_))) => Some(Frame::GoAway {
                reason: clip_reason(&e.to_string()),
            }),
            _ => None,
        };
        let dead = matches!(
            result,
            Err(SessionError::Timeout(_) | SessionError::Stalled(_) | SessionError::Transport(_))
        );
        if !dead && !sink_closed {
            let sink = &mut self.sink;
            let _ = tokio::time::timeout(GOODBYE, async move {
                if let Some(frame) = goodbye {
                    sink.send(frame).await?;
                }
                sink.close().await
            })
            .await;
        }
        result
    }
}

impl<R, W> Drop for Driver<R, W> {
    fn drop(&mut self) {
        self.shared.lock().finish(Err(SessionError::Closed));
    }
}

async fn read_loop<R>(shared: &Shared, source: &mut R) -> Result<(), SessionError>
where
    R: Stream<Item = Result<Frame, CodecError>> + Unpin,
{
    while let Some(item) = source.next().await {
        let frame = item?;
        shared.lock().on_frame(frame, Instant::now())?;
    }
    shared.lock().on_eof()
}

/// Returns `Ok` after closing the transport cleanly.
async fn write_loop<W>(shared: &Shared, sink: &mut W) -> Result<(), SessionError>
where
    W: Sink<Frame, Error = CodecError> + Unpin,
{
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        let next = poll_fn(|cx| shared.lock().poll_outbound(cx, &mut batch, BATCH)).await;
        for frame in batch.drain(..) {
            sink.feed(frame).await?;
        }
        match next {
            Outbound::Send => sink.flush().await?,
            Outbound::Close => {
                sink.close().await?;
                return Ok(());
            }
        }
    }
}

async fn liveness_loop(shared: &Shared) -> Result<(), SessionError> {
    loop {
        let next = shared.lock().liveness(Instant::now())?;
        tokio::time::sleep_until(next).await;
    }
}
