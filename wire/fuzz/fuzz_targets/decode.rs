//! Arbitrary bytes into both decoders: as one WebSocket message (one frame)
//! and as a length-prefixed byte stream fed in uneven pieces. Nothing may
//! panic, the buffer may not grow past one frame, and every frame decoded
//! must encode back to exactly the bytes it came from.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use psbx_wire::codec::{FrameCodec, LENGTH_PREFIX};
use psbx_wire::frame::{Frame, HEADER_LEN};
use tokio_util::codec::{Decoder, Encoder};

const MAX: usize = 4096;

fuzz_target!(|data: &[u8]| {
    // One message, one frame.
    if let Ok(frame) = Frame::decode(Bytes::copy_from_slice(data), MAX) {
        assert_eq!(
            encoded(&frame),
            data,
            "{frame:?} does not encode back to its bytes"
        );
    }

    // A byte stream in pieces of 1..=17 bytes (from the first byte).
    let step = data.first().map_or(1, |b| usize::from(*b % 17) + 1);
    let mut codec = FrameCodec::new(MAX);
    let mut buf = BytesMut::new();
    let mut consumed = 0;
    for piece in data.chunks(step) {
        buf.extend_from_slice(piece);
        loop {
            let before = buf.len();
            match codec.decode(&mut buf) {
                Ok(Some(frame)) => {
                    let len = before - buf.len();
                    let mut again = BytesMut::new();
                    FrameCodec::new(MAX)
                        .encode(frame.clone(), &mut again)
                        .expect("a decoded frame encodes");
                    assert_eq!(&again[..], &data[consumed..consumed + len], "{frame:?}");
                    consumed += len;
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
        // Never more than one frame (and one piece) waits in the buffer.
        assert!(buf.len() < LENGTH_PREFIX + HEADER_LEN + MAX + step);
    }
    let _ = codec.decode_eof(&mut buf);
});

fn encoded(frame: &Frame) -> Vec<u8> {
    frame
        .check(MAX)
        .expect("a decoded frame passes the encoder's check");
    let mut out = BytesMut::new();
    frame.encode(&mut out);
    out.to_vec()
}
