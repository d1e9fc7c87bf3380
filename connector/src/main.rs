//! psbx-connector: runs in the user's network, connects out to psbx over
//! WebSocket/TLS and dials the host:port pairs listed on its connection.
//!
//! Filled by the connector issue; until then it only reports its version.

fn main() {
    println!("psbx-connector {}", env!("CARGO_PKG_VERSION"));
}
