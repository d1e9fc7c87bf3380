//! Files every node can read (issue 33, item 4): two nodes of one
//! installation (one database) configured with `storage.s3` on one bucket of
//! moto's S3, in a network namespace the test makes. Node A has the fake
//! host (`psbx_actors::hypervisor::fake`: its boxd answers `shot` with the
//! real wire protocol, so no VM), node B none (API only). A screenshot and
//! a recording of 20 MiB (a multipart upload) taken through A are objects
//! under the bucket's prefix, nothing of them stays on either node's disk,
//! B serves their files and deletes one; a bucket that is not there stops
//! a node's start with what to do; and the node's log never shows the
//! secret key.
//!
//! Credentials come from the AWS SDK's default chain only, as in
//! production: from the environment here. A test cannot set its own
//! process's environment safely, so [`two_nodes_on_one_bucket`] makes the
//! namespace and the bucket and runs this binary again as a child with
//! moto's key in its environment (and no other AWS setting), for the
//! ignored [`nodes_in_a_process_with_aws_keys`], which does the rest.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use psbx_actors::hypervisor::fake::{FAKE_VIDEO, FakeHypervisor, FakeShot, SHOT_PNG};
use psbx_actors::store::{PoolOptions, Store};
use psbx_server::config::{Config, S3Config, StorageConfig};
use psbx_tests::TestDatabase;
use psbx_tests::aws::Moto;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

/// Where the child finds moto's S3 (set by the parent).
const S3_URL: &str = "PSBX_TEST_S3_URL";
const BUCKET: &str = "psbx-nodes";
const PREFIX: &str = "nodes";

#[test]
fn two_nodes_on_one_bucket() {
    let moto = Moto::start_in_netns();
    moto.bucket(BUCKET);
    let user = moto.setup(&["user", &moto.url]);
    let identity = psbx_tests::aws::identity(&user);
    let mut child = Command::new(std::env::current_exe().unwrap());
    child.args([
        "--exact",
        "nodes_in_a_process_with_aws_keys",
        "--include-ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    // Only the key given here: none of this machine's AWS settings.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("AWS_") {
            child.env_remove(name);
        }
    }
    let out = child
        .envs(identity.iter().map(|(k, v)| (k, v)))
        .env(S3_URL, &moto.url)
        .output()
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the nodes' test failed:\n{printed}");
    assert!(
        printed.contains("1 passed"),
        "the nodes' test did not run:\n{printed}"
    );
    let secret = &user["secretAccessKey"].as_str().unwrap();
    assert!(!printed.contains(secret), "the secret key was printed");
}

/// A node's configuration: its own data directory and URL, files in the
/// bucket `bucket` of moto's S3 at `s3_url`.
fn node(data_dir: &Path, url: &str, s3_url: &str, bucket: &str) -> Config {
    Config {
        data_dir: data_dir.to_owned(),
        public_url: Some(url.to_owned()),
        box_domain: "box.localhost".into(),
        storage: StorageConfig {
            s3: Some(S3Config {
                bucket: bucket.to_owned(),
                region: "us-east-1".to_owned(),
                endpoint_url: Some(s3_url.to_owned()),
                prefix: Some(format!("{PREFIX}/")),
            }),
        },
        ..Config::default()
    }
}

/// A request with the key, its status and body.
fn fetch(method: &str, url: &str, key: &str) -> (u16, Vec<u8>) {
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let answer = client.request(method, url).bearer_auth(key).send().unwrap();
    let status = answer.status().as_u16();
    (status, answer.bytes().unwrap().to_vec())
}

/// The bucket's objects and their sizes, as boto3 lists them (the parent
/// checked the route to moto's address before anything was sent), and the
/// multipart uploads left open.
fn objects(s3_url: &str) -> (Vec<(String, u64)>, Vec<String>) {
    let listed = psbx_tests::aws::objects(s3_url, BUCKET);
    (listed.sizes.into_iter().collect(), listed.uploads)
}

#[test]
#[ignore = "run by two_nodes_on_one_bucket, with moto's S3 and an AWS key in its environment"]
fn nodes_in_a_process_with_aws_keys() {
    let s3_url = std::env::var(S3_URL).unwrap_or_else(|_| {
        panic!("run by two_nodes_on_one_bucket, which sets {S3_URL} and the AWS key")
    });
    let logs = common::logs();
    let db = TestDatabase::new();
    let store = Store::open(db.url(), PoolOptions::short_lived(8)).unwrap();
    let first = store.bootstrap().unwrap().unwrap();
    let key = first.key.secret.expose().to_owned();
    let account = first.account.id.to_string();

    // A bucket that is not there: the node does not start, and says why
    // and what to do.
    let nowhere = tempfile::tempdir().unwrap();
    let refused = actix_rt::System::new().block_on(async {
        let config = node(nowhere.path(), common::URL, &s3_url, "psbx-nowhere");
        let secrets = psbx_actors::secrets::Secrets::new(
            store.clone(),
            psbx_actors::secrets::vault::Vault::from_key(&[9u8; 32]),
        )
        .unwrap();
        let id = psbx_actors::ids::ServerId::parse("srv_nowhere").unwrap();
        let parts = psbx_server::app::Parts::new(
            store.clone(),
            secrets,
            Default::default(),
            common::URL,
            id,
        );
        psbx_server::app::AppState::assemble(&config, parts)
            .await
            .err()
            .expect("a node whose bucket is not there does not start")
    });
    let refused = format!("{refused:#}");
    for said in [
        "storage.s3 does not work",
        "s3://psbx-nowhere/nodes",
        "NoSuchBucket",
        "create the bucket",
    ] {
        assert!(refused.contains(said), "{said:?} not in: {refused}");
    }

    // Node A with the fake host, node B with none; one database, one bucket.
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (listener_a, url_a) = common::loopback();
    let (listener_b, url_b) = common::loopback();
    let config_a = Config {
        boxes: common::fake_host_boxes(common::fake_image(dir_a.path()), "10m"),
        ..node(dir_a.path(), &url_a, &s3_url, BUCKET)
    };
    let fake = FakeHypervisor::new(&format!("fake:///{}", db.name()));
    let server_a = store.register_server("node-a", "0").unwrap();
    let a = common::serve_on_fake_host(
        &store,
        server_a.id.as_str(),
        fake.clone(),
        config_a,
        listener_a,
        2,
    );
    let server_b = store.register_server("node-b", "0").unwrap();
    let config_b = node(dir_b.path(), &url_b, &s3_url, BUCKET);
    let b = common::serve_without_host(&store, server_b.id.as_str(), config_b, listener_b);

    // A box on A; a screenshot and a recording of 20 MiB taken through A.
    let call = |url: &str, method: &str, path: &str, body: Option<Value>| {
        psbx_tests::api::call(url, &key, method, path, body)
    };
    let (status, started) = call(&url_a, "POST", "/v1/boxes", Some(json!({"name": "s3"})));
    assert_eq!(status, 201, "{started}");
    let id = started["id"].as_str().unwrap().to_owned();
    psbx_tests::wait::until("the box runs", Duration::from_secs(60), || {
        let (_, got) = call(&url_a, "GET", &format!("/v1/boxes/{id}"), None);
        (got["state"] == "running").then_some(())
    });
    let shots = format!("/v1/boxes/{id}/shots");
    let (status, screenshot) = call(&url_a, "POST", &shots, Some(json!({})));
    assert_eq!(status, 201, "{screenshot}");
    let mut video = FAKE_VIDEO.to_vec();
    video.extend((0..20u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8));
    let video = Arc::new(video);
    fake.set_shot(Some(FakeShot {
        mime: "video/webm".into(),
        width: 64,
        height: 48,
        file: video.clone(),
        poster: Arc::new(SHOT_PNG.to_vec()),
        ..FakeShot::default()
    }));
    let (status, recording) = call(
        &url_a,
        "POST",
        &shots,
        Some(json!({"kind": "recording", "seconds": 1})),
    );
    fake.set_shot(None);
    assert_eq!(status, 201, "{recording}");
    let (screenshot, recording) = (
        screenshot["id"].as_str().unwrap().to_owned(),
        recording["id"].as_str().unwrap().to_owned(),
    );

    // In the bucket under the prefix: each shot's files, nothing else.
    let key_of = |shot: &str, part: &str| format!("{PREFIX}/{account}/{id}/{shot}.{part}");
    let (stored, uploads) = objects(&s3_url);
    assert_eq!(
        stored,
        {
            let mut want = vec![
                (key_of(&screenshot, "full"), SHOT_PNG.len() as u64),
                (key_of(&recording, "full"), video.len() as u64),
                (key_of(&recording, "poster.png"), SHOT_PNG.len() as u64),
            ];
            want.sort();
            want
        },
        "the bucket holds other objects"
    );
    assert!(
        uploads.is_empty(),
        "multipart uploads left open: {uploads:?}"
    );
    // Nothing on either node's disk: no shot directory, an empty spool.
    for dir in [dir_a.path(), dir_b.path()] {
        let kept = common::files_under(&dir.join("shots"));
        let spooled = common::files_under(&dir.join("spool"));
        assert!(
            kept.is_empty() && spooled.is_empty(),
            "{kept:?} {spooled:?}"
        );
    }

    // B serves what A stored, whole.
    let file = |shot: &str, query: &str| {
        let (status, bytes) = fetch("GET", &format!("{url_b}{shots}/{shot}/file{query}"), &key);
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
        bytes
    };
    assert!(file(&screenshot, "") == SHOT_PNG);
    assert!(
        file(&recording, "") == *video,
        "the recording read back other bytes"
    );
    assert!(file(&recording, "?part=poster") == SHOT_PNG);
    // B deletes one: its files leave the bucket.
    let (status, _) = fetch("DELETE", &format!("{url_b}{shots}/{recording}"), &key);
    assert!((200..300).contains(&status), "{status}");
    let (stored, _) = objects(&s3_url);
    assert_eq!(
        stored,
        [(key_of(&screenshot, "full"), SHOT_PNG.len() as u64)]
    );

    // The log says where files go, and never the secret key.
    for node in [a, b] {
        let handle = node.handle.clone();
        std::thread::spawn(move || actix_rt::System::new().block_on(handle.stop(false)))
            .join()
            .unwrap();
        node.thread.join().unwrap();
    }
    let logged = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(
        logged.contains("files are kept in object storage"),
        "no line says where files go"
    );
    let secret = std::env::var("AWS_SECRET_ACCESS_KEY").unwrap();
    assert!(!logged.contains(&secret), "the secret key was logged");
}
