//! One stream's state: its phase (opening, waiting to be accepted, open),
//! its receive window and queue of received chunks, how each direction
//! ended (`FIN`, a reset from either side), its send credit and the wakers
//! of the handles waiting on it.
//!
//! Apart from the session's state because every side of it (received
//! frames, the handles' reads and writes, dropping a handle) asks the same
//! questions of a stream: has it finished, what wakes it.

use std::collections::VecDeque;
use std::task::Waker;

use bytes::Bytes;

use super::super::config::INITIAL_WINDOW;
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum RecvEnd {
    Open,
    Fin,
    Reset(String),
}

pub(super) struct StreamState {
    pub(super) phase: Phase,
    pub(super) refused: Option<(u16, String)>,
    pub(super) open_waker: Option<Waker>,
    pub(super) recv: RecvWindow,
    pub(super) queue: VecDeque<Bytes>,
    pub(super) recv_end: RecvEnd,
    pub(super) read_waker: Option<Waker>,
    /// Bytes we may still send.
    pub(super) credit: u32,
    pub(super) sent_fin: bool,
    pub(super) peer_reset: Option<String>,
    pub(super) local_reset: Option<String>,
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
            recv_end: RecvEnd::Open,
            read_waker: None,
            credit: INITIAL_WINDOW,
            sent_fin: false,
            peer_reset: None,
            local_reset: None,
            write_waker: None,
            has_handle: true,
        }
    }

    /// Nothing more will go either way.
    pub(super) fn finished(&self) -> bool {
        self.local_reset.is_some()
            || self.peer_reset.is_some()
            || (self.sent_fin && self.recv_end == RecvEnd::Fin)
    }

    pub(super) fn wake_all(&mut self) {
        wakers::wake(&mut self.open_waker);
        wakers::wake(&mut self.read_waker);
        wakers::wake(&mut self.write_waker);
    }
}
