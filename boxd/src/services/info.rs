//! `info`: boxd's introduction ([`psbx_wire::boxd::BoxInfo`]), asked for
//! after every (re)connection.

use super::common::{Boxd, answer};
use psbx_wire::boxd::InfoRequest;
use psbx_wire::mux::Incoming;

pub async fn serve(incoming: Incoming, state: &Boxd) {
    answer::<InfoRequest>(incoming.accept(), &state.info).await;
}
