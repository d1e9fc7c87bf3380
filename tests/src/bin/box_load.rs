//! `psbx-box-load`: the load generator of `scripts/bench box-urls`, run on the
//! host against a box URL and inside the box against the same server, so both
//! figures come from one client.
//!
//! * `psbx-box-load get URL [--host H] [--requests N] [--connections C]`:
//!   N small GETs over C keep-alive HTTP/1.1 connections; prints
//!   `{"requests", "seconds", "rps", "p50Ms", "p99Ms", "errors"}`.
//! * `psbx-box-load download URL [--host H]`: one GET read to its end;
//!   prints `{"bytes", "seconds", "mibPerS"}`.
//!
//! `URL` is where to connect (`http://127.0.0.1:8080/path`); `--host` is the
//! Host header to send (a box URL's host), by default the URL's own.

use bytes::Bytes;
use clap::{Parser, Subcommand};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

#[derive(Parser)]
#[command(name = "psbx-box-load", about = "Load for psbx's box URL benchmark")]
struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand)]
enum What {
    /// Many small GETs over keep-alive connections.
    Get {
        url: url::Url,
        #[arg(long)]
        host: Option<String>,
        #[arg(long, default_value_t = 2000)]
        requests: usize,
        #[arg(long, default_value_t = 4)]
        connections: usize,
    },
    /// One GET read to its end.
    Download {
        url: url::Url,
        #[arg(long)]
        host: Option<String>,
    },
}

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
enum LoadError {
    #[error("{0} has no host and port")]
    Address(url::Url),
    #[error("connecting: {0}")]
    Connect(std::io::Error),
    #[error("HTTP: {0}")]
    Http(#[from] hyper::Error),
    #[error("the request: {0}")]
    Request(#[from] hyper::http::Error),
    #[error("the answer was {0}")]
    Status(u16),
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let result = match Args::parse().what {
        What::Get {
            url,
            host,
            requests,
            connections,
        } => get(url, host, requests, connections.max(1)).await,
        What::Download { url, host } => download(url, host).await,
    };
    match result {
        Ok(report) => {
            println!("{report}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("psbx-box-load: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

async fn connect(url: &url::Url) -> Result<Sender, LoadError> {
    let addr = url
        .socket_addrs(|| None)
        .ok()
        .and_then(|a| a.into_iter().next())
        .ok_or_else(|| LoadError::Address(url.clone()))?;
    let tcp = TcpStream::connect(addr).await.map_err(LoadError::Connect)?;
    let _ = tcp.set_nodelay(true);
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

fn request(url: &url::Url, host: &str) -> Result<hyper::Request<Empty<Bytes>>, LoadError> {
    let path = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_owned(),
    };
    Ok(hyper::Request::get(path)
        .header("host", host)
        .body(Empty::new())?)
}

fn host_of(url: &url::Url, host: Option<String>) -> String {
    host.unwrap_or_else(|| {
        let name = url.host_str().unwrap_or_default();
        match url.port() {
            Some(port) => format!("{name}:{port}"),
            None => name.to_owned(),
        }
    })
}

/// One connection's share of the requests: their latencies.
async fn one_connection(
    url: url::Url,
    host: String,
    count: usize,
) -> Result<(Vec<Duration>, usize), LoadError> {
    let mut sender = connect(&url).await?;
    let (mut times, mut errors) = (Vec::with_capacity(count), 0);
    for _ in 0..count {
        let started = Instant::now();
        sender.ready().await?;
        let res = sender.send_request(request(&url, &host)?).await?;
        let ok = res.status().is_success();
        res.into_body().collect().await?;
        times.push(started.elapsed());
        if !ok {
            errors += 1;
        }
    }
    Ok((times, errors))
}

async fn get(
    url: url::Url,
    host: Option<String>,
    requests: usize,
    connections: usize,
) -> Result<serde_json::Value, LoadError> {
    let host = host_of(&url, host);
    // A warm-up request, not counted.
    one_connection(url.clone(), host.clone(), 1).await?;
    let started = Instant::now();
    let tasks: Vec<_> = (0..connections)
        .map(|i| {
            let share = requests / connections + usize::from(i < requests % connections);
            tokio::spawn(one_connection(url.clone(), host.clone(), share))
        })
        .collect();
    let (mut times, mut errors) = (Vec::with_capacity(requests), 0);
    for task in tasks {
        match task.await {
            Ok(Ok((t, e))) => {
                times.extend(t);
                errors += e;
            }
            Ok(Err(e)) => return Err(e),
            Err(e) => return Err(LoadError::Connect(std::io::Error::other(e.to_string()))),
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    times.sort();
    let at = |q: f64| {
        let i = ((times.len() as f64 * q).ceil() as usize).clamp(1, times.len().max(1)) - 1;
        times.get(i).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    Ok(serde_json::json!({
        "requests": times.len(),
        "seconds": seconds,
        "rps": times.len() as f64 / seconds,
        "p50Ms": at(0.50),
        "p99Ms": at(0.99),
        "errors": errors,
    }))
}

async fn download(url: url::Url, host: Option<String>) -> Result<serde_json::Value, LoadError> {
    let host = host_of(&url, host);
    let mut sender = connect(&url).await?;
    let started = Instant::now();
    let res = sender.send_request(request(&url, &host)?).await?;
    if !res.status().is_success() {
        return Err(LoadError::Status(res.status().as_u16()));
    }
    let mut body = res.into_body();
    let mut bytes = 0u64;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            bytes += data.len() as u64;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(serde_json::json!({
        "bytes": bytes,
        "seconds": seconds,
        "mibPerS": bytes as f64 / seconds / (1 << 20) as f64,
    }))
}
