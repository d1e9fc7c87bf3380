//! Screenshots and recordings taken in a real box of the production image
//! (`scripts/image/debian`: chromium, Xvfb, ffmpeg; 2 vCPUs under TCG, no
//! network card), through `POST /v1/boxes/{id}/shots`: a page served in the
//! box at its viewport (its pixels), the whole page, the virtual display,
//! recordings of the display and of a page that ffprobe reads as long as
//! asked, and a page nothing serves refused with chromium's reason. One box
//! serves every case; each case's time goes to stderr (TCG figures).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::vm::BoxServer;
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

/// A page in the box: a blue band 100 px high over a red body, 3000 px tall.
const PAGE: &str = "<!doctype html><html><body style='margin:0;background:#ff0000'>\
<div style='height:100px;background:#0000ff'></div><p>hello from the box</p>\
<div style='height:2800px'></div></body></html>";

fn exec(s: &BoxServer, id: &str, body: Value) -> Value {
    s.ok("POST", &format!("/v1/boxes/{id}/exec"), Some(body))
}

/// Takes a shot; its view and how long the call took.
fn shot(s: &BoxServer, id: &str, what: &str, body: Value) -> Value {
    let started = Instant::now();
    let view = s.ok("POST", &format!("/v1/boxes/{id}/shots"), Some(body));
    eprintln!("shots_box: {what}: {:.1}s", started.elapsed().as_secs_f64());
    view
}

/// The bytes at one of a shot's URLs, fetched with the API key.
fn fetch(s: &BoxServer, url: &str) -> Vec<u8> {
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let res = client.get(url).bearer_auth(&s.key).send().unwrap();
    assert_eq!(res.status().as_u16(), 200, "GET {url}");
    res.bytes().unwrap().to_vec()
}

fn ffmpeg_required() {
    let found = std::process::Command::new("ffprobe")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "ffprobe is not installed on this machine: scripts/setup installs ffmpeg"
    );
}

/// The RGB colour of pixel (`x`, `y`) of an image or video's first frame.
fn pixel(file: &Path, x: u32, y: u32) -> [u8; 3] {
    let out = std::process::Command::new("ffmpeg")
        .args(["-nostdin", "-loglevel", "error", "-i"])
        .arg(file)
        .args(["-vf", &format!("crop=1:1:{x}:{y}"), "-frames:v", "1"])
        .args(["-f", "rawvideo", "-pix_fmt", "rgb24", "pipe:1"])
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stdout.len() == 3,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    [out.stdout[0], out.stdout[1], out.stdout[2]]
}

fn near(got: [u8; 3], want: [u8; 3]) -> bool {
    got.iter().zip(want).all(|(g, w)| g.abs_diff(w) <= 40)
}

/// ffprobe's duration of a recording, in seconds.
fn duration(file: &Path) -> f64 {
    let out = std::process::Command::new("ffprobe")
        .args(["-v", "error", "-show_entries", "format=duration", "-of"])
        .args(["default=nw=1:nk=1"])
        .arg(file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("ffprobe reads no duration: {text}"))
}

#[test]
fn shots_of_pages_and_of_the_display_in_a_real_box() {
    ffmpeg_required();
    let images = psbx_tests::vm::images_dir();
    assert!(
        images.join("debian/manifest.json").is_file(),
        "{}/debian has no production image: scripts/test builds it (scripts/image/debian {}/debian <boxd>)",
        images.display(),
        images.display()
    );
    let s = BoxServer::start(
        "pool_size = 0\nidle_freeze = \"1h\"\nimage = \"debian\"\nunit_vcpus = 2\n\
         unit_memory_mib = 2048\nunit_disk_gb = 8\nboot_timeout = \"300s\"",
    );
    let started = Instant::now();
    let id = s.ok("POST", "/v1/boxes", Some(json!({"name": "shots"})))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    eprintln!("shots_box: boot: {:.1}s", started.elapsed().as_secs_f64());
    let page = format!(
        "mkdir -p /work/www && cat >/work/www/index.html <<'EOF'\n{PAGE}\nEOF\n\
         cd /work/www && exec python3 -m http.server 3000 --bind 127.0.0.1"
    );
    exec(&s, &id, json!({"cmd": page, "background": true}));
    let up = exec(
        &s,
        &id,
        json!({"cmd": "for i in $(seq 1 100); do curl -fsS -o /dev/null http://127.0.0.1:3000/ && echo up && break; sleep 0.2; done"}),
    );
    assert!(up.to_string().contains("up"), "{up}");
    let dir = tempfile::tempdir().unwrap();

    // A page at its viewport: the band at the top, the body below.
    let view = shot(
        &s,
        &id,
        "page screenshot 800x600 (chromium start included)",
        json!({"url": "http://localhost:3000/", "width": 800, "height": 600}),
    );
    assert_eq!(
        (view["width"].as_u64(), view["height"].as_u64()),
        (Some(800), Some(600)),
        "{view}"
    );
    assert_eq!(view["mime"], "image/png");
    let png = dir.path().join("page.png");
    std::fs::write(&png, fetch(&s, view["url"].as_str().unwrap())).unwrap();
    assert_eq!(pixel(&png, 10, 10), [0, 0, 255]);
    assert_eq!(pixel(&png, 790, 590), [255, 0, 0]);

    // The whole page.
    let view = shot(
        &s,
        &id,
        "full page screenshot",
        json!({"url": "http://localhost:3000/", "width": 800, "height": 600, "fullPage": true}),
    );
    let height = view["height"].as_u64().unwrap();
    assert!((2900..=3100).contains(&height), "{view}");

    // The virtual display (Xvfb :99, from xvfb.service or started by boxd).
    let view = shot(&s, &id, "display screenshot", json!({}));
    assert_eq!(
        (view["width"].as_u64(), view["height"].as_u64()),
        (Some(1920), Some(1080)),
        "{view}"
    );

    // A recording of the display, 3 s, that plays for about 3 s.
    let view = shot(
        &s,
        &id,
        "display recording 3s webm",
        json!({"kind": "recording", "seconds": 3}),
    );
    assert_eq!(view["mime"], "video/webm", "{view}");
    let webm = dir.path().join("display.webm");
    std::fs::write(&webm, fetch(&s, view["url"].as_str().unwrap())).unwrap();
    let seconds = duration(&webm);
    assert!((2.4..=3.8).contains(&seconds), "{seconds}s: {view}");
    assert!(view["posterUrl"].is_string(), "{view}");

    // A recording of the page (a chromium window on the display), mp4.
    let view = shot(
        &s,
        &id,
        "page recording 3s mp4 (chromium start included)",
        json!({"kind": "recording", "seconds": 3, "format": "mp4",
               "url": "http://localhost:3000/", "width": 800, "height": 600}),
    );
    assert_eq!(view["mime"], "video/mp4", "{view}");
    let mp4 = dir.path().join("page.mp4");
    std::fs::write(&mp4, fetch(&s, view["url"].as_str().unwrap())).unwrap();
    let seconds = duration(&mp4);
    assert!((2.4..=3.8).contains(&seconds), "{seconds}s: {view}");
    let poster = dir.path().join("poster.png");
    std::fs::write(&poster, fetch(&s, view["posterUrl"].as_str().unwrap())).unwrap();
    let (top, bottom) = (pixel(&poster, 20, 20), pixel(&poster, 780, 580));
    assert!(
        near(top, [0, 0, 255]) && near(bottom, [255, 0, 0]),
        "{top:?} {bottom:?}"
    );

    // Nothing serves this port: refused with chromium's reason.
    let started = Instant::now();
    let (status, answer) = s.call(
        "POST",
        &format!("/v1/boxes/{id}/shots"),
        Some(json!({"url": "http://localhost:3999/"})),
    );
    eprintln!(
        "shots_box: refused page: {:.1}s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(status, 502, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("ERR_CONNECTION_REFUSED"), "{answer}");

    s.ok("DELETE", &format!("/v1/boxes/{id}"), None);
}
