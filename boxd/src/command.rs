//! Running a system command from boxd (`ip`, `modprobe`, `nft`): its
//! stdout, or an error that names the command, its arguments, its exit
//! status and its stderr, ready for a log line or a setup error.
//!
//! Its own module because both the network card's setup (`net`) and the
//! environment addresses' kernel side (`privnet::rules`) run commands; it
//! used to live in `rules.rs`, which made `net` and `rules` import each
//! other.

use std::process::Stdio;
use tokio::io::AsyncWriteExt;

/// Runs a command, feeding it `input`; its stdout, or why it failed.
pub async fn run(program: &str, args: &[&str], input: Option<&str>) -> Result<String, String> {
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("{program}: {e}"))?;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin
            .write_all(input.as_bytes())
            .await
            .map_err(|e| format!("{program}: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{program} {}: {} {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
