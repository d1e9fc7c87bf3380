//! The web app's browser flows in Chromium (tests/browser/review.mjs and
//! secrets.mjs), against the real app on a loopback listener with the fake
//! hypervisor (`psbx_actors::hypervisor::fake`): a box started through
//! `POST /v1/boxes` runs as an in-memory domain with its fake boxd, so no VM
//! and no box image are needed. The review is handed over through REST
//! (`POST /v1/boxes/{id}/reviews`) and its screenshot stored through
//! [`Shots`] directly (the fake boxd takes no screenshots). The whole loop
//! with a real box and an MCP agent is the lead's end-to-end test.
//!
//! Here rather than in tests/tests/: the test crate does not depend on the
//! server and actor crates, which an in-process server needs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::logs;

use actix_web::dev::ServerHandle;
use psbx_actors::hypervisor::Hypervisor;
use psbx_actors::hypervisor::fake::FakeHypervisor;
use psbx_actors::ids::{AccountId, BoxId};
use psbx_actors::shots::{NewFiles, Part, Shots, StoredKind};
use psbx_actors::store::{PoolOptions, Store};
use psbx_server::config::{BoxesConfig, Config};
use psbx_tests::TestDatabase;
use serde_json::{Value, json};

use std::time::Duration;

const PASSWORD: &str = "correct horse battery";

/// The app serving on loopback with a fake host; stopped when dropped.
struct Served {
    url: String,
    key: String,
    account: AccountId,
    account_name: String,
    store: Store,
    shots: Shots,
    fake: FakeHypervisor,
    handle: ServerHandle,
    thread: Option<std::thread::JoinHandle<()>>,
    runtime: tokio::runtime::Runtime,
    _db: TestDatabase,
    _dir: tempfile::TempDir,
}

impl Served {
    fn start() -> Self {
        let db = TestDatabase::new();
        let store = Store::open(db.url(), PoolOptions::short_lived(8)).unwrap();
        let first = store.bootstrap().unwrap().unwrap();
        store.set_password(&first.account.id, PASSWORD).unwrap();
        let server = store.register_server("app-browser", "0").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let images = common::fake_image(dir.path());
        let (listener, url) = common::loopback();
        let config = Config {
            data_dir: dir.path().to_owned(),
            public_url: Some(url.clone()),
            box_domain: "box.localhost".into(),
            boxes: common::fake_host_boxes(images, &BoxesConfig::default().idle_freeze),
            ..Config::default()
        };
        let fake = FakeHypervisor::new(&format!("fake:///{}", db.name()));
        let served = common::serve_on_fake_host(
            &store,
            server.id.as_str(),
            fake.clone(),
            config,
            listener,
            2,
        );
        let (handle, shots, thread) = (served.handle, served.shots, served.thread);
        Self {
            key: first.key.secret.expose().to_owned(),
            account: first.account.id.clone(),
            account_name: first.account.name.clone(),
            url,
            store,
            shots,
            fake,
            handle,
            thread: Some(thread),
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            _db: db,
            _dir: dir,
        }
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        psbx_tests::api::call(&self.url, &self.key, method, path, body)
    }

    /// A running box of the account.
    fn running_box(&self) -> String {
        let (status, started) = self.call("POST", "/v1/boxes", Some(json!({"name": "review me"})));
        assert_eq!(status, 201, "{started}");
        let id = started["id"].as_str().unwrap().to_owned();
        psbx_tests::wait::until("the box runs", Duration::from_secs(60), || {
            let (_, got) = self.call("GET", &format!("/v1/boxes/{id}"), None);
            (got["state"] == "running").then_some(())
        });
        id
    }

    /// Stores a screenshot of the box (what `sandbox_shot` would have taken).
    fn screenshot(&self, box_id: &str, png: Vec<u8>, (width, height): (u32, u32)) -> String {
        let files = NewFiles {
            full: png,
            preview: None,
            poster: None,
        };
        let row = self
            .shots
            .new_row(
                &self.account,
                &BoxId::parse(box_id).unwrap(),
                StoredKind::Screenshot,
                "image/png",
                (width, height),
                &files,
            )
            .unwrap();
        let row = psbx_actors::store::ShotRow {
            source: Some("http://localhost:3000/".into()),
            ..row
        };
        self.runtime
            .block_on(self.shots.put_files(&row, files))
            .unwrap();
        self.store.insert_shot(&row).unwrap();
        row.id.to_string()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.runtime.block_on(self.handle.stop(false));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A page-like screenshot: light grey, a dark bar across the top.
fn page_png(width: u32, height: u32) -> Vec<u8> {
    let img = image::RgbImage::from_fn(width, height, |_, y| {
        if y < height / 8 {
            image::Rgb([40, 40, 60])
        } else {
            image::Rgb([235, 235, 235])
        }
    });
    let mut out = Vec::new();
    img.write_to(&mut std::io::Cursor::new(&mut out), image::ImageFormat::Png)
        .unwrap();
    out
}

fn is_red(p: &image::Rgba<u8>) -> bool {
    p[0] > 180 && p[1] < 90 && p[2] < 90
}

#[test]
fn a_person_circles_whats_wrong_sends_it_and_shuts_the_box_down() {
    psbx_tests::browser::require();
    let s = Served::start();
    let box_id = s.running_box();
    let (status, review) = s.call(
        "POST",
        &format!("/v1/boxes/{box_id}/reviews"),
        Some(json!({
            "title": "Check the home page",
            "summary": "The home page runs.\nThe button may be cut off on phones.",
        })),
    );
    assert!(status == 200 || status == 201, "{status} {review}");
    let review_id = review["id"].as_str().unwrap().to_owned();
    s.screenshot(&box_id, page_png(640, 400), (640, 400));

    let seen = psbx_tests::browser::run_json(
        "review.mjs",
        &json!({
            "baseUrl": s.url,
            "account": s.account_name,
            "password": PASSWORD,
            "reviewTitle": "Check the home page",
            "text": "the button is cut off",
            "shutDown": true,
            "takeShot": "phone",
        }),
    );
    assert_eq!(seen["ok"], true, "{seen}");
    // "Take a screenshot": the box's browser took one more (the fake boxd's PNG).
    assert_eq!(seen["shotsBefore"], 1, "{seen}");
    assert_eq!(seen["shotsAfter"], 2, "{seen}");
    assert_eq!(seen["reviewId"], review_id.as_str(), "{seen}");
    assert_eq!(seen["boxId"], box_id.as_str(), "{seen}");
    assert_eq!(seen["draftKept"], true, "{seen}");
    assert_eq!(seen["state"], "answered", "{seen}");
    assert_eq!(seen["boxState"], "stopped", "{seen}");
    assert!(
        seen["csp"]
            .as_str()
            .unwrap()
            .contains("frame-src 'self' http://*.box.localhost:"),
        "{seen}"
    );

    let (_, listed) = s.call("GET", &format!("/v1/boxes/{box_id}/shots"), None);
    let sources: Vec<&str> = listed["shots"]
        .as_array()
        .expect("the box's shots")
        .iter()
        .filter_map(|shot| shot["source"].as_str())
        .collect();
    assert!(
        sources.iter().any(|src| src.contains(".box.localhost:")),
        "the screenshot the person took is of the review's page: {listed}"
    );

    // The agent's side: the text, and an image with the circle drawn.
    let (status, answered) = s.call("GET", &format!("/v1/reviews/{review_id}"), None);
    assert_eq!(status, 200, "{answered}");
    assert_eq!(answered["state"], "answered", "{answered}");
    let items = answered["feedback"]
        .as_array()
        .expect("the review's feedback");
    assert_eq!(items.len(), 1, "{answered}");
    assert_eq!(items[0]["text"], "the button is cut off", "{answered}");
    let stored = s
        .store
        .review_items(&psbx_actors::ids::ReviewId::parse(&review_id).unwrap())
        .unwrap();
    let image_id = stored[0].shot_id.clone().expect("the item's image");
    let (_, mime, png) = s
        .runtime
        .block_on(s.shots.file(&s.account, &image_id, Part::Full))
        .unwrap();
    assert_eq!(mime, "image/png");
    let drawn = image::load_from_memory(&png).unwrap().to_rgba8();
    assert_eq!(
        drawn.dimensions(),
        (640, 400),
        "composed at the image's natural size"
    );
    let (cx, cy, r) = (
        seen["circle"]["cx"].as_i64().unwrap(),
        seen["circle"]["cy"].as_i64().unwrap(),
        seen["circle"]["r"].as_i64().unwrap(),
    );
    assert!(r > 20, "{seen}");
    // Red on the circle at its four compass points (within a few pixels),
    // not at its centre.
    for (dx, dy) in [(1, 0), (-1, 0), (0, 1), (0, -1)] {
        let near = (-4..=4).any(|d| {
            let x = (cx + dx * r + dy * d).clamp(0, 639) as u32;
            let y = (cy + dy * r + dx * d).clamp(0, 399) as u32;
            is_red(drawn.get_pixel(x, y))
        });
        assert!(near, "no red at ({dx},{dy}) of the circle {seen}");
    }
    assert!(!is_red(drawn.get_pixel(cx as u32, cy as u32)), "{seen}");

    // Shut down stopped the box: its domain is gone.
    let domains = s.fake.list().unwrap();
    assert!(
        !domains.iter().any(|d| d.name.contains(&box_id)),
        "{domains:?}"
    );
    let (_, got) = s.call("GET", &format!("/v1/boxes/{box_id}"), None);
    assert_eq!(got["state"], "stopped", "{got}");
}

#[test]
fn a_secret_added_in_the_app_shows_nowhere() {
    psbx_tests::browser::require();
    let logs = logs();
    let s = Served::start();
    let value = "app-secret-3f9c1d7e55a0b2";
    // The harness checks that the script's output does not hold it.
    psbx_tests::witness::secret(value);
    let seen = psbx_tests::browser::run_json(
        "secrets.mjs",
        &json!({
            "baseUrl": s.url,
            "account": s.account_name,
            "password": PASSWORD,
            "name": "DEPLOY_TOKEN",
            "value": value,
        }),
    );
    assert_eq!(seen["ok"], true, "{seen}");
    assert_eq!(seen["listed"], true, "{seen}");
    assert_eq!(seen["valueFieldAfter"], "", "{seen}");
    // Phone-sized: no page is wider than the screen.
    assert!(
        seen["widest"].as_i64().unwrap() <= 390,
        "{}",
        seen["widest"]
    );
    let pages = seen["pages"].as_array().unwrap();
    assert!(pages.len() >= 4, "{seen}");
    assert!(
        pages
            .iter()
            .any(|p| p.as_str().unwrap().contains("DEPLOY_TOKEN")),
        "{seen}"
    );
    // Stored, readable only by a box (never by an API answer).
    let (status, listed) = s.call("GET", "/v1/secrets", None);
    assert_eq!(status, 200);
    assert_eq!(listed["secrets"][0]["name"], "DEPLOY_TOKEN", "{listed}");
    assert!(!listed.to_string().contains(value));
    drop(s);
    let logged = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(
        logged.contains("a secret was stored from the app"),
        "the log was not captured"
    );
    assert!(!logged.contains(value), "the log shows the value");
}
