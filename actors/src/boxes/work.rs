//! Work in a running box: commands (in the foreground as a stream of their
//! masked output, or in the background), their list, signals and logs. Each
//! call takes the box's channel from its actor (thawing it) and then talks to
//! boxd directly; what waits on the box holds a lease on it.

use super::{Awake, Boxes, Events, SERVICE, for_account, over};
use crate::box_actor::Channel;
use crate::boxd_link::LinkHandle;
use crate::error::BoxError;
use crate::exec::bounded::Bounded;
use crate::exec::mask::{MaskStream, Masker};
use crate::exec::run::{Command, ExecEvent};
use crate::ids::{AccountId, BoxId};
use futures_util::StreamExt;
use psbx_wire::boxd::{ExecRequest, Logs, Process, ProcessesRequest, Signal, Streamed};
use psbx_wire::mux::Stream;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long past a command's own time limit the server waits for boxd to say
/// it ended (boxd kills it at the limit; this is for a boxd that does not).
pub const EXEC_GRACE: Duration = Duration::from_secs(30);

impl Boxes {
    /// The link and mask of a running box, thawing it first; counts as activity.
    pub async fn channel(
        &self,
        account: &AccountId,
        id: &BoxId,
    ) -> Result<
        (
            actix::Addr<crate::box_actor::BoxActor>,
            LinkHandle,
            Arc<Masker>,
        ),
        BoxError,
    > {
        let addr = match self.actor(account, id).await? {
            Err(record) => return Err(over(&record)),
            Ok(addr) => addr,
        };
        let channel = Channel {
            thaw: true,
            touch: true,
        };
        let asked = addr.send(for_account(account, channel)).await;
        let (link, masker) = match asked {
            Ok(answer) => answer?,
            Err(e) => return Err(over(&self.after_gone(account, id, e).await?)),
        };
        Ok((addr, link, masker))
    }

    /// Runs a command: its events (output masked), as they come. A command
    /// that cannot start is an error here; a foreground command keeps the box
    /// awake while it runs and its caller holds the stream. Dropping the
    /// stream ends the reading (the command runs on in the box, and no longer
    /// counts as activity). The server does not take boxd's word for the
    /// command's time limit: past `timeout_s` and [`EXEC_GRACE`] without an
    /// exit, the stream yields [`BoxError::Overran`] and ends. No task and no
    /// channel: the caller's polling reads boxd's stream.
    pub async fn exec(
        &self,
        account: &AccountId,
        id: &BoxId,
        request: ExecRequest,
    ) -> Result<Events<ExecEvent>, BoxError> {
        let (addr, link, masker) = self.channel(account, id).await?;
        let mut command = match Command::start(&link, &request, masker).await {
            Ok(command) => command,
            Err(e) => return Err(self.noticed(account, id, e).await),
        };
        let limit = request
            .timeout_s
            .filter(|_| !request.background)
            .map(Duration::from_secs);
        // The first event says whether the command started at all.
        let first = command
            .next()
            .await?
            .ok_or_else(|| BoxError::Internal("the command's stream ended at once".into()))?;
        let reading = Reading {
            command,
            _link: link,
            _awake: self.awake(addr),
            overran_at: limit.map(|l| (tokio::time::Instant::now() + l + EXEC_GRACE, l)),
        };
        let rest = futures_util::stream::unfold(Some(reading), |reading| async move {
            let mut reading = reading?;
            let overran = async {
                match reading.overran_at {
                    Some((at, _)) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                event = reading.command.next() => match event {
                    Ok(Some(event)) => Some((Ok(event), Some(reading))),
                    Ok(None) => None,
                    Err(e) => Some((Err(e), None)),
                },
                () = overran => {
                    let limit = reading.overran_at.map(|(_, l)| l).unwrap_or_default();
                    Some((Err(BoxError::Overran { limit, grace: EXEC_GRACE }), None))
                }
            }
        });
        Ok(futures_util::stream::once(std::future::ready(Ok(first)))
            .chain(rest)
            .boxed())
    }

    /// The box's background commands.
    pub async fn processes(
        &self,
        account: &AccountId,
        id: &BoxId,
    ) -> Result<Vec<Process>, BoxError> {
        let (_, link, masker) = self.channel(account, id).await?;
        let mut processes = match link.call(&ProcessesRequest, SERVICE).await {
            Ok(processes) => processes,
            Err(e) => return Err(self.noticed(account, id, e.into()).await),
        };
        for p in &mut processes {
            p.cmd = masker.mask(&p.cmd);
            if let Some(exit) = &mut p.exit {
                masker.mask_failures(&mut exit.private_endpoint_errors);
            }
        }
        Ok(processes)
    }

    /// Signals a background command's process group.
    pub async fn signal(
        &self,
        account: &AccountId,
        id: &BoxId,
        pid: u32,
        signal: i32,
    ) -> Result<(), BoxError> {
        let (_, link, _) = self.channel(account, id).await?;
        let done = match link.call(&Signal { pid, signal }, SERVICE).await {
            Ok(done) => done,
            Err(e) => return Err(self.noticed(account, id, e.into()).await),
        };
        if done.ok {
            Ok(())
        } else {
            Err(BoxError::ProcessNotFound {
                id: id.to_string(),
                pid,
            })
        }
    }

    /// A background command's output so far: head and tail, masked.
    pub async fn logs(
        &self,
        account: &AccountId,
        id: &BoxId,
        pid: u32,
        keep: usize,
    ) -> Result<Bounded, BoxError> {
        let (_, link, masker) = self.channel(account, id).await?;
        let mut stream = match open_log(&link, id, pid, 0, false).await {
            Ok(stream) => stream,
            Err(e) => return Err(self.noticed(account, id, e).await),
        };
        let mut kept = Bounded::new(keep, keep);
        let mut mask = MaskStream::new(masker);
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let n = stream
                .read(&mut chunk)
                .await
                .map_err(|e| no_process(id, pid, e))?;
            if n == 0 {
                break;
            }
            kept.push(&mask.push(&chunk[..n]));
        }
        kept.push(&mask.finish());
        Ok(kept)
    }

    /// Follows a background command's output (masked) from `offset` while it
    /// runs; the stream ends once the command has exited and all its output
    /// arrived. Following keeps the box awake while the caller holds the
    /// stream; once it is dropped, following ends (the command runs on and
    /// its output stays in its log, but it no longer counts as activity: a
    /// box nobody waits on freezes and expires on time).
    pub async fn follow(
        &self,
        account: &AccountId,
        id: &BoxId,
        pid: u32,
        offset: u64,
    ) -> Result<Events<Vec<u8>>, BoxError> {
        let (addr, link, masker) = self.channel(account, id).await?;
        let stream = match open_log(&link, id, pid, offset, true).await {
            Ok(stream) => stream,
            Err(e) => return Err(self.noticed(account, id, e).await),
        };
        let following = Following {
            stream,
            mask: MaskStream::new(masker),
            chunk: vec![0u8; 64 * 1024],
            id: id.clone(),
            pid,
            _awake: self.awake(addr),
        };
        Ok(
            futures_util::stream::unfold(Some(following), |following| async move {
                let mut f = following?;
                match f.stream.read(&mut f.chunk).await {
                    Ok(0) => Some((Ok(f.mask.finish()), None)),
                    Ok(n) => {
                        let masked = f.mask.push(&f.chunk[..n]);
                        Some((Ok(masked), Some(f)))
                    }
                    Err(e) => Some((Err(no_process(&f.id, f.pid, e)), None)),
                }
            })
            .boxed(),
        )
    }

    /// One background command of the box.
    pub async fn process(
        &self,
        account: &AccountId,
        id: &BoxId,
        pid: u32,
    ) -> Result<Process, BoxError> {
        self.processes(account, id)
            .await?
            .into_iter()
            .find(|p| p.pid == pid)
            .ok_or_else(|| BoxError::ProcessNotFound {
                id: id.to_string(),
                pid,
            })
    }
}

/// A command being read ([`Boxes::exec`]): its stream from boxd, the link
/// it runs on, the box's lease, and when it has overrun (with its limit).
struct Reading {
    command: Command,
    _link: LinkHandle,
    _awake: Awake,
    overran_at: Option<(tokio::time::Instant, Duration)>,
}

/// A background command's log being followed ([`Boxes::follow`]).
struct Following {
    stream: Stream,
    mask: MaskStream,
    chunk: Vec<u8>,
    id: BoxId,
    pid: u32,
    _awake: Awake,
}

/// A stream of a background command's log from boxd.
async fn open_log(
    link: &LinkHandle,
    id: &BoxId,
    pid: u32,
    offset: u64,
    follow: bool,
) -> Result<Stream, BoxError> {
    let mut stream = link.open(Logs::SERVICE, SERVICE).await?;
    let body = serde_json::to_vec(&Logs {
        pid,
        offset,
        follow,
    })?;
    stream
        .write_all(&body)
        .await
        .map_err(|e| no_process(id, pid, e))?;
    stream
        .shutdown()
        .await
        .map_err(|e| no_process(id, pid, e))?;
    Ok(stream)
}

/// boxd resets the log stream of a process it does not know; any other
/// failure is the channel's.
fn no_process(id: &BoxId, pid: u32, e: std::io::Error) -> BoxError {
    if e.kind() == std::io::ErrorKind::ConnectionReset {
        BoxError::ProcessNotFound {
            id: id.to_string(),
            pid,
        }
    } else {
        crate::error::io_error(format!("reading the log of process {pid} in box {id}"))(e)
    }
}
