//! The driver's side of the state: each received frame checked against
//! the stream it names and applied. A frame no stream state allows (data
//! beyond the credit granted, a frame after the end, a stream id never
//! opened) is a protocol error, which ends the session; late frames for a
//! stream that is gone are ignored. Nothing here waits: received bytes are
//! bounded by the windows granted, so reading the transport never has to
//! stop for a slow reader.
//!
//! Apart from the handles' side so that frame validation, the part the
//! fuzzers and the proptests drive hardest, reads in one place.

use bytes::Bytes;
use tokio::time::Instant;

use super::super::config::INITIAL_WINDOW;
use super::super::error::{ProtocolError, SessionError};
use super::super::wakers;
use super::Inner;
use super::stream_state::{Phase, RecvHalf, SendHalf, StreamState};
use crate::frame::{Frame, FrameType, code};

/// Received payloads shorter than this are copied out of the read buffer, so
/// that a small payload waiting to be read does not pin a large buffer.
const COPY_BELOW: usize = 4096;

impl Inner {
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
            Frame::Ping { opaque } => self.on_ping(opaque),
            Frame::Pong { opaque } => self.on_pong(opaque, now),
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
                st.send_half = SendHalf::Reset("open abandoned".to_owned());
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
        if st.reset_here() {
            return Ok(());
        }
        if st.recv_half != RecvHalf::Open {
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
        if st.reset_here() || st.reset_by_peer() {
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
        if st.reset_here() {
            return Ok(());
        }
        if st.recv_half != RecvHalf::Open {
            return Err(ProtocolError::AfterEnd { stream, kind }.into());
        }
        st.recv_half = RecvHalf::Fin;
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
        let after_fin = match st.recv_half {
            RecvHalf::Open => false,
            RecvHalf::Fin => true,
            RecvHalf::Reset { .. } => {
                return Err(ProtocolError::AfterEnd { stream, kind }.into());
            }
        };
        if st.reset_here() {
            return Ok(());
        }
        st.recv_half = RecvHalf::Reset { reason, after_fin };
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
}
