//! `clock`: sets the box's clock to the server's, sent on every new session.

use super::answer_with;
use psbx_wire::boxd::{Clock, Done};
use psbx_wire::mux::Incoming;

pub async fn serve(incoming: Incoming) {
    answer_with(incoming, set).await;
}

fn set(clock: Clock) -> Done {
    let nanos = i64::try_from(clock.unix_nanos).unwrap_or(i64::MAX);
    let time = nix::sys::time::TimeSpec::new(nanos / 1_000_000_000, nanos % 1_000_000_000);
    match nix::time::clock_settime(nix::time::ClockId::CLOCK_REALTIME, time) {
        Ok(()) => Done::ok(),
        Err(e) => Done::failed(format!("cannot set the clock: {e}")),
    }
}
