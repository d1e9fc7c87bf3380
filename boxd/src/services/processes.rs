//! `processes`: the background commands, running or ended.

use super::common::{Boxd, answer};
use psbx_wire::boxd::ProcessesRequest;
use psbx_wire::mux::Incoming;

pub async fn serve(incoming: Incoming, state: &Boxd) {
    answer::<ProcessesRequest>(incoming.accept(), &state.processes.list()).await;
}
