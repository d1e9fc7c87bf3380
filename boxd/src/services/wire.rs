//! `wire`: replaces the box's wiring (its declared services, their modes and
//! its links) after the claim; a name declared here keeps its address and
//! the connections the connector carried for it are closed (`privnet`).
//! Refused by a boxd that does not own its machine (`crate::settings`).

use super::common::{Boxd, answer, read_call};
use psbx_wire::boxd::{Done, Wiring};
use psbx_wire::mux::Incoming;

pub async fn serve(incoming: Incoming, state: &Boxd) {
    let mut stream = incoming.accept();
    let refused = state.not_its_machine("wiring");
    let done = match (read_call::<Wiring>(&mut stream).await, refused) {
        (Ok(_), Some(why)) => Done::failed(why),
        (Ok(wiring), None) => match state
            .private
            .wire(&wiring, &state.uplink, state.work())
            .await
        {
            Ok(()) => Done::ok(),
            Err(e) => Done::failed(e.to_string()),
        },
        (Err(e), _) => Done::failed(e),
    };
    answer::<Wiring>(stream, &done).await;
}
