//! The psbx control plane (binary `psbx`): configuration, the embedded database,
//! the HTTP application and the command line. A library so that the HTTP tests
//! drive the very app the binary serves.

pub mod app;
pub mod auth;
pub mod aws;
pub mod banner;
pub mod box_urls;
pub mod client_addr;
pub mod cluster;
pub mod commands;
pub mod config;
pub mod database;
pub mod embedded_pg;
pub mod error;
pub mod host;
pub mod ids;
pub mod limits;
pub mod logging;
pub mod mcp;
pub mod metrics;
pub mod oauth;
pub mod pack;
pub mod proxy;
pub mod request_span;
pub mod routes;
pub mod server_info;
pub mod shared_dir;
pub mod shell;
pub mod signin;
pub mod skill;
pub mod tls;
pub mod views;
pub mod web;
