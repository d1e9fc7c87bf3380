//! One multiplexed byte stream: `AsyncRead` + `AsyncWrite`, half-close with
//! `shutdown` (sends `FIN`), abort with [`Stream::reset`] (sends `RST`).
//!
//! Reads return EOF after the peer's `FIN`, and a `ConnectionReset` error
//! (carrying [`StreamError::ResetByPeer`](super::StreamError)) after its
//! `RST`, once the bytes received before it are read. Dropping a stream that
//! is not finished both ways (shut down here, EOF read from the peer) resets
//! it: a stream dropped half-written must not look complete to the peer.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures_util::future::poll_fn;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::state::Shared;

/// What all handles of one stream share; the last one dropped finishes or
/// resets the stream.
pub(crate) struct Handle {
    shared: Arc<Shared>,
    id: u32,
    target: String,
}

impl Handle {
    pub(crate) fn new(shared: Arc<Shared>, id: u32, target: String) -> Self {
        Self { shared, id, target }
    }

    fn poll_read(&self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.shared.lock().poll_read(self.id, cx, buf)
    }

    fn poll_write(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let mut inner = self.shared.lock();
        let n = ready!(inner.poll_send(self.id, cx, buf.len()))?;
        if n > 0 {
            // The payload buffer: the one allocation a written chunk costs.
            inner.push_data(self.id, Bytes::copy_from_slice(&buf[..n]));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_write_bytes(&self, cx: &mut Context<'_>, data: &mut Bytes) -> Poll<io::Result<()>> {
        let mut inner = self.shared.lock();
        while !data.is_empty() {
            let n = ready!(inner.poll_send(self.id, cx, data.len()))?;
            inner.push_data(self.id, data.split_to(n));
        }
        Poll::Ready(Ok(()))
    }

    fn shutdown(&self) -> io::Result<()> {
        self.shared.lock().shutdown(self.id)
    }

    fn reset(&self, reason: &str) {
        self.shared.lock().reset(self.id, reason);
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.lock().drop_handle(self.id);
    }
}

/// A stream of a [`Session`](super::Session).
pub struct Stream {
    handle: Arc<Handle>,
}

/// The reading half of a [`Stream`] (from [`Stream::into_split`]).
pub struct ReadHalf {
    handle: Arc<Handle>,
}

/// The writing half of a [`Stream`] (from [`Stream::into_split`]).
pub struct WriteHalf {
    handle: Arc<Handle>,
}

impl Stream {
    pub(crate) fn new(handle: Handle) -> Self {
        Self {
            handle: Arc::new(handle),
        }
    }

    /// The stream id on the wire.
    pub fn id(&self) -> u32 {
        self.handle.id
    }

    /// The target named in the `OPEN`.
    pub fn target(&self) -> &str {
        &self.handle.target
    }

    /// Aborts both directions and tells the peer `reason`. Bytes not yet
    /// read are dropped; further reads and writes fail.
    pub fn reset(&self, reason: &str) {
        self.handle.reset(reason);
    }

    /// The next received bytes, as they arrived (a slice of the received
    /// frame, not copied); `None` at EOF.
    pub async fn read_chunk(&mut self) -> io::Result<Option<Bytes>> {
        read_chunk(&self.handle).await
    }

    /// Sends `data` without copying it (split into frames of the send size).
    pub async fn write_chunk(&mut self, data: Bytes) -> io::Result<()> {
        write_chunk(&self.handle, data).await
    }

    /// Halves that can be used from two tasks. The stream is finished or
    /// reset when both are dropped.
    pub fn into_split(self) -> (ReadHalf, WriteHalf) {
        (
            ReadHalf {
                handle: self.handle.clone(),
            },
            WriteHalf {
                handle: self.handle,
            },
        )
    }
}

impl ReadHalf {
    pub fn id(&self) -> u32 {
        self.handle.id
    }

    /// Like [`Stream::reset`].
    pub fn reset(&self, reason: &str) {
        self.handle.reset(reason);
    }

    /// Like [`Stream::read_chunk`].
    pub async fn read_chunk(&mut self) -> io::Result<Option<Bytes>> {
        read_chunk(&self.handle).await
    }
}

impl WriteHalf {
    pub fn id(&self) -> u32 {
        self.handle.id
    }

    /// Like [`Stream::reset`].
    pub fn reset(&self, reason: &str) {
        self.handle.reset(reason);
    }

    /// Like [`Stream::write_chunk`].
    pub async fn write_chunk(&mut self, data: Bytes) -> io::Result<()> {
        write_chunk(&self.handle, data).await
    }
}

async fn read_chunk(handle: &Handle) -> io::Result<Option<Bytes>> {
    poll_fn(|cx| handle.shared.lock().poll_read_chunk(handle.id, cx)).await
}

async fn write_chunk(handle: &Handle, mut data: Bytes) -> io::Result<()> {
    poll_fn(|cx| handle.poll_write_bytes(cx, &mut data)).await
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.handle.poll_read(cx, buf)
    }
}

impl AsyncRead for ReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.handle.poll_read(cx, buf)
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.handle.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Written bytes are queued for the transport already.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.handle.shutdown())
    }
}

impl AsyncWrite for WriteHalf {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.handle.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.handle.shutdown())
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("id", &self.handle.id)
            .field("target", &self.handle.target)
            .finish()
    }
}

impl fmt::Debug for ReadHalf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadHalf")
            .field("id", &self.handle.id)
            .finish()
    }
}

impl fmt::Debug for WriteHalf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteHalf")
            .field("id", &self.handle.id)
            .finish()
    }
}
