//! `exec`, `processes`, `signal` and `logs`: a command run in the box, its
//! answer as [`Record`]s, and the background commands it leaves. boxd's
//! side: `boxd/src/services/{exec,processes,signal,logs}.rs`.

use super::EndpointFailure;
use serde::{Deserialize, Serialize};

/// A command to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecRequest {
    pub cmd: String,
    pub cwd: String,
    pub env: Vec<(String, String)>,
    /// Kill the whole process group after this many seconds (foreground, and
    /// background commands that were given one).
    pub timeout_s: Option<u64>,
    pub background: bool,
}

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// Connections to environment addresses the command made that failed
    /// (boxd's `privnet/owner.rs` says how they are told apart).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "super::failures"
    )]
    pub private_endpoint_errors: Vec<EndpointFailure>,
}

/// A background command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Process {
    pub pid: u32,
    pub cmd: String,
    pub started_at_unix: u64,
    pub exit: Option<Exit>,
    /// Its output (stdout and stderr together), a file in the box.
    #[serde(default)]
    pub log: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Signal {
    pub pid: u32,
    /// A signal number (15 TERM, 9 KILL, 2 INT, ...).
    pub signal: i32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Logs {
    pub pid: u32,
    /// Start at this byte of the log.
    #[serde(default)]
    pub offset: u64,
    /// Keep the stream open while the process runs, sending output as it is
    /// written; the stream ends once the process has exited and all of its
    /// output was sent.
    #[serde(default)]
    pub follow: bool,
}

/// One piece of an exec answer: a tag byte, a big-endian u32 length, the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// JSON `{"pid": n}`: the command runs (for a background one, that is all).
    Started(u32),
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Exit(Exit),
    /// The command could not be started.
    Failed(String),
}

/// The largest record body accepted.
pub const MAX_RECORD: usize = 1 << 20;

impl Record {
    pub fn encode(&self) -> Vec<u8> {
        let (tag, body): (u8, Vec<u8>) = match self {
            Self::Started(pid) => (b'S', pid.to_be_bytes().to_vec()),
            Self::Stdout(b) => (b'o', b.clone()),
            Self::Stderr(b) => (b'e', b.clone()),
            Self::Exit(exit) => (b'x', serde_json::to_vec(exit).unwrap_or_default()),
            Self::Failed(why) => (b'f', why.as_bytes().to_vec()),
        };
        tagged(tag, &body)
    }

    /// Takes one whole record off the front of `buf`, if there is one.
    /// Each call moves the rest of `buf`: to read many records from one
    /// buffer, use a [`RecordReader`].
    pub fn decode(buf: &mut Vec<u8>) -> Result<Option<Self>, String> {
        let Some((record, used)) = Self::parse(buf)? else {
            return Ok(None);
        };
        buf.drain(..used);
        Ok(Some(record))
    }

    /// The whole record at the start of `buf`, if there is one, and how many
    /// bytes it took.
    pub fn parse(buf: &[u8]) -> Result<Option<(Self, usize)>, String> {
        let Some((tag, body, used)) = untag(buf, "an exec record")? else {
            return Ok(None);
        };
        let record = match tag {
            b'S' => Self::Started(u32::from_be_bytes(
                body.try_into()
                    .map_err(|_| "bad started record".to_owned())?,
            )),
            b'o' => Self::Stdout(body.to_vec()),
            b'e' => Self::Stderr(body.to_vec()),
            b'x' => Self::Exit(serde_json::from_slice(body).map_err(|e| e.to_string())?),
            b'f' => Self::Failed(String::from_utf8_lossy(body).into_owned()),
            other => return Err(format!("unknown exec record {other}")),
        };
        Ok(Some((record, used)))
    }
}

/// A tag byte, a big-endian u32 length, the body: how exec [`Record`]s and
/// terminal inputs ([`super::PtyInput`]) are framed.
pub(super) fn tagged(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + body.len());
    out.push(tag);
    out.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// A tag, a body, and how many bytes the two took with their length.
pub(super) type Tagged<'a> = (u8, &'a [u8], usize);

/// The tag and body of the whole [`tagged`] piece at the start of `buf`, if
/// it is all there, and how many bytes it took; a body over [`MAX_RECORD`]
/// is an error naming `what` it was.
pub(super) fn untag<'a>(buf: &'a [u8], what: &str) -> Result<Option<Tagged<'a>>, String> {
    let [tag, l0, l1, l2, l3, ..] = *buf else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([l0, l1, l2, l3]) as usize;
    if len > MAX_RECORD {
        return Err(format!("{what} of {len} bytes is over the limit"));
    }
    Ok(buf.get(5..5 + len).map(|body| (tag, body, 5 + len)))
}

/// Reads records out of a byte stream that arrives in chunks. An index
/// cursor walks the buffer: records are parsed where they lie, and the
/// bytes already read are dropped once per [`RecordReader::extend`], not
/// once per record, so a chunk holding many small records costs time in
/// proportion to its length (draining one record at a time moved the rest
/// of the buffer each time: quadratic).
#[derive(Debug, Default)]
pub struct RecordReader {
    buf: Vec<u8>,
    at: usize,
}

impl RecordReader {
    /// Adds bytes read from the stream.
    pub fn extend(&mut self, bytes: &[u8]) {
        if self.at > 0 {
            self.buf.drain(..self.at);
            self.at = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole record, `None` until more bytes come.
    pub fn next_record(&mut self) -> Result<Option<Record>, String> {
        let Some(rest) = self.buf.get(self.at..) else {
            return Ok(None);
        };
        match Record::parse(rest)? {
            Some((record, used)) => {
                self.at += used;
                Ok(Some(record))
            }
            None => Ok(None),
        }
    }

    /// Bytes received and not yet taken as records.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.at
    }
}

/// The question of `processes` (no body): the answer lists the background
/// commands, running or ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessesRequest;

impl super::Call for ProcessesRequest {
    const SERVICE: super::Service = super::Service::Processes;
    type Answer = Vec<Process>;
}

impl super::Call for Signal {
    const SERVICE: super::Service = super::Service::Signal;
    type Answer = super::Done;
}

impl super::Streamed for ExecRequest {
    const SERVICE: super::Service = super::Service::Exec;
}

/// Answered with the log's bytes, not JSON.
impl super::Streamed for Logs {
    const SERVICE: super::Service = super::Service::Logs;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A boxd of an older image sends the failures as text: they read back
    /// the same, and one that does not is left out.
    #[test]
    fn exits_read_failures_as_json_or_as_old_text() {
        let old = r#"{"code":0,"signal":null,"timedOut":false,"privateEndpointErrors":["db.internal:5432 503 the connector \"aws\" is offline","garbage"]}"#;
        let exit: Exit = serde_json::from_str(old).unwrap();
        let texts: Vec<String> = exit
            .private_endpoint_errors
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            texts,
            ["db.internal:5432 503 the connector \"aws\" is offline"]
        );
        let json = serde_json::to_string(&exit).unwrap();
        assert_eq!(serde_json::from_str::<Exit>(&json).unwrap(), exit);
        let none: Exit =
            serde_json::from_str(r#"{"code":1,"signal":null,"timedOut":false}"#).unwrap();
        assert!(none.private_endpoint_errors.is_empty());
    }

    #[test]
    fn records_round_trip_in_pieces() {
        let records = vec![
            Record::Started(42),
            Record::Stdout(b"hello\n".to_vec()),
            Record::Stderr(vec![]),
            Record::Exit(Exit {
                code: Some(0),
                signal: None,
                timed_out: false,
                private_endpoint_errors: vec![EndpointFailure {
                    endpoint: "db.internal:5432".parse().unwrap(),
                    code: 503,
                    reason: "offline".into(),
                }],
            }),
            Record::Failed("no such dir".into()),
        ];
        let bytes: Vec<u8> = records.iter().flat_map(Record::encode).collect();
        let mut buf = Vec::new();
        let mut out = Vec::new();
        for b in bytes {
            buf.push(b);
            while let Some(r) = Record::decode(&mut buf).unwrap() {
                out.push(r);
            }
        }
        assert_eq!(out, records);
        let mut bad = vec![b'o', 0xff, 0xff, 0xff, 0xff];
        assert!(Record::decode(&mut bad).is_err());
        let mut unknown = vec![b'?', 0, 0, 0, 0];
        assert!(Record::decode(&mut unknown).is_err());
    }

    /// L6: many records in one buffer are read by the cursor, whatever the
    /// chunking, and what is taken is dropped.
    #[test]
    fn many_records_in_one_buffer_decode_with_a_cursor() {
        const N: usize = 100_000;
        let mut bytes = Vec::new();
        for i in 0..N {
            let record = if i % 2 == 0 {
                Record::Stdout(vec![b'o'; i % 7])
            } else {
                Record::Stderr(vec![b'e'; 1])
            };
            bytes.extend(record.encode());
        }
        bytes.extend(Record::Started(7).encode());
        // All in one chunk, then in odd-sized chunks across record bounds.
        for chunk in [bytes.len(), 4093, 3] {
            let mut reader = RecordReader::default();
            let mut count = 0;
            let mut last = None;
            for piece in bytes.chunks(chunk) {
                reader.extend(piece);
                while let Some(record) = reader.next_record().unwrap() {
                    if count < N {
                        let expected = if count % 2 == 0 { b'o' } else { b'e' };
                        match &record {
                            Record::Stdout(b) | Record::Stderr(b) => {
                                assert!(b.iter().all(|&c| c == expected), "{count}")
                            }
                            other => panic!("record {count}: {other:?}"),
                        }
                    }
                    count += 1;
                    last = Some(record);
                }
            }
            assert_eq!(count, N + 1, "chunks of {chunk}");
            assert_eq!(last, Some(Record::Started(7)));
            assert_eq!(reader.pending(), 0);
            reader.extend(&[]);
            assert!(reader.buf.is_empty(), "what was read is dropped");
        }
        let mut bad = RecordReader::default();
        bad.extend(&[b'o', 0xff, 0xff, 0xff, 0xff]);
        assert!(bad.next_record().is_err());
    }
}
