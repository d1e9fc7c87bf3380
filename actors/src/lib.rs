//! The psbx domain: the actor system (DESIGN.md §3: a HostSupervisor per host
//! and a BoxActor per box), the connector hub and sessions, the façades the
//! API calls (`Boxes`, `Environments`, `Secrets`) and the store, the only place
//! that touches diesel. The crate README maps the modules.
//!
//! The modules sit on floors, and none imports one above it (the README says
//! what is left around `environments/`): `ids`, `hypervisor` and `storage`;
//! `box_state`, `boxd_link` and `spec` (what the store and the actors both
//! need); `store`; `machine` (each box's lifecycle steps, below both
//! actors); `box_actor`; and `host`, `boxes`, `shots`, `reviews` on top. The
//! BoxActor reaches its host only through `box_actor::Hosting`.

pub mod blocking;
pub mod box_access;
pub mod box_actor;
pub mod box_role;
pub mod box_state;
pub mod box_urls;
pub mod boxd_link;
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
pub mod jail;
pub mod machine;
pub mod meter;
pub mod oidc;
pub mod public_url;
pub mod quota;
pub mod reviews;
pub mod secrets;
pub mod settings;
pub mod shots;
pub mod spec;
pub mod storage;
pub mod store;
pub mod wiring;
