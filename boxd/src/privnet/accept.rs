//! The accept loop every listener of boxd's for the box's names shares (an
//! entry, the external-mode proxy, the scene entry): each connection is
//! handed on until the listener is closed; a failed accept (out of
//! descriptors, say) is retried shortly.

use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// Hands every connection `listener` accepts to `each` until `closed` is
/// cancelled.
pub async fn until_closed(
    listener: &TcpListener,
    closed: &CancellationToken,
    mut each: impl FnMut(TcpStream),
) {
    loop {
        let accepted = tokio::select! {
            () = closed.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((tcp, _)) => each(tcp),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}
