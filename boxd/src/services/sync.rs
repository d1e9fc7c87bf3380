//! `sync`: a JSON line with the destination under `/work`, then the tar
//! bytes, unpacked as they come ([`crate::unpack`]); the answer says how
//! many files and bytes, or why not.

use super::common::{Boxd, answer_json, parse};
use crate::unpack;
use psbx_wire::boxd::{SyncDone, SyncRequest};
use psbx_wire::mux::Stream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The longest request line.
const MAX_LINE: usize = 64 * 1024;

pub async fn serve(mut stream: Stream, state: &Boxd) {
    let mut head = Vec::new();
    let mut chunk = [0u8; 4096];
    let newline = loop {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break None,
            Ok(n) => {
                head.extend_from_slice(&chunk[..n]);
                if let Some(i) = head.iter().position(|b| *b == b'\n') {
                    break Some(i);
                }
                if head.len() > MAX_LINE {
                    break None;
                }
            }
        }
    };
    let Some(newline) = newline else {
        return answer_json(stream, &failed("the sync request line is missing".into())).await;
    };
    let request = match parse::<SyncRequest>(&head[..newline]) {
        Ok(r) => r,
        Err(e) => return answer_json(stream, &failed(e)).await,
    };
    let rest = head[newline + 1..].to_vec();
    let (read_half, mut write_half) = stream.into_split();
    let work = state.work().to_owned();
    let result = tokio::task::spawn_blocking(move || {
        let bridge = tokio_util::io::SyncIoBridge::new(read_half);
        let mut reader = std::io::Read::chain(std::io::Cursor::new(rest), bridge);
        let result = unpack::unpack(&mut reader, &work, &request.dest);
        // Read to the sender's FIN (tar padding, or what a refusal left unread),
        // so the stream ends cleanly both ways.
        let _ = std::io::copy(&mut reader, &mut std::io::sink());
        result
    })
    .await;
    let done = match result {
        Ok(Ok(u)) => SyncDone {
            ok: true,
            files: u.files,
            bytes: u.bytes,
            error: None,
        },
        Ok(Err(e)) => failed(e.to_string()),
        Err(e) => failed(e.to_string()),
    };
    let body = serde_json::to_vec(&done).unwrap_or_default();
    let _ = write_half.write_all(&body).await;
    let _ = write_half.shutdown().await;
}

fn failed(error: String) -> SyncDone {
    SyncDone {
        ok: false,
        files: 0,
        bytes: 0,
        error: Some(error),
    }
}
