//! `wire`: replaces the box's wiring (its declared services, their modes and
//! its links) after the claim; a name declared here keeps its address and
//! the connections the connector carried for it are closed (`privnet`).

use super::{Boxd, answer_json, parse, read_request};
use psbx_wire::boxd::{Done, Wiring};
use psbx_wire::mux::Incoming;

pub async fn serve(incoming: Incoming, state: &Boxd) {
    let mut stream = incoming.accept();
    let done = match read_request(&mut stream)
        .await
        .map_err(|e| e.to_string())
        .and_then(|b| parse::<Wiring>(&b))
    {
        Ok(wiring) => match state
            .private
            .wire(&wiring, &state.uplink, &state.work)
            .await
        {
            Ok(()) => Done::ok(),
            Err(e) => Done::failed(e.to_string()),
        },
        Err(e) => Done::failed(e),
    };
    answer_json(stream, &done).await;
}
