//! Driving boxes through libvirt: typed domain descriptions rendered to XML,
//! qcow2 overlays on read-only base images, and the lifecycle calls.
//!
//! Empty until the boxes issue fills it; it is the only crate that may depend on `virt`.
