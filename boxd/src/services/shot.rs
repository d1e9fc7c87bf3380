//! `shot`: a screenshot or recording ([`crate::shot`]). The stream starts
//! with one JSON line `ShotRequest`; the server keeps its side open while it
//! waits, and its half-close or reset before the answer stops the shot (its
//! programs are killed, its files removed). The answer is one JSON line
//! `ShotAnswer`: `refused` with a code and a reason, or `shot` with the
//! header, then the file's bytes and the poster's, then FIN. The files live
//! in a temporary directory removed once sent.

use super::common::Boxd;
use bytes::Bytes;
use psbx_wire::boxd::{ShotAnswer, ShotRefusal, ShotRequest};
use psbx_wire::frame::code;
use psbx_wire::mux::{ReadHalf, Stream, WriteHalf};
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The longest request line read.
const MAX_REQUEST_LINE: usize = 16 * 1024;
/// How long boxd waits for the server's half-close once it has answered.
const WAIT_FOR_CLOSE: Duration = Duration::from_secs(30);
/// The bytes read from a file at a time.
const CHUNK: usize = 64 * 1024;

/// Why the answer could not be sent.
#[derive(Debug, thiserror::Error)]
enum SendError {
    #[error("the stream broke: {0}")]
    Stream(#[source] std::io::Error),
    #[error("reading {path}: {source}")]
    File {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

pub async fn serve(stream: Stream, state: &Boxd) {
    let (mut from_server, mut to_server) = stream.into_split();
    let request = match request_line(&mut from_server).await {
        Ok(request) => request,
        Err(reason) => {
            return refuse(to_server, from_server, code::BAD_REQUEST, reason).await;
        }
    };
    let dir = match tempfile::Builder::new().prefix("psbx-shot-").tempdir() {
        Ok(dir) => dir,
        Err(e) => {
            let reason = format!("cannot make a directory for the shot: {e}");
            return refuse(to_server, from_server, 500, reason).await;
        }
    };
    let taken = tokio::select! {
        taken = state.shots.take(&request, dir.path()) => taken,
        // The server gave up: dropping the shot kills its programs.
        () = hung_up(&mut from_server) => return,
    };
    match taken {
        Err(e) => refuse(to_server, from_server, e.code(), e.to_string()).await,
        Ok(taken) => {
            let sent = async {
                let mut line =
                    serde_json::to_vec(&ShotAnswer::Shot(taken.header.clone())).unwrap_or_default();
                line.push(b'\n');
                to_server
                    .write_chunk(Bytes::from(line))
                    .await
                    .map_err(SendError::Stream)?;
                send_file(&mut to_server, &taken.file, taken.header.bytes).await?;
                if let Some(poster) = &taken.poster {
                    send_file(&mut to_server, poster, taken.header.poster_bytes).await?;
                }
                Ok::<_, SendError>(())
            };
            match sent.await {
                Ok(()) => finish(to_server, from_server).await,
                Err(e) => to_server.reset(&e.to_string()),
            }
        }
    }
}

/// Sends exactly `bytes` bytes of `path` (its size when it was taken).
async fn send_file(to: &mut WriteHalf, path: &Path, bytes: u64) -> Result<(), SendError> {
    let file_error = |source| SendError::File {
        path: path.display().to_string(),
        source,
    };
    let mut file = tokio::fs::File::open(path).await.map_err(file_error)?;
    let mut left = bytes;
    while left > 0 {
        let mut buf = vec![0u8; CHUNK.min(usize::try_from(left).unwrap_or(CHUNK))];
        file.read_exact(&mut buf).await.map_err(file_error)?;
        left -= buf.len() as u64;
        to.write_chunk(Bytes::from(buf))
            .await
            .map_err(SendError::Stream)?;
    }
    Ok(())
}

async fn refuse(to: WriteHalf, from: ReadHalf, code: u16, reason: String) {
    let answer = ShotAnswer::Refused(ShotRefusal { code, reason });
    let mut line = serde_json::to_vec(&answer).unwrap_or_default();
    line.push(b'\n');
    let mut to = to;
    if to.write_chunk(Bytes::from(line)).await.is_ok() {
        finish(to, from).await;
    }
}

/// FIN, then the server's half-close (a stream dropped before it is reset).
async fn finish(mut to: WriteHalf, mut from: ReadHalf) {
    let _ = to.shutdown().await;
    let _ = tokio::time::timeout(WAIT_FOR_CLOSE, hung_up(&mut from)).await;
}

/// Returns once the server has half-closed or reset the stream (what it
/// sends after the request is not read).
async fn hung_up(from: &mut ReadHalf) {
    while let Ok(Some(_)) = from.read_chunk().await {}
}

/// The request line: a `ShotRequest` and `\n`.
async fn request_line(from: &mut ReadHalf) -> Result<ShotRequest, String> {
    let mut buf = Vec::new();
    loop {
        if let Some(end) = buf.iter().position(|b| *b == b'\n') {
            return serde_json::from_slice(&buf[..end])
                .map_err(|e| format!("bad shot request: {e}"));
        }
        if buf.len() > MAX_REQUEST_LINE {
            return Err(format!(
                "bad shot request: no newline in the first {MAX_REQUEST_LINE} bytes"
            ));
        }
        match from.read_chunk().await {
            Ok(Some(chunk)) => buf.extend_from_slice(&chunk),
            Ok(None) => return Err("the stream ended before the shot request line".to_owned()),
            Err(e) => return Err(format!("the stream broke: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{session_of, state_on};
    use crate::shot::tests::{BANDED, FreeDisplay, serve_page};
    use psbx_wire::boxd::{ShotAnswer, ShotKind, ShotRequest};
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn line(request: &ShotRequest) -> Vec<u8> {
        let mut line = serde_json::to_vec(request).unwrap();
        line.push(b'\n');
        line
    }

    /// Reads the answer line and what follows it to the stream's end.
    async fn answer(stream: &mut psbx_wire::mux::Stream) -> (ShotAnswer, Vec<u8>) {
        let mut all = Vec::new();
        stream.read_to_end(&mut all).await.unwrap();
        let end = all
            .iter()
            .position(|b| *b == b'\n')
            .expect("an answer line");
        let answer = serde_json::from_slice(&all[..end]).unwrap();
        (answer, all[end + 1..].to_vec())
    }

    #[tokio::test]
    async fn a_screenshot_comes_back_as_its_header_and_bytes() {
        let display = FreeDisplay::take();
        let session = session_of(state_on(display.number)).await;
        let port = serve_page(BANDED).await;
        let mut stream = session.open("shot").await.unwrap();
        let request = ShotRequest {
            url: Some(format!("http://127.0.0.1:{port}/")),
            width: 400,
            height: 300,
            ..ShotRequest::default()
        };
        stream.write_all(&line(&request)).await.unwrap();
        let (answer, rest) = answer(&mut stream).await;
        stream.shutdown().await.unwrap();
        let ShotAnswer::Shot(header) = answer else {
            panic!("{answer:?}")
        };
        assert_eq!((header.width, header.height), (400, 300));
        assert_eq!(header.bytes, rest.len() as u64);
        assert_eq!(crate::shot::png_size(&rest), Some((400, 300)));
    }

    #[tokio::test]
    async fn a_bad_request_is_refused_in_the_answer_line() {
        let session = session_of(state_on(FreeDisplay::take().number)).await;
        let mut stream = session.open("shot").await.unwrap();
        stream.write_all(b"{\"kind\":\"video\"}\n").await.unwrap();
        let (answer, rest) = answer(&mut stream).await;
        let ShotAnswer::Refused(refusal) = answer else {
            panic!("{answer:?}")
        };
        assert_eq!(refusal.code, 400);
        assert!(
            refusal.reason.starts_with("bad shot request"),
            "{}",
            refusal.reason
        );
        assert!(rest.is_empty());
        let mut stream = session.open("shot").await.unwrap();
        let wide = ShotRequest {
            width: 5000,
            ..ShotRequest::default()
        };
        stream.write_all(&line(&wide)).await.unwrap();
        let (answer, _) = super::tests::answer(&mut stream).await;
        assert!(
            matches!(answer, ShotAnswer::Refused(r) if r.code == 400 && r.reason.contains("width 5000"))
        );
    }

    /// The processes whose command line holds `needle`.
    fn running(needle: &str) -> Vec<String> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            let zombie =
                std::fs::read_to_string(entry.path().join("stat")).is_ok_and(|s| s.contains(") Z"));
            if cmdline.contains(needle) && !zombie {
                found.push(cmdline);
            }
        }
        found
    }

    #[tokio::test]
    async fn hanging_up_stops_a_recording() {
        let display = FreeDisplay::take();
        let session = session_of(state_on(display.number)).await;
        let mut stream = session.open("shot").await.unwrap();
        let request = ShotRequest {
            kind: ShotKind::Recording,
            seconds: 30,
            ..ShotRequest::default()
        };
        stream.write_all(&line(&request)).await.unwrap();
        let grab = format!(":{}+0,0", display.number);
        let mut started = false;
        for _ in 0..200 {
            if !running(&grab).is_empty() {
                started = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(started, "ffmpeg did not start recording {grab}");
        // The server gives up: it half-closes.
        stream.shutdown().await.unwrap();
        for _ in 0..100 {
            if running(&grab).is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("still recording after the hang-up: {:?}", running(&grab));
    }
}
