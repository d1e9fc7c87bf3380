//! Environments' service settings as pure logic, without store or HTTP:
//! parsing an uploaded `.env` (`dotenv`), writing the settings files a box
//! receives and picking the settings worth pointing out (`files`, `notable`),
//! the suggested endpoints found in the settings (`suggest`, on the
//! scanning helpers of `scan`), and where imported settings came from
//! (`imported`). Spec: environments.txt, "Set it up" item 3,
//! "Settings for services not on ECS" and "Use it from a box".

pub mod dotenv;
pub mod files;
pub mod imported;
pub mod notable;
pub mod scan;
pub mod suggest;

pub use dotenv::{DotenvError, parse};
pub use files::{env_file, sh_file};
pub use imported::{Skipped, SourceRef};
pub use notable::{Notable, NotableValue, notable, secret_values};
pub use suggest::{Source, Suggestion, suggest};
