//! `psbx sync <box> [--commit REV] [--dest DIR]`: send the working tree (what
//! git tracks plus new files .gitignore does not exclude), or one commit's
//! tree, into a box under `/work/<dest>`, through a psbx server.

use crate::pack;
use anyhow::{Context, bail};
use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct SyncArgs {
    /// The box, `box_...`.
    pub r#box: String,
    /// Send only this commit's tree (any git revision).
    #[arg(long)]
    pub commit: Option<String>,
    /// Where under /work in the box (default: /work itself).
    #[arg(long, default_value = "")]
    pub dest: String,
    /// The directory to send from (default: the current one; any directory
    /// inside the repository names the whole work tree).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// The psbx server.
    #[arg(long, env = "PSBX_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// An API key.
    #[arg(long, env = "PSBX_API_KEY", hide_env_values = true)]
    pub key: String,
}

pub fn run(args: SyncArgs) -> anyhow::Result<()> {
    let done = send(
        &args.url,
        &args.key,
        &args.r#box,
        &args.dest,
        &args.dir,
        args.commit.as_deref(),
    )?;
    println!(
        "synced {} files ({} bytes) from {} into /work/{}",
        done.files,
        done.bytes,
        done.top.display(),
        args.dest
    );
    Ok(())
}

/// What a sync sent.
#[derive(Debug)]
pub struct Sent {
    pub files: u64,
    pub bytes: u64,
    /// The top of the work tree it was sent from.
    pub top: PathBuf,
}

/// Packs the work tree `dir` is in (or one commit of it) and sends it into
/// the box under `/work/<dest>` through the psbx server at `url`. Blocking.
pub fn send(
    url: &str,
    key: &str,
    box_id: &str,
    dest: &str,
    dir: &Path,
    commit: Option<&str>,
) -> anyhow::Result<Sent> {
    let top = pack::work_tree(dir)?;
    let mut tar = tempfile::tempfile().context("making a temporary file")?;
    match commit {
        Some(rev) => pack::pack_commit(&top, rev, &mut tar)?,
        None => {
            pack::pack_work_tree(&top, &mut tar)?;
        }
    }
    let size = tar.seek(SeekFrom::End(0))?;
    tar.seek(SeekFrom::Start(0))?;
    let url = format!("{}/v1/boxes/{}/sync", url.trim_end_matches('/'), box_id);
    let response = reqwest::blocking::Client::builder()
        .timeout(None)
        .build()?
        .post(url)
        .query(&[("dest", dest)])
        .bearer_auth(key)
        .header("content-type", "application/x-tar")
        .body(reqwest::blocking::Body::sized(tar, size))
        .send()
        .context("sending the archive")?;
    let status = response.status();
    let body: serde_json::Value = response.json().unwrap_or_default();
    if !status.is_success() {
        let message = body["error"]["message"].as_str().unwrap_or("no details");
        let hint = body["error"]["hint"]
            .as_str()
            .map(|h| format!(" ({h})"))
            .unwrap_or_default();
        bail!("the server refused the sync ({status}): {message}{hint}");
    }
    Ok(Sent {
        files: body["files"].as_u64().unwrap_or_default(),
        bytes: body["bytes"].as_u64().unwrap_or_default(),
        top,
    })
}
