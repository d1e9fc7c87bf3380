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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

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

    /// The counter of what `box_id` sends, shared by its streams: the
    /// router's join adds to it as the bytes pass
    /// (`psbx_wire::splice::join_counted`). Held while a stream is open.
    pub fn counter(&self, box_id: &BoxId) -> Arc<AtomicU64> {
        self.lock().entry(box_id.clone()).or_default().clone()
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

#[cfg(test)]
mod tests {
    use super::*;
    use psbx_wire::splice::join_counted;
    use psbx_wire::testing::session_pair;
    use psbx_wire::{Config, Session, Stream};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A stream from `from` accepted on `to`.
    async fn connected(from: &Session, to: &Session) -> (Stream, Stream) {
        let accept = async { to.accept().await.unwrap().accept() };
        let (opened, accepted) = tokio::join!(from.open("env:db.internal:5432"), accept);
        (opened.unwrap(), accepted)
    }

    /// The box's end and the connector's end of a stream the server joins,
    /// counting what the box sends for `box_id` (the sessions kept open).
    async fn joined(egress: &Egress, box_id: &BoxId) -> (Stream, Stream, [Session; 4]) {
        let pair = || session_pair(Config::default(), Config::default(), 1 << 16);
        let (boxd, server_box) = pair().await.unwrap();
        let (server_conn, connector) = pair().await.unwrap();
        let (near, a) = connected(&boxd, &server_box).await;
        let (b, far) = connected(&server_conn, &connector).await;
        let counter = egress.counter(box_id);
        tokio::spawn(async move {
            join_counted(a, b, "psbx", &counter, std::future::pending::<&str>()).await
        });
        (near, far, [boxd, server_box, server_conn, connector])
    }

    #[tokio::test]
    async fn what_a_box_sends_is_counted_per_box_and_what_comes_back_is_not() {
        let egress = Egress::default();
        let (a, b) = (
            BoxId::parse("box_a").unwrap(),
            BoxId::parse("box_b").unwrap(),
        );
        let (mut near, mut far, _sessions) = joined(&egress, &a).await;
        near.write_all(b"sent by the box").await.unwrap();
        let mut buf = [0u8; 15];
        far.read_exact(&mut buf).await.unwrap();
        far.write_all(b"the answer").await.unwrap();
        near.read_exact(&mut [0u8; 10]).await.unwrap();
        assert_eq!(egress.pending(&a), 15);
        assert_eq!(egress.pending(&b), 0);
        // A second stream of the same box adds to the same counter.
        let (mut near, mut far, _more) = joined(&egress, &a).await;
        near.write_all(b"12345").await.unwrap();
        far.read_exact(&mut [0u8; 5]).await.unwrap();
        assert_eq!(egress.pending(&a), 20);
    }
}
