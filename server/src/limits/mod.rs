//! Limits the server sets on requests: body sizes (`body`).

pub mod body;
