//! `scripts/bench wire`: throughput and latency of streams through the
//! multiplexer, over an in-memory duplex and over loopback TCP, against plain
//! TCP connections doing the same.
//!
//! usage: bench [RUNS] (default 5). Prints, per case, the median and the
//! min–max of RUNS runs.

use psbx_wire::Hello;
use psbx_wire::mux::{Config, Role, Session};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Bytes moved per throughput run, over all streams.
const TOTAL: usize = 256 << 20;
const CHUNK: usize = 64 << 10;
/// Round trips per latency run.
const TRIPS: usize = 5000;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

async fn pair_duplex() -> Result<(Session, Session), BoxError> {
    let (a, b) = tokio::io::duplex(1 << 20);
    sessions(a, b).await
}

async fn pair_tcp() -> Result<(Session, Session), BoxError> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (a, b) = tokio::join!(TcpStream::connect(addr), listener.accept());
    let (a, b) = (a?, b?.0);
    a.set_nodelay(true)?;
    b.set_nodelay(true)?;
    sessions(a, b).await
}

async fn sessions<A, B>(a: A, b: B) -> Result<(Session, Session), BoxError>
where
    A: AsyncRead + AsyncWrite + Send + 'static,
    B: AsyncRead + AsyncWrite + Send + 'static,
{
    let (x, y) = tokio::join!(
        Session::over_io(
            a,
            Role::Client,
            Config::default(),
            Hello::new("bench client")
        ),
        Session::over_io(
            b,
            Role::Server,
            Config::default(),
            Hello::new("bench server")
        ),
    );
    Ok((x?, y?))
}

/// Reads a stream to its end; returns the bytes read.
async fn drain(mut s: impl AsyncRead + Unpin) -> usize {
    let mut buf = vec![0u8; CHUNK];
    let mut n = 0;
    while let Ok(k) = s.read(&mut buf).await {
        if k == 0 {
            break;
        }
        n += k;
    }
    n
}

/// The bytes the reader tasks read, together.
async fn total(readers: Vec<tokio::task::JoinHandle<usize>>) -> usize {
    let mut sum = 0;
    for r in readers {
        sum += r.await.unwrap_or(0);
    }
    sum
}

/// Sends back every 64-byte message until the peer goes away.
async fn echo(mut s: impl AsyncRead + AsyncWrite + Unpin) {
    let mut buf = [0u8; 64];
    while s.read_exact(&mut buf).await.is_ok() {
        if s.write_all(&buf).await.is_err() {
            break;
        }
    }
}

/// Writes `bytes` bytes and half-closes.
async fn fill(mut s: impl AsyncWrite + Unpin, bytes: usize) {
    let chunk = vec![7u8; CHUNK];
    let mut left = bytes;
    while left > 0 {
        let k = left.min(CHUNK);
        if s.write_all(&chunk[..k]).await.is_err() {
            break;
        }
        left -= k;
    }
    let _ = s.shutdown().await;
}

/// Sends TOTAL bytes split over `streams` streams; returns MB/s.
async fn mux_throughput(
    client: &Session,
    server: &Session,
    streams: usize,
) -> Result<f64, BoxError> {
    let per = TOTAL / streams;
    let server = server.clone();
    let sink = tokio::spawn(async move {
        let mut readers = Vec::new();
        for _ in 0..streams {
            let Some(incoming) = server.accept().await else {
                break;
            };
            readers.push(tokio::spawn(drain(incoming.accept())));
        }
        total(readers).await
    });
    let started = Instant::now();
    let mut writers = Vec::new();
    for _ in 0..streams {
        writers.push(tokio::spawn(fill(client.open("bench").await?, per)));
    }
    for w in writers {
        w.await?;
    }
    let got = sink.await?;
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(got, per * streams, "bytes lost");
    Ok(got as f64 / secs / 1e6)
}

async fn tcp_throughput(streams: usize) -> Result<f64, BoxError> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let per = TOTAL / streams;
    let sink = tokio::spawn(async move {
        let mut readers = Vec::new();
        for _ in 0..streams {
            let Ok((s, _)) = listener.accept().await else {
                break;
            };
            readers.push(tokio::spawn(drain(s)));
        }
        total(readers).await
    });
    let started = Instant::now();
    let mut writers = Vec::new();
    for _ in 0..streams {
        writers.push(tokio::spawn(fill(TcpStream::connect(addr).await?, per)));
    }
    for w in writers {
        w.await?;
    }
    let got = sink.await?;
    Ok(got as f64 / started.elapsed().as_secs_f64() / 1e6)
}

/// 64-byte request/response round trips on one stream; returns (p50, p99) in µs.
async fn mux_latency(client: &Session, server: &Session) -> Result<(f64, f64), BoxError> {
    let server = server.clone();
    tokio::spawn(async move {
        if let Some(incoming) = server.accept().await {
            echo(incoming.accept()).await;
        }
    });
    let s = client.open("echo").await?;
    round_trips(s).await
}

async fn tcp_latency() -> Result<(f64, f64), BoxError> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        if let Ok((s, _)) = listener.accept().await {
            let _ = s.set_nodelay(true);
            echo(s).await;
        }
    });
    let s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    round_trips(s).await
}

async fn round_trips(mut s: impl AsyncRead + AsyncWrite + Unpin) -> Result<(f64, f64), BoxError> {
    let mut buf = [1u8; 64];
    let mut times = Vec::with_capacity(TRIPS);
    for _ in 0..TRIPS {
        let t = Instant::now();
        s.write_all(&buf).await?;
        s.read_exact(&mut buf).await?;
        times.push(t.elapsed());
    }
    times.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    Ok((us(times[TRIPS / 2]), us(times[TRIPS * 99 / 100])))
}

fn summary(name: &str, unit: &str, mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    let median = samples[samples.len() / 2];
    println!(
        "{name:<44} median {median:>9.1} {unit:<5} min {:>9.1}  max {:>9.1}  (n={})",
        samples[0],
        samples[samples.len() - 1],
        samples.len()
    );
    median
}

fn main() -> Result<(), BoxError> {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5)
        .max(5);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        println!("# wire bench: {TOTAL} bytes per throughput run, {TRIPS} round trips of 64 bytes per latency run, {runs} runs");
        let mut medians = std::collections::BTreeMap::new();
        for streams in [1usize, 16] {
            let mut plain = Vec::new();
            let mut duplex = Vec::new();
            let mut tcp = Vec::new();
            for _ in 0..runs {
                plain.push(tcp_throughput(streams).await?);
                let (c, s) = pair_duplex().await?;
                duplex.push(mux_throughput(&c, &s, streams).await?);
                let (c, s) = pair_tcp().await?;
                tcp.push(mux_throughput(&c, &s, streams).await?);
            }
            let p = summary(&format!("plain TCP, {streams} connection(s)"), "MB/s", plain);
            let d = summary(&format!("mux over in-memory duplex, {streams} stream(s)"), "MB/s", duplex);
            let t = summary(&format!("mux over loopback TCP, {streams} stream(s)"), "MB/s", tcp);
            medians.insert(format!("{streams:02} duplex/plain"), d / p);
            medians.insert(format!("{streams:02} tcp/plain"), t / p);
        }
        let (mut plain50, mut plain99, mut mux50, mut mux99) = (vec![], vec![], vec![], vec![]);
        for _ in 0..runs {
            let (a, b) = tcp_latency().await?;
            plain50.push(a);
            plain99.push(b);
            let (c, s) = pair_tcp().await?;
            let (a, b) = mux_latency(&c, &s).await?;
            mux50.push(a);
            mux99.push(b);
        }
        let p50 = summary("plain TCP round trip p50", "µs", plain50);
        summary("plain TCP round trip p99", "µs", plain99);
        let m50 = summary("mux over loopback TCP round trip p50", "µs", mux50);
        summary("mux over loopback TCP round trip p99", "µs", mux99);
        medians.insert("latency p50 mux/plain".into(), m50 / p50);
        for (k, v) in medians {
            println!("ratio {k:<26} {v:.2}");
        }
        Ok(())
    })
}
