//! Copying bytes both ways between an accepted wire stream and a TCP
//! connection (the connector's to its target, boxd's `port:<n>` to a program
//! in the box), with half-close: when one side ends its writes, the other
//! side's write half is shut down, and the splice ends when both directions
//! are done. An error in either direction resets both: the wire stream with
//! `RST` and the TCP connection with a TCP RST (zero linger), so neither end
//! mistakes a broken stream for a finished one. Memory stays bounded: one
//! chunk in flight each way, the wire's credit holding back the sender.

use std::io;

use crate::Stream;
use crate::mux::{ReadHalf, WriteHalf};
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// The most bytes read from the target at once (and sent as one chunk):
/// the wire's frame split, so that an idle stream holds a small buffer
/// (a thousand open streams, 16 MiB).
const READ_CHUNK: usize = 16 * 1024;

/// What a splice moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Moved {
    /// From the wire stream to the TCP connection (its target).
    pub to_target: u64,
    /// From the TCP connection back to the wire stream.
    pub from_target: u64,
}

/// Copies until both directions are done; on an error, resets both sides
/// and returns it. The wire stream's reset reason is `<who>: <the error>`.
pub async fn splice(stream: Stream, tcp: TcpStream, who: &str) -> io::Result<Moved> {
    let (mut wire_read, mut wire_write) = stream.into_split();
    let (mut tcp_read, mut tcp_write) = tcp.into_split();
    let result = tokio::try_join!(
        to_target(&mut wire_read, &mut tcp_write),
        from_target(&mut tcp_read, &mut wire_write),
    );
    match result {
        Ok((to_target, from_target)) => Ok(Moved {
            to_target,
            from_target,
        }),
        Err(e) => {
            wire_write.reset(&format!("{who}: {e}"));
            if let Ok(tcp) = tcp_read.reunite(tcp_write) {
                // Closed with zero linger: the target sees a TCP RST.
                let _ = tcp.set_zero_linger();
            }
            Err(e)
        }
    }
}

/// Wire stream to target; at the stream's EOF (the peer's `FIN`) the
/// target's write half is shut down (TCP FIN).
async fn to_target(wire: &mut ReadHalf, tcp: &mut OwnedWriteHalf) -> io::Result<u64> {
    let mut moved = 0u64;
    while let Some(chunk) = wire.read_chunk().await? {
        tcp.write_all(&chunk).await?;
        moved += chunk.len() as u64;
    }
    tcp.shutdown().await?;
    Ok(moved)
}

/// Target to wire stream; at the target's EOF the stream is shut down
/// (`FIN`). Chunks are handed to the stream without another copy.
async fn from_target(tcp: &mut OwnedReadHalf, wire: &mut WriteHalf) -> io::Result<u64> {
    let mut moved = 0u64;
    let mut buf = BytesMut::new();
    loop {
        buf.reserve(READ_CHUNK);
        let n = tcp.read_buf(&mut buf).await?;
        if n == 0 {
            break;
        }
        moved += n as u64;
        wire.write_chunk(buf.split().freeze()).await?;
    }
    wire.shutdown().await?;
    Ok(moved)
}
