//! boxd's real services in another program's process: one [`InProcess`]
//! per boot of a fake box, serving the streams of that box's sessions with
//! the same dispatcher as in a box ([`crate::services::handle`]).
//!
//! Why: the box API's stories (exec with its masking, time limits,
//! background commands and logs; sync; what another account may not touch)
//! are about the server and boxd, not about a VM. The server's tests run
//! them on its fake hypervisor (`psbx_actors::hypervisor::fake`, which takes
//! an `InProcess` per boot through a hook of its own, so the actors crate
//! does not depend on boxd) in seconds and in parallel, instead of booting a
//! box under TCG in the serial VM queue each.
//!
//! What differs from a box: `/work` and `/run/psbx` are directories of the
//! box's own ([`crate::settings`]: a command's working directory under
//! `/work` is under them, but a command that names `/work/...` in its text
//! names the machine's), commands run as the test's user on the test's
//! machine, and boxd does not own the machine: it sets neither the clock nor
//! any network (a claim with environment addresses, wiring or an AWS role,
//! and `wire`, are refused). Dropping it, or [`InProcess::halt`], kills the
//! background commands still running, as a box's stop does.

use crate::services::{self, Boxd};
use crate::settings::Settings;
use psbx_wire::boxd::BoxInfo;
use psbx_wire::mux::Incoming;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

/// boxd's services for one boot of a box, in this process.
pub struct InProcess {
    state: Arc<Boxd>,
}

impl InProcess {
    /// The services of a box whose `/work` is `work` and whose `/run/psbx`
    /// is `run` (both made if missing), introduced by `info`. What an
    /// earlier boot left in `run` is picked up as a restarted boxd would:
    /// give each boot a `run` of its own, as a box's tmpfs is.
    pub fn start(work: PathBuf, run: PathBuf, info: BoxInfo) -> std::io::Result<Self> {
        std::fs::create_dir_all(&work)?;
        std::fs::create_dir_all(&run)?;
        let settings = Settings {
            work,
            run,
            owns_machine: false,
        };
        Ok(Self {
            state: Arc::new(Boxd::restored(settings, info)),
        })
    }

    /// Serves one stream of a session with the box, to its end.
    pub fn serve(&self, incoming: Incoming) -> impl Future<Output = ()> + Send + 'static {
        services::handle(incoming, self.state.clone())
    }

    /// Where it keeps things.
    pub fn settings(&self) -> &Settings {
        &self.state.settings
    }

    /// The boot ends: kills the process group of every background command
    /// still running; the number killed.
    pub fn halt(&self) -> usize {
        self.state.processes.kill_all()
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.halt();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::testing::{fetch, session_of};
    use psbx_wire::boxd::{self as proto, Clock, Configure, Done, Process, Record};
    use std::time::Duration;

    fn info() -> BoxInfo {
        BoxInfo {
            protocol: 1,
            version: "in-process".into(),
            boot_id: "boot-1".into(),
            features: vec![],
        }
    }

    fn exec(cmd: &str, background: bool) -> Vec<u8> {
        serde_json::to_vec(&proto::ExecRequest {
            cmd: cmd.into(),
            cwd: "/work".into(),
            env: vec![],
            timeout_s: Some(30),
            background,
        })
        .unwrap()
    }

    fn records(mut bytes: Vec<u8>) -> Vec<Record> {
        let mut records = Vec::new();
        while let Some(r) = Record::decode(&mut bytes).unwrap() {
            records.push(r);
        }
        records
    }

    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| !r.trim().starts_with('Z'))
        })
    }

    #[tokio::test]
    async fn a_box_of_its_own_directories_that_leaves_the_machine_alone() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        let boxd = InProcess::start(work.clone(), dir.path().join("run"), info()).unwrap();
        // The services it serves with (`InProcess::serve` is `handle` on them).
        let session = session_of(boxd.state.clone()).await;

        // The claim's environment is kept under its own run directory.
        let claim = Configure {
            env: vec![("TOKEN".into(), "from-the-claim".into())],
            files: vec![proto::ConfigFile {
                path: "/work/.sbx/env/api.env".into(),
                contents: "A=1\n".into(),
            }],
            ..Configure::default()
        };
        let done: Done = serde_json::from_slice(
            &fetch(&session, "configure", &serde_json::to_vec(&claim).unwrap()).await,
        )
        .unwrap();
        assert!(done.ok, "{done:?}");
        assert!(dir.path().join("run/env.json").is_file());
        assert_eq!(
            std::fs::read_to_string(work.join(".sbx/env/api.env")).unwrap(),
            "A=1\n"
        );

        // /work is its work directory; commands get the claim's environment.
        let ran = records(fetch(&session, "exec", &exec("pwd; echo $TOKEN", false)).await);
        let expected = format!("{}\nfrom-the-claim\n", work.display());
        // However the pipe cut it into chunks (two writes may come as two).
        let stdout: Vec<u8> = ran
            .iter()
            .filter_map(|r| match r {
                Record::Stdout(b) => Some(b.as_slice()),
                _ => None,
            })
            .flatten()
            .copied()
            .collect();
        assert_eq!(stdout, expected.into_bytes(), "{ran:?}");

        // A background command logs under the run directory.
        let started = records(fetch(&session, "exec", &exec("echo up; sleep 60", true)).await);
        let Some(Record::Started(pid)) = started.first().cloned() else {
            panic!("{started:?}");
        };
        let listed: Vec<Process> =
            serde_json::from_slice(&fetch(&session, "processes", b"").await).unwrap();
        let log = &listed.iter().find(|p| p.pid == pid).unwrap().log;
        assert_eq!(
            *log,
            format!("{}/run/processes/{pid}.log", dir.path().display())
        );

        // The clock and the network are not its to change.
        let clock = Clock { unix_nanos: 1 };
        let refused: Done = serde_json::from_slice(
            &fetch(&session, "clock", &serde_json::to_vec(&clock).unwrap()).await,
        )
        .unwrap();
        assert!(
            !refused.ok
                && refused
                    .error
                    .as_deref()
                    .unwrap()
                    .contains("does not own its machine"),
            "{refused:?}"
        );
        let wired = Configure {
            wiring: proto::Wiring {
                names: vec!["api.svc.local".into()],
                ..proto::Wiring::default()
            },
            ..Configure::default()
        };
        let refused: Done = serde_json::from_slice(
            &fetch(&session, "configure", &serde_json::to_vec(&wired).unwrap()).await,
        )
        .unwrap();
        assert!(!refused.ok, "{refused:?}");

        // Its end kills what still runs.
        assert!(alive(pid));
        assert_eq!(boxd.halt(), 1);
        psbx_tests::wait::until_async("the command to end", Duration::from_secs(10), async || {
            (!alive(pid)).then_some(())
        })
        .await;
    }
}
