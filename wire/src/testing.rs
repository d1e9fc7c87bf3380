//! Test aids for the crates that use the wire (feature `test-util`): two
//! sessions connected in memory, as boxd and the server or the connector and
//! the server would be.

use crate::{Config, Hello, Role, Session, SessionError};

/// Two connected sessions over an in-memory byte stream
/// (`tokio::io::duplex`) of `capacity` bytes each way: the client (the
/// server's end of a box channel, hello `test-a`) and the server (boxd's
/// end, hello `test-b`).
pub async fn session_pair(
    client: Config,
    server: Config,
    capacity: usize,
) -> Result<(Session, Session), SessionError> {
    let (x, y) = tokio::io::duplex(capacity);
    let (client, server) = tokio::join!(
        Session::over_io(x, Role::Client, client, Hello::new("test-a")),
        Session::over_io(y, Role::Server, server, Hello::new("test-b")),
    );
    Ok((client?, server?))
}
