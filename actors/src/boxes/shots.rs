//! Screenshots and recordings taken in a box: the one call the server makes
//! to boxd's `shot` service ([`Boxes::shot`]). It writes the request line,
//! keeps the stream open while boxd works (dropping it, at the time limit or
//! when the caller goes away, stops the shot in the box), and reads the
//! answer line and exactly the file and poster it announces.
//!
//! The file and poster are written to temporary files in the caller's spool
//! directory as they arrive, through a small buffer: what boxd announces
//! (up to 200 MiB each) is never allocated up front, and a boxd that
//! announces much and sends little costs nothing but the bytes it sent
//! (security review 2, M1).

use super::{Boxes, SERVICE};
use crate::error::BoxError;
use crate::exec::mask::Masker;
use crate::ids::{AccountId, BoxId};
use psbx_wire::boxd::shot::MAX_FILE_BYTES;
use psbx_wire::boxd::{ShotAnswer, ShotHeader, ShotRequest, Streamed};
use psbx_wire::mux::Stream;
use std::path::{Path, PathBuf};
use tempfile::TempPath;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// The longest answer line read.
const MAX_ANSWER_LINE: u64 = 64 * 1024;
/// How many of a file's first bytes are kept in memory (its magic).
pub const HEAD_BYTES: usize = 16;

/// A shot as boxd sent it.
#[derive(Debug)]
pub struct ShotFile {
    pub header: ShotHeader,
    /// PNG for screenshots, WebM or MP4 for recordings (not checked here).
    pub file: Spooled,
    /// A recording's PNG poster frame.
    pub poster: Option<Spooled>,
}

/// A file written to the spool as it arrived; deleted when dropped, unless
/// moved away first.
#[derive(Debug)]
pub struct Spooled {
    pub path: TempPath,
    pub bytes: u64,
    /// Its first [`HEAD_BYTES`] bytes (fewer when it is shorter).
    pub head: Vec<u8>,
}

impl Spooled {
    /// The whole file (tests and small files).
    pub async fn read(&self) -> std::io::Result<Vec<u8>> {
        tokio::fs::read(&self.path).await
    }
}

impl Boxes {
    /// Takes a screenshot or recording in the box (thaws it; the box stays
    /// awake until it ends), its files written to temporary files in
    /// `spool`. A request outside the limits is [`BoxError::Invalid`];
    /// boxd's refusal is [`BoxError::ShotFailed`] with its code; past
    /// [`ShotRequest::time_limit`] the shot is stopped in the box and the
    /// call is [`BoxError::ShotTimedOut`].
    pub async fn shot(
        &self,
        account: &AccountId,
        id: &BoxId,
        request: &ShotRequest,
        spool: &Path,
    ) -> Result<ShotFile, BoxError> {
        request.check().map_err(BoxError::Invalid)?;
        let (addr, link, masker) = self.channel(account, id).await?;
        let _awake = self.awake(addr);
        let limit = request.time_limit();
        let shot = async {
            let stream = link.open(ShotRequest::SERVICE, SERVICE).await?;
            take(stream, id, request, &masker, spool).await
        };
        tokio::time::timeout(limit, shot)
            .await
            .map_err(|_| BoxError::ShotTimedOut { limit })?
    }
}

/// Sends the request and reads the answer.
async fn take(
    mut stream: Stream,
    id: &BoxId,
    request: &ShotRequest,
    masker: &Masker,
    spool: &Path,
) -> Result<ShotFile, BoxError> {
    let io = |source| crate::error::io_error(format!("taking a shot in box {id}"))(source);
    let mut line = serde_json::to_vec(request)?;
    line.push(b'\n');
    stream.write_all(&line).await.map_err(io)?;
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    (&mut reader)
        .take(MAX_ANSWER_LINE)
        .read_until(b'\n', &mut line)
        .await
        .map_err(io)?;
    // A stream that ends before any answer is a session that closed under
    // the shot (a thaw, a boxd restart, the box stopping).
    if line.is_empty() {
        return Err(BoxError::Boxd(crate::boxd_link::LinkError::Closed));
    }
    if line.last() != Some(&b'\n') {
        return Err(BoxError::Internal(format!(
            "boxd's shot answer in box {id} is not a line of JSON"
        )));
    }
    let header = match serde_json::from_slice::<ShotAnswer>(&line)? {
        ShotAnswer::Refused(refusal) => {
            return Err(BoxError::ShotFailed {
                code: refusal.code,
                reason: masker.mask(&refusal.reason),
            });
        }
        ShotAnswer::Shot(header) => header,
    };
    if header.bytes > MAX_FILE_BYTES || header.poster_bytes > MAX_FILE_BYTES {
        return Err(BoxError::Internal(format!(
            "boxd in box {id} announced a shot of {} and {} bytes, over the limit",
            header.bytes, header.poster_bytes
        )));
    }
    // boxd stopping short of what it announced is its failure, not ours.
    let short = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => BoxError::ShotFailed {
            code: 502,
            reason: e.to_string(),
        },
        _ => io(e),
    };
    let file = spool_exactly(&mut reader, header.bytes, spool)
        .await
        .map_err(short)?;
    let poster = match header.poster_bytes {
        0 => None,
        n => Some(spool_exactly(&mut reader, n, spool).await.map_err(short)?),
    };
    let mut stream = reader.into_inner();
    stream.shutdown().await.map_err(io)?;
    // boxd's FIN follows the poster: the stream ends finished both ways.
    let mut rest = Vec::new();
    (&mut stream)
        .take(1)
        .read_to_end(&mut rest)
        .await
        .map_err(io)?;
    Ok(ShotFile {
        header,
        file,
        poster,
    })
}

/// Writes the next `bytes` bytes of the stream to a new file in `spool`, as
/// they come; a stream that ends before is an error (and no file stays).
async fn spool_exactly(
    reader: &mut BufReader<Stream>,
    bytes: u64,
    spool: &Path,
) -> Result<Spooled, std::io::Error> {
    let dir: PathBuf = spool.to_owned();
    let (file, path) = tokio::task::spawn_blocking(move || {
        tempfile::Builder::new()
            .prefix(".shot-")
            .tempfile_in(dir)
            .map(tempfile::NamedTempFile::into_parts)
    })
    .await
    .map_err(std::io::Error::other)??;
    let mut out = tokio::fs::File::from_std(file);
    let mut head = Vec::with_capacity(HEAD_BYTES);
    let mut left = bytes;
    while left > 0 {
        let chunk = reader.fill_buf().await?;
        if chunk.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "boxd announced {bytes} bytes and the stream ended after {}",
                    bytes - left
                ),
            ));
        }
        let n = chunk.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let piece = &chunk[..n];
        let keep = (HEAD_BYTES - head.len()).min(n);
        head.extend_from_slice(&piece[..keep]);
        out.write_all(piece).await?;
        reader.consume(n);
        left -= n as u64;
    }
    out.flush().await?;
    Ok(Spooled { path, bytes, head })
}
