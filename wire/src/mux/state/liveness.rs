//! The session's liveness: a `PING` every `ping_interval`, answered by a
//! `PONG` (one queued at a time), the round trip measured from the ping
//! still outstanding, and the session ended when nothing at all came from
//! the peer for `liveness_timeout`.
//!
//! Apart from the frame handling so that the clock's rules read in one
//! place; the driver calls [`Inner::liveness`] when its timer fires.

use tokio::time::Instant;

use super::super::error::SessionError;
use super::Inner;
use crate::frame::Frame;

impl Inner {
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

    /// Answers a `PING`, unless a `PONG` is still queued.
    pub(super) fn on_ping(&mut self, opaque: u64) {
        if !self.pong_queued {
            self.pong_queued = true;
            self.push_urgent(Frame::Pong { opaque });
        }
    }

    /// Measures the round trip when the `PONG` answers the ping outstanding.
    pub(super) fn on_pong(&mut self, opaque: u64, now: Instant) {
        if let Some((seq, sent)) = self.ping_outstanding
            && seq == opaque
        {
            self.rtt = Some(now.saturating_duration_since(sent));
            self.ping_outstanding = None;
        }
    }
}
