//! Credit flow control of one stream's receiving side, after yamux: the
//! window starts at [`INITIAL_WINDOW`]; as the reader consumes bytes they are
//! credited back once they reach half the window; while the reader keeps up
//! (little is left buffered when credit is due) the window doubles, up to the
//! configured maximum and within what the session budget has left.
//!
//! Invariant: `available + buffered + unacked == window`, so a stream never
//! holds more than its window, and a peer sending beyond `available` is
//! breaking the protocol.

use super::config::INITIAL_WINDOW;

/// The receive window of one stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecvWindow {
    /// The current window size.
    window: u32,
    /// Bytes the peer may still send.
    available: u32,
    /// Bytes received and not yet read.
    buffered: u32,
    /// Bytes read and not yet credited back.
    unacked: u32,
}

/// A `CREDIT` to send: `bytes` in all, of which `growth` enlarges the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    pub bytes: u32,
    pub growth: u32,
}

impl RecvWindow {
    pub(crate) fn new() -> Self {
        Self {
            window: INITIAL_WINDOW,
            available: INITIAL_WINDOW,
            buffered: 0,
            unacked: 0,
        }
    }

    pub(crate) fn window(&self) -> u32 {
        self.window
    }

    pub(crate) fn buffered(&self) -> u32 {
        self.buffered
    }

    /// Takes `len` received bytes; `Err(available)` when they exceed the
    /// credit the peer had.
    pub(crate) fn receive(&mut self, len: u32) -> Result<(), u32> {
        if len > self.available {
            return Err(self.available);
        }
        self.available -= len;
        self.buffered += len;
        Ok(())
    }

    /// The reader consumed `len` buffered bytes.
    pub(crate) fn consume(&mut self, len: u32) {
        let len = len.min(self.buffered);
        self.buffered -= len;
        self.unacked += len;
    }

    /// Drops everything buffered (the stream was reset); returns how much.
    pub(crate) fn discard(&mut self) -> u32 {
        let dropped = self.buffered;
        self.consume(dropped);
        dropped
    }

    /// The credit to send now, if any: when half the window is consumed.
    /// `headroom` is what the session budget can still commit to growth.
    pub(crate) fn grant(&mut self, max_window: u32, headroom: usize) -> Option<Grant> {
        if self.unacked == 0 || self.unacked < self.window / 2 {
            return None;
        }
        let mut growth = 0;
        if self.buffered <= self.window / 4 && self.window < max_window {
            let target = self.window.saturating_mul(2).min(max_window);
            growth = (target - self.window).min(u32::try_from(headroom).unwrap_or(u32::MAX));
        }
        let bytes = self.unacked + growth;
        self.window += growth;
        self.available += bytes;
        self.unacked = 0;
        Some(Grant { bytes, growth })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u32 = 1024 * 1024;

    fn holds(w: &RecvWindow) {
        assert_eq!(w.available + w.buffered + w.unacked, w.window, "{w:?}");
    }

    #[test]
    fn credit_is_granted_at_half_the_window() {
        let mut w = RecvWindow::new();
        w.receive(INITIAL_WINDOW).unwrap();
        w.consume(INITIAL_WINDOW / 2 - 1);
        assert_eq!(w.grant(MAX, usize::MAX), None);
        w.consume(1);
        // Half is still buffered: the reader is slow, the window stays.
        assert_eq!(
            w.grant(MAX, usize::MAX),
            Some(Grant {
                bytes: INITIAL_WINDOW / 2,
                growth: 0
            })
        );
        holds(&w);
    }

    #[test]
    fn a_reader_that_keeps_up_grows_the_window_to_the_cap() {
        let mut w = RecvWindow::new();
        let mut grants = 0;
        while w.window() < MAX {
            let n = w.available;
            w.receive(n).unwrap();
            w.consume(n);
            let g = w.grant(MAX, usize::MAX).unwrap();
            assert!(g.growth > 0);
            holds(&w);
            grants += 1;
        }
        assert_eq!(w.window(), MAX);
        assert_eq!(grants, 2);
        w.receive(w.available).unwrap();
        w.consume(MAX);
        assert_eq!(w.grant(MAX, usize::MAX).unwrap().growth, 0);
        holds(&w);
    }

    #[test]
    fn growth_stays_within_the_budget_headroom() {
        let mut w = RecvWindow::new();
        w.receive(INITIAL_WINDOW).unwrap();
        w.consume(INITIAL_WINDOW);
        assert_eq!(
            w.grant(MAX, 1000),
            Some(Grant {
                bytes: INITIAL_WINDOW + 1000,
                growth: 1000
            })
        );
        holds(&w);
    }

    proptest::proptest! {
        /// A sender that spends exactly the credit it was granted is never
        /// refused, one that spends a byte more always is, and the window
        /// stays within its cap and the budget.
        #[test]
        fn credit_accounting_holds(steps in proptest::collection::vec((0u32..400_000, 0u32..400_000), 1..200), headroom in 0usize..4_000_000) {
            let mut w = RecvWindow::new();
            let mut sender_credit = INITIAL_WINDOW;
            let mut grown = 0usize;
            for (send, read) in steps {
                let send = send.min(sender_credit);
                w.receive(send).unwrap();
                sender_credit -= send;
                assert_eq!(w.receive(sender_credit + 1), Err(sender_credit));
                w.consume(read);
                if let Some(g) = w.grant(MAX, headroom - grown) {
                    sender_credit += g.bytes;
                    grown += g.growth as usize;
                }
                holds(&w);
                assert_eq!(sender_credit, w.available);
                assert!(w.window() <= MAX && grown <= headroom);
            }
        }
    }

    #[test]
    fn sending_beyond_the_credit_is_refused() {
        let mut w = RecvWindow::new();
        w.receive(INITIAL_WINDOW - 10).unwrap();
        assert_eq!(w.receive(11), Err(10));
        holds(&w);
        assert_eq!(w.discard(), INITIAL_WINDOW - 10);
        assert_eq!(w.buffered(), 0);
        holds(&w);
    }
}
