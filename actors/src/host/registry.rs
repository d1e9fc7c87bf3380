//! The live box actors of one host, by box: how the façades (`Boxes`), the
//! pressure samplers and a box's links to another box find a box's actor.
//! Each actor enters itself when it starts and leaves when it stops
//! (through the host's `box_actor::Hosting`).
//!
//! A `std::sync::Mutex` rather than the HostSupervisor's state: each use is
//! a lookup or an insertion held for no await, taken by the API's calls
//! (`Boxes` finds a box's actor) and by the box actors themselves; a message
//! to the supervisor would put every exec and status call behind its
//! mailbox, and there is no order between them to keep.

use crate::box_actor::BoxActor;
use crate::ids::BoxId;
use actix::Addr;
use std::collections::HashMap;
use std::sync::Mutex;

/// The live box actors of this host, by box.
#[derive(Default)]
pub struct Registry(Mutex<HashMap<BoxId, Addr<BoxActor>>>);

impl Registry {
    pub fn register(&self, id: BoxId, addr: Addr<BoxActor>) {
        if let Ok(mut r) = self.0.lock() {
            r.insert(id, addr);
        }
    }

    pub fn unregister(&self, id: &BoxId) {
        if let Ok(mut r) = self.0.lock() {
            r.remove(id);
        }
    }

    pub fn actor(&self, id: &BoxId) -> Option<Addr<BoxActor>> {
        self.0.lock().ok()?.get(id).cloned()
    }
}
