//! boxd, the agent inside every box. Its only link to the control plane is the
//! virtio-serial port `org.psbx.boxd`, carrying a wire session (DESIGN.md §5);
//! what it listens on in the box is for the box itself (its DNS, the
//! environment's entries, the AWS role's credentials, `aws`).
//!
//! It prints `boxd ready on <port>` on its stdout (the console) once the port
//! is found, sets the box's network card up (`net`) and its DNS, then serves
//! the server's streams (`serve.rs`): info, health, configure, exec, sync,
//! processes, signal, logs, clock, one file each under `services/`. At claim it sets up the way to
//! the environment's private addresses (`privnet`), whose connections go out
//! as streams it opens on the current session (`uplink.rs`); restarted in the
//! same boot, it sets them up again from what it kept in `/run/psbx/`.

mod aws;
mod command;
mod exec;
mod kept;
mod net;
mod port;
mod privnet;
mod serve;
mod services;
mod shot;
mod unpack;
mod uplink;

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
    println!("boxd ready on {}", path.display());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(serve::run(path))
}
