//! Screenshots and recordings taken in a box: the one call the server makes
//! to boxd's `shot` service ([`Boxes::shot`]). It writes the request line,
//! keeps the stream open while boxd works (dropping it, at the time limit or
//! when the caller goes away, stops the shot in the box), and reads the
//! answer line and exactly the file and poster it announces.

use super::{Boxes, SERVICE};
use crate::error::BoxError;
use crate::exec::mask::Masker;
use crate::ids::AccountId;
use psbx_wire::boxd::shot::MAX_FILE_BYTES;
use psbx_wire::boxd::{Service, ShotAnswer, ShotHeader, ShotRequest};
use psbx_wire::mux::Stream;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// The longest answer line read.
const MAX_ANSWER_LINE: u64 = 64 * 1024;

/// A shot as boxd sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShotFile {
    pub header: ShotHeader,
    /// PNG for screenshots, WebM or MP4 for recordings.
    pub file: Vec<u8>,
    /// A recording's PNG poster frame.
    pub poster: Option<Vec<u8>>,
}

impl Boxes {
    /// Takes a screenshot or recording in the box (thaws it; the box stays
    /// awake until it ends). A request outside the limits is
    /// [`BoxError::Invalid`]; boxd's refusal is [`BoxError::ShotFailed`]
    /// with its code; past [`ShotRequest::time_limit`] the shot is stopped
    /// in the box and the call is [`BoxError::ShotTimedOut`].
    pub async fn shot(
        &self,
        account: &AccountId,
        id: &str,
        request: &ShotRequest,
    ) -> Result<ShotFile, BoxError> {
        request.check().map_err(BoxError::Invalid)?;
        let (addr, link, masker) = self.channel(account, id).await?;
        let _awake = self.awake(addr);
        let limit = request.time_limit();
        let shot = async {
            let stream = link.open(Service::Shot, SERVICE).await?;
            take(stream, id, request, &masker).await
        };
        tokio::time::timeout(limit, shot)
            .await
            .map_err(|_| BoxError::ShotTimedOut { limit })?
    }
}

/// Sends the request and reads the answer.
async fn take(
    mut stream: Stream,
    id: &str,
    request: &ShotRequest,
    masker: &Masker,
) -> Result<ShotFile, BoxError> {
    let io = |source| BoxError::Io {
        what: format!("taking a shot in box {id}"),
        source,
    };
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
        return Err(BoxError::Boxd(crate::box_actor::link::LinkError::Closed));
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
    let file = read_exactly(&mut reader, header.bytes).await.map_err(io)?;
    let poster = match header.poster_bytes {
        0 => None,
        n => Some(read_exactly(&mut reader, n).await.map_err(io)?),
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

async fn read_exactly(
    reader: &mut BufReader<Stream>,
    bytes: u64,
) -> Result<Vec<u8>, std::io::Error> {
    let len = usize::try_from(bytes).map_err(std::io::Error::other)?;
    let mut buf = vec![0u8; len];
    reader.read_exact(&mut buf).await?;
    Ok(buf)
}
