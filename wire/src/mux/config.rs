//! The limits and timers of a session, with the defaults both ends use.

use std::time::Duration;

use super::error::ConfigError;
use crate::frame::{HEADER_LEN, MAX_TARGET_LEN};

/// The credit each side has on a new stream, before any `CREDIT` (yamux's
/// 256 KiB). Part of the protocol, not of the configuration: both sides must
/// agree on it without asking.
pub const INITIAL_WINDOW: u32 = 256 * 1024;

/// Which end of the session this is. Clients open odd stream ids, servers
/// even ones, so that both can open streams at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

/// What the handshake does with frames that come before the peer's hello.
///
/// A session over a connection of its own (TCP, a WebSocket) refuses them:
/// a peer that sends anything first is broken. A box's virtio-serial port
/// is one byte pipe that outlives the host's connections to it: what boxd
/// wrote to the previous connection can still be in it when the server's
/// next session begins, and the server's end skips it. (boxd's end stays
/// strict on purpose: a server frame where its hello should be means the
/// server took an older hello of boxd's for this session's, and the failed
/// handshake makes boxd say hello again, which makes the server reconnect
/// at once; skipping it left both waiting for the server's 3 s timeout.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeforeHello {
    /// The first frame must be the hello (`ProtocolError::NoHello`).
    Refuse,
    /// Frames before the hello are skipped.
    Skip,
}

/// A session's limits and timers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The largest payload of one frame, both ways (a control message must
    /// fit in one). Both ends should use the same value.
    pub max_frame_size: usize,
    /// The most streams open at once, in both directions together.
    pub max_streams: usize,
    /// The largest receive window a stream grows to.
    pub max_window: u32,
    /// Writes are sent in `DATA` frames of at most this many bytes.
    pub send_split: usize,
    /// The most received bytes buffered for all streams together. Must cover
    /// `max_streams` initial windows; windows grow within the rest.
    pub memory_budget: usize,
    /// Writers wait while this many bytes are queued for the transport.
    pub send_queue: usize,
    /// A `PING` goes out this often.
    pub ping_interval: Duration,
    /// The session ends when nothing arrives from the peer for this long.
    pub liveness_timeout: Duration,
    /// The most received control messages waiting to be read; one more ends
    /// the session.
    pub control_queue: usize,
    /// Whether the peer may open streams. When false, every `OPEN` is
    /// answered `OPEN_ERR` 403 at once: nothing is queued or buffered for it,
    /// and `DATA` for it is dropped (a connector session, where only the
    /// server opens streams).
    pub peer_may_open: bool,
    /// What the handshake does with frames before the peer's hello.
    pub before_hello: BeforeHello,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            max_frame_size: 64 * 1024,
            max_streams: 256,
            max_window: 16 * 1024 * 1024,
            send_split: 16 * 1024,
            memory_budget: 128 * 1024 * 1024,
            send_queue: 256 * 1024,
            ping_interval: Duration::from_secs(5),
            liveness_timeout: Duration::from_secs(15),
            control_queue: 64,
            peer_may_open: true,
            before_hello: BeforeHello::Refuse,
        }
    }
}

/// Streams one connector session carries in [`Config::tunnel`].
pub const TUNNEL_STREAMS: usize = 1024;

impl Config {
    /// A connector session (psbx-connector ↔ server), the same on both ends:
    /// one session carries the connections of every box of an account to a
    /// network, so it takes 1,024 streams instead of the default 256, and the
    /// budget covers their initial windows plus the default's 64 MiB for
    /// windows to grow. The budget caps what may be buffered; nothing of it
    /// is allocated up front.
    pub fn tunnel() -> Self {
        let defaults = Self::default();
        let growth = defaults.memory_budget - defaults.max_streams * INITIAL_WINDOW as usize;
        Self {
            max_streams: TUNNEL_STREAMS,
            memory_budget: TUNNEL_STREAMS * INITIAL_WINDOW as usize + growth,
            ..defaults
        }
    }

    /// The server's end of a connector session: [`Config::tunnel`], and the
    /// connector may not open streams (only the server opens them, one per
    /// box connection), so a connector cannot make the server keep anything
    /// for streams it opens.
    pub fn tunnel_server() -> Self {
        Self {
            peer_may_open: false,
            ..Self::tunnel()
        }
    }

    /// Refuses a configuration whose limits contradict each other.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |why: &'static str| Err(ConfigError(why));
        if self.max_frame_size < MAX_TARGET_LEN + HEADER_LEN
            || self.max_frame_size > 16 * 1024 * 1024
        {
            return fail("max_frame_size must be between 1029 bytes and 16 MiB");
        }
        if self.send_split == 0 || self.send_split > self.max_frame_size {
            return fail("send_split must be between 1 and max_frame_size");
        }
        if self.max_streams == 0 {
            return fail("max_streams must be at least 1");
        }
        if self.max_window < INITIAL_WINDOW {
            return fail("max_window must be at least the initial window (256 KiB)");
        }
        if self.max_streams.saturating_mul(INITIAL_WINDOW as usize) > self.memory_budget {
            return fail("memory_budget must cover max_streams initial windows of 256 KiB");
        }
        if self.send_queue < self.send_split {
            return fail("send_queue must be at least send_split");
        }
        if self.ping_interval.is_zero() || self.liveness_timeout <= self.ping_interval {
            return fail("liveness_timeout must be longer than a non-zero ping_interval");
        }
        if self.control_queue == 0 {
            return fail("control_queue must be at least 1");
        }
        Ok(())
    }

    /// The bytes queued for the transport beyond which the peer is taken
    /// for one that stopped reading and the session ends.
    pub(crate) fn queue_hard_limit(&self) -> usize {
        self.send_queue
            .saturating_mul(4)
            .saturating_add(self.max_frame_size)
            .saturating_add(self.max_streams.saturating_mul(MAX_TARGET_LEN + 64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid() {
        Config::default().validate().unwrap();
        Config::tunnel().validate().unwrap();
        Config::tunnel_server().validate().unwrap();
    }

    #[test]
    fn contradictions_are_refused() {
        let base = Config::default();
        let bad = [
            Config {
                memory_budget: 1024,
                ..base.clone()
            },
            Config {
                max_window: 1024,
                ..base.clone()
            },
            Config {
                send_split: 0,
                ..base.clone()
            },
            Config {
                send_split: base.max_frame_size + 1,
                ..base.clone()
            },
            Config {
                max_frame_size: 100,
                ..base.clone()
            },
            Config {
                max_streams: 0,
                ..base.clone()
            },
            Config {
                liveness_timeout: base.ping_interval,
                ..base.clone()
            },
            Config {
                ping_interval: Duration::ZERO,
                ..base.clone()
            },
            Config {
                control_queue: 0,
                ..base.clone()
            },
            Config {
                send_queue: 1,
                ..base.clone()
            },
        ];
        for config in bad {
            assert!(config.validate().is_err(), "{config:?}");
        }
    }
}
