//! `psbx sync <box> [--commit REV] [--dest DIR]`: send the working tree (what
//! git tracks plus new files .gitignore does not exclude), or one commit's
//! tree, into a box under `/work/<dest>`, through a psbx server.

use crate::pack;
use anyhow::{Context, bail};
use std::io::{Seek, SeekFrom};
use std::path::PathBuf;

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
    let top = pack::work_tree(&args.dir)?;
    let mut tar = tempfile::tempfile().context("making a temporary file")?;
    match &args.commit {
        Some(rev) => pack::pack_commit(&top, rev, &mut tar)?,
        None => {
            pack::pack_work_tree(&top, &mut tar)?;
        }
    }
    let size = tar.seek(SeekFrom::End(0))?;
    tar.seek(SeekFrom::Start(0))?;
    let url = format!(
        "{}/v1/boxes/{}/sync",
        args.url.trim_end_matches('/'),
        args.r#box
    );
    let response = reqwest::blocking::Client::builder()
        .timeout(None)
        .build()?
        .post(url)
        .query(&[("dest", &args.dest)])
        .bearer_auth(&args.key)
        .header("content-type", "application/x-tar")
        .body(reqwest::blocking::Body::sized(tar, size))
        .send()
        .context("sending the archive")?;
    let status = response.status();
    let body: serde_json::Value = response.json().unwrap_or_default();
    if !status.is_success() {
        let message = body["error"]["message"].as_str().unwrap_or("no details");
        bail!("the server refused the sync ({status}): {message}");
    }
    println!(
        "synced {} files ({} bytes) from {} into /work/{}",
        body["files"],
        body["bytes"],
        top.display(),
        args.dest
    );
    Ok(())
}
