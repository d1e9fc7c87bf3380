//! The state a session's handles and its driver share: streams, queues of
//! frames to send, windows and budgets, liveness clock, how the session
//! ended. One mutex guards it; no lock is held across an await.
//!
//! The driver feeds received frames to [`Inner::on_frame`], which validates
//! them against the stream states (any violation ends the session) and never
//! waits: received bytes are bounded by the windows granted, so reading the
//! transport never has to stop for a slow reader. Frames to send wait in two
//! queues: `urgent` (`PING`, `PONG`, `CREDIT`) goes first, `bulk` keeps the
//! order of everything else.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::ReadBuf;
use tokio::time::Instant;

use super::config::{Config, INITIAL_WINDOW, Role};
use super::error::{OpenError, ProtocolError, SessionError, StreamError};
use super::flow::RecvWindow;
use super::session::Stats;
use super::wakers::{self, Wakers};
use crate::frame::{Frame, FrameType, check_target, clip_reason, code};
use crate::hello::Hello;

/// Received payloads shorter than this are copied out of the read buffer, so
/// that a small payload waiting to be read does not pin a large buffer.
pub(crate) const COPY_BELOW: usize = 4096;

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Opened here, waiting for `OPEN_OK` or `OPEN_ERR`.
    Opening,
    /// Opened by the peer, not yet accepted or refused.
    Incoming,
    Open,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum RecvEnd {
    Open,
    Fin,
    Reset(String),
}

struct StreamState {
    phase: Phase,
    refused: Option<(u16, String)>,
    open_waker: Option<Waker>,
    recv: RecvWindow,
    queue: VecDeque<Bytes>,
    recv_end: RecvEnd,
    read_waker: Option<Waker>,
    /// Bytes we may still send.
    credit: u32,
    sent_fin: bool,
    peer_reset: Option<String>,
    local_reset: Option<String>,
    write_waker: Option<Waker>,
    /// A user handle (stream, incoming, pending open) exists.
    has_handle: bool,
}

impl StreamState {
    fn new(phase: Phase) -> Self {
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
    fn finished(&self) -> bool {
        self.local_reset.is_some()
            || self.peer_reset.is_some()
            || (self.sent_fin && self.recv_end == RecvEnd::Fin)
    }

    fn wake_all(&mut self) {
        wakers::wake(&mut self.open_waker);
        wakers::wake(&mut self.read_waker);
        wakers::wake(&mut self.write_waker);
    }
}

/// What the writer should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outbound {
    /// Frames were put in the batch.
    Send,
    /// Everything is sent and the session is closing: close the transport.
    Close,
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

    fn push_urgent(&mut self, frame: Frame) {
        self.queued += frame.encoded_len();
        self.urgent.push_back(frame);
        wakers::wake(&mut self.writer);
    }

    fn push_bulk(&mut self, frame: Frame) {
        self.queued += frame.encoded_len();
        self.bulk.push_back(frame);
        wakers::wake(&mut self.writer);
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

    fn send_goaway(&mut self, reason: &str) {
        if !self.goaway_sent && self.end.is_none() {
            self.goaway_sent = true;
            self.push_bulk(Frame::GoAway {
                reason: clip_reason(reason),
            });
            self.accept_wakers.wake_all();
        }
        self.check_drained();
    }

    // ---- the driver's side ----

    /// Whether a frame names a stream that exists (`true`), one that existed
    /// (`false`: late frames are ignored), or one never opened (an error).
    fn known(&self, stream: u32, kind: FrameType) -> Result<bool, ProtocolError> {
        if self.streams.contains_key(&stream) {
            return Ok(true);
        }
        let opened = if self.is_local(stream) {
            u64::from(stream) < self.next_local
        } else {
            stream <= self.last_peer
        };
        if opened {
            Ok(false)
        } else {
            Err(ProtocolError::UnknownStream { stream, kind })
        }
    }

    /// Takes one received frame; an error ends the session.
    pub(crate) fn on_frame(&mut self, frame: Frame, now: Instant) -> Result<(), SessionError> {
        self.last_received = now;
        if self.end.is_some() {
            return Ok(());
        }
        match frame {
            Frame::Open { stream, target } => self.on_open(stream, target)?,
            Frame::OpenOk { stream } => self.on_open_answer(stream, FrameType::OpenOk, None)?,
            Frame::OpenErr {
                stream,
                code,
                reason,
            } => {
                self.on_open_answer(stream, FrameType::OpenErr, Some((code, reason)))?;
            }
            Frame::Data { stream, data } => self.on_data(stream, data)?,
            Frame::Credit { stream, bytes } => self.on_credit(stream, bytes)?,
            Frame::Fin { stream } => self.on_fin(stream)?,
            Frame::Rst { stream, reason } => self.on_rst(stream, reason)?,
            Frame::Ping { opaque } => {
                if !self.pong_queued {
                    self.pong_queued = true;
                    self.push_urgent(Frame::Pong { opaque });
                }
            }
            Frame::Pong { opaque } => {
                if let Some((seq, sent)) = self.ping_outstanding
                    && seq == opaque
                {
                    self.rtt = Some(now.saturating_duration_since(sent));
                    self.ping_outstanding = None;
                }
            }
            Frame::GoAway { reason } => {
                self.goaway_received = Some(reason);
                self.accept_wakers.wake_all();
                self.check_drained();
            }
            Frame::Control { payload } => {
                if !self.handles_gone {
                    if self.control.len() >= self.config.control_queue {
                        return Err(
                            ProtocolError::ControlOverflow(self.config.control_queue).into()
                        );
                    }
                    self.control.push_back(payload);
                    self.control_wakers.wake_all();
                }
            }
        }
        if self.queued > self.config.queue_hard_limit() {
            return Err(SessionError::Stalled(self.queued));
        }
        Ok(())
    }

    fn on_open(&mut self, stream: u32, target: String) -> Result<(), SessionError> {
        if self.is_local(stream) || stream <= self.last_peer {
            return Err(ProtocolError::BadStreamId { stream }.into());
        }
        self.last_peer = stream;
        let refusal = if !self.config.peer_may_open {
            Some((
                code::FORBIDDEN,
                "this end of the session does not accept streams".to_owned(),
            ))
        } else if self.handles_gone {
            Some((code::UNAVAILABLE, "the session is closing".to_owned()))
        } else if self.goaway_sent || self.goaway_received.is_some() {
            Some((
                code::UNAVAILABLE,
                "the session is draining (GOAWAY)".to_owned(),
            ))
        } else if self.streams.len() >= self.config.max_streams {
            Some((
                code::TOO_MANY_STREAMS,
                format!(
                    "{} streams are open, the most allowed",
                    self.config.max_streams
                ),
            ))
        } else {
            None
        };
        match refusal {
            Some((code, reason)) => self.push_bulk(Frame::OpenErr {
                stream,
                code,
                reason,
            }),
            None => {
                self.streams
                    .insert(stream, StreamState::new(Phase::Incoming));
                self.committed += INITIAL_WINDOW as usize;
                self.accept_queue.push_back((stream, target));
                self.accept_wakers.wake_all();
            }
        }
        Ok(())
    }

    fn on_open_answer(
        &mut self,
        stream: u32,
        kind: FrameType,
        refused: Option<(u16, String)>,
    ) -> Result<(), SessionError> {
        if !self.is_local(stream) {
            return Err(ProtocolError::Unexpected { stream, kind }.into());
        }
        if !self.known(stream, kind)? {
            return Ok(());
        }
        let Some(st) = self.streams.get_mut(&stream) else {
            return Ok(());
        };
        if st.phase != Phase::Opening {
            return Err(ProtocolError::Unexpected { stream, kind }.into());
        }
        if st.has_handle {
            match refused {
                Some(refusal) => st.refused = Some(refusal),
                None => st.phase = Phase::Open,
            }
            wakers::wake(&mut st.open_waker);
        } else {
            // The opener gave up waiting.
            if refused.is_none() {
                st.local_reset = Some("open abandoned".to_owned());
                self.push_bulk(Frame::Rst {
                    stream,
                    reason: "open abandoned".to_owned(),
                });
            }
            self.remove(stream);
        }
        Ok(())
    }

    fn on_data(&mut self, stream: u32, data: Bytes) -> Result<(), SessionError> {
        let kind = FrameType::Data;
        if !self.known(stream, kind)? {
            return Ok(());
        }
        let budget = self.config.memory_budget;
        let Some(st) = self.streams.get_mut(&stream) else {
            return Ok(());
        };
        if st.phase == Phase::Opening {
            return Err(ProtocolError::Unexpected { stream, kind }.into());
        }
        if st.local_reset.is_some() {
            return Ok(());
        }
        if st.recv_end != RecvEnd::Open {
            return Err(ProtocolError::AfterEnd { stream, kind }.into());
        }
        let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
        st.recv
            .receive(len)
            .map_err(|credit| ProtocolError::FlowControl {
                stream,
                len,
                credit,
            })?;
        if self.buffered + data.len() > budget {
            return Err(ProtocolError::MemoryBudget(budget).into());
        }
        self.buffered += data.len();
        let data = if data.len() < COPY_BELOW {
            Bytes::copy_from_slice(&data)
        } else {
            data
        };
        st.queue.push_back(data);
        wakers::wake(&mut st.read_waker);
        Ok(())
    }

    fn on_credit(&mut self, stream: u32, bytes: u32) -> Result<(), SessionError> {
        if !self.known(stream, FrameType::Credit)? {
            return Ok(());
        }
        let Some(st) = self.streams.get_mut(&stream) else {
            return Ok(());
        };
        if st.local_reset.is_some() || st.peer_reset.is_some() {
            return Ok(());
        }
        st.credit = st
            .credit
            .checked_add(bytes)
            .ok_or(ProtocolError::CreditOverflow { stream })?;
        wakers::wake(&mut st.write_waker);
        Ok(())
    }

    fn on_fin(&mut self, stream: u32) -> Result<(), SessionError> {
        let kind = FrameType::Fin;
        if !self.known(stream, kind)? {
            return Ok(());
        }
        let Some(st) = self.streams.get_mut(&stream) else {
            return Ok(());
        };
        if st.phase == Phase::Opening {
            return Err(ProtocolError::Unexpected { stream, kind }.into());
        }
        if st.local_reset.is_some() {
            return Ok(());
        }
        if st.recv_end != RecvEnd::Open {
            return Err(ProtocolError::AfterEnd { stream, kind }.into());
        }
        st.recv_end = RecvEnd::Fin;
        wakers::wake(&mut st.read_waker);
        Ok(())
    }

    fn on_rst(&mut self, stream: u32, reason: String) -> Result<(), SessionError> {
        let kind = FrameType::Rst;
        if !self.known(stream, kind)? {
            return Ok(());
        }
        let Some(st) = self.streams.get_mut(&stream) else {
            return Ok(());
        };
        if st.phase == Phase::Opening {
            return Err(ProtocolError::Unexpected { stream, kind }.into());
        }
        if st.peer_reset.is_some() {
            return Err(ProtocolError::AfterEnd { stream, kind }.into());
        }
        if st.local_reset.is_some() {
            return Ok(());
        }
        if st.recv_end == RecvEnd::Open {
            st.recv_end = RecvEnd::Reset(reason.clone());
        }
        st.peer_reset = Some(reason);
        st.wake_all();
        if st.phase == Phase::Incoming {
            let before = self.accept_queue.len();
            self.accept_queue.retain(|(id, _)| *id != stream);
            if self.accept_queue.len() < before {
                // Reset before anyone saw it.
                self.remove(stream);
            }
        }
        Ok(())
    }

    /// The transport ended. Clean when the session was draining or closing
    /// and nothing was left half done.
    pub(crate) fn on_eof(&self) -> Result<(), SessionError> {
        let draining = self.goaway_sent || self.goaway_received.is_some();
        if self.closing || (draining && self.streams.values().all(StreamState::finished)) {
            Ok(())
        } else {
            Err(SessionError::PeerClosed {
                goaway: self.goaway_received.clone(),
            })
        }
    }

    /// Moves up to `max` frames into `batch` for the writer.
    pub(crate) fn poll_outbound(
        &mut self,
        cx: &mut Context<'_>,
        batch: &mut Vec<Frame>,
        max: usize,
    ) -> Poll<Outbound> {
        if self.end.is_some() {
            return Poll::Ready(Outbound::Close);
        }
        while batch.len() < max {
            let Some(frame) = self.urgent.pop_front().or_else(|| self.bulk.pop_front()) else {
                break;
            };
            if matches!(frame, Frame::Pong { .. }) {
                self.pong_queued = false;
            }
            self.queued -= frame.encoded_len();
            batch.push(frame);
        }
        if !batch.is_empty() {
            if self.queued < self.config.send_queue {
                self.queue_wakers.wake_all();
            }
            return Poll::Ready(Outbound::Send);
        }
        if self.closing {
            return Poll::Ready(Outbound::Close);
        }
        wakers::set(&mut self.writer, cx.waker());
        Poll::Pending
    }

    /// Sends a `PING` when one is due; fails when the peer has been silent
    /// for the liveness timeout. Returns when to look again.
    pub(crate) fn liveness(&mut self, now: Instant) -> Result<Instant, SessionError> {
        let timeout = self.config.liveness_timeout;
        let deadline = self.last_received + timeout;
        if now >= deadline {
            return Err(SessionError::Timeout(timeout));
        }
        if now >= self.ping_sent + self.config.ping_interval {
            self.ping_seq += 1;
            self.ping_sent = now;
            self.ping_outstanding = Some((self.ping_seq, now));
            self.push_urgent(Frame::Ping {
                opaque: self.ping_seq,
            });
        }
        Ok(deadline.min(self.ping_sent + self.config.ping_interval))
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

    // ---- the handles' side ----

    pub(crate) fn start_open(&mut self, target: &str) -> Result<u32, OpenError> {
        if self.end.is_some() || self.closing {
            return Err(OpenError::Session(ended(&self.end)));
        }
        if self.goaway_sent || self.goaway_received.is_some() {
            return Err(OpenError::GoingAway);
        }
        if self.streams.len() >= self.config.max_streams {
            return Err(OpenError::TooManyStreams(self.config.max_streams));
        }
        check_target(target).map_err(OpenError::InvalidTarget)?;
        let id = u32::try_from(self.next_local).map_err(|_| OpenError::IdsExhausted)?;
        self.next_local += 2;
        self.streams.insert(id, StreamState::new(Phase::Opening));
        self.committed += INITIAL_WINDOW as usize;
        self.push_bulk(Frame::Open {
            stream: id,
            target: target.to_owned(),
        });
        Ok(id)
    }

    pub(crate) fn poll_open(
        &mut self,
        id: u32,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), OpenError>> {
        let Some(st) = self.streams.get_mut(&id) else {
            return Poll::Ready(Err(OpenError::Session(ended(&self.end))));
        };
        if st.phase == Phase::Open {
            return Poll::Ready(Ok(()));
        }
        if let Some((code, reason)) = st.refused.take() {
            self.remove(id);
            return Poll::Ready(Err(OpenError::Refused { code, reason }));
        }
        if self.end.is_some() {
            return Poll::Ready(Err(OpenError::Session(ended(&self.end))));
        }
        wakers::set(&mut st.open_waker, cx.waker());
        Poll::Pending
    }

    pub(crate) fn poll_accept(&mut self, cx: &mut Context<'_>) -> Poll<Option<(u32, String)>> {
        if self.end.is_some() {
            return Poll::Ready(None);
        }
        if let Some(next) = self.accept_queue.pop_front() {
            return Poll::Ready(Some(next));
        }
        if self.goaway_sent || self.goaway_received.is_some() || self.closing {
            return Poll::Ready(None);
        }
        self.accept_wakers.register(cx.waker());
        Poll::Pending
    }

    pub(crate) fn accept_incoming(&mut self, id: u32) {
        let live = self.end.is_none();
        if let Some(st) = self.streams.get_mut(&id)
            && st.phase == Phase::Incoming
        {
            st.phase = Phase::Open;
            if live && st.peer_reset.is_none() {
                self.push_bulk(Frame::OpenOk { stream: id });
            }
        }
    }

    pub(crate) fn refuse_incoming(&mut self, id: u32, code: u16, reason: &str) {
        let code = if (400..=599).contains(&code) {
            code
        } else {
            code::UNAVAILABLE
        };
        if let Some(st) = self.streams.get(&id)
            && st.phase == Phase::Incoming
        {
            if self.end.is_none() && st.peer_reset.is_none() {
                self.push_bulk(Frame::OpenErr {
                    stream: id,
                    code,
                    reason: clip_reason(reason),
                });
            }
            self.remove(id);
        }
    }

    /// Hands the next received bytes of a stream to `take`, which gets a
    /// non-empty queue and says how many bytes it consumed. `Ok(None)` is
    /// the end of the stream.
    fn poll_recv<T>(
        &mut self,
        id: u32,
        cx: &mut Context<'_>,
        take: impl FnOnce(&mut VecDeque<Bytes>) -> (T, usize),
    ) -> Poll<io::Result<Option<T>>> {
        // Growth may use the budget that initial windows of streams still
        // to come do not need.
        let reserved =
            (self.config.max_streams.saturating_sub(self.streams.len())) * INITIAL_WINDOW as usize;
        let headroom = self
            .config
            .memory_budget
            .saturating_sub(self.committed + reserved);
        let max_window = self.config.max_window;
        let Some(st) = self.streams.get_mut(&id) else {
            return Poll::Ready(Err(gone()));
        };
        if let Some(reason) = &st.local_reset {
            return Poll::Ready(Err(StreamError::ResetLocally(reason.clone()).into()));
        }
        if !st.queue.is_empty() {
            let (value, n) = take(&mut st.queue);
            st.recv.consume(u32::try_from(n).unwrap_or(u32::MAX));
            let grant = if st.recv_end == RecvEnd::Open && self.end.is_none() {
                st.recv.grant(max_window, headroom)
            } else {
                None
            };
            self.buffered -= n;
            if let Some(grant) = grant {
                self.committed += grant.growth as usize;
                self.push_urgent(Frame::Credit {
                    stream: id,
                    bytes: grant.bytes,
                });
            }
            return Poll::Ready(Ok(Some(value)));
        }
        match &st.recv_end {
            RecvEnd::Fin => Poll::Ready(Ok(None)),
            RecvEnd::Reset(reason) => {
                Poll::Ready(Err(StreamError::ResetByPeer(reason.clone()).into()))
            }
            RecvEnd::Open if self.end.is_some() => {
                Poll::Ready(Err(StreamError::SessionEnded(ended(&self.end)).into()))
            }
            RecvEnd::Open => {
                wakers::set(&mut st.read_waker, cx.waker());
                Poll::Pending
            }
        }
    }

    pub(crate) fn poll_read(
        &mut self,
        id: u32,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        self.poll_recv(id, cx, |queue| {
            let mut n = 0;
            if let Some(front) = queue.front_mut() {
                n = front.len().min(buf.remaining());
                buf.put_slice(&front[..n]);
                front.advance(n);
                if front.is_empty() {
                    queue.pop_front();
                }
            }
            ((), n)
        })
        .map_ok(|_| ())
    }

    pub(crate) fn poll_read_chunk(
        &mut self,
        id: u32,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<Option<Bytes>>> {
        self.poll_recv(id, cx, |queue| {
            let chunk = queue.pop_front().unwrap_or_default();
            let n = chunk.len();
            (chunk, n)
        })
    }

    /// How many bytes a write may send now (at least 1 when `want` > 0).
    pub(crate) fn poll_send(
        &mut self,
        id: u32,
        cx: &mut Context<'_>,
        want: usize,
    ) -> Poll<io::Result<usize>> {
        let split = self.config.send_split;
        let send_queue = self.config.send_queue;
        let Some(st) = self.streams.get_mut(&id) else {
            return Poll::Ready(Err(gone()));
        };
        if let Some(reason) = &st.local_reset {
            return Poll::Ready(Err(StreamError::ResetLocally(reason.clone()).into()));
        }
        if let Some(reason) = &st.peer_reset {
            return Poll::Ready(Err(StreamError::ResetByPeer(reason.clone()).into()));
        }
        if self.end.is_some() || self.closing {
            return Poll::Ready(Err(StreamError::SessionEnded(ended(&self.end)).into()));
        }
        if st.sent_fin {
            return Poll::Ready(Err(StreamError::WriteAfterShutdown.into()));
        }
        if want == 0 {
            return Poll::Ready(Ok(0));
        }
        if st.credit == 0 {
            wakers::set(&mut st.write_waker, cx.waker());
            return Poll::Pending;
        }
        if self.queued >= send_queue {
            self.queue_wakers.register(cx.waker());
            return Poll::Pending;
        }
        Poll::Ready(Ok(want.min(st.credit as usize).min(split)))
    }

    /// Queues data that [`Inner::poll_send`] allowed.
    pub(crate) fn push_data(&mut self, id: u32, data: Bytes) {
        if let Some(st) = self.streams.get_mut(&id) {
            st.credit = st
                .credit
                .saturating_sub(u32::try_from(data.len()).unwrap_or(u32::MAX));
        }
        self.push_bulk(Frame::Data { stream: id, data });
    }

    pub(crate) fn shutdown(&mut self, id: u32) -> io::Result<()> {
        let Some(st) = self.streams.get_mut(&id) else {
            return Err(gone());
        };
        if let Some(reason) = &st.local_reset {
            return Err(StreamError::ResetLocally(reason.clone()).into());
        }
        if st.sent_fin {
            return Ok(());
        }
        if let Some(reason) = &st.peer_reset {
            return Err(StreamError::ResetByPeer(reason.clone()).into());
        }
        if self.end.is_some() {
            return Err(StreamError::SessionEnded(ended(&self.end)).into());
        }
        st.sent_fin = true;
        self.push_bulk(Frame::Fin { stream: id });
        Ok(())
    }

    pub(crate) fn reset(&mut self, id: u32, reason: &str) {
        let live = self.end.is_none();
        let Some(st) = self.streams.get_mut(&id) else {
            return;
        };
        if st.local_reset.is_some() || st.phase != Phase::Open {
            return;
        }
        let send = live && st.peer_reset.is_none();
        st.local_reset = Some(reason.to_owned());
        let dropped = st.recv.discard();
        st.queue.clear();
        st.wake_all();
        self.buffered -= dropped as usize;
        if send {
            self.push_bulk(Frame::Rst {
                stream: id,
                reason: clip_reason(reason),
            });
        }
    }

    /// The user's handle of a stream is gone: finish it or reset it.
    pub(crate) fn drop_handle(&mut self, id: u32) {
        let live = self.end.is_none();
        let Some(st) = self.streams.get_mut(&id) else {
            return;
        };
        st.has_handle = false;
        match st.phase {
            // Waits for the answer, then resets or forgets the stream.
            Phase::Opening if live => return,
            Phase::Opening => {}
            Phase::Incoming => {
                if live && st.peer_reset.is_none() {
                    self.push_bulk(Frame::OpenErr {
                        stream: id,
                        code: code::UNAVAILABLE,
                        reason: "the stream was not accepted".to_owned(),
                    });
                }
            }
            Phase::Open => {
                if live && !st.finished() {
                    st.local_reset = Some("stream dropped".to_owned());
                    self.push_bulk(Frame::Rst {
                        stream: id,
                        reason: "stream dropped".to_owned(),
                    });
                }
            }
        }
        self.remove(id);
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

    pub(crate) fn poll_send_control(
        &mut self,
        cx: &mut Context<'_>,
        payload: &mut Option<Bytes>,
    ) -> Poll<Result<(), SessionError>> {
        if self.end.is_some() || self.closing {
            return Poll::Ready(Err(ended(&self.end)));
        }
        if self.queued >= self.config.send_queue {
            self.queue_wakers.register(cx.waker());
            return Poll::Pending;
        }
        if let Some(payload) = payload.take() {
            self.push_bulk(Frame::Control { payload });
        }
        Poll::Ready(Ok(()))
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
