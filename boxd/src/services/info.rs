//! `info`: boxd's introduction ([`psbx_wire::boxd::BoxInfo`]), asked for
//! after every (re)connection.

use super::{Boxd, answer_json};
use psbx_wire::mux::Incoming;

pub async fn serve(incoming: Incoming, state: &Boxd) {
    answer_json(incoming.accept(), &state.info).await;
}
