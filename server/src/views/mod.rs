//! The API's request and answer shapes (DTOs and views), apart from the
//! handlers that take and give them: the REST routes (`routes/`) and the MCP
//! tools (`mcp/`) both use them, so a box, a process or a review reads the
//! same on either front, and neither front imports the other. A view is
//! built from the actors' values (`From`, `new`); a request body checks
//! itself into the actors' types (`start_spec`, `WireBody::change`).
//!
//! `patterns` and `whole` hold what the bodies' fields are checked against:
//! the OpenAPI document's text patterns, and its integers; `paths` the ids in
//! the routes' paths, as the document lists them.

pub mod boxes;
pub mod environments;
pub mod exec;
pub mod paths;
pub mod patterns;
pub mod reviews;
pub mod shots;
pub mod takeover;
pub mod whole;
pub mod wire;
