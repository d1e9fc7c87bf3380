//! What the server does with command output before a caller sees it: secret
//! values masked (`mask`), and only a head and a tail kept (`bounded`); the
//! driver of a command's stream to boxd (`run`); and the one check of what a
//! caller asks to run, for every front (`spec`).

pub mod bounded;
pub mod mask;
pub mod run;
pub mod spec;
