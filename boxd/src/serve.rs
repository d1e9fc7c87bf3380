//! boxd's side of the box channel: one wire session at a time over the
//! virtio-serial port (a new one whenever the server reconnects), and a task
//! per stream that serves the service its target names (`psbx_wire::boxd`).
//! Before the first session, it restores what an earlier boxd of this boot
//! took from a claim or started: the environment's addresses (`privnet`), the
//! commands' environment and the background commands (`kept`).

use crate::exec::{self, ExecSpec, Output, Processes};
use crate::privnet::PrivateNet;
use crate::uplink::Uplink;
use crate::{health, kept, port, unpack};
use psbx_wire::Hello;
use psbx_wire::boxd::{self as proto, BoxInfo, Configure, Done, Record, SyncDone};
use psbx_wire::mux::{Config, Incoming, Role, Session, Stream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// The largest JSON request read from a stream.
const MAX_REQUEST: u64 = 1 << 20;

/// What every stream handler shares.
pub struct Boxd {
    info: BoxInfo,
    /// Account data pushed at claim: the secrets, as environment variables.
    env: RwLock<Vec<(String, String)>>,
    processes: Processes,
    work: PathBuf,
    /// The current session, for the streams boxd opens.
    uplink: Uplink,
    /// The environment's addresses, set up at claim.
    private: PrivateNet,
}

/// Sets up again what an earlier boxd of this boot kept (the commands'
/// environment, the background commands, the environment's addresses), then
/// serves the channel forever.
pub async fn run(path: PathBuf) -> std::io::Result<()> {
    match crate::net::up().await {
        Ok(Some(nic)) => println!(
            "boxd: network card up: {}/{} via {}",
            nic.address, nic.prefix, nic.gateway
        ),
        Ok(None) => println!("boxd: no network card"),
        Err(e) => eprintln!("boxd: {e}"),
    }
    let uplink = Uplink::default();
    let state = Arc::new(Boxd {
        info: BoxInfo {
            protocol: psbx_wire::PROTOCOL_VERSION,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            boot_id: health::boot_id(),
            features: ["health", "exec", "sync", "processes", "logs", "clock"]
                .map(str::to_owned)
                .to_vec(),
        },
        env: RwLock::new(restore_env()),
        processes: Processes::kept_at(PathBuf::from(kept::PROCESSES)),
        work: PathBuf::from("/work"),
        private: PrivateNet::new(&uplink),
        uplink,
    });
    state.private.start().await;
    state.private.restore(&state.uplink, &state.work).await;
    loop {
        let io = match port::PortIo::open(&path) {
            Ok(io) => io,
            // The previous session's driver may still hold the port.
            Err(e) if e.raw_os_error() == Some(nix::libc::EBUSY) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let hello = Hello::new(format!("boxd {}", env!("CARGO_PKG_VERSION")));
        match Session::over_io(io, Role::Server, Config::default(), hello).await {
            Ok(session) => {
                state.uplink.set(session.clone());
                serve_session(&session, &state).await;
                state.uplink.clear();
                session.close();
            }
            // No server on the other end yet: try again shortly.
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

async fn serve_session(session: &Session, state: &Arc<Boxd>) {
    loop {
        tokio::select! {
            incoming = session.accept() => match incoming {
                Some(incoming) => {
                    let state = state.clone();
                    tokio::spawn(async move { handle(incoming, state).await });
                }
                None => return,
            },
            // The server sends no control messages once connected: one means it
            // restarted and is saying hello on a new connection.
            _ = session.recv_control::<serde_json::Value>() => return,
        }
    }
}

async fn read_request(stream: &mut Stream) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    (&mut *stream)
        .take(MAX_REQUEST)
        .read_to_end(&mut buf)
        .await?;
    Ok(buf)
}

/// Answers a request that carries no body: the request side is read to its end
/// first, so that the stream is finished both ways when it is dropped (a
/// stream dropped before the peer's FIN is reset).
async fn answer_json<T: serde::Serialize>(mut stream: Stream, value: &T) {
    let _ = read_request(&mut stream).await;
    let body = serde_json::to_vec(value).unwrap_or_default();
    let _ = stream.write_all(&body).await;
    let _ = stream.shutdown().await;
}

fn parse<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("bad request: {e}"))
}

async fn handle(incoming: Incoming, state: Arc<Boxd>) {
    let target = incoming.target().to_owned();
    match target.as_str() {
        "info" => answer_json(incoming.accept(), &state.info).await,
        "health" => {
            let health = health::read(state.private.health());
            answer_json(incoming.accept(), &health).await;
        }
        "processes" => answer_json(incoming.accept(), &process_list(&state)).await,
        "configure" => {
            let mut stream = incoming.accept();
            let done = match read_request(&mut stream)
                .await
                .map_err(|e| e.to_string())
                .and_then(|b| parse::<Configure>(&b))
            {
                Ok(configure) => match apply(&state, configure).await {
                    Ok(()) => Done::ok(),
                    Err(e) => Done::failed(e),
                },
                Err(e) => Done::failed(e),
            };
            answer_json(stream, &done).await;
        }
        "signal" => {
            answer_with(
                incoming,
                |req: proto::Signal| match nix::sys::signal::Signal::try_from(req.signal) {
                    Ok(sig) if state.processes.signal(req.pid, sig) => Done::ok(),
                    Ok(_) => Done::failed(format!("no running background process {}", req.pid)),
                    Err(_) => Done::failed(format!("{} is not a signal", req.signal)),
                },
            )
            .await
        }
        "clock" => answer_with(incoming, set_clock).await,
        "logs" => logs(incoming.accept(), &state).await,
        "exec" => exec_stream(incoming.accept(), &state).await,
        "sync" => sync(incoming.accept(), &state).await,
        _ => incoming.refuse(404, &format!("boxd has no service {target:?}")),
    }
}

/// Reads a JSON request and answers what `handle` makes of it (or why the
/// request was not understood).
async fn answer_with<T: serde::de::DeserializeOwned>(
    incoming: Incoming,
    handle: impl FnOnce(T) -> Done,
) {
    let mut stream = incoming.accept();
    let done = match read_request(&mut stream)
        .await
        .map_err(|e| e.to_string())
        .and_then(|b| parse::<T>(&b))
    {
        Ok(request) => handle(request),
        Err(e) => Done::failed(e),
    };
    answer_json(stream, &done).await;
}

/// Sets the box's clock to the server's.
fn set_clock(clock: proto::Clock) -> Done {
    let nanos = i64::try_from(clock.unix_nanos).unwrap_or(i64::MAX);
    let time = nix::sys::time::TimeSpec::new(nanos / 1_000_000_000, nanos % 1_000_000_000);
    match nix::time::clock_settime(nix::time::ClockId::CLOCK_REALTIME, time) {
        Ok(()) => Done::ok(),
        Err(e) => Done::failed(format!("cannot set the clock: {e}")),
    }
}

/// Takes a claim: the files, the environment's addresses, the environment.
async fn apply(state: &Boxd, configure: Configure) -> Result<(), String> {
    write_files(&state.work, &configure.files)?;
    state
        .private
        .configure(&configure.endpoints, &state.uplink, &state.work)
        .await?;
    kept::keep(
        Path::new(kept::ENV),
        &configure.env,
        "the commands' environment",
    );
    if let Ok(mut env) = state.env.write() {
        *env = configure.env;
    }
    Ok(())
}

/// At start: the commands' environment of a claim an earlier boxd of this
/// boot took (none when there was none; a damaged file is reported and left).
fn restore_env() -> Vec<(String, String)> {
    let path = Path::new(kept::ENV);
    let Some(env) = kept::usable(path, kept::read(path)) else {
        return Vec::new();
    };
    println!(
        "boxd: restored the commands' environment from {}",
        kept::ENV
    );
    env
}

/// Writes the files of a claim under `<work>/.sbx/` (the server names them
/// `/work/.sbx/...`), mode 0600; any other path is refused.
fn write_files(work: &std::path::Path, files: &[proto::ConfigFile]) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    for file in files {
        let relative = file
            .path
            .strip_prefix("/work/.sbx/")
            .filter(|r| {
                !r.is_empty()
                    && std::path::Path::new(r)
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

fn process_list(state: &Boxd) -> Vec<proto::Process> {
    state
        .processes
        .list()
        .into_iter()
        .map(|p| proto::Process {
            pid: p.pid,
            cmd: p.cmd,
            started_at_unix: p.started_at_unix,
            exit: p.exit,
            log: p.log,
        })
        .collect()
}

async fn logs(mut stream: Stream, state: &Boxd) {
    let request = match read_request(&mut stream).await {
        Ok(bytes) => parse::<proto::Logs>(&bytes).ok(),
        Err(_) => None,
    };
    let Some((request, process)) = request.and_then(|r| state.processes.get(r.pid).map(|p| (r, p)))
    else {
        stream.reset("no such background process");
        return;
    };
    if let Ok(mut file) = tokio::fs::File::open(&process.log).await {
        let _ = send_log(&mut file, &mut stream, &request, &state.processes).await;
    }
    let _ = stream.shutdown().await;
}

/// How often a followed log is checked for new output.
const FOLLOW_EVERY: Duration = Duration::from_millis(250);

/// Sends a log from the requested offset; when following, keeps sending what
/// is appended until the process has exited and its last output was sent.
async fn send_log(
    file: &mut tokio::fs::File,
    stream: &mut Stream,
    request: &proto::Logs,
    processes: &Processes,
) -> std::io::Result<()> {
    file.seek(std::io::SeekFrom::Start(request.offset)).await?;
    loop {
        // Read whether it ended before reading: output written before the
        // exit is then surely in the file.
        let ended = processes.get(request.pid).is_none_or(|p| p.exit.is_some());
        tokio::io::copy(file, stream).await?;
        if !request.follow || ended {
            return Ok(());
        }
        tokio::time::sleep(FOLLOW_EVERY).await;
    }
}

async fn exec_stream(mut stream: Stream, state: &Boxd) {
    let request = match read_request(&mut stream).await {
        Ok(bytes) => parse::<proto::ExecRequest>(&bytes),
        Err(e) => Err(e.to_string()),
    };
    let request = match request {
        Ok(r) => r,
        Err(e) => {
            let _ = stream.write_all(&Record::Failed(e).encode()).await;
            let _ = stream.shutdown().await;
            return;
        }
    };
    let spec = ExecSpec {
        cmd: request.cmd,
        cwd: request.cwd,
        env: request.env,
        timeout_s: request.timeout_s,
        background: request.background,
    };
    let base_env = state.env.read().map(|e| e.clone()).unwrap_or_default();
    if spec.background {
        let failures = state.private.failures().clone();
        let mark = failures.mark();
        let record = match state
            .processes
            .start(&spec, &base_env, move |pid| failures.caused_by(mark, pid))
        {
            Ok(p) => Record::Started(p.pid),
            Err(e) => Record::Failed(format!("cannot start the command: {e}")),
        };
        let _ = stream.write_all(&record.encode()).await;
        let _ = stream.shutdown().await;
        return;
    }
    let mark = state.private.failures().mark();
    let (tx, mut rx) = mpsc::channel::<Output>(8);
    let runner = tokio::spawn(async move { exec::run(&spec, &base_env, tx).await });
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
    let _ = stream.write_all(&last.encode()).await;
    let _ = stream.shutdown().await;
}

async fn sync(mut stream: Stream, state: &Boxd) {
    // A JSON line with the destination, then the tar bytes.
    let mut head = Vec::new();
    let mut chunk = [0u8; 4096];
    let newline = loop {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break None,
            Ok(n) => {
                head.extend_from_slice(&chunk[..n]);
                if let Some(i) = head.iter().position(|b| *b == b'\n') {
                    break Some(i);
                }
                if head.len() > 64 * 1024 {
                    break None;
                }
            }
        }
    };
    let Some(newline) = newline else {
        return answer_json(
            stream,
            &sync_failed("the sync request line is missing".into()),
        )
        .await;
    };
    let request = match parse::<proto::SyncRequest>(&head[..newline]) {
        Ok(r) => r,
        Err(e) => return answer_json(stream, &sync_failed(e)).await,
    };
    let rest = head[newline + 1..].to_vec();
    let (read_half, write_half) = stream.into_split();
    let work = state.work.clone();
    let result = tokio::task::spawn_blocking(move || {
        let bridge = tokio_util::io::SyncIoBridge::new(read_half);
        let mut reader = std::io::Read::chain(std::io::Cursor::new(rest), bridge);
        let result = unpack::unpack(&mut reader, &work, &request.dest);
        // Read to the sender's FIN (tar padding, or what a refusal left unread),
        // so the stream ends cleanly both ways.
        let _ = std::io::copy(&mut reader, &mut std::io::sink());
        result
    })
    .await;
    let done = match result {
        Ok(Ok(u)) => SyncDone {
            ok: true,
            files: u.files,
            bytes: u.bytes,
            error: None,
        },
        Ok(Err(e)) => sync_failed(e.to_string()),
        Err(e) => sync_failed(e.to_string()),
    };
    let mut write_half = write_half;
    let body = serde_json::to_vec(&done).unwrap_or_default();
    let _ = write_half.write_all(&body).await;
    let _ = write_half.shutdown().await;
}

fn sync_failed(error: String) -> SyncDone {
    SyncDone {
        ok: false,
        files: 0,
        bytes: 0,
        error: Some(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> Arc<Boxd> {
        Arc::new(Boxd {
            info: BoxInfo {
                protocol: 1,
                version: "test".into(),
                boot_id: "b".into(),
                features: vec![],
            },
            env: RwLock::new(vec![("SECRET".into(), "s3cr3t-value".into())]),
            processes: Processes::default(),
            work: std::env::temp_dir(),
            uplink: Uplink::default(),
            private: PrivateNet::new(&Uplink::default()),
        })
    }

    async fn pair() -> Session {
        let (a, b) = tokio::io::duplex(1 << 16);
        let boxd = tokio::spawn(async move {
            let session =
                Session::over_io(a, Role::Server, Config::default(), Hello::new("boxd test"))
                    .await
                    .unwrap();
            serve_session(&session, &state()).await;
        });
        let client = Session::over_io(
            b,
            Role::Client,
            Config::default(),
            Hello::new("server test"),
        )
        .await
        .unwrap();
        drop(boxd);
        client
    }

    async fn fetch(session: &Session, target: &str, body: &[u8]) -> Vec<u8> {
        let mut stream = session.open(target).await.unwrap();
        stream.write_all(body).await.unwrap();
        stream.shutdown().await.unwrap();
        let mut out = Vec::new();
        stream.read_to_end(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn answers_info_and_runs_commands_with_the_configured_env() {
        let session = pair().await;
        let info: BoxInfo = serde_json::from_slice(&fetch(&session, "info", b"").await).unwrap();
        assert_eq!(info.boot_id, "b");
        let request = serde_json::to_vec(&proto::ExecRequest {
            cmd: "echo $SECRET; echo err >&2; exit 4".into(),
            cwd: "/tmp".into(),
            env: vec![],
            timeout_s: Some(10),
            background: false,
        })
        .unwrap();
        let mut bytes = fetch(&session, "exec", &request).await;
        let mut records = Vec::new();
        while let Some(r) = Record::decode(&mut bytes).unwrap() {
            records.push(r);
        }
        assert!(
            records.contains(&Record::Stdout(b"s3cr3t-value\n".to_vec())),
            "{records:?}"
        );
        assert!(
            records.contains(&Record::Stderr(b"err\n".to_vec())),
            "{records:?}"
        );
        assert_eq!(
            records.last(),
            Some(&Record::Exit(proto::Exit {
                code: Some(4),
                signal: None,
                timed_out: false,
                private_endpoint_errors: Vec::new(),
            }))
        );
    }

    #[tokio::test]
    async fn unpacks_a_sync_and_says_so() {
        let session = pair().await;
        let mut tar = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(3);
        h.set_mode(0o644);
        h.set_path("hello.txt").unwrap();
        h.set_cksum();
        tar.append(&h, &b"hi\n"[..]).unwrap();
        let dest = format!("psbx-sync-test-{}", std::process::id());
        let mut body = format!("{{\"dest\":\"{dest}\"}}\n").into_bytes();
        body.extend(tar.into_inner().unwrap());
        let done: SyncDone = serde_json::from_slice(&fetch(&session, "sync", &body).await).unwrap();
        assert!(done.ok, "{done:?}");
        assert_eq!(done.files, 1);
        let written = std::env::temp_dir().join(&dest).join("hello.txt");
        assert_eq!(std::fs::read(&written).unwrap(), b"hi\n");
        let _ = std::fs::remove_dir_all(std::env::temp_dir().join(&dest));
        let refused: SyncDone =
            serde_json::from_slice(&fetch(&session, "sync", b"{\"dest\":\"../x\"}\n").await)
                .unwrap();
        assert!(!refused.ok && refused.error.unwrap().contains("relative path"));
    }
}
