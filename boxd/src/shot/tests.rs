//! Shots with the real tools of the host (chromium, Xvfb, ffmpeg, ffprobe:
//! `scripts/setup` installs them), on a display number of the test's own
//! and of pages a local HTTP server on 127.0.0.1 serves.

use super::*;
use psbx_wire::boxd::VideoFormat;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A display number no other test (or X server) uses, held while alive.
pub(crate) struct FreeDisplay {
    pub number: u32,
    lock: PathBuf,
}

impl FreeDisplay {
    pub fn take() -> Self {
        let start = 200 + std::process::id() % 400;
        for number in (start..start + 400).chain(200..start) {
            let taken = Path::new(&format!("/tmp/.X11-unix/X{number}")).exists()
                || Path::new(&format!("/tmp/.X{number}-lock")).exists();
            let lock = PathBuf::from(format!("/tmp/psbx-test-display-{number}.lock"));
            if !taken
                && std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&lock)
                    .is_ok()
            {
                return Self { number, lock };
            }
        }
        panic!("no free X display number from 200 to 599");
    }
}

impl Drop for FreeDisplay {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.lock);
    }
}

/// Serves `html` to every request on 127.0.0.1; its port.
pub(crate) async fn serve_page(html: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut tcp, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{html}",
                    html.len()
                );
                let _ = tcp.write_all(response.as_bytes()).await;
                let _ = tcp.shutdown().await;
            });
        }
    });
    port
}

/// A page: a blue band 100 px high over a red body.
pub(crate) const BANDED: &str = "<!doctype html><html><body style=\"margin:0;background:#ff0000\">\
    <div style=\"height:100px;background:#0000ff\"></div><p>hello from the box</p></body></html>";

const TALL: &str = "<!doctype html><html><body style=\"margin:0;background:#00ff00\">\
    <div style=\"height:3000px\"></div></body></html>";

/// The RGB colour of pixel (`x`, `y`) of an image file, through ffmpeg.
pub(crate) fn pixel(image: &Path, x: u32, y: u32) -> [u8; 3] {
    let out = std::process::Command::new("ffmpeg")
        .args(["-nostdin", "-loglevel", "error", "-i"])
        .arg(image)
        .args(["-vf", &format!("crop=1:1:{x}:{y}"), "-frames:v", "1"])
        .args(["-f", "rawvideo", "-pix_fmt", "rgb24", "pipe:1"])
        .output()
        .expect("ffmpeg (apt-get install ffmpeg) reads the image");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    [out.stdout[0], out.stdout[1], out.stdout[2]]
}

/// Whether two colours are within `by` of each other on every channel
/// (video codecs move colours a little).
fn near(got: [u8; 3], want: [u8; 3], by: u8) -> bool {
    got.iter().zip(want).all(|(g, w)| g.abs_diff(w) <= by)
}

fn page(port: u16) -> String {
    format!("http://127.0.0.1:{port}/")
}

/// A loopback port where nothing listens, held (bound, never listening) for
/// as long as the socket lives: a connection to it is refused, and no other
/// test's listener can take it meanwhile (a port only released could be, and
/// the "refused" page then loaded: seen once in a full run).
fn closed_port() -> (tokio::net::TcpSocket, u16) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = socket.local_addr().unwrap().port();
    (socket, port)
}

#[tokio::test]
async fn a_page_is_shot_at_its_viewport() {
    let port = serve_page(BANDED).await;
    let dir = tempfile::tempdir().unwrap();
    let display = FreeDisplay::take();
    let shooter = Shooter::new(display.number);
    let request = ShotRequest {
        url: Some(page(port)),
        width: 800,
        height: 600,
        ..ShotRequest::default()
    };
    let taken = shooter.take(&request, dir.path()).await.unwrap();
    assert_eq!(taken.header.mime, "image/png");
    assert_eq!((taken.header.width, taken.header.height), (800, 600));
    assert_eq!(taken.header.poster_bytes, 0);
    assert_eq!(taken.header.duration_ms, None);
    let len = std::fs::metadata(&taken.file).unwrap().len();
    assert_eq!(taken.header.bytes, len);
    assert_eq!(pixel(&taken.file, 10, 10), [0, 0, 255]);
    assert_eq!(pixel(&taken.file, 790, 590), [255, 0, 0]);
}

#[tokio::test]
async fn one_browser_takes_shot_after_shot_on_fresh_pages() {
    let (banded, tall) = (serve_page(BANDED).await, serve_page(TALL).await);
    let (_held, gone) = closed_port();
    let dir = tempfile::tempdir().unwrap();
    let shooter = Shooter::new(FreeDisplay::take().number);
    let first = ShotRequest {
        url: Some(page(banded)),
        width: 800,
        height: 600,
        ..ShotRequest::default()
    };
    let taken = shooter.take(&first, dir.path()).await.unwrap();
    assert_eq!(pixel(&taken.file, 10, 10), [0, 0, 255]);
    let browser = shooter.kept_browser().await.expect("the browser is kept");
    // A page's own error keeps the browser.
    let refused = ShotRequest {
        url: Some(page(gone)),
        ..ShotRequest::default()
    };
    assert_eq!(
        shooter.take(&refused, dir.path()).await.unwrap_err().code(),
        502
    );
    // The next page is shot at its own viewport, from a fresh page.
    let second = ShotRequest {
        url: Some(page(tall)),
        width: 640,
        height: 480,
        full_page: true,
        ..ShotRequest::default()
    };
    let taken = shooter.take(&second, dir.path()).await.unwrap();
    assert_eq!((taken.header.width, taken.header.height), (640, 3000));
    assert_eq!(pixel(&taken.file, 10, 10), [0, 255, 0]);
    assert_eq!(
        shooter.kept_browser().await,
        Some(browser),
        "the same chromium"
    );
    // A kept browser that died is replaced.
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(i32::try_from(browser).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let taken = shooter.take(&first, dir.path()).await.unwrap();
    assert_eq!(pixel(&taken.file, 790, 590), [255, 0, 0]);
    let replaced = shooter.kept_browser().await.unwrap();
    assert_ne!(replaced, browser);
    // Dropping the shooter ends its browser.
    drop(shooter);
    for _ in 0..100 {
        if nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(replaced).unwrap()),
            None,
        )
        .is_err()
        {
            return;
        }
        let stat = std::fs::read_to_string(format!("/proc/{replaced}/stat")).unwrap_or_default();
        if stat.contains(") Z") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the kept chromium {replaced} outlived its shooter");
}

#[tokio::test]
async fn a_full_page_is_as_tall_as_its_content() {
    let port = serve_page(TALL).await;
    let dir = tempfile::tempdir().unwrap();
    let display = FreeDisplay::take();
    let shooter = Shooter::new(display.number);
    let request = ShotRequest {
        url: Some(page(port)),
        width: 640,
        height: 480,
        full_page: true,
        ..ShotRequest::default()
    };
    let taken = shooter.take(&request, dir.path()).await.unwrap();
    assert_eq!((taken.header.width, taken.header.height), (640, 3000));
    assert_eq!(pixel(&taken.file, 320, 2990), [0, 255, 0]);
}

#[tokio::test]
async fn an_unreachable_page_is_refused_naming_it() {
    let (_held, port) = closed_port();
    let dir = tempfile::tempdir().unwrap();
    let display = FreeDisplay::take();
    let shooter = Shooter::new(display.number);
    let request = ShotRequest {
        url: Some(page(port)),
        ..ShotRequest::default()
    };
    let e = shooter.take(&request, dir.path()).await.unwrap_err();
    assert_eq!(e.code(), 502, "{e}");
    let text = e.to_string();
    assert!(text.contains(&page(port)), "{text}");
    assert!(text.contains("net::ERR_CONNECTION_REFUSED"), "{text}");
}

#[tokio::test]
async fn a_bad_request_is_refused_with_400() {
    let dir = tempfile::tempdir().unwrap();
    let shooter = Shooter::new(FreeDisplay::take().number);
    let request = ShotRequest {
        url: Some("file:///etc/passwd".into()),
        ..ShotRequest::default()
    };
    let e = shooter.take(&request, dir.path()).await.unwrap_err();
    assert_eq!(e.code(), 400, "{e}");
}

#[tokio::test]
async fn the_display_is_started_on_demand_and_shot() {
    let dir = tempfile::tempdir().unwrap();
    let display = FreeDisplay::take();
    let socket = PathBuf::from(format!("/tmp/.X11-unix/X{}", display.number));
    let shooter = Shooter::new(display.number);
    let taken = shooter
        .take(&ShotRequest::default(), dir.path())
        .await
        .unwrap();
    assert_eq!((taken.header.width, taken.header.height), (1920, 1080));
    assert!(socket.exists(), "Xvfb keeps running");
    // A second shot uses the same display.
    let again = shooter
        .take(&ShotRequest::default(), dir.path())
        .await
        .unwrap();
    assert_eq!(again.header.width, 1920);
    drop(shooter);
    for _ in 0..100 {
        if !socket.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the Xvfb the shooter started is still there");
}

#[tokio::test]
async fn a_recording_of_the_display_plays_for_its_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let display = FreeDisplay::take();
    let shooter = Shooter::new(display.number);
    let request = ShotRequest {
        kind: ShotKind::Recording,
        seconds: 2,
        ..ShotRequest::default()
    };
    let taken = shooter.take(&request, dir.path()).await.unwrap();
    assert_eq!(taken.header.mime, "video/webm");
    assert_eq!((taken.header.width, taken.header.height), (1280, 720));
    let ms = taken.header.duration_ms.unwrap();
    // Seen once in a while at 1,400 ms on a loaded machine (cause not found
    // yet): the frames' times say whether frames went missing at the start,
    // in the middle or at the end.
    assert!(
        (1500..=2600).contains(&ms),
        "{ms} ms; frames at (s): {}",
        frame_times(&taken.file)
    );
    // ffprobe reads it back (the header's facts came from it, check anew).
    let probed = record::probe(&taken.file).await.unwrap();
    assert_eq!(probed.duration_ms, ms);
    let poster = taken.poster.unwrap();
    let head = std::fs::read(&poster).unwrap();
    assert_eq!(png_size(&head), Some((1280, 720)));
    assert_eq!(taken.header.poster_bytes, head.len() as u64);
}

#[tokio::test]
async fn a_recording_of_a_page_shows_the_page_at_the_top_left() {
    let port = serve_page(BANDED).await;
    let dir = tempfile::tempdir().unwrap();
    let display = FreeDisplay::take();
    let shooter = Shooter::new(display.number);
    let request = ShotRequest {
        kind: ShotKind::Recording,
        url: Some(page(port)),
        width: 800,
        height: 600,
        seconds: 2,
        format: VideoFormat::Mp4,
        ..ShotRequest::default()
    };
    let taken = shooter.take(&request, dir.path()).await.unwrap();
    assert_eq!(taken.header.mime, "video/mp4");
    assert_eq!((taken.header.width, taken.header.height), (800, 600));
    let ms = taken.header.duration_ms.unwrap();
    // Seen once in a while at 1,400 ms on a loaded machine (cause not found
    // yet): the frames' times say whether frames went missing at the start,
    // in the middle or at the end.
    assert!(
        (1500..=2600).contains(&ms),
        "{ms} ms; frames at (s): {}",
        frame_times(&taken.file)
    );
    let poster = taken.poster.unwrap();
    let (top, bottom) = (pixel(&poster, 20, 20), pixel(&poster, 780, 580));
    assert!(near(top, [0, 0, 255], 40), "the band: {top:?}");
    assert!(near(bottom, [255, 0, 0], 40), "the body: {bottom:?}");
}

#[test]
fn png_sizes_are_read_from_the_header() {
    let mut head = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    head.extend_from_slice(&1280u32.to_be_bytes());
    head.extend_from_slice(&720u32.to_be_bytes());
    assert_eq!(png_size(&head), Some((1280, 720)));
    assert_eq!(png_size(&head[..20]), None);
    assert_eq!(png_size(b"GIF89a..................."), None);
}

/// The presentation times of a video's frames, as ffprobe reads them.
fn frame_times(video: &std::path::Path) -> String {
    let out = std::process::Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v:0"])
        .args(["-show_entries", "frame=pts_time", "-of", "csv=p=0"])
        .arg(video)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}
