//! The psbx domain: the actor system (DESIGN.md §3) and the store, the only
//! place that touches diesel.
//!
//! Only the store and the typed ids exist yet; the actors come with the boxes,
//! environments and connector issues.

pub mod blocking;
pub mod box_;
pub mod boxes;
pub mod boxnet;
pub mod connectors;
pub mod duration;
pub mod environments;
pub mod error;
pub mod exec;
pub mod host;
pub mod hypervisor;
pub mod ids;
pub mod image;
pub mod secrets;
pub mod settings;
pub mod spec;
pub mod store;
