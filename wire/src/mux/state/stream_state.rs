//! One stream's state: its phase (opening, waiting to be accepted, open),
//! its receive window and queue of received chunks, how each half ended,
//! its send credit and the wakers of the handles waiting on it.
//!
//! Each half is one enum of how its writer ended it: [`SendHalf`] what we
//! sent (`FIN` or `RST`), [`RecvHalf`] what the peer sent. A reset from
//! either side ends both directions. Ours decides what the handles see
//! (reads and writes fail with its reason) and makes a later `RST` from
//! the peer one to ignore; after only the peer's, the bytes it sent before
//! stay readable, and reads end cleanly if its `FIN` came first. One enum a
//! half, rather than a flag per event, so that states no sequence of frames
//! leads to (two reasons for the peer's reset, a receive end reset with no
//! `RST` received, a `FIN` sent after our `RST`) cannot be written down.
//!
//! Apart from the session's state because every side of it (received
//! frames, the handles' reads and writes, dropping a handle) asks the same
//! questions of a stream: has it finished, what wakes it.

use std::collections::VecDeque;
use std::task::Waker;

use bytes::Bytes;

use super::super::config::INITIAL_WINDOW;
use super::super::error::StreamError;
use super::super::flow::RecvWindow;
use super::super::wakers;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Opened here, waiting for `OPEN_OK` or `OPEN_ERR`.
    Opening,
    /// Opened by the peer, not yet accepted or refused.
    Incoming,
    Open,
}

/// What we sent to end our direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum SendHalf {
    /// We may still write.
    Open,
    /// We sent `FIN`; the peer may still write.
    Fin,
    /// We reset the stream, for this reason: both directions are over, and
    /// what the peer sends afterwards is ignored.
    Reset(String),
}

/// What the peer sent to end its direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum RecvHalf {
    /// The peer may still write.
    Open,
    /// The peer sent `FIN`: its bytes end after what is queued.
    Fin,
    /// The peer reset the stream: both directions are over. Not recorded
    /// when we had reset it first.
    Reset {
        reason: String,
        /// `FIN` came first, so everything the peer wrote arrived: reads
        /// end cleanly once the queue is empty.
        after_fin: bool,
    },
}

pub(super) struct StreamState {
    pub(super) phase: Phase,
    pub(super) refused: Option<(u16, String)>,
    pub(super) open_waker: Option<Waker>,
    pub(super) recv: RecvWindow,
    pub(super) queue: VecDeque<Bytes>,
    pub(super) recv_half: RecvHalf,
    pub(super) read_waker: Option<Waker>,
    /// Bytes we may still send.
    pub(super) credit: u32,
    pub(super) send_half: SendHalf,
    pub(super) write_waker: Option<Waker>,
    /// A user handle (stream, incoming, pending open) exists.
    pub(super) has_handle: bool,
}

impl StreamState {
    pub(super) fn new(phase: Phase) -> Self {
        Self {
            phase,
            refused: None,
            open_waker: None,
            recv: RecvWindow::new(),
            queue: VecDeque::new(),
            recv_half: RecvHalf::Open,
            read_waker: None,
            credit: INITIAL_WINDOW,
            send_half: SendHalf::Open,
            write_waker: None,
            has_handle: true,
        }
    }

    /// Nothing more will go either way.
    pub(super) fn finished(&self) -> bool {
        match (&self.send_half, &self.recv_half) {
            (SendHalf::Reset(_), _) | (_, RecvHalf::Reset { .. }) => true,
            (SendHalf::Fin, RecvHalf::Fin) => true,
            (SendHalf::Open, _) | (_, RecvHalf::Open) => false,
        }
    }

    /// We reset the stream.
    pub(super) fn reset_here(&self) -> bool {
        matches!(self.send_half, SendHalf::Reset(_))
    }

    /// The peer reset the stream (before we did).
    pub(super) fn reset_by_peer(&self) -> bool {
        matches!(self.recv_half, RecvHalf::Reset { .. })
    }

    /// What a write gets once the stream was reset: ours, if we reset it
    /// too, since the handle asked for it.
    pub(super) fn reset_error(&self) -> Option<StreamError> {
        match (&self.send_half, &self.recv_half) {
            (SendHalf::Reset(reason), _) => Some(StreamError::ResetLocally(reason.clone())),
            (_, RecvHalf::Reset { reason, .. }) => Some(StreamError::ResetByPeer(reason.clone())),
            (SendHalf::Open | SendHalf::Fin, RecvHalf::Open | RecvHalf::Fin) => None,
        }
    }

    pub(super) fn wake_all(&mut self) {
        wakers::wake(&mut self.open_waker);
        wakers::wake(&mut self.read_waker);
        wakers::wake(&mut self.write_waker);
    }
}
