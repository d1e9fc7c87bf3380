//! The channel every byte into or out of a box travels on (DESIGN.md §5).
//!
//! * [`frame`]: the frames (stream id, type, payload) and their strict decoder;
//! * [`codec`]: their carriages, length-prefixed on a byte stream or one per
//!   WebSocket message;
//! * [`mux`]: the stream multiplexer ([`Session`], [`Stream`]) with credit
//!   flow control, half-close, liveness, `GOAWAY` and control messages;
//! * [`hello`]: the first control message, with version negotiation (the
//!   only one boxd and the server exchange: after it, a control message
//!   from the server tells boxd that a new session replaces this one);
//! * [`boxd`]: the services boxd serves ([`boxd::Service`]), their requests
//!   and answers, and the streams boxd opens towards the server
//!   ([`boxd::Outbound`]);
//! * [`endpoint`]: host:port ([`Endpoint`]) and the one rule for a host
//!   ([`HostName::parse`]) that every hop of a box's connection follows;
//! * [`dns`]: the box's DNS queries through the channel, and asking the
//!   platform's resolvers;
//! * [`splice`]: copying both ways, between a wire stream and a TCP
//!   connection or between two wire streams, with half-close and resets
//!   passed on;
//! * `testing` (feature `test-util`): sessions connected in memory, for tests.
//!
//! Shared by the server, boxd and the connector, so it never depends on
//! diesel or actix.

pub mod boxd;
pub mod codec;
pub mod dns;
pub mod endpoint;
pub mod frame;
pub mod hello;
pub mod mux;
pub mod splice;
#[cfg(feature = "test-util")]
pub mod testing;

pub use endpoint::{Endpoint, EndpointError, HOST_NAME_PATTERN, HostName, HostNameError};
pub use frame::{Frame, Refusal};
pub use hello::Hello;
pub use mux::{Config, Incoming, OpenError, Role, Session, SessionError, Stream};

/// The protocol version boxd and the server speak; a hello carries it.
pub const PROTOCOL_VERSION: u32 = 1;

/// The name of the virtio-serial port boxd listens on.
pub const BOXD_PORT_NAME: &str = "org.psbx.boxd";
