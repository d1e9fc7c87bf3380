//! The web app under `/app`: the pages a person uses in a browser (boxes ready for
//! them, reviews, secrets), signed in with the browser session the OAuth sign-in
//! opens ([`session`]). [`pages`] is their route table; [`crate::app`] mounts it.
//! Apart from `app.rs` (the application's assembly) so that "app" names one thing.

mod assets;
mod boxes;
mod layout;
pub mod pages;
mod reviews;
mod secrets;
pub mod session;
