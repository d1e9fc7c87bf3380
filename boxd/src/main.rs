//! boxd, the agent inside every box. Its only link to the control plane is the
//! virtio-serial port `org.psbx.boxd`; it has no network listener.
//!
//! This first part says hello (protocol and boxd versions, boot id, features)
//! and answers health pings. It prints `boxd ready` on its stdout (the console)
//! once the port is open.

#[allow(dead_code)] // used once exec travels on the wire
mod exec;
mod health;
mod port;
#[allow(dead_code)] // used once exec and sync travel on the wire
mod unpack;

use psbx_wire::control::{FromBoxd, Hello, ToBoxd};
use psbx_wire::{PROTOCOL_VERSION, lines};
use std::io::{Read, Write};
use std::time::Duration;

fn main() {
    if std::env::args().any(|a| a == "--version") {
        println!("boxd {}", env!("CARGO_PKG_VERSION"));
        return;
    }
    if let Err(e) = run() {
        eprintln!("boxd: {e}");
        std::process::exit(1);
    }
}

fn run() -> std::io::Result<()> {
    let path = port::find(psbx_wire::BOXD_PORT_NAME, Duration::from_secs(60))?;
    let mut port = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)?;
    let hello = FromBoxd::Hello(Hello {
        protocol: PROTOCOL_VERSION,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        boot_id: health::boot_id(),
        features: vec!["health".to_owned()],
    });
    println!("boxd ready on {}", path.display());
    port.write_all(&lines::encode(&hello))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = port.read(&mut chunk)?;
        if n == 0 {
            // The host side is not connected (server restarting, box thawing):
            // wait for it to come back.
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        buf.extend_from_slice(&chunk[..n]);
        let messages = match lines::decode_all::<ToBoxd>(&mut buf) {
            Ok(messages) => messages,
            Err(e) => {
                eprintln!("boxd: dropping input: {e}");
                buf.clear();
                continue;
            }
        };
        for message in messages {
            let answer = match message {
                ToBoxd::HelloRequest => hello.clone(),
                ToBoxd::Ping { seq } => FromBoxd::Pong {
                    seq,
                    health: health::read(),
                },
            };
            port.write_all(&lines::encode(&answer))?;
        }
    }
}
