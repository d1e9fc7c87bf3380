//! `exec`: runs a command ([`crate::exec`]) and answers with records: for a
//! foreground command its output as it comes and how it ended, with the
//! connections to environment addresses it made that failed; for a
//! background one only its pid. Its working directory is the box's: one
//! under `/work` is under the box's work directory (`crate::settings`).

use super::common::{Boxd, parse, read_request};
use crate::exec::{self, Output};
use psbx_wire::boxd::{ExecRequest, Record};
use psbx_wire::mux::Stream;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

pub async fn serve(mut stream: Stream, state: &Boxd) {
    let request = match read_request(&mut stream).await {
        Ok(bytes) => parse::<ExecRequest>(&bytes),
        Err(e) => Err(e.to_string()),
    };
    let mut request = match request {
        Ok(r) => r,
        Err(e) => return finish(stream, Record::Failed(e)).await,
    };
    request.cwd = state
        .settings
        .in_work(&request.cwd)
        .to_string_lossy()
        .into_owned();
    let base_env = state.env.read().map(|e| e.clone()).unwrap_or_default();
    if request.background {
        let failures = state.private.failures().clone();
        let mark = failures.mark();
        let record = match state.processes.start(&request, &base_env, move |pid| {
            failures.caused_by(mark, pid)
        }) {
            Ok(p) => Record::Started(p.pid),
            Err(e) => Record::Failed(format!("cannot start the command: {e}")),
        };
        return finish(stream, record).await;
    }
    let mark = state.private.failures().mark();
    let (tx, mut rx) = mpsc::channel::<Output>(8);
    let runner = tokio::spawn(async move { exec::run(&request, &base_env, tx).await });
    while let Some(out) = rx.recv().await {
        let record = match out {
            Output::Stdout(b) => Record::Stdout(b),
            Output::Stderr(b) => Record::Stderr(b),
        };
        if stream.write_all(&record.encode()).await.is_err() {
            break;
        }
    }
    let last = match runner.await {
        Ok(Ok((pid, mut exit))) => {
            exit.private_endpoint_errors = state.private.failures().caused_by(mark, pid);
            Record::Exit(exit)
        }
        Ok(Err(e)) => Record::Failed(format!("cannot run the command: {e}")),
        Err(e) => Record::Failed(format!("the command's task failed: {e}")),
    };
    finish(stream, last).await;
}

/// Writes the last record and half-closes.
async fn finish(mut stream: Stream, last: Record) {
    let _ = stream.write_all(&last.encode()).await;
    let _ = stream.shutdown().await;
}
