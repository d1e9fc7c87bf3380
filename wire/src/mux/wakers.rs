//! A small set of wakers for places where several tasks may wait at once
//! (accepting, reading control messages, waiting for queue room).

use std::task::Waker;

#[derive(Debug, Default)]
pub(crate) struct Wakers(Vec<Waker>);

impl Wakers {
    /// Adds `waker` unless an equivalent one is already waiting.
    pub(crate) fn register(&mut self, waker: &Waker) {
        if !self.0.iter().any(|w| w.will_wake(waker)) {
            self.0.push(waker.clone());
        }
    }

    pub(crate) fn wake_all(&mut self) {
        for waker in self.0.drain(..) {
            waker.wake();
        }
    }
}

/// Stores `waker` in a one-task slot.
pub(crate) fn set(slot: &mut Option<Waker>, waker: &Waker) {
    match slot {
        Some(old) if old.will_wake(waker) => {}
        _ => *slot = Some(waker.clone()),
    }
}

/// Wakes the task in a one-task slot, if any.
pub(crate) fn wake(slot: &mut Option<Waker>) {
    if let Some(waker) = slot.take() {
        waker.wake();
    }
}
