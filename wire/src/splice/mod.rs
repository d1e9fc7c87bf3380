//! Copying bytes both ways, with half-close and resets passed on: the one
//! way every hop of psbx joins two connections.
//!
//! * [`splice`] and [`splice_until`]: an accepted wire stream and a TCP
//!   connection (the connector's to its target, boxd's `port:<n>` to a
//!   program in the box, boxd's entry for an environment address);
//! * [`join`] and [`join_counted`]: two wire streams (the server's, between a
//!   box's `env:` or `link:` stream and the stream it opened for it).
//!
//! When one side ends its writes (`FIN`, TCP FIN), the other side's write
//! half is shut down, and the copy ends when both directions are done. An
//! error in either direction (a reset, a broken connection) resets both
//! sides: a wire stream with `RST` and the error as its reason, a TCP
//! connection with a TCP RST (zero linger), so neither end mistakes a broken
//! connection for a finished one. A caller may end the copy early
//! (`cancel`: the box's session ended, the address is no longer listed);
//! both sides are then reset with the reason it gives.
//!
//! Memory stays bounded: one chunk in flight each way, the wire's credit
//! holding back the sender; wire chunks are passed on without a copy.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::Stream;
use crate::mux::{ReadHalf, WriteHalf};
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

#[cfg(test)]
mod tests;

/// The most bytes read from the target at once (and sent as one chunk):
/// the wire's frame split, so that an idle stream holds a small buffer
/// (a thousand open streams, 16 MiB).
const READ_CHUNK: usize = 16 * 1024;

/// What a splice or a join moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Moved {
    /// From the wire stream (a join's first stream) to its target.
    pub to_target: u64,
    /// From the target back to the wire stream.
    pub from_target: u64,
}

/// Why a copy stopped before both directions were done.
enum Stop {
    Failed(io::Error),
    Cancelled(String),
}

impl Stop {
    /// The reason both sides are reset with: the caller's as given, an
    /// error as `<who>: <the error>`.
    fn reason(&self, who: &str) -> String {
        match self {
            Self::Failed(e) => format!("{who}: {e}"),
            Self::Cancelled(reason) => reason.clone(),
        }
    }

    /// What the caller gets back: the error, or a cancellation as
    /// `ConnectionAborted` with its reason.
    fn into_error(self) -> io::Error {
        match self {
            Self::Failed(e) => e,
            Self::Cancelled(reason) => io::Error::new(io::ErrorKind::ConnectionAborted, reason),
        }
    }
}

/// Runs both directions until both are done, unless one fails or `cancel`
/// resolves first; the caller resets its sides when it stops.
async fn both_ways<R: AsRef<str>>(
    to_target: impl Future<Output = io::Result<u64>>,
    from_target: impl Future<Output = io::Result<u64>>,
    cancel: impl Future<Output = R>,
) -> Result<Moved, Stop> {
    tokio::select! {
        copied = async { tokio::try_join!(to_target, from_target) } => {
            let (to_target, from_target) = copied.map_err(Stop::Failed)?;
            Ok(Moved { to_target, from_target })
        }
        reason = cancel => Err(Stop::Cancelled(reason.as_ref().to_owned())),
    }
}

/// Copies until both directions are done; on an error, resets both sides
/// and returns it. The wire stream's reset reason is `<who>: <the error>`.
pub async fn splice(stream: Stream, tcp: TcpStream, who: &str) -> io::Result<Moved> {
    splice_until(stream, tcp, who, std::future::pending::<&str>()).await
}

/// [`splice`], ended early when `cancel` resolves: both sides are reset
/// then, the wire stream with the reason `cancel` gives, and the result is a
/// `ConnectionAborted` error carrying it.
pub async fn splice_until<R: AsRef<str>>(
    stream: Stream,
    tcp: TcpStream,
    who: &str,
    cancel: impl Future<Output = R>,
) -> io::Result<Moved> {
    let (mut wire_read, mut wire_write) = stream.into_split();
    let (mut tcp_read, mut tcp_write) = tcp.into_split();
    let moved = both_ways(
        to_target(&mut wire_read, &mut tcp_write),
        from_target(&mut tcp_read, &mut wire_write),
        cancel,
    )
    .await;
    moved.map_err(|stop| {
        wire_write.reset(&stop.reason(who));
        if let Ok(tcp) = tcp_read.reunite(tcp_write) {
            // Closed with zero linger: the target sees a TCP RST.
            let _ = tcp.set_zero_linger();
        }
        stop.into_error()
    })
}

/// Copies between two wire streams, `a` (the one that asked) and `b` (the
/// one opened to its target), until both directions are done: each `FIN` is
/// passed on as a `FIN`. On an error in either direction (a reset by either
/// peer) both are reset, with `<who>: <the error>` (which names the first
/// reset's reason), and the error is returned. Ended early by `cancel` as
/// [`splice_until`] is.
pub async fn join<R: AsRef<str>>(
    a: Stream,
    b: Stream,
    who: &str,
    cancel: impl Future<Output = R>,
) -> io::Result<Moved> {
    join_inner(a, b, who, None, cancel).await
}

/// [`join`], adding what `a` sends to `sent` as it passes (a box's egress
/// counter, read while the streams are still open).
pub async fn join_counted<R: AsRef<str>>(
    a: Stream,
    b: Stream,
    who: &str,
    sent: &AtomicU64,
    cancel: impl Future<Output = R>,
) -> io::Result<Moved> {
    join_inner(a, b, who, Some(sent), cancel).await
}

async fn join_inner<R: AsRef<str>>(
    a: Stream,
    b: Stream,
    who: &str,
    sent: Option<&AtomicU64>,
    cancel: impl Future<Output = R>,
) -> io::Result<Moved> {
    let (mut a_read, mut a_write) = a.into_split();
    let (mut b_read, mut b_write) = b.into_split();
    let moved = both_ways(
        forward(&mut a_read, &mut b_write, sent),
        forward(&mut b_read, &mut a_write, None),
        cancel,
    )
    .await;
    moved.map_err(|stop| {
        let reason = stop.reason(who);
        a_write.reset(&reason);
        b_write.reset(&reason);
        stop.into_error()
    })
}

/// One direction of a join; at `from`'s EOF (its peer's `FIN`) `to` is shut
/// down (`FIN`). Chunks are passed on as they arrived, without a copy.
async fn forward(
    from: &mut ReadHalf,
    to: &mut WriteHalf,
    counted: Option<&AtomicU64>,
) -> io::Result<u64> {
    let mut moved = 0u64;
    while let Some(chunk) = from.read_chunk().await? {
        let n = chunk.len() as u64;
        if let Some(counter) = counted {
            counter.fetch_add(n, Ordering::Relaxed);
        }
        to.write_chunk(chunk).await?;
        moved += n;
    }
    to.shutdown().await?;
    Ok(moved)
}

/// Wire stream to target; at the stream's EOF (the peer's `FIN`) the
/// target's write half is shut down (TCP FIN).
async fn to_target(wire: &mut ReadHalf, tcp: &mut OwnedWriteHalf) -> io::Result<u64> {
    let mut moved = 0u64;
    while let Some(chunk) = wire.read_chunk().await? {
        tcp.write_all(&chunk).await?;
        moved += chunk.len() as u64;
    }
    tcp.shutdown().await?;
    Ok(moved)
}

/// Target to wire stream; at the target's EOF the stream is shut down
/// (`FIN`). Chunks are handed to the stream without another copy.
async fn from_target(tcp: &mut OwnedReadHalf, wire: &mut WriteHalf) -> io::Result<u64> {
    let mut moved = 0u64;
    let mut buf = BytesMut::new();
    loop {
        buf.reserve(READ_CHUNK);
        let n = tcp.read_buf(&mut buf).await?;
        if n == 0 {
            break;
        }
        moved += n as u64;
        wire.write_chunk(buf.split().freeze()).await?;
    }
    wire.shutdown().await?;
    Ok(moved)
}
