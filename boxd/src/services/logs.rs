//! `logs`: a background command's log from an offset, and what it appends
//! while it runs when the request follows it.

use super::common::{Boxd, parse, read_request};
use crate::exec::Processes;
use psbx_wire::boxd::Logs;
use psbx_wire::mux::Stream;
use std::time::Duration;
use tokio::io::{AsyncSeekExt, AsyncWriteExt};

/// How often a followed log is checked for new output.
const FOLLOW_EVERY: Duration = Duration::from_millis(250);

pub async fn serve(mut stream: Stream, state: &Boxd) {
    let request = match read_request(&mut stream).await {
        Ok(bytes) => parse::<Logs>(&bytes).ok(),
        Err(_) => None,
    };
    let Some((request, process)) = request.and_then(|r| state.processes.get(r.pid).map(|p| (r, p)))
    else {
        stream.reset("no such background process");
        return;
    };
    if let Ok(mut file) = tokio::fs::File::open(&process.log).await {
        let _ = send(&mut file, &mut stream, &request, &state.processes).await;
    }
    let _ = stream.shutdown().await;
}

/// Sends a log from the requested offset; when following, keeps sending what
/// is appended until the process has exited and its last output was sent.
async fn send(
    file: &mut tokio::fs::File,
    stream: &mut Stream,
    request: &Logs,
    processes: &Processes,
) -> std::io::Result<()> {
    file.seek(std::io::SeekFrom::Start(request.offset)).await?;
    loop {
        // Read whether it ended before reading: output written before the
        // exit is then surely in the file.
        let ended = processes.get(request.pid).is_none_or(|p| p.exit.is_some());
        tokio::io::copy(file, stream).await?;
        if !request.follow || ended {
            return Ok(());
        }
        tokio::time::sleep(FOLLOW_EVERY).await;
    }
}
