//! The first task the FAQ suggests, end to end on the production image, told on the
//! box of `boxnet.rs`'s production test (one boot of the production image instead of
//! two: its boots are slow under TCG): an agent (the Python MCP SDK) serves a page in
//! the box, takes screenshots of the page and of the virtual display and a recording
//! with `sandbox_shot`, and hands the box over with `sandbox_review`, waiting; a
//! person (Playwright with Debian's Chromium) signs in to `/app`, finds the box under
//! "Ready for you", circles something on the agent's screenshot, writes what is wrong
//! and sends it; the agent's wait returns that text and the image with the circle.
//! Then "Shut down" in the app stops the box. Between the two, the REST cases of
//! shots (pixels, the whole page, mp4, a refused page: [`shots_through_rest`]).
//! Not a test binary of its own: `boxnet.rs` includes it as a module.
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use psbx_tests::vm::BoxServer;
use psbx_tests::wait;
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
    eprintln!("review: {what}: {:.1}s", started.elapsed().as_secs_f64());
    view
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

const PASSWORD: &str = "the-review-test-password";
const FEEDBACK: &str = "the button is cut off";

fn png(b64: &str) -> image::RgbaImage {
    let bytes = STANDARD.decode(b64).expect("base64 image content");
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    image::load_from_memory_with_format(&bytes, image::ImageFormat::Png)
        .expect("the PNG decodes")
        .to_rgba8()
}

fn is_red(p: &image::Rgba<u8>) -> bool {
    p[0] > 180 && p[1] < 90 && p[2] < 90
}

fn is_dark(p: &image::Rgba<u8>) -> bool {
    p[0] < 100 && p[1] < 100 && p[2] < 100
}

/// Pixels in the rectangle `[x0, x1) x [y0, y1)` matching `test`.
fn count(
    img: &image::RgbaImage,
    (x0, y0, x1, y1): (u32, u32, u32, u32),
    test: fn(&image::Rgba<u8>) -> bool,
) -> usize {
    (y0..y1.min(img.height()))
        .flat_map(|y| (x0..x1.min(img.width())).map(move |x| (x, y)))
        .filter(|&(x, y)| test(img.get_pixel(x, y)))
        .count()
}

/// The one image of a tool result, decoded.
fn only_image(result: &Value) -> image::RgbaImage {
    assert_eq!(result["error"], false, "{result}");
    let images = result["images"].as_array().unwrap();
    assert_eq!(images.len(), 1, "one image content: {result}");
    assert_eq!(images[0]["mime"], "image/png", "{result}");
    png(images[0]["data"].as_str().unwrap())
}

fn fetch(s: &BoxServer, url: &str) -> Vec<u8> {
    let res = reqwest::blocking::Client::new()
        .get(url)
        .bearer_auth(&s.key)
        .send()
        .expect("fetching a shot's file");
    assert_eq!(res.status(), 200, "{url}");
    res.bytes().unwrap().to_vec()
}

/// Shots through REST on the same box: a page at its viewport (its pixels),
/// the whole page, the display at its size, a display recording and a page
/// recording (mp4) that ffprobe reads as long as asked, with the page in the
/// poster, and a page nothing serves refused with Chromium's reason. Each
/// call's time goes to stderr (TCG figures).
fn shots_through_rest(s: &BoxServer, id: &str, dir: &Path) {
    let page = format!(
        "mkdir -p /work/www && cat >/work/www/index.html <<'EOF'\n{PAGE}\nEOF\n\
         cd /work/www && exec python3 -m http.server 3001 --bind 127.0.0.1"
    );
    exec(s, id, json!({"cmd": page, "background": true}));
    let up = exec(
        s,
        id,
        json!({"cmd": "for i in $(seq 1 100); do curl -fsS -o /dev/null http://127.0.0.1:3001/ && echo up && break; sleep 0.2; done"}),
    );
    assert!(up.to_string().contains("up"), "{up}");

    // A page at its viewport: the band at the top, the body below.
    let view = shot(
        s,
        id,
        "page screenshot 800x600 (chromium start included)",
        json!({"url": "http://localhost:3001/", "width": 800, "height": 600}),
    );
    assert_eq!(
        (view["width"].as_u64(), view["height"].as_u64()),
        (Some(800), Some(600)),
        "{view}"
    );
    assert_eq!(view["mime"], "image/png");
    let png = dir.join("page.png");
    std::fs::write(&png, fetch(s, view["url"].as_str().unwrap())).unwrap();
    assert_eq!(pixel(&png, 10, 10), [0, 0, 255]);
    assert_eq!(pixel(&png, 790, 590), [255, 0, 0]);

    // The whole page.
    let view = shot(
        s,
        id,
        "full page screenshot",
        json!({"url": "http://localhost:3001/", "width": 800, "height": 600, "fullPage": true}),
    );
    let height = view["height"].as_u64().unwrap();
    assert!((2900..=3100).contains(&height), "{view}");

    // The virtual display (Xvfb :99, from xvfb.service or started by boxd).
    let view = shot(s, id, "display screenshot", json!({}));
    assert_eq!(
        (view["width"].as_u64(), view["height"].as_u64()),
        (Some(1920), Some(1080)),
        "{view}"
    );

    // A recording of the display, 3 s, that plays for about 3 s.
    let view = shot(
        s,
        id,
        "display recording 3s webm",
        json!({"kind": "recording", "seconds": 3}),
    );
    assert_eq!(view["mime"], "video/webm", "{view}");
    let webm = dir.join("display.webm");
    std::fs::write(&webm, fetch(s, view["url"].as_str().unwrap())).unwrap();
    let seconds = duration(&webm);
    assert!((2.4..=3.8).contains(&seconds), "{seconds}s: {view}");
    assert!(view["posterUrl"].is_string(), "{view}");

    // A recording of the page (a chromium window on the display), mp4.
    let view = shot(
        s,
        id,
        "page recording 3s mp4 (chromium start included)",
        json!({"kind": "recording", "seconds": 3, "format": "mp4",
               "url": "http://localhost:3001/", "width": 800, "height": 600}),
    );
    assert_eq!(view["mime"], "video/mp4", "{view}");
    let mp4 = dir.join("page.mp4");
    std::fs::write(&mp4, fetch(s, view["url"].as_str().unwrap())).unwrap();
    let seconds = duration(&mp4);
    assert!((2.4..=3.8).contains(&seconds), "{seconds}s: {view}");
    let poster = dir.join("poster.png");
    std::fs::write(&poster, fetch(s, view["posterUrl"].as_str().unwrap())).unwrap();
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
        "review: refused page: {:.1}s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(status, 502, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("ERR_CONNECTION_REFUSED"), "{answer}");
}

/// The review story on box `box_id` of server `s` (the production image, a page
/// served on its port 3000 by the agent): shots, the REST cases, the hand-over and the
/// person's answer; it ends with the box stopped by "Shut down".
pub fn run(s: &BoxServer, box_id: &str) {
    psbx_tests::browser::require();
    assert!(
        std::process::Command::new("ffprobe")
            .arg("-version")
            .output()
            .is_ok(),
        "ffprobe is missing: run scripts/setup (it installs ffmpeg)"
    );
    let (ok, _, err) = s.cli_with_input(&["account", "set-password"], &format!("{PASSWORD}\n"));
    assert!(ok, "psbx account set-password: {err}");
    let mcp = format!("{}/mcp", s.url());

    // The agent's screenshots and recording.
    let shots = psbx_tests::python::run_json("review_agent.py", &[&mcp, &s.key, "shots", box_id]);
    assert_eq!(shots["box"], box_id, "{shots}");
    let box_id = box_id.to_owned();

    // The page at 1600x1000 comes back at 1280x800, the text and the red block
    // where the page puts them (scaled by 0.8).
    let page = only_image(&shots["page"]);
    assert_eq!((page.width(), page.height()), (1280, 800));
    let shot = &shots["page"]["value"];
    assert_eq!(
        (shot["width"].as_u64(), shot["height"].as_u64()),
        (Some(1600), Some(1000)),
        "{shot}"
    );
    assert_eq!(shot["mime"], "image/png");
    let red = count(&page, (650, 490, 790, 550), is_red);
    assert!(
        red > 140 * 60 * 9 / 10,
        "the red block at (640..800, 480..560): {red} red pixels"
    );
    assert_eq!(
        count(&page, (0, 0, 1280, 70), is_dark),
        0,
        "nothing above the title"
    );
    let text = count(&page, (80, 80, 640, 140), is_dark);
    assert!(
        text > 500,
        "the title's text at (80..640, 80..140): {text} dark pixels"
    );
    let full = image::load_from_memory(&fetch(s, shot["url"].as_str().unwrap())).unwrap();
    assert_eq!((full.width(), full.height()), (1600, 1000));

    // The virtual display: 1920x1080, shown at 1280x720.
    let display = only_image(&shots["display"]);
    assert_eq!((display.width(), display.height()), (1280, 720));
    assert_eq!(
        shots["display"]["value"]["width"], 1920,
        "{}",
        shots["display"]
    );

    // A 3-second recording: a file ffprobe plays for about 3 s, and its poster.
    let recording = &shots["recording"]["value"];
    assert_eq!(recording["mime"], "video/webm", "{}", shots["recording"]);
    only_image(&shots["recording"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("recording.webm");
    std::fs::write(&file, fetch(s, recording["url"].as_str().unwrap())).unwrap();
    let seconds = duration(&file);
    assert!(
        (2.0..=4.5).contains(&seconds),
        "a 3 s recording lasts {seconds} s"
    );

    shots_through_rest(s, &box_id, dir.path());

    // The hand-over: the agent waits while the person answers in the app.
    let agent = {
        let (mcp, key, box_id) = (mcp.clone(), s.key.clone(), box_id.clone());
        std::thread::spawn(move || {
            psbx_tests::python::run_json("review_agent.py", &[&mcp, &key, "review", &box_id, "280"])
        })
    };
    wait::until(
        "the review under \"Ready for you\"",
        Duration::from_secs(60),
        || {
            let list = s.ok("GET", "/v1/reviews?state=waiting", None);
            (list["reviews"].as_array().map(Vec::len) == Some(1)).then_some(())
        },
    );
    let person = psbx_tests::browser::run_json(
        "review.mjs",
        &json!({
            "baseUrl": s.url(),
            "account": "default",
            "password": PASSWORD,
            "reviewTitle": "The home page",
            "text": FEEDBACK,
            "shutDown": true,
        }),
    );
    assert_eq!(person["ok"], true, "{person}");
    let answered = agent.join().expect("the agent's thread");

    // The agent got the text and the image with the circle, in the same call.
    assert_eq!(answered["error"], false, "{answered}");
    assert_eq!(answered["value"]["state"], "answered", "{answered}");
    assert!(
        answered["texts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t.as_str().unwrap().contains(FEEDBACK)),
        "{answered}"
    );
    assert_eq!(answered["value"]["feedback"][0]["text"], FEEDBACK);
    assert!(
        !answered["progress"].as_array().unwrap().is_empty(),
        "progress while waiting: {answered}"
    );
    let drawn = only_image(&json!({"error": false, "images": answered["images"]}));
    let natural = &answered["value"]["feedback"][0]["image"];
    let scale = f64::from(drawn.width()) / natural["width"].as_f64().unwrap();
    let circle = &person["circle"];
    let (cx, cy, r) = (
        circle["cx"].as_f64().unwrap() * scale,
        circle["cy"].as_f64().unwrap() * scale,
        circle["r"].as_f64().unwrap() * scale,
    );
    let on_circle = (0..24)
        .filter(|k| {
            let a = f64::from(*k) * std::f64::consts::TAU / 24.0;
            let (x, y) = (cx + r * a.cos(), cy + r * a.sin());
            (-4i32..=4).any(|dx| {
                (-4i32..=4).any(|dy| {
                    let (px, py) = (x as i32 + dx, y as i32 + dy);
                    px >= 0
                        && py >= 0
                        && (px as u32) < drawn.width()
                        && (py as u32) < drawn.height()
                        && is_red(drawn.get_pixel(px as u32, py as u32))
                })
            })
        })
        .count();
    assert!(
        on_circle >= 20,
        "the circle's stroke at {on_circle} of 24 points around ({cx:.0}, {cy:.0}) r {r:.0}"
    );
    assert_eq!(
        answered["status_after"]["value"]["review"]["state"], "answered",
        "sandbox_status has the review: {}",
        answered["status_after"]
    );

    // "Shut down" stopped the box: its domain is gone; the review keeps its shots.
    wait::until("the box's domain to go", Duration::from_secs(120), || {
        psbx_tests::vm::domain_state(&box_id)
            .is_none()
            .then_some(())
    });
    assert_eq!(s.db_box_state(&box_id).as_deref(), Some("stopped"));
    let kept = s.ok("GET", &format!("/v1/boxes/{box_id}/shots"), None);
    // The agent's three and the five taken through REST.
    assert_eq!(kept["shots"].as_array().unwrap().len(), 8, "{kept}");
}
