//! Box URLs end to end: a real box, a program serving HTTP in it, and requests
//! to `http://box-<id>-<key>.box.localhost:<port>/` made the way a browser
//! makes them (to the server's loopback listener, Host naming the box).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::vm::BoxServer;
use psbx_tests::wait;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(180);

/// `url`'s host and the server's address: the request goes to the server,
/// whatever the box domain resolves to.
fn host_of(url: &str) -> String {
    url.split("://")
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned()
}

/// A whole HTTP/1.1 exchange on a new connection: the raw answer.
fn raw(server: &str, host: &str, path: &str) -> Vec<u8> {
    let addr = server.trim_start_matches("http://");
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    conn.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    conn.read_to_end(&mut out).unwrap();
    out
}

/// The answer without its `Date` header (the one line that says when).
fn without_date(answer: &[u8]) -> String {
    String::from_utf8_lossy(answer)
        .split("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("date:"))
        .collect::<Vec<_>>()
        .join("\r\n")
}

fn status_of(answer: &[u8]) -> u16 {
    String::from_utf8_lossy(answer)
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn body_of(answer: &[u8]) -> String {
    let text = String::from_utf8_lossy(answer);
    text.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default()
}

fn exec(s: &BoxServer, id: &str, body: Value) -> Value {
    s.ok("POST", &format!("/v1/boxes/{id}/exec"), Some(body))
}

/// Copies the test web server into the box (`/work/tools/psbx-box-web`) and
/// starts it on `port`.
fn start_box_web(s: &BoxServer, id: &str, port: u16) {
    start_box_web_with(
        &reqwest::blocking::Client::new(),
        &s.url(),
        &s.key,
        id,
        port,
    );
}

fn start_box_web_with(
    client: &reqwest::blocking::Client,
    base: &str,
    key: &str,
    id: &str,
    port: u16,
) {
    let bin = std::fs::read(psbx_tests::binary("psbx-box-web")).unwrap();
    let mut header = tar::Header::new_gnu();
    header.set_size(bin.len() as u64);
    header.set_mode(0o755);
    header.set_path("psbx-box-web").unwrap();
    header.set_cksum();
    let mut tar = tar::Builder::new(Vec::new());
    tar.append(&header, &bin[..]).unwrap();
    let res = client
        .post(format!("{base}/v1/boxes/{id}/sync?dest=tools"))
        .bearer_auth(key)
        .body(tar.into_inner().unwrap())
        .timeout(Duration::from_secs(120))
        .send()
        .unwrap();
    assert!(res.status().is_success(), "{:?}", res.text());
    let res = client
        .post(format!("{base}/v1/boxes/{id}/exec"))
        .bearer_auth(key)
        .json(
            &json!({"cmd": format!("/work/tools/psbx-box-web --port {port}"), "background": true}),
        )
        .send()
        .unwrap();
    assert!(res.status().is_success(), "{:?}", res.text());
}

/// The resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

#[test]
fn box_urls_reach_the_box_wake_it_and_tell_nothing_to_strangers() {
    let s = BoxServer::start("idle_freeze = \"8s\"");
    let server = s.url();
    let started = s.ok(
        "POST",
        "/v1/boxes",
        Some(json!({"name": "web", "services": [
            {"name": "web", "port": 80, "targetPort": 3000},
            {"name": "worker"}
        ]})),
    );
    let id = started["id"].as_str().unwrap().to_owned();
    let url = started["url"].as_str().unwrap().to_owned();
    let rest = id.strip_prefix("box_").unwrap();
    assert!(
        url.starts_with(&format!("http://box-{rest}-")) && url.contains(".box.localhost:"),
        "{started}"
    );
    // One URL per declared port; a service without one has none.
    let web_url = started["services"][0]["url"].as_str().unwrap();
    assert!(web_url.contains("-80.box.localhost:"), "{started}");
    assert_eq!(started["services"][1]["url"], Value::Null, "{started}");
    let host = host_of(&url);

    // Nothing listens yet: a page that says which port in which box.
    let answer = raw(&server, &host, "/");
    assert_eq!(status_of(&answer), 502, "{}", without_date(&answer));
    let page = body_of(&answer);
    assert!(
        page.contains(&format!("Nothing listens on port 3000 in box {id}")),
        "{page}"
    );

    exec(
        &s,
        &id,
        json!({"cmd": "mkdir -p /work/www && echo hello from the box > /work/www/index.html && busybox httpd -f -p 3000 -h /work/www", "background": true}),
    );
    let answer = wait::until(
        "the box's page through its URL",
        Duration::from_secs(30),
        || {
            let answer = raw(&server, &host, "/index.html");
            (status_of(&answer) == 200).then_some(answer)
        },
    );
    assert_eq!(body_of(&answer), "hello from the box\n");
    // The port form reaches the same service through its declared port.
    assert_eq!(
        body_of(&raw(&server, &host_of(web_url), "/index.html")),
        "hello from the box\n"
    );

    // A wrong key, an unknown box and a host that is no box URL: one answer.
    let key = host.split('.').next().unwrap().rsplit('-').next().unwrap();
    let wrong_key = host.replace(key, &"0".repeat(key.len()));
    let unknown_box = host.replace(rest, "zzzzzzzzzzzzzzzzzzzz");
    let not_a_box = host.replacen("box-", "nobox-", 1);
    let reference = without_date(&raw(&server, &wrong_key, "/index.html"));
    assert!(reference.starts_with("HTTP/1.1 404"), "{reference}");
    for other in [&unknown_box, &not_a_box] {
        assert_eq!(without_date(&raw(&server, other, "/index.html")), reference);
    }

    // Idle, the box freezes; a request to its URL wakes it.
    wait::until("the box to freeze", LONG, || {
        (s.db_box_state(&id).as_deref() == Some("frozen")).then_some(())
    });
    let answer = raw(&server, &host, "/index.html");
    assert_eq!(
        body_of(&answer),
        "hello from the box\n",
        "{}",
        without_date(&answer)
    );
    assert_eq!(s.db_box_state(&id).as_deref(), Some("running"));

    // The account's allowlist: a client it does not list gets 403, and the
    // box stays frozen; an empty list lets everyone in again.
    let access = s.ok(
        "PUT",
        "/v1/box-access",
        Some(json!({"entries": ["203.0.113.0/24", "198.51.100.7"]})),
    );
    assert_eq!(access["entries"], json!(["203.0.113.0/24", "198.51.100.7"]));
    let answer = raw(&server, &host, "/index.html");
    assert_eq!(status_of(&answer), 403, "{}", without_date(&answer));
    assert!(
        body_of(&answer).contains("127.0.0.1"),
        "{}",
        body_of(&answer)
    );
    wait::until("the box to freeze again", LONG, || {
        (s.db_box_state(&id).as_deref() == Some("frozen")).then_some(())
    });
    for _ in 0..3 {
        assert_eq!(status_of(&raw(&server, &host, "/index.html")), 403);
    }
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(s.db_box_state(&id).as_deref(), Some("frozen"));
    // A wrong key is still the plain 404, allowlist or not.
    assert_eq!(
        without_date(&raw(&server, &wrong_key, "/index.html")),
        reference
    );
    s.ok("PUT", "/v1/box-access", Some(json!({"entries": []})));
    assert_eq!(
        body_of(&raw(&server, &host, "/index.html")),
        "hello from the box\n"
    );
    assert_eq!(s.db_box_state(&id).as_deref(), Some("running"));

    // A real browser on a page served in the box: its WebSocket echoes, its
    // event stream arrives as it is sent, and 128 MiB stream through without
    // the server holding them.
    psbx_tests::browser::require();
    start_box_web(&s, &id, 4000);
    let page_url = url.replace(".box.localhost", "-4000.box.localhost");
    wait::until("psbx-box-web in the box", Duration::from_secs(30), || {
        (status_of(&raw(&server, &host_of(&page_url), "/status/204")) == 204).then_some(())
    });
    let pid = s.server.as_ref().unwrap().pid();
    let before = rss_kib(pid);
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let sampling = sampling.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(rss_kib(pid));
                std::thread::sleep(Duration::from_millis(50));
            }
            peak
        })
    };
    let every_ms = 400;
    let seen = psbx_tests::browser::run_json(
        "box_page.mjs",
        &json!({"url": page_url, "sseCount": 6, "sseEveryMs": every_ms, "downloadBytes": 128 << 20}),
    );
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let peak = sampler.join().unwrap();
    assert_eq!(seen["status"], 200, "{seen}");
    assert_eq!(seen["title"], "psbx box web", "{seen}");
    assert!(
        seen["echo"].as_str().unwrap().starts_with("hello-"),
        "{seen}"
    );
    let times: Vec<f64> = seen["sse"]["times"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_f64().unwrap())
        .collect();
    assert_eq!(
        seen["sse"]["data"],
        json!(["1", "2", "3", "4", "5", "6"]),
        "{seen}"
    );
    // Six events 400 ms apart span two seconds when they come as they are
    // sent; held back and sent together, they would arrive at once.
    let span = times[5] - times[0];
    assert!(
        span > f64::from(every_ms) * 4.0,
        "events arrived within {span} ms: {seen}"
    );
    assert_eq!(seen["download"]["status"], 200, "{seen}");
    assert_eq!(seen["download"]["total"], 128 << 20, "{seen}");
    assert_eq!(seen["download"]["patternOk"], true, "{seen}");
    // What the server may hold of it: what the box sent ahead of the browser, at
    // most the stream's receive window, which grows to `max_window` (16 MiB) while
    // the browser keeps up and fills when it falls behind (as on a busy machine:
    // 11 MiB was seen with two VM queues running), plus 4 MiB for the allocator
    // and the HTTP buffers; far from the 128 MiB a buffered body would take.
    let window_mib = u64::from(psbx_wire::mux::Config::default().max_window) >> 20;
    let growth_mib = peak.saturating_sub(before) / 1024;
    assert!(
        growth_mib <= window_mib + 4,
        "the server's memory grew by {growth_mib} MiB during a 128 MiB download ({before} KiB before, {peak} KiB at most; one stream's window is {window_mib} MiB)"
    );

    // A chunked upload (no length given) through the box URL arrives whole.
    let page_host = host_of(&page_url);
    let page_name = page_host.split(':').next().unwrap().to_owned();
    let h1 = reqwest::blocking::Client::builder()
        .resolve(&page_name, host_of(&server).parse().unwrap())
        .http1_only()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let body: Vec<u8> = (0..8u32 << 20).map(|i| (i % 241) as u8).collect();
    let digest = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&body))
    };
    let done: Value = h1
        .post(format!("{page_url}upload"))
        .body(reqwest::blocking::Body::new(std::io::Cursor::new(body)))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(done["bytes"], 8 << 20, "{done}");
    assert_eq!(done["sha256"], digest, "{done}");

    // Once stopped, its URL is the same 404 as a box that never was.
    s.ok("DELETE", &format!("/v1/boxes/{id}"), None);
    assert_eq!(without_date(&raw(&server, &host, "/index.html")), reference);
    // psbx's own routes are not served on box hosts.
    assert_eq!(without_date(&raw(&server, &host, "/v1/health")), reference);
}

#[test]
fn box_urls_over_tls_speak_http2_under_the_wildcard_certificate() {
    let s = BoxServer::start_with("[tls]\nself_signed = true\n", "");
    let base = s.url();
    assert!(base.starts_with("https://"), "{base}");
    let pem = std::fs::read(s.dir.path().join("data/tls/self-signed.crt")).unwrap();
    let client = |resolve: Option<(&str, std::net::SocketAddr)>| {
        let mut builder = reqwest::blocking::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
            .timeout(Duration::from_secs(120));
        if let Some((name, addr)) = resolve {
            builder = builder.resolve(name, addr);
        }
        builder.build().unwrap()
    };
    let api = client(None);
    let started: Value = api
        .post(format!("{base}/v1/boxes"))
        .bearer_auth(&s.key)
        .json(&json!({"name": "tls"}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let id = started["id"].as_str().unwrap().to_owned();
    let url = started["url"].as_str().unwrap().to_owned();
    assert!(url.starts_with("https://box-"), "{started}");
    // The bare URL of a box without declared services is its port 80.
    start_box_web_with(&api, &base, &s.key, &id, 80);
    let name = host_of(&url).split(':').next().unwrap().to_owned();
    let addr: std::net::SocketAddr = host_of(&base).parse().unwrap();
    let browser = client(Some((&name, addr)));
    let res = wait::until("psbx-box-web over TLS", Duration::from_secs(30), || {
        browser
            .get(format!("{url}headers"))
            .header("x-test", "kept")
            .header("x-forwarded-for", "203.0.113.66")
            .send()
            .ok()
            .filter(|r| r.status() == 200)
    });
    assert_eq!(res.version(), reqwest::Version::HTTP_2);
    let seen: Value = res.json().unwrap();
    let headers = &seen["headers"];
    // HTTP/2's :authority arrives as Host; the client's own headers pass;
    // a client that is no trusted proxy does not choose X-Forwarded-For.
    assert_eq!(headers["host"], host_of(&url), "{seen}");
    assert_eq!(headers["x-test"], "kept", "{seen}");
    assert_eq!(headers["x-forwarded-for"], "127.0.0.1", "{seen}");
    assert_eq!(headers["x-forwarded-proto"], "https", "{seen}");
    assert_eq!(headers["x-forwarded-host"], host_of(&url), "{seen}");
    // A 16 MiB upload over HTTP/2 arrives whole.
    let body: Vec<u8> = (0..16u32 << 20).map(|i| (i % 253) as u8).collect();
    let digest = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&body))
    };
    let res = browser
        .post(format!("{url}upload"))
        .body(body)
        .send()
        .unwrap();
    assert_eq!(res.version(), reqwest::Version::HTTP_2);
    let done: Value = res.json().unwrap();
    assert_eq!(done["bytes"], 16 << 20, "{done}");
    assert_eq!(done["sha256"], digest, "{done}");
    let res = api
        .delete(format!("{base}/v1/boxes/{id}"))
        .bearer_auth(&s.key)
        .send()
        .unwrap();
    assert_eq!(res.status(), 200);
}
