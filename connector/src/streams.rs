//! What the connector does with each stream the server opens: check the
//! target (400 when malformed, 502 when `PSBX_ALLOW` leaves it out),
//! resolve it in the connector's network, refuse it (502 "not allowed")
//! when it resolves to a loopback, link-local or unspecified address that
//! `PSBX_ALLOW` does not list ([`crate::reserved`]), and dial it (502 with
//! the reason when that fails), then accept the stream and splice it to the TCP connection.
//!
//! One log line per refused stream, at warn; streams that work are logged
//! at debug only, since a busy connector carries thousands.

use std::sync::Arc;

use psbx_wire::Incoming;
use psbx_wire::frame::{Refusal, code};
use tracing::{debug, warn};

use crate::allow::AllowList;
use crate::dial::Dialer;
use psbx_wire::Endpoint;
use psbx_wire::splice::splice;

/// What every stream handler shares.
pub struct Streams {
    pub dialer: Dialer,
    pub allow: Option<AllowList>,
}

impl Streams {
    /// Serves one incoming stream to its end.
    pub async fn handle(self: Arc<Self>, incoming: Incoming, slot: usize) {
        let raw = incoming.target().to_owned();
        let tcp = match self.open(&raw).await {
            Ok(tcp) => tcp,
            Err(refusal) => {
                warn!(
                    session = slot,
                    target = %raw,
                    code = refusal.code,
                    reason = %refusal.reason,
                    "stream refused"
                );
                incoming.refuse(refusal.code, &refusal.reason);
                return;
            }
        };
        let stream = incoming.accept();
        let id = stream.id();
        match splice(stream, tcp, "connector").await {
            Ok(moved) => debug!(
                session = slot,
                stream = id,
                target = %raw,
                to_target = moved.to_target,
                from_target = moved.from_target,
                "stream done"
            ),
            Err(error) => {
                debug!(session = slot, stream = id, target = %raw, %error, "stream reset")
            }
        }
    }

    async fn open(&self, raw: &str) -> Result<tokio::net::TcpStream, Refusal> {
        let target = raw
            .parse::<Endpoint>()
            .map_err(|e| Refusal::new(code::BAD_REQUEST, format!("bad target: {e}")))?;
        if let Some(allow) = &self.allow
            && !allow.contains(&target)
        {
            return Err(Refusal::new(
                code::BAD_GATEWAY,
                format!("not allowed: {target} is not in PSBX_ALLOW"),
            ));
        }
        self.dialer.dial(&target, self.allow.as_ref()).await
    }
}
