//! `clock`: sets the box's clock to the server's, sent on every new session
//! (refused by a boxd that does not own its machine: `crate::settings`).

use super::common::{Boxd, answer_with};
use psbx_wire::boxd::{Clock, Done};
use psbx_wire::mux::Incoming;

pub async fn serve(incoming: Incoming, state: &Boxd) {
    let refused = state.not_its_machine("clock");
    answer_with(incoming, |clock| match refused {
        Some(why) => Done::failed(why),
        None => set(clock),
    })
    .await;
}

fn set(clock: Clock) -> Done {
    let nanos = i64::try_from(clock.unix_nanos).unwrap_or(i64::MAX);
    let time = nix::sys::time::TimeSpec::new(nanos / 1_000_000_000, nanos % 1_000_000_000);
    match nix::time::clock_settime(nix::time::ClockId::CLOCK_REALTIME, time) {
        Ok(()) => Done::ok(),
        Err(e) => Done::failed(format!("cannot set the clock: {e}")),
    }
}
