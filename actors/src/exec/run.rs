//! Running a command in a box through boxd's `exec` service: the request goes
//! out, the answer's records come back as events with secret values masked,
//! stdout and stderr each through their own mask stream.

use super::mask::{MaskStream, Masker};
use crate::box_::link::LinkHandle;
use crate::error::BoxError;
use psbx_wire::boxd::{ExecRequest, Exit, Record};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// What a caller sees of a running command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecEvent {
    /// The command runs with this process id (for a background one, the end).
    Started(u32),
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Exit(Exit),
}

/// How long boxd may take to accept the exec stream.
const OPEN: Duration = Duration::from_secs(30);

/// Runs `request` and sends its events to `events` until the command ends
/// (or, for a background command, until it started). Stops early, leaving the
/// command to run, when the receiver goes away.
pub async fn run(
    link: &LinkHandle,
    request: &ExecRequest,
    masker: Arc<Masker>,
    events: mpsc::Sender<ExecEvent>,
) -> Result<(), BoxError> {
    let mut stream = link
        .open("exec", OPEN)
        .await
        .map_err(|e| BoxError::Internal(format!("cannot reach boxd: {e}")))?;
    let body = serde_json::to_vec(request).map_err(|e| BoxError::Internal(e.to_string()))?;
    let io = |e: std::io::Error| BoxError::ChannelLost(e.to_string());
    stream.write_all(&body).await.map_err(io)?;
    stream.shutdown().await.map_err(io)?;
    let mut out = MaskStream::new(masker.clone());
    let mut err = MaskStream::new(masker);
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = stream.read(&mut chunk).await.map_err(io)?;
        if n == 0 {
            return Err(BoxError::Internal(
                "boxd ended the command's stream without an exit".into(),
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
        while let Some(record) = Record::decode(&mut buf).map_err(BoxError::Internal)? {
            let event = match record {
                Record::Started(pid) => Some(ExecEvent::Started(pid)),
                Record::Stdout(b) => Some(ExecEvent::Stdout(out.push(&b))),
                Record::Stderr(b) => Some(ExecEvent::Stderr(err.push(&b))),
                Record::Failed(why) => return Err(BoxError::Invalid(why)),
                Record::Exit(exit) => {
                    for tail in [
                        ExecEvent::Stdout(out.finish()),
                        ExecEvent::Stderr(err.finish()),
                    ] {
                        let _ = events.send(tail).await;
                    }
                    let _ = events.send(ExecEvent::Exit(exit)).await;
                    return Ok(());
                }
            };
            if let Some(event) = event {
                let background_started =
                    matches!(event, ExecEvent::Started(_)) && request.background;
                if events.send(event).await.is_err() || background_started {
                    return Ok(());
                }
            }
        }
    }
}
