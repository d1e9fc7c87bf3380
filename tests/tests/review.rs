//! The first task the FAQ suggests, end to end on the production image: an
//! agent (the Python MCP SDK) starts a box, serves a page in it, takes
//! screenshots of the page and of the virtual display and a recording with
//! `sandbox_shot`, and hands the box over with `sandbox_review`, waiting; a
//! person (Playwright with Debian's Chromium) signs in to `/app`, finds the
//! box under "Ready for you", circles something on the agent's screenshot,
//! writes what is wrong and sends it; the agent's wait returns that text and
//! the image with the circle. Then "Shut down" in the app stops the box.
//! One booted box for all of it (boots of the production image are slow
//! under TCG).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use psbx_tests::vm::BoxServer;
use psbx_tests::wait;
use serde_json::{Value, json};
use std::time::Duration;

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

#[test]
fn an_agent_shoots_a_page_hands_the_box_over_and_gets_the_circled_feedback() {
    let images = psbx_tests::vm::images_dir();
    assert!(
        images.join("debian/manifest.json").is_file(),
        "{}/debian has no production image: scripts/test builds it (scripts/image/debian)",
        images.display()
    );
    psbx_tests::browser::require();
    assert!(
        std::process::Command::new("ffprobe")
            .arg("-version")
            .output()
            .is_ok(),
        "ffprobe is missing: run scripts/setup (it installs ffmpeg)"
    );
    let s = BoxServer::start(
        "pool_size = 0\nidle_freeze = \"1h\"\nimage = \"debian\"\nunit_vcpus = 2\n\
         unit_memory_mib = 2048\nunit_disk_gb = 8\nboot_timeout = \"300s\"",
    );
    let (ok, _, err) = s.cli_with_input(&["account", "set-password"], &format!("{PASSWORD}\n"));
    assert!(ok, "psbx account set-password: {err}");
    let mcp = format!("{}/mcp", s.url());

    // The agent's screenshots and recording.
    let shots = psbx_tests::python::run_json("review_agent.py", &[&mcp, &s.key, "shots"]);
    let box_id = shots["box"].as_str().unwrap().to_owned();

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
    let full = image::load_from_memory(&fetch(&s, shot["url"].as_str().unwrap())).unwrap();
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
    std::fs::write(&file, fetch(&s, recording["url"].as_str().unwrap())).unwrap();
    let probe = std::process::Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-show_entries",
            "format=duration",
            "-of",
            "csv=p=0",
        ])
        .arg(&file)
        .output()
        .unwrap();
    let duration: f64 = String::from_utf8_lossy(&probe.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| {
            panic!(
                "ffprobe read no duration: {}",
                String::from_utf8_lossy(&probe.stderr)
            )
        });
    assert!(
        (2.0..=4.5).contains(&duration),
        "a 3 s recording lasts {duration} s"
    );

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
    assert_eq!(kept["shots"].as_array().unwrap().len(), 3, "{kept}");
}
