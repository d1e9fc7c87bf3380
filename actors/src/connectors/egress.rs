//! What boxes send through their environment's connections (box_egress,
//! environments spec "How a box reaches an address" item 6): counted as the
//! bytes pass — one counter per box, shared by its streams, so the data path
//! takes no lock — and added to `box_egress` in the database by [`flush`]
//! every few seconds and when the server stops. Reads add what is counted
//! but not stored yet. What comes back from the user's network is not
//! counted.
//!
//! A failed flush is the store's error ([`StoreError`]), not the API's
//! `BoxError`: the counters sit below the façades, and the server only logs
//! it.
//!
//! [`flush`]: Egress::flush

use crate::blocking::blocking;
use crate::ids::BoxId;
use crate::store::{Store, StoreError};
use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The counters of this replica, by box id; cheap to clone.
#[derive(Clone, Default)]
pub struct Egress {
    counters: Arc<Mutex<HashMap<BoxId, Arc<AtomicU64>>>>,
}

impl Egress {
    fn lock(&self) -> MutexGuard<'_, HashMap<BoxId, Arc<AtomicU64>>> {
        self.counters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `stream` with what is read from it (what the box sends) counted for
    /// `box_id`.
    pub fn count<S>(&self, box_id: &BoxId, stream: S) -> Counted<S> {
        let counter = self.lock().entry(box_id.clone()).or_default().clone();
        Counted { stream, counter }
    }

    /// Bytes counted for a box and not stored yet.
    pub fn pending(&self, box_id: &BoxId) -> u64 {
        self.lock()
            .get(box_id)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Adds what was counted to `box_egress`. Counters no stream uses any
    /// more are forgotten once empty; when the database cannot be written,
    /// the bytes go back to their counters for the next flush.
    pub async fn flush(&self, store: &Store) -> Result<(), StoreError> {
        let counted: Vec<(BoxId, u64)> = {
            let mut counters = self.lock();
            let counted = counters
                .iter()
                .map(|(id, c)| (id.clone(), c.swap(0, Ordering::Relaxed)))
                .filter(|(_, bytes)| *bytes > 0)
                .collect();
            counters.retain(|_, c| Arc::strong_count(c) > 1);
            counted
        };
        if counted.is_empty() {
            return Ok(());
        }
        let store = store.clone();
        let batch = counted.clone();
        let stored = blocking(move || store.add_box_egress(&batch)).await;
        if stored.is_err() {
            let mut counters = self.lock();
            for (id, bytes) in counted {
                counters
                    .entry(id)
                    .or_default()
                    .fetch_add(bytes, Ordering::Relaxed);
            }
        }
        stored
    }
}

/// A stream whose reads are counted.
pub struct Counted<S> {
    stream: S,
    counter: Arc<AtomicU64>,
}

impl<S> Counted<S> {
    pub fn get_ref(&self) -> &S {
        &self.stream
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        let read = buf.filled().len().saturating_sub(before);
        if read > 0 {
            self.counter.fetch_add(read as u64, Ordering::Relaxed);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn reads_are_counted_per_box_and_writes_are_not() {
        let egress = Egress::default();
        let (a, b) = (
            BoxId::parse("box_a").unwrap(),
            BoxId::parse("box_b").unwrap(),
        );
        let (near, mut far) = tokio::io::duplex(64);
        let mut counted = egress.count(&a, near);
        far.write_all(b"sent by the box").await.unwrap();
        let mut buf = [0u8; 15];
        counted.read_exact(&mut buf).await.unwrap();
        counted.write_all(b"the answer").await.unwrap();
        assert_eq!(egress.pending(&a), 15);
        assert_eq!(egress.pending(&b), 0);
        // A second stream of the same box adds to the same counter.
        let (near, mut far) = tokio::io::duplex(64);
        let mut second = egress.count(&a, near);
        far.write_all(b"12345").await.unwrap();
        second.read_exact(&mut [0u8; 5]).await.unwrap();
        assert_eq!(egress.pending(&a), 20);
    }
}
