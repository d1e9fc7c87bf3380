//! BoxActor: one per live box.
pub mod state;
