//! The two carriages of frames: a length-prefixed byte stream (the
//! virtio-serial channel, a unix socket) and one WebSocket binary message per
//! frame (connectors).
//!
//! On a byte stream each frame is preceded by its length (`u32 BE`, header
//! and payload). [`FrameCodec`] refuses a length above the maximum frame size
//! as soon as it has read the prefix, before reserving anything for it.
//! [`MessageSource`] and [`MessageSink`] adapt a stream and a sink of binary
//! messages to frames.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures_util::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadHalf, WriteHalf};
use tokio_util::codec::{Decoder, Encoder, FramedRead, FramedWrite};

use crate::frame::{Frame, FrameError, HEADER_LEN};

/// Bytes of the length prefix on a byte stream.
pub const LENGTH_PREFIX: usize = 4;

/// Why the frames of a carriage stopped.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("the byte stream ended inside a frame ({0} bytes left over)")]
    TruncatedAtEof(usize),
    #[error("transport: {0}")]
    Io(#[from] io::Error),
}

/// Length-prefixed frames on a byte stream, for `tokio_util`'s `Framed*`.
#[derive(Debug, Clone)]
pub struct FrameCodec {
    max_payload: usize,
}

impl FrameCodec {
    /// A codec that refuses payloads over `max_payload` bytes, both ways.
    pub fn new(max_payload: usize) -> Self {
        Self { max_payload }
    }
}

impl Decoder for FrameCodec {
    type Item = Frame;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, CodecError> {
        let Some(prefix) = src.get(..LENGTH_PREFIX) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
        if len < HEADER_LEN {
            return Err(FrameError::Truncated { len }.into());
        }
        if len - HEADER_LEN > self.max_payload {
            return Err(FrameError::TooLarge {
                kind: None,
                len: len - HEADER_LEN,
                max: self.max_payload,
            }
            .into());
        }
        let total = LENGTH_PREFIX + len;
        if src.len() < total {
            // Room for the rest of this frame (bounded above), so that it is
            // read in as few calls as possible.
            src.reserve(total - src.len());
            return Ok(None);
        }
        src.advance(LENGTH_PREFIX);
        let frame = src.split_to(len).freeze();
        Ok(Some(Frame::decode(frame, self.max_payload)?))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, CodecError> {
        match self.decode(src)? {
            Some(frame) => Ok(Some(frame)),
            None if src.is_empty() => Ok(None),
            None => Err(CodecError::TruncatedAtEof(src.len())),
        }
    }
}

impl Encoder<Frame> for FrameCodec {
    type Error = CodecError;

    fn encode(&mut self, frame: Frame, dst: &mut BytesMut) -> Result<(), CodecError> {
        frame.check(self.max_payload)?;
        let len = frame.encoded_len();
        dst.reserve(LENGTH_PREFIX + len);
        // `len` is at most the payload maximum plus the header: it fits.
        dst.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
        frame.encode(dst);
        Ok(())
    }
}

/// The frame stream read from a byte stream.
pub type IoSource<T> = FramedRead<ReadHalf<T>, FrameCodec>;
/// The frame sink writing to a byte stream.
pub type IoSink<T> = FramedWrite<WriteHalf<T>, FrameCodec>;

/// Splits a byte stream into its frame stream and frame sink.
pub fn framed_io<T: AsyncRead + AsyncWrite>(io: T, max_payload: usize) -> (IoSource<T>, IoSink<T>) {
    let (read, write) = tokio::io::split(io);
    (
        FramedRead::new(read, FrameCodec::new(max_payload)),
        FramedWrite::new(write, FrameCodec::new(max_payload)),
    )
}

/// Encodes a frame as one WebSocket binary message.
pub fn encode_message(frame: &Frame, max_payload: usize) -> Result<Bytes, FrameError> {
    frame.check(max_payload)?;
    let mut buf = BytesMut::with_capacity(frame.encoded_len());
    frame.encode(&mut buf);
    Ok(buf.freeze())
}

/// Decodes one WebSocket binary message as a frame (data is not copied).
pub fn decode_message(message: Bytes, max_payload: usize) -> Result<Frame, FrameError> {
    Frame::decode(message, max_payload)
}

/// Frames from a stream of binary messages (one frame each), such as the
/// binary messages of a WebSocket.
#[derive(Debug)]
pub struct MessageSource<St> {
    inner: St,
    max_payload: usize,
}

impl<St> MessageSource<St> {
    pub fn new(inner: St, max_payload: usize) -> Self {
        Self { inner, max_payload }
    }
}

impl<St, E> Stream for MessageSource<St>
where
    St: Stream<Item = Result<Bytes, E>> + Unpin,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Item = Result<Frame, CodecError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let max = self.max_payload;
        Poll::Ready(match ready!(Pin::new(&mut self.inner).poll_next(cx)) {
            None => None,
            Some(Err(e)) => Some(Err(CodecError::Io(io::Error::other(e)))),
            Some(Ok(message)) => Some(decode_message(message, max).map_err(CodecError::from)),
        })
    }
}

/// Frames into a sink of binary messages (one frame each). Messages are cut
/// from blocks of [`MessageSink::BLOCK`] bytes, so that small frames do not
/// cost an allocation each.
#[derive(Debug)]
pub struct MessageSink<Si> {
    inner: Si,
    max_payload: usize,
    block: BytesMut,
}

impl<Si> MessageSink<Si> {
    /// The size of the blocks messages are cut from.
    pub const BLOCK: usize = 64 * 1024;

    pub fn new(inner: Si, max_payload: usize) -> Self {
        Self {
            inner,
            max_payload,
            block: BytesMut::new(),
        }
    }
}

impl<Si, E> Sink<Frame> for MessageSink<Si>
where
    Si: Sink<Bytes, Error = E> + Unpin,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Error = CodecError;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), CodecError>> {
        Pin::new(&mut self.inner)
            .poll_ready(cx)
            .map_err(|e| CodecError::Io(io::Error::other(e)))
    }

    fn start_send(mut self: Pin<&mut Self>, frame: Frame) -> Result<(), CodecError> {
        frame.check(self.max_payload)?;
        let len = frame.encoded_len();
        let this = &mut *self;
        if this.block.capacity() < len {
            // A fresh block; the old one lives on in the messages cut from it.
            this.block = BytesMut::with_capacity(len.max(Self::BLOCK));
        }
        frame.encode(&mut this.block);
        let message = this.block.split().freeze();
        Pin::new(&mut this.inner)
            .start_send(message)
            .map_err(|e| CodecError::Io(io::Error::other(e)))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), CodecError>> {
        Pin::new(&mut self.inner)
            .poll_flush(cx)
            .map_err(|e| CodecError::Io(io::Error::other(e)))
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), CodecError>> {
        Pin::new(&mut self.inner)
            .poll_close(cx)
            .map_err(|e| CodecError::Io(io::Error::other(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::FrameType;

    const MAX: usize = 64 * 1024;

    fn prefixed(frames: &[Frame]) -> BytesMut {
        let mut codec = FrameCodec::new(MAX);
        let mut buf = BytesMut::new();
        for frame in frames {
            codec.encode(frame.clone(), &mut buf).unwrap();
        }
        buf
    }

    fn sample() -> Vec<Frame> {
        vec![
            Frame::Open {
                stream: 1,
                target: "exec".into(),
            },
            Frame::Data {
                stream: 1,
                data: Bytes::from(vec![9; 20_000]),
            },
            Frame::Credit {
                stream: 2,
                bytes: 1,
            },
            Frame::Control {
                payload: Bytes::from_static(b"{}"),
            },
            Frame::Fin { stream: 1 },
        ]
    }

    #[test]
    fn frames_round_trip_in_one_buffer() {
        let mut buf = prefixed(&sample());
        let mut codec = FrameCodec::new(MAX);
        let mut out = Vec::new();
        while let Some(frame) = codec.decode(&mut buf).unwrap() {
            out.push(frame);
        }
        assert_eq!(out, sample());
        assert!(buf.is_empty());
        assert!(codec.decode_eof(&mut buf).unwrap().is_none());
    }

    #[test]
    fn frames_round_trip_byte_by_byte() {
        let all = prefixed(&sample());
        let mut codec = FrameCodec::new(MAX);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for byte in all.iter() {
            buf.put_u8(*byte);
            while let Some(frame) = codec.decode(&mut buf).unwrap() {
                out.push(frame);
            }
        }
        assert_eq!(out, sample());
    }

    #[test]
    fn an_oversize_length_is_refused_before_allocating() {
        let mut codec = FrameCodec::new(MAX);
        let mut buf = BytesMut::with_capacity(16);
        buf.put_u32(u32::MAX);
        buf.put_slice(&[0, 0, 0, 1, FrameType::Data as u8]);
        let capacity = buf.capacity();
        let result = codec.decode(&mut buf);
        assert!(
            matches!(result, Err(CodecError::Frame(FrameError::TooLarge { .. }))),
            "{result:?}"
        );
        assert_eq!(
            buf.capacity(),
            capacity,
            "the decoder reserved room for a refused frame"
        );

        // One byte over the limit is refused too; exactly the limit is not.
        let mut over = BytesMut::new();
        over.put_u32((HEADER_LEN + MAX + 1) as u32);
        assert!(codec.decode(&mut over).is_err());
        let mut at = BytesMut::new();
        at.put_u32((HEADER_LEN + MAX) as u32);
        assert!(codec.decode(&mut at).unwrap().is_none());
    }

    #[test]
    fn a_length_shorter_than_the_header_is_refused() {
        for len in 0..HEADER_LEN as u32 {
            let mut buf = BytesMut::new();
            buf.put_u32(len);
            buf.put_slice(&[0; 8]);
            let result = FrameCodec::new(MAX).decode(&mut buf);
            assert!(
                matches!(result, Err(CodecError::Frame(FrameError::Truncated { .. }))),
                "{result:?}"
            );
        }
    }

    #[test]
    fn a_frame_cut_by_the_end_of_the_stream_is_refused() {
        let all = prefixed(&sample());
        let mut buf = BytesMut::from(&all[..all.len() - 1]);
        let mut codec = FrameCodec::new(MAX);
        let mut result = Ok(None);
        for _ in 0..sample().len() {
            result = codec.decode_eof(&mut buf);
        }
        assert!(
            matches!(result, Err(CodecError::TruncatedAtEof(_))),
            "{result:?}"
        );
    }

    #[test]
    fn a_malformed_frame_inside_a_valid_length_is_refused() {
        let mut buf = BytesMut::new();
        buf.put_u32(6);
        buf.put_slice(&[0, 0, 0, 1, 99, 0]);
        assert!(matches!(
            FrameCodec::new(MAX).decode(&mut buf),
            Err(CodecError::Frame(FrameError::UnknownType(99)))
        ));
    }

    #[test]
    fn the_encoder_refuses_invalid_frames() {
        let mut buf = BytesMut::new();
        let mut codec = FrameCodec::new(8);
        assert!(
            codec
                .encode(
                    Frame::Data {
                        stream: 1,
                        data: Bytes::from(vec![0; 9])
                    },
                    &mut buf
                )
                .is_err()
        );
        assert!(codec.encode(Frame::Fin { stream: 0 }, &mut buf).is_err());
        assert!(buf.is_empty());
    }

    #[test]
    fn messages_round_trip() {
        for frame in sample() {
            let message = encode_message(&frame, MAX).unwrap();
            assert_eq!(decode_message(message, MAX).unwrap(), frame);
        }
        assert!(
            encode_message(
                &Frame::Credit {
                    stream: 1,
                    bytes: 0
                },
                MAX
            )
            .is_err()
        );
    }
}
