//! What the server does with command output before a caller sees it: secret
//! values masked (`mask`), and only a head and a tail kept (`bounded`); and
//! the driver of a command's stream to boxd (`run`).

pub mod bounded;
pub mod mask;
pub mod run;
