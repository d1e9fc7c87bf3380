//! The state a session's handles and its driver share: streams, queues of
//! frames to send, windows and budgets, liveness clock, how the session
//! ended. One mutex guards it; no lock is held across an await.
//!
//! [`Inner`] is one struct, its methods in a file per side:
//! * `inbound.rs`: the driver feeds received frames to `Inner::on_frame`,
//!   which validates them against the stream states (any violation ends
//!   the session) and never waits;
//! * `outbound.rs`: the frames to send, in two queues (`urgent` first);
//! * `liveness.rs`: pings, pongs, the round trip and the liveness timeout;
//! * `streams.rs`: what the handles of a stream do (open, accept, read,
//!   write, shut down, reset, drop);
//! * `stream_state.rs`: one stream's state, which all of them read.
//!
//! Here: the session-wide part, how it ends, and its counters ([`Stats`]).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::config::{Config, Role};
use super::error::{SessionError, StreamError};
use super::wakers::{self, Wakers};
use crate::frame::{Frame, code};
use crate::hello::Hello;
use stream_state::StreamState;

mod inbound;
mod liveness;
mod outbound;
mod stream_state;
mod streams;

pub(crate) use outbound::Outbound;

/// The session-wide part: what the handshake settled, and the shared state.
pub(crate) struct Shared {
    inner: Mutex<Inner>,
    pub(crate) config: Config,
    pub(crate) role: Role,
    pub(crate) peer: Hello,
    pub(crate) version: u32,
}

impl Shared {
    pub(crate) fn new(config: Config, role: Role, peer: Hello, version: u32) -> Self {
        let inner = Mutex::new(Inner::new(config.clone(), role, Instant::now()));
        Self {
            inner,
            config,
            role,
            peer,
            version,
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing panics while holding the lock; if something did, the state
        // is still the best there is.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A snapshot of a session's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Streams open (or being opened or accepted).
    pub streams: usize,
    /// Received bytes waiting to be read, all streams.
    pub buffered: usize,
    /// The sum of the streams' receive windows (at most the memory budget).
    pub committed: usize,
    /// Bytes of frames waiting for the transport.
    pub queued: usize,
    /// The last measured round trip (`PING` to `PONG`).
    pub rtt: Option<Duration>,
}

pub(crate) struct Inner {
    config: Config,
    role: Role,
    streams: HashMap<u32, StreamState>,
    next_local: u64,
    last_peer: u32,
    accept_queue: VecDeque<(u32, String)>,
    accept_wakers: Wakers,
    control: VecDeque<Bytes>,
    control_wakers: Wakers,
    urgent: VecDeque<Frame>,
    bulk: VecDeque<Frame>,
    /// Encoded bytes of the frames in `urgent` and `bulk`.
    queued: usize,
    writer: Option<Waker>,
    queue_wakers: Wakers,
    /// Sum of the streams' receive windows.
    committed: usize,
    /// Received bytes not yet read, all streams.
    buffered: usize,
    goaway_sent: bool,
    goaway_received: Option<String>,
    handles_gone: bool,
    pong_queued: bool,
    ping_seq: u64,
    ping_sent: Instant,
    ping_outstanding: Option<(u64, Instant)>,
    rtt: Option<Duration>,
    last_received: Instant,
    closing: bool,
    end: Option<Result<(), SessionError>>,
    end_wakers: Wakers,
}

fn ended(end: &Option<Result<(), SessionError>>) -> SessionError {
    match end {
        Some(Err(e)) => e.clone(),
        _ => SessionError::Closed,
    }
}

fn gone() -> io::Error {
    StreamError::SessionEnded(SessionError::Closed).into()
}

impl Inner {
    fn new(config: Config, role: Role, now: Instant) -> Self {
        Self {
            config,
            role,
            streams: HashMap::new(),
            next_local: if role == Role::Client { 1 } else { 2 },
            last_peer: 0,
            accept_queue: VecDeque::new(),
            accept_wakers: Wakers::default(),
            control: VecDeque::new(),
            control_wakers: Wakers::default(),
            urgent: VecDeque::new(),
            bulk: VecDeque::new(),
            queued: 0,
            writer: None,
            queue_wakers: Wakers::default(),
            committed: 0,
            buffered: 0,
            goaway_sent: false,
            goaway_received: None,
            handles_gone: false,
            pong_queued: false,
            ping_seq: 0,
            ping_sent: now,
            ping_outstanding: None,
            rtt: None,
            last_received: now,
            closing: false,
            end: None,
            end_wakers: Wakers::default(),
        }
    }

    fn is_local(&self, id: u32) -> bool {
        (id % 2 == 1) == (self.role == Role::Client)
    }

    fn remove(&mut self, id: u32) {
        if let Some(st) = self.streams.remove(&id) {
            self.committed -= st.recv.window() as usize;
            self.buffered -= st.recv.buffered() as usize;
        }
        self.check_drained();
    }

    /// After `GOAWAY` either way, the session closes once no stream is left.
    fn check_drained(&mut self) {
        if (self.goaway_sent || self.goaway_received.is_some())
            && self.streams.is_empty()
            && !self.closing
        {
            self.closing = true;
            wakers::wake(&mut self.writer);
        }
    }

    /// Records how the session ended and wakes everyone waiting on it.
    pub(crate) fn finish(&mut self, result: Result<(), SessionError>) {
        if self.end.is_some() {
            return;
        }
        self.end = Some(result);
        self.urgent.clear();
        self.bulk.clear();
        self.queued = 0;
        for st in self.streams.values_mut() {
            st.wake_all();
        }
        self.accept_wakers.wake_all();
        self.control_wakers.wake_all();
        self.queue_wakers.wake_all();
        self.end_wakers.wake_all();
        wakers::wake(&mut self.writer);
    }

    /// No `Session` handle is left: refuse what waits to be accepted, say
    /// goodbye, and close once the remaining streams are done.
    pub(crate) fn handles_gone(&mut self) {
        self.handles_gone = true;
        self.control.clear();
        while let Some((id, _)) = self.accept_queue.pop_front() {
            self.refuse_incoming(id, code::UNAVAILABLE, "the session is closing");
        }
        self.send_goaway("the session was dropped");
    }

    pub(crate) fn goaway(&mut self, reason: &str) {
        self.send_goaway(reason);
    }

    pub(crate) fn close(&mut self) {
        self.send_goaway("the session was closed");
        if !self.closing {
            self.closing = true;
            wakers::wake(&mut self.writer);
        }
        self.accept_wakers.wake_all();
    }

    pub(crate) fn poll_recv_control(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if let Some(payload) = self.control.pop_front() {
            return Poll::Ready(Some(payload));
        }
        if self.end.is_some() {
            return Poll::Ready(None);
        }
        self.control_wakers.register(cx.waker());
        Poll::Pending
    }

    pub(crate) fn poll_end(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), SessionError>> {
        match &self.end {
            Some(result) => Poll::Ready(result.clone()),
            None => {
                self.end_wakers.register(cx.waker());
                Poll::Pending
            }
        }
    }

    pub(crate) fn is_ended(&self) -> bool {
        self.end.is_some()
    }

    pub(crate) fn peer_goaway(&self) -> Option<String> {
        self.goaway_received.clone()
    }

    pub(crate) fn stats(&self) -> Stats {
        Stats {
            streams: self.streams.len(),
            buffered: self.buffered,
            committed: self.committed,
            queued: self.queued,
            rtt: self.rtt,
        }
    }
}
