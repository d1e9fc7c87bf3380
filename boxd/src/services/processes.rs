//! `processes`: the background commands, running or ended.

use super::{Boxd, answer_json};
use psbx_wire::mux::Incoming;

pub async fn serve(incoming: Incoming, state: &Boxd) {
    answer_json(incoming.accept(), &state.processes.list()).await;
}
