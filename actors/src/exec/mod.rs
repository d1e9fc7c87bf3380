//! What the server does with command output before a caller sees it: secret
//! values masked (`mask`), and only a head and a tail kept (`bounded`).

pub mod bounded;
pub mod mask;
