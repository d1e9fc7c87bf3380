//! The channel every byte into or out of a box travels on (DESIGN.md §5).
//!
//! Today it holds the typed control messages boxd and the server exchange
//! (`control`), carried one JSON object per line over the virtio-serial port
//! (`lines`). The wire issue replaces the carriage with the frame codec and
//! the stream multiplexer; the messages stay. Shared by the server, boxd and
//! the connector, so it never depends on diesel or actix.

pub mod control;
pub mod lines;

/// The protocol version boxd and the server speak; a hello carries it.
pub const PROTOCOL_VERSION: u32 = 1;

/// The name of the virtio-serial port boxd listens on.
pub const BOXD_PORT_NAME: &str = "org.psbx.boxd";
