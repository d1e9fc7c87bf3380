//! boxd, the agent inside every box. It speaks to the control plane only over the
//! virtio-serial channel `org.psbx.boxd`.
//!
//! The boxes issue gives it its first work (hello and health); until then it only
//! reports its version.

fn main() {
    println!("boxd {}", env!("CARGO_PKG_VERSION"));
}
