//! Running a command in a box through boxd's `exec` service: the request goes
//! out, the answer's records come back as events with secret values masked,
//! stdout and stderr each through their own mask stream. The caller reads the
//! events off the stream itself ([`Command::next`]).

use super::mask::{MaskStream, Masker};
use crate::boxd_link::LinkHandle;
use crate::error::BoxError;
use psbx_wire::boxd::{ExecRequest, Exit, Record, RecordReader, Streamed};
use psbx_wire::mux::Stream;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

/// A command started in a box: its events come from [`Command::next`], read
/// straight off boxd's stream (no task of its own, no channel).
pub struct Command {
    stream: Stream,
    /// For the strings boxd makes itself (a refusal, endpoint failures).
    masker: Arc<Masker>,
    background: bool,
    out: MaskStream,
    err: MaskStream,
    /// Bytes read and not yet decoded into a record.
    records: RecordReader,
    chunk: Vec<u8>,
    /// Events decoded and not yet handed out.
    pending: VecDeque<ExecEvent>,
    /// Why the command's stream went wrong, told after the events before it.
    failed: Option<BoxError>,
    /// No more events: the command exited (or, in the background, started).
    ended: bool,
}

impl Command {
    /// Opens boxd's exec stream and sends `request`.
    pub async fn start(
        link: &LinkHandle,
        request: &ExecRequest,
        masker: Arc<Masker>,
    ) -> Result<Self, BoxError> {
        let mut stream = link.open(ExecRequest::SERVICE, OPEN).await?;
        let body = serde_json::to_vec(request)?;
        stream.write_all(&body).await.map_err(lost)?;
        stream.shutdown().await.map_err(lost)?;
        Ok(Self {
            stream,
            background: request.background,
            out: MaskStream::new(masker.clone()),
            err: MaskStream::new(masker.clone()),
            masker,
            records: RecordReader::default(),
            chunk: vec![0u8; 64 * 1024],
            pending: VecDeque::new(),
            failed: None,
            ended: false,
        })
    }

    /// The command's next event (output masked), or `None` once it has exited
    /// (for a background command, once it started). The first event says
    /// whether the command started at all: boxd refusing it is an error.
    /// Cancel-safe: dropped before it answers, it loses nothing (its one
    /// await is the stream's read), so it can sit in a `select!`.
    pub async fn next(&mut self) -> Result<Option<ExecEvent>, BoxError> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Ok(Some(event));
            }
            if let Some(e) = self.failed.take() {
                self.ended = true;
                return Err(e);
            }
            if self.ended {
                return Ok(None);
            }
            let n = self.stream.read(&mut self.chunk).await.map_err(lost)?;
            if n == 0 {
                self.ended = true;
                return Err(BoxError::Internal(
                    "boxd ended the command's stream without an exit".into(),
                ));
            }
            self.records.extend(&self.chunk[..n]);
            self.decode();
        }
    }

    /// Turns the records read so far into events.
    fn decode(&mut self) {
        while !self.ended && self.failed.is_none() {
            let record = match self.records.next_record() {
                Ok(Some(record)) => record,
                Ok(None) => return,
                Err(e) => {
                    self.failed = Some(BoxError::Internal(e));
                    return;
                }
            };
            match record {
                Record::Started(pid) => {
                    self.pending.push_back(ExecEvent::Started(pid));
                    self.ended = self.background;
                }
                Record::Stdout(b) => self.pending.push_back(ExecEvent::Stdout(self.out.push(&b))),
                Record::Stderr(b) => self.pending.push_back(ExecEvent::Stderr(self.err.push(&b))),
                Record::Failed(why) => {
                    self.failed = Some(BoxError::CannotRun(self.masker.mask(&why)))
                }
                Record::Exit(mut exit) => {
                    self.masker.mask_failures(&mut exit.private_endpoint_errors);
                    self.pending.extend([
                        ExecEvent::Stdout(self.out.finish()),
                        ExecEvent::Stderr(self.err.finish()),
                        ExecEvent::Exit(exit),
                    ]);
                    self.ended = true;
                }
            }
        }
    }
}

/// The stream to boxd broke while the command ran.
fn lost(e: std::io::Error) -> BoxError {
    BoxError::ChannelLost(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::boxd_link::BoxdLink;
    use psbx_wire::Hello;
    use psbx_wire::boxd::BoxInfo;
    use psbx_wire::mux::{Config, Role, Session};
    use tokio::net::UnixListener;

    /// A boxd on the link's connection: `info` answers a hello, `exec`
    /// answers the records `records` gives for the request.
    async fn boxd(listener: UnixListener, records: fn(&ExecRequest) -> Vec<Record>) {
        let (stream, _) = listener.accept().await.unwrap();
        let session = Session::over_io(stream, Role::Server, Config::default(), Hello::new("test"))
            .await
            .unwrap();
        let info = BoxInfo {
            protocol: psbx_wire::PROTOCOL_VERSION,
            version: "test".into(),
            boot_id: "boot".into(),
            features: vec![],
        };
        while let Some(incoming) = session.accept().await {
            let exec = incoming.target() == "exec";
            let mut stream = incoming.accept();
            let mut body = Vec::new();
            let _ = stream.read_to_end(&mut body).await;
            let answer = if exec {
                let request: ExecRequest = serde_json::from_slice(&body).unwrap();
                // All in one write: the events must come out one by one.
                records(&request).iter().flat_map(Record::encode).collect()
            } else {
                serde_json::to_vec(&info).unwrap()
            };
            let _ = stream.write_all(&answer).await;
            let _ = stream.shutdown().await;
        }
    }

    fn request(cmd: &str, background: bool) -> ExecRequest {
        ExecRequest {
            cmd: cmd.into(),
            cwd: "/".into(),
            env: vec![],
            timeout_s: None,
            background,
        }
    }

    fn exit(code: i32) -> Exit {
        Exit {
            code: Some(code),
            signal: None,
            timed_out: false,
            private_endpoint_errors: vec![],
        }
    }

    async fn events(command: &mut Command) -> Result<Vec<ExecEvent>, BoxError> {
        let mut seen = Vec::new();
        while let Some(event) = command.next().await? {
            seen.push(event);
        }
        Ok(seen)
    }

    #[actix_rt::test]
    async fn events_come_masked_one_by_one_and_end_at_the_exit_or_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("boxd.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        tokio::spawn(boxd(listener, |request| match request.cmd.as_str() {
            "refused" => vec![Record::Failed("no such directory".into())],
            "late failure" => vec![
                Record::Started(7),
                Record::Stdout(b"partial".to_vec()),
                Record::Failed("broke".into()),
            ],
            _ => vec![
                Record::Started(7),
                Record::Stdout(b"the hunter2".to_vec()),
                Record::Stdout(b"-secret is out".to_vec()),
                Record::Stderr(b"warn".to_vec()),
                Record::Exit(exit(3)),
            ],
        }));
        let link = BoxdLink::open(socket, None);
        let handle = link.handle();
        handle.hello(Duration::from_secs(5)).await.unwrap();
        let masker = Arc::new(Masker::new(["hunter2-secret"]));

        let mut command = Command::start(&handle, &request("run", false), masker.clone())
            .await
            .unwrap();
        let seen = events(&mut command).await.unwrap();
        let out: Vec<u8> = seen
            .iter()
            .filter_map(|e| match e {
                ExecEvent::Stdout(b) => Some(b.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(seen.first(), Some(&ExecEvent::Started(7)));
        assert_eq!(seen.last(), Some(&ExecEvent::Exit(exit(3))));
        assert!(
            seen.contains(&ExecEvent::Stderr(b"warn".to_vec())),
            "{seen:?}"
        );
        let out = String::from_utf8(out).unwrap();
        assert!(!out.contains("hunter2") && out.contains("is out"), "{out}");
        assert_eq!(
            command.next().await.unwrap(),
            None,
            "nothing after the exit"
        );

        // In the background, the start is the end.
        let mut command = Command::start(&handle, &request("run", true), masker.clone())
            .await
            .unwrap();
        assert_eq!(events(&mut command).await.unwrap(), [ExecEvent::Started(7)]);

        // A refusal is the first answer; a later failure comes after the
        // events before it.
        let mut command = Command::start(&handle, &request("refused", false), masker.clone())
            .await
            .unwrap();
        assert!(
            matches!(command.next().await, Err(BoxError::CannotRun(m)) if m == "no such directory")
        );
        let mut command = Command::start(&handle, &request("late failure", false), masker)
            .await
            .unwrap();
        assert_eq!(command.next().await.unwrap(), Some(ExecEvent::Started(7)));
        assert!(matches!(
            command.next().await.unwrap(),
            Some(ExecEvent::Stdout(_))
        ));
        assert!(matches!(command.next().await, Err(BoxError::CannotRun(m)) if m == "broke"));
    }
}
