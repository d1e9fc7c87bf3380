//! Signing a browser in, as the OAuth pages (`oauth/`) and the web app
//! (`web/`) both do it: the cookies they set ([`cookies`]), where a form
//! POST may come from ([`origin`]) and its double-submit token ([`csrf`]),
//! the session a cookie names ([`session`]), and where a browser may be sent
//! back to afterwards ([`return_path`]).
//!
//! Both fronts build on these and neither imports the other's sign-in: the
//! pages that sign in (the OAuth sign-in and approval page, the one-time
//! link, the app's sign-in page and its `Signed` extractor) stay with the
//! front that shows them, since they render its pages and count its
//! throttles.

pub mod cookies;
pub mod csrf;
pub mod origin;
pub mod return_path;
pub mod session;
