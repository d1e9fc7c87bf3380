//! `configure`: takes a claim (the files under `/work/.sbx/`, the
//! environment's addresses, the commands' environment), and keeps the
//! environment for a restarted boxd of the same boot. A boxd that does not
//! own its machine (`crate::settings`) refuses a claim with addresses,
//! wiring or an AWS role: those change the machine's network.

use super::common::{Boxd, answer, read_call};
use crate::kept;
use psbx_wire::boxd::{ConfigFile, Configure, Done};
use psbx_wire::mux::Incoming;
use std::path::Path;

pub async fn serve(incoming: Incoming, state: &Boxd) {
    let mut stream = incoming.accept();
    let done = match read_call::<Configure>(&mut stream).await {
        Ok(configure) => match apply(state, configure).await {
            Ok(()) => Done::ok(),
            Err(e) => Done::failed(e),
        },
        Err(e) => Done::failed(e),
    };
    answer::<Configure>(stream, &done).await;
}

/// Takes a claim: the files, the environment's addresses, the environment.
async fn apply(state: &Boxd, configure: Configure) -> Result<(), String> {
    let network =
        !configure.endpoints.is_empty() || !configure.wiring.is_empty() || configure.aws.is_some();
    if network && let Some(why) = state.not_its_machine("network for a claim") {
        return Err(why);
    }
    write_files(state.work(), &configure.files)?;
    state
        .private
        .configure(
            &configure.endpoints,
            &configure.wiring,
            &state.uplink,
            state.work(),
        )
        .await
        .map_err(|e| e.to_string())?;
    let mut env = configure.env;
    if let Some(aws) = &configure.aws {
        crate::aws::start(aws, &state.uplink)
            .await
            .map_err(|e| e.to_string())?;
        aws.add_to(&mut env);
    }
    kept::keep(
        &state.settings.env_file(),
        &env,
        "the commands' environment",
    );
    if let Ok(mut held) = state.env.write() {
        *held = env;
    }
    Ok(())
}

/// At start: the commands' environment of a claim an earlier boxd of this
/// boot kept at `path` (none when there was none; a damaged file is reported
/// and left).
pub fn restore_env(path: &Path) -> Vec<(String, String)> {
    let Some(env) = kept::usable(path, kept::read(path)) else {
        return Vec::new();
    };
    println!(
        "boxd: restored the commands' environment from {}",
        path.display()
    );
    env
}

/// Writes the files of a claim under `<work>/.sbx/` (the server names them
/// `/work/.sbx/...`), mode 0600; any other path is refused.
fn write_files(work: &Path, files: &[ConfigFile]) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    for file in files {
        let relative = file
            .path
            .strip_prefix("/work/.sbx/")
            .filter(|r| {
                !r.is_empty()
                    && Path::new(r)
                        .components()
                        .all(|c| matches!(c, std::path::Component::Normal(_)))
            })
            .ok_or_else(|| format!("{:?} is not a file under /work/.sbx/", file.path))?;
        let path = work.join(".sbx").join(relative);
        let write = || -> std::io::Result<()> {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let mut out = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&path)?;
            out.write_all(file.contents.as_bytes())
        };
        write().map_err(|e| format!("cannot write {}: {e}", file.path))?;
    }
    Ok(())
}
