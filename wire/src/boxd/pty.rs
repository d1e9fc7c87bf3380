//! `pty`: a login shell on a new pseudo-terminal (the takeover page), its
//! size line and the framed input that follows. boxd's side:
//! `boxd/src/services/pty.rs`.

use serde::{Deserialize, Serialize};

/// The first line of a `pty` stream: the terminal's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtyRequest {
    pub cols: u16,
    pub rows: u16,
}

/// What the server sends on a `pty` stream after the [`PtyRequest`] line:
/// framed like [`super::Record`] (a tag byte, a big-endian u32 length, the body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PtyInput {
    /// Bytes typed at the terminal (`i`).
    Input(Vec<u8>),
    /// The terminal's new size (`r`: columns then rows, big-endian u16s).
    Resize { cols: u16, rows: u16 },
}

impl PtyInput {
    pub fn encode(&self) -> Vec<u8> {
        let (tag, body): (u8, Vec<u8>) = match self {
            Self::Input(b) => (b'i', b.clone()),
            Self::Resize { cols, rows } => {
                let mut body = cols.to_be_bytes().to_vec();
                body.extend_from_slice(&rows.to_be_bytes());
                (b'r', body)
            }
        };
        super::exec::tagged(tag, &body)
    }

    /// The whole input at the start of `buf`, if there is one, and how many
    /// bytes it took.
    pub fn parse(buf: &[u8]) -> Result<Option<(Self, usize)>, String> {
        let Some((tag, body, used)) = super::exec::untag(buf, "a terminal input")? else {
            return Ok(None);
        };
        let input = match (tag, body) {
            (b'i', _) => Self::Input(body.to_vec()),
            (b'r', [c0, c1, r0, r1]) => Self::Resize {
                cols: u16::from_be_bytes([*c0, *c1]),
                rows: u16::from_be_bytes([*r0, *r1]),
            },
            (b'r', _) => return Err("a resize is two u16s".to_owned()),
            (other, _) => return Err(format!("unknown terminal input {other}")),
        };
        Ok(Some((input, used)))
    }
}

impl super::Streamed for PtyRequest {
    const SERVICE: super::Service = super::Service::Pty;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_inputs_round_trip() {
        let inputs = [
            PtyInput::Input("é\x03".as_bytes().to_vec()),
            PtyInput::Resize {
                cols: 120,
                rows: 40,
            },
        ];
        let mut buf = Vec::new();
        for i in &inputs {
            buf.extend(i.encode());
        }
        let mut at = 0;
        for i in &inputs {
            let (got, used) = PtyInput::parse(&buf[at..]).unwrap().unwrap();
            assert_eq!(&got, i);
            at += used;
        }
        assert_eq!(PtyInput::parse(&buf[at..]).unwrap(), None);
        assert!(PtyInput::parse(b"r\0\0\0\x01x").is_err());
    }
}
