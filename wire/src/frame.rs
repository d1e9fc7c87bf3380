//! One frame of the wire protocol (DESIGN.md §5): the frame types, their byte
//! layout, and the strict decoder every received frame goes through.
//!
//! A frame is `stream: u32 BE | type: u8 | payload`. How frames are delimited
//! (a length prefix on a byte stream, one WebSocket message each) is the
//! business of [`crate::codec`]. Payloads by type:
//!
//! | type | stream | payload |
//! |---|---|---|
//! | `OPEN` (1) | ≠ 0 | target, UTF-8, 1..=[`MAX_TARGET_LEN`] bytes |
//! | `OPEN_OK` (2) | ≠ 0 | empty |
//! | `OPEN_ERR` (3) | ≠ 0 | code `u16 BE` (400..=599) + reason, UTF-8, ≤ [`MAX_REASON_LEN`] |
//! | `DATA` (4) | ≠ 0 | 1 or more bytes |
//! | `CREDIT` (5) | ≠ 0 | `u32 BE` > 0: bytes the receiver may send more |
//! | `FIN` (6) | ≠ 0 | empty: the sender half-closes |
//! | `RST` (7) | ≠ 0 | reason, UTF-8, ≤ [`MAX_REASON_LEN`]: both directions abort |
//! | `PING` (8), `PONG` (9) | 0 | opaque `u64 BE` |
//! | `GOAWAY` (10) | 0 | reason, UTF-8, ≤ [`MAX_REASON_LEN`] |
//! | `CONTROL` (11) | 0 | 1 or more bytes of JSON (typed by the session's users) |
//!
//! Every payload is also bounded by the receiver's maximum frame size; the
//! decoder refuses anything else with a [`FrameError`], never a panic.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Bytes before the payload: stream id (4) and type (1).
pub const HEADER_LEN: usize = 5;

/// The longest `OPEN` target, in bytes (`tcp:<host>:<port>` fits easily).
pub const MAX_TARGET_LEN: usize = 1024;

/// The longest reason of `OPEN_ERR`, `RST` and `GOAWAY`, in bytes.
pub const MAX_REASON_LEN: usize = 1024;

/// The codes an `OPEN_ERR` carries, shared by every end that opens or
/// refuses streams (boxd, the server, the connector). FORBIDDEN, BAD_GATEWAY
/// and UNAVAILABLE are the ones users see in the box's log.
pub mod code {
    /// The target is malformed, or names nothing the peer takes.
    pub const BAD_REQUEST: u16 = 400;
    /// The address is no longer listed on the connection.
    pub const FORBIDDEN: u16 = 403;
    /// boxd has no service of that name.
    pub const NOT_FOUND: u16 = 404;
    /// The session is at its limit of concurrent streams.
    pub const TOO_MANY_STREAMS: u16 = 429;
    /// The connector could not reach the target.
    pub const BAD_GATEWAY: u16 = 502;
    /// The connector of the connection is offline (the reason names the
    /// connection), or the session is draining or not accepting streams.
    pub const UNAVAILABLE: u16 = 503;
    /// The other end did not answer the `OPEN` in time.
    pub const TIMEOUT: u16 = 504;
}

/// Why a stream is refused: what an `OPEN_ERR` carries, a [`code`] and a
/// reason a person can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: u16,
    pub reason: String,
}

impl Refusal {
    pub fn new(code: u16, reason: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.into(),
        }
    }
}

/// The type byte of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameType {
    Open = 1,
    OpenOk = 2,
    OpenErr = 3,
    Data = 4,
    Credit = 5,
    Fin = 6,
    Rst = 7,
    Ping = 8,
    Pong = 9,
    GoAway = 10,
    Control = 11,
}

impl FrameType {
    /// The type of a type byte, if it is one.
    pub fn from_u8(byte: u8) -> Option<Self> {
        Some(match byte {
            1 => Self::Open,
            2 => Self::OpenOk,
            3 => Self::OpenErr,
            4 => Self::Data,
            5 => Self::Credit,
            6 => Self::Fin,
            7 => Self::Rst,
            8 => Self::Ping,
            9 => Self::Pong,
            10 => Self::GoAway,
            11 => Self::Control,
            _ => return None,
        })
    }

    /// Whether frames of this type belong to the session (stream 0) rather
    /// than to one stream.
    pub fn is_session(self) -> bool {
        matches!(self, Self::Ping | Self::Pong | Self::GoAway | Self::Control)
    }
}

/// A frame, decoded and validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Open {
        stream: u32,
        target: String,
    },
    OpenOk {
        stream: u32,
    },
    OpenErr {
        stream: u32,
        code: u16,
        reason: String,
    },
    Data {
        stream: u32,
        data: Bytes,
    },
    Credit {
        stream: u32,
        bytes: u32,
    },
    Fin {
        stream: u32,
    },
    Rst {
        stream: u32,
        reason: String,
    },
    Ping {
        opaque: u64,
    },
    Pong {
        opaque: u64,
    },
    GoAway {
        reason: String,
    },
    Control {
        payload: Bytes,
    },
}

/// Why bytes are not a valid frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("a frame of {len} bytes is shorter than the {HEADER_LEN}-byte header")]
    Truncated { len: usize },
    #[error("unknown frame type {0}")]
    UnknownType(u8),
    #[error("a {kind:?} frame payload of {len} bytes exceeds the maximum of {max}")]
    TooLarge {
        kind: Option<FrameType>,
        len: usize,
        max: usize,
    },
    #[error("a {kind:?} frame on stream {stream}: it belongs on stream 0")]
    NotSessionStream { kind: FrameType, stream: u32 },
    #[error("a {0:?} frame on stream 0: it belongs on a stream")]
    SessionStream(FrameType),
    #[error("a malformed {kind:?} frame: {why}")]
    Malformed { kind: FrameType, why: &'static str },
}

impl Frame {
    /// The stream the frame belongs to (0 for session frames).
    pub fn stream(&self) -> u32 {
        match self {
            Self::Open { stream, .. }
            | Self::OpenOk { stream }
            | Self::OpenErr { stream, .. }
            | Self::Data { stream, .. }
            | Self::Credit { stream, .. }
            | Self::Fin { stream }
            | Self::Rst { stream, .. } => *stream,
            Self::Ping { .. } | Self::Pong { .. } | Self::GoAway { .. } | Self::Control { .. } => 0,
        }
    }

    /// The frame's type.
    pub fn frame_type(&self) -> FrameType {
        match self {
            Self::Open { .. } => FrameType::Open,
            Self::OpenOk { .. } => FrameType::OpenOk,
            Self::OpenErr { .. } => FrameType::OpenErr,
            Self::Data { .. } => FrameType::Data,
            Self::Credit { .. } => FrameType::Credit,
            Self::Fin { .. } => FrameType::Fin,
            Self::Rst { .. } => FrameType::Rst,
            Self::Ping { .. } => FrameType::Ping,
            Self::Pong { .. } => FrameType::Pong,
            Self::GoAway { .. } => FrameType::GoAway,
            Self::Control { .. } => FrameType::Control,
        }
    }

    /// The payload length in bytes.
    pub fn payload_len(&self) -> usize {
        match self {
            Self::Open { target, .. } => target.len(),
            Self::OpenOk { .. } | Self::Fin { .. } => 0,
            Self::OpenErr { reason, .. } => 2 + reason.len(),
            Self::Data { data, .. } => data.len(),
            Self::Credit { .. } => 4,
            Self::Rst { reason, .. } | Self::GoAway { reason } => reason.len(),
            Self::Ping { .. } | Self::Pong { .. } => 8,
            Self::Control { payload } => payload.len(),
        }
    }

    /// The encoded length in bytes: header and payload.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN + self.payload_len()
    }

    /// Appends the encoded frame (header and payload, no length prefix) to
    /// `dst`. Encode only frames that [`Frame::check`] accepts: the peer
    /// refuses anything else.
    pub fn encode(&self, dst: &mut BytesMut) {
        dst.reserve(self.encoded_len());
        dst.put_u32(self.stream());
        dst.put_u8(self.frame_type() as u8);
        match self {
            Self::Open { target, .. } => dst.put_slice(target.as_bytes()),
            Self::OpenOk { .. } | Self::Fin { .. } => {}
            Self::OpenErr { code, reason, .. } => {
                dst.put_u16(*code);
                dst.put_slice(reason.as_bytes());
            }
            Self::Data { data, .. } => dst.put_slice(data),
            Self::Credit { bytes, .. } => dst.put_u32(*bytes),
            Self::Rst { reason, .. } | Self::GoAway { reason } => dst.put_slice(reason.as_bytes()),
            Self::Ping { opaque } | Self::Pong { opaque } => dst.put_u64(*opaque),
            Self::Control { payload } => dst.put_slice(payload),
        }
    }

    /// Refuses a frame the decoder would refuse, so that it is never sent.
    pub fn check(&self, max_payload: usize) -> Result<(), FrameError> {
        let kind = self.frame_type();
        let len = self.payload_len();
        if len > max_payload {
            return Err(FrameError::TooLarge {
                kind: Some(kind),
                len,
                max: max_payload,
            });
        }
        check_stream(kind, self.stream())?;
        match self {
            Self::Open { target, .. } => check_target(target),
            Self::OpenErr { code, reason, .. } => {
                check_code(*code)?;
                check_reason(kind, reason)
            }
            Self::Data { data, .. } => check_nonempty(kind, data),
            Self::Credit { bytes, .. } => check_credit(*bytes),
            Self::Rst { reason, .. } | Self::GoAway { reason } => check_reason(kind, reason),
            Self::Control { payload } => check_nonempty(kind, payload),
            Self::OpenOk { .. } | Self::Fin { .. } | Self::Ping { .. } | Self::Pong { .. } => {
                Ok(())
            }
        }
    }

    /// Decodes one frame (header and payload, no length prefix). Data and
    /// control payloads are slices of `src`: nothing is copied.
    pub fn decode(mut src: Bytes, max_payload: usize) -> Result<Frame, FrameError> {
        if src.len() < HEADER_LEN {
            return Err(FrameError::Truncated { len: src.len() });
        }
        let stream = src.get_u32();
        let byte = src.get_u8();
        let kind = FrameType::from_u8(byte).ok_or(FrameError::UnknownType(byte))?;
        if src.len() > max_payload {
            return Err(FrameError::TooLarge {
                kind: Some(kind),
                len: src.len(),
                max: max_payload,
            });
        }
        check_stream(kind, stream)?;
        let frame = match kind {
            FrameType::Open => {
                let target = utf8(kind, src)?;
                check_target(&target)?;
                Self::Open { stream, target }
            }
            FrameType::OpenOk => {
                check_empty(kind, &src)?;
                Self::OpenOk { stream }
            }
            FrameType::OpenErr => {
                if src.len() < 2 {
                    return Err(FrameError::Malformed {
                        kind,
                        why: "no code",
                    });
                }
                let code = src.get_u16();
                check_code(code)?;
                let reason = utf8(kind, src)?;
                check_reason(kind, &reason)?;
                Self::OpenErr {
                    stream,
                    code,
                    reason,
                }
            }
            FrameType::Data => {
                check_nonempty(kind, &src)?;
                Self::Data { stream, data: src }
            }
            FrameType::Credit => {
                if src.len() != 4 {
                    return Err(FrameError::Malformed {
                        kind,
                        why: "payload is not 4 bytes",
                    });
                }
                let bytes = src.get_u32();
                check_credit(bytes)?;
                Self::Credit { stream, bytes }
            }
            FrameType::Fin => {
                check_empty(kind, &src)?;
                Self::Fin { stream }
            }
            FrameType::Rst => {
                let reason = utf8(kind, src)?;
                check_reason(kind, &reason)?;
                Self::Rst { stream, reason }
            }
            FrameType::Ping | FrameType::Pong => {
                if src.len() != 8 {
                    return Err(FrameError::Malformed {
                        kind,
                        why: "payload is not 8 bytes",
                    });
                }
                let opaque = src.get_u64();
                if kind == FrameType::Ping {
                    Self::Ping { opaque }
                } else {
                    Self::Pong { opaque }
                }
            }
            FrameType::GoAway => {
                let reason = utf8(kind, src)?;
                check_reason(kind, &reason)?;
                Self::GoAway { reason }
            }
            FrameType::Control => {
                check_nonempty(kind, &src)?;
                Self::Control { payload: src }
            }
        };
        Ok(frame)
    }
}

/// `reason` cut to at most [`MAX_REASON_LEN`] bytes on a character boundary,
/// so that any text can go into an `OPEN_ERR`, `RST` or `GOAWAY`.
pub fn clip_reason(reason: &str) -> String {
    if reason.len() <= MAX_REASON_LEN {
        return reason.to_owned();
    }
    let mut end = MAX_REASON_LEN;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    reason[..end].to_owned()
}

/// Refuses a target an `OPEN` may not carry.
pub fn check_target(target: &str) -> Result<(), FrameError> {
    let kind = FrameType::Open;
    if target.is_empty() {
        return Err(FrameError::Malformed {
            kind,
            why: "empty target",
        });
    }
    if target.len() > MAX_TARGET_LEN {
        return Err(FrameError::Malformed {
            kind,
            why: "target longer than 1024 bytes",
        });
    }
    Ok(())
}

fn check_stream(kind: FrameType, stream: u32) -> Result<(), FrameError> {
    match (kind.is_session(), stream) {
        (true, 0) | (false, 1..) => Ok(()),
        (true, _) => Err(FrameError::NotSessionStream { kind, stream }),
        (false, 0) => Err(FrameError::SessionStream(kind)),
    }
}

fn check_code(code: u16) -> Result<(), FrameError> {
    if (400..=599).contains(&code) {
        Ok(())
    } else {
        Err(FrameError::Malformed {
            kind: FrameType::OpenErr,
            why: "code outside 400..=599",
        })
    }
}

fn check_reason(kind: FrameType, reason: &str) -> Result<(), FrameError> {
    if reason.len() > MAX_REASON_LEN {
        return Err(FrameError::Malformed {
            kind,
            why: "reason longer than 1024 bytes",
        });
    }
    Ok(())
}

fn check_credit(bytes: u32) -> Result<(), FrameError> {
    if bytes == 0 {
        return Err(FrameError::Malformed {
            kind: FrameType::Credit,
            why: "zero credit",
        });
    }
    Ok(())
}

fn check_empty(kind: FrameType, payload: &[u8]) -> Result<(), FrameError> {
    if !payload.is_empty() {
        return Err(FrameError::Malformed {
            kind,
            why: "payload must be empty",
        });
    }
    Ok(())
}

fn check_nonempty(kind: FrameType, payload: &[u8]) -> Result<(), FrameError> {
    if payload.is_empty() {
        return Err(FrameError::Malformed {
            kind,
            why: "empty payload",
        });
    }
    Ok(())
}

fn utf8(kind: FrameType, payload: Bytes) -> Result<String, FrameError> {
    // Text is short: refuse a long one before copying it.
    let (max, why) = match kind {
        FrameType::Open => (MAX_TARGET_LEN, "target longer than 1024 bytes"),
        _ => (MAX_REASON_LEN, "reason longer than 1024 bytes"),
    };
    if payload.len() > max {
        return Err(FrameError::Malformed { kind, why });
    }
    String::from_utf8(payload.to_vec()).map_err(|_| FrameError::Malformed {
        kind,
        why: "text is not UTF-8",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 64 * 1024;

    fn every_type() -> Vec<Frame> {
        vec![
            Frame::Open {
                stream: 1,
                target: "tcp:db.internal:5432".into(),
            },
            Frame::OpenOk { stream: 2 },
            Frame::OpenErr {
                stream: 3,
                code: code::UNAVAILABLE,
                reason: "connector of conn_x is offline".into(),
            },
            Frame::OpenErr {
                stream: 3,
                code: code::FORBIDDEN,
                reason: String::new(),
            },
            Frame::Data {
                stream: u32::MAX,
                data: Bytes::from_static(b"hello"),
            },
            Frame::Credit {
                stream: 5,
                bytes: 256 * 1024,
            },
            Frame::Fin { stream: 6 },
            Frame::Rst {
                stream: 7,
                reason: "stream dropped".into(),
            },
            Frame::Rst {
                stream: 7,
                reason: String::new(),
            },
            Frame::Ping { opaque: 42 },
            Frame::Pong { opaque: u64::MAX },
            Frame::GoAway {
                reason: "server draining".into(),
            },
            Frame::Control {
                payload: Bytes::from_static(br#"{"type":"health"}"#),
            },
        ]
    }

    fn encoded(frame: &Frame) -> Bytes {
        let mut buf = BytesMut::new();
        frame.encode(&mut buf);
        buf.freeze()
    }

    fn raw(stream: u32, kind: u8, payload: &[u8]) -> Bytes {
        let mut buf = BytesMut::new();
        buf.put_u32(stream);
        buf.put_u8(kind);
        buf.put_slice(payload);
        buf.freeze()
    }

    #[test]
    fn every_type_round_trips() {
        for frame in every_type() {
            frame.check(MAX).unwrap();
            let bytes = encoded(&frame);
            assert_eq!(bytes.len(), frame.encoded_len());
            assert_eq!(Frame::decode(bytes, MAX).unwrap(), frame);
        }
    }

    #[test]
    fn data_is_a_slice_of_the_input() {
        let bytes = encoded(&Frame::Data {
            stream: 1,
            data: Bytes::from_static(b"payload"),
        });
        let start = bytes.as_ptr() as usize;
        let Frame::Data { data, .. } = Frame::decode(bytes, MAX).unwrap() else {
            panic!("not data")
        };
        assert_eq!(data.as_ptr() as usize, start + HEADER_LEN);
    }

    #[test]
    fn truncated_frames_are_refused() {
        for len in 0..HEADER_LEN {
            assert_eq!(
                Frame::decode(Bytes::from(vec![0; len]), MAX),
                Err(FrameError::Truncated { len })
            );
        }
        // Truncated payloads of fixed-size types.
        let credit = encoded(&Frame::Credit {
            stream: 1,
            bytes: 9,
        });
        assert!(matches!(
            Frame::decode(credit.slice(..7), MAX),
            Err(FrameError::Malformed { .. })
        ));
        let ping = encoded(&Frame::Ping { opaque: 9 });
        assert!(matches!(
            Frame::decode(ping.slice(..12), MAX),
            Err(FrameError::Malformed { .. })
        ));
        assert!(matches!(
            Frame::decode(raw(1, 3, &[1]), MAX),
            Err(FrameError::Malformed { .. })
        ));
    }

    #[test]
    fn unknown_types_are_refused() {
        for kind in [0u8, 12, 200, 255] {
            assert_eq!(
                Frame::decode(raw(1, kind, b"x"), MAX),
                Err(FrameError::UnknownType(kind))
            );
        }
    }

    #[test]
    fn oversize_payloads_are_refused() {
        let data = raw(1, FrameType::Data as u8, &[7; 101]);
        assert!(matches!(
            Frame::decode(data, 100),
            Err(FrameError::TooLarge {
                len: 101,
                max: 100,
                ..
            })
        ));
        let control = Frame::Control {
            payload: Bytes::from(vec![b'1'; 101]),
        };
        assert!(matches!(
            control.check(100),
            Err(FrameError::TooLarge { .. })
        ));
    }

    #[test]
    fn stream_zero_rules_hold() {
        for kind in [1u8, 2, 3, 4, 5, 6, 7] {
            assert!(matches!(
                Frame::decode(raw(0, kind, b"xx"), MAX),
                Err(FrameError::SessionStream(_))
            ));
        }
        for kind in [8u8, 9, 10, 11] {
            assert!(matches!(
                Frame::decode(raw(3, kind, &[0; 8]), MAX),
                Err(FrameError::NotSessionStream { stream: 3, .. })
            ));
        }
    }

    #[test]
    fn malformed_payloads_are_refused() {
        let cases: Vec<(u32, FrameType, Vec<u8>)> = vec![
            (1, FrameType::Open, vec![]),
            (1, FrameType::Open, vec![b'a'; MAX_TARGET_LEN + 1]),
            (1, FrameType::Open, vec![0xff, 0xfe]),
            (1, FrameType::OpenOk, vec![1]),
            (1, FrameType::OpenErr, vec![0, 200]),
            (1, FrameType::OpenErr, vec![2, 88]),
            (1, FrameType::OpenErr, [&[1, 147][..], &[0xc3][..]].concat()),
            (
                1,
                FrameType::OpenErr,
                [&[1, 147][..], &[b'r'; MAX_REASON_LEN + 1][..]].concat(),
            ),
            (1, FrameType::Data, vec![]),
            (1, FrameType::Credit, vec![0, 0, 0, 0]),
            (1, FrameType::Credit, vec![0, 0, 0, 0, 1]),
            (1, FrameType::Fin, vec![0]),
            (1, FrameType::Rst, vec![0x80]),
            (1, FrameType::Rst, vec![b'r'; MAX_REASON_LEN + 1]),
            (0, FrameType::Ping, vec![0; 7]),
            (0, FrameType::Pong, vec![0; 9]),
            (0, FrameType::GoAway, vec![0xed, 0xa0, 0x80]),
            (0, FrameType::Control, vec![]),
        ];
        for (stream, kind, payload) in cases {
            let result = Frame::decode(raw(stream, kind as u8, &payload), MAX);
            assert!(
                matches!(result, Err(FrameError::Malformed { .. })),
                "{kind:?} {payload:?}: {result:?}"
            );
        }
    }

    #[test]
    fn check_refuses_what_decode_refuses() {
        assert!(
            Frame::Open {
                stream: 1,
                target: String::new()
            }
            .check(MAX)
            .is_err()
        );
        assert!(
            Frame::Open {
                stream: 0,
                target: "exec".into()
            }
            .check(MAX)
            .is_err()
        );
        assert!(
            Frame::Credit {
                stream: 1,
                bytes: 0
            }
            .check(MAX)
            .is_err()
        );
        assert!(
            Frame::OpenErr {
                stream: 1,
                code: 200,
                reason: String::new()
            }
            .check(MAX)
            .is_err()
        );
        assert!(
            Frame::Data {
                stream: 1,
                data: Bytes::new()
            }
            .check(MAX)
            .is_err()
        );
        assert!(
            Frame::Rst {
                stream: 1,
                reason: "r".repeat(MAX_REASON_LEN + 1)
            }
            .check(MAX)
            .is_err()
        );
    }

    #[test]
    fn clip_reason_keeps_characters_whole() {
        let long = "é".repeat(MAX_REASON_LEN);
        let clipped = clip_reason(&long);
        assert!(clipped.len() <= MAX_REASON_LEN);
        assert_eq!(clipped.len(), MAX_REASON_LEN);
        assert_eq!(clip_reason("short"), "short");
        let odd = format!("x{}", "é".repeat(MAX_REASON_LEN));
        assert_eq!(clip_reason(&odd).len(), MAX_REASON_LEN - 1);
    }
}
