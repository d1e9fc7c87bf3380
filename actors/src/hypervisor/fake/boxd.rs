//! The boxd at the other end of a fake domain's channel: the real session
//! (`psbx_wire`), a hello, and answers to `info` (with the domain's boot id),
//! `health`, `clock` and `configure`, like boxd's `serve.rs`. It serves only
//! while the domain runs: a session ends when the domain pauses or stops, and
//! a connection made while it is paused waits for the resume.
//!
//! Its `exec` and `logs` are those of a boxd that never lets go: `exec`
//! answers `Started` (pid 7) and, for a foreground command, one line of output
//! and then nothing; `logs` sends one line and keeps the stream open. Both
//! hold their stream until the domain stops running. When a test set a real
//! boxd's services ([`Guest`], `guest.rs`), those serve every stream but
//! `info`, `health`, `clock`, `port:<n>` and `shot` instead, while the
//! domain runs.
//!
//! Its `port:<n>` connects to port `n` on the test machine's loopback, so a
//! test serves "the box's" program from a listener of its own.
//!
//! Its `shot` answers any request with [`SHOT_PNG`] (64x48, one colour): as
//! the screenshot, or as the poster of a recording whose file is a few bytes
//! that open as a video but are none ([`FAKE_VIDEO`], [`FAKE_MP4`]),
//! `seconds` long; or, once a test set one, with its [`FakeShot`] (what a
//! hostile boxd can send).

use super::Served;
use super::guest::{Guest, fake_answers};
use psbx_wire::boxd::{
    BoxInfo, Done, ExecRequest, Health, Record, ShotAnswer, ShotHeader, ShotKind, ShotRequest,
};
use psbx_wire::mux::{Config, Incoming, Role, Session};
use psbx_wire::{Hello, PROTOCOL_VERSION};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::watch;

/// What the guest of a domain is doing, as its boxd sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Power {
    /// Running boot `boot_id`; `answers`: its boxd takes new sessions.
    Running {
        boot_id: String,
        answers: bool,
    },
    Paused,
    Off,
}

/// What the fake boxd answers to every `shot` once a test sets it
/// (`FakeHypervisor::set_shot`).
#[derive(Debug, Clone, Default)]
pub struct FakeShot {
    /// The header's media type.
    pub mime: String,
    pub width: u32,
    pub height: u32,
    /// The file's bytes sent.
    pub file: Arc<Vec<u8>>,
    /// The file's length announced, when not `file`'s: past what was sent,
    /// the stream ends (boxd went away mid-file).
    pub announced: Option<u64>,
    /// The poster's bytes (none: no poster).
    pub poster: Arc<Vec<u8>>,
    /// When set, boxd waits for a permit of it after sending `file`, before
    /// it goes on (the test looks at the server mid-shot meanwhile).
    pub hold: Option<Arc<tokio::sync::Semaphore>>,
}

/// The shot a test set for every domain, if any.
pub(super) type ShotScript = Arc<Mutex<Option<FakeShot>>>;

/// The domains whose boxd refuses `configure`.
pub(super) type Unconfigurable = Arc<Mutex<std::collections::BTreeSet<String>>>;

/// What a connection's boxd answers with, and where it notes what it served.
pub(super) struct Scripts {
    pub served: Arc<Mutex<Vec<Served>>>,
    pub shot: ShotScript,
    pub unconfigurable: Unconfigurable,
    /// The real services of the domain's boot, when a test set them.
    pub guest: Option<Arc<dyn Guest>>,
}

/// Serves one connection to the channel of domain `domain`.
pub(super) async fn serve(
    io: DuplexStream,
    mut power: watch::Receiver<Power>,
    domain: String,
    scripts: Scripts,
) {
    let Scripts {
        served,
        shot: script,
        unconfigurable,
        guest,
    } = scripts;
    let refuses_configure = unconfigurable
        .lock()
        .is_ok_and(|names| names.contains(&domain) || names.contains("*"));
    let boot_id = {
        let Ok(now) = power
            .wait_for(|p| matches!(p, Power::Off | Power::Running { answers: true, .. }))
            .await
        else {
            return;
        };
        match &*now {
            Power::Running { boot_id, .. } => boot_id.clone(),
            // Stopped before it answered: the connection closes.
            _ => return,
        }
    };
    let hello = Hello::new("boxd (fake)");
    let session = tokio::select! {
        session = Session::over_io(io, Role::Server, Config::default(), hello) => match session {
            Ok(session) => session,
            Err(_) => return,
        },
        _ = power.wait_for(|p| !matches!(p, Power::Running { .. })) => return,
    };
    let info = BoxInfo {
        protocol: PROTOCOL_VERSION,
        version: "fake".to_owned(),
        boot_id,
        features: ["health", "clock"].map(str::to_owned).to_vec(),
    };
    let watched = power.clone();
    loop {
        tokio::select! {
            incoming = session.accept() => match incoming {
                Some(incoming) => {
                    if let Ok(mut served) = served.lock() {
                        served.push(Served {
                            domain: domain.clone(),
                            target: incoming.target().to_owned(),
                        });
                    }
                    let refused = refuses_configure && incoming.target() == "configure";
                    if let Some(guest) = guest.as_ref().filter(|_| !refused && !fake_answers(incoming.target())) {
                        tokio::spawn(while_running(guest.serve(incoming), watched.clone()));
                        continue;
                    }
                    tokio::spawn(answer(
                        incoming,
                        info.clone(),
                        watched.clone(),
                        script.clone(),
                        refuses_configure,
                    ));
                }
                None => return,
            },
            _ = power.wait_for(|p| !matches!(p, Power::Running { .. })) => {
                session.close();
                return;
            }
        }
    }
}

/// Serves a stream with the guest's services until they finish or the domain
/// stops running (a paused guest answers nothing more on that session).
async fn while_running(serving: super::Serving, mut power: watch::Receiver<Power>) {
    tokio::select! {
        () = serving => {}
        _ = power.wait_for(|p| !matches!(p, Power::Running { .. })) => {}
    }
}

/// Reads the request to its end and answers it as boxd would.
async fn answer(
    incoming: Incoming,
    info: BoxInfo,
    power: watch::Receiver<Power>,
    script: ShotScript,
    refuses_configure: bool,
) {
    let body = match incoming.target() {
        "configure" if refuses_configure => serde_json::to_vec(&Done::failed(
            "the fake boxd refuses its configuration".to_owned(),
        )),
        "exec" | "logs" => return hold(incoming, power).await,
        "shot" => {
            let scripted = script.lock().ok().and_then(|s| s.clone());
            return shot(incoming, scripted).await;
        }
        target if target.starts_with("port:") => return port(incoming, power).await,
        "info" => serde_json::to_vec(&info),
        "health" => serde_json::to_vec(&Health {
            uptime_s: 1.0,
            mem_total_kb: 1 << 20,
            mem_available_kb: 1 << 19,
            ..Health::default()
        }),
        "clock" | "configure" => serde_json::to_vec(&Done::ok()),
        target => {
            let reason = format!("the fake boxd has no service {target:?}");
            incoming.refuse(404, &reason);
            return;
        }
    };
    let mut stream = incoming.accept();
    let _ = (&mut stream)
        .take(1 << 20)
        .read_to_end(&mut Vec::new())
        .await;
    let _ = stream.write_all(&body.unwrap_or_default()).await;
    let _ = stream.shutdown().await;
}

/// The `exec` or `logs` of a boxd that never ends them: the first records,
/// then the stream stays open while the domain runs.
async fn hold(incoming: Incoming, mut power: watch::Receiver<Power>) {
    let exec = incoming.target() == "exec";
    let mut stream = incoming.accept();
    let mut request = Vec::new();
    let _ = (&mut stream).take(1 << 20).read_to_end(&mut request).await;
    let first = if exec {
        let background = serde_json::from_slice::<ExecRequest>(&request)
            .map(|r| r.background)
            .unwrap_or(false);
        let mut records = Record::Started(7).encode();
        if !background {
            records.extend(Record::Stdout(b"working\n".to_vec()).encode());
        }
        records
    } else {
        b"working\n".to_vec()
    };
    if stream.write_all(&first).await.is_ok() {
        let _ = power
            .wait_for(|p| !matches!(p, Power::Running { .. }))
            .await;
    }
}

/// A `port:<n>` stream: a connection to port `n` on the test machine's
/// loopback (the fake box's "loopback"), refused with 502 when nothing
/// listens there, like boxd's; spliced as boxd splices it while the domain
/// runs.
async fn port(incoming: Incoming, mut power: watch::Receiver<Power>) {
    let port = match psbx_wire::boxd::Service::parse(incoming.target()) {
        Some(psbx_wire::boxd::Service::Port(port)) => port,
        _ => 0,
    };
    let Ok(upstream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        incoming.refuse(
            psbx_wire::frame::code::BAD_GATEWAY,
            &format!("nothing listens on port {port}"),
        );
        return;
    };
    let stopped = async {
        let _ = power
            .wait_for(|p| !matches!(p, Power::Running { .. }))
            .await;
        "the box stopped"
    };
    let _ = psbx_wire::splice::splice_until(incoming.accept(), upstream, "boxd", stopped).await;
}

/// The fake boxd's screenshot and poster: a 64x48 PNG of one colour (#3366cc).
pub const SHOT_PNG: &[u8] = include_bytes!("shot.png");
/// The fake boxd's WebM recording: EBML's magic, then bytes that are no video.
pub const FAKE_VIDEO: &[u8] = b"\x1a\x45\xdf\xa3 fake recording";
/// The fake boxd's MP4 recording: a box header `ftyp`, then no video.
pub const FAKE_MP4: &[u8] = b"\0\0\0\x18ftypisom fake recording";

/// Answers a `shot` request line with [`SHOT_PNG`] (and for a recording,
/// [`FAKE_VIDEO`] or [`FAKE_MP4`] with the PNG as its poster), or with the
/// test's [`FakeShot`], then waits for the half-close.
async fn shot(incoming: Incoming, scripted: Option<FakeShot>) {
    let stream = incoming.accept();
    let mut reader = tokio::io::BufReader::new(stream);
    let mut line = Vec::new();
    let _ = tokio::io::AsyncBufReadExt::read_until(&mut reader, b'\n', &mut line).await;
    let mut stream = reader.into_inner();
    let Ok(request) = serde_json::from_slice::<ShotRequest>(&line) else {
        stream.reset("the fake boxd takes only shot request lines");
        return;
    };
    let duration_ms =
        (request.kind == ShotKind::Recording).then(|| u64::from(request.seconds) * 1000);
    if let Some(scripted) = scripted {
        let header = ShotHeader {
            mime: scripted.mime.clone(),
            width: scripted.width,
            height: scripted.height,
            duration_ms,
            bytes: scripted.announced.unwrap_or(scripted.file.len() as u64),
            poster_bytes: scripted.poster.len() as u64,
        };
        let mut out = serde_json::to_vec(&ShotAnswer::Shot(header)).unwrap_or_default();
        out.push(b'\n');
        let _ = stream.write_all(&out).await;
        let _ = stream.write_all(&scripted.file).await;
        if let Some(hold) = &scripted.hold {
            let _ = hold.acquire().await.map(|permit| permit.forget());
        }
        if scripted.announced.is_none() {
            let _ = stream.write_all(&scripted.poster).await;
        }
        let _ = stream.shutdown().await;
        let _ = (&mut stream)
            .take(1 << 20)
            .read_to_end(&mut Vec::new())
            .await;
        return;
    }
    let (mime, file, poster) = match request.kind {
        ShotKind::Screenshot => ("image/png", SHOT_PNG, &[][..]),
        ShotKind::Recording => (
            request.format.mime(),
            match request.format {
                psbx_wire::boxd::VideoFormat::Webm => FAKE_VIDEO,
                psbx_wire::boxd::VideoFormat::Mp4 => FAKE_MP4,
            },
            SHOT_PNG,
        ),
    };
    let header = ShotHeader {
        mime: mime.to_owned(),
        width: 64,
        height: 48,
        duration_ms,
        bytes: file.len() as u64,
        poster_bytes: poster.len() as u64,
    };
    let mut out = serde_json::to_vec(&ShotAnswer::Shot(header)).unwrap_or_default();
    out.push(b'\n');
    out.extend_from_slice(file);
    out.extend_from_slice(poster);
    if stream.write_all(&out).await.is_ok() && stream.shutdown().await.is_ok() {
        let _ = (&mut stream)
            .take(1 << 20)
            .read_to_end(&mut Vec::new())
            .await;
    }
}
