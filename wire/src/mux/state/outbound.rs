//! Frames waiting for the transport, in two queues: `urgent` (`PING`,
//! `PONG`, `CREDIT`) goes first, so that credit and liveness never wait
//! behind bulk data; `bulk` keeps the order of everything else (`OPEN`,
//! `DATA`, `FIN`, `RST`, `GOAWAY`, control messages). The writer takes
//! batches with [`Inner::poll_outbound`]; writers of data and control
//! messages wait while the queued bytes are over the send queue's limit.
//!
//! Apart from the rest so that the one order frames leave in, and the
//! accounting of the queued bytes, sit together.

use std::task::{Context, Poll};

use bytes::Bytes;

use super::super::error::SessionError;
use super::super::wakers;
use super::{Inner, ended};
use crate::frame::{Frame, clip_reason};

/// What the writer should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outbound {
    /// Frames were put in the batch.
    Send,
    /// Everything is sent and the session is closing: close the transport.
    Close,
}

impl Inner {
    pub(super) fn push_urgent(&mut self, frame: Frame) {
        self.queued += frame.encoded_len();
        self.urgent.push_back(frame);
        wakers::wake(&mut self.writer);
    }

    pub(super) fn push_bulk(&mut self, frame: Frame) {
        self.queued += frame.encoded_len();
        self.bulk.push_back(frame);
        wakers::wake(&mut self.writer);
    }

    pub(super) fn send_goaway(&mut self, reason: &str) {
        if !self.goaway_sent && self.end.is_none() {
            self.goaway_sent = true;
            self.push_bulk(Frame::GoAway {
                reason: clip_reason(reason),
            });
            self.accept_wakers.wake_all();
        }
        self.check_drained();
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
}
