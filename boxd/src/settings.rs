//! Where boxd keeps things and what it may do to the machine it runs on.
//!
//! In a box these are fixed ([`Settings::default`]): the box's `/work`, the
//! tmpfs `/run/psbx` for what a restarted boxd of the same boot picks up
//! again, and the whole machine (its clock, its network). They are settable
//! so that boxd's services can also run inside another program's process on
//! an ordinary machine (`crate::in_process`, the server's in-process tests):
//! there each box gets directories of its own, and boxd must leave the
//! machine's clock and network alone.

use std::path::{Path, PathBuf};

/// The directory commands, syncs and the claim's files see as `/work` in a
/// box: the name the server uses in requests.
pub const BOX_WORK: &str = "/work";

/// boxd's places and powers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The box's `/work`: where syncs unpack, where the claim's files go
    /// (`.sbx/`), and what a command's working directory under `/work`
    /// stands for.
    pub work: PathBuf,
    /// What outlives boxd but not the boot (`/run/psbx`): the commands'
    /// environment, the background commands and their logs (`crate::kept`).
    pub run: PathBuf,
    /// Whether boxd owns the machine it runs on, as in a box: only then does
    /// it set the clock and the box's network (the environment's addresses,
    /// the wiring, the AWS role's endpoint). A boxd that does not refuses
    /// those requests instead of changing the machine under another program.
    pub owns_machine: bool,
}

impl Default for Settings {
    /// A box's.
    fn default() -> Self {
        Self {
            work: PathBuf::from(BOX_WORK),
            run: PathBuf::from("/run/psbx"),
            owns_machine: true,
        }
    }
}

impl Settings {
    /// The commands' environment of the claim, kept for a restarted boxd.
    pub fn env_file(&self) -> PathBuf {
        self.run.join("env.json")
    }

    /// The background commands, kept for a restarted boxd.
    pub fn processes_file(&self) -> PathBuf {
        self.run.join("processes.json")
    }

    /// Where background commands' output goes, a log file each.
    pub fn logs_dir(&self) -> PathBuf {
        self.run.join("processes")
    }

    /// Where a path the server names in the box (`/work/...`) is on this
    /// machine: under [`Settings::work`]. Any other path is taken as it is.
    /// In a box, where `work` is `/work`, every path stays as it is.
    pub fn in_work(&self, path: &str) -> PathBuf {
        match Path::new(path).strip_prefix(BOX_WORK) {
            Ok(rest) => self.work.join(rest),
            Err(_) => PathBuf::from(path),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn box_paths_stay_as_they_are_in_a_box_and_move_under_work_elsewhere() {
        let in_box = Settings::default();
        assert_eq!(in_box.in_work("/work"), Path::new("/work"));
        assert_eq!(in_box.in_work("/work/repo"), Path::new("/work/repo"));
        assert_eq!(in_box.in_work("/tmp"), Path::new("/tmp"));
        assert_eq!(in_box.logs_dir(), Path::new("/run/psbx/processes"));
        assert_eq!(in_box.env_file(), Path::new("/run/psbx/env.json"));
        let elsewhere = Settings {
            work: PathBuf::from("/tmp/b1/work"),
            run: PathBuf::from("/tmp/b1/run"),
            owns_machine: false,
        };
        assert_eq!(elsewhere.in_work("/work"), Path::new("/tmp/b1/work"));
        assert_eq!(
            elsewhere.in_work("/work/a/b"),
            Path::new("/tmp/b1/work/a/b")
        );
        // Only /work itself, not a name that starts the same.
        assert_eq!(elsewhere.in_work("/workshop"), Path::new("/workshop"));
        assert_eq!(elsewhere.in_work("/tmp"), Path::new("/tmp"));
        assert_eq!(
            elsewhere.processes_file(),
            Path::new("/tmp/b1/run/processes.json")
        );
    }
}
