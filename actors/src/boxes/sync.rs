//! `Boxes::sync`: a tar stream unpacked in a running box under `/work/<dest>`,
//! through boxd's `sync` service. The protocol stays here: one JSON
//! [`SyncRequest`] line, then the tar bytes, a half-close, and boxd's JSON
//! [`SyncDone`]. Callers (the REST sync route, the one-time upload URLs) hand
//! over the upload as a stream of chunks and get [`Synced`] or a [`BoxError`].

use super::{Boxes, SERVICE};
use crate::boxd_link::LinkError;
use crate::error::BoxError;
use crate::error::io_error;
use crate::ids::{AccountId, BoxId};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use psbx_wire::boxd::{Service, Streamed, SyncDone, SyncRequest};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The longest answer read back from boxd.
const MAX_ANSWER: u64 = 1 << 20;

/// What a sync unpacked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Synced {
    /// Files unpacked.
    pub files: u64,
    /// Bytes of file content unpacked.
    pub bytes: u64,
}

impl Boxes {
    /// Streams `upload` (a tar archive of relative paths) into box `id`,
    /// unpacked under `/work/<dest>` (`dest` relative, as boxd checks). An
    /// upload that fails to arrive is [`BoxError::Upload`]; an archive boxd
    /// refuses is [`BoxError::SyncRefused`].
    pub async fn sync<E: std::fmt::Display>(
        &self,
        account: &AccountId,
        id: &BoxId,
        dest: &str,
        upload: impl Stream<Item = Result<Bytes, E>>,
    ) -> Result<Synced, BoxError> {
        let (_, link, masker) = self.channel(account, id).await?;
        let stream = match link.open(SyncRequest::SERVICE, SERVICE).await {
            Ok(stream) => stream,
            Err(e) => return Err(self.noticed(account, id, e.into()).await),
        };
        sync_over(stream, dest, upload).await.map_err(|e| match e {
            BoxError::SyncRefused(why) => BoxError::SyncRefused(masker.mask(&why)),
            other => other,
        })
    }
}

/// The sync protocol on an open `sync` stream.
async fn sync_over<S, E>(
    mut stream: S,
    dest: &str,
    upload: impl Stream<Item = Result<Bytes, E>>,
) -> Result<Synced, BoxError>
where
    S: AsyncRead + AsyncWrite + Unpin,
    E: std::fmt::Display,
{
    let mut head = serde_json::to_vec(&SyncRequest {
        dest: dest.to_owned(),
    })?;
    head.push(b'\n');
    stream
        .write_all(&head)
        .await
        .map_err(io_error("the sync stream"))?;
    let mut upload = std::pin::pin!(upload);
    while let Some(chunk) = upload.next().await {
        let chunk = chunk.map_err(|e| BoxError::Upload(e.to_string()))?;
        if stream.write_all(&chunk).await.is_err() {
            break; // boxd refused the archive: its answer says why
        }
    }
    let _ = stream.shutdown().await;
    let mut answer = Vec::new();
    (&mut stream)
        .take(MAX_ANSWER)
        .read_to_end(&mut answer)
        .await
        .map_err(io_error("the sync stream"))?;
    let done: SyncDone = serde_json::from_slice(&answer).map_err(|e| LinkError::BadAnswer {
        target: Service::Sync.target().into_owned(),
        reason: e.to_string(),
    })?;
    if done.ok {
        Ok(Synced {
            files: done.files,
            bytes: done.bytes,
        })
    } else {
        Err(BoxError::SyncRefused(
            done.error
                .unwrap_or_else(|| "the archive was refused".into()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, BufReader, DuplexStream};

    /// A boxd's `sync` service at the other end of `stream`: reads the
    /// request line and the archive to the half-close, and answers `done`
    /// (`None`: the answer is made of what arrived). The line and the bytes.
    async fn boxd(stream: DuplexStream, done: Option<SyncDone>) -> (SyncRequest, Vec<u8>) {
        let (read, mut write) = tokio::io::split(stream);
        let mut read = BufReader::new(read);
        let mut line = String::new();
        read.read_line(&mut line).await.unwrap();
        let request: SyncRequest = serde_json::from_str(&line).unwrap();
        let mut tar = Vec::new();
        read.read_to_end(&mut tar).await.unwrap();
        let done = done.unwrap_or(SyncDone {
            ok: true,
            files: 1,
            bytes: tar.len() as u64,
            error: None,
        });
        write
            .write_all(&serde_json::to_vec(&done).unwrap())
            .await
            .unwrap();
        write.shutdown().await.unwrap();
        (request, tar)
    }

    fn chunks(parts: &[&'static [u8]]) -> impl Stream<Item = Result<Bytes, String>> {
        futures_util::stream::iter(
            parts
                .iter()
                .map(|p| Ok(Bytes::from_static(p)))
                .collect::<Vec<_>>(),
        )
    }

    #[tokio::test]
    async fn the_request_line_then_the_archive_reach_boxd_and_its_count_comes_back() {
        let (ours, theirs) = tokio::io::duplex(64);
        let served = tokio::spawn(boxd(theirs, None));
        let synced = sync_over(ours, "repo/sub", chunks(&[b"first ", b"second"]))
            .await
            .unwrap();
        let (request, tar) = served.await.unwrap();
        assert_eq!(request.dest, "repo/sub");
        assert_eq!(tar, b"first second");
        assert_eq!(
            synced,
            Synced {
                files: 1,
                bytes: 12
            }
        );
    }

    #[tokio::test]
    async fn an_archive_boxd_refuses_is_sync_refused_with_its_reason() {
        let (ours, theirs) = tokio::io::duplex(64);
        let refused = SyncDone {
            ok: false,
            files: 0,
            bytes: 0,
            error: Some("a link leaves the destination".into()),
        };
        tokio::spawn(boxd(theirs, Some(refused)));
        match sync_over(ours, "", chunks(&[b"tar"])).await {
            Err(BoxError::SyncRefused(reason)) => {
                assert_eq!(reason, "a link leaves the destination")
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn an_upload_that_breaks_is_an_upload_error() {
        let (ours, theirs) = tokio::io::duplex(64);
        tokio::spawn(boxd(theirs, None));
        let upload = futures_util::stream::iter(vec![
            Ok(Bytes::from_static(b"part")),
            Err("the client went away"),
        ]);
        match sync_over(ours, "", upload).await {
            Err(BoxError::Upload(reason)) => assert_eq!(reason, "the client went away"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn an_answer_that_is_not_sync_done_is_internal() {
        let (ours, theirs) = tokio::io::duplex(64);
        tokio::spawn(async move {
            let (mut read, mut write) = tokio::io::split(theirs);
            read.read_to_end(&mut Vec::new()).await.unwrap();
            write.write_all(b"not json").await.unwrap();
            write.shutdown().await.unwrap();
        });
        assert!(matches!(
            sync_over(ours, "", chunks(&[b"tar"])).await,
            Err(BoxError::Boxd(LinkError::BadAnswer { .. }))
        ));
    }
}
