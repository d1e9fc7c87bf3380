//! The handles' side of a stream: opening one and waiting for the answer,
//! accepting or refusing one the peer opened, reading (credit granted back
//! as the reader consumes, the window growing within the session's memory
//! budget), writing within the credit and the send queue, `FIN`, `RST`, and
//! what dropping the last handle does.
//!
//! Apart from the received frames' side so that what a `Stream` handle
//! may do reads in one place; both work on the same `StreamState`.

use std::collections::VecDeque;
use std::io;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::ReadBuf;

use super::super::config::INITIAL_WINDOW;
use super::super::error::{OpenError, StreamError};
use super::super::wakers;
use super::stream_state::{Phase, RecvHalf, SendHalf, StreamState};
use super::{Inner, ended, gone};
use crate::frame::{Frame, check_target, clip_reason, code};

impl Inner {
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
            if live && !st.reset_by_peer() {
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
            if self.end.is_none() && !st.reset_by_peer() {
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
        if let SendHalf::Reset(reason) = &st.send_half {
            return Poll::Ready(Err(StreamError::ResetLocally(reason.clone()).into()));
        }
        if !st.queue.is_empty() {
            let (value, n) = take(&mut st.queue);
            st.recv.consume(u32::try_from(n).unwrap_or(u32::MAX));
            let grant = if st.recv_half == RecvHalf::Open && self.end.is_none() {
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
        match &st.recv_half {
            RecvHalf::Fin
            | RecvHalf::Reset {
                after_fin: true, ..
            } => Poll::Ready(Ok(None)),
            RecvHalf::Reset {
                reason,
                after_fin: false,
            } => Poll::Ready(Err(StreamError::ResetByPeer(reason.clone()).into())),
            RecvHalf::Open if self.end.is_some() => {
                Poll::Ready(Err(StreamError::SessionEnded(ended(&self.end)).into()))
            }
            RecvHalf::Open => {
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
        if let Some(e) = st.reset_error() {
            return Poll::Ready(Err(e.into()));
        }
        if self.end.is_some() || self.closing {
            return Poll::Ready(Err(StreamError::SessionEnded(ended(&self.end)).into()));
        }
        if st.send_half == SendHalf::Fin {
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
        // A second shutdown is fine even after the peer's reset: our `FIN`
        // went first.
        if st.send_half == SendHalf::Fin {
            return Ok(());
        }
        if let Some(e) = st.reset_error() {
            return Err(e.into());
        }
        if self.end.is_some() {
            return Err(StreamError::SessionEnded(ended(&self.end)).into());
        }
        st.send_half = SendHalf::Fin;
        self.push_bulk(Frame::Fin { stream: id });
        Ok(())
    }

    pub(crate) fn reset(&mut self, id: u32, reason: &str) {
        let live = self.end.is_none();
        let Some(st) = self.streams.get_mut(&id) else {
            return;
        };
        if st.reset_here() || st.phase != Phase::Open {
            return;
        }
        let send = live && !st.reset_by_peer();
        st.send_half = SendHalf::Reset(reason.to_owned());
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
                if live && !st.reset_by_peer() {
                    self.push_bulk(Frame::OpenErr {
                        stream: id,
                        code: code::UNAVAILABLE,
                        reason: "the stream was not accepted".to_owned(),
                    });
                }
            }
            Phase::Open => {
                if live && !st.finished() {
                    st.send_half = SendHalf::Reset("stream dropped".to_owned());
                    self.push_bulk(Frame::Rst {
                        stream: id,
                        reason: "stream dropped".to_owned(),
                    });
                }
            }
        }
        self.remove(id);
    }
}
