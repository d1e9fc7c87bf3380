//! boxd, the agent inside every box, as a library: the binary (`main.rs`)
//! runs [`run`] in a box; the server's in-process tests serve fake boxes with
//! its real services ([`in_process`]), so the box API's stories run against
//! real `sh -lc`, real unpacking and real logs without booting a VM.
//!
//! In a box, its only link to the control plane is the virtio-serial port
//! `org.psbx.boxd`, carrying a wire session (docs/DESIGN.md §5); what it
//! listens on in the box is for the box itself (its DNS, the environment's
//! entries, the AWS role's credentials, `aws`).
//!
//! It prints `boxd ready on <port>` on its stdout (the console) once the port
//! is found, sets the box's network card up (`net`) and its DNS, then serves
//! the server's streams (`serve.rs`): info, health, configure, exec, sync,
//! processes, signal, logs, clock, one file each under `services/`. At claim it sets up the way to
//! the environment's private addresses (`privnet`), whose connections go out
//! as streams it opens on the current session (`uplink.rs`); restarted in the
//! same boot, it sets them up again from what it kept in `/run/psbx/`.
//! Where it keeps things, and whether it may change the machine, is
//! [`settings`]'s.

mod aws;
mod command;
mod exec;
pub mod in_process;
mod kept;
mod net;
mod port;
mod privnet;
mod serve;
pub mod services;
pub mod settings;
mod shot;
mod unpack;
mod uplink;

use std::time::Duration;

/// boxd's version, as `--version` prints it and `info` reports it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// boxd in a box: finds its port, then serves the channel forever.
pub fn run() -> std::io::Result<()> {
    let path = port::find(psbx_wire::BOXD_PORT_NAME, Duration::from_secs(60))?;
    println!("boxd ready on {}", path.display());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(serve::run(path))
}
