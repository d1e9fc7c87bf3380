//! The multiplexed channel every byte into or out of a box travels on (DESIGN.md §5):
//! frames, streams with credit flow control, and typed control messages.
//!
//! Empty until the wire issue fills it. Shared by the server, boxd and the connector,
//! so it must never depend on diesel or actix.
