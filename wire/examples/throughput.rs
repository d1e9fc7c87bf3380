#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Temporary: one stream's throughput over a unix socket pair.
use psbx_wire::{Config, Hello, Role, Session};
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (x, y) = tokio::net::UnixStream::pair().unwrap();
        let (a, b) = tokio::join!(
            Session::over_io(x, Role::Client, Config::default(), Hello::new("a")),
            Session::over_io(y, Role::Server, Config::default(), Hello::new("b")),
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        let total: usize = 2 << 30;
        let (s, inc) = tokio::join!(a.open("x"), b.accept());
        let (mut s, mut r) = (s.unwrap(), inc.unwrap().accept());
        let start = Instant::now();
        let w = async {
            let buf = vec![7u8; 64 * 1024];
            let mut sent = 0;
            while sent < total {
                s.write_all(&buf).await.unwrap();
                sent += buf.len();
            }
            s.shutdown().await.unwrap();
        };
        let rd = async {
            let mut buf = vec![0u8; 64 * 1024];
            let mut got = 0;
            loop {
                let n = r.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                got += n;
            }
            got
        };
        let ((), got) = tokio::join!(w, rd);
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{} MiB in {:.2}s = {:.0} MiB/s; window {:?}",
            got >> 20,
            secs,
            (got >> 20) as f64 / secs,
            b.stats()
        );
    });
}
