//! The stream multiplexer: many byte streams, each with credit flow control
//! and half-close, over one carriage of frames, with session liveness,
//! `GOAWAY` and typed control messages (DESIGN.md §5).
//!
//! [`Session`] is the handle the users hold; a [`Driver`] moves the frames
//! (spawned by [`Session::over_io`] and [`Session::over_messages`]). The
//! state both share lives in `state`, one mutex per session; stream bytes are
//! `Bytes` slices of the received frames, never copied through queues.

mod config;
mod driver;
mod error;
mod flow;
mod session;
mod state;
mod stream;
mod wakers;

pub use config::{BeforeHello, Config, INITIAL_WINDOW, Role, TUNNEL_STREAMS};
pub use driver::Driver;
pub use error::{ConfigError, ControlError, OpenError, ProtocolError, SessionError, StreamError};
pub use session::{Incoming, Session};
pub use state::Stats;
pub use stream::{ReadHalf, Stream, WriteHalf};
