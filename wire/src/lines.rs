//! One JSON object per line: the carriage of control messages until the frame
//! codec lands. A line longer than [`MAX_LINE`] is an error, never an
//! unbounded buffer.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The longest line accepted, newline excluded.
pub const MAX_LINE: usize = 64 * 1024;

#[derive(Debug)]
pub enum LineError {
    TooLong,
    Malformed(String),
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooLong => write!(f, "a control line is longer than {MAX_LINE} bytes"),
            Self::Malformed(e) => write!(f, "a control line is not a valid message: {e}"),
        }
    }
}

impl std::error::Error for LineError {}

/// The message as one line, newline included.
pub fn encode<T: Serialize>(message: &T) -> Vec<u8> {
    // Serialising these plain types cannot fail; an empty object keeps the
    // stream well-formed if it ever did.
    let mut line = serde_json::to_vec(message).unwrap_or_else(|_| b"{}".to_vec());
    line.push(b'\n');
    line
}

/// Splits complete lines off the front of `buf` and decodes them; an
/// incomplete last line stays in `buf` for the next read.
pub fn decode_all<T: DeserializeOwned>(buf: &mut Vec<u8>) -> Result<Vec<T>, LineError> {
    let mut out = Vec::new();
    while let Some(end) = buf.iter().position(|b| *b == b'\n') {
        let line: Vec<u8> = buf.drain(..=end).collect();
        let text = &line[..line.len() - 1];
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        out.push(serde_json::from_slice(text).map_err(|e| LineError::Malformed(e.to_string()))?);
    }
    if buf.len() > MAX_LINE {
        return Err(LineError::TooLong);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{FromBoxd, ToBoxd};

    #[test]
    fn lines_round_trip_across_split_reads() {
        let mut bytes = encode(&ToBoxd::Ping { seq: 7 });
        bytes.extend(encode(&ToBoxd::HelloRequest));
        let (a, b) = bytes.split_at(5);
        let mut buf = a.to_vec();
        assert!(decode_all::<ToBoxd>(&mut buf).unwrap().is_empty());
        buf.extend_from_slice(b);
        assert_eq!(
            decode_all::<ToBoxd>(&mut buf).unwrap(),
            vec![ToBoxd::Ping { seq: 7 }, ToBoxd::HelloRequest]
        );
        assert!(buf.is_empty());
    }

    #[test]
    fn garbage_and_overlong_lines_are_errors() {
        let mut buf = b"{\"type\":\"nope\"}\n".to_vec();
        assert!(matches!(
            decode_all::<FromBoxd>(&mut buf),
            Err(LineError::Malformed(_))
        ));
        let mut buf = vec![b'x'; MAX_LINE + 1];
        assert!(matches!(
            decode_all::<FromBoxd>(&mut buf),
            Err(LineError::TooLong)
        ));
    }
}
