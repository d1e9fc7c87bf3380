//! `signal`: signals a background command's whole process group.

use super::common::{Boxd, answer_with};
use psbx_wire::boxd::{Done, Signal};
use psbx_wire::mux::Incoming;

pub async fn serve(incoming: Incoming, state: &Boxd) {
    answer_with(
        incoming,
        |req: Signal| match nix::sys::signal::Signal::try_from(req.signal) {
            Ok(sig) if state.processes.signal(req.pid, sig) => Done::ok(),
            Ok(_) => Done::failed(format!("no running background process {}", req.pid)),
            Err(_) => Done::failed(format!("{} is not a signal", req.signal)),
        },
    )
    .await;
}
